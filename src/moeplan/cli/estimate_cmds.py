"""``moeplan estimate`` and ``moeplan export``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from moeplan.api.estimate import estimate_report, export_report
from moeplan.cli import render
from moeplan.cli.options import (
    EXIT_RULE,
    CalibrationOpt,
    FromOpt,
    JsonOpt,
    LangOpt,
    ScenarioArg,
    VerboseOpt,
    WorkloadOpt,
    exit_with,
    input_errors,
    scenario_options,
)
from moeplan.cli.render import estimate_view as tables
from moeplan.inputs.overrides import ScenarioFlags
from moeplan.io.write import write_atomically

FormatOpt = Annotated[
    str,
    typer.Option("--format", "-f", help="mbridge-overrides, mbridge-yaml, mbridge-python, megatron-lm-args, slurm."),
]
OutputOpt = Annotated[Optional[Path], typer.Option("--output", "-o", help="Write here (atomically) instead of stdout.")]
McoreVersionOpt = Annotated[
    Optional[str],
    typer.Option("--megatron-core-version", help="Key spellings for this version (default: newest known)."),
]
ForceOpt = Annotated[bool, typer.Option("--force", help="Export even when the layout breaks a rule.")]


@scenario_options()
def estimate(
    scenario: ScenarioArg = None,
    flags: ScenarioFlags = ScenarioFlags(),
    workload: WorkloadOpt = None,
    calibration: CalibrationOpt = None,
    as_json: JsonOpt = False,
    verbose: VerboseOpt = False,
    from_: FromOpt = None,
    lang: LangOpt = None,
) -> None:
    """Estimate peak memory per GPU for every pipeline stage, itemised, against the GPU's usable HBM,
    and (with a global batch size) step time, tokens/s/GPU, model TFLOP/s/GPU and MFU, itemised.

    Exit code 0 when it fits with a clear margin, 1 when it does not fit, may not fit (tight: the
    memory model's error band around the peak crosses the usable HBM) or breaks a rule, 2 on bad input."""
    with input_errors():
        render.set_lang(lang)
        report = estimate_report(scenario, flags, workload, calibration, from_)
    render.print_lines("note", report.document.get("import_notes", []))
    if as_json:
        render.print_json(report.document)
    else:
        tables.render_estimate(report, verbose)
    exit_with(report.fits and not report.may_not_fit and not report.broken)


@scenario_options()
def export_cmd(
    scenario: ScenarioArg = None,
    fmt: FormatOpt = "mbridge-overrides",
    output: OutputOpt = None,
    flags: ScenarioFlags = ScenarioFlags(),
    megatron_core_version: McoreVersionOpt = None,
    force: ForceOpt = False,
) -> None:
    """Write what Megatron Bridge / Megatron-LM runs for a scenario (nothing is launched).

    Exit code 0 on success, 1 when the layout breaks a rule (use --force to export anyway), 2 on bad input."""
    with input_errors():
        res = export_report(scenario, flags, fmt, megatron_core_version, output, force)
    if res.refused:
        how = "moeplan check --set framework=megatron-lm" if fmt == "megatron-lm-args" else "moeplan check"
        sys.stderr.write(
            f"error: the layout breaks rules ({how} for details): "
            + "; ".join(res.broken_rules)
            + " — use --force to export anyway\n"
        )
        raise typer.Exit(EXIT_RULE)
    render.print_lines("note", res.notes)
    render.print_lines("warning", res.warnings)
    if output is None or str(output) == "-":
        sys.stdout.write(res.text)
        return
    with input_errors():
        write_atomically(output, res.text, executable=fmt == "slurm", inputs=(scenario,))


__all__ = ["estimate", "export_cmd"]
