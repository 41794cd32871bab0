"""Out-of-sample evidence for the step-time model: predictions of runs it was never fitted on, scored
against two baselines fitted on exactly the runs the model was fitted on.

FITTING set: Megatron Bridge's release performance summaries (``tests/data/reference/published_runs.yaml``,
the ``mbperf-*`` runs), restricted as the fit restricts them (a published precision, release anomalies
left out: ``timefit.load_runs`` and ``timefit.release_anomalies``). ``src/moeplan/catalog/data/
time_constants.json`` records that its constants were fitted on these runs; :func:`constants_problems`
checks it.

VALIDATION set: every other public measurement, never used to fit a constant nor to choose between
model variants:

- ``dense long-sequence``: NeMo's LLAMA2-7B FP8 runs on H100 with CP, 4K–1024K tokens
  (``benchmarks/data/nemo_long_sequence.yaml`` ``rows``; model TFLOP/s per GPU);
- ``NeMo MoE``: the MoE rows of NeMo's performance summaries (same file, ``moe_runs``; tokens/s per GPU);
- ``card``: the measured rows of Megatron Bridge's long-context MoE skill card
  (``benchmarks/data/long_context_card.yaml``; model TFLOP/s per GPU, rounded to tens by the card).

Each validation run is scored in the metric its source publishes. Predictors:

- ``moeplan``: ``estimate_step`` on the run's scenario, as ``benchmarks/long_context.py`` does;
- ``constant MFU``: the median over the fitting runs of one (GPU, precision) of measured model FLOP/s ÷
  the GPU's dense BF16 peak (model FLOPs per token from ``moeplan.structure.flops.model_flops``, as
  ``benchmarks/accuracy.py``'s ``_baseline``), the median over every fitting run where the cell is empty;
  applied to the validation run's model FLOPs per token;
- ``6ND over peak``: tokens/s/GPU = MFU_6ND · peak ÷ (6 · N_active), MFU_6ND the median over the fitting
  runs of one (GPU, precision) of measured tokens/s · 6 · N_active ÷ peak (same fallback); N_active the
  parameters used per token without the input embedding and MTP (DeepSeek's "activated" count,
  ``ParamCounts.active``), peak the dense BF16 peak. Training compute as 6 FLOPs per parameter and token
  (Kaplan et al. 2020, "Scaling Laws for Neural Language Models", C ≈ 6·N·D), which leaves out attention.

Medians are geometric (the exponential of the median log), as ``accuracy._baseline``. Errors are
100 · (predicted ÷ measured − 1) %.

Usage: python benchmarks/evidence.py   (prints the tables, writes docs/evidence.md and the
``out_of_sample`` section of docs/figures.json; needs scipy for ``timefit``: pip install -e '.[test]')
"""

from __future__ import annotations

import json
import math
import statistics
import sys
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

import figures  # noqa: E402
import long_context  # noqa: E402
from timefit import ROOT, load_runs, release_anomalies  # noqa: E402

from moeplan import estimate_step, load_scenario  # noqa: E402
from moeplan.structure.flops import model_flops  # noqa: E402
from moeplan.structure.params import count_params  # noqa: E402

CARD = ROOT / "benchmarks" / "data" / "long_context_card.yaml"
CONSTANTS = ROOT / "src" / "moeplan" / "catalog" / "data" / "time_constants.json"
PUBLISHED = "tests/data/reference/published_runs.yaml"
#: validation groups, in report order
GROUPS = ("dense long-sequence", "NeMo MoE", "card")
#: predictors, in report order
PREDICTORS = ("moeplan", "constant MFU", "6ND over peak")
SECTION = "out_of_sample"
#: the files the validation runs come from (none may be named in the constants' provenance)
VALIDATION_FILES = ("nemo_long_sequence.yaml", "long_context_card.yaml")
TFLOPS = "model_tflops_per_gpu"
TOKENS = "tokens_per_s_per_gpu"


def fitting_runs() -> list[dict]:
    """The runs the packaged constants were fitted on: ``timefit.load_runs`` (published_runs.yaml with
    the fit's recipe knobs and containers) with a published precision, release anomalies left out."""
    runs = load_runs()
    anomalies = release_anomalies(runs)
    return [r for r in runs if r["precision_known"] and r["id"] not in anomalies]


def _dense_runs() -> list[dict]:
    """NeMo's LLAMA2-7B FP8 long-sequence rows, with ``long_context.scenario``'s scenario."""
    table = long_context.load()
    out = []
    for row in table["rows"]:
        seq = row["seq_k"] * 1024
        out.append(
            {
                "id": f"nemo-24.03-llama2-7b-h100x{row['num_gpus']}-fp8-delayed-seq{seq}",
                "group": GROUPS[0],
                "scenario": long_context.scenario(table, row),
                "metric": TFLOPS,
                "measured": float(row["measured_tflops"]),
                "source": table["source"],
            }
        )
    return out


def _nemo_moe_runs() -> list[dict]:
    """NeMo's MoE rows, with the scenario ``long_context.predict_moe`` builds (their container stated,
    knobs from the perf recipes)."""
    out = []
    for r in long_context.load().get("moe_runs", []):
        sc = {**r["scenario"], "versions": {"container": r["container"]}, "recipe_defaults": "mbridge-perf-benchmark"}
        out.append(
            {
                "id": r["id"],
                "group": GROUPS[1],
                "scenario": load_scenario(sc),
                "metric": TOKENS,
                "measured": float(r["measured"][TOKENS]),
                "source": r["source"],
            }
        )
    return out


def _card_runs() -> list[dict]:
    """The long-context skill card's rows (``benchmarks/data/long_context_card.yaml``)."""
    card = yaml.safe_load(CARD.read_text(encoding="utf-8"))
    out = []
    for r in card["runs"]:
        src = r["source"]
        out.append(
            {
                "id": r["id"],
                "group": GROUPS[2],
                "scenario": load_scenario(r["scenario"]),
                "metric": TFLOPS,
                "measured": float(r["measured"][TFLOPS]),
                "approximate": bool(r["measured"].get("approximate")),
                "source": f"{src['repo']} @{src['commit'][:7]} {', '.join(src['paths'])}",
                "unstated": r.get("unstated", []),
            }
        )
    return out


def validation_runs() -> list[dict]:
    """Every validation run: id, group, scenario, metric (``model_tflops_per_gpu`` or
    ``tokens_per_s_per_gpu``, as its source publishes it), the measured value and its source."""
    return [*_dense_runs(), *_nemo_moe_runs(), *_card_runs()]


def identity(s) -> tuple:
    """What makes two runs the same measurement for the separation check: model, GPU, GPU count,
    sequence length, TP, PP, CP and EP. Deliberately coarser than ``timefit.layout_key`` (no VPP, ETP,
    MBS, GBS, precision), so an assumed batch or schedule cannot hide a duplicate."""
    return (s.model.name, s.gpu.name, s.num_gpus, s.training.seq_length, s.tp, s.pp, s.cp, s.ep)


def separation_problems(fitting: list[dict], validation: list[dict]) -> list[str]:
    """Why the validation set is not out of sample ([] when it is): a validation run with the
    :func:`identity` of a fitting run, a validation id that is a fitting id or a published
    (``mbperf-``) run, or two validation runs with one id."""
    fit_keys: dict[tuple, str] = {}
    for r in fitting:  # the first fitting run of each identity names it
        fit_keys.setdefault(identity(r["scenario"]), r["id"])
    fit_ids = {r["id"] for r in fitting}
    out = []
    for v in validation:
        k = identity(v["scenario"])
        if k in fit_keys:
            out.append(f"{v['id']} has the model, GPUs, sequence and layout of fitting run {fit_keys[k]}")
        if v["id"] in fit_ids or v["id"].startswith("mbperf-"):
            out.append(f"{v['id']} is a published performance-summary run")
    ids = [v["id"] for v in validation]
    out += [f"{i} appears {ids.count(i)} times" for i in sorted(set(ids)) if ids.count(i) > 1]
    return out


def constants_problems(fitting: list[dict]) -> list[str]:
    """Why the packaged constants may not rest on the fitting set alone ([] when they do):
    ``time_constants.json``'s provenance must name published_runs.yaml, count exactly the fitting runs
    (every one an ``mbperf-`` run) and name none of the validation data files."""
    prov = json.loads(CONSTANTS.read_text(encoding="utf-8"))["provenance"]
    fitted_on = prov.get("fitted_on", "")
    out = []
    if not fitted_on.startswith(PUBLISHED):
        out.append(f"time_constants.json was fitted on {fitted_on!r}, not {PUBLISHED}")
    if prov.get("runs") != len(fitting):
        out.append(f"time_constants.json counts {prov.get('runs')} fitted runs; the fitting set has {len(fitting)}")
    out += [
        f"fitting run {r['id']} is not a published performance-summary run"
        for r in fitting
        if not r["id"].startswith("mbperf-")
    ]
    out += [f"time_constants.json names {n} among what it was fitted on" for n in VALIDATION_FILES if n in fitted_on]
    return out


def _gmedian(xs: list[float]) -> float:
    """The geometric median of positive numbers: exp of the median log (``accuracy._baseline``'s median)."""
    return math.exp(statistics.median(math.log(x) for x in xs))


def _peak_flops(s) -> float:
    """The GPU's dense BF16 peak in FLOP/s (``gpus.json``), the denominator of both baselines' MFU."""
    return s.gpu.peak_dense_tflops["bf16"] * 1e12


def _flops_per_token(s) -> float:
    """Model FLOPs per token of a scenario (``model_flops``, as ``accuracy._baseline`` counts them)."""
    return model_flops(s.model, s.training.seq_length, s.tp, s.mtp_num_layers).per_token


def _active_params(s) -> float:
    """N_active of the 6ND baseline: parameters used per token, without the input embedding and MTP."""
    return float(count_params(s.model).active(input_embedding=False))


def cell(s) -> tuple[str, str]:
    """The baselines' lookup key: (GPU, precision)."""
    return (s.gpu.name, s.training.precision)


def fit_baselines(fitting: list[dict]) -> dict[str, dict]:
    """Both baselines fitted on ``fitting`` only: per predictor, ``cells`` ((GPU, precision) → median MFU)
    and ``overall`` (the median over every fitting run, used for a cell the fitting set lacks).
    ``constant MFU``: measured tokens/s × model FLOPs per token ÷ peak; ``6ND over peak``: measured
    tokens/s × 6 · N_active ÷ peak (see the module docstring)."""
    per: dict[str, dict[tuple, list[float]]] = {PREDICTORS[1]: {}, PREDICTORS[2]: {}}
    for r in fitting:
        s = r["scenario"]
        peak = _peak_flops(s)
        per[PREDICTORS[1]].setdefault(cell(s), []).append(r["measured"] * _flops_per_token(s) / peak)
        per[PREDICTORS[2]].setdefault(cell(s), []).append(r["measured"] * 6 * _active_params(s) / peak)
    return {
        name: {"cells": {k: _gmedian(v) for k, v in d.items()}, "overall": _gmedian([x for v in d.values() for x in v])}
        for name, d in per.items()
    }


def _baseline_tokens(fit: dict, s) -> tuple[float, float, bool]:
    """The two baselines' tokens/s/GPU for scenario ``s``, and whether its (GPU, precision) had a cell."""
    peak, key = _peak_flops(s), cell(s)
    mfu = fit[PREDICTORS[1]]["cells"].get(key, fit[PREDICTORS[1]]["overall"])
    mfu6 = fit[PREDICTORS[2]]["cells"].get(key, fit[PREDICTORS[2]]["overall"])
    return mfu * peak / _flops_per_token(s), mfu6 * peak / (6 * _active_params(s)), key in fit[PREDICTORS[1]]["cells"]


def predict(validation: list[dict], fit: dict) -> list[dict]:
    """Per validation run: its id, group, metric, measured value, each predictor's prediction in the
    run's metric and signed % error, and whether the baselines found its (GPU, precision) cell. A
    tokens/s prediction becomes model TFLOP/s through the model FLOPs per token (``model_flops``, which
    ``estimate_step``'s own TFLOP/s figure uses too)."""
    out = []
    for v in validation:
        s = v["scenario"]
        t = estimate_step(s)
        a, b, in_cell = _baseline_tokens(fit, s)
        to_metric = _flops_per_token(s) / 1e12 if v["metric"] == TFLOPS else 1.0
        ours = t.model_tflops_per_gpu if v["metric"] == TFLOPS else t.tokens_per_s_per_gpu
        pred = {PREDICTORS[0]: ours, PREDICTORS[1]: a * to_metric, PREDICTORS[2]: b * to_metric}
        out.append(
            {
                "id": v["id"],
                "group": v["group"],
                "metric": v["metric"],
                "measured": v["measured"],
                "predicted": pred,
                "error_pct": {n: 100 * (p / v["measured"] - 1) for n, p in pred.items()},
                "baseline_cell": in_cell,
                "cp_exposed_share": t.breakdown_s.get("cp_comm_exposed", 0.0) / t.step_time_s,
            }
        )
    return out


def summarise(rows: list[dict]) -> dict[str, dict]:
    """Per group and ``overall``: the run count and each predictor's median and worst absolute % error."""
    out = {}
    for g in (*GROUPS, "overall"):
        sel = [r for r in rows if g == "overall" or r["group"] == g]
        out[g] = {"runs": len(sel)}
        for n in PREDICTORS:
            e = [abs(r["error_pct"][n]) for r in sel]
            out[g][n] = {"median_abs_pct": statistics.median(e), "worst_abs_pct": max(e)}
    return out


#: the factors the card runs' assumed global batch is scaled by in :func:`batch_sensitivity`
GBS_FACTORS = (0.5, 2.0)


def batch_sensitivity(validation: list[dict]) -> dict[str, float]:
    """moeplan's median absolute % error over the card runs with their assumed global batch (the card
    states none) scaled by each of :data:`GBS_FACTORS` (at least DP), by factor as text. The baselines
    do not read the batch, so this bounds how much the comparison rests on that assumption."""
    card = yaml.safe_load(CARD.read_text(encoding="utf-8"))["runs"]
    out = {}
    for f in GBS_FACTORS:
        errs = []
        for r, v in zip(card, [v for v in validation if v["group"] == GROUPS[2]], strict=True):
            dp = v["scenario"].dp
            training = {**r["scenario"]["training"]}
            training["global_batch_size"] = max(dp, int(training["global_batch_size"] * f))
            t = estimate_step(load_scenario({**r["scenario"], "training": training}))
            errs.append(abs(100 * (t.model_tflops_per_gpu / v["measured"] - 1)))
        out[f"{f:g}"] = statistics.median(errs)
    return out


def compute() -> dict:
    """Everything the report and the test use: the fitting and validation runs, the fitted baselines,
    the per-run rows, the summary and the two separation checks' problems."""
    fitting = fitting_runs()
    validation = validation_runs()
    fit = fit_baselines(fitting)
    rows = predict(validation, fit)
    return {
        "fitting": fitting,
        "validation": validation,
        "baselines": fit,
        "rows": rows,
        "summary": summarise(rows),
        "batch_sensitivity": batch_sensitivity(validation),
        "separation_problems": separation_problems(fitting, validation),
        "constants_problems": constants_problems(fitting),
    }


def section(ev: dict) -> dict:
    """The ``out_of_sample`` section of docs/figures.json: run counts, each predictor's median and worst
    absolute % error per group and overall, and each run's signed % error, rounded to 0.1 %."""
    return {
        "fitting_runs": len(ev["fitting"]),
        "validation_runs": len(ev["validation"]),
        "summary": {
            g: {"runs": v["runs"], **{n: {k: round(x, 1) for k, x in v[n].items()} for n in PREDICTORS}}
            for g, v in ev["summary"].items()
        },
        "runs": {r["id"]: {n: round(r["error_pct"][n], 1) for n in PREDICTORS} for r in ev["rows"]},
        "card_gbs_sensitivity": {k: round(x, 1) for k, x in ev["batch_sensitivity"].items()},
        "separation_problems": ev["separation_problems"] + ev["constants_problems"],
    }


def _fmt_value(x: float) -> str:
    return f"{x:.0f}" if x >= 100 else f"{x:.1f}"


def summary_lines(ev: dict) -> list[str]:
    """The summary table: per group and overall, each predictor's median / worst absolute % error."""
    lines = [
        "| group | runs | " + " | ".join(f"{n} median / worst %" for n in PREDICTORS) + " |",
        "|---|---|" + "---|" * len(PREDICTORS),
    ]
    for g, v in ev["summary"].items():
        cells = " | ".join(f"{v[n]['median_abs_pct']:.1f} / {v[n]['worst_abs_pct']:.1f}" for n in PREDICTORS)
        lines.append(f"| {g} | {v['runs']} | {cells} |")
    return lines


def run_lines(ev: dict) -> list[str]:
    """The per-run table: measured and predicted values in the source's metric and the signed errors."""
    lines = [
        "| run | group | metric | measured | moeplan | error % | constant MFU % | 6ND over peak % | "
        "moeplan's exposed CP share |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in ev["rows"]:
        e = r["error_pct"]
        unit = "TFLOP/s/GPU" if r["metric"] == TFLOPS else "tokens/s/GPU"
        mark = "" if r["baseline_cell"] else " †"
        lines.append(
            f"| {r['id']} | {r['group']} | {unit} | {_fmt_value(r['measured'])} | "
            f"{_fmt_value(r['predicted'][PREDICTORS[0]])} | {e[PREDICTORS[0]]:+.1f} | "
            f"{e[PREDICTORS[1]]:+.1f}{mark} | {e[PREDICTORS[2]]:+.1f}{mark} | {100 * r['cp_exposed_share']:.0f} % |"
        )
    return lines


def _cells_lines(ev: dict) -> list[str]:
    """The baselines' fitted MFUs per (GPU, precision) cell and overall."""
    fit = ev["baselines"]
    lines = ["| GPU, precision | constant MFU | MFU_6ND |", "|---|---|---|"]
    for k in sorted(fit[PREDICTORS[1]]["cells"]):
        lines.append(
            f"| {k[0]}, {k[1]} | {fit[PREDICTORS[1]]['cells'][k]:.3f} | {fit[PREDICTORS[2]]['cells'][k]:.3f} |"
        )
    lines.append(
        f"| every fitting run (fallback) | {fit[PREDICTORS[1]]['overall']:.3f} | {fit[PREDICTORS[2]]['overall']:.3f} |"
    )
    return lines


def _margin_lines(ev: dict) -> list[str]:
    """How far moeplan's card-group median is from the better baseline's, against the card's ±5 % rounding
    and against the global batch the card does not state (:func:`batch_sensitivity`)."""
    card = ev["summary"][GROUPS[2]]
    ours = card[PREDICTORS[0]]["median_abs_pct"]
    better = min(PREDICTORS[1:], key=lambda n: card[n]["median_abs_pct"])
    theirs = card[better]["median_abs_pct"]
    sens = ", ".join(f"{x:.1f} % with GBS × {k}" for k, x in ev["batch_sensitivity"].items())
    flips = any(x >= theirs for x in ev["batch_sensitivity"].values())
    weak = theirs - ours < 5 or flips
    return [
        f"On the card runs moeplan's median ({ours:.1f} %) is {theirs - ours:.1f} points "
        f"{'below' if ours < theirs else 'above'} the better baseline's ({better}, {theirs:.1f} %); "
        f"the margin is {'inside' if abs(theirs - ours) < 5 else 'outside'} the card's ±5 % rounding, and moeplan's "
        f"median with another global batch (the card states none) is {sens}"
        + (", which reverses the comparison" if flips else "")
        + (". Treat the card comparison as weak evidence." if weak else "."),
    ]


def doc_lines(ev: dict) -> list[str]:
    """docs/evidence.md."""
    problems = ev["separation_problems"] + ev["constants_problems"]
    lines = [
        "# Out-of-sample evidence for the step-time model",
        "",
        "Generated by `python benchmarks/evidence.py`; `tests/test_out_of_sample.py` recomputes every figure and "
        "fails when this page or the `out_of_sample` section of `docs/figures.json` differs, when a validation "
        "run joins the fitting set, when moeplan's median error passes its frozen threshold, or when a baseline "
        "beats moeplan where it does not today.",
        "",
        "## The two sets",
        "",
        f"- **Fitting** ({len(ev['fitting'])} runs): Megatron Bridge's release performance summaries, "
        f"`{PUBLISHED}` (NVIDIA-NeMo/Megatron-Bridge docs/performance-summary*.md @067f987), the runs with a "
        "published precision and without release anomalies — exactly what `time_constants.json` says its "
        "constants were fitted on. The two baselines below are fitted on these runs only.",
        f"- **Validation** ({len(ev['validation'])} runs), never used to fit a constant or to choose between "
        "model variants: NeMo's dense LLAMA2-7B FP8 long-sequence runs on H100 with CP 1–32, 4K–1024K tokens "
        "(`benchmarks/data/nemo_long_sequence.yaml`, NVIDIA/NeMo performance_long_sequence.md @0aa2671); the MoE "
        "rows of NeMo's performance summaries (same file, `moe_runs`); and the measured rows of Megatron Bridge's "
        "long-context MoE skill card (`benchmarks/data/long_context_card.yaml`, NVIDIA-NeMo/Megatron-Bridge "
        "skills/nemo-mbridge-perf-moe-long-context/card.yaml and SKILL.md @067f987).",
        "- Separation check (model, GPU, GPU count, sequence, TP, PP, CP, EP of every validation run against "
        "every fitting run; the constants' provenance against the fitting set): "
        + ("passed." if not problems else "FAILED: " + "; ".join(problems)),
        "",
        "## Predictors",
        "",
        "- **moeplan**: `estimate_step` on the run's scenario with the packaged constants.",
        "- **constant MFU**: the geometric median, over the fitting runs of the run's (GPU, precision), of measured "
        "model FLOP/s ÷ dense BF16 peak, times the validation run's model FLOPs; the median over every fitting "
        "run where that cell is empty (marked †).",
        "- **6ND over peak**: tokens/s/GPU = MFU_6ND · peak ÷ (6 · N_active), MFU_6ND fitted the same way on "
        "measured tokens/s · 6 · N_active ÷ peak (N_active: parameters used per token without the input "
        "embedding and MTP).",
        "",
        "Each run is scored in the metric its source publishes (model TFLOP/s/GPU or tokens/s/GPU); a tokens/s "
        "prediction becomes TFLOP/s through moeplan's model FLOPs per token. The card writes its figures rounded "
        'to tens ("~300"): each carries about ±5 %, so a difference under 5 % on a card run is not evidence. '
        "The card does not give every setting (batch sizes, EP and recompute below 128K, the Qwen3 layouts, the "
        "container): the values assumed and why are listed under `unstated:` in its data file. The trade-off: "
        "a wrong assumption moves moeplan's prediction, never the baselines' (they read only GPU, precision, "
        "model and sequence length).",
        "",
        "## Summary (absolute % error)",
        "",
        *summary_lines(ev),
        "",
        *_margin_lines(ev),
        "",
        "## Per run (signed % error)",
        "",
        *run_lines(ev),
        "",
        "† the fitting set has no run of this (GPU, precision): the baseline uses its median over every fitting run.",
        "",
        "## The baselines' fitted MFUs",
        "",
        *_cells_lines(ev),
        "",
    ]
    return lines


def main() -> None:
    ev = compute()
    lines = doc_lines(ev)
    (ROOT / "docs" / "evidence.md").write_text("\n".join(lines), encoding="utf-8")
    figures.update(SECTION, section(ev))
    print("\n".join(summary_lines(ev) + [""] + run_lines(ev)))
    problems = ev["separation_problems"] + ev["constants_problems"]
    print("separation:", problems or "passed")


if __name__ == "__main__":
    from script_args import takes_no_arguments

    takes_no_arguments(__doc__)
    main()
