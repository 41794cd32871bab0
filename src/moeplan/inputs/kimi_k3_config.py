"""Kimi-K3's model fields: the HF ``kimi_k3`` config (its ``kimi_linear`` ``text_config``) → Megatron's.

Kimi-K3 interleaves Kimi Delta Attention (KDA) layers with MLA layers, has attention residuals
(``attn_res_block_size``), a latent MoE with a norm after the combine, two shared experts and the
SiTU gated activation. Megatron Bridge builds its language backbone only (``docs/models/kimi/kimi-k3.md``:
"Only the language backbone is covered"), on megatron-core's ``GPTModel`` with its own layer spec.

Source of every mapping here: Megatron Bridge main (``067f987``, Aug 2026; the model is not in v0.6.0)
``src/megatron/bridge/models/kimi/kimi_k3_bridge.py::provider_bridge`` and ``kimi_k3_layers.py``:

- ``linear_attn_config.kda_layers`` / ``full_attn_layers``: 1-indexed layer numbers that together
  partition ``1..num_hidden_layers`` (KDA → moeplan's ``linear`` kind with ``kimi_delta_attention``;
  the rest MLA);
- ``linear_attn_config.num_heads`` / ``head_dim`` / ``short_conv_kernel_size``: the KDA heads (query,
  key and value alike), head dim and short-convolution kernel;
- MLA with an output gate (``g_proj``: h → heads·v_head_dim, then ``sigmoid``) and no rotary embedding
  (``position_embedding_type = "none"``; the ``qk_rope_head_dim`` part of the keys still exists);
- ``routed_expert_hidden_size`` → ``moe_latent_size``; ``latent_moe_use_norm`` → the latent RMSNorm;
  ``num_experts_per_token`` → top-k; ``num_shared_experts`` × ``moe_intermediate_size`` → the shared
  experts' width;
- ``hidden_act: situ``: a gated activation on a fused gate/up FC1 (``kimi_k3_ops.situ_and_mul``).

The variant Bridge builds is the only one accepted: a full-rank output gate
(``use_full_rank_gate``), MLA with its output gate and without RoPE (``mla_use_output_gate``,
``mla_use_nope``). Any other value is refused naming the field.
"""

from __future__ import annotations

from typing import Any

from moeplan.errors import InputError

#: the top-level ``model_type`` of Kimi-K3 and the ``model_type`` of its language model
KIMI_K3_MODEL_TYPE = "kimi_k3"
KIMI_LINEAR_MODEL_TYPE = "kimi_linear"
#: the vision tower Kimi-K3's config declares, accepted and not counted (Bridge builds the backbone only)
KIMI_K3_VISION = "MoonViT (Kimi-K3)"
#: HF fields → the one value Megatron Bridge's Kimi-K3 layers build (``kimi_k3_layers.py``)
KIMI_K3_VARIANT: dict[str, bool] = {
    "linear_attn_config.use_full_rank_gate": True,
    "mla_use_output_gate": True,
    "mla_use_nope": True,
}


def _lookup(text: dict, dotted: str) -> Any:
    """A field of ``text`` by a dotted path (``linear_attn_config.head_dim``); None when absent."""
    value: Any = text
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def _positive(text: dict, dotted: str) -> int:
    """A required positive integer field by its dotted path.

    Raises:
        InputError: naming ``config.json:<path>`` when it is missing or not a positive integer.
    """
    v = _lookup(text, dotted)
    if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 2**24:
        raise InputError(f"config.json:{dotted}", v, "a positive integer (Kimi-K3's layers need it)")
    return v


def _layer_numbers(text: dict, key: str, num_layers: int) -> set[int]:
    """A ``linear_attn_config`` list of 1-indexed layer numbers as a set.

    Raises:
        InputError: naming the list when it is not integers within ``1..num_layers`` without repeats.
    """
    seq = _lookup(text, f"linear_attn_config.{key}")
    ok = isinstance(seq, list) and all(isinstance(v, int) and not isinstance(v, bool) for v in seq)
    if not ok or len(set(seq)) != len(seq) or any(not 1 <= v <= num_layers for v in seq):
        raise InputError(
            f"config.json:linear_attn_config.{key}", seq, f"a list of distinct layer numbers from 1 to {num_layers}"
        )
    return set(seq)


def kimi_k3_kinds(text: dict, num_layers: int) -> tuple[str, ...]:
    """Per decoder layer (0-based) ``linear`` (KDA) or ``full`` (MLA), from the 1-indexed
    ``kda_layers`` and ``full_attn_layers`` (Bridge: ``is_kda = layer_number in kimi_kda_layers``).

    Raises:
        InputError: naming ``linear_attn_config.full_attn_layers`` when the two lists do not
            partition ``1..num_layers``.
    """
    kda = _layer_numbers(text, "kda_layers", num_layers)
    full = _layer_numbers(text, "full_attn_layers", num_layers)
    if kda & full or len(kda) + len(full) != num_layers:
        raise InputError(
            "config.json:linear_attn_config.full_attn_layers",
            f"{len(full)} MLA + {len(kda)} KDA layers ({len(kda & full)} in both)",
            f"layer lists that together name each of the {num_layers} layers once",
        )
    return tuple("linear" if i + 1 in kda else "full" for i in range(num_layers))


def check_kimi_k3_variant(top: dict, text: dict) -> None:
    """Only the Kimi-K3 variant Megatron Bridge builds: inside a ``kimi_k3`` wrapper (Bridge registers
    ``KimiK3ForConditionalGeneration`` only; a bare Kimi-Linear has no bridge) and with the values of
    :data:`KIMI_K3_VARIANT`.

    Raises:
        InputError: naming the field, its value and the one value modelled.
    """
    if str(top.get("model_type") or "") != KIMI_K3_MODEL_TYPE:
        raise InputError(
            "config.json:model_type",
            top.get("model_type"),
            "a model moeplan can build: a kimi_linear language model inside Kimi-K3's kimi_k3 config "
            "(Megatron Bridge builds Kimi Delta Attention for KimiK3ForConditionalGeneration only)",
        )
    if not isinstance(text.get("linear_attn_config"), dict):
        raise InputError("config.json:linear_attn_config", text.get("linear_attn_config"), "a mapping")
    for dotted, value in KIMI_K3_VARIANT.items():
        got = _lookup(text, dotted)
        if got is not value:
            raise InputError(
                f"config.json:{dotted}",
                got,
                f"{value} (the Kimi-K3 layer Megatron Bridge builds; another is not modelled)",
            )
    act = text.get("hidden_act")
    if act != "situ":
        raise InputError("config.json:hidden_act", act, "situ (Kimi-K3's gated activation)")


def kimi_k3_fields(top: dict, text: dict, model_type: str, num_layers: int) -> dict[str, Any]:
    """The Kimi-K3 fields of a ``kimi_linear`` text config (see the module docstring for each source);
    empty for other families. The MoE fields apply only where the model has MoE layers.

    Raises:
        InputError: naming the field, for a variant Bridge does not build or a malformed layer list.
    """
    if model_type != KIMI_LINEAR_MODEL_TYPE:
        return {}
    check_kimi_k3_variant(top, text)
    heads = _positive(text, "linear_attn_config.num_heads")
    head_dim = _positive(text, "linear_attn_config.head_dim")
    experts_ffn = _positive(text, "moe_intermediate_size")
    return {
        "attention_kinds": kimi_k3_kinds(text, num_layers),
        "linear_num_key_heads": heads,
        "linear_num_value_heads": heads,
        "linear_key_head_dim": head_dim,
        "linear_value_head_dim": head_dim,
        "linear_conv_kernel_dim": _positive(text, "linear_attn_config.short_conv_kernel_size"),
        "kimi_delta_attention": True,
        "attention_output_gate": True,
        "qk_layernorm": True,
        "attn_res_block_size": _positive(text, "attn_res_block_size"),
        "moe_latent_size": _positive(text, "routed_expert_hidden_size"),
        "moe_latent_norm": bool(text.get("latent_moe_use_norm")),
        "moe_router_topk": _positive(text, "num_experts_per_token"),
        "moe_shared_expert_intermediate_size": _positive(text, "num_shared_experts") * experts_ffn,
        "moe_shared_expert_gate": False,
        "vision_not_counted": KIMI_K3_VISION if isinstance(top.get("vision_config"), dict) else None,
    }
