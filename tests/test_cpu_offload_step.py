"""The offloaded optimizer step (``optimizer_cpu_offload``) as megatron-core's HybridDeviceOptimizer
runs it (hybrid_optimizer.py at core_v0.16.0 to core_v0.19.0): gradients to the host, fused AdamW on
the host at its share of host DRAM bandwidth, fp32 masters back; each term by hand."""

from __future__ import annotations

import pytest

from moeplan import load_scenario
from moeplan.catalog.host_memory import host_memory
from moeplan.model.constants import load_constants
from moeplan.model.step import estimate_step
from moeplan.model.time.context import step_context
from moeplan.model.time.cpu_offload import offloaded_step
from moeplan.model.time.optimizer_step import optimizer_step_s
from moeplan.structure.numerics import optimizer_numerics
from moeplan.structure.placement import stage_params

OFFLOAD = {
    "expert_model_parallel_size": 8,
    "use_distributed_optimizer": True,
    "use_precision_aware_optimizer": True,
    "optimizer_cpu_offload": True,
    "optimizer_offload_fraction": 1.0,
}


def _scenario(gpu: str = "h100", num_gpus: int = 16, **layout):
    return load_scenario(
        {
            "model": "Qwen/Qwen3-30B-A3B",
            "system": {"gpu": gpu, "num_gpus": num_gpus},
            "training": {"seq_length": 4096, "micro_batch_size": 1, "global_batch_size": 64, "precision": "bf16"},
            "layout": {**OFFLOAD, **layout},
        }
    )


def _ctx(s):
    return step_context(s, load_constants(), None, None)


def test_dgx_h100_host_bandwidth_follows_from_its_dimms():
    # 2 sockets x 8 DDR5 channels; 32 DIMMs = 2 per channel, so DDR5-4800 runs at 4400 MT/s:
    # 2 x 8 x 4400e6 x 8 B = 563.2e9 B/s, shared by 8 GPUs = 70.4e9 B/s each
    h = host_memory("h100")
    assert h is not None and h.gpus_per_host == 8
    assert h.dram_bytes_per_s == pytest.approx(2 * 8 * 4400e6 * 8)
    assert h.dram_bytes_per_s_per_gpu == pytest.approx(70.4e9)
    # a Grace superchip: 512 GB/s LPDDR5X for its 2 GPUs = 256e9 B/s each
    assert host_memory("gb200").dram_bytes_per_s_per_gpu == pytest.approx(256e9)
    assert host_memory("b200") is None  # an HGX host's CPU is the integrator's choice


def test_gradients_cross_the_host_link_as_fp32():
    # 1e9 parameters x 4 B (the fp32 pinned buffer; a bf16 gradient is cast on the GPU) / 64e9 B/s
    # (H100 PCIe Gen5 x16, one direction) = 0.0625 s
    part = offloaded_step(_ctx(_scenario()), 1e9)
    assert part.d2h_s == pytest.approx(4e9 / 64e9)


def test_parameters_come_back_as_fp32_over_the_host_link():
    # the fp32 host master is copied and cast to bf16 on the GPU: 1e9 x 4 B / 64e9 B/s = 0.0625 s
    part = offloaded_step(_ctx(_scenario()), 1e9)
    assert part.h2d_s == pytest.approx(4e9 / 64e9)


def test_host_adam_streams_28_bytes_per_parameter_at_the_gpus_share_of_host_dram():
    # fused AdamW reads fp32 p, g, m, v (16 B) and writes p, m, v (12 B): 1e9 x 28 B / 70.4e9 B/s = 0.3977 s
    part = offloaded_step(_ctx(_scenario()), 1e9)
    assert part.cpu_adam_s == pytest.approx(28e9 / 70.4e9)
    # 4 GPUs of a DGX: the host's 563.2e9 B/s over the 4 that step = 140.8e9 B/s each
    four = offloaded_step(_ctx(_scenario(num_gpus=4, expert_model_parallel_size=4)), 1e9)
    assert four.cpu_adam_s == pytest.approx(28e9 / 140.8e9)
    # GB200: 28e9 / 256e9 = 0.109 s; its NVLink-C2C host link 450e9 B/s: 4e9 / 450e9 = 0.0089 s each way
    gb = offloaded_step(_ctx(_scenario("gb200")), 1e9)
    assert gb.cpu_adam_s == pytest.approx(28e9 / 256e9)
    assert gb.d2h_s == pytest.approx(4e9 / 450e9)


def test_without_overlap_the_transfers_and_host_step_add_up():
    # megatron-core's default (overlap_cpu_optimizer_d2h_h2d False): 0.0625 + 0.3977 + 0.0625 = 0.5227 s
    part = offloaded_step(_ctx(_scenario()), 1e9)
    assert not part.overlapped
    assert part.total_s == pytest.approx(4e9 / 64e9 + 28e9 / 70.4e9 + 4e9 / 64e9)


def test_overlap_hides_the_gradient_copies_but_not_the_pageable_copy_back():
    # per-tensor optimizers: the D2H runs ahead; the host thread runs step + H2D: max(0.0625, 0.3977 + 0.0625)
    part = offloaded_step(_ctx(_scenario(overlap_cpu_optimizer_d2h_h2d=True)), 1e9)
    assert part.overlapped
    assert part.total_s == pytest.approx(28e9 / 70.4e9 + 4e9 / 64e9)


def test_the_step_charges_the_offloaded_shard_of_the_critical_stage():
    s = _scenario()
    (st,) = stage_params(s)
    num = optimizer_numerics(s)
    shard = st.params.dense / num.dense_shard + st.params.expert / num.expert_shard
    expected = shard * (4 / 64e9 + 28 / 70.4e9 + 4 / 64e9)
    assert optimizer_step_s(_ctx(s), st.params) == pytest.approx(expected)
    e = estimate_step(s)
    assert e.breakdown_s["optimizer"] == pytest.approx(expected / e.release_factor)


def test_gpu_and_host_halves_of_the_state_step_at_the_same_time():
    # fraction 0.5: the GPU optimizer's kernels are launched before the host steps, so the longer one counts
    s = _scenario(optimizer_offload_fraction=0.5)
    (st,) = stage_params(s)
    num = optimizer_numerics(s)
    shard = st.params.dense / num.dense_shard + st.params.expert / num.expert_shard
    gpu = 0.5 * shard * 32 / 3.35e12
    host = 0.5 * shard * (4 / 64e9 + 28 / 70.4e9 + 4 / 64e9)
    ctx = _ctx(s)
    assert gpu < host
    assert optimizer_step_s(ctx, st.params) == pytest.approx(max(gpu * 3.35e12 / ctx.speeds.hbm_bytes_per_s, host))


def test_the_estimate_states_the_host_bandwidth_threads_and_overlap_it_assumes():
    said = " ".join(estimate_step(_scenario()).assumptions)
    assert "70.4 GB/s per GPU" in said and "563.2 GB/s shared by 8 GPUs" in said
    assert "14 cores per GPU" in said and "OMP_NUM_THREADS=1" in said
    assert "overlap_cpu_optimizer_d2h_h2d off (megatron-core's default)" in said
    on = " ".join(estimate_step(_scenario(overlap_cpu_optimizer_d2h_h2d=True)).assumptions)
    assert "overlap_cpu_optimizer_d2h_h2d on" in on
    # no published host for an HGX B200: DGX H100's host stands in, and the estimate says so
    b200 = " ".join(estimate_step(_scenario("b200")).assumptions)
    assert "no source gives the host of GPU b200" in b200
    assert not any("CPU offload" in a for a in estimate_step(_scenario(optimizer_cpu_offload=False)).assumptions)


def test_the_overlap_key_is_costed_not_listed_as_not_modelled():
    from moeplan.inputs.megatron_keys import describe_unmodelled, unmodelled_lines

    assert unmodelled_lines(describe_unmodelled({"overlap_cpu_optimizer_d2h_h2d": True})) == []
    # another carried key is still named
    lines = unmodelled_lines(describe_unmodelled({"overlap_cpu_optimizer_d2h_h2d": True, "pin_cpu_grads": False}))
    assert "pin_cpu_grads=False" in lines[0] and "overlap_cpu_optimizer_d2h_h2d" not in lines[0]
