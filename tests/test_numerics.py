"""The numeric policy (``moeplan.structure.numerics``): bytes per element, routed-token factor and shard
degrees, decided once and read alike by memory, time and rules. Expected values derived by hand."""

from __future__ import annotations

import pytest

from moeplan import estimate_memory, estimate_step, load_scenario
from moeplan.structure.numerics import (
    fp8_weight_cache_bytes,
    grad_bytes,
    optimizer_numerics,
    param_gather_bytes,
    routing,
)

QWEN = {
    "model": "Qwen/Qwen3-30B-A3B",
    "system": {"gpu": "h100", "num_gpus": 16},
    "training": {"seq_length": 4096, "micro_batch_size": 1, "global_batch_size": 256, "precision": "bf16"},
    "layout": {"expert_model_parallel_size": 8},
}


def _s(**layout):
    return load_scenario({**QWEN, "layout": {**QWEN["layout"], **layout}})


def test_routing_factor_by_policy():
    assert routing(_s()).factor == 1.2 and routing(_s()).source == "imbalance"
    assert routing(_s(moe_router_force_load_balancing=True)).factor == 1.0
    # a capacity factor caps the imbalance (drop); with padding every expert gets exactly its capacity
    assert routing(_s(moe_expert_capacity_factor=1.0)).factor == 1.0
    assert routing(_s(moe_expert_capacity_factor=1.5)).factor == 1.2
    pad = routing(_s(moe_expert_capacity_factor=1.5, moe_pad_expert_input_to_capacity=True))
    assert (pad.factor, pad.source, pad.static_shapes) == (1.5, "drop_and_pad", True)
    stated = load_scenario({**QWEN, "assumptions": {"routing_imbalance_factor": 1.5}})
    assert routing(stated).factor == 1.5 and routing(stated).imbalance_stated


def test_grad_bytes_and_optimizer_state():
    assert grad_bytes(_s()) == 4.0  # unset: fp32 main grads
    assert grad_bytes(_s(grad_reduce_in_fp32=False)) == 2.0
    # precision-aware optimizer with bf16 main grads: bf16 even when grad_reduce_in_fp32 is unset
    assert grad_bytes(_s(use_precision_aware_optimizer=True, main_grads_dtype="bf16")) == 2.0
    pao = {"use_precision_aware_optimizer": True, "exp_avg_dtype": "bf16", "exp_avg_sq_dtype": "bf16"}
    # Megatron-LM ('delayed' optimizer fp8_recipe): TE keeps the master as the bf16 param + a 16-bit
    # remainder = 2 B; bf16 moments 2 + 2
    core = optimizer_numerics(
        load_scenario({**QWEN, "framework": "megatron-core", "layout": {**QWEN["layout"], **pao}})
    )
    assert (core.master_bytes, core.state_bytes) == (2.0, 6.0)
    # Megatron Bridge ('tensorwise' copied into the optimizer config): megatron-core's fp32 master, 4 B
    num = optimizer_numerics(_s(**pao))
    assert (num.master_bytes, num.state_bytes) == (4.0, 8.0)
    assert optimizer_numerics(_s()).state_bytes == 12.0  # fp32 master and moments


def test_shard_degrees():
    # 16 GPUs, EP 8: DP 16, EDP 2; the distributed optimizer (Bridge default) shards over both
    num = optimizer_numerics(_s())
    assert (num.dense_shard, num.expert_shard) == (16, 2)
    two = optimizer_numerics(_s(num_distributed_optimizer_instances=2))
    assert (two.dense_shard, two.expert_shard) == (8, 1)
    plain = optimizer_numerics(_s(use_distributed_optimizer=False))
    assert (plain.dense_shard, plain.expert_shard, plain.distributed) == (1, 1, False)


def test_fp8_bytes():
    assert fp8_weight_cache_bytes("bf16", False) == 0.0
    assert fp8_weight_cache_bytes("fp8-blockwise", True) == 1.0
    assert fp8_weight_cache_bytes("mxfp8", False) == pytest.approx(2 * 33 / 32)
    assert fp8_weight_cache_bytes("nvfp4", False) == pytest.approx(2 * (0.5 + 1 / 16))
    assert param_gather_bytes("mxfp8", True) == pytest.approx(33 / 32)
    assert param_gather_bytes("bf16", True) == 2.0


def test_capacity_factor_moves_memory_and_time_together():
    """Regression: with a capacity factor the memory model dropped the routing imbalance while the
    step-time model still charged it (expert time unchanged). Both now read one routing factor: a
    capacity factor of 1.0 gives exactly the forced-balance expert GEMM time and activations."""
    free, capped, forced = _s(), _s(moe_expert_capacity_factor=1.0), _s(moe_router_force_load_balancing=True)
    t = {k: estimate_step(v).breakdown_s["expert_gemm"] for k, v in (("free", free), ("cap", capped), ("bal", forced))}
    assert t["cap"] == pytest.approx(t["bal"], rel=1e-12)
    assert t["free"] > t["cap"] * 1.1  # 1.2× the routed tokens, less the grouped-GEMM occupancy gain
    m = {k: estimate_memory(v).peak_stage.activations_bytes for k, v in (("cap", capped), ("bal", forced))}
    assert m["cap"] == m["bal"]
