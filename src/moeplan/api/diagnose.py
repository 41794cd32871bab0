"""Reports of ``log``, ``compare``, ``oom`` and ``doctor``: what training logs, OOM messages and this
machine say, weighed against the models.

The diagnosis modules are imported inside the functions that use them (``moeplan --help`` stays fast).
"""

from __future__ import annotations

from pathlib import Path

from moeplan.api.side_inputs import load_step_constants
from moeplan.diagnose.compare import compare_runs, model_mismatch
from moeplan.diagnose.doctor import check_environment, collect_environment, deployment_check, known_issue_findings
from moeplan.diagnose.fixes import rank_memory_fixes
from moeplan.diagnose.oom import parse_oom, reconcile_with_model
from moeplan.diagnose.plot import plot_runs
from moeplan.errors import InputError
from moeplan.i18n.messages import msg
from moeplan.inputs.loading import deep_merge, load_scenario_file
from moeplan.io.run_logs import derive_tokens_per_s, log_config, read_log, read_text_file, stats_config
from moeplan.io.write import check_writable
from moeplan.model.memory import estimate_memory
from moeplan.resolve.load import load_scenario
from moeplan.rules import validate

#: the largest memory terms named by the OOM blame
BLAME_TERMS = 3


def log_report(logs: list[Path]) -> list[dict]:
    """Steady-state statistics of training logs, one entry per log in order: ``log`` (path), the
    :meth:`LogStats.summary` figures (iteration time ms, TFLOP/s/GPU, tokens/s/GPU, loss, grad norm,
    skipped / NaN iterations, memory MB; median and IQR after warm-up; tokens/s/GPU derived from the
    argument dump as GBS · seq / (iteration time · GPUs) when the log prints none, marked
    ``derived``), ``config`` (the scenario mapping read from the argument dump, or None) and, with a
    dump, ``config_notes``.

    Raises:
        InputError: a path that is not a readable file (the first one).
    """

    out = []
    for path in logs:
        st = read_log(path)  # one streaming pass: memory bounded by the statistics, not the file
        config, notes = stats_config(st)
        entry = {"log": str(path), **derive_tokens_per_s(st.summary(), config), "config": config}
        if config is not None:
            entry["config_notes"] = notes
        out.append(entry)
    return out


def _mismatch_warnings(base: dict, dumps: list[dict[str, str]]) -> list[str]:
    """A warning per log (B's first) whose argument dump disagrees with the scenario's model."""

    m = load_scenario(base).model
    out: list[str] = []
    for name, t in (("A", dumps[0]), ("B", dumps[1])):
        diff = model_mismatch(t, m) if m is not None else []
        if diff:
            out.insert(
                0,
                f"WARNING: log {name}'s argument dump disagrees with the --scenario model ("
                + "; ".join(diff)
                + "): the causes are ranked for the scenario's model, not the run's",
            )
    return out


def plot_labels(log_a: Path, log_b: Path) -> tuple[str, str]:
    """Legend labels of a comparison plot: ``A: name`` and ``B: name`` with the file names only (the
    parent folder too when the names are the same), never absolute paths."""
    a, b = Path(log_a), Path(log_b)
    na, nb = (a.name, b.name) if a.name != b.name else (f"{a.parent.name}/{a.name}", f"{b.parent.name}/{b.name}")
    return f"A: {na}", f"B: {nb}"


def compare_report(
    log_a: Path,
    log_b: Path,
    scenario: Path | None = None,
    alpha: float = 0.01,
    min_effect: float = 0.005,
    plot: Path | None = None,
    calibration: Path | None = None,
) -> dict:
    """Is run B slower or heavier than run A beyond noise (Mann-Whitney U on steady-state iteration
    times), what changed between their argument dumps, and which change the models blame.

    Args:
        log_a, log_b: training logs of the baseline (A) and the run to judge (B).
        scenario: model / GPU / world size the logs lack (needed to rank causes).
        alpha: significance level; min_effect: smallest relative change reported (0.005 = 0.5 %).
        plot: also write iteration time and memory over steps here (.png, .svg or .pdf).
        calibration: a profile from ``moeplan calibrate`` for the modelled step times.

    Returns:
        ``{"a", "b": paths, "iteration_time_ms": {a_median, b_median, shift_ms, shift_rel, n_a, n_b,
        test, z, p_value, verdict (slower | faster | no change beyond noise | inconclusive: ...)},
        "memory_mb": {max_allocated/max_reserved: {a, b, change_rel}}, "config_diff", "causes"
        (each key alone applied to A: step_time_change_rel, peak_memory_change_rel), "notes",
        "plot": path or None}``.

    Raises:
        InputError: a bad plot path, unreadable logs, too few iterations, a broken scenario or
            profile, or matplotlib missing for the plot.
    """

    if plot is not None and plot.suffix.lower() not in (".png", ".svg", ".pdf"):
        raise InputError("--plot", str(plot), "a file ending in .png, .svg or .pdf")
    if plot is not None:
        check_writable(plot, "--plot", inputs=(log_a, log_b, scenario, calibration))
    stats = [read_log(log_a), read_log(log_b)]  # streamed: the texts are never held
    configs = [stats_config(st)[0] for st in stats]
    base = load_scenario_file(scenario) if scenario is not None else None
    if base is not None:
        load_scenario(base)  # a broken --scenario is the user's mistake: refused here, not a note later
    consts = load_step_constants(calibration)
    cmp = compare_runs(stats[0], stats[1], configs[0], configs[1], base, alpha, min_effect, consts)
    if base is not None:
        cmp.notes[:0] = _mismatch_warnings(base, [st.args for st in stats])
    cmp.notes += health_notes([st.summary() for st in stats])
    if consts is not None:
        cmp.notes.append(f"step times from the calibration profile {calibration}")
    if plot is not None:
        plot_runs(
            stats[0], stats[1], plot, labels=plot_labels(log_a, log_b), inputs=(log_a, log_b, scenario, calibration)
        )
    return {"a": str(log_a), "b": str(log_b), **cmp.to_dict(), "plot": str(plot) if plot else None}


def health_notes(summaries: list[dict]) -> list[str]:
    """What the iteration times do not show, per log (A, B; each a ``read_log(...).summary()``): the
    iterations Megatron skipped (``number of skipped iterations``, summed over the log) and how many of them
    had a NaN or inf loss or gradient (``number of nan iterations``: Megatron-LM's ``training_log`` counts
    those among the skipped ones), and grad norms that were not finite. One note per log that has any."""
    out = []
    for name, sm in zip("AB", summaries, strict=False):
        skipped, nan = sm.get("skipped_iterations") or 0, sm.get("nan_iterations") or 0
        parts = []
        if skipped and nan <= skipped:
            parts.append(f"{skipped:.0f} skipped iteration(s)" + (f", {nan:.0f} of them NaN" if nan else ""))
        elif skipped or nan:  # counters a Megatron log would not give: both as read
            parts += [f"{skipped:.0f} skipped iteration(s)", f"{nan:.0f} NaN iteration(s)"]
        bad = sm.get("grad_norm_nonfinite_iterations") or 0
        if bad:
            parts.append(f"{bad:.0f} non-finite grad norm(s)")
        if parts:
            out.append(f"{name}: Megatron reported {', '.join(parts)} (moeplan log lists them)")
    return out


def _oom_text(source: str) -> str:
    """The OOM message: the file ``source`` names, or ``source`` itself.

    Raises:
        InputError: neither an existing file nor text that looks like an OOM message.
    """
    try:
        is_path = "\n" not in source and len(source) < 4096 and Path(source).exists()
    except (OSError, ValueError):
        is_path = False  # too long for a path, NUL byte, ...: the argument is the message
    if is_path:
        return read_text_file(Path(source), "oom")
    if "Tried to allocate" not in source and not any(ch.isspace() for ch in source):
        raise InputError(
            "oom",
            source,
            "an existing log file, or the text of a CUDA out-of-memory message",
            sentence=f"{source!r} is neither an existing file nor a CUDA out-of-memory message "
            "(one reads 'CUDA out of memory. Tried to allocate ...')",
        )
    return source


def _run_scenario(text: str, scenario: Path) -> tuple[dict, list[str]]:
    """The run's scenario mapping: ``scenario`` with the log's argument dump (when it holds one) laid
    over it, and notes on where it came from and on a model that disagrees with the dump."""

    data = load_scenario_file(scenario)
    notes: list[str] = []
    cfg, _ = log_config(text)  # the run's own argument dump, when the OOM log holds one
    if cfg is not None:
        data = deep_merge(data, cfg)
        notes.append("layout and training from the log's argument dump, over --scenario")
    s_run = load_scenario(data)
    if s_run.model is not None and (diff := model_mismatch(text, s_run.model)):
        notes.append("WARNING: the log's argument dump disagrees with the --scenario model (" + "; ".join(diff) + ")")
    return data, notes


def _like_for_like(rep, peak) -> list[str]:
    """The message's figures against the memory model's, like for like: what the process had in use
    including non-PyTorch memory against the predicted device use (``nvidia-smi``); PyTorch's
    allocated memory plus the request against the predicted peak allocated (torch
    ``max_memory_allocated``); allocated + reserved-but-unallocated against the predicted reserve."""
    gib = 2**30
    pairs = []
    if rep.process_in_use_bytes is not None:
        pairs.append(("process", rep.process_in_use_bytes, peak.device_used_bytes))
    if rep.allocated_bytes is not None:
        pairs.append(("allocated", rep.allocated_bytes, peak.peak_allocated_bytes))
        held = rep.allocated_bytes + (rep.reserved_unallocated_bytes or 0)
        pairs.append(("reserved", held, peak.peak_reserved_bytes))
    notes: list[str] = []
    for which, have, predicted in pairs:
        need = have + rep.requested_bytes
        if need > predicted * 1.05:
            h, a, p, u = have / gib, rep.requested_bytes / gib, predicted / gib, (need - predicted) / gib
            if which == "process":
                notes.append(msg("api.oom_underestimate_process", have=h, asked=a, predicted=p, under=u))
            elif which == "allocated":
                notes.append(msg("api.oom_underestimate_allocated", have=h, asked=a, predicted=p, under=u))
            else:
                notes.append(msg("api.oom_underestimate_reserved", have=h, asked=a, predicted=p, under=u))
    return notes


def _blame(rep, text: str, scenario: Path, calibration: Path | None):
    """The memory model's view of an OOM: (the report reconciled with the model, the blame dict)."""

    data, notes = _run_scenario(text, scenario)
    s_run = load_scenario(data)
    broke = validate(s_run).errors
    if broke:
        notes.append(
            f"the run's configuration breaks {len(broke)} rule(s) (moeplan check): "
            + "; ".join(f"{f.rule_id}: {f.message}" for f in broke)
        )
    mem = estimate_memory(s_run)
    peak = mem.peak_stage
    rep, more = reconcile_with_model(rep, peak.total_bytes, mem.capacity_bytes, mem.reserved_bytes)
    notes += more
    notes += _like_for_like(rep, peak)
    terms = sorted(
        ((cat, name, v) for cat, items in peak.items.items() for name, v in items.items()), key=lambda x: -x[2]
    )[:BLAME_TERMS]
    blame = {
        "stage": peak.stage,
        "predicted_peak_bytes": peak.total_bytes,
        "predicted_allocated_bytes": peak.peak_allocated_bytes,
        "predicted_reserved_bytes": peak.peak_reserved_bytes,
        "largest_terms": [{"category": c, "part": n, "bytes": int(v)} for c, n, v in terms],
        "capacity_bytes": mem.capacity_bytes,
        "reserved_bytes": mem.reserved_bytes,
        "verdict": mem.verdict,
        "verdict_band": mem.memory_verdict.to_dict(),
        "dominant_items": mem.dominant_items(),
        "notes": notes,
    }
    if rep.fragmentation is not True:
        consts = load_step_constants(calibration)
        blame["fixes"], blame["rejected_fixes"] = rank_memory_fixes(data, consts)
        if consts is not None:
            notes.append(f"step times from the calibration profile {calibration}")
    return rep, blame


def oom_report(source: str, scenario: Path | None = None, calibration: Path | None = None) -> dict:
    """Read a CUDA out-of-memory message: fragmentation or real demand, and what to change.

    Args:
        source: a log file holding the message, or the message itself.
        scenario: the run's scenario (the log's argument dump is laid over it): blame a stage and
            its largest terms with the memory model, and rank memory-saving changes.
        calibration: a profile from ``moeplan calibrate`` for the step-time cost of each change.

    Returns:
        :meth:`OomReport.to_dict` (requested / total / free / allocated / reserved bytes, GPU index,
        ``fragmentation`` True | False | None, ``diagnosis``, ``fixes``) and ``blame``: None without a
        scenario, else ``{"stage", "predicted_peak_bytes" (device use), "predicted_allocated_bytes",
        "predicted_reserved_bytes", "largest_terms": [{category, part, bytes}]
        (the 3 largest), "capacity_bytes", "verdict" (fits | tight | does-not-fit: the memory verdict
        every command gives), "verdict_band" (:meth:`moeplan.model.memory.MemoryVerdict.to_dict`),
        "dominant_items", "notes"}`` and, unless the message is fragmentation,
        ``fixes`` (each change's peak and saving in bytes, its verdict, fits (the verdict is
        ``fits``), relative step-time change) and
        ``rejected_fixes`` (change, rule, message).

    Raises:
        InputError: neither a file nor an OOM message, a bad scenario or calibration profile (a bad
            profile is refused even where no step time is needed).
    """

    load_step_constants(calibration)
    text = _oom_text(source)
    rep = parse_oom(text)
    blame = None
    if scenario is not None:
        rep, blame = _blame(rep, text, scenario, calibration)
    return {**rep.to_dict(), "blame": blame}


def doctor_report(scenario: Path | None = None) -> dict:
    """This machine's GPUs, driver, CUDA, NCCL, package versions, NVLink topology and environment
    (:meth:`EnvironmentReport.to_dict`), and ``findings`` (rule, severity error | warning | info,
    message, fix): with ``scenario``, whether this machine can run it (and known issues of its
    versions).

    Raises:
        InputError: an unreadable or invalid scenario (nothing about the machine raises).
    """

    data = load_scenario_file(scenario) if scenario is not None else None
    s = load_scenario(data) if data is not None else None
    rep = collect_environment()
    findings = check_environment(rep, s) + deployment_check(rep, s)
    if data is not None:
        findings += known_issue_findings(rep, data)
    return {**rep.to_dict(), "findings": findings}


__all__ = ["compare_report", "doctor_report", "log_report", "oom_report"]
