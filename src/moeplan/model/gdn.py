"""Gated DeltaNet's chunked delta-rule kernel: time of one layer's kernel, forward + backward (s).

Megatron-Core's ``GatedDeltaNet`` calls flash-linear-attention's ``chunk_gated_delta_rule`` with
64-token chunks (FLA 0.4.2, the release Megatron Bridge v0.6.0 locks; ``fla/ops/gated_delta_rule/
chunk.py``). Most of its kernels (the intra-chunk products, the WY representation, the output and the
gradients of q, k, w, g) launch one thread block per chunk and head and are parallel over tokens ×
value heads. Three are not: ``chunk_gated_delta_rule_fwd_h`` in the forward, the same kernel again in
the backward (the per-chunk states are recomputed, not saved) and ``chunk_gated_delta_rule_bwd_dhu``
(``fla/ops/common/chunk_delta_h.py``) walk the chunks of a sequence in order, carrying the d_k × d_v
state, on a grid of ``cdiv(d_v, BV) · sequences · heads`` thread blocks. Their time is one chunk step
per chunk and wave of blocks, however few blocks there are:

    t = a · (sequences · tokens · heads) + c · ceil(tokens / 64) · waves
    waves = ceil(cdiv(d_v, 64) · sequences · heads / SMs)

with BV = 64 and one block per SM at a time. Both constants come from the FLA README's benchmark
table (GB200, 148 SMs, CUDA 12.9, bf16, head dim 128, ``chunk_gdn`` forward + backward; FLA commit
0a484709, with 0.4.2's state kernels and grid), from the only two rows that separate them:
B1·T8192·H96 (4.738 ms; 192 blocks, 2 waves of 128 chunks) and B2·T16384·H16 (3.616 ms; 64 blocks,
1 wave of 256 chunks) give
a = 1.122 ms / 262 144 = 4.280 ns per token·head and c = (3.616 − 2.244) ms / 256 = 5.359 µs per chunk
step (the three passes together). The held-out row B4·T4096·H64 (512 blocks, 4 waves of 64 chunks) is
then predicted at 5.86 ms against 5.964 ms (−1.7 %); with BV = 32 the two rows admit no solution.
Rows with under 0.2 M token·heads sit on a launch floor (~0.6–0.75 ms per call) this layer-level
model does not need.

Other GPUs: the token·head term scales with HBM bandwidth against GB200's 8 TB/s (the kernel's
arithmetic intensity is low); the chunk step (a dependent chain of small products on one SM) is kept
as measured; the waves use the GPU's SM count (:data:`GDN_SMS`, GB200's 148 where it is not listed).
Other head dims: the token·head term scales with d_k · d_v / 128² (the state is d_k × d_v). These
scalings are planning assumptions.

Kimi Delta Attention (FLA ``chunk_kda``, which Megatron Bridge's Kimi-K3 layers call) runs the same
chunked delta rule with a per-channel decay instead of one scalar per head. No ``chunk_kda`` timing is
published; FLA's table times a per-channel gated linear attention (``chunk_gla``) and a scalar-decay
one (``chunk_retention``) on the same shapes, so the cost of per-channel gating is their difference:
(7.670 − 2.618) ms over 1·8192·96 token·heads = 6.424 ns and (10.216 − 3.459) ms over 4·4096·64 =
6.444 ns, the same per token·head on both rows (their mean, 6.434 ns, is used; the held-out row
B2·T16384·H16 gives 7.37 ns: +15 % above it). KDA's time is Gated DeltaNet's plus this term, scaled
like the token·head term. This is a planning estimate, stated wherever a KDA layer is timed.

Under context parallelism Megatron-Core all-to-alls the projections to head-split
(``megatron/core/ssm/gated_delta_net/gdn.py`` at core_v0.19.0, ``tensor_a2a_cp2hp`` before the
convolution, ``tensor_a2a_hp2cp`` after the gated norm; the dev branch since December 2025, core
0.18+): each rank runs the whole sequence for H_v / (TP·CP) heads, so CP divides the token·head term
but not the chunk steps: Qwen3-Next at 64K on CP 16 runs 1024 chunk steps on 2 · 1 · 2 = 4 blocks of
148 SMs.
"""

from __future__ import annotations

import math

from moeplan.i18n.messages import Message, msg
from moeplan.inputs.system import GpuSpec
from moeplan.model.hardware import hbm_bytes_per_s

#: per token·head, forward + backward, head dim 128, GB200 (s)
GDN_S_PER_TOKEN_HEAD = 4.280e-9
#: one chunk step of the three chunk-sequential passes together (``fwd_h`` forward, ``fwd_h`` again and
#: ``bwd_dhu`` in the backward), one wave of thread blocks, head dim 128, GB200 (s)
GDN_S_PER_CHUNK_STEP = 5.359e-6
#: thread blocks per (sequence, head) of the chunk-sequential kernels: cdiv(d_v, BV) with BV = 64
GDN_STATE_BLOCK_V = 64
#: SMs per GPU (one resident block of the state kernels each): A100 108 (NVIDIA A100 architecture
#: whitepaper), H100 / H800 / H200 SXM 132 (NVIDIA H100 architecture whitepaper; H200 is the same
#: GH100 configuration), B200 / GB200 148 (2 dies × 74 SMs)
GDN_SMS = {"a100": 108, "a800": 108, "h100": 132, "h800": 132, "h200": 132, "b200": 148, "gb200": 148}
#: the SM count used for a GPU :data:`GDN_SMS` does not list: the benchmark table's GB200
GDN_REFERENCE_SMS = 148
#: FLA's chunk size, which Megatron-Core keeps (``GatedDeltaNet.chunk_size = 64``)
GDN_CHUNK_TOKENS = 64
#: GB200's HBM bandwidth, bytes/s (the table's GPU)
GDN_REFERENCE_HBM_BYTES_PER_S = 8.0e12
GDN_REFERENCE_HEAD_DIMS = 128 * 128


#: per token·head, forward + backward, head dim 128, GB200: per-channel gating on top of a scalar decay
#: (FLA README, ``chunk_gla`` − ``chunk_retention``, mean of rows B1·T8192·H96 and B4·T4096·H64) (s)
KDA_GATING_S_PER_TOKEN_HEAD = 6.434e-9


def kda_kernel_s(gpu: GpuSpec, sequences: int, seq_tokens: float, heads: float, d_k: int, d_v: int) -> float:
    """Forward + backward time of one ``chunk_kda`` call (s): :func:`gdn_kernel_s` plus the per-channel
    gating term :data:`KDA_GATING_S_PER_TOKEN_HEAD` per token·head (scaled by HBM bandwidth and
    d_k·d_v / 128² as the token·head term is). A planning estimate: see the module docstring."""
    if heads <= 0 or seq_tokens <= 0:
        return 0.0
    per = KDA_GATING_S_PER_TOKEN_HEAD * GDN_REFERENCE_HBM_BYTES_PER_S / hbm_bytes_per_s(gpu)
    per *= d_k * d_v / GDN_REFERENCE_HEAD_DIMS
    return gdn_kernel_s(gpu, sequences, seq_tokens, heads, d_k, d_v) + per * sequences * seq_tokens * heads


def gdn_kernel_s(gpu: GpuSpec, sequences: int, seq_tokens: float, heads: float, d_k: int, d_v: int) -> float:
    """Forward + backward time of one chunked delta-rule call over ``sequences`` sequences of
    ``seq_tokens`` tokens each with ``heads`` value heads per rank (s)."""
    if heads <= 0 or seq_tokens <= 0:
        return 0.0
    per = GDN_S_PER_TOKEN_HEAD * GDN_REFERENCE_HBM_BYTES_PER_S / hbm_bytes_per_s(gpu)
    per *= d_k * d_v / GDN_REFERENCE_HEAD_DIMS
    return per * sequences * seq_tokens * heads + recurrence_s(gpu, sequences, seq_tokens, heads, d_v)


def gpu_sms(gpu: GpuSpec) -> int:
    """SMs of ``gpu`` (:data:`GDN_SMS`), or :data:`GDN_REFERENCE_SMS` for a GPU it does not list."""
    return GDN_SMS.get(gpu.id, GDN_REFERENCE_SMS)


def recurrence_blocks(sequences: int, heads: float, d_v: int) -> int:
    """Thread blocks of one chunk-sequential state kernel: ``(cdiv(V, BV), N·H)`` (FLA 0.4.2
    ``chunk_gated_delta_rule_fwd_h`` / ``_bwd_dhu`` launch grid) with BV = 64; ``heads`` the value
    heads on the rank (rounded up)."""
    return -(-d_v // GDN_STATE_BLOCK_V) * sequences * math.ceil(heads)


def recurrence_s(gpu: GpuSpec, sequences: int, seq_tokens: float, heads: float, d_v: int) -> float:
    """Forward + backward time of the three chunk-sequential passes of one call (s): one
    :data:`GDN_S_PER_CHUNK_STEP` per 64-token chunk (``cdiv(T, 64)``) and wave of
    :func:`recurrence_blocks` over the GPU's SMs (:func:`gpu_sms`). A grid smaller than the GPU leaves
    SMs idle: the time stays that of one wave."""
    if heads <= 0 or seq_tokens <= 0:
        return 0.0
    waves = -(-recurrence_blocks(sequences, heads, d_v) // gpu_sms(gpu))
    return GDN_S_PER_CHUNK_STEP * math.ceil(seq_tokens / GDN_CHUNK_TOKENS) * waves


def recurrence_notes(
    gpu: GpuSpec, sequences: int, seq_tokens: float, heads: float, d_k: int, d_v: int
) -> list[Message]:
    """What an estimate states about the chunk-sequential passes of one Gated DeltaNet call on a rank:
    chunks, thread blocks against SMs, waves, and their time against the whole kernel's (ms per layer
    and microbatch); and the SM count assumed for a GPU :data:`GDN_SMS` does not list. Empty when the
    rank runs no heads."""
    if heads <= 0 or seq_tokens <= 0:
        return []
    blocks, sms = recurrence_blocks(sequences, heads, d_v), gpu_sms(gpu)
    out: list[Message] = []
    if gpu.id not in GDN_SMS:
        out.append(msg("gdn_cp.sms_assumed", gpu=gpu.id, sms=sms))
    out.append(
        msg(
            "gdn_cp.recurrence",
            chunks=math.ceil(seq_tokens / GDN_CHUNK_TOKENS),
            blocks=blocks,
            sms=sms,
            waves=-(-blocks // sms),
            recurrence_ms=recurrence_s(gpu, sequences, seq_tokens, heads, d_v) * 1e3,
            kernel_ms=gdn_kernel_s(gpu, sequences, seq_tokens, heads, d_k, d_v) * 1e3,
        )
    )
    return out
