"""Gated DeltaNet under context parallelism, term by term, as megatron-core runs it.

Megatron-Core (``megatron/core/ssm/gated_delta_net/gdn.py`` at core_v0.19.0) all-to-alls the input
projection to a head split, so each rank runs the whole sequence for H_v / (TP·CP) value heads.
flash-linear-attention 0.4.2 (the release Megatron Bridge v0.6.0 locks) then runs three
chunk-sequential state passes (``chunk_gated_delta_rule_fwd_h`` in the forward, again in the
backward, and ``chunk_gated_delta_rule_bwd_dhu``) on a grid of ``(cdiv(V, BV), N·H)`` thread blocks.

Reference kernel timings: the FLA README's GB200 table (``chunk_gdn`` forward + backward, head dim 128,
FLA commit 0a484709). Qwen3-Next-80B-A3B: 16 key heads, 32 value heads, head dims 128, conv kernel 4.
"""

from __future__ import annotations

import math

import pytest

from moeplan import estimate_step, load_scenario
from moeplan.catalog.gpus import get_gpu, measured_gemm_fractions
from moeplan.model.activations import layer_activations
from moeplan.model.constants import load_constants
from moeplan.model.gdn import (
    GDN_S_PER_CHUNK_STEP,
    GDN_S_PER_TOKEN_HEAD,
    gdn_kernel_s,
    recurrence_blocks,
    recurrence_s,
)
from moeplan.model.time.compute import gated_deltanet_s
from moeplan.model.time.context import step_context

GB200, H100 = get_gpu("gb200"), get_gpu("h100")
#: the two kernel constants of moeplan.model.gdn, as its docstring derives them from the FLA table:
#: a = (4.738 − 3.616) ms / (786 432 − 524 288) token·heads; c = (3.616 ms − a · 524 288) / 256 steps
A_S = (4.738e-3 - 3.616e-3) / (786_432 - 524_288)
C_S = (3.616e-3 - A_S * 524_288) / 256

QWEN3_NEXT = "Qwen/Qwen3-Next-80B-A3B-Instruct"


def _card_scenario(seq: int, cp: int, gbs: int):
    """The long-context card's Qwen3-Next rows: 32 GB200, TP1 PP1 EP32, HybridEP, MBS 1."""
    return load_scenario(
        {
            "model": QWEN3_NEXT,
            "system": {"gpu": "gb200", "num_gpus": 32},
            "training": {"seq_length": seq, "micro_batch_size": 1, "global_batch_size": gbs, "precision": "bf16"},
            "layout": {
                "tensor_model_parallel_size": 1,
                "pipeline_model_parallel_size": 1,
                "context_parallel_size": cp,
                "expert_model_parallel_size": 32,
                "expert_tensor_parallel_size": 1,
                "moe_token_dispatcher_type": "flex",
                "moe_flex_dispatcher_backend": "hybridep",
            },
            "recipe_defaults": "mbridge-perf-benchmark",
        }
    )


def _ctx(s):
    return step_context(s, load_constants(), measured_gemm_fractions(s.gpu.id), None)


def _first_gdn_layer(s) -> int:
    return s.model.attention_kinds.index("linear")


def test_kernel_constants_are_the_two_fla_rows():
    """a ≈ 4.280 ns per token·head, c ≈ 5.359 µs per chunk step (FLA README, GB200), as the module uses."""
    assert math.isclose(GDN_S_PER_TOKEN_HEAD, A_S, rel_tol=1e-3)
    assert math.isclose(GDN_S_PER_CHUNK_STEP, C_S, rel_tol=1e-3)
    assert math.isclose(A_S, 4.280e-9, rel_tol=1e-3)
    assert math.isclose(C_S, 5.359e-6, rel_tol=1e-3)


@pytest.mark.parametrize(
    ("sequences", "heads", "d_v", "blocks"),
    [(1, 2, 128, 4), (1, 32, 128, 64), (1, 96, 128, 192), (4, 64, 128, 512), (1, 1, 256, 4), (1, 2.5, 128, 6)],
)
def test_state_kernels_launch_one_block_per_64_value_columns_sequence_and_head(sequences, heads, d_v, blocks):
    """grid = (cdiv(V, 64), N·H): Qwen3-Next on CP 16 holds 32 / 16 = 2 value heads → 2 · 1 · 2 = 4."""
    assert recurrence_blocks(sequences, heads, d_v) == blocks


def test_recurrence_is_one_wave_when_the_grid_is_smaller_than_the_gpu():
    """64K tokens = 1024 chunks; 4 blocks on 148 SMs: one wave, 1024 chunk steps."""
    assert recurrence_s(GB200, 1, 65536, 2, 128) == pytest.approx(1024 * C_S, rel=1e-3)


def test_recurrence_repeats_per_wave_when_the_grid_exceeds_the_sms():
    """B1·T8192·H96: 192 blocks over 148 SMs = 2 waves of 128 chunk steps; on H100 (132 SMs) 264
    blocks (H = 132) still take 2 waves and 265 take 3."""
    assert recurrence_s(GB200, 1, 8192, 96, 128) == pytest.approx(2 * 128 * C_S, rel=1e-3)
    assert recurrence_s(H100, 1, 8192, 132, 128) == pytest.approx(2 * 128 * C_S, rel=1e-3)
    assert recurrence_s(H100, 1, 8192, 132.5, 128) == pytest.approx(3 * 128 * C_S, rel=1e-3)


def test_kernel_predicts_the_held_out_fla_row_within_three_percent():
    """B4·T4096·H64 (5.964 ms, not used to fit): 512 blocks = 4 waves of 64 chunks →
    a · 1 048 576 + c · 256 = 4.488 + 1.372 = 5.860 ms (−1.7 %)."""
    hand = A_S * 4 * 4096 * 64 + C_S * 64 * 4
    assert gdn_kernel_s(GB200, 4, 4096, 64, 128, 128) == pytest.approx(hand, rel=1e-3)
    assert hand == pytest.approx(5.964e-3, rel=0.03)


def test_context_parallelism_leaves_the_chain_of_chunks_whole():
    """Qwen3-Next at 64K: CP 1 runs 32 heads (64 blocks), CP 16 runs 2 (4 blocks); both fit in one wave,
    so the 1024 chunk steps cost the same and only the token·head term shrinks 16×."""
    cp1, cp16 = gdn_kernel_s(GB200, 1, 65536, 32, 128, 128), gdn_kernel_s(GB200, 1, 65536, 2, 128, 128)
    assert cp1 - cp16 == pytest.approx(A_S * 65536 * (32 - 2), rel=1e-3)
    assert recurrence_s(GB200, 1, 65536, 32, 128) == recurrence_s(GB200, 1, 65536, 2, 128)


@pytest.mark.parametrize(
    ("seq", "cp", "gbs", "ms"),
    [
        # 8192 tokens, 32 heads: 4.280 ns · 262 144 + 5.359 µs · 128 = 1.122 + 0.686 ms
        (8192, 1, 512, 1.8080),
        # 32K on CP 4, 8 heads: 4.280 ns · 262 144 + 5.359 µs · 512 = 1.122 + 2.744 ms
        (32768, 4, 128, 3.8659),
        # 64K on CP 16, 2 heads: 4.280 ns · 131 072 + 5.359 µs · 1024 = 0.561 + 5.488 ms
        (65536, 16, 64, 6.0486),
    ],
)
def test_card_rows_delta_rule_time_per_layer(seq, cp, gbs, ms):
    """The delta rule of one GDN layer and microbatch on a rank, the card's three Qwen3-Next rows."""
    assert gated_deltanet_s(_ctx(_card_scenario(seq, cp, gbs))) * 1e3 == pytest.approx(ms, rel=1e-3)


def test_gdn_layer_saves_what_its_kernels_keep_for_backward():
    """Per token of one GDN layer (TP 1, bf16), Qwen3-Next: conv input 2·2048 + 4096 = 8192, L2-normed
    q/k 2·16·128 = 4096, the kernel's q, k (repeated to 32 heads) and v 32·(2·128 + 128) = 12 288, z 4096,
    core output 4096, out_proj input 4096 elements at 2 B; beta and g 2·32 fp32; A 32·64 at 2 B:
    2·36 864 + 256 + 4096 = 78 080 B."""
    s = _card_scenario(8192, 1, 512)
    ctx = _ctx(s)
    kept, rec = layer_activations(s.model, _first_gdn_layer(s), ctx.act, frozenset())
    gdn = {k: v for d in (kept, rec) for k, v in d.items() if k.startswith("gdn_")}
    assert gdn["gdn_kernel_qkv"] == 8192 * 12288 * 2
    assert gdn["gdn_chunk_matrix"] == 8192 * 32 * 64 * 2
    assert sum(gdn.values()) == pytest.approx(8192 * 78080)


def test_head_split_keeps_saved_bytes_per_rank_at_the_tokens_per_rank():
    """After the all-to-all a rank holds the whole sequence for H / CP heads: seq · H / CP = (seq / CP) · H
    token·heads, so the GDN tensors a rank saves follow tokens per rank (8192 at 8K CP 1 and 32K CP 4,
    4096 at 64K CP 16), not the sequence."""

    def gdn_bytes(seq, cp, gbs):
        s = _card_scenario(seq, cp, gbs)
        kept, rec = layer_activations(s.model, _first_gdn_layer(s), _ctx(s).act, frozenset())
        return sum(v for d in (kept, rec) for k, v in d.items() if k.startswith("gdn_"))

    assert gdn_bytes(32768, 4, 128) == pytest.approx(gdn_bytes(8192, 1, 512))
    assert gdn_bytes(65536, 16, 64) == pytest.approx(gdn_bytes(8192, 1, 512) / 2)


def test_estimate_states_the_recurrence_it_times():
    """The 64K CP 16 row's estimate names the chunks, the blocks against the SMs and the time."""
    notes = [a for a in estimate_step(_card_scenario(65536, 16, 64)).assumptions if "state recurrence" in a]
    assert len(notes) == 1
    assert "1024 chunks" in notes[0] and "4 thread blocks (148 SMs, 1 wave(s))" in notes[0]
    assert f"{1024 * C_S * 1e3:.2f} ms of the delta rule's {(A_S * 131072 + 1024 * C_S) * 1e3:.2f} ms" in notes[0]
    assert math.isclose(1024 * C_S * 1e3, 5.488, rel_tol=1e-3)
