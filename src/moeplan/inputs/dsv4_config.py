"""DeepSeek-V4's model fields: the HF ``deepseek_v4`` config → megatron-core's ``dsv4_hybrid`` fields.

DeepSeek-V4 (Flash, Pro) is an MLA-style model whose core attention is a sliding window plus a
compressed KV history chosen per layer (``compress_ratios``: 0 window only, 4 compressed sparse
attention whose indexer picks ``index_topk`` compressed entries, 128 heavily compressed attention
over every compressed entry), with manifold hyper-connections (``hc_mult`` residual streams), a
grouped low-rank output projection (``o_groups`` × ``o_lora_rank``) and hash-routed first MoE layers
(``num_hash_layers``).

Sources: Megatron Bridge ``models/deepseek/deepseek_v4_bridge.py::provider_bridge`` (v0.6.0: the
HF → provider mapping copied here) and megatron-core dev (@d48bd6b)
``transformer/transformer_config.py`` (``csa_compress_ratios`` of ``num_layers + mtp_num_layers``
entries, each 0, 4 or 128; ``qk_head_dim = kv_lora_rank = v_head_dim - qk_pos_emb_head_dim``).
"""

from __future__ import annotations

from typing import Any

from moeplan.errors import InputError

#: the compression ratios megatron-core builds (``transformer_config.py``: "must be 0, 4, or 128")
COMPRESS_RATIOS: tuple[int, ...] = tuple(sorted({0, 4, 128}))
#: the ratio whose layers carry the sparse indexer (``csa.py``: ``compress_ratio == 4``)
INDEXED_RATIO = 4

#: plausible range of each DeepSeek-V4 integer field (``inputs.model_spec.MODEL_INT_RANGES``)
DSV4_INT_RANGES: dict[str, tuple[int, int]] = {
    "csa_mtp_compress_ratio": (min(COMPRESS_RATIOS), max(COMPRESS_RATIOS)),
    "csa_window_size": (1, 2**30),
    "o_groups": (1, 2**16),
    "o_lora_rank": (1, 2**24),
    "num_residual_streams": (1, 64),
    "mhc_sinkhorn_iterations": (1, 1000),
    "moe_n_hash_layers": (0, 10_000),
}
#: DeepSeek-V4 integer fields with a default that may not be unset
DSV4_NOT_NULL = ("csa_mtp_compress_ratio", "num_residual_streams", "mhc_sinkhorn_iterations", "moe_n_hash_layers")


def compress_ratios_value(field: str, value: Any) -> tuple[int, ...]:
    """A ``csa_compress_ratios`` value: a list of 0 / 4 / 128, one per decoder layer.

    Raises:
        InputError: naming ``field`` for anything else.
    """
    what = f"a list of {', '.join(str(r) for r in COMPRESS_RATIOS)}, one per decoder layer"
    if not isinstance(value, (list, tuple)) or not value or len(value) > 10_000:
        raise InputError(field, value, what)
    for r in value:
        if isinstance(r, bool) or r not in COMPRESS_RATIOS:
            raise InputError(field, r, what)
    return tuple(int(r) for r in value)


def dsv4_required(ratios: tuple[int, ...]) -> list[str]:
    """The fields a complete DeepSeek-V4 model needs: the MLA-style widths, the output groups and the
    window; the indexer's heads, head dim and top-k when a layer compresses by 4."""
    need = ["q_lora_rank", "qk_pos_emb_head_dim", "v_head_dim", "o_groups", "o_lora_rank", "csa_window_size"]
    if INDEXED_RATIO in ratios:
        need += ["dsa_indexer_n_heads", "dsa_indexer_head_dim", "dsa_indexer_topk"]
    return need


def _int(text: dict, key: str, default: int | None = None) -> int:
    v = text.get(key, default)
    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= 2**31 - 1:
        raise InputError(f"config.json:{key}", v, "an integer from 0 to 2147483647 (DeepSeek-V4 needs it)")
    return v


def _ratios(text: dict, num_layers: int, mtp: int) -> tuple[tuple[int, ...], int]:
    """(decoder ratios, MTP ratio) of ``compress_ratios``: ``num_layers`` entries and one per MTP layer
    (Bridge ``_dsv4_compress_ratios`` appends 0 for MTP when only the decoder's are given).

    Raises:
        InputError: naming ``compress_ratios`` when it is not such a list, or its MTP entries differ.
    """
    raw = text.get("compress_ratios")
    ratios = compress_ratios_value("config.json:compress_ratios", raw)
    if len(ratios) not in (num_layers, num_layers + mtp):
        raise InputError(
            "config.json:compress_ratios",
            f"{len(ratios)} entries",
            f"num_hidden_layers (+ MTP) = {num_layers} (+{mtp})",
        )
    tail = set(ratios[num_layers:]) or {0}
    if len(tail) > 1:
        raise InputError("config.json:compress_ratios", list(ratios[num_layers:]), "one ratio for every MTP layer")
    return ratios[:num_layers], tail.pop()


def dsv4_fields(text: dict, model_type: str, num_layers: int) -> dict[str, Any]:
    """The megatron-core fields of a ``deepseek_v4`` config (Bridge ``DeepSeekV4Bridge.provider_bridge``):
    MLA with ``v_head_dim`` = ``head_dim`` and ``qk_head_dim`` = ``kv_lora_rank`` = ``head_dim`` −
    ``qk_rope_head_dim`` (megatron-core derives both), the per-layer ratios, the window, the indexer
    (``index_*`` → ``dsa_indexer_*``), the output groups, hyper-connections (``hc_mult`` →
    ``num_residual_streams``) and hash layers (its ``swiglu_limit`` clamps a SiLU SwiGLU, megatron-core
    ``activation_func_clamp_value``: not gpt-oss's gate, so ``model_from_hf_config`` keeps
    ``clamped_glu`` false). Empty for other families.

    Raises:
        InputError: naming a missing or malformed DeepSeek-V4 field.
    """
    if model_type != "deepseek_v4":
        return {}
    mtp = _int(text, "num_nextn_predict_layers", 0)
    ratios, mtp_ratio = _ratios(text, num_layers, mtp)
    head, rope = _int(text, "head_dim"), _int(text, "qk_rope_head_dim")
    if not 0 < rope < head:
        raise InputError("config.json:qk_rope_head_dim", rope, f"a rotary part smaller than head_dim ({head})")
    heads = _int(text, "num_attention_heads")
    return {
        "multi_latent_attention": True,
        "num_query_groups": heads,
        "kv_channels": None,
        "qk_head_dim": head - rope,
        "kv_lora_rank": head - rope,
        "qk_pos_emb_head_dim": rope,
        "v_head_dim": head,
        "qk_layernorm": True,
        "sliding_window": None,
        "csa_compress_ratios": ratios,
        "csa_mtp_compress_ratio": mtp_ratio,
        "csa_window_size": _int(text, "sliding_window"),
        "dsa_indexer_n_heads": _int(text, "index_n_heads"),
        "dsa_indexer_head_dim": _int(text, "index_head_dim"),
        "dsa_indexer_topk": _int(text, "index_topk"),
        "o_groups": _int(text, "o_groups"),
        "o_lora_rank": _int(text, "o_lora_rank"),
        "num_residual_streams": _int(text, "hc_mult", 1) or 1,
        "mhc_sinkhorn_iterations": _int(text, "hc_sinkhorn_iters", 20) or 20,
        "moe_n_hash_layers": _int(text, "num_hash_layers", 0),
    }


def check_dsv4(m: Any, prefix: str) -> None:
    """What megatron-core's ``dsv4_hybrid`` asserts of a model: MLA, ``num_attention_heads ·
    v_head_dim`` divisible by ``o_groups`` (``DSv4HybridSelfAttention.__init__``), the MTP ratio one of
    0 / 4 / 128, and no more hash layers than decoder layers.

    Raises:
        InputError: naming ``prefix`` + the field and the numbers that disagree.
    """
    if not m.is_dsv4:
        return
    if not m.multi_latent_attention:
        raise InputError(f"{prefix}multi_latent_attention", False, "true: DeepSeek-V4 attention is MLA-based")
    if m.csa_mtp_compress_ratio not in COMPRESS_RATIOS:
        raise InputError(f"{prefix}csa_mtp_compress_ratio", m.csa_mtp_compress_ratio, "0, 4 or 128")
    width = (m.num_attention_heads or 0) * (m.v_head_dim or 0)
    if m.o_groups and width % m.o_groups:
        raise InputError(f"{prefix}o_groups", m.o_groups, f"a divisor of num_attention_heads · v_head_dim ({width})")
    if m.num_layers is not None and m.moe_n_hash_layers > m.num_layers:
        raise InputError(f"{prefix}moe_n_hash_layers", m.moe_n_hash_layers, f"at most num_layers ({m.num_layers})")
