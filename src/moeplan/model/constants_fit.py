"""Fit the step-time model's efficiency constants to measured runs (a calibration profile).

Method: bounded least squares (``scipy.optimize.least_squares``, trust-region reflective) on
log(predicted / measured tokens/s/GPU), in log space of the constants, bounds = the physically plausible
ranges below. Two sets of free constants:

- ``scale``: one software/cluster efficiency factor per container release present in the runs (the
  ``release_factor`` of :class:`~moeplan.model.constants.TimeConstants`), the shared constants kept;
  for a few runs on one's own cluster. Needs at least as many runs as releases. The factor divides the
  whole step, so a ``scale`` profile moves absolute step times and tokens/s; it does not change how
  layouts rank nor the relative effect of a change (``compare``, ``oom``): ``all`` does.
- ``all``: the shared constants no component measurement pins (:data:`SHARED`) and the release
  factors (the newest release present keeps its starting factor so the fit is identifiable). Needs
  more runs than free constants. The component-set constants (bandwidth efficiencies, EP exchange
  rates, grouped-GEMM occupancy, overlap share) are never fitted.

A release the profile has not seen (an upgrade) is predicted with the newest calibrated release's factor.

Fewer runs than free constants is refused (:class:`~moeplan.errors.InputError`): the fit would
interpolate, not calibrate. Needs numpy and scipy (``pip install 'moeplan[calibrate]'``).
"""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

from moeplan.errors import InputError, MoeplanError, UnknownNameError, missing_extra, name_some, short_repr
from moeplan.inputs.loading import deep_merge, load_json_file
from moeplan.inputs.resolved import Scenario
from moeplan.inputs.system import GpuSpec
from moeplan.inputs.versions import find_release
from moeplan.model.constants import TimeConstants, release_key, release_of
from moeplan.model.step import estimate_step
from moeplan.resolve.load import load_scenario

# the constants a fit moves, with the range it may move them in (name, lower, upper): what no
# measurement of the term alone pins; the rest are set from their component measurements
# (moeplan.model.constants.COMPONENT_SOURCES). A fit that ends at a bound is reported.
SHARED: list[tuple[str, float, float]] = [
    ("memory_bound_bytes_per_activation_byte", 1.0, 100.0),
    ("moe_memory_bound_bytes_per_activation_byte", 1.0, 100.0),
    ("launch_overhead_s_per_layer", 1e-5, 5e-3),
    ("moe_sync_s_per_layer", 1e-5, 5e-3),
]
#: plausible ranges of the component-set constants, for checking a hand-edited profile
PINNED_RANGES: list[tuple[str, float, float]] = [
    ("grouped_gemm_half_tokens", 32.0, 4096.0),
    ("nvlink_efficiency", 0.5, 1.0),
    ("nic_efficiency", 0.5, 1.0),
    ("a2a_alltoall", 0.15, 1.0),
    ("a2a_deepep", 0.15, 1.0),
    ("a2a_hybridep", 0.15, 1.0),
    ("overlap_hidden_fraction", 0.2, 1.0),
    ("p2p_latency_s", 1e-6, 2e-4),
]
RELEASE_BOUNDS = (0.3, 2.0)
#: constants that are shares of a bandwidth or of a time: never above 1
FRACTIONS = frozenset(
    {
        "nvlink_efficiency",
        "nic_efficiency",
        "a2a_alltoall",
        "a2a_deepep",
        "a2a_hybridep",
        "overlap_hidden_fraction",
    }
)
#: dispatcher backends with a fitted EP exchange efficiency
A2A_BACKENDS = ("alltoall", "deepep", "hybridep")
#: keys a run entry may carry (those of ``published_runs.yaml``; the descriptive ones are ignored)
RUN_KEYS = frozenset(
    {
        "id",
        "release",
        "scenario",
        "measured",
        "logs",
        "mtp_included",
        "notes",
        "source",
        "token_routing",
        "gradient_accumulation_steps",
        "as_published",
        "alternate_quantization_granularity",
    }
)
#: the most tokens/s/GPU a measurement may claim (a plausibility bound, far above any GPU today)
MAX_TOKENS_PER_S_PER_GPU = 1e7
MODES = ("scale", "all")


@dataclass(frozen=True)
class Run:
    """One measured run: a resolved scenario, its measured tokens/s/GPU, its release (or None) and the
    training logs it was measured from (paths as the runs document gives them, relative to its
    folder; empty when it names none)."""

    id: str
    scenario: Scenario
    measured_tokens_per_s_per_gpu: float
    release: str | None
    logs: tuple[str, ...] = ()


def values_of(c: TimeConstants) -> dict[str, float]:
    """The shared constants of ``c`` by name (``a2a_<backend>`` for the dispatcher efficiencies)."""
    d = {n: getattr(c, n) for n, *_ in SHARED + PINNED_RANGES if not n.startswith("a2a_")}
    d.update({f"a2a_{k}": v for k, v in c.a2a_efficiency.items()})
    return d


def with_values(c: TimeConstants, shared: dict[str, float], releases: dict[str, float]) -> TimeConstants:
    """``c`` with some shared constants and release factors replaced."""
    plain: dict[str, Any] = {k: v for k, v in shared.items() if not k.startswith("a2a_")}
    a2a = dict(c.a2a_efficiency)
    a2a.update({k[4:]: v for k, v in shared.items() if k.startswith("a2a_")})
    rel = dict(c.release_factor)
    rel.update(releases)
    return dataclasses.replace(c, **plain, a2a_efficiency=a2a, release_factor=rel)


def predict(runs: list[Run], c: TimeConstants) -> list[float]:
    """Predicted tokens/s/GPU of each run under constants ``c``."""
    return [estimate_step(r.scenario, c).tokens_per_s_per_gpu for r in runs]


def abs_pct_errors(runs: list[Run], c: TimeConstants) -> list[float]:
    """|predicted / measured − 1| · 100 per run."""
    return [abs(p / r.measured_tokens_per_s_per_gpu - 1) * 100 for p, r in zip(predict(runs, c), runs, strict=True)]


def _require_numerics() -> None:
    """Check that numpy and scipy, which the fit needs, are installed.

    Raises:
        InputError: either is missing (with the install hint).
    """
    try:
        import numpy as np  # noqa: F401
        from scipy.optimize import least_squares  # noqa: F401
    except ImportError:
        raise missing_extra("calibrate", "numpy and scipy", "calibrate") from None


@dataclass(frozen=True)
class _FreeConstants:
    """The constants a fit moves, in the order of its parameter vector: the shared constants ``names``
    (of :data:`SHARED`), then the factor of each release in ``releases``; ``bounds``: the (lower,
    upper) bound of each, in the same order."""

    names: list[str]
    releases: list[str]
    bounds: list[tuple[float, float]]

    def labels(self) -> list[str]:
        """The parameters' names: the shared constants', then ``release_<release>``."""
        return self.names + [f"release_{x}" for x in self.releases]

    def apply(self, base: TimeConstants, values) -> TimeConstants:
        """``base`` with the free constants set to ``values`` (in parameter order)."""
        n = len(self.names)
        return with_values(
            base, dict(zip(self.names, values[:n], strict=True)), dict(zip(self.releases, values[n:], strict=True))
        )


def _free_constants(runs: list[Run], releases: list[str], mode: str) -> _FreeConstants:
    """The constants a fit in ``mode`` moves for ``runs`` of ``releases``: ``scale``, the factor of each
    release; ``all``, the shared constants too, the newest release keeping its factor (so that the fit
    is identifiable).

    Raises:
        InputError: fewer runs than free constants (with ``all``: not more runs than free constants).
    """
    free_rel = releases if mode == "scale" else [x for x in releases if x != max(releases, key=release_key)]
    names = [n for n, *_ in SHARED] if mode == "all" else []
    bounds = [(lo, hi) for n, lo, hi in SHARED if n in names] + [RELEASE_BOUNDS] * len(free_rel)
    k = len(names) + len(free_rel)
    if len(runs) < max(1, k) or (mode == "all" and len(runs) <= k):
        raise InputError(
            "runs",
            len(runs),
            f"more runs than the {k} free constants of --constants {mode} "
            + ("(add runs or use --constants scale)" if mode == "all" else "(one per release at least)"),
        )
    return _FreeConstants(names, free_rel, bounds)


def _start(base: TimeConstants, free: _FreeConstants) -> list[float]:
    """The fit's starting point: ``base``'s values of the free constants, moved just inside their bounds."""
    start = values_of(base)
    x0 = [start[n] for n in free.names] + [base.release(x)[1] for x in free.releases]
    return [min(max(v, lo * 1.0001), hi / 1.0001) for v, (lo, hi) in zip(x0, free.bounds, strict=True)]


@dataclass(frozen=True)
class _Solution:
    """A finished fit: ``constants`` (the base with the fitted values), the fitted ``values`` (parameter
    order), the median and worst abs % error of the runs before and after (``errors``, keyed as in
    the fit's info) and the step-time model evaluations it took."""

    constants: TimeConstants
    values: list[float]
    errors: dict[str, float]
    evaluations: int


def _least_squares(
    runs: list[Run], base: TimeConstants, free: _FreeConstants, max_nfev: int, on_eval: Callable[[int], None] | None
) -> _Solution:
    """Bounded least squares (trust-region reflective) on log(predicted / measured tokens/s/GPU), in
    log space of the free constants, from :func:`_start`. ``on_eval(n)`` is called at each of the
    ``n`` evaluations of the step-time model over all runs; at most ``max_nfev`` in the solver."""
    import numpy as np
    from scipy.optimize import least_squares

    meas = np.array([r.measured_tokens_per_s_per_gpu for r in runs])
    count = [0]

    def resid(z):
        count[0] += 1
        if on_eval:
            on_eval(count[0])
        return np.log(np.array(predict(runs, free.apply(base, np.exp(z)))) / meas)

    z0 = np.log(_start(base, free))
    before = np.abs(np.expm1(resid(z0))) * 100
    lo = np.log([b[0] for b in free.bounds])
    hi = np.log([b[1] for b in free.bounds])
    sol = least_squares(resid, z0, bounds=(lo, hi), max_nfev=max_nfev)
    after = np.abs(np.expm1(sol.fun)) * 100
    errors = {
        "median_abs_pct_error_before": float(np.median(before)),
        "worst_abs_pct_error_before": float(before.max()),
        "median_abs_pct_error_after": float(np.median(after)),
        "worst_abs_pct_error_after": float(after.max()),
    }
    return _Solution(free.apply(base, np.exp(sol.x)), list(np.exp(sol.x)), errors, count[0])


def _as_profile(c: TimeConstants, runs: list[Run], releases: list[str], info: dict) -> TimeConstants:
    """The calibration profile of fitted constants ``c``: only the release factors these runs calibrate,
    the newest of those releases standing for any release the profile has not seen, and the fit's
    ``info``, run ids and GPUs as provenance."""
    # a release the profile has not seen gets the newest calibrated release's factor
    newest = max(releases, key=release_key)
    kept = {x: c.release(x)[1] for x in releases}  # only what these runs calibrate
    return dataclasses.replace(
        c,
        release_factor=kept,
        newest_release=newest,
        provenance={
            **info,
            "run_ids": [r.id for r in runs],
            "gpus": sorted({r.scenario.gpu.id for r in runs if r.scenario.gpu is not None}),
        },
    )


def fit(
    runs: list[Run],
    base: TimeConstants,
    mode: str = "scale",
    max_nfev: int = 200,
    on_eval: Callable[[int], None] | None = None,
) -> tuple[TimeConstants, dict]:
    """Fit constants to ``runs`` starting from ``base``.

    Returns:
        (constants, info): info has ``free_constants``, ``runs``, median/worst abs % error before and
        after, and ``at_bounds`` (constants that ended on a bound).

    Raises:
        InputError: unknown mode, no runs, fewer runs than free constants, or numpy/scipy missing.
    """
    if mode not in MODES:
        raise InputError("--constants", mode, " or ".join(MODES))
    _require_numerics()
    releases = sorted({r.release or base.newest_release for r in runs})
    runs = [dataclasses.replace(r, release=r.release or base.newest_release) for r in runs]
    free = _free_constants(runs, releases, mode)
    sol = _least_squares(runs, base, free, max_nfev, on_eval)
    fitted = dict(zip(free.labels(), sol.values, strict=True))
    at_bounds = sorted(
        n
        for (n, v), (lo_, hi_) in zip(fitted.items(), free.bounds, strict=True)
        if v <= lo_ * 1.001 or v >= hi_ / 1.001
    )
    info = {
        "mode": mode,
        "free_constants": len(free.names) + len(free.releases),
        "runs": len(runs),
        "releases": releases,
        **sol.errors,
        "model_evaluations": sol.evaluations,
        "at_bounds": at_bounds,
    }
    return _as_profile(sol.constants, runs, releases, info), info


def holdout(
    runs: list[Run], base: TimeConstants, by: str, mode: str = "scale", max_nfev: int = 200, on_eval=None
) -> dict[str, dict]:
    """Leave-one-group-out: for each group (``release`` or ``gpu``), fit on the others and report the
    median abs % error on the held-out group, calibrated and uncalibrated (``base``).

    Raises:
        InputError: unknown grouping, or a fold with too few runs for the mode.
    """
    if by not in ("release", "gpu"):
        raise InputError("--holdout", by, "release or gpu")

    def key(r: Run) -> str:
        # _run_scenario() refused runs without a GPU
        return (r.release or base.newest_release) if by == "release" else cast(GpuSpec, r.scenario.gpu).id

    groups = sorted({key(r) for r in runs})
    if len(groups) < 2:
        raise InputError("--holdout", by, f"runs from at least two {by}s (these runs have only {groups})")
    out = {}
    for g in groups:
        train = [r for r in runs if key(r) != g]
        test = [r for r in runs if key(r) == g]
        c, _ = fit(train, base, mode, max_nfev, on_eval)
        out[g] = {
            "runs": len(test),
            "median_abs_pct_error_uncalibrated": statistics.median(abs_pct_errors(test, base)),
            "median_abs_pct_error_calibrated": statistics.median(abs_pct_errors(test, c)),
        }
    return out


def _run_entries(data: object, defaults: dict | None) -> tuple[list, dict | None]:
    """The run entries of ``data`` (a list, or a mapping with ``runs:``) and the scenario mapping laid
    under each (``defaults``, with the mapping's own ``defaults:`` over it).

    Raises:
        InputError: a ``defaults:`` that is not a mapping, or no non-empty list of runs.
    """
    if isinstance(data, dict):
        extra = data.get("defaults")
        if extra is not None and not isinstance(extra, dict):
            raise InputError("defaults", extra, "a scenario mapping laid under every run")
        defaults = deep_merge(defaults or {}, extra or {})
        data = data.get("runs")
    if not isinstance(data, list) or not data:
        got = "an empty list" if data == [] else ("nothing" if data is None else f"a {type(data).__name__}")
        raise InputError("runs", got, "a non-empty list of runs (or a mapping with runs:)")
    return data, defaults


def _run_id(r: dict, i: int, seen: dict[str, int]) -> str:
    """The id of run entry ``i`` (``r['id']``, else the index) as a string, recorded in ``seen`` (id →
    entry index).

    Raises:
        InputError: not a short string or number, or the id of an earlier entry.
    """
    rid_raw = r.get("id", i)
    if isinstance(rid_raw, bool) or not isinstance(rid_raw, (str, int)) or len(str(rid_raw)) > 200:
        raise InputError(f"runs[{i}].id", rid_raw, "a short string (or a number) naming the run")
    rid = str(rid_raw)
    if rid in seen:
        raise InputError(f"runs[{i}].id", rid, f"a unique id (runs[{seen[rid]}] has it too)")
    seen[rid] = i
    return rid


def _measured(r: dict, i: int) -> int | float:
    """The measured tokens/s/GPU of run entry ``i`` (``measured.tokens_per_s_per_gpu``).

    Raises:
        InputError: absent, not a number, not finite, or outside (0, :data:`MAX_TOKENS_PER_S_PER_GPU`].
    """
    meas = (r.get("measured") or {}).get("tokens_per_s_per_gpu") if isinstance(r.get("measured"), dict) else None
    if (
        not isinstance(meas, (int, float))
        or isinstance(meas, bool)
        or not 0 < meas <= MAX_TOKENS_PER_S_PER_GPU
        or not math.isfinite(meas)
    ):
        raise InputError(
            f"runs[{i}].measured.tokens_per_s_per_gpu",
            meas if not isinstance(meas, int) or abs(meas) < 10**20 else "a huge number",
            f"a positive number up to {MAX_TOKENS_PER_S_PER_GPU:.0e}",
        )
    return meas


def _release(r: dict, i: int) -> str | None:
    """The container release of run entry ``i`` (``26.04`` or ``26.04.01``), None when not given.

    Raises:
        InputError: not such a string (a YAML number gets a hint to quote it).
    """
    release = r.get("release")
    if release is not None and not (isinstance(release, str) and find_release(release) == release):
        hint = " (quote it: YAML reads 26.10 as the number 26.1)" if isinstance(release, (int, float)) else ""
        raise InputError(
            f"runs[{i}].release", release, "a container release as a string, e.g. '26.04' or '26.04.01'" + hint
        )
    return release


def _run_logs(r: dict, i: int) -> tuple[str, ...]:
    """The log paths of run entry ``i`` (``logs:``, as ``sweep collect`` writes them); () without.

    Raises:
        InputError: not a list of at most 10 000 non-empty path strings.
    """
    logs = r.get("logs")
    if logs is None:
        return ()
    ok = isinstance(logs, list) and len(logs) <= 10_000
    if not ok or not all(isinstance(x, str) and x.strip() and "\x00" not in x and len(x) <= 4096 for x in logs):
        raise InputError(f"runs[{i}].logs", logs, "a list of the training logs' paths (relative to the runs file)")
    return tuple(logs)


def _run_scenario(r: dict, i: int, rid: str, defaults: dict | None, release: str | None) -> Scenario:
    """The resolved scenario of run entry ``i`` (id ``rid``): ``defaults`` under its ``scenario``, the
    ``release`` as ``versions.container``, no MTP layers when ``mtp_included`` is false. It must fold
    onto its world size and give what the step-time model needs (model, GPU, sequence length, global
    batch).

    Raises:
        InputError: an invalid scenario or a missing value, named by the entry's index and id.
    """
    sc = deep_merge(defaults or {}, r["scenario"])
    if release is not None:
        sc = deep_merge(sc, {"versions": {"container": str(release)}})
    if r.get("mtp_included") is False:
        sc = deep_merge(sc, {"layout": {"mtp_num_layers": 0}})
    try:
        s = load_scenario(sc)
    except InputError as exc:
        raise exc.renamed(f"runs[{i}] ({rid}).{exc.field}") from None
    except MoeplanError as exc:
        raise InputError(f"runs[{i}] ({rid})", "its scenario", f"a valid scenario ({exc})") from None
    if not s.folds:
        raise InputError(
            f"runs[{i}] ({rid}).system.num_gpus", s.num_gpus, "a world size divisible by TP·PP·CP and ETP·EP·PP"
        )
    missing = [
        k
        for k, v in (
            ("model", s.model),
            ("system.gpu", s.gpu),
            ("training.seq_length", s.training.seq_length),
            ("training.global_batch_size", s.training.global_batch_size),
        )
        if v is None
    ]
    if missing:
        raise InputError(f"runs[{i}] ({rid}).{missing[0]}", None, "a value: the step-time model needs it")
    return s


def load_runs_yaml(data: object, defaults: dict | None = None) -> list[Run]:
    """Runs from a mapping with ``runs:`` (or a list): each ``{id, release?, scenario, measured:
    {tokens_per_s_per_gpu}}``, as ``tests/data/reference/published_runs.yaml``. A top-level ``defaults:``
    mapping (and ``defaults``) is laid under every scenario; ``release`` sets ``versions.container``.

    Raises:
        InputError: a malformed entry (named by its index and field).
    """
    entries, defaults = _run_entries(data, defaults)
    out = []
    seen: dict[str, int] = {}
    for i, r in enumerate(entries):
        if not isinstance(r, dict) or not isinstance(r.get("scenario"), dict):
            raise InputError(f"runs[{i}].scenario", None, "a scenario mapping")
        unknown = sorted(set(r) - RUN_KEYS)
        if unknown:
            raise UnknownNameError(f"runs[{i}].{unknown[0]}", unknown[0], RUN_KEYS, "a run key:")
        rid = _run_id(r, i, seen)
        meas = _measured(r, i)
        release = _release(r, i)
        s = _run_scenario(r, i, rid, defaults, release)
        if release is None:  # the scenario's own container, as the estimate reads it
            release = release_of(s)
        out.append(Run(rid, s, float(meas), release, _run_logs(r, i)))
    return out


def profile_json(c: TimeConstants) -> str:
    """The calibration profile as JSON (the :class:`TimeConstants` fields, 6 significant digits)."""
    d = dataclasses.asdict(c)

    def r6(v):
        if isinstance(v, float):
            return float(f"{v:.6g}")
        if isinstance(v, dict):
            return {k: r6(x) for k, x in v.items()}
        return v

    return json.dumps({k: r6(v) for k, v in d.items()}, indent=2) + "\n"


def _read_profile(path) -> object:
    """The JSON value of the profile file at ``path`` (strict JSON under the input policy: a regular
    file of bounded size, no duplicate key, no NaN, bounded nesting; a FIFO is refused, never read).

    Raises:
        InputError: missing or unreadable file, not JSON, or a key repeated within an object.
    """
    try:
        return load_json_file(path, "--calibration")
    except InputError as exc:
        raise InputError("--calibration", str(path), f"a readable calibration profile ({exc.allowed})") from None


#: keys older profiles carry that no longer mean anything, with why (a profile that names them was
#: fitted with a model that had them, so its other values are not this model's either)
RETIRED_KEYS = {
    "dp_contention_factor": "dp_contention_factor is no longer fitted: overlapped DP traffic costs the "
    "measured compute slowdown, moeplan.model.constants.OVERLAP_COMPUTE_SLOWDOWN",
}


def _check_profile_keys(data: object, path) -> None:
    """A profile is an object with every :class:`TimeConstants` field (``provenance`` optional) and no
    other key: a partial profile would silently take the physical priors for what it leaves out.

    Raises:
        InputError: not an object, an unknown key, or a missing one.
    """
    fields = {f.name for f in dataclasses.fields(TimeConstants)}
    if not isinstance(data, dict):
        raise InputError("--calibration", str(path), "a JSON object written by moeplan calibrate -o")
    retired = sorted(set(data) & set(RETIRED_KEYS))
    if retired:
        why = "; ".join(RETIRED_KEYS[k] for k in retired)
        raise InputError("--calibration", str(path), f"a profile of this moeplan: re-run moeplan calibrate ({why})")
    if set(data) - fields:
        unknown = name_some(sorted(set(data) - fields))
        raise InputError("--calibration", str(path), f"a moeplan calibration profile (unknown keys {unknown})")
    absent = sorted(fields - {"provenance"} - set(data))
    if absent:
        # a partial profile would silently take the physical priors for what it leaves out
        raise InputError(
            "--calibration",
            str(path),
            f"a complete profile as moeplan calibrate -o writes (missing {name_some(absent)})",
        )


def _finite_positive(v) -> bool:
    """A number (not a bool) that is finite and above 0."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0


def _check_profile_tables(data: dict, path) -> None:
    """The profile's mappings: ``release_factor`` non-empty, every factor within :data:`RELEASE_BOUNDS`
    and ``newest_release`` one of its releases; ``a2a_efficiency`` one value for each of
    :data:`A2A_BACKENDS`; both positive finite numbers; ``provenance`` a mapping whose ``gpus``, if
    given, is a list of GPU ids.

    Raises:
        InputError: the first of these that fails, the field named.
    """
    for key in ("release_factor", "a2a_efficiency"):
        if key in data and not (isinstance(data[key], dict) and all(_finite_positive(v) for v in data[key].values())):
            raise InputError(
                "--calibration", f"{key}={short_repr(data[key])}", "a mapping of names to positive finite numbers"
            )
    if not data.get("release_factor"):
        raise InputError(
            "--calibration", str(path), "a profile with a release_factor (moeplan calibrate -o writes one)"
        )
    newest = data.get("newest_release")
    if not isinstance(newest, str) or newest not in data["release_factor"]:
        raise InputError(
            "--calibration",
            f"newest_release={short_repr(newest)}",
            f"one of the profile's releases {sorted(data['release_factor'])}",
        )
    if "a2a_efficiency" in data and set(data["a2a_efficiency"]) != set(A2A_BACKENDS):
        raise InputError(
            "--calibration",
            f"a2a_efficiency={short_repr(data['a2a_efficiency'])}",
            f"one efficiency for each of {list(A2A_BACKENDS)}",
        )
    prov = data.get("provenance", {})
    gpus = prov.get("gpus") if isinstance(prov, dict) else None
    if not isinstance(prov, dict) or (
        gpus is not None and not (isinstance(gpus, list) and all(isinstance(g, str) for g in gpus))
    ):
        raise InputError(
            "--calibration", f"provenance={short_repr(prov)}", "a mapping whose gpus, if given, is a list of GPU ids"
        )
    lo, hi = RELEASE_BOUNDS
    for name, v in data["release_factor"].items():
        if not lo <= v <= hi:
            raise InputError("--calibration", f"release_factor.{name}={v}", f"a factor between {lo:g} and {hi:g}")


def _check_constant_ranges(c: TimeConstants) -> None:
    """Every shared constant of ``c`` is a positive finite number within a factor 10 of its plausible
    range (:data:`SHARED`, :data:`PINNED_RANGES`; shares of a bandwidth or a time never above 1).

    Raises:
        InputError: the first constant out of range, named with its value.
    """
    bounds = {n: (lo, hi) for n, lo, hi in SHARED + PINNED_RANGES}
    for n, v in values_of(c).items():
        if not _finite_positive(v):
            raise InputError("--calibration", f"{n}={short_repr(v)}", "a positive finite number")
        lo, hi = bounds.get(n, (0, math.inf))
        top = min(hi * 10, 1.0) if n in FRACTIONS else hi * 10
        if not lo / 10 <= v <= top:
            raise InputError(
                "--calibration", f"{n}={v}", f"a value near the plausible range {lo:g}–{hi:g} (at most {top:g})"
            )


def load_profile(path) -> TimeConstants:
    """Read a calibration profile written by ``moeplan calibrate``.

    Raises:
        InputError: missing, unreadable or malformed file (field named).
    """
    data = _read_profile(path)
    _check_profile_keys(data, path)
    data = cast(dict, data)  # _check_profile_keys() refused anything but a JSON object
    _check_profile_tables(data, path)
    try:
        c = TimeConstants(**data)
    except TypeError as exc:
        raise InputError("--calibration", str(path), f"a moeplan calibration profile ({exc})") from None
    _check_constant_ranges(c)
    return c
