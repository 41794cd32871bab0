"""Which attention kernel a layer trains with, from its shapes alone.

Transformer Engine picks a fused kernel (FlashAttention or cuDNN) by head dim; a head wider than every
fused kernel trains takes ``UnfusedDotProductAttention``, which keeps the s² scores, computes QKᵀ and PV
as plain batched GEMMs and refuses context parallelism.
"""

from __future__ import annotations

from moeplan.inputs.model_spec import PartialModelSpec

#: the widest attention head Transformer Engine's fused kernels train (elements): FlashAttention 2 / 3
#: take ``head_dim <= 256`` and cuDNN's fused attention trains ``head_dim <= 256`` (Hopper, cuDNN ≥
#: 9.5; Blackwell ≥ 9.23 only at 256), FlashAttention 4 refuses 512 on SM100
#: (``pytorch/attention/dot_product_attention/utils.py`` and ``common/fused_attn/fused_attn.cpp``, TE
#: main 2026); a wider head runs ``UnfusedDotProductAttention``
FUSED_ATTENTION_MAX_HEAD_DIM = 256


def attention_runs_unfused(m: PartialModelSpec, kind: str) -> bool:
    """True when a softmax-attention layer of ``kind`` trains with Transformer Engine's unfused
    attention because its head is wider than :data:`FUSED_ATTENTION_MAX_HEAD_DIM` (Gemma-4's 512-wide
    global heads); False for other layer kinds and for MLA."""
    if kind not in ("full", "sliding", "chunked") or m.multi_latent_attention:
        return False
    d = m.attention_widths(kind).kv_channels
    return d is not None and d > FUSED_ATTENTION_MAX_HEAD_DIM


#: the query-head counts FlashMLA's sparse prefill kernel takes on one rank, by architecture family:
#: Blackwell (SM100) runs 64 or 128 heads, a smaller count dividing one of them padded up to it, any
#: multiple of 128 as is; Hopper (SM90) any multiple of 64, a smaller count dividing 64 padded to 64.
#: megatron-core ``experimental_attention_variant/dsa_cudnn_kernels.py::_flash_mla_head_padding``
#: (dev @d98e8a6, Aug 2026), which the fused DSA path (``dsa_kernel_backend`` cudnn, and DeepSeek-V4's
#: fused path) calls before FlashMLA's ``flash_mla_sparse_fwd``
SPARSE_MLA_HEAD_STEPS = {"Blackwell": ((64, 128), 128), "Hopper": ((), 64)}


def sparse_mla_padded_heads(heads: int, family: str) -> int | None:
    """Query heads FlashMLA's sparse kernel computes for ``heads`` query heads on one rank of an
    architecture ``family`` (:data:`SPARSE_MLA_HEAD_STEPS`): ``heads`` itself, or the count it is
    padded to (the padded heads are computed and thrown away, so the kernel's time grows by
    padded / heads). None when the kernel refuses the count or the family has no such kernel, where
    megatron-core declines the fused path."""
    steps = SPARSE_MLA_HEAD_STEPS.get(family)
    if steps is None or heads <= 0:
        return None
    exact, align = steps
    for padded in exact:
        if heads == padded or (heads < padded and padded % heads == 0):
            return padded
    if heads % align == 0:
        return heads
    if heads < align and align % heads == 0:
        return align
    return None
