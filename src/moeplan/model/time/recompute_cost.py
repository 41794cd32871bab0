"""Recompute: one more forward of what was dropped (s per layer and microbatch).

Full recompute re-runs the layer's forward: a third of its GEMM, attention and memory-bound time,
and half its EP exchange (the forward dispatch + combine). Selective recompute re-runs only the
checkpointed modules (``megatron/core/transformer``: ``core_attn`` the attention kernel's forward,
``mlp`` the dense MLP, ``moe`` the experts and their exchange, ``mla_up_proj`` / ``shared_experts``
their projections, ``layernorm`` / ``moe_act`` / ``gdn_norm_out`` element-wise work, ``mhc``
DeepSeek-V4's hyper-connection kernels, :mod:`moeplan.model.dsv4_mhc`). The shares
of a layer's dense GEMMs (MLP 0.6, MLA up-projection 0.3, shared experts 0.3) and of its memory-bound
work (0.2 per element-wise module) are planning values.
"""

from __future__ import annotations

from moeplan.model.comm import gdn_cp_a2a_s
from moeplan.model.dsv4_mhc import mhc_recompute_s
from moeplan.model.executed_flops import ATTENTION_FWD_SHARE
from moeplan.model.time.compute import LayerCompute, mhc_rates
from moeplan.model.time.context import StepContext

#: share of a layer's dense GEMMs in the dense MLP / MLA up-projection / shared experts (planning values)
MLP_DENSE_SHARE = 0.6
MLA_UP_PROJ_DENSE_SHARE = 0.3
SHARED_EXPERTS_DENSE_SHARE = 0.3
#: share of a layer's memory-bound work in each element-wise module (planning value)
ELEMENTWISE_SHARE = 0.2
#: ``mhc`` (DeepSeek-V4's hyper-connections) is timed kernel by kernel instead
#: (:func:`moeplan.model.dsv4_mhc.mhc_recompute_s`)
_ELEMENTWISE = frozenset({"layernorm", "moe_act", "gdn_norm_out"})


def full_recompute_s(compute: LayerCompute, ep_exposed_s: float) -> float:
    """One more forward of the whole layer: a third of its compute and half its exposed EP exchange."""
    return (compute.dense_gemm_s + compute.expert_gemm_s + compute.attention_s + compute.memory_bound_s) / 3 + (
        ep_exposed_s / 2
    )


def selective_recompute_s(ctx: StepContext, moe_layer: bool, compute: LayerCompute, ep_exposed_s: float) -> float:
    """One more forward of the layer's checkpointed modules (0 without selective recompute)."""
    modules = ctx.recompute_modules
    if not modules:
        return 0.0
    fwd_dense = compute.dense_gemm_s / 3
    extra = 0.0
    if "core_attn" in modules:
        extra += compute.attention_s * ATTENTION_FWD_SHARE
    if "mlp" in modules and not moe_layer:
        extra += fwd_dense * MLP_DENSE_SHARE
    if "moe" in modules and moe_layer:
        extra += compute.expert_gemm_s / 3 + ep_exposed_s / 2
    if "mla_up_proj" in modules and ctx.model.multi_latent_attention:
        extra += fwd_dense * MLA_UP_PROJ_DENSE_SHARE
    if "shared_experts" in modules and moe_layer:
        extra += fwd_dense * SHARED_EXPERTS_DENSE_SHARE
    extra += compute.memory_bound_s / 3 * len(modules & _ELEMENTWISE) * ELEMENTWISE_SHARE
    if "mhc" in modules:  # the aggregation, h_post_bda and the norms after them, re-run
        extra += mhc_recompute_s(ctx.model, ctx.act.seq_tokens, ctx.act.act_bytes, mhc_rates(ctx))
    return extra


def gdn_norm_out_a2a_s(ctx: StepContext) -> float:
    """``gdn_norm_out`` recompute re-runs the gated norm together with the output all-to-all that
    follows it under CP (Megatron-Core ``_gated_norm_and_a2a``): one more forward all-to-all of the
    output (half of the output all-to-all's forward + backward time); 0 without it or without CP."""
    s, m = ctx.s, ctx.model
    if "gdn_norm_out" not in ctx.recompute_modules or s.cp == 1:
        return 0.0
    v = m.given("linear_value_head_dim") * m.given("linear_num_value_heads")
    return gdn_cp_a2a_s(ctx.tokens, 0, v, s.cp, s.tp, ctx.gpu, ctx.c) / 2
