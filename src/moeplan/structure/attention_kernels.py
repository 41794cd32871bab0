"""Which attention kernel a layer trains with, from its shapes (and, on Blackwell, the Transformer
Engine release).

Transformer Engine picks a fused kernel (FlashAttention or cuDNN) by head dim; a head wider than every
fused kernel trains takes ``UnfusedDotProductAttention``, which keeps the s² scores, computes QKᵀ and PV
as plain batched GEMMs and refuses context parallelism.
"""

from __future__ import annotations

from packaging.version import Version

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


#: MLA's training shape (d_qk, d_v): 128 + 64 rotary, 128; cuDNN trains it on Blackwell since 9.11
MLA_HEAD_SHAPE = (192, 128)
#: the first Transformer Engine release whose cuDNN backend trains heads wider than 128 (other than
#: :data:`MLA_HEAD_SHAPE`) on Blackwell: TE commit 3bc3d551 ("Enable D=256 BWD cuDNN fused attn for
#: Blackwell CC 10.x", pull 3056, July 2026), first tagged in v2.18. Before it
#: ``nvte_get_fused_attn_backend`` (transformer_engine/common/fused_attn/fused_attn.cpp @v2.16) trains
#: head dims up to 256 with cuDNN on sm90 only and FlashAttention-3 is Hopper-only, so Transformer
#: Engine runs FlashAttention-2 there
TE_CUDNN_WIDE_HEADS_BLACKWELL = Version("2.18")


def fused_attention_kernel(family: str, d_qk: int, d_v: int, fp8: bool, te_version: Version | None) -> str:
    """The fused kernel Transformer Engine trains a head of (``d_qk``, ``d_v``) with on an architecture
    ``family`` (``Hopper``, ``Blackwell``, ...): ``"flash2"`` on Blackwell for BF16 heads wider than 128
    (other than :data:`MLA_HEAD_SHAPE`) and no wider than :data:`FUSED_ATTENTION_MAX_HEAD_DIM`, except
    d_qk = d_v = 256 with Transformer Engine :data:`TE_CUDNN_WIDE_HEADS_BLACKWELL` or later (its cuDNN
    path, which also needs cuDNN 9.23+ and runs cuDNN's deterministic backward; an unknown version counts
    as earlier: every container release moeplan knows ships one); else ``"cudnn"`` (FusedAttention is preferred
    on Hopper and later: ``get_attention_backend``, dot_product_attention/utils.py @v2.10). Wider heads
    run unfused (:func:`attention_runs_unfused`), FP8 attention takes TE's FP8 backend."""
    if fp8 or family != "Blackwell":
        return "cudnn"
    wide = max(d_qk, d_v)
    if wide <= 128 or (d_qk, d_v) == MLA_HEAD_SHAPE or wide > FUSED_ATTENTION_MAX_HEAD_DIM:
        return "cudnn"
    if (
        (d_qk, d_v) == (256, 256)
        and te_version is not None
        and te_version.release >= TE_CUDNN_WIDE_HEADS_BLACKWELL.release
    ):
        return "cudnn"
    return "flash2"


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


def heads_per_tp_rank(m: PartialModelSpec, tp: int) -> tuple[int, int] | None:
    """(query heads, KV heads) of one TP rank's attention: ``num_attention_heads / TP`` and
    ``num_query_groups / TP`` (at least 1); with MLA, K and V carry the query heads after the
    up-projection. What a CP all-to-all splits: Transformer Engine's ``flash_attn_a2a_communicate``
    (``attention/dot_product_attention/context_parallel.py``) views Q, K and V as ``[..., cp, heads // cp,
    ...]`` over its group. None when the model states no attention heads."""
    if not m.num_attention_heads:
        return None
    heads = m.num_attention_heads // tp
    if m.multi_latent_attention or not m.num_query_groups:
        return heads, heads
    return heads, max(1, m.num_query_groups // tp)
