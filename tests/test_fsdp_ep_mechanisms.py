"""Megatron-FSDP with expert parallelism as megatron-core runs it: which group shards what, the bytes it
gathers and scatters per microbatch and per step, over which link, what overlap hides, and the buffers
it holds (``megatron/core/distributed/fsdp/`` @ core_v0.19.0; the Nemotron-3 Ultra perf recipes of
Megatron Bridge v0.6.0, ``perf_recipes/nemotronh/common.py``: HSDP with one optimizer instance per
64-GPU NVLink domain, ``outer_dp_sharding_strategy: optim``, BF16 gradients, MXFP8 parameter gather).

Expected values are derived by hand from the mechanism; the links are the GB200 catalog figures
(NVLink 900 GB/s per direction in a 72-GPU domain, one 400 Gb/s NIC = 50 GB/s per GPU) times the
packaged link efficiencies.
"""

from __future__ import annotations

import pytest

from moeplan import load_scenario, validate
from moeplan.catalog.perf_recipes import held_out_runs, run_scenario
from moeplan.model.constants import OVERLAP_COMPUTE_SLOWDOWN, load_constants
from moeplan.model.fsdp_units import fsdp_params, units_in_flight
from moeplan.model.memory.breakdown import estimate_memory
from moeplan.model.memory.static import static_memory
from moeplan.model.time.context import step_context
from moeplan.model.time.data_parallel import data_parallel_time, fsdp_traffic
from moeplan.model.time.stage import StageTime
from moeplan.structure.numerics import fsdp_param_shard_degrees, optimizer_numerics, shard_degrees
from moeplan.structure.params import RankParams
from moeplan.structure.placement import StageParams

ULTRA = "nvidia/NVIDIA-Nemotron-3-Ultra-550B-A55B-BF16"
#: GB200 links (catalog): NVLink 900e9 B/s per direction, NIC 400 Gb/s = 50e9 B/s
NVLINK_B, NIC_B = 900e9, 50e9
MX = 1 + 1 / 32  # MXFP8 bytes per weight: 1 B + one E8M0 scale per 32


def _ultra_gb200(**layout: object):
    """Nemotron-3 Ultra on 256 GB200 as its 26.08 perf recipe lays it out: TP2 EP64, DP128, EDP4,
    Megatron-FSDP over 4 optimizer instances (one per 64-GPU NVLink domain), HFSDP, BF16 grads."""
    lay = {
        "tensor_model_parallel_size": 2,
        "pipeline_model_parallel_size": 1,
        "context_parallel_size": 1,
        "expert_model_parallel_size": 64,
        "expert_tensor_parallel_size": 1,
        "sequence_parallel": True,
        "use_megatron_fsdp": True,
        "data_parallel_sharding_strategy": "optim_grads_params",
        "num_distributed_optimizer_instances": 4,
        "outer_dp_sharding_strategy": "optim",
        "fp8_param_gather": True,
        "grad_reduce_in_fp32": False,
        "moe_router_force_load_balancing": True,
        **layout,
    }
    return load_scenario(
        {
            "model": ULTRA,
            "system": {"gpu": "gb200", "num_gpus": 256},
            "training": {"seq_length": 8192, "micro_batch_size": 1, "global_batch_size": 256, "precision": "mxfp8"},
            "layout": lay,
        }
    )


# --- groups -------------------------------------------------------------------------------------


def test_hsdp_shards_parameters_within_an_instance_and_hfsdp_the_optimizer_over_all_of_dp():
    s = _ultra_gb200()
    # DP = 256 / TP2 = 128, EDP = 256 / EP64 = 4; 4 instances: dense shard group 128 / 4 = 32,
    # expert shard group 4 / 4 = 1 (experts whole); HFSDP optimizer over all of DP·CP (128) and EDP (4)
    assert fsdp_param_shard_degrees(s) == (32, 1)
    assert shard_degrees(s) == (128, 4)


def test_hsdp_without_outer_optimizer_sharding_shards_the_optimizer_within_an_instance():
    s = _ultra_gb200(outer_dp_sharding_strategy="no_shard")
    assert fsdp_param_shard_degrees(s) == (32, 1)
    assert shard_degrees(s) == (32, 1)


def test_fsdp_without_instances_shards_dense_over_dp_and_experts_over_edp():
    s = _ultra_gb200(num_distributed_optimizer_instances=1, outer_dp_sharding_strategy=None)
    assert fsdp_param_shard_degrees(s) == (128, 4)
    assert shard_degrees(s) == (128, 4)


def test_the_ultra_perf_recipe_fill_carries_its_hybrid_sharding():
    row = next(r for r in held_out_runs() if r["id"] == "mbperf-26.08-nemotron-3-ultra-gb200x256-mxfp8-gbs256-mbs1")
    lay = load_scenario(run_scenario(row)).layout
    # _apply_nemotron_3_ultra_fsdp_hsdp: instances = 256 // 64, outer "optim", optim_grads_params
    assert lay.num_distributed_optimizer_instances == 4
    assert lay.outer_dp_sharding_strategy == "optim"
    assert lay.data_parallel_sharding_strategy == "optim_grads_params"


@pytest.mark.parametrize(
    ("fsdp", "mcore", "expected"),
    [
        (True, "0.18.0", 4.0),  # core_v0.18.0: grad_reduce_in_fp32 still maps to FP32 main grads
        (True, "0.19.0", 2.0),  # core_v0.19.0: megatron_fsdp_main_grads_dtype auto, the BF16 params' dtype
        (False, "0.19.0", 4.0),  # DDP's main-grad buffer still follows grad_reduce_in_fp32
    ],
)
def test_megatron_fsdp_gradient_dtype_follows_its_own_setting_from_core_0_19(fsdp, mcore, expected):
    s = load_scenario(
        {
            "model": ULTRA,
            "system": {"gpu": "gb200", "num_gpus": 256},
            "training": {"seq_length": 8192, "micro_batch_size": 1, "global_batch_size": 256, "precision": "bf16"},
            "layout": {
                "tensor_model_parallel_size": 2,
                "expert_model_parallel_size": 64,
                "use_megatron_fsdp": fsdp,
                "use_distributed_optimizer": True,
                "grad_reduce_in_fp32": True,
            },
            "versions": {"megatron_core": mcore},
        }
    )
    assert optimizer_numerics(s).grad_bytes == expected


# --- units in flight ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("unit", "units", "expected"),
    [
        # C = max(1e9, 4e8) = 1e9: gathered 1 + ceil(5e8 / 2e8) = 4, gradients 1 + floor(1e9 / 2e8) = 6
        (2e8, 100, (4, 6)),
        # C = max(1e9, 1.2e9) = 1.2e9: gathered 1 + ceil(6e8 / 6e8) = 2, gradients 1 + floor(2) = 3
        (6e8, 100, (2, 3)),
        # capped by the stage's 3 units
        (1e7, 3, (3, 3)),
        (0.0, 10, (0, 0)),
    ],
)
def test_units_in_flight_follow_the_communication_unit(unit, units, expected):
    assert units_in_flight(unit, units) == expected


# --- traffic ------------------------------------------------------------------------------------


def _synthetic_params() -> RankParams:
    """Round numbers: 3.2e9 GEMM weights in units, 0.5e9 each of embedding and output layer,
    8e9 routed-expert weights."""
    by_kind = {"attention": 3_200_000_000, "embedding": 500_000_000, "output_layer": 500_000_000}
    return RankParams(by_kind=by_kind, dense=4_200_000_000, expert=8_000_000_000)


def test_fsdp_traffic_gathers_mxfp8_over_nvlink_per_microbatch_and_the_outer_group_once_per_step():
    s = _ultra_gb200()
    c = load_constants()
    ctx = step_context(s, c, None, None)
    nv, nic = NVLINK_B * c.nvlink_efficiency, NIC_B * c.nic_efficiency
    tr = fsdp_traffic(ctx, _synthetic_params())
    # dense shard group 32 ranks spanning TP2 × 32 = 64 GPUs ≤ 72: NVLink; ring share 31/32
    ag = 3.2e9 * MX * 31 / 32 / nv
    assert tr.ag_fwd_s == pytest.approx(ag)
    assert tr.ag_bwd_s == pytest.approx(ag)  # the column-wise copy for backward, same bytes
    # gradients of units and non-unit parameters, BF16 (grad_reduce_in_fp32 false); experts: group of 1
    assert tr.rs_s == pytest.approx((3.2e9 + 1e9) * 2 * 31 / 32 / nv)
    # outer group: 4 instances strided over all 256 GPUs: the NIC; ring share 3/4
    outer_ag = (3.2e9 * MX + 1e9 * 2) / 32 * 3 / 4 / nic + 8e9 * MX * 3 / 4 / nic
    whole = 1e9 * 2 * 31 / 32 / nv  # embedding + output layer gathered once, kept whole
    assert tr.first_fwd_s == pytest.approx(whole + outer_ag)
    assert tr.first_bwd_s == pytest.approx(outer_ag)  # MXFP8's column-wise shards
    assert tr.last_bwd_s == pytest.approx((4.2e9 / 32 * 2 * 3 / 4 + 8e9 * 2 * 3 / 4) / nic)


def test_fsdp_traffic_without_instances_gathers_experts_over_edp_every_microbatch():
    s = _ultra_gb200(num_distributed_optimizer_instances=1, outer_dp_sharding_strategy=None)
    c = load_constants()
    ctx = step_context(s, c, None, None)
    nic = NIC_B * c.nic_efficiency
    tr = fsdp_traffic(ctx, _synthetic_params())
    # dense over 128 ranks spanning 256 GPUs > 72: NIC; experts over EDP 4 strided by EP 64: NIC
    assert tr.ag_fwd_s == pytest.approx(3.2e9 * MX * 127 / 128 / nic + 8e9 * MX * 3 / 4 / nic)
    assert tr.rs_s == pytest.approx(4.2e9 * 2 * 127 / 128 / nic + 8e9 * 2 * 3 / 4 / nic)
    assert tr.first_bwd_s == 0.0 and tr.last_bwd_s == 0.0
    assert tr.first_fwd_s == pytest.approx(1e9 * 2 * 127 / 128 / nic)


def test_fsdp_exposes_the_first_gather_the_last_scatter_and_the_overlap_slowdown():
    s = _ultra_gb200()
    c = load_constants()
    ctx = step_context(s, c, None, None)
    tr = fsdp_traffic(ctx, _synthetic_params())
    crit = StageTime(parts={"dense_gemm": 3.0}, hidden={})  # 1 s forward, 2 s backward windows
    out = data_parallel_time(ctx, _synthetic_params(), crit)
    tail = 1 / 108  # one unit per layer of the 108-layer stage
    n_mb = 256 // 128  # GBS 256 over DP 128 at MBS 1

    def exp(t: float, tail_share: float) -> float:  # the window is never exceeded here
        return tail_share * t + OVERLAP_COMPUTE_SLOWDOWN * (1 - tail_share) * t

    per_mb = exp(tr.ag_fwd_s, tail) + exp(tr.ag_bwd_s + tr.rs_s, tail)
    once = exp(tr.first_fwd_s, 0.0) + exp(tr.first_bwd_s, 0.0) + exp(tr.last_bwd_s, tail)
    assert out.dp_exposed_s == 0.0
    assert out.fsdp_exposed_s == pytest.approx(n_mb * per_mb + once)
    total = n_mb * (tr.ag_fwd_s + tr.ag_bwd_s + tr.rs_s) + tr.first_fwd_s + tr.first_bwd_s + tr.last_bwd_s
    assert out.fsdp_exposed_s + out.fsdp_hidden_s == pytest.approx(total)


def test_optim_grads_scatters_every_microbatch_and_gathers_once_per_step():
    s = _ultra_gb200(
        data_parallel_sharding_strategy="optim_grads",
        num_distributed_optimizer_instances=1,
        outer_dp_sharding_strategy=None,
    )
    c = load_constants()
    ctx = step_context(s, c, None, None)
    nic = NIC_B * c.nic_efficiency
    out = data_parallel_time(ctx, _synthetic_params(), StageTime(parts={"dense_gemm": 3.0}, hidden={}))
    tail, n_mb = 1 / 108, 2
    # gradients: dense 4.2e9 over DP 128 and experts 8e9 over EDP 4, BF16, on the NIC, each microbatch
    rs = (4.2e9 * 2 * 127 / 128 + 8e9 * 2 * 3 / 4) / nic
    # parameters once: units (3.2e9 MXFP8) and experts (8e9 MXFP8), embedding + output layer (1e9 BF16)
    ag = (3.2e9 * MX * 127 / 128 + 8e9 * MX * 3 / 4 + 1e9 * 2 * 127 / 128) / nic
    # windows: backward 2 s, forward 1 s; what exceeds a window stays exposed
    rs_exp = tail * rs + max(0.0, (1 - tail) * rs - 2.0) + OVERLAP_COMPUTE_SLOWDOWN * min((1 - tail) * rs, 2.0)
    ag_exp = tail * ag + max(0.0, (1 - tail) * ag - 1.0) + OVERLAP_COMPUTE_SLOWDOWN * min((1 - tail) * ag, 1.0)
    assert out.fsdp_exposed_s == pytest.approx(n_mb * rs_exp + ag_exp)
    assert out.fsdp_exposed_s + out.fsdp_hidden_s == pytest.approx(n_mb * rs + ag)


# --- memory -------------------------------------------------------------------------------------


def test_hsdp_keeps_experts_whole_and_holds_the_units_in_flight():
    s = _ultra_gb200()
    num = optimizer_numerics(s)
    layers = list(range(100))
    sp = StageParams(0, layers, True, True, 0, _synthetic_params())
    mem = static_memory(s, sp, num)
    w, g = mem.weights, mem.grads
    # shards: dense (3.2e9 FP8 weights at 1 B + 1e9 BF16) / 32, experts whole at 1 B
    assert w["params_sharded"] == pytest.approx((3.2e9 * 1 + 1e9 * 2) / 32 + 8e9 * 1)
    assert w["fsdp_whole_non_unit_params"] == pytest.approx(1e9 * 2)
    # one unit gathers 3.2e9 / 100 = 3.2e7 dense weights (experts not gathered):
    # C = 1e9, 1 + ceil(5e8 / 3.2e7) = 1 + 16 = 17 units at 1 B
    assert w["fsdp_gathered_layers"] == pytest.approx(17 * 3.2e7)
    # MXFP8 column-wise copies: shards (3.2e9 / 32 + 8e9) and the 17 gathered units, at 1 + 1/32 B
    assert w["fp8_weight_copies"] == pytest.approx((3.2e9 / 32 + 8e9 + 17 * 3.2e7) * MX)
    # BF16 gradients: dense 4.2e9 / 32, experts whole; in flight 1 + floor(1e9 / 3.2e7) = 32 units
    assert g["main_grads_sharded"] == pytest.approx(4.2e9 * 2 / 32 + 8e9 * 2)
    assert g["fsdp_reduce_buffer"] == pytest.approx(32 * 3.2e7 * 2)
    # FP32 master and moments: HFSDP shards dense over DP 128 and experts over EDP 4
    assert mem.optimizer["dense_state"] == pytest.approx(4.2e9 * 12 / 128)
    assert mem.optimizer["expert_state"] == pytest.approx(8e9 * 12 / 4)


def test_fsdp_params_split_units_from_the_embedding_and_output_layer():
    fp = fsdp_params(_synthetic_params())
    assert (fp.dense_gemm, fp.dense_other, fp.non_unit, fp.expert) == (3.2e9, 0.0, 1e9, 8e9)


def test_the_estimate_says_what_the_fsdp_memory_rests_on():
    notes = [str(a) for a in estimate_memory(_ultra_gb200()).assumptions]
    assert any("fsdp_double_buffer" in n and "layers gathered" in n for n in notes)
    assert any("routed experts and their gradients stay whole" in n for n in notes)


# --- rules --------------------------------------------------------------------------------------


def _qwen3_30b_16_h100(**layout: object):
    return load_scenario({"model": "Qwen/Qwen3-30B-A3B", "system": {"gpu": "h100", "num_gpus": 16}, "layout": layout})


def _fsdp_findings(s) -> list[tuple[str, str]]:
    return [(f.rule_id, str(f.message)) for f in validate(s).findings if f.rule_id.startswith("fsdp.")]


def test_optimizer_instances_must_divide_the_expert_data_parallel_group():
    # 16 GPUs, EP4: EDP = 16 / 4 = 4, not divisible by 8 instances (DP 16 is)
    s = _qwen3_30b_16_h100(expert_model_parallel_size=4, num_distributed_optimizer_instances=8)
    assert _fsdp_findings(s) == [
        (
            "fsdp.optimizer_instances_divide_edp",
            "EDP = 4 is not divisible by num_distributed_optimizer_instances (8): megatron-core splits the "
            "expert data-parallel group into that many partial groups",
        )
    ]
    assert _fsdp_findings(_qwen3_30b_16_h100(expert_model_parallel_size=4, num_distributed_optimizer_instances=4)) == []


def test_outer_optimizer_sharding_needs_full_sharding_within_an_instance():
    lay = {"expert_model_parallel_size": 4, "use_megatron_fsdp": True, "num_distributed_optimizer_instances": 2}
    bad = _qwen3_30b_16_h100(**lay, data_parallel_sharding_strategy="optim_grads", outer_dp_sharding_strategy="optim")
    assert [r for r, _ in _fsdp_findings(bad)] == ["fsdp.outer_optimizer_sharding_needs_full_sharding"]
    assert "optim_grads raises NotImplementedError" in _fsdp_findings(bad)[0][1]
    assert _fsdp_findings(_qwen3_30b_16_h100(**lay, outer_dp_sharding_strategy="optim")) == []
