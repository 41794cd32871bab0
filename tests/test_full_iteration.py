"""Full-iteration CUDA graphs for MoE: the static-shape rules (Megatron-LM CUDA Graphs guide, "MoE Model
Training"; tests/data/reference/megatron_facts.md rule 32) and the planner's full-iteration option on Blackwell."""

from __future__ import annotations

from moeplan import load_scenario, validate
from moeplan.catalog import get_gpu, get_model
from moeplan.plan.space import FULL_ITERATION_MOE, graph_options

RULE = "graphs.full_iteration_moe_static_shapes"


def _check(model="Qwen/Qwen3-30B-A3B", gpu="gb200", **layout):
    lay = {"expert_model_parallel_size": 8, "check_for_nan_in_loss": False, **layout}
    return validate(
        load_scenario(
            {
                "model": model,
                "system": {"gpu": gpu, "num_gpus": 8},
                "training": {"seq_length": 4096, "micro_batch_size": 1, "global_batch_size": 64},
                "layout": lay,
                "versions": {"megatron_core": "0.18.0"},
            }
        )
    )


def test_full_iteration_with_dropless_alltoall_is_an_error():
    r = _check(cuda_graph_impl="full_iteration", moe_token_dispatcher_type="alltoall")
    assert RULE in r.rule_ids("error")


def test_full_iteration_with_the_static_budget_path_is_legal():
    r = _check(**{k: v for k, v in FULL_ITERATION_MOE.items()})
    assert not r.errors, [f.message for f in r.errors]


def test_full_iteration_with_drop_and_pad_is_legal_for_this_rule():
    r = _check(
        cuda_graph_impl="full_iteration",
        moe_token_dispatcher_type="alltoall",
        moe_expert_capacity_factor=1.0,
        moe_pad_expert_input_to_capacity=True,
    )
    assert RULE not in r.rule_ids("error")


def test_full_iteration_on_a_dense_model_needs_no_budget():
    r = _check(model="meta-llama/Llama-3.1-8B", expert_model_parallel_size=1, cuda_graph_impl="full_iteration")
    assert RULE not in r.rule_ids("error")


def test_rank_budget_with_hybridep_needs_the_op_fuser_and_paged_stash_needs_a_budget():
    hyb = {"moe_token_dispatcher_type": "flex", "moe_flex_dispatcher_backend": "hybridep"}
    r = _check(**hyb, moe_expert_rank_capacity_factor=1.5)
    msgs = [f.message for f in r.errors if f.rule_id == "moe.flex_backend_settings"]
    assert any("use_transformer_engine_op_fuser" in m for m in msgs)
    ok = _check(**hyb, moe_expert_rank_capacity_factor=1.5, use_transformer_engine_op_fuser=True)
    assert "moe.flex_backend_settings" not in ok.rule_ids("error")
    r = _check(**hyb, moe_paged_stash=True)
    msgs = [f.message for f in r.errors if f.rule_id == "moe.flex_backend_settings"]
    assert any("moe_paged_stash needs moe_expert_rank_capacity_factor" in m for m in msgs)


def test_graph_options_offer_full_iteration_only_for_text_moe_on_blackwell():
    def names(model, gpu):
        return [n for n, _ in graph_options(get_model(model), get_gpu(gpu))]

    assert "full_iteration" in names("Qwen/Qwen3-30B-A3B", "gb200")
    assert "full_iteration" in names("Qwen/Qwen3-30B-A3B", "b300")
    assert "full_iteration" not in names("Qwen/Qwen3-30B-A3B", "h100")  # the fused grouped MLP is Blackwell's
    assert "full_iteration" not in names("meta-llama/Llama-3.1-8B", "gb200")  # dense: not offered
    assert "full_iteration" not in names("Qwen/Qwen3-VL-30B-A3B-Instruct", "gb200")  # images change shape


def test_planner_tries_full_iteration_and_every_candidate_passes_check():
    from test_plan import ask_plan

    res = ask_plan("Qwen/Qwen3-30B-A3B", "gb200", 8, 4096, 512, "mxfp8")
    w = res.candidates[0]
    # tried and predicted (a number, not None: the option was built and estimated, not refused)
    assert w.tried["graphs"]["full_iteration"] > 0
    for c in res.candidates:
        assert not validate(c.scenario).errors
    # the free search prefers TE graphs here, so the full-iteration settings are checked with the graph
    # mode held: every candidate then carries the whole static-shape set (FULL_ITERATION_MOE: HybridEP with
    # a rank capacity budget, the TE op fuser, the paged stash, no NaN check) and passes check
    held = ask_plan("Qwen/Qwen3-30B-A3B", "gb200", 8, 4096, 512, "mxfp8", cuda_graph_impl="full_iteration")
    assert held.candidates
    for c in held.candidates:
        lay = c.data["layout"]
        assert {k: lay.get(k) for k in FULL_ITERATION_MOE} == FULL_ITERATION_MOE
        assert c.knobs["graphs"] == "full_iteration" and c.knobs["dispatcher"] == "hybridep"
        assert not validate(c.scenario).errors


def _budget(framework="megatron-bridge", **versions):
    lay = {
        "expert_model_parallel_size": 8,
        "moe_token_dispatcher_type": "flex",
        "moe_flex_dispatcher_backend": "hybridep",
        "moe_expert_rank_capacity_factor": 1.5,
        "use_transformer_engine_op_fuser": True,
    }
    data = {
        "model": "Qwen/Qwen3-30B-A3B",
        "system": {"gpu": "gb200", "num_gpus": 8},
        "training": {"seq_length": 4096, "micro_batch_size": 1, "global_batch_size": 64},
        "layout": lay,
        "versions": versions,
        "framework": framework,
    }
    found = validate(load_scenario(data)).findings
    return [(f.severity, f.message) for f in found if "moe_expert_rank_capacity_factor 1.5" in f.message]


def test_hybridep_rank_budget_says_an_over_budget_step_reruns_or_drops():
    # Megatron Bridge 0.5+ and Megatron-LM wrap the step in PagedStashRunner: the over-budget step reruns
    (sev, text), *_ = _budget(megatron_core="0.18.0", megatron_bridge="0.5.0")
    assert sev == "info" and "run again without the budget" in text and "at least twice" in text
    # Megatron Bridge 0.4 has no runner: megatron-core's HybridEP drops the tokens beyond the budget
    (sev, text), *_ = _budget(megatron_core="0.18.0", megatron_bridge="0.4.0")
    assert sev == "warning" and "dropped" in text and "0.4.0" in text
    # a stated container decides it too: nemo:26.06 ships Megatron Bridge 0.5.0 and megatron-core 0.18.0
    assert [s for s, _ in _budget(container="26.06")] == ["info"]
    # Megatron-LM's training.py wraps the step; a loop of one's own over megatron-core, or an RL driver's,
    # is not known to: megatron-core alone drops the tokens (its TransformerConfig docstring)
    assert [s for s, _ in _budget("megatron-lm", megatron_core="0.18.0")] == ["info"]
    for loop in ("megatron-core", "verl"):
        (sev, text), *_ = _budget(loop, megatron_core="0.18.0")
        assert sev == "warning" and f"framework {loop}" in text and "PagedStashRunner" in text


def test_the_plan_says_when_its_first_layout_runs_the_rank_budget():
    from moeplan.plan import plan

    req = {
        "model": "Qwen/Qwen3-235B-A22B",
        "system": {"gpu": "gb200", "num_gpus": 128},
        "training": {"seq_length": 8192, "precision": "bf16"},
    }
    res = plan(req, top=1)
    first = res.candidates[0].scenario.layout
    said = [n for n in res.notes if "static per-rank token budget" in n]
    assert first.moe_expert_rank_capacity_factor == 1.5 and first.moe_flex_dispatcher_backend == "hybridep"
    assert len(said) == 1 and "run again without the budget" in said[0]


def test_the_plan_names_a_hang_its_first_layout_meets_at_the_assumed_container():
    from types import SimpleNamespace

    from moeplan.plan.planner import first_candidate_risk_notes

    # Megatron-FSDP with the optimizer offloaded to the CPU: mfsdp_optimizer_offload_checkpoint_hang affects
    # megatron-core >= 0.18.0, which nemo:26.06 (the container moeplan assumes with none stated) ships
    data = {
        "model": "Qwen/Qwen3-30B-A3B",
        "system": {"gpu": "gb200", "num_gpus": 64},
        "training": {"seq_length": 8192, "micro_batch_size": 1, "global_batch_size": 64},
        "layout": {
            "use_megatron_fsdp": True,
            "data_parallel_sharding_strategy": "optim_grads_params",
            "expert_model_parallel_size": 8,
            "optimizer_cpu_offload": True,
            "optimizer_offload_fraction": 0.5,
            "use_precision_aware_optimizer": True,
        },
    }

    def notes(versions: dict) -> list[str]:
        return first_candidate_risk_notes([SimpleNamespace(scenario=load_scenario({**data, "versions": versions}))])

    assumed = [n for n in notes({}) if "mfsdp_optimizer_offload_checkpoint_hang" in n]
    assert len(assumed) == 1 and "at nemo:26.06, the container moeplan assumes" in assumed[0]
    # a container before the hang's first release: nothing assumed, nothing said
    assert not [n for n in notes({"container": "26.04"}) if "mfsdp_optimizer_offload_checkpoint_hang" in n]
