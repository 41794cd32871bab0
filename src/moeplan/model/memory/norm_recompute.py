"""What ``layernorm`` selective recompute can free on a layout, stated where the user reads the estimate.

Megatron-Core recomputes a norm only where it is a module of its own (transformer_layer.py@core_v0.17.0
L404-466):

- Gated DeltaNet: its spec fuses the input norm into ``in_proj`` the same way (experimental_attention_
  variant_module_specs.py@core_v0.17.0 L68-72);
- softmax (non-MLA) attention: the TE layer spec fuses the input norm into ``linear_qkv``
  (``TELayerNormColumnParallelLinear``, ``input_layernorm`` is ``IdentityOp``; models/gpt/
  gpt_layer_specs.py@core_v0.17.0 L310-318), whose ``LayerNormLinear`` saves its norm output for the
  weight gradient (transformer_engine/pytorch/module/layernorm_linear.py@v2.14 L409-472);
- dense MLP: the norm is fused into ``linear_fc1`` (``get_mlp_module_spec_for_backend`` L525-530); only
  ``mlp`` recompute, which checkpoints the whole MLP, drops its output;
- MoE: ``pre_mlp_layernorm`` is a ``TENorm`` and is recomputed, unless a TE graph captures the router and
  returns the norm output as a static output (``can_recompute_pre_mlp_layernorm_for_cudagraph``,
  L415-461; :func:`moeplan.model.memory.graph_memory.pre_mlp_norm_recompute_off`).

The activation model applies the same rules (:func:`moeplan.model.activations._input_norm_tag`); this
module only says, in the estimate's assumptions, which norm outputs the selected ``layernorm`` keeps.
"""

from __future__ import annotations

from moeplan.i18n.messages import Items, Message, msg
from moeplan.inputs.model_spec import ModelSpec
from moeplan.inputs.resolved import Scenario
from moeplan.model.activations import ActContext
from moeplan.model.memory.graph_memory import pre_mlp_norm_recompute_off
from moeplan.units import GIB_BYTES

#: attention kinds without a softmax input norm of their own to fuse (linear attention, Mamba, none)
NON_SOFTMAX_KINDS = ("linear", "mamba", "none")


def _fused_attention_norm(m: ModelSpec) -> bool:
    """True when some layer's softmax attention has its input norm fused into ``linear_qkv``."""
    if m.multi_latent_attention or m.is_dsv4 or m.extra_layer_norms > 0:
        return False
    kinds = m.attention_kinds or ("full",) * m.num_layers
    return any(k not in NON_SOFTMAX_KINDS for k in kinds)


def _fused_gdn_norm(m: ModelSpec) -> bool:
    """True when some Gated DeltaNet layer has its input norm fused into ``in_proj``
    (experimental_attention_variant_module_specs.py@core_v0.17.0 L68-72; Kimi Delta Attention, Bridge's
    own module, is not that spec)."""
    if m.extra_layer_norms > 0 or m.kimi_delta_attention:
        return False
    return "linear" in (m.attention_kinds or ())


def _dense_mlp_layers(m: ModelSpec) -> bool:
    """True when some layer has a dense (non-MoE) MLP, whose norm is fused into ``linear_fc1``."""
    if m.extra_layer_norms > 0:
        return False
    moe = m.moe_layers or (m.is_moe,) * m.num_layers
    return any(m.layer_has_mlp(li) and not moe[li] for li in range(m.num_layers))


def layernorm_recompute_note(s: Scenario, ctx: ActContext, modules: frozenset[str]) -> Message | None:
    """The note for a selective ``layernorm`` recompute that leaves norm outputs saved (None when it
    is not selected or frees every norm output): the reasons, and the GiB per layer and microbatch
    that stay (one norm output ``[s/(CP·TP with SP), b, h]`` at the linear-input width per norm).

    Raises nothing; a scenario without a complete model gets no note."""
    if "layernorm" not in modules or s.model is None:
        return None
    m = s.complete_model
    reasons: list[Message] = []
    attn = _fused_attention_norm(m)
    if attn:
        reasons.append(msg("mem_128k.reason_fused_attention_norm"))
    if _fused_gdn_norm(m):
        attn = True
        reasons.append(msg("release_truths.reason_fused_gdn_norm"))
    dense = "mlp" not in modules and _dense_mlp_layers(m)
    if dense:
        reasons.append(msg("mem_128k.reason_fused_mlp_norm"))
    held = m.is_moe and pre_mlp_norm_recompute_off(s, modules)
    if held:
        dispatcher = s.layout.moe_token_dispatcher_type or "alltoall"
        reasons.append(msg("mem_128k.reason_pre_mlp_norm_held", dispatcher=dispatcher))
    if not reasons:
        return None
    norms = int(attn) + int(dense or held)
    gib = norms * ctx.seq_tokens * m.hidden_size * ctx.lin_in_bytes / GIB_BYTES
    return msg("mem_128k.layernorm_keeps", gib=gib, reasons=Items(reasons, " · "))
