"""Tables of ``plan``, ``fit``, ``recipes`` and ``sweep`` (readable at 100 columns)."""

from __future__ import annotations

from rich import box
from rich.markup import escape
from rich.padding import Padding
from rich.table import Table

import moeplan.i18n as i18n
from moeplan.cli.render import T, console, finding_line, lang, rule_text
from moeplan.cli.render.check_view import unmodelled_text, yaml_value
from moeplan.cli.render.text import assumes_line, band_line, breakdown_line, knob_codes, legend
from moeplan.cli.render.verdict import dominant_text, may_not_fit_text, verdict_text
from moeplan.i18n.messages import msg
from moeplan.rules import RULES


def _plan_header(c, d: dict, verbose: bool = False) -> None:
    r = d["request"]
    gbs, seq = r["global_batch_size"], r["seq_length"]
    done = r.get("completed") or {}
    held = {**{k: v for k, v in r["fixed"].items() if k not in done}, **r.get("fixed_training", {})}
    c.print(
        T("[bold]{model}[/] on {n} × {gpu}, seq {seq}, GBS {gbs} ({mi} Mi tokens/step), {precision}").format(
            model=r["model"],
            n=r["num_gpus"],
            gpu=r["gpu"],
            seq=f"{seq:,}",
            gbs=gbs,
            mi=f"{gbs * seq / 2**20:.3g}",
            precision=r["precision"],
        )
        + (T("; held fixed: ") + ", ".join(f"{k}={yaml_value(v)}" for k, v in held.items()) if held else "")
        + (T("; completed for them: ") + ", ".join(f"{k}={yaml_value(v)}" for k, v in done.items()) if done else "")
        + (T(" (NaN check off: a diverging loss is not caught)") if done.get("check_for_nan_in_loss") is False else "")
        + (
            T("; {gib} GiB per GPU reserved by a colocated engine").format(gib=f"{r['reserved_gib']:g}")
            if r.get("reserved_gib")
            else ""
        )
        + (T("; LoRA dim {dim} on a frozen base").format(dim=r["peft"]["dim"]) if r.get("peft") else "")
    )
    if d.get("assumes"):
        c.print(assumes_line(d["assumes"], verbose), style="dim", highlight=False, markup=False)
    unmodelled_text(c, d)
    if not d["candidates"]:
        c.print(T("[bold red]no layout fits[/]"))


def _candidate_table(d: dict, knobs: dict[int, str] | None) -> Table:
    """The ranked candidates; with ``knobs`` (rank → codes) a knob column."""
    # a candidate is a layout with its knobs: several can share a layout, so the title counts both as
    # the footer does ("N layouts considered, M fit")
    # no vertical rules: at 80 columns a layout label of up to ~28 characters stays on one line
    t = Table(
        title=T("top {n} candidates of {fitting} fitting layouts").format(
            n=len(d["candidates"]), fitting=d["fitting_layouts"]
        ),
        box=box.SIMPLE_HEAD,
        collapse_padding=True,
        pad_edge=False,
    )
    ttt = bool(d["candidates"]) and "time_to_train_s" in d["candidates"][0]
    t.add_column("#", justify="right", no_wrap=True)
    t.add_column(T("layout"), overflow="fold", min_width=12)
    for col in ("DP", "MBS", "GiB", "tok/s/GPU", "TFLOP/s", "MFU"):
        t.add_column(col, justify="right", no_wrap=True)
    if ttt:
        t.add_column(T("days"), justify="right", no_wrap=True)  # --train-tokens: time to train at each one's rate
    if knobs is not None:
        t.add_column(T("knobs"), overflow="fold")
    for cand in d["candidates"]:
        m, th = cand["memory"], cand["throughput"]
        t.add_row(
            str(cand["rank"]),
            cand["label"].replace(" ETP1", ""),  # ETP 1 is the default: shown when larger
            str(cand["dp"]),
            str(cand["training"]["micro_batch_size"]),
            f"{m['peak_gib']:.1f}/{m['capacity_gib']:.0f}",
            f"{th['tokens_per_s_per_gpu']:,.0f}",
            f"{th['model_tflops_per_gpu']:,.0f}",
            f"{100 * th['mfu']:.1f}%",
            *([f"{cand['time_to_train_s'] / 86400:.2f}"] if ttt else []),
            *([knobs[cand["rank"]] or "none"] if knobs is not None else []),
        )
    return t


def _candidates_table(c, d: dict) -> None:
    """The ranked candidates (layout, DP, MBS, GiB, tokens/s/GPU, model TFLOP/s/GPU, MFU, days to
    train): the knob column when the console has room for it on one line, else the knobs under the
    table (identical ones grouped), then the legend of the codes shown."""
    knobs = {cand["rank"]: ", ".join(knob_codes(cand)) for cand in d["candidates"]}
    plain = _candidate_table(d, None)
    need = c.measure(plain).maximum + max((len(k) for k in knobs.values()), default=0) + 3
    if need <= c.width:
        c.print(_candidate_table(d, knobs))
    else:
        c.print(plain)
        groups: dict[str, list[int]] = {}
        for rank, k in knobs.items():
            groups.setdefault(k or "none", []).append(rank)
        for k, ranks in groups.items():
            c.print(
                Padding(T("knobs ") + f"#{',#'.join(map(str, ranks))}: {k}", (0, 0, 0, 0)),
                highlight=False,
                markup=False,
            )
    codes = [x for cand in d["candidates"] for x in (knob_codes(cand) or ["none"])]
    if codes:
        c.print(T("legend: ") + legend(codes), style="dim", highlight=False, markup=False)


def _why_first(c, d: dict, verbose: bool = False) -> None:
    """Where #1's step goes, why it wins (brief by default, every reason with ``verbose``, then the
    runner-ups), its useful tokens, known bias, the error band once and the time to train."""

    w = d["candidates"][0]
    c.print(f"[bold]#1[/] {breakdown_line(w['throughput'])}", highlight=False)
    c.print(T("[bold]why #1[/]"))
    lines = w["explanation"] if verbose or not w.get("explanation_brief") else w["explanation_brief"]
    for line in lines:
        c.print(Padding(f"• {T(line)}", (0, 0, 0, 2)), highlight=False)
    # every warning in full, short output too: a trade-off #1 rests on (the NaN check off) or a
    # combination the check doubts is read where #1 is
    for line in w.get("warnings", []):
        c.print(Padding(T("[yellow]check warns[/]: ") + escape(finding_line(line)), (0, 0, 0, 2)), highlight=False)
    _tight_note(c, w)
    if verbose:
        for cand in d["candidates"][1:3]:
            for line in cand["explanation"]:
                c.print(Padding(T(line), (0, 0, 0, 2)), highlight=False)
    u = w["throughput"].get("useful_tokens_per_s_per_gpu")
    if u is not None and abs(u - w["throughput"]["tokens_per_s_per_gpu"]) > 1e-6:
        c.print(T("#1 useful (non-padding) tokens/s/GPU: ") + f"{u:,.0f}", highlight=False)
    v = w["throughput"]["validity"]
    if v.get("bias_note"):
        c.print(T("[yellow]known bias[/] of #1: ") + escape(T(v["bias_note"])), highlight=False)
    style = "" if v.get("validated") else "yellow"
    c.print(band_line(v), style=style, highlight=False, markup=False)
    if verbose and v.get("outside"):
        c.print(Padding("; ".join(v["outside"]), (0, 0, 0, 2)), style="dim", highlight=False, markup=False)
    if "time_to_train_s" in w:
        c.print(T("time to train: {days} days").format(days=f"{w['time_to_train_s'] / 86400:.2f}"))


def _tight_note(c, w: dict) -> None:
    """#1's ``tight`` memory verdict in words (the memory model's band around the peak crosses the usable
    HBM, so ``estimate`` of the saved layout exits 1): the planner keeps such layouts, as published
    runs near capacity do run, but the user reads the risk where #1 is."""
    text = may_not_fit_text(w.get("memory") or {})
    if text:
        c.print(
            Padding(
                T("[yellow]memory[/]: #1 is tight: ") + escape(text) + T("; --headroom-gib keeps a margin free"),
                (0, 0, 0, 2),
            ),
            highlight=False,
        )


def _rule_of_thumb(c, d: dict) -> None:
    rot = d["baseline"]["rule_of_thumb"]
    if rot.get("candidate"):
        rc = rot["candidate"]
        where = T("rank {rank}").format(rank=rc["rank"]) if rc["rank"] is not None else T("a search of its own")
        gain = rot.get("search_gain_pct")
        c.print(
            T("[bold]rule of thumb[/] {rule}: best such layout {label}, {tok} tok/s/GPU, {gib} GiB ({where})").format(
                rule=T(rot["rule"]),
                label=rc["label"],
                tok=f"{rc['throughput']['tokens_per_s_per_gpu']:,.0f}",
                gib=f"{rc['memory']['peak_gib']:.1f}",
                where=where,
            )
            + (T("; #1 is {gain} %").format(gain=f"{gain:+.1f}") if gain is not None else ""),
            highlight=False,
        )
    else:
        c.print(
            T("[bold]rule of thumb[/] {rule}: ").format(rule=T(rot["rule"])) + escape(T(str(rot.get("why_not")))),
            highlight=False,
        )


def _published(c, pub: dict) -> None:
    """The published run at the request's size: measured figure first, then the model's prediction
    for it and how far #1's prediction is from that one against the error band."""
    meas = pub["measured_tokens_per_s_per_gpu"]
    text = T(
        "published (Megatron Bridge {release}, GBS {gbs}, as benchmarked): {label}, measured {tok} tok/s/GPU"
    ).format(release=pub["release"], gbs=pub["global_batch_size"], label=pub["label"], tok=f"{meas:,.0f}")
    pred = pub.get("predicted_tokens_per_s_per_gpu")
    if pred is not None:
        text += T("; predicted {pred} ({err} %)").format(pred=f"{pred:,.0f}", err=f"{pub['prediction_error_pct']:+.1f}")
    gap, band = pub.get("first_vs_published_pct"), pub.get("error_band_pct")
    if gap is not None and band is not None:
        verdict = T("within the error band: measure both" if abs(gap) < band else "beyond the error band")
        text += T("; #1 is predicted {gap} % against it, {verdict} (±{band} %)").format(
            gap=f"{gap:+.1f}", verdict=verdict, band=f"{band:.0f}"
        )
    c.print(text, highlight=False, markup=False)
    diff = [x for x in pub.get("first_differs", []) if not x.startswith("moe_router_force_load_balancing")]
    if diff:
        c.print(
            Padding(T("#1 runs differently: ") + T("; ").join(diff), (0, 0, 0, 2)),
            style="yellow",
            highlight=False,
            markup=False,
        )


def _family(c, fam: dict, verbose: bool) -> None:
    """The guidance's layout family at the request's size: as written, then as completed."""
    errs = fam["check"]["errors"]
    th = fam.get("throughput")
    # each broken rule with its message (no bare rule ids)
    broke = (
        T("breaks {n} rule(s): ").format(n=len(errs)) + T("; ").join(map(finding_line, errs)) if errs else T("legal")
    )
    c.print(
        T("[bold]guidance family[/] {recipe} at this size, as written: {broke}").format(
            recipe=fam["recipe"], broke=broke
        )
        + (f"{T('; ')}{fam['memory']['peak_gib']:.1f} GiB ({verdict_text(fam['memory'])})" if fam.get("memory") else "")
        + (f"{T('; ')}{th['tokens_per_s_per_gpu']:,.0f} tok/s/GPU" if th else "")
        + (T("; #1 is {gain} %").format(gain=f"{fam['search_gain_pct']:+.1f}") if "search_gain_pct" in fam else ""),
        highlight=False,
    )
    if fam.get("first_differs"):
        c.print(
            Padding(T("#1 runs differently: ") + T("; ").join(fam["first_differs"]), (0, 0, 0, 2)),
            style="yellow",
            highlight=False,
            markup=False,
        )
    done = fam.get("completed")
    if done:
        over = done.get("overridden") or {}
        how = (
            T("completed (its sizes held, unstated keys searched): ")
            if not over
            else T("completed (the request's held {keys} in place of the family's, unstated keys searched): ").format(
                keys=", ".join(f"{k}={v[1]}" for k, v in over.items())
            )
        )
        c.print(
            Padding(
                how
                + T("{label}, {tok} tok/s/GPU, {gib} GiB").format(
                    label=T(done["label"]), tok=f"{done['tokens_per_s_per_gpu']:,.0f}", gib=f"{done['peak_gib']:.1f}"
                ),
                (0, 0, 0, 2),
            ),
            highlight=False,
            markup=False,
        )


def _meaning(r: dict) -> str:
    """A rejection reason in words, in the current language: a rule's statement or the planner's tag."""
    meaning = r.get("meaning") or r["reason"]
    return i18n.summary(r["reason"], meaning, lang()) if r["reason"] in RULES else T(meaning)


def _tally(c, d: dict, verbose: bool) -> None:
    """What was considered and why the rest was rejected, each reason in words."""
    if not d["rejected"]:
        return
    shown = d["rejected"] if verbose else d["rejected"][:2]
    parts = [f"{r['count']} {_meaning(r)} ({r['reason']})" for r in shown]
    if len(d["rejected"]) > len(shown):
        parts.append(T("{n} more (--verbose)").format(n=sum(r["count"] for r in d["rejected"][len(shown) :])))
    c.print(
        T("{considered} layouts considered, {fit} fit, {refined} refinement variants of the best; rejected: ").format(
            considered=d["considered_layouts"], fit=d["fitting_layouts"], refined=d["refined_variants"]
        )
        + T("; ").join(parts),
        highlight=False,
        markup=False,
    )


def _published_layouts(c, d: dict, verbose: bool = False) -> None:
    """NVIDIA's layouts at the request's size, beside #1: the published run (measured figure first)
    and the guidance family (as written, how #1 differs, as completed); a line saying so when there
    is neither."""
    pub, fam = d["baseline"].get("published"), d["baseline"].get("family")
    if pub:
        _published(c, pub)
    if fam:
        _family(c, fam, verbose)
    if not pub and not fam:
        c.print(
            T("published: no NVIDIA layout for this model, GPU, size and precision (moeplan recipes lists them)"),
            style="dim",
            highlight=False,
            markup=False,
        )


def _baselines(c, d: dict, verbose: bool = False) -> None:
    """The rule-of-thumb baseline and the rejection tally."""
    _rule_of_thumb(c, d)
    _tally(c, d, verbose)


def _fsdp_vs_3d(c, fv: dict) -> None:
    """Megatron-FSDP against 3D parallelism for a VLM: each one's best layout and the difference."""
    c.print(T("[bold]Megatron-FSDP vs 3D parallel[/] (VLM)"))
    for key, name in (("fsdp", "FSDP"), ("3d", "3D")):
        x = fv.get(key)
        if x is None:
            c.print(f"  {name}{T(': ')}{T('nothing fits')}", highlight=False)
            continue
        c.print(
            T(
                "  {name}: {label} MBS{mbs}, recompute {rc} — {tok} tok/s/GPU, {gib} GiB, "
                "vision tower {share} % of the step; needs {needs}"
            ).format(
                name=name,
                label=x["label"],
                mbs=x["micro_batch_size"],
                rc=T(x["recompute"]),
                tok=f"{x['tokens_per_s_per_gpu']:,.0f}",
                gib=f"{x['peak_gib']:.1f}",
                share=f"{x['vision_share_pct']:.0f}",
                needs=T(x["needs"]),
            ),
            highlight=False,
        )
    if "fsdp_vs_3d_pct" in fv:
        gib = fv["memory_gib_diff"]
        c.print(
            T(
                "  FSDP is predicted {pct} % vs 3D and uses {gib} GiB {more_less}; the guidance: FSDP first for "
                "bring-up, 3D once the model is stable and there is time to tune"
            ).format(
                pct=f"{fv['fsdp_vs_3d_pct']:+.1f}", gib=f"{abs(gib):.1f}", more_less=T("more" if gib > 0 else "less")
            ),
            highlight=False,
        )


def _plan_footer(c, d: dict) -> None:
    """Workload assumptions of #1, notes, assumptions, the release of the step times, files written."""
    if d["candidates"]:
        # a workload measured at another sequence length is rescaled: say so (estimate does too)
        for a in d["candidates"][0]["throughput"].get("assumptions", []):
            if a.startswith("workload"):
                c.print(T("assumed for #1: ") + T(a), style="dim", highlight=False, markup=False)
    for n in d.get("notes", []):
        c.print(T("[bold yellow]note[/]: ") + escape(T(n)), highlight=False)
    # the software level every candidate's step time was scaled by (the same for all of them)
    top = (d.get("candidates") or [{}])[0].get("throughput") or {}
    # and how #1's attention kernels are timed (the figures they rest on: MLA's cuDNN shape, FlashAttention-2)
    more = [
        a
        for a in top.get("assumptions", [])
        if "container" in a or str(getattr(a, "msgid", "")).startswith("attention_kernels.")
    ]
    for a in [*d["assumptions"], *more]:
        c.print(T("assumed: ") + T(a), style="dim", highlight=False, markup=False)
    if d.get("report"):
        c.print(T("report written to {path}").format(path=d["report"]), highlight=False, markup=False)
    if d.get("saved"):
        c.print(
            T("#1 saved as {path}: moeplan check / estimate / export take it").format(path=d["saved"]),
            highlight=False,
            markup=False,
        )


def render_plan(d: dict, verbose: bool = False) -> None:
    """A plan document (:func:`moeplan.api.plan_report`): the request and its assumptions, the ranked
    candidates, NVIDIA's published layouts at this size beside them, where #1's step goes and why it
    wins, the baselines, FSDP vs 3D
    for a VLM, notes and assumptions (``verbose``: every reason, the runner-ups, the error band's
    sources, every rejection reason)."""
    c = console()
    _plan_header(c, d, verbose)
    if d["candidates"]:
        _candidates_table(c, d)
    _published_layouts(c, d, verbose)
    if d["candidates"]:
        _why_first(c, d, verbose)
    _baselines(c, d, verbose)
    if d.get("fsdp_vs_3d"):
        _fsdp_vs_3d(c, d["fsdp_vs_3d"])
    _plan_footer(c, d)


def _fit_verdict(d: dict) -> str:
    """`` → `` and the layout's own memory verdict as every command gives it (``d["memory"]``,
    :func:`~moeplan.cli.render.verdict.verdict_text`); a layout that fits but not within
    ``--headroom-gib`` says so; the old wording where a document has no verdict."""
    mem = d.get("memory")
    if not mem:
        over = T(" (over the limit: {items})").format(items=dominant_text(d["dominant_items"]))
        return T(" → fits already" if d["fits_already"] else " → does not fit") + (
            over if d.get("dominant_items") else ""
        )
    text = " → " + verdict_text(mem)
    if mem.get("verdict") == "fits" and not d["fits_already"]:
        text += T("; ") + T(msg("model_verdict.over_headroom_limit", limit=d["limit_gib"]))
    return text


def _fit_table(d: dict) -> Table:
    """The changes that fit: change (numerics changes marked), peak, saved, step-time cost, tok/s/GPU."""
    title = (
        "changes that save memory, least step-time cost first"
        if d["fits_already"]
        else "changes that make it fit, least step-time cost first"
    )
    t = Table(title=T(title), box=box.SIMPLE_HEAD)
    t.add_column("#", justify="right", no_wrap=True)
    t.add_column(T("change"), overflow="fold", ratio=1)
    for col in ("GiB", "saves", "step", "tok/s/GPU"):
        t.add_column(T(col), justify="right", no_wrap=True)
    for i, f in enumerate(d["fixes"], start=1):
        mark = T(" [numerics]") if f.get("changes_numerics") else ""
        t.add_row(
            str(i),
            T(f["change"]) + mark,
            f"{f['peak_gib']:.1f}",
            f"{f['saved_gib']:.1f}",
            "–" if f["step_time_change_pct"] is None else f"{f['step_time_change_pct']:+.1f}%",
            "–" if f["tokens_per_s_per_gpu"] is None else f"{f['tokens_per_s_per_gpu']:,.0f}",
        )
    return t


def _fit_rest(c, d: dict, verbose: bool) -> None:
    """Every other change tried: the other fixes, those not enough, those raising the peak, those a
    rule rejects (with the rule's message)."""

    def cost(f: dict) -> str:
        pct = f.get("step_time_change_pct")
        return f"{f['peak_gib']:.1f} GiB" + (f", {pct:+.1f} %" if pct is not None else "")

    groups = [
        ("also fits", d.get("more_fixes") or []),
        ("not enough alone", [f for f in d["not_enough"] if f["saved_gib"] > 0]),
        ("raise the peak", [f for f in d["not_enough"] if f["saved_gib"] <= 0]),
    ]
    for title, rows in groups:
        if rows:
            text = T(", ").join(
                f"{T(f['change'])}{T(' [numerics]') if f.get('changes_numerics') else ''} ({cost(f)})" for f in rows
            )
            c.print(f"{T(title)}{T(': ')}{text}", highlight=False, markup=False)
    rej = d["rejected"]
    if rej:
        shown = rej if verbose else rej[:6]
        text = T("; ").join(
            f"{T(r['change'])} ({r['rule_id']}: {rule_text(r['rule_id'], r['message'])})" for r in shown
        )
        more = T("; and {n} more (--verbose)").format(n=len(rej) - len(shown)) if len(rej) > len(shown) else ""
        c.print(T("rejected by a rule: ") + text + more, style="dim", highlight=False, markup=False)


def render_fit(d: dict, verbose: bool = False) -> None:
    """A fit document (:func:`moeplan.api.fit_report`): the current peak and the assumptions, the
    changes that make it fit, and every other change tried; the fix saved."""

    c = console()
    c.print(
        T("current layout: peak {peak} GiB of {cap} GiB usable ").format(
            peak=f"{d['peak_gib']:.1f}", cap=f"{d['capacity_gib']:.1f}"
        )
        + (
            T("after {gib} GiB reserved by a colocated engine ").format(gib=f"{d['reserved_gib']:.1f}")
            if d.get("reserved_gib")
            else ""
        )
        + T("(limit {limit} with headroom)").format(limit=f"{d['limit_gib']:.1f}")
        + _fit_verdict(d),
        highlight=False,
    )
    if d.get("assumes"):
        c.print(assumes_line(d["assumes"], verbose), style="dim", highlight=False, markup=False)
    if d.get("applied_first"):
        c.print(T("[yellow]applied first[/]: ") + escape(T(d["applied_first"])), highlight=False)
    for e in d.get("check_errors", []):
        c.print(
            T("[bold red]the layout breaks a rule[/]: {e} (moeplan check gives the fix)").format(
                e=escape(finding_line(e))
            ),
            highlight=False,
        )
    if d["fixes"]:
        c.print(_fit_table(d))
        if any(f.get("changes_numerics") for f in d["fixes"]):
            c.print(
                T("[numerics]: changes what is trained (precision), ranked after every layout change"),
                style="dim",
                highlight=False,
                markup=False,
            )
        if all(f["step_time_change_pct"] is None for f in d["fixes"]):
            c.print(
                T(
                    "step time: not estimated while the current layout breaks a rule"
                    if d.get("check_errors")
                    else "step time: give a global batch size (--gbs) to rank the changes by their time cost"
                ),
                style="dim",
                highlight=False,
                markup=False,
            )
    elif not d["fits_already"]:
        c.print(
            T("[bold red]no change makes it fit, and no layout fits these GPUs[/]: more GPUs or a shorter sequence")
        )
    if d.get("replanned"):
        c.print(T("no single change or pair of changes fits: the planner's best layout at this size is shown"))
    _fit_rest(c, d, verbose)
    c.print(
        T("{n} changes tried, each checked by every rule").format(n=d.get("tried", 0)), style="dim", highlight=False
    )
    for n in d.get("notes", []):
        c.print(T("[bold yellow]note[/]: ") + escape(T(n)), highlight=False)
    if d.get("saved"):
        s = d["saved"]
        c.print(
            T("fix #{rank} ({change}) saved as {path}: moeplan check / estimate / export take it").format(
                rank=s["rank"], change=T(s["change"]), path=s["path"]
            ),
            highlight=False,
            markup=False,
        )


def _recipe_head(c, r: dict) -> None:
    sc = r["scenario"]
    n = sc["system"].get("num_gpus")
    seq = sc.get("training", {}).get("seq_length")
    source = T(msg("recipes_2026.source_of_release", release=r["release"])) if r.get("release") else r["source"]
    c.print(
        f"[bold]{r['id']}[/] ({source}) {str(sc.get('model')).split('/')[-1]} on "
        f"{n or '?'} × {sc['system'].get('gpu')}, seq {f'{seq:,}' if seq else 'not given'}",
        highlight=False,
    )


def _as_published(c, r: dict, verbose: bool) -> None:
    """The layout as the source writes it: its sizes, verdict, memory, step time, each broken rule
    with its message."""
    lay = r["scenario"].get("layout", {})
    short = " ".join(
        f"{k}{lay[key]}"
        for k, key in (
            ("TP", "tensor_model_parallel_size"),
            ("PP", "pipeline_model_parallel_size"),
            ("VPP", "virtual_pipeline_model_parallel_size"),
            ("CP", "context_parallel_size"),
            ("EP", "expert_model_parallel_size"),
        )
        if lay.get(key) is not None
    )
    chk = r["check"]
    style = {"valid": "green", "invalid": "red", "unsupported": "red"}.get(chk["verdict"], "yellow")
    mem, th = r.get("memory"), r.get("throughput")
    figs = []
    if mem:
        figs.append(f"{mem['peak_gib']:.1f} GiB ({verdict_text(mem)})")
    if th:
        figs.append(f"{th['tokens_per_s_per_gpu']:,.0f} tok/s/GPU, MFU {100 * th['mfu']:.1f} %")
    if chk["rule_ids"] == ["input"]:
        c.print(Padding(f"[{style}]not evaluated[/]: {escape(chk['errors'][0]['message'])}", (0, 0, 0, 2)))
        return
    c.print(
        Padding(
            f"as published: {short or 'no sizes'} — [{style}]{chk['verdict']}[/]"
            + ("; " if figs else "")
            + "; ".join(figs),
            (0, 0, 0, 2),
        ),
        highlight=False,
    )
    for e in chk["errors"]:
        c.print(Padding(f"{e['rule_id']}: {e['message']}", (0, 0, 0, 4)), style="red", highlight=False, markup=False)
    if verbose:
        for note in r.get("notes", []):
            c.print(Padding(f"note: {note}", (0, 0, 0, 4)), style="dim", highlight=False, markup=False)


def _completed(c, r: dict, verbose: bool) -> None:
    """The layout as completed (what it needs to run), with its memory and step time."""
    if "completed" not in r:
        return
    done = r["completed"]
    if done is None:
        n = ((r.get("scenario") or {}).get("system") or {}).get("num_gpus")
        why = (
            "the source gives no GPU count"
            if not n
            else f"no legal layout on {n} GPUs fits with the sizes it states (the rules above)"
        )
        c.print(
            Padding(f"completed: not possible: {why}", (0, 0, 0, 2)),
            style="yellow",
            highlight=False,
            markup=False,
        )
        return
    c.print(
        Padding(
            f"completed: {done['label']} — {done['peak_gib']:.1f}/{done['capacity_gib']:.0f} GiB, "
            f"{done['tokens_per_s_per_gpu']:,.0f} tok/s/GPU, {done['model_tflops_per_gpu']:,.0f} TFLOP/s/GPU",
            (0, 0, 0, 2),
        ),
        style="green",
        highlight=False,
        markup=False,
    )
    needs = done["needs"] if verbose else [n for n in done["needs"] if "pipeline_model_parallel_layout" not in n]
    lines = [f"needs: {'; '.join(needs) or 'nothing more'} (held: {done['held']})"]
    if verbose:
        lines.append("recipe training settings: " + "; ".join(done.get("settings") or []))
        lines += [f"assumed: {a}" for a in done.get("assumed", [])]
    for line in lines:
        c.print(Padding(line, (0, 0, 0, 4)), highlight=False, markup=False)


def render_recipes(rows: list[dict], verbose: bool = False) -> None:
    """The built-in starting points (:func:`moeplan.api.recipes_report` rows): each as published
    (verdict, every broken rule with its message, memory, step time) and, where it does not run as
    written, as completed (what it needs, its memory and step time)."""
    c = console()
    c.print(f"[bold]{len(rows)} built-in starting points[/] (checked by every rule; memory per GPU at their size)")
    for r in rows:
        _recipe_head(c, r)
        _as_published(c, r, verbose)
        _completed(c, r, verbose)
    c.print(
        "guidance layouts are completed with the recipes' training settings (--verbose lists them and what the "
        "source leaves out); each as a scenario YAML: --write DIR; --json for every field",
        style="dim",
        highlight=False,
        markup=False,
    )


def render_sweep(target: str | None, d: dict) -> None:
    """A sweep document (:func:`moeplan.api.sweep_report`) for ``target`` collect, submit or a scenario (written)."""
    c = console()
    if target == "collect":
        t = Table(title="measured vs predicted (tokens/s/GPU)")
        for col in ("entry", "logs", "measured", "predicted", "error"):
            t.add_column(col, justify="left" if col == "entry" else "right", overflow="fold", no_wrap=col != "entry")
        for r in d["entries"]:
            for n in r.get("notes", []):
                c.print(f"{r['id']}: {T(n)}", style="dim", markup=False)
        for r in d["entries"]:
            m, p = r["measured_tokens_per_s_per_gpu"], r["predicted_tokens_per_s_per_gpu"]
            t.add_row(
                r["id"],
                str(r["logs"]),
                "–" if m is None else f"{m:,.0f}",
                "–" if p is None else f"{p:,.0f}",
                "–" if r["error_pct"] is None else f"{r['error_pct']:+.1f}%",
            )
        c.print(t)
        if d["measured_ranking"]:
            c.print("measured ranking: " + " > ".join(d["measured_ranking"]), highlight=False)
        if d["spearman"] is not None:
            c.print(f"Spearman (predicted vs measured): {d['spearman']:.2f}")
        mismatched = sum(len(r.get("mismatched_logs") or []) for r in d["entries"])
        if mismatched:
            c.print(
                T(msg("cli.logs_scored_against_other_layout", n=mismatched)),
                style="yellow",
                markup=False,
            )
        if d["runs_file"]:
            c.print(
                f"runs file for calibrate: {d['runs_file']} (moeplan calibrate {d['runs_file']} -o cluster.json)",
                markup=False,
            )
        return
    if target == "submit":
        for r in d["submitted"]:
            c.print(
                f"{r['id']}: "
                + (r.get("sbatch", "") if r["submitted"] else f"not submitted ({r.get('why') or r.get('sbatch')})"),
                highlight=False,
            )
        return
    c.print(f"[bold]sweep written to {d['directory']}[/] (README.md inside says how to run it)")
    for e in d["entries"]:
        p = e.get("predicted")
        c.print(
            f"  {e['id']}: {e['label']} — "
            + (
                f"{p['tokens_per_s_per_gpu']:,.0f} tok/s/GPU, {p['peak_gib']:.1f} GiB; smoke: {e['smoke']}"
                if p
                else e.get("note", "")
            ),
            highlight=False,
        )
    if d.get("note"):
        c.print(T("[bold yellow]note[/]: ") + escape(T(d["note"])), highlight=False)
    c.print("nothing was submitted: moeplan sweep submit DIR --smoke --yes (sbatch), or submit the scripts yourself")
