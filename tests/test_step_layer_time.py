"""Layers with the same timing key share one ``layer_time`` computation per step context, and the
shared terms are the ones each layer computes on its own."""

from __future__ import annotations

import dataclasses

import pytest

from moeplan import load_scenario
from moeplan.catalog.gpus import measured_gemm_fractions
from moeplan.model.constants import load_constants
from moeplan.model.time.context import step_context
from moeplan.model.time.layer import compute_layer_time, layer_time, layer_time_key

SCNS = {
    "dsv3": {
        "model": "deepseek-ai/DeepSeek-V3",
        "system": {"gpu": "h100", "num_gpus": 256},
        "training": {"seq_length": 8192, "micro_batch_size": 1, "global_batch_size": 512},
        "layout": {"pipeline_model_parallel_size": 4, "expert_model_parallel_size": 32, "context_parallel_size": 2},
    },
    "hybrid": {
        "model": "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16",
        "system": {"gpu": "h100", "num_gpus": 16},
        "training": {"seq_length": 8192, "micro_batch_size": 1, "global_batch_size": 64},
        "layout": {"pipeline_model_parallel_size": 4, "expert_model_parallel_size": 4},
    },
    "dsv4": {
        "model": "deepseek-ai/DeepSeek-V4-Flash",
        "system": {"gpu": "gb200", "num_gpus": 128},
        "training": {"seq_length": 4096, "micro_batch_size": 1, "global_batch_size": 256},
        "layout": {"pipeline_model_parallel_size": 4, "expert_model_parallel_size": 32},
    },
}


def _ctx(scn: dict, layout: dict | None = None):
    s = load_scenario({**scn, "layout": {**scn["layout"], **(layout or {})}})
    return step_context(s, load_constants(), measured_gemm_fractions(s.gpu.id if s.gpu else ""), None)


@pytest.mark.parametrize("name", list(SCNS))
def test_every_layer_gets_the_terms_it_computes_alone(name):
    ctx = _ctx(SCNS[name])
    for li in range(ctx.model.num_layers):
        assert layer_time(ctx, li) == compute_layer_time(ctx, li), li


def test_a_dense_and_a_moe_layer_get_different_terms():
    ctx = _ctx(SCNS["dsv3"])
    # DeepSeek-V3: layers 0-2 dense, 3-60 MoE (first_k_dense_replace = 3)
    assert layer_time_key(ctx, 0) == layer_time_key(ctx, 2) != layer_time_key(ctx, 3)
    assert layer_time(ctx, 0).parts["expert_gemm"] == 0.0
    assert layer_time(ctx, 3).parts["expert_gemm"] > 0.0


def test_csa_ratios_and_per_layer_cp_comm_type_are_in_the_key():
    ctx = _ctx(SCNS["dsv4"])
    # V4-Flash: ratio 4 at layer 2, 128 at layer 3, 4 again at layer 4
    assert layer_time_key(ctx, 2) == layer_time_key(ctx, 4) != layer_time_key(ctx, 3)
    assert layer_time(ctx, 2).parts["attention"] != layer_time(ctx, 3).parts["attention"]
    per_layer = ["p2p"] * 30 + ["a2a"] * 31
    cp_ctx = _ctx(SCNS["dsv3"], {"cp_comm_type": per_layer})
    assert layer_time_key(cp_ctx, 10) != layer_time_key(cp_ctx, 40)
    assert layer_time(cp_ctx, 10) == compute_layer_time(cp_ctx, 10)
    assert layer_time(cp_ctx, 40) == compute_layer_time(cp_ctx, 40)
    assert layer_time(cp_ctx, 10).parts["cp_comm_exposed"] != layer_time(cp_ctx, 40).parts["cp_comm_exposed"]


def test_another_context_gets_its_own_terms():
    ctx = _ctx(SCNS["dsv3"])
    one = layer_time(ctx, 5)
    # a derived context (twice the tokens per microbatch) starts with no shared terms
    two = dataclasses.replace(ctx, tokens=2 * ctx.tokens, mbs=2)
    assert layer_time(two, 5) == compute_layer_time(two, 5)
    assert layer_time(two, 5).parts["expert_gemm"] != one.parts["expert_gemm"]
