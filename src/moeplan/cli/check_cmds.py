"""``moeplan check``, ``params``, ``models``, ``gpus`` and ``rules``."""

from __future__ import annotations

from typing import Optional

import typer

from moeplan.api.check import check_report, gpus_report, models_report, params_report, rules_report
from moeplan.cli import render
from moeplan.cli.options import FromOpt, JsonOpt, LangOpt, ScenarioArg, exit_with, input_errors, scenario_options
from moeplan.cli.render import check_view as tables
from moeplan.inputs.overrides import ScenarioFlags

#: memory verdicts that make ``check`` exit 1 (does not fit; may not fit within the error band)
NOT_FITTING = ("does-not-fit", "tight")


@scenario_options()
def check(
    scenario: ScenarioArg = None,
    flags: ScenarioFlags = ScenarioFlags(),
    as_json: JsonOpt = False,
    from_: FromOpt = None,
    lang: LangOpt = None,
) -> None:
    """Check a layout against every Megatron-Core rule; each finding has a rule id and a fix.

    With a model, GPU, GPU count and sequence length it also gives the memory verdict (the memory
    estimate alone, no step time).

    Exit code 0 when no rule is broken (warnings allowed) and the layout fits in memory (or memory
    cannot be estimated), 1 when a rule is broken, the check is incomplete (no model, or several rules
    skipped for lack of input), or the layout does not fit or may not fit in memory (the memory
    model's error band around the peak crosses the usable HBM), 2 on bad input."""
    with input_errors():
        render.set_lang(lang)
        doc = check_report(scenario, flags, from_)
    render.print_lines("note", doc.get("import_notes", []))
    if as_json:
        render.print_json(doc)
    else:
        tables.render_check(doc)
    exit_with(doc["verdict"] in ("valid", "warn") and (doc.get("memory") or {}).get("verdict") not in NOT_FITTING)


def models(as_json: bool = typer.Option(False, "--json", help="Machine-readable output.")) -> None:
    """List the built-in models with exact parameter counts (total / active) and published figures."""
    rows = models_report()
    if as_json:
        render.print_json(rows)
    else:
        tables.render_models(rows)


def gpus(
    gpu_id: Optional[str] = typer.Argument(None, help="Show one GPU in full, with the source of every figure."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """List the built-in GPUs: usable HBM (and its source), dense peaks, NVLink domain, NIC, features."""
    with input_errors():
        doc = gpus_report(gpu_id)
    if as_json:
        render.print_json(doc)
    elif isinstance(doc, dict):  # one GPU: gpu_id was given
        tables.render_gpu_detail(doc)
    else:
        tables.render_gpus(doc)


@scenario_options("model", "tp", "pp", "vpp", "ep", "etp", "sets")
def params(
    scenario: ScenarioArg = None,
    flags: ScenarioFlags = ScenarioFlags(),
    as_json: JsonOpt = False,
) -> None:
    """Exact parameter counts of a model: by kind, total, active, and per rank for each PP stage."""
    with input_errors():
        doc = params_report(scenario, flags)
    # the counts are exact for the split as given; say when Megatron would refuse that split
    render.print_lines("warning", [f"{e} (moeplan check gives the fix)" for e in doc["split_errors"]])
    if as_json:
        render.print_json(doc)
    else:
        tables.render_params(doc["model"], doc["params"], doc["per_rank"], doc.get("notes"))


def rules_cmd(as_json: JsonOpt = False, lang: LangOpt = None) -> None:
    """List every rule: id, error class, Megatron source, statement."""
    with input_errors():
        render.set_lang(lang)
    rows = rules_report()
    if as_json:
        render.print_json(rows)
    else:
        tables.render_rules(rows)


__all__ = ["check", "gpus", "models", "params", "rules_cmd"]
