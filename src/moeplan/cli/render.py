"""Rendering of library results as rich tables (imported lazily by the CLI) and JSON."""

from __future__ import annotations

import contextlib
import json
from typing import Any

from moeplan.units import format_count

_SEV_STYLE = {"error": "bold red", "warning": "yellow", "info": "dim"}


def console(stderr: bool = False):
    import os

    from rich.console import Console

    c = Console(stderr=stderr, highlight=False, soft_wrap=False)
    if not c.is_terminal and "COLUMNS" not in os.environ:
        c = Console(stderr=stderr, highlight=False, soft_wrap=False, width=140)
    return c


@contextlib.contextmanager
def progress_bar(description: str):
    """A transient progress bar on stderr, shown only on a terminal and once the work has taken more
    than a second (so piped and captured output never contains it); yields ``tick(done, total)``."""
    import time

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    t0 = time.perf_counter()
    prog = Progress(
        TextColumn(description),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        transient=True,
        console=console(True),
    )
    state: dict = {}

    interactive = prog.console.is_terminal

    def tick(done: int, total: int) -> None:
        if "task" not in state:
            if not interactive or time.perf_counter() - t0 < 1.0:
                return
            prog.start()
            state["task"] = prog.add_task(description, total=total)
        prog.update(state["task"], completed=done, total=total)

    try:
        yield tick
    finally:
        if "task" in state:
            prog.stop()


def print_json(obj: Any) -> None:
    """Print a JSON document to stdout (plain, deterministic key order as built)."""
    import sys

    sys.stdout.write(json.dumps(obj, indent=2, default=str) + "\n")


def render_check(result) -> None:
    c = console()
    s = result.scenario.summary()
    p = s["parallel"]
    c.print(
        f"[bold]{s['model'] or '(no model)'}[/] on {s['num_gpus'] or '?'} × {s['gpu'] or '?'} "
        f"({s['framework']}, megatron-core {s['megatron_core_version']})"
    )
    c.print("  " + "  ".join(f"{k}={v}" for k, v in p.items()))
    for f in result.findings:
        c.print(f"[{_SEV_STYLE[f.severity]}]{f.severity:<7}[/] [bold]{f.rule_id}[/]")
        c.print(f"        {f.message}", markup=False)
        if f.fix:
            c.print(f"        fix: {f.fix}", markup=False)
    if s["resolved_defaults"]:
        c.print("[dim]defaults used: " + "; ".join(f"{r['key']}={r['value']}" for r in s["resolved_defaults"]) + "[/]")
    style = {"valid": "bold green", "warn": "yellow", "invalid": "bold red", "unsupported": "bold red"}[result.verdict]
    n = {k: sum(f.severity == k for f in result.findings) for k in ("error", "warning", "info")}
    c.print(f"verdict: [{style}]{result.verdict}[/] ({n['error']} errors, {n['warning']} warnings, {n['info']} info)")


def render_models(rows: list[dict]) -> None:
    from rich.table import Table

    t = Table(title="built-in models (counts as each publisher counts them; `moeplan params` for every part)")
    for col in ("model", "kind", "layers", "experts", "total", "active", "published total / active"):
        t.add_column(col, overflow="fold")
    for r in rows:
        pub = (r["published"] or "–") + (" (reconstructed config)" if r["reconstructed_config"] else "")
        t.add_row(
            r["id"],
            r["kind"],
            str(r["num_layers"]),
            r["experts"] or "–",
            format_count(r["total_params_as_published"]),
            format_count(r["active_params_as_published"]),
            pub,
        )
    console().print(t)


def render_gpus(rows: list[dict]) -> None:
    from rich.table import Table

    t = Table(title="built-in GPUs (dense peaks)")
    for col in (
        "id",
        "entry",
        "HBM GiB",
        "(source)",
        "BF16 TF",
        "FP8 TF",
        "FP4 TF",
        "NVLink domain",
        "NVLink GB/s",
        "NIC Gb/s",
        "DeepEP",
        "HybridEP",
    ):
        t.add_column(col)
    for r in rows:
        pk = r["peak_dense_tflops"]
        t.add_row(
            r["id"],
            r["name"],
            f"{r['usable_hbm_gib']:.2f}",
            r["usable_hbm_source"],
            *(str(int(pk[k])) if k in pk else "–" for k in ("bf16", "fp8", "fp4")),
            str(r["scaleup_domain_gpus"]),
            str(r["scaleup_unidir_gb_per_s"] or "?"),
            str(r["nic_gbit_per_s_per_gpu"] or "?"),
            "yes" if r["supports_deepep"] else "no",
            "yes" if r["supports_hybridep"] else "no",
        )
    console().print(t)


def render_params(model_name: str, counts: dict, stages: list[dict] | None) -> None:
    from rich.table import Table

    c = console()
    t = Table(title=f"{model_name}: parameters")
    t.add_column("part")
    t.add_column("count", justify="right")
    for k, v in counts["by_kind"].items():
        t.add_row(k, format_count(v))
    t.add_row("[bold]total[/]", format_count(counts["total"]))
    t.add_row("active per token", format_count(counts["active"]))
    t.add_row("MTP layers", format_count(counts["mtp"]))
    t.add_row("vision tower", format_count(counts["vision"]))
    c.print(t)
    if stages:
        s = Table(title="per rank, by pipeline stage")
        for col in ("stage", "layers", "embedding", "output", "MTP", "dense", "expert", "total"):
            s.add_column(col, justify="right")
        for st in stages:
            s.add_row(
                str(st["stage"]),
                str(st["num_layers"]),
                "yes" if st["embedding"] else "",
                "yes" if st["output_layer"] else "",
                str(st["mtp_layers"] or ""),
                format_count(st["dense"]),
                format_count(st["expert"]),
                format_count(st["total"]),
            )
        c.print(s)


def render_rules(rows: list[dict]) -> None:
    from rich.table import Table

    t = Table(title="rules")
    for col in ("rule_id", "class", "source", "rule"):
        t.add_column(col, overflow="fold")
    for r in rows:
        t.add_row(r["rule_id"], r["kind"], r["source"], r["summary"])
    console().print(t)


def render_gpu_detail(row: dict) -> None:
    from rich.table import Table

    t = Table(title=f"{row['id']} ({row['name']})", show_header=False)
    t.add_column("field")
    t.add_column("value", overflow="fold")
    for k, v in row.items():
        if k == "sources":
            continue
        if isinstance(v, dict):
            v = ", ".join(f"{kk} {vv:g}" for kk, vv in v.items())
        t.add_row(k, "unknown" if v is None else str(v))
    c = console()
    c.print(t)
    c.print("sources:")
    for src in row["sources"]:
        c.print(f"  - {src}", markup=False)


def render_memory(
    scn_summary: dict, mem: dict, errors: list[dict] | None = None, warnings: list[dict] | None = None
) -> None:
    from rich.table import Table

    from moeplan.units import GIB_BYTES

    def g(x):
        return "–" if x is None else f"{x / GIB_BYTES:.2f}"

    c = console()
    p = scn_summary["parallel"]
    c.print(
        f"[bold]{scn_summary['model']}[/] on {scn_summary['num_gpus']} × {scn_summary['gpu'] or '?'}   "
        + "  ".join(f"{k}={v}" for k, v in p.items())
    )
    t = Table(title="peak memory per GPU (GiB)")
    for col in (
        "stage",
        "layers",
        "in-flight µbatches",
        "weights",
        "grads",
        "optimizer",
        "activations",
        "other",
        "total",
    ):
        t.add_column(col, justify="right")
    for st in mem["stages"]:
        t.add_row(
            str(st["stage"]),
            str(st["num_layers"]),
            f"{st['inflight_microbatches']:.2f}",
            g(st["weights_bytes"]),
            g(st["grads_bytes"]),
            g(st["optimizer_bytes"]),
            g(st["activations_bytes"]),
            g(st["other_bytes"]),
            f"[bold]{g(st['total_bytes'])}[/]",
        )
    c.print(t)
    peak = next(st for st in mem["stages"] if st["stage"] == mem["peak_stage"])
    d = Table(title=f"stage {peak['stage']} (the peak), itemised (GiB)")
    d.add_column("category")
    d.add_column("part")
    d.add_column("GiB", justify="right")
    for cat, items in peak["items"].items():
        for name, v in sorted(items.items(), key=lambda kv: -kv[1]):
            if v > 0:
                d.add_row(cat, name, g(v))
    c.print(d)
    if scn_summary["resolved_defaults"]:
        c.print(
            "[dim]defaults used: "
            + "; ".join(f"{r['key']}={r['value']} ({r['reason']})" for r in scn_summary["resolved_defaults"])
            + "[/]",
            markup=True,
        )
    if mem["assumptions"]:
        c.print("[dim]assumed: " + "; ".join(mem["assumptions"]) + "[/]")
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
    if len(peak.get("virtual_chunks", [])) > 1:
        c.print(
            "virtual chunks of the peak stage (layers, activations per microbatch GiB): "
            + ", ".join(
                f"{ch['vp_stage']}: {ch['num_layers']} / {g(ch['activations_per_microbatch_bytes'])}"
                for ch in peak["virtual_chunks"]
            )
        )
    if mem["host_bytes_per_node"]:
        cap = mem["host_capacity_bytes_per_node"]
        c.print(
            f"host memory per node for offloaded optimizer state: {g(mem['host_bytes_per_node'])} GiB"
            + (
                f" of {cap / GIB_BYTES:.0f} GiB"
                if cap
                else " (host memory unknown: set system.gpu_overrides.host_mem_per_gpu_gb)"
            )
        )
    style = {"fits": "bold green", "tight": "yellow", "does-not-fit": "bold red", "unknown": "dim"}[mem["verdict"]]
    head = mem["headroom_fraction"]
    c.print(
        f"peak {g(mem['peak_bytes'])} GiB on stage {mem['peak_stage']} of {g(mem['capacity_bytes'])} GiB usable"
        + (
            (f" ({head * 100:.1f} % headroom)" if head >= 0 else f" (over by {-head * 100:.1f} % of usable HBM)")
            if head is not None
            else ""
        )
        + f" → [{style}]{mem['verdict']}[/]"
    )


def render_throughput(th: dict | None, broken: bool = False) -> None:
    """Step time, tokens/s/GPU, TFLOP/s/GPU, MFU and the breakdown (seconds and % of the step)."""
    from rich.table import Table

    c = console()
    if th is None:
        c.print(
            "[dim]step time: not estimated ("
            + ("the layout breaks a rule" if broken else "needs training.global_batch_size, e.g. --gbs 1024")
            + ")[/]"
        )
        return
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
    names = {"ep_comm": "EP", "cp_comm": "CP", "tp_comm": "TP", "dp_comm": "DP", "fsdp_comm": "FSDP"}
    hid = th.get("hidden_s") or {}
    over = [f"{names[k]} {hid[k]:.3f} s" for k in names if hid.get(k, 0) > 5e-4]
    saved = []
    if over:
        saved.append("overlap hides " + ", ".join(over) + " of communication")
    if hid.get("cuda_graphs", 0) > 5e-4:
        saved.append(f"CUDA graphs save {hid['cuda_graphs']:.3f} s of launch overhead and MoE host syncs")
    if saved:
        c.print("not in the step: " + "; ".join(saved), highlight=False)
    v = th["validity"]
    band = f"±{v['error_band_pct']:.0f} %" if v.get("error_band_pct") == v.get("error_band_pct") else "unknown"
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
    bias = v.get("bias_note")
    if v.get("validated"):
        c.print(f"validated ground: within the measured runs' coverage, expected error {band} ({v['band_source']})")
    else:
        c.print(
            f"[yellow]extrapolated[/]: expected error {band} or worse ({v.get('band_source', '')}); "
            + "; ".join(v.get("outside", []))
        )
    if bias:
        c.print(f"[yellow]known bias[/]: {bias}", highlight=False)
    if th["assumptions"]:
        c.print("[dim]assumed: " + "; ".join(th["assumptions"]) + "[/]")


def render_logs(entries: list[dict]) -> None:
    from rich.markup import escape
    from rich.table import Table

    # one row per statistic, one column per log: readable at 100 columns for a few logs
    t = Table(title="training logs (steady state: median [IQR])")
    t.add_column("", overflow="fold")
    for e in entries:
        t.add_column(escape(e["log"]), overflow="fold")

    def stat(e, k, scale=1.0, fmt=".4g"):
        v = e.get(k)
        if not v:
            return "–"
        if v.get("derived"):
            return escape(f"{v['median'] * scale:{fmt}}*")
        iqr = f"{v['iqr'] * scale:.2g}" if v["iqr"] is not None else "n<4"
        return escape(f"{v['median'] * scale:{fmt}} [{iqr}]")

    def mem(e):
        m = e.get("memory_mb")
        return f"{m['max_allocated'] / 1024:.1f} / {m['max_reserved'] / 1024:.1f}" if m else "–"

    rows = (
        ("iterations (warm-up skipped)", lambda e: f"{e['iterations']} ({e['warmup_skipped']})"),
        ("iteration time s", lambda e: stat(e, "iteration_time_ms", 1e-3, ".3f")),
        ("TFLOP/s/GPU", lambda e: stat(e, "tflops_per_gpu")),
        ("tokens/s/GPU", lambda e: stat(e, "tokens_per_s_per_gpu")),
        ("loss", lambda e: stat(e, "loss") + (f", last {e['loss']['last']:.4g}" if e.get("loss") else "")),
        ("skipped / NaN iterations", lambda e: f"{e.get('skipped_iterations', 0):g} / {e.get('nan_iterations', 0):g}"),
        ("max allocated / reserved GiB", mem),
        ("unreadable lines", lambda e: str(e["unreadable_lines"])),
    )
    for name, cell in rows:
        t.add_row(name, *(cell(e) for e in entries))
    c = console()
    c.print(t)
    if any((e.get("tokens_per_s_per_gpu") or {}).get("derived") for e in entries):
        c.print(
            "* tokens/s/GPU = GBS · seq_length / (median iteration time · GPUs), from the argument dump", markup=False
        )
    for e in entries:
        extra = []
        if e.get("environment"):
            extra.append("environment: " + ", ".join(f"{k}={v}" for k, v in e["environment"].items()))
        if e.get("rank_params"):
            extra.append("params per (tp, pp) rank: " + ", ".join(f"({k}) {v:,}" for k, v in e["rank_params"].items()))
        if e.get("config"):
            lay = e["config"].get("layout", {})
            extra.append("layout from the argument dump: " + ", ".join(f"{k}={v}" for k, v in lay.items()))
        if not e["iterations"]:
            extra.append("WARNING: no Megatron iteration lines found (is this a training log?)")
        for key, n in (e.get("impossible_values_left_out") or {}).items():
            extra.append(f"{n} impossible {key} values left out (zero, negative, non-finite or beyond a week)")
        if e.get("truncated"):
            extra.append("the file ends inside an iteration line (truncated); that line was dropped")
        gn = e.get("grad_norm")
        if gn:
            extra.append(f"grad norm: median {gn['median']:.3g} (min {gn['min']:.3g}, max {gn['max']:.3g})")
        if e.get("grad_norm_nonfinite_iterations"):
            extra.append(f"WARNING: grad norm is NaN/inf in {e['grad_norm_nonfinite_iterations']} logged iterations")
        for x in extra:
            c.print(f"{e['log']}: {x}", markup=False)


def render_oom(rep: dict) -> None:
    c = console()

    from moeplan.diagnose.oom import human_bytes as g

    c.print(
        f"requested {g(rep['requested_bytes'])} on GPU {rep['gpu_index']}: total {g(rep['total_bytes'])}, "
        f"free {g(rep['free_bytes'])}, allocated by PyTorch {g(rep['allocated_bytes'])}, reserved but "
        f"unallocated {g(rep['reserved_unallocated_bytes'])}",
        markup=False,
    )
    c.print(rep["diagnosis"], style="yellow" if rep["fragmentation"] is not False else "bold red", markup=False)
    if rep.get("blame"):
        b = rep["blame"]
        c.print(
            f"memory model: stage {b['stage']} peaks at {g(b['predicted_peak_bytes'])}; largest: "
            + ", ".join(f"{t['category']}/{t['part']} {g(t['bytes'])}" for t in b["largest_terms"]),
            markup=False,
        )
        for n in b.get("notes", []):
            c.print(n, style="yellow" if n.startswith(("WARNING", "the memory model")) else None, markup=False)
        if b.get("fixes"):
            from rich.table import Table

            tab = Table(title="fixes ranked by estimated saving (one change each, memory model)")
            for col in ("change", "peak after", "saving", "fits", "Δ step time (model)"):
                tab.add_column(col, overflow="fold")
            for f in b["fixes"]:
                st = f["step_time_change_rel"]
                tab.add_row(
                    f["change"],
                    g(f["peak_bytes"]),
                    g(f["saving_bytes"]),
                    "yes" if f["fits"] else "no",
                    f"{st * 100:+.1f} %" if st is not None else "–",
                )
            c.print(tab)
        for r in b.get("rejected_fixes", []):
            c.print(f"  rejected: {r['change']} — {r['rule'] or 'input'}: {r['message']}", markup=False)
    for f in rep["fixes"]:
        c.print(f"  fix: {f}", markup=False)


def render_compare(d: dict) -> None:
    from rich.markup import escape
    from rich.table import Table

    c = console()
    t = d["iteration_time_ms"]
    style = {"slower": "red", "faster": "green"}.get(
        t["verdict"], "yellow" if "inconclusive" in t["verdict"] else "bold"
    )
    c.print(
        f"iteration time: A {t['a_median'] / 1e3:.3f} s (n={t['n_a']}) → B {t['b_median'] / 1e3:.3f} s "
        f"(n={t['n_b']}); shift {t['shift_rel'] * 100:+.2f} % (Hodges–Lehmann), "
        f"p = {t['p_value']:.2g} ({t['test']}) → [{style}]{t['verdict']}[/]"
    )
    for k, v in d["memory_mb"].items():
        ch = f" ({v['change_rel'] * 100:+.1f} %)" if v["change_rel"] is not None else ""
        c.print(f"{k.replace('_', ' ')}: A {v['a'] / 1024:.2f} GiB → B {v['b'] / 1024:.2f} GiB{ch}")
    if d["causes"]:
        tab = Table(title="changed keys, ranked by modelled effect (each applied alone to A)")
        for col in ("key", "A", "B", "Δ step time (model)", "Δ peak memory"):
            tab.add_column(col, overflow="fold")
        for cz in d["causes"]:
            st, mm = cz["step_time_change_rel"], cz["peak_memory_change_rel"]
            tab.add_row(
                cz["key"],
                str(cz["a"]),
                str(cz["b"]),
                f"{st * 100:+.1f} %" if st is not None else "n/a (" + cz.get("why_not", "")[:60] + ")",
                f"{mm * 100:+.1f} %" if mm is not None else "–",
            )
        c.print(tab)
    elif d["config_diff"]:
        tab = Table(title="changed keys")
        for col in ("key", "A", "B"):
            tab.add_column(col, overflow="fold")
        for cz in d["config_diff"]:
            tab.add_row(cz["key"], str(cz["a"]), str(cz["b"]))
        c.print(tab)
    for n in d["notes"]:
        c.print("[yellow]note:[/] " + escape(n))
    if d.get("plot"):
        c.print(f"plot written to {d['plot']}", markup=False)


def render_doctor(d: dict) -> None:
    from rich.markup import escape
    from rich.table import Table

    c = console()
    tab = Table(title="environment")
    tab.add_column("item")
    tab.add_column("value", overflow="fold")
    gpus = d["gpus"]
    tab.add_row(
        "GPUs",
        ", ".join(f"{g['name']} ({g['memory_bytes'] / 2**30:.1f} GiB, sm {g['compute_capability']})" for g in gpus)
        if gpus
        else escape(f"none visible ({d['gpu_error'] or 'no GPU found'})"),
    )
    for k, label in (
        ("driver", "driver"),
        ("cuda_driver", "CUDA (driver)"),
        ("torch_cuda", "CUDA (torch build)"),
        ("nccl", "NCCL (torch)"),
    ):
        tab.add_row(label, d[k] or "–")
    for k, v in d["packages"].items():
        tab.add_row(k, v or ("importable, version unknown" if d["modules"].get(k) else "not installed"))
    for k, v in sorted(d["environment"].items()):
        tab.add_row(escape(f"${k}"), escape(v))
    c.print(tab)
    if d["topology"]:
        c.print(d["topology"], markup=False)
    for f in d["findings"]:
        style = {"error": "red", "warning": "yellow"}.get(f["severity"], "cyan")
        text = f"{f['rule']}: {f['message']}" + (f" → {f['fix']}" if f["fix"] else "")
        c.print(f"[{style}]{f['severity']}[/] " + escape(text))


def render_calibration(d: dict) -> None:
    from rich.table import Table

    c = console()
    f = d["fit"]
    c.print(
        f"fitted {f['free_constants']} constant(s) ({f['mode']}) on {f['runs']} runs, releases "
        f"{', '.join(f['releases'])}: median abs error {f['median_abs_pct_error_before']:.1f} % → "
        f"{f['median_abs_pct_error_after']:.1f} %, worst {f['worst_abs_pct_error_before']:.1f} % → "
        f"{f['worst_abs_pct_error_after']:.1f} %",
        markup=False,
    )
    if f["at_bounds"]:
        c.print("[yellow]at a bound (the data push past the plausible range):[/] " + ", ".join(f["at_bounds"]))
    if f["median_abs_pct_error_after"] > 25:
        c.print(
            "[yellow]WARNING: after fitting the median error is still "
            f"{f['median_abs_pct_error_after']:.0f} %: these constants do not explain the runs; "
            "check the runs' scenarios (layout, precision, release) before using the profile[/]"
        )
    if d.get("holdout"):
        t = Table(title="held out (fit on the others, median abs % error on the group)")
        for col in ("group", "runs", "uncalibrated", "calibrated"):
            t.add_column(col)
        for g, v in d["holdout"].items():
            t.add_row(
                g,
                str(v["runs"]),
                f"{v['median_abs_pct_error_uncalibrated']:.1f}",
                f"{v['median_abs_pct_error_calibrated']:.1f}",
            )
        c.print(t)
    if d.get("profile"):
        c.print(f"profile written to {d['profile']}", markup=False)
