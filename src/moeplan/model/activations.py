"""Activation memory saved for backward, per decoder layer and per microbatch, on one GPU.

Method: list every tensor a layer keeps for its backward pass (Korthikanti et al., "Reducing
Activation Recomputation in Large Transformer Models", arXiv 2205.05198, §4 and Table 2), with
flash/fused attention (no s² term unless ``attention_backend: unfused``), GQA/MLA/Gated DeltaNet
attention, SwiGLU or GeLU MLPs and MoE layers (router, top-k expanded tokens on the expert side,
shared experts). Each tensor is tagged with the recompute module whose checkpoint drops it
(``megatron_facts.md`` §3.4, vendored in ``tests/data/reference``: ``core_attn``, ``mla_up_proj``, ``layernorm``, ``moe_act``, ``mlp``,
``moe``, ``shared_experts``, ``gdn_norm_out``).

Sharding: ``tokens`` are the tokens of one microbatch on this CP rank (MBS·seq/CP). Tensors of the
residual-stream width (norm inputs/outputs, dropout masks) are split by TP only with sequence
parallelism; head- and FFN-width tensors are split by TP always (Korthikanti Table 2:
``sbh(10 + 24/t + 5as/(ht))`` without SP, ``sbh·34/t`` with SP and selective recompute).

Units: bytes. Linear-layer inputs are stored at 1 byte per element under FP8 recipes (Transformer
Engine keeps the quantized input for the weight-gradient GEMM), 2 bytes (bf16) otherwise.
Verified against the paper's own figures in ``tests/test_memory_reference.py``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import cast

from moeplan.inputs.model_spec import ModelSpec
from moeplan.model.dsv4_activations import dsv4_attention_saved
from moeplan.model.kimi_k3_activations import attn_res_rows, attn_res_saved, gathered_input_saved, kda_saved
from moeplan.structure.attention_kernels import attention_runs_unfused
from moeplan.structure.dsv4_shapes import layer_ratio
from moeplan.structure.msa_shapes import msa_indexer_saved

#: label of tensors no selective recompute drops
KEEP = ""


@dataclass(frozen=True)
class ActContext:
    """Per-microbatch, per-rank sizes the activation formulas need.

    Attributes:
        tokens: tokens of one microbatch on this CP rank (MBS · seq_length / CP).
        seq_local: sequence length per CP rank (seq_length / CP), for s² and chunk-state terms.
        kv_len: keys per query for unfused attention (seq_length, or the sliding window).
        routing_factor: routed tokens per expert rank relative to perfect balance (imbalance or
            capacity factor).
        fused_input_norm: the layer spec fuses the input norm of softmax (non-MLA) attention into
            ``linear_qkv`` and a dense MLP's norm into ``linear_fc1`` (Transformer Engine's
            ``LayerNormLinear``), as megatron-core's TE spec does (default True; False for the local
            spec's separate norms). See :func:`_input_norm_tag`.
    """

    tokens: float
    seq_local: float
    micro_batch_size: int
    tp: int
    sp: bool
    etp: int
    act_bytes: float = 2.0
    lin_in_bytes: float = 2.0
    hidden_dropout: float = 0.0
    attention_dropout: float = 0.0
    unfused_attention: bool = False
    routing_factor: float = 1.0
    fp8_attention: bool = False
    fused_input_norm: bool = True

    @property
    def seq_tokens(self) -> float:
        """Tokens of residual-stream tensors on this rank (split by TP only with SP)."""
        return self.tokens / self.tp if (self.sp and self.tp > 1) else self.tokens


def _add(d: dict[str, dict[str, float]], tag: str, name: str, nbytes: float) -> None:
    d.setdefault(tag, {})[name] = d.get(tag, {}).get(name, 0.0) + nbytes


def _norm_output(out: dict, tag: str, name: str, c: ActContext, h: int) -> None:
    """A norm's output (the next linear's saved input, at the linear-input width) and its fp32 1/rms
    per token (TE RMSNorm / ``LayerNormLinear``'s ``rsigma``), under the recompute label ``tag``."""
    _add(out, tag, name, c.seq_tokens * h * c.lin_in_bytes)
    _add(out, tag, "norm_rsigma", c.seq_tokens * 4)


def _input_norm_tag(m: ModelSpec, kind: str, c: ActContext) -> str:
    """The recompute label of the attention input norm's output.

    megatron-core's TE layer spec fuses the input norm of softmax (non-MLA) attention into
    ``linear_qkv`` (``TELayerNormColumnParallelLinear``; ``input_layernorm`` stays ``IdentityOp``,
    models/gpt/gpt_layer_specs.py@core_v0.17.0 L310-318), and ``layernorm`` recompute applies only to a
    separate norm (transformer_layer.py@core_v0.17.0 L409-411: ``recompute_input_layernorm`` is set
    when ``input_layernorm`` is not an ``IdentityOp``). TE's ``LayerNormLinear`` saves its norm output
    ``ln_out`` (the SP-local shard, re-gathered in backward) and ``rsigma`` for the weight gradient
    (module/layernorm_linear.py@v2.14 L409-472), so no selective module drops them: ``KEEP``. MLA
    (a separate ``input_layernorm`` without the down-projection fusion) and models whose own spec keeps
    a separate input norm (Gemma-4: ``extra_layer_norms``) keep ``layernorm``. Gated DeltaNet layers fuse
    it the same way, into ``in_proj`` (``column_parallel_layer_norm_linear``, spec metainfo
    ``fuse_input_layernorm: True``, so the layer's ``input_layernorm`` is ``IdentityOp``:
    experimental_attention_variant_module_specs.py@core_v0.17.0 L68-72 and L235-239): ``KEEP`` too.
    Kimi Delta Attention (Megatron Bridge's own module, not that spec) keeps ``layernorm``.
    """
    kda = kind == "linear" and m.kimi_delta_attention
    separate = kda or m.multi_latent_attention or m.extra_layer_norms > 0
    return "layernorm" if separate or not c.fused_input_norm else KEEP


def _mlp_norm_tag(m: ModelSpec, moe: bool, c: ActContext) -> str:
    """The recompute label of the pre-MLP norm's output: a MoE layer's ``pre_mlp_layernorm`` is a
    separate ``TENorm`` (``layernorm`` recompute drops its output); a dense MLP's norm is fused into
    ``linear_fc1`` (``pre_mlp_layernorm`` is ``IdentityOp``; gpt_layer_specs.py@core_v0.17.0
    ``get_mlp_module_spec_for_backend`` L525-530), so only ``mlp`` recompute, which checkpoints the whole
    MLP from its input, drops it (:func:`_input_norm_tag` for the fusion's sources)."""
    if moe or m.extra_layer_norms > 0 or not c.fused_input_norm:
        return "layernorm"
    return "mlp"


def _mamba(m: ModelSpec, c: ActContext, out: dict) -> None:
    """A Mamba-2 mixer's saved tensors (megatron-core ``MambaMixer`` with mamba_ssm's
    ``MambaSplitConv1dScanCombinedFn``, whose ``save_for_backward`` keeps the in_proj output
    ``zxbcdt`` (z, x, B, C, dt: the conv input, from which backward recomputes the conv output), the
    scan output ``out_x`` and the gated norm's fp32 1/rms per group; the SSD chunk states are recomputed
    in backward, not kept). The in_proj's fused norm keeps its input and output, the separate
    ``out_proj`` its input (the gated norm's output). All but the norm input are split by TP over
    heads; no selective recompute label covers a Mamba mixer (only full recompute drops them)."""
    nh, p, n_state, g = (
        m.given("mamba_num_heads"),
        m.given("mamba_head_dim"),
        m.given("mamba_state_dim"),
        m.given("mamba_num_groups"),
    )
    t, n, a, li, h = c.tp, c.tokens, c.act_bytes, c.lin_in_bytes, m.hidden_size
    d_inner = nh * p
    _add(out, KEEP, "mamba_norm_input", c.seq_tokens * h * a)
    _add(out, KEEP, "mamba_norm_output", c.seq_tokens * h * li + c.seq_tokens * 4)
    _add(out, KEEP, "mamba_zxbcdt", n * (2 * d_inner + 2 * g * n_state + nh) / t * a)
    _add(out, KEEP, "mamba_scan_out", n * d_inner / t * a)
    _add(out, KEEP, "mamba_norm_rstd", n * g / t * 4)
    _add(out, KEEP, "mamba_out_proj_in", n * d_inner / t * li)


def _attention(m: ModelSpec, kind: str, c: ActContext, out: dict) -> None:
    if kind == "none":  # the MLP-only layers of a Mamba hybrid
        return
    if kind == "mamba":
        _mamba(m, c, out)
        return
    t, n, a, li = c.tp, c.tokens, c.act_bytes, c.lin_in_bytes
    h = m.hidden_size
    _add(out, KEEP, "attn_norm_input", c.seq_tokens * h * a)
    _norm_output(out, _input_norm_tag(m, kind, c), "attn_norm_output", c, h)
    if kind == "linear" and m.kimi_delta_attention:
        for tag, name, nbytes in kda_saved(m, n, c.seq_tokens, t, a, li):
            _add(out, tag, name, nbytes)
        return
    if kind == "linear":
        nk, nv = m.given("linear_num_key_heads"), m.given("linear_num_value_heads")
        dk, dv = m.given("linear_key_head_dim"), m.given("linear_value_head_dim")
        conv_ch = 2 * nk * dk + nv * dv
        # megatron-core gated_delta_net/common.py (core_v0.19.0) with FLA 0.4.2: the conv input (FLA
        # causal_conv1d keeps x), the L2-normed q/k (FLA l2norm keeps its output), the kernel's own
        # contiguous q and k (repeated to the value heads) and v, the z gate, beta/g (fp32)
        _add(out, KEEP, "gdn_conv_in", n * conv_ch / t * a)
        _add(out, KEEP, "gdn_qk_l2norm", n * 2 * nk * dk / t * a)
        _add(out, KEEP, "gdn_kernel_qkv", n * nv * (2 * dk + dv) / t * a)
        _add(out, KEEP, "gdn_gate_z", n * nv * dv / t * a)
        _add(out, KEEP, "gdn_beta_g", n * 2 * nv / t * 4)
        # FLA's chunked delta rule keeps the intra-chunk matrix A (64 per token per head, in q's dtype:
        # solve_tril(output_dtype=k.dtype)) and recomputes the per-chunk states in backward
        _add(out, KEEP, "gdn_chunk_matrix", n * nv / t * 64 * a)
        _add(out, KEEP, "gdn_core_out", n * nv * dv / t * a)
        _add(out, "gdn_norm_out", "gdn_norm_out", n * nv * dv / t * li)
        return
    nh = m.num_attention_heads
    if m.multi_latent_attention:
        o_width = _mla(m, c, out)
    else:
        m = cast(ModelSpec, m.attention_widths(kind))  # Gemma-4's global layers: their own widths
        d, g = m.given("kv_channels"), m.num_query_groups
        qa = 1.0 if c.fp8_attention else a
        if m.value_norm:
            # Gemma-4's weightless RMSNorm on V keeps its input and fp32 1/rms per KV head
            _add(out, KEEP, "v_norm_input", n * g * d / t * a + n * g / t * 4)
        _add(out, KEEP, "qkv", n * (nh * d + 2 * g * d) / t * qa)
        o_width = nh * d
        if m.qk_layernorm and m.qk_layernorm_full_dim:
            # MiniMax-M2's full-dimension norm (Bridge minimax_m2_provider._FullDimRMSNorm, plain PyTorch):
            # autograd keeps the fp32 copy of Q and K (pow / mul), the bf16 normed tensor (weight mul)
            # and one fp32 1/rms per token for each of the two norms
            _add(out, KEEP, "qk_norm_input", n * (nh + g) * d / t * (4 + a) + n * 2 * 4)
        elif m.qk_layernorm:
            # the q/k norms keep their inputs (Q and K before the norm) and fp32 1/rms per head
            _add(out, KEEP, "qk_norm_input", n * (nh + g) * d / t * a + n * (nh + g) / t * 4)
        if m.attention_output_gate:
            _add(out, KEEP, "attn_output_gate", n * nh * d / t * a)
            # the gating multiply keeps the ungated core output beside the gate
            _add(out, KEEP, "attn_gate_core_out", n * nh * d / t * a)
    # flash attention keeps its output (also the input of the output projection) and the
    # log-sum-exp per head (fp32); FP8 keeps the projection's quantized input too.
    if c.fp8_attention:  # FP8 attention output, which is also the projection's FP8 input
        _add(out, KEEP, "attn_out", n * o_width / t * 1.0)
    else:
        _add(out, KEEP, "attn_out", n * o_width / t * (a + (li if li < a else 0)))
    if not (c.unfused_attention or attention_runs_unfused(m, kind)):
        _add(out, "core_attn", "softmax_lse", n * nh / t * 4)
    else:
        s2 = c.micro_batch_size * nh / t * c.seq_local * c.seq_local
        per = 2 + (1 + 2 if c.attention_dropout > 0 else 0)  # softmax out, dropout mask and output
        _add(out, "core_attn", "attention_scores", s2 * per)
    if c.hidden_dropout > 0:
        _add(out, KEEP, "attn_dropout_mask", c.seq_tokens * h * 1)


def _mla(m: ModelSpec, c: ActContext, out: dict) -> int:
    """MLA's saved tensors before the core's output (DeepSeek Sparse Attention's absorbed layout with
    :func:`_dsa_absorbed`); returns the output projection's input width per token (all heads)."""
    t, n, a, li = c.tp, c.tokens, c.act_bytes, c.lin_in_bytes
    nh = m.num_attention_heads
    rope, kv, vd = m.given("qk_pos_emb_head_dim"), m.given("kv_lora_rank"), m.given("v_head_dim")
    qk = m.given("qk_head_dim") + rope
    # the q and kv down-projections' outputs (the kv norm's input is a view of [kv_lora | rope]) and
    # the normed latents the up-projections take
    lat = (m.q_lora_rank or 0) * (a + li) + kv * li + (kv + rope) * a
    lat += 4 * (2 if m.q_lora_rank else 1)  # fp32 1/rms of the q and kv latent norms
    _add(out, KEEP, "mla_latents", c.seq_tokens * lat)
    qa = 1.0 if c.fp8_attention else a  # fp8_dot_product_attention keeps Q/K/V in FP8
    if m.has_dsa:
        _dsa_absorbed(m, c, out, qa)
    else:
        _add(out, "mla_up_proj", "mla_qkv", n * nh * (2 * qk + vd) / t * qa)
    return nh * vd


def _dsa_absorbed(m: ModelSpec, c: ActContext, out: dict, qa: float) -> None:
    """DeepSeek Sparse Attention's tensors in megatron-core's absorbed MLA (core_v0.19.0+
    ``experimental_attention_variant/absorbed_mla.py``, ``dsa.py``): the absorbed queries
    (heads/TP × (kv_lora + rope)) and the one shared latent key-value row (kv_lora + rope), dropped by
    ``mla_up_proj`` (its ``qkv_up_checkpoint``); the core's latent output (heads/TP × kv_lora, the
    value up-projection's einsum input). The top-k indices (int64 from ``torch.topk``, top-k per
    query) and the indexer's tensors are per layer (:func:`dsa_indexer_saved`)."""
    t, n, a = c.tp, c.tokens, c.act_bytes
    nh, rope, kv = m.num_attention_heads, m.given("qk_pos_emb_head_dim"), m.given("kv_lora_rank")
    _add(out, "mla_up_proj", "mla_qkv", n * (nh / t + 1) * (kv + rope) * qa)
    _add(out, KEEP, "dsa_latent_out", n * nh / t * kv * a)


def dsa_indexer_saved(m: ModelSpec, c: ActContext) -> dict[str, float]:
    """Bytes one DSA layer that computes its own top-k keeps for backward, per microbatch and rank
    (megatron-core dev ``dsa.py``; recomputed with ``core_attn``, whose checkpoint reruns DSAttention):
    the top-k indices ``tokens × topk × 8`` (int64), and with the indexer's KL loss
    (``dsa_indexer_loss_coeff`` > 0: ``FusedDSAIndexerLoss.save_for_backward(q, weights, k, ...)``) the
    indexer's query (heads × head_dim), key (head_dim) and head weights, all whole on every TP rank
    (the indexer is ``duplicated``) over the rank's tokens. The FP32 index scores ``[b, s, s]`` are not
    kept by the fused kernels; the PyTorch fallback's are a rule's warning (``attention.dsa_dense_fallback``)."""
    n, a = c.tokens, c.act_bytes
    out = {"dsa_topk_indices": n * m.given("dsa_indexer_topk") * 8.0}
    if m.dsa_indexer_loss_coeff > 0:
        heads, d = m.given("dsa_indexer_n_heads"), m.given("dsa_indexer_head_dim")
        out["dsa_indexer_qkw"] = n * (heads * d + d + heads) * a
    return out


def _gemma4_norms(m: ModelSpec, c: ActContext, out: dict) -> None:
    """The RMSNorms of a Gemma-4 MoE layer beyond input / pre-MLP (Megatron Bridge
    ``modeling_gemma4.py`` v0.6.0), each keeping its input (bf16) and fp32 1/rms per token: the norm
    fused into ``linear_proj`` and ``post_ffn_layernorm`` run outside the MoE block (kept);
    ``pre_shared_expert_layernorm``'s input is the residual already kept and its output is the shared
    expert's FC1 input (kept: ``Gemma4MoELayer`` takes it as a checkpoint input); the post-routed and
    post-shared-expert norms and the router's weightless input norm run inside the MoE block's
    ``custom_forward``, which ``moe`` recompute checkpoints."""
    st, a, li, h = c.seq_tokens, c.act_bytes, c.lin_in_bytes, m.hidden_size
    _add(out, KEEP, "post_attn_norm_input", st * (h * a + 4))
    _add(out, KEEP, "shared_expert_norm_output", st * (h * li + 4))
    _add(out, KEEP, "post_mlp_norm_input", st * (h * a + 4))
    _add(out, "moe", "post_expert_norms_input", 2 * st * (h * a + 4))
    _add(out, "moe", "router_norm_output", st * h * a)


def _mlp(m: ModelSpec, moe: bool, c: ActContext, out: dict) -> None:
    t, n, a, li = c.tp, c.tokens, c.act_bytes, c.lin_in_bytes
    h = m.hidden_size
    glu = 2 if m.gated_linear_unit else 1
    _add(out, KEEP, "mlp_norm_input", c.seq_tokens * h * a)
    _norm_output(out, _mlp_norm_tag(m, moe, c), "mlp_norm_output", c, h)
    if c.hidden_dropout > 0:
        _add(out, KEEP, "mlp_dropout_mask", c.seq_tokens * h * 1)
    if not moe:
        f = m.given("ffn_hidden_size")
        _add(out, "mlp", "fc1_out", n * glu * f / t * a)
        _add(out, "mlp", "fc2_in", n * f / t * li)
        return
    e, k, fe = m.moe_experts, m.moe_topk, m.moe_ffn
    if m.extra_layer_norms:
        _gemma4_norms(m, c, out)
    local_tokens = c.seq_tokens  # the router sees SP-local tokens
    # router: logits (bf16), scores (fp32) and the boolean routing map, per local token
    _add(out, "moe", "router", local_tokens * e * (a + 4 + 1))
    # expert side: each rank of the ETP·EP group receives ETP·k·(local tokens) (balanced),
    # scaled by the routing imbalance / capacity factor.
    routed = local_tokens * k * c.etp * c.routing_factor
    # a latent MoE's routed tokens are at the latent width; its fc2_latent_proj keeps its input (the
    # combined latent tokens); fc1_latent_proj's input is the norm output above (moe/moe_layer.py)
    _add(out, "moe", "expert_fc1_in", routed * m.moe_token_width * li)
    if m.moe_latent_size:
        _add(out, "moe", "latent_fc2_in", local_tokens * m.moe_latent_size * li)
    _add(out, "moe", "expert_fc1_out", routed * glu * fe / c.etp * a)
    _add(out, "moe_act", "expert_fc2_in", routed * fe / c.etp * li)
    # routing probabilities are applied inside the expert activation (weighted SwiGLU), which keeps
    # them (fp32) beside its input; permutation keeps only int indices
    _add(out, "moe", "routed_probs", routed * 4)
    _add(out, "moe", "permute_indices", routed * 8)
    fs = m.moe_shared_expert_intermediate_size
    if fs:
        _add(out, "shared_experts", "shared_fc1_out", n * glu * fs / t * a)
        _add(out, "shared_experts", "shared_fc2_in", n * fs / t * li)


#: fine-grained activation offloading (``offload_modules``) → the saved tensors each moves to host
#: memory (megatron_facts.md §3.8; names as in this module)
OFFLOAD_ITEMS = {
    "core_attn": ("qkv", "mla_qkv", "softmax_lse", "attn_output_gate"),
    "attn_proj": ("attn_out",),
    "attn_norm": ("attn_norm_input",),
    "qkv_linear": ("attn_norm_output",),
    "mlp_norm": ("mlp_norm_input",),
    "expert_fc1": ("expert_fc1_in",),
    "moe_act": ("expert_fc1_out",),
    "fused_group_mlp": ("expert_fc1_in", "expert_fc1_out", "expert_fc2_in"),
}

#: selective labels that, besides their own tensors, also drop the tensors of a wider module
_WIDER = {"moe": ("moe", "moe_act", "shared_experts")}


def layer_saved_key(m: ModelSpec, layer: int) -> tuple[str, bool, bool, int | None, bool]:
    """What decoder layer ``layer``'s saved tensors depend on besides the context: (attention kind
    of ``attention_kinds``, MoE or not, has an MLP, DeepSeek-V4 compression ratio or None, has its
    own DSA indexer or MiniMax Sparse Attention index branch); two layers with the same key save the same tensors (:func:`layer_activations`)."""
    kinds = m.attention_kinds
    moe = m.moe_layers
    return (
        kinds[layer] if kinds else "full",
        bool(moe[layer]) if moe else False,
        m.layer_has_mlp(layer),
        layer_ratio(m, layer) if m.is_dsv4 else None,
        m.layer_has_indexer(layer) or m.layer_is_msa(layer),
    )


def layer_saved_keys(m: ModelSpec) -> tuple[tuple[str, bool, bool, int | None, bool], ...]:
    """:func:`layer_saved_key` of every decoder layer of ``m`` (index = layer, 0-based), built once
    per model object and kept beside its frozen fields."""
    keys = m.__dict__.get("_layer_saved_keys")
    if keys is None:
        keys = tuple(layer_saved_key(m, li) for li in range(m.num_layers))
        m.__dict__["_layer_saved_keys"] = keys  # a cache beside the frozen fields, not a field
    return cast(tuple, keys)


def layer_activations(m: ModelSpec, layer: int, c: ActContext, modules: frozenset[str]) -> tuple[dict, dict]:
    """Saved tensors of decoder layer ``layer`` for one microbatch on one rank.

    Returns:
        ``(kept, recomputed)``: name → bytes kept until backward, and name → bytes that the selected
        recompute ``modules`` drop (re-materialized one layer at a time during backward).
    """
    kind, moe, has_mlp, ratio, indexer = layer_saved_key(m, layer)
    res_rows = attn_res_rows(m, layer)  # Kimi-K3's AttnRes mixes differ by depth
    key = (id(m), kind, moe, has_mlp, c, modules, ratio, indexer, res_rows)
    hit = _ACT_CACHE.get(key)
    if hit is not None and hit[0] is m:
        return dict(hit[1]), dict(hit[2])
    if len(_ACT_CACHE) > 20000:
        _ACT_CACHE.clear()
    kept, rec = _layer_activations(m, kind, moe, c, modules, has_mlp, ratio)
    if indexer:  # DSA top-k indices and indexer tensors (MSA's block ids and index Q/K): dropped with core_attn
        saved = msa_indexer_saved(m, c.tokens, c.act_bytes) if m.has_msa else dsa_indexer_saved(m, c)
        for name, v in saved.items():
            (rec if "core_attn" in modules else kept)[name] = v
    for _, name, nbytes in attn_res_saved(m, layer, c.seq_tokens):
        kept[name] = kept.get(name, 0.0) + nbytes
    if kind in ("linear", "full") and m.kimi_delta_attention:  # Kimi-K3 gathers its attention input itself
        kept["kimi_gathered_attention_input"] = gathered_input_saved(m, c.tokens, c.seq_tokens, c.lin_in_bytes)
    _ACT_CACHE[key] = (m, kept, rec)
    return dict(kept), dict(rec)


_ACT_CACHE: dict[tuple, tuple] = {}


def _layer_activations(
    m: ModelSpec,
    kind: str,
    moe: bool,
    c: ActContext,
    modules: frozenset[str],
    has_mlp: bool = True,
    dsv4_ratio: int | None = None,
) -> tuple[dict, dict]:
    raw: dict[str, dict[str, float]] = {}
    if dsv4_ratio is None:
        _attention(m, kind, c, raw)
    else:  # DeepSeek-V4: compressed sparse attention and hyper-connections (moeplan.model.dsv4_activations)
        for tag, name, nbytes in dsv4_attention_saved(
            m, dsv4_ratio, c.tokens, c.seq_tokens, c.tp, c.act_bytes, c.lin_in_bytes
        ):
            _add(raw, tag, name, nbytes)
    if has_mlp:
        _mlp(m, moe, c, raw)
    dropped_tags: set[str] = set()
    for mod in modules:
        dropped_tags.update(_WIDER.get(mod, (mod,)))
    kept: dict[str, float] = {}
    rec: dict[str, float] = {}
    for tag, items in raw.items():
        target = rec if tag and tag in dropped_tags else kept
        for name, v in items.items():
            target[name] = target.get(name, 0.0) + v
    return kept, rec


def layer_input_bytes(m: ModelSpec, c: ActContext, distribute: bool = False) -> float:
    """What full recompute keeps per layer: the layer input (residual stream), split by TP with SP
    or with ``distribute_saved_activations``."""
    tok = c.tokens / c.tp if ((c.sp or distribute) and c.tp > 1) else c.tokens
    return tok * m.hidden_size * c.act_bytes


def output_layer_activations(m: ModelSpec, c: ActContext, padded_vocab: int, fused_ce: bool) -> dict[str, float]:
    """Final norm, output projection and loss of one microbatch on the last stage.

    Logits are vocab-parallel (V/TP per token, bf16); Megatron's unfused vocab-parallel cross entropy
    also keeps an fp32 softmax of the same shape (``tensor_parallel/cross_entropy.py``); the fused
    kernels (``cross_entropy_loss_fusion``) keep only the bf16 logits.
    """
    h, a, li = m.hidden_size, c.act_bytes, c.lin_in_bytes
    out = {
        "final_norm_input": c.seq_tokens * h * a,
        "output_layer_input": c.seq_tokens * h * li,
        "logits": c.tokens * padded_vocab / c.tp * a,
    }
    if not fused_ce:
        out["ce_fp32_softmax"] = c.tokens * padded_vocab / c.tp * 4
    return out


def mtp_activations(m: ModelSpec, c: ActContext, padded_vocab: int, fused_ce: bool, modules: frozenset[str]) -> dict:
    """One MTP block: embedding/hidden norms and the 2h→h projection input, one decoder layer (MoE if
    the model's last layer is) or, for a hybrid block (``mtp_layer_pattern``), one layer per pattern
    symbol saving what the decoder's layer of that kind saves, and its own output layer and loss."""
    h, a, li = m.hidden_size, c.act_bytes, c.lin_in_bytes
    out = {"mtp_norms_in": c.seq_tokens * 2 * h * a, "mtp_eh_proj_in": c.seq_tokens * 2 * h * li}
    kinds = list(m.attention_kinds or ("full",) * m.num_layers)
    proxy = m
    if m.mtp_layer_pattern is None and kinds and kinds[-1] != "full":
        proxy = dataclasses.replace(m, attention_kinds=tuple(kinds[:-1]) + ("full",))
    for li in m.mtp_stand_ins:  # a hybrid depth: its pattern's layers, as the decoder's of each kind
        kept, _ = layer_activations(proxy, li, c, modules)
        for k, v in kept.items():
            out["mtp_" + k] = out.get("mtp_" + k, 0.0) + v
    for k, v in output_layer_activations(m, c, padded_vocab, fused_ce).items():
        out["mtp_" + k] = v
    return out
