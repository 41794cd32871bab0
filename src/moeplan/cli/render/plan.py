"""Tables of ``plan``, ``fit``, ``recipes`` and ``sweep`` (readable at 100 columns)."""

from __future__ import annotations

from rich.console import JustifyMethod
from rich.markup import escape
from rich.padding import Padding
from rich.table import Table

from moeplan.cli.render import console


def _short_layout(c: dict) -> str:
    lay = c["layout"]
    bits = []
    rc = c.get("recompute")
    if rc:
        # a space after each comma lets the narrow column wrap between module names, not inside them
        bits.append("rc=" + rc.replace(",", ", ").replace(" + optimizer offload ", " + offload "))
    k = c.get("knobs") or {}
    if k.get("dispatcher") and k["dispatcher"] != "alltoall":
        bits.append(k["dispatcher"])
    if k.get("ep_overlap") == "on":
        bits.append("ep-overlap")
    if k.get("graphs") and k["graphs"] != "eager":
        bits.append(k["graphs"].replace("moe_router", "router").replace("moe_preprocess", "preproc"))
    if k.get("cp_comm") and k["cp_comm"] != "p2p":
        bits.append("cp:" + k["cp_comm"])
    if lay.get("pipeline_model_parallel_layout"):
        bits.append("pp-layout")
    elif lay.get("account_for_embedding_in_pipeline_split"):
        bits.append("acct-emb" + ("+loss" if lay.get("account_for_loss_in_pipeline_split") else ""))
    return ", ".join(bits)


def _plan_header(c, d: dict) -> None:
    r = d["request"]
    c.print(
        f"[bold]{r['model']}[/] on {r['num_gpus']} × {r['gpu']}, seq {r['seq_length']:,}, GBS "
        f"{r['global_batch_size']}, {r['precision']}"
        + (
            f"; held fixed: {', '.join(f'{k}={v}' for k, v in {**r['fixed'], **r.get('fixed_training', {})}.items())}"
            if r["fixed"] or r.get("fixed_training")
            else ""
        )
    )
    if not d["candidates"]:
        c.print("[bold red]no layout fits[/]")


def _candidates_table(c, d: dict) -> None:
    """The ranked candidates: layout, DP, MBS, knobs, GiB, tokens/s/GPU, MFU (and days to train)."""

    # refinement variants of a fitting layout count as candidates too: never "top 2 of 1"
    fitting = max(d["fitting_layouts"], len(d["candidates"]))
    t = Table(title=f"top {len(d['candidates'])} of {fitting} fitting layouts", width=100)
    ttt = bool(d["candidates"]) and "time_to_train_s" in d["candidates"][0]
    cols: list[tuple[str, JustifyMethod]] = [
        ("#", "right"),
        ("layout", "left"),
        ("DP", "right"),
        ("MBS", "right"),
        ("knobs", "left"),
        ("GiB", "right"),
        ("tok/s/GPU", "right"),
        ("MFU", "right"),
    ]
    if ttt:
        cols.append(("days", "right"))  # --train-tokens: time to train at each candidate's throughput
    for col, just in cols:
        t.add_column(col, justify=just, overflow="fold")
    for cand in d["candidates"]:
        m = cand["memory"]
        th = cand["throughput"]
        t.add_row(
            str(cand["rank"]),
            cand["label"],
            str(cand["dp"]),
            str(cand["training"]["micro_batch_size"]),
            _short_layout(cand),
            f"{m['peak_gib']:.1f}/{m['capacity_gib']:.0f}",
            f"{th['tokens_per_s_per_gpu']:,.0f}",
            f"{100 * th['mfu']:.1f}%",
            *([f"{cand['time_to_train_s'] / 86400:.2f}"] if ttt else []),
        )
    c.print(t)


def _why_first(c, d: dict) -> None:
    """Why #1 wins (and the next two), its useful tokens, known bias, validity and time to train."""

    w = d["candidates"][0]
    c.print("[bold]why #1[/]")
    for line in w["explanation"]:
        c.print(Padding(f"• {line}", (0, 0, 0, 2)), highlight=False)
    for line in w.get("warnings", []):
        c.print(Padding(f"[yellow]check warns[/]: {line}", (0, 0, 0, 2)), highlight=False)
    for cand in d["candidates"][1:3]:
        for line in cand["explanation"]:
            c.print(f"  {line}", highlight=False)
    u = w["throughput"].get("useful_tokens_per_s_per_gpu")
    if u is not None and abs(u - w["throughput"]["tokens_per_s_per_gpu"]) > 1e-6:
        c.print(f"#1 useful (non-padding) tokens/s/GPU: {u:,.0f}", highlight=False)
    v = w["throughput"]["validity"]
    if v.get("bias_note"):
        c.print(f"[yellow]known bias[/] of #1: {v['bias_note']}", highlight=False)
    if not v.get("validated"):
        c.print(
            f"[yellow]extrapolated[/]: expected error ±{v['error_band_pct']:.0f} % or worse — "
            + "; ".join(v.get("outside", [])),
            highlight=False,
        )
    if "time_to_train_s" in w:
        c.print(f"time to train: {w['time_to_train_s'] / 86400:.2f} days")


def _baselines(c, d: dict) -> None:
    """The rule-of-thumb baseline, the guidance family at this size, and the rejection tally."""
    b = d["baseline"]
    rot = b["rule_of_thumb"]
    if rot.get("candidate"):
        rc = rot["candidate"]
        c.print(
            f"[bold]baseline[/] {rot['rule']}: best such layout {rc['label']} "
            f"{rc['throughput']['tokens_per_s_per_gpu']:,.0f} tok/s/GPU, {rc['memory']['peak_gib']:.1f} GiB "
            + (f"(rank {rc['rank']})" if rc["rank"] is not None else f"({rot.get('note', 'outside the list')})")
            + f"; the search gains {rot['search_gain_pct']:+.1f} %",
            highlight=False,
        )
    else:
        c.print(f"[bold]baseline[/] {rot['rule']}: {rot.get('why_not')}", highlight=False)
    fam = b.get("family")
    if fam:
        errs = fam["check"]["errors"]
        th = fam.get("throughput")
        c.print(
            f"[bold]guidance family[/] {fam['recipe']} at this size: "
            + (f"breaks {len(errs)} rule(s): " + "; ".join(errs) if errs else "legal")
            + (f"; {th['tokens_per_s_per_gpu']:,.0f} tok/s/GPU" if th else "")
            + (f", {fam['memory']['peak_gib']:.1f} GiB ({fam['memory']['verdict']})" if fam.get("memory") else "")
            + (f"; the search gains {fam['search_gain_pct']:+.1f} %" if "search_gain_pct" in fam else ""),
            highlight=False,
        )
        done = fam.get("completed")
        if done:
            c.print(
                f"  as the source leaves it (unstated keys at their defaults) it does not run; with its sizes held "
                f"and the rest searched: {done['label']}, {done['tokens_per_s_per_gpu']:,.0f} tok/s/GPU, "
                f"{done['peak_gib']:.1f} GiB",
                highlight=False,
            )
    if d["rejected"]:
        c.print(
            f"{d['considered_layouts']} layouts considered: {d['fitting_layouts']} fit, rejected "
            + ", ".join(f"{r['reason']} {r['count']}" for r in d["rejected"])
            + f"; then {d['refined_variants']} refinement variants of the best",
            highlight=False,
        )


def _fsdp_vs_3d(c, fv: dict) -> None:
    """Megatron-FSDP against 3D parallelism for a VLM: each one's best layout and the difference."""
    c.print("[bold]Megatron-FSDP vs 3D parallel[/] (VLM)")
    for key, name in (("fsdp", "FSDP"), ("3d", "3D")):
        x = fv.get(key)
        if x is None:
            c.print(f"  {name}: nothing fits", highlight=False)
            continue
        c.print(
            f"  {name}: {x['label']} MBS{x['micro_batch_size']}, recompute {x['recompute']} — "
            f"{x['tokens_per_s_per_gpu']:,.0f} tok/s/GPU, {x['peak_gib']:.1f} GiB, "
            f"vision tower {x['vision_share_pct']:.0f} % of the step; needs {x['needs']}",
            highlight=False,
        )
    if "fsdp_vs_3d_pct" in fv:
        gib = fv["memory_gib_diff"]
        c.print(
            f"  FSDP is predicted {fv['fsdp_vs_3d_pct']:+.1f} % vs 3D and uses {abs(gib):.1f} GiB "
            f"{'more' if gib > 0 else 'less'}; "
            "the guidance: FSDP first for bring-up, 3D once the model is stable and there is time to tune",
            highlight=False,
        )


def _plan_footer(c, d: dict) -> None:
    """Workload assumptions of #1, notes, assumptions, the release of the step times, files written."""
    if d["candidates"]:
        # a workload measured at another sequence length is rescaled: say so (estimate does too)
        for a in d["candidates"][0]["throughput"].get("assumptions", []):
            if a.startswith("workload"):
                c.print(f"[dim]assumed for #1: {a}[/]", highlight=False)
    for n in d.get("notes", []):
        c.print(f"[bold yellow]note[/]: {n}", highlight=False)
    for a in d["assumptions"]:
        c.print(f"[dim]assumed: {a}[/]", highlight=False)
    # the software level every candidate's step time was scaled by (the same for all of them)
    top = (d.get("candidates") or [{}])[0].get("throughput") or {}
    for a in top.get("assumptions", []):
        if "container" in a:
            c.print(f"[dim]assumed: {a}[/]", highlight=False)
    if d.get("report"):
        c.print(f"report written to {d['report']}")
    if d.get("saved"):
        c.print(f"#1 saved as {d['saved']}: moeplan check / estimate / export take it")


def render_plan(d: dict) -> None:
    """A plan document (:func:`moeplan.api.plan_report`): the request, the ranked candidates, why #1
    wins, the baselines, FSDP vs 3D for a VLM, notes and assumptions."""
    c = console()
    _plan_header(c, d)
    if d["candidates"]:
        _candidates_table(c, d)
        _why_first(c, d)
    _baselines(c, d)
    if d.get("fsdp_vs_3d"):
        _fsdp_vs_3d(c, d["fsdp_vs_3d"])
    _plan_footer(c, d)


def render_fit(d: dict) -> None:
    """A fit document (:func:`moeplan.api.fit_report`): the current peak, the changes that make it fit, the rest."""

    c = console()
    c.print(
        f"current layout: peak {d['peak_gib']:.1f} GiB of {d['capacity_gib']:.1f} GiB usable "
        f"(limit {d['limit_gib']:.1f} with headroom)" + (" → fits already" if d["fits_already"] else " → does not fit"),
        highlight=False,
    )
    if d.get("applied_first"):
        c.print(f"[yellow]applied first[/]: {d['applied_first']}", highlight=False)
    for e in d.get("check_errors", []):
        c.print(f"[bold red]the layout breaks a rule[/]: {e} (moeplan check gives the fix)", highlight=False)
    if d["fixes"]:
        title = (
            "changes that save memory, least step-time cost first"
            if d["fits_already"]
            else "changes that make it fit, least step-time cost first"
        )
        t = Table(title=title, width=100)
        for col in ("#", "change", "peak GiB", "saves GiB", "step time", "tok/s/GPU"):
            t.add_column(col, justify="left" if col == "change" else "right", overflow="fold")
        for i, f in enumerate(d["fixes"], start=1):
            t.add_row(
                str(i),
                f["change"],
                f"{f['peak_gib']:.1f}",
                f"{f['saved_gib']:.1f}",
                "–" if f["step_time_change_pct"] is None else f"{f['step_time_change_pct']:+.1f}%",
                "–" if f["tokens_per_s_per_gpu"] is None else f"{f['tokens_per_s_per_gpu']:,.0f}",
            )
        c.print(t)
        if all(f["step_time_change_pct"] is None for f in d["fixes"]):
            c.print(
                "[dim]step time: not estimated while the current layout breaks a rule[/]"
                if d.get("check_errors")
                else "[dim]step time: give a global batch size (--gbs) to rank the changes by their time cost[/]"
            )
    elif not d["fits_already"]:
        c.print("[bold red]no change makes it fit, and no layout fits these GPUs[/]: more GPUs or a shorter sequence")
    if d.get("replanned"):
        c.print("no single change or pair of changes fits: the planner's best layout at this size is shown")
    less = [f for f in d["not_enough"] if f["saved_gib"] > 0]
    more = [f for f in d["not_enough"] if f["saved_gib"] <= 0]
    if less:
        c.print(
            "legal but not enough alone: " + ", ".join(f"{f['change']} ({f['peak_gib']:.1f} GiB)" for f in less),
            highlight=False,
        )
    if more:
        c.print(
            "legal but raise the peak: " + ", ".join(f"{f['change']} ({f['peak_gib']:.1f} GiB)" for f in more),
            highlight=False,
        )
    if d["rejected"]:
        c.print(
            "[dim]rejected by a rule: "
            + "; ".join(f"{r['change']} ({r['rule_id']})" for r in d["rejected"][:6])
            + (f"; and {len(d['rejected']) - 6} more (--json)" if len(d["rejected"]) > 6 else "")
            + "[/]",
            highlight=False,
        )


def render_recipes(rows: list[dict]) -> None:
    """The built-in starting points (:func:`moeplan.api.recipes_report` rows), two lines each."""
    c = console()
    c.print(f"[bold]{len(rows)} built-in starting points[/] (checked by every rule; memory per GPU at their size)")
    for r in rows:
        sc = r["scenario"]
        lay = sc.get("layout", {})
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
        mem = r.get("memory")
        if mem:
            mem_s = f"{mem['peak_gib']:.1f} GiB {mem['verdict']}"
        elif chk["rule_ids"] == ["input"]:
            mem_s = "memory: not estimated"
        else:
            mem_s = "memory: needs seq_length / GPU count"
        th = r.get("throughput")
        if th:
            mem_s += f"; {th['tokens_per_s_per_gpu']:,.0f} tok/s/GPU, MFU {100 * th['mfu']:.1f} %"
        n = sc["system"].get("num_gpus")
        c.print(
            f"[bold]{r['id']}[/] ({r['source']}) {str(sc.get('model')).split('/')[-1]} on "
            f"{n or '?'} × {sc['system'].get('gpu')}, seq {sc.get('training', {}).get('seq_length', '?')}: {short}",
            highlight=False,
        )
        if chk["rule_ids"] == ["input"]:
            line = f"    [{style}]not evaluated[/] — {escape(chk['errors'][0]['message'])}"
        else:
            line = f"    [{style}]{chk['verdict']}[/]" + (
                f" — breaks {', '.join(chk['rule_ids'])}" if chk["rule_ids"] else ""
            )
        c.print(line + f"; {mem_s}", highlight=False)
        # what the source leaves out explains rows that look broken (e.g. no EP below 128K)
        for note in r.get("notes", []):
            if "not given" in note:
                c.print(f"    note: {note}", style="dim", highlight=False, markup=False)
    c.print("[dim]messages and fixes: --json; each as a scenario YAML: --write DIR[/]")


def render_sweep(target: str | None, d: dict) -> None:
    """A sweep document (:func:`moeplan.api.sweep_report`) for ``target`` collect, submit or a scenario (written)."""
    c = console()
    if target == "collect":
        t = Table(title="measured vs predicted (tokens/s/GPU)", width=100)
        for col in ("entry", "logs", "measured", "predicted", "error"):
            t.add_column(col, justify="left" if col == "entry" else "right", overflow="fold")
        for r in d["entries"]:
            for n in r.get("notes", []):
                c.print(f"[dim]{r['id']}: {n}[/]", highlight=False)
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
        if d["runs_file"]:
            c.print(f"runs file for calibrate: {d['runs_file']} (moeplan calibrate {d['runs_file']} -o cluster.json)")
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
    c.print("nothing was submitted: moeplan sweep submit DIR --smoke --yes (sbatch), or submit the scripts yourself")
