"""Fitting the shared time-model constants to measured runs (used by calibrate_time.py and
accuracy.py). Needs numpy and scipy (``pip install -e '.[calibrate]'``)."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import yaml
from scipy.optimize import least_squares

from moeplan import load_scenario
from moeplan.model.constants import TimeConstants
from moeplan.model.constants_fit import SHARED, release_key
from moeplan.model.step import estimate_step

ROOT = Path(__file__).resolve().parents[1]
REF = ROOT / "tests" / "data" / "reference"  # vendored copy of the shared reference data
RELEASES = ["25.09", "25.11", "26.02", "26.02.01", "26.04", "26.04.01", "26.06"]
NEWEST = "26.06"

# starting values of the published fit; the bounds are the package's (moeplan.model.constants_fit.SHARED),
# so `moeplan calibrate` and this script search the same physically plausible ranges
START = {
    "memory_bound_bytes_per_activation_byte": 3.0,
    "moe_memory_bound_bytes_per_activation_byte": 3.0,
    "launch_overhead_s_per_layer": 2e-4,
    "moe_sync_s_per_layer": 2e-4,
}
PARAMS = [(n, lo, hi, START[n]) for n, lo, hi in SHARED] + [
    (f"release_{r}", 0.6, 1.4, 1.0) for r in RELEASES if r != NEWEST
]


def published_runs_path() -> Path:
    """``tests/data/reference/published_runs.yaml`` (the vendored copy of the project's reference data,
    provenance in ``tests/data/README.md``); exits with a one-line error when it is not there (the
    benchmarks that fit or score against the published runs need it)."""
    path = REF / "published_runs.yaml"
    if not path.is_file():
        raise SystemExit(f"error: {path} not found: these benchmarks read the reference data vendored under tests/data")
    return path


def load_runs() -> list[dict]:
    runs = yaml.safe_load(published_runs_path().read_text())["runs"]
    out = []
    for r in runs:
        sc = dict(r["scenario"])
        sc["recipe_defaults"] = "mbridge-perf-benchmark"
        sc["versions"] = {"container": r["release"]}
        if r.get("mtp_included") is False:
            sc["layout"] = {**sc["layout"], "mtp_num_layers": 0}
        out.append(
            {
                "id": r["id"],
                "release": r["release"],
                "gpu": sc["system"]["gpu"],
                "model": sc["model"],
                "precision_known": "precision" in r["scenario"]["training"],
                "precision": r["scenario"]["training"].get("precision", "bf16"),
                "measured": r["measured"]["tokens_per_s_per_gpu"],
                "measured_tflops": r["measured"]["model_tflops_per_gpu"],
                "scenario": load_scenario(sc),
            }
        )
    return out


#: a run measured at most 1/ANOMALY_RATIO of the same layout in an earlier release, or in another
#: release of the same line (26.02 vs 26.02.01), is a software regression of that release, not a layout
#: effect: software does not legitimately lose a third of its speed, nor gain it in a patch release
ANOMALY_RATIO = 1.5


def layout_key(r: dict) -> tuple:
    """What makes two published runs the same measurement apart from software: model, GPU, GPU count,
    TP/PP/VPP/CP/EP/ETP, MBS, GBS and sequence length (precision is compared separately)."""
    s = r["scenario"]
    t = s.training
    return (
        r["model"],
        r["gpu"],
        s.num_gpus,
        s.tp,
        s.pp,
        s.vpp,
        s.cp,
        s.ep,
        s.etp,
        t.micro_batch_size,
        t.global_batch_size,
        t.seq_length,
    )


def release_anomalies(runs: list[dict], ratio: float = ANOMALY_RATIO) -> dict[str, str]:
    """Runs that are release regressions, by id → the evidence (the faster run of the same model, GPU,
    GPU count, TP/PP/VPP/CP/EP/ETP, MBS, GBS, sequence length and precision). Decided from the
    measurements alone, never from the model's error. 25.09 runs (precision not published) match any
    precision."""

    def same_precision(a, b) -> bool:  # an unpublished precision (25.09) matches any
        return not (a["precision_known"] and b["precision_known"]) or a["precision"] == b["precision"]

    out = {}
    for r in runs:
        rk = release_key(r["release"])
        for o in runs:
            if o is r or layout_key(o) != layout_key(r) or o["release"] == r["release"] or not same_precision(o, r):
                continue
            ok = release_key(o["release"])
            if (ok < rk or ok[:2] == rk[:2]) and o["measured"] >= ratio * r["measured"]:
                out[r["id"]] = f"{o['id']} measured {o['measured'] / r['measured']:.2f}× faster with the same layout"
                break
    return out


def constants_from(x: np.ndarray) -> TimeConstants:
    """The constants with the fitted parameters ``x`` (PARAMS order); the component-set ones keep
    :class:`TimeConstants`' defaults (``moeplan.model.constants.COMPONENT_SOURCES``)."""
    v = dict(zip([p[0] for p in PARAMS], x, strict=True))
    rel = {r: float(v.get(f"release_{r}", 1.0)) for r in RELEASES}
    rel[NEWEST] = 1.0
    shared = {n: float(v[n]) for n, *_ in SHARED}
    return TimeConstants(**shared, release_factor=rel, newest_release=NEWEST)


def constants_values(c: TimeConstants) -> dict[str, float]:
    """The fitted parameters of ``c`` by PARAMS name."""
    out = {n: float(getattr(c, n)) for n, *_ in SHARED}
    out.update({f"release_{k}": v for k, v in c.release_factor.items()})
    return out


def predict(runs: list[dict], c: TimeConstants) -> np.ndarray:
    return np.array([estimate_step(r["scenario"], c).tokens_per_s_per_gpu for r in runs])


def fitted_runs(runs: list[dict]) -> list[dict]:
    """The runs a fit uses: a published precision, and not a release anomaly (:func:`release_anomalies`)."""
    bad = release_anomalies(runs)
    return [r for r in runs if r["precision_known"] and r["id"] not in bad]


def fit(runs: list[dict], max_nfev: int = 400) -> tuple[TimeConstants, dict]:
    """Robust least squares on log(predicted/measured) over ``runs`` (precision known, release anomalies
    left out: :func:`release_anomalies`): Huber's loss with its scale re-estimated from the residuals
    (:func:`robust_solve`), then every shared constant the runs do not identify put back at its packaged
    value (:func:`hold_flat`). Returns the constants and ``info``: runs, the median |error| % at the
    start (packaged shared constants, every release factor 1.0) and with the returned constants, the
    Huber scale and cost of the returned constants, the constants held."""
    used = fitted_runs(runs)
    meas = np.array([r["measured"] for r in used])
    lo = np.log([p[1] for p in PARAMS])
    hi = np.log([p[2] for p in PARAMS])
    x0 = np.log([p[3] for p in PARAMS])
    fitted_releases = {r["release"] for r in used}

    held = held_values()

    def resid(z):
        c = constants_from(np.exp(z))
        res = np.log(predict(used, c) / meas)
        # keep releases absent from the fit at 1.0 (weak prior)
        prior = [
            0.1 * z[i] for i, p in enumerate(PARAMS) if p[0].startswith("release_") and p[0][8:] not in fitted_releases
        ]
        # a shared constant the runs do not identify keeps its packaged value (PRIOR_WEIGHT: far below
        # one run's residual, so an identified constant goes where the runs put it)
        prior += [PRIOR_WEIGHT * (z[i] - np.log(held[p[0]])) for i, p in enumerate(PARAMS) if p[0] in held]
        return np.concatenate([res, prior])

    x0 = np.array([np.log(held[p[0]]) if p[0] in held else x for p, x in zip(PARAMS, x0, strict=True)])
    start = resid(x0)[: len(used)]
    z, scale, rounds = robust_solve(resid, x0, (lo, hi), len(used), max_nfev)
    c = constants_from(np.exp(z))
    # a release without fitted runs (25.09: no published precision) is left out: at run time it takes the
    # last fitted release before it, or the oldest when it predates them all (TimeConstants.release)
    rel = {k: v for k, v in c.release_factor.items() if k in fitted_releases or k == NEWEST}
    c, flat = hold_flat(runs, dataclasses.replace(c, release_factor=rel), held, scale)
    final = np.log(predict(used, c) / meas)
    info = {
        "runs": len(used),
        "median_abs_pct_error_at_start": float(np.median(np.abs(np.expm1(start))) * 100),
        "median_abs_pct_error_after": float(np.median(np.abs(np.expm1(final))) * 100),
        "loss": "huber",
        "huber_scale_log": round(scale, 4),
        "huber_rounds": rounds,
        "huber_cost": huber_cost(final, scale),
        "not_identified_held_at_packaged_value": flat,
    }
    return c, info


#: Huber's tuning constant: 1.345 σ gives 95 % of least squares' efficiency when the errors are normal
#: (Huber, "Robust Statistics", 1981; the default of R's MASS::rlm and statsmodels' HuberT)
HUBER_K = 1.345
#: the normal-consistent MAD: σ̂ = 1.4826 · median |r − median r|
MAD_TO_SIGMA = 1.4826
#: at most this many re-estimations of the Huber scale from the last fit's residuals, stopping when it
#: moves by less than HUBER_SCALE_TOL (log units)
HUBER_ROUNDS = 6
HUBER_SCALE_TOL = 0.005


def huber_scale(residuals: np.ndarray) -> float:
    """Huber's threshold in log units for ``residuals`` (log predicted/measured):
    :data:`HUBER_K` × the normal-consistent MAD. Residuals inside it weigh as in least squares, those
    beyond it linearly: a family of runs the model does not explain (gpt-oss-120b on Blackwell, +20 to
    +40 %) pulls the shared constants and release factors of every other run less than in least squares
    (less, not nothing: 22 runs all on one side still move them)."""
    r = np.asarray(residuals, dtype=float)
    mad = float(np.median(np.abs(r - np.median(r))))
    return HUBER_K * MAD_TO_SIGMA * max(mad, 1e-3)


def huber_cost(residuals: np.ndarray, scale: float) -> float:
    """Σ ρ(r) with Huber's ρ at threshold ``scale`` (r²/2 inside, scale·(|r| − scale/2) beyond), in the
    units of ``scipy.optimize.least_squares(loss='huber', f_scale=scale)``'s cost."""
    a = np.abs(np.asarray(residuals, dtype=float))
    return float(np.sum(np.where(a <= scale, a * a / 2, scale * (a - scale / 2))))


def robust_solve(resid, x0: np.ndarray, bounds: tuple, n_runs: int, max_nfev: int) -> tuple[np.ndarray, float, int]:
    """Plain least squares from ``x0``, then Huber's loss with its scale (:func:`huber_scale` of the
    first ``n_runs`` residuals) re-estimated from the last fit until it moves less than
    :data:`HUBER_SCALE_TOL` or :data:`HUBER_ROUNDS` fits have run. Returns (log parameters, scale,
    Huber fits run)."""
    sol = least_squares(resid, x0, bounds=bounds, max_nfev=max_nfev, x_scale=1.0)
    scale = huber_scale(sol.fun[:n_runs])
    rounds = 0
    while rounds < HUBER_ROUNDS:
        sol = least_squares(resid, sol.x, bounds=bounds, max_nfev=max_nfev, x_scale=1.0, loss="huber", f_scale=scale)
        rounds += 1
        new = huber_scale(sol.fun[:n_runs])
        if abs(new - scale) < HUBER_SCALE_TOL:
            break
        scale = new
    return sol.x, scale, rounds


def hold_flat(
    runs: list[dict], c: TimeConstants, held: dict[str, float], scale: float
) -> tuple[TimeConstants, list[str]]:
    """Put each shared constant the runs do not identify back at its packaged value ``held``: flat (by
    :func:`not_identified`, in the fit's own Huber cost) where the fit left it and still flat at the
    packaged value. Where the optimizer stopped on a flat cost is not a result, and refitting from its
    own output would walk it toward a bound. The other constants are not refitted: by construction the
    cost moves by less than 0.1 %."""
    flat = not_identified(runs, c, scale=scale)
    if not flat:
        return c, []
    back = dataclasses.replace(c, **{n: held[n] for n in flat})
    still = set(not_identified(runs, back, scale=scale))
    keep = [n for n in flat if n in still]
    return dataclasses.replace(c, **{n: held[n] for n in keep}), keep


#: weight of the prior that holds a shared constant at its packaged value, per unit of log(value): a
#: constant the runs identify moves as if it were not there (one run's residual weighs 1 per unit of
#: log error); one they do not (a flat direction of the cost) stays put instead of stopping wherever the
#: optimizer does
PRIOR_WEIGHT = 0.01


def held_values() -> dict[str, float]:
    """The packaged values of the shared constants (``catalog/data/time_constants.json``), the centre of
    the weak prior :func:`fit` puts on each."""
    from moeplan.model.constants import load_constants

    c = load_constants()
    return {n: float(getattr(c, n)) for n, *_ in SHARED}


def not_identified(
    runs: list[dict], c: TimeConstants, rel_change: float = 1e-3, scale: float | None = None
) -> list[str]:
    """The shared constants of ``c`` whose halving and doubling each change the fit cost on ``runs`` (the
    runs :func:`fit` uses; Huber's cost at ``scale``, else the sum of squares) by less than
    ``rel_change`` of it: the runs do not identify them."""
    used = fitted_runs(runs)
    meas = np.array([r["measured"] for r in used])

    def cost(cc: TimeConstants) -> float:
        res = np.log(predict(used, cc) / meas)
        return huber_cost(res, scale) if scale else float(res @ res)

    base = cost(c)
    out = []
    for n, *_ in SHARED:
        v = getattr(c, n)
        moved = [cost(dataclasses.replace(c, **{n: v * f})) for f in (0.5, 2.0)]
        if max(abs(m - base) for m in moved) < rel_change * base:
            out.append(n)
    return out


def constants_to_json(c: TimeConstants, provenance: dict) -> dict:
    d = dataclasses.asdict(c)
    d["provenance"] = provenance
    for k, v in list(d.items()):
        if isinstance(v, float):
            d[k] = float(f"{v:.6g}")
    d["release_factor"] = {k: float(f"{v:.6g}") for k, v in c.release_factor.items()}
    d["a2a_efficiency"] = {k: float(f"{v:.6g}") for k, v in c.a2a_efficiency.items()}
    return d


def pct_errors(pred: np.ndarray, meas: np.ndarray) -> np.ndarray:
    return (pred / meas - 1) * 100


def spearman(a, b) -> float:
    from scipy.stats import spearmanr

    if len(a) < 3:
        return float("nan")
    return float(spearmanr(a, b).statistic)


__all__ = [
    "layout_key",
    "release_anomalies",
    "fit",
    "load_runs",
    "predict",
    "constants_to_json",
    "pct_errors",
    "spearman",
    "math",
]
