"""The router's kernel launches in a MoE layer, and the ones Transformer Engine's fused router removes.

Megatron-Core's ``TopKRouter`` turns the gating logits into routing probabilities and a routing map
with ``topk_routing_with_score_function`` (``transformer/moe/moe_utils.py``, core_v0.18.0 and the
0.19 tree Megatron Bridge 411c6b1 pins). With ``moe_router_fusion`` it calls Transformer Engine's
``fused_topk_with_score_function`` (TE ≥ 2.7 per the config's docstring; one autograd function that returns the [tokens,
experts] probabilities and map): one kernel forward, one backward. Without it, the same work is a
chain of PyTorch ops, one launch each, counted here from that source (logits in FP32, as Megatron
Bridge's DeepSeek-family providers set ``moe_router_dtype: fp32``, so the casts are no-ops):

- sigmoid scores with an expert bias (DeepSeek-V3 style, ``moe_router_enable_expert_bias``): forward
  sigmoid, bias add, top-k, gather, sum, + eps, divide, scaling-factor multiply, and the scatter of the
  probabilities (zeros + scatter) and of the map (zeros, int, scatter, bool): 14; backward the
  scatter's gather, the scaling multiply, the division's two gradients (divide; multiply, divide,
  negate, sum), the sum of the two paths into the scores, the gather's zeros + scatter-add and the
  sigmoid's: 10. In all 24.
- softmax after top-k (the default score function): forward top-k, softmax and the same two scatters
  (6): 8; backward the scatter's gather, the softmax's and the top-k values' zeros + scatter: 4. In
  all 12.

The launch overhead of a MoE layer (``launch_overhead_s_per_layer``, fitted, for
:data:`moeplan.model.time.launch.MOE_LAYER_LAUNCHES` launches) is charged per launch, so the fused
router takes (unfused − 2) launches off it. The auxiliary-loss scores (also fused by the flag) are
left out: conservative, as whether a run has an aux loss is not an input.
"""

from __future__ import annotations

from moeplan.i18n.messages import Message, msg
from moeplan.model.time.context import StepContext

#: launches of megatron-core's unfused sigmoid + expert-bias routing, forward + backward (count above)
UNFUSED_SIGMOID_BIAS_LAUNCHES = 24
#: launches of megatron-core's unfused softmax-after-top-k routing, forward + backward (count above)
UNFUSED_SOFTMAX_LAUNCHES = 12
#: Transformer Engine's ``fused_topk_with_score_function``: one kernel forward, one backward
FUSED_ROUTER_LAUNCHES = 2


def unfused_router_launches(ctx: StepContext) -> int:
    """Launches of the unfused routing function in one MoE layer, forward + backward: the sigmoid +
    expert-bias path for a model with a router expert bias (every catalog model with one scores with
    a sigmoid), else the softmax path."""
    if ctx.model.moe_router_expert_bias:
        return UNFUSED_SIGMOID_BIAS_LAUNCHES
    return UNFUSED_SOFTMAX_LAUNCHES


def router_launches_saved(ctx: StepContext) -> int:
    """Launches ``moe_router_fusion`` removes from one MoE layer, forward + backward (a count): the
    unfused routing's launches less the fused kernel's two; 0 with the flag off or a dense model."""
    if not ctx.s.layout.moe_router_fusion or not ctx.model.num_moe_experts:
        return 0
    return unfused_router_launches(ctx) - FUSED_ROUTER_LAUNCHES


def router_fusion_notes(ctx: StepContext, layer_launches: int) -> list[Message]:
    """What the estimate states about the fused router: the launches it removes of a MoE layer's
    ``layer_launches``; empty when the flag is off."""
    saved = router_launches_saved(ctx)
    if saved <= 0:
        return []
    return [
        msg(
            "small_moe.router_fusion_launches",
            unfused=unfused_router_launches(ctx),
            fused=FUSED_ROUTER_LAUNCHES,
            total=layer_launches,
            left=layer_launches - saved,
        )
    ]
