"""MiniMax-M3's model fields: the HF ``minimax_m3`` config → moeplan's (Megatron's names where Megatron has them).

MiniMax-M3 is a GQA MoE decoder whose attention layers past the first few run MiniMax Sparse
Attention (MSA, arXiv 2606.13392): an Index Branch (per GQA group one index-query head of
``sparse_index_dim``, one shared index-key head, both RMS-normed and roped like the main Q/K) scores
every causally visible key, max-pools the scores over blocks of ``sparse_block_size`` tokens and keeps,
per query and GQA group, the ``sparse_topk_blocks`` best blocks (the newest ``sparse_local_block`` and
the first ``sparse_init_block`` forced among them); the Main Branch runs exact softmax attention over
the selected blocks only. ``sparse_disable_index_value`` set on a sparse layer means a score-only index
branch (no index value / output projections). The paper distils the index branch against the Main
Branch's attention over blocks with a KL loss whose gradient is detached from the backbone.

Sources of the mapping: Megatron Bridge v0.6.0 ``src/megatron/bridge/models/minimax_m3/minimax_m3_bridge.py``
(``provider_bridge``: ``dense_intermediate_size`` → the dense layers' ``ffn_hidden_size``,
``intermediate_size`` → ``moe_ffn_hidden_size``, ``n_shared_experts`` × ``shared_intermediate_size`` →
the shared expert, ``moe_layer_freq`` per layer, ``mtp_num_layers`` forced to None: the checkpoint
ships no MTP weights; ``sparse_attention_freq`` → ``lightning_indexer_layers``) and
``modeling_minimax_m3_vl.py::MiniMaxM3LightningIndexerState`` (``q_proj`` index heads·dim × hidden,
``k_proj`` dim × hidden, ``q_norm`` / ``k_norm`` of dim each). Megatron runs none of the sparse path:
Bridge keeps the index weights as frozen state and trains full causal attention on every layer
(its ``docs/models/minimax/minimax-m3.md``, "Known Limitations").
"""

from __future__ import annotations

from typing import Any

from moeplan.errors import InputError

#: the ``model_type`` of MiniMax-M3's language model
MINIMAX_M3_MODEL_TYPE = "minimax_m3"
#: the fields of ``sparse_attention_config`` moeplan reads; any other is refused by name
MSA_CONFIG_KEYS = frozenset(
    {
        "use_sparse_attention",
        "sparse_attention_freq",
        "sparse_disable_index_value",
        "sparse_block_size",
        "sparse_topk_blocks",
        "sparse_num_index_heads",
        "sparse_index_dim",
        "sparse_init_block",
        "sparse_local_block",
        "sparse_score_type",
    }
)
#: the block score moeplan models: the max over the block's index scores (``sparse_score_type``)
MSA_SCORE_TYPE = "max"
#: plausible range of each MSA integer field (ModelSpec name → (low, high))
MSA_INT_RANGES: dict[str, tuple[int, int]] = {
    "msa_block_size": (1, 2**20),
    "msa_topk_blocks": (1, 2**20),
    "msa_index_n_heads": (1, 2**16),
    "msa_index_head_dim": (1, 2**16),
    "msa_init_blocks": (0, 2**20),
    "msa_local_blocks": (0, 2**20),
}
#: MSA integer fields that always hold a value (never unset)
MSA_NOT_NULL = ("msa_init_blocks", "msa_local_blocks")


def _width(text: dict, key: str, low: int, default: int | None = None) -> int:
    """An integer field of the language model's config from ``low`` to 2^31 − 1 (``default`` when absent
    or null; required when the default is None).

    Raises:
        InputError: naming ``config.json:<key>``.
    """
    v = text.get(key)
    v = default if v is None else v
    if isinstance(v, bool) or not isinstance(v, int) or not low <= v <= 2**31 - 1:
        raise InputError(f"config.json:{key}", v, f"an integer from {low} to {2**31 - 1:,}")
    return v


def _field(key: str) -> str:
    return f"config.json:sparse_attention_config.{key}"


def _int(cfg: dict, key: str, low: int, default: int | None = None) -> int:
    """An integer of ``sparse_attention_config`` of at least ``low`` (``default`` when absent; required
    when the default is None).

    Raises:
        InputError: naming ``config.json:sparse_attention_config.<key>``.
    """
    v = cfg.get(key, default)
    if isinstance(v, bool) or not isinstance(v, int) or not low <= v <= 2**20:
        raise InputError(_field(key), v, f"an integer from {low} to {2**20:,}")
    return v


def _flags(cfg: dict, key: str, num_layers: int) -> tuple[bool, ...]:
    """A per-layer 0/1 list of ``sparse_attention_config`` as flags.

    Raises:
        InputError: when it is not a list of 0 / 1 with one entry per layer.
    """
    seq = cfg.get(key)
    if not isinstance(seq, list) or len(seq) != num_layers or any(v not in {0, 1} or isinstance(v, bool) for v in seq):
        shown = f"{len(seq)} entries" if isinstance(seq, list) else seq
        raise InputError(_field(key), shown, f"a list of 0 / 1 with one entry per layer ({num_layers})")
    return tuple(v == 1 for v in seq)


def _check_variant(cfg: dict, layers: tuple[bool, ...], num_layers: int) -> None:
    """The MSA variant moeplan models: max-pooled block scores and a score-only index branch.

    Raises:
        InputError: naming the field of another variant (or an unknown field) and what is modelled.
    """
    odd = sorted(set(cfg) - MSA_CONFIG_KEYS)
    if odd:
        raise InputError(_field(odd[0]), cfg[odd[0]], f"a field moeplan models ({', '.join(sorted(MSA_CONFIG_KEYS))})")
    score = cfg.get("sparse_score_type", MSA_SCORE_TYPE)
    if score != MSA_SCORE_TYPE:
        raise InputError(
            _field("sparse_score_type"), score, "'max' (another block score of the index branch is not modelled)"
        )
    no_value = _flags(cfg, "sparse_disable_index_value", num_layers)
    bad = [i for i, sparse in enumerate(layers) if sparse and not no_value[i]]
    if bad:
        raise InputError(
            _field("sparse_disable_index_value"),
            f"0 on sparse layer {bad[0]}",
            "1 on every sparse layer (an index branch with its own value / output projections is not modelled)",
        )


def msa_fields(text: dict, model_type: str, num_layers: int) -> dict[str, Any]:
    """MiniMax-M3's fields (empty for any other ``model_type``): the dense layers' MLP width, the expert
    and shared-expert widths, and MSA's per-layer flags, block size, top-k blocks, index heads and
    head dim, and forced initial / local blocks (``sparse_attention_config``; none when
    ``use_sparse_attention`` is false).

    Raises:
        InputError: naming a missing or malformed field, or one of an MSA variant moeplan does not model.
    """
    if model_type != MINIMAX_M3_MODEL_TYPE:
        return {}
    out: dict[str, Any] = {
        "ffn_hidden_size": _width(text, "dense_intermediate_size", 1),
        "moe_ffn_hidden_size": _width(text, "intermediate_size", 1),
    }
    shared = _width(text, "shared_intermediate_size", 0, 0)
    n_shared = _width(text, "n_shared_experts", 0, 1 if shared else 0)
    out["moe_shared_expert_intermediate_size"] = n_shared * shared or None
    cfg = text.get("sparse_attention_config")
    if cfg is None or (isinstance(cfg, dict) and not cfg.get("use_sparse_attention")):
        return out
    if not isinstance(cfg, dict):
        raise InputError("config.json:sparse_attention_config", cfg, "a mapping (the block-sparse attention)")
    layers = _flags(cfg, "sparse_attention_freq", num_layers)
    _check_variant(cfg, layers, num_layers)
    topk = _int(cfg, "sparse_topk_blocks", 1)
    init, local = _int(cfg, "sparse_init_block", 0, 0), _int(cfg, "sparse_local_block", 0, 0)
    if init + local > topk:
        raise InputError(
            _field("sparse_local_block"), local, f"forced blocks within the top-k ({init} + {local} > {topk})"
        )
    out.update(
        msa_layers=layers if any(layers) else None,
        msa_block_size=_int(cfg, "sparse_block_size", 1),
        msa_topk_blocks=topk,
        msa_index_n_heads=_int(cfg, "sparse_num_index_heads", 1),
        msa_index_head_dim=_int(cfg, "sparse_index_dim", 1),
        msa_init_blocks=init,
        msa_local_blocks=local,
    )
    return out
