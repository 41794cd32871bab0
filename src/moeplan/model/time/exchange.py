"""A decoder layer's TP, CP and EP communication for one microbatch, forward + backward (s), and what
overlap hides of it. Volumes and link times are :mod:`moeplan.model.comm`'s; the overlap is
Megatron's:

- EP: the shared experts run while the tokens are dispatched (``moe_shared_expert_overlap``,
  ``transformer/moe/moe_layer.py``); EP A2A overlap (``overlap_moe_expert_parallel_comm``, combined
  1F1B) runs one microbatch's forward and another's backward layer by layer in three phases
  (:func:`ep_overlap_phases`), each exchange hidden behind the compute node it is paired with as far
  as the phase's dependencies allow, for the chunks the schedule pairs
  (:func:`~moeplan.model.time.context.ep_paired_share`: the warm-up forwards and cool-down backwards
  run alone); what it hides still costs :data:`~moeplan.model.constants.OVERLAP_COMPUTE_SLOWDOWN` of
  its length (the dispatch kernels hold SMs beside the compute); the ETP collectives stay exposed;
- TP: SP all-gathers / reduce-scatters around the attention block, and around the MLP unless it is a
  MoE block whose experts are not TP-split; ``tp_comm_overlap`` hides at most the dense GEMMs;
- CP: the p2p ring (and a2a+p2p's outer ring) overlaps its K/V exchange with the attention kernel;
  the all-to-alls and the all-gather do not (Transformer Engine ``context_parallel.py``); Gated
  DeltaNet layers' head-split all-to-alls do not either (Megatron-Core ``GatedDeltaNet``).
"""

from __future__ import annotations

from dataclasses import dataclass

from moeplan.model.comm import (
    cp_a2a_s,
    cp_all_gather_s,
    ep_time,
    etp_exchange_s,
    gdn_cp_a2a_s,
    tp_time,
)
from moeplan.model.constants import OVERLAP_COMPUTE_SLOWDOWN
from moeplan.model.memory.dispatcher_buffers import hybridep_nvlink_ranks
from moeplan.model.time.compute import LayerCompute
from moeplan.model.time.context import StepContext, hierarchical_a2a_size, layer_cp_comm_type
from moeplan.model.time.cp_ring import ring_steps


@dataclass(frozen=True)
class Exchange:
    """Exposed and hidden time of one exchange (s)."""

    exposed_s: float = 0.0
    hidden_s: float = 0.0


def ep_exchange(ctx: StepContext, compute: LayerCompute) -> Exchange:
    """Token dispatch + combine of one MoE layer over EP (and ETP), less what shared-expert overlap
    and EP A2A overlap hide (the latter net of its contention cost). The ETP all-gathers and
    reduce-scatters run inside the experts' computation on the compute stream: EP A2A overlap does not
    hide them."""
    s, m = ctx.s, ctx.model
    # the all-gather dispatcher sends every token to every rank whatever the routing: no imbalance
    imbalance = 1.0 if ctx.dispatcher == "allgather" else ctx.routing_factor
    routed = ctx.tokens / s.tp * m.moe_topk * imbalance
    width = m.moe_token_width  # a latent MoE dispatches at its latent width (moe/moe_layer.py)
    num_groups, group_topk = m.moe_router_num_groups, m.moe_router_group_topk
    groups = (num_groups, group_topk) if num_groups and group_topk else None
    topk = m.moe_router_topk or 0
    domain = hybridep_nvlink_ranks(s) if ctx.dispatcher == "hybridep" else None
    raw = ep_time(routed, width, s.ep, s.etp, ctx.dispatcher, ctx.gpu, ctx.c, topk, groups, domain)
    if ctx.ep_overlap:
        etp = etp_exchange_s(routed, width, s.etp, ctx.gpu, ctx.c)
        paired = ctx.ep_paired_share * (raw - etp)
        delay = bool(s.layout.delay_wgrad_compute)
        phases = ep_overlap_phases(paired, compute, delay, ctx.c.overlap_hidden_fraction)
        hidden = paired - sum(phase - comp for phase, comp in phases)
        t = raw - hidden + OVERLAP_COMPUTE_SLOWDOWN * hidden
        return Exchange(t, raw - t)
    t = raw
    if s.layout.moe_shared_expert_overlap and m.moe_shared_expert_intermediate_size:
        g = 3 if m.gated_linear_unit else 2
        shared = 3 * 2 * ctx.tokens * m.hidden_size * m.moe_shared_expert_intermediate_size * g / s.tp
        t = max(0.0, t - shared / ctx.speeds.gemm_flops_per_s)
    return Exchange(t, raw - t)


def ep_overlap_phases(
    exchange_s: float, compute: LayerCompute, delay_wgrad: bool, share: float = 1.0
) -> list[tuple[float, float]]:
    """The three phases of one MoE layer under EP A2A overlap, as ``(phase s, compute s)`` pairs: how
    long each phase takes and how much of it is compute; ``phase − compute`` is the exchange it leaves
    exposed. ``exchange_s`` is the paired dispatch + combine, forward + backward (s); ``share`` the
    share of a node's compute that can hide it (``overlap_hidden_fraction``).

    Megatron-Core ``TransformerLayerSchedulePlan.run`` (``models/common/model_chunk_schedule_plan.py``)
    runs the forward of one microbatch and the backward of another as
    ``comm: combine_bwd | dispatch_fwd → dispatch_bwd | combine_fwd`` beside
    ``comp: attn_fwd | mlp_bwd → mlp_bwd_dw → mlp_fwd | attn_bwd``. The first and third phases pair
    independent work: each takes the longer stream. In the second, ``dispatch_bwd`` needs ``mlp_bwd``'s
    input gradients and ``mlp_fwd`` needs ``dispatch_fwd``'s tokens, so it takes
    ``max(max(D_f, M_b) + D_b, max(D_f, M_b + M_dw) + M_f)``; ``M_b`` is the data gradients plus, without
    ``delay_wgrad_compute``, the weight gradients (``M_dw`` then 0). A node's forward, data and weight
    gradients are a third of it each (one GEMM each per forward one). The four exchanges move the same
    BF16 volume, a quarter of ``exchange_s`` each (:func:`moeplan.model.comm.ep_time`).
    """
    unit = exchange_s / 4
    attn, mlp = share * compute.attn_node_s, share * compute.mlp_node_s
    d_f, d_b = unit, unit
    m_f = mlp / 3
    m_b, m_dw = (mlp / 3, mlp / 3) if delay_wgrad else (2 * mlp / 3, 0.0)
    phase2 = max(max(d_f, m_b) + d_b, max(d_f, m_b + m_dw) + m_f)
    return [(max(unit, attn / 3), attn / 3), (phase2, mlp), (max(unit, attn * 2 / 3), attn * 2 / 3)]


def tp_exchange(ctx: StepContext, moe_layer: bool, compute: LayerCompute, layer: int | None = None) -> Exchange:
    """SP collectives of one layer over TP: 4 around attention, 4 more around a TP-split MLP (dense,
    or a MoE block with shared experts); without SP the same volume moves as all-reduces. A layer of
    a hybrid pattern (``layer`` given) is one block: 4 around its mixer, or 4 around its MLP."""
    s, m = ctx.s, ctx.model
    if s.tp == 1:
        return Exchange()
    mlp_tp = not moe_layer or bool(m.moe_shared_expert_intermediate_size)
    n_coll = 4 + (4 if mlp_tp else 0)
    if layer is not None and m.hybrid_layer_pattern is not None:
        n_coll = 4 if (not m.layer_has_mlp(layer) or mlp_tp) else 0
        if n_coll == 0:
            return Exchange()
    t = tp_time(ctx.tokens, m.hidden_size, s.tp, ctx.gpu, ctx.c, s.layout.tp_comm_overlap, n_coll, compute.dense_gemm_s)
    plain = tp_time(ctx.tokens, m.hidden_size, s.tp, ctx.gpu, ctx.c, False, n_coll)
    return Exchange(t, plain - t)


def _attention_cp(ctx: StepContext, comm_type: str, attention_s: float) -> Exchange:
    """An attention layer's CP exchange (Transformer Engine ``context_parallel.py``): the p2p ring
    hides each step's K/V send behind that step's attention (:func:`~moeplan.model.time.cp_ring.ring_steps`:
    what a step's transfer over the ring's slowest hop takes beyond its attention is exposed); a2a
    and all_gather are exposed; a2a+p2p all-to-alls in its inner group (exposed) and rings over the
    outer one (step by step, as p2p)."""
    s, c, w = ctx.s, ctx.c, ctx.cp_widths
    tokens, cp, tp, span = ctx.tokens, s.cp, s.tp, s.tp * s.cp
    qkvo = w.q + w.kv + w.o
    if comm_type == "a2a":
        t = cp_a2a_s(tokens, qkvo, cp, tp, span, ctx.gpu, c)
        return Exchange(t, 0.0)
    if comm_type == "all_gather":
        return Exchange(cp_all_gather_s(tokens, w.kv, cp, tp, ctx.gpu, c), 0.0)
    inner = hierarchical_a2a_size(s) if comm_type == "a2a+p2p" else 1
    a2a = cp_a2a_s(tokens, qkvo, inner, tp, tp * inner, ctx.gpu, c)
    ring = ring_steps(tokens * inner, w.kv / (tp * inner), cp // inner, tp * inner, ctx.gpu, c, attention_s)
    return Exchange(a2a + ring.exposed_s, ring.hidden_s)


def _gdn_cp(ctx: StepContext) -> Exchange:
    """A Gated DeltaNet layer's head-split all-to-alls under CP (exposed)."""
    s, m = ctx.s, ctx.model
    nv = m.given("linear_num_value_heads")
    v = m.given("linear_value_head_dim") * nv
    qk = m.given("linear_key_head_dim") * m.given("linear_num_key_heads")
    t = gdn_cp_a2a_s(ctx.tokens, 2 * qk + 2 * v + 2 * nv, v, s.cp, s.tp, ctx.gpu, ctx.c)
    return Exchange(t, 0.0)


def _mamba_cp(ctx: StepContext) -> Exchange:
    """A Mamba-2 layer's head-split all-to-alls under CP (exposed): megatron-core
    ``ssm/mamba_context_parallel.py`` moves z, x, B, C and dt to a head split before the conv and scan
    and the output back after them (the same pattern as Gated DeltaNet's, so the same cost model)."""
    s, m = ctx.s, ctx.model
    nh, p, n = m.given("mamba_num_heads"), m.given("mamba_head_dim"), m.given("mamba_state_dim")
    d_inner = nh * p
    in_width = 2 * d_inner + 2 * m.given("mamba_num_groups") * n + nh
    return Exchange(gdn_cp_a2a_s(ctx.tokens, in_width, d_inner, s.cp, s.tp, ctx.gpu, ctx.c), 0.0)


def cp_exchange(ctx: StepContext, layer: int, compute: LayerCompute) -> Exchange:
    """Context-parallel exchange of decoder layer ``layer``: its attention's ``cp_comm_type`` (per
    layer when a list), or a Gated DeltaNet layer's all-to-alls (which ignore ``cp_comm_type``)."""
    if ctx.s.cp == 1:
        return Exchange()
    kind = ctx.model.attention_kinds[layer]
    if kind == "linear":
        return _gdn_cp(ctx)
    if kind == "none":  # an MLP-only hybrid layer: nothing crosses CP
        return Exchange()
    if kind == "mamba":
        return _mamba_cp(ctx)
    return _attention_cp(ctx, layer_cp_comm_type(ctx.s, layer), compute.attention_s)
