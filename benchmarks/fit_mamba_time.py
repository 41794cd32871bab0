"""Fit the Mamba-2 SSD kernels' achieved rate on the Nemotron-3 rows of Megatron Bridge's
performance summaries of releases 26.02.01–26.06, and write ``src/moeplan/catalog/data/mamba_time.json``.

FITTING set: ``tests/data/fitting/published_runs_nemotron_hybrid.yaml`` (every Nemotron-3 Nano / Super
row of the 26.02.01, 26.04, 26.04.01 and 26.06 tables of ``docs/performance-summary-archive.md`` at
Megatron Bridge v0.6.0). The 26.08 rows (``tests/data/held_out/published_runs_26_08.yaml``) are held
out: this script never reads them.

Method: each run is resolved as ``benchmarks/held_out_release.py`` resolves one (its published scenario,
``recipe_defaults: mbridge-perf-benchmark`` and its container release; 26.04.01, which moeplan's container
table lacks, as 26.04). For each run the rate ``r`` (bytes/s) at which the SSD's Triton kernels would
have to run for the predicted model TFLOP/s per GPU to equal the published one is found by bisection of
its logarithm on [:data:`LOW`, :data:`HIGH`] (the prediction rises with ``r``; the model caps ``r`` at the
GPU's achievable bandwidth); a run that no ``r`` in the range matches takes the bound it is nearest. The
fitted value is the geometric median of the per-run rates (the exponential of the median log): runs whose
error lies elsewhere in the step pull a median less than a mean. Every other constant of the step-time
model stays as packaged.

Usage: python benchmarks/fit_mamba_time.py   (prints the per-run rates, writes mamba_time.json)
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path
from unittest import mock

import yaml

from moeplan import estimate_step, load_scenario
from moeplan.catalog.containers import container_table
from moeplan.catalog.gpus import get_gpu
from moeplan.model import mamba_scan

ROOT = Path(__file__).resolve().parents[1]
FITTING = ROOT / "tests" / "data" / "fitting" / "published_runs_nemotron_hybrid.yaml"
OUT = ROOT / "src" / "moeplan" / "catalog" / "data" / "mamba_time.json"
#: the range searched for the rate (bytes/s)
LOW, HIGH = 0.05e12, 8.0e12
#: bisection steps on the log of the rate (the ratio shrinks to 160^(2^-24): far below the digits written)
STEPS = 24


def fitting_runs() -> list[dict]:
    """The runs of the fitting file (its ``runs`` list, as written)."""
    return list(yaml.safe_load(FITTING.read_text())["runs"])


def container_of(release: str) -> str:
    """The container release a run is predicted with: its own, else the release it patches
    (``26.04.01`` → ``26.04``) when moeplan's container table lacks it."""
    known = {rel for _, rel in container_table()}
    return release if release in known else release.rsplit(".", 1)[0]


def scenario_of(run: dict) -> dict:
    """A fitting run's scenario: its published model, system, training and layout, the perf recipe's
    benchmark settings and its container release."""
    return {
        **run["scenario"],
        "recipe_defaults": "mbridge-perf-benchmark",
        "versions": {"container": container_of(str(run["release"]))},
    }


def predicted_tflops(run: dict, rate: float | None = None) -> float:
    """Predicted model TFLOP/s per GPU of a run, with the SSD kernels at ``rate`` bytes/s (None: the
    packaged value)."""
    s = load_scenario(scenario_of(run))
    if rate is None:
        return estimate_step(s).model_tflops_per_gpu
    with mock.patch.object(mamba_scan, "ssd_bytes_per_s", lambda: rate):
        return estimate_step(s).model_tflops_per_gpu


def solve_rate(run: dict) -> float:
    """The SSD rate (bytes/s) at which a run's prediction equals its published model TFLOP/s per GPU,
    clipped to [LOW, HIGH]."""
    target = float(run["measured"]["model_tflops_per_gpu"])
    lo, hi = math.log(LOW), math.log(HIGH)
    if predicted_tflops(run, LOW) >= target:
        return LOW
    if predicted_tflops(run, HIGH) <= target:
        return HIGH
    for _ in range(STEPS):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if predicted_tflops(run, math.exp(mid)) < target else (lo, mid)
    return math.exp(0.5 * (lo + hi))


def fit() -> tuple[float, list[tuple[str, float]]]:
    """The fitted rate (bytes/s; geometric median of the per-run rates) and each run's (id, rate)."""
    per_run = [(r["id"], solve_rate(r)) for r in fitting_runs()]
    value = math.exp(statistics.median(math.log(f) for _, f in per_run))
    return value, per_run


def document(value: float, per_run: list[tuple[str, float]]) -> dict:
    """The content of ``mamba_time.json``: the fitted rate (bytes/s, to 1 GB/s) and its provenance."""
    return {
        "ssd_bytes_per_s": round(value, -9),
        "provenance": {
            "fitted_by": "benchmarks/fit_mamba_time.py",
            "fitted_on": str(FITTING.relative_to(ROOT)),
            "runs": len(per_run),
            "method": "geometric median over the runs of the SSD rate (bytes/s) matching each run's model TFLOP/s per GPU",
            "held_out": "tests/data/held_out/published_runs_26_08.yaml (release 26.08), never read",
            "per_run_tb_per_s": {rid: round(f / 1e12, 3) for rid, f in per_run},
        },
    }


def bf16_peak_tflops(gpu: str) -> float:
    """The GPU's dense BF16 peak (TFLOP/s), from the GPU catalog."""
    return float(get_gpu(gpu).peak_dense_tflops["bf16"])


def constant_mfu_table(runs: list[dict]) -> dict[tuple[str, str], float]:
    """The constant-MFU baseline fitted on ``runs``: per (GPU, precision) the geometric median of the
    published model TFLOP/s ÷ the GPU's dense BF16 peak, and under key ``("*", "*")`` the same over
    every run (the value for a cell no run fills), as ``benchmarks/evidence.py``'s baseline."""
    cells: dict[tuple[str, str], list[float]] = {}
    for r in runs:
        sc = r["scenario"]
        mfu = float(r["measured"]["model_tflops_per_gpu"]) / bf16_peak_tflops(sc["system"]["gpu"])
        cells.setdefault((sc["system"]["gpu"], sc["training"]["precision"]), []).append(mfu)
        cells.setdefault(("*", "*"), []).append(mfu)
    return {k: math.exp(statistics.median(math.log(v) for v in vs)) for k, vs in cells.items()}


def constant_mfu_tflops(table: dict[tuple[str, str], float], gpu: str, precision: str, per_cell: bool = True) -> float:
    """A constant-MFU baseline's model TFLOP/s per GPU for a run on ``gpu`` in ``precision``: its
    (GPU, precision) cell's MFU (``per_cell``, the cell-less value where no fitting run fills it), or the
    one MFU of every fitting run (``per_cell=False``), times the GPU's dense BF16 peak."""
    mfu = table.get((gpu, precision), table[("*", "*")]) if per_cell else table[("*", "*")]
    return mfu * bf16_peak_tflops(gpu)


def main() -> None:
    value, per_run = fit()
    for rid, f in per_run:
        print(f"{rid:70s} {f / 1e12:.3f} TB/s")
    print(f"fitted ssd_bytes_per_s = {value / 1e12:.3f} TB/s over {len(per_run)} runs")
    OUT.write_text(json.dumps(document(value, per_run), indent=2) + "\n")


if __name__ == "__main__":
    from script_args import takes_no_arguments

    takes_no_arguments(__doc__)
    main()
