"""Gated DeltaNet's chunked delta-rule kernel: time of one layer's kernel, forward + backward (s).

Megatron-Core's ``GatedDeltaNet`` calls flash-linear-attention's ``chunk_gated_delta_rule`` with
64-token chunks. The kernel's work is parallel over tokens × value heads (intra-chunk products), but
its state pass walks the chunks of each sequence in order, so its time is a per token·head term plus
a per-chunk term that parallel heads do not shorten:

    t = a · (sequences · tokens · heads) + b · (tokens / 64)

Both constants come from the FLA README's benchmark table (GB200, CUDA 12.9, bf16, head dim 128,
``chunk_gdn`` forward + backward; FLA commit 0a484709): the rows B1·T8192·H96 (4.738 ms) and
B4·T4096·H64 (5.964 ms) give a = 5.486 ns per token·head and b = 3.31 µs per chunk; the row
B2·T16384·H16 (3.616 ms, held out) is then predicted at 3.72 ms (+3 %). Rows with under 0.2 M
token·heads sit on a launch floor (~0.6–0.75 ms per call) this layer-level model does not need.

Other GPUs: the token·head term scales with HBM bandwidth against GB200's 8 TB/s (the kernel's
arithmetic intensity is low); the chunk term (a dependent chain of small products) is kept as
measured. Other head dims: the token·head term scales with d_k · d_v / 128² (the state is d_k × d_v).
Both scalings are planning assumptions.

Under context parallelism Megatron-Core all-to-alls the projections to head-split (core 0.18+): each
rank runs the whole sequence for H_v / (TP·CP) heads, so CP divides the token·head term but not the
chunk term.
"""

from __future__ import annotations

from moeplan.inputs.system import GpuSpec
from moeplan.model.hardware import hbm_bytes_per_s

#: per token·head, forward + backward, head dim 128, GB200 (s)
GDN_S_PER_TOKEN_HEAD = 5.486e-9
#: per 64-token chunk of one sequence, forward + backward (s)
GDN_S_PER_CHUNK = 3.31e-6
#: FLA's chunk size, which Megatron-Core keeps (``GatedDeltaNet.chunk_size = 64``)
GDN_CHUNK_TOKENS = 64
#: GB200's HBM bandwidth, bytes/s (the table's GPU)
GDN_REFERENCE_HBM_BYTES_PER_S = 8.0e12
GDN_REFERENCE_HEAD_DIMS = 128 * 128


def gdn_kernel_s(gpu: GpuSpec, sequences: int, seq_tokens: float, heads: float, d_k: int, d_v: int) -> float:
    """Forward + backward time of one chunked delta-rule call over ``sequences`` sequences of
    ``seq_tokens`` tokens each with ``heads`` value heads per rank (s)."""
    if heads <= 0 or seq_tokens <= 0:
        return 0.0
    per = GDN_S_PER_TOKEN_HEAD * GDN_REFERENCE_HBM_BYTES_PER_S / hbm_bytes_per_s(gpu)
    per *= d_k * d_v / GDN_REFERENCE_HEAD_DIMS
    return per * sequences * seq_tokens * heads + GDN_S_PER_CHUNK * seq_tokens / GDN_CHUNK_TOKENS
