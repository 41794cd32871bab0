"""Model FLOPs per training step, counted exactly as Megatron Bridge counts "model TFLOP/s/GPU".

Source: Megatron Bridge ``training/utils/flop_utils.py::num_floating_point_operations`` (the
``transformer_flops`` path used by the GPT/MoE providers; Megatron-LM's
``training.py::num_floating_point_operations`` has the same terms). Forward + backward = 3 × forward,
2 FLOPs per multiply-add. Per token (``seqlen_sum``) and per squared sequence (``seqlen_squared_sum``):

- attention (GQA/MHA, with an output gate when the model has one): ``6·[h·(q + k + v + gate) + q·h]``
  per token and ``6·q`` per squared sequence (no causal halving in this path); sliding-window layers
  replace the quadratic term by ``6·q·min(window + 1, s)`` per token;
- MLA: q/kv LoRA projections, their norms (+1), the rope key projection and the output projection per
  token, and ``6·nh·(qk + rope + v)/2`` per squared sequence (causal);
- Gated DeltaNet layers (``linear_attention_freq``): in/conv/out projections and ``4·nv·dv²`` per token;
- Kimi Delta Attention layers (Kimi-K3, :func:`kda_term`; Bridge main's ``kimi_kda_layers`` branch):
  q / k / v / gate / output projections, beta, the forget gate's bottleneck, three short convolutions
  and ``4·heads·d²`` per token; the MLA layers keep MLA's terms (Bridge counts no MLA output gate);
- Mamba hybrids (``hybrid_layer_pattern``, Bridge's ``hybrid_flops``): each symbol one layer: ``*``
  attention, ``E`` MoE, ``-`` dense MLP, ``M`` Bridge's ``mamba_layer_flops``
  (:func:`moeplan.structure.mamba_shapes.mamba_bridge_flops_term`); a hybrid MTP depth
  (``mtp_layer_pattern``) adds its symbols once per depth and no projection term, as Bridge's
  ``get_hybrid_layer_counts`` of the unified ``main/mtp/mtp`` pattern does (v0.6.0);
- MLP: ``6·h·f·g`` per dense layer (g = 3 with SwiGLU, else 2); MoE layers: top-k routed experts plus
  shared experts; MTP layers count as the last layer's type plus ``6·(3h + 2h²)``;
- latent MoE (``moe_latent_size`` = l, Bridge's ``moe_layer_flops``): routed experts ``6·l·f·k·g`` and
  the down / up latent projections ``6·2·h·l`` per token and MoE layer (part ``moe_latent_proj``);
- DeepSeek Sparse Attention (:func:`dsa_flops_per_token`, Bridge dev ``flop_utils.py`` DSA branch):
  MLA's projections, a sparse core over the indexer's top-k keys at the absorbed widths, and the
  lightning indexer (projections, dense causal scores, and with its KL loss the score gradients and
  the teacher's query-key work);
- MiniMax Sparse Attention (MiniMax-M3, :func:`moeplan.structure.msa_shapes.msa_layer_flops_per_token`):
  Bridge has no count of it (it trains the model with full attention), so its layers count the
  model's own work: the core over the selected blocks (causal) and the index branch (part
  ``msa_indexer``: projections, the scores over every causal key and their KL-loss gradient);
- DeepSeek-V4 (:func:`moeplan.structure.dsv4_shapes.bridge_attention_terms`, Bridge v0.6.0
  ``dsv4_hybrid`` branch): ``attention_linear`` the MLA-style and grouped output projections of every
  decoder and MTP layer, ``attention_quadratic`` the window and compressed-KV cores, the compressors and
  the ratio-4 indexers (hyper-connections and hash routing add nothing in Bridge's count);
- logits: ``6·h·V_pad·(1 + mtp_num_layers)`` with the vocabulary padded to 128·TP.

Units: FLOPs (not TFLOPs). The per-token form makes the tokens/s ↔ TFLOP/s conversion exact.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

from moeplan.inputs.model_spec import ModelSpec
from moeplan.structure import dsv4_shapes
from moeplan.structure.mamba_shapes import mamba_bridge_flops_term
from moeplan.structure.msa_shapes import msa_layer_count, msa_layer_flops_per_token
from moeplan.structure.params import padded_vocab_size


@dataclass(frozen=True)
class FlopCount:
    """Training FLOPs (forward + backward) of one sequence, split into named parts (FLOPs)."""

    parts: dict[str, float]
    seq_length: int

    @property
    def total(self) -> float:
        return sum(self.parts.values())

    @property
    def per_token(self) -> float:
        return self.total / self.seq_length


def _layer_counts(m: ModelSpec, mtp: int) -> tuple[int, int, int, int]:
    """(MoE layers, dense layers, Gated DeltaNet layers, standard-attention layers) over the decoder
    and MTP layers, as Bridge counts them: MTP layers take the last layer's MLP type; GDN layers follow
    Bridge's pattern over ``num_layers + MTP`` (layer i is GDN unless ``(i + 1) % freq == 0``)."""
    if m.hybrid_layer_pattern is not None:  # Bridge's hybrid_flops: counts per pattern symbol
        p = m.hybrid_layer_pattern + (m.mtp_layer_pattern or "") * mtp
        return p.count("E"), p.count("-"), 0, p.count("*")
    L = m.num_layers + mtp
    moe_flags = list(m.moe_layers or [False] * m.num_layers)
    last_moe = bool(moe_flags[-1]) if moe_flags else False
    n_moe = sum(moe_flags) + (mtp if last_moe else 0)
    if not m.has_linear_attention:
        return n_moe, L - n_moe, 0, L
    kinds = list(m.attention_kinds or ["full"] * m.num_layers)
    if m.kimi_delta_attention:  # Bridge's kimi_kda_layers branch: the listed layers, MTP as the last layer
        n_kda = kinds.count("linear") + (mtp if kinds[-1] == "linear" else 0)
        return n_moe, L - n_moe, n_kda, L - n_kda
    freq = round(len(kinds) / max(1, sum(1 for k in kinds if k != "linear")))
    n_gdn = sum(0 if (i + 1) % freq == 0 else 1 for i in range(L))
    return n_moe, L - n_moe, n_gdn, L - n_gdn


def _attention_terms(m: ModelSpec) -> tuple[float, float]:
    """(per-token projection FLOPs / 2, per-squared-sequence core FLOPs / 2) of one attention layer
    (forward, one multiply-add = 1): MLA's LoRA projections with their norms, rope key and output
    projection and a causal core; GQA/MHA's Q, K, V (+ output gate) and output projections and a full
    (uncausal) core."""
    h = m.hidden_size
    if m.multi_latent_attention:
        nh = m.num_attention_heads
        qk, rope, v = m.given("qk_head_dim"), m.given("qk_pos_emb_head_dim"), m.given("v_head_dim")
        q_term = h * nh * (qk + rope) if not m.q_lora_rank else m.q_lora_rank * (h + nh * (qk + rope) + 1)
        lin = q_term + m.given("kv_lora_rank") * (h + nh * (qk + v) + 1) + h * rope + nh * v * h
        return lin, nh * (qk + rope) / 2 + nh * v / 2
    q = m.given("kv_channels") * m.num_attention_heads
    kv = m.given("kv_channels") * m.num_query_groups
    gate = q if m.attention_output_gate else 0
    return h * (q + 2 * kv + gate) + q * h, q


def _gdn_term(m: ModelSpec) -> float:
    """Per-token FLOPs / 2 of one Gated DeltaNet layer: in, conv and out projections and ``4·nv·dv²``."""
    h = m.hidden_size
    nv, dv = m.given("linear_num_value_heads"), m.given("linear_value_head_dim")
    qk_dim = m.given("linear_key_head_dim") * m.given("linear_num_key_heads")
    v_dim = dv * nv
    return (
        h * (2 * qk_dim + 2 * v_dim + 2 * nv)
        + m.given("linear_conv_kernel_dim") * (2 * qk_dim + v_dim)
        + nv * dv * dv * 4
        + h * v_dim
    )


def kda_term(m: ModelSpec) -> float:
    """Per-token FLOPs / 2 of one Kimi Delta Attention layer as Megatron Bridge counts it (main 067f987,
    ``training/utils/flop_utils.py``, ``kimi_kda_layers`` branch; not in v0.6.0): with P = heads·d
    (d = ``linear_key_head_dim``), the q / k / v / gate / output projections ``5·h·P``, the beta
    projection ``h·heads``, the forget gate's bottleneck ``h·d + d·P``, the three short convolutions
    ``d_conv·3·P`` and the chunked delta rule ``4·heads·d²`` (the Gated DeltaNet term)."""
    h = m.hidden_size
    heads, d = m.given("linear_num_value_heads"), m.given("linear_key_head_dim")
    p = heads * d
    return 5 * h * p + h * heads + h * d + d * p + m.given("linear_conv_kernel_dim") * 3 * p + 4 * heads * d * d


def dsa_indexer_layers(m: ModelSpec, mtp: int) -> int:
    """Layers that run a DSA indexer: decoder layers that compute their own top-k
    (:meth:`~moeplan.inputs.model_spec.PartialModelSpec.layer_has_indexer`) plus the MTP layers, numbered
    from 1 again (megatron-core ``multi_token_prediction.py``; Bridge's ``count_indexer_layers``)."""
    probe = ModelSpec.layer_has_indexer
    return sum(probe(m, i) for i in range(m.num_layers)) + sum(probe(m, i) for i in range(mtp))


def dsa_causal_context(seq: float, topk: int) -> tuple[float, float]:
    """(dense, sparse) causal keys per query of a sequence of ``seq`` tokens: ``(s + 1)/2`` for full
    causal attention; with top-k selection query i reads min(i, k) keys, on average
    ``k − k·(k − 1)/(2s)`` once ``s > k`` (Megatron Bridge dev ``flop_utils.py``, DSA branch)."""
    dense = (seq + 1) / 2
    return dense, (dense if seq <= topk else topk - topk * (topk - 1) / (2 * seq))


def dsa_flops_per_token(m: ModelSpec, seq: float, n_attn: int, mtp: int) -> dict[str, float]:
    """Model FLOPs per token (fwd + bwd) of DeepSeek Sparse Attention beyond MLA's projections, as
    Megatron Bridge counts them (``training/utils/flop_utils.py``, DSA branch, Bridge dev 067f987,
    after v0.6.0; equations 1-2 of DeepSeek-V3.2, arXiv 2512.02556), for ``n_attn`` attention layers
    and a sequence of ``seq`` tokens (``Σs²/Σs`` when packed):

    - ``attention_quadratic``: ``6·n·C_sparse·nh·(2·kv_lora + rope)``: the top-k core of absorbed MLA
      (megatron-core ``absorbed_mla.py``: QK over kv_lora + rope, AV over kv_lora);
    - ``dsa_indexer``: per indexer layer the projections ``(q_in·H·d + h·d + h·H)`` × 2 (forward, no
      gradients) or × 4 with the KL loss (``dsa_indexer_loss_coeff`` > 0; inputs detached: forward +
      weight gradient), the dense causal scores ``2·C_dense·H·(d + 1)`` (top-k needs every score), and
      with the loss ``4·C·H·(d + 1)`` score gradients and ``2·C·nh·(kv_lora + rope)`` for the detached
      teacher attention (C sparse with ``dsa_indexer_use_sparse_loss``, else dense).
    """
    nh, kv, rope = m.num_attention_heads, m.given("kv_lora_rank"), m.given("qk_pos_emb_head_dim")
    sparse = dsa_causal_context(seq, m.given("dsa_indexer_topk"))[1]
    indexer = sum(dsa_indexer_flops_per_token(m, seq))
    return {
        "attention_quadratic": 6 * n_attn * sparse * nh * (2 * kv + rope),
        "dsa_indexer": dsa_indexer_layers(m, mtp) * indexer,
    }


def dsa_indexer_flops_per_token(m: ModelSpec, seq: float) -> tuple[float, float]:
    """(projection, score) model FLOPs per token (fwd + bwd) of one DSA indexer layer, as
    :func:`dsa_flops_per_token` counts them: the projections (× 2 without the KL loss, × 4 with it) and
    the dense causal scores with, under the loss, their gradients and the teacher's query-key work."""
    nh, kv, rope = m.num_attention_heads, m.given("kv_lora_rank"), m.given("qk_pos_emb_head_dim")
    heads, d, topk = m.given("dsa_indexer_n_heads"), m.given("dsa_indexer_head_dim"), m.given("dsa_indexer_topk")
    dense, sparse = dsa_causal_context(seq, topk)
    trains = m.dsa_indexer_loss_coeff > 0
    ctx = sparse if m.dsa_indexer_use_sparse_loss else dense
    proj = (m.q_lora_rank or m.hidden_size) * heads * d + m.hidden_size * (d + heads)
    unit = heads * (d + 1)
    scores = 2 * dense * unit
    if trains:
        scores += 4 * ctx * unit + 2 * ctx * nh * (kv + rope)
    return (4 if trains else 2) * proj, scores


def _attention_by_layer(m: ModelSpec, s: float, s2: float, window: int | None) -> dict[str, float]:
    """``attention_linear`` and ``attention_quadratic`` summed layer by layer, each at its own widths
    (:meth:`~moeplan.inputs.model_spec.PartialModelSpec.attention_widths`: Gemma-4's full-attention
    layers have their own head dim and KV heads), with the terms of :func:`_attention_terms` and the
    same window rule as :func:`model_flops`. Megatron Bridge's ``flop_utils.py`` (v0.6.0) has one
    ``kv_channels`` / ``num_query_groups`` for every layer, so it would count the global layers at the
    sliding ones' widths; moeplan counts the model that runs."""
    kinds = m.attention_kinds or ("full",) * m.num_layers
    lin_total = quad_total = 0.0
    for kind in kinds:
        mk = cast(ModelSpec, m.attention_widths(kind))
        lin, quad = _attention_terms(mk)
        lin_total += lin
        if window and kind == "sliding":
            quad_total += s * mk.given("kv_channels") * mk.num_attention_heads * min(window + 1, s)
        else:
            quad_total += s2 * quad
    return {"attention_linear": 6 * s * lin_total, "attention_quadratic": 6 * quad_total}


def model_flops(
    m: ModelSpec,
    seq_length: int,
    tp: int = 1,
    mtp_num_layers: int | None = None,
    seqlen_squared: float | None = None,
    make_vocab_size_divisible_by: int = 128,
    sliding_window_term: bool = False,
) -> FlopCount:
    """Megatron Bridge's model FLOPs of one sequence of ``seq_length`` tokens (fwd + bwd).

    ``seqlen_squared`` overrides ``seq_length²`` for packed sequences (sum of squared lengths).
    ``sliding_window_term``: the newest ``flop_utils`` bounds sliding-window layers' core attention by
    the window; the published performance tables (25.09–26.06) count every layer as full attention,
    which is the default here so that our TFLOP/s compare one to one with them.
    SwiGLU counts 3 projections only with the SiLU gate (``activation_func == F.silu``); gpt-oss's
    clamped gate (Megatron: quick-GELU) counts 2, as Bridge does.
    """
    s = float(seq_length)
    s2 = float(seqlen_squared) if seqlen_squared is not None else s * s
    h = m.hidden_size
    mtp = m.mtp_num_layers if mtp_num_layers is None else mtp_num_layers
    n_moe, n_dense, n_gdn, n_std = _layer_counts(m, mtp)
    gated = 3 if (m.gated_linear_unit and not m.clamped_glu) else 2
    kinds = list(m.attention_kinds or ["full"] * m.num_layers)
    lin, quad = _attention_terms(m)
    parts: dict[str, float] = {"attention_linear": 6 * n_std * s * lin}
    window = m.sliding_window if (sliding_window_term and "sliding" in kinds and m.sliding_window) else None
    if window:
        n_swa = sum(1 for k in kinds if k == "sliding")
        ctx = min(window + 1, seq_length)  # Bridge: window (left, right=0) + 1
        q = m.given("kv_channels") * m.num_attention_heads
        parts["attention_quadratic"] = 6 * ((n_std - n_swa) * s2 * quad + n_swa * s * q * ctx)
    else:
        parts["attention_quadratic"] = 6 * n_std * s2 * quad
    if m.has_global_attention_widths:
        parts.update(_attention_by_layer(m, s, s2, window))
    if m.has_dsa:
        parts.update({k: v * s for k, v in dsa_flops_per_token(m, s2 / s, n_std, mtp).items()})
    if m.has_msa:  # MiniMax Sparse Attention: no Bridge count exists; the model's own work (msa_shapes)
        n_msa = msa_layer_count(m)
        msa = msa_layer_flops_per_token(m, s2 / s)
        parts["attention_quadratic"] += n_msa * (s * msa["attention_quadratic"] - 6 * s2 * quad)
        parts["msa_indexer"] = n_msa * s * msa["msa_indexer"]
    if m.is_dsv4:  # Bridge's dsv4_hybrid branch: projections; window / compressed cores, compressors, indexers
        proj, sparse = dsv4_shapes.bridge_attention_terms(m, s2 / s, mtp)
        parts.update(attention_linear=6 * s * proj, attention_quadratic=6 * s * sparse)
    if n_gdn and m.kimi_delta_attention:
        parts["kimi_delta_attention"] = 6 * n_gdn * s * kda_term(m)
    elif n_gdn:
        parts["gated_deltanet"] = 6 * n_gdn * s * _gdn_term(m)
    if m.has_mamba:
        n_mamba = (m.hybrid_layer_pattern or "").count("M") + (m.mtp_layer_pattern or "").count("M") * mtp
        parts["mamba"] = 6 * n_mamba * s * mamba_bridge_flops_term(m)
    mlp = 0.0
    if n_dense:
        mlp += (m.ffn_hidden_size or 0) * gated * n_dense
    parts["mlp"] = 6 * s * h * mlp
    if n_moe:
        # routed experts at their token width (the latent of a latent MoE), plus its two projections
        parts["mlp"] += 6 * s * m.moe_token_width * m.moe_ffn * m.moe_topk * gated * n_moe
        parts["shared_experts"] = 6 * s * h * (m.moe_shared_expert_intermediate_size or 0) * gated * n_moe
        if m.moe_latent_size:
            parts["moe_latent_proj"] = 6 * s * 2 * h * m.moe_latent_size * n_moe
    if mtp and m.mtp_layer_pattern is None:  # Bridge's hybrid path has no eh_proj term
        parts["mtp_proj"] = 6 * s * mtp * (3 * h + 2 * h * h)
    vpad = padded_vocab_size(m.vocab_size, tp, make_vocab_size_divisible_by)
    parts["logits"] = 6 * s * h * vpad * (1 + mtp)
    return FlopCount(parts, seq_length)
