"""``moeplan plan``, ``fit``, ``recipes`` and ``sweep`` (thin layer over :mod:`moeplan.api.plan`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from moeplan.api.plan import fit_report, plan_report, recipes_report, sweep_report
from moeplan.cli import render
from moeplan.cli.options import (
    CalibrationOpt,
    FromOpt,
    HeadroomOpt,
    JsonOpt,
    LangOpt,
    ScenarioArg,
    VerboseOpt,
    WorkloadOpt,
    exit_with,
    input_errors,
    scenario_options,
)
from moeplan.cli.render import plan_view as tables
from moeplan.inputs.overrides import ScenarioFlags

TopOpt = Annotated[int, typer.Option("--top", min=1, max=50, help="Candidates to show.")]
MinDpOpt = Annotated[int, typer.Option("--min-dp", min=1, help="Smallest data-parallel size accepted.")]
ObjectiveOpt = Annotated[
    str, typer.Option("--objective", help="throughput (tokens/s/GPU) or time-to-train (needs --train-tokens).")
]
TrainTokensOpt = Annotated[
    Optional[float], typer.Option("--train-tokens", min=1, help="Tokens to train, for time-to-train.")
]
ReportOpt = Annotated[
    Optional[Path], typer.Option("--report", help="Write a self-contained HTML report with plots here.")
]
SaveOpt = Annotated[
    Optional[Path], typer.Option("--save", help="Write the #1 layout as a scenario YAML (for check/export).")
]
HoldOpt = Annotated[
    Optional[list[str]],
    typer.Option("--hold", help="Hold only this layout key of the scenario (repeatable); the rest are searched."),
]
FreeOpt = Annotated[
    Optional[list[str]],
    typer.Option("--free", help="Search this layout key although the scenario sets it (repeatable; 'all': every one)."),
]


@scenario_options()
def plan_cmd(
    scenario: ScenarioArg = None,
    flags: ScenarioFlags = ScenarioFlags(),
    hold: HoldOpt = None,
    free: FreeOpt = None,
    top: TopOpt = 5,
    min_dp: MinDpOpt = 1,
    headroom_gib: HeadroomOpt = None,
    objective: ObjectiveOpt = "throughput",
    train_tokens: TrainTokensOpt = None,
    report: ReportOpt = None,
    save: SaveOpt = None,
    workload: WorkloadOpt = None,
    calibration: CalibrationOpt = None,
    as_json: JsonOpt = False,
    verbose: VerboseOpt = False,
    from_: FromOpt = None,
    lang: LangOpt = None,
) -> None:
    """Search the layout space (TP, PP, VPP, CP, EP, ETP, MBS, recompute, dispatcher, CUDA graphs,
    CP comm, optimizer offload) and rank what fits by predicted tokens/s/GPU, with why the winner wins,
    the rule-of-thumb baseline and a tally of what was rejected. Every layout key given (file or flag)
    is held fixed unless --free names it; --hold holds only the keys it names (as `sweep`).

    Exit code 0 when something fits, 1 when nothing does, 2 on bad input."""
    with input_errors():
        render.set_lang(lang)
    with input_errors(), render.progress_bar("searching layouts") as tick:
        out = plan_report(
            scenario,
            flags,
            hold=hold or (),
            free=free or (),
            top=top,
            min_dp=min_dp,
            headroom_gib=headroom_gib,
            objective=objective,
            train_tokens=train_tokens,
            report=report,
            save=save,
            workload=workload,
            calibration=calibration,
            progress=tick,
            from_format=from_,
        )
    render.print_lines("note", out.get("import_notes", []))
    if as_json:
        render.print_json(out)
    else:
        tables.render_plan(out, verbose)
    exit_with(bool(out["candidates"]))


FitHeadroomOpt = Annotated[
    Optional[float],
    typer.Option(
        "--headroom-gib",
        min=0.0,
        help="GiB kept free per GPU (default: the memory model's error band, so that a fix is what check calls fits).",
    ),
]
FitSaveOpt = Annotated[
    Optional[Path], typer.Option("--save", help="Write the chosen fix (--pick, default #1) as a scenario YAML.")
]
PickOpt = Annotated[int, typer.Option("--pick", min=1, help="Which fix --save writes (1 = the least costly).")]


@scenario_options()
def fit_cmd(
    scenario: ScenarioArg = None,
    flags: ScenarioFlags = ScenarioFlags(),
    headroom_gib: FitHeadroomOpt = None,
    top: TopOpt = 8,
    save: FitSaveOpt = None,
    pick: PickOpt = 1,
    calibration: CalibrationOpt = None,
    as_json: JsonOpt = False,
    verbose: VerboseOpt = False,
    lang: LangOpt = None,
) -> None:
    """Propose the smallest changes that make a layout fit (or that OOMed): every rung of the
    recompute ladder above the layout's, optimizer offload, CP/PP/TP/EP/ETP, MBS and precision, then
    pairs of those not enough alone, each checked by every rule, with the GiB it saves and the step
    time it costs, the cheapest in time first (changes of the numerics ranked apart); every change
    tried is listed (fits, not enough, rejected with its rule). --save writes the chosen one.

    Exit code 0 when the layout fits (its memory verdict is ``fits``, the one check and estimate give)
    and breaks no rule, or a fix that fits and breaks no rule is found (``fit --save F && moeplan
    export F`` runs on); 1 when none is; 2 on bad input. The header states the layout's own verdict
    either way."""
    with input_errors():
        render.set_lang(lang)
        out = fit_report(
            scenario,
            flags,
            headroom_gib=headroom_gib,
            top=top,
            calibration=calibration,
            save=save,
            pick=pick,
        )
    if as_json:
        render.print_json(out)
    else:
        tables.render_fit(out, verbose)
    # a layout that breaks a rule "fits" only on paper: exit 1 unless a change makes it legal and fit
    exit_with(bool(out["fixes"] or (out["fits_already"] and not out["check_errors"])))


def recipes_cmd(
    kind: Annotated[
        str, typer.Option("--kind", help="all, guidance (skill layout families) or published (Bridge perf recipes).")
    ] = "all",
    model: Annotated[Optional[str], typer.Option("--model", "-m", help="Only this model (HF id or name).")] = None,
    output_dir: Annotated[
        Optional[Path],
        typer.Option("--write", help="Also write each recipe as a scenario YAML into this folder ('/' in ids → '__')."),
    ] = None,
    as_json: JsonOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    """Built-in starting points — the layout families of the long-context and VLM guidance and the
    published Megatron Bridge layouts — each as published (checked by every rule: what it breaks as
    written, with the messages; estimated: memory, throughput where a batch size is known) and, for a
    guidance layout that does not run as written, as completed (what it needs to run, with its memory
    and step time)."""
    with input_errors():
        rows = recipes_report(kind, model, output_dir)
    if as_json:
        render.print_json(rows)
    else:
        tables.render_recipes(rows, verbose)
    exit_with(True)


@scenario_options("model", "gpu", "num_gpus", "seq_length", "gbs", "tokens_per_step", "precision", "sets")
def sweep_cmd(
    target: Annotated[
        Optional[str],
        typer.Argument(help="A scenario YAML (write a sweep), or `collect` / `submit` followed by the sweep DIR."),
    ] = None,
    directory: Annotated[Optional[Path], typer.Argument(help="The sweep directory (with collect / submit).")] = None,
    output: Annotated[
        Optional[Path], typer.Option("--output", "-o", help="New directory to write the sweep into.")
    ] = None,
    top: Annotated[int, typer.Option("--top", min=1, max=50, help="Candidates to write scripts for.")] = 4,
    no_mbs_variants: Annotated[bool, typer.Option("--no-mbs-variants", help="Skip the MBS×2 variants.")] = False,
    hold: HoldOpt = None,
    free: FreeOpt = None,
    smoke: Annotated[bool, typer.Option("--smoke", help="submit: the smoke scripts instead of the full runs.")] = False,
    yes: Annotated[bool, typer.Option("--yes", help="submit: confirm that jobs will be submitted (sbatch).")] = False,
    accept_mismatch: Annotated[
        bool,
        typer.Option(
            "--accept-mismatch",
            help="collect: score a log whose argument dump ran another layout against its entry anyway "
            "(refused otherwise; its figure then misleads calibrate).",
        ),
    ] = False,
    flags: ScenarioFlags = ScenarioFlags(),
    calibration: CalibrationOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Write a directory of launch scripts for the top-K planned layouts (plus MBS×2 variants), a smoke
    variant of each and your baseline, with a manifest and a README (`moeplan sweep SCENARIO -o DIR`);
    `moeplan sweep collect DIR` ranks the measured logs against the predictions and writes runs.yaml for
    `calibrate`; `moeplan sweep submit DIR --yes` submits through sbatch (nothing is submitted otherwise).
    The layout keys the scenario sets are held as in `plan` (--free KEY or --free all to search them;
    the scenario stays the baseline)."""
    with input_errors(), render.progress_bar("planning") as tick:
        out = sweep_report(
            target,
            directory,
            output,
            top=top,
            mbs_variants=not no_mbs_variants,
            hold=hold or (),
            free=free or (),
            smoke=smoke,
            yes=yes,
            accept_mismatch=accept_mismatch,
            flags=flags,
            calibration=calibration,
            progress=tick,
        )
    if as_json:
        render.print_json(out)
    else:
        tables.render_sweep(target, out)
    exit_with(not (target == "submit" and any(not r["submitted"] for r in out["submitted"])))


__all__ = ["fit_cmd", "plan_cmd", "recipes_cmd", "sweep_cmd"]
