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

from moeplan.model.time.context import StepContext
from moeplan.model.time.exchange import Exchange

#: a dense decoder layer's eager launches against a MoE layer's, forward + backward: about 45 kernels
#: (fused layernorm-linear, RoPE, attention, projection, bias-dropout-add, fused layernorm-MLP; twice
#: that for backward) against about 150 for a dropless MoE layer (the same attention block, then router
#: GEMM and top-k, permutation, the token-count preprocessing, two all-to-alls, the grouped GEMMs, which
#: multi-stream cuBLAS issues one per local expert, unpermutation), a quarter rounded. Weakly identified
#: by the published runs (all MoE); the dense Llama2-7B CP check (docs/long_context.md) bounds it: its
#: 4K row, the least compute per layer, is the one that moves
DENSE_LAUNCH_SHARE = 0.25


def launch_overhead(ctx: StepContext, moe_layer: bool) -> Exchange:
    """Exposed launch overhead and MoE sync of one layer, and what CUDA graphs removed (hidden)."""
    c = ctx.c
    issue = c.launch_overhead_s_per_layer * (1.0 if moe_layer else DENSE_LAUNCH_SHARE)
    exposed = issue * (1 - ctx.graph_share)
    hidden = issue * ctx.graph_share
    padded = ctx.s.layout.moe_pad_expert_input_to_capacity
    if moe_layer and not padded:
        if ctx.graphs != "full_iteration":
            exposed += c.moe_sync_s_per_layer
        else:
            hidden += c.moe_sync_s_per_layer  # the static-budget path has no host sync
    return Exchange(exposed, hidden)
