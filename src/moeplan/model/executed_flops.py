"""Compute time of one decoder layer for one microbatch on one GPU (forward + backward).

Executed FLOPs per rank (not the model-FLOP convention of :mod:`moeplan.structure.flops`): projections
and MLPs split by TP, tokens split by CP, causal attention does half of the s² work (flash kernels skip
the masked blocks), sliding-window layers are bounded by the window, routed experts process
``k·tokens·imbalance`` tokens. Time = FLOPs / achieved throughput, where the achieved throughput is
the dense peak × the GPU's measured best-shape GEMM fraction (``gpus.json`` MAMF, ml-engineering) ×
a grouped-GEMM occupancy term for few tokens per expert; attention is first-
principles, not fitted (:func:`attention_fraction`); element-wise work is memory-bound (HBM bandwidth).
"""

from __future__ import annotations

from dataclasses import dataclass

from packaging.version import Version

from moeplan.errors import InputError
from moeplan.inputs.model_spec import ModelSpec
from moeplan.inputs.system import GpuSpec
from moeplan.model.constants import TimeConstants
from moeplan.model.hardware import hbm_bytes_per_s
from moeplan.structure.attention_kernels import MLA_HEAD_SHAPE, fused_attention_kernel
from moeplan.structure.dsv4_shapes import layer_forward_flops as dsv4_layer_forward_flops
from moeplan.structure.dsv4_shapes import layer_ratio
from moeplan.structure.dsv4_shapes import sparse_core_flops as dsv4_sparse_core_flops
from moeplan.structure.flops import dsa_causal_context, dsa_indexer_flops_per_token
from moeplan.structure.kda_shapes import kda_executed_flops
from moeplan.structure.mamba_shapes import mamba_executed_flops
from moeplan.structure.msa_shapes import msa_causal_context, msa_indexer_flops_per_token

#: forward attention kernel throughput at long sequence as a fraction of the dense BF16 peak for head
#: dim 128 (d_qk + d_v = 256), by architecture: Hopper 0.686 (FlashAttention-3, arXiv 2407.08608,
#: Fig. 5: 648 TFLOP/s forward at 16K tokens, head dim 128, BF16, on H100 = 0.655 of 989, divided by
#: this module's length term at 16K, 0.955; its 740 TFLOP/s headline is head dim 256); Blackwell
#: 0.71 / 1.3 = 0.546 (FlashAttention-4, arXiv 2603.05451: 1613 TFLOP/s = 71 % on B200, "up to 1.3×
#: over cuDNN 9.13", the kernel Transformer Engine uses); Ampere 0.70 (FlashAttention-2, arXiv
#: 2307.08691: up to 73 % on A100); others 0.55.
ATTENTION_FWD_FRACTION = {"Hopper": 0.686, "Blackwell": 0.546, "Ampere": 0.70}
ATTENTION_FWD_FRACTION_DEFAULT = 0.55
#: backward / forward FLOP-rate ratio of flash attention: FlashAttention-3 on H100, head dim 128 at 16K,
#: 561 TFLOP/s backward against 648 forward (arXiv 2407.08608, Figs. 5 and 7) → 0.866
ATTENTION_BWD_RATE = 0.866
#: share of the attention kernels' forward + backward time that is the forward (backward executes
#: 2.5 × the forward's FLOPs at ATTENTION_BWD_RATE of its rate): what recomputing core attention costs
ATTENTION_FWD_SHARE = 1 / (1 + 2.5 / ATTENTION_BWD_RATE)
#: query length per kernel call at which attention reaches half its long-sequence throughput (tiles of
#: 128 queries fill the SMs only with thousands of queries per head; FA3 Fig. 5 rises from ~0.4 of its
#: peak at 512 to ~0.95 at 16K)
ATTENTION_HALF_QUERY_TOKENS = 768.0
#: FP8 attention (fp8_dot_product_attention) reaches this share of the FP8 peak relative to BF16's share
#: of the BF16 peak (FA3: ~1200 of 1979 TFLOP/s FP8 = 0.61 vs 0.75 → 0.81)
ATTENTION_FP8_RELATIVE = 0.81


#: cuDNN's measured rate at MLA's training shape (``MLA_HEAD_SHAPE``: d_qk 192 = 128 + 64 rotary, d_v 128;
#: 128 heads) over its
#: head-dim-128 rate (64 query / 8 KV heads), (forward, backward), same build and GPU, BF16, causal, batch 1,
#: 8192 tokens, the longest length both shapes ran, by architecture. Transformer Engine runs every head
#: shape with cuDNN (FusedAttention) on Hopper and later ("Disabling FlashAttention to give FusedAttention
#: preference on Hopper+", ``get_attention_backend``, transformer_engine/pytorch/attention/
#: dot_product_attention/utils.py @v2.10), so the head-dim-128 figures above stand for cuDNN's (its 16K
#: rates in the same files, 673 / 579 TFLOP/s on H200, are within 4 % of them), and this is the shape
#: MLA's attention runs at. Source: NVIDIA/cudnn-frontend @df73764 (v1.19.0, cuDNN 9.19.1),
#: benchmark/sdpa_benchmark_training/results/{h200,gb200}_919_only_cudnn/{dsv3,llama3.1}_*.csv.
#: Hopper (H200, same dense peak as H100): forward 643 / 644; backward 425 / 541, where 425 is the file's
#: 442 recounted from its 2·(3·d_qk + 2·d_v) FLOPs per score to this module's 2.5 × the forward's.
#: Blackwell (GB200): forward 1527 / 1598; backward 1200 (1248 recounted) / 1311. The MLA backward ran
#: cuDNN's deterministic algorithm, the head-dim-128 one did not; Megatron runs the non-deterministic one
#: unless ``deterministic_mode``. On GB200 at cuDNN 9.22 the deterministic MLA backward is within −8 … +3 %
#: of the other (same repository, results/dsv3/gb200); for Hopper no such comparison is published, so its
#: backward ratio is an estimate of that kind, stated wherever an MLA layer is timed on Hopper
MLA_SHAPE_RELATIVE = {"Hopper": (643 / 644, 425 / 541), "Blackwell": (1527 / 1598, 1200 / 1311)}


#: FlashAttention-2's forward on Blackwell (its sm80 code path) as a fraction of B200's dense BF16 peak:
#: 361.6 TFLOP/s at head dim 128, 8,192 tokens, batch 8, 16 heads (meta-pytorch/tritonbench pull 171,
#: flash_v2 on B200) over 2250, divided by this module's length term at 8K (0.914) → 0.176 at long
#: sequence; its backward at 0.880 of its forward (333.95 / 379.44 TFLOP/s, head dim 64, 16K tokens,
#: flash_attn 2.7.4.post1 on B200, Dao-AILab/flash-attention issue 1589). No head-dim-256 figure is
#: published; the head-dim-128 one is used, a planning estimate stated where it applies
FA2_B200_FWD_TFLOPS = 361.6
FA2_BLACKWELL_FWD_FRACTION = FA2_B200_FWD_TFLOPS / 2250 / (8192 / (8192 + ATTENTION_HALF_QUERY_TOKENS))
FA2_BLACKWELL_BWD_RELATIVE = 333.95 / 379.44


#: time of the softmax exponentials per attention score relative to the BF16 tensor-core time of a
#: head-dim-128 score (2·256 FLOPs), by architecture: one MUFU.EX2 per score at 16 per clock per SM.
#: H100: 989 TFLOP/s ÷ (16 × 132 SMs × 1.83 GHz) ≈ 256 FLOPs per exponential → 0.5; B200: tensor cores
#: 2.25× Hopper's with the SFUs unchanged, FlashAttention-4 (arXiv 2603.05451) finds the head-dim-128
#: forward bound by the exponential → 1.0; Blackwell Ultra doubles SFU throughput (NVIDIA, "Making
#: Softmax More Efficient with NVIDIA Blackwell Ultra") → 0.5.
EXP_TIME_PER_SCORE = {"Hopper": 0.5, "Blackwell": 1.0, "Blackwell Ultra": 0.5}
#: share of the shorter of (tensor-core work, exponentials) that the kernel hides behind the longer:
#: t = max(a, b) + (1 − η)·min(a, b). From FlashAttention-3's H100 BF16 forward at 16K (arXiv 2407.08608,
#: Fig. 5): head dim 64 runs at 497 vs 648 TFLOP/s at 128, i.e. 0.767 → η = 0.13; the same η then gives
#: head dim 256 at 1.18× head dim 128, against 756 / 648 = 1.17 measured
EXP_OVERLAP = 0.13
#: d_qk + d_v of the kernels the forward fractions above were measured with: head dim 128 in BF16
#: (FlashAttention-3/4), head dim 256 for FP8 (FlashAttention-3's ~1.2 PFLOP/s)
REFERENCE_HEAD_DIMS = 256
REFERENCE_HEAD_DIMS_FP8 = 512


def arch_key(gpu: GpuSpec) -> str:
    """``Hopper``, ``Blackwell``, ``Blackwell Ultra``, ... from the GPU's arch text (case and extra
    words ignored); ``""`` when it is blank."""
    words = (gpu.arch or "").lower().split()
    if words[:2] == ["blackwell", "ultra"]:
        return "Blackwell Ultra"
    return words[0].capitalize() if words else ""


def arch_family(gpu: GpuSpec) -> str:
    """The architecture family whose measured attention fraction applies (Blackwell Ultra →
    ``Blackwell``); a key of :data:`ATTENTION_FWD_FRACTION` when known."""
    return arch_key(gpu).split(" ")[0]


def _fwd_time_per_flop(head_dims: float, exp_time: float, fp8: bool) -> float:
    """Forward time per tensor-core FLOP of one attention score (arbitrary units): tensor work
    ``head_dims/256`` (halved by FP8 tensor cores) against the exponential's ``exp_time``."""
    mma = head_dims / REFERENCE_HEAD_DIMS * (0.5 if fp8 else 1.0)
    t = max(mma, exp_time) + (1 - EXP_OVERLAP) * min(mma, exp_time)
    return t / head_dims


def _length_term(query_tokens: float) -> float:
    """How far a kernel over ``query_tokens`` queries gets to its long-sequence throughput:
    q / (q + 768) (:data:`ATTENTION_HALF_QUERY_TOKENS`)."""
    q = max(1.0, query_tokens)
    return q / (q + ATTENTION_HALF_QUERY_TOKENS)


def _forward_at_length(gpu: GpuSpec, head_dims: float, fp8: bool) -> float:
    """The forward kernel's long-sequence fraction of the attention peak for ``head_dims``
    (d_qk + d_v): the family's measured fraction moved by tensor work per score against the softmax
    exponential (:data:`EXP_TIME_PER_SCORE`, :data:`EXP_OVERLAP`)."""
    key, family = arch_key(gpu), arch_family(gpu)
    f = ATTENTION_FWD_FRACTION.get(family, ATTENTION_FWD_FRACTION_DEFAULT)
    exp_time = EXP_TIME_PER_SCORE.get(key)
    if exp_time is None:
        return f
    # f was measured on the family's base GPU (H100, B200): Blackwell Ultra's doubled SFUs shorten
    # the exponential against that measurement
    measured_exp = EXP_TIME_PER_SCORE[family]
    ref = REFERENCE_HEAD_DIMS_FP8 if fp8 else REFERENCE_HEAD_DIMS
    return f * _fwd_time_per_flop(ref, measured_exp, fp8) / _fwd_time_per_flop(head_dims, exp_time, fp8)


def attention_forward_fraction(
    gpu: GpuSpec, query_tokens: float, head_dims: float = REFERENCE_HEAD_DIMS, fp8: bool = False
) -> float:
    """Forward attention kernel throughput as a fraction of the attention peak (BF16, or FP8 with
    ``fp8``) for ``query_tokens`` queries per sequence and head dims ``head_dims`` (d_qk + d_v)."""
    return _forward_at_length(gpu, head_dims, fp8) * _length_term(query_tokens)


def attention_backward_fraction(
    gpu: GpuSpec, query_tokens: float, head_dims: float = REFERENCE_HEAD_DIMS, fp8: bool = False
) -> float:
    """Backward attention kernel throughput (its own executed FLOPs, 2.5 × the forward's) as a
    fraction of the attention peak: :data:`ATTENTION_BWD_RATE` of the family's head-dim-128 forward."""
    family = arch_family(gpu)
    f = ATTENTION_FWD_FRACTION.get(family, ATTENTION_FWD_FRACTION_DEFAULT)
    return ATTENTION_BWD_RATE * f * _length_term(query_tokens)


def te_attention_kernel(
    gpu: GpuSpec, head_dims: float, v_dims: float | None, fp8: bool, te_version: Version | None
) -> str:
    """:func:`~moeplan.structure.attention_kernels.fused_attention_kernel` for a head of ``head_dims``
    (d_qk + d_v) with ``v_dims`` (d_v) on ``gpu``; ``"cudnn"`` when d_v is unknown."""
    if v_dims is None:
        return "cudnn"
    return fused_attention_kernel(arch_family(gpu), int(head_dims - v_dims), int(v_dims), fp8, te_version)


def mla_shape_relative(gpu: GpuSpec, head_dims: float, v_dims: float | None, fp8: bool) -> tuple[float, float] | None:
    """(forward, backward) rate of MLA's training shape relative to head dim 128 on ``gpu``
    (:data:`MLA_SHAPE_RELATIVE`) when the head is that shape (d_qk + d_v = ``head_dims``, d_v = ``v_dims``),
    attention runs in BF16 and the architecture has a measurement; else None."""
    if fp8 or v_dims is None or (head_dims - v_dims, v_dims) != MLA_HEAD_SHAPE:
        return None
    return MLA_SHAPE_RELATIVE.get(arch_family(gpu))


def attention_fraction(
    gpu: GpuSpec,
    query_tokens: float,
    head_dims: float = REFERENCE_HEAD_DIMS,
    fp8: bool = False,
    v_dims: float | None = None,
    kernel: str = "cudnn",
) -> float:
    """Forward + backward attention throughput as a fraction of the attention peak (BF16, or FP8 with
    ``fp8``), for kernels over ``query_tokens`` queries (the tokens of one CP rank) with query-key plus
    value head dimensions ``head_dims`` (d_qk + d_v: 256 for head dim 128, 320 for MLA's 192 + 128).

    Megatron counts attention as 3 × forward FLOPs; flash backward executes 2.5 × forward (it recomputes
    QKᵀ), so the effective fraction is 3 / (1/f_fwd + 2.5/f_bwd) of the forward and backward kernels'
    fractions (:func:`attention_forward_fraction`, :func:`attention_backward_fraction`), both scaled by the
    length term q / (q + 768). The forward's rate moves with the head dimensions as the tensor-core work
    per score against the softmax exponential (:data:`EXP_TIME_PER_SCORE`, :data:`EXP_OVERLAP`): head dim
    64 runs the forward at 0.77× on Hopper and 0.65× on Blackwell; Blackwell Ultra's doubled SFUs run the
    head-dim-128 forward 1.3× faster than B200's; FP8 attention (tensor work halved) is more
    exponential-bound still. MLA's training shape (``v_dims`` = d_v given, d_qk 192, d_v 128) instead takes
    cuDNN's measured rates for that shape relative to head dim 128 (:data:`MLA_SHAPE_RELATIVE`) where the
    architecture has them. ``kernel="flash2"`` (:func:`te_attention_kernel`: heads wider than 128 on
    Blackwell before Transformer Engine 2.18) takes FlashAttention-2's Blackwell rates
    (:data:`FA2_BLACKWELL_FWD_FRACTION`). Sources in the module constants; nothing here is fitted.
    """
    if kernel == "flash2":
        f_fwd = FA2_BLACKWELL_FWD_FRACTION
        return 3.0 / (1.0 / f_fwd + 2.5 / (f_fwd * FA2_BLACKWELL_BWD_RELATIVE)) * _length_term(query_tokens)
    family = arch_family(gpu)
    f_bwd = ATTENTION_BWD_RATE * ATTENTION_FWD_FRACTION.get(family, ATTENTION_FWD_FRACTION_DEFAULT)
    mla = mla_shape_relative(gpu, head_dims, v_dims, fp8)
    if mla is None:
        f_fwd = _forward_at_length(gpu, head_dims, fp8)
    else:
        f_fwd = _forward_at_length(gpu, REFERENCE_HEAD_DIMS, fp8) * mla[0]
        f_bwd *= mla[1]
    return 3.0 / (1.0 / f_fwd + 2.5 / f_bwd) * _length_term(query_tokens)


#: forward throughput of the token-level sparse MLA kernel DeepSeek Sparse Attention runs (FlashMLA's
#: ``flash_mla_sparse_fwd``, which megatron-core's fused DSA path calls), as a fraction of the dense BF16
#: peak, by architecture, counting 2·(d_qk + d_v) = 2·(576 + 512) FLOPs per selected key and head
#: (FlashMLA README): Hopper 640 / 989 = 0.647 ("up to 640 TFlops" forward on H800 SXM5, sparse kernels
#: released 2025-09-29, BF16 peak 989 TFLOP/s); Blackwell 1450 / 2250 = 0.644 ("up to 1450 TFlops" on
#: B200 with CUDA 12.9, BF16 peak 2250 TFLOP/s), applied as a fraction of the peak to every Blackwell
#: GPU (GB200, and Blackwell Ultra's B300 / GB300, whose figure is not published). Other
#: architectures have no published figure: there the dense attention model at the absorbed widths
#: applies (said in the notes)
SPARSE_MLA_FWD_FRACTION = {"Hopper": 640 / 989, "Blackwell": 1450 / 2250}
#: backward throughput of a sparse MLA kernel as a fraction of the dense BF16 peak, where a figure is
#: published, counting 2.5 × the forward's FLOPs: Blackwell 820 / 2250 = 0.364, FlashAttention-4's
#: SM100 sparse MLA backward at DeepSeek-V4's shape (head dim 512, 128 query heads over one shared
#: key row, top-k 2048, 4K queries over 32K keys: "BWD tflops=820", Dao-AILab/flash-attention pull
#: 2621, June 2026), on B200. Megatron-core's fused path runs cuDNN's CuTe-DSL sparse backward
#: (``sparse_attention_backward_wrapper``), which has no published figure; this is the nearest
#: published kernel of the same shape. Hopper: the flash backward's rate relative to its forward
#: (:data:`ATTENTION_BWD_RATE`)
SPARSE_MLA_BWD_FRACTION = {"Blackwell": 820 / 2250}


def sparse_mla_fraction(gpu: GpuSpec, query_tokens: float, head_dims: float, fp8: bool = False) -> float:
    """Forward + backward throughput of DSA's sparse MLA core as a fraction of the attention peak:
    :data:`SPARSE_MLA_FWD_FRACTION` for the forward and :data:`SPARSE_MLA_BWD_FRACTION` for the
    backward (executing 2.5 × the forward's FLOPs; where no backward figure is published, the flash
    backward's rate relative to its forward, :data:`ATTENTION_BWD_RATE`), combined as
    :func:`attention_fraction` combines them: 3 / (1/f_fwd + 2.5/f_bwd) (Hopper 0.499, Blackwell
    0.357). No length term: the kernel tiles queries × heads over one shared latent key row (all heads
    of a query read the same top-k keys), so a few thousand queries fill the GPU, and the figures are
    the kernels' own prefill benchmarks. Without a published figure for the GPU's architecture (or
    with FP8 attention): :func:`attention_fraction` at ``head_dims`` (d_qk + d_v of the absorbed
    layout), the dense kernel model, as the step-time notes say."""
    family = arch_family(gpu)
    f_fwd = SPARSE_MLA_FWD_FRACTION.get(family)
    if f_fwd is None or fp8:
        return attention_fraction(gpu, query_tokens, head_dims, fp8)
    f_bwd = SPARSE_MLA_BWD_FRACTION.get(family, ATTENTION_BWD_RATE * f_fwd)
    return 3.0 / (1.0 / f_fwd + 2.5 / f_bwd)


#: best-shape GEMM fraction of peak when the catalog has no measurement for a GPU / precision:
#: the median of the measured ones (ml-engineering MAMF: 0.71–0.87).
DEFAULT_GEMM_FRACTION = 0.75


@dataclass(frozen=True)
class Speeds:
    """Achieved throughputs of one GPU for one scenario (FLOP/s, bytes/s)."""

    gemm_flops_per_s: float
    attention_flops_per_s: float
    hbm_bytes_per_s: float


def speeds(
    gpu: GpuSpec,
    precision: str,
    fp8_attention: bool,
    c: TimeConstants,
    measured: dict[str, float] | None = None,
) -> Speeds:
    """Peak × measured GEMM fraction for GEMMs (FP8/FP4 recipes use their peak);
    ``attention_flops_per_s`` is the attention peak (BF16 unless ``fp8_dot_product_attention``):
    multiply by :func:`attention_fraction` for a kernel length. The container release's software
    efficiency is applied to the whole step, not here (:func:`moeplan.model.step.estimate_step`)."""
    key = "bf16" if precision == "bf16" else ("fp4" if precision == "nvfp4" else "fp8")
    peak = gpu.peak_dense_tflops.get(key) or gpu.peak_dense_tflops.get("bf16")
    frac = (measured or {}).get(key if key != "fp4" else "fp8", DEFAULT_GEMM_FRACTION)
    bf16 = gpu.peak_dense_tflops.get("bf16")
    if peak is None or bf16 is None:
        raise InputError("system.gpu.peak_dense_tflops", dict(gpu.peak_dense_tflops), "a bf16 dense peak in TFLOP/s")
    attn_peak = gpu.peak_dense_tflops.get("fp8", bf16) * ATTENTION_FP8_RELATIVE if fp8_attention else bf16
    return Speeds(
        gemm_flops_per_s=peak * 1e12 * frac,
        attention_flops_per_s=attn_peak * 1e12,
        hbm_bytes_per_s=hbm_bytes_per_s(gpu),
    )


@dataclass(frozen=True)
class LayerFlops:
    """Executed forward FLOPs of one layer for one microbatch on one rank, by kind."""

    dense_gemm: float = 0.0
    attention_core: float = 0.0
    expert_gemm: float = 0.0
    tokens_per_local_expert: float = 0.0
    #: DeepSeek Sparse Attention's top-k core, or DeepSeek-V4's window + compressed-key core, timed at the
    #: sparse kernel's rate (:func:`sparse_mla_fraction`) where the fused kernel runs
    sparse_core: float = 0.0


def dsa_layer_flops(m: ModelSpec, layer: int, tokens: float, seq_full: int, tp: int) -> tuple[float, float, float]:
    """(dense GEMM, indexer score, sparse core) forward FLOPs of one DeepSeek Sparse Attention layer for
    ``tokens`` query tokens on one rank, beyond MLA's projections.

    The sparse core (megatron-core core_v0.19.0+ ``AbsorbedMLASelfAttention`` + ``DSAttention``): every
    query reads min(i, top-k) keys (:func:`~moeplan.structure.flops.dsa_causal_context`) at the absorbed
    widths, QK over kv_lora + rope and AV over kv_lora, heads split by TP. The indexer (``DSAIndexer``,
    built ``parallel_mode="duplicated"`` on the sequence-gathered input): every TP rank computes it whole
    over all its tokens, so nothing here is divided by TP; its fwd + bwd model FLOPs
    (:func:`~moeplan.structure.flops.dsa_indexer_flops_per_token`) enter as a third, the forward share
    of the 3 × forward the step-time model charges. Layers that reuse an earlier top-k have no indexer.
    """
    nh, kv, rope = m.num_attention_heads, m.given("kv_lora_rank"), m.given("qk_pos_emb_head_dim")
    sparse = dsa_causal_context(seq_full, m.given("dsa_indexer_topk"))[1]
    core = 2 * tokens * sparse * nh * (2 * kv + rope) / tp
    if not m.layer_has_indexer(layer):
        return 0.0, 0.0, core
    proj, scores = dsa_indexer_flops_per_token(m, seq_full)
    return tokens * proj / 3, tokens * scores / 3, core


def msa_layer_flops(m: ModelSpec, tokens: float, seq_full: int) -> tuple[float, float, float]:
    """(index GEMM, index score) forward-share FLOPs of one MiniMax Sparse Attention layer for ``tokens``
    query tokens on one rank, and the keys each query's core reads (``C_sparse``,
    :func:`~moeplan.structure.msa_shapes.msa_causal_context`). The index branch's fwd + bwd FLOPs
    (:func:`~moeplan.structure.msa_shapes.msa_indexer_flops_per_token`) enter as a third, the forward
    share of the 3 × forward the step-time model charges, whole on every TP rank (no Megatron
    implementation exists; modelled as megatron-core builds DSA's indexer, ``duplicated``); the scores
    run at the dense attention rate, as the step-time notes say."""
    proj, scores = msa_indexer_flops_per_token(m, seq_full)
    span = msa_causal_context(seq_full, m.given("msa_block_size"), m.given("msa_topk_blocks"))[1]
    return tokens * proj / 3, tokens * scores / 3, span


def _softmax_attention_flops(
    m: ModelSpec, layer: int, kind: str, tokens: float, seq_full: int, tp: int
) -> tuple[float, float]:
    """(dense GEMM, attention core) forward FLOPs of a GQA / MHA layer of ``kind`` (full, sliding,
    chunked) on one rank: the projections (with an output gate) and QKᵀ + PV over the causal keys, the
    window, or a MiniMax Sparse Attention layer's selected blocks plus its index branch."""
    h = m.hidden_size
    mk = m.attention_widths(kind)  # Gemma-4's global layers: their own head dim and KV heads
    q = mk.given("kv_channels") * m.num_attention_heads
    kv = mk.given("kv_channels") * mk.given("num_query_groups")
    gate = q if m.attention_output_gate else 0
    dense = 2 * tokens * (h * (q + 2 * kv + gate) + q * h) / tp
    core = 0.0
    span = seq_full / 2
    if kind in ("sliding", "chunked"):
        window = m.sliding_window or m.attention_chunk_size or seq_full
        span = min(window, seq_full / 2)
    if m.layer_is_msa(layer):  # MiniMax Sparse Attention: the selected blocks and the index branch
        idx_gemm, core, span = msa_layer_flops(m, tokens, seq_full)
        dense += idx_gemm
    return dense, core + 2 * tokens * span * 2 * q / tp  # QK^T and PV


def _linear_mixer_flops(m: ModelSpec, tokens: float, tp: int) -> tuple[float, float]:
    """(GEMM, depthwise-convolution) forward FLOPs of one linear-attention mixer on one TP rank: Gated
    DeltaNet's in / out projections and conv, or Kimi Delta Attention's (:func:`kda_executed_flops`,
    whose ``f_a_proj`` every TP rank runs whole). The delta rule itself is timed by
    :mod:`moeplan.model.gdn`."""
    if m.kimi_delta_attention:
        split, replicated, conv = kda_executed_flops(m)
        return tokens * (split / tp + replicated), tokens * conv / tp
    h = m.hidden_size
    qk = m.given("linear_key_head_dim") * m.given("linear_num_key_heads")
    v = m.given("linear_value_head_dim") * m.given("linear_num_value_heads")
    gemm = 2 * tokens * (h * (2 * qk + 2 * v + 2 * m.given("linear_num_value_heads")) + h * v) / tp
    return gemm, 2 * tokens * m.given("linear_conv_kernel_dim") * (2 * qk + v) / tp


def layer_flops(
    m: ModelSpec,
    layer: int,
    tokens: float,
    seq_local: float,
    seq_full: int,
    tp: int,
    cp: int,
    ep: int,
    routing_factor: float,
) -> LayerFlops:
    """Forward FLOPs (2 per multiply-add) of decoder layer ``layer`` on one rank."""
    h = m.hidden_size
    kinds = m.attention_kinds or ("full",) * m.num_layers
    kind = kinds[layer]
    moe = bool(m.moe_layers and m.moe_layers[layer])
    g = 3 if m.gated_linear_unit else 2
    dense = 0.0
    core = 0.0
    sparse_core = 0.0
    if kind == "none":  # an MLP-only layer of a Mamba hybrid
        pass
    elif kind == "mamba":
        # in_proj and out_proj; the conv and SSD scan are timed by moeplan.model.mamba_scan
        dense += tokens * mamba_executed_flops(m)[0] / tp
    elif kind == "linear":  # Gated DeltaNet or Kimi Delta Attention
        lin_gemm, lin_conv = _linear_mixer_flops(m, tokens, tp)
        dense, core = dense + lin_gemm, core + lin_conv
    elif m.is_dsv4:  # compressed sparse attention: the window plus the compressed keys (dsv4_shapes)
        ratio = layer_ratio(m, layer)
        gemm, attn = dsv4_layer_forward_flops(m, ratio, seq_full)
        sparse = dsv4_sparse_core_flops(m, ratio, seq_full)
        dense += tokens * gemm / tp
        core += tokens * (attn - sparse) / tp  # the ratio-4 indexer's scores
        sparse_core += tokens * sparse / tp
    elif m.multi_latent_attention:
        nh = m.num_attention_heads
        qk, rope, vd = m.given("qk_head_dim"), m.given("qk_pos_emb_head_dim"), m.given("v_head_dim")
        q_term = h * nh * (qk + rope) if not m.q_lora_rank else m.q_lora_rank * (h + nh * (qk + rope))
        lin = q_term + m.given("kv_lora_rank") * (h + nh * (qk + vd)) + h * rope + nh * vd * h
        lin += h * nh * vd if m.attention_output_gate else 0  # Kimi-K3's g_proj
        dense += 2 * tokens * lin / tp
        if m.has_dsa:  # the indexer and a top-k core instead of the causal core
            idx_gemm, idx_scores, sparse_core = dsa_layer_flops(m, layer, tokens, seq_full, tp)
            dense += idx_gemm
            core += idx_scores
        else:  # causal: each of the seq_local queries on this CP rank sees on average half the keys
            core += 2 * tokens * seq_full * nh * (qk + rope + vd) / 2 / tp
    else:
        gqa_dense, core = _softmax_attention_flops(m, layer, kind, tokens, seq_full, tp)
        dense += gqa_dense
    expert = 0.0
    per_expert = 0.0
    if not m.layer_has_mlp(layer):
        return LayerFlops(dense, core, expert, per_expert, sparse_core)
    if moe:
        expert = 2 * tokens * m.moe_token_width * m.moe_ffn * g * m.moe_topk * routing_factor / tp
        routed_rank = tokens / tp * m.moe_topk * routing_factor  # routed tokens arriving on this rank
        per_expert = routed_rank / max(1, m.num_moe_experts // ep) if m.num_moe_experts else 0.0
        if m.moe_shared_expert_intermediate_size:
            dense += 2 * tokens * h * m.moe_shared_expert_intermediate_size * g / tp
        dense += 2 * tokens * h * m.moe_experts / tp  # router
        # latent MoE: fc1 / fc2_latent_proj (h ↔ latent), duplicated on every TP rank over its SP-local tokens
        dense += 2 * tokens * 2 * h * (m.moe_latent_size or 0) / tp
    else:
        dense += 2 * tokens * h * (m.ffn_hidden_size or 0) * g / tp
    return LayerFlops(dense, core, expert, per_expert, sparse_core)


def grouped_efficiency(tokens_per_expert: float, c: TimeConstants) -> float:
    """Occupancy of a grouped GEMM relative to a large dense one: t / (t + t½)."""
    if tokens_per_expert <= 0:
        return 1.0
    return tokens_per_expert / (tokens_per_expert + c.grouped_gemm_half_tokens)
