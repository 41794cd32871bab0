"""What the search of one request works from: the request completed and checked, its recipe fills
resolved once (:func:`request_recipe`), the keys it holds with their companions, the recompute ladder,
the micro-batch sizes and families searched, the parallel layouts (:func:`setup_search`,
:func:`layout_combos`)."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import cast

from moeplan.errors import InputError
from moeplan.inputs.layout import PARALLEL_DIMS
from moeplan.inputs.model_spec import ModelSpec
from moeplan.inputs.provenance import RecipeProvenance
from moeplan.inputs.resolved import Scenario
from moeplan.inputs.schema import scenario_from_dict
from moeplan.inputs.system import GpuSpec
from moeplan.inputs.training import default_global_batch, says_default_batch
from moeplan.model.model_notes import param_notes
from moeplan.plan.bounds import throughput_bound
from moeplan.plan.candidates import Candidate, Rejections
from moeplan.plan.evaluation import Evaluator
from moeplan.plan.space import (
    FULL_ITERATION_MOE,
    OPTIMIZER_OFFLOAD_KEYS,
    PLANNER_KEYS,
    RECOMPUTE_KEYS,
    Parallel,
    offload_alternatives,
    parallel_candidates,
    recompute_ladder,
)
from moeplan.resolve.assumptions import verdict_assumptions
from moeplan.resolve.defaults import resolve_model
from moeplan.resolve.load import load_scenario
from moeplan.resolve.recipe_fills import CORE_SIZES, recipe_for_input
from moeplan.rules import validate
from moeplan.units import GIB_BYTES


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


@dataclass
class SearchSetup:
    """What the search of one request works from (built once by :func:`setup_search`).

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
    ev: Evaluator
    rej: Rejections
    ladder: list[tuple[str, dict]]
    mbss: list[int]
    families: tuple[str, ...]
    completed: dict = field(default_factory=dict)
    #: layouts whose knob bound (:func:`moeplan.plan.bounds.refined_bound`) ruled out refining them
    bounded_out: int = 0
    #: throughput bounds computed so far, by candidate (:meth:`bounds`)
    bound_of: dict[int, tuple[Candidate, float]] = field(default_factory=dict)

    def bounds(self, c: Candidate) -> float:
        """Tokens/s/GPU no refinement of ``c``'s layout can exceed (:func:`throughput_bound`, computed
        once per candidate)."""
        got = self.bound_of.get(id(c))
        if got is None:
            got = (c, throughput_bound(c.scenario, self.ev.constants))  # (holding c keeps its id unique)
            self.bound_of[id(c)] = got
        return got[1]

    # what _request() checked (and setup_search(): a complete model), with the types that guarantees
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


def setup_search(base: dict, headroom_gib: float | None, constants, recipe_from: dict | None = None) -> SearchSetup:
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
    assumptions.extend(param_notes(m))  # a tower the config has and no candidate counts
    fixed_sizes = {k: v for k, v in fixed_layout.items() if k in PARALLEL_DIMS.values() and isinstance(v, int)}
    margin = None if headroom_gib is None else int(headroom_gib * GIB_BYTES)
    ev = Evaluator(data, margin, constants, recipe)
    ladder = _ladder(m, fixed_layout)
    if not any(k in fixed_layout for k in RECOMPUTE_KEYS + OPTIMIZER_OFFLOAD_KEYS):
        ev.alternatives = offload_alternatives(m)
    return SearchSetup(
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


def layout_combos(st: SearchSetup, min_dp: int) -> list[Parallel]:
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


def request_summary(st: SearchSetup, base: dict, min_dp: int, headroom_gib: float | None) -> dict:
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
