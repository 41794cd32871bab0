"""Report of ``calibrate``: the step-time model's efficiency constants fitted to measured runs (a runs
document, or training logs laid over a scenario), written as a calibration profile."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import yaml

from moeplan.api.side_inputs import load_yaml_any
from moeplan.errors import InputError
from moeplan.inputs.loading import deep_merge, load_scenario_file
from moeplan.inputs.resolved import Scenario
from moeplan.io.run_logs import LogStats, other_layout, read_log, scenario_sizes, stats_config, tokens_per_s_per_gpu
from moeplan.io.write import check_writable, write_atomically
from moeplan.model.constants import TimeConstants, load_constants
from moeplan.model.constants_fit import Run, fit, holdout, load_runs_yaml, profile_json
from moeplan.model.memory import estimate_memory
from moeplan.model.memory.overheads_fit import MemoryReading, learned_overheads, reading_row
from moeplan.model.step import release_of
from moeplan.resolve.load import load_scenario
from moeplan.units import MIB_BYTES

#: suffixes of a runs document (anything else is taken for a training log)
RUNS_SUFFIXES = (".yaml", ".yml", ".json")
#: the most tokens/s/GPU a measurement may claim (beyond it the log is misread)
MAX_TOKENS_PER_S_PER_GPU = 1e7


def _measured_tokens_per_s(path: Path, st, s: Scenario) -> float:
    """Tokens/s/GPU a log measured: the median printed figure, else GBS · seq_length / (median steady
    iteration time · world size).

    Raises:
        InputError: no usable iteration time, or an impossible measurement.
    """

    summ, t = st.summary(), s.training
    if "tokens_per_s_per_gpu" in summ:
        meas = summ["tokens_per_s_per_gpu"]["median"]
    elif "iteration_time_ms" in summ and t.global_batch_size and t.seq_length and s.num_gpus:
        meas = tokens_per_s_per_gpu(t.global_batch_size, t.seq_length, summ["iteration_time_ms"]["median"], s.num_gpus)
    elif st.iterations:
        # iteration lines, but none with a possible time (zero, negative or non-finite): the log's fault
        raise InputError(f"log {path}", "no usable iteration time", "iteration times > 0 (and finite)")
    else:
        raise InputError("log", str(path), "iteration times and a scenario with GBS, seq_length and num_gpus")
    if not (isinstance(meas, (int, float)) and math.isfinite(meas) and 0 < meas <= MAX_TOKENS_PER_S_PER_GPU):
        raise InputError(f"log {path}", meas, "a positive measured throughput (iteration time > 0, tokens/s > 0)")
    return meas


def _log_scenario(path: Path, base: dict) -> tuple[LogStats, dict]:
    """A log's statistics and its scenario mapping: the log's argument dump (and its container banner,
    as ``versions.container``) laid over ``base``."""
    st = read_log(path)  # one streaming pass; the argument dump kept with the statistics
    merged = deep_merge(base, stats_config(st)[0] or {})
    banner = (st.environment or {}).get("container_release")
    if banner and not (merged.get("versions") or {}).get("container"):
        # the log's own container banner (NVIDIA Release 26.04) names the release it measured
        merged = deep_merge(merged, {"versions": {"container": banner}})
    return st, merged


def _load(path: Path, merged: dict) -> Scenario:
    """The resolved scenario of one log (errors name the log)."""
    try:
        return load_scenario(merged)
    except InputError as exc:
        raise exc.renamed(f"{path}: {exc.field}") from None


def check_log_layout(path: Path, st: LogStats, s: Scenario, run: str, mismatched: list[str] | None) -> None:
    """Hold a log's argument dump (when it has one) to the scenario ``s`` it is attributed to, on the
    keys of :data:`moeplan.io.run_logs.DUMP_CHECK_KEYS`: a log of another layout would make the fit
    scale the model to a run it did not model. A mismatch is refused; when ``mismatched`` is a list
    (``--accept-mismatch``) a line naming the run, the log and the keys is added to it instead.

    Raises:
        InputError: the dump and ``s`` differ, and ``mismatched`` is None.
    """
    text = other_layout(
        path,
        st.args,
        scenario_sizes(s),
        where=run,
        attributed="the run",
        remedy="correct the run's scenario, or give --accept-mismatch to fit to it anyway",
        accept=mismatched is not None,
    )
    if text is not None and mismatched is not None:
        mismatched.append(f"{run}, {path}: {text}")


def check_run_logs(runs: list[Run], folder: Path, mismatched: list[str] | None) -> None:
    """Hold the logs each run of a runs document names (``logs:``, relative to ``folder``, the runs
    file's folder, as ``sweep collect`` writes them) to the run's scenario (:func:`check_log_layout`).

    Raises:
        InputError: a named log that cannot be read (field ``runs[i].logs``), or one that ran another
            layout (without ``mismatched``).
    """
    for i, r in enumerate(runs):
        for name in r.logs:
            path = folder / name
            st = read_log(path, f"runs[{i}] ({r.id}).logs")
            check_log_layout(path, st, r.scenario, f"runs[{i}] ({r.id})", mismatched)


def runs_from_logs(logs: list[Path], scenario: Path | None, mismatched: list[str] | None = None) -> list:
    """Measured runs from training logs, each log's argument dump (and its container banner, as
    ``versions.container``) laid over ``scenario``.

    Returns:
        :class:`moeplan.model.constants_fit.Run` per log (id = path, measured tokens/s/GPU, release).

    Raises:
        InputError: no scenario, an unreadable log, a scenario the log makes invalid (field prefixed
            with the log's path), no usable measurement, a world size that does not fold, or an
            argument dump that disagrees with the resolved run (:func:`check_log_layout`, unless
            ``mismatched`` is a list).
    """

    if scenario is None:
        raise InputError("--scenario", None, "a scenario (model, GPU, world size) for calibrating from logs")
    base = load_scenario_file(scenario)
    runs = []
    for path in logs:
        st, merged = _log_scenario(path, base)
        s = _load(path, merged)
        check_log_layout(path, st, s, str(path), mismatched)
        meas = _measured_tokens_per_s(path, st, s)
        if not s.folds:
            raise InputError(f"{path}: system.num_gpus", s.num_gpus, "a world size divisible by TP·PP·CP and ETP·EP·PP")
        runs.append(Run(str(path), s, meas, release_of(s)))
    return runs


def calibrate_report(
    sources: list[Path],
    scenario: Path | None = None,
    constants: str = "scale",
    holdout_by: str | None = None,
    start: str = "packaged",
    output: Path | None = None,
    max_nfev: int = 200,
    progress: Callable[[int, int], None] | None = None,
    accept_mismatch: bool = False,
) -> dict:
    """Fit the step-time constants to measured runs; refuses to over-fit, and refuses a log whose
    argument dump ran another layout than the run it measures (:func:`check_log_layout`).

    Args:
        sources: one runs document (.yaml / .yml / .json, as ``published_runs.yaml``) or training logs.
        scenario: model / GPU / world size for logs (their argument dumps laid over it).
        constants: ``scale`` (one factor per release) or ``all`` (every shared constant too).
        holdout_by: also fit leaving out each ``release`` (or ``gpu``) and test on it.
        start: ``packaged`` (the built-in fitted constants) or ``defaults`` (the physical priors).
        output: write the profile (JSON) here, atomically.
        max_nfev: fit budget (model evaluations).
        progress: called as ``progress(0, number of runs)`` when the fit starts, then as
            ``progress(evaluations so far, number of runs)``.
        accept_mismatch: fit to a log of another layout anyway (default False: refused); each is
            listed under ``mismatched_logs``.

    Returns:
        ``{"fit": info (free_constants, mode, runs, releases, median / worst abs % error before and
        after, at_bounds), "holdout": {group: {runs, median abs % error uncalibrated / calibrated}}
        or None, "profile": the path written or None, "mismatched_logs": ["run: log ran key value
        (attributed value), ..."] (empty unless accepted)}``.

    Raises:
        InputError: unreadable sources, bad runs, an unknown mode / start / grouping, too few runs
            for the free constants, a log of another layout (without ``accept_mismatch``), or an
            unwritable output.
    """

    if output is not None:  # before any work: never onto an input, nothing half-done
        check_writable(output, inputs=(*sources, scenario))
    mismatched: list[str] | None = [] if accept_mismatch else None
    if len(sources) == 1 and sources[0].suffix.lower() in RUNS_SUFFIXES:
        runs = load_runs_yaml(load_yaml_any(sources[0]))
        check_run_logs(runs, sources[0].parent, mismatched)
    else:
        runs = runs_from_logs(sources, scenario, mismatched)
    if start not in ("packaged", "defaults"):
        raise InputError("--start", start, "packaged or defaults")
    base = load_constants() if start == "packaged" else TimeConstants()

    def tick(n: int) -> None:
        if progress is not None:
            progress(n, len(runs))

    tick(0)
    c, info = fit(runs, base, constants, max_nfev, tick)
    folds = holdout(runs, base, holdout_by, constants, max_nfev, tick) if holdout_by else None
    if output is not None:
        write_atomically(output, profile_json(c), inputs=(*sources, scenario))
    return {
        "fit": info,
        "holdout": folds,
        "profile": str(output) if output else None,
        "mismatched_logs": mismatched or [],
    }


def _memory_reading(path: Path, st: LogStats, s: Scenario) -> MemoryReading:
    """A log's memory maxima against moeplan's stage with the largest allocated peak.

    Raises:
        InputError: the log has no memory report.
    """
    mem = st.memory_mb  # MiB: Megatron's report_memory prints MiB under the label "MB"
    if "max_allocated" not in mem:
        raise InputError(
            f"log {path}",
            "no memory report",
            "Megatron's '[Rank N] (after K iterations) memory (MB) | allocated: … | max allocated: …' lines",
        )
    stage = max(estimate_memory(s).stages, key=lambda x: x.peak_allocated_bytes)
    full = s.layout.cuda_graph_impl == "full_iteration" or s.graph_scopes() == ["full_iteration"]

    def b(key: str) -> float | None:
        return mem[key] * MIB_BYTES if key in mem else None

    return MemoryReading(str(path), stage, mem["max_allocated"] * MIB_BYTES, b("max_reserved"), b("device_used"), full)


def calibrate_memory_report(logs: list[Path], scenario: Path | None, output: Path | None = None) -> dict:
    """Learn the allocator reserve (``fragmentation_fraction``) and the memory outside PyTorch
    (``cuda_context_gib``) from training logs' memory reports (:mod:`moeplan.model.memory.overheads_fit`).

    Args:
        logs: Megatron-LM / Megatron Bridge training logs with memory reports.
        scenario: model / GPU / world size; each log's argument dump is laid over it.
        output: write the learned ``overheads:`` section (YAML) here, atomically.

    Returns:
        ``{"overheads": learned values, "votes": readings per value, "before": rows, "after": rows,
        "profile": path or None}``; a row is :func:`~moeplan.model.memory.overheads_fit.reading_row`
        (measured and predicted GiB per figure, allocated error %), ``after`` with the learned values.

    Raises:
        InputError: no scenario, a runs document instead of logs, an unreadable log or one without a
            memory report, a scenario the log makes invalid, or an unwritable output.
    """
    if output is not None:
        check_writable(output, inputs=(*logs, scenario))
    if scenario is None:
        raise InputError("--scenario", None, "a scenario (model, GPU, world size) for calibrating memory from logs")
    for path in logs:
        if path.suffix.lower() in RUNS_SUFFIXES:
            raise InputError("--memory", str(path), "training logs with memory reports (not a runs document)")
    base = load_scenario_file(scenario)
    logged = []
    for path in logs:
        st, merged = _log_scenario(path, base)
        logged.append((path, st, merged))
    before = [_memory_reading(p, st, _load(p, m)) for p, st, m in logged]
    learned, votes = learned_overheads(before)
    after = [_memory_reading(p, st, _load(p, deep_merge(m, {"overheads": learned}))) for p, st, m in logged]
    if output is not None:
        text = "# learned by `moeplan calibrate --memory` from: " + ", ".join(ascii(str(p)) for p in logs) + "\n"
        write_atomically(
            output, text + yaml.safe_dump({"overheads": learned}, sort_keys=True), inputs=(*logs, scenario)
        )
    return {
        "overheads": learned,
        "votes": votes,
        "before": [reading_row(r) for r in before],
        "after": [reading_row(r) for r in after],
        "profile": str(output) if output else None,
    }


__all__ = ["calibrate_memory_report", "calibrate_report", "runs_from_logs"]
