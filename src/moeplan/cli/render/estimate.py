"""Tables of ``estimate``: memory per stage (GiB) and step time (seconds, tokens/s/GPU, MFU)."""

from __future__ import annotations

from rich.table import Table

from moeplan.cli.render import console
from moeplan.cli.render.check import render_check
from moeplan.units import GIB_BYTES

_MEM_STYLE = {"fits": "bold green", "tight": "yellow", "does-not-fit": "bold red", "unknown": "dim"}
_COMM = {"ep_comm": "EP", "cp_comm": "CP", "tp_comm": "TP", "dp_comm": "DP", "fsdp_comm": "FSDP"}


def _gib(x: float | None) -> str:
    return "–" if x is None else f"{x / GIB_BYTES:.2f}"


def render_estimate(report) -> None:
    """An :class:`moeplan.api.EstimateReport`: memory and step time, or, for a layout that does not
    fold into the world, the check (every finding)."""
    doc = report.document
    if doc["memory"] is None:
        render_check(report.check)
        return
    chk = doc["check"]
    render_memory(doc["scenario"], doc["memory"], chk["errors"], chk["warnings"])
    render_throughput(doc["throughput"], report.broken)


def _stage_tables(c, mem: dict) -> dict:
    """The per-stage table and the peak stage's itemised table; returns the peak stage."""

    t = Table(title="peak memory per GPU (GiB)")
    cols = (
        "stage",
        "layers",
        "in-flight µbatches",
        "weights",
        "grads",
        "optimizer",
        "activations",
        "other",
        "allocated",
        "reserved",
        "device",
    )
    for col in cols:
        t.add_column(col, justify="right")
    for st in mem["stages"]:
        t.add_row(
            str(st["stage"]),
            str(st["num_layers"]),
            f"{st['inflight_microbatches']:.2f}",
            *(_gib(st[f"{k}_bytes"]) for k in ("weights", "grads", "optimizer", "activations", "other")),
            _gib(st["peak_allocated_bytes"]),
            _gib(st["peak_reserved_bytes"]),
            f"[bold]{_gib(st['device_used_bytes'])}[/]",
        )
    c.print(t)
    c.print(
        "[dim]allocated: torch max_memory_allocated (Megatron's 'max allocated'); reserved: plus the "
        "allocator's fragmentation and CUDA graph pools (max_memory_reserved); device: plus CUDA context, "
        "NCCL and dispatcher buffers (nvidia-smi)[/]",
        markup=True,
    )
    peak = next(st for st in mem["stages"] if st["stage"] == mem["peak_stage"])
    d = Table(title=f"stage {peak['stage']} (the peak), itemised (GiB)")
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
            + "; ".join(f"{e['rule_id']}: {e['message']}" for e in errors),
            markup=True,
        )
    if warnings:
        c.print(
            "[yellow]check warns[/] (details: moeplan check): "
            + "; ".join(f"{w['rule_id']}: {w['message']}" for w in warnings),
            markup=True,
        )


def _memory_footer(c, mem: dict, peak: dict) -> None:
    """Virtual chunks of the peak stage, host memory for offloaded state, and the verdict line."""
    if len(peak.get("virtual_chunks", [])) > 1:
        c.print(
            "virtual chunks of the peak stage (layers, activations per microbatch GiB): "
            + ", ".join(
                f"{ch['vp_stage']}: {ch['num_layers']} / {_gib(ch['activations_per_microbatch_bytes'])}"
                for ch in peak["virtual_chunks"]
            )
        )
    if mem["host_bytes_per_node"]:
        cap = mem["host_capacity_bytes_per_node"]
        c.print(
            f"host memory per node for offloaded optimizer state: {_gib(mem['host_bytes_per_node'])} GiB"
            + (
                f" of {cap / GIB_BYTES:.0f} GiB"
                if cap
                else " (host memory unknown: set system.gpu_overrides.host_mem_per_gpu_gb)"
            )
        )
    head = mem["headroom_fraction"]
    c.print(
        f"peak device use {_gib(mem['peak_bytes'])} GiB (allocated {_gib(mem['peak_allocated_bytes'])}, "
        f"reserved {_gib(mem['peak_reserved_bytes'])}) on stage {mem['peak_stage']} of {_gib(mem['capacity_bytes'])} GiB usable"
        + (
            (f" ({head * 100:.1f} % headroom)" if head >= 0 else f" (over by {-head * 100:.1f} % of usable HBM)")
            if head is not None
            else ""
        )
        + f" → [{_MEM_STYLE[mem['verdict']]}]{mem['verdict']}[/]"
    )
    if mem.get("error_band_pct") is not None and mem.get("margin_bytes") is not None:
        c.print(
            f"[dim]margin {_gib(mem['margin_bytes'])} GiB; the memory model's band ±{mem['error_band_pct']:.0f} % "
            "(allocated vs measured runs, docs/memory_accuracy.md)[/]",
            markup=True,
        )


def render_memory(
    scn_summary: dict, mem: dict, errors: list[dict] | None = None, warnings: list[dict] | None = None
) -> None:
    """Peak memory per GPU per stage (GiB), the peak stage itemised, defaults and assumptions used,
    the rules the layout breaks or warns about, and the verdict against the usable HBM."""
    c = console()
    p = scn_summary["parallel"]
    c.print(
        f"[bold]{scn_summary['model']}[/] on {scn_summary['num_gpus']} × {scn_summary['gpu'] or '?'}   "
        + "  ".join(f"{k}={v}" for k, v in p.items())
    )
    peak = _stage_tables(c, mem)
    if scn_summary["resolved_defaults"]:
        c.print(
            "[dim]defaults used: "
            + "; ".join(f"{r['key']}={r['value']} ({r['reason']})" for r in scn_summary["resolved_defaults"])
            + "[/]",
            markup=True,
        )
    if mem["assumptions"]:
        c.print("[dim]assumed: " + "; ".join(mem["assumptions"]) + "[/]")
    _findings_lines(c, errors, warnings)
    _memory_footer(c, mem, peak)


def _breakdown(c, th: dict) -> None:
    """The step-time breakdown table (seconds, % of the step) and what overlap / CUDA graphs hide."""

    step = th["step_time_s"]
    n_stages = len(th.get("stage_microbatch_s") or [])
    where = f"; parts of stage {th.get('critical_stage', 0)}, the slowest of {n_stages}" if n_stages > 1 else ""
    t = Table(title=f"step time {step:.3f} s, {th['num_microbatches']} microbatches{where}")
    t.add_column("part")
    t.add_column("s", justify="right")
    t.add_column("% of step", justify="right")
    for name, v in th["breakdown_s"].items():
        if v > 0:
            t.add_row(name, f"{v:.4f}", f"{100 * v / step:.1f}")
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


def _caveats(c, th: dict) -> None:
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
    band = f"±{v['error_band_pct']:.0f} %" if v.get("error_band_pct") == v.get("error_band_pct") else "unknown"
    if v.get("validated"):
        c.print(f"validated ground: within the measured runs' coverage, expected error {band} ({v['band_source']})")
    else:
        c.print(
            f"[yellow]extrapolated[/]: expected error {band} or worse ({v.get('band_source', '')}); "
            + "; ".join(v.get("outside", []))
        )
    if v.get("bias_note"):
        c.print(f"[yellow]known bias[/]: {v['bias_note']}", highlight=False)
    if th["assumptions"]:
        c.print("[dim]assumed: " + "; ".join(th["assumptions"]) + "[/]")


def render_throughput(th: dict | None, broken: bool = False) -> None:
    """Step time, tokens/s/GPU, TFLOP/s/GPU, MFU and the breakdown (seconds and % of the step), or why
    the step time was not estimated (``broken``: the layout breaks a rule; else no batch size)."""
    c = console()
    if th is None:
        c.print(
            "[dim]step time: not estimated ("
            + ("the layout breaks a rule" if broken else "needs training.global_batch_size, e.g. --gbs 1024")
            + ")[/]"
        )
        return
    _breakdown(c, th)
    _rates(c, th)
    _caveats(c, th)
