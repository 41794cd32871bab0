"""Tables of ``log``, ``oom``, ``compare``, ``doctor`` and ``calibrate``."""

from __future__ import annotations

from rich import box
from rich.markup import escape
from rich.padding import Padding
from rich.table import Table

from moeplan.cli.render import T, console, rule_text
from moeplan.cli.render.check_view import yaml_value
from moeplan.cli.render.verdict import verdict_text
from moeplan.diagnose.oom import human_bytes
from moeplan.i18n.messages import msg


def render_logs(entries: list[dict]) -> None:
    """Training-log statistics (:func:`moeplan.api.log_report`): one column per log, then per-log notes."""

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
        if not m:
            return "–"
        dev = f" / {m['device_used'] / 1024:.1f}" if "device_used" in m else " / –"
        return f"{m['max_allocated'] / 1024:.1f} / {m['max_reserved'] / 1024:.1f}{dev}"

    rows = (
        ("iterations (warm-up skipped)", lambda e: f"{e['iterations']} ({e['warmup_skipped']})"),
        ("iteration time s", lambda e: stat(e, "iteration_time_ms", 1e-3, ".3f")),
        ("TFLOP/s/GPU", lambda e: stat(e, "tflops_per_gpu")),
        ("tokens/s/GPU", lambda e: stat(e, "tokens_per_s_per_gpu")),
        ("loss", lambda e: stat(e, "loss") + (f", last {e['loss']['last']:.4g}" if e.get("loss") else "")),
        ("skipped / NaN iterations", lambda e: f"{e.get('skipped_iterations', 0):g} / {e.get('nan_iterations', 0):g}"),
        ("max allocated / reserved / device GiB", mem),
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
    """An OOM document (:func:`moeplan.api.oom_report`): the message's figures, the diagnosis, the blame and fixes."""
    c = console()
    g = human_bytes
    c.print(
        T(
            "requested {req} on GPU {gpu}: total {total}, free {free}, allocated by PyTorch {alloc}, "
            "reserved but unallocated {resv}"
        ).format(
            req=g(rep["requested_bytes"]),
            gpu=rep["gpu_index"],
            total=g(rep["total_bytes"]),
            free=g(rep["free_bytes"]),
            alloc=g(rep["allocated_bytes"]),
            resv=g(rep["reserved_unallocated_bytes"]),
        ),
        markup=False,
    )
    style = "yellow" if rep["fragmentation"] is not False else "bold red"
    c.print(T(rep["diagnosis"]), style=style, markup=False)
    if rep.get("blame"):
        _oom_blame(c, rep["blame"])
    for f in rep["fixes"]:
        c.print(Padding(T("fix: ") + T(f), (0, 0, 0, 2)), markup=False)


def _oom_fixes_table(c, fixes: list[dict]) -> None:
    """The ranked fixes; at 80 columns every figure stays on its line: GiB in the headers, no vertical rules."""
    tab = Table(
        title=T("fixes ranked by estimated saving (one change each, memory model)"),
        box=box.SIMPLE_HEAD,
        collapse_padding=True,
    )
    tab.add_column(T("change"), overflow="fold", ratio=1)
    for col in ("peak GiB", "saves GiB", "fits", "Δ step"):
        tab.add_column(T(col), justify="right", no_wrap=True)
    for f in fixes:
        st = f["step_time_change_rel"]
        tab.add_row(
            escape(T(f["change"]) + (T(" [numerics]") if f.get("changes_numerics") else "")),
            f"{f['peak_bytes'] / 2**30:.2f}",
            f"{f['saving_bytes'] / 2**30:.2f}",
            T("yes" if f["fits"] else "tight" if f.get("verdict") == "tight" else "no"),
            f"{st * 100:+.1f} %" if st is not None else "–",
        )
    c.print(tab)
    if any(f.get("changes_numerics") for f in fixes):
        c.print(T("[numerics]: changes the training numerics, not only the layout"), style="dim", markup=False)


def _oom_blame(c, b: dict) -> None:
    """The memory model's view of an OOM: the peak stage and its largest terms, notes, the ranked fixes
    and the fixes a rule rejects."""
    g = human_bytes
    c.print(
        T("memory model: stage {stage} peaks at {peak}; largest: ").format(
            stage=b["stage"], peak=g(b["predicted_peak_bytes"])
        )
        + ", ".join(f"{t['category']}/{t['part']} {g(t['bytes'])}" for t in b["largest_terms"]),
        markup=False,
    )
    if b.get("verdict"):
        mem = {
            **b,
            "peak_bytes": b["predicted_peak_bytes"],
            "error_band_pct": (b.get("verdict_band") or {}).get("band_pct"),
        }
        c.print(T(msg("model_verdict.memory_verdict")) + T(": ") + verdict_text(mem), markup=False)
    for n in b.get("notes", []):
        c.print(T(n), style="yellow" if n.startswith(("WARNING", "the memory model")) else None, markup=False)
    if b.get("fixes"):
        _oom_fixes_table(c, b["fixes"])
    for r in b.get("rejected_fixes", []):
        why = f"{r['rule']}: {rule_text(r['rule'], r['message'])}" if r["rule"] else T(r["message"])
        c.print(Padding(T("rejected: ") + f"{T(r['change'])} — {why}", (0, 0, 0, 2)), markup=False)


def render_compare(d: dict) -> None:
    """A comparison (:func:`moeplan.api.compare_report`): the time shift and its test, memory, ranked causes, notes."""

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
        # at 80 columns the key and both figures stay whole: the values fold, a rejected change is
        # marked ✗ in the table and explained under it
        tab = Table(title="changed keys, ranked by modelled effect (each applied alone to A)", box=box.SIMPLE_HEAD)
        tab.add_column("key", no_wrap=True)
        tab.add_column("A", overflow="fold")
        tab.add_column("B", overflow="fold")
        tab.add_column("Δ step", justify="right", no_wrap=True)
        tab.add_column("Δ peak", justify="right", no_wrap=True)
        for cz in d["causes"]:
            st, mm = cz["step_time_change_rel"], cz["peak_memory_change_rel"]
            rej = cz.get("rejected_by") or []
            tab.add_row(
                cz["key"] + (" ✗" if rej else ""),
                yaml_value(cz["a"]),
                yaml_value(cz["b"]),
                f"{st * 100:+.1f} %" if st is not None else "n/a",
                f"{mm * 100:+.1f} %" if mm is not None else "–",
            )
        c.print(tab)
        for cz in d["causes"]:
            for r in cz.get("rejected_by") or []:
                c.print(f"[red]check rejects[/] {escape(cz['key'])} = {escape(yaml_value(cz['b']))}: {escape(r)}")
        for cz in d["causes"]:
            if cz["step_time_change_rel"] is None:
                c.print(
                    f"n/a: {escape(cz['key'])} = {escape(yaml_value(cz['b']))} alone: {escape(cz.get('why_not', ''))}"
                )
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
    """The environment (:func:`moeplan.api.doctor_report`) as a table, then each finding."""

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
        text += f" [{f['source']}]" if f.get("source") else ""  # a deployment fact's source
        c.print(f"[{style}]{f['severity']}[/] " + escape(text))


def render_calibration(d: dict) -> None:
    """A fit (:func:`moeplan.api.calibrate_report`): errors before / after, bounds hit, hold-out groups."""

    c = console()
    f = d["fit"]
    c.print(
        f"fitted {f['free_constants']} constant(s) ({f['mode']}) on {f['runs']} runs, releases "
        f"{', '.join(f['releases'])}: median abs error {f['median_abs_pct_error_before']:.1f} % → "
        f"{f['median_abs_pct_error_after']:.1f} %, worst {f['worst_abs_pct_error_before']:.1f} % → "
        f"{f['worst_abs_pct_error_after']:.1f} %",
        markup=False,
    )
    if d.get("mismatched_logs"):
        c.print(
            T(msg("cli.fitted_to_other_layout_logs", n=len(d["mismatched_logs"]))),
            style="yellow",
            markup=False,
        )
        for line in d["mismatched_logs"]:
            c.print(f"  {line}", markup=False)
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


def render_memory_calibration(d: dict) -> None:
    """Memory learned from logs (:func:`moeplan.api.calibrate_memory_report`): measured against
    predicted per log, before and after, and the learned ``overheads:`` values."""
    c = console()
    t = Table(title="memory per log, GiB: measured / moeplan before → after (allocated error)")
    for col in ("log", "allocated", "reserved", "device", "allocated error"):
        t.add_column(col, overflow="fold")

    def cell(b: dict, a: dict, k: str) -> str:
        m = b["measured_gib"][k]
        return "–" if m is None else f"{m:.1f} / {b['predicted_gib'][k]:.1f} → {a['predicted_gib'][k]:.1f}"

    for b, a in zip(d["before"], d["after"], strict=True):
        err = "–" if b["allocated_error_pct"] is None else f"{b['allocated_error_pct']:+.1f} %"
        t.add_row(escape(b["source"]), cell(b, a, "allocated"), cell(b, a, "reserved"), cell(b, a, "device"), err)
    c.print(t)
    if not d["overheads"]:
        c.print("nothing learned: the logs print no reserved or device figure", markup=False)
    for k, v in d["overheads"].items():
        c.print(f"learned {k}: {v} (from {d['votes'][k]} log(s))", markup=False)
    if d.get("profile"):
        c.print(f"overheads written to {d['profile']} (merge its `overheads:` into the scenario)", markup=False)
