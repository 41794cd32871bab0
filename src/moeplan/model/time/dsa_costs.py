"""DeepSeek Sparse Attention's core on one rank, forward + backward (s), on the path megatron-core runs.

Two paths (megatron-core ``transformer/experimental_attention_variant/dsa.py``):

- **fused** (core_v0.19.0+ with ``dsa_kernel_backend`` ``tilelang`` or ``cudnn``): the sparse MLA
  kernel over the indexer's top-k keys and the fused indexer, as
  :func:`moeplan.model.executed_flops.dsa_layer_flops` counts them, plus what the indexer's KL loss
  runs beyond Megatron Bridge's count of it (:func:`fused_loss_s`);
- **PyTorch fallback** (core_v0.16.0 to core_v0.18.x always; core_v0.19.0+ with ``dsa_kernel_backend``
  ``none``, its default): every score is materialised over all keys in FP32 and masked to the top-k
  afterwards (:func:`fallback_attention_s`, :func:`reference_indexer_s`).

Units: a tensor pass is one read or one write of every element of the tensor named. The passes per
tensor are counted from the source of each release, one read and one write per element-wise op, one
read per reduction or GEMM operand, one write per GEMM output; the backward is autograd's for the same
ops. GEMM FLOPs run at the dense BF16 GEMM rate whatever the recipe's precision (the fallback's FP32
``matmul`` too: the GPU catalog has no FP32 rate, so this is a lower bound of its time), the passes at
HBM bandwidth,
and the TP all-reduce of the loss target at the link of the TP group (:func:`moeplan.model.comm.link_bw`).
"""

from __future__ import annotations

from typing import Literal

from packaging.version import Version

from moeplan.catalog.gpus import measured_gemm_fractions
from moeplan.i18n.messages import msg
from moeplan.inputs.model_spec import ModelSpec
from moeplan.inputs.resolved import Scenario
from moeplan.model.comm import link_bw
from moeplan.model.executed_flops import speeds
from moeplan.model.time.context import StepContext

#: first megatron-core release with the fused DSA kernel backends and absorbed MLA for DSA
#: (core_v0.19.0: ``TransformerConfig.dsa_kernel_backend``, ``absorbed_mla.py``)
FUSED_DSA_MCORE = Version("0.19.0")
#: the fused backends (``TransformerConfig.dsa_kernel_backend``; default ``none``)
FUSED_DSA_BACKENDS = ("tilelang", "cudnn")

#: FP32 ``[b, heads, s_q, s_k]`` score passes of the fallback's attention, forward + backward.
#: core_v0.16.0-0.18.x ``unfused_dsa_fn``: forward bmm write 1, ``* softmax_scale`` 2, ``+= mask`` 2,
#: softmax 2, cast to BF16 1.5, PV bmm read 0.5 (9); backward: PV's two GEMMs 1, cast back 1.5,
#: softmax 3, scale 2, QK's two GEMMs 2 (9.5)
FALLBACK_SCORE_PASSES_OLD = 18.5
#: core_v0.19.0+ ``_unfused_absorbed_dsa_fn``: as above with ``dsa_masking.masked_softmax`` (masked_fill,
#: max, subtract, exp, masked_fill, sum, divide, masked_fill: 14 forward, 13 backward) in place of
#: softmax: forward 1 + 2 + 2 + 14 + 1.5 + 0.5 = 21, backward 1 + 1.5 + 13 + 2 + 2 = 19.5
FALLBACK_SCORE_PASSES = 40.5
#: FP32 ``[s_q, b, H, s_k]`` indexer passes of ``_compute_index_scores`` (einsum write 1, ReLU 2,
#: ``* weights`` 2, sum over heads 1), and FP32 ``[b, s_q, s_k]`` passes after it (sum's output 1,
#: the mask 2, ``topk`` 1)
INDEXER_HEAD_PASSES = 6.0
INDEXER_ROW_PASSES = 4.0
#: the reference KL loss (``FusedDSAIndexerLoss``: ``compute_dsa_indexer_loss`` forward, then
#: ``bwd_fused_indexer_loss_naive``, which recomputes both score sets) beyond the indexer's forward:
#: teacher ``[b, heads, s_q, s_k]`` passes (bmm 1, scale 2, mask 2, top-k mask 2 with the sparse loss,
#: masked_softmax 14, head sum 1: 22 forward and 22 in the backward's recompute), indexer
#: ``[s_q, b, H, s_k]`` passes (recompute 6, the ``scores`` einsum 1, ReLU and its mask 2.25, weight
#: gradient 3, score gradient 1, ReLU mask 4.25, the q and k gradient einsums 2: 19.5) and
#: ``[b, s_q, s_k]`` passes (masks, log-softmax, target, KL and its gradient: 20 forward, 25 backward)
LOSS_TEACHER_PASSES = 44.0
LOSS_INDEXER_HEAD_PASSES = 19.5
LOSS_ROW_PASSES = 45.0
#: GEMMs of the reference loss in units of one forward's: the teacher QK twice (forward and the
#: backward's recompute), the indexer QK four times (the backward's two recomputes, the q and k gradients)
LOSS_TEACHER_GEMMS = 2
LOSS_INDEXER_GEMMS = 4
#: FP32 ``[b, s_q, top-k]`` passes of the fused sparse loss outside its kernels (cuDNN
#: ``_compute_sparse_indexer_loss_and_grads`` / TileLang's streaming KL: masked log-softmax 14, its exp
#: and mask 4, the target's mask, normalisation and mask 7, the KL terms 9, the backward's clamp and
#: padded copies 6)
FUSED_SPARSE_LOSS_PASSES = 40.0
#: the fused dense loss (cuDNN, CP 1): ``_compute_dense_attn_lse`` runs an FP32 einsum over all keys
#: per head (one GEMM forward, no backward) with 8 ``[b, heads, s_q, s_k]`` passes (write, scale,
#: causal mask, logsumexp 3), and 16 ``[b, s_q, s_k]`` passes (two clones, the indexer's logsumexp, KL)
FUSED_DENSE_LSE_PASSES = 8.0
FUSED_DENSE_ROW_PASSES = 16.0

#: compute capability the fused DSA kernels need (FlashMLA sparse and cuDNN sparse attention: SM90+)
FUSED_DSA_MIN_CC = 9.0

LossPath = Literal["none", "fused", "reference"]


def fused_dsa_runs(s: Scenario) -> bool:
    """Whether megatron-core runs DSA's fused kernels: release core_v0.19.0+, ``dsa_kernel_backend``
    ``tilelang`` or ``cudnn`` (default ``none``: the PyTorch fallback), and a GPU the kernels take
    (compute capability 9.0+, FlashMLA's and cuDNN's sparse kernels; a backend's hook declines
    elsewhere and megatron-core falls back, ``dsa_kernels.py::_resolve_fused_hook`` at core_v0.19.0).
    A GPU of unknown compute capability counts as taking them."""
    backend = s.input.unmodelled_keys.get("dsa_kernel_backend", "none")
    cc = s.gpu.compute_capability if s.gpu is not None else None
    arch_ok = cc is None or cc >= FUSED_DSA_MIN_CC
    return s.mcore_version >= FUSED_DSA_MCORE and backend in FUSED_DSA_BACKENDS and arch_ok


def loss_path(s: Scenario, m: ModelSpec) -> LossPath:
    """Which implementation computes the indexer's KL loss (``dsa.py::DSAttention.forward``): ``none``
    without it (``dsa_indexer_loss_coeff`` 0); ``fused`` where a fused backend has it: the sparse loss
    (``run_fused_qk_topk_with_loss`` / ``run_fused_dsa_attention``) or cuDNN's dense loss without CP
    (``run_fused_dsa_attention`` declines CP and varlen for the dense loss); else ``reference``
    (``FusedDSAIndexerLoss``, PyTorch)."""
    if m.dsa_indexer_loss_coeff <= 0:
        return "none"
    if not fused_dsa_runs(s):
        return "reference"
    if m.dsa_indexer_use_sparse_loss:
        return "fused"
    cudnn = s.input.unmodelled_keys.get("dsa_kernel_backend") == "cudnn"
    return "fused" if cudnn and s.cp == 1 else "reference"


def _widths(s: Scenario, m: ModelSpec) -> tuple[int, int]:
    """(QK, V) widths per head of the fallback's attention: absorbed MLA from core_v0.19.0 (kv_lora +
    rope, kv_lora over one shared latent row), each head's own keys and values before."""
    if s.mcore_version >= FUSED_DSA_MCORE:
        kv = m.given("kv_lora_rank")
        return kv + m.given("qk_pos_emb_head_dim"), kv
    return m.given("qk_head_dim") + m.given("qk_pos_emb_head_dim"), m.given("v_head_dim")


def bf16_gemm_rate(ctx: StepContext) -> float:
    """The dense BF16 GEMM rate (FLOP/s: BF16 peak × the GPU's measured BF16 GEMM fraction,
    :func:`moeplan.model.executed_flops.speeds`) whatever the recipe's precision: the PyTorch DSA path
    multiplies FP32 (or BF16) tensors, never FP8 ones. The GPU catalog has no FP32 rate, so the FP32
    matmuls run at this rate here: a lower bound of their time."""
    return speeds(ctx.gpu, "bf16", False, ctx.c, measured_gemm_fractions(ctx.gpu.id or "")).gemm_flops_per_s


def _time(ctx: StepContext, gemm_flops: float, hbm_bytes: float, tp_bytes: float = 0.0) -> float:
    """Seconds of ``gemm_flops`` at the dense BF16 GEMM rate (:func:`bf16_gemm_rate`), ``hbm_bytes`` at HBM bandwidth and a TP
    all-reduce of ``tp_bytes`` (ring: 2·(TP − 1)/TP of them over the TP group's link)."""
    sp, tp = ctx.speeds, ctx.s.tp
    t = gemm_flops / bf16_gemm_rate(ctx) + hbm_bytes / sp.hbm_bytes_per_s
    if tp > 1 and tp_bytes:
        t += 2 * (tp - 1) / tp * tp_bytes / link_bw(ctx.gpu, tp, ctx.c)
    return t


def fallback_attention_s(ctx: StepContext) -> float:
    """The fallback's attention of one layer (s, fwd + bwd): QKᵀ and PV over all ``s`` keys (no causal
    or top-k skipping: the mask is applied to the full scores), 3 × the forward GEMMs, and the FP32
    scores' passes (:data:`FALLBACK_SCORE_PASSES` from core_v0.19.0, else
    :data:`FALLBACK_SCORE_PASSES_OLD`) of ``q · heads/TP · s · 4`` bytes."""
    s, m = ctx.s, ctx.model
    qk, v = _widths(s, m)
    heads = m.num_attention_heads / s.tp
    pairs = ctx.tokens * ctx.seq_length * heads
    passes = FALLBACK_SCORE_PASSES if s.mcore_version >= FUSED_DSA_MCORE else FALLBACK_SCORE_PASSES_OLD
    return _time(ctx, 3 * 2 * pairs * (qk + v), passes * pairs * 4)


def reference_indexer_s(ctx: StepContext, with_loss: bool) -> float:
    """The PyTorch indexer of one layer (s): ``fused_qk_topk_naive`` (FP32 einsum over all keys, ReLU,
    weights, head sum, top-k; no gradient), and with the KL loss ``FusedDSAIndexerLoss``: the teacher's
    FP32 scores over all keys twice, the indexer's recomputed and differentiated
    (:data:`LOSS_TEACHER_GEMMS`, :data:`LOSS_INDEXER_GEMMS`, the passes above) and the head-summed target
    all-reduced over TP (``q · s · 4`` bytes). The indexer runs whole on every TP rank."""
    s, m = ctx.s, ctx.model
    q, keys = ctx.tokens, ctx.seq_length
    idx_pairs = q * keys * m.given("dsa_indexer_n_heads")
    idx_gemm = 2 * idx_pairs * m.given("dsa_indexer_head_dim")
    t = _time(ctx, idx_gemm, (INDEXER_HEAD_PASSES * idx_pairs + INDEXER_ROW_PASSES * q * keys) * 4)
    if not with_loss:
        return t
    qk = _widths(s, m)[0]
    pairs = q * keys * m.num_attention_heads / s.tp
    gemm = LOSS_TEACHER_GEMMS * 2 * pairs * qk + LOSS_INDEXER_GEMMS * idx_gemm
    passes = LOSS_TEACHER_PASSES * pairs + LOSS_INDEXER_HEAD_PASSES * idx_pairs + LOSS_ROW_PASSES * q * keys
    return t + _time(ctx, gemm, passes * 4, q * keys * 4)


def fused_loss_s(ctx: StepContext) -> float:
    """What the fused KL loss of one layer runs beyond Megatron Bridge's count of it (s; the teacher's
    query-key work and the score gradients are in :func:`~moeplan.structure.flops.dsa_indexer_flops_per_token`):
    the sparse loss's ``[q, top-k]`` FP32 passes (:data:`FUSED_SPARSE_LOSS_PASSES`) and its target's TP
    all-reduce; cuDNN's dense loss also its LSE pass over all keys (an FP32 einsum per head,
    :data:`FUSED_DENSE_LSE_PASSES`) and the ``[q, s]`` target's passes and all-reduce."""
    s, m = ctx.s, ctx.model
    q = ctx.tokens
    if m.dsa_indexer_use_sparse_loss:
        row = q * m.given("dsa_indexer_topk") * 4
        return _time(ctx, 0.0, FUSED_SPARSE_LOSS_PASSES * row, row)
    qk = _widths(s, m)[0]
    pairs = q * ctx.seq_length * m.num_attention_heads / s.tp
    row = q * ctx.seq_length * 4
    return _time(ctx, 2 * pairs * qk, FUSED_DENSE_LSE_PASSES * pairs * 4 + FUSED_DENSE_ROW_PASSES * row, row)


def dsa_core_s(ctx: StepContext, layer: int, index_s: float, sparse_s: float) -> float:
    """DSA's core of decoder layer ``layer`` (0-based) for one microbatch on one rank, fwd + bwd (s), on
    the path megatron-core runs: fused, the sparse kernel's ``sparse_s`` and the fused indexer's
    ``index_s`` (both from :mod:`moeplan.model.time.compute`) plus :func:`fused_loss_s`; otherwise the
    fallback's attention and the PyTorch indexer, or the PyTorch loss where no fused one runs. A layer
    that reuses an earlier top-k runs no indexer."""
    s, m = ctx.s, ctx.model
    fused = fused_dsa_runs(s)
    attention = sparse_s if fused else fallback_attention_s(ctx)
    if not m.layer_has_indexer(layer):
        return attention
    path = loss_path(s, m)
    if fused and path != "reference":
        return attention + index_s + (fused_loss_s(ctx) if path == "fused" else 0.0)
    return attention + reference_indexer_s(ctx, with_loss=path != "none")


def dsa_path_notes(ctx: StepContext) -> list[str]:
    """Which DSA path :func:`dsa_core_s` timed: the PyTorch fallback (release, backend, keys, score
    passes), and how the indexer's KL loss was timed (PyTorch reference or fused); empty for the fused
    path without the loss."""
    s, m = ctx.s, ctx.model
    out: list[str] = []
    if not fused_dsa_runs(s):
        backend = s.input.unmodelled_keys.get("dsa_kernel_backend", "none")
        passes = FALLBACK_SCORE_PASSES if s.mcore_version >= FUSED_DSA_MCORE else FALLBACK_SCORE_PASSES_OLD
        version, topk = str(s.mcore_version), m.dsa_indexer_topk
        out.append(
            msg(
                "dsa_costs.note_fallback",
                version=version,
                backend=str(backend),
                seq=ctx.seq_length,
                passes=passes,
                topk=topk,
            )
        )
    path = loss_path(s, m)
    coeff, sparse = m.dsa_indexer_loss_coeff, str(m.dsa_indexer_use_sparse_loss).lower()
    if path == "reference":
        out.append(msg("dsa_costs.note_loss_reference", coeff=coeff, sparse=sparse))
    elif path == "fused":
        keys = m.dsa_indexer_topk if m.dsa_indexer_use_sparse_loss else ctx.seq_length
        out.append(msg("dsa_costs.note_loss_fused", coeff=coeff, sparse=sparse, keys=keys))
    return out
