"""Transformer Engine's fused router (``moe_router_fusion``) in the step time, and the Moonlight-16B-A3B
verification run it was found on.

Launch counts by hand from megatron-core's ``topk_routing_with_score_function``
(``transformer/moe/moe_utils.py``, core_v0.18.0; the same path in the 0.19 tree Megatron Bridge
411c6b1 pins): the unfused sigmoid + expert-bias routing issues 14 kernels forward and 10 backward
(24), softmax after top-k 8 + 4 (12); the fused ``fused_topk_with_score_function`` one each way (2).
A MoE layer issues 150 launches (``moeplan.model.time.launch.MOE_LAYER_LAUNCHES``); the fitted launch
overhead is read from the packaged constants, every share below is derived by hand.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from moeplan import load_scenario
from moeplan.catalog.gpus import measured_gemm_fractions
from moeplan.model.constants import load_constants
from moeplan.model.step import estimate_step
from moeplan.model.time.context import step_context
from moeplan.model.time.launch import launch_overhead

CARD = Path(__file__).parent / "data" / "verification_cards" / "moonlight_16b_a3b.yaml"


def card_run() -> dict:
    return yaml.safe_load(CARD.read_text())["runs"][0]


def card_scenario(**layout):
    sc = card_run()["scenario"]
    sc = {**sc, "layout": {**sc["layout"], **layout}}
    return load_scenario(sc)


def context(s):
    return step_context(s, load_constants(), measured_gemm_fractions(s.gpu.id), None)


def test_fused_sigmoid_router_leaves_128_of_150_launches_in_a_moe_layer():
    # Moonlight routes with sigmoid scores and an expert bias: 24 unfused launches, 2 fused, 22 saved
    c = load_constants()
    ctx = context(card_scenario(moe_router_fusion=True))
    got = launch_overhead(ctx, True, 1)
    # no CUDA graph: everything issued is exposed, plus the dropless host sync
    assert got.exposed_s == pytest.approx(c.launch_overhead_s_per_layer * 128 / 150 + c.moe_sync_s_per_layer)
    assert got.hidden_s == 0.0


def test_unfused_router_keeps_the_whole_moe_layer_launch_count():
    c = load_constants()
    ctx = context(card_scenario(moe_router_fusion=False))
    got = launch_overhead(ctx, True, 1)
    assert got.exposed_s == pytest.approx(c.launch_overhead_s_per_layer + c.moe_sync_s_per_layer)


def test_fused_router_leaves_a_dense_layer_alone():
    # Moonlight's layer 0 is dense: a quarter of a MoE layer's launches, no router
    c = load_constants()
    ctx = context(card_scenario(moe_router_fusion=True))
    assert launch_overhead(ctx, False, 0).exposed_s == pytest.approx(c.launch_overhead_s_per_layer * 0.25)


def test_fused_softmax_router_saves_ten_launches():
    # Qwen3-30B-A3B has no router expert bias: softmax after top-k, 12 unfused launches, 2 fused
    c = load_constants()
    base = {
        "model": "Qwen/Qwen3-30B-A3B",
        "system": {"gpu": "h100", "num_gpus": 8},
        "training": {"seq_length": 4096, "micro_batch_size": 1, "global_batch_size": 64, "precision": "bf16"},
        "layout": {"expert_model_parallel_size": 8, "moe_router_fusion": True},
    }
    ctx = context(load_scenario(base))
    got = launch_overhead(ctx, True, 0)
    assert got.exposed_s == pytest.approx(c.launch_overhead_s_per_layer * 140 / 150 + c.moe_sync_s_per_layer)


def test_fused_router_shortens_the_moonlight_step_by_its_launches():
    # 26 MoE layers x 32 microbatches (1024 / (2 x DP 16)) x 22/150 of the fitted per-layer launch cost,
    # divided by the release factor (1.0 for the newest release, which the run's unstated container gets)
    c = load_constants()
    off = estimate_step(card_scenario(moe_router_fusion=False))
    on = estimate_step(card_scenario(moe_router_fusion=True))
    saved = 26 * 32 * 22 / 150 * c.launch_overhead_s_per_layer
    assert off.num_microbatches == 32
    assert off.breakdown_s["launch_overhead"] - on.breakdown_s["launch_overhead"] == pytest.approx(saved)
    assert off.step_time_s - on.step_time_s == pytest.approx(saved)


def test_estimate_states_the_fused_router_launch_count():
    on = estimate_step(card_scenario(moe_router_fusion=True))
    notes = [a for a in on.assumptions if "moe_router_fusion" in a]
    assert len(notes) == 1
    assert "2 kernels per MoE layer" in notes[0] and "the 24 of" in notes[0]
    assert "128 of a MoE layer's 150 launches" in notes[0]
    off = estimate_step(card_scenario(moe_router_fusion=False))
    assert not [a for a in off.assumptions if "moe_router_fusion" in a]


def test_verification_run_figures_agree_with_each_other():
    # tokens/s/GPU = GBS x seq / (GPUs x step) = 1024 x 4096 / (16 x 11.63635 s) = 22,528.0
    run = card_run()
    t, m = run["scenario"]["training"], run["measured"]
    tokens = t["global_batch_size"] * t["seq_length"] / run["scenario"]["system"]["num_gpus"]
    assert tokens / (m["step_time_ms"] / 1e3) == pytest.approx(m["tokens_per_s_per_gpu"], rel=1e-4)


def test_verification_run_model_flops_match_the_card():
    # moeplan's model FLOPs at the measured step reproduce the card's 386.59 TFLOP/s/GPU (Bridge's count)
    run = card_run()
    est = estimate_step(load_scenario(run["scenario"]))
    at_measured = est.model_tflops_per_gpu * est.step_time_s / (run["measured"]["step_time_ms"] / 1e3)
    assert at_measured == pytest.approx(run["measured"]["model_tflops_per_gpu"], rel=0.01)
