"""Tables of ``estimate``: memory per stage (GiB) and step time (seconds, tokens/s/GPU, MFU)."""

from __future__ import annotations

from rich import box
from rich.markup import escape
from rich.measure import Measurement
from rich.table import Table

from moeplan.cli.render import console
from moeplan.cli.render.check import parallel_text, render_check, yaml_value
from moeplan.cli.render.text import PART_NAMES, assumes_line, band_line
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
    render_throughput(doc["throughput"], report.broken, verbose, doc.get("withheld"))


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
    for narrow in (False, True):  # full headers where they fit, else short ones with a legend
        t = Table(title="peak memory per GPU (GiB)", box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 1, 0, 0))
        for full, short in _COLS:
            t.add_column(short if narrow else full, justify="right", no_wrap=True)
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
    short = "µb: in-flight microbatches; optim, activ: optimizer state, activations; " if narrow else ""
    c.print(
        f"{short}{'alloc' if narrow else 'allocated'}: torch max_memory_allocated (Megatron's 'max allocated'); "
        f"{'resv' if narrow else 'reserved'}: plus the allocator's fragmentation and CUDA graph pools "
        "(max_memory_reserved); device: plus CUDA context, NCCL and dispatcher buffers (nvidia-smi)",
        style="dim",
        highlight=False,
        markup=False,
    )


def _peak_table(c, mem: dict) -> dict:
    peak = next(st for st in mem["stages"] if st["stage"] == mem["peak_stage"])
    d = Table(title=f"stage {peak['stage']} (the peak), itemised (GiB)", box=box.SIMPLE_HEAD)
    d.add_column("category")
    d.add_column("part")
    d.add_column("GiB", justify="right")
    for cat, items in peak["items"].items():
        for name, v in sorted(items.items(), key=lambda kv: -kv[1]):
            if v > 0:
                d.add_row(cat, name, _gib(v))
    c.print(d)
    return peak


def _findings_lines(c, errors: list[dict] | None, warnings: list[dict] | None) -> None:
    if errors:
        c.print(
            f"[bold red]the layout breaks {len(errors)} rule(s)[/] (details: moeplan check): "
            + escape("; ".join(f"{e['rule_id']}: {e['message']}" for e in errors)),
            highlight=False,
        )
    if warnings:
        c.print(
            "[yellow]check warns[/] (details: moeplan check): "
            + escape("; ".join(f"{w['rule_id']}: {w['message']}" for w in warnings)),
            highlight=False,
        )


def _reserved_text(mem: dict) -> str:
    """`` (HBM H − R reserved by a colocated engine)`` when ``system.reserved_gib`` is stated."""
    reserved = mem.get("reserved_bytes") or 0
    if not reserved or mem.get("usable_hbm_bytes") is None:
        return ""
    return f" ({_gib(mem['usable_hbm_bytes'])} HBM − {_gib(reserved)} reserved by a colocated engine)"


def _host_line(c, mem: dict, peak: dict) -> None:
    """Host memory per rank (its parts, on the peak stage) and per node against the node's RAM."""
    cap = mem["host_capacity_bytes_per_node"]
    parts = ", ".join(f"{n} {_gib(v)}" for n, v in (peak.get("host_items") or {}).items() if v)
    over = cap is not None and mem["host_bytes_per_node"] > cap
    c.print(
        f"host memory per rank {_gib(mem.get('host_bytes_per_rank'))} GiB"
        + (f" ({parts})" if parts else "")
        + f"; per node {_gib(mem['host_bytes_per_node'])} GiB"
        + (
            f" of {cap / GIB_BYTES:.0f} GiB" + (" [bold red]— exceeds the node's host memory[/]" if over else "")
            if cap
            else " (host memory unknown: set system.host_memory_gib)"
        ),
        highlight=False,
    )


def _memory_footer(c, mem: dict, peak: dict, verbose: bool = False) -> None:
    """Virtual chunks of the peak stage (``verbose``), host memory for offloaded state, and the
    verdict line."""
    if verbose and len(peak.get("virtual_chunks", [])) > 1:
        c.print(
            "virtual chunks of the peak stage (layers, activations per microbatch GiB): "
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
            f"LoRA dim {pf['dim']} (alpha {pf['alpha']:g}) on {', '.join(pf['target_modules'])}: "
            f"{pf['adapter_params'] / 1e6:,.2f} M adapter parameters ({pf['adapter_params_per_rank'] / 1e6:,.2f} M on "
            "the busiest rank); the base is frozen (no gradients or optimizer state; backward without weight gradients)",
            highlight=False,
        )
    head = mem["headroom_fraction"]
    c.print(
        f"peak device use {_gib(mem['peak_bytes'])} GiB (allocated {_gib(mem['peak_allocated_bytes'])}, "
        f"reserved {_gib(mem['peak_reserved_bytes'])}) on stage {mem['peak_stage']} of {_gib(mem['capacity_bytes'])} GiB usable"
        + _reserved_text(mem)
        + (
            (f" ({head * 100:.1f} % headroom)" if head >= 0 else f" (over by {-head * 100:.1f} % of usable HBM)")
            if head is not None
            else ""
        )
        + (" — host memory exceeded" if mem.get("host_fits") is False else "")
        + f" → [{_MEM_STYLE[mem['verdict']]}]{mem['verdict']}[/]"
    )
    if mem.get("error_band_pct") is not None and mem.get("margin_bytes") is not None:
        c.print(
            f"[dim]margin {_gib(mem['margin_bytes'])} GiB; the memory model's band ±{mem['error_band_pct']:.0f} % "
            "(allocated vs measured runs, docs/memory_accuracy.md)[/]",
            markup=True,
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
            f"{len(resolved)} keys not stated ({fills} recipe fills, {len(resolved) - fills} framework defaults): "
            + ", ".join(f"{r['key']}={yaml_value(r['value'])}" for r in resolved[:6])
            + (", ... (--verbose, or moeplan check, lists each with its reason)" if len(resolved) > 6 else "")
        )
    c.print(f"defaults used: {text}", style="dim", highlight=False, markup=False)


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
        f"[bold]{scn_summary['model']}[/] on {scn_summary['num_gpus']} × {scn_summary['gpu'] or '?'}   "
        + parallel_text(scn_summary["parallel"]),
        highlight=False,
    )
    if assumes:
        c.print(assumes_line(assumes, verbose), style="dim", highlight=False, markup=False)
    if fixed:
        c.print(f"[yellow]estimated with the check's fix[/]: {escape(fixed['text'])}", highlight=False)
    peak = _stage_tables(c, mem)
    _defaults_line(c, scn_summary["resolved_defaults"], verbose)
    if mem["assumptions"]:
        c.print("assumed: " + "; ".join(mem["assumptions"]), style="dim", highlight=False, markup=False)
    _findings_lines(c, errors, warnings)
    _memory_footer(c, mem, peak, verbose)


def _breakdown(c, th: dict) -> None:
    """The step-time breakdown table (seconds, % of the step) and what overlap / CUDA graphs hide."""

    step = th["step_time_s"]
    n_stages = len(th.get("stage_microbatch_s") or [])
    where = f"; parts of stage {th.get('critical_stage', 0)}, the slowest of {n_stages}" if n_stages > 1 else ""
    c.print(f"[bold]step time {step:.3f} s[/], {th['num_microbatches']} microbatches{where}", highlight=False)
    t = Table(box=box.SIMPLE_HEAD)
    t.add_column("part")
    t.add_column("s", justify="right")
    t.add_column("% of step", justify="right")
    for name, v in th["breakdown_s"].items():
        if v > 0:
            t.add_row(PART_NAMES.get(name, name.replace("_", " ")), f"{v:.4f}", f"{100 * v / step:.1f}")
    c.print(t)
    hid = th.get("hidden_s") or {}
    over = [f"{_COMM[k]} {hid[k]:.3f} s" for k in _COMM if hid.get(k, 0) > 5e-4]
    saved = []
    if over:
        saved.append("overlap hides " + ", ".join(over) + " of communication")
    if hid.get("cuda_graphs", 0) > 5e-4:
        saved.append(f"CUDA graphs save {hid['cuda_graphs']:.3f} s of launch overhead and MoE host syncs")
    if saved:
        c.print("not in the step: " + "; ".join(saved), highlight=False)


def _rates(c, th: dict) -> None:
    """tokens/s/GPU, TFLOP/s, MFU and the release; useful tokens; pipeline balance with a vision tower."""
    c.print(
        f"[bold]{th['tokens_per_s_per_gpu']:,.0f} tokens/s/GPU[/], {th['model_tflops_per_gpu']:.0f} model "
        f"TFLOP/s/GPU, MFU {100 * th['mfu']:.1f} % of the dense BF16 peak "
        f"({100 * th['mfu_precision_peak']:.1f} % of the training precision's peak); "
        f"software efficiency of container {th['release']} (step time ÷ {th.get('release_factor', 1.0):.3f}, "
        "fitted per release against the newest)"
    )
    if (
        th.get("useful_tokens_per_s_per_gpu") is not None
        and abs(th["useful_tokens_per_s_per_gpu"] - th["tokens_per_s_per_gpu"]) > 1e-6
    ):
        share = th["useful_tokens_per_s_per_gpu"] / th["tokens_per_s_per_gpu"]
        c.print(
            f"useful (non-padding) tokens/s/GPU: {th['useful_tokens_per_s_per_gpu']:,.0f} — the TFLOP/s and MFU above "
            f"count padding tokens too (as Megatron logs them); on useful tokens alone MFU {100 * th['mfu'] * share:.1f} %"
        )
    st = th.get("stage_microbatch_s") or []
    if len(st) > 1 and th["breakdown_s"].get("vision_encoder"):
        rest = max(st[1:])
        c.print(
            f"pipeline balance: stage 0 (with the vision tower) {st[0] * 1e3:,.0f} ms per microbatch vs "
            f"{rest * 1e3:,.0f} ms on the slowest other stage ({100 * (st[0] / rest - 1):+.0f} %): "
            "move decoder layers off stage 0 (pipeline_model_parallel_layout) to balance",
            highlight=False,
        )


def _caveats(c, th: dict, verbose: bool = False) -> None:
    """Mock-data VLM figure, the validity band, a known bias and the assumptions."""
    if th.get("mock_data_tokens_per_s_per_gpu") is not None:
        mock = th["mock_data_tokens_per_s_per_gpu"]
        c.print(
            f"[yellow]VLM[/]: with mock (image-free) data the same layout shows {mock:,.0f} tokens/s/GPU "
            f"({100 * (mock / th['tokens_per_s_per_gpu'] - 1):+.0f} %) — not a real-data figure; the figure above uses "
            + (
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
        c.print(f"[yellow]known bias[/]: {escape(v['bias_note'])}", highlight=False)
    if th["assumptions"]:
        c.print("assumed: " + "; ".join(th["assumptions"]), style="dim", highlight=False, markup=False)


def render_throughput(
    th: dict | None, broken: bool = False, verbose: bool = False, withheld: str | None = None
) -> None:
    """Step time, tokens/s/GPU, TFLOP/s/GPU, MFU and the breakdown (seconds and % of the step), or why
    the step time was not estimated (``withheld``, else ``broken``: the layout breaks a rule)."""
    c = console()
    if th is None:
        why = withheld or ("the layout breaks a rule" if broken else "no global batch size")
        c.print(f"step time: not estimated ({why})", style="dim", highlight=False, markup=False)
        return
    _breakdown(c, th)
    _rates(c, th)
    _caveats(c, th, verbose)
