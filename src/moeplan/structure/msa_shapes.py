"""MiniMax Sparse Attention (MSA, MiniMax-M3): the index branch's parameters, the keys a query reads,
and the FLOPs of one MSA layer's index branch and block-sparse core.

The mechanism (MiniMax, "MiniMax Sparse Attention", arXiv 2606.13392; the MiniMax-M3 checkpoint's
``sparse_attention_config``): per GQA group one index-query head of width d and one shared index-key
head score every causally visible key (a dot product, no softmax), the scores are max-pooled over
blocks of B tokens and each query keeps its k best blocks per group, the query's own (newest) block
always among them; the GQA core then attends the selected blocks only. The paper distils the index
branch against the core's attention over blocks with a KL loss detached from the backbone.

Megatron has no implementation (Megatron Bridge v0.6.0 trains MiniMax-M3 with full causal attention and
keeps the index weights frozen), so the training cost here follows the mechanism, with DeepSeek Sparse
Attention's as megatron-core builds it as the pattern for what Megatron would run (:mod:`moeplan.structure.flops`,
``dsa_indexer_flops_per_token`` with its sparse KL loss):

- index projections: forward and weight gradient (inputs detached), ``4·h·(H·d + d)`` per token;
- index scores: forward over every causal key, ``2·C_dense·H·d``; their gradient under the KL loss over
  the selected blocks' keys, ``4·C_sparse·H·d`` (the teacher is the core's own attention over the
  blocks it read: no extra query-key work); the max-pool and the top-k are element-wise and not counted;
- the core: QK and PV over ``C_sparse`` keys per query, ``2·2·nh·d_head·C_sparse`` forward.
"""

from __future__ import annotations

from moeplan.inputs.model_spec import ModelSpec


def msa_indexer_params(m: ModelSpec) -> int:
    """Parameters of one MSA layer's index branch (elements, exact; 0 without MSA): ``index_q_proj``
    (hidden → H·d), ``index_k_proj`` (hidden → d), ``index_q_norm`` and ``index_k_norm`` (RMSNorm
    weights of d each); no biases, no index value / output projections (``sparse_disable_index_value``).
    Megatron Bridge v0.6.0 ``modeling_minimax_m3_vl.py::MiniMaxM3LightningIndexerState`` has the same
    shapes (``lightning_indexers.*.{q_proj,k_proj,q_norm,k_norm}``)."""
    if not m.has_msa:
        return 0
    heads, d = m.given("msa_index_n_heads"), m.given("msa_index_head_dim")
    return m.hidden_size * (heads * d + d) + 2 * d


def msa_causal_context(seq: float, block: int, topk: int) -> tuple[float, float]:
    """(dense, sparse) causal keys per query, averaged over a sequence of ``seq`` tokens.

    Dense: ``(s + 1)/2``. Sparse: query i (0-based) in block ``b = i // B`` sees ``b + 1`` blocks, its
    own holding ``i mod B + 1`` keys; while ``b + 1 ≤ k`` it reads all ``i + 1`` keys, after that its
    own block and ``k − 1`` full blocks: ``(k − 1)·B + i mod B + 1``. The first ``k·B`` queries sum to
    ``kB(kB + 1)/2``; each later query reads ``(k − 1)·B + (B + 1)/2`` on average (exact when
    ``s − kB`` is a multiple of B). Which blocks are chosen does not change the count.

    Args:
        seq: tokens per sequence (``Σs²/Σs`` for packed sequences); block: B, tokens per block;
            topk: k, blocks kept per query and group.
    """
    dense = (seq + 1) / 2
    span = block * topk
    if seq <= span:
        return dense, dense
    head = span * (span + 1) / 2
    tail = (seq - span) * ((topk - 1) * block + (block + 1) / 2)
    return dense, (head + tail) / seq


def msa_layer_flops_per_token(m: ModelSpec, seq: float) -> dict[str, float]:
    """Training FLOPs per token (forward + backward, 2 per multiply-add) of one MSA layer beyond its
    GQA projections: ``attention_quadratic`` the core over the selected blocks (3 × its forward
    ``4·nh·d_head·C_sparse``), ``msa_indexer`` the index branch (module docstring).

    Args:
        m: the model (``has_msa``); seq: tokens per sequence (``Σs²/Σs`` when packed).
    """
    proj, scores = msa_indexer_flops_per_token(m, seq)
    sparse = msa_causal_context(seq, m.given("msa_block_size"), m.given("msa_topk_blocks"))[1]
    q = m.given("kv_channels") * m.num_attention_heads
    return {"attention_quadratic": 3 * 4 * q * sparse, "msa_indexer": proj + scores}


def msa_indexer_flops_per_token(m: ModelSpec, seq: float) -> tuple[float, float]:
    """(projection, score) training FLOPs per token of one MSA index branch: the projections' forward
    and weight gradient ``4·h·(H·d + d)``; the forward scores over every causal key ``2·C_dense·H·d``
    and their KL-loss gradient over the selected keys ``4·C_sparse·H·d`` (module docstring)."""
    heads, d = m.given("msa_index_n_heads"), m.given("msa_index_head_dim")
    dense, sparse = msa_causal_context(seq, m.given("msa_block_size"), m.given("msa_topk_blocks"))
    proj = 4 * m.hidden_size * (heads * d + d)
    return proj, 2 * dense * heads * d + 4 * sparse * heads * d


def msa_layer_count(m: ModelSpec) -> int:
    """Decoder layers that run MSA (``msa_layers``)."""
    return sum(1 for i in range(m.num_layers) if m.layer_is_msa(i))


def msa_indexer_saved(m: ModelSpec, tokens: float, act_bytes: float) -> dict[str, float]:
    """Bytes one MSA layer keeps for backward beyond its GQA tensors, per microbatch and rank, for
    ``tokens`` query tokens at ``act_bytes`` per activation element: the selected block ids per query and
    index head (``tokens × H × k × 4``, int32) and, for the KL loss's gradient, the normed and roped index
    query (H·d) and key (d) per token; whole on every TP rank like the rest of the index branch. The
    scores over every causal key are pooled to blocks on the fly and not kept (the paper's fused
    selection); the core keeps Q, K, V, its output and its softmax statistics as the GQA core does."""
    heads, d = m.given("msa_index_n_heads"), m.given("msa_index_head_dim")
    return {
        "msa_block_ids": tokens * heads * m.given("msa_topk_blocks") * 4.0,
        "msa_index_qk": tokens * (heads * d + d) * act_bytes,
    }
