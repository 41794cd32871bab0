"""Tensors Kimi-K3's own layer parts keep for backward: the Kimi Delta Attention mixer and the
attention residuals (AttnRes), per microbatch on one rank.

Sources: Megatron Bridge main (067f987, after v0.6.0) ``models/kimi/kimi_k3_layers.py``
(``KimiK3Attention._forward_kda``, ``KimiK3TransformerLayer.forward``), ``kimi_k3_ops.py``
(``kda`` → FLA ``chunk_kda``; ``attn_res_aggregate``, plain PyTorch) and ``kimi_k3_pipeline.py``
(``bank_num_rows``); FLA ``ops/kda`` (``chunk_kda``'s autograd function keeps q, k (l2-normed, with
their fp32 1/‖·‖), v, the fp32 cumulative gate per channel, beta and the two fp32 intra-chunk
matrices ``Aqk`` and ``Akk``, 64 per token and head each).

Each entry is (recompute tag, name, bytes); the tag is empty: no Megatron selective-recompute module
covers these Bridge modules.
"""

from __future__ import annotations

from moeplan.inputs.model_spec import ModelSpec

#: FLA's chunk length (``chunk_kda``): the intra-chunk matrices hold this many entries per token·head
KDA_CHUNK = 64


def kda_saved(
    m: ModelSpec, tokens: float, seq_tokens: float, tp: int, act: float, lin_in: float
) -> list[tuple[str, str, float]]:
    """Saved tensors of one KDA mixer (bytes): ``tokens`` of the microbatch on this CP rank,
    ``seq_tokens`` of them in the residual layout (split by TP with SP), ``act`` / ``lin_in`` bytes per
    element of activations and of linear inputs.

    - the three convolutions' inputs and SiLU outputs (q, k, v), the output gate, the forget gate's
      bottleneck output (``f_a_proj``, replicated) and its per-channel gate, fp32 beta;
    - ``chunk_kda``: the fp32 cumulative gate per channel, fp32 1/‖q‖ and 1/‖k‖, ``Aqk`` and ``Akk``;
    - the delta rule's output and the gated norm's output (``o_proj``'s input).
    """
    nk, nv = m.given("linear_num_key_heads"), m.given("linear_num_value_heads")
    dk, dv = m.given("linear_key_head_dim"), m.given("linear_value_head_dim")
    qk, v, n = nk * dk / tp, nv * dv / tp, tokens
    return [
        ("", "kda_conv_in_out", n * 2 * (2 * qk + v) * act),
        ("", "kda_output_gate", n * v * act),
        ("", "kda_forget_gate", n * (dk + qk) * act + n * qk * 4),
        ("", "kda_beta_norms", n * (nv / tp) * 4 + n * 2 * (nk / tp) * 4),
        ("", "kda_chunk_matrices", n * (nv / tp) * 2 * KDA_CHUNK * 4),
        ("", "kda_core_out", n * v * act),
        ("", "kda_norm_out", n * v * lin_in),
    ]


def gathered_input_saved(m: ModelSpec, tokens: float, seq_tokens: float, lin_in: float) -> float:
    """Bytes a Kimi-K3 attention (KDA or MLA) keeps beyond the norm output already counted at
    ``seq_tokens``: ``KimiK3Attention.forward`` gathers its input over TP itself
    (``gather_from_sequence_parallel_region``) before linears built with ``sequence_parallel=False``, so
    they keep it whole on every TP rank (0 without sequence parallelism or outside Kimi-K3)."""
    if not m.kimi_delta_attention:
        return 0.0
    return max(0.0, tokens - seq_tokens) * m.hidden_size * lin_in


def attn_res_rows(m: ModelSpec, layer: int) -> tuple[int, int, int]:
    """Rows each AttnRes mix of decoder layer ``layer`` (0-based) reads: (before attention, before the
    MLP, after the last layer), 0 where there is no mix. The bank holds ``ceil(layer / B)`` snapshots
    on entry (``bank_num_rows``; B = ``attn_res_block_size``); a layer with ``layer % B == 0`` appends
    its input; each mix reads the bank plus the running sum. Layer 0's attention has no mix (empty
    bank: its input layernorm reads the embedding)."""
    b = m.attn_res_block_size
    if not b:
        return 0, 0, 0
    before = -(-layer // b)
    after = before + (1 if layer % b == 0 else 0)
    last = after + 1 if layer == m.num_layers - 1 else 0
    return (before + 1 if before else 0), after + 1, last


def attn_res_saved(m: ModelSpec, layer: int, seq_tokens: float) -> list[tuple[str, str, float]]:
    """Saved tensors of decoder layer ``layer``'s AttnRes mixes (bytes), ``seq_tokens`` tokens in the
    residual layout. Per mix of r rows, autograd keeps the fp32 copy of the rows (``rows.float()``,
    read by ``square`` and by the weighted sum) and the fp32 normalized rows (read by the score
    product): 8·r·h bytes per token, plus fp32 1/rms, scores' softmax and its output (3·r·4)."""
    h = m.hidden_size
    r = sum(attn_res_rows(m, layer))
    if not r:
        return []
    return [("", "attn_res_mix", seq_tokens * r * (8 * h + 12))]


def attn_res_boundary_width(m: ModelSpec, pp: int) -> int:
    """Width of the widest pipeline-stage boundary tensor, in units of ``hidden_size``: 1 for a plain
    residual; with AttnRes the running sum and the bank of snapshots packed together
    (``kimi_k3_pipeline.pack_stage_boundary``: ``(1 + rows)·h``, rows = ``bank_num_rows`` of the next
    stage's first layer). The last boundary is the widest; its layer is taken from an even split,
    ``floor(L·(PP − 1)/PP)``."""
    b = m.attn_res_block_size
    if not b or pp <= 1:
        return 1
    start = m.num_layers * (pp - 1) // pp
    return 1 + -(-start // b)
