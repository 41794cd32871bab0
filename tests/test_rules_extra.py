"""Rules for CP vs attention variants, recompute_num_layers and FSDP strategies."""

from __future__ import annotations

from moeplan import estimate_memory, load_scenario, rank_params, validate


def _check(model, **layout):
    lay = {"sequence_parallel": True, **layout}
    return validate(
        load_scenario(
            {
                "model": model,
                "system": {"gpu": "h100", "num_gpus": 512},
                "training": {"seq_length": 131072, "micro_batch_size": 1, "global_batch_size": 64},
                "layout": lay,
            }
        )
    )


def test_attention_sinks_and_sliding_window_need_a2a_cp():
    r = _check(
        "openai/gpt-oss-120b", tensor_model_parallel_size=2, context_parallel_size=4, expert_model_parallel_size=8
    )
    assert "sequence.cp_attention_support" in r.rule_ids("error")
    ok = _check(
        "openai/gpt-oss-120b",
        tensor_model_parallel_size=2,
        context_parallel_size=4,
        expert_model_parallel_size=8,
        cp_comm_type="a2a",
    )
    assert "sequence.cp_attention_support" not in ok.rule_ids("error")


def test_a2a_cp_needs_heads_divisible_by_cp():
    r = _check(
        "Qwen/Qwen3-235B-A22B",
        tensor_model_parallel_size=4,
        context_parallel_size=16,
        expert_model_parallel_size=32,
        cp_comm_type="a2a",
    )
    msgs = [f.message for f in r.errors if f.rule_id == "sequence.cp_attention_support"]
    assert msgs and "1 KV head(s)" in msgs[0]


def test_a2a_p2p_cp_needs_kv_heads_divisible_by_its_all_to_all_level():
    # Qwen3-235B-A22B: 64 query heads, 4 KV heads; TP 2 leaves 32 and 2 per rank. TE views K as
    # [..., 8, 2 // 8, ...] over an all-to-all level of 8: no run. A level of 2 splits them (ring of 8).
    def errors(sizes):
        r = _check(
            "Qwen/Qwen3-235B-A22B",
            tensor_model_parallel_size=2,
            context_parallel_size=16,
            expert_model_parallel_size=32,
            cp_comm_type="a2a+p2p",
            hierarchical_context_parallel_sizes=sizes,
        )
        return [f.message for f in r.errors if f.rule_id == "sequence.cp_attention_support"]

    bad = errors([8, 2])
    assert len(bad) == 1 and "32 query heads and 2 KV head(s)" in bad[0] and "not divisible by 8" in bad[0]
    assert errors([2, 8]) == []


def test_a2a_cp_splits_mla_heads_too():
    # MLA: K and V carry the query heads after the up-projection; DeepSeek-V3's 128 heads over TP 8 leave 16,
    # which an all-to-all over CP 32 cannot split (and CP 16 can)
    def errors(cp):
        lay = {"tensor_model_parallel_size": 8, "context_parallel_size": cp, "expert_model_parallel_size": 64}
        r = _check("deepseek-ai/DeepSeek-V3", cp_comm_type="a2a", pipeline_model_parallel_size=1, **lay)
        return [f.message for f in r.errors if f.rule_id == "sequence.cp_attention_support"]

    assert any("16 query heads and 16 KV head(s)" in x for x in errors(32))
    assert not any("query heads" in x for x in errors(16))


def test_mla_cp_without_p2p_warns():
    r = _check(
        "deepseek-ai/DeepSeek-V3",
        tensor_model_parallel_size=2,
        context_parallel_size=8,
        pipeline_model_parallel_size=8,
        expert_model_parallel_size=32,
        cp_comm_type="all_gather",
    )
    assert "sequence.cp_attention_support" in r.rule_ids("warning")


def test_recompute_num_layers_has_no_upper_bound_error():
    r = validate(
        load_scenario(
            {
                "model": "qwen3-30b-a3b",
                "layout": {
                    "pipeline_model_parallel_size": 8,
                    "recompute_granularity": "full",
                    "recompute_method": "block",
                    "recompute_num_layers": 8,
                },
            }
        )
    )
    assert "recompute.granularity_fields" not in r.rule_ids("error")


def test_mtp_stage_holds_an_embedding_copy():
    from moeplan import get_model

    m = get_model("deepseek-v3").with_overrides({"num_layers": 2})
    last = rank_params(m, [1], output_layer=True, mtp_layers=1, padded_vocab=129280)
    assert last.by_kind["embedding"] == 129280 * 7168


def _fsdp(strategy, precision="bf16"):
    return estimate_memory(
        load_scenario(
            {
                "model": "Qwen/Qwen3-VL-30B-A3B-Instruct",
                "system": {"gpu": "h100", "num_gpus": 64},
                "training": {
                    "seq_length": 8192,
                    "micro_batch_size": 1,
                    "global_batch_size": 64,
                    "precision": precision,
                },
                "layout": {
                    "expert_model_parallel_size": 8,
                    "use_megatron_fsdp": True,
                    "data_parallel_sharding_strategy": strategy,
                    "recompute_granularity": "full",
                    "recompute_method": "uniform",
                    "recompute_num_layers": 1,
                },
            }
        )
    ).stages[0]


def test_fsdp_strategies_shard_what_they_say():
    none, optim, full = _fsdp("no_shard"), _fsdp("optim"), _fsdp("optim_grads_params")
    assert none.optimizer_bytes > optim.optimizer_bytes
    assert optim.optimizer_bytes == full.optimizer_bytes
    assert full.weights_bytes < optim.weights_bytes and full.grads_bytes < optim.grads_bytes


def test_fsdp_fp8_weight_copies_are_sharded():
    st = _fsdp("optim_grads_params", precision="fp8-blockwise")
    assert st.items["weights"]["fp8_weight_copies"] < 0.2 * st.items["weights"]["params_sharded"] * 64


def test_tp_beyond_the_nvlink_domain_warns():
    r = _check("Qwen/Qwen3-235B-A22B", tensor_model_parallel_size=16, expert_model_parallel_size=32)
    assert "world.tp_within_nvlink_domain" in r.rule_ids("warning")
    ok = _check("Qwen/Qwen3-235B-A22B", tensor_model_parallel_size=8, expert_model_parallel_size=32)
    assert "world.tp_within_nvlink_domain" not in ok.rule_ids()


def test_uniform_full_recompute_with_mtp_needs_one_layer_per_chunk():
    from moeplan import load_scenario
    from moeplan.rules import validate

    base = {
        "model": "deepseek-ai/DeepSeek-V3",
        "system": {"gpu": "h100", "num_gpus": 256},
        "training": {"seq_length": 4096, "global_batch_size": 512, "precision": "bf16"},
        "layout": {
            "pipeline_model_parallel_size": 8,
            "expert_model_parallel_size": 32,
            "pipeline_model_parallel_layout": "Et*7|(t*8|)*6t*6mL",
            "recompute_granularity": "full",
            "recompute_method": "uniform",
            "recompute_num_layers": 2,
        },
    }
    ids = [f.rule_id for f in validate(load_scenario(base)).errors]
    assert ids == ["recompute.granularity_fields"]
    for fix in ({"recompute_num_layers": 1}, {"recompute_method": "block"}):
        ok = {**base, "layout": {**base["layout"], **fix}}
        assert "recompute.granularity_fields" not in [f.rule_id for f in validate(load_scenario(ok)).errors]


def test_uneven_split_hint_prefers_a_balanced_layout_over_heavy_ends():
    from moeplan import load_scenario
    from moeplan.rules import validate
    from moeplan.structure.stages import parse_layout

    s = load_scenario(
        {
            "model": "openai/gpt-oss-120b",
            "system": {"gpu": "h100", "num_gpus": 128},
            "training": {"seq_length": 4096, "global_batch_size": 512, "precision": "bf16"},
            "layout": {"pipeline_model_parallel_size": 16, "expert_model_parallel_size": 8},
        }
    )
    (f,) = [x for x in validate(s).errors if x.rule_id == "pipeline.num_layers_divisible_by_pp"]
    # 36 layers over 16 stages: stage sizes alone would need 4 + 4 at the ends and 2 in the middle
    assert "pipeline_model_parallel_layout: '" in f.fix and "num_layers_in_first" not in f.fix
    layout = f.fix.split("pipeline_model_parallel_layout: '")[1].split("'")[0]
    stages = parse_layout(layout)
    assert len(stages) == 16 and sum(st.count("t") for st in stages) == 36
    assert max(st.count("t") for st in (stages[0], stages[-1])) <= min(st.count("t") for st in stages[1:-1])


def test_a_sharding_strategy_without_megatron_fsdp_is_a_no_op_said_as_info():
    # NeMo-RL's stock config carries data_parallel_sharding_strategy: optim_grads_params into Megatron's DDP,
    # which ignores it: not a hazard, and switching to Megatron-FSDP is not the fix
    r = _check("Qwen/Qwen3-30B-A3B", expert_model_parallel_size=8, data_parallel_sharding_strategy="optim_grads_params")
    found = [f for f in r.findings if f.rule_id == "fsdp.exclusions"]
    assert [f.severity for f in found] == ["info"] and "Megatron's DDP takes the field and ignores it" in found[
        0
    ].message
