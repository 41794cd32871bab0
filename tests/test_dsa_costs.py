"""DeepSeek Sparse Attention's core timed on the path megatron-core runs: the PyTorch fallback
(core_v0.16.0-0.18.x, or dsa_kernel_backend none) and the indexer's KL loss (fused or the PyTorch
reference). Expected values are derived by hand from the model configs and the pass counts read from
megatron-core's ``experimental_attention_variant/dsa.py`` (see ``moeplan.model.time.dsa_costs``)."""

from __future__ import annotations

import pytest

from moeplan import load_scenario, validate
from moeplan.catalog.gpus import measured_gemm_fractions
from moeplan.model.comm import link_bw
from moeplan.model.constants import load_constants
from moeplan.model.step import estimate_step
from moeplan.model.time.compute import layer_compute, sparse_core_rate
from moeplan.model.time.context import step_context
from moeplan.model.time.dsa_costs import (
    bf16_gemm_rate,
    dsa_core_s,
    dsa_path_notes,
    fallback_attention_s,
    fused_dsa_runs,
    fused_loss_s,
    loss_path,
    reference_indexer_s,
)


def _ctx(
    model: str, mcore: str, layout: dict | None = None, overrides: dict | None = None, training: dict | None = None
):
    s = load_scenario(
        {
            "model": model,
            "model_overrides": overrides or {},
            "versions": {"megatron_core": mcore},
            "system": {"gpu": "h100", "num_gpus": 64},
            "training": {"seq_length": 4096, "micro_batch_size": 1, "global_batch_size": 64, **(training or {})},
            "layout": {"pipeline_model_parallel_size": 8, "expert_model_parallel_size": 8, **(layout or {})},
        }
    )
    return step_context(s, load_constants(), measured_gemm_fractions(s.gpu.id if s.gpu else ""), None)


V32 = "deepseek-ai/DeepSeek-V3.2"
GLM5 = "zai-org/GLM-5"
CUDNN = {"dsa_kernel_backend": "cudnn"}


def test_fused_kernels_run_only_from_0_19_with_a_fused_backend():
    assert fused_dsa_runs(_ctx(V32, "0.19.0", CUDNN).s)
    assert fused_dsa_runs(_ctx(V32, "0.19.0", {"dsa_kernel_backend": "tilelang"}).s)
    assert not fused_dsa_runs(_ctx(V32, "0.19.0").s)  # default none: the PyTorch fallback
    assert not fused_dsa_runs(_ctx(V32, "0.18.0").s)


def test_loss_path_follows_backend_loss_kind_and_cp():
    """GLM-5 trains its indexer with the sparse loss (fused with a backend); the dense loss is fused
    by cuDNN without CP only (run_fused_dsa_attention declines CP), else the PyTorch reference;
    DeepSeek-V3.2 (coefficient 0) has no loss."""
    dense = {"dsa_indexer_use_sparse_loss": False}
    assert loss_path(_ctx(GLM5, "0.19.0", CUDNN).s, _ctx(GLM5, "0.19.0", CUDNN).model) == "fused"
    ctx = _ctx(GLM5, "0.19.0")
    assert loss_path(ctx.s, ctx.model) == "reference"
    ctx = _ctx(GLM5, "0.19.0", CUDNN, dense)
    assert loss_path(ctx.s, ctx.model) == "fused"
    ctx = _ctx(GLM5, "0.19.0", {**CUDNN, "context_parallel_size": 2, "cp_comm_type": "all_gather"}, dense)
    assert loss_path(ctx.s, ctx.model) == "reference"
    ctx = _ctx(GLM5, "0.19.0", {"dsa_kernel_backend": "tilelang"}, dense)
    assert loss_path(ctx.s, ctx.model) == "reference"
    ctx = _ctx(V32, "0.19.0", CUDNN)
    assert loss_path(ctx.s, ctx.model) == "none"


def test_pytorch_path_multiplies_at_the_bf16_rate_under_an_fp8_recipe():
    """The fallback's matmuls take FP32 / BF16 tensors: an FP8 recipe does not speed them up. H100:
    BF16 peak 989 TFLOP/s × the measured BF16 GEMM fraction, the rate a BF16 recipe's GEMMs get."""
    bf16 = _ctx(V32, "0.18.0")
    fp8 = _ctx(V32, "0.18.0", training={"precision": "fp8-blockwise"})
    assert bf16.s.training.precision == "bf16" and fp8.speeds.gemm_flops_per_s > bf16.speeds.gemm_flops_per_s
    assert bf16_gemm_rate(fp8) == bf16_gemm_rate(bf16) == bf16.speeds.gemm_flops_per_s


def test_fallback_attention_before_0_19_by_hand():
    """DeepSeek-V3.2 on core 0.18.0, 4096 tokens, TP 1: 4096 · 4096 · 128 = 2^31 query-key-head pairs
    over all keys; QK over 128 + 64 and PV over 128: 3 · 2 · 2^31 · 320 = 4,123,168,604,160 FLOPs at the
    GEMM rate; 18.5 FP32 passes: 18.5 · 4 · 2^31 = 158,913,789,952 bytes at HBM bandwidth."""
    ctx = _ctx(V32, "0.18.0")
    flops, hbm = 4_123_168_604_160, 158_913_789_952
    assert flops == 6 * 2**31 * 320 and hbm == 74 * 2**31
    want = flops / bf16_gemm_rate(ctx) + hbm / ctx.speeds.hbm_bytes_per_s
    assert fallback_attention_s(ctx) == pytest.approx(want, rel=1e-12)


def test_fallback_attention_from_0_19_is_absorbed_with_masked_softmax_by_hand():
    """core 0.19.0 without a backend: absorbed widths 512 + 64 for QK and 512 for PV (1088), the
    masked softmax's 40.5 passes; TP 2 halves the heads: 2^30 pairs. FLOPs 6 · 2^30 · 1088; bytes
    40.5 · 4 · 2^30 = 162 · 2^30."""
    ctx = _ctx(V32, "0.19.0", {"tensor_model_parallel_size": 2, "sequence_parallel": True})
    want = 6 * 2**30 * 1088 / bf16_gemm_rate(ctx) + 162 * 2**30 / ctx.speeds.hbm_bytes_per_s
    assert fallback_attention_s(ctx) == pytest.approx(want, rel=1e-12)


def test_reference_indexer_without_loss_by_hand():
    """DeepSeek-V3.2's indexer in PyTorch, whole on each TP rank: 4096 · 4096 · 64 = 2^30 pairs; FP32
    einsum over 128 dims 2 · 2^30 · 128 FLOPs; 6 passes of the per-head scores and 4 of the head sum:
    (6 · 2^30 + 4 · 2^24) · 4 bytes."""
    ctx = _ctx(V32, "0.18.0", {"tensor_model_parallel_size": 2, "sequence_parallel": True})
    flops, hbm = 2 * 2**30 * 128, (6 * 2**30 + 4 * 2**24) * 4
    want = flops / bf16_gemm_rate(ctx) + hbm / ctx.speeds.hbm_bytes_per_s
    assert reference_indexer_s(ctx, with_loss=False) == pytest.approx(want, rel=1e-12)


def test_reference_loss_recomputes_teacher_and_indexer_by_hand():
    """GLM-5's KL loss in PyTorch (core 0.18.0), TP 2, 4096 tokens: teacher pairs 4096 · 4096 · 64/2 =
    2^29 at 192 + 64 = 256 dims, twice: 2 · 2 · 2^29 · 256 FLOPs; indexer pairs 4096 · 4096 · 32 = 2^29,
    four more einsums over 128 dims: 4 · 2 · 2^29 · 128; passes 44 · 2^29 + 19.5 · 2^29 + 45 · 2^24 of
    4 bytes; the FP32 target 2^24 · 4 bytes all-reduced over TP 2 (ring: 2 · 1/2 of it)."""
    ctx = _ctx(GLM5, "0.18.0", {"tensor_model_parallel_size": 2, "sequence_parallel": True})
    sp = ctx.speeds
    flops = 2 * 2 * 2**29 * 256 + 4 * 2 * 2**29 * 128
    hbm = (44 * 2**29 + 19.5 * 2**29 + 45 * 2**24) * 4
    loss = flops / bf16_gemm_rate(ctx) + hbm / sp.hbm_bytes_per_s + 2**24 * 4 / link_bw(ctx.gpu, 2, ctx.c)
    want = reference_indexer_s(ctx, with_loss=False) + loss
    assert reference_indexer_s(ctx, with_loss=True) == pytest.approx(want, rel=1e-12)


def test_fused_sparse_loss_adds_its_target_passes_and_all_reduce_by_hand():
    """GLM-5 on cuDNN (core 0.19.0), TP 2: the sparse loss's FP32 [4096, top-k 2048] tensors,
    2^25 bytes, 40 passes through HBM, and the target's TP all-reduce 2 · 1/2 · 2^25 bytes."""
    ctx = _ctx(GLM5, "0.19.0", {**CUDNN, "tensor_model_parallel_size": 2, "sequence_parallel": True})
    row = 4096 * 2048 * 4
    assert row == 2**25
    want = 40 * row / ctx.speeds.hbm_bytes_per_s + row / link_bw(ctx.gpu, 2, ctx.c)
    assert fused_loss_s(ctx) == pytest.approx(want, rel=1e-12)


def test_fused_dense_loss_adds_the_lse_einsum_by_hand():
    """The dense loss on cuDNN without CP (TP 1): the LSE einsum over all keys, 2 · 4096 · 4096 · 64 ·
    (512 + 64) FLOPs, 8 passes of those FP32 scores and 16 of the [4096, 4096] target; no all-reduce."""
    ctx = _ctx(GLM5, "0.19.0", CUDNN, {"dsa_indexer_use_sparse_loss": False})
    pairs = 4096 * 4096 * 64
    want = 2 * pairs * 576 / bf16_gemm_rate(ctx)
    want += (8 * pairs * 4 + 16 * 4096 * 4096 * 4) / ctx.speeds.hbm_bytes_per_s
    assert fused_loss_s(ctx) == pytest.approx(want, rel=1e-12)


def test_core_time_sums_the_path_that_runs():
    """Fused without a loss: the sparse kernel and the fused indexer as before; fused with GLM-5's loss:
    plus its extra passes; the fallback: the PyTorch attention and indexer in their place; a layer that
    reuses an earlier top-k (GLM-5.2 style sharing, layer index 3) runs no indexer."""
    ctx = _ctx(V32, "0.19.0", CUDNN)
    assert dsa_core_s(ctx, 0, 1.0, 2.0) == 3.0
    glm = _ctx(GLM5, "0.19.0", CUDNN)
    assert dsa_core_s(glm, 0, 1.0, 2.0) == pytest.approx(3.0 + fused_loss_s(glm), rel=1e-12)
    old = _ctx(V32, "0.18.0")
    want = fallback_attention_s(old) + reference_indexer_s(old, with_loss=False)
    assert dsa_core_s(old, 0, 1.0, 2.0) == pytest.approx(want, rel=1e-12)
    share = _ctx(GLM5, "0.19.0", overrides={"dsa_indexer_topk_freq": 4, "dsa_indexer_skip_topk_offset": 3})
    assert not share.model.layer_has_indexer(3)
    assert dsa_core_s(share, 3, 1.0, 2.0) == pytest.approx(fallback_attention_s(share), rel=1e-12)


def test_layer_attention_time_uses_the_fused_kernels_or_the_fallback():
    """Layer 0's attention term at 4096 tokens: the fallback (core 0.19.0, no backend: FP32 scores over
    all keys) takes more than twice the fused kernels' time."""
    fused, fallback = _ctx(V32, "0.19.0", CUDNN), _ctx(V32, "0.19.0")
    assert layer_compute(fused, 0).attention_s > 0 and sparse_core_rate(fused, 0) > 0
    assert layer_compute(fallback, 0).attention_s > 2 * layer_compute(fused, 0).attention_s


def test_estimate_notes_say_which_path_was_timed():
    old = _ctx(V32, "0.18.0")
    assert "runs its PyTorch fallback, and that is what is timed" in dsa_path_notes(old)[0]
    assert "18.5 passes" in dsa_path_notes(old)[0]
    glm = _ctx(GLM5, "0.19.0", CUDNN)
    assert dsa_path_notes(glm) == [
        "the indexer's fused KL loss (dsa_indexer_loss_coeff 0.001, dsa_indexer_use_sparse_loss true) adds to "
        "the counted teacher and score-gradient work its FP32 target and log-probabilities over 2048 keys per "
        "query through HBM and the target's all-reduce over TP"
    ]
    notes = estimate_step(_ctx(GLM5, "0.18.0").s).assumptions
    assert any("FusedDSAIndexerLoss" in n for n in notes)
    warn = next(f for f in validate(old.s).findings if f.rule_id == "attention.dsa_dense_fallback")
    assert warn.message.endswith("dense attention time instead of sparse (the estimate times this fallback)")
