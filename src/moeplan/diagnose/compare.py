"""Compare two training runs: is B slower (or heavier) than A beyond run-to-run noise, and why.

Statistics: the steady-state iteration times of each log (warm-up skipped, see
:mod:`moeplan.io.run_logs`) are compared with the two-sided Mann–Whitney U test (Mann & Whitney 1947;
normal approximation with tie correction and continuity correction 0.5, as
``scipy.stats.mannwhitneyu(method="asymptotic")``), which does not assume normal noise and is robust to
the odd slow iteration (checkpointing, GC). The size of the change is the Hodges–Lehmann shift (median
of all pairwise differences B−A; above 1000 values per sample, of 1000 evenly spaced order statistics)
relative to A's median. A change is reported when p < ``alpha``
(default 0.01) **and** the shift is at least ``min_effect`` (default 0.5 %), so that a statistically
detectable but irrelevant change on a long log is not called a regression.

Causes: the keys that differ between the two argument dumps, each applied alone to run A's scenario and
ranked by how much our step-time and memory models say it moves the step time and the peak memory.
Known issues (:mod:`moeplan.catalog.known_issue_table`): when the two runs' software versions differ (their
``versions:``, or the container release and PyTorch version of the log banners) across an issue's
affected range — one run affected, the other not — the issue is offered as a possible cause
(``known_issue_causes``), the slower run's first.
"""

from __future__ import annotations

import copy
import math
import statistics
from dataclasses import dataclass, field
from typing import Any

from moeplan.catalog.known_issue_table import known_issues
from moeplan.errors import InputError, MoeplanError
from moeplan.inputs.loading import deep_merge
from moeplan.inputs.policy import ascii_int
from moeplan.io.imports import dump_args
from moeplan.io.run_logs import LogStats
from moeplan.model.memory import estimate_memory
from moeplan.model.step import estimate_step
from moeplan.resolve.load import load_scenario
from moeplan.rules import validate


@dataclass(frozen=True)
class ShiftTest:
    """Result of the Mann–Whitney comparison of two samples (B against A).

    Attributes:
        n_a, n_b: sample sizes; median_a, median_b: sample medians (input units);
        shift: Hodges–Lehmann estimate of B−A (input units); shift_rel: ``shift / median_a``;
        u_b: Mann–Whitney U of B; z: standardised statistic (positive when B is larger);
        p_two_sided: two-sided p-value; verdict: ``"higher"``, ``"lower"``, ``"no change"``, or
        ``"inconclusive"`` when even complete separation of samples this small could not reach ``alpha``;
        needed_per_log: with ``"inconclusive"``, the smallest equal sample size per log whose complete
        separation reaches ``alpha`` (:func:`separable_size`), else None.
    """

    n_a: int
    n_b: int
    median_a: float
    median_b: float
    shift: float
    shift_rel: float
    u_b: float
    z: float
    p_two_sided: float
    verdict: str
    needed_per_log: int | None = None


def _p_at_separation(na: int, nb: int) -> float:
    """The smallest two-sided p samples of ``na`` and ``nb`` values can give (complete separation, no
    ties; the normal approximation with continuity correction :func:`shift_test` uses)."""
    var0 = na * nb * (na + nb + 1) / 12
    return math.erfc((na * nb / 2 - 0.5) / math.sqrt(var0) / math.sqrt(2))


def separable_size(alpha: float) -> int:
    """The smallest sample size per log at which complete separation without ties reaches p < ``alpha``
    (6 at 0.01, 4 at 0.05).

    Raises:
        InputError: ``alpha`` not strictly between 0 and 1 (no size reaches 0).
    """
    if not 0 < alpha < 1:
        raise InputError("alpha", alpha, "a significance level strictly between 0 and 1")
    m = 3
    while _p_at_separation(m, m) >= alpha:
        m += 1
    return m


def _ranks(values: list[float]) -> tuple[list[float], float]:
    """Average ranks (1-based) and the tie term Σ(t³−t)."""
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    ties = 0.0
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        avg = (i + j) / 2 + 1
        for k in range(i, j + 1):
            ranks[order[k]] = avg
        t = j - i + 1
        ties += t**3 - t
        i = j + 1
    return ranks, ties


_HL_MAX = 1000


def _thin(x: list[float]) -> list[float]:
    """At most ``_HL_MAX`` evenly spaced order statistics of ``x`` (all of it when smaller): keeps the
    Hodges–Lehmann pairwise median at 10^6 differences for long logs (20 000 iterations each would be
    4·10^8)."""
    s = sorted(x)
    n = len(s)
    if n <= _HL_MAX:
        return s
    return [s[round(i * (n - 1) / (_HL_MAX - 1))] for i in range(_HL_MAX)]


def shift_test(a: list[float], b: list[float], alpha: float = 0.01, min_effect: float = 0.005) -> ShiftTest:
    """Two-sided Mann–Whitney U test of B against A with a Hodges–Lehmann shift estimate.

    Args:
        a, b: samples (e.g. iteration times in ms), at least 3 finite values each (non-finite values
            are dropped).
        alpha: significance level; min_effect: smallest relative shift reported as a change.

    Raises:
        InputError: a sample with fewer than 3 values, or ``alpha`` not strictly between 0 and 1.
    """
    if not 0 < alpha < 1:
        raise InputError("alpha", alpha, "a significance level strictly between 0 and 1")
    a = [x for x in a if math.isfinite(x)]
    b = [x for x in b if math.isfinite(x)]
    for name, x in (("A", a), ("B", b)):
        if len(x) < 3:
            raise InputError(f"log {name}", f"{len(x)} steady-state iterations", "at least 3 to compare")
    na, nb = len(a), len(b)
    n = na + nb
    ranks, ties = _ranks(list(a) + list(b))
    u_b = sum(ranks[na:]) - nb * (nb + 1) / 2
    mean = na * nb / 2
    var = na * nb / 12 * ((n + 1) - ties / (n * (n - 1)))
    if var <= 0:
        z = 0.0
    else:
        d = u_b - mean
        z = (d - math.copysign(0.5, d)) / math.sqrt(var) if abs(d) > 0.5 else 0.0
    p = min(1.0, math.erfc(abs(z) / math.sqrt(2)))
    med_a, med_b = statistics.median(a), statistics.median(b)
    thin_a, thin_b = _thin(a), _thin(b)  # each sorted once (not once per element of the other)
    shift = statistics.median([y - x for x in thin_a for y in thin_b])
    rel = shift / med_a if med_a else 0.0
    verdict = "no change"
    if p < alpha and abs(rel) >= min_effect:
        verdict = "higher" if shift > 0 else "lower"
    elif p >= alpha and _p_at_separation(na, nb) >= alpha:  # the smallest p these sizes reach without ties
        return ShiftTest(na, nb, med_a, med_b, shift, rel, u_b, z, p, "inconclusive", separable_size(alpha))
    return ShiftTest(na, nb, med_a, med_b, shift, rel, u_b, z, p, verdict)


@dataclass
class Comparison:
    """Run B against run A: iteration-time test, memory change, config diff and ranked causes."""

    time: ShiftTest
    memory_mb: dict[str, tuple[float, float]] = field(default_factory=dict)
    config_diff: list[dict] = field(default_factory=list)
    causes: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    known_issue_causes: list[dict] = field(default_factory=list)

    def to_dict(self) -> dict:
        t = self.time
        return {
            "iteration_time_ms": {
                "a_median": t.median_a,
                "b_median": t.median_b,
                "shift_ms": t.shift,
                "shift_rel": t.shift_rel,
                "n_a": t.n_a,
                "n_b": t.n_b,
                "test": "Mann-Whitney U, two-sided, normal approximation",
                "z": t.z,
                "p_value": t.p_two_sided,
                "verdict": {
                    "higher": "slower",
                    "lower": "faster",
                    "inconclusive": "inconclusive: too few steady-state iterations for this alpha (even if every "
                    "iteration of one log were slower than every one of the other, p could not fall below it; "
                    f"{t.needed_per_log} per log are needed)",
                }.get(t.verdict, "no change beyond noise"),
            },
            "memory_mb": {
                k: {"a": a, "b": b, "change_rel": (b - a) / a if a else None} for k, (a, b) in self.memory_mb.items()
            },
            "config_diff": self.config_diff,
            "causes": self.causes,
            "known_issue_causes": self.known_issue_causes,
            "notes": self.notes,
        }


ARCH_KEYS = (
    "num_layers",
    "hidden_size",
    "ffn_hidden_size",
    "num_attention_heads",
    "num_moe_experts",
    "moe_ffn_hidden_size",
)


def model_mismatch(dump: str | dict[str, str], model) -> list[str]:
    """Architecture values in a log's argument dump (the log's text, or the dump's ``name → value``
    text as :class:`~moeplan.io.imports.DumpReader` keeps it) that differ from ``model`` (a
    ModelSpec): the scenario names another model than the run trained. Empty when they agree or the
    dump lacks them."""
    args = dump_args(dump)[0] if isinstance(dump, str) else dump
    out = []
    for k in ARCH_KEYS:
        raw, ours = args.get(k), getattr(model, k, None)
        v = ascii_int(raw, 0) if raw is not None else None
        if v is not None and ours is not None and v != int(ours):
            out.append(f"{k}: log {v}, {getattr(model, 'name', 'model')} {ours}")
    return out


def _flatten(d: dict, prefix: str = "") -> dict[str, object]:
    out: dict[str, object] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and k != "model":
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out


def _set(d: dict, dotted: str, value: object) -> None:
    parts = dotted.split(".")
    for p in parts[:-1]:
        d = d.setdefault(p, {})
    if value is None:
        d.pop(parts[-1], None)
    else:
        d[parts[-1]] = value


def predict_pair(data: dict, constants=None) -> tuple[float, float]:
    """(step time s, peak memory bytes) of a scenario mapping; raises on anything unusable."""
    s = load_scenario(data)
    return estimate_step(s, constants).step_time_s, float(estimate_memory(s).peak_stage.total_bytes)


def _broken(data: dict) -> list[str]:
    """``rule_id: message`` of every rule a scenario mapping breaks ([] when it loads and is legal or
    does not load: the prediction says why)."""
    try:
        return [f"{f.rule_id}: {f.message}" for f in validate(load_scenario(data)).errors]
    except MoeplanError:
        return []


def rank_causes(
    config_a: dict, config_b: dict, base: dict | None = None, direction: int = 1, constants=None
) -> tuple[list[dict], list[dict], list[str]]:
    """Diff two scenario mappings and rank each changed key by its modelled effect.

    Args:
        config_a, config_b: scenario mappings read from the two runs (``import_config``).
        base: a scenario mapping supplying what the logs lack (model, GPU, world size); the run's
            config is laid over it.
        constants: step-time constants (a calibration profile); None = the packaged ones.

    Returns:
        (config_diff, causes, notes): every changed key with both values; the changed keys applied
        alone to A, sorted by Δ step time in the observed ``direction`` (+1: B slower, so the keys the
        model says slow the step most come first; -1: B faster), with ``step_time_change_rel`` and ``peak_memory_change_rel``
        (None where the change alone is not a valid layout) and ``rejected_by`` (the rules the change
        breaks that A does not); notes on what could not be evaluated and on the rules each run breaks.
    """
    fa, fb = _flatten(config_a), _flatten(config_b)
    diff: list[dict[str, Any]] = [
        {"key": k, "a": fa.get(k), "b": fb.get(k)}
        for k in sorted(set(fa) | set(fb))
        if fa.get(k) != fb.get(k) and k not in ("name", "notes")
    ]
    notes: list[str] = []
    full_a = copy.deepcopy(deep_merge(copy.deepcopy(base or {}), config_a))
    try:
        t0, m0 = predict_pair(full_a, constants)
    except MoeplanError as exc:
        notes.append(f"causes not ranked: run A's configuration is not a complete scenario ({exc}); pass --scenario")
        return diff, [], notes
    causes: list[dict[str, Any]] = []
    # what A already breaks is A's (the note below), not the change's: a key is "rejected by check"
    # only for the rules its change breaks
    broken_a = set(_broken(full_a))
    for d in diff:
        trial = copy.deepcopy(full_a)  # each key applied alone: never share nested sections
        _set(trial, d["key"], d["b"])
        try:
            t1, m1 = predict_pair(trial, constants)
            causes.append(
                {
                    **d,
                    "step_time_change_rel": (t1 - t0) / t0,
                    "peak_memory_change_rel": (m1 - m0) / m0 if m0 else None,
                    "rejected_by": [x for x in _broken(trial) if x not in broken_a],
                }
            )
        except MoeplanError as exc:  # a change that is only valid together with others
            causes.append(
                {
                    **d,
                    "step_time_change_rel": None,
                    "peak_memory_change_rel": None,
                    "why_not": str(exc),
                    "rejected_by": [],
                }
            )
    causes.sort(key=lambda c: -direction * c["step_time_change_rel"] if c["step_time_change_rel"] is not None else 1e9)
    for name, run in (("A", full_a), ("B", deep_merge(copy.deepcopy(base or {}), config_b))):
        broke = _broken(run)
        if broke:
            notes.append(f"run {name}'s configuration breaks {len(broke)} rule(s) (moeplan check): " + "; ".join(broke))
    return diff, causes, notes


def modelled_change(config_a: dict, config_b: dict, base: dict | None, constants=None) -> float | None:
    """Relative step-time change the model predicts from run A's configuration to run B's, every
    changed key applied at once; None when either is not a complete, valid scenario."""
    full_a = deep_merge(copy.deepcopy(base or {}), config_a)
    full_b = deep_merge(copy.deepcopy(base or {}), config_b)
    try:
        t0, _ = predict_pair(full_a, constants)
        t1, _ = predict_pair(full_b, constants)
    except MoeplanError:
        return None
    return (t1 - t0) / t0


def run_versions(stats: LogStats, config: dict | None, base: dict | None) -> dict[str, str]:
    """A run's ``versions:`` mapping: the base scenario's, the run's configuration's over it, and the
    log banner's container release and PyTorch version where neither states them."""
    v = {**((base or {}).get("versions") or {}), **((config or {}).get("versions") or {})}
    env = stats.environment or {}
    if "container" not in v and env.get("container_release"):
        v["container"] = str(env["container_release"])
    if "torch" not in v and env.get("torch"):
        v["torch"] = str(env["torch"])
    return {k: str(x) for k, x in v.items() if x is not None}


def _run_scenario(config: dict | None, base: dict | None, versions: dict[str, str]):
    data = deep_merge(copy.deepcopy(base or {}), copy.deepcopy(config or {}))
    data["versions"] = dict(versions)
    try:
        return load_scenario(data), None
    except InputError as exc:
        if exc.field == "versions.torch" and "torch" in versions:  # a banner build string that is not PEP 440
            return _run_scenario(config, base, {k: v for k, v in versions.items() if k != "torch"})
        return None, str(exc)
    except MoeplanError as exc:
        return None, str(exc)


def known_issue_causes(
    a: LogStats, b: LogStats, config_a: dict | None, config_b: dict | None, base: dict | None, direction: int = 1
) -> tuple[list[dict], list[str]]:
    """Known issues one run has and the other not because their versions differ.

    Returns:
        (causes, notes): each cause ``{id, rule_id, run (A | B: the affected run), symptom, size, title,
        source, a_versions, b_versions (the issue's packages in each run), workaround}``, the issues of
        the slower run (``direction`` +1: B) first and slowdowns before other symptoms; notes on what
        could not be evaluated.
    """
    va, vb = run_versions(a, config_a, base), run_versions(b, config_b, base)
    if va == vb:
        return [], []
    sa, why_a = _run_scenario(config_a, base, va)
    sb, why_b = _run_scenario(config_b, base, vb)
    if sa is None or sb is None:
        return [], [f"known issues not compared: {why_a or why_b}"]
    out = []
    for k in known_issues():
        status = {
            run: (k.version_status(s.versions)[0] if k.triggered(s) else "not_affected")
            for run, s in (("A", sa), ("B", sb))
        }
        if sorted(status.values()) != ["affected", "not_affected"]:
            continue
        run = "B" if status["B"] == "affected" else "A"
        pkgs = [p.package for p in k.packages]
        out.append(
            {
                "id": k.id,
                "rule_id": k.rule_id,
                "run": run,
                "symptom": k.symptom,
                "size": k.size,
                "title": k.title,
                "source": k.source,
                "a_versions": {p: str(sa.versions.get(p)) if sa.versions.get(p) else None for p in pkgs},
                "b_versions": {p: str(sb.versions.get(p)) if sb.versions.get(p) else None for p in pkgs},
                "workaround": k.workaround,
            }
        )
    slower = "B" if direction >= 0 else "A"
    out.sort(key=lambda c: (c["run"] != slower, c["symptom"] != "slowdown"))
    return out, []


def compare_runs(
    a: LogStats,
    b: LogStats,
    config_a: dict | None = None,
    config_b: dict | None = None,
    base: dict | None = None,
    alpha: float = 0.01,
    min_effect: float = 0.005,
    constants=None,
) -> Comparison:
    """Compare run B against run A (see the module docstring for the test and the ranking).

    Raises:
        InputError: fewer than 3 steady-state iterations with an elapsed time in either log.
    """
    t = shift_test(a.series("iteration_time_ms"), b.series("iteration_time_ms"), alpha, min_effect)
    cmp = Comparison(time=t)
    for k in ("max_allocated", "max_reserved", "device_used"):
        if k in a.memory_mb and k in b.memory_mb:
            cmp.memory_mb[k] = (a.memory_mb[k], b.memory_mb[k])
    if config_a is not None and config_b is not None:
        direction = -1 if t.shift < 0 else 1
        cmp.config_diff, cmp.causes, cmp.notes = rank_causes(config_a, config_b, base, direction, constants)
        together = modelled_change(config_a, config_b, base, constants) if cmp.causes else None
        if together is not None:
            cmp.notes.append(
                f"all changed keys together: the model predicts {100 * together:+.1f} % step time against the "
                f"measured {100 * t.shift_rel:+.1f} %; the remaining {100 * (t.shift_rel - together):+.1f} % is not "
                "explained by the configuration (software, hardware, data or noise)"
            )
    else:
        cmp.notes.append("no argument dump in one of the logs: no config diff")
    cmp.known_issue_causes, notes = known_issue_causes(a, b, config_a, config_b, base, -1 if t.shift < 0 else 1)
    cmp.notes += notes
    if cmp.known_issue_causes:
        ids = ", ".join(f"{c['id']} (run {c['run']})" for c in cmp.known_issue_causes)
        cmp.notes.append(f"the runs' software versions differ across known issues: {ids} (see known_issue_causes)")
    return cmp
