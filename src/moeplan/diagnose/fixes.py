"""Memory fixes for a scenario that hit an OOM (``moeplan oom --scenario``), largest saving first.

The changes are :func:`moeplan.plan.changes.memory_changes` — the same ones ``moeplan fit`` tries,
tried the same way (every rule checked, memory estimated, step time when it can be): more recompute
(each rung of the ladder above the scenario's, then full), optimizer CPU offload, CP×2, PP×2, TP×2,
EP×2, ETP = TP, MBS/2, and an FP8 recipe (marked as a numerics change). Savings are the memory
model's (peak over stages, bytes per GPU); the step-time change is the step-time model's (a calibrated
estimate, see docs/accuracy.md). ``oom`` ranks by saving (what frees the most memory), ``fit`` by
step-time cost among what fits.
"""

from __future__ import annotations

from moeplan.errors import MoeplanError
from moeplan.i18n.messages import msg
from moeplan.model.constants import TimeConstants
from moeplan.model.memory import estimate_memory
from moeplan.model.step import estimate_step
from moeplan.plan.changes import Rejection, memory_changes, try_change
from moeplan.resolve.load import load_scenario


def rank_memory_fixes(data: dict, constants: TimeConstants | None = None) -> tuple[list[dict], list[dict]]:
    """Try each memory-saving change on a scenario mapping.

    Returns:
        (fixes, rejected): the legal changes that lower the peak, largest saving first, as dicts
        with ``change``, ``kind``, ``changes_numerics``, ``peak_bytes`` (after), ``saving_bytes``,
        ``fits`` and ``step_time_change_rel`` (None when the step-time model lacks inputs); and the
        changes dropped, with the first rule (``rule``; None for an input error) and its ``message``,
        including those that do not lower the peak.

    Raises:
        InputError: the scenario itself cannot be loaded or estimated.
    """
    s0 = load_scenario(data)
    peak0 = estimate_memory(s0).peak_stage.total_bytes
    try:
        t0: float | None = estimate_step(s0, constants).step_time_s
    except MoeplanError:
        t0 = None
    out: list[dict] = []
    rejected: list[dict] = []
    for change in memory_changes(s0):
        res = try_change(data, change, constants, t0 is not None)
        if isinstance(res, Rejection):
            rule = None if res.rule_id == "input" else res.rule_id
            rejected.append({"change": change.label, "rule": rule, "message": res.message})
            continue
        peak = res.memory.peak_stage.total_bytes
        t = res.step_time_s
        out.append(
            {
                "change": change.label,
                "kind": change.kind,
                "changes_numerics": change.changes_numerics,
                "peak_bytes": int(peak),
                "saving_bytes": int(peak0 - peak),
                "verdict": res.memory.verdict,
                "fits": res.memory.verdict == "fits",
                "step_time_change_rel": (t - t0) / t0 if t0 and t else None,
            }
        )
    out.sort(key=lambda f: -f["saving_bytes"])
    for f in out:
        if f["saving_bytes"] <= 0:
            rejected.append(
                {
                    "change": f["change"],
                    "rule": None,
                    "message": msg("oom.fix_does_not_lower_peak", gib=-f["saving_bytes"] / 2**30),  # the change
                }
            )
    return [f for f in out if f["saving_bytes"] > 0], rejected
