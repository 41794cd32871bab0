"""An upper bound on the throughput any refinement of a layout can reach, so that the search refines
every layout that can still beat the best found and no other (:func:`throughput_bound`).

Refinement keeps a layout's sizes (TP, PP, CP, EP, ETP, FSDP), its micro-batch size and therefore its
microbatch count, and changes only the knobs: VPP and the pipeline split, the recompute / offload
rung, the token dispatcher, EP overlap, CUDA graphs and the CP exchange. No knob removes a layer's
FLOPs, so the step time of every variant is at least its compute floor:

    step ≥ m · (Σ_stages Σ_layers (dense GEMM + expert GEMM + attention · ρ + memory-bound)) / PP / r

with ``m`` microbatches per step, ``r`` the release's fitted software factor that divides every part
of the step (:func:`moeplan.model.step.estimate_step`), and the sum over stages divided by PP because
no split of the same layers over PP stages makes the slowest stage faster than the average one.
The CP exchange sets the attention kernels' length (:func:`moeplan.model.time.context.attention_rate`:
the ring runs S/CP queries per call, the all-to-all the whole sequence), so the attention time is
scaled by ρ, the layout's slowest attention rate over the fastest any exchange reaches (the length
term rises with the queries per call, the whole sequence is the longest). The memory-bound part moves
every saved activation once, recomputed or not (:func:`moeplan.model.time.compute.layer_compute`).
Everything a knob can hide or remove is left out of the floor: recompute, exposed TP / CP / EP
exchange, launch overhead, activation offload, the pipeline bubble, data-parallel traffic and the
optimizer step. A property test checks the bound against refined layouts
(``tests/test_plan_bounds.py``).
"""

from __future__ import annotations

import dataclasses
from typing import cast

from moeplan.catalog.gpus import measured_gemm_fractions
from moeplan.inputs.resolved import Scenario
from moeplan.inputs.system import GpuSpec
from moeplan.model.constants import TimeConstants, load_constants, release_of
from moeplan.model.time.context import (
    StepContext,
    attention_rate,
    layer_cp_comm_type,
    model_attention_fraction,
    step_context,
)
from moeplan.model.time.layer import layer_time, share_dispatch_free_terms
from moeplan.model.time.stage import stage_time
from moeplan.rules import RULES
from moeplan.structure.placement import stage_params, stage_plan

#: the parts of a stage's microbatch time no knob reduces: the layers' GEMM FLOPs at the achieved rates
#: and their element-wise traffic (:mod:`moeplan.model.time.compute`); attention is added at its
#: fastest rate (:func:`_attention_rate_share`)
FLOOR_PARTS = ("dense_gemm", "expert_gemm", "memory_bound")


def compute_floor_s(s: Scenario, constants: TimeConstants | None = None) -> float:
    """Seconds per step below which no refinement of ``s``'s layout can go (the module's formula).

    Raises:
        InputError: as :func:`moeplan.model.step.estimate_step` (missing model, GPU, sizes).
    """
    c = constants or load_constants()
    gpu = cast(GpuSpec, s.gpu)
    ctx = step_context(s, c, measured_gemm_fractions(gpu.id), None)
    _, release_factor = c.release(release_of(s))
    stages = stage_params(s, allow_balanced=True)
    chunk_plan = stage_plan(s, allow_balanced=True)
    rho = _attention_rate_share(ctx)
    total = 0.0
    for st in stages:
        parts = stage_time(ctx, st, chunk_plan).parts
        total += sum(parts.get(k, 0.0) for k in FLOOR_PARTS) + rho * parts.get("attention", 0.0)
    return ctx.num_microbatches * total / len(stages) / release_factor


def _attention_rate_share(ctx: StepContext) -> float:
    """The layout's slowest attention rate over the fastest any CP exchange gives it (≤ 1): the
    all-to-all's, whose kernels run the whole sequence (:func:`attention_query_tokens`)."""
    s, m = ctx.s, ctx.model
    used = [attention_rate(ctx, layer_cp_comm_type(s, li)) for li in range(m.num_layers)]
    whole = ctx.speeds.attention_flops_per_s * model_attention_fraction(
        s, ctx.gpu, float(ctx.seq_length), ctx.fp8_attention, ctx.attention_kernel
    )
    fastest = max([whole, *used])
    return min(used) / fastest if fastest > 0 else 1.0


def throughput_bound(s: Scenario, constants: TimeConstants | None = None) -> float:
    """Tokens/s/GPU that no refinement of ``s``'s layout can exceed: GBS · seq / (compute floor · GPUs)
    (:func:`compute_floor_s`); infinite when the floor is 0.

    Raises:
        InputError: as :func:`compute_floor_s`.
    """
    floor = compute_floor_s(s, constants)
    tokens = cast(int, s.training.global_batch_size) * cast(int, s.training.seq_length)
    return float("inf") if floor <= 0 else tokens / (floor * cast(int, s.num_gpus))


#: knob families whose options change the scenario itself (its layout keys), not only the step context
_SCENARIO_FAMILIES = ("cp_comm", "graphs")
#: the per-layer parts a knob moves, with the fixed ones (:data:`moeplan.model.time.layer.LAYER_PARTS`)
_LAYER_FLOOR_PARTS = ("dense_gemm", "expert_gemm", "attention", "memory_bound", "launch_overhead", "tp_comm")
_EXCHANGE_PARTS = ("cp_comm_exposed", "ep_comm_exposed")


def knob_floor_s(
    s: Scenario,
    families: list[tuple[str, list[tuple[str, dict]]]],
    constants: TimeConstants | None = None,
    rungs: list[dict] | None = None,
) -> float:
    """Seconds per step below which no refinement of ``s``'s layout over ``families`` (the knob options
    refinement tries, as :func:`moeplan.plan.refinement.knob_families` lists them) can go; tighter
    than :func:`compute_floor_s`, for a few step contexts more.

    Every option of the families that change the layout (CP exchange, CUDA graphs) is applied to the
    scenario's layout, and every dispatcher and EP-overlap option to the step context (EP overlap
    pairing every chunk: its largest hidden share), at each recompute setting of ``rungs``; for each
    such variant the decoder layers' parts (:func:`moeplan.model.time.layer.layer_time`) are summed,
    and the least sum is the floor: every variant refinement reaches is one of them or slower.

    ``rungs`` are the recompute settings (layout keys) no variant fits with less of, the layout's
    memory floor: at the default knobs (VPP 1, all-to-all, no EP overlap, eager, p2p; every other
    option holds more memory) the layout fitted at its own rung, and recompute only grows along the
    ladder; after full recompute the off-ladder optimizer offload with selective recompute may still
    be taken (pass both). None: no recompute.

    The sum is divided by PP (no split beats the average stage), times the microbatches plus the least
    bubble ``(PP − 1)/VPP_max`` stage-times (:func:`moeplan.model.time.pipeline_bubble.pipeline_bubble_s`),
    over the release factor. The output layer, MTP blocks, LoRA adapters, vision tower, stage-boundary
    sends, data-parallel traffic, the optimizer step and its offload are left out (each adds time).

    Raises:
        InputError: as :func:`moeplan.model.step.estimate_step`.
    """
    c = constants or load_constants()
    gpu = cast(GpuSpec, s.gpu)
    opts = dict(families)
    layouts: list[dict] = [{}]
    for fam in _SCENARIO_FAMILIES:
        if fam in opts:
            layouts = [{**a, **keys} for a in layouts for _, keys in opts[fam]]
    ctxs = []
    for keys in layouts:
        sv = dataclasses.replace(s, layout=s.layout.model_copy(update=keys)) if keys else s
        ctx = step_context(sv, c, measured_gemm_fractions(gpu.id), None)
        for rung in rungs or [{}]:
            ctxs += _context_variants(_with_recompute(ctx, rung), opts, ep_overlap_allowed(rung))
    kinds = _layer_kinds(ctxs[0].model)
    total = min(sum(count * _layer_floor_s(x, layer) for layer, count in kinds.items()) for x in ctxs)
    base = ctxs[0]
    pp = s.pp
    v_max = max([int(n[3:]) for n, keys in opts.get("vpp", []) if interleaving_allowed(s, keys)] or [s.vpp])
    per_stage = total / pp
    _, release_factor = c.release(release_of(s))
    return (base.num_microbatches + (pp - 1) / v_max) * per_stage / release_factor


#: the rule on interleaved schedules' microbatch counts; it reads the sizes, the batch and the
#: microbatch group, which no knob refinement tries changes
_INTERLEAVING_RULE = "batch.interleaved_microbatches"


def interleaving_allowed(s: Scenario, keys: dict) -> bool:
    """False when the VPP option ``keys`` (layout keys, as :func:`moeplan.plan.refinement.knob_families`
    lists them) breaks rule ``batch.interleaved_microbatches`` for ``s``'s layout (megatron-core
    ``pipeline_parallel/schedules.py``: interleaving needs at least PP microbatches and a microbatch
    group that divides them): then every variant with it is rejected, whatever the other knobs."""
    if (keys.get("virtual_pipeline_model_parallel_size") or 1) <= 1:
        return True
    sv = dataclasses.replace(s, layout=s.layout.model_copy(update=keys))
    return not any(f.severity == "error" for f in RULES[_INTERLEAVING_RULE].check(sv))


def ep_overlap_allowed(rung: dict) -> bool:
    """False when the recompute setting ``rung`` (layout keys) rules EP A2A overlap out: full recompute,
    or a recompute method or layer count (rule ``moe.ep_overlap_requirements``, from megatron-core
    ``transformer_config.py`` and Megatron Bridge ``comm_overlap.py``); a variant with it on is rejected."""
    return not (
        rung.get("recompute_granularity") == "full" or rung.get("recompute_method") or rung.get("recompute_num_layers")
    )


def _context_variants(
    ctx: StepContext, opts: dict[str, list[tuple[str, dict]]], overlap_allowed: bool = True
) -> list[StepContext]:
    """``ctx`` with each dispatcher and EP-overlap option of ``opts`` (the context's own when the family
    is not refined; the overlap options only where ``overlap_allowed``)."""
    free = ctx
    dispatchers = {ctx.dispatcher}
    for _, keys in opts.get("dispatcher", []):
        flex = keys.get("moe_token_dispatcher_type") == "flex"
        dispatchers.add((keys.get("moe_flex_dispatcher_backend") or "deepep") if flex else "alltoall")
    overlaps = {ctx.ep_overlap}
    if "ep_overlap" in opts and overlap_allowed:
        overlaps |= {bool(keys.get("overlap_moe_expert_parallel_comm")) for _, keys in opts["ep_overlap"]}
    out = []
    for d in sorted(dispatchers):
        for on in sorted(overlaps):
            out.append(dataclasses.replace(free, dispatcher=d, ep_overlap=on, ep_paired_share=1.0 if on else 0.0))
    share_dispatch_free_terms(ctx, out)  # the variants differ only in what the compute terms do not read
    return out


def _layer_floor_s(ctx: StepContext, layer: int) -> float:
    """One microbatch of decoder layer ``layer`` under ``ctx``: its parts that a knob moves or none does
    (GEMMs scaled by the frozen language model's share), and its recompute (s)."""
    lt = layer_time(ctx, layer)
    gemm = (lt.parts["dense_gemm"] + lt.parts["expert_gemm"]) * ctx.lm_factor
    rest = sum(lt.parts[k] for k in _LAYER_FLOOR_PARTS + _EXCHANGE_PARTS if k not in ("dense_gemm", "expert_gemm"))
    full = lt.full_recompute_s if ctx.recompute_granularity == "full" else 0.0
    return gemm + rest + lt.parts["recompute"] + full


def _with_recompute(ctx: StepContext, rung: dict) -> StepContext:
    """``ctx`` with the recompute settings of ``rung`` (layout keys; {}: none), as
    :func:`moeplan.model.time.context.step_context` derives them; block-wise full recompute counts as
    none (how many layers it re-runs depends on the split)."""
    gran = rung.get("recompute_granularity")
    if gran == "full" and rung.get("recompute_method") == "block":
        gran = None
    mods = rung.get("recompute_modules")
    mods = ["core_attn"] if mods is None else mods
    return dataclasses.replace(
        ctx,
        recompute_granularity=gran,
        recompute_modules=frozenset(mods) if gran == "selective" else frozenset(),
        recompute_num_layers=rung.get("recompute_num_layers") or 1,
    )


def _layer_kinds(m) -> dict[int, int]:
    """The decoder layers by kind (attention kind, MoE or dense): the first layer of each → how many."""
    kinds = m.attention_kinds or ("full",) * m.num_layers
    moe = m.moe_layers or (False,) * m.num_layers
    first: dict[tuple, int] = {}
    count: dict[int, int] = {}
    for li in range(m.num_layers):
        f = first.setdefault((kinds[li], bool(moe[li])), li)
        count[f] = count.get(f, 0) + 1
    return count


def refined_bound(
    s: Scenario,
    families: list[tuple[str, list[tuple[str, dict]]]],
    constants: TimeConstants | None = None,
    rungs: list[dict] | None = None,
) -> float:
    """Tokens/s/GPU no refinement of ``s``'s layout over ``families`` can exceed: GBS · seq / (knob
    floor · GPUs) (:func:`knob_floor_s`); infinite when the floor is 0.

    Raises:
        InputError: as :func:`knob_floor_s`.
    """
    floor = knob_floor_s(s, families, constants, rungs)
    tokens = cast(int, s.training.global_batch_size) * cast(int, s.training.seq_length)
    return float("inf") if floor <= 0 else tokens / (floor * cast(int, s.num_gpus))
