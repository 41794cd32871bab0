"""The time of one decoder layer for one microbatch on one rank, every term together."""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

from moeplan.model.activations import layer_saved_keys
from moeplan.model.kimi_k3_activations import attn_res_rows
from moeplan.model.time.compute import LayerCompute, layer_compute
from moeplan.model.time.context import StepContext, layer_cp_comm_type
from moeplan.model.time.exchange import Exchange, cp_exchange, ep_exchange, tp_exchange
from moeplan.model.time.launch import launch_overhead
from moeplan.model.time.offload import activation_offload_s
from moeplan.model.time.recompute_cost import full_recompute_s, gdn_norm_out_a2a_s, selective_recompute_s

#: the breakdown parts a layer contributes to (``ThroughputEstimate.breakdown_s`` keys)
LAYER_PARTS = (
    "dense_gemm",
    "expert_gemm",
    "attention",
    "memory_bound",
    "launch_overhead",
    "recompute",
    "tp_comm",
    "cp_comm_exposed",
    "ep_comm_exposed",
    "activation_offload",
)
#: what overlap and CUDA graphs remove from a layer (``ThroughputEstimate.hidden_s`` keys)
LAYER_HIDDEN = ("ep_comm", "cp_comm", "tp_comm", "cuda_graphs")


@dataclass(frozen=True)
class LayerTime:
    """One layer's parts (s, keys :data:`LAYER_PARTS`; ``recompute`` the selective share), what
    overlap and graphs hid (keys :data:`LAYER_HIDDEN`), and what full recompute would add (s)."""

    parts: dict[str, float]
    hidden: dict[str, float]
    full_recompute_s: float


def layer_time_key(ctx: StepContext, layer: int) -> tuple:
    """What :func:`layer_time` reads of decoder layer ``layer`` (0-based) besides the context: its
    :func:`~moeplan.model.activations.layer_saved_key` (attention kind, MoE, MLP, DeepSeek-V4
    compression ratio, own DSA indexer), its hybrid-pattern symbol (None without a pattern) and its
    ``cp_comm_type``. Two layers with the same key take the same time under one context."""
    m = ctx.model
    pattern = m.hybrid_layer_pattern
    return (
        layer_saved_keys(m)[layer],
        attn_res_rows(m, layer),  # Kimi-K3's AttnRes mixes: their element-wise work grows with depth
        pattern[layer] if pattern is not None else None,
        layer_cp_comm_type(ctx.s, layer),
    )


def layer_time(ctx: StepContext, layer: int) -> LayerTime:
    """Every term of decoder layer ``layer`` (0-based) for one microbatch on one rank. Layers with the
    same :func:`layer_time_key` share one computation per context (kept beside its frozen fields)."""
    cache = ctx.__dict__.setdefault("_layer_times", {})
    key = layer_time_key(ctx, layer)
    hit = cache.get(key)
    if hit is None:
        hit = cache[key] = compute_layer_time(ctx, layer)
    return cast(LayerTime, hit)


#: the key under which a context keeps the terms of its layers that no dispatcher or EP overlap
#: setting changes (:func:`dispatch_free_terms`)
SHARED_TERMS = "_dispatch_free_terms"


def dispatch_free_terms(ctx: StepContext, layer: int) -> tuple[LayerCompute, Exchange, Exchange, Exchange]:
    """The terms of decoder layer ``layer`` that do not read the dispatcher or the EP overlap (its
    compute, TP and CP exchanges, launch overhead), once per :func:`layer_time_key` for the contexts
    that share one record: each context has its own unless it was given one (:func:`share_dispatch_free_terms`)."""
    cache = ctx.__dict__.setdefault(SHARED_TERMS, {})
    key = layer_time_key(ctx, layer)
    hit = cache.get(key)
    if hit is None:
        moe_layer = bool(ctx.model.moe_layers and ctx.model.moe_layers[layer])
        comp = layer_compute(ctx, layer)
        tp = tp_exchange(ctx, moe_layer, comp, layer)
        hit = cache[key] = (comp, tp, cp_exchange(ctx, layer, comp), launch_overhead(ctx, moe_layer, layer))
    return cast(tuple[LayerCompute, Exchange, Exchange, Exchange], hit)


def share_dispatch_free_terms(source: StepContext, variants: list[StepContext]) -> None:
    """Let ``variants`` use ``source``'s record of :func:`dispatch_free_terms`. Only for contexts that
    differ from ``source`` in ``dispatcher``, ``ep_overlap`` and ``ep_paired_share``: the layer
    compute, TP and CP exchanges and launch overhead read none of them."""
    cache = source.__dict__.setdefault(SHARED_TERMS, {})
    for v in variants:
        v.__dict__[SHARED_TERMS] = cache


def compute_layer_time(ctx: StepContext, layer: int) -> LayerTime:
    """Every term of decoder layer ``layer`` (0-based) for one microbatch on one rank (computed)."""
    m = ctx.model
    linear = m.attention_kinds[layer] == "linear"
    moe_layer = bool(m.moe_layers and m.moe_layers[layer])
    comp, tp, cp, launch = dispatch_free_terms(ctx, layer)
    ep = ep_exchange(ctx, comp) if moe_layer else Exchange()
    parts = {
        "dense_gemm": comp.dense_gemm_s,
        "expert_gemm": comp.expert_gemm_s,
        "attention": comp.attention_s,
        "memory_bound": comp.memory_bound_s,
        "launch_overhead": launch.exposed_s,
        "recompute": selective_recompute_s(ctx, moe_layer, comp, ep.exposed_s)
        + (gdn_norm_out_a2a_s(ctx) if linear else 0.0),
        "tp_comm": tp.exposed_s,
        "cp_comm_exposed": cp.exposed_s,
        "ep_comm_exposed": ep.exposed_s,
        "activation_offload": activation_offload_s(ctx, comp),
    }
    hidden = {"ep_comm": ep.hidden_s, "cp_comm": cp.hidden_s, "tp_comm": tp.hidden_s, "cuda_graphs": launch.hidden_s}
    return LayerTime(parts, hidden, full_recompute_s(comp, ep.exposed_s))
