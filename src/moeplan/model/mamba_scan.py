"""Mamba-2's SSD chunked scan: time of one layer's kernel, forward + backward (s).

Megatron-Core's ``MambaMixer`` runs mamba_ssm's ``mamba_split_conv1d_scan_combined`` (causal conv1d,
the SSD chunked scan with ``chunk_size`` 128 and the gated RMSNorm in one autograd function). No
published per-kernel timing of it at training shapes was found (the mamba_ssm and causal-conv1d
repositories publish no training-shape kernel table), so this is NOT a measured model: the kernel is
taken as the slower of

- compute-bound: its executed FLOPs (:func:`moeplan.structure.mamba_shapes.mamba_executed_flops`:
  the scan's intra-chunk and state products plus the depthwise conv), forward + backward = 3 × forward,
  at :data:`MAMBA_SCAN_PEAK_FRACTION` of the GPU's dense BF16 peak (the scan's products are small
  Q × N and Q × P tiles, far from a large GEMM's efficiency);
- memory-bound: the bytes it moves, forward + backward = 3 × the forward's (it reads the in_proj
  output ``zxbcdt`` and writes the gated output, bf16; backward reads them again, recomputes the
  states and writes their gradients), at the GPU's HBM bandwidth.

Both the 3× and the peak fraction are planning assumptions, stated to the user in the estimate's
assumption list. Under context parallelism Megatron-Core all-to-alls x, B, C, dt and z to a head split
(``ssm/mamba_context_parallel.py``), so each rank scans the whole sequence for nh / (TP·CP) heads: the
per-rank work is that of ``tokens / CP`` tokens over nh / TP heads, as computed here.
"""

from __future__ import annotations

from moeplan.inputs.model_spec import ModelSpec
from moeplan.structure.mamba_shapes import mamba_dims, mamba_executed_flops

#: achieved fraction of the dense BF16 peak assumed for the SSD scan's small tiled products
MAMBA_SCAN_PEAK_FRACTION = 0.35
#: forward + backward work relative to the forward (backward recomputes the chunk states)
MAMBA_FWD_BWD_FACTOR = 3.0


def mamba_kernel_s(m: ModelSpec, tokens: float, tp: int, bf16_flops_per_s: float, hbm_bytes_per_s: float) -> float:
    """Forward + backward time of one Mamba-2 mixer's conv + chunked scan over ``tokens`` tokens of one
    microbatch on one rank (tokens per CP rank; TP splits the heads) (s). 0 for no tokens.

    Args:
        m: a model with Mamba-2 layers; tokens: tokens of the microbatch on this CP rank; tp: TP size;
        bf16_flops_per_s: the GPU's dense BF16 peak (FLOP/s); hbm_bytes_per_s: its HBM bandwidth.
    """
    if tokens <= 0:
        return 0.0
    nh, p, n, g, _ = mamba_dims(m)
    _, conv, scan = mamba_executed_flops(m)
    flops = MAMBA_FWD_BWD_FACTOR * tokens * (conv + scan) / tp
    d_inner = nh * p
    moved = tokens * (2 * d_inner + 2 * g * n + nh + d_inner) * 2.0 / tp
    t_compute = flops / (bf16_flops_per_s * MAMBA_SCAN_PEAK_FRACTION)
    t_memory = MAMBA_FWD_BWD_FACTOR * moved / hbm_bytes_per_s
    return max(t_compute, t_memory)
