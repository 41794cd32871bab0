"""``moeplan fit``: the smallest changes that make a layout fit, cheapest in step time first.

Single changes to the user's scenario (world size, sequence length and global batch size held):
each rung of the recompute ladder beyond the current one (selective modules, cheapest per GiB first,
then full), optimizer CPU offload at 0.25 / 0.5 / 1.0 of the state, CP×2, PP×2 (with a legal split),
EP×2, TP×2 (with SP), ETP = TP, MBS/2, and an FP8 recipe the GPU runs (MXFP8 on Blackwell,
blockwise FP8 on Hopper). Each is checked by every rule, its peak memory estimated and, with a global
batch size, its step time. Pairs of legal single changes that are not enough alone are tried too
(two cheap changes, e.g. selective recompute with optimizer offload, can cost less than one large
one); when nothing fits, the planner's best layout for the same model, GPUs and batch is proposed.
"""

from __future__ import annotations

import itertools
from typing import cast

from moeplan.errors import InputError
from moeplan.inputs.resolved import Scenario
from moeplan.model.constants import TimeConstants
from moeplan.model.memory import MemoryEstimate, dominant_items, estimate_memory, largest_fitting_peak
from moeplan.model.step import estimate_step
from moeplan.plan.changes import Change, Outcome, Rejection, apply_edits, combine, memory_changes, try_change
from moeplan.plan.describe import describe
from moeplan.plan.planner import plan
from moeplan.plan.space import with_sections
from moeplan.resolve.assumptions import verdict_assumptions
from moeplan.resolve.load import load_scenario
from moeplan.rules import validate
from moeplan.units import GIB_BYTES


def _split_fix(s: Scenario) -> dict | None:
    """The check's own fix for layers that do not divide by PP (``account_for_*`` where counting the
    embedding and/or the loss makes it divide, else the uneven split or the balanced layout string:
    :func:`moeplan.rules.pipeline.split_fix`), as edits; None when the split is legal or unfixable."""
    for f in validate(s).errors:
        if f.rule_id == "pipeline.num_layers_divisible_by_pp" and f.edits:
            return {"layout": dict(f.edits)}
    return None


class _Fit:
    """The state of one ``fit_layout`` call: the scenario mapping, its baseline and the rows found."""

    def __init__(self, data: dict, mem0: MemoryEstimate, limit: float, t0: float | None, constants):
        self.data, self.mem0, self.limit, self.t0, self.constants = data, mem0, limit, t0, constants
        self.fixes: list[dict] = []
        self.not_enough: list[dict] = []
        self.rejected: list[dict] = []

    def trial(self, change: Change) -> dict | None:
        """Try one change: a row (with ``fits``), or None after recording why it was rejected."""
        res = try_change(self.data, change, self.constants, self.t0 is not None)
        if isinstance(res, Rejection):
            self.rejected.append({"change": change.label, "rule_id": res.rule_id, "message": res.message})
            return None
        return self.row(res)

    def row(self, res: Outcome) -> dict:
        mem = res.memory
        return {
            "change": res.change.label,
            "kind": res.change.kind,
            "changes_numerics": res.change.changes_numerics,
            "peak_gib": mem.peak_bytes / GIB_BYTES,
            "peak_allocated_gib": mem.peak_allocated_bytes / GIB_BYTES,
            "peak_reserved_gib": mem.peak_reserved_bytes / GIB_BYTES,
            "saved_gib": (self.mem0.peak_bytes - mem.peak_bytes) / GIB_BYTES,
            "step_time_change_pct": 100 * (res.step_time_s / self.t0 - 1) if self.t0 and res.step_time_s else None,
            "tokens_per_s_per_gpu": res.tokens_per_s_per_gpu,
            "scenario": res.data,
            "verdict": mem.verdict,
            # within the limit: --headroom-gib when given, else the largest peak whose verdict is fits
            "fits": mem.peak_bytes <= self.limit and mem.verdict != "does-not-fit",
        }


def _singles_and_pairs(f: _Fit, s0: Scenario, fits_already: bool) -> None:
    """Every single change, then pairs of legal changes that are not enough alone: two cheap ones
    (selective recompute + optimizer offload) can cost less than one big one that fits by itself."""
    short: list[Change] = []
    for change in memory_changes(s0):
        row = f.trial(change)
        if row is None:
            continue
        (f.fixes if row["fits"] else f.not_enough).append(row)
        if not row["fits"]:
            short.append(change)
    if fits_already:
        return
    for a, b in itertools.combinations(short, 2):
        both = combine(a, b)
        if both is None:
            continue
        row = f.trial(both)
        if row is not None and row["fits"]:
            f.fixes.append(row)


def _replan(f: _Fit, headroom_gib: float | None) -> dict | None:
    """No small change is enough: the planner's best layout at the same size, model and batch."""

    req = {k: v for k, v in f.data.items() if k != "layout"}
    req["training"] = {k: v for k, v in (f.data.get("training") or {}).items() if k != "micro_batch_size"}
    res = plan(req, top=1, headroom_gib=headroom_gib, constants=f.constants)
    if not res.candidates:
        return None
    c = res.candidates[0]
    return {
        "change": "re-plan the layout (moeplan plan): " + describe(c),
        "kind": "replan",
        "changes_numerics": False,
        "peak_gib": c.peak_gib,
        "saved_gib": (f.mem0.peak_bytes / GIB_BYTES) - c.peak_gib,
        "step_time_change_pct": (100 * (c.throughput["step_time_s"] / f.t0 - 1)) if f.t0 else None,
        "tokens_per_s_per_gpu": c.tokens_per_s_per_gpu,
        "scenario": c.data,
        "verdict": c.memory.get("verdict"),
        "fits": c.memory.get("verdict") == "fits",
    }


def _yaml(v) -> str:
    return {True: "true", False: "false", None: "unset"}[v] if isinstance(v, bool) or v is None else str(v)


def _cost(r: dict) -> tuple:
    """Layout changes before numerics changes, then the least step-time cost, then the most saved."""
    t = r["step_time_change_pct"]
    return (r.get("changes_numerics", False), t if t is not None else 0.0, -r["saved_gib"], r["change"])


def _baseline(data: dict, headroom_gib: float | None, constants) -> tuple[Scenario, dict, dict | None]:
    """The scenario after the check's uneven split (when its layers do not divide by PP), and its
    baseline figures."""
    s0 = load_scenario(data)
    split_fix = _split_fix(s0)
    if split_fix is not None:
        # layers that do not divide by PP: apply `check`'s own fix first, then look for memory
        data = apply_edits(data, split_fix)
        s0 = load_scenario(data)
    if s0.gpu is None:
        raise InputError("system.gpu", None, "a GPU: fitting needs its memory")
    usable_gib = cast(int, s0.capacity_bytes) / GIB_BYTES  # usable HBM less system.reserved_gib
    if headroom_gib is not None and not (0 <= headroom_gib < usable_gib):
        raise InputError("--headroom-gib", headroom_gib, f"0 to less than the GPU's usable {usable_gib:.1f} GiB")
    return s0, data, split_fix


def default_fit_limit(mem: MemoryEstimate) -> float:
    """The peak (bytes) a fix must stay under without ``--headroom-gib``: the largest peak whose
    memory verdict is ``fits`` (:func:`moeplan.model.memory.largest_fitting_peak`: capacity / the
    largest measured/predicted peak of docs/memory_accuracy.md), so that a saved fix is what ``estimate``
    and ``check`` call ``fits`` (exit 0). Needs a GPU (``capacity_bytes``)."""
    return largest_fitting_peak(cast(int, mem.capacity_bytes))


def _verdict_doc(mem: MemoryEstimate) -> dict:
    """The layout's own memory verdict as ``check``, ``estimate``, ``plan`` and ``oom`` give it:
    ``verdict``, ``verdict_band`` (:meth:`moeplan.model.memory.MemoryVerdict.to_dict`),
    ``dominant_items``, ``peak_bytes``, ``capacity_bytes``, ``error_band_pct``."""
    return {
        "verdict": mem.verdict,
        "verdict_band": mem.memory_verdict.to_dict(),
        "dominant_items": mem.dominant_items(),
        "peak_bytes": mem.peak_bytes,
        "capacity_bytes": mem.capacity_bytes,
        "error_band_pct": mem.error_band_pct,
    }


def fit_layout(
    data: dict, *, headroom_gib: float | None = None, top: int = 8, constants: TimeConstants | None = None
) -> dict:
    """Changes that make the scenario fit, least step-time cost first (numerics changes last).

    Returns:
        ``{assumes, peak_gib, capacity_gib, reserved_gib, limit_gib, fits_already, memory, fixes[], more_fixes[],
        tried, not_enough[], replanned, rejected[], check_errors[], applied_first}``: ``fixes`` the ``top``
        least costly changes that fit, ``more_fixes`` the other changes that fit (every change tried
        is in one of ``fixes``, ``more_fixes``, ``not_enough`` or ``rejected``; ``tried`` counts them);
        ``replanned`` when no single change or pair fits
        (the last fix is the planner's layout); ``memory`` the layout's own memory verdict, the one
        every command gives (:func:`_verdict_doc`); ``fits_already`` the peak is within the limit
        (``--headroom-gib`` when given, else the largest peak whose verdict is ``fits``); each fix's
        ``fits`` the same of its peak;
        ``applied_first`` the uneven pipeline split applied
        before anything else when the layers do not divide by PP, else None; ``dominant_items`` the
        parts of the peak stage that push it over the limit (:func:`moeplan.model.memory.dominant_items`,
        empty when it fits already); ``capacity_gib`` the
        usable HBM less ``reserved_gib`` (``system.reserved_gib``); each fix: ``change``,
        ``kind``, ``changes_numerics``, ``peak_gib``, ``saved_gib``, ``step_time_change_pct`` (None
        without a global batch size), ``tokens_per_s_per_gpu``, ``scenario`` (the changed mapping, for
        ``check``/``export``); each rejected change its ``rule_id`` and ``message``.

    Raises:
        InputError: a scenario that cannot be estimated (field named).
    """
    s0, data, split_fix = _baseline(with_sections(data), headroom_gib, constants)
    mem0 = estimate_memory(s0)
    cap = cast(int, mem0.capacity_bytes)  # _baseline() refused a scenario without a GPU
    limit = cap - headroom_gib * GIB_BYTES if headroom_gib is not None else default_fit_limit(mem0)
    errors = validate(s0).errors
    timed = s0.training.global_batch_size is not None and not errors
    f = _Fit(data, mem0, limit, estimate_step(s0, constants).step_time_s if timed else None, constants)
    fits_already = mem0.peak_bytes <= limit and mem0.verdict != "does-not-fit"
    _singles_and_pairs(f, s0, fits_already)
    replanned = False
    if not f.fixes and not fits_already:
        row = _replan(f, (cap - limit) / GIB_BYTES)
        if row is not None:
            f.fixes.append(row)
            replanned = True
    fixes = sorted([r for r in f.fixes if r["saved_gib"] > 0] if fits_already else f.fixes, key=_cost)
    return {
        "assumes": [a.to_dict() for a in verdict_assumptions(s0)],
        "peak_gib": mem0.peak_bytes / GIB_BYTES,
        "peak_allocated_gib": mem0.peak_allocated_bytes / GIB_BYTES,
        "peak_reserved_gib": mem0.peak_reserved_bytes / GIB_BYTES,
        "capacity_gib": cap / GIB_BYTES,
        "reserved_gib": mem0.reserved_bytes / GIB_BYTES,
        "limit_gib": limit / GIB_BYTES,
        "fits_already": fits_already,
        "memory": _verdict_doc(mem0),
        "dominant_items": [] if fits_already else dominant_items(mem0.peak_stage.items, mem0.peak_bytes - limit),
        "fixes": fixes[:top],
        "more_fixes": fixes[top:],
        "tried": len(f.fixes) + len(f.not_enough) + len(f.rejected) - int(replanned),
        "not_enough": sorted(f.not_enough, key=lambda r: -r["saved_gib"]),
        "replanned": replanned,
        "rejected": f.rejected,
        "check_errors": [f"{e.rule_id}: {e.message}" for e in errors],
        "applied_first": (
            None
            if split_fix is None
            else "pipeline split (the check's fix for pipeline.num_layers_divisible_by_pp): "
            + ", ".join(f"{k}={_yaml(v)}" for k, v in split_fix["layout"].items())
        ),
    }
