"""The kernels one Mamba-2 mixer runs per training microbatch, with their FLOPs and HBM bytes per token.

Megatron-Core's ``MambaMixer._ssm_training`` (``megatron/core/ssm/mamba_mixer.py`` at core_v0.18.2, the
memory-efficient path every training run takes) copies the in_proj output ``zxBCdt`` from
``[s, b, d]`` to ``[b, s, d]`` (``rearrange(...).contiguous()``), calls mamba_ssm's
``mamba_split_conv1d_scan_combined`` without ``rmsnorm_weight`` / ``outproj_weight`` (so the gate
``y · silu(z)`` is applied inside the scan and the gated RMSNorm and out_proj run outside it), copies
``y`` back to ``[s, b, d]`` and applies its ``RMSNormGated`` (mamba_ssm ``ops/triton/layernorm_gated``)
without ``z``. ``MambaSplitConv1dScanCombinedFn`` (mamba_ssm ``ops/triton/ssd_combined.py``) runs
causal-conv1d's CUDA ``causal_conv1d_fwd`` over x, B, C, then the SSD's five Triton kernels
(``_chunk_cumsum_fwd``, ``_chunk_state_fwd``, ``_state_passing_fwd``, ``_bmm_chunk_fwd``,
``_chunk_scan_fwd``). It saves only ``zxbcdt`` and the output: backward recomputes the conv and the
first four kernels, then runs ``_chunk_scan_bwd_dz``, ``_chunk_scan_bwd_dstates``,
``_state_passing_bwd``, ``_chunk_scan_chunk_state_bwd_dx``, ``_chunk_state_bwd_db``,
``_chunk_scan_bwd_dC``, ``_chunk_scan_bwd_dcb``, two ``_bmm_chunk_bwd``,
``_chunk_scan_bwd_ddAcs_stable``, ``_chunk_cumsum_bwd`` and ``causal_conv1d_bwd``.

Per token of one rank, with ``H`` heads and ``G`` groups per TP rank, head dim ``P``, state ``N``,
chunk ``Q``, conv width ``K``, ``d = H·P``, ``c = d + 2·G·N`` conv channels and ``W = 2·d + 2·G·N + H``
in_proj outputs: bf16 tensors take 2 bytes an element; ``dt``, ``dA_cumsum``, the chunk states as the
state kernels write them, ``CB`` and the gradients the backward kernels reduce are fp32 (4 bytes), as
the kernels allocate them. A chunk state is ``P × N`` per head and chunk: ``H·P·N / Q`` elements per
token. Each tensor a kernel reads or writes is counted once (a group's ``B``, ``C`` and ``CB`` shared by
its heads are taken as served from L2). FLOPs are the kernels' matrix products: the chunk state
``x·Bᵀ`` (``2·H·P·N``), ``C·Bᵀ`` per group (``2·G·Q·N``), the output's intra-chunk product with x
(causal: ``H·Q·P``) and the state read-out (``2·H·N·P``); backward runs the transposes of each.

``_chunk_state_bwd_db``, ``_chunk_scan_bwd_dC`` and ``_chunk_scan_bwd_dcb`` write one fp32 partial per
group and head split; the split count is 1 when ``batch · chunks · H / SMs`` is at least the heads per
group, which holds at every training shape (Nemotron-3 Nano at 32 768 tokens: 16 384 / 148 ≫ 8).
"""

from __future__ import annotations

from dataclasses import dataclass

from moeplan.inputs.model_spec import ModelSpec
from moeplan.structure.mamba_shapes import mamba_dims

#: bytes per bf16 / fp32 element
BF16 = 2.0
FP32 = 4.0
#: kernel families: causal-conv1d's CUDA kernels, the SSD's Triton kernels, plain copies / norms
CONV, SSD, COPY = "conv", "ssd", "copy"


@dataclass(frozen=True)
class MambaKernel:
    """One kernel launch of a Mamba-2 mixer, per token of the microbatch on one rank.

    Attributes:
        name: the kernel (mamba_ssm / causal-conv1d function name, or the Megatron copy it stands for).
        phase: ``"fwd"`` or ``"bwd"``.
        family: :data:`CONV`, :data:`SSD` or :data:`COPY` (which achieved rate times it).
        flops: matrix-product FLOPs per token.
        bytes: HBM bytes read + written per token.
    """

    name: str
    phase: str
    family: str
    flops: float
    bytes: float


@dataclass(frozen=True)
class _Dims:
    h: float
    p: float
    n: float
    g: float
    q: float
    k: float

    @property
    def d(self) -> float:
        return self.h * self.p

    @property
    def conv(self) -> float:
        return self.d + 2 * self.g * self.n

    @property
    def width(self) -> float:
        return 2 * self.d + 2 * self.g * self.n + self.h

    @property
    def states(self) -> float:
        """Chunk-state elements per token (all heads)."""
        return self.h * self.p * self.n / self.q


def _dims(m: ModelSpec, tp: int) -> _Dims:
    nh, p, n, g, k = mamba_dims(m)
    return _Dims(nh / tp, p, n, g / tp, m.mamba_chunk_size, k)


def _forward_kernels(x: _Dims) -> list[MambaKernel]:
    """The forward's launches (also what backward recomputes, see :func:`_recomputed`)."""
    d, gn, cs, h = x.d, x.g * x.n, x.states, x.h
    return [
        MambaKernel("zxbcdt_layout_copy", "fwd", COPY, 0.0, 2 * BF16 * x.width),
        MambaKernel("causal_conv1d_fwd", "fwd", CONV, 2 * x.k * x.conv, 2 * BF16 * x.conv),
        MambaKernel("chunk_cumsum_fwd", "fwd", SSD, 0.0, BF16 * h + 2 * FP32 * h),
        MambaKernel("chunk_state_fwd", "fwd", SSD, 2 * d * x.n, BF16 * (d + gn) + 2 * FP32 * h + FP32 * cs),
        MambaKernel("state_passing_fwd", "fwd", SSD, 0.0, FP32 * cs + BF16 * cs),
        MambaKernel("bmm_chunk_fwd", "fwd", SSD, 2 * x.g * x.q * x.n, 2 * BF16 * gn + FP32 * x.g * x.q),
        MambaKernel(
            "chunk_scan_fwd",
            "fwd",
            SSD,
            d * x.q + 2 * d * x.n,
            FP32 * x.g * x.q + BF16 * (2 * d + gn + cs) + 2 * FP32 * h + 2 * BF16 * d,
        ),
        MambaKernel("y_layout_copy", "fwd", COPY, 0.0, 2 * BF16 * d),
        MambaKernel("rmsnorm_fwd", "fwd", COPY, 0.0, 2 * BF16 * d),
    ]


def _recomputed(x: _Dims) -> list[MambaKernel]:
    """Backward's recomputation: the conv, cumsum, CB, chunk states and the state pass (which backward
    writes in fp32: no ``out_dtype`` given)."""
    fwd = {k.name: k for k in _forward_kernels(x)}
    again = [fwd[n] for n in ("causal_conv1d_fwd", "chunk_cumsum_fwd", "bmm_chunk_fwd", "chunk_state_fwd")]
    sp = MambaKernel("state_passing_fwd", "bwd", SSD, 0.0, 2 * FP32 * x.states)
    return [MambaKernel(k.name, "bwd", k.family, k.flops, k.bytes) for k in again] + [sp]


def _backward_kernels(x: _Dims) -> list[MambaKernel]:
    """The backward's own launches, in the order ``_mamba_chunk_scan_combined_bwd`` issues them."""
    d, gn, cs, h, gq = x.d, x.g * x.n, x.states, x.h, x.g * x.q
    dt_da = 2 * FP32 * h
    return [
        MambaKernel("rmsnorm_bwd", "bwd", COPY, 0.0, 3 * BF16 * d),
        MambaKernel("chunk_scan_bwd_dz", "bwd", SSD, 0.0, 6 * BF16 * d),
        MambaKernel("chunk_scan_bwd_dstates", "bwd", SSD, 2 * d * x.n, BF16 * (gn + d) + FP32 * h + FP32 * cs),
        MambaKernel("state_passing_bwd", "bwd", SSD, 0.0, 2 * FP32 * cs + 2 * BF16 * cs),
        MambaKernel(
            "chunk_scan_chunk_state_bwd_dx",
            "bwd",
            SSD,
            d * x.q + 2 * d * x.n,
            BF16 * (3 * d + gn + cs) + FP32 * gq + dt_da + FP32 * h,
        ),
        MambaKernel("chunk_state_bwd_db", "bwd", SSD, 2 * d * x.n, BF16 * (d + cs + gn) + dt_da + FP32 * (gn + h)),
        MambaKernel("chunk_scan_bwd_dC", "bwd", SSD, 2 * d * x.n, BF16 * (cs + d + gn) + FP32 * (h + gn + h)),
        MambaKernel("chunk_scan_bwd_dcb", "bwd", SSD, d * x.q, 2 * BF16 * d + dt_da + FP32 * gq),
        MambaKernel("bmm_chunk_bwd_dB", "bwd", SSD, 2 * gq * x.n, 2 * BF16 * gn + FP32 * (gq + gn)),
        MambaKernel("bmm_chunk_bwd_dC", "bwd", SSD, 2 * gq * x.n, 2 * BF16 * gn + FP32 * (gq + gn)),
        MambaKernel("chunk_scan_bwd_ddAcs_stable", "bwd", SSD, d * x.q, 2 * BF16 * d + FP32 * gq + dt_da + FP32 * h),
        MambaKernel("chunk_cumsum_bwd", "bwd", SSD, 0.0, 2 * FP32 * h + 2 * BF16 * h),
        MambaKernel("causal_conv1d_bwd", "bwd", CONV, 4 * x.k * x.conv, 3 * BF16 * x.conv),
        MambaKernel("dzxbcdt_layout_copy", "bwd", COPY, 0.0, 2 * BF16 * x.width),
    ]


def mamba_kernels(m: ModelSpec, tp: int) -> list[MambaKernel]:
    """Every kernel of one Mamba-2 mixer's forward and backward over a microbatch, per token of one
    rank with TP splitting heads and groups: the forward's launches, backward's recomputation, then
    backward's own (see the module docstring for the sources and the byte and FLOP counts).

    Raises:
        InputError: naming the first Mamba field the model does not give.
    """
    x = _dims(m, tp)
    return _forward_kernels(x) + _recomputed(x) + _backward_kernels(x)
