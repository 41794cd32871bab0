"""moeplan on the held-out release: Megatron Bridge's 26.08 performance summary (tag v0.6.0).

VALIDATION only. The 26.08 rows (``tests/data/held_out/published_runs_26_08.yaml``, packaged as
``held_out_runs`` of ``catalog/data/published_measured.json``) are declared out of sample: no constant is
fitted on them (``benchmarks/timefit.py`` reads ``tests/data/reference/published_runs.yaml`` only, releases
25.09-26.06), no threshold of ``benchmarks/thresholds.yaml`` is set from them, no model variant is chosen
by them, and the planner's published baseline does not read them. This report only says how far the
packaged constants land on them.

Each run is resolved as the fitting runs are (``timefit.load_runs``): its published scenario, the perf
recipe's benchmark settings (``recipe_defaults: mbridge-perf-benchmark``) and its container release
(``versions.container: 26.08``, whose recipe fills come from Megatron Bridge v0.6.0's perf recipes). A
release the constants have no factor for takes the newest calibrated one's (26.06). Predicted model
TFLOP/s per GPU is ``estimate_step``'s (Megatron Bridge's model FLOPs per token × tokens/s/GPU / 1e12);
error = 100 · (predicted ÷ measured − 1) %. A run whose model moeplan cannot build (one the catalog does
not hold, or a config with a feature not modelled) is listed as skipped with the input error that refused
it. Before 26.08 the catalog modelled DeepSeek-V3, gpt-oss-120b, Qwen3-30B-A3B / 235B-A22B and
Nemotron-3 Nano; Nemotron-3 Super / Ultra, Nemotron-3.5 Lightning and DeepSeek-V4-Flash came after.

Usage: python benchmarks/held_out_release.py   (prints the table, writes docs/held_out_release.md)
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

from moeplan import estimate_step, load_scenario
from moeplan.catalog.models import get_model, resolve_model_name
from moeplan.catalog.perf_recipes import held_out_releases, held_out_runs, run_scenario
from moeplan.errors import InputError

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "held_out_release.md"
#: the vendored Hugging Face configs (provenance in its README): what a model not in the catalog lacks
HF_CONFIGS = ROOT / "tests" / "data" / "hf_configs"


def scenario_of(run: dict) -> dict:
    """The scenario a held-out run is predicted with, as the fitting runs are
    (:func:`moeplan.catalog.perf_recipes.run_scenario`)."""
    return run_scenario(run)


def missing_feature(model_id: str) -> str | None:
    """Why moeplan cannot build ``model_id`` when its catalog has no entry for it: the input error its
    Hugging Face ``config.json`` (``tests/data/hf_configs/<org>--<name>.json``) raises, which names the
    field or layer type not modelled; "not in the catalog" when that file builds; None when the catalog
    has the model or no such file is vendored (the scenario's own error then stands)."""
    try:
        resolve_model_name(model_id)
        return None
    except InputError:
        pass
    path = HF_CONFIGS / (model_id.replace("/", "--") + ".json")
    if not path.is_file():
        return None
    try:
        get_model(str(path))
    except InputError as exc:
        return f"{model_id}: not modelled ({exc})"
    return f"{model_id}: not in the catalog yet (its config.json builds)"


def outcome(run: dict) -> dict:
    """One held-out run: ``id``, ``model``, ``gpu``, ``num_gpus``, ``precision``, ``measured`` (model
    TFLOP/s per GPU, published) and either ``status: estimated`` with ``predicted`` (model TFLOP/s per
    GPU) and ``error_pct``, or ``status: skipped`` with ``reason`` (the input error's text)."""
    out = {
        "id": run["id"],
        "model": run["model"],
        "gpu": run["gpu"],
        "num_gpus": run["num_gpus"],
        "precision": run["training"]["precision"],
        "measured": float(run["measured"]["model_tflops_per_gpu"]),
    }
    try:
        predicted = estimate_step(load_scenario(scenario_of(run))).model_tflops_per_gpu
    except InputError as exc:
        return {**out, "status": "skipped", "reason": missing_feature(run["model"]) or str(exc)}
    return {**out, "status": "estimated", "predicted": predicted, "error_pct": 100 * (predicted / out["measured"] - 1)}


def outcomes() -> list[dict]:
    """:func:`outcome` of every held-out run, in the summary's order."""
    return [outcome(r) for r in held_out_runs()]


def summary(rows: list[dict]) -> dict:
    """Counts (``runs``, ``estimated``, ``skipped``) and, over the estimated runs, the median and worst
    absolute error (%); None where no run was estimated."""
    errs = [abs(r["error_pct"]) for r in rows if r["status"] == "estimated"]
    return {
        "runs": len(rows),
        "estimated": len(errs),
        "skipped": len(rows) - len(errs),
        "median_abs_pct": statistics.median(errs) if errs else None,
        "worst_abs_pct": max(errs) if errs else None,
    }


def render(rows: list[dict]) -> str:
    """docs/held_out_release.md: the table of every held-out run and the summary line."""
    s = summary(rows)
    lines = [
        "# Held-out release: Megatron Bridge 26.08 (v0.6.0) performance summary",
        "",
        f"Generated by `python benchmarks/held_out_release.py`. Held-out releases: {', '.join(held_out_releases())}; "
        "no constant, threshold or model variant was chosen on these runs (validation only). "
        "Model TFLOP/s per GPU, predicted with the packaged constants vs published; "
        "a run whose model moeplan cannot build yet is listed as skipped with the reason.",
        "",
        "| run | GPUs | precision | published | predicted | error | status |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        gpus = f"{r['num_gpus']}× {r['gpu']}"
        if r["status"] == "estimated":
            lines.append(
                f"| {r['id']} | {gpus} | {r['precision']} | {r['measured']:.0f} | {r['predicted']:.0f} | "
                f"{r['error_pct']:+.1f} % | estimated |"
            )
        else:
            reason = r["reason"].replace("|", "/").splitlines()[0]
            lines.append(f"| {r['id']} | {gpus} | {r['precision']} | {r['measured']:.0f} | | | skipped: {reason} |")
    lines.append("")
    if s["estimated"]:
        lines.append(
            f"{s['estimated']} of {s['runs']} runs estimated: median |error| {s['median_abs_pct']:.1f} %, "
            f"worst {s['worst_abs_pct']:.1f} %; {s['skipped']} skipped (model not modelled yet)."
        )
    return "\n".join(lines) + "\n"


def main() -> int:
    text = render(outcomes())
    DOC.write_text(text, encoding="utf-8")
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    from script_args import takes_no_arguments

    takes_no_arguments(__doc__)
    raise SystemExit(main())
