"""Activations a DeepSeek-V4 attention layer and its two hyper-connection modules keep for backward,
per microbatch on one rank, each tagged with the recompute module that drops it.

The tensors (megatron-core dev @d48bd6b ``deepseek_v4_hybrid_attention.py``, ``csa.py``,
``hyper_connection.py``), for ``n`` tokens, head width v, heads nh, q rank ql:

- the norm's input, output and fp32 1/rms (the aggregated stream that hyper-connections feed the
  layer: ``mhc`` recompute, an output-discarding checkpoint of the hyper-connection intermediates,
  drops the input; ``layernorm`` the output);
- the q latent before and after its norm (ql), the joint KV head before and after its norm (v), with
  their 1/rms (kept, as MLA's latents);
- the rotated queries (nh·v) and the window / compressed KV rows (v each): ``mla_up_proj`` drops the
  queries (``recompute_up_proj``);
- ratio > 0: the compressor's KV and gate projections (coff·v each) and the compressed rows (v per
  ``ratio`` tokens); ratio 4: the indexer's queries (ni·di), head weights (ni), its compressor's
  projections (2·di each) and the selected top-k indices (int32 per query);
- the core's output (nh·v, the group projection's input), its log-sum-exp per head (fp32, dropped by
  ``core_attn``), the group projection's output (``o_groups``·``o_lora_rank``, the output projection's
  input);
- per hyper-connection module (two per layer): the n-stream input (n·h, kept: the residual mix and
  the aggregation both read it) and the fp32 mixing coefficients (n² + 2n, dropped by ``mhc``).

Bytes; ``lin_in`` bytes per element for linear-layer inputs (1 under FP8 recipes), ``act`` otherwise.
"""

from __future__ import annotations

from moeplan.inputs.dsv4_config import INDEXED_RATIO
from moeplan.inputs.model_spec import ModelSpec

#: (recompute tag, tensor name, bytes); tag "" = no selective recompute drops it
Saved = tuple[str, str, float]


def dsv4_attention_saved(
    m: ModelSpec, ratio: int, tokens: float, seq_tokens: float, tp: int, act: float, lin_in: float
) -> list[Saved]:
    """The saved tensors of one DeepSeek-V4 attention layer of ``ratio`` (see the module docstring).

    ``tokens``: tokens of the microbatch on this CP rank; ``seq_tokens``: those of residual-width
    tensors on this rank (split by TP only with SP).
    """
    h, nh, n = m.hidden_size, m.num_attention_heads, tokens
    ql, v = m.given("q_lora_rank"), m.given("v_head_dim")
    out: list[Saved] = [
        ("mhc" if m.num_residual_streams > 1 else "", "attn_norm_input", seq_tokens * h * act),
        ("layernorm", "attn_norm_output", seq_tokens * h * lin_in),
        ("layernorm", "norm_rsigma", seq_tokens * 4),
        ("", "mla_latents", n * (ql * (act + lin_in) + v * (act + lin_in) + 8)),
        ("mla_up_proj", "mla_qkv", n * (nh * v / tp + v) * act),
        ("", "attn_out", n * nh * v / tp * act),
        ("core_attn", "softmax_lse", n * nh / tp * 4),
        ("", "o_group_out", n * m.given("o_groups") * m.given("o_lora_rank") / tp * lin_in),
    ]
    if ratio > 0:
        coff = 2 if ratio == INDEXED_RATIO else 1
        out.append(("", "csa_compressor", n * (2 * coff * v + v / ratio) * act))
    if ratio == INDEXED_RATIO:
        ni, di = m.given("dsa_indexer_n_heads"), m.given("dsa_indexer_head_dim")
        out.append(("", "csa_indexer", n * (ni * di + ni + 2 * 2 * 2 * di) * act))
        out.append(("", "csa_topk_indices", n * m.given("dsa_indexer_topk") * 4))
    return out + hc_saved(m, seq_tokens, act)


def hc_saved(m: ModelSpec, seq_tokens: float, act: float) -> list[Saved]:
    """The two hyper-connection modules of a layer: the n-stream input of each (kept) and its fp32
    mixing coefficients and 1/rms (``mhc``); none without hyper-connections."""
    n = m.num_residual_streams
    if n <= 1:
        return []
    return [
        ("", "hc_streams", 2 * seq_tokens * n * m.hidden_size * act),
        ("mhc", "hc_coefficients", 2 * seq_tokens * (n * n + 2 * n + 1) * 4),
    ]
