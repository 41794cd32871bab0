"""Transformer Engine's context-parallel attention beyond its transfers, term by term, at DeepSeek-V3's
MLA shape (``moeplan.model.time.cp_ring_kernels``).

Source: TE ``transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py``
(``AttnFuncWithCPAndKVP2P``, ``flash_attn_a2a_communicate``) at v2.12 / v2.14 / v2.16. The per-rank
references below walk the branches of that file step by step (which partial each step produces, and
whether it is copied or added); the closed forms of the module must equal their slowest rank.

Shape: DeepSeek-V3 after the up-projection, 128 heads, d_qk 192 (128 + 64 rope), d_v 128; the long-context
card's 32K row, CP 8, TP 1: 4096 tokens per rank, two chunks of c = 2048. Per token on the rank:
Q 128 · 192 = 24 576 elements, K + V 128 · 320 = 40 960, output 128 · 128 = 16 384. H100: BF16 peak
989 TFLOP/s, HBM 3350 GB/s (the catalog's figures).
"""

from __future__ import annotations

import pytest

from moeplan import load_scenario
from moeplan.catalog.gpus import get_gpu
from moeplan.model.constants import load_constants
from moeplan.model.executed_flops import layer_flops
from moeplan.model.time.context import attention_rate, step_context
from moeplan.model.time.cp_ring_kernels import (
    RingShape,
    a2a_reorder_bytes,
    accumulation_bytes,
    dense_core_s,
    kv_packing_bytes,
    layer_a2a_reorder_s,
    layer_ring_kernels,
    out_correction_bytes,
    ring_kernels,
)

H100 = get_gpu("h100")
PEAK, HBM = 989e12, 3350e9
C, STEPS = 2048, 8
Q_W, KV_W, O_W = 128 * 192, 128 * 320, 128 * 128
SHAPE = RingShape(chunk_len=C, chunk_tokens=C, steps=STEPS, q_width=Q_W, kv_width=KV_W, o_width=O_W, head_dims=320)


def _forward_correction_tokens(rank: int, cp: int) -> int:
    """Token passes of the forward output correction on ``rank`` (TE's loop after the ring): step 0
    ``flash_attn_fwd_out_correction_init`` reads the 2c-token partial and writes ``out`` (2 passes);
    step i ≤ rank (lower triangle: both query chunks) adds a 2c-token partial, i > rank (upper: the
    second chunk) a c-token one, each read partial + read out + write out (3 passes)."""
    passes = 2 * 2 * C
    for i in range(1, cp):
        passes += 3 * (2 * C if i <= rank else C)
    return passes


def _backward_accumulation_tokens(rank: int, cp: int) -> tuple[int, int]:
    """Token passes of the backward ``dq`` and ``dk``/``dv`` accumulation on ``rank`` (causal, BF16,
    ``sbhd``), from TE's branches: a copy is 2 passes, an add 3."""
    dq = dkv = 0
    for i in range(cp):
        if i > cp - rank - 1:  # a lower step after the first: dq_ covers both query chunks
            dq += 3 * 2 * C
        elif i == cp - rank - 1:
            dq += 2 * 2 * C if rank == cp - 1 else 2 * C + 3 * C  # dq[0].copy_, dq[1].add_
        elif i > 0:
            dq += 3 * C  # dq[1].add_ (upper: the second chunk only)
        else:
            dq += 2 * C  # dq[1].copy_
        if i == cp - 1:  # the diagonal step: dk_ covers both key chunks
            dkv += 3 * C + 2 * C if rank == 0 else 3 * 2 * C
        elif i >= cp - rank - 1:  # lower: dk_ is the first key chunk
            dkv += 2 * C if (i == 0 and rank == cp - 1) else 3 * C
        elif i > 0:  # upper: both key chunks
            dkv += 3 * 2 * C
        else:
            dkv += 2 * 2 * C
    return dq, dkv


def test_forward_output_correction_is_heaviest_on_the_last_rank():
    # rank 7 runs only lower steps: (4 + 6 · 7) = 46 passes of c tokens over the output, BF16:
    # 2048 · 16 384 · 2 · 46 = 3 087 007 744 bytes, 0.9215 ms at 3350 GB/s
    per_rank = [_forward_correction_tokens(r, STEPS) for r in range(STEPS)]
    assert max(per_rank) == per_rank[-1] == 46 * C
    assert out_correction_bytes(C, O_W, STEPS, 2) == per_rank[-1] * O_W * 2 == 3_087_007_744
    t = ring_kernels(SHAPE, H100, PEAK, HBM, False).out_correction_s
    assert t == pytest.approx(3_087_007_744 / 3350e9)
    assert t == pytest.approx(0.9215e-3, rel=1e-4)


def test_backward_accumulation_is_heaviest_on_the_first_rank():
    # rank 0 runs only upper steps: dq 2 + 3 · 6 + 5 = 25 passes of c, dk/dv 4 + 6 · 6 + 5 = 45;
    # dq 2048 · 24 576 · 2 · 25 = 2 516 582 400 bytes, dk/dv 2048 · 40 960 · 2 · 45 = 7 549 747 200
    per_rank = [_backward_accumulation_tokens(r, STEPS) for r in range(STEPS)]
    assert per_rank[0] == (25 * C, 45 * C)
    bytes_per_rank = [2 * (dq * Q_W + dkv * KV_W) for dq, dkv in per_rank]
    assert max(bytes_per_rank) == bytes_per_rank[0]
    dq, dkv = accumulation_bytes(C, Q_W, KV_W, STEPS, 2)
    assert (dq, dkv) == (2_516_582_400, 7_549_747_200)
    k = ring_kernels(SHAPE, H100, PEAK, HBM, False)
    assert k.dq_accumulation_s == pytest.approx(2_516_582_400 / 3350e9)  # 0.751 ms
    assert k.dkv_accumulation_s == pytest.approx(7_549_747_200 / 3350e9)  # 2.254 ms
    # each backward transfer overlaps a step's kernel and that step's share of the dq accumulation
    assert k.backward_overlap_s == pytest.approx(k.backward_step_s + 2_516_582_400 / 3350e9 / 8)


def test_closed_forms_hold_for_every_ring_size():
    for cp in (2, 3, 4, 16, 64):
        fwd = max(_forward_correction_tokens(r, cp) for r in range(cp))
        assert out_correction_bytes(C, 1, cp, 1) == fwd
        dq, dkv = _backward_accumulation_tokens(0, cp)
        assert accumulation_bytes(C, 1, 1, cp, 1) == (dq, dkv)


def test_mla_k_and_v_are_packed_into_one_buffer_twice():
    # forward torch.cat((k.view(-1), v.view(-1))), backward copy_ into the K/V + dK/dV buffer: two copies
    # of 2c tokens · 40 960 elements · 2 bytes, read + write each: 4 · 335 544 320 = 1 342 177 280 bytes
    assert kv_packing_bytes(C, KV_W) == 4 * 2 * C * KV_W * 2 == 1_342_177_280
    assert ring_kernels(SHAPE, H100, PEAK, HBM, False).kv_packing_s == pytest.approx(1_342_177_280 / 3350e9)


def test_each_ring_step_runs_at_its_own_kernel_length():
    # every step covers 2c² = 8 388 608 query-key pairs, 2 · (192 + 128) FLOPs per pair and head:
    # 8 388 608 · 128 · 640 = 687 194 767 360 forward FLOPs
    step = 2 * C * C * 128 * 2 * 320
    assert step == 687_194_767_360
    # forward rate at d_qk + d_v = 320 on Hopper: 0.686 · (1.435 / 256) / (1.685 / 320) = 0.730274; a lower
    # step's kernel loops over c = 2048 keys (length term 2048 / 2816), the diagonal over 2c = 4096 (4096 / 4864)
    f_fwd = 0.686 * (1.435 / 256) / (1.685 / 320)
    assert f_fwd == pytest.approx(0.730274, rel=1e-5)
    k = ring_kernels(SHAPE, H100, PEAK, HBM, False)
    assert k.forward_step_s == pytest.approx(step / (PEAK * f_fwd * 2048 / 2816))  # 1.308 ms
    assert k.forward_first_s == pytest.approx(step / (PEAK * f_fwd * 4096 / 4864))  # 1.130 ms
    # backward: 2.5 × the FLOPs at 0.866 · 0.686 of the peak; an upper step's kernel loops over c queries
    f_bwd = 0.866 * 0.686
    assert k.backward_step_s == pytest.approx(2.5 * step / (PEAK * f_bwd * 2048 / 2816))  # 4.018 ms
    assert k.backward_first_s == pytest.approx(2.5 * step / (PEAK * f_bwd * 4096 / 4864))  # 3.470 ms
    assert k.kernels_s == pytest.approx(
        k.forward_first_s + 7 * k.forward_step_s + k.backward_first_s + 7 * k.backward_step_s
    )


def test_fp8_attention_accumulates_in_fp32():
    k16 = ring_kernels(SHAPE, H100, PEAK, HBM, False)
    k8 = ring_kernels(SHAPE, H100, PEAK, HBM, True)
    assert k8.out_correction_s == pytest.approx(2 * k16.out_correction_s)
    assert k8.dkv_accumulation_s == pytest.approx(2 * k16.dkv_accumulation_s)
    assert k8.kv_packing_s == pytest.approx(k16.kv_packing_s)


def test_all_to_all_reordering_copies_every_moved_tensor_three_times():
    # a2a+p2p [8, 4] at 128K: 4096 tokens per rank before the all-to-all; forward Q, K/V, output,
    # backward output gradient, dQ, dK/dV and the output again: 2 · 81 920 + 16 384 = 180 224 elements
    # per token, 6 passes, BF16: 6 · 4096 · 180 224 · 2 = 8 858 370 048 bytes, 2.644 ms at 3350 GB/s
    assert a2a_reorder_bytes(4096, Q_W, KV_W, O_W, True) == 8_858_370_048
    # the plain all-to-all's backward moves the output gradient only: 163 840 elements per token
    assert a2a_reorder_bytes(4096, Q_W, KV_W, O_W, False) == 6 * 4096 * 163_840 * 2


def _card(seq: int, cp: int, comm: str | None = None, sizes: list[int] | None = None):
    layout = {
        "tensor_model_parallel_size": 1,
        "pipeline_model_parallel_size": 8,
        "virtual_pipeline_model_parallel_size": 4,
        "context_parallel_size": cp,
        "expert_model_parallel_size": 32,
        "moe_token_dispatcher_type": "flex",
        "moe_flex_dispatcher_backend": "deepep",
    }
    if comm:
        layout["cp_comm_type"] = comm
    if sizes:
        layout["hierarchical_context_parallel_sizes"] = sizes
    s = load_scenario(
        {
            "model": "deepseek-ai/DeepSeek-V3",
            "system": {"gpu": "h100", "num_gpus": 256},
            "training": {"seq_length": seq, "micro_batch_size": 1, "global_batch_size": 1024 * 4096 // seq},
            "layout": layout,
        }
    )
    return step_context(s, load_constants(), None, None)


def test_the_card_rows_ring_is_the_dsv3_shape():
    ctx = _card(32768, 8)
    k = layer_ring_kernels(ctx, 5)
    assert k is not None and k.steps == 8
    ref = ring_kernels(SHAPE, H100, PEAK, HBM, False)
    assert k.total_s == pytest.approx(ref.total_s)
    # the ring's steps cover exactly the layer's causal core FLOPs: 8 · 687 194 767 360
    f = layer_flops(ctx.model, 5, ctx.tokens, ctx.seq_local, ctx.seq_length, 1, 8, 32, ctx.routing_factor)
    assert f.attention_core == pytest.approx(8 * 687_194_767_360)
    # 8 steps, 0.922 + 0.751 + 2.254 + 0.401 = 4.33 ms of bookkeeping on 41.9 ms of kernels
    assert k.bookkeeping_s == pytest.approx((3_087_007_744 + 2_516_582_400 + 7_549_747_200 + 1_342_177_280) / 3350e9)
    assert dense_core_s(ctx, 5, f.attention_core) == pytest.approx(k.total_s)
    assert layer_a2a_reorder_s(ctx, 5) == 0.0


def test_hierarchical_ring_runs_after_the_all_to_all():
    # a2a+p2p [8, 4] at 128K: 16 heads over 32 768 tokens, a ring of 4 with chunks of 16 384
    ctx = _card(131072, 32, "a2a+p2p", [8, 4])
    k = layer_ring_kernels(ctx, 5)
    assert k is not None and k.steps == 4
    shape = RingShape(16384, 16384, 4, Q_W / 8, KV_W / 8, O_W / 8, 320)
    assert k.total_s == pytest.approx(ring_kernels(shape, H100, PEAK, HBM, False).total_s)
    assert layer_a2a_reorder_s(ctx, 5) == pytest.approx(8_858_370_048 / 3350e9)


def test_without_a_ring_the_core_is_the_estimates():
    ctx = _card(4096, 1)
    assert layer_ring_kernels(ctx, 5) is None
    f = layer_flops(ctx.model, 5, ctx.tokens, ctx.seq_local, ctx.seq_length, 1, 1, 32, ctx.routing_factor)
    assert dense_core_s(ctx, 5, f.attention_core) == pytest.approx(3 * f.attention_core / attention_rate(ctx, "p2p"))
    # all_gather is not TE's ring: no ring kernels, no reordering
    ag = _card(32768, 8, "all_gather")
    assert layer_ring_kernels(ag, 5) is None and layer_a2a_reorder_s(ag, 5) == 0.0
