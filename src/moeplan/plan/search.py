"""Layout search: enumerate, reject cheaply, fit memory with the least costly recompute, time what
fits, refine the best, rank.

Order of work per parallel layout (cheap first): folding arithmetic → GBS divisibility → every
Megatron-Core rule (:func:`moeplan.validate`) → memory: the most memory-saving rung of the recompute
ladder first (does anything fit?), then a binary search for the cheapest rung that fits with the
requested headroom → the step-time model. The best ``refine`` layouts are then refined one knob family
at a time (VPP, token dispatcher, CUDA graph scope, CP communication type), each variant re-checked
by the rules and re-fitted. Ties break on the layout tuple, so results are identical across runs.

Recipe defaults (``recipe_defaults: mbridge-perf``) are resolved once for the request
(:func:`request_recipe`) and that record is applied to every candidate: no recipe row is matched
per candidate, and no fill sets a key the planner decides (:data:`~moeplan.plan.space.PLANNER_KEYS`),
so the recompute rung and knob labels say what was estimated; a candidate's sizes and family (its
label) are read from the scenario its estimates were computed for.
"""

from __future__ import annotations

import collections
import copy
import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

from moeplan.errors import InputError
from moeplan.i18n.messages import msg
from moeplan.inputs.layout import PARALLEL_DIMS
from moeplan.inputs.model_spec import ModelSpec
from moeplan.inputs.provenance import RecipeProvenance
from moeplan.inputs.resolved import Scenario
from moeplan.inputs.schema import scenario_from_dict
from moeplan.inputs.system import GpuSpec
from moeplan.inputs.training import default_global_batch, says_default_batch
from moeplan.model.memory import MemoryEstimate, estimate_memory
from moeplan.model.step import estimate_step
from moeplan.plan.space import (
    FULL_ITERATION_MOE,
    OPTIMIZER_OFFLOAD_KEYS,
    PLANNER_KEYS,
    RECOMPUTE_KEYS,
    Parallel,
    cp_comm_options,
    dispatcher_options,
    ep_overlap_options,
    graph_options,
    offload_alternatives,
    parallel_candidates,
    recompute_ladder,
    vpp_options,
    with_sections,
)
from moeplan.resolve.assumptions import verdict_assumptions
from moeplan.resolve.defaults import resolve_model
from moeplan.resolve.load import load_scenario
from moeplan.resolve.recipe_fills import CORE_SIZES, recipe_for_input
from moeplan.rules import RULES, validate
from moeplan.rules.known_issue_checks import blocking_finding
from moeplan.structure.params import count_params
from moeplan.structure.stages import output_stage_layers, pipeline_split
from moeplan.units import GIB_BYTES

#: headroom kept free on every GPU unless ``headroom_gib`` says otherwise (allocator spikes, NCCL
#: growth; ``estimate`` calls < 5 % "tight")
DEFAULT_HEADROOM_FRACTION = 0.05
OBJECTIVES = ("throughput", "time-to-train")
#: predicted throughputs closer than this fraction are treated as a tie (the step-time model's
#: in-sample error is far larger, docs/accuracy.md), broken first toward the layout ``moeplan check``
#: warns about least (fewest distinct warning rule ids: a warning every tied layout shares does not
#: decide), then toward the simpler layout; a flagged layout that leads by more is kept, and the plan
#: prints its warnings in full
TIE_FRACTION = 0.02
#: how far all-to-all may lead HybridEP on an NVL72 rack before the planner prefers it: HybridEP's rate
#: is its published kernel-only figure at one shape (4,096 tokens, hidden 7,168, top-8; DeepEP hybrid-ep
#: docs/README_Hybrid-EP.md), through its Torch API it runs 1.3–1.4× slower, and NVIDIA's NVL72 recipes
#: run it; within this margin the two are a tie on weak evidence and the explanation says so
WEAK_DISPATCHER_TIE = 0.25
#: a layout whose throughput without any recompute is below this fraction of the best found so far
#: is not fitted (branch and bound; tallied as ``dominated``)
DOMINATED_FRACTION = 0.5
#: phase-one layouts probed over VPP alone, per layout refined in full (:func:`_probe_vpp`)
PROBE_FACTOR = 3
_KNOB_KEYS = {
    "recompute": RECOMPUTE_KEYS + OPTIMIZER_OFFLOAD_KEYS,
    "dispatcher": ("moe_token_dispatcher_type", "moe_flex_dispatcher_backend"),
    "graphs": ("cuda_graph_impl", "cuda_graph_scope"),
    "cp_comm": ("cp_comm_type", "hierarchical_context_parallel_sizes"),
    "vpp": ("virtual_pipeline_model_parallel_size", "pipeline_model_parallel_layout"),
    "ep_overlap": ("overlap_moe_expert_parallel_comm",),
}


@dataclass
class Candidate:
    """One evaluated layout.

    Attributes:
        parallel: the sizes and family, read from the resolved scenario (what was estimated).
        data: the full scenario mapping (what ``moeplan check``/``export`` take).
        scenario: resolved scenario.
        memory / throughput: :meth:`to_dict` of the memory and step-time estimates.
        recompute: the ladder rung chosen (label); dispatcher / graphs / cp_comm labels likewise.
        tried: per knob family, label → tokens/s/GPU (None: rejected or does not fit) of the variants
            tried in refinement (for the explanation); under ``_why``, ``family:label`` → why that
            variant was rejected.
    """

    parallel: Parallel
    data: dict
    scenario: Scenario
    memory: dict
    throughput: dict
    recompute: str
    knobs: dict[str, str]
    ladder_tried: list[tuple[str, float | None]] = field(default_factory=list)
    capacity_gib: float = 0.0
    tried: dict[str, dict[str, Any]] = field(default_factory=dict)
    _warned: tuple[str, ...] | None = field(default=None, repr=False, compare=False)

    def warning_ids(self) -> tuple[str, ...]:
        """Rule ids of the warnings ``moeplan check`` gives this candidate's scenario, sorted
        (validated on first use, then kept: the scenario is frozen). A ``tight`` memory verdict is
        not among them: NVIDIA's published layouts run where the memory model's band reaches the
        HBM, and counting it cost the planner a published layout in its top 5 (the plan names the
        risk and the first layout free of it instead, :func:`moeplan.plan.planner.safer_alternative_note`)."""
        if self._warned is None:
            self._warned = tuple(sorted({f.rule_id for f in validate(self.scenario).warnings}))
        return self._warned

    @property
    def tokens_per_s_per_gpu(self) -> float:
        """Predicted throughput, tokens per second per GPU."""
        return self.throughput["tokens_per_s_per_gpu"]

    @property
    def peak_gib(self) -> float:
        """Predicted peak memory of the most loaded stage, GiB per GPU."""
        return self.memory["peak_bytes"] / GIB_BYTES

    def key(self) -> tuple:
        """Sort key: fastest first, then the layout tuple (deterministic ties)."""
        return (-round(self.tokens_per_s_per_gpu, 6), self.parallel, self.recompute, tuple(sorted(self.knobs.items())))

    def summary(self) -> dict:
        """JSON-ready mapping: label, layout and training as given to the estimate (null keys left
        out), DP/EDP, microbatches, recompute rung, knobs, memory and throughput estimates."""
        s = self.scenario
        lay = {k: v for k, v in self.data["layout"].items() if v is not None}
        return {
            "label": self.parallel.label(),
            "layout": lay,
            "training": dict(self.data["training"]),
            "dp": s.dp,
            "edp": s.edp,
            "num_microbatches": self.throughput["num_microbatches"],
            "recompute": self.recompute,
            "knobs": dict(self.knobs),
            "memory": self.memory,
            "throughput": self.throughput,
        }


@dataclass
class Rejections:
    """Tally of rejected layouts by reason (rule id, ``does-not-fit``, ``dp-budget``,
    ``gbs-divisibility``) with one example each."""

    counts: collections.Counter = field(default_factory=collections.Counter)
    examples: dict[str, str] = field(default_factory=dict)

    def add(self, reason: str, example: str) -> None:
        """Count one rejected layout under ``reason``, keeping the first ``example``."""
        self.counts[reason] += 1
        self.examples.setdefault(reason, example)

    def to_list(self) -> list[dict]:
        """``[{reason, count, example, meaning}]``, most frequent first; ``meaning`` says in words what
        the reason is (the rule's statement for a rule id)."""
        return [
            {"reason": r, "count": n, "example": self.examples[r], "meaning": rejection_meaning(r)}
            for r, n in sorted(self.counts.items(), key=lambda kv: (-kv[1], kv[0]))
        ]


#: what the planner's own rejection tags mean (the other reasons are rule ids)
REJECTION_TAGS = {
    "does-not-fit": "over the GPU's memory even at the last recompute / offload rung",
    "dominated": "cannot beat a layout already found, even without recompute (bound)",
    "etp-not-needed": "ETP > 1 where EP alone places the experts",
    "gbs-divisibility": "the global batch does not divide by MBS · DP",
    "dp-budget": "below the data-parallel minimum (--min-dp)",
    "rules": "breaks a Megatron-Core rule",
}


def rejection_meaning(reason: str) -> str:
    """A rejection reason in words: the planner's own tags, else the rule's one-line statement."""
    if reason in REJECTION_TAGS:
        return REJECTION_TAGS[reason]
    r = RULES.get(reason)
    return r.summary if r is not None else reason


@dataclass
class SearchResult:
    """Outcome of :func:`search`.

    Attributes:
        candidates: every fitting layout (refined variants included), best first.
        rejected: the tally of rejected layouts by reason.
        evaluated: layouts evaluated (phase one and refinement).
        assumptions: what the search assumed for the request (e.g. a default global batch size).
        request: the request as searched (model, GPU, sizes, batch, precision, held keys).
        ladder: the recompute rungs' names.
        recipe: the request's recipe fills applied to every candidate (None: ``recipe_defaults: none``).
    """

    candidates: list[Candidate]
    rejected: Rejections
    evaluated: int
    assumptions: list[str]
    request: dict
    ladder: list[str] = field(default_factory=list)
    evaluator: object = None
    tie_note: str | None = None
    considered: int = 0
    fitting_phase1: int = 0
    refined_variants: int = 0
    #: the request's recipe fills, applied to every candidate (None: ``recipe_defaults: none``)
    recipe: RecipeProvenance | None = None


#: what :meth:`_Evaluator.evaluate` finds: (rung label, data, scenario, memory, peak GiB of each rung tried)
_Found = tuple[str, dict, Scenario, MemoryEstimate, dict[str, float | None]]


class _Evaluator:
    """Holds the request and evaluates layouts (rules → memory ladder → time)."""

    def __init__(
        self, base: dict, capacity_margin_bytes: int | None, constants=None, recipe: RecipeProvenance | None = None
    ):
        self.base = base
        #: the request's recipe fills, the same for every candidate (:func:`request_recipe`)
        self.recipe = recipe
        self.constants = constants
        self.margin = capacity_margin_bytes
        self.evaluated = 0
        #: off-ladder rungs compared by time when only full recompute fits (set by :func:`search`)
        self.alternatives: list[tuple[str, dict]] = []

    def scenario(self, data: dict) -> Scenario:
        """A candidate mapping resolved with the request's recipe fills (no row matched for it)."""
        return load_scenario(data, recipe=self.recipe)

    def fits(self, s: Scenario) -> tuple[bool, MemoryEstimate]:
        """(peak ≤ capacity − headroom and not does-not-fit, the memory estimate)."""
        mem = estimate_memory(s)
        cap = mem.capacity_bytes or 0
        margin = self.margin if self.margin is not None else int(cap * DEFAULT_HEADROOM_FRACTION)
        ok = mem.peak_bytes <= cap - margin and mem.verdict != "does-not-fit"
        return ok, mem

    def evaluate(
        self, data: dict, ladder: list[tuple[str, dict]], rej: Rejections, label: str, floor_tps: float = 0.0
    ) -> _Found | None:
        """The cheapest ladder rung that is legal and fits: (rung label, data, scenario, memory, the
        peak GiB of each rung tried)."""

        def rung(i: int) -> tuple[dict, Scenario | None, str | None]:
            return self._with(data, ladder[i][1])

        self.evaluated += 1
        # does anything fit? (most memory-saving rung)
        last = len(ladder) - 1
        d, s, why = rung(last)
        while s is None and last > 0:
            # a rung may break a rule (e.g. offload without the precision-aware optimizer): step down
            last -= 1
            d, s, why = rung(last)
        if s is None:
            rej.add(why or "rules", label)
            return None
        ok, mem = self.fits(s)
        if not ok:
            rej.add("does-not-fit", f"{label}: {mem.peak_bytes / GIB_BYTES:.1f} GiB with {ladder[last][0]}")
            return None
        if floor_tps > 0 and last > 0:
            # branch and bound: recompute and offload only add time, so the cheapest rung's
            # throughput bounds every rung's; far below the best so far → not worth fitting
            _, s0, _ = rung(0)
            if s0 is not None:
                bound = estimate_step(s0, self.constants).tokens_per_s_per_gpu
                if bound < floor_tps:
                    rej.add("dominated", f"{label}: ≤ {bound:,.0f} tok/s/GPU even without recompute")
                    return None
        seen: dict[str, float | None] = {ladder[last][0]: mem.peak_bytes / GIB_BYTES}
        best: _Found = (ladder[last][0], d, s, mem, seen)
        lo, hi = 0, last - 1
        # binary search for the cheapest fitting rung (memory falls along the ladder)
        while lo <= hi:
            mid = (lo + hi) // 2
            d2, s2, _ = rung(mid)
            ok2, mem2 = self.fits(s2) if s2 is not None else (False, None)
            seen[ladder[mid][0]] = mem2.peak_bytes / GIB_BYTES if mem2 is not None else None
            if ok2 and s2 is not None and mem2 is not None:  # (ok2 only with both)
                best = (ladder[mid][0], d2, s2, mem2, seen)
                hi = mid - 1
            else:
                lo = mid + 1
        if best[0].startswith("full") and self.alternatives:
            best = self._faster_alternative(best, data)
        return best

    def _with(self, data: dict, keys: dict) -> tuple[dict, Scenario | None, str | None]:
        """``data`` with its recompute / offload keys replaced by ``keys`` (those the request holds
        fixed stay): (data, scenario or None, the first broken rule or input field)."""
        d = _copy(data)
        fixed = self.base.get("layout", {})
        for k in _KNOB_KEYS["recompute"]:
            if k not in fixed:
                d["layout"].pop(k, None)
        d["layout"].update({k: v for k, v in keys.items() if k not in fixed})
        if d["layout"].get("recompute_granularity") is None:
            d["layout"].pop("recompute_granularity", None)
        try:
            s = self.scenario(d)
        except InputError as exc:
            return d, None, f"input: {exc.field}"
        res = validate(s)
        if res.errors:
            return d, None, res.errors[0].rule_id
        blocked = blocking_finding(res.findings)  # a confirmed hang, crash or assertion at the stated versions
        if blocked:
            return d, None, blocked
        return d, s, None

    def _faster_alternative(self, best: _Found, data: dict) -> _Found:
        """When only full recompute fits: the off-ladder rungs (every selective module with the
        optimizer state offloaded, :func:`offload_alternatives`) that fit too, and the fastest of them
        and the ladder's choice by predicted step time: offloading the optimizer can cost less than
        recomputing every layer, or more — the time model decides, not the ladder's order."""
        label, d, s, mem, seen = best
        top = (estimate_step(s, self.constants).tokens_per_s_per_gpu, best)
        for alt_label, keys in self.alternatives:
            d2, s2, _ = self._with(data, keys)
            if s2 is None:
                seen[alt_label] = None
                continue
            ok, mem2 = self.fits(s2)
            seen[alt_label] = mem2.peak_bytes / GIB_BYTES
            if ok:
                tps = estimate_step(s2, self.constants).tokens_per_s_per_gpu
                if tps > top[0]:
                    top = (tps, (alt_label, d2, s2, mem2, seen))
        return top[1]

    def timed(self, found, knobs: dict[str, str]) -> Candidate:
        """A candidate from what :meth:`evaluate` found, timed; its sizes and family (its label) are
        read from the same resolved scenario the memory and time estimates were computed for."""
        rung_label, d, s, mem, seen = found
        th = estimate_step(s, self.constants)
        c = Candidate(Parallel.of(s), d, s, mem.to_dict(), th.to_dict(), rung_label, dict(knobs))
        c.ladder_tried = sorted(seen.items(), key=lambda kv: kv[0])
        c.capacity_gib = (mem.capacity_bytes or 0) / GIB_BYTES
        return c


def _copy(x):
    """A copy of a scenario mapping (nested dicts and lists of plain values): what copy.deepcopy does
    here, several times faster (the search copies one per candidate)."""
    if isinstance(x, dict):
        return {k: _copy(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_copy(v) for v in x]
    return x


def request_recipe(data: dict) -> RecipeProvenance | None:
    """The recipe fills of a planner request, resolved once and applied to every candidate.

    The row of the packaged Megatron Bridge perf recipes (Table A @067f987, Table B @v0.5.1) is matched
    only when the request states the sizes a row is matched on (TP, PP, CP and, for MoE, EP): the
    row of the user's layout; with any of them free the planner chooses the layout and no row
    applies. The helpers' fills (``_benchmark_common``, ``_perf_precision``, ``run_script.py``, the
    model family's) follow. Keys the planner decides (:data:`~moeplan.plan.space.PLANNER_KEYS`:
    sizes, FSDP and sharding, pipeline split, recompute and optimizer offload, dispatcher, graphs, CP
    exchange, EP overlap) are dropped: a candidate gets them from the planner or, when stated, from
    the request.

    Returns:
        None for ``recipe_defaults: none``.

    Raises:
        InputError: a malformed request or an unknown model (as :func:`load_scenario`).
    """
    inp = scenario_from_dict(data)
    if inp.recipe_defaults == "none":
        return None
    model = resolve_model(inp)
    stated = inp.layout.model_fields_set
    moe = model is not None and model.is_moe
    own_layout = all(k in stated or (k == "expert_model_parallel_size" and not moe) for k in CORE_SIZES)
    rec = recipe_for_input(inp, model, match_row=own_layout)  # None only for recipe_defaults: none
    return rec.without(PLANNER_KEYS) if rec is not None else None


def _request(base: dict, recipe_from: dict | None = None) -> tuple[dict, Scenario, list[str], RecipeProvenance | None]:
    """Complete the request: GBS from tokens_per_step or the default; check what the search needs;
    resolve its recipe fills once (:func:`request_recipe`, of ``recipe_from`` when given: a baseline's
    search with more sizes held takes the fills of the request it serves)."""
    data = copy.deepcopy(base)
    assumptions: list[str] = []
    recipe = request_recipe(copy.deepcopy(recipe_from) if recipe_from is not None else data)
    s0 = load_scenario(data, recipe=recipe)
    for name, v in (
        ("model", s0.model),
        ("system.gpu", s0.gpu),
        ("system.num_gpus", s0.num_gpus),
        ("training.seq_length", s0.training.seq_length),
    ):
        if v is None:
            raise InputError(name, None, "a value: the planner needs model, GPU, GPU count and sequence length")
    if s0.training.global_batch_size is None:
        gbs, why = default_global_batch(cast(int, s0.training.seq_length), num_gpus=s0.num_gpus)  # checked above
        data["training"]["global_batch_size"] = gbs
        assumptions.append(why)
    return data, load_scenario(data, recipe=recipe), assumptions, recipe


def _companions(fixed: dict, m, gpu) -> tuple[dict, str]:
    """Keys a held-fixed choice needs and the request left out, as the search itself sets them:
    full recompute's method and layer count (uniform, 1: the ladder's full rung); a full-iteration
    graph's static-budget expert path on MoE (:data:`FULL_ITERATION_MOE`, where the GPU runs
    HybridEP), or drop-and-pad padding when a capacity factor is held; optimizer offload's
    precision-aware optimizer and fraction (1.0 when none is held). Returns (keys to add, a note
    naming them); ({}, "") when nothing is missing."""
    add: dict = {}
    if fixed.get("recompute_granularity") == "full":
        for k, v in (("recompute_method", "uniform"), ("recompute_num_layers", 1)):
            if k not in fixed:
                add[k] = v
    full_iter = fixed.get("cuda_graph_impl") == "full_iteration"
    cf = fixed.get("moe_expert_capacity_factor")
    if full_iter and m.is_moe and isinstance(cf, (int, float)) and cf >= 0:
        if "moe_pad_expert_input_to_capacity" not in fixed:
            add["moe_pad_expert_input_to_capacity"] = True  # a capacity factor given: the drop-and-pad path
    elif full_iter and m.is_moe and gpu.supports_hybridep and "moe_token_dispatcher_type" not in fixed:
        add.update({k: v for k, v in FULL_ITERATION_MOE.items() if k not in fixed})
    # optimizer offload held on (or a fraction held): the precision-aware optimizer it needs, and the
    # whole state offloaded when no fraction is given (the ladder's last rung)
    offload = fixed.get("optimizer_cpu_offload")
    frac = fixed.get("optimizer_offload_fraction")
    if offload is True or (isinstance(frac, (int, float)) and frac > 0 and offload is None):
        for k, value in (
            ("optimizer_cpu_offload", True),
            ("optimizer_offload_fraction", 1.0),
            ("use_precision_aware_optimizer", True),
        ):
            if k not in fixed:
                add[k] = value
    if not add:
        return {}, ""
    return add, "completed what the fixed keys need: " + ", ".join(f"{k}={v}" for k, v in add.items())


def _apply(data: dict, keys: dict, base_layout: dict) -> dict:
    d = _copy(data)
    for k, v in keys.items():
        if k not in base_layout:
            if v is None:
                d["layout"].pop(k, None)
            else:
                d["layout"][k] = v
    return d


@dataclass
class _Setup:
    """What the search of one request works from (built once by :func:`_setup`).

    Attributes:
        data: the completed request mapping every candidate is built from.
        s0: the request resolved (model, GPU, sizes, training).
        fixed_layout: every layout key the request holds (with the companions it needs).
        completed: the companions among them, which the request did not state.
        fixed_sizes: the parallel sizes among them.
        margin: headroom in bytes (None: :data:`DEFAULT_HEADROOM_FRACTION` of the capacity).
        mbss: micro-batch sizes searched.
        families: ``3d`` and/or ``fsdp``.
    """

    data: dict
    s0: Scenario
    assumptions: list[str]
    fixed_layout: dict
    fixed_sizes: dict
    margin: int | None
    ev: _Evaluator
    rej: Rejections
    ladder: list[tuple[str, dict]]
    mbss: list[int]
    families: tuple[str, ...]
    completed: dict = field(default_factory=dict)

    # what _request() checked (and _setup(): a complete model), with the types that guarantees
    @property
    def world(self) -> int:
        """The GPU count of the request."""
        return cast(int, self.s0.num_gpus)

    @property
    def model(self) -> ModelSpec:
        """The request's model, complete."""
        return cast(ModelSpec, self.s0.model)

    @property
    def gpu(self) -> GpuSpec:
        """The request's GPU."""
        return cast(GpuSpec, self.s0.gpu)

    @property
    def seq_length(self) -> int:
        """The request's sequence length."""
        return cast(int, self.s0.training.seq_length)

    @property
    def global_batch_size(self) -> int:
        """The request's global batch size (given, or completed by :func:`_request`)."""
        return cast(int, self.s0.training.global_batch_size)


def _check_request(base: dict, s0: Scenario, headroom_gib: float | None) -> None:
    """Refuse what no layout can change: a precision the GPU does not run, headroom beyond the GPU's
    memory, a micro-batch larger than the global batch.

    Raises:
        InputError: naming ``training.precision``, ``--headroom-gib`` or ``training.micro_batch_size``.
    """
    gpu = cast(GpuSpec, s0.gpu)  # _request() checked it
    for f in validate(s0).errors:
        if f.rule_id == "precision.recipe_vs_gpu":  # no layout can change it: the request is wrong
            raise InputError("training.precision", s0.training.precision, f"a precision {gpu.id} runs ({f.fix})")
    usable_gib = cast(int, s0.capacity_bytes) / GIB_BYTES
    if headroom_gib is not None and not (0 <= headroom_gib < usable_gib):
        raise InputError("--headroom-gib", headroom_gib, f"0 to less than the GPU's usable {usable_gib:.1f} GiB")
    mbs_given = (base.get("training") or {}).get("micro_batch_size")
    gbs = cast(int, s0.training.global_batch_size)  # given, or completed by _request()
    if isinstance(mbs_given, int) and mbs_given > gbs:
        raise InputError("training.micro_batch_size", mbs_given, f"at most the global batch size ({gbs})")


def _families(fixed_layout: dict, m) -> tuple[str, ...]:
    """Layout families searched: the one held (``use_megatron_fsdp``), else 3D, and for VLMs both
    Megatron-FSDP and 3D parallel, as the guidance contrasts them."""
    fam_fixed = fixed_layout.get("use_megatron_fsdp")
    if fam_fixed is True:
        return ("fsdp",)
    if fam_fixed is False or m.vision is None:
        return ("3d",)
    return ("3d", "fsdp")


def mbs_options(base: dict, s0: Scenario) -> list[int]:
    """Micro-batch sizes searched: the one given, else 1–4 up to 8K tokens, 1–2 up to 32K, else 1
    (larger microbatches only where a sequence leaves room)."""
    mbs = s0.training.micro_batch_size
    if "micro_batch_size" in (base.get("training") or {}) and mbs is not None:  # (null: not given)
        return [mbs]
    seq = cast(int, s0.training.seq_length)  # _request() checked it
    return [1, 2, 4] if seq <= 8192 else ([1, 2] if seq <= 32768 else [1])


def _setup(base: dict, headroom_gib: float | None, constants, recipe_from: dict | None = None) -> _Setup:
    """Complete and check the request, hold its layout keys (with their companions), build the
    evaluator, the recompute ladder and the micro-batch and family options (``recipe_from``: as
    :func:`search`).

    Raises:
        InputError: incomplete or malformed request (field named).
    """
    data, s0, assumptions, recipe = _request(base, recipe_from)
    _check_request(base, s0, headroom_gib)
    m, gpu = s0.complete_model, cast(GpuSpec, s0.gpu)  # _request() checked the GPU
    fixed_layout = dict(base.get("layout") or {})
    added, why = _companions(fixed_layout, m, gpu)
    if added:
        fixed_layout.update(added)
        data.setdefault("layout", {}).update(added)
        assumptions.append(why)
    fixed_sizes = {k: v for k, v in fixed_layout.items() if k in PARALLEL_DIMS.values() and isinstance(v, int)}
    margin = None if headroom_gib is None else int(headroom_gib * GIB_BYTES)
    ev = _Evaluator(data, margin, constants, recipe)
    ladder = _ladder(m, fixed_layout)
    if not any(k in fixed_layout for k in RECOMPUTE_KEYS + OPTIMIZER_OFFLOAD_KEYS):
        ev.alternatives = offload_alternatives(m)
    return _Setup(
        data,
        s0,
        assumptions,
        fixed_layout,
        fixed_sizes,
        margin,
        ev,
        Rejections(),
        ladder,
        mbs_options(base, s0),
        _families(fixed_layout, m),
        dict(added),
    )


def _combos(st: _Setup, min_dp: int) -> list[Parallel]:
    """Every parallel layout of the request's families that folds into the world.

    Raises:
        InputError: none folds (the held sizes, ``--min-dp`` or the GPU count named).
    """
    m, gpu, world = st.model, st.gpu, st.world
    combos = list(parallel_candidates(m, gpu, world, st.seq_length, st.fixed_sizes, min_dp, st.families))
    if combos:
        return combos
    if st.fixed_sizes:
        held = ", ".join(f"{k}={v}" for k, v in st.fixed_sizes.items())
        raise InputError(
            "layout",
            held,
            f"sizes that fold into {world} GPUs: TP·CP·PP and EP·ETP·PP must divide the world with DP ≥ "
            f"{min_dp}, TP ≤ 8 within the NVLink domain, EP dividing the {m.num_moe_experts or 0} experts, "
            f"PP ≤ {min(32, m.num_layers)}",
        )
    if min_dp > world:
        raise InputError("--min-dp", min_dp, f"at most the GPU count ({world})")
    raise InputError(
        "system.num_gpus",
        world,
        f"a world size that TP·CP·PP and EP·ETP·PP can divide with DP ≥ {min_dp}",
    )


@dataclass
class _PhaseOne:
    """Phase one's running state: the layouts found, the best throughput so far (the bound), the
    layouts considered, and what every candidate of a layout starts from."""

    defaults: dict
    default_cp: dict
    dense_params: float
    expert_params: float
    cap: float
    tail: float
    found: list[Candidate] = field(default_factory=list)
    best_tps: float = 0.0
    considered: int = 0


def _phase_one_state(st: _Setup) -> _PhaseOne:
    """Defaults of phase one: the all-to-all dispatcher for MoE (unless held), the a2a CP exchange for
    models with attention sinks or sliding windows (rule sequence.cp_attention_support: they run
    context parallelism only with it), the parameter counts for the weights floor, the capacity."""

    m, fixed_layout = st.model, st.fixed_layout
    default_disp = {}
    if m.is_moe and "moe_token_dispatcher_type" not in fixed_layout:
        default_disp = {"moe_token_dispatcher_type": "alltoall"}
    a2a_only = bool(m.attention_sinks) or "sliding" in set(m.attention_kinds or ())
    default_cp = {"cp_comm_type": "a2a"} if a2a_only and "cp_comm_type" not in fixed_layout else {}
    counts = count_params(m)
    expert_params = counts.by_kind.get("routed_experts", 0)
    dense_params = counts.total_with(mtp=True, vision=True) - expert_params
    margin = st.margin
    usable = cast(int, st.s0.capacity_bytes)  # the GPU's usable HBM less system.reserved_gib
    cap = usable - (margin if margin is not None else usable * DEFAULT_HEADROOM_FRACTION)
    tail = output_stage_layers(m, st.seq_length, 1, st.s0.mtp_num_layers)
    return _PhaseOne(default_disp, default_cp, dense_params, expert_params, cap, tail)


def _phase_one_layout(st: _Setup, ph: _PhaseOne, p: Parallel) -> None:
    """Evaluate one parallel layout at every micro-batch size: its pipeline split, the weights floor
    (bf16 weights + grads of a balanced stage must fit), GBS divisibility, then the ladder and the
    time model; what fits joins ``ph.found``."""
    fixed_layout, rej, world = st.fixed_layout, st.rej, st.world
    if p.vpp == 1 and "virtual_pipeline_model_parallel_size" in fixed_layout:
        p = Parallel(p.tp, p.pp, p.cp, p.ep, p.etp, fixed_layout["virtual_pipeline_model_parallel_size"] or 1, p.fsdp)
    ph.considered += len(st.mbss)
    split = (
        pipeline_split(st.model.num_layers, p.pp, p.vpp, st.s0.mtp_num_layers, ph.tail)
        if "pipeline_model_parallel_layout" not in fixed_layout
        else {}
    )
    if split is None:
        for _ in st.mbss:
            rej.add("pipeline.too_few_layers", p.label())
        return
    dp = p.dp(world)
    # lower bound before any model evaluation: bf16 weights + bf16 grads of a perfectly balanced
    # stage (optimizer fully offloaded, activations zero) must fit
    # (LoRA: the frozen base has no gradients, so its bf16 weights alone)
    per_param = 2.0 if st.s0.peft is not None else 4.0
    floor = per_param * (ph.dense_params / (p.tp * p.pp) + ph.expert_params / (p.ep * p.etp * p.pp))
    if floor > ph.cap and not p.fsdp:
        what = "frozen weights" if st.s0.peft is not None else "weights + grads"
        for _ in st.mbss:
            rej.add("does-not-fit", f"{p.label()}: {what} alone {floor / GIB_BYTES:.1f} GiB")
        return
    gbs = st.global_batch_size
    for mbs in st.mbss:
        if gbs % (mbs * dp):
            rej.add("gbs-divisibility", f"{p.label()}: GBS {gbs} % (MBS {mbs} · DP {dp}) ≠ 0")
            continue
        d = _copy(st.data)
        d["training"]["micro_batch_size"] = mbs
        cp_keys = ph.default_cp if p.cp > 1 else {}
        d["layout"] = {**p.keys(), **split, **ph.defaults, **cp_keys, **fixed_layout}
        got = st.ev.evaluate(d, st.ladder, rej, f"{p.label()} MBS{mbs}", DOMINATED_FRACTION * ph.best_tps)
        if got is None:
            continue
        ph.found.append(st.ev.timed(got, _knob_labels(got[2])))
        ph.best_tps = max(ph.best_tps, ph.found[-1].tokens_per_s_per_gpu)


def _phase_one(st: _Setup, combos: list[Parallel], progress) -> _PhaseOne:
    """Every parallel layout once, with the default knobs: a spread-out sample first, so the bound
    is tight early (the order changes nothing but which dominated layouts get tallied); ETP > 1 only
    when no ETP = 1 layout fits (the guidance: expert tensor parallelism is a last resort) unless ETP
    is held. Returns the state with the fitting layouts (unsorted)."""
    ph = _phase_one_state(st)
    stride = 7
    combos = combos[::stride] + [c for i, c in enumerate(combos) if i % stride]
    deferred: list[Parallel] = []
    if "expert_tensor_parallel_size" not in st.fixed_layout:
        deferred = [p for p in combos if p.etp > 1]
        combos = [p for p in combos if p.etp == 1]
    todo = list(combos)
    i = -1
    while todo:
        i += 1
        p = todo.pop(0)
        if not todo and deferred and not ph.found:
            todo, deferred = deferred, []
        if progress:
            progress(i, len(combos))
        _phase_one_layout(st, ph, p)
    for p in deferred:
        ph.considered += 1
        st.rej.add("etp-not-needed", f"{p.label()}: EP alone places the experts (ETP 1 fits)")
    if progress:
        progress(len(combos), len(combos))
    return ph


def _probe_vpp(st: _Setup, found: list[Candidate], refine: int) -> tuple[list[Candidate], bool]:
    """The layouts to refine, chosen with a VPP-only probe of the ``PROBE_FACTOR × refine`` best by
    un-refined throughput. Interleaving is the knob that moves a
    pipelined layout most (it shrinks the bubble), and phase one ranks every layout at VPP 1: without
    the probe, more HBM could let layouts that gain little from refinement (less recompute, no PP)
    crowd out a pipelined one that refines to the fastest (DeepSeek-V3 at 32K on 256 H100: 1.5× HBM
    planned 768 tokens/s/GPU, 2× HBM 631). The set is the union of the ``refine`` best before and after
    the probe (at most twice ``refine``). Returns the probed candidates (VPP chosen as the full
    refinement would choose it: VPP is its first family), best first, and whether they were probed."""
    if "virtual_pipeline_model_parallel_size" in st.fixed_layout or "pipeline_model_parallel_layout" in st.fixed_layout:
        return list(found[:refine]), False
    probed = [
        c if c.parallel.pp == 1 else _refine(c, st.ev, st.ladder, st.fixed_layout, st.rej, only=("vpp",))
        for c in found[: PROBE_FACTOR * refine]
    ]
    # the best by un-refined throughput stay (other knobs may lift them more than VPP lifts the rest),
    # joined by the best after the probe
    chosen = probed[:refine]
    ids = {id(c) for c in chosen}
    chosen += [c for c in sorted(probed, key=Candidate.key)[:refine] if id(c) not in ids]
    return sorted(chosen, key=Candidate.key), True


def _refine_phase(st: _Setup, found: list[Candidate], refine: int) -> tuple[list[Candidate], int]:
    """Refine the ``refine`` best layouts over every knob family, and the best layout of every other
    CP size over the CP exchange only (what decides a CP size, so that "best of each CP" compares
    each CP at its best, not at the p2p default). Returns (every candidate, deduplicated and sorted;
    the number of variants refinement evaluated)."""
    ev, ladder, fixed_layout, rej = st.ev, st.ladder, st.fixed_layout, st.rej
    before = ev.evaluated
    to_refine, probed = _probe_vpp(st, found, refine)
    chosen = {dataclasses.replace(c.parallel, vpp=1) for c in to_refine}
    extra: list[Candidate] = []
    for c in found:
        if c.parallel not in chosen and all(x.parallel.cp != c.parallel.cp for x in to_refine + extra):
            extra.append(c)
    skip = ("vpp",) if probed else ()
    refined = [_refine(c, ev, ladder, fixed_layout, rej, skip=skip) for c in to_refine]
    refined += [_refine(c, ev, ladder, fixed_layout, rej, only=("cp_comm",)) for c in extra]
    everything = {(_sig(c)): c for c in refined + found}
    return sorted(everything.values(), key=Candidate.key), ev.evaluated - before


def fewest_warnings(tied: list[Candidate]) -> Candidate:
    """The first of ``tied`` (candidates the model cannot order, in preference order) with the fewest
    distinct warning rule ids (:meth:`Candidate.warning_ids`): a layout the checker flags never wins a
    tie against one it flags less. A single candidate is returned without validating it."""
    if len(tied) == 1:
        return tied[0]
    return min(tied, key=lambda c: (len(c.warning_ids()), tied.index(c)))


def simplest_leads(out: list[Candidate]) -> str | None:
    """Within :data:`TIE_FRACTION` of the fastest the model cannot tell layouts apart (its error is
    larger): the layout with the fewest check warnings, then the simplest (least CP, then PP, TP, VPP,
    ETP), is moved to the front of ``out`` (in place). Returns the note saying so, None when the
    fastest already leads."""
    if not out:
        return None
    top_tps = out[0].tokens_per_s_per_gpu
    pool = [c for c in out if c.tokens_per_s_per_gpu >= (1 - TIE_FRACTION) * top_tps]
    pool.sort(key=lambda c: (c.parallel.cp, c.parallel.pp, c.parallel.tp, c.parallel.vpp, c.parallel.etp, out.index(c)))
    lead = fewest_warnings(pool)
    if lead is out[0]:
        return None
    # the warnings decided when simplicity alone would have chosen another layout (pool[0]); name
    # the fastest's extra warnings, else the simplest's
    flagged = out[0] if len(out[0].warning_ids()) > len(lead.warning_ids()) else pool[0]
    dropped = ", ".join(sorted(set(flagged.warning_ids()) - set(lead.warning_ids())))
    why = (
        msg("plan.tie_fewer_warnings", layout=flagged.parallel.label(), ids=dropped)
        if lead is not pool[0]
        else msg("plan.tie_simpler")
    )
    note = msg(
        "plan.tie_note",
        lead=lead.parallel.label(),
        fastest=out[0].parallel.label(),
        pct=100 * (top_tps / lead.tokens_per_s_per_gpu - 1),
        tie=100 * TIE_FRACTION,
        why=why,
    )
    out.remove(lead)
    out.insert(0, lead)
    return note


def _request_summary(st: _Setup, base: dict, min_dp: int, headroom_gib: float | None) -> dict:
    """The ``request`` block of the result (what was searched)."""
    s0 = st.s0
    return {
        "model": st.model.name,
        "gpu": st.gpu.id,
        "num_gpus": st.world,
        "seq_length": s0.training.seq_length,
        "global_batch_size": s0.training.global_batch_size,
        "precision": s0.training.precision,
        "fixed": st.fixed_layout,
        "completed": st.completed,
        "min_dp": min_dp,
        "headroom_gib": headroom_gib,
        "families": list(st.families),
        "fixed_training": {k: v for k, v in (base.get("training") or {}).items() if k == "micro_batch_size"},
        "assumes": [a.to_dict() for a in verdict_assumptions(s0, says_default_batch(st.assumptions))],
        "reserved_gib": s0.input.system.reserved_gib,
        "peft": s0.peft.model_dump(mode="json") if s0.peft is not None else None,
    }


def search(
    base: dict,
    *,
    min_dp: int = 1,
    headroom_gib: float | None = None,
    refine: int = 16,
    constants=None,
    progress: Callable[[int, int], None] | None = None,
    recipe_from: dict | None = None,
) -> SearchResult:
    """Search the layout space of a request.

    Args:
        base: scenario mapping with ``model``, ``system.gpu``, ``system.num_gpus``,
            ``training.seq_length`` (and optionally ``global_batch_size``, ``micro_batch_size``,
            ``precision``); every ``layout`` key given is held fixed.
        min_dp: smallest data-parallel size accepted.
        headroom_gib: GiB kept free per GPU (default 5 % of usable HBM).
        refine: how many of the best layouts are refined over VPP, dispatcher, graphs and CP comm.
        progress: called with (done, total) over the enumeration.
        recipe_from: the request whose recipe fills the candidates get (default ``base``): a
            baseline's search holds more sizes than the request it serves, and with every core size
            held its own request would match a recipe row the main search's candidates never got
            (the same layout then predicted two ways, e.g. with and without a row's FP8 attention).

    Returns:
        :class:`SearchResult`, candidates sorted by tokens/s/GPU (best first).

    Raises:
        InputError: incomplete or malformed request (field named).
    """
    base = with_sections(base)
    st = _setup(base, headroom_gib, constants, with_sections(recipe_from) if recipe_from is not None else None)
    ph = _phase_one(st, _combos(st, min_dp), progress)
    ph.found.sort(key=Candidate.key)
    out, refined_variants = _refine_phase(st, ph.found, refine)
    tie_note = simplest_leads(out)
    return SearchResult(
        out,
        st.rej,
        st.ev.evaluated,
        st.assumptions,
        _request_summary(st, base, min_dp, headroom_gib),
        [n for n, _ in st.ladder],
        st.ev,
        tie_note,
        ph.considered,
        len(ph.found),
        refined_variants,
        st.ev.recipe,
    )


def _ladder(m, fixed: dict) -> list[tuple[str, dict]]:
    """The recompute ladder without the rungs that would change a key the request holds fixed."""
    full = recompute_ladder(m)
    rec_fixed = any(k in fixed for k in RECOMPUTE_KEYS)
    off_fixed = any(k in fixed for k in OPTIMIZER_OFFLOAD_KEYS)
    if not rec_fixed:
        return [r for r in full if not (off_fixed and any(k in r[1] for k in OPTIMIZER_OFFLOAD_KEYS))]
    gran = fixed.get("recompute_granularity")
    # an explicit empty list recomputes nothing (the memory model counts it so); unset is Megatron's
    # default, core_attn
    mods = fixed.get("recompute_modules")
    mods = ["core_attn"] if mods is None else mods
    given = f"{gran} (given)" if gran != "selective" else f"selective {','.join(mods) or '[]'} (given)"
    out: list[tuple[str, dict]] = [(given, {})]
    if not off_fixed:
        for _name, keys in full:
            if any(k in keys for k in OPTIMIZER_OFFLOAD_KEYS):
                out.append(
                    (
                        f"{given} + optimizer offload {keys['optimizer_offload_fraction']:g}",
                        {k: v for k, v in keys.items() if k not in RECOMPUTE_KEYS},
                    )
                )
    return out


def _sig(c: Candidate) -> tuple:
    lay = c.data["layout"]
    return (c.parallel, c.data["training"]["micro_batch_size"], tuple(sorted((k, str(v)) for k, v in lay.items())))


def _disp_label(s: Scenario) -> str:
    lay = s.layout
    if lay.moe_token_dispatcher_type == "flex":
        return lay.moe_flex_dispatcher_backend or "flex"
    return lay.moe_token_dispatcher_type or "alltoall"


def _knob_labels(s: Scenario) -> dict[str, str]:
    """The knob labels of a layout as it stands (what the request holds fixed included), in the names
    the refinement uses."""
    lay = s.layout
    if lay.cuda_graph_impl == "full_iteration" or s.graph_scopes() == ["full_iteration"]:
        graphs = "full_iteration"
    elif s.graphs_on():
        graphs = "te:" + "+".join(s.graph_scopes()) if lay.cuda_graph_impl == "transformer_engine" else "local"
    else:
        graphs = "eager"
    cp_comm = lay.cp_comm_type if isinstance(lay.cp_comm_type, str) else "p2p"
    h = lay.hierarchical_context_parallel_sizes
    if cp_comm == "a2a+p2p" and h:
        cp_comm = f"a2a+p2p {'x'.join(map(str, h))}"
    return {
        "dispatcher": _disp_label(s),
        "ep_overlap": "on" if lay.overlap_moe_expert_parallel_comm else "off",
        "graphs": graphs,
        "cp_comm": cp_comm,
    }


def _tally_known_issues(rej: Rejections, reasons: list[str], example: str) -> None:
    """Count a knob variant dropped for a known issue (``known_issue.<id>``) in the rejected tally."""
    for r in reasons:
        if r.startswith("known_issue."):
            rej.add(r, example)


def _knob_families(c: Candidate, fixed_layout: dict, gpu: GpuSpec) -> list[tuple[str, list[tuple[str, dict]]]]:
    """The knob families :func:`_refine` tries on ``c``, in order (VPP first), each with its options
    (label, layout keys); a family whose key the request holds is left out."""
    m = c.scenario.complete_model
    families: list[tuple[str, list[tuple[str, dict]]]] = []
    if (
        "virtual_pipeline_model_parallel_size" not in fixed_layout
        and "pipeline_model_parallel_layout" not in fixed_layout
    ):
        vopts = []
        for v in vpp_options(m.num_layers, c.parallel.pp):
            mtp_c, seq = c.scenario.mtp_num_layers, cast(int, c.scenario.training.seq_length)
            split = pipeline_split(m.num_layers, c.parallel.pp, v, mtp_c, output_stage_layers(m, seq, 1, mtp_c))
            if split is None:
                continue
            keys = {
                "virtual_pipeline_model_parallel_size": v if v > 1 else None,
                "pipeline_model_parallel_layout": None,
                "account_for_embedding_in_pipeline_split": None,
                "account_for_loss_in_pipeline_split": None,
                **split,
            }
            vopts.append((f"VPP{v}", keys))
        families.append(("vpp", vopts))
    if "moe_token_dispatcher_type" not in fixed_layout:
        families.append(
            (
                "dispatcher",
                [(n, {"moe_flex_dispatcher_backend": None, **k}) for n, k in dispatcher_options(m, gpu, c.parallel.ep)],
            )
        )
    if "overlap_moe_expert_parallel_comm" not in fixed_layout:
        families.append(("ep_overlap", ep_overlap_options(m, c.parallel.ep)))
    if "cuda_graph_impl" not in fixed_layout:
        families.append(("graphs", [(n, {"cuda_graph_scope": None, **k}) for n, k in graph_options(m, gpu)]))
    if "cp_comm_type" not in fixed_layout:
        domain = gpu.scaleup_domain_gpus if gpu is not None else 8
        families.append(("cp_comm", cp_comm_options(c.parallel.cp, c.parallel.tp, domain)))
    return families


def _refine(
    c: Candidate,
    ev: _Evaluator,
    ladder,
    fixed_layout: dict,
    rej: Rejections,
    only: tuple[str, ...] | None = None,
    skip: tuple[str, ...] = (),
) -> Candidate:
    """Coordinate descent over VPP, dispatcher, EP overlap, graphs and CP comm type (``only`` these
    families when given, never those in ``skip``); keeps the best variant and records what each
    option gave."""
    gpu = cast(GpuSpec, c.scenario.gpu)  # the request's (_request() checked it)
    best = c
    families = _knob_families(c, fixed_layout, gpu)
    for fam, opts in families:
        if len(opts) < 2 or (only is not None and fam not in only) or fam in skip:
            continue
        tried: dict[str, float | None] = {}
        start = best  # every option of a family is applied to the same layout (a bundle's extra keys stay its own)
        start.tried.setdefault("_why", {})  # shared by the variants' shallow copies below
        variants: list[Candidate] = []
        for name, keys in opts:
            d = _apply(start.data, keys, fixed_layout)
            sub = Rejections()
            got = ev.evaluate(d, ladder, sub, name)
            if got is None:
                tried[name] = None
                reasons = sorted(sub.counts)
                start.tried.setdefault("_why", {})[f"{fam}:{name}"] = reasons[0] if reasons else "rejected"
                _tally_known_issues(rej, reasons, f"{start.parallel.label()} {fam} {name}")
                continue
            knobs = dict(start.knobs)
            if fam != "vpp":
                knobs[fam] = name
            if fam == "graphs" and "moe_flex_dispatcher_backend" in keys and "dispatcher" in knobs:
                knobs["dispatcher"] = keys["moe_flex_dispatcher_backend"]  # the graph bundle sets it
            cand = ev.timed(got, knobs)
            cand.tried = dict(start.tried)
            tried[name] = cand.tokens_per_s_per_gpu
            variants.append(cand)
        # options are listed simplest first (VPP 1, all-to-all, no EP overlap, eager, p2p): the first
        # within the tie margin of the fastest is kept, as for layouts (the model cannot tell them apart)
        # and of those the one the check warns about least (:func:`fewest_warnings`)
        pool = [start, *variants]
        top = max(x.tokens_per_s_per_gpu for x in pool)
        tied = [x for x in pool if x.tokens_per_s_per_gpu >= top / (1 + TIE_FRACTION)]
        best = fewest_warnings(tied)
        _record_warned(best, fam, [x for x in tied if x is not start], tried)
        if fam == "dispatcher":
            best = weak_dispatcher_tie(best, variants, top, gpu)
        best.tried[fam] = tried
    return best


def _record_warned(best: Candidate, fam: str, tied: list[Candidate], tried: dict[str, float | None]) -> None:
    """Under ``best.tried["_warns"]``, ``family:option`` → the warning rule ids of each tied variant
    passed over because the check warns about it more than about ``best`` (so that the explanation
    says why a faster option lost)."""
    names = {v: k for k, v in tried.items() if v is not None}
    for x in tied:
        if x is best or len(x.warning_ids()) <= len(best.warning_ids()):
            continue
        name = names.get(x.tokens_per_s_per_gpu)
        if name is not None:
            extra = sorted(set(x.warning_ids()) - set(best.warning_ids()))
            best.tried.setdefault("_warns", {})[f"{fam}:{name}"] = ", ".join(extra)


def weak_dispatcher_tie(best: Candidate, variants: list[Candidate], top: float, gpu) -> Candidate:
    """On an NVL72 rack, HybridEP within :data:`WEAK_DISPATCHER_TIE` of the fastest dispatcher is a tie
    on weak evidence (the gap rests on HybridEP's kernel rate measured at one shape):
    the fastest prediction is kept, so that every candidate is ranked by what the model predicts for
    it, and the gap is recorded (``tried["_weak_tie"]``) so that the explanation says the choice is a
    tie with the guidance's HybridEP and to measure both. Returns ``best`` unchanged."""
    hyb = next((x for x in variants if x.knobs.get("dispatcher") == "hybridep"), None)
    if gpu is None or not gpu.is_nvl72 or hyb is None or best is hyb or hyb.tokens_per_s_per_gpu <= 0:
        return best
    if hyb.tokens_per_s_per_gpu >= top / (1 + WEAK_DISPATCHER_TIE):
        best.tried["_weak_tie"] = {"dispatcher": 100 * (1 - hyb.tokens_per_s_per_gpu / top)}
    return best


def time_to_train_s(c: Candidate, train_tokens: float) -> float:
    """Seconds to train ``train_tokens`` tokens at the candidate's predicted throughput."""
    tps = c.tokens_per_s_per_gpu * cast(int, c.scenario.num_gpus)  # the request's (_request() checked it)
    return math.inf if tps <= 0 else train_tokens / tps
