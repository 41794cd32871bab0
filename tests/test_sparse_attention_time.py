"""Kernel time of sparse attention cores: DeepSeek Sparse Attention's top-k core (DeepSeek-V3.2, GLM-5)
and DeepSeek-V4's window + compressed-key core, from published sparse MLA kernel figures.

Sources: FlashMLA README (sparse prefill forward: 640 TFLOP/s on H800, 1450 TFLOP/s on B200, counting
2·(d_qk + d_v) FLOPs per selected key and head); FlashAttention-4's SM100 sparse MLA backward at
DeepSeek-V4's shape (820 TFLOP/s, Dao-AILab/flash-attention pull 2621); megatron-core
``dsa_cudnn_kernels.py::_flash_mla_head_padding`` (dev, Aug 2026); Megatron Bridge v0.6.0
``deepseek_v4_bridge.py`` (fused sparse kernels at compute capability 10+).
"""

from __future__ import annotations

import pytest

from moeplan import load_scenario
from moeplan.catalog.gpus import get_gpu, measured_gemm_fractions
from moeplan.catalog.models import get_model
from moeplan.model.constants import load_constants
from moeplan.model.executed_flops import (
    SPARSE_MLA_BWD_FRACTION,
    SPARSE_MLA_FWD_FRACTION,
    attention_fraction,
    layer_flops,
    sparse_mla_fraction,
)
from moeplan.model.time.compute import sparse_core_rate
from moeplan.model.time.context import attention_rate, step_context
from moeplan.model.time.dsa_costs import fused_dsa_runs
from moeplan.model.time.notes import dsa_notes, dsv4_kernel_notes
from moeplan.structure.attention_kernels import sparse_mla_padded_heads


def _ctx(model: str, gpu: str, layout: dict, seq: int = 4096):
    s = load_scenario(
        {
            "model": model,
            "system": {"gpu": gpu, "num_gpus": 128},
            "training": {"seq_length": seq, "micro_batch_size": 1, "global_batch_size": 256},
            "layout": layout,
        }
    )
    return step_context(s, load_constants(), measured_gemm_fractions(s.gpu.id), None)


V4 = "deepseek-ai/DeepSeek-V4-Flash"
V32 = "deepseek-ai/DeepSeek-V3.2"
V4_LAYOUT = {"pipeline_model_parallel_size": 4, "expert_model_parallel_size": 32}


def test_blackwell_sparse_kernel_fractions_give_back_the_published_b200_figures():
    """B200 (BF16 peak 2250 TFLOP/s): forward 1450 TFLOP/s (FlashMLA), backward 820 TFLOP/s
    (FlashAttention-4 sparse MLA) within 1 %; fwd + bwd 3 / (1/0.6444 + 2.5/0.3644) = 3 / 8.412 =
    0.3566 within 0.5 %, the same share of the peak on every Blackwell GPU (GB200, GB300)."""
    b200 = get_gpu("b200")
    assert SPARSE_MLA_FWD_FRACTION["Blackwell"] * b200.peak_dense_tflops["bf16"] == pytest.approx(1450, rel=0.01)
    assert SPARSE_MLA_BWD_FRACTION["Blackwell"] * b200.peak_dense_tflops["bf16"] == pytest.approx(820, rel=0.01)
    for gpu in ("b200", "gb200", "gb300"):
        assert sparse_mla_fraction(get_gpu(gpu), 4096, 1088) == pytest.approx(0.3566, rel=0.005), gpu


def test_hopper_sparse_backward_keeps_the_flash_backward_ratio():
    """No published Hopper sparse backward: 0.866 × the forward's 640/989 = 0.5604; fwd + bwd
    3 / (1/0.6471 + 2.5/0.5604) = 3 / 6.0064 = 0.4995 (within 0.5 %)."""
    assert sparse_mla_fraction(get_gpu("h100"), 4096, 1088) == pytest.approx(0.4995, rel=0.005)


@pytest.mark.parametrize(
    ("heads", "family", "padded"),
    [
        (128, "Blackwell", 128),
        (64, "Blackwell", 64),
        (32, "Blackwell", 64),
        (16, "Blackwell", 64),
        (256, "Blackwell", 256),
        (96, "Blackwell", None),
        (128, "Hopper", 128),
        (16, "Hopper", 64),
        (48, "Hopper", None),
        (64, "Ampere", None),
    ],
)
def test_flashmla_pads_query_heads_as_megatron_core_does(heads, family, padded):
    """``_flash_mla_head_padding``: SM100 takes 64 or 128 heads (a divisor padded up), multiples of
    128; SM90 multiples of 64 (a divisor padded to 64); no kernel before Hopper."""
    assert sparse_mla_padded_heads(heads, family) == padded


def test_dsv4_core_splits_window_and_compressed_keys_from_the_indexer_scores_by_hand():
    """V4-Flash layer 2 (ratio 4) at s = 4096, 4096 tokens, TP 1: keys per query = window 128 + the
    indexer's top-512 averaged causally 512·(1 − 4·512/(2·4096)) = 384 → 512; sparse core
    2·64 heads·512 keys·(2·512) = 67,108,864 FLOPs/token; indexer scores 2·64·128·(4096/4/2) =
    8,388,608 FLOPs/token (the only part left at the dense attention rate)."""
    m = get_model(V4)
    f = layer_flops(m, 2, 4096, 4096, 4096, 1, 1, 1, 1.0)
    assert f.sparse_core == pytest.approx(4096 * 67_108_864, rel=1e-9)
    assert f.attention_core == pytest.approx(4096 * 8_388_608, rel=1e-9)
    # a ratio-128 layer has no indexer: its whole core is the sparse kernel's
    assert layer_flops(m, 3, 4096, 4096, 4096, 1, 1, 1, 1.0).attention_core == 0.0


def test_dsv4_core_on_blackwell_runs_at_the_sparse_kernel_rate():
    """GB200 (BF16 peak 2500), 64 heads per rank (no padding): 2500e12 × 0.3566 = 891.6 TFLOP/s."""
    ctx = _ctx(V4, "gb200", V4_LAYOUT)
    assert sparse_core_rate(ctx, 2) == pytest.approx(2500e12 * 0.3566, rel=0.005)


def test_dsv4_core_off_blackwell_keeps_the_dense_attention_rate():
    """Megatron Bridge turns DeepSeek-V4's fused kernels on at compute capability 10+ only: on H100
    the core is timed as before, at the dense attention rate, and the note says so."""
    ctx = _ctx(V4, "h100", V4_LAYOUT)
    assert sparse_core_rate(ctx, 2) == attention_rate(ctx, "p2p")
    notes = dsv4_kernel_notes(ctx)
    assert len(notes) == 2 and "at the dense attention rate" in notes[0] and "hyper-connections" in notes[1]
    fused = dsv4_kernel_notes(_ctx(V4, "gb200", V4_LAYOUT))
    assert "1450 TFLOP/s on B200" in fused[0] and "820 TFLOP/s" in fused[0]


def test_padded_heads_multiply_the_dsa_core_time_and_are_noted():
    """DeepSeek-V3.2 at TP 8 on H100: 128 / 8 = 16 heads per rank, padded to 64, so the sparse core
    takes 64 / 16 = 4× the time it takes at its own heads (rate × 16/64); the notes say so."""
    layout = {
        "tensor_model_parallel_size": 8,
        "sequence_parallel": True,
        "expert_model_parallel_size": 16,
        "dsa_kernel_backend": "tilelang",  # the fused path (the default "none" runs the PyTorch fallback)
    }
    ctx = _ctx(V32, "h100", layout)
    f = sparse_mla_fraction(ctx.gpu, ctx.seq_local, 2 * 512 + 64)
    assert sparse_core_rate(ctx, 5) == pytest.approx(989e12 * f * 16 / 64, rel=1e-9)
    assert any("pads the 16 query heads per rank to 64" in n for n in dsa_notes(ctx))


def test_dsa_core_without_a_sparse_kernel_takes_the_dense_model_at_absorbed_widths():
    """A100 (Ampere): FlashMLA's sparse kernel needs SM90+, so the selected backend's hooks decline and
    megatron-core runs its PyTorch fallback, which the notes name; the sparse core's own rate on an
    architecture without a sparse-kernel figure is the dense attention model at the absorbed widths
    d_qk + d_v = 2·512 + 64 = 1088."""
    layout = {"tensor_model_parallel_size": 2, "expert_model_parallel_size": 16, "dsa_kernel_backend": "tilelang"}
    ctx = _ctx(V32, "a100", layout)
    peak = ctx.speeds.attention_flops_per_s
    assert sparse_core_rate(ctx, 5) == pytest.approx(peak * attention_fraction(ctx.gpu, ctx.seq_local, 1088))
    assert not fused_dsa_runs(ctx.s)
    assert any("runs its PyTorch fallback" in n for n in dsa_notes(ctx))
    hopper = _ctx(V32, "h100", layout)
    assert fused_dsa_runs(hopper.s) and any("H800" in n or "Hopper" in n for n in dsa_notes(hopper))
