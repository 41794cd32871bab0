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
from dataclasses import dataclass, field
from typing import Any, Literal, cast

from moeplan.errors import InputError, UnknownNameError
from moeplan.inputs.hf_families import refuse_unmodelled
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
    "linear_conv_kernel_dim": (1, 1024),
    "mamba_conv_kernel": (1, 1024),
    "mamba_chunk_size": (1, 2**16),
    "mamba_num_heads": _HEADS,
    "mamba_num_groups": _HEADS,
    "mamba_head_dim": _WIDTH,
    "mamba_state_dim": _WIDTH,
    **{
        k: _HEADS for k in ("num_attention_heads", "num_query_groups", "linear_num_key_heads", "linear_num_value_heads")
    },
    **{k: _TOKENS for k in ("max_position_embeddings", "sliding_window", "attention_chunk_size")},
    **{
        k: _WIDTH
        for k in (
            "hidden_size",
            "ffn_hidden_size",
            "kv_channels",
            "q_lora_rank",
            "kv_lora_rank",
            "qk_head_dim",
            "qk_pos_emb_head_dim",
            "v_head_dim",
            "moe_ffn_hidden_size",
            "moe_shared_expert_intermediate_size",
            "linear_key_head_dim",
            "linear_value_head_dim",
        )
    },
}
#: text model fields (at most 200 printable characters) and the one field with a closed set of values
_TEXT_FIELDS = ("name", "model_type", "source")
_NORMALIZATIONS = ("RMSNorm", "LayerNorm")


def _override_list(key: str, value: Any) -> tuple:
    """A per-layer override (``moe_layers``: booleans; ``attention_kinds``: kinds) as a tuple.

    Raises:
        InputError: not a list, longer than the layer cap, or an item of the wrong kind.
    """
    field = f"model_overrides.{key}"
    top = MODEL_INT_RANGES["num_layers"][1]
    what = "a list of true/false, one per layer" if key == "moe_layers" else f"a list of {', '.join(ATTENTION_KINDS)}"
    if not isinstance(value, (list, tuple)) or len(value) > top:
        raise InputError(field, value, f"{what} (at most {top} entries)")
    for item in value:
        ok = isinstance(item, bool) if key == "moe_layers" else item in ATTENTION_KINDS and isinstance(item, str)
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
    if key in ("moe_layers", "attention_kinds"):
        return None if value is None else _override_list(key, value)
    if key == "hybrid_layer_pattern":
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
    lo, hi = MODEL_INT_RANGES[key]
    if value is None and key != "mtp_num_layers":
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise InputError(field, value, f"an integer from {lo} to {hi:,}")
    return value


@dataclass(frozen=True, kw_only=True)
class VisionSpec:
    """Vision tower of a VLM (ViT + patch merger / projector).

    Attributes:
        kind: ``qwen3_vl`` (Qwen3-VL / Qwen3.5: Conv3d patches, learned position table, 2-D merge,
            optional DeepStack mergers) or ``llama4`` (unfold-conv patches, class token, pixel shuffle).
        depth: number of ViT blocks.
        hidden_size, intermediate_size, num_heads: ViT widths (elements).
        patch_size: spatial patch edge in pixels; temporal_patch_size: frames per patch (video).
        spatial_merge_size: merge factor per side (image tokens to the LLM = patches / merge**2).
        out_hidden_size: width handed to the language model.
        deepstack_visual_indexes: ViT blocks whose features DeepStack injects (one extra merger each).
    """

    kind: Literal["qwen3_vl", "llama4"]
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
    attention_output_gate: bool = False
    attention_sinks: bool = False
    # MLA
    multi_latent_attention: bool = False
    q_lora_rank: int | None = None
    kv_lora_rank: int | None = None
    qk_head_dim: int | None = None
    qk_pos_emb_head_dim: int | None = None
    v_head_dim: int | None = None
    # MoE
    num_moe_experts: int | None = None
    moe_router_topk: int | None = None
    moe_ffn_hidden_size: int | None = None
    moe_shared_expert_intermediate_size: int | None = None
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
    # vision
    vision: VisionSpec | None = None
    # provenance
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

    def layer_has_mlp(self, layer: int) -> bool:
        """True when decoder layer ``layer`` (0-based) has an MLP or MoE block: every layer of a
        transformer; only the ``E`` and ``-`` layers of a hybrid pattern."""
        return self.hybrid_layer_pattern is None or self.hybrid_layer_pattern[layer] in "E-"

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
            if key not in names or key in ("vision", "published_params", "measured_params"):
                raise UnknownNameError(f"model_overrides.{key}", key, sorted(names), "a ModelSpec field:")
            changes[key] = override_value(key, value, isinstance(getattr(self, key), bool))
        new_layers = changes.get("num_layers")
        if new_layers is not None:
            for tup in ("moe_layers", "attention_kinds", "hybrid_layer_pattern"):
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
        for tup in ("moe_layers", "attention_kinds", "hybrid_layer_pattern"):
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
    heads, groups = m.num_attention_heads, m.num_query_groups
    if heads and groups and (groups > heads or heads % groups):
        key = blame("num_query_groups", "num_attention_heads")
        raise InputError(
            f"{prefix}{key}",
            getattr(m, key),
            f"query groups that divide the attention heads ({heads} heads, {groups} groups)",
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


def _vision_from_config(vc: dict | None, text_hidden: int, from_supplement: bool = False) -> VisionSpec | None:
    if not vc:
        return None
    mt = str(vc.get("model_type", ""))
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


def _check_integer_fields(text: dict) -> None:
    for key in _NON_NEGATIVE_INT_KEYS:
        val = text.get(key)
        if val is not None and (isinstance(val, bool) or not isinstance(val, int) or not 0 <= val <= MAX_CONFIG_INT):
            raise InputError(f"config.json:{key}", val, f"an integer from 0 to {MAX_CONFIG_INT}")


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


def _ffn_widths(text: dict, model_type: str, top_type: str) -> tuple[int | None, int | None]:
    """(routed-expert width, dense MLP width) by family: Llama 4's ``intermediate_size`` is the
    expert width (``intermediate_size_mlp`` the dense one); Mixtral's and gpt-oss's the expert width;
    elsewhere ``moe_intermediate_size`` and ``intermediate_size``."""
    if model_type.startswith("llama4") or top_type.startswith("llama4"):
        expert = _need(text, "intermediate_size")
        return expert, _optional_int(text, "intermediate_size_mlp") or expert
    if top_type in ("mixtral", "gpt_oss") or model_type in ("mixtral", "gpt_oss"):
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
    try:
        return _vision_from_config(vision_cfg, hidden, from_supp)
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
        "moe_ffn_hidden_size": expert_ffn if eff else None,
        "moe_shared_expert_intermediate_size": shared if eff else None,
        "moe_shared_expert_gate": shared_gate and bool(eff),
        "moe_router_bias": "gpt_oss" in top_type,
        "moe_router_expert_bias": str(_get(text, "topk_method", default="")) == "noaux_tc"
        or model_type == "nemotron_h",
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
        out.update(moe_shared_expert_intermediate_size=None, moe_router_expert_bias=False)
    return out


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


def _model_from_text(top: dict, text: dict, model_type: str, name: str, source: str) -> ModelSpec:
    """:func:`model_from_hf_config` past the refusals: the mapping itself."""
    top_type = str(top.get("model_type") or model_type)
    _check_integer_fields(text)
    hidden = _need(text, "hidden_size", "d_model")
    num_layers = _need(text, "num_hidden_layers", "num_layers", "n_layer")
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
    }
    return ModelSpec(
        name=name,
        model_type=top_type,
        num_layers=num_layers,
        hidden_size=hidden,
        num_attention_heads=heads,
        vocab_size=vocab,
        max_position_embeddings=_optional_int(text, "max_position_embeddings"),
        untie_embeddings_and_output_weights=not bool(tie),
        gated_linear_unit=str(_get(text, "hidden_act", "mlp_hidden_act", default="silu"))
        in ("silu", "swiglu", "gelu_glu"),
        # gpt-oss: clamped SwiGLU with x·σ(1.702x) (Megatron's GPT-OSS provider: quick-GELU gate)
        clamped_glu=_get(text, "swiglu_limit") is not None,
        normalization="RMSNorm",
        **fields,
        mtp_num_layers=_optional_int(text, "num_nextn_predict_layers", "mtp_num_hidden_layers") or 0,
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
