"""Why the winner wins: one short paragraph per decision, from the candidates the search evaluated
(best layout per value of each parallel size, the recompute rungs it tried, the knob variants of the
refinement), the runner-up's differences, and the rule-of-thumb baseline.
"""

from __future__ import annotations

from moeplan.i18n.messages import Items, Message, msg
from moeplan.plan.search import TIE_FRACTION, Candidate, SearchResult
from moeplan.plan.space import rung_text

_DIMS = (
    ("cp", "CP", "context_parallel_size"),
    ("tp", "TP", "tensor_model_parallel_size"),
    ("pp", "PP", "pipeline_model_parallel_size"),
    ("ep", "EP", "expert_model_parallel_size"),
)


def _pct(a: float, b: float) -> str:
    return f"{100 * (a / b - 1):+.1f} %"


def best_by(res: SearchResult, attr: str) -> dict[int, Candidate]:
    """The best candidate for each value of a parallel size (``cp``, ``tp``, ``pp``, ``ep``)."""
    out: dict[int, Candidate] = {}
    for c in res.candidates:  # sorted best first
        out.setdefault(getattr(c.parallel, attr), c)
    return out


def _nvl72(c) -> bool:
    """Whether the candidate runs expert parallelism on a rack-scale NVLink domain (NVL72)."""
    gpu = c.scenario.gpu
    return bool(gpu and gpu.is_nvl72 and c.parallel.ep > 1)


def _size_line(res: SearchResult, w: Candidate, attr: str, name: str, key: str, brief: bool = False) -> str:
    """One parallel size of the winner against the best layout of each other value of it (``brief``:
    the relative figures only)."""
    if key in (res.request.get("fixed") or {}):
        return msg("plan.held_fixed_by_request", name=name, value=getattr(w.parallel, attr))
    tps = w.tokens_per_s_per_gpu
    per = best_by(res, attr)
    v = getattr(w.parallel, attr)
    others = [
        f"{name}{alt} {100 * (per[alt].tokens_per_s_per_gpu / tps - 1):+.0f} %"
        if brief
        else f"{name}{alt} {per[alt].tokens_per_s_per_gpu:,.0f} ({_pct(per[alt].tokens_per_s_per_gpu, tps)})"
        for alt in sorted(per)
        if alt != v
    ]
    missing = [x for x in (v // 2, v * 2) if x >= 1 and x != v and x not in per]
    shown: str | Items = Items(others, ", ") if others else msg("plan.no_other_value")
    if not brief:
        shown = msg("plan.best_of_each", name=name, others=shown)
    if missing:
        shown = msg("plan.nothing_legal_fits", others=shown, name=name, values="/".join(map(str, missing)))
    if attr == "cp":
        return msg("plan.size_line_cp", name=name, value=v, tokens=res.request["seq_length"] // v, why=shown)
    return msg("plan.size_line", name=name, value=v, why=shown)


def _recompute_brief(w: Candidate) -> Message:
    """The recompute rung chosen and its cost, in one short line."""
    bd = w.throughput["breakdown_s"]
    cost = (
        msg("plan.costs_of_step", pct=100 * bd["recompute"] / w.throughput["step_time_s"])
        if bd.get("recompute")
        else ""
    )
    if " + optimizer offload" in w.recompute and w.recompute.startswith("selective"):
        return msg("plan.recompute_beats_full", rung=rung_text(w.recompute), cost=cost)
    return msg("plan.recompute_cheapest", rung=rung_text(w.recompute), peak=w.peak_gib, cap=w.capacity_gib, cost=cost)


def _recompute_line(w: Candidate) -> Message:
    """The recompute rung chosen, the cheaper rungs that did not fit, and what it costs."""
    not_fit = [
        msg("plan.rung_peak", rung=rung_text(n, prefix=False), gib=g)
        if g is not None
        else msg("plan.rung_breaks_a_rule", rung=rung_text(n, prefix=False))
        for n, g in dict(w.ladder_tried).items()
        if n != w.recompute and (g is None or g > w.peak_gib)
    ]
    tried = msg("plan.cheaper_rungs_tried", rungs=Items(not_fit, ", ")) if not_fit else ""
    bd = w.throughput["breakdown_s"]
    cost = (
        msg("plan.it_costs_of_step", pct=100 * bd["recompute"] / w.throughput["step_time_s"])
        if bd.get("recompute")
        else ""
    )
    rung, peak, cap = rung_text(w.recompute), w.peak_gib, w.capacity_gib
    if " + optimizer offload" in w.recompute and w.recompute.startswith("selective"):
        return msg("plan.ladder_offload_instead", rung=rung, peak=peak, cap=cap, tried=tried, cost=cost)
    return msg("plan.ladder_cheapest", rung=rung, peak=peak, cap=cap, tried=tried, cost=cost)


def _then(note: str, more: str) -> str:
    """``note`` followed by ``more`` (each a message or ``""``), as one message when both are given."""
    return msg("plan.note_then", note=note, more=more) if note and more else note or more


def _knob_note(w: Candidate, fam: str, t: dict, chosen: str) -> str:
    """Why a knob setting stands although another is as fast (ties, the simpler setting kept), and
    the guidance's caveats for dispatchers on NVL72 and full-iteration graphs (a message, or ``""``)."""
    ref = t.get(chosen)
    same = [n for n, val in t.items() if n != chosen and val is not None and ref and abs(val / ref - 1) < 1e-3]
    faster = [n for n, val in t.items() if n != chosen and val is not None and ref and val > ref * (1 + 1e-3)]
    note: str = ""
    if same and chosen == next(iter(t)):
        note = msg("plan.note_default_kept")
    elif same:
        note = msg("plan.note_within_resolution")
    if faster:
        note = _then(note, msg("plan.note_simpler_kept", faster=", ".join(faster), pct=100 * TIE_FRACTION))
    if fam == "dispatcher" and chosen != "hybridep" and t.get("hybridep") is not None and _nvl72(w):
        note = _then(note, msg("plan.note_hybridep_nvl72"))
    if fam == "graphs" and chosen != "full_iteration" and t.get("full_iteration") is not None:
        note = _then(note, msg("plan.note_full_iteration"))
    return note


def _chosen(w: Candidate, fam: str) -> str:
    """The label of the setting the winner runs for knob family ``fam`` (a label for every family:
    ``_knob_labels``; VPP as ``VPP<n>``)."""
    return w.knobs[fam] if fam != "vpp" else f"VPP{w.parallel.vpp}"


def knob_line(w: Candidate, fam: str, title: str, brief: bool = False) -> Message | None:
    """One knob family of the refinement: the setting chosen against the variants tried (``brief``:
    without the notes on ties and the guidance)."""
    t = w.tried.get(fam)
    if not t:
        return None
    chosen = _chosen(w, fam)
    if fam == "dispatcher" and w.knobs.get("graphs") == "full_iteration":
        seen = ", ".join(f"{n} {v:,.0f}" if v is not None else f"{n} rejected" for n, v in t.items())
        return msg("plan.dispatcher_set_by_graph", dispatcher=chosen, seen=seen)
    parts = _knob_parts(w, fam, t, chosen)
    note = "" if brief else _knob_note(w, fam, t, chosen)
    weak = (w.tried.get("_weak_tie") or {}).get(fam)
    if weak is not None:
        note = msg("plan.note_weak_tie")
    elif fam == "dispatcher" and brief and chosen != "hybridep" and t.get("hybridep") is not None and _nvl72(w):
        note = _then(note, msg("plan.note_hybridep_kernel_rate"))
    # "VPP8", not "VPP VPP8"
    head = (
        chosen if str(chosen).startswith(title) else msg("plan.knob_head", title=_KNOB_TEXTS[title](), setting=chosen)
    )
    return msg("plan.knob_line", head=head, parts=Items(parts) if parts else msg("plan.only_option"), note=note)


def _knob_parts(w: Candidate, fam: str, t: dict, chosen: str) -> list[str]:
    """The settings of knob family ``fam`` other than the chosen one: each rejected (and why), or its
    figure against the chosen one (and the check's warnings that made a tie go elsewhere)."""
    why, warned = w.tried.get("_why", {}), w.tried.get("_warns", {})
    ref = t.get(chosen)
    parts: list[str] = []
    for name, val in t.items():
        if name == chosen:
            continue
        if val is None:
            reason = why.get(f"{fam}:{name}")
            shown = (
                msg("plan.why_rule_or_memory")
                if reason is None
                else msg("plan.why_does_not_fit")
                if reason == "does-not-fit"
                else reason
            )
            parts.append(msg("plan.knob_rejected", setting=name, why=shown))
            continue
        figure = _pct(val, ref) if ref else f"{val:,.0f}"
        flag = warned.get(f"{fam}:{name}")
        parts.append(msg("plan.knob_warned", setting=name, figure=figure, ids=flag) if flag else f"{name} {figure}")
    return parts


def _context_lines(w: Candidate, brief: bool = False) -> list[str]:
    """Optimizer offload's cost, DP at its floor, and CP on a MoE VLM (the guidance's caveats)."""
    lines = []
    sw, bd = w.scenario, w.throughput["breakdown_s"]
    if brief:
        if sw.dp == 1 and not w.parallel.fsdp:
            lines.append("DP 1: no data parallelism left; scaling is brittle at DP's floor (--verbose).")
        if sw.model is not None and sw.model.vision is not None and sw.model.is_moe and w.parallel.cp > 1:
            lines.append(msg("plan.cp_on_moe_vlm_brief", cp=w.parallel.cp))
        return lines
    if sw.layout.optimizer_cpu_offload:
        lines.append(
            msg("plan.offload_needed", fraction=sw.layout.optimizer_offload_fraction, seconds=bd.get("optimizer", 0))
        )
    if sw.dp == 1 and not w.parallel.fsdp:
        lines.append(
            "DP 1: TP·CP·PP use every GPU, so there is no data parallelism left; the guidance warns that "
            "scaling turns brittle at DP's floor (a slow rank stalls the step; more GPUs cannot be added "
            "without changing the layout) — with more GPUs, spend them on DP first."
        )
    if sw.model is not None and sw.model.vision is not None and sw.model.is_moe and w.parallel.cp > 1:
        lines.append(msg("plan.cp_on_moe_vlm", cp=w.parallel.cp))
    return lines


_KNOB_TITLES = (
    ("dispatcher", "dispatcher"),
    ("ep_overlap", "EP comm overlap"),
    ("graphs", "CUDA graphs"),
    ("cp_comm", "CP comm"),
    ("vpp", "VPP"),
)
#: each knob family's title as a message (its English text is the title)
_KNOB_TEXTS = {
    "dispatcher": lambda: msg("plan.knob.dispatcher"),
    "EP comm overlap": lambda: msg("plan.knob.ep_overlap"),
    "CUDA graphs": lambda: msg("plan.knob.graphs"),
    "CP comm": lambda: msg("plan.knob.cp_comm"),
    "VPP": lambda: msg("plan.knob.vpp"),
}


def explain_winner(res: SearchResult, brief: bool = False) -> list[str]:
    """Plain-language lines: each parallel size, recompute, dispatcher, graphs, offload, CP comm
    (``brief``: one short line per decision, relative figures only — what ``plan`` prints by default)."""
    if not res.candidates:
        return []
    w = res.candidates[0]
    lines: list[str] = [msg("plan.tie_note_line", note=res.tie_note)] if res.tie_note else []
    lines += [_size_line(res, w, attr, name, key, brief) for attr, name, key in _DIMS]
    lines.append(_recompute_brief(w) if brief else _recompute_line(w))
    quiet = [title for fam, title in _KNOB_TITLES if brief and within_tie(w, fam)]
    lines += [
        x for fam, title in _KNOB_TITLES if title not in quiet and (x := knob_line(w, fam, title, brief)) is not None
    ]
    if quiet:
        titles = Items([_KNOB_TEXTS[t]() for t in quiet], ", ")
        lines.append(msg("plan.knobs_within_tie", knobs=titles, pct=100 * TIE_FRACTION))
    return lines + _context_lines(w, brief)


def within_tie(w: Candidate, fam: str) -> bool:
    """Every setting of knob family ``fam`` was tried, none rejected, and all lie within
    :data:`~moeplan.plan.search.TIE_FRACTION` of the chosen one, with no weak-evidence tie to state:
    the brief explanation names the family instead of listing its figures."""
    t = w.tried.get(fam)
    if not t or len(t) < 2 or (w.tried.get("_weak_tie") or {}).get(fam) is not None:
        return False
    if fam == "dispatcher" and (w.knobs.get("graphs") == "full_iteration" or _nvl72(w)):
        return False
    ref = t.get(_chosen(w, fam))
    if not ref or any(v is None for v in t.values()):
        return False
    return all(abs(v / ref - 1) <= TIE_FRACTION for v in t.values())


def runner_up_diff(res: SearchResult) -> list[str]:
    """What differs between the winner and the next candidates, and by how much they trail."""
    if len(res.candidates) < 2:
        return []
    w = res.candidates[0]
    out: list[str] = []
    for i, c in enumerate(res.candidates[1:3], start=2):
        lw, lc = w.data["layout"], c.data["layout"]
        keys = sorted(set(lw) | set(lc))

        def show(v):
            return "unset" if v is None else v

        diff = [f"{k}: {show(lw.get(k))} → {show(lc.get(k))}" for k in keys if lw.get(k) != lc.get(k)]
        if w.data["training"]["micro_batch_size"] != c.data["training"]["micro_batch_size"]:
            diff.append(
                f"micro_batch_size: {w.data['training']['micro_batch_size']} → {c.data['training']['micro_batch_size']}"
            )
        out.append(
            msg(
                "plan.runner_up",
                rank=i,
                layout=c.parallel.label(),
                pct=_pct(c.tokens_per_s_per_gpu, w.tokens_per_s_per_gpu),
                gib=c.peak_gib,
                diff="; ".join(diff),
            )
        )
    return out
