"""``moeplan log``, ``compare``, ``oom``, ``calibrate`` and ``doctor``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from moeplan.api.calibrate import calibrate_memory_report, calibrate_report
from moeplan.api.diagnose import compare_report, doctor_report, log_report, oom_report
from moeplan.cli import render
from moeplan.cli.options import CalibrationOpt, JsonOpt, LangOpt, exit_with, input_errors
from moeplan.cli.render import diagnose_view as tables


def log_cmd(
    logs: Annotated[list[Path], typer.Argument(help="Megatron-LM / Megatron Bridge training log(s).")],
    as_json: JsonOpt = False,
) -> None:
    """Steady-state statistics of training logs (iteration time, TFLOP/s, tokens/s, loss, grad norm,
    skipped/NaN iterations, memory) and the configuration read from the argument dump."""
    with input_errors():
        out = log_report(logs)
    if as_json:
        render.print_json(out)  # always a list, one entry per log
    else:
        tables.render_logs(out)


def compare_cmd(
    log_a: Annotated[Path, typer.Argument(help="Baseline run's training log (A).")],
    log_b: Annotated[Path, typer.Argument(help="Run to judge (B).")],
    scenario: Annotated[
        Optional[Path],
        typer.Option("--scenario", help="Model/GPU/world size the logs lack; needed to rank causes."),
    ] = None,
    alpha: Annotated[float, typer.Option("--alpha", help="Significance level of the test.", min=1e-6, max=0.5)] = 0.01,
    min_effect: Annotated[
        float, typer.Option("--min-effect", help="Smallest relative change reported (0.005 = 0.5 %).", min=0.0, max=1.0)
    ] = 0.005,
    plot: Annotated[
        Optional[Path], typer.Option("--plot", help="Write iteration time and memory over steps (.png, .svg, .pdf).")
    ] = None,
    calibration: CalibrationOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Is run B slower or heavier than run A beyond noise (Mann-Whitney U), what changed between their
    configurations, and which change our models blame. Exit 1 when B is slower."""
    with input_errors():
        out = compare_report(log_a, log_b, scenario, alpha, min_effect, plot, calibration)
    if as_json:
        render.print_json(out)
    else:
        tables.render_compare(out)
    if out["iteration_time_ms"]["verdict"] == "slower":
        exit_with(False)


def oom_cmd(
    source: Annotated[str, typer.Argument(help="A log file holding a CUDA OOM message, or the message itself.")],
    scenario: Annotated[
        Optional[Path],
        typer.Option("--scenario", help="The run's scenario: blame a stage and a term with the memory model."),
    ] = None,
    calibration: CalibrationOpt = None,
    as_json: JsonOpt = False,
    lang: LangOpt = None,
) -> None:
    """Read a CUDA out-of-memory message: fragmentation or real demand, and what to change."""
    with input_errors():
        render.set_lang(lang)
        out = oom_report(source, scenario, calibration)
    if as_json:
        render.print_json(out)
    else:
        tables.render_oom(out)


def calibrate_cmd(
    sources: Annotated[list[Path], typer.Argument(help="A runs YAML (as published_runs.yaml) or training logs.")],
    scenario: Annotated[
        Optional[Path], typer.Option("--scenario", help="Model/GPU/world size for logs (their dumps laid over it).")
    ] = None,
    constants: Annotated[
        str, typer.Option("--constants", help="scale: one factor per release; all: every shared constant too.")
    ] = "scale",
    holdout_by: Annotated[
        Optional[str], typer.Option("--holdout", help="Also fit leaving out each release (or gpu) and test on it.")
    ] = None,
    start: Annotated[
        str, typer.Option("--start", help="packaged: the built-in fitted constants; defaults: the physical priors.")
    ] = "packaged",
    output: Annotated[Optional[Path], typer.Option("-o", "--output", help="Write the profile (JSON) here.")] = None,
    max_nfev: Annotated[int, typer.Option("--max-evaluations", min=5, max=5000, help="Fit budget.")] = 200,
    memory: Annotated[
        bool,
        typer.Option(
            "--memory",
            help="Learn the allocator reserve and the memory outside PyTorch from the logs' memory reports "
            "instead; -o writes an `overheads:` section for the scenario.",
        ),
    ] = False,
    accept_mismatch: Annotated[
        bool,
        typer.Option(
            "--accept-mismatch",
            help="Fit to a log whose argument dump ran another layout than its run anyway (refused otherwise).",
        ),
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Fit the step-time model's efficiency constants to measured runs and write a calibration profile
    (`estimate`, `plan`, `fit`, `sweep`, `compare` and `oom` take it with --calibration). Refuses to over-fit.
    With --memory: learn `fragmentation_fraction` and `cuda_context_gib` from the logs' memory reports."""
    if memory:
        with input_errors():
            mem = calibrate_memory_report(sources, scenario, output)
        render.print_json(mem) if as_json else tables.render_memory_calibration(mem)
        return
    with input_errors(), render.fit_spinner() as tick:
        out = calibrate_report(
            sources,
            scenario,
            constants,
            holdout_by,
            start,
            output,
            max_nfev,
            progress=tick,
            accept_mismatch=accept_mismatch,
        )
    if as_json:
        render.print_json(out)
    else:
        tables.render_calibration(out)


def doctor_cmd(
    scenario: Annotated[
        Optional[Path], typer.Option("--scenario", help="Check this machine against the scenario's needs.")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """This machine's GPUs, driver, CUDA, NCCL, torch / Transformer Engine / megatron-core / bridge /
    DeepEP versions, NVLink topology and environment; with --scenario, whether it can run it.
    Exit 1 when something the scenario needs is missing."""
    with input_errors():
        out = doctor_report(scenario)
    if as_json:
        render.print_json(out)
    else:
        tables.render_doctor(out)
    if any(f["severity"] == "error" for f in out["findings"]):
        exit_with(False)


__all__ = ["calibrate_cmd", "compare_cmd", "doctor_cmd", "log_cmd", "oom_cmd"]
