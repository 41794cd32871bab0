"""Optimizer CPU offload without a stated fraction resolves as each framework runs it: Megatron-LM's
training scripts default ``--optimizer-offload-fraction`` to 1.0 (megatron/training/arguments.py),
while ``OptimizerConfig`` (what Megatron Bridge passes through) defaults it to 0.0, which offloads
nothing and which the check warns about."""

from __future__ import annotations

import pytest

from moeplan import estimate_memory, load_scenario, validate


def _scenario(framework: str, **layout):
    return load_scenario(
        {
            "model": "Qwen/Qwen3-30B-A3B",
            "framework": framework,
            "system": {"gpu": "h100", "num_gpus": 16},
            "training": {"seq_length": 8192, "micro_batch_size": 1, "global_batch_size": 64},
            "layout": {
                "expert_model_parallel_size": 8,
                "use_distributed_optimizer": True,
                "use_precision_aware_optimizer": True,
                **layout,
            },
        }
    )


def test_megatron_core_offloads_everything_when_the_fraction_is_unset():
    s = _scenario("megatron-core", optimizer_cpu_offload=True)
    assert s.layout.optimizer_offload_fraction == 1.0
    assert [r.key for r in s.resolutions if r.key == "optimizer_offload_fraction"] == ["optimizer_offload_fraction"]
    assert "offload.optimizer_fraction" not in {f.rule_id for f in validate(s).findings}
    # every byte of optimizer state is on the host: none of it on the GPU
    assert all(st.optimizer_bytes == 0 for st in estimate_memory(s).stages)


def test_megatron_bridge_keeps_optimizer_config_default_and_warns():
    s = _scenario("megatron-bridge", optimizer_cpu_offload=True)
    assert s.layout.optimizer_offload_fraction is None
    assert "offload.optimizer_fraction" in {f.rule_id for f in validate(s).findings}
    assert all(st.optimizer_bytes > 0 for st in estimate_memory(s).stages)


@pytest.mark.parametrize("framework", ["megatron-core", "megatron-bridge"])
def test_a_stated_fraction_is_kept(framework):
    s = _scenario(framework, optimizer_cpu_offload=True, optimizer_offload_fraction=0.5)
    assert s.layout.optimizer_offload_fraction == 0.5
    assert not [r for r in s.resolutions if r.key == "optimizer_offload_fraction"]
