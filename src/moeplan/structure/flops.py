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
- Mamba hybrids (``hybrid_layer_pattern``, Bridge's ``hybrid_flops``): each symbol one layer: ``*``
  attention, ``E`` MoE, ``-`` dense MLP, ``M`` Bridge's ``mamba_layer_flops``
  (:func:`moeplan.structure.mamba_shapes.mamba_bridge_flops_term`); MTP of hybrids is not modelled;
- MLP: ``6·h·f·g`` per dense layer (g = 3 with SwiGLU, else 2); MoE layers: top-k routed experts plus
  shared experts; MTP layers count as the last layer's type plus ``6·(3h + 2h²)``;
- logits: ``6·h·V_pad·(1 + mtp_num_layers)`` with the vocabulary padded to 128·TP.

Units: FLOPs (not TFLOPs). The per-token form makes the tokens/s ↔ TFLOP/s conversion exact.
"""

from __future__ import annotations

from dataclasses import dataclass

from moeplan.inputs.model_spec import ModelSpec
from moeplan.structure.mamba_shapes import mamba_bridge_flops_term
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
        p = m.hybrid_layer_pattern
        return p.count("E"), p.count("-"), 0, p.count("*")
    L = m.num_layers + mtp
    moe_flags = list(m.moe_layers or [False] * m.num_layers)
    last_moe = bool(moe_flags[-1]) if moe_flags else False
    n_moe = sum(moe_flags) + (mtp if last_moe else 0)
    if not m.has_linear_attention:
        return n_moe, L - n_moe, 0, L
    kinds = list(m.attention_kinds or ["full"] * m.num_layers)
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
    if n_gdn:
        parts["gated_deltanet"] = 6 * n_gdn * s * _gdn_term(m)
    if m.has_mamba:
        parts["mamba"] = 6 * (m.hybrid_layer_pattern or "").count("M") * s * mamba_bridge_flops_term(m)
    mlp = 0.0
    if n_dense:
        mlp += (m.ffn_hidden_size or 0) * gated * n_dense
    if n_moe:
        mlp += m.moe_ffn * m.moe_topk * gated * n_moe
        parts["shared_experts"] = 6 * s * h * (m.moe_shared_expert_intermediate_size or 0) * gated * n_moe
    parts["mlp"] = 6 * s * h * mlp
    if mtp:
        parts["mtp_proj"] = 6 * s * mtp * (3 * h + 2 * h * h)
    vpad = padded_vocab_size(m.vocab_size, tp, make_vocab_size_divisible_by)
    parts["logits"] = 6 * s * h * vpad * (1 + mtp)
    return FlopCount(parts, seq_length)
