"""Model specification read from a Hugging Face ``config.json``.

A :class:`ModelSpec` holds the architecture facts the rules, memory and time models need, under
Megatron-Core's field names (``num_layers``, ``hidden_size``, ``num_query_groups``, ``kv_channels``,
``num_moe_experts``, ``moe_router_topk``, ``moe_ffn_hidden_size``, ...). Per-layer facts (MoE or dense
MLP, full / sliding / linear attention) are explicit tuples so that hybrid models need no guessing.

Sources for the HF → Megatron mapping: the HF modelling files of each family (transformers
``modeling_deepseek_v3``, ``modeling_qwen3_moe``, ``modeling_qwen3_next``, ``modeling_qwen3_vl_moe``,
``modeling_gpt_oss``, ``modeling_mixtral``, ``modeling_llama4``, ``modeling_glm4_moe``) and Megatron
Bridge's model providers, which copy the same fields.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, cast

from moeplan.errors import InputError, UnknownNameError
from moeplan.inputs.dsv4_config import (
    DSV4_INT_RANGES,
    DSV4_NOT_NULL,
    check_dsv4,
    compress_ratios_value,
    dsv4_fields,
    dsv4_required,
)
from moeplan.inputs.hf_families import KNOWN_MODEL_TYPES, UNCOUNTED_VISION_TYPES, is_moonvit_config, refuse_unmodelled
from moeplan.inputs.kimi_k3_config import KIMI_K3_MODEL_TYPE, kimi_k3_fields
from moeplan.inputs.msa_config import MSA_INT_RANGES, MSA_NOT_NULL, msa_fields
from moeplan.inputs.policy import bad_char

AttentionKind = Literal["full", "sliding", "chunked", "linear", "mamba", "none"]
#: the token-mixer kinds a layer may have (:data:`AttentionKind`): softmax attention (full / sliding /
#: chunked), Gated DeltaNet (``linear``), a Mamba-2 mixer (``mamba``) or none (the MLP-only layers of
#: a Mamba hybrid)
ATTENTION_KINDS: tuple[str, ...] = ("full", "sliding", "chunked", "linear", "mamba", "none")
#: the layer symbols of Megatron's ``hybrid_layer_pattern`` (``mamba_hybrid_layer_allocation.Symbols``)
#: moeplan models: Mamba-2, attention, MoE, dense MLP
HYBRID_SYMBOLS = "M*E-"

_WIDTH = (1, 2**24)  # elements: far beyond any published width, far short of overflowing a float
_HEADS = (1, 2**16)
_TOKENS = (1, 2**30)
#: plausible range of each integer model field (overrides and config.json): 10^4 layers, 2^24-element
#: widths and vocabularies, 2^16 heads and experts, 2^30-token windows
MODEL_INT_RANGES: dict[str, tuple[int, int]] = {
    "num_layers": (1, 10_000),
    "mtp_num_layers": (0, 100),
    "vocab_size": _WIDTH,
    "num_moe_experts": _HEADS,
    "moe_router_topk": _HEADS,
    "moe_router_num_groups": _HEADS,
    "moe_router_group_topk": _HEADS,
    "linear_conv_kernel_dim": (1, 1024),
    "extra_layer_norms": (0, 64),
    "attn_res_block_size": (1, 10_000),
    "mamba_conv_kernel": (1, 1024),
    "mamba_chunk_size": (1, 2**16),
    "mamba_num_heads": _HEADS,
    "mamba_num_groups": _HEADS,
    "mamba_head_dim": _WIDTH,
    "mamba_state_dim": _WIDTH,
    **DSV4_INT_RANGES,
    **MSA_INT_RANGES,
    "dsa_indexer_n_heads": _HEADS,
    "dsa_indexer_head_dim": _WIDTH,
    "dsa_indexer_topk": _TOKENS,
    "dsa_indexer_topk_freq": (1, 10_000),
    "dsa_indexer_skip_topk_offset": (0, 10_000),
    **{
        k: _HEADS
        for k in (
            "num_attention_heads",
            "num_query_groups",
            "global_num_query_groups",
            "linear_num_key_heads",
            "linear_num_value_heads",
        )
    },
    **{k: _TOKENS for k in ("max_position_embeddings", "sliding_window", "attention_chunk_size")},
    **{
        k: _WIDTH
        for k in (
            "hidden_size",
            "ffn_hidden_size",
            "kv_channels",
            "global_kv_channels",
            "q_lora_rank",
            "kv_lora_rank",
            "qk_head_dim",
            "qk_pos_emb_head_dim",
            "v_head_dim",
            "moe_ffn_hidden_size",
            "moe_shared_expert_intermediate_size",
            "moe_latent_size",
            "linear_key_head_dim",
            "linear_value_head_dim",
        )
    },
}
#: text model fields (at most 200 printable characters) and the one field with a closed set of values
_TEXT_FIELDS = ("name", "model_type", "source")
_NORMALIZATIONS = ("RMSNorm", "LayerNorm")
#: integer fields with a default that may not be unset
_NOT_NULL = ("mtp_num_layers", "dsa_indexer_topk_freq", "dsa_indexer_skip_topk_offset", *DSV4_NOT_NULL, *MSA_NOT_NULL)


def _override_list(key: str, value: Any) -> tuple:
    """A per-layer override (``moe_layers``: booleans; ``attention_kinds``: kinds) as a tuple.

    Raises:
        InputError: not a list, longer than the layer cap, or an item of the wrong kind.
    """
    field = f"model_overrides.{key}"
    top = MODEL_INT_RANGES["num_layers"][1]
    flags = key in ("moe_layers", "msa_layers")
    what = "a list of true/false, one per layer" if flags else f"a list of {', '.join(ATTENTION_KINDS)}"
    if not isinstance(value, (list, tuple)) or len(value) > top:
        raise InputError(field, value, f"{what} (at most {top} entries)")
    for item in value:
        ok = isinstance(item, bool) if flags else item in ATTENTION_KINDS and isinstance(item, str)
        if not ok:
            raise InputError(field, item, what)
    return tuple(value)


def _hybrid_pattern(field: str, value: Any) -> str:
    """A Megatron hybrid layer pattern: one of :data:`HYBRID_SYMBOLS` per layer.

    Raises:
        InputError: naming ``field`` when it is not such a string.
    """
    top = MODEL_INT_RANGES["num_layers"][1]
    what = f"a string of the layer symbols {HYBRID_SYMBOLS} (M Mamba-2, * attention, E MoE, - MLP), one per layer"
    if not isinstance(value, str) or not value or len(value) > top:
        raise InputError(field, value, what)
    odd = sorted(set(value) - set(HYBRID_SYMBOLS))
    if odd:
        raise InputError(field, value, f"{what}; {odd[0]!r} is a layer kind moeplan does not model")
    return value


def hybrid_kinds(pattern: str) -> tuple[tuple[str, ...], tuple[bool, ...]]:
    """(token-mixer kind, MoE flag) per layer of a hybrid pattern: ``M`` → ``mamba``, ``*`` →
    ``full`` attention, ``E`` / ``-`` → no mixer (``none``); MoE only on ``E``
    (megatron-core ``mamba_hybrid_layer_allocation``: each symbol is one whole layer)."""
    kinds = tuple("mamba" if c == "M" else "full" if c == "*" else "none" for c in pattern)
    return kinds, tuple(c == "E" for c in pattern)


def override_value(key: str, value: Any, is_bool: bool) -> Any:
    """A model override checked and typed like the rest of the schema: booleans for the switches,
    integers within :data:`MODEL_INT_RANGES` (None where the field may be unset), per-layer lists,
    a normalization name, short plain text.

    Raises:
        InputError: naming ``model_overrides.KEY``, the value (cut) and what is allowed.
    """
    field = f"model_overrides.{key}"
    if is_bool:
        if not isinstance(value, bool):
            raise InputError(field, value, "true or false")
        return value
    if key == "csa_compress_ratios":
        return None if value is None else compress_ratios_value(field, value)
    if key in ("moe_layers", "attention_kinds", "msa_layers"):
        return None if value is None else _override_list(key, value)
    if key in ("hybrid_layer_pattern", "mtp_layer_pattern"):
        return None if value is None else _hybrid_pattern(field, value)
    if key == "normalization":
        if value not in _NORMALIZATIONS or not isinstance(value, str):
            raise InputError(field, value, " or ".join(_NORMALIZATIONS))
        return value
    if key in _TEXT_FIELDS:
        if value is None and key == "model_type":
            return None
        if not isinstance(value, str) or not value or len(value) > 200 or bad_char(value) is not None:
            raise InputError(field, value, "a name of 1 to 200 printable characters")
        return value
    if key == "dsa_indexer_loss_coeff":
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1e6:
            raise InputError(field, value, "a number from 0 to 1e6 (0 leaves the DSA indexer untrained)")
        return float(value)
    lo, hi = MODEL_INT_RANGES[key]
    if value is None and key not in _NOT_NULL:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise InputError(field, value, f"an integer from {lo} to {hi:,}")
    return value


@dataclass(frozen=True, kw_only=True)
class VisionSpec:
    """Vision tower of a VLM (ViT + patch merger / projector).

    Attributes:
        kind: ``qwen3_vl`` (Qwen3-VL / Qwen3.5: Conv3d patches, learned position table, 2-D merge,
            optional DeepStack mergers), ``llama4`` (unfold-conv patches, class token, pixel shuffle) or
            ``moonvit`` (Kimi-K2.5's MoonViT3d: Conv2d patches, learned 2-D position table, a final
            LayerNorm, a 2-D patch merger MLP; built from the Hugging Face modules, so not split by TP).
        depth: number of ViT blocks.
        hidden_size, intermediate_size, num_heads: ViT widths (elements).
        patch_size: spatial patch edge in pixels; temporal_patch_size: frames per patch (video).
        spatial_merge_size: merge factor per side (image tokens to the LLM = patches / merge**2).
        out_hidden_size: width handed to the language model.
        deepstack_visual_indexes: ViT blocks whose features DeepStack injects (one extra merger each).
    """

    kind: Literal["qwen3_vl", "llama4", "moonvit"]
    depth: int
    hidden_size: int
    intermediate_size: int
    num_heads: int
    patch_size: int
    in_channels: int = 3
    temporal_patch_size: int = 1
    spatial_merge_size: int = 1
    out_hidden_size: int = 0
    num_position_embeddings: int = 0
    deepstack_visual_indexes: tuple[int, ...] = ()
    image_size: int = 0
    pixel_shuffle_ratio: float = 1.0
    projector_input_dim: int = 0
    projector_output_dim: int = 0
    text_hidden_size: int = 0
    from_supplement: bool = False

    @property
    def tp_sharded(self) -> bool:
        """True when TP splits the tower's weights, FLOPs and activations (Megatron's own ViT); False
        for MoonViT, which Megatron Bridge builds from the Hugging Face modules on every TP rank whole
        (``kimi_vl/modeling_kimi_k25_vl.py``: ``MoonViT3dPretrainedModel`` and ``PatchMergerMLP`` with
        ``hook_hf_module_setattr_for_tp_grad_sync``, Bridge v0.6.0)."""
        return self.kind != "moonvit"


#: fields a model must give before anything but the rules can use it (the rest have defaults or
#: are optional by architecture: MLA, MoE, linear attention, vision)
REQUIRED_FIELDS = ("num_layers", "hidden_size", "num_attention_heads", "vocab_size")


@dataclass(frozen=True, kw_only=True)
class PartialModelSpec:
    """Architecture of a decoder-only (M)LLM, with Megatron-Core field names, possibly incomplete.

    Widths are element counts; ``num_layers`` excludes MTP layers (``mtp_num_layers``).
    ``moe_layers[i]`` is True when decoder layer ``i`` has a routed-expert MLP;
    ``attention_kinds[i]`` says which attention layer ``i`` uses.

    Any optional field may be None for a partial (user-built) model. Only the rules take a partial
    model (a rule that needs a missing field skips with an info finding); parameter counts, memory
    and step time need a :class:`ModelSpec`, which :meth:`completed` gives when the required fields
    are there.
    """

    name: str
    model_type: str | None = None
    num_layers: int | None = None
    hidden_size: int | None = None
    ffn_hidden_size: int | None = None
    num_attention_heads: int | None = None
    num_query_groups: int | None = None
    kv_channels: int | None = None
    vocab_size: int | None = None
    max_position_embeddings: int | None = None
    untie_embeddings_and_output_weights: bool = True
    gated_linear_unit: bool = True
    clamped_glu: bool = False
    normalization: Literal["RMSNorm", "LayerNorm"] = "RMSNorm"
    add_bias_linear: bool = False
    add_qkv_bias: bool = False
    qk_layernorm: bool = False
    #: QK norm over the whole layer's queries and keys at once (MiniMax-M2: HF ``qk_norm_type:
    #: per_layer``; Megatron Bridge ``minimax_m2_provider.py`` ``FullDimQNorm`` / ``FullDimKNorm``): RMSNorm
    #: weights of heads·head_dim (Q) and query_groups·head_dim (K) instead of head_dim each
    qk_layernorm_full_dim: bool = False
    attention_output_gate: bool = False
    attention_sinks: bool = False
    # MLA
    multi_latent_attention: bool = False
    q_lora_rank: int | None = None
    kv_lora_rank: int | None = None
    qk_head_dim: int | None = None
    qk_pos_emb_head_dim: int | None = None
    v_head_dim: int | None = None
    # DeepSeek Sparse Attention (megatron-core ``experimental_attention_variant='dsa'``): the lightning
    # indexer's heads, head dim and top-k, the cross-layer top-k sharing cadence, and the KL loss
    # that trains the indexer (``TransformerConfig.dsa_*``; None top-k = no DSA)
    dsa_indexer_n_heads: int | None = None
    dsa_indexer_head_dim: int | None = None
    dsa_indexer_topk: int | None = None
    dsa_indexer_topk_freq: int = 1
    dsa_indexer_skip_topk_offset: int = 0
    dsa_indexer_loss_coeff: float = 0.0
    dsa_indexer_use_sparse_loss: bool = False
    # MiniMax Sparse Attention (MiniMax-M3, ``moeplan.inputs.msa_config``; no Megatron implementation):
    #: per decoder layer, True where the GQA attention reads only its selected key blocks (None: no MSA)
    msa_layers: tuple[bool, ...] | None = None
    #: tokens per key block (``sparse_block_size``) and blocks each query keeps per GQA group
    #: (``sparse_topk_blocks``, the forced initial / local blocks among them)
    msa_block_size: int | None = None
    msa_topk_blocks: int | None = None
    #: the index branch: index-query heads (one per GQA group) and their width; one shared index-key head
    msa_index_n_heads: int | None = None
    msa_index_head_dim: int | None = None
    #: blocks always selected: the first ``msa_init_blocks`` and the newest ``msa_local_blocks``
    msa_init_blocks: int = 0
    msa_local_blocks: int = 0
    # DeepSeek-V4 (megatron-core dev ``experimental_attention_variant='dsv4_hybrid'``, ``moeplan.inputs.dsv4_config``):
    #: KV compression per decoder layer (``csa_compress_ratios``: 0 sliding window only, 4 compressed
    #: sparse attention with an indexer, 128 heavily compressed attention); None: not a DeepSeek-V4 model
    csa_compress_ratios: tuple[int, ...] | None = None
    #: the compression ratio of the MTP layers (the tail of Megatron's ``csa_compress_ratios``)
    csa_mtp_compress_ratio: int = 0
    #: the sliding window every DeepSeek-V4 layer attends (``csa_window_size``, tokens)
    csa_window_size: int | None = None
    #: the grouped low-rank output projection: ``o_groups`` groups of ``o_lora_rank`` (``o_groups``, ``o_lora_rank``)
    o_groups: int | None = None
    o_lora_rank: int | None = None
    #: residual streams of manifold hyper-connections (``num_residual_streams`` with
    #: ``enable_hyper_connections``; 1 = a plain residual) and its Sinkhorn iterations
    num_residual_streams: int = 1
    mhc_sinkhorn_iterations: int = 20
    #: the first decoder layers routed by a token-id hash instead of the router's top-k (``moe_n_hash_layers``)
    moe_n_hash_layers: int = 0
    # MoE
    num_moe_experts: int | None = None
    moe_router_topk: int | None = None
    #: group-limited routing (megatron-core ``moe_router_num_groups`` / ``moe_router_group_topk``, from a
    #: config.json's ``n_group`` / ``topk_group``, Megatron Bridge's mapping): the experts split into this
    #: many equal contiguous groups and each token routed within its ``moe_router_group_topk`` best ones
    #: (``moe_utils.group_limited_topk``). None: no limit (a config's 1 is read as None, the same routing)
    moe_router_num_groups: int | None = None
    moe_router_group_topk: int | None = None
    moe_ffn_hidden_size: int | None = None
    moe_shared_expert_intermediate_size: int | None = None
    #: latent MoE (megatron-core ``TransformerConfig.moe_latent_size``, core_v0.16.0+): routed experts
    #: read and write this width; per MoE layer a ``fc1_latent_proj`` (hidden → latent) before dispatch
    #: and a ``fc2_latent_proj`` (latent → hidden) after combine. None: experts at ``hidden_size``
    moe_latent_size: int | None = None
    moe_shared_expert_gate: bool = False
    moe_router_bias: bool = False
    moe_router_expert_bias: bool = False
    moe_expert_bias: bool = False
    moe_layers: tuple[bool, ...] | None = None
    # attention variants
    attention_kinds: tuple[str, ...] | None = None
    sliding_window: int | None = None
    attention_chunk_size: int | None = None
    linear_num_key_heads: int | None = None
    linear_num_value_heads: int | None = None
    linear_key_head_dim: int | None = None
    linear_value_head_dim: int | None = None
    linear_conv_kernel_dim: int | None = None
    #: the ``linear`` layers are Kimi Delta Attention, not Gated DeltaNet (Megatron Bridge
    #: ``models/kimi/kimi_k3_layers.py::KimiK3Attention._init_kda``, Bridge main after v0.6.0): separate
    #: q / k / v projections with one short convolution each, a per-channel forget gate through a
    #: ``linear_key_head_dim``-wide bottleneck (``f_a_proj`` h → d_k, replicated; ``f_b_proj`` d_k → heads·d_k),
    #: a per-head beta (``b_proj``), a full-width output gate (``g_proj``) and ``dt_bias`` per channel
    kimi_delta_attention: bool = False
    #: Kimi-K3's attention residuals (HF ``attn_res_block_size``; Bridge ``KimiK3TransformerLayer``): every
    #: this many layers the residual stream is written to a bank of snapshots, and each attention and MLP
    #: input is a softmax mix of the bank and the running sum, scored by an RMSNorm(h) and a h → 1
    #: projection per sub-layer. None: a plain residual
    attn_res_block_size: int | None = None
    #: an RMSNorm over the latent width after the routed experts' combine, before ``fc2_latent_proj``
    #: (HF ``latent_moe_use_norm``; Bridge ``KimiK3MoELayer.routed_expert_norm``)
    moe_latent_norm: bool = False
    # Gemma-4 (Megatron Bridge ``Gemma4ModelProvider``): the full-attention layers' own head dim and KV
    # heads, keys reused as values there, a weightless RMSNorm on the values, the extra RMSNorm(h) per
    # layer beyond input / pre-MLP, the router's learned input and per-expert scales
    global_kv_channels: int | None = None
    global_num_query_groups: int | None = None
    attention_k_eq_v: bool = False
    value_norm: bool = False
    extra_layer_norms: int = 0
    moe_router_scales: bool = False
    # Mamba-2 hybrids (Megatron ``hybrid_layer_pattern``; Nemotron-H / Nemotron-3)
    hybrid_layer_pattern: str | None = None
    mamba_num_heads: int | None = None
    mamba_head_dim: int | None = None
    mamba_state_dim: int | None = None
    mamba_num_groups: int | None = None
    mamba_conv_kernel: int | None = None
    mamba_chunk_size: int = 128
    # MTP
    mtp_num_layers: int = 0
    #: MTP modules the publisher's config declares that Megatron does not build (MiniMax-M2's
    #: ``num_mtp_modules``: Megatron Bridge's MiniMax-M2 bridge maps none), stated in the estimate
    unbuilt_mtp_modules: int = 0
    #: the layers of one MTP depth of a hybrid model, in Megatron's hybrid symbols (``M*E-``; megatron-core
    #: ``mtp_hybrid_override_pattern`` / the part after ``/`` of ``hybrid_layer_pattern``, core_v0.17.0+);
    #: None: a DeepSeek-style MTP block of one decoder layer like the decoder's last
    mtp_layer_pattern: str | None = None
    #: one MTP block whose weights every depth reuses (megatron-core ``mtp_use_repeated_layer``): the
    #: weights count once, the compute once per depth
    mtp_use_repeated_layer: bool = False
    # vision
    vision: VisionSpec | None = None
    #: the ``model_type`` of a vision tower the config has and moeplan does not count (None: none)
    vision_not_counted: str | None = None
    # provenance
    #: the language model's ``model_type`` when it is outside the families moeplan maps
    #: (:data:`moeplan.inputs.hf_families.KNOWN_MODEL_TYPES`; the model is then read from the fields every
    #: family shares); None for a mapped family or a model not read from a config.json
    unmapped_model_type: str | None = None
    source: str = "user"
    reconstructed: bool = False
    published_params: dict[str, Any] = field(default_factory=dict)
    measured_params: dict[str, Any] = field(default_factory=dict)

    # ----- derived ---------------------------------------------------------------------------
    @property
    def is_moe(self) -> bool:
        """True when the model has routed experts."""
        return self.num_moe_experts is not None and self.num_moe_experts > 1

    @property
    def num_moe_layers(self) -> int | None:
        """Number of decoder layers with a routed-expert MLP (MTP excluded)."""
        return None if self.moe_layers is None else sum(self.moe_layers)

    @property
    def all_layers_moe(self) -> bool:
        """True when every decoder layer is MoE (no dense MLP layer)."""
        return self.moe_layers is not None and all(self.moe_layers)

    @property
    def has_linear_attention(self) -> bool:
        """True for hybrid models with Gated DeltaNet layers (Qwen3-Next, Qwen3.5)."""
        return self.attention_kinds is not None and "linear" in self.attention_kinds

    @property
    def has_mamba(self) -> bool:
        """True for Mamba-2 hybrids (a ``hybrid_layer_pattern`` with ``M`` layers)."""
        return self.attention_kinds is not None and "mamba" in self.attention_kinds

    @property
    def is_dsv4(self) -> bool:
        """True for DeepSeek-V4 models (megatron-core ``dsv4_hybrid``: per-layer compressed sparse
        attention, ``csa_compress_ratios`` given)."""
        return self.csa_compress_ratios is not None

    @property
    def has_dsa(self) -> bool:
        """True for DeepSeek Sparse Attention models (DeepSeek-V3.2, GLM-5): MLA whose core attention
        reads only the ``dsa_indexer_topk`` keys a lightning indexer selects."""
        return self.dsa_indexer_topk is not None and self.csa_compress_ratios is None

    def layer_has_indexer(self, layer: int) -> bool:
        """True when decoder layer ``layer`` (0-based) builds its own DSA indexer; False for a layer
        that reuses an earlier layer's top-k (``dsa_indexer_topk_freq`` > 1) and for non-DSA models.

        Megatron-core (``experimental_attention_variant/dsa.py::is_dsa_skip_topk_layer``, dev 2026-08,
        first in core_v0.19.0): with 1-based layer number n and offset o' = max(offset, 1), layer n
        computes top-k iff ``max(n - o', 0) % freq == 0``; with freq 1 every layer does. MTP layers
        number from 1 again, so their first layer always computes.
        """
        if not self.has_dsa:
            return False
        if self.dsa_indexer_topk_freq <= 1:
            return True
        offset = max(self.dsa_indexer_skip_topk_offset, 1)
        return max(layer + 1 - offset, 0) % self.dsa_indexer_topk_freq == 0

    @property
    def has_msa(self) -> bool:
        """True for a model with MiniMax Sparse Attention layers (``msa_layers``)."""
        return self.msa_layers is not None and any(self.msa_layers)

    def layer_is_msa(self, layer: int) -> bool:
        """True when decoder layer ``layer`` (0-based) runs MiniMax Sparse Attention: an index branch
        that selects key blocks and a GQA core over the selected blocks only."""
        return self.msa_layers is not None and layer < len(self.msa_layers) and self.msa_layers[layer]

    def layer_has_mlp(self, layer: int) -> bool:
        """True when decoder layer ``layer`` (0-based) has an MLP or MoE block: every layer of a
        transformer; only the ``E`` and ``-`` layers of a hybrid pattern."""
        return self.hybrid_layer_pattern is None or self.hybrid_layer_pattern[layer] in "E-"

    @property
    def mtp_stand_ins(self) -> tuple[int, ...]:
        """The decoder layer (0-based) built like each layer of one MTP depth: per symbol of
        ``mtp_layer_pattern`` the first decoder layer with that symbol (megatron-core builds the MTP
        depth's ``MambaStack`` from the decoder's own layer specs, ``multi_token_prediction.py``
        ``MultiTokenPredictionLayer`` at core_v0.17.0); the decoder's last layer for a DeepSeek-style
        block (``mtp_layer_pattern`` None).

        Raises:
            InputError: naming ``model_overrides.mtp_layer_pattern`` when a symbol has no decoder layer
                of its kind (such an MTP layer is not modelled).
        """
        n = self.num_layers or 0
        pattern, main = self.mtp_layer_pattern, self.hybrid_layer_pattern
        if pattern is None:
            return (n - 1,)
        if main is None or any(c not in main for c in pattern):
            raise InputError(
                "model_overrides.mtp_layer_pattern",
                pattern,
                f"MTP layers of kinds the decoder pattern {main!r} has (an MTP layer of another kind is not modelled)",
            )
        return tuple(main.index(c) for c in pattern)

    @property
    def mtp_weight_sets(self) -> int:
        """MTP blocks with their own weights: one when every depth reuses one block
        (``mtp_use_repeated_layer``), else one per depth (``mtp_num_layers``)."""
        return min(1, self.mtp_num_layers) if self.mtp_use_repeated_layer else self.mtp_num_layers

    @property
    def attention_head_dims(self) -> int:
        """d_qk + d_v of one attention head (elements): MLA's no-position + rotary query-key part plus
        its value part (DeepSeek-V3: 128 + 64 + 128 = 320), else twice ``kv_channels`` (256 for head dim
        128; ``hidden_size / num_attention_heads`` when kv_channels is unset)."""
        if self.qk_head_dim:
            return self.qk_head_dim + (self.qk_pos_emb_head_dim or 0) + (self.v_head_dim or self.qk_head_dim)
        if self.kv_channels:
            return 2 * self.kv_channels
        if self.hidden_size is None:
            raise InputError("model_overrides.hidden_size", None, "a value: the attention head width needs it")
        return 2 * (self.hidden_size // max(1, self.num_attention_heads or 1))

    @property
    def attention_v_head_dim(self) -> int:
        """d_v of one attention head (elements): MLA's value part (DeepSeek-V3: 128), else half of
        :attr:`attention_head_dims`. Raises what :attr:`attention_head_dims` raises."""
        if self.qk_head_dim:
            return self.v_head_dim or self.qk_head_dim
        return self.attention_head_dims // 2

    @property
    def has_global_attention_widths(self) -> bool:
        """True when the full-attention layers have their own head dim or KV heads (Gemma-4)."""
        return bool(self.global_kv_channels or self.global_num_query_groups)

    def attention_widths(self, kind: str) -> PartialModelSpec:
        """This model as a layer of attention ``kind`` sees it: on a ``full`` layer of a model with
        :attr:`has_global_attention_widths`, ``kv_channels`` and ``num_query_groups`` are the global
        ones (Megatron Bridge ``Gemma4SelfAttention``: ``config.kv_channels = global_head_dim`` and
        ``config.num_query_groups = num_global_key_value_heads`` on the non-local layers, v0.6.0);
        every other layer, and every other model, is this model itself. The view is built once."""
        if kind != "full" or not self.has_global_attention_widths:
            return self
        view = self.__dict__.get("_global_view")
        if view is None:
            view = dataclasses.replace(
                self,
                kv_channels=self.global_kv_channels or self.kv_channels,
                num_query_groups=self.global_num_query_groups or self.num_query_groups,
            )
            self.__dict__["_global_view"] = view  # a cache beside the frozen fields, not a field
        return cast(PartialModelSpec, view)

    @property
    def is_vlm(self) -> bool:
        """True when a vision tower is attached."""
        return self.vision is not None

    # ----- fields optional by architecture, for code that only runs where the model has them ----
    def given(self, name: str) -> int:
        """The integer field ``name``, for code that only runs where the model has it: MoE, MLA and
        linear-attention widths may be None even on a complete model (any field on a partial one).

        Raises:
            InputError (a ValueError): naming the field when the model does not give it.
        """
        value = getattr(self, name)
        if value is None:
            raise InputError(f"model_overrides.{name}", None, "a value: this model's estimate needs it")
        return value

    @property
    def moe_topk(self) -> int:
        """``moe_router_topk`` of a MoE model (raises InputError when not given)."""
        return self.given("moe_router_topk")

    @property
    def moe_experts(self) -> int:
        """``num_moe_experts`` of a MoE model (raises InputError when not given)."""
        return self.given("num_moe_experts")

    @property
    def moe_token_width(self) -> int:
        """Width (elements) of a routed token between ``fc1_latent_proj`` and ``fc2_latent_proj``: what the
        dispatcher moves and the routed experts' FC1 reads and FC2 writes. ``moe_latent_size`` on a
        latent MoE, else ``hidden_size`` (megatron-core ``moe/moe_layer.py``, ``moe/experts.py`` and
        ``moe/token_dispatcher.py`` at core_v0.16.0 and dev: the latent projection runs before
        ``dispatch_preprocess`` and after ``combine_postprocess``).

        Raises:
            InputError: when neither width is given.
        """
        return self.moe_latent_size or self.given("hidden_size")

    @property
    def moe_ffn(self) -> int:
        """``moe_ffn_hidden_size`` of a MoE model (raises InputError when not given)."""
        return self.given("moe_ffn_hidden_size")

    def missing_fields(self) -> list[str]:
        """Fields a complete model needs that this one lacks: :data:`REQUIRED_FIELDS`, the expert
        count's top-k and expert width for MoE, the MLP width of a model with dense layers, the
        latent ranks and head dims of MLA."""
        need = list(REQUIRED_FIELDS)
        moe = self.moe_layers if self.moe_layers is not None else (self.is_moe,) * (self.num_layers or 0)
        pattern = self.hybrid_layer_pattern
        if self.is_moe:
            need += ["moe_router_topk", "moe_ffn_hidden_size"]
        if ("-" in pattern) if pattern is not None else (not self.is_moe or not all(moe)):
            need.append("ffn_hidden_size")
        if pattern is not None and "M" in pattern:
            need += ["mamba_num_heads", "mamba_head_dim", "mamba_state_dim", "mamba_num_groups", "mamba_conv_kernel"]
        if self.multi_latent_attention:
            need += ["kv_lora_rank", "qk_head_dim", "qk_pos_emb_head_dim", "v_head_dim"]
        if self.is_dsv4:
            need += dsv4_required(self.csa_compress_ratios or ())
        if self.has_dsa:
            need += ["dsa_indexer_n_heads", "dsa_indexer_head_dim"]
        if self.has_msa:
            need += ["msa_block_size", "msa_topk_blocks", "msa_index_n_heads", "msa_index_head_dim"]
        return [f for f in need if getattr(self, f) is None]

    def completed(self) -> ModelSpec:
        """This model as a :class:`ModelSpec`, with the defaults Megatron-Core applies filled in:
        ``num_query_groups`` = heads (MHA), ``kv_channels`` = hidden / heads (not for MLA),
        ``moe_layers`` every layer MoE when there are experts, ``attention_kinds`` every layer full.

        Raises:
            InputError: naming the fields a complete model needs and this one lacks.
        """
        if isinstance(self, ModelSpec):
            return self
        missing = self.missing_fields()
        if missing:
            raise InputError(
                "model", self.name, "a complete model: give " + ", ".join(f"model_overrides.{f}" for f in missing)
            )
        # missing_fields() covers REQUIRED_FIELDS, so these are set
        n, heads, hidden = cast(int, self.num_layers), cast(int, self.num_attention_heads), cast(int, self.hidden_size)
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        fields["num_query_groups"] = self.num_query_groups or heads
        if not self.multi_latent_attention and self.kv_channels is None:
            fields["kv_channels"] = hidden // heads
        if self.hybrid_layer_pattern is not None:
            kinds, moe = hybrid_kinds(self.hybrid_layer_pattern)
            fields["attention_kinds"] = self.attention_kinds or kinds
            fields["moe_layers"] = self.moe_layers or moe
        if self.moe_layers is None and fields["moe_layers"] is None:
            fields["moe_layers"] = (self.is_moe,) * n
        if fields["attention_kinds"] is None:
            fields["attention_kinds"] = ("full",) * n
        return ModelSpec(**fields)

    def with_overrides(self, overrides: dict[str, Any] | None) -> PartialModelSpec:
        """Return a copy with fields replaced (e.g. ``num_layers`` for a reduced proxy).

        Per-layer tuples are truncated or extended (repeating the pattern) when ``num_layers``
        changes and they are not overridden themselves.

        Raises:
            UnknownNameError: for a field that does not exist (with a did-you-mean).
            InputError: for a value of the wrong type or a non-positive size.
        """
        if not overrides:
            return self
        names = {f.name for f in dataclasses.fields(self)}
        changes: dict[str, Any] = {}
        for key, value in overrides.items():
            if key not in names or key in _NOT_OVERRIDABLE:
                raise UnknownNameError(f"model_overrides.{key}", key, sorted(names), "a ModelSpec field:")
            changes[key] = override_value(key, value, isinstance(getattr(self, key), bool))
        new_layers = changes.get("num_layers")
        if new_layers is not None:
            for tup in ("moe_layers", "attention_kinds", "hybrid_layer_pattern", "csa_compress_ratios", "msa_layers"):
                seq = getattr(self, tup)
                if tup not in changes and seq:
                    cut = tuple(seq[i % len(seq)] for i in range(new_layers))
                    changes[tup] = "".join(cut) if isinstance(seq, str) else cut
        if changes.get("hybrid_layer_pattern") and "hybrid_layer_pattern" in overrides:
            kinds, moe = hybrid_kinds(changes["hybrid_layer_pattern"])
            changes.setdefault("attention_kinds", kinds)
            changes.setdefault("moe_layers", moe)
        out = dataclasses.replace(self, **changes)
        check_model_consistency(out, "model_overrides.", set(changes))
        return out


#: fields ``model_overrides`` may not set: the tower and what the config declared or the publisher counted
_NOT_OVERRIDABLE = ("vision", "vision_not_counted", "published_params", "measured_params", "unbuilt_mtp_modules")


def check_model_ranges(m: PartialModelSpec, prefix: str) -> None:
    """Every integer field of ``m`` within :data:`MODEL_INT_RANGES` (a user's config.json is held to
    the plausible ranges the overrides are).

    Raises:
        InputError: naming ``prefix`` + the field.
    """
    for key, (lo, hi) in MODEL_INT_RANGES.items():
        v = getattr(m, key)
        if v is not None and not (isinstance(v, int) and not isinstance(v, bool) and lo <= v <= hi):
            raise InputError(f"{prefix}{key}", v, f"an integer from {lo} to {hi:,}")


@dataclass(frozen=True, kw_only=True)
class ModelSpec(PartialModelSpec):
    """A complete model: every field parameter counts, memory and step time need is given, and the
    per-layer tuples cover every layer. Built from a ``config.json``
    (:func:`model_from_hf_config`) or by :meth:`PartialModelSpec.completed`.

    Raises:
        InputError: on construction, when a required field is missing or a per-layer tuple does not
            have ``num_layers`` entries.
    """

    num_layers: int
    hidden_size: int
    num_attention_heads: int
    num_query_groups: int
    vocab_size: int
    moe_layers: tuple[bool, ...]
    attention_kinds: tuple[str, ...]

    def __post_init__(self) -> None:
        missing = self.missing_fields() + [
            f for f in ("num_query_groups", "moe_layers", "attention_kinds") if getattr(self, f) is None
        ]
        if missing:
            raise InputError(
                "model", self.name, "a complete model: give " + ", ".join(f"model_overrides.{f}" for f in missing)
            )
        for tup in ("moe_layers", "attention_kinds", "hybrid_layer_pattern", "csa_compress_ratios", "msa_layers"):
            seq = getattr(self, tup)
            if seq is not None and len(seq) != self.num_layers:
                raise InputError(f"model_overrides.{tup}", len(seq), f"one entry per layer ({self.num_layers})")

    def with_overrides(self, overrides: dict[str, Any] | None) -> ModelSpec:
        """As :meth:`PartialModelSpec.with_overrides`; the result is still complete.

        Raises:
            UnknownNameError / InputError: as the partial version, and a change that leaves the model
                incomplete (e.g. ``num_layers: null``).
        """
        return cast(ModelSpec, super().with_overrides(overrides))  # dataclasses.replace keeps the class


def check_router_groups(m: PartialModelSpec, prefix: str, blame: Callable[..., str]) -> None:
    """Group-limited routing as megatron-core accepts it (``TransformerConfig.__post_init__``: a group top-k
    needs ``moe_router_num_groups``, which divides ``num_moe_experts``; ``group_limited_topk``: at most every
    group selected, and the selected groups hold at least ``moe_router_topk`` experts).

    Raises:
        InputError: naming ``prefix`` + the field (the changed one of a pair, ``blame``) and the numbers."""
    groups, gtop, experts, topk = m.moe_router_num_groups, m.moe_router_group_topk, m.num_moe_experts, m.moe_router_topk
    if groups is None and gtop is None:
        return
    if groups is None or gtop is None:
        key = "moe_router_num_groups" if groups is None else "moe_router_group_topk"
        raise InputError(f"{prefix}{key}", None, "both moe_router_num_groups and moe_router_group_topk, or neither")
    if experts and experts % groups:
        key = blame("moe_router_num_groups", "num_moe_experts")
        raise InputError(
            f"{prefix}{key}", getattr(m, key), f"groups that divide the experts ({experts} experts, {groups} groups)"
        )
    if gtop > groups:
        raise InputError(f"{prefix}moe_router_group_topk", gtop, f"at most moe_router_num_groups ({groups})")
    if experts and topk and gtop * (experts // groups) < topk:
        key = blame("moe_router_group_topk", "moe_router_topk")
        raise InputError(
            f"{prefix}{key}",
            getattr(m, key),
            f"selected groups holding at least top-k experts ({gtop} × {experts // groups} < {topk})",
        )


def check_model_consistency(m: PartialModelSpec, prefix: str, changed: frozenset[str] | set[str] = frozenset()) -> None:
    """What no single field shows, for a model from ``model_overrides`` and from a ``config.json``
    alike: per-layer tuples with one entry per layer, top-k within the expert count (megatron-core
    ``TransformerConfig.__post_init__``: ``moe_router_topk`` ≤ ``num_moe_experts``), query groups
    dividing the heads (GQA: ``num_attention_heads % num_query_groups == 0``).

    Args:
        m: the model.
        prefix: the field prefix of the error (``model_overrides.`` or ``config.json:``).
        changed: the fields the overrides set; an inconsistency names the changed one (else the first
            of the pair).

    Raises:
        InputError: naming ``prefix`` + the field, its value and the numbers that disagree.
    """

    def blame(*keys: str) -> str:
        return next((k for k in keys if k in changed), keys[0])

    for tup in ("moe_layers", "attention_kinds"):
        seq = getattr(m, tup)
        if seq is not None and m.num_layers is not None and len(seq) != m.num_layers and tup in changed:
            raise InputError(f"{prefix}{tup}", len(seq), f"one entry per layer ({m.num_layers})")
    topk, experts = m.moe_router_topk, m.num_moe_experts
    if topk and experts and topk > experts:
        key = blame("moe_router_topk", "num_moe_experts")
        raise InputError(f"{prefix}{key}", getattr(m, key), f"top-k ≤ the expert count ({topk} > {experts})")
    check_router_groups(m, prefix, blame)
    if m.has_dsa and not m.multi_latent_attention:
        # megatron-core get_dsa_module_spec_for_backend: "Currently only MLA supports sparse attention."
        key = blame("dsa_indexer_topk", "multi_latent_attention")
        raise InputError(f"{prefix}{key}", getattr(m, key), "DeepSeek Sparse Attention on an MLA model only")
    if m.mtp_layer_pattern is not None and m.num_layers is not None:
        m.mtp_stand_ins  # noqa: B018 - raises for an MTP layer kind the decoder pattern lacks
    check_dsv4(m, prefix)
    heads, groups = m.num_attention_heads, m.num_query_groups
    if heads and groups and (groups > heads or heads % groups):
        key = blame("num_query_groups", "num_attention_heads")
        raise InputError(
            f"{prefix}{key}",
            getattr(m, key),
            f"query groups that divide the attention heads ({heads} heads, {groups} groups)",
        )
    glob = m.global_num_query_groups
    if heads and glob and (glob > heads or heads % glob):
        key = blame("global_num_query_groups", "num_attention_heads")
        raise InputError(
            f"{prefix}{key}",
            getattr(m, key),
            f"global query groups that divide the attention heads ({heads} heads, {glob} groups)",
        )


# ---------------------------------------------------------------------------------------------
# Hugging Face config.json → ModelSpec
# ---------------------------------------------------------------------------------------------


def _get(cfg: dict, *keys: str, default: Any = None) -> Any:
    for k in keys:
        if k in cfg and cfg[k] is not None:
            return cfg[k]
    return default


def _layer_flags(cfg: dict, key: str, num_layers: int, true_value: Any) -> tuple[bool, ...]:
    """A per-layer list (``moe_layer_freq`` as a list, ``mlp_layer_types``) as flags, one per layer.

    Raises:
        InputError: when the list does not have one entry per layer.
    """
    seq = cfg[key]
    if not isinstance(seq, list) or len(seq) != num_layers:
        raise InputError(
            f"config.json:{key}",
            seq if not isinstance(seq, list) else f"{len(seq)} entries",
            f"a list with one entry per layer ({num_layers})",
        )
    return tuple(v == true_value for v in seq)


def _int_list(cfg: dict, key: str) -> set[int]:
    """A list of layer ids (``mlp_only_layers``, Llama 4's ``moe_layers``) as a set.

    Raises:
        InputError: when it is not a list of integers.
    """
    seq = cfg.get(key) or []
    if not isinstance(seq, list) or any(isinstance(v, bool) or not isinstance(v, int) for v in seq):
        raise InputError(f"config.json:{key}", seq, "a list of layer ids (integers)")
    return set(seq)


def _moe_layer_pattern(cfg: dict, model_type: str, num_layers: int, num_experts: int | None) -> tuple[bool, ...]:
    """Which decoder layers are MoE, per family (HF modelling code conventions): GLM-5's
    ``mlp_layer_types`` (dense / sparse), a per-layer ``moe_layer_freq`` list (Megatron's convention,
    1 = MoE), DeepSeek's ``first_k_dense_replace`` and ``moe_layer_freq``, Llama 4's interleave step,
    Qwen's ``mlp_only_layers`` and ``decoder_sparse_step``."""
    if not num_experts:
        return tuple(False for _ in range(num_layers))
    if cfg.get("mlp_layer_types") is not None:
        return _layer_flags(cfg, "mlp_layer_types", num_layers, "sparse")
    if isinstance(cfg.get("moe_layer_freq"), list):
        return _layer_flags(cfg, "moe_layer_freq", num_layers, 1)
    if "first_k_dense_replace" in cfg:  # DeepSeek-V2/V3, Kimi-K2, GLM-4.5
        k = _optional_int(cfg, "first_k_dense_replace") or 0
        freq = _optional_int(cfg, "moe_layer_freq") or 1
        return tuple(i >= k and i % freq == 0 for i in range(num_layers))
    if model_type.startswith("llama4"):
        step = _optional_int(cfg, "interleave_moe_layer_step") or 1
        if cfg.get("moe_layers") is not None:
            ids = _int_list(cfg, "moe_layers")
            return tuple(i in ids for i in range(num_layers))
        return tuple((i + 1) % step == 0 for i in range(num_layers))
    only = _int_list(cfg, "mlp_only_layers")
    step = _optional_int(cfg, "decoder_sparse_step") or 1
    return tuple(i not in only and (i + 1) % step == 0 for i in range(num_layers))


def _attention_kinds(cfg: dict, model_type: str, num_layers: int) -> tuple[str, ...]:
    types = cfg.get("layer_types")
    if types:
        if len(types) < num_layers:  # a list (hf_families checked its kinds)
            raise InputError("config.json:layer_types", f"{len(types)} entries", f"one per layer ({num_layers})")
        mapping = {"linear_attention": "linear", "full_attention": "full", "sliding_attention": "sliding"}
        return tuple(mapping.get(t, "full") for t in types[:num_layers])
    interval = _optional_int(cfg, "full_attention_interval")
    if interval and ("next" in model_type or "3_5" in model_type):
        return tuple("full" if (i + 1) % int(interval) == 0 else "linear" for i in range(num_layers))
    if model_type.startswith("llama4") and cfg.get("attention_chunk_size"):
        # Llama 4: chunked local attention on RoPE layers, global NoPE attention every 4th layer
        # (no_rope_layers = [1,1,1,0] repeated in the published Llama4Config dumps).
        return tuple("full" if (i + 1) % 4 == 0 else "chunked" for i in range(num_layers))
    if cfg.get("sliding_window") and cfg.get("use_sliding_window"):
        return tuple("sliding" for _ in range(num_layers))
    return tuple("full" for _ in range(num_layers))


def _moonvit_from_config(vc: dict, text_hidden: int) -> VisionSpec:
    """Kimi-K2.5's MoonViT3d tower and patch-merger projector from its ``vision_config`` (Moonshot's
    ``modeling_kimi_k25.py``, which Megatron Bridge loads as is: ``MoonVision3dPatchEmbed`` Conv2d of
    ``patch_size``² with bias and a learned ``init_pos_emb_height`` × ``init_pos_emb_width`` position
    table (the temporal table is a fixed sin-cos buffer), ``vt_num_hidden_layers`` blocks of
    ``vt_hidden_size`` / ``vt_intermediate_size`` / ``vt_num_attention_heads``, a final LayerNorm, and
    ``PatchMergerMLP``: LayerNorm(``mm_hidden_size``), Linear(4h → 4h), GELU, Linear(4h → ``text_hidden_size``)
    over a ``merge_kernel_size`` 2-D merge).

    Raises:
        KeyError: a field the tower needs is missing (named by the caller).
        InputError: a merge kernel that is not square, or a projector input that is not the ViT width.
    """
    kernel = vc.get("merge_kernel_size") or [1, 1]
    if not isinstance(kernel, list) or len(kernel) != 2 or kernel[0] != kernel[1]:
        raise InputError("config.json:vision_config.merge_kernel_size", kernel, "a square merge kernel [k, k]")
    hidden = int(vc["vt_hidden_size"])
    if int(vc.get("mm_hidden_size", hidden)) != hidden:
        raise InputError("config.json:vision_config.mm_hidden_size", vc["mm_hidden_size"], f"the ViT width {hidden}")
    return VisionSpec(
        kind="moonvit",
        depth=int(vc["vt_num_hidden_layers"]),
        hidden_size=hidden,
        intermediate_size=int(vc["vt_intermediate_size"]),
        num_heads=int(vc["vt_num_attention_heads"]),
        patch_size=int(vc["patch_size"]),
        spatial_merge_size=int(kernel[0]),
        out_hidden_size=int(vc.get("text_hidden_size", text_hidden)),
        num_position_embeddings=int(vc["init_pos_emb_height"]) * int(vc["init_pos_emb_width"]),
        text_hidden_size=text_hidden,
    )


def _vision_from_config(vc: dict | None, text_hidden: int, from_supplement: bool = False) -> VisionSpec | None:
    if not vc:
        return None
    mt = str(vc.get("model_type", ""))
    if is_moonvit_config(vc):
        return _moonvit_from_config(vc, text_hidden)
    if "llama4" in mt:
        return VisionSpec(
            kind="llama4",
            depth=int(vc["num_hidden_layers"]),
            hidden_size=int(vc["hidden_size"]),
            intermediate_size=int(vc["intermediate_size"]),
            num_heads=int(vc["num_attention_heads"]),
            patch_size=int(vc["patch_size"]),
            in_channels=int(vc.get("num_channels", 3)),
            image_size=int(vc.get("image_size", 0)),
            pixel_shuffle_ratio=float(vc.get("pixel_shuffle_ratio", 1.0)),
            spatial_merge_size=int(round(1 / float(vc.get("pixel_shuffle_ratio", 1.0)))),
            projector_input_dim=int(vc.get("projector_input_dim", 0)),
            projector_output_dim=int(vc.get("projector_output_dim", 0)),
            out_hidden_size=int(vc.get("vision_output_dim", 0)),
            text_hidden_size=text_hidden,
            from_supplement=from_supplement,
        )
    return VisionSpec(
        kind="qwen3_vl",
        depth=int(vc["depth"]),
        hidden_size=int(vc["hidden_size"]),
        intermediate_size=int(vc["intermediate_size"]),
        num_heads=int(vc["num_heads"]),
        patch_size=int(vc["patch_size"]),
        in_channels=int(vc.get("in_channels", 3)),
        temporal_patch_size=int(vc.get("temporal_patch_size", 1)),
        spatial_merge_size=int(vc.get("spatial_merge_size", 1)),
        out_hidden_size=int(vc.get("out_hidden_size", text_hidden)),
        num_position_embeddings=int(vc.get("num_position_embeddings", 0)),
        deepstack_visual_indexes=tuple(vc.get("deepstack_visual_indexes") or ()),
        text_hidden_size=text_hidden,
        from_supplement=from_supplement,
    )


_NON_NEGATIVE_INT_KEYS = (
    "num_key_value_heads",
    "head_dim",
    "n_routed_experts",
    "num_experts",
    "num_local_experts",
    "num_experts_per_tok",
    "moe_intermediate_size",
    "intermediate_size",
    "kv_lora_rank",
    "q_lora_rank",
    "qk_nope_head_dim",
    "qk_rope_head_dim",
    "v_head_dim",
    "n_shared_experts",
    "shared_expert_intermediate_size",
    "intermediate_size_mlp",
    "first_k_dense_replace",
    "decoder_sparse_step",
    "interleave_moe_layer_step",
    "full_attention_interval",
    "num_nextn_predict_layers",
    "mtp_num_hidden_layers",
    "sliding_window",
    "attention_chunk_size",
    "max_position_embeddings",
    "linear_num_key_heads",
    "linear_num_value_heads",
    "linear_key_head_dim",
    "linear_value_head_dim",
    "linear_conv_kernel_dim",
    "index_n_heads",
    "index_head_dim",
    "index_topk",
    "index_topk_freq",
    "index_skip_topk_offset",
    "global_head_dim",
    "num_global_key_value_heads",
    "top_k_experts",
)


def _need(text: dict, *keys: str) -> int:
    """A required positive integer field (the first of ``keys`` given).

    Raises:
        InputError: missing, or not a positive integer.
    """
    v = _get(text, *keys)
    if v is None:
        raise InputError(f"config.json:{'/'.join(keys)}", None, "a value (required field missing)")
    if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= MAX_CONFIG_INT:
        raise InputError(f"config.json:{'/'.join(keys)}", v, f"a positive integer up to {MAX_CONFIG_INT}")
    return v


#: the largest integer a config.json size may hold (2**31 - 1: far above any real width, and small
#: enough that products of a few of them stay exact in the float arithmetic of the estimates)
MAX_CONFIG_INT = 2**31 - 1


#: of :data:`_NON_NEGATIVE_INT_KEYS`, the sizes for which 0 means nothing (a head of no width, no KV heads, no
#: routed experts per token, experts of no width, no positions): given as 0, they are an input error rather
#: than read as absent (which would derive a value the file never stated)
_POSITIVE_WHEN_GIVEN = (
    "head_dim",
    "num_key_value_heads",
    "num_experts_per_tok",
    "moe_intermediate_size",
    "max_position_embeddings",
)


def _check_integer_fields(text: dict) -> None:
    """Every size of :data:`_NON_NEGATIVE_INT_KEYS` that ``text`` gives is an integer from 0 to
    :data:`MAX_CONFIG_INT`, and those of :data:`_POSITIVE_WHEN_GIVEN` at least 1.

    Raises:
        InputError: naming the ``config.json`` field, its value and what is allowed.
    """
    for key in _NON_NEGATIVE_INT_KEYS:
        val = text.get(key)
        if val is not None and (isinstance(val, bool) or not isinstance(val, int) or not 0 <= val <= MAX_CONFIG_INT):
            raise InputError(f"config.json:{key}", val, f"an integer from 0 to {MAX_CONFIG_INT}")
        if val == 0 and key in _POSITIVE_WHEN_GIVEN:
            raise InputError(f"config.json:{key}", val, f"a positive integer up to {MAX_CONFIG_INT} (0 is not a size)")


def _optional_int(text: dict, *keys: str) -> int | None:
    """An optional non-negative integer field (the first of ``keys`` given); None when absent or 0.

    Raises:
        InputError: naming the field when it is not an integer or is out of range.
    """
    v = _get(text, *keys)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= MAX_CONFIG_INT:
        raise InputError(f"config.json:{'/'.join(keys)}", v, f"an integer from 0 to {MAX_CONFIG_INT}")
    return v or None


#: families whose ``intermediate_size`` is the routed experts' width (no dense MLP)
_EXPERT_WIDTH_TYPES = ("mixtral", "gpt_oss", "minimax_m2")


def _ffn_widths(text: dict, model_type: str, top_type: str) -> tuple[int | None, int | None]:
    """(routed-expert width, dense MLP width) by family: Llama 4's ``intermediate_size`` is the
    expert width (``intermediate_size_mlp`` the dense one); Mixtral's, gpt-oss's and MiniMax-M2's the
    expert width (HF ``MiniMaxM2Config``: every layer MoE, ``block_sparse_moe.experts.*.w1`` is
    intermediate_size × hidden); elsewhere ``moe_intermediate_size`` and ``intermediate_size``."""
    if model_type.startswith("llama4") or top_type.startswith("llama4"):
        expert = _need(text, "intermediate_size")
        return expert, _optional_int(text, "intermediate_size_mlp") or expert
    if top_type in _EXPERT_WIDTH_TYPES or model_type in _EXPERT_WIDTH_TYPES:
        return _need(text, "intermediate_size"), None
    return _optional_int(text, "moe_intermediate_size"), _optional_int(text, "intermediate_size")


def _shared_experts(
    text: dict, expert_ffn: int | None, is_llama4: bool, num_experts: int | None
) -> tuple[int | None, bool]:
    """(shared-expert width, gated): DeepSeek's ``n_shared_experts`` × expert width; Qwen2-MoE /
    Qwen3-Next / Qwen3.5's ``shared_expert_intermediate_size`` with a sigmoid gate (h → 1); Llama 4's
    one shared expert of the expert width."""
    if _get(text, "moe_shared_expert_intermediate_size"):  # Nemotron-H: the shared expert's own width
        return int(text["moe_shared_expert_intermediate_size"]), False
    if _get(text, "n_shared_experts"):
        return int(text["n_shared_experts"]) * int(expert_ffn or 0), False
    if _get(text, "shared_expert_intermediate_size"):
        return int(text["shared_expert_intermediate_size"]), True
    if is_llama4 and num_experts:
        return expert_ffn, False
    return None, False


def _vision_of(top: dict, hidden: int) -> VisionSpec | None:
    """The vision tower from ``vision_config``, or Llama 4's from the ``_supplement`` block.

    Raises:
        InputError: naming the vision field that is missing or not a number.
    """
    vision_cfg = top.get("vision_config")
    from_supp = False
    if vision_cfg is None and isinstance(top.get("_supplement"), dict):
        vision_cfg = top["_supplement"].get("vision_config")
        from_supp = vision_cfg is not None
    if isinstance(vision_cfg, dict) and str(vision_cfg.get("model_type") or "").startswith(UNCOUNTED_VISION_TYPES):
        return None
    if top.get("model_type") == KIMI_K3_MODEL_TYPE:  # Bridge builds Kimi-K3's language backbone only
        return None  # accepted, not counted: the model says so (ModelSpec.vision_not_counted)
    try:
        return _vision_from_config(vision_cfg, hidden, from_supp)
    except InputError:
        raise
    except KeyError as exc:
        raise InputError(
            f"config.json:vision_config.{exc.args[0]}", None, "a value (the vision tower needs it)"
        ) from None
    except (TypeError, ValueError, ZeroDivisionError) as exc:
        raise InputError("config.json:vision_config", None, f"numbers where the tower has sizes ({exc})") from None


def _attention_fields(text: dict, model_type: str, top_type: str, hidden: int, heads: int) -> dict[str, Any]:
    """Attention fields: GQA groups and head dim, or MLA's latent ranks and head dims; QK norm,
    output gate, biases, sinks (gpt-oss); per-layer kinds and Gated DeltaNet widths."""
    is_mla = bool(_get(text, "kv_lora_rank"))
    is_llama4 = model_type.startswith("llama4") or top_type.startswith("llama4")
    kv_heads = _optional_int(text, "num_key_value_heads") or heads
    head_dim = _optional_int(text, "head_dim") or max(1, hidden // heads)
    bias = bool(_get(text, "attention_bias", default=False))
    return {
        "num_query_groups": kv_heads if not is_mla else heads,
        "kv_channels": head_dim if not is_mla else None,
        "add_bias_linear": bias and "gpt_oss" in top_type,
        "add_qkv_bias": bias,
        # Llama 4's QK norm is a weightless L2 norm, so it has no parameters
        "qk_layernorm": bool(_get(text, "use_qk_norm", default=model_type.startswith("qwen3"))) and not is_llama4,
        "qk_layernorm_full_dim": bool(_get(text, "use_qk_norm")) and text.get("qk_norm_type") == "per_layer",
        "attention_output_gate": bool(_get(text, "attn_output_gate", default=("qwen3_next" in model_type))),
        "attention_sinks": "gpt_oss" in top_type,
        "multi_latent_attention": is_mla,
        "q_lora_rank": _get(text, "q_lora_rank"),
        "kv_lora_rank": _get(text, "kv_lora_rank"),
        "qk_head_dim": _get(text, "qk_nope_head_dim"),
        "qk_pos_emb_head_dim": _get(text, "qk_rope_head_dim"),
        "v_head_dim": _get(text, "v_head_dim"),
        "sliding_window": _get(text, "sliding_window"),
        "attention_chunk_size": _get(text, "attention_chunk_size"),
        **{k: _get(text, k) for k in _LINEAR_KEYS},
    }


_LINEAR_KEYS = (
    "linear_num_key_heads",
    "linear_num_value_heads",
    "linear_key_head_dim",
    "linear_value_head_dim",
    "linear_conv_kernel_dim",
)


#: HF ``model_type`` values whose configs carry DeepSeek Sparse Attention's indexer fields
DSA_MODEL_TYPES = ("deepseek_v32", "glm_moe_dsa")


def _dsa_sharing(text: dict, num_layers: int) -> tuple[int, int]:
    """(``dsa_indexer_topk_freq``, ``dsa_indexer_skip_topk_offset``) of a config: GLM-5.2's
    ``index_topk_freq`` / ``index_skip_topk_offset`` (Megatron Bridge ``GLM5Bridge.provider_bridge``
    copies them), checked against its per-layer ``indexer_types`` (``full`` computes top-k,
    ``shared`` reuses it) with megatron-core's cadence (:meth:`PartialModelSpec.layer_has_indexer`).

    Raises:
        InputError: naming ``indexer_types`` when it is not one ``full`` / ``shared`` per layer or
            when its pattern is not one megatron-core's cadence can build.
    """
    freq = _optional_int(text, "index_topk_freq") or 1
    offset = _optional_int(text, "index_skip_topk_offset") or 0
    types = text.get("indexer_types")
    if types is None:
        return freq, offset
    if not isinstance(types, list) or len(types) != num_layers or any(t not in ("full", "shared") for t in types):
        raise InputError("config.json:indexer_types", types, f"a list of full / shared, one per layer ({num_layers})")
    probe = PartialModelSpec(
        name="", dsa_indexer_topk=1, dsa_indexer_topk_freq=freq, dsa_indexer_skip_topk_offset=offset
    )
    expected = ["full" if probe.layer_has_indexer(i) else "shared" for i in range(num_layers)]
    if types != expected:
        raise InputError(
            "config.json:indexer_types",
            types,
            f"a model moeplan can build: megatron-core shares DSA top-k every {freq} layers from offset {offset} "
            "(index_topk_freq, index_skip_topk_offset); another sharing pattern is not modelled",
        )
    return freq, offset


def _dsa_fields(text: dict, model_type: str, num_layers: int) -> dict[str, Any]:
    """DeepSeek Sparse Attention fields of a ``deepseek_v32`` / ``glm_moe_dsa`` config (HF
    ``index_n_heads`` / ``index_head_dim`` / ``index_topk`` → megatron-core ``dsa_indexer_*``). The
    indexer's KL loss follows Megatron Bridge's ``GLM5Bridge`` for GLM-5 (coefficient 0.001, sparse
    loss); DeepSeek-V3.2 has no Bridge provider, so megatron-core's defaults apply (coefficient 0: the
    indexer runs without gradients). Empty for other families.

    Raises:
        InputError: naming a missing indexer field or an ``indexer_types`` list moeplan cannot build.
    """
    if model_type not in DSA_MODEL_TYPES:
        return {}
    freq, offset = _dsa_sharing(text, num_layers)
    glm = model_type == "glm_moe_dsa"
    return {
        "dsa_indexer_n_heads": _need(text, "index_n_heads"),
        "dsa_indexer_head_dim": _need(text, "index_head_dim"),
        "dsa_indexer_topk": _need(text, "index_topk"),
        "dsa_indexer_topk_freq": freq,
        "dsa_indexer_skip_topk_offset": offset,
        "dsa_indexer_loss_coeff": 0.001 if glm else 0.0,
        "dsa_indexer_use_sparse_loss": glm,
    }


def _router_groups(text: dict, num_experts: int | None) -> dict[str, int | None]:
    """``moe_router_num_groups`` / ``moe_router_group_topk`` from ``n_group`` (Kimi-K3: ``num_expert_group``) and
    ``topk_group``, as Megatron Bridge maps them (``model_bridge.py``); one group (no limit) and a dense model
    read as None."""
    groups = _optional_int(text, "n_group", "num_expert_group")
    if not num_experts or groups is None or groups <= 1:
        return {"moe_router_num_groups": None, "moe_router_group_topk": None}
    return {"moe_router_num_groups": groups, "moe_router_group_topk": _optional_int(text, "topk_group")}


def _moe_fields(text: dict, model_type: str, top_type: str, num_layers: int) -> dict[str, Any]:
    """MLP and MoE fields: dense and expert widths, experts and top-k (None when no layer is MoE),
    shared experts, router and expert biases, the per-layer MoE pattern."""
    num_experts = _optional_int(text, "n_routed_experts", "num_experts", "num_local_experts")
    topk = _optional_int(text, "num_experts_per_tok", "experts_per_token", "moe_router_topk")
    expert_ffn, dense_ffn = _ffn_widths(text, model_type, top_type)
    moe_layers = _moe_layer_pattern(text, model_type, num_layers, num_experts)
    eff = None if not any(moe_layers) else num_experts
    is_llama4 = model_type.startswith("llama4") or top_type.startswith("llama4")
    shared, shared_gate = _shared_experts(text, expert_ffn, is_llama4, num_experts)
    return {
        "ffn_hidden_size": dense_ffn,
        "num_moe_experts": eff,
        "moe_router_topk": topk if eff else None,
        **_router_groups(text, eff),
        "moe_ffn_hidden_size": expert_ffn if eff else None,
        "moe_shared_expert_intermediate_size": shared if eff else None,
        "moe_latent_size": _optional_int(text, "moe_latent_size") if eff else None,
        "moe_shared_expert_gate": shared_gate and bool(eff),
        "moe_router_bias": "gpt_oss" in top_type,
        "moe_router_expert_bias": str(_get(text, "topk_method", default="")) == "noaux_tc"
        or model_type == "nemotron_h"
        or bool(_get(text, "use_routing_bias")),  # MiniMax-M2: e_score_correction_bias
        "moe_expert_bias": "gpt_oss" in top_type,
        "moe_layers": moe_layers,
    }


#: Nemotron-H's ``layers_block_type`` entries → Megatron's hybrid symbols
_BLOCK_SYMBOLS = {"mamba": "M", "attention": "*", "moe": "E", "mlp": "-"}


def _hybrid_pattern_of(text: dict, num_layers: int) -> str | None:
    """The hybrid layer pattern of a Nemotron-H config: ``hybrid_override_pattern`` (a string) or
    ``layers_block_type`` (a list of mamba / attention / moe / mlp); None for other configs.

    Raises:
        InputError: naming the field when it is not one symbol per layer of a kind moeplan models.
    """
    if text.get("hybrid_override_pattern") is not None:
        key, raw = "hybrid_override_pattern", text["hybrid_override_pattern"]
    elif text.get("layers_block_type") is not None:
        key, raw = "layers_block_type", text["layers_block_type"]
        if not isinstance(raw, list) or any(b not in _BLOCK_SYMBOLS for b in raw):
            raise InputError(f"config.json:{key}", raw, f"a list of {', '.join(_BLOCK_SYMBOLS)}, one per layer")
        raw = "".join(_BLOCK_SYMBOLS[b] for b in raw)
    else:
        return None
    pattern = _hybrid_pattern(f"config.json:{key}", raw)
    if len(pattern) != num_layers:
        raise InputError(f"config.json:{key}", f"{len(pattern)} layers", f"one per layer ({num_layers})")
    return pattern


def _hybrid_fields(text: dict, num_layers: int) -> dict[str, Any]:
    """The Mamba-2 hybrid fields (HF ``NemotronHConfig`` → Megatron ``MambaModel``): the pattern,
    the per-layer kinds it implies, Mamba-2 heads / head dim / state / groups / conv kernel / chunk,
    and no experts when no layer is ``E``. Empty for configs without a pattern."""
    pattern = _hybrid_pattern_of(text, num_layers)
    if pattern is None:
        return {}
    kinds, moe = hybrid_kinds(pattern)
    out: dict[str, Any] = {"hybrid_layer_pattern": pattern, "attention_kinds": kinds, "moe_layers": moe}
    if "M" in pattern:
        out["mamba_num_heads"] = _need(text, "mamba_num_heads")
        out["mamba_head_dim"] = _need(text, "mamba_head_dim")
        out["mamba_state_dim"] = _need(text, "ssm_state_size")
        out["mamba_num_groups"] = _need(text, "n_groups")
        out["mamba_conv_kernel"] = _need(text, "conv_kernel")
        out["mamba_chunk_size"] = _optional_int(text, "chunk_size") or 128
    if "E" not in pattern:
        out.update(num_moe_experts=None, moe_router_topk=None, moe_ffn_hidden_size=None)
        out.update(moe_shared_expert_intermediate_size=None, moe_router_expert_bias=False, moe_latent_size=None)
    return out


#: the HF spellings of a Nemotron-H MTP depth's layers: a pattern string (Nemotron-3 Super) or a list
#: of block types (Nemotron-3 Ultra, Nemotron-3.5 Lightning; transformers ≥ 5)
_MTP_PATTERN_KEYS = ("mtp_hybrid_override_pattern", "mtp_layers_block_type")


def _hybrid_mtp_fields(text: dict, pattern: str | None) -> dict[str, Any]:
    """The hybrid MTP block of a Nemotron-H config: its layer pattern from ``mtp_hybrid_override_pattern``
    or ``mtp_layers_block_type``, one block reused at every depth (Megatron Bridge
    ``NemotronHBridge.provider_bridge`` at v0.6.0: ``mtp_use_repeated_layer`` defaults to True; HF
    ``num_nextn_predict_layers`` gives the MTP blocks). Empty without MTP.

    Raises:
        InputError: naming the field when it is not one symbol per layer of a kind moeplan models, or
            names a layer kind the decoder pattern lacks, or comes without a decoder pattern.
    """
    key = next((k for k in _MTP_PATTERN_KEYS if text.get(k) not in (None, "", [])), None)
    depths = _optional_int(text, "num_nextn_predict_layers", "mtp_num_hidden_layers") or 0
    if key is None or not depths:
        return {}
    raw = text[key]
    if key == "mtp_layers_block_type":
        if not isinstance(raw, list) or any(b not in _BLOCK_SYMBOLS for b in raw):
            raise InputError(f"config.json:{key}", raw, f"a list of {', '.join(_BLOCK_SYMBOLS)}, one per MTP layer")
        raw = "".join(_BLOCK_SYMBOLS[b] for b in raw)
    mtp = _hybrid_pattern(f"config.json:{key}", raw)
    if pattern is None or any(c not in pattern for c in mtp):
        raise InputError(
            f"config.json:{key}",
            raw,
            f"MTP layers of kinds the decoder pattern has ({pattern!r}; another kind is not modelled)",
        )
    return {"mtp_layer_pattern": mtp, "mtp_use_repeated_layer": True}


def _gemma4_fields(top: dict, text: dict, model_type: str) -> dict[str, Any]:
    """The Gemma-4 MoE fields (HF ``Gemma4TextConfig`` → Megatron Bridge
    ``Gemma4Bridge._build_moe_provider`` and ``modeling_gemma4.py``, v0.6.0); empty for other families.

    - the dense MLP beside the experts (``enable_moe_block``) is Bridge's ungated shared expert of
      ``intermediate_size``; ``num_experts`` routed experts of ``moe_intermediate_size``, top
      ``top_k_experts``, in every layer;
    - full-attention layers take ``global_head_dim`` and ``num_global_key_value_heads``
      (``Gemma4SelfAttention``); with ``attention_k_eq_v`` their values are the keys (Bridge still
      allocates the value rows of ``linear_qkv``, which its export drops);
    - Q/K RMSNorms and a weightless value RMSNorm; five RMSNorm(h) per layer beyond Megatron's two
      (post-attention, pre-shared-expert, post-MLP, post-routed-expert, post-shared-expert); the router's
      learned input scale (h) and per-expert scale (E);
    - a ``gemma4_vision`` tower is accepted and not counted (``vision_not_counted``).
    """
    if not model_type.startswith("gemma4"):
        return {}
    vc = top.get("vision_config")
    return {
        "num_moe_experts": _need(text, "num_experts"),
        "moe_router_topk": _need(text, "top_k_experts"),
        "moe_ffn_hidden_size": _need(text, "moe_intermediate_size"),
        "moe_shared_expert_intermediate_size": _need(text, "intermediate_size"),
        "moe_shared_expert_gate": False,
        "qk_layernorm": True,
        "global_kv_channels": _optional_int(text, "global_head_dim"),
        "global_num_query_groups": _optional_int(text, "num_global_key_value_heads"),
        "attention_k_eq_v": bool(text.get("attention_k_eq_v")),
        "value_norm": True,
        "extra_layer_norms": GEMMA4_EXTRA_LAYER_NORMS,
        "moe_router_scales": True,
        "vision_not_counted": str(vc.get("model_type")) if isinstance(vc, dict) else None,
    }


#: RMSNorm(h) weights of a Gemma-4 MoE layer beyond input_layernorm and pre_mlp_layernorm (Megatron
#: Bridge ``modeling_gemma4.py`` v0.6.0: the norm fused into ``linear_proj``
#: (``TERowParallelLinearLayerNorm``), ``pre_shared_expert_layernorm``, ``post_ffn_layernorm``,
#: ``post_moe_layernorm`` and ``post_shared_expert_layernorm``)
GEMMA4_EXTRA_LAYER_NORMS = 5


def model_from_hf_config(config: dict, name: str, source: str = "user") -> ModelSpec:
    """Build a :class:`ModelSpec` from a Hugging Face ``config.json`` mapping.

    Handles dense GQA (Llama, Qwen3), MoE with shared experts and dense-first layers (DeepSeek,
    Kimi-K2, GLM-4.5), ``mlp_only_layers`` / ``decoder_sparse_step`` (Qwen3-MoE), MLA (q/kv LoRA
    ranks, nope/rope/v head dims), MTP (``num_nextn_predict_layers`` / ``mtp_num_hidden_layers``),
    Gated DeltaNet hybrids (Qwen3-Next, Qwen3.5), sliding-window layers and attention sinks
    (gpt-oss), and VLMs (``text_config`` + ``vision_config``; Llama 4's vision tower from the
    ``_supplement`` block when the config body lacks it).

    Raises:
        InputError: when a required field (hidden size, layers, heads, vocab) is missing or of the
            wrong type, the config leaves the model incomplete (e.g. a dense model without an MLP
            width), or it names a layer type or field moeplan does not model
            (:func:`moeplan.inputs.hf_families.refuse_unmodelled`): never a silently different model.
    """
    text_config = config.get("text_config")
    if text_config is not None and not isinstance(text_config, dict):
        raise InputError(
            "config.json:text_config", type(text_config).__name__, "a mapping (the language model's config)"
        )
    text = dict(text_config or config)
    model_type = str(text.get("model_type") or config.get("model_type") or "")
    refuse_unmodelled(config, text, model_type)
    try:
        return _model_from_text(config, text, model_type, name, source)
    except InputError:
        raise
    except (TypeError, ValueError, KeyError, AttributeError, ZeroDivisionError, OverflowError) as exc:
        # the last resort for a malformed field the checks above did not name
        raise InputError(
            "config.json", name, f"a well-formed Hugging Face config.json ({type(exc).__name__}: {exc})"
        ) from None


def _num_layers(text: dict, model_type: str) -> int:
    """Decoder layers: ``num_hidden_layers`` (``num_layers`` / ``n_layer``); a ``nemotron_h`` config that
    gives only its ``layers_block_type`` list has one layer per entry (HF ``NemotronHConfig``:
    ``num_hidden_layers`` is the list's length, Nemotron-3 Ultra's config.json has no other).

    Raises:
        InputError: naming the field when neither is given or the value is not a positive integer.
    """
    blocks = text.get("layers_block_type")
    given = _get(text, "num_hidden_layers", "num_layers", "n_layer")
    if model_type == "nemotron_h" and given is None and isinstance(blocks, list) and blocks:
        return len(blocks)
    return _need(text, "num_hidden_layers", "num_layers", "n_layer")


def _unbuilt_mtp_modules(text: dict, model_type: str) -> int:
    """MTP modules a MiniMax-M2 config declares (``use_mtp`` with ``num_mtp_modules``), or a MiniMax-M3
    config (``num_mtp_modules``), that Megatron does not build: Megatron Bridge's ``MiniMaxM2Bridge`` (v0.6.0) lists "MTP modules are not mapped" and its
    base mapping reads only ``num_nextn_predict_layers`` / ``mtp_num_hidden_layers`` into
    ``mtp_num_layers``, and the published MiniMax-M2.5 checkpoint's 229B parameters hold no MTP weights.
    0 for every other family.

    Raises:
        InputError: naming ``num_mtp_modules`` when it is not a non-negative integer.
    """
    if model_type == "minimax_m3":  # Bridge's MiniMaxM3Bridge forces mtp_num_layers to None: no mtp.* weights
        return _optional_int(text, "num_mtp_modules") or _mtp_layers(text)
    if model_type != "minimax_m2" or not _get(text, "use_mtp"):
        return 0
    return _optional_int(text, "num_mtp_modules") or 0


def _mtp_layers(text: dict) -> int:
    """MTP layers the config declares (``num_nextn_predict_layers`` / ``mtp_num_hidden_layers``; 0 when absent).

    Raises:
        InputError: naming the field when it is not a non-negative integer.
    """
    return _optional_int(text, "num_nextn_predict_layers", "mtp_num_hidden_layers") or 0


def _model_from_text(top: dict, text: dict, model_type: str, name: str, source: str) -> ModelSpec:
    """:func:`model_from_hf_config` past the refusals: the mapping itself."""
    top_type = str(top.get("model_type") or model_type)
    _check_integer_fields(text)
    hidden = _need(text, "hidden_size", "d_model")
    num_layers = _num_layers(text, model_type)
    heads = _need(text, "num_attention_heads", "n_head")
    vocab = _need(text, "vocab_size")
    for key, v in (("hidden_size", hidden), ("num_layers", num_layers), ("num_attention_heads", heads)):
        if v > MODEL_INT_RANGES[key][1]:  # checked before any per-layer tuple is built
            raise InputError(f"config.json:{key}", v, f"an integer up to {MODEL_INT_RANGES[key][1]:,}")
    tie = top.get("tie_word_embeddings", text.get("tie_word_embeddings", False))
    fields = {
        **_attention_fields(text, model_type, top_type, hidden, heads),
        **_moe_fields(text, model_type, top_type, num_layers),
        "attention_kinds": _attention_kinds(text, model_type, num_layers),
        **_hybrid_fields(text, num_layers),
        **_hybrid_mtp_fields(text, _hybrid_pattern_of(text, num_layers)),
        **_dsa_fields(text, model_type, num_layers),
        **_gemma4_fields(top, text, model_type),
        **dsv4_fields(text, model_type, num_layers),
        **kimi_k3_fields(top, text, model_type, num_layers),
        **msa_fields(text, model_type, num_layers),
    }
    return ModelSpec(
        name=name,
        model_type=top_type,
        unmapped_model_type=None if model_type in KNOWN_MODEL_TYPES else model_type,
        num_layers=num_layers,
        hidden_size=hidden,
        num_attention_heads=heads,
        vocab_size=vocab,
        max_position_embeddings=_optional_int(text, "max_position_embeddings"),
        untie_embeddings_and_output_weights=not bool(tie),
        gated_linear_unit=str(_get(text, "hidden_act", "mlp_hidden_act", default="silu"))
        in ("silu", "swiglu", "gelu_glu", "situ", "swigluoai")  # situ: Kimi-K3's gated SiTU (gate · linear)
        or model_type.startswith("gemma4"),  # Gemma-4: gated GELU (gate, up, down), Bridge's GLU + fast_gelu
        # gpt-oss: clamped SwiGLU with x·σ(1.702x) (Megatron's GPT-OSS provider: quick-GELU gate)
        clamped_glu=_get(text, "swiglu_limit") is not None and model_type != "deepseek_v4",
        normalization="RMSNorm",
        **fields,
        mtp_num_layers=0 if model_type == "minimax_m3" else _mtp_layers(text),
        unbuilt_mtp_modules=_unbuilt_mtp_modules(text, model_type),
        vision=_vision_of(top, hidden),
        source=source,
        reconstructed=bool(top.get("_reconstructed", False)),
        published_params=dict(top.get("_published_params") or {}),
        measured_params=dict(top.get("_measured_params") or {}),
    )


def partial_model(overrides: dict[str, Any] | None, name: str = "custom") -> PartialModelSpec:
    """A model known only through explicit fields (no config.json), e.g. ``num_layers: 80``: a
    :class:`ModelSpec` when the fields make it complete, else a :class:`PartialModelSpec` (which only
    the rules take).

    Raises:
        UnknownNameError / InputError: as :meth:`PartialModelSpec.with_overrides`.
    """
    part = PartialModelSpec(name=name, source="overrides").with_overrides(overrides)
    return part.completed() if not part.missing_fields() else part
