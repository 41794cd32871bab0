"""Transient and non-tensor memory of one rank (bytes, the ``other`` category).

- the backward working set: one layer's activations (or one recompute chunk) re-materialized in
  backward, and on the last stage the logits gradient of an unfused cross entropy;
- CP ring buffers: K/V blocks in flight (send + receive) per attention layer, bf16;
- CUDA context, NCCL and dispatcher buffers, workspaces (:mod:`moeplan.model.overheads`, planning
  values); TP-overlap userbuffers;
- CUDA graphs (:mod:`moeplan.model.memory.graph_memory`): per-layer graphs' static inputs, outputs and
  backward surfaces as Megatron / TE allocate them, a full-iteration graph's static data buffers,
  and the pools' overhead beyond what they hold (a planning value);
- allocator fragmentation, a share of the dynamic memory (none under a full-iteration graph, whose
  private pool is laid out once at capture).
"""

from __future__ import annotations

from moeplan.inputs.resolved import Scenario
from moeplan.model.activations import ActContext
from moeplan.model.memory.dispatcher_buffers import (
    deepep_buffers,
    flex_tokens_per_rank,
    hybridep_buffers,
    hybridep_nvlink_ranks,
)
from moeplan.model.memory.graph_memory import full_iteration_graph, per_layer_graphs
from moeplan.model.overheads import NCCLEP_BUFFERS_GIB, Overheads
from moeplan.structure.placement import StageParams
from moeplan.units import GIB_BYTES

#: which of the three measured figures each ``other`` item enters (an item enters its own and every
#: later one): ``allocated`` — tensors of PyTorch's caching allocator (torch ``max_memory_allocated``,
#: Megatron's "max allocated"): working sets, CP buffers, cuBLAS / TE workspaces, CUDA graphs' static
#: inputs and outputs; ``reserved`` — what the allocator holds beyond its tensors (fragmentation, CUDA
#: graph pools; torch ``max_memory_reserved``); ``device`` — memory outside PyTorch that ``nvidia-smi``
#: also shows: the CUDA context, NCCL communicator buffers, DeepEP / HybridEP registered buffers and
#: Transformer Engine's TP-overlap userbuffers (allocated with cudaMalloc / NVSHMEM, not through torch).
FIGURE_OF_OTHER = {
    "backward_working_set": "allocated",
    "vision_working_set": "allocated",
    "cp_kv_buffers": "allocated",
    "workspaces": "allocated",
    "cuda_graph_static_inputs": "allocated",
    "cuda_graph_static_outputs": "allocated",
    "cuda_graph_grad_buffers": "allocated",
    "optimizer_step_excess": "allocated",
    "cuda_graph_pool": "reserved",
    "allocator_fragmentation": "reserved",
    "cuda_context": "device",
    "nccl_buffers": "device",
    "deepep_buffers": "device",
    "hybridep_buffers": "device",
    "tp_overlap_userbuffers": "device",
}
FIGURES = ("allocated", "reserved", "device")


def figure_of(item: str) -> str:
    """The first measured figure an ``other`` item counts in (``allocated`` for anything unlisted)."""
    return FIGURE_OF_OTHER.get(item, "allocated")


def backward_working_set(
    s: Scenario, sp: StageParams, ctx: ActContext, worst_layer_bytes: float, fused_ce: bool, vpad: int
) -> float:
    """The largest transient of backward (bytes): one layer, or one uniform recompute chunk, of
    re-materialized activations; the unfused cross entropy's bf16 logits gradient on the last stage."""
    lay = s.layout
    uniform_full = lay.recompute_granularity == "full" and lay.recompute_method != "block"
    working = worst_layer_bytes * ((lay.recompute_num_layers or 1) if uniform_full else 1)
    if sp.output_layer:
        logits_grad = 0.0 if fused_ce else ctx.tokens * vpad / ctx.tp * ctx.act_bytes
        working = max(working, logits_grad)
    return working


def cp_kv_buffers(s: Scenario, ctx: ActContext) -> float:
    """K/V blocks in flight of the CP ring (send + receive), bf16 (0 without CP)."""
    m = s.complete_model
    if s.cp == 1:
        return 0.0
    if m.is_dsv4:  # one joint KV head of v_head_dim per token (megatron-core dev csa.py)
        width = m.given("v_head_dim") * s.tp
    elif m.multi_latent_attention:
        qk, rope, vd = m.given("qk_head_dim"), m.given("qk_pos_emb_head_dim"), m.given("v_head_dim")
        width = m.num_attention_heads * (qk + rope + vd)
    else:
        width = 2 * (m.num_query_groups or 0) * (m.kv_channels or 0)
    return 2 * ctx.tokens * width / s.tp * ctx.act_bytes


def fixed_buffers(s: Scenario, ctx: ActContext, ov: Overheads) -> dict[str, float]:
    """CUDA context, NCCL, workspaces, dispatcher and TP-overlap buffers (bytes, named); with the all-gather
    dispatcher, the global buffer its gather fills (EP·ETP × the rank's tokens × hidden, BF16)."""
    lay = s.layout
    out = {
        "cuda_context": ov.cuda_context_gib * GIB_BYTES,
        "nccl_buffers": ov.nccl_buffers_gib * GIB_BYTES,
        "workspaces": ov.workspaces_gib * GIB_BYTES,
    }
    if lay.moe_token_dispatcher_type == "flex" and s.ep * s.etp > 1:
        backend = lay.moe_flex_dispatcher_backend or "deepep"
        out[f"{backend}_buffers"] = dispatcher_buffer_bytes(s, ctx, ov, backend)
    if lay.moe_token_dispatcher_type == "allgather" and s.ep * s.etp > 1 and s.complete_model.is_moe:
        # MoEAllGatherTokenDispatcher gathers every rank's hidden states over the TP×EP group into
        # megatron-core's global memory buffer ("mpu", tensor_parallel/mappings.py use_global_buffer),
        # which keeps its largest size for the rest of the run
        out["allgather_dispatch_buffer"] = s.ep * s.etp * ctx.seq_tokens * s.complete_model.hidden_size * ctx.act_bytes
    if lay.tp_comm_overlap and s.tp > 1:
        out["tp_overlap_userbuffers"] = 2 * ctx.tokens * s.complete_model.hidden_size * ctx.act_bytes
    return out


def dispatcher_buffer_bytes(s: Scenario, ctx: ActContext, ov: Overheads, backend: str) -> float:
    """The flex dispatcher's registered buffers per GPU (bytes): the scenario's ``overheads:`` value
    where it states one, else DeepEP's and HybridEP's buffers as their sources size them
    (:mod:`moeplan.model.memory.dispatcher_buffers`: the ETP×EP group, hidden size, DeepEP's SMs
    ``moe_deepep_num_sms``, HybridEP's tokens per rank, local experts and NVLink domain); NCCL EP's
    a planning value (:data:`moeplan.model.overheads.NCCLEP_BUFFERS_GIB`)."""
    stated = ov.hybridep_buffers_gib if backend == "hybridep" else ov.deepep_buffers_gib
    if stated is not None:
        return stated * GIB_BYTES
    m, ranks = s.complete_model, s.ep * s.etp
    if backend == "deepep":
        return float(deepep_buffers(m.hidden_size, ranks, s.layout.moe_deepep_num_sms).total_bytes)
    if backend == "hybridep":
        domain = hybridep_nvlink_ranks(s)
        local = (m.num_moe_experts or 0) // s.ep
        tokens = flex_tokens_per_rank(ctx.seq_tokens)
        return float(hybridep_buffers(m.hidden_size, tokens, local, ranks, domain).total_bytes)
    return NCCLEP_BUFFERS_GIB * GIB_BYTES


def graph_buffers(
    s: Scenario,
    ctx: ActContext,
    ov: Overheads,
    activations: float,
    sp: StageParams,
    inflight: float,
    num_microbatches: int | None,
    modules: frozenset[str],
) -> dict[str, float]:
    """CUDA-graph memory of one stage (bytes, named; empty without graphs).

    What Megatron / TE pin (:mod:`moeplan.model.memory.graph_memory`, sources there): per-layer graphs'
    static inputs, outputs and backward surfaces (:func:`~moeplan.model.memory.graph_memory.per_layer_graphs`),
    or a full-iteration graph's static data buffers (``full_iteration_graph``). What no source pins:
    ``cuda_graph_pool`` = ``cuda_graph_pool_fraction`` × activations, a planning value for the private
    pool's blocks that eager allocations cannot reuse (and vice versa) and the graphs' own executable
    memory (docs/model/memory.md, "CUDA-graph memory").
    """
    if not s.graphs_on():
        return {}
    out = {"cuda_graph_pool": ov.cuda_graph_pool_fraction * activations}
    if s.layout.cuda_graph_impl == "full_iteration" or s.graph_scopes() == ["full_iteration"]:
        out.update(full_iteration_graph(s, sp, num_microbatches))
    else:
        out.update(per_layer_graphs(s, ctx, sp, inflight, modules))
    return out


def fragmentation(s: Scenario, ov: Overheads, dynamic: float) -> float:
    """Caching-allocator fragmentation: ``fragmentation_fraction`` of the dynamic memory; none under
    a full-iteration graph (its pool overhead stands in for it)."""
    frac = 0.0 if s.layout.cuda_graph_impl == "full_iteration" else ov.fragmentation_fraction
    return frac * dynamic
