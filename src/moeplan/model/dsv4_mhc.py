"""DeepSeek-V4's manifold hyper-connections (mHC) as megatron-core runs them: the kernels of one
``HyperConnectionModule`` (two per layer: attention side and MLP side), forward + backward, their HBM
bytes, FLOPs and launches per token, and their time.

Source: megatron-core dev @d48bd6b ``transformer/hyper_connection.py`` (``HyperConnectionModule``,
``BroadcastTensorFused``, the ``native_*`` torch.compile functions) and ``fusions/fused_mhc_kernels.py``
(the Triton / cuTile kernels ``use_fused_mhc`` selects: Sinkhorn, h_aggregate and h_post_bda by Triton,
h_aggregate's backward and the projection by cuTile). Megatron Bridge v0.6.0 turns ``use_fused_mhc`` on
where the device has compute capability 10 or more (``deepseek_v4_bridge.py``,
``deepseek_v4_supports_blackwell_fused_kernels``); elsewhere the native path runs.

One module, for a stream of ``N = n·h`` elements per token (n residual streams of hidden h), ``c = n² + 2n``
mapping outputs, activations of ``b`` bytes and fp32 mappings (4 bytes):

- forward: the projection with the stream's RMS (``[T, N] × [N, c]`` in TF32 with the fp32 sum of
  squares; the native path first casts the stream to fp32 and runs an fp32 matmul and a separate norm),
  the mappings (sigmoids, gates, bias), ``mhc_sinkhorn_iterations`` Sinkhorn-Knopp iterations on the
  n×n logits in one kernel, the casts of the three mappings to the activation dtype, the aggregation
  (N read, h written) and, after the layer, ``h_post_bda``: ``H_resᵀ·x + H_post·F`` (N and h read, N
  written; a separate bmm on the native path);
- backward: ``h_post_bda``'s two kernels (the residual / output gradients; the mapping gradients, which
  read the gradient, the residual and the layer output again), the aggregation's, the casts', Sinkhorn's
  (re-running its iterations), the projection's (the mapping gradients; the stream and weight gradients
  in one pass over the stream; the gate and bias reductions) and ``BroadcastTensorFused``'s three-way
  gradient add (three N read, one written).

The ``mhc`` recompute module discards the aggregation's and ``h_post_bda``'s outputs and the layer norms
after them, and re-runs them in backward (``_forward_with_checkpoint``, ``transformer_layer.py``'s
``mhc_checkpoint_input_layernorm``); the projection, Sinkhorn and the mappings are never recomputed.

Time: each kernel takes the slower of its bytes at :data:`MHC_HBM_FRACTION` of the HBM bandwidth and its
FLOPs at the projection's rate (TF32 tensor cores fused, full FP32 natively: megatron-core leaves
``allow_tf32`` at PyTorch's False). At training shapes every kernel is memory-bound (the projection does
2·c = 48 FLOPs per stream element read for n = 4).
"""

from __future__ import annotations

from dataclasses import dataclass

from moeplan.inputs.model_spec import ModelSpec
from moeplan.model.mamba_scan import CONV_HBM_FRACTION

#: achieved fraction of the HBM bandwidth of the mHC kernels: the one measured for a streaming kernel
#: that moeplan has (causal-conv1d's backward, :data:`moeplan.model.mamba_scan.CONV_HBM_FRACTION`);
#: no timing of the mHC kernels at training shapes is published
MHC_HBM_FRACTION = CONV_HBM_FRACTION
#: TF32 dense peak / BF16 dense peak (H100 SXM datasheet: 494.7 / 989.4 TFLOP/s; B200 likewise half)
TF32_SHARE = 0.5
#: FP32 (CUDA-core) peak / BF16 dense peak (H100 SXM datasheet: 67 / 989.4 TFLOP/s), the native path's
#: fp32 matmuls; a Hopper figure, as the native path is what Hopper runs
FP32_SHARE = 67.0 / 989.4
#: saved tensors (names of :mod:`moeplan.model.dsv4_activations`) whose traffic the mHC kernels carry:
#: the fitted element-wise rate of :mod:`moeplan.model.time.compute` leaves them out
MHC_KERNEL_TENSORS = frozenset({"hc_streams", "hc_coefficients"})


@dataclass(frozen=True)
class MhcKernel:
    """One kernel (or a group of identical small ones) of a hyper-connection module.

    Attributes:
        name: what it computes (``fwd.`` / ``bwd.`` prefix for its pass).
        bytes: HBM bytes read + written per token.
        flops: FLOPs per token (2 per multiply-add), at the projection's rate.
        launches: kernel launches it takes.
        recomputed: re-run in backward under the ``mhc`` recompute module.
    """

    name: str
    bytes: float
    flops: float
    launches: int
    recomputed: bool = False


def has_mhc(m: ModelSpec) -> bool:
    """True for a DeepSeek-V4 model with hyper-connections (more than one residual stream)."""
    return m.is_dsv4 and m.num_residual_streams > 1


def _projection(m: ModelSpec, b: float, fused: bool) -> list[MhcKernel]:
    """The projection + RMS + mappings, forward and backward (see the module docstring)."""
    n, stream = m.num_residual_streams, m.num_residual_streams * m.hidden_size
    c = n * n + 2 * n
    gemm = 2.0 * stream * c
    small = (c + 1) * 4.0
    if fused:  # cuTile: proj_rms (split-K) + reduce_compute_h; backward: grad_h_proj, grad_x_weight, 2 reductions
        return [
            MhcKernel("fwd.proj_rms", stream * b + small, gemm + 2 * stream, 1),
            MhcKernel("fwd.compute_h", small + c * 4, 0.0, 1),
            MhcKernel("bwd.grad_h_proj", 3 * small, 0.0, 1),
            MhcKernel("bwd.grad_x_weight", 2 * stream * b + small, 2 * gemm + 4 * stream, 1),
            MhcKernel("bwd.gate_bias_grads", 2 * small, 0.0, 2),
        ]
    return [  # fp32 copy of the stream, cuBLAS fp32 matmul, a norm kernel, the compiled mappings
        MhcKernel("fwd.cast_fp32", stream * (b + 4), 0.0, 1),
        MhcKernel("fwd.matmul", stream * 4 + small, gemm, 1),
        MhcKernel("fwd.rms", stream * 4 + 4, 2 * stream, 1),
        MhcKernel("fwd.compute_h", small + c * 4, 0.0, 1),
        MhcKernel("bwd.compute_h", 3 * small, 0.0, 1),
        MhcKernel("bwd.matmul_dgrad_wgrad", stream * 8 + 2 * small, 2 * gemm, 2),
        MhcKernel("bwd.rms", stream * 12, 4 * stream, 1),
        MhcKernel("bwd.cast_bf16", stream * (4 + b), 0.0, 1),
    ]


def _mixing(m: ModelSpec, b: float, fused: bool) -> list[MhcKernel]:
    """Sinkhorn, the mapping casts, the aggregation, ``h_post_bda`` and the gradient add, forward and
    backward (see the module docstring)."""
    n, h = m.num_residual_streams, m.hidden_size
    stream, c, nn = n * h, n * n + 2 * n, n * n
    sinkhorn = 4.0 * nn * m.mhc_sinkhorn_iterations  # a row and a column sum and divide per iteration
    out = [
        MhcKernel("fwd.sinkhorn", 2 * nn * 4.0, sinkhorn, 1),
        MhcKernel("fwd.cast_mappings", c * (4 + b), 0.0, 3),
        MhcKernel("fwd.aggregate", (stream + h + n) * b, 2.0 * stream, 1, True),
        MhcKernel("bwd.h_post_bda_grad_x_residual", (2 * stream + h + nn + n) * b, 2.0 * n * stream, 1),
        MhcKernel("bwd.h_post_bda_grad_mappings", (2 * stream + h + nn + n) * b, 2.0 * (n + 1) * stream, 1),
        MhcKernel("bwd.aggregate", (2 * stream + h + 2 * n) * b, 4.0 * stream, 1),
        MhcKernel("bwd.cast_mappings", c * (4 + b), 0.0, 3),
        MhcKernel("bwd.sinkhorn", 3 * nn * 4.0, 3 * sinkhorn, 1),
        MhcKernel("bwd.gradient_add_3", 4 * stream * b, 3.0 * stream, 1),
    ]
    bda = (2 * stream + h + nn + n) * b, 2.0 * (n + 1) * stream
    if fused:  # one Triton kernel: H_resᵀ·x + H_post·F
        return [*out, MhcKernel("fwd.h_post_bda", bda[0], bda[1], 1, True)]
    # native: the compiled bmm writes the mixed residual, a second kernel adds the expanded output
    return [
        *out,
        MhcKernel("fwd.h_res_bmm", (2 * stream + nn) * b, 2.0 * n * stream, 1, True),
        MhcKernel("fwd.h_post_add", bda[0], 2.0 * stream, 1, True),
    ]


def mhc_kernels(m: ModelSpec, act_bytes: float, fused: bool) -> list[MhcKernel]:
    """The kernels of one hyper-connection module, forward + backward, per token; empty without
    hyper-connections. ``act_bytes``: bytes per activation element (2 for BF16, also under FP8 recipes,
    whose streams stay BF16); ``fused``: ``use_fused_mhc`` (Triton / cuTile) or the native path."""
    if not has_mhc(m):
        return []
    return [*_projection(m, act_bytes, fused), *_mixing(m, act_bytes, fused)]


@dataclass(frozen=True)
class MhcRates:
    """What times the mHC kernels: HBM bandwidth (B/s), the GPU's dense BF16 peak (FLOP/s) and the path."""

    hbm_bytes_per_s: float
    bf16_flops_per_s: float
    fused: bool


def kernel_s(k: MhcKernel, tokens: float, r: MhcRates) -> float:
    """One kernel over ``tokens`` tokens (s): the slower of its bytes at :data:`MHC_HBM_FRACTION` of the
    bandwidth and its FLOPs at TF32 (fused) or FP32 (native) rate."""
    flops_rate = r.bf16_flops_per_s * (TF32_SHARE if r.fused else FP32_SHARE)
    return tokens * max(k.bytes / (r.hbm_bytes_per_s * MHC_HBM_FRACTION), k.flops / flops_rate)


def mhc_layer_s(m: ModelSpec, tokens: float, act_bytes: float, r: MhcRates) -> float:
    """Both hyper-connection modules of one layer over ``tokens`` residual-stream tokens of a
    microbatch on one rank, forward + backward (s); 0 without hyper-connections."""
    return 2 * sum(kernel_s(k, tokens, r) for k in mhc_kernels(m, act_bytes, r.fused))


def mhc_recompute_s(m: ModelSpec, tokens: float, act_bytes: float, r: MhcRates) -> float:
    """What the ``mhc`` recompute module re-runs in backward for one layer (s): both modules'
    aggregation and ``h_post_bda`` forward kernels and the two layer norms checkpointed with them (a
    norm reads and writes h elements and writes its fp32 1/rms); 0 without hyper-connections."""
    if not has_mhc(m):
        return 0.0
    again = sum(kernel_s(k, tokens, r) for k in mhc_kernels(m, act_bytes, r.fused) if k.recomputed)
    norm = MhcKernel("fwd.norm", 2 * m.hidden_size * act_bytes + 4, 0.0, 1)
    return 2 * (again + kernel_s(norm, tokens, r))


def mhc_layer_launches(m: ModelSpec, fused: bool) -> int:
    """Kernel launches of one layer's two hyper-connection modules, forward + backward (0 without):
    40 fused, 52 native for n = 4 (the kernels of :func:`mhc_kernels`)."""
    return 2 * sum(k.launches for k in mhc_kernels(m, 2.0, fused))


def mhc_layer_bytes(m: ModelSpec, tokens: float, act_bytes: float, fused: bool) -> float:
    """HBM bytes both hyper-connection modules of one layer move over ``tokens`` tokens, forward +
    backward; 0 without hyper-connections."""
    return 2 * tokens * sum(k.bytes for k in mhc_kernels(m, act_bytes, fused))
