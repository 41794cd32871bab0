"""One pipeline stage's forward + backward of one microbatch on one rank (s): its decoder layers,
MTP blocks, output layer and (first stage of a VLM) vision tower.

Layers of one kind (attention kind, MoE or dense) cost the same, so each kind is evaluated once and
counted. Full recompute covers every layer (``recompute_method: uniform``) or the first
``recompute_num_layers`` of each virtual chunk (``block``), as Megatron's ``TransformerBlock``
checkpoints them. An MTP block runs one decoder layer built from the decoder's last layer spec plus
its 2h → h projection (``transformer/multi_token_prediction.py``) and its own logits.
"""

from __future__ import annotations

from dataclasses import dataclass

from moeplan.model.executed_flops import attention_fraction
from moeplan.model.lora import lora_time_s, stage_layer_adapters
from moeplan.model.time.context import StepContext
from moeplan.model.time.layer import LAYER_HIDDEN, LAYER_PARTS, layer_time, layer_time_key
from moeplan.model.vision import VisionCost
from moeplan.structure.placement import StageParams
from moeplan.structure.stages import StagePlan


@dataclass(frozen=True)
class StageTime:
    """Parts (s, breakdown keys) and hidden time (s) of one microbatch on one stage."""

    parts: dict[str, float]
    hidden: dict[str, float]

    @property
    def total_s(self) -> float:
        return sum(self.parts.values())


def _recomputed_layers(ctx: StepContext, st: StageParams, plan: StagePlan | None) -> set[int]:
    """The stage's layers full recompute re-runs (none without full recompute)."""
    if ctx.recompute_granularity != "full":
        return set()
    if ctx.s.layout.recompute_method == "block":
        chunks = plan.layers[st.stage] if plan is not None else [st.layers]
        return {li for chunk in chunks for pos, li in enumerate(chunk) if pos < ctx.recompute_num_layers}
    return set(st.layers)


#: (ids of the stage, plan and model, the full-recompute settings) → (stage, plan, model, its groups)
_GROUPS: dict[tuple, tuple] = {}
#: entries :data:`_GROUPS` holds before it is emptied
GROUPS_LIMIT = 20000


def layer_groups(ctx: StepContext, st: StageParams, plan: StagePlan | None) -> dict[int, list[bool]]:
    """The stage's layers grouped by kind: the layer that stands for each kind → whether each layer
    of that kind is fully recomputed (an MTP depth counted as its layers' decoder stand-ins,
    :attr:`~moeplan.inputs.model_spec.PartialModelSpec.mtp_stand_ins`). Made once per stage, plan
    and model object and full-recompute settings (the objects are held, so their ids keep naming
    them); the mapping returned is shared: read it, do not change it."""
    m, lay = ctx.model, ctx.s.layout
    key = (id(st), id(plan), id(m), ctx.recompute_granularity, lay.recompute_method, ctx.recompute_num_layers)
    hit = _GROUPS.get(key)
    if hit is not None and hit[0] is st and hit[1] is plan and hit[2] is m:
        return hit[3]
    if len(_GROUPS) >= GROUPS_LIMIT:
        _GROUPS.clear()
    groups = _layer_groups(ctx, st, plan)
    _GROUPS[key] = (st, plan, m, groups)
    return groups


def _layer_groups(ctx: StepContext, st: StageParams, plan: StagePlan | None) -> dict[int, list[bool]]:
    """:func:`layer_groups` (computed)."""
    m = ctx.model
    kinds = m.attention_kinds or ("full",) * m.num_layers
    moe = m.moe_layers or (False,) * m.num_layers
    recomputed = _recomputed_layers(ctx, st, plan)
    by_kind: dict[tuple, int] = {}
    groups: dict[int, list[bool]] = {}
    for li in st.layers:
        first = by_kind.setdefault((kinds[li], bool(moe[li])), li)
        groups.setdefault(first, []).append(li in recomputed)
    if st.mtp_layers:  # each depth runs its block's layers: the decoder's last, or a hybrid MTP pattern
        full_uniform = ctx.recompute_granularity == "full" and ctx.s.layout.recompute_method != "block"
        for li in m.mtp_stand_ins:
            first = by_kind.setdefault((kinds[li], bool(moe[li])), li)
            groups.setdefault(first, []).extend([full_uniform] * st.mtp_layers)
    return groups


def _decoder_layers(ctx: StepContext, groups: dict[int, list[bool]]) -> StageTime:
    parts = dict.fromkeys(LAYER_PARTS, 0.0)
    hidden = dict.fromkeys(LAYER_HIDDEN, 0.0)
    for li, flags in groups.items():
        lt = layer_time(ctx, li)
        for k, v in lt.parts.items():
            parts[k] += v * len(flags)
        parts["recompute"] += lt.full_recompute_s * sum(flags)
        for k, v in lt.hidden.items():
            hidden[k] += v * len(flags)
    return StageTime(parts, hidden)


def _vision_tower(ctx: StepContext, vc: VisionCost) -> dict[str, float]:
    """The vision encoder and projector of one microbatch (forward only when frozen)."""
    sp, gpu = ctx.speeds, ctx.gpu
    passes = 3 if vc.trainable else 1
    v_rate = sp.attention_flops_per_s * attention_fraction(
        gpu, vc.patches / max(1, ctx.s.training.micro_batch_size or 1)
    )
    return {
        "vision_encoder": passes * (vc.gemm_flops_fwd / sp.gemm_flops_per_s + vc.attention_flops_fwd / v_rate),
        "vision_projector": passes * vc.merger_flops_fwd / sp.gemm_flops_per_s,
    }


def stage_time(ctx: StepContext, st: StageParams, plan: StagePlan | None) -> StageTime:
    """One microbatch's forward + backward on stage ``st``: decoder layers and MTP blocks, the MTP
    projections and the output layer(s) on the last stage, the vision tower on a VLM's first. Stages
    with the same :func:`stage_time_key` share one computation per context; each call returns its own
    record."""
    groups = layer_groups(ctx, st, plan)
    cache = ctx.__dict__.setdefault("_stage_times", {})  # a cache beside the frozen fields, not a field
    key = stage_time_key(ctx, st, groups)
    hit = cache.get(key)
    if hit is None:
        hit = cache[key] = compute_stage_time(ctx, st, groups)
    return StageTime(dict(hit.parts), dict(hit.hidden))


def stage_time_key(ctx: StepContext, st: StageParams, groups: dict[int, list[bool]]) -> tuple:
    """Everything :func:`compute_stage_time` reads of a stage: per kind of layer, in order, its
    :func:`~moeplan.model.time.layer.layer_time_key` and which of its layers full recompute re-runs;
    the MTP depths, output layer and embedding; under LoRA the layers themselves (their adapters)."""
    kinds = tuple((layer_time_key(ctx, li), tuple(flags)) for li, flags in groups.items())
    adapters = tuple(st.layers) if ctx.s.peft is not None else None
    return (kinds, st.mtp_layers, st.output_layer, st.embedding, adapters)


def compute_stage_time(ctx: StepContext, st: StageParams, groups: dict[int, list[bool]]) -> StageTime:
    """:func:`stage_time` of the stage whose layers are grouped as ``groups`` (computed)."""
    s, m, sp = ctx.s, ctx.model, ctx.speeds
    out = _decoder_layers(ctx, groups)
    parts = out.parts
    h, tokens = m.hidden_size, ctx.tokens
    if st.mtp_layers:  # each MTP block's 2h → h projection
        parts["dense_gemm"] += st.mtp_layers * 3 * 2 * tokens * 2 * h * h / s.tp / sp.gemm_flops_per_s
    if st.output_layer:  # logits of the decoder and of each MTP block
        logits = 2 * tokens * h * ctx.padded_vocab / s.tp * (1 + st.mtp_layers)
        parts["dense_gemm"] += 3 * logits / sp.gemm_flops_per_s
    if ctx.lm_factor != 1.0:  # frozen language model: no weight-gradient GEMMs
        parts["dense_gemm"] *= ctx.lm_factor
        parts["expert_gemm"] *= ctx.lm_factor
    if s.peft is not None:  # LoRA adapter GEMMs (moeplan.model.lora), on top of the frozen base
        for la in stage_layer_adapters(s, st):
            d, r = lora_time_s(s, la, tokens, ctx.routing_factor, sp.gemm_flops_per_s, sp.hbm_bytes_per_s)
            parts["dense_gemm"] += d
            parts["expert_gemm"] += r
    if st.embedding and ctx.vision is not None:
        parts.update(_vision_tower(ctx, ctx.vision))
    return out
