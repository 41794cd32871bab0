"""The optimizer step's temporaries (moeplan.model.memory.step_phase), hand-derived: megatron-core's
fp32 copies of bf16 main grads and TE FusedAdam's unscaled states, and the allocated peak as the larger
of the forward/backward peak and the step's."""

from __future__ import annotations

import pytest

from moeplan.model.memory import estimate_memory
from moeplan.model.memory.static import trained_params
from moeplan.model.memory.step_phase import optimizer_step_transients, step_excess
from moeplan.resolve.load import load_scenario
from moeplan.structure.numerics import optimizer_numerics
from moeplan.structure.placement import stage_params


def _scenario(layout: dict, seq: int = 256, versions: dict | None = None, framework: str = "megatron-bridge"):
    d = {
        "framework": framework,
        "model": "Qwen/Qwen3-30B-A3B",
        "system": {"gpu": "h100", "num_gpus": 16},
        "training": {"seq_length": seq, "micro_batch_size": 1, "global_batch_size": 16},
        "layout": {"expert_model_parallel_size": 16, "use_distributed_optimizer": True, **layout},
        "versions": versions or {},
    }
    return load_scenario(d)


def _shards(s):
    sp = stage_params(s, allow_balanced=True)[0]
    num = optimizer_numerics(s)
    dense, expert = trained_params(s, sp)
    return sp, num, dense, expert, dense / num.dense_shard, expert / num.expert_shard


def test_bf16_grads_get_fp32_copies_per_shard_element():
    s = _scenario({"grad_reduce_in_fp32": False})
    sp, num, dense, expert, sd, se = _shards(s)
    assert num.dense_shard == 16 and num.expert_shard == 1  # DP 16, EDP 1
    out = optimizer_step_transients(s, sp, num, dense, expert)
    assert out == {"fp32_main_grad_copies": pytest.approx(4 * (sd + se))}


def test_fp32_grads_and_decoupled_grads_need_no_copy():
    assert optimizer_step_transients(*_args(_scenario({}))) == {}  # fp32 buffer: .float() is a view
    pao = {"grad_reduce_in_fp32": False, "use_precision_aware_optimizer": True, "main_grads_dtype": "bf16"}
    # Megatron-LM: the optimizer's fp8_recipe defaults to "delayed", so TE keeps the master and reads
    # the bf16 shard as decoupled_grad
    assert optimizer_step_transients(*_args(_scenario(pao, framework="megatron-core"))) == {}
    # Megatron Bridge before 0.1.0rc3, and 0.2.0rc0-rc1: MixedPrecisionConfig still defaulted fp8_recipe
    # to "delayed"
    for v in ("0.1.0rc2", "0.2.0rc1"):
        assert optimizer_step_transients(*_args(_scenario(pao, versions={"megatron_bridge": v}))) == {}
    # megatron-core before 0.13 always handed TE the master (no use_precision_aware_optimizer_no_fp8_or_ds_fp8)
    assert optimizer_step_transients(*_args(_scenario(pao, versions={"megatron_core": "0.12.1"}))) == {}


def test_bridge_bf16_precision_aware_optimizer_keeps_mcore_master_and_copies_grads():
    """Bridge ≥ 0.2.0rc2 copies MixedPrecisionConfig.fp8_recipe ("tensorwise", set even for BF16) into
    the optimizer config, so use_precision_aware_optimizer_no_fp8_or_ds_fp8 is false: megatron-core
    keeps an fp32 master shard (4 B, no remainders) and copies the bf16 grad shard to fp32."""
    pao = {"grad_reduce_in_fp32": False, "use_precision_aware_optimizer": True, "main_grads_dtype": "bf16"}
    # 0.1.0rc3 took the change as a cherry-pick (d8bb57e3); main since 0.2.0rc2 (15bf28de)
    for versions in (
        {},
        {"megatron_bridge": "0.1.0rc3"},
        {"megatron_bridge": "0.2.0rc2"},
        {"megatron_bridge": "0.3.1"},
    ):
        s = _scenario(pao, versions=versions)
        sp, num, dense, expert, sd, se = _shards(s)
        assert num.master_bytes == 4.0
        assert optimizer_step_transients(s, sp, num, dense, expert) == {
            "fp32_main_grad_copies": pytest.approx(4 * (sd + se))
        }
    te_master = optimizer_numerics(_scenario(pao, framework="megatron-core"))
    assert te_master.master_bytes == 2.0  # TE FusedAdam's bf16 param + 16-bit remainder
    fp16_master = _scenario({**pao, "main_params_dtype": "fp16"})  # not fp32: TE keeps it, in fp16
    assert optimizer_numerics(fp16_master).master_bytes == 2.0  # an fp16 master, no remainders
    assert "fp32_main_grad_copies" not in optimizer_step_transients(*_args(fp16_master))


def _args(s):
    sp, num, dense, expert, _, _ = _shards(s)
    return s, sp, num, dense, expert


@pytest.mark.parametrize(("te", "expected_bytes_per_elem"), [("2.12", 8.0), ("2.14", 0.0)])
def test_bf16_moments_unscaled_to_fp32_before_te_2_14(te, expected_bytes_per_elem):
    lay = {
        "grad_reduce_in_fp32": False,
        "use_precision_aware_optimizer": True,
        "main_grads_dtype": "bf16",
        "exp_avg_dtype": "bf16",
        "exp_avg_sq_dtype": "bf16",
    }
    s = _scenario(lay, versions={"transformer_engine": te})
    _, _, _, _, sd, se = _shards(s)
    out = optimizer_step_transients(*_args(s))
    assert out.get("adam_unscaled_states", 0.0) == pytest.approx(expected_bytes_per_elem * max(sd, se))


def test_fp8_moments_and_fp16_master_are_always_unscaled():
    lay = {
        "use_precision_aware_optimizer": True,
        "exp_avg_dtype": "fp8",
        "exp_avg_sq_dtype": "fp8",
        "main_params_dtype": "fp16",
    }
    s = _scenario(lay)
    _, _, _, _, sd, se = _shards(s)
    assert optimizer_step_transients(*_args(s)) == {"adam_unscaled_states": pytest.approx(12 * max(sd, se))}


def test_step_excess_is_what_the_step_adds_beyond_the_freed_activations():
    assert step_excess({"a": 10.0}, {"decoder_layers": 3.0}, {"backward_working_set": 2.0, "workspaces": 9.0}) == 5.0
    assert step_excess({"a": 4.0}, {"decoder_layers": 3.0}, {"backward_working_set": 2.0}) == 0.0


def test_allocated_peak_is_the_larger_of_the_two_phases():
    """Short sequences: the step's fp32 grad copies (4 B per expert shard element, EDP 1) outgrow the
    activations, so the allocated peak is static + step temporaries (+ workspaces, which persist)."""
    s = _scenario({"grad_reduce_in_fp32": False}, seq=128)
    st = estimate_memory(s).stages[0]
    steps = sum(st.step_transients.values())
    freed = st.activations_bytes + st.items["other"]["backward_working_set"]
    assert steps > freed
    assert st.items["other"]["optimizer_step_excess"] == pytest.approx(steps - freed, rel=1e-9)
    static = st.weights_bytes + st.grads_bytes + st.optimizer_bytes
    assert st.peak_allocated_bytes == pytest.approx(static + steps + st.items["other"]["workspaces"], abs=8)
    long = estimate_memory(_scenario({"grad_reduce_in_fp32": False}, seq=16384)).stages[0]
    assert "optimizer_step_excess" not in long.items["other"]


def test_check_says_when_bridge_keeps_the_master_in_megatron_core():
    from moeplan import validate

    rid = "optimizer.precision_aware_master_kept_by_megatron_core"
    pao = {"grad_reduce_in_fp32": False, "use_precision_aware_optimizer": True, "main_grads_dtype": "bf16"}
    bridge = validate(_scenario(pao))
    assert rid in bridge.rule_ids("info")
    msg = next(f.message for f in bridge.findings if f.rule_id == rid)
    assert "'tensorwise'" in msg and "copies the bf16 gradient shard to fp32" in msg
    for quiet in (
        _scenario(pao, framework="megatron-core"),  # Megatron-LM: fp8_recipe 'delayed', TE keeps it
        _scenario(pao, versions={"megatron_bridge": "0.1.0rc2"}),  # still defaulted to 'delayed'
        _scenario({**pao, "main_params_dtype": "fp16"}),  # a 16-bit master is TE's
        _scenario({"use_distributed_optimizer": True}),  # no precision-aware optimizer
    ):
        assert rid not in validate(quiet).rule_ids("info")
