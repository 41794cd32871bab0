"""Which Hugging Face ``config.json`` families moeplan models, and the refusal of everything else.

A config whose architecture moeplan cannot represent must never become a silently different model
(e.g. a Mamba hybrid built as attention + MoE layers, or Kimi Delta Attention built as softmax
attention). :func:`refuse_unmodelled` raises an :class:`~moeplan.errors.InputError` naming the first
field (and its value) that moeplan does not model:

- a field in :data:`UNMODELLED_FIELDS` (each with what it is and which family uses it), in any config;
- a per-layer list whose entries name a layer kind moeplan has no model for (``layer_types``,
  ``attn_type_list``, ``mlp_layer_types``);
- a vision or audio tower other than the Qwen3-VL / Qwen3.5, Llama 4 and Kimi-K2.5 MoonViT towers
  (and MoonViT variants other than :data:`MOONVIT_VARIANT`);
- for a ``model_type`` outside :data:`KNOWN_MODEL_TYPES`, any field outside :data:`GENERIC_KEYS` (the
  fields whose meaning is the same in every family, and those the mapping reads): moeplan cannot
  know what an unfamiliar field does to the parameter count.

Families and fields from the HF modelling files and the configs vendored under
``tests/data/hf_configs`` (their sources are listed in that folder's README).
"""

from __future__ import annotations

from typing import Any

from moeplan.errors import InputError

#: what moeplan models, for the error messages
MODELLED = (
    "dense and MoE decoders (GQA or MLA attention, DeepSeek Sparse Attention, full / sliding-window / chunked layers, Gated "
    "DeltaNet hybrids, Kimi-K3's Kimi Delta Attention hybrid, Mamba-2 / attention / MoE / MLP hybrids of Nemotron-H, shared experts, the latent "
    "MoE of Nemotron-3, DeepSeek-V4's compressed sparse attention, MiniMax-M3's block-sparse attention, "
    "hyper-connections and hash-routed layers, "
    "the Gemma-4 MoE with its own global-layer heads, MTP) and "
    "the Qwen3-VL / Qwen3.5 / Llama 4 / Kimi-K2.5 MoonViT vision towers"
)

#: HF ``model_type`` values whose mapping moeplan implements and checks against published totals
KNOWN_MODEL_TYPES = frozenset(
    {
        "llama",
        "mistral",
        "mixtral",
        "qwen2",
        "qwen2_moe",
        "qwen3",
        "qwen3_moe",
        "qwen3_next",
        "qwen3_vl",
        "qwen3_vl_text",
        "qwen3_vl_moe",
        "qwen3_vl_moe_text",
        "qwen3_5",
        "qwen3_5_text",
        "qwen3_5_moe",
        "qwen3_5_moe_text",
        "deepseek_v2",
        "deepseek_v3",
        "kimi_k2",
        "glm4_moe",
        "gpt_oss",
        "llama4",
        "llama4_text",
        "nemotron_h",
        "minimax_m2",
        "minimax_m3",
        "deepseek_v4",
        "deepseek_v32",
        "glm_moe_dsa",
        "gemma4",
        "gemma4_text",
        "kimi_linear",
    }
)

#: Gemma-4 fields moeplan models in a ``gemma4`` / ``gemma4_text`` config (``inputs.model_spec._gemma4_fields``,
#: Megatron Bridge's ``Gemma4ModelProvider``); per-layer input embeddings, KV-shared layers and
#: double-wide MLPs (Bridge's ``Gemma4DenseProvider`` only) stay refused
GEMMA4_MODELLED = frozenset({"global_head_dim", "num_global_key_value_heads", "attention_k_eq_v", "enable_moe_block"})
#: vision-tower ``model_type`` prefixes accepted and not counted (the model states it:
#: ``ModelSpec.vision_not_counted``): Gemma-4's SigLIP-style tower, which moeplan has no shapes for
UNCOUNTED_VISION_TYPES = ("gemma4",)

#: Mamba-2 hybrid fields moeplan models in a ``nemotron_h`` config (``inputs.model_spec._hybrid_fields``)
NEMOTRON_H_MODELLED = frozenset(
    {"hybrid_override_pattern", "layers_block_type", "ssm_state_size", "mamba_num_heads", "moe_latent_size"}
    | {"mtp_hybrid_override_pattern", "mtp_layers_block_type"}  # the hybrid MTP block (_hybrid_mtp_fields)
)
#: DeepSeek Sparse Attention fields moeplan models in a ``deepseek_v32`` / ``glm_moe_dsa`` config
#: (``inputs.model_spec._dsa_fields``); any other family carrying them stays refused
DSA_MODELLED = frozenset({"index_topk", "index_n_heads", "index_head_dim", "indexer_types"})

#: Kimi-K3 fields moeplan models in a ``kimi_linear`` text config (``inputs.kimi_k3_config.kimi_k3_fields``)
KIMI_K3_MODELLED = frozenset({"linear_attn_config", "attn_res_block_size"})

#: MiniMax-M3 fields moeplan models in a ``minimax_m3`` config (``inputs.msa_config.msa_fields``: MiniMax
#: Sparse Attention, the shared expert; MTP modules not built, ``ModelSpec.unbuilt_mtp_modules``)
MINIMAX_M3_MODELLED = frozenset({"sparse_attention_config", "shared_intermediate_size", "num_mtp_modules"})

#: DeepSeek-V4 fields moeplan models in a ``deepseek_v4`` config (``inputs.dsv4_config.dsv4_fields``)
DSV4_MODELLED = frozenset(
    {"compress_ratios", "hc_mult", "o_groups", "o_lora_rank", "num_hash_layers", "index_topk", "index_n_heads"}
    | {"index_head_dim"}
)

#: fields whose presence (with a value other than null / false / 0 / empty) means an architecture
#: moeplan does not model: field → what it is (and where it comes from)
UNMODELLED_FIELDS: dict[str, str] = {
    # state-space / Mamba layers
    "hybrid_override_pattern": "Mamba-2 / attention / MLP hybrid layers (Nemotron-H)",
    "layers_block_type": "Mamba-2 / attention / MoE hybrid layers (Nemotron-H, Jamba)",
    "ssm_state_size": "state-space (Mamba) layers",
    "mamba_num_heads": "Mamba-2 layers",
    "mamba_n_heads": "Mamba-2 layers (GraniteMoeHybrid)",
    "mamba_d_state": "Mamba layers (Jamba, GraniteMoeHybrid, Falcon-H1)",
    "mamba_expand": "Mamba layers (Jamba, GraniteMoeHybrid, Falcon-H1)",
    "attn_layer_period": "Mamba layers between attention layers (Jamba)",
    "attn_layer_offset": "Mamba layers between attention layers (Jamba)",
    "expert_layer_period": "MoE every n-th layer of a Mamba hybrid (Jamba)",
    # compressed / sparse attention (DeepSeek-V4 first: its config also carries DSA indexer fields)
    "compress_ratios": "compressed sparse attention (DeepSeek-V4)",
    "hc_mult": "hyper-connections, several residual streams (DeepSeek-V4)",
    "o_groups": "a grouped low-rank output projection (DeepSeek-V4)",
    "o_lora_rank": "a low-rank output projection (DeepSeek-V4)",
    "num_hash_layers": "hash-routed MoE layers (DeepSeek-V4)",
    "index_topk": "DeepSeek Sparse Attention's lightning indexer (DeepSeek-V3.2, GLM-5)",
    "index_n_heads": "DeepSeek Sparse Attention's lightning indexer (DeepSeek-V3.2, GLM-5)",
    "index_head_dim": "DeepSeek Sparse Attention's lightning indexer (DeepSeek-V3.2, GLM-5)",
    "indexer_types": "DeepSeek Sparse Attention indexers shared across layers (GLM-5.x)",
    "index_topk_pattern": "a per-layer top-k pattern of DeepSeek Sparse Attention indexers (GLM-5.x)",
    "sparse_attention_config": "block-sparse attention with an indexer (MiniMax-M3)",
    "linear_attn_config": "Kimi Delta Attention layers (Kimi-Linear, Kimi-K3)",
    "attn_res_block_size": "attention residual blocks (Kimi-K3)",
    # per-layer heterogeneous shapes
    "block_configs": "a different block shape per layer (NAS / Puzzle: DeciLM, Llama-Nemotron)",
    "hybrid_layer_pattern": "a per-layer sliding / full attention pattern with its own head counts (MiMo-V2)",
    "swa_num_attention_heads": "other attention heads on sliding-window layers (MiMo-V2)",
    "swa_num_key_value_heads": "other key-value heads on sliding-window layers (MiMo-V2)",
    "swa_head_dim": "another head dim on sliding-window layers (MiMo-V2)",
    "global_head_dim": "another head dim on global attention layers (Gemma-4)",
    "num_global_key_value_heads": "other key-value heads on global attention layers (Gemma-4)",
    "attention_k_eq_v": "keys reused as values (Gemma-4)",
    "enable_moe_block": "a dense MLP and an MoE block in the same layer (Gemma-4)",
    "hidden_size_per_layer_input": "per-layer input embeddings (Gemma-3n / Gemma-4)",
    "num_kv_shared_layers": "key-value caches shared across layers (Gemma-3n / Gemma-4)",
    "use_double_wide_mlp": "double-width MLPs on some layers (Gemma-4)",
    # MoE variants
    "moe_latent_size": "latent MoE, experts in a narrower latent space (Nemotron-3 Super / Ultra)",
    "moe_num_experts": "ERNIE-4.5's expert layout (moe_layer_start_index / moe_k)",
    "use_mixed_mlp_moe": "Hunyuan's mixed dense + MoE MLP",
    "num_mtp_modules": "MiniMax's MTP modules",
    "shared_intermediate_size": "MiniMax's shared expert",
    "mtp_hybrid_override_pattern": "hybrid MTP layers (Nemotron-3)",
    "mtp_layers_block_type": "hybrid MTP layers (Nemotron-3)",
}

#: per-layer kinds moeplan models in ``layer_types`` (HF's names)
LAYER_TYPES = frozenset({"full_attention", "sliding_attention", "linear_attention"})
#: ``mlp_layer_types`` entries (GLM-5.x): dense MLP or routed experts
MLP_LAYER_TYPES = frozenset({"dense", "sparse"})
#: vision-tower ``model_type`` prefixes moeplan models (``inputs.model_spec.VisionSpec``)
VISION_TYPES = ("qwen3_vl", "qwen3_5", "llama4")


def _words(text: str) -> list[str]:
    return text.split()


#: fields with the same meaning in every family (tokens, rope, dtypes, generation and training
#: settings, which do not change the parameter count) and the fields the mapping reads; a config of
#: an unknown ``model_type`` may carry only these
GENERIC_KEYS = frozenset(
    _words(
        # read by inputs.model_spec.model_from_hf_config
        "hidden_size num_hidden_layers num_attention_heads num_key_value_heads head_dim vocab_size "
        "intermediate_size max_position_embeddings tie_word_embeddings hidden_act attention_bias model_type "
        "text_config vision_config n_routed_experts num_experts num_local_experts num_experts_per_tok "
        "moe_intermediate_size n_shared_experts shared_expert_intermediate_size first_k_dense_replace "
        "moe_layer_freq mlp_only_layers decoder_sparse_step topk_method num_nextn_predict_layers "
        "mtp_num_hidden_layers q_lora_rank kv_lora_rank qk_nope_head_dim qk_rope_head_dim v_head_dim "
        "sliding_window use_sliding_window layer_types use_qk_norm norm_topk_prob n_group topk_group "
        # names, ids, dtypes, runtime and generation settings
        "architectures auto_map _name_or_path transformers_version torch_dtype dtype bos_token_id "
        "eos_token_id pad_token_id sep_token_id decoder_start_token_id use_cache initializer_range "
        "quantization_config tokenizer_class use_bfloat16 return_dict output_attentions output_hidden_states "
        "torchscript pruned_heads id2label label2id problem_type finetuning_task task_specific_params prefix "
        "is_decoder is_encoder_decoder add_cross_attention cross_attention_hidden_size tie_encoder_decoder "
        "chunk_size_feed_forward tf_legacy_loss max_length min_length do_sample early_stopping num_beams "
        "num_beam_groups diversity_penalty temperature top_k top_p typical_p repetition_penalty "
        "length_penalty no_repeat_ngram_size encoder_no_repeat_ngram_size bad_words_ids num_return_sequences "
        "output_scores return_dict_in_generate forced_bos_token_id forced_eos_token_id remove_invalid_values "
        "exponential_decay_length_penalty suppress_tokens begin_suppress_tokens num_logits_to_keep "
        "pretraining_tp "
        # norms, dropout, rope and routing numerics (no parameters)
        "rms_norm_eps layer_norm_epsilon layernorm_epsilon norm_eps attention_dropout hidden_dropout "
        "rope_theta rope_scaling rope_parameters partial_rotary_factor rope_interleave max_window_layers "
        "use_mrope router_aux_loss_coef output_router_logits routed_scaling_factor scoring_func "
        "aux_loss_alpha seq_aux ep_size "
        # moeplan's own annotations
        "_source _published_params _measured_params _notes _reconstructed _supplement "
    )
)


def _given(value: Any) -> bool:
    """A field counts as present unless null, false, 0 or empty."""
    return value is not None and value is not False and value != 0 and value != [] and value != {} and value != ""


def _shown(value: Any) -> Any:
    """A value short enough for an error message (lists and mappings abridged)."""
    if isinstance(value, list) and len(value) > 6:
        return f"[{', '.join(repr(v) for v in value[:4])}, ... ({len(value)} entries)]"
    if isinstance(value, dict):
        return "{" + ", ".join(sorted(str(k) for k in value)[:6]) + (", ...}" if len(value) > 6 else "}")
    return value


def _refuse(key: str, value: Any, what: str) -> InputError:
    return InputError(
        f"config.json:{key}",
        _shown(value),
        f"a model moeplan can build: {what} is not modelled (moeplan models {MODELLED})",
    )


def _check_layer_lists(text: dict) -> None:
    """Per-layer kind lists: every entry must name a kind moeplan models."""
    for key, known in (("layer_types", LAYER_TYPES), ("mlp_layer_types", MLP_LAYER_TYPES)):
        kinds = text.get(key)
        if kinds is None:
            continue
        if not isinstance(kinds, list):
            raise InputError(f"config.json:{key}", _shown(kinds), "a list with one entry per layer")
        odd = sorted({str(k) for k in kinds if k not in known})
        if odd:
            raise _refuse(key, kinds, f"the layer kind {odd[0]!r}")
    attn = text.get("attn_type_list")  # MiniMax: 1 softmax attention, 0 lightning (linear) attention
    if isinstance(attn, list) and any(a != 1 for a in attn):
        raise _refuse("attn_type_list", attn, "lightning (linear) attention layers (MiniMax)")
    if text.get("qk_norm_type") not in (None, "per_head", "per_layer"):  # per_layer: qk_layernorm_full_dim
        raise _refuse("qk_norm_type", text["qk_norm_type"], "a QK norm over all heads at once")


def _check_towers(top: dict) -> None:
    """Only the vision towers of :data:`VISION_TYPES` (and those of :data:`UNCOUNTED_VISION_TYPES`,
    accepted and not counted), and no audio tower."""
    if _given(top.get("audio_config")):
        raise _refuse("audio_config", top["audio_config"], "an audio tower")
    vc = top.get("vision_config")
    if vc is None and isinstance(top.get("_supplement"), dict):
        vc = top["_supplement"].get("vision_config")
    if vc is None:
        return
    if not isinstance(vc, dict):
        raise InputError("config.json:vision_config", _shown(vc), "a mapping (the vision tower's config)")
    if is_moonvit_config(vc) and top.get("model_type") in MOONVIT_MODEL_TYPES:
        _check_moonvit(vc)
        return
    if is_moonvit_config(vc) and top.get("model_type") == "kimi_k3":
        return  # accepted, not counted: Megatron Bridge builds Kimi-K3's language backbone only
    kind = str(vc.get("model_type") or "")
    if not kind.startswith(VISION_TYPES + UNCOUNTED_VISION_TYPES):
        raise _refuse("vision_config.model_type", kind or None, f"the vision tower {kind or '(no model_type)'!r}")


#: top-level ``model_type`` values whose ``vision_config`` is a MoonViT3d tower (Kimi-K2.5)
MOONVIT_MODEL_TYPES = ("kimi_k25",)
#: the MoonViT variant moeplan models (Moonshot's ``modeling_kimi_k25.py``, which raises
#: NotImplementedError for any other): field → the one value modelled
MOONVIT_VARIANT = {"merge_type": "sd2_tpool", "pos_emb_type": "divided_fixed", "mm_projector_type": "patchmerger"}


def is_moonvit_config(vc: dict) -> bool:
    """True for a MoonViT ``vision_config`` (Kimi-K2.5: MoonViT's ``vt_*`` widths and no ``model_type``)."""
    return "vt_hidden_size" in vc and not vc.get("model_type")


def _check_moonvit(vc: dict) -> None:
    """A MoonViT tower of the variant :data:`MOONVIT_VARIANT` names (a field left out takes that value).

    Raises:
        InputError: naming ``vision_config.<field>``, its value and the one value modelled.
    """
    for key, value in MOONVIT_VARIANT.items():
        if vc.get(key, value) != value:
            raise _refuse(f"vision_config.{key}", vc[key], f"the MoonViT {key} {vc[key]!r} (moeplan models {value!r})")


def refuse_unmodelled(top: dict, text: dict, model_type: str) -> None:
    """Raise when the config names a layer type or field moeplan does not model.

    Args:
        top: the whole config.json mapping; text: the language model's part (``text_config`` or the
            whole); model_type: the language model's ``model_type``.

    Raises:
        InputError: naming the first such field (``config.json:<field>``), its value and what moeplan
            models.
    """
    for key, what in UNMODELLED_FIELDS.items():
        if model_type == "nemotron_h" and key in NEMOTRON_H_MODELLED:
            continue
        if model_type == "minimax_m2" and key == "num_mtp_modules":  # not built: ModelSpec.unbuilt_mtp_modules
            continue
        if model_type == "minimax_m3" and key in MINIMAX_M3_MODELLED:  # inputs.msa_config.msa_fields
            continue
        if model_type in ("deepseek_v32", "glm_moe_dsa") and key in DSA_MODELLED:
            continue
        if model_type == "deepseek_v4" and key in DSV4_MODELLED:
            continue
        if model_type.startswith("gemma4") and key in GEMMA4_MODELLED:
            continue
        if model_type == "kimi_linear" and key in KIMI_K3_MODELLED:
            continue
        for part in (text, top):
            if key in part and _given(part[key]):
                raise _refuse(key, part[key], what)
    _check_layer_lists(text)
    _check_towers(top)
    if model_type.startswith("gemma4") and not _given(text.get("enable_moe_block")):
        raise _refuse(
            "enable_moe_block",
            text.get("enable_moe_block"),
            "the dense Gemma-4 (Megatron Bridge's Gemma4DenseProvider: its own layer spec, PP = 1 only)",
        )
    if model_type in KNOWN_MODEL_TYPES:
        return
    unknown = sorted(k for k in text if k not in GENERIC_KEYS and _given(text[k]))
    if unknown:
        raise InputError(
            f"config.json:{unknown[0]}",
            _shown(text[unknown[0]]),
            f"fields moeplan knows: model_type {model_type or '(none)'!r} is not one it maps "
            f"({', '.join(sorted(KNOWN_MODEL_TYPES))}), and it cannot tell what {unknown[0]!r}"
            + (f" (and {len(unknown) - 1} more unknown fields)" if len(unknown) > 1 else "")
            + " does to the model",
        )
