"""Host-side costs of one decoder layer and microbatch, forward + backward (s): kernel launches and
the dropless MoE host sync, and what CUDA graphs take off them.

``launch_overhead_s_per_layer`` (fitted) is the eager launch cost; CUDA graphs remove the share their
scopes capture (:data:`moeplan.model.time.context.GRAPH_SHARE`; a full-iteration graph all of it).
A dropless MoE layer copies its token counts to the host to size the expert GEMMs
(``moe_sync_s_per_layer``, fitted); drop-and-pad has static shapes and no sync, and a full-iteration
graph runs the static-budget expert path (Megatron-LM CUDA Graphs guide, "MoE Model Training").
"""

from __future__ import annotations

from moeplan.model.time.context import StepContext
from moeplan.model.time.exchange import Exchange


def launch_overhead(ctx: StepContext, moe_layer: bool) -> Exchange:
    """Exposed launch overhead and MoE sync of one layer, and what CUDA graphs removed (hidden)."""
    c = ctx.c
    exposed = c.launch_overhead_s_per_layer * (1 - ctx.graph_share)
    hidden = c.launch_overhead_s_per_layer * ctx.graph_share
    padded = ctx.s.layout.moe_pad_expert_input_to_capacity
    if moe_layer and not padded:
        if ctx.graphs != "full_iteration":
            exposed += c.moe_sync_s_per_layer
        else:
            hidden += c.moe_sync_s_per_layer  # the static-budget path has no host sync
    return Exchange(exposed, hidden)
