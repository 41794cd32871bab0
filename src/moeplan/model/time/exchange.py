"""A decoder layer's TP, CP and EP communication for one microbatch, forward + backward (s), and what
overlap hides of it. Volumes and link times are :mod:`moeplan.model.comm`'s; the overlap is
Megatron's:

- EP: the shared experts run while the tokens are dispatched (``moe_shared_expert_overlap``,
  ``transformer/moe/moe_layer.py``); EP A2A overlap (``overlap_moe_expert_parallel_comm``, combined
  1F1B in ``pipeline_parallel/combined_1f1b.py``) hides the exchange behind the paired microbatch's
  GEMMs and attention, up to ``overlap_hidden_fraction`` of them;
- TP: SP all-gathers / reduce-scatters around the attention block, and around the MLP unless it is a
  MoE block whose experts are not TP-split; ``tp_comm_overlap`` hides at most the dense GEMMs;
- CP: the p2p ring overlaps its K/V exchange with the attention kernel; the all-to-all does not.
"""

from __future__ import annotations

from dataclasses import dataclass

from moeplan.model.comm import cp_time, ep_time, tp_time
from moeplan.model.time.compute import LayerCompute
from moeplan.model.time.context import StepContext


@dataclass(frozen=True)
class Exchange:
    """Exposed and hidden time of one exchange (s)."""

    exposed_s: float = 0.0
    hidden_s: float = 0.0


def ep_exchange(ctx: StepContext, compute: LayerCompute) -> Exchange:
    """Token dispatch + combine of one MoE layer over EP (and ETP), less what shared-expert overlap
    and EP A2A overlap hide."""
    s, m = ctx.s, ctx.model
    routed = ctx.tokens / s.tp * m.moe_topk * ctx.routing_factor
    fp8_dispatch = s.training.precision != "bf16" and ctx.dispatcher in ("deepep", "hybridep")
    raw = ep_time(
        routed, m.hidden_size, s.ep, s.etp, ctx.dispatcher, ctx.gpu, ctx.c, fp8_dispatch, m.moe_router_topk or 0
    )
    t = raw
    if s.layout.moe_shared_expert_overlap and m.moe_shared_expert_intermediate_size:
        g = 3 if m.gated_linear_unit else 2
        shared = 3 * 2 * ctx.tokens * m.hidden_size * m.moe_shared_expert_intermediate_size * g / s.tp
        t = max(0.0, t - shared / ctx.speeds.gemm_flops_per_s)
    if ctx.ep_overlap:
        t = max(0.0, t - ctx.c.overlap_hidden_fraction * compute.gemm_and_attention_s)
    return Exchange(t, raw - t)


def tp_exchange(ctx: StepContext, moe_layer: bool, compute: LayerCompute) -> Exchange:
    """SP collectives of one layer over TP: 4 around attention, 4 more around a TP-split MLP (dense,
    or a MoE block with shared experts); without SP the same volume moves as all-reduces."""
    s, m = ctx.s, ctx.model
    if s.tp == 1:
        return Exchange()
    mlp_tp = not moe_layer or bool(m.moe_shared_expert_intermediate_size)
    n_coll = 4 + (4 if mlp_tp else 0)
    t = tp_time(ctx.tokens, m.hidden_size, s.tp, ctx.gpu, ctx.c, s.layout.tp_comm_overlap, n_coll, compute.dense_gemm_s)
    plain = tp_time(ctx.tokens, m.hidden_size, s.tp, ctx.gpu, ctx.c, False, n_coll)
    return Exchange(t, plain - t)


def cp_exchange(ctx: StepContext, kind: str, compute: LayerCompute) -> Exchange:
    """Context-parallel exchange of one attention layer (none for linear-attention layers); the ring
    hides behind the attention kernel, the all-to-all does not."""
    s = ctx.s
    if kind == "linear":
        return Exchange()
    w = ctx.cp_widths
    t = cp_time(ctx.tokens, w.q, w.kv, w.o, s.cp, s.tp, ctx.cp_comm_type, ctx.gpu, ctx.c)
    exposed = max(0.0, t - (compute.attention_s if ctx.cp_comm_type != "a2a" else 0.0))
    return Exchange(exposed, t - exposed)
