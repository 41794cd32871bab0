"""``moeplan plan``: search, rank and explain layouts for a request (:func:`plan`)."""

from __future__ import annotations

import time

from moeplan.catalog.known_issue_table import get_known_issue
from moeplan.catalog.perf_recipes import published_runs
from moeplan.errors import InputError
from moeplan.i18n.messages import Items, msg
from moeplan.model.step import estimate_step
from moeplan.plan.baseline import differs, rule_of_thumb_baseline
from moeplan.plan.evaluation import collector_paused, evaluation_cache
from moeplan.plan.explain import explain_winner, runner_up_diff
from moeplan.plan.result import PlanResult
from moeplan.plan.search import search, simplest_leads
from moeplan.rules.known_issue_checks import IssueText, affected_at_assumed, versions_unknown_short
from moeplan.rules.known_issue_checks import summary as known_issue_summary
from moeplan.rules.moe import rank_budget_note


def known_issue_notes(candidates) -> list[str]:
    """One note naming the known issues the listed candidates may hit: those whose versions are in
    range (flagged: NaN, wrong results, slowdowns, OOMs and open reports; confirmed hangs, crashes and
    assertions were rejected as ``known_issue.<id>``) and those the request's unstated versions leave open."""
    seen: dict[str, set[str]] = {"affected": set(), "possible": set()}
    for c in candidates:
        for k in known_issue_summary(c.scenario):
            seen[k["status"]].add(k["id"])
    notes: list[str] = []
    if seen["affected"]:
        notes.append(
            "known issues at the stated versions (flagged, not avoided): "
            + ", ".join(sorted(seen["affected"]))
            + "; confirmed hangs, crashes and assertions are rejected (see the rejected tally)"
        )
    if seen["possible"]:
        issues = [ki for i in sorted(seen["possible"]) if (ki := get_known_issue(i)) is not None]
        notes.append(versions_unknown_short(candidates[0].scenario, issues))
    return notes


#: known-issue symptoms that corrupt a run silently: #1 carrying one gets its own note even with the
#: versions unstated (a hang or crash stops the job; an unnoticed NaN or wrong result costs the run)
SILENT_SYMPTOMS = ("nan", "wrong_result")
#: symptoms that stop a run: their own note only at the stated versions (confirmed ones are rejected
#: there, open reports flagged); unstated, the id list names them
STOPPING_SYMPTOMS = ("hang", "crash", "assertion")


def first_candidate_risk_notes(candidates) -> list[str]:
    """One note per known issue the top candidate may hit that breaks the run, with its title, workaround and source:
    a silent one (:data:`SILENT_SYMPTOMS`) at the stated versions or with them unstated, one that
    stops the run (:data:`STOPPING_SYMPTOMS`) at the stated versions, or, with no container stated, at the
    container moeplan assumes (:func:`moeplan.rules.known_issue_checks.affected_at_assumed`). The ranking avoids only
    confirmed hangs, crashes and assertions at stated versions, so these are said in full, not only
    in the id list."""
    if not candidates:
        return []
    out: list[str] = []
    s = candidates[0].scenario
    for k in known_issue_summary(s):
        ki = get_known_issue(k["id"])
        if ki is None:
            continue
        affected = k["status"] == "affected"
        assumed = None if affected else affected_at_assumed(s, ki)
        stops = k["symptom"] in STOPPING_SYMPTOMS and (affected or assumed is not None)
        if not (k["symptom"] in SILENT_SYMPTOMS or stops):
            continue
        title = IssueText(ki.id, "title", ki.title)
        workaround = IssueText(ki.id, "workaround", ki.workaround)
        if affected:
            note = msg("plan.first_may_hit_stated", issue=ki.id, title=title, workaround=workaround, source=ki.source)
        elif assumed is not None:
            note = msg(
                "plan.first_may_hit_assumed",
                issue=ki.id,
                container=assumed,
                title=title,
                workaround=workaround,
                source=ki.source,
            )
        else:
            note = msg("plan.first_may_hit_unstated", issue=ki.id, title=title, workaround=workaround, source=ki.source)
        out.append(note)
    return out


def first_candidate_budget_notes(candidates) -> list[str]:
    """The trade-off of HybridEP's static per-rank budget when the top candidate runs one (the full-iteration
    graph's expert path sets it): :func:`moeplan.rules.moe.rank_budget_note`, as one note."""
    note = rank_budget_note(candidates[0].scenario) if candidates else None
    return [msg("plan.first_rank_budget", note=note)] if note is not None else []


def _risks(c) -> list[str]:
    """What ``c`` risks: each known issue its stated versions are affected by, and ``may not fit``
    when its memory verdict is ``tight`` (the memory model's band around the peak crosses the HBM)."""
    out: list[str] = [k["id"] for k in known_issue_summary(c.scenario) if k["status"] == "affected"]
    return out + ([msg("plan.risk_may_not_fit")] if c.memory.get("verdict") == "tight" else [])


def safer_alternative_note(cands: list) -> str | None:
    """When #1 risks something (:func:`_risks`), the first shown candidate that risks nothing, with its
    predicted throughput against #1's, so that the trade-off is read where the ranking is; None when
    #1 risks nothing or no shown candidate is free of risks."""
    if not cands or not (risks := _risks(cands[0])):
        return None
    best = cands[0].tokens_per_s_per_gpu
    for rank, c in enumerate(cands[1:], start=2):
        if not _risks(c):
            return msg(
                "plan.safer_alternative",
                risks=Items(risks, ", "),
                rank=rank,
                layout=c.parallel.label(),
                pct=100 * (c.tokens_per_s_per_gpu / best - 1),
            )
    return None


def within_band_note(cands: list) -> str | None:
    """A note when the candidates shown lie within #1's error band (its regime's 90th-percentile
    |error|, ``throughput.validity.error_band_pct``): the model cannot tell them apart, measure them."""
    if len(cands) < 2:
        return None
    band = (cands[0].throughput.get("validity") or {}).get("error_band_pct")
    if not isinstance(band, (int, float)) or band != band:  # NaN: no band packaged
        return None
    best = cands[0].tokens_per_s_per_gpu
    close = [i for i, c in enumerate(cands[1:], start=2) if c.tokens_per_s_per_gpu >= best * (1 - band / 100)]
    if not close:
        return None
    ranks = (
        f"#{close[0]}"
        if len(close) == 1
        else f"#{close[0]}–#{close[-1]}"
        if close == list(range(close[0], close[-1] + 1))
        else "#" + ", #".join(map(str, close))
    )
    return msg("plan.within_error_band", ranks=ranks, band=band)


def _rank_baselines(res, base_d: dict) -> list[str]:
    """Rank the layouts the baselines' own searches found (the rule of thumb with its CP held, the
    guidance family completed) with the main search's: the main search refines only its best layouts,
    so such a layout can beat its #1, and a plan must never say "#1 is −7 % against the rule of thumb".
    Updates the baselines' ranks and gains; returns a note per layout promoted."""
    extra = base_d.pop("_extra", [])
    if not res.candidates:
        return []

    def same(c) -> tuple:
        lay = tuple(sorted((k, str(v)) for k, v in c.data["layout"].items() if v is not None))
        return lay, c.data["training"].get("micro_batch_size")

    seen = {same(c) for c in res.candidates}
    top = res.candidates[0].tokens_per_s_per_gpu
    added = []
    for c in extra:
        if same(c) not in seen and c.tokens_per_s_per_gpu > top:
            seen.add(same(c))
            added.append(c)
    notes: list[str] = []
    for c in added:
        res.candidates.append(c)
        notes.append(msg("plan.found_by_baselines", layout=c.parallel.label()))
    if not added:
        return notes
    res.candidates.sort(key=lambda c: c.key())
    # the ranking changed: the main search's tie note spoke of its own #1, which may no longer lead
    res.tie_note = simplest_leads(res.candidates)
    win = res.candidates[0]
    rot = base_d.get("rule_of_thumb", {})
    cand = rot.get("candidate")
    if cand is not None:
        rank = next(
            (
                i
                for i, c in enumerate(res.candidates, 1)
                if c.parallel.label() == cand["label"]
                and abs(c.tokens_per_s_per_gpu - cand["throughput"]["tokens_per_s_per_gpu"]) < 1e-6
            ),
            None,
        )
        cand["rank"] = rank
        rot["search_gain_pct"] = 100 * (win.tokens_per_s_per_gpu / cand["throughput"]["tokens_per_s_per_gpu"] - 1)
    fam = base_d.get("family")
    if fam is not None and fam.get("throughput"):
        fam["search_gain_pct"] = 100 * (win.tokens_per_s_per_gpu / fam["throughput"]["tokens_per_s_per_gpu"] - 1)
    _refresh_differs(base_d, win)
    return notes


def _refresh_differs(base_d: dict, win) -> None:
    """After a promotion, what the published run and the guidance family say about #1 (how it runs
    differently, how far apart the predictions are) must describe the new #1, not the old one."""
    fam = base_d.get("family")
    if fam is not None and "first_differs" in fam:
        fam["first_differs"] = differs(fam["layout"], win.scenario)
    pub = base_d.get("published")
    if pub is None or "first_differs" not in pub:
        return
    row = next((r for r in published_runs() if r["id"] == pub["id"]), None)
    if row is not None:
        pub["first_differs"] = differs(row["layout"], win.scenario)
    pred = pub.get("predicted_tokens_per_s_per_gpu")
    if pred:
        pub["first_vs_published_pct"] = 100 * (win.tokens_per_s_per_gpu / pred - 1)


def _family_notes(first: list) -> list[str]:
    """What #1's estimate says the model leaves out of its family's published architecture (the
    ``model_catalog_2026.*`` notes of :func:`moeplan.model.time.notes.model_family_notes`: MiniMax-M2's
    unbuilt MTP modules, untimed all-reduces, a vision tower whole on every TP rank); empty without a
    candidate."""
    if not first:
        return []
    said = first[0].throughput.get("assumptions", [])
    return [a for a in said if str(getattr(a, "msgid", "")).startswith("model_catalog_2026.")]


def plan(
    base: dict,
    *,
    top: int = 5,
    min_dp: int = 1,
    headroom_gib: float | None = None,
    train_tokens: float | None = None,
    refine: int = 16,
    constants=None,
    progress=None,
    objective: str = "throughput",
    exact: bool = False,
) -> PlanResult:
    """Search, rank and explain layouts for a request.

    Args:
        base: scenario mapping (``model``, ``system.gpu``, ``system.num_gpus``,
            ``training.seq_length``; optional ``global_batch_size``, ``micro_batch_size``, ``precision``;
            every ``layout`` key given is held fixed).
        top: candidates to keep (≥ 1).
        min_dp / headroom_gib / refine / exact: see :func:`moeplan.plan.search.search` (``exact``: the ``top`` exact).
        train_tokens: report the time to train this many tokens (the ranking is the same: the GPU
            count is fixed, so time to train falls as tokens/s/GPU rises).

    Raises:
        InputError: bad request (field named).
    """
    if top < 1:
        raise InputError("--top", top, "an integer ≥ 1")
    t0 = time.perf_counter()
    with evaluation_cache(), collector_paused():  # the baselines' searches re-evaluate the main search's layouts
        ask = {"min_dp": min_dp, "headroom_gib": headroom_gib, "constants": constants, "progress": progress}
        res = search(base, refine=top if exact else max(refine, top), exact=exact, **ask)
        base_d = rule_of_thumb_baseline(res, base, constants, min_dp=min_dp, headroom_gib=headroom_gib)
    notes = _rank_baselines(res, base_d)
    expl = explain_winner(res)
    runner = runner_up_diff(res)
    m0 = res.candidates[0].scenario.model if res.candidates else None
    if m0 is not None and m0.vision is not None:
        w = res.candidates[0]
        mock = estimate_step(w.scenario, constants, vision_patches=0.0).tokens_per_s_per_gpu
        src = msg("plan.your_workload") if w.scenario.input.workload is not None else msg("plan.no_workload_given")
        notes.append(msg("plan.vlm_mock_data", tok=mock, pct=100 * (mock / w.tokens_per_s_per_gpu - 1), source=src))
    notes += first_candidate_risk_notes(res.candidates) + first_candidate_budget_notes(res.candidates)
    safer = safer_alternative_note(res.candidates[:top])
    notes += [safer] if safer else []
    band_note = within_band_note(res.candidates[:top])
    if band_note:
        notes.append(band_note)
    notes += known_issue_notes(res.candidates[:top]) + _family_notes(res.candidates[:1])
    if not res.candidates:
        counts = res.rejected.counts
        rules = sorted(
            (
                r
                for r in counts
                if r not in ("does-not-fit", "tight", "headroom", "dominated", "gbs-divisibility", "dp-budget")
            ),
            key=lambda r: -counts[r],
        )
        if rules:
            top_rule = rules[0]
            notes.append(
                msg(
                    "plan.no_layout_fits_rule",
                    n=counts[top_rule],
                    total=sum(counts.values()),
                    rule=top_rule,
                    example=res.rejected.examples[top_rule],
                )
            )
        else:
            notes.append(msg("plan.no_layout_fits"))
    brief = explain_winner(res, brief=True)
    return PlanResult(res, top, expl, runner, base_d, time.perf_counter() - t0, train_tokens, notes, objective, brief)
