"""CUDA-graph memory of one rank as Megatron-Core and Transformer Engine allocate it (bytes).

Sources (read at NVIDIA/Megatron-LM main d98e8a64 = megatron-core 0.20.0, dev d48bd6be, and
NVIDIA/TransformerEngine d0067d0d; "MC" = megatron/core, "TE" = transformer_engine/pytorch):

- Per-layer graphs (``cuda_graph_impl`` ``transformer_engine`` / ``local``): one forward and one
  backward graph per (graphed layer, microbatch); under PP (or EP-overlap) every microbatch of the
  step is captured, without PP only one (MC transformer/cuda_graphs.py ``TECudaGraphHelper.
  _get_cuda_graph_input_data``, L2570-2580). A layer is graphed when its captured part exists
  (``_layer_is_graphable``, L2134-2174).
- Static inputs (MC transformer/module.py ``get_layer_static_inputs`` L246-272; transformer_layer.py
  L1212-1233): ``hidden_states`` [s/(CP·TP if SP), b, h] bf16 — the same storage the layer's first
  norm saves for backward (TE graph.py L1040-1050 copies the live input into it), so it is already
  in the activations; with attention captured on the TE path an ``attention_mask`` [b, 1, s/CP, s]
  bool per sample (built unconditionally on main ≤ 0.20; dev since PR #5131 omits it when
  ``create_attention_mask_in_dataloader`` is False), and one ``rotary_pos_emb`` [s, 1, 1, d] fp32
  shared by all samples (cuda_graphs.py L2395-2410, cache).
- Sample reuse (``_reuse_graph_input_output_buffers``, TE ≥ 2.7; cuda_graphs.py L2322-2530, TE
  graph.py L303-372): a sample's buffers are reused once the backward of its chunk is captured, so
  the distinct sets are the (layer, microbatch) pairs in flight in the schedule order (``_order``):
  the stage's graphed layers × in-flight microbatches.
- Static outputs live in the shared graph mempool and keep their addresses until that sample's
  backward graph is captured (TE graph.py L676-735, L876-918): an output that is also a tensor
  saved for backward adds nothing; others (see :func:`layer_output_bytes`) add per sample.
- Backward surfaces: static grad-outputs are shared per output signature and grad-inputs of the
  previous graph of a chunk are released (TE graph.py L800-822, L880-918).
- Full-iteration graphs (MC full_cuda_graph.py ``StaticBufferLoader`` / ``FullCudaGraphWrapper.
  data_read``): the data batch of every microbatch of the step is copied into static buffers on
  ranks with a data iterator (TP rank 0 of the first and last stage): tokens, labels, position_ids
  (int64) and loss_mask (fp32), plus the dataloader's [b, 1, s, s] bool mask when it creates one.
"""

from __future__ import annotations

from dataclasses import dataclass

from moeplan.inputs.resolved import Scenario
from moeplan.model.activations import ActContext
from moeplan.structure.placement import StageParams

#: bytes per token of one microbatch's data batch: tokens, labels, position_ids int64, loss_mask fp32
#: (megatron/core/datasets/gpt_dataset.py ``GPTDataset.__getitem__``)
BATCH_BYTES_PER_TOKEN = 8 + 8 + 8 + 4


@dataclass(frozen=True)
class GraphedLayer:
    """What one layer's per-layer graph captures (``cuda_graph_modules`` / ``cuda_graph_scope``).

    Attributes:
        attn: the input norm and self-attention (``_forward_attention``) are in the graph.
        mlp_whole: the whole MLP / MoE is in the graph: its output is the layer output.
        router: only the pre-MLP norm, router (and unoverlapped shared experts) of a MoE layer.
        preprocess: ``MoELayer.preprocess`` (dispatch preprocessing) too, with ``router``.
    """

    attn: bool
    mlp_whole: bool
    router: bool
    preprocess: bool

    @property
    def graphed(self) -> bool:
        """True when the layer has a graph at all (``_layer_is_graphable``)."""
        return self.attn or self.mlp_whole or self.router


def captured_parts(scopes: list[str], moe: bool, has_attn: bool = True) -> GraphedLayer:
    """The parts of one layer a scope list captures; an empty list is the whole layer
    (transformer_layer.py ``_te_cuda_graph_capture`` L1263-1318, ``_get_submodules_under_cudagraphs``
    L1235-1261; ``moe`` covers the whole MoE, ``moe_router`` the router only)."""
    whole = not scopes
    attn = has_attn and (whole or "attn" in scopes)
    if moe:
        mlp_whole = whole or "moe" in scopes
        router = not mlp_whole and "moe_router" in scopes
    else:
        mlp_whole = whole or "mlp" in scopes
        router = False
    return GraphedLayer(attn, mlp_whole, router, router and "moe_preprocess" in scopes)


def _norm_output_held(s: Scenario, modules: frozenset[str], parts: GraphedLayer) -> bool:
    """True when the pre-MLP norm output is a static output although moeplan's activations drop it
    under ``layernorm`` recompute: Megatron turns that recompute off on the TE path with the router
    captured unless preprocess is captured with the alltoall dispatcher or latent MoE, or when shared
    experts overlap (transformer_layer.py ``can_recompute_pre_mlp_layernorm_for_cudagraph``
    L481-523)."""
    lay = s.layout
    if "layernorm" not in modules or lay.cuda_graph_impl != "transformer_engine":
        return False
    m = s.complete_model
    if m.moe_shared_expert_intermediate_size and lay.moe_shared_expert_overlap:
        return True
    return not (parts.preprocess and (lay.moe_token_dispatcher_type or "alltoall") == "alltoall")


def pre_mlp_norm_recompute_off(s: Scenario, modules: frozenset[str]) -> bool:
    """True when ``layernorm`` is selected but Megatron turns a MoE layer's pre-MLP norm recompute
    off because a TE graph captures the router and returns the norm output as a static output
    (:func:`_norm_output_held`; transformer_layer.py@core_v0.17.0 L415-461)."""
    if not s.graphs_on() or "layernorm" not in modules:
        return False
    parts = captured_parts(s.graph_scopes(), moe=True)
    return parts.router and _norm_output_held(s, modules, parts)


def _dispatch_metadata_bytes(s: Scenario, ctx: ActContext) -> float:
    """Per-token dispatch tensors a captured ``moe_preprocess`` returns as static outputs
    (token_dispatcher.py): alltoall — the permuted tokens [T·k, h] bf16 and probs [T·k] fp32
    (``dispatch_preprocess`` L624-680); flex/HybridEP — routing_map and probs expanded to the TP·EP
    domain [T, ETP·E] bool + fp32 (``_initialize_metadata`` L1893-1919, ``setup_metadata``
    L1068-1095); flex/DeepEP — top-k probs fp32 and indices int64 [T, ETP·k] (L1294-1320); allgather —
    none beyond the router's (``cudagraph_attrs`` L269). The dispatcher's "TP" is the expert TP group
    (``MoETokenDispatcher.__init__``: ``tp_group = pg_collection.expt_tp``); T = SP-local tokens."""
    m, lay, t = s.complete_model, s.layout, ctx.seq_tokens
    k, e = m.moe_topk, m.moe_experts
    kind = lay.moe_token_dispatcher_type or "alltoall"
    if kind == "alltoall":
        return t * k * (m.hidden_size * ctx.act_bytes + 4)
    if kind == "flex":
        if (lay.moe_flex_dispatcher_backend or "deepep") == "hybridep":
            return t * s.etp * e * (1 + 4)
        return t * s.etp * k * (4 + 8)
    return 0.0


def layer_output_bytes(s: Scenario, ctx: ActContext, modules: frozenset[str], parts: GraphedLayer) -> float:
    """Static-output bytes of one (layer, microbatch) graph that are not tensors the activations
    already hold (bytes per sample; 0 for an ungraphed layer).

    - the layer output (whole MLP/MoE captured), TE path only: the next graph copies it into its own
      static input, so the pool keeps this copy (TE graph.py L1040-1050); the local path hands it on
      as the next graph's input (cuda_graphs.py ``_resolve_input_buffer`` L1250-1275): nothing;
    - attention only: its output is the residual the eager MLP's norm saves: nothing;
    - router captured: the pre-MLP norm output when its recompute is off (:func:`_norm_output_held`),
      the shared experts' output when not overlapped, and the dispatch metadata of a captured
      preprocess (:func:`_dispatch_metadata_bytes`); the residual, router probs and routing map are
      the tensors the activations count.
    """
    t, h, a = ctx.seq_tokens, s.complete_model.hidden_size, ctx.act_bytes
    if not parts.graphed:
        return 0.0
    if parts.mlp_whole:
        return t * h * a if s.layout.cuda_graph_impl == "transformer_engine" else 0.0
    if not parts.router:
        return 0.0
    out = t * h * a if _norm_output_held(s, modules, parts) else 0.0
    m = s.complete_model
    if m.moe_shared_expert_intermediate_size and not s.layout.moe_shared_expert_overlap:
        out += t * h * a
    if parts.preprocess:
        out += _dispatch_metadata_bytes(s, ctx)
    return out


def attention_mask_bytes(s: Scenario, ctx: ActContext) -> float:
    """One TE static ``attention_mask`` [b, 1, s/CP, s] bool (bytes); 0 when the scenario sets
    ``create_attention_mask_in_dataloader: false`` on a megatron-core dev build (honoured since PR #5131;
    every release builds it regardless: :meth:`Scenario.skips_graph_attention_mask`) or on the local path
    (which takes the real argument)."""
    if s.layout.cuda_graph_impl != "transformer_engine" or s.skips_graph_attention_mask():
        return 0.0
    seq = float(s.training.seq_length or 0)
    return ctx.micro_batch_size * ctx.seq_local * seq


def rotary_bytes(s: Scenario) -> float:
    """The TE path's shared ``rotary_pos_emb`` static input [s, 1, 1, kv_channels] fp32 (bytes; none
    for MLA, whose rotary is computed inside the layer; cuda_graphs.py L2395-2410)."""
    m = s.complete_model
    if s.layout.cuda_graph_impl != "transformer_engine" or m.multi_latent_attention:
        return 0.0
    return float(s.training.seq_length or 0) * (m.kv_channels or 0) * 4


def graph_samples(s: Scenario, inflight: float) -> float:
    """Distinct static-input sets per graphed layer: the in-flight microbatches under PP or EP
    overlap (buffers reused once a sample's backward is captured), else 1 (one microbatch captured;
    cuda_graphs.py L2570-2580)."""
    if s.pp > 1 or s.layout.overlap_moe_expert_parallel_comm:
        return max(1.0, inflight)
    return 1.0


def per_layer_graphs(
    s: Scenario, ctx: ActContext, sp: StageParams, inflight: float, modules: frozenset[str]
) -> dict[str, float]:
    """Per-layer graphs' memory beyond the activations on one stage (bytes, named; zero terms left
    out): ``cuda_graph_static_inputs`` (TE attention masks per sample, the shared rotary table),
    ``cuda_graph_static_outputs`` (outputs no saved tensor aliases, per sample) and
    ``cuda_graph_grad_buffers`` (shared backward surfaces: one grad-output set and two grad
    inputs of [T, h], TE graph.py L800-918). Samples per layer: :func:`graph_samples`."""
    m = s.complete_model
    n = m.num_layers or 0
    moe_flags = m.moe_layers or (m.is_moe,) * n
    scopes = s.graph_scopes()
    samples = graph_samples(s, inflight)
    t, h, a = ctx.seq_tokens, m.hidden_size, ctx.act_bytes
    attn_layers, outputs, widest = 0, 0.0, 0.0
    for li in sp.layers:
        parts = captured_parts(scopes, bool(moe_flags[li]) if li < len(moe_flags) else m.is_moe)
        if not parts.graphed:
            continue
        attn_layers += parts.attn
        extra = layer_output_bytes(s, ctx, modules, parts)
        outputs += extra * samples
        widest = max(widest, extra + t * h * a * (2 if parts.router else 1))
    out: dict[str, float] = {}
    inputs = attn_layers * samples * attention_mask_bytes(s, ctx) + (rotary_bytes(s) if attn_layers else 0.0)
    if inputs:
        out["cuda_graph_static_inputs"] = inputs
    if outputs:
        out["cuda_graph_static_outputs"] = outputs
    if widest:
        out["cuda_graph_grad_buffers"] = widest + 2 * t * h * a
    return out


def full_iteration_graph(s: Scenario, sp: StageParams, num_microbatches: int | None) -> dict[str, float]:
    """A full-iteration graph's static data buffers on this stage (bytes, named): every microbatch's
    batch on a stage with a data iterator (first or last), ``BATCH_BYTES_PER_TOKEN`` per token plus
    the dataloader's [b, 1, s, s] bool mask unless ``create_attention_mask_in_dataloader`` is false
    (full_cuda_graph.py ``StaticBufferLoader``, ``FullCudaGraphWrapper.data_read``)."""
    if not (sp.embedding or sp.output_layer):
        return {}
    t = s.training
    seq, mbs = float(t.seq_length or 0), t.micro_batch_size or 1
    per_mb = mbs * seq * BATCH_BYTES_PER_TOKEN
    if s.layout.create_attention_mask_in_dataloader is not False:
        per_mb += mbs * seq * seq
    return {"cuda_graph_static_inputs": per_mb * (num_microbatches or 1)}
