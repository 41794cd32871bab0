"""A decoder layer's compute for one microbatch on one rank, forward + backward (s): dense GEMMs,
grouped expert GEMMs, the attention kernels and memory-bound element-wise work.

Executed FLOPs from :func:`moeplan.model.executed_flops.layer_flops`; backward runs 2× the forward GEMMs
(3× in all). GEMMs run at the achieved GEMM rate (peak × measured best-shape fraction) times the
grouped-GEMM occupancy for few tokens per expert; attention at the achieved attention rate for the
kernel length (:func:`moeplan.model.executed_flops.attention_fraction`, first principles); element-wise work
moves ``memory_bound_bytes_per_activation_byte`` HBM bytes per saved activation byte in a dense layer and
``moe_memory_bound_bytes_per_activation_byte`` in a MoE layer (both fitted); a Gated
DeltaNet layer's delta rule runs at the measured speed of its chunked kernel (:mod:`moeplan.model.gdn`).

Each term is also split by the node of Megatron's EP-overlap layer schedule it runs in
(:attr:`LayerCompute.attn_node_s`, :attr:`LayerCompute.mlp_node_s`), which is what EP A2A overlap pairs
the exchange with (:mod:`moeplan.model.time.exchange`).
"""

from __future__ import annotations

from dataclasses import dataclass

from moeplan.i18n.messages import Message
from moeplan.model.activations import layer_activations
from moeplan.model.dsv4_mhc import MHC_KERNEL_TENSORS, MhcRates, mhc_layer_s
from moeplan.model.executed_flops import (
    arch_family,
    attention_fraction,
    grouped_efficiency,
    layer_flops,
    sparse_mla_fraction,
)
from moeplan.model.gdn import gdn_kernel_s, kda_kernel_s, recurrence_notes
from moeplan.model.mamba_scan import MAMBA_KERNEL_TENSORS, mamba_kernel_s
from moeplan.model.time.context import StepContext, attention_rate, layer_cp_comm_type
from moeplan.model.time.dsa_costs import dsa_core_s
from moeplan.structure.attention_kernels import attention_runs_unfused, sparse_mla_padded_heads


@dataclass(frozen=True)
class LayerCompute:
    """Compute time of one layer and microbatch, forward + backward (s), and what it saves.

    Attributes:
        dense_gemm_s / expert_gemm_s / attention_s / memory_bound_s: the four compute terms.
        kept_bytes: saved tensors kept for backward, name → bytes (after selective recompute).
        mlp_memory_share: the share of ``memory_bound_s`` that is the routed experts' (0–1): their
            saved tensors' share of the layer's (:data:`MLP_NODE_TENSORS`).
    """

    dense_gemm_s: float
    expert_gemm_s: float
    attention_s: float
    memory_bound_s: float
    kept_bytes: dict[str, float]
    mlp_memory_share: float = 0.0

    @property
    def mlp_node_s(self) -> float:
        """A MoE layer's ``mlp`` node in Megatron's EP-overlap layer schedule, forward + backward (s): the
        routed experts' GEMMs and element-wise work (``routed_experts_compute``, with the dispatch
        post-processing and the combine pre-processing)."""
        return self.expert_gemm_s + self.memory_bound_s * self.mlp_memory_share

    @property
    def attn_node_s(self) -> float:
        """A MoE layer's ``attn`` node, forward + backward (s): attention and its projections, the pre-MLP
        norm, the shared experts (computed before the router since Megatron-Core 0.15), the router and
        the dispatch preprocessing, with their element-wise work."""
        return self.dense_gemm_s + self.attention_s + self.memory_bound_s * (1.0 - self.mlp_memory_share)


#: the saved tensors of a MoE layer's ``mlp`` node in Megatron's EP-overlap layer schedule (names as in
#: :mod:`moeplan.model.activations`). Megatron-Core ``models/common/model_chunk_schedule_plan.py``
#: (``TransformerLayerSchedulePlan``) splits a layer into ``attn`` (attention → layernorm → shared experts
#: → router → dispatch preprocess; ``models/gpt/fine_grained_callables.py``, core 0.15+), ``moe_dispatch``,
#: ``mlp`` (``routed_experts_compute``) and ``moe_combine``; every other tensor is the ``attn`` node's
MLP_NODE_TENSORS = frozenset({"expert_fc1_in", "expert_fc1_out", "expert_fc2_in"})


def mlp_memory_share(kept: dict[str, float], recomputed: dict[str, float]) -> float:
    """Share (0–1) of a layer's saved bytes, kept and recomputed, that are the ``mlp`` node's tensors
    (:data:`MLP_NODE_TENSORS`): how its element-wise work splits between the schedule's two compute
    nodes. 0 when the layer saves nothing. (The combine node's unpermute and ``mlp_bda`` run on the
    communication stream; their small element-wise work is left in the ``attn`` node.)"""
    total = sum(kept.values()) + sum(recomputed.values())
    if total <= 0:
        return 0.0
    mlp = sum(v for d in (kept, recomputed) for k, v in d.items() if k in MLP_NODE_TENSORS)
    return mlp / total


def gated_deltanet_s(ctx: StepContext) -> float:
    """The chunked delta rule of one Gated DeltaNet layer and microbatch on one rank (s): the whole
    sequence for H_v / (TP·CP) value heads (Megatron-Core's head-split CP), :mod:`moeplan.model.gdn`."""
    s, m = ctx.s, ctx.model
    heads = m.given("linear_num_value_heads") / (s.tp * s.cp)
    d_k, d_v = m.given("linear_key_head_dim"), m.given("linear_value_head_dim")
    if m.kimi_delta_attention:  # chunk_kda: the delta rule plus per-channel gating (planning estimate)
        return kda_kernel_s(ctx.gpu, ctx.mbs, ctx.seq_length, heads, d_k, d_v)
    return gdn_kernel_s(ctx.gpu, ctx.mbs, ctx.seq_length, heads, d_k, d_v)


def gated_deltanet_notes(ctx: StepContext) -> list[Message]:
    """What the estimate states about a Gated DeltaNet layer's state recurrence on one rank (the whole
    sequence for H_v / (TP·CP) heads: :func:`moeplan.model.gdn.recurrence_notes`); empty for a model
    without Gated DeltaNet layers or with Kimi Delta Attention's."""
    s, m = ctx.s, ctx.model
    if not m.has_linear_attention or m.kimi_delta_attention:
        return []
    heads = m.given("linear_num_value_heads") / (s.tp * s.cp)
    d_k, d_v = m.given("linear_key_head_dim"), m.given("linear_value_head_dim")
    return recurrence_notes(ctx.gpu, ctx.mbs, ctx.seq_length, heads, d_k, d_v)


def element_wise_bytes_per_activation_byte(ctx: StepContext, layer: int) -> float:
    """HBM bytes element-wise work moves per saved activation byte in decoder layer ``layer`` (fitted): a
    MoE layer's own rate (its routed path adds permutation, the dispatcher's buffer copies and
    unpermutation to the norms, activations and residuals of a dense layer), else the dense rate."""
    m, c = ctx.model, ctx.c
    if m.moe_layers and m.moe_layers[layer]:
        return c.moe_memory_bound_bytes_per_activation_byte
    return c.memory_bound_bytes_per_activation_byte


#: architecture families on which Megatron Bridge trains DeepSeek-V4's attention with the fused sparse
#: kernels (FlashMLA's ``flash_mla_sparse_fwd`` forward, cuDNN's sparse backward): compute capability
#: 10 and above, when the container ships both (``deepseek_v4_bridge.py``,
#: ``deepseek_v4_supports_blackwell_fused_kernels`` and ``..._fused_dsa_kernels``, Megatron Bridge
#: v0.6.0). Elsewhere its core runs megatron-core's unfused path, timed at the dense attention rate
DSV4_FUSED_FAMILIES = frozenset({"Blackwell"})


def sparse_core_rate(ctx: StepContext, layer: int) -> float:
    """Achieved FLOP/s of a sparse attention core on one rank: DeepSeek Sparse Attention's top-k core
    (absorbed widths: kv_lora + rope for QK, kv_lora for AV) or DeepSeek-V4's window + compressed-key
    core (width v for both). The attention peak × the sparse MLA kernel's fraction
    (:func:`moeplan.model.executed_flops.sparse_mla_fraction`) × heads / padded heads: FlashMLA pads the
    rank's query heads to the counts it takes (:func:`sparse_mla_padded_heads`) and computes the padded
    ones too. Where the fused kernel does not run (a head count it refuses, where megatron-core declines
    the fused path; DeepSeek-V4 outside :data:`DSV4_FUSED_FAMILIES`) the dense attention rate applies,
    as the notes say. Under CP (allgather only) each rank runs its own queries over the gathered keys."""
    m, family = ctx.model, arch_family(ctx.gpu)
    heads = m.num_attention_heads // ctx.s.tp
    padded = sparse_mla_padded_heads(heads, family)
    if m.is_dsv4 and (family not in DSV4_FUSED_FAMILIES or padded is None):
        return attention_rate(ctx, layer_cp_comm_type(ctx.s, layer))
    widths = (  # d_qk + d_v of the kernel's one shared key row
        2 * m.given("v_head_dim") if m.is_dsv4 else 2 * m.given("kv_lora_rank") + m.given("qk_pos_emb_head_dim")
    )
    if padded is None:
        return ctx.speeds.attention_flops_per_s * attention_fraction(ctx.gpu, ctx.seq_local, widths, ctx.fp8_attention)
    frac = sparse_mla_fraction(ctx.gpu, ctx.seq_local, widths, ctx.fp8_attention)
    return ctx.speeds.attention_flops_per_s * frac * heads / padded


def mhc_rates(ctx: StepContext) -> MhcRates:
    """What DeepSeek-V4's hyper-connection kernels run at on this GPU (:mod:`moeplan.model.dsv4_mhc`):
    the fused Triton / cuTile path on :data:`DSV4_FUSED_FAMILIES` (Megatron Bridge v0.6.0 turns
    ``use_fused_mhc`` on from compute capability 10, ``deepseek_v4_supports_blackwell_fused_kernels``),
    the native torch.compile path elsewhere."""
    fused = arch_family(ctx.gpu) in DSV4_FUSED_FAMILIES
    return MhcRates(ctx.speeds.hbm_bytes_per_s, ctx.gpu.peak_dense_tflops["bf16"] * 1e12, fused)


def layer_compute(ctx: StepContext, layer: int) -> LayerCompute:
    """The compute terms of decoder layer ``layer`` (0-based) for one microbatch on one rank."""
    s, sp, m = ctx.s, ctx.speeds, ctx.model
    f = layer_flops(m, layer, ctx.tokens, ctx.seq_local, ctx.seq_length, s.tp, s.cp, s.ep, ctx.routing_factor)
    t_dense = 3 * f.dense_gemm / sp.gemm_flops_per_s
    eff = grouped_efficiency(f.tokens_per_local_expert, ctx.c)
    t_exp = 3 * f.expert_gemm / (sp.gemm_flops_per_s * eff) if f.expert_gemm else 0.0
    if attention_runs_unfused(m, m.attention_kinds[layer]):
        # TE's unfused attention (a head wider than the fused kernels take): QKᵀ and PV as batched
        # GEMMs over the whole s × s (no causal skipping: twice the causal count) at the GEMM rate; the
        # softmax over the saved scores is element-wise work, in t_mem through their bytes
        t_core = 3 * 2 * f.attention_core / sp.gemm_flops_per_s
    else:
        t_core = 3 * f.attention_core / attention_rate(ctx, layer_cp_comm_type(s, layer))
    if f.sparse_core:  # DSA: the path megatron-core runs, fused kernels or the PyTorch fallback (dsa_costs)
        sparse_s = 3 * f.sparse_core / sparse_core_rate(ctx, layer)
        t_core = dsa_core_s(ctx, layer, t_core, sparse_s) if m.has_dsa else t_core + sparse_s
    if m.attention_kinds[layer] == "linear":
        t_core += gated_deltanet_s(ctx)
    elif m.attention_kinds[layer] == "mamba":
        t_core += mamba_kernel_s(m, ctx.tokens, s.tp, ctx.gpu.peak_dense_tflops["bf16"] * 1e12, sp.hbm_bytes_per_s)
    kept, rec = layer_activations(m, layer, ctx.act, ctx.recompute_modules)
    # a Mamba mixer's and DeepSeek-V4's hyper-connections' own tensors are read and written by their
    # kernels, timed one by one (mamba_kernel_s above, mhc_layer_s below)
    own = MAMBA_KERNEL_TENSORS | MHC_KERNEL_TENSORS
    act = sum(v for d in (kept, rec) for k, v in d.items() if k not in own)
    t_mem = element_wise_bytes_per_activation_byte(ctx, layer) * act / sp.hbm_bytes_per_s
    t_mem += mhc_layer_s(m, ctx.act.seq_tokens, ctx.act.act_bytes, mhc_rates(ctx))
    return LayerCompute(t_dense, t_exp, t_core, t_mem, kept, mlp_memory_share(kept, rec))
