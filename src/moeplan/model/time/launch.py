"""Host-side costs of one decoder layer and microbatch, forward + backward (s): kernel launches and
the dropless MoE host sync, and what CUDA graphs take off them.

``launch_overhead_s_per_layer`` (fitted) is the eager launch cost of a MoE layer; a dense layer issues
:data:`DENSE_LAUNCH_SHARE` of it. CUDA graphs remove the share their scopes capture
(:data:`moeplan.model.time.context.GRAPH_SHARE`; a full-iteration graph all of it).
A dropless MoE layer copies its token counts to the host to size the expert GEMMs
(``moe_sync_s_per_layer``, fitted); drop-and-pad has static shapes and no sync, and a full-iteration
graph runs the static-budget expert path (Megatron-LM CUDA Graphs guide, "MoE Model Training").
"""

from __future__ import annotations

from moeplan.model.dsv4_mhc import mhc_layer_launches
from moeplan.model.executed_flops import arch_family
from moeplan.model.mamba_kernels import mamba_kernels
from moeplan.model.time.compute import DSV4_FUSED_FAMILIES
from moeplan.model.time.context import GRAPH_SHARE, StepContext
from moeplan.model.time.exchange import Exchange
from moeplan.model.time.router_launches import router_launches_saved

#: a dense decoder layer's eager launches against a MoE layer's, forward + backward: about 45 kernels
#: (fused layernorm-linear, RoPE, attention, projection, bias-dropout-add, fused layernorm-MLP; twice
#: that for backward) against about 150 for a dropless MoE layer (the same attention block, then router
#: GEMM and top-k, permutation, the token-count preprocessing, two all-to-alls, the grouped GEMMs, which
#: multi-stream cuBLAS issues one per local expert, unpermutation), a quarter rounded. Weakly identified
#: by the published runs (all MoE); the dense Llama2-7B CP check (docs/long_context.md) bounds it: its
#: 4K row, the least compute per layer, is the one that moves
DENSE_LAUNCH_SHARE = 0.25


#: launches of a dropless MoE transformer layer, forward + backward (the count above)
MOE_LAYER_LAUNCHES = 150
#: launches of a hybrid pattern's attention-only ``*`` layer: the attention half of a dense layer's 45
#: (fused norm-QKV, RoPE, the attention kernel, projection, bias-dropout-add, forward and backward)
ATTENTION_ONLY_LAUNCHES = 22
#: a Mamba ``M`` layer's launches besides its mixer's kernels (:func:`moeplan.model.mamba_kernels.mamba_kernels`,
#: 28): in_proj with its fused norm (2 forward, 4 backward), out_proj (2 forward, 3 backward), the residual
#: add (2) and the scan backward's small torch ops (``dt`` clone, ddA's flip-cumsum-flip, two adds, the
#: last-column add, dD's sum: 7)
MAMBA_OTHER_LAUNCHES = 20


def hybrid_layer_launches(ctx: StepContext, symbol: str) -> tuple[float, float]:
    """A hybrid pattern's one-block layer (megatron-core ``MambaStack``: ``M`` Mamba, ``*`` attention,
    ``-`` dense MLP, ``E`` MoE): its launches as a share of a MoE transformer layer's, and the share of
    them its CUDA graph scopes capture. Megatron-Core captures a per-layer graph of a layer whose
    block's scope is listed (``mamba`` for ``M``, ``attn`` for ``*``, ``mlp`` for ``-``); an ``E``
    layer has the MoE part of a transformer layer (1 − the ``attn`` share of
    :data:`moeplan.model.time.context.GRAPH_SHARE`), of which ``moe_router`` / ``moe_preprocess`` /
    ``moe`` capture their shares."""
    scopes = set(ctx.s.graph_scopes()) if ctx.graph_share > 0 else set()
    full = ctx.graphs == "full_iteration" or (ctx.graph_share > 0 and not scopes)
    moe_part = 1.0 - GRAPH_SHARE["attn"]
    if symbol == "M":
        share = (len(mamba_kernels(ctx.model, ctx.s.tp)) + MAMBA_OTHER_LAUNCHES) / MOE_LAYER_LAUNCHES
        return share, 1.0 if full or "mamba" in scopes else 0.0
    if symbol == "*":
        return ATTENTION_ONLY_LAUNCHES / MOE_LAYER_LAUNCHES, 1.0 if full or "attn" in scopes else 0.0
    if symbol == "-":
        return (
            DENSE_LAUNCH_SHARE - ATTENTION_ONLY_LAUNCHES / MOE_LAYER_LAUNCHES,
            1.0 if full or "mlp" in scopes else 0.0,
        )
    captured = sum(GRAPH_SHARE[x] for x in ("moe_router", "moe_preprocess", "moe") if x in scopes) / moe_part
    return 1.0 - ATTENTION_ONLY_LAUNCHES / MOE_LAYER_LAUNCHES, 1.0 if full else min(1.0, captured)


def mhc_launch_share(ctx: StepContext) -> float:
    """DeepSeek-V4's hyper-connection kernels (:func:`moeplan.model.dsv4_mhc.mhc_layer_launches`, 40 a
    layer fused, 48 native) as a share of a MoE layer's :data:`MOE_LAYER_LAUNCHES`, captured by the same
    graphs as the layer around them; 0 without hyper-connections."""
    fused = arch_family(ctx.gpu) in DSV4_FUSED_FAMILIES
    return mhc_layer_launches(ctx.model, fused) / MOE_LAYER_LAUNCHES


def launch_overhead(ctx: StepContext, moe_layer: bool, layer: int | None = None) -> Exchange:
    """Exposed launch overhead and MoE sync of one layer, and what CUDA graphs removed (hidden).
    ``layer`` (0-based) selects a hybrid pattern's own launch count and graph capture
    (:func:`hybrid_layer_launches`); without it, or for a model without a pattern, a transformer layer's.
    A MoE layer with ``moe_router_fusion`` issues fewer (:mod:`moeplan.model.time.router_launches`)."""
    c = ctx.c
    pattern = ctx.model.hybrid_layer_pattern
    if layer is not None and pattern is not None:
        share, captured = hybrid_layer_launches(ctx, pattern[layer])
    else:
        share, captured = (1.0 if moe_layer else DENSE_LAUNCH_SHARE), ctx.graph_share
    share += mhc_launch_share(ctx)
    if moe_layer:  # Transformer Engine's fused router: fewer launches per MoE layer
        share -= router_launches_saved(ctx) / MOE_LAYER_LAUNCHES
    issue = c.launch_overhead_s_per_layer * share
    exposed = issue * (1 - captured)
    hidden = issue * captured
    padded = ctx.s.layout.moe_pad_expert_input_to_capacity
    if moe_layer and not padded:
        if ctx.graphs != "full_iteration":
            exposed += c.moe_sync_s_per_layer
        else:
            hidden += c.moe_sync_s_per_layer  # the static-budget path has no host sync
    return Exchange(exposed, hidden)
