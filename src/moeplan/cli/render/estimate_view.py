"""Tables of ``estimate``: memory per stage (GiB) and step time (seconds, tokens/s/GPU, MFU)."""

from __future__ import annotations

from rich import box
from rich.markup import escape
from rich.measure import Measurement
from rich.table import Table

from moeplan.cli.render import T, console, rule_text
from moeplan.cli.render.check_view import parallel_text, render_check, unmodelled_text, yaml_value
from moeplan.cli.render.text import PART_NAMES, assumes_line, band_line
from moeplan.cli.render.verdict import verdict_text
from moeplan.i18n.messages import msg
from moeplan.units import GIB_BYTES

_MEM_STYLE = {"fits": "bold green", "tight": "yellow", "does-not-fit": "bold red", "unknown": "dim"}
_COMM = {"ep_comm": "EP", "cp_comm": "CP", "tp_comm": "TP", "dp_comm": "DP", "fsdp_comm": "FSDP"}


def _gib(x: float | None, digits: int = 2) -> str:
    return "–" if x is None else f"{x / GIB_BYTES:.{digits}f}"


def render_estimate(report, verbose: bool = False) -> None:
    """An :class:`moeplan.api.EstimateReport`: memory and step time, or, for a layout that does not
    fold into the world, the check (every finding); ``verbose`` adds every default used, the virtual
    chunks and the sources of the error band."""
    doc = report.document
    if doc["memory"] is None:
        render_check(report.check)
        return
    chk = doc["check"]
    render_memory(
        doc["scenario"], doc["memory"], chk["errors"], chk["warnings"], verbose, doc.get("assumes"), doc.get("fixed")
    )
    _versions_line(chk.get("versions_unknown") or [])
    ids = ", ".join(dict.fromkeys(e["rule_id"] for e in chk["errors"] if isinstance(e, dict) and "rule_id" in e))
    withheld = doc.get("withheld") or (T("the layout breaks {ids}").format(ids=ids) if report.broken and ids else None)
    if doc.get("timed_despite"):
        c = console()
        c.print(T("[bold red]error[/]: ") + escape(T(doc["timed_despite"]["text"])), highlight=False)
    render_throughput(doc["throughput"], report.broken, verbose, withheld)


#: the per-stage columns, full and (below 100 columns) short, with the legend of the short ones
_COLS = (
    ("stage", "stage"),
    ("layers", "layers"),
    ("in-flight µbatches", "µb"),
    ("weights", "weights"),
    ("grads", "grads"),
    ("optimizer", "optim"),
    ("activations", "activ"),
    ("other", "other"),
    ("allocated", "alloc"),
    ("reserved", "resv"),
    ("device", "device"),
)


def _stage_tables(c, mem: dict) -> dict:
    """The per-stage table (short headers with a legend where the full ones do not fit) and the peak stage's
    itemised table; returns the peak stage."""

    narrow = False
    # full headers where they fit, else short ones with a legend, else also without the two blank edge
    # columns (8 stages with 11.50 in-flight microbatches and 3-digit GiB then fit 80 columns)
    for narrow, edge in ((False, True), (True, True), (True, False)):
        t = Table(
            title=T("peak memory per GPU (GiB)"),
            box=box.SIMPLE_HEAD,
            pad_edge=False,
            padding=(0, 1, 0, 0),
            show_edge=edge,
        )
        for full, short in _COLS:
            t.add_column(T(short if narrow else full), justify="right", no_wrap=True)
        dg = 1 if narrow else 2  # GiB to 0.1 when narrow: every figure stays visible
        _stage_rows(t, mem, dg)
        if Measurement.get(c, c.options.update(max_width=10_000), t).maximum <= c.width:
            break
    c.print(t)
    _stage_legend(c, narrow)
    return _peak_table(c, mem)


def _stage_rows(t: Table, mem: dict, dg: int) -> None:
    for st in mem["stages"]:
        t.add_row(
            str(st["stage"]),
            str(st["num_layers"]),
            f"{st['inflight_microbatches']:.2f}",
            *(_gib(st[f"{k}_bytes"], dg) for k in ("weights", "grads", "optimizer", "activations", "other")),
            _gib(st["peak_allocated_bytes"], dg),
            _gib(st["peak_reserved_bytes"], dg),
            f"[bold]{_gib(st['device_used_bytes'], dg)}[/]",
        )


def _stage_legend(c, narrow: bool) -> None:
    short = T("µb: in-flight microbatches; optim, activ: optimizer state, activations; ") if narrow else ""
    c.print(
        short
        + T(
            "{alloc}: torch max_memory_allocated (Megatron's 'max allocated'); "
            "{resv}: plus the allocator's fragmentation and CUDA graph pools "
            "(max_memory_reserved); device: plus CUDA context, NCCL and dispatcher buffers (nvidia-smi)"
        ).format(alloc=T("alloc" if narrow else "allocated"), resv=T("resv" if narrow else "reserved")),
        style="dim",
        highlight=False,
        markup=False,
    )


def _peak_table(c, mem: dict) -> dict:
    peak = next(st for st in mem["stages"] if st["stage"] == mem["peak_stage"])
    d = Table(title=T("stage {stage} (the peak), itemised (GiB)").format(stage=peak["stage"]), box=box.SIMPLE_HEAD)
    d.add_column(T("category"))
    d.add_column(T("part"))
    d.add_column("GiB", justify="right")
    for cat, items in peak["items"].items():
        for name, v in sorted(items.items(), key=lambda kv: -kv[1]):
            if v > 0:
                d.add_row(T(f"category {cat}").removeprefix("category "), name, _gib(v))
    c.print(d)
    return peak


def _versions_line(unknown: list[dict]) -> None:
    """The one line on versions not stated (``known_issue.versions_unknown``: the known issues they leave
    open, the container assumed and what stating versions decides), as ``check`` lists it."""
    for f in unknown:
        console().print(
            f"{f['rule_id']}: {rule_text(f['rule_id'], f['message'])}", style="dim", highlight=False, markup=False
        )


def _findings_lines(c, errors: list[dict] | None, warnings: list[dict] | None) -> None:
    if errors:
        c.print(
            T("[bold red]the layout breaks {n} rule(s)[/] (details: moeplan check): ").format(n=len(errors))
            + escape("; ".join(f"{e['rule_id']}: {rule_text(e['rule_id'], e['message'])}" for e in errors)),
            highlight=False,
        )
    if warnings:
        c.print(
            T("[yellow]check warns[/] (details: moeplan check): ")
            + escape("; ".join(f"{w['rule_id']}: {rule_text(w['rule_id'], w['message'])}" for w in warnings)),
            highlight=False,
        )


def _reserved_text(mem: dict) -> str:
    """`` (HBM H − R reserved by a colocated engine)`` when ``system.reserved_gib`` is stated."""
    reserved = mem.get("reserved_bytes") or 0
    if not reserved or mem.get("usable_hbm_bytes") is None:
        return ""
    return T(" ({hbm} HBM − {reserved} reserved by a colocated engine)").format(
        hbm=_gib(mem["usable_hbm_bytes"]), reserved=_gib(reserved)
    )


def _host_line(c, mem: dict, peak: dict) -> None:
    """Host memory per rank (its parts, on the peak stage) and per node against the node's RAM."""
    cap = mem["host_capacity_bytes_per_node"]
    parts = ", ".join(f"{n} {_gib(v)}" for n, v in (peak.get("host_items") or {}).items() if v)
    over = cap is not None and mem["host_bytes_per_node"] > cap
    c.print(
        T("host memory per rank {gib} GiB").format(gib=_gib(mem.get("host_bytes_per_rank")))
        + (f" ({parts})" if parts else "")
        + T("; per node {gib} GiB").format(gib=_gib(mem["host_bytes_per_node"]))
        + (
            T(" of {cap} GiB").format(cap=f"{cap / GIB_BYTES:.0f}")
            + (T(" [bold red]— exceeds the node's host memory[/]") if over else "")
            if cap
            else T(" (host memory unknown: set system.host_memory_gib)")
        ),
        highlight=False,
    )


def _memory_footer(c, mem: dict, peak: dict, verbose: bool = False) -> None:
    """Virtual chunks of the peak stage (``verbose``), host memory for offloaded state, and the
    verdict line."""
    if verbose and len(peak.get("virtual_chunks", [])) > 1:
        c.print(
            T("virtual chunks of the peak stage (layers, activations per microbatch GiB): ")
            + ", ".join(
                f"{ch['vp_stage']}: {ch['num_layers']} / {_gib(ch['activations_per_microbatch_bytes'])}"
                for ch in peak["virtual_chunks"]
            )
        )
    if mem["host_bytes_per_node"]:
        _host_line(c, mem, peak)
    if mem.get("peft"):
        pf = mem["peft"]
        c.print(
            T(
                "LoRA dim {dim} (alpha {alpha}) on {targets}: {params} M adapter parameters ({rank} M on the busiest "
                "rank); the base is frozen (no gradients or optimizer state; backward without weight gradients)"
            ).format(
                dim=pf["dim"],
                alpha=f"{pf['alpha']:g}",
                targets=", ".join(pf["target_modules"]),
                params=f"{pf['adapter_params'] / 1e6:,.2f}",
                rank=f"{pf['adapter_params_per_rank'] / 1e6:,.2f}",
            ),
            highlight=False,
        )
    head = mem["headroom_fraction"]
    c.print(
        T(
            "peak device use {peak} GiB (allocated {alloc}, reserved {resv}) on stage {stage} of {cap} GiB usable"
        ).format(
            peak=_gib(mem["peak_bytes"]),
            alloc=_gib(mem["peak_allocated_bytes"]),
            resv=_gib(mem["peak_reserved_bytes"]),
            stage=mem["peak_stage"],
            cap=_gib(mem["capacity_bytes"]),
        )
        + _reserved_text(mem)
        + (
            (
                T(" ({pct} % headroom)").format(pct=f"{head * 100:.1f}")
                if head >= 0
                else T(" (over by {pct} % of usable HBM)").format(pct=f"{-head * 100:.1f}")
            )
            if head is not None
            else ""
        )
        + (T(" — host memory exceeded") if mem.get("host_fits") is False else "")
        + f" → [{_MEM_STYLE[mem['verdict']]}]{escape(verdict_text(mem))}[/]"
    )
    _step_peak_line(c, mem)
    if mem.get("error_band_pct") is not None and mem.get("margin_bytes") is not None:
        c.print(
            "[dim]"
            + T(
                "margin {gib} GiB; the memory model's band ±{pct} % (allocated vs measured runs, docs/memory_accuracy.md)"
            ).format(gib=_gib(mem["margin_bytes"]), pct=f"{mem['error_band_pct']:.0f}")
            + "[/]",
            markup=True,
        )


def _step_peak_line(c, mem: dict) -> None:
    """When the optimizer step, not the forward/backward, sets the peak stage's figures: its
    temporaries (``optimizer_step_transients``) and how far they rise above (``optimizer_step_excess``)."""
    stage = next((st for st in mem.get("stages", []) if st.get("stage") == mem.get("peak_stage")), None)
    excess = ((stage or {}).get("items", {}).get("other") or {}).get("optimizer_step_excess", 0)
    if not stage or excess <= 0:
        return
    parts = ", ".join(f"{k} {_gib(v)} GiB" for k, v in stage.get("optimizer_step_transients", {}).items())
    c.print(
        T(msg("cli.optimizer_step_sets_peak", parts=parts, gib=_gib(excess))),
        style="dim",
        highlight=False,
        markup=False,
    )


def _defaults_line(c, resolved: list[dict], verbose: bool) -> None:
    """Every default used with its reason (``verbose``), else how many and where they came from."""
    if not resolved:
        return
    if verbose:
        text = "; ".join(f"{r['key']}={yaml_value(r['value'])} ({r['reason']})" for r in resolved)
    else:
        fills = sum(r["reason"].startswith("recipe fill") for r in resolved)
        text = (
            T("{n} keys not stated ({fills} recipe fills, {defaults} framework defaults): ").format(
                n=len(resolved), fills=fills, defaults=len(resolved) - fills
            )
            + ", ".join(f"{r['key']}={yaml_value(r['value'])}" for r in resolved[:6])
            + (T(", ... (--verbose, or moeplan check, lists each with its reason)") if len(resolved) > 6 else "")
        )
    c.print(T("defaults used: ") + text, style="dim", highlight=False, markup=False)


def render_memory(
    scn_summary: dict,
    mem: dict,
    errors: list[dict] | None = None,
    warnings: list[dict] | None = None,
    verbose: bool = False,
    assumes: list[dict] | None = None,
    fixed: dict | None = None,
) -> None:
    """Peak memory per GPU per stage (GiB), the peak stage itemised, the assumptions and defaults
    used, the rules the layout breaks or warns about, and the verdict against the usable HBM;
    ``fixed``: the fix applied before estimating (a pipeline split)."""
    c = console()
    c.print(
        T("[bold]{model}[/] on {n} × {gpu}   ").format(
            model=scn_summary["model"], n=scn_summary["num_gpus"], gpu=scn_summary["gpu"] or "?"
        )
        + parallel_text(scn_summary["parallel"]),
        highlight=False,
    )
    if assumes:
        c.print(assumes_line(assumes, verbose), style="dim", highlight=False, markup=False)
    if fixed:
        c.print(T("[yellow]estimated with the check's fix[/]: ") + escape(T(fixed["text"])), highlight=False)
    peak = _stage_tables(c, mem)
    _defaults_line(c, scn_summary["resolved_defaults"], verbose)
    unmodelled_text(c, scn_summary)
    if mem["assumptions"]:
        c.print(T("assumed: ") + T("; ").join(map(T, mem["assumptions"])), style="dim", highlight=False, markup=False)
    _findings_lines(c, errors, warnings)
    _memory_footer(c, mem, peak, verbose)


def _breakdown(c, th: dict) -> None:
    """The step-time breakdown table (seconds, % of the step) and what overlap / CUDA graphs hide."""

    step = th["step_time_s"]
    n_stages = len(th.get("stage_microbatch_s") or [])
    where = (
        T("; parts of stage {stage}, the slowest of {n}").format(stage=th.get("critical_stage", 0), n=n_stages)
        if n_stages > 1
        else ""
    )
    c.print(
        T("[bold]step time {step} s[/], {n} microbatches").format(step=f"{step:.3f}", n=th["num_microbatches"]) + where,
        highlight=False,
    )
    t = Table(box=box.SIMPLE_HEAD)
    t.add_column(T("part"))
    t.add_column("s", justify="right")
    t.add_column(T("% of step"), justify="right")
    for name, v in th["breakdown_s"].items():
        if v > 0:
            t.add_row(T(PART_NAMES.get(name, name.replace("_", " "))), f"{v:.4f}", f"{100 * v / step:.1f}")
    c.print(t)
    hid = th.get("hidden_s") or {}
    over = [f"{_COMM[k]} {hid[k]:.3f} s" for k in _COMM if hid.get(k, 0) > 5e-4]
    saved = []
    if over:
        saved.append(T("overlap hides {what} of communication").format(what=", ".join(over)))
    if hid.get("cuda_graphs", 0) > 5e-4:
        saved.append(
            T("CUDA graphs save {s} s of launch overhead and MoE host syncs").format(s=f"{hid['cuda_graphs']:.3f}")
        )
    if saved:
        c.print(T("not in the step: ") + T("; ").join(saved), highlight=False)


def _rates(c, th: dict) -> None:
    """tokens/s/GPU, TFLOP/s, MFU and the release; useful tokens; pipeline balance with a vision tower."""
    c.print(
        T(
            "[bold]{tok} tokens/s/GPU[/], {tf} model TFLOP/s/GPU, MFU {mfu} % of the dense BF16 peak "
            "({mfu_p} % of the training precision's peak); software efficiency of container {rel} "
            "(step time ÷ {factor}, fitted per release against the newest)"
        ).format(
            tok=f"{th['tokens_per_s_per_gpu']:,.0f}",
            tf=f"{th['model_tflops_per_gpu']:.0f}",
            mfu=f"{100 * th['mfu']:.1f}",
            mfu_p=f"{100 * th['mfu_precision_peak']:.1f}",
            rel=th["release"],
            factor=f"{th.get('release_factor', 1.0):.3f}",
        )
    )
    if (
        th.get("useful_tokens_per_s_per_gpu") is not None
        and abs(th["useful_tokens_per_s_per_gpu"] - th["tokens_per_s_per_gpu"]) > 1e-6
    ):
        share = th["useful_tokens_per_s_per_gpu"] / th["tokens_per_s_per_gpu"]
        c.print(
            T(
                "useful (non-padding) tokens/s/GPU: {tok} — the TFLOP/s and MFU above count padding tokens too "
                "(as Megatron logs them); on useful tokens alone MFU {mfu} %"
            ).format(tok=f"{th['useful_tokens_per_s_per_gpu']:,.0f}", mfu=f"{100 * th['mfu'] * share:.1f}")
        )
    st = th.get("stage_microbatch_s") or []
    if len(st) > 1 and th["breakdown_s"].get("vision_encoder"):
        rest = max(st[1:])
        c.print(
            T(
                "pipeline balance: stage 0 (with the vision tower) {a} ms per microbatch vs {b} ms on the slowest "
                "other stage ({pct} %): move decoder layers off stage 0 (pipeline_model_parallel_layout) to balance"
            ).format(a=f"{st[0] * 1e3:,.0f}", b=f"{rest * 1e3:,.0f}", pct=f"{100 * (st[0] / rest - 1):+.0f}"),
            highlight=False,
        )


def _caveats(c, th: dict, verbose: bool = False) -> None:
    """Mock-data VLM figure, the validity band, a known bias and the assumptions."""
    if th.get("mock_data_tokens_per_s_per_gpu") is not None:
        mock = th["mock_data_tokens_per_s_per_gpu"]
        c.print(
            T(
                "[yellow]VLM[/]: with mock (image-free) data the same layout shows {tok} tokens/s/GPU ({pct} %) — "
                "not a real-data figure; the figure above uses "
            ).format(tok=f"{mock:,.0f}", pct=f"{100 * (mock / th['tokens_per_s_per_gpu'] - 1):+.0f}")
            + T(
                "your workload"
                if th.get("real_data_workload") == "given"
                else "a planning mix (half the tokens are image tokens): give workload: from `moeplan vlm-stats`"
            ),
            highlight=False,
        )
    v = th["validity"]
    c.print(band_line(v), style="" if v.get("validated") else "yellow", highlight=False, markup=False)
    if verbose:
        src = "; ".join([v.get("band_source", ""), *v.get("outside", [])])
        c.print(f"  {src}", style="dim", highlight=False, markup=False)
    if v.get("bias_note"):
        c.print(T("[yellow]known bias[/]: ") + escape(T(v["bias_note"])), highlight=False)
    if th["assumptions"]:
        c.print(T("assumed: ") + T("; ").join(map(T, th["assumptions"])), style="dim", highlight=False, markup=False)


def render_throughput(
    th: dict | None, broken: bool = False, verbose: bool = False, withheld: str | None = None
) -> None:
    """Step time, tokens/s/GPU, TFLOP/s/GPU, MFU and the breakdown (seconds and % of the step), or why
    the step time was not estimated (``withheld``, else ``broken``: the layout breaks a rule)."""
    c = console()
    if th is None:
        why = withheld or ("the layout breaks a rule" if broken else "no global batch size")
        c.print(T("step time: not estimated ({why})").format(why=T(why)), style="dim", highlight=False, markup=False)
        return
    _breakdown(c, th)
    _rates(c, th)
    _caveats(c, th, verbose)
