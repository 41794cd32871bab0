"""Vision tower cost per microbatch: FLOPs, saved activations, and what freezing changes.

Work per ViT patch and layer (forward, 2 FLOPs per multiply-add): QKV and output projections
``4·h²`` and the non-gated GELU MLP ``2·h·f`` (Qwen3-VL, Llama-4 and MoonViT ViTs), plus attention within
each image, ``2·2·h·P`` for ``P`` patches per image (QKᵀ and PV, non-causal). The merger / projector runs
per merged token: ``(h·m²)² + h·m²·out`` for Qwen3-VL's patch merger and each DeepStack merger, and for
MoonViT's ``PatchMergerMLP`` (the same shapes).
Backward is twice the forward; a frozen tower (``freeze_vision_model``) runs forward only and keeps
no activations for backward.

Saved activations per patch and layer (bf16, flash attention, no dropout): LayerNorm inputs 2·h, QKV
input h and output 3·h, attention output h, projection input h, FC1 input h, FC1 output and GELU
output 2·f — ``2·(9·h + 2·f)`` bytes, split by TP (sequence-parallel ViT). MoonViT (Kimi-K2.5) runs
as Moonshot's Hugging Face modules on every TP rank whole (Megatron Bridge ``kimi_vl``): its FLOPs and
activations are not split by TP, and its gradients are all-reduced over TP (not timed). The tower sits on the first
pipeline stage (Megatron Bridge); every CP rank runs it for the whole sequence's images (the image
embeddings are split by CP only after the merger).

Sources: transformers ``modeling_qwen3_vl`` / ``modeling_llama4`` vision blocks, Moonshot's
``modeling_kimi_k25.py`` (``MoonViTEncoderLayer``, ``PatchMergerMLP``); Korthikanti et al.
2022 (arXiv 2205.05198) for the activation accounting.
"""

from __future__ import annotations

from dataclasses import dataclass

from moeplan.errors import InputError
from moeplan.inputs.resolved import Scenario

#: ViT patches per sequence assumed when a VLM scenario has no ``workload`` (mock-data guard): half
#: of the sequence's tokens are image tokens, i.e. 2 patches per token with a 2×2 merge — a planning
#: value for a real multimodal mix, stated in every estimate that uses it
DEFAULT_IMAGE_TOKEN_SHARE = 0.5
DEFAULT_PATCHES_PER_IMAGE = 4096


@dataclass(frozen=True)
class VisionCost:
    """Per microbatch on one rank of the first stage.

    Attributes:
        patches: ViT patches processed.
        gemm_flops_fwd / attention_flops_fwd / merger_flops_fwd: forward FLOPs (TP split).
        activation_bytes: saved for backward (0 when frozen).
        trainable: the tower computes gradients.
        assumed: the workload was the mock-data default, not a measured one.
    """

    patches: float
    gemm_flops_fwd: float
    attention_flops_fwd: float
    merger_flops_fwd: float
    activation_bytes: float
    trainable: bool
    assumed: bool


def workload_patches(s: Scenario) -> tuple[float, float, bool]:
    """(ViT patches per sequence, patches per image, assumed?) from the scenario's workload (scaled to
    the scenario's sequence length when it was measured at another; patches derived from image tokens
    when only those are given), or the planning default when it has none.

    Raises:
        InputError: fewer patches than the image tokens need (tokens × merge²), or more image tokens
            than the sequence holds.
    """
    w = s.input.workload
    v = s.model.vision if s.model is not None else None
    merge = max(1, v.spatial_merge_size if v is not None else 1) ** 2
    seq = s.training.seq_length or 0
    if w is not None:
        patches, tokens = w.image_patches_per_sequence, w.image_tokens_per_sequence
        if not patches and tokens:
            patches = tokens * merge  # only tokens given: the ViT saw merge² patches per token
        elif patches and tokens and patches < 0.95 * tokens * merge:
            # more patches than tokens × merge² is possible (the ViT encodes every image of a sample whose
            # tokens were truncated: vlm-stats), fewer is not
            raise InputError(
                "workload.image_patches_per_sequence",
                patches,
                f"at least image_tokens_per_sequence × merge² = {tokens * merge:,.0f} (merge {int(merge**0.5)})",
            )
        scale = seq / w.seq_length if (w.seq_length and seq) else 1.0
        if tokens * scale > seq > 0:
            raise InputError(
                "workload.image_tokens_per_sequence", tokens, f"at most the sequence length ({seq}) after scaling"
            )
        per_image = w.mean_patches_per_image or (
            patches / w.images_per_sequence if w.images_per_sequence else DEFAULT_PATCHES_PER_IMAGE
        )
        return patches * scale, per_image, False
    return DEFAULT_IMAGE_TOKEN_SHARE * seq * merge, DEFAULT_PATCHES_PER_IMAGE, True


def vision_cost(s: Scenario, patches_per_sequence: float | None = None) -> VisionCost | None:
    """Vision work of one microbatch (``patches_per_sequence`` overrides the workload; 0 = mock
    data). None for a model without a vision tower."""
    m = s.model
    v = m.vision if m is not None else None
    if v is None:
        return None
    per_seq, per_image, assumed = workload_patches(s)
    if patches_per_sequence is not None:
        per_seq, assumed = patches_per_sequence, False
    mbs = s.training.micro_batch_size or 1
    patches = per_seq * mbs
    h, f, tp = v.hidden_size, v.intermediate_size, (s.tp if v.tp_sharded else 1)
    gemm = 2 * patches * v.depth * (4 * h * h + 2 * h * f) / tp
    attn = 2 * 2 * patches * v.depth * h * min(per_image, per_seq or per_image) / tp
    m2 = max(1, v.spatial_merge_size) ** 2
    if v.kind in ("qwen3_vl", "moonvit"):
        merged = patches / m2
        merger = 2 * merged * ((h * m2) ** 2 + h * m2 * v.out_hidden_size) * (1 + len(v.deepstack_visual_indexes)) / tp
    else:
        out_dim = v.projector_output_dim or v.text_hidden_size or h
        merger = 2 * patches / max(1.0, 1 / (v.pixel_shuffle_ratio**2)) * (v.projector_input_dim or h) * out_dim / tp
    trainable = not s.training.freeze_vision_model
    act = 2 * (9 * h + 2 * f) * v.depth * patches / tp if trainable else 0.0
    return VisionCost(patches, gemm, attn, merger, act, trainable, assumed)
