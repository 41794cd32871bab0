"""Which kernel Transformer Engine trains an attention head with (moeplan.model.executed_flops.
te_attention_kernel): FlashAttention-2 for BF16 heads wider than 128 (other than MLA's 192 / 128) on
Blackwell before Transformer Engine 2.18 (``nvte_get_fused_attn_backend`` @v2.16 trains head dims up to
256 with cuDNN on sm90 only; TE commit 3bc3d551, first in v2.18, adds sm100), cuDNN otherwise."""

from __future__ import annotations

import pytest
from packaging.version import Version

from moeplan import estimate_step, get_gpu, load_scenario
from moeplan.model.executed_flops import attention_fraction, te_attention_kernel

GB200, H100, GB300 = get_gpu("gb200"), get_gpu("h100"), get_gpu("gb300")


@pytest.mark.parametrize(
    ("gpu", "head_dims", "v_dims", "fp8", "te", "kernel"),
    [
        (GB200, 512, 256, False, Version("2.16"), "flash2"),  # Qwen3-Next's full-attention head, 26.06
        (GB200, 512, 256, False, None, "flash2"),  # unstated: every known container ships < 2.18
        (GB300, 512, 256, False, Version("2.14"), "flash2"),  # Blackwell Ultra (sm103) too
        (GB200, 512, 256, False, Version("2.18"), "cudnn"),  # cuDNN's sm100 backward for d = 256
        (GB200, 384, 192, False, Version("2.18"), "flash2"),  # 2.18's cuDNN path is d_qk = d_v = 256 only
        (GB200, 448, 256, False, Version("2.18"), "flash2"),  # (192, 256): not the 256 path either
        (GB200, 512, 256, True, Version("2.16"), "cudnn"),  # FP8 attention takes TE's FP8 backend
        (GB200, 256, 128, False, Version("2.16"), "cudnn"),  # head dim 128
        (GB200, 320, 128, False, Version("2.16"), "cudnn"),  # MLA's 192 / 128 (cuDNN 9.11+ on sm100)
        (GB200, 1024, 512, False, Version("2.16"), "cudnn"),  # above 256 FlashAttention-2 refuses too
        (H100, 512, 256, False, Version("2.16"), "cudnn"),  # Hopper trains d = 256 with cuDNN 9.5+
    ],
)
def test_te_attention_kernel(gpu, head_dims, v_dims, fp8, te, kernel):
    assert te_attention_kernel(gpu, head_dims, v_dims, fp8, te) == kernel


def test_flash2_rate_by_hand():
    # 361.6 TFLOP/s forward at 8K on B200 (peak 2250) → 0.1607 of the peak at 8K, 0.1758 at long sequence;
    # backward 0.880 of it: 3 / (1/0.1758 + 2.5/(0.1758 · 0.880)) = 3 / (5.688 + 16.16) = 0.1373 at long sequence
    f = 361.6 / 2250 / (8192 / 8960)
    expect = 3 / (1 / f + 2.5 / (f * 333.95 / 379.44))
    assert attention_fraction(GB200, 1e9, 512, False, 256, "flash2") == pytest.approx(expect, rel=1e-6)
    assert expect == pytest.approx(0.1373, abs=5e-4)
    # against cuDNN's model for the same head: under a third
    assert expect < attention_fraction(GB200, 1e9, 512, False, 256) / 3


def test_qwen3_next_on_gb200_says_its_attention_runs_flash2_and_te_2_18_times_it_with_cudnn():
    data = {
        "model": "Qwen/Qwen3-Next-80B-A3B-Instruct",
        "system": {"gpu": "gb200", "num_gpus": 32},
        "training": {"seq_length": 65536, "micro_batch_size": 1, "global_batch_size": 64, "precision": "bf16"},
        "layout": {"context_parallel_size": 16, "expert_model_parallel_size": 32},
        "versions": {"transformer_engine": "2.16"},
    }
    old = estimate_step(load_scenario(data))
    notes = [a for a in old.assumptions if "FlashAttention-2" in a]
    assert len(notes) == 1 and "Transformer Engine 2.16" in notes[0] and "256/256" in notes[0]
    data["versions"]["transformer_engine"] = "2.18"
    new = estimate_step(load_scenario(data))
    assert not [a for a in new.assumptions if "FlashAttention-2" in a]
    # the attention term also holds the Gated DeltaNet layers, which no backend choice moves
    assert new.breakdown_s["attention"] < 0.7 * old.breakdown_s["attention"]


def _qwen3_next(**versions) -> dict:
    return {
        "model": "Qwen/Qwen3-Next-80B-A3B-Instruct",
        "system": {"gpu": "gb200", "num_gpus": 32},
        "training": {"seq_length": 8192, "micro_batch_size": 1, "global_batch_size": 64, "precision": "bf16"},
        "layout": {"expert_model_parallel_size": 32},
        "versions": versions,
    }


def test_an_unknown_transformer_engine_is_said_in_every_language():
    notes = [a for a in estimate_step(load_scenario(_qwen3_next())).assumptions if "FlashAttention-2" in a]
    assert len(notes) == 1 and "version is not known" in notes[0]
    zh = notes[0].text("zh")
    assert "版本未知" in zh and "not known" not in zh and "newest" not in zh


def test_a_dsa_model_gets_no_flash2_note():
    # GLM-5 (256-wide MLA heads on DeepSeek Sparse Attention) times its attention on the DSA paths
    data = {
        "model": "zai-org/GLM-5",
        "system": {"gpu": "gb200", "num_gpus": 512},
        "training": {"seq_length": 4096, "global_batch_size": 1024, "precision": "bf16"},
        "layout": {"pipeline_model_parallel_size": 8, "expert_model_parallel_size": 64},
    }
    assert not [a for a in estimate_step(load_scenario(data)).assumptions if "FlashAttention-2" in a]


def test_the_plan_text_says_how_its_first_layouts_attention_is_timed(tmp_path):
    from typer.testing import CliRunner

    from moeplan.cli.app import app

    args = ["plan", "--model", "Qwen/Qwen3-Next-80B-A3B-Instruct", "--gpu", "gb200", "--num-gpus", "32"]
    args += ["--seq-length", "8192", "--precision", "bf16", "--gbs", "64", "--set", "versions.transformer_engine=2.17"]
    res = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    assert "FlashAttention-2" in res.output and "Transformer Engine 2.17" in res.output
