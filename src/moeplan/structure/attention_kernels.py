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
