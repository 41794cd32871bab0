"""MLA's attention at its training shape (d_qk 192, d_v 128) runs at cuDNN's measured rate for that shape
relative to head dim 128 (moeplan.model.executed_flops.MLA_SHAPE_RELATIVE; NVIDIA cudnn-frontend v1.19.0,
benchmark/sdpa_benchmark_training/results, cuDNN 9.19.1, BF16 causal, 8,192 tokens)."""

from __future__ import annotations

import pytest

from moeplan import estimate_step, get_gpu, load_scenario
from moeplan.model.executed_flops import (
    ATTENTION_BWD_RATE,
    ATTENTION_FWD_FRACTION,
    attention_fraction,
    mla_shape_relative,
)


def test_hopper_mla_shape_takes_the_measured_ratios_by_hand():
    h100 = get_gpu("h100")
    # H200 (the same 989 TFLOP/s dense BF16 peak as H100): forward 643 vs 644 TFLOP/s, backward 442 counted
    # as 2·(3·192 + 2·128) = 1664 FLOPs per score → 442 · (2.5 · 640) / 1664 = 425 vs 541 at head dim 128
    assert mla_shape_relative(h100, 320, 128, False) == pytest.approx((643 / 644, 425 / 541))
    assert pytest.approx(425, abs=0.5) == 442 * 2.5 * 640 / 1664
    # long-sequence combination: 3 / (1/f_fwd + 2.5/f_bwd); the head-dim-128 forward is 0.686 of the peak
    f_fwd = ATTENTION_FWD_FRACTION["Hopper"] * 643 / 644
    f_bwd = ATTENTION_BWD_RATE * ATTENTION_FWD_FRACTION["Hopper"] * 425 / 541
    q = 1e9  # the length term q / (q + 768) → 1
    assert attention_fraction(h100, q, 320, False, 128) == pytest.approx(3 / (1 / f_fwd + 2.5 / f_bwd), rel=1e-6)
    # 0.686 · 989 = 678 forward; 0.594 · 0.786 · 989 = 462 backward → 3 / (1/678 + 2.5/462) = 436 TFLOP/s
    assert attention_fraction(h100, q, 320, False, 128) * 989 == pytest.approx(436, abs=1)


def test_other_heads_fp8_and_unmeasured_architectures_keep_the_head_dim_model():
    h100, a100 = get_gpu("h100"), get_gpu("a100")
    assert mla_shape_relative(h100, 256, 128, False) is None  # head dim 128
    assert mla_shape_relative(h100, 320, 160, False) is None  # a symmetric head of 160
    assert mla_shape_relative(h100, 320, 128, True) is None  # FP8 attention
    assert mla_shape_relative(a100, 320, 128, False) is None  # no Ampere figure
    assert attention_fraction(h100, 8192, 320, False, 160) == attention_fraction(h100, 8192, 320)
    # on Blackwell (GB200) the shape runs close to head dim 128: 1527/1598 forward, 1200/1311 backward
    assert mla_shape_relative(get_gpu("gb200"), 320, 128, False) == pytest.approx((1527 / 1598, 1200 / 1311))


def test_deepseek_v3_on_hopper_says_what_its_attention_rate_rests_on():
    s = load_scenario("tests/golden/scenarios/dsv3_h100_128k_hcp.yaml")
    notes = [a for a in estimate_step(s).assumptions if "MLA" in a]
    assert len(notes) == 2
    assert "forward × 1.00, backward × 0.79" in notes[0] and "cudnn-frontend v1.19.0" in notes[0]
    assert "deterministic" in notes[1] and "estimate" in notes[1]
