"""What Transformer Engine's context-parallel attention runs on one rank besides the transfers.

Source: Transformer Engine ``transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py``
(``AttnFuncWithCPAndKVP2P``, ``flash_attn_a2a_communicate``), the same at v2.12, v2.14 and v2.16 (the
TE of NeMo 26.02, 26.04 and 26.06). Every rank holds two load-balanced chunks of ``c`` tokens each
(sequence chunks ``r`` and ``2·CP − 1 − r``); ``sbhd`` layout, so the halves are leading-dimension
slices and selecting one copies nothing. Per layer and microbatch:

- **ring-step kernels.** Step 0 is the rank's own, causal ``2c × 2c``; afterwards the ``lower-triangle``
  steps run ``q 2c × kv c`` (both query chunks against the sender's first chunk) and the
  ``upper-triangle`` steps ``q c × kv 2c`` (the second query chunk against both); every step covers
  ``2c²`` query-key pairs. Rank ``r`` runs ``r`` lower steps forward, and backward its lower steps are
  ``i ≥ CP − 1 − r``: rank ``CP − 1`` runs only lower steps in the forward, rank 0 only upper steps in the
  backward. A forward kernel tiles queries and loops over keys, a backward kernel tiles keys and loops
  over queries (FlashAttention-2, arXiv 2307.08691, §3.2; cuDNN's fused attention, which TE prefers on
  sm90+, is built the same way), so the loop of a forward lower step is ``c`` keys long and the loop of a
  backward upper step ``c`` queries long: each runs at the attention rate of a length-``c`` kernel
  (:func:`~moeplan.model.executed_flops.attention_forward_fraction`), the diagonal step at ``2c``.
- **forward output correction** (after the ring loop, on the compute stream, nothing left to hide it
  behind): step 0 rescales its partial output into ``out`` (read + write), each later step adds its
  rescaled partial into ``out`` (read partial + read ``out`` + write ``out``); a lower step's partial is
  ``2c`` tokens × the output width, an upper step's ``c``. One fused kernel each (``@jit_fuser`` is
  ``torch.compile``, ``transformer_engine/pytorch/jit.py``). The slowest rank, ``CP − 1``, moves
  ``c · o · e · (4 + 6 (CP − 1))`` bytes (``o`` output elements per token, ``e`` bytes each). The
  log-sum-exp corrections (4 bytes per token and head, against ``3 · d_v · 2`` for the output) run on
  the second stream inside the loop and are left out.
- **backward gradient accumulation** (on the compute stream, after each step's kernel): ``dq`` into a
  buffer of the rank's queries, ``dk``/``dv`` into the K/V gradient received from the neighbour, which
  the rank waits for first. Rank 0 (all upper steps): ``dq`` copies ``c`` at step 0, adds ``c`` at
  steps ``1 … CP − 2`` and copies ``c`` + adds ``c`` at the diagonal step, ``c · q · e · (3 CP + 1)``
  bytes; ``dkv`` copies ``2c`` at step 0, adds ``2c`` at steps ``1 … CP − 2``, adds ``c`` + copies ``c``
  at the diagonal step, ``c · kv · e · (6 CP − 3)`` bytes. Each step's ``dq`` accumulation runs before
  the wait, so the step's transfer overlaps it; the ``dkv`` accumulation runs after it.
- **K/V packing**: the forward concatenates K and V into one send buffer (``torch.cat``; MLA's K and V
  have different head dims, so they travel as one flat buffer), the backward copies it into a buffer
  with room for dK/dV: two copies of the rank's K/V, read + write each.
- **all-to-all reordering** (``a2a`` and ``a2a+p2p``'s inner group): every tensor the all-to-all moves is
  made contiguous head-first before it (one copy) and after it made contiguous again and its chunks
  reordered (``index_select``, another copy): three copies, six passes over the tensor. Forward Q, K, V
  and the output; backward the output gradient, dQ, dK, dV and, in ``a2a+p2p``, the output once more.

``e`` is 2 bytes (BF16 attention; the partial outputs and gradients are BF16 and so are the buffers) or
4 with FP8 attention (under current scaling TE dequantizes the partials to FP32 and accumulates in FP32
buffers; delayed scaling gathers the FP8 partials and sums them in FP32 once, taken as the same).
Packed sequences (``thd``) add TE's half-tensor read kernels, not counted. Every memory-bound term is
its bytes over the GPU's HBM bandwidth (a lower bound on its time).

Not in the step estimate yet (``docs/model/step_time.md``, "Tried and dropped"): on NVIDIA's
out-of-sample Llama2-7B long-sequence runs the estimate's attention is already slower than measured,
and these terms widen the gap; :func:`dense_core_s` is what the estimate's attention core would be.
"""

from __future__ import annotations

from dataclasses import dataclass

from moeplan.inputs.system import GpuSpec
from moeplan.model.executed_flops import attention_backward_fraction, attention_forward_fraction
from moeplan.model.time.context import StepContext, attention_rate, hierarchical_a2a_size, layer_cp_comm_type
from moeplan.structure.attention_kernels import attention_runs_unfused

#: backward / forward executed FLOPs of a flash attention kernel (the backward recomputes QKᵀ)
BACKWARD_FLOP_RATIO = 2.5
#: bytes of K and V as the ring sends them (BF16)
KV_BYTES = 2
#: copies (read + write: two passes each) of every tensor an all-to-all of TE's CP attention moves
A2A_REORDER_PASSES = 6


@dataclass(frozen=True)
class RingShape:
    """What one rank's ring attention works on (one layer, one microbatch).

    Attributes:
        chunk_len: ``c``, tokens of one load-balanced chunk of one sequence (half the rank's sequence
            share: ``S / (2 CP)``, or ``S·a / (2 CP)`` after a2a+p2p's all-to-all over ``a`` ranks).
        chunk_tokens: ``c`` times the micro-batch size (what the memory-bound terms scale with).
        steps: ring members.
        q_width / kv_width / o_width: elements per token the rank holds of Q (d_qk × query heads),
            K + V, and the output (d_v × query heads).
        head_dims: d_qk + d_v of one head (the attention kernels' rate depends on it).
    """

    chunk_len: float
    chunk_tokens: float
    steps: int
    q_width: float
    kv_width: float
    o_width: float
    head_dims: int


@dataclass(frozen=True)
class RingKernels:
    """The ring attention of one layer and microbatch on its slowest ranks, by term (s).

    Attributes:
        forward_first_s / forward_step_s: the diagonal step's forward kernel and one later step's
            (rank CP − 1: ``q 2c × kv c``).
        backward_first_s / backward_step_s: the same for the backward kernels (rank 0: ``q c × kv 2c``).
        out_correction_s: the forward output correction (rank CP − 1).
        dq_accumulation_s / dkv_accumulation_s: the backward gradient accumulation (rank 0).
        kv_packing_s: the two copies of the rank's K/V into the ring's buffers.
        steps: ring members.
    """

    forward_first_s: float
    forward_step_s: float
    backward_first_s: float
    backward_step_s: float
    out_correction_s: float
    dq_accumulation_s: float
    dkv_accumulation_s: float
    kv_packing_s: float
    steps: int

    @property
    def kernels_s(self) -> float:
        """The attention kernels of every step, forward + backward (s)."""
        later = self.steps - 1
        return self.forward_first_s + later * self.forward_step_s + self.backward_first_s + later * self.backward_step_s

    @property
    def bookkeeping_s(self) -> float:
        """The memory-bound work around the kernels: corrections, accumulations, packing (s)."""
        return self.out_correction_s + self.dq_accumulation_s + self.dkv_accumulation_s + self.kv_packing_s

    @property
    def total_s(self) -> float:
        """Everything the ring attention runs on the compute streams (s)."""
        return self.kernels_s + self.bookkeeping_s

    @property
    def backward_overlap_s(self) -> float:
        """What one backward transfer overlaps: a later step's kernel and its dq accumulation (s)."""
        return self.backward_step_s + self.dq_accumulation_s / self.steps


def out_correction_bytes(chunk_tokens: float, o_width: float, steps: int, elem: int) -> float:
    """HBM bytes of the forward output correction on rank CP − 1 of a ``steps``-member ring:
    ``c · o · e · (4 + 6 (steps − 1))`` (module docstring)."""
    return chunk_tokens * o_width * elem * (4 + 6 * (steps - 1))


def accumulation_bytes(
    chunk_tokens: float, q_width: float, kv_width: float, steps: int, elem: int
) -> tuple[float, float]:
    """HBM bytes of the backward accumulation on rank 0, ``(dq, dkv)``: ``c · q · e · (3 steps + 1)``
    and ``c · kv · e · (6 steps − 3)`` (module docstring)."""
    return chunk_tokens * q_width * elem * (3 * steps + 1), chunk_tokens * kv_width * elem * (6 * steps - 3)


def kv_packing_bytes(chunk_tokens: float, kv_width: float) -> float:
    """HBM bytes of the two K/V copies: ``2 copies × 2 passes × 2c · kv · 2`` bytes."""
    return 4 * 2 * chunk_tokens * kv_width * KV_BYTES


def ring_kernels(shape: RingShape, gpu: GpuSpec, peak_flops: float, hbm: float, fp8: bool) -> RingKernels:
    """The ring attention of ``shape`` (``steps`` ≥ 2) on its slowest ranks.

    ``peak_flops``: the attention peak (FLOP/s, BF16 or FP8's attention peak); ``hbm``: HBM bytes/s;
    ``fp8``: FP8 attention (FP32 partials and buffers). Each step's forward executes
    ``2c² · heads · 2 (d_qk + d_v) = 2c² · 2 (q + o)`` FLOPs per sequence (``q + o`` elements per token
    are d_qk + d_v for each query head), the backward 2.5× that.
    """
    c, n = shape.chunk_len, shape.steps
    sequences = shape.chunk_tokens / c
    step_flops = sequences * 2 * c * c * 2 * (shape.q_width + shape.o_width)
    hd = shape.head_dims

    def fwd(length: float) -> float:
        return step_flops / (peak_flops * attention_forward_fraction(gpu, length, hd, fp8))

    def bwd(length: float) -> float:
        return BACKWARD_FLOP_RATIO * step_flops / (peak_flops * attention_backward_fraction(gpu, length, hd, fp8))

    elem = 4 if fp8 else 2
    dq, dkv = accumulation_bytes(shape.chunk_tokens, shape.q_width, shape.kv_width, n, elem)
    return RingKernels(
        forward_first_s=fwd(2 * c),
        forward_step_s=fwd(c),
        backward_first_s=bwd(2 * c),
        backward_step_s=bwd(c),
        out_correction_s=out_correction_bytes(shape.chunk_tokens, shape.o_width, n, elem) / hbm,
        dq_accumulation_s=dq / hbm,
        dkv_accumulation_s=dkv / hbm,
        kv_packing_s=kv_packing_bytes(shape.chunk_tokens, shape.kv_width) / hbm,
        steps=n,
    )


def a2a_reorder_bytes(tokens: float, q_width: float, kv_width: float, o_width: float, output_twice: bool) -> float:
    """HBM bytes of the all-to-alls' reordering copies of one layer on one rank, forward + backward:
    :data:`A2A_REORDER_PASSES` passes over each moved tensor's local bytes (BF16), Q + K/V + output
    forward, output gradient + dQ + dK/dV backward, and the output once more with ``output_twice``
    (``a2a+p2p``'s backward all-to-alls the saved output with its gradient). ``tokens`` and the widths
    are the rank's before the all-to-all."""
    moved = 2 * (q_width + kv_width + o_width) + (o_width if output_twice else 0.0)
    return A2A_REORDER_PASSES * tokens * moved * KV_BYTES


def _ring_layer(ctx: StepContext, layer: int) -> tuple[str, int] | None:
    """The layer's CP exchange and its all-to-all group when TE's CP attention path applies to it: a
    causal softmax-attention layer (``full``) on the fused kernels, with a ring (p2p, a2a+p2p) or an
    all-to-all (a2a); None otherwise (no CP, all_gather, sparse or linear attention, unfused heads)."""
    s, m = ctx.s, ctx.model
    kind = m.attention_kinds[layer] if m.attention_kinds else "full"
    if s.cp == 1 or kind != "full" or m.has_dsa or m.is_dsv4 or attention_runs_unfused(m, kind):
        return None
    comm = layer_cp_comm_type(s, layer)
    if comm == "p2p":
        return comm, 1
    if comm == "a2a":
        return comm, s.cp
    if comm == "a2a+p2p":
        return comm, hierarchical_a2a_size(s)
    return None


def layer_ring_kernels(ctx: StepContext, layer: int) -> RingKernels | None:
    """The ring attention of decoder layer ``layer`` (p2p, or a2a+p2p's outer ring of CP / a members
    after the all-to-all over ``a``); None where no ring runs (:func:`_ring_layer`, a2a, a ring of 1)."""
    found = _ring_layer(ctx, layer)
    if found is None or found[0] == "a2a":
        return None
    inner = found[1]
    steps = ctx.s.cp // inner
    if steps < 2:
        return None
    split = ctx.s.tp * inner
    w = ctx.cp_widths
    shape = RingShape(
        chunk_len=ctx.seq_local * inner / 2,
        chunk_tokens=ctx.tokens * inner / 2,
        steps=steps,
        q_width=w.q / split,
        kv_width=w.kv / split,
        o_width=w.o / split,
        head_dims=ctx.model.attention_head_dims,
    )
    sp = ctx.speeds
    return ring_kernels(shape, ctx.gpu, sp.attention_flops_per_s, sp.hbm_bytes_per_s, ctx.fp8_attention)


def layer_a2a_reorder_s(ctx: StepContext, layer: int) -> float:
    """The all-to-alls' reordering copies of decoder layer ``layer`` (s; 0 without an all-to-all)."""
    found = _ring_layer(ctx, layer)
    if found is None or found[1] <= 1:
        return 0.0
    w, tp = ctx.cp_widths, ctx.s.tp
    moved = a2a_reorder_bytes(ctx.tokens, w.q / tp, w.kv / tp, w.o / tp, found[0] == "a2a+p2p")
    return moved / ctx.speeds.hbm_bytes_per_s


def dense_core_s(ctx: StepContext, layer: int, core_flops: float) -> float:
    """The fused softmax-attention core of decoder layer ``layer`` for one microbatch, forward +
    backward (s), ``core_flops`` its forward FLOPs on the rank: under a CP ring every step's kernel at
    its shape plus the corrections, accumulations and packing (:func:`layer_ring_kernels`), otherwise
    ``3 · core_flops`` at the attention rate of the exchange's kernel length
    (:func:`~moeplan.model.time.context.attention_rate`); plus the all-to-alls' reordering copies."""
    ring = layer_ring_kernels(ctx, layer)
    if ring is not None:
        return ring.total_s + layer_a2a_reorder_s(ctx, layer)
    return 3 * core_flops / attention_rate(ctx, layer_cp_comm_type(ctx.s, layer)) + layer_a2a_reorder_s(ctx, layer)
