"""Mamba-2 mixer kernels: time of one layer's conv, SSD scan, gated norm and layout copies, forward +
backward (s), kernel by kernel.

Each kernel of :func:`moeplan.model.mamba_kernels.mamba_kernels` (megatron-core ``MambaMixer`` at
core_v0.18.2 with mamba_ssm's ``mamba_split_conv1d_scan_combined``; FLOPs and HBM bytes per token from
the kernels' own tensors) takes the slower of its bytes at the achieved bandwidth of its family and its
matrix-product FLOPs at the achieved SSD product rate:

- causal-conv1d's CUDA kernels and the plain copies / norm: :data:`CONV_HBM_FRACTION` of the HBM
  bandwidth, measured: causal-conv1d PR #88 ("Deterministic bwd kernels", Dao-AILab/causal-conv1d,
  ``tests/benchmark_determinism_kernels.py``) times ``causal_conv1d_bwd`` at batch 4, 4 128 channels,
  width 4, bf16, SiLU on an RTX PRO 6000 Blackwell Workstation (1 792 GB/s): 1.085 ms at 16 384 tokens
  and 0.275 ms at 4 096, for 3 bf16 tensors of 4·4128·L elements (x, dout read; dx written):
  1.623 GB / 1.085 ms = 1.496 TB/s = 0.835 of the bandwidth (4 096 tokens: 0.82);
- the SSD's Triton kernels: one achieved rate ``ssd_bytes_per_s`` (bytes/s, ``catalog/data/mamba_time.json``),
  capped at :data:`CONV_HBM_FRACTION` of the GPU's bandwidth, FITTED (``benchmarks/fit_mamba_time.py``) on
  the Nemotron-3 rows of Megatron Bridge's performance summaries of releases 26.02.01–26.06
  (``tests/data/fitting/published_runs_nemotron_hybrid.yaml``; 26.08 is held out): no published
  per-kernel timing of these kernels at training shapes names its GPU. An absolute rate, not a fraction of
  HBM bandwidth: solved run by run on the fitting rows, the rate that matches each lies at 0.5–1.3 TB/s on
  H100 (3.35 TB/s) and on B200 / B300 / GB200 / GB300 (8 TB/s) alike, while as a fraction of the bandwidth
  it spreads from 0.06 to 0.39 (the kernels' many small tiles and per-chunk loops do not speed up with
  Blackwell's faster HBM);
- products: :data:`SSD_MMA_FRACTION` of the dense BF16 peak, the chunk-scan forward's measured rate
  (tile-ai/tilelang ``benchmark/mamba2/README.md``: 135.7 TFLOP/s on an H800, dense BF16 peak 989.4
  TFLOP/s, at 8 × 16 384 tokens, 80 heads, P 64, N 128, chunk 256). At training shapes every kernel is
  memory-bound (Nemotron-3 Nano: 10.7 MFLOP against 0.68 MB a token), so this rate rarely decides.

Backward's work is its own kernels (recomputation included), not a multiple of the forward's. Under
context parallelism Megatron-Core all-to-alls x, B, C, dt and z to a head split
(``ssm/mamba_context_parallel.py``): each rank scans the whole sequence for nh / (TP·CP) heads, which is
the work of ``tokens / CP`` tokens over nh / TP heads, as computed here.
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources

from moeplan.inputs.model_spec import ModelSpec
from moeplan.model.mamba_kernels import CONV, COPY, MambaKernel, mamba_kernels

#: achieved fraction of HBM bandwidth of causal-conv1d's kernels (measured, see the module docstring);
#: the plain layout copies and the RMSNorm are taken at the same fraction
CONV_HBM_FRACTION = 0.835
#: achieved fraction of the dense BF16 peak of the SSD's matrix products (measured, tilelang chunk scan)
SSD_MMA_FRACTION = 135.7 / 989.4
#: saved tensors of a Mamba layer (names of :mod:`moeplan.model.activations`) that only the mixer's
#: kernels read and write: their traffic is in the kernels' bytes, so the fitted element-wise rate of
#: :mod:`moeplan.model.time.compute` leaves them out (the layer's norm input / output and out_proj's
#: input stay with it: the fused pre-norm, the residual add and the casts for out_proj)
MAMBA_KERNEL_TENSORS = frozenset({"mamba_zxbcdt", "mamba_scan_out", "mamba_norm_rstd"})


@lru_cache(maxsize=1)
def ssd_bytes_per_s() -> float:
    """The fitted achieved rate of the SSD's Triton kernels (bytes/s), from
    ``catalog/data/mamba_time.json`` (written by ``benchmarks/fit_mamba_time.py``)."""
    path = resources.files("moeplan.catalog") / "data" / "mamba_time.json"
    return float(json.loads(path.read_text())["ssd_bytes_per_s"])


def kernel_s(k: MambaKernel, tokens: float, bf16_flops_per_s: float, hbm_bytes_per_s: float) -> float:
    """Time of one Mamba kernel over ``tokens`` tokens (s): the slower of its bytes at its family's
    achieved rate and its FLOPs at the SSD product rate."""
    cap = hbm_bytes_per_s * CONV_HBM_FRACTION
    rate = cap if k.family in (CONV, COPY) else min(cap, ssd_bytes_per_s())
    t_bytes = k.bytes / rate
    t_flops = k.flops / (bf16_flops_per_s * SSD_MMA_FRACTION)
    return tokens * max(t_bytes, t_flops)


def mamba_kernel_s(m: ModelSpec, tokens: float, tp: int, bf16_flops_per_s: float, hbm_bytes_per_s: float) -> float:
    """Forward + backward time of one Mamba-2 mixer's kernels besides in_proj / out_proj over
    ``tokens`` tokens of one microbatch on one rank (tokens per CP rank; TP splits the heads) (s).
    0 for no tokens.

    Args:
        m: a model with Mamba-2 layers; tokens: tokens of the microbatch on this CP rank; tp: TP size;
        bf16_flops_per_s: the GPU's dense BF16 peak (FLOP/s); hbm_bytes_per_s: its HBM bandwidth (B/s).

    Raises:
        InputError: naming the first Mamba field the model does not give.
    """
    if tokens <= 0:
        return 0.0
    return sum(kernel_s(k, tokens, bf16_flops_per_s, hbm_bytes_per_s) for k in mamba_kernels(m, tp))
