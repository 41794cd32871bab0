"""DeepSeek-V4's layer shapes: parameters, Megatron Bridge's model FLOPs and executed FLOPs of its
compressed sparse attention, manifold hyper-connections and grouped low-rank output projection.

One attention layer of compression ratio ``r`` (megatron-core dev @d48bd6b
``experimental_attention_variant/deepseek_v4_hybrid_attention.py`` and ``csa.py``), with hidden
``h``, heads ``nh``, head width ``v`` (= ``v_head_dim``; queries and the single joint KV head are
``v`` wide), ``q_lora_rank`` ``ql``, ``o_groups`` ``g`` and ``o_lora_rank`` ``o``:

- ``linear_q_down_proj`` h·ql, ``q_layernorm`` ql, ``linear_q_up_proj`` ql·nh·v, ``linear_kv_proj``
  h·v, ``kv_layernorm`` v, ``linear_o_group_proj`` (g·o)·(nh·v/g) = o·nh·v, ``linear_proj`` g·o·h,
  ``attn_sink`` nh;
- r > 0: a ``Compressor`` of width v with ``coff`` = 2 (r = 4, overlapping windows) or 1: ``linear_wkv``
  and ``linear_wgate`` h·coff·v each, ``ape`` r·coff·v, ``norm`` v;
- r = 4: a ``CSAIndexer``: ``linear_wq_b`` ql·ni·di, ``linear_weights_proj`` h·ni and its own
  compressor of width di (coff 2).

Hyper-connections (``transformer/hyper_connection.py``, ``HyperConnectionModule``): two per layer
(attention and MLP), each ``mapping_proj`` (n·h)·(n² + 2n), three scalar gates and a bias of n² + 2n;
the block's ``hc_head_fn`` n·(n·h), ``hc_head_base`` n, ``hc_head_scale`` 1 (``transformer_block.py``),
and one more head per MTP layer (``multi_token_prediction.py``). Hash-routed layers keep the router
weight but build no expert bias (``moe/router.py``: ``enable_expert_bias ... and not is_hash_layer``);
their ``tid2eid`` table is a buffer, not a parameter.

Elements and FLOPs; one multiply-add = 2 FLOPs where a function says FLOPs.
"""

from __future__ import annotations

from moeplan.inputs.dsv4_config import COMPRESS_RATIOS, INDEXED_RATIO
from moeplan.inputs.model_spec import ModelSpec


def layer_ratio(m: ModelSpec, layer: int) -> int:
    """The compression ratio of decoder layer ``layer`` (0-based); ``layer = num_layers`` and beyond
    are MTP layers (``csa_mtp_compress_ratio``)."""
    ratios = m.csa_compress_ratios or ()
    return ratios[layer] if layer < len(ratios) else m.csa_mtp_compress_ratio


def _compressor(m: ModelSpec, ratio: int, width: int) -> int:
    coff = 2 if ratio == INDEXED_RATIO else 1
    return 2 * m.hidden_size * coff * width + ratio * coff * width + width


def attention_params(m: ModelSpec, ratio: int) -> tuple[int, int]:
    """(TP-split, replicated) parameters of one DeepSeek-V4 attention layer of ``ratio`` (elements):
    the query up-projection, KV projection, output projection and sinks are TP modules (megatron-core
    asserts TP = 1 for ``dsv4_hybrid``, so the split is nominal); the rest is replicated."""
    h, nh = m.hidden_size, m.num_attention_heads
    ql, v = m.given("q_lora_rank"), m.given("v_head_dim")
    groups, rank = m.given("o_groups"), m.given("o_lora_rank")
    split = ql * nh * v + h * v + groups * rank * h + nh
    rep = h * ql + ql + v + rank * nh * v
    if ratio > 0:
        rep += _compressor(m, ratio, v)
    if ratio == INDEXED_RATIO:
        ni, di = m.given("dsa_indexer_n_heads"), m.given("dsa_indexer_head_dim")
        rep += ql * ni * di + m.hidden_size * ni + _compressor(m, ratio, di)
    return split, rep


def hc_module_params(m: ModelSpec) -> int:
    """One ``HyperConnectionModule`` (elements): mapping projection, three gates, bias; 0 without
    hyper-connections."""
    n = m.num_residual_streams
    if n <= 1:
        return 0
    mix = n * n + 2 * n
    return n * m.hidden_size * mix + 3 + mix


def hc_head_params(m: ModelSpec) -> int:
    """One hyper-connection head contracting the n streams to one (elements): 0 without them."""
    n = m.num_residual_streams
    return 0 if n <= 1 else n * n * m.hidden_size + n + 1


def is_hash_layer(m: ModelSpec, layer: int) -> bool:
    """True for decoder layer ``layer`` (0-based) routed by its token-id hash: megatron-core
    ``moe/router.py`` (dev): 1-based ``layer_number <= moe_n_hash_layers``, never an MTP layer."""
    return layer < min(m.moe_n_hash_layers, m.num_layers)


# ----- Megatron Bridge's model FLOPs -----------------------------------------------------------


def _ratio_counts(m: ModelSpec, mtp: int) -> dict[int, int]:
    ratios = [layer_ratio(m, i) for i in range(m.num_layers + mtp)]
    return {r: ratios.count(r) for r in COMPRESS_RATIOS}


def bridge_attention_terms(m: ModelSpec, seq_length: float, mtp: int) -> tuple[float, float]:
    """(projections, sparse attention + compressors + indexers) multiply-adds per token of every
    DeepSeek-V4 attention layer, decoder and MTP, as Megatron Bridge counts them
    (``training/utils/flop_utils.py``, v0.6.0, ``dsv4_hybrid`` branch; Megatron-LM dev
    ``training.py::_dsv4_hybrid_self_attention_flops`` has the same terms): window layers attend
    ``window`` keys; ratio-128 layers the window plus on average ``(s // 128) / 2`` compressed keys;
    ratio-4 layers the window plus ``k·(1 − 4k/(2s))`` with ``k = min(topk, s // 4)``; compressors
    (2·h·coff·v), and on ratio-4 layers the indexer's compressor, query and weight projections and its
    scoring of ``s // 4`` compressed keys. Multiply by 6 for forward + backward FLOPs."""
    h, nh, s = m.hidden_size, m.num_attention_heads, seq_length
    ql, v = m.given("q_lora_rank"), m.given("v_head_dim")
    groups, rank, window = m.given("o_groups"), m.given("o_lora_rank"), m.given("csa_window_size")
    n = _ratio_counts(m, mtp)
    q_term = ql * (h + nh * (m.given("qk_head_dim") + m.given("qk_pos_emb_head_dim")) + 1)
    proj = (q_term + h * v + v + nh * v * rank + groups * rank * h) * sum(n.values())
    sparse = n[0] * nh * window * v * 2 + n[128] * nh * (window + (s // 128) / 2) * v * 2
    sparse += n[4] * h * 2 * v * 2 + n[128] * h * v * 2  # the compressors
    if n[4]:
        ni, di, topk = m.given("dsa_indexer_n_heads"), m.given("dsa_indexer_head_dim"), m.given("dsa_indexer_topk")
        k = min(topk, s // 4)
        sparse += n[4] * nh * (window + k * (1 - k * 4 / (2 * s))) * v * 2
        sparse += n[4] * (h * 2 * di * 2 + ql * ni * di + h * ni + ni * di * (s // 4))
    return float(proj), float(sparse)


# ----- executed FLOPs (step time) ----------------------------------------------------------------


def compressed_keys(m: ModelSpec, ratio: int, seq_length: int) -> float:
    """Compressed keys one query attends on average beside its window (causal): none for window
    layers, all earlier compressed entries (``s / ratio / 2``) for ratio 128, the indexer's top-k
    bounded by the entries there are (``k·(1 − 4k/(2s))``, as Bridge averages it) for ratio 4."""
    if ratio == 0:
        return 0.0
    if ratio != INDEXED_RATIO:
        return seq_length / ratio / 2
    k = min(m.given("dsa_indexer_topk"), seq_length // INDEXED_RATIO)
    return k * (1 - k * INDEXED_RATIO / (2 * seq_length))


def sparse_core_flops(m: ModelSpec, ratio: int, seq_length: int) -> float:
    """Forward FLOPs per token (2 per multiply-add) of one DeepSeek-V4 layer's attention core, the
    part the sparse attention kernel runs: every head reads the window plus :func:`compressed_keys`
    keys of one shared row of width v, QKᵀ and PV (2·v multiply-adds per key and head)."""
    nh, v, window = m.num_attention_heads, m.given("v_head_dim"), m.given("csa_window_size")
    return 2.0 * nh * (min(window, seq_length) + compressed_keys(m, ratio, seq_length)) * v * 2


def layer_forward_flops(m: ModelSpec, ratio: int, seq_length: int) -> tuple[float, float]:
    """(GEMM, attention-core) forward FLOPs per token of one DeepSeek-V4 attention layer of ``ratio``
    (2 per multiply-add): the projections, compressors and indexer projections (the layer's two
    hyper-connection modules, :func:`hc_mix_macs` each, run in their own memory-bound kernels, timed by
    ``moeplan.model.dsv4_mhc``, not as GEMM work); the core is
    :func:`sparse_core_flops`, and a ratio-4 indexer scores every earlier compressed entry (``s / 4 / 2`` causal)."""
    h, nh = m.hidden_size, m.num_attention_heads
    ql, v = m.given("q_lora_rank"), m.given("v_head_dim")
    groups, rank = m.given("o_groups"), m.given("o_lora_rank")
    gemm = float(h * ql + ql * nh * v + h * v + rank * nh * v + groups * rank * h)
    core = sparse_core_flops(m, ratio, seq_length) / 2
    if ratio > 0:
        gemm += h * (2 if ratio == INDEXED_RATIO else 1) * v * 2
    if ratio == INDEXED_RATIO:
        ni, di = m.given("dsa_indexer_n_heads"), m.given("dsa_indexer_head_dim")
        gemm += h * 2 * di * 2 + ql * ni * di + h * ni
        core += ni * di * seq_length / INDEXED_RATIO / 2
    return 2.0 * gemm, 2.0 * core


def hc_mix_macs(m: ModelSpec) -> float:
    """Multiply-adds per token of one hyper-connection module: the mapping projection
    (n·h)·(n² + 2n), the pre-aggregation (n·h), the post-expansion (n·h) and the residual mix (n²·h)
    (``HyperConnectionModule``: x_{l+1} = H_resᵀ x_l + H_postᵀ F(H_pre x_l)); the Sinkhorn iterations
    on n×n are left out (under 1e-3 of these). 0 without hyper-connections."""
    n, h = m.num_residual_streams, m.hidden_size
    if n <= 1:
        return 0.0
    return float(n * h * (n * n + 2 * n) + 2 * n * h + n * n * h)
