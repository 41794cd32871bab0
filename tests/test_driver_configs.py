"""The importers of the configurations of Megatron's drivers (Megatron-LM MoE recipes, verl, slime,
NeMo-RL, ms-swift, SkyRL) on their real, vendored files (tests/data/recipes/, PROVENANCE.md), and the
``framework:`` axis that names the driver. Expected values are read off the files by hand."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import get_args

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from moeplan.api.check import check_report
from moeplan.cli import render
from moeplan.errors import InputError
from moeplan.inputs.schema import ScenarioInput
from moeplan.io.driver_configs import DRIVER_SOURCES, import_any, moe_layer_pattern
from moeplan.io.export import to_megatron_lm
from moeplan.io.imports import import_config
from moeplan.resolve.frameworks import DRIVERS, FRAMEWORK_NAMES
from moeplan.resolve.load import load_scenario
from moeplan.rules import validate

DATA = Path(__file__).parent / "data" / "recipes"
RECIPES = sorted((DATA / "megatron_lm").rglob("*.yaml"))


def _read(*parts: str) -> str:
    return "\n".join((DATA / p).read_text(encoding="utf-8") for p in parts)


# --- one real config per driver ---------------------------------------------------------------------


def test_megatron_lm_recipe_maps_args_model_and_fixups():
    # qwen3_30b/h100/fp8_32GPU_TP1PP1EP8.yaml: TP1 EP8 with sequence_parallel: true, fp8 tensorwise
    sc, notes = import_any(_read("megatron_lm/qwen3_30b/h100/fp8_32GPU_TP1PP1EP8.yaml"), "megatron-lm-yaml")
    assert sc["framework"] == "megatron-lm"
    assert sc["training"]["seq_length"] == 4096
    assert sc["layout"]["expert_model_parallel_size"] == 8
    assert sc["layout"]["sequence_parallel"] is False  # Megatron-LM turns SP off with TP = 1
    assert any("sequence_parallel = False" in n for n in notes)
    model = sc["model_overrides"]
    assert (model["num_layers"], model["hidden_size"], model["num_moe_experts"], model["moe_router_topk"]) == (
        48,
        2048,
        128,
        8,
    )
    assert model["num_query_groups"] == 4  # group_query_attention with num_query_groups 4
    assert sc["environment"]["PYTORCH_CUDA_ALLOC_CONF"].startswith("expandable_segments:True")


def test_megatron_lm_recipe_derives_vpp_from_layers_per_virtual_stage():
    # qwen3_235b/b200: 94 layers + embedding + loss = 96 over PP 4 = 24 per rank, 2 per virtual stage
    sc, notes = import_any(_read("megatron_lm/qwen3_235b/b200/mxfp8_128GPU_TP2PP4EP16.yaml"), "megatron-lm-yaml")
    assert sc["layout"]["virtual_pipeline_model_parallel_size"] == 12
    assert sc["training"]["precision"] == "mxfp8"


def test_megatron_lm_recipe_derives_vpp_from_pipeline_layout():
    # deepseek_v3/h100/fp8: 'Et*3|(tt|)*29m|L' is 32 virtual stages over PP 8 → VPP 4
    sc, _ = import_any(_read("megatron_lm/deepseek_v3/h100/fp8_1024GPU_TP2PP8EP64.yaml"), "megatron-lm-yaml")
    assert sc["layout"]["virtual_pipeline_model_parallel_size"] == 4
    assert sc["model_overrides"]["moe_layers"] == [False] * 3 + [True] * 58  # ([0]*3+[1]*58)


def test_verl_trainer_config_reads_the_actor_megatron_section():
    sc, notes = import_any(_read("verl/_generated_ppo_megatron_trainer.yaml"), "verl-yaml")
    assert sc["framework"] == "verl"
    lay = sc["layout"]
    assert lay["tensor_model_parallel_size"] == 1 and lay["use_distributed_optimizer"] is True
    assert lay["sequence_parallel"] is False  # sequence_parallel: true, TP 1: verl turns it off
    assert any("verl turns sequence parallelism off" in n for n in notes)
    assert lay["recompute_modules"] == ["core_attn"] and lay["attention_backend"] == "flash"
    assert sc["training"]["packed_sequences"] is True  # use_remove_padding: true
    assert sc["training"]["seq_length"] == 1024  # max_prompt_length 512 + max_response_length 512
    assert sc["system"] == {"num_gpus": 8, "gpus_per_node": 8}  # trainer.nnodes 1 × n_gpus_per_node 8
    assert any("0.5 of each GPU" in n for n in notes)  # rollout.gpu_memory_utilization 0.5


def test_slime_scripts_read_megatron_flags_and_slime_settings():
    sc, notes = import_any(_read("slime/models/qwen3-30B-A3B.sh", "slime/run-qwen3-30B-A3B.sh"), "slime-args")
    lay = sc["layout"]
    assert (lay["tensor_model_parallel_size"], lay["expert_model_parallel_size"]) == (4, 8)
    assert lay["sequence_parallel"] is True and lay["recompute_granularity"] == "full"
    assert lay["optimizer_cpu_offload"] is True
    assert sc["training"] == {"global_batch_size": 256, "variable_length": True}
    assert sc["system"] == {"num_gpus": 8, "gpus_per_node": 8}  # --actor-num-nodes 1 × 8
    assert sc["model_overrides"]["num_moe_experts"] == 128
    assert any("rollout_batch_size: slime's own" in n for n in notes)
    s = load_scenario(sc)
    assert s.layout.use_distributed_optimizer is True  # slime always turns it on


def test_nemo_rl_config_reads_policy_megatron_cfg_on_bridge():
    sc, notes = import_any(_read("nemo_rl/grpo_math_qwen30ba3b_megatron.yaml"), "nemo-rl-yaml")
    assert sc["model"] == "Qwen/Qwen3-30B-A3B"
    assert (sc["layout"]["tensor_model_parallel_size"], sc["layout"]["expert_model_parallel_size"]) == (2, 8)
    assert sc["training"]["global_batch_size"] == 512 and sc["training"]["seq_length"] == 4096
    assert sc["system"] == {"num_gpus": 64, "gpus_per_node": 8}
    s = load_scenario(sc)
    assert (s.framework, s.driver) == ("megatron-bridge", "nemo-rl")
    assert s.layout.moe_token_dispatcher_type == "alltoall"
    assert any(r.key == "moe_router_load_balancing_type" and "nemo-rl" in r.reason for r in s.resolutions)


def test_ms_swift_command_reads_underscored_flags_and_swift_defaults():
    sc, notes = import_any(_read("ms_swift/qwen3_moe.sh"), "ms-swift-args")
    lay = sc["layout"]
    assert (lay["pipeline_model_parallel_size"], lay["expert_model_parallel_size"]) == (2, 8)
    assert lay["sequence_parallel"] is False  # stated true, TP 1: Megatron-LM turns it off
    assert sc["training"] == {
        "micro_batch_size": 1,
        "global_batch_size": 16,
        "packed_sequences": True,
        "seq_length": 8192,
    }
    assert sc["environment"] == {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
    assert "model" not in sc  # Qwen3-30B-A3B-Base is not a built-in model: said, not guessed
    assert any("Qwen3-30B-A3B-Base" in n for n in notes)


def test_skyrl_overrides_substitute_script_variables():
    sc, notes = import_any(_read("skyrl/run_dapo_qwen3_30b_a3b_megatron_aime.sh"), "skyrl-overrides")
    lay = sc["layout"]
    assert (
        lay["tensor_model_parallel_size"],
        lay["expert_model_parallel_size"],
        lay["expert_tensor_parallel_size"],
    ) == (
        4,
        8,
        1,
    )  # MEGATRON_TP=4, MEGATRON_EP=8, MEGATRON_ETP=1
    assert sc["system"] == {"num_gpus": 16, "gpus_per_node": 8}  # NUM_NODES=2 × NUM_GPUS_PER_NODE=8
    assert sc["training"]["micro_batch_size"] == 2
    assert load_scenario({**sc, "model": "Qwen/Qwen3-30B-A3B"}).framework == "megatron-bridge"


# --- every vendored Megatron-LM MoE recipe ------------------------------------------------------------

#: error findings the recipes earn, each a fact of Megatron-LM or of the recipe itself:
#: Megatron-LM main refuses --cross-entropy-fusion-impl te with --cross-entropy-loss-fusion
#: (arguments.py: "Transformer Engine cross entropy loss fusion is disabled due to stability issues")
#: each recipe is checked against the megatron-core of its commit (package_info.py there): the commits
#: with Megatron-LM 168cb15 (0.19.0-numbered) refuse TE cross-entropy fusion, the 0.18.0-numbered ones do not
TE_CE = "loss.te_cross_entropy_fusion"
EXPECTED_ERRORS = {
    "deepseek_v3/b200/mxfp8_256GPU_TP1PP8EP32.yaml": {TE_CE},
    "deepseek_v3/h100/bf16_1024GPU_TP1PP16EP64.yaml": {"pipeline.num_layers_divisible_by_pp"},  # 61 layers, PP 16
    "deepseek_v4_flash/gb200/mxfp8_SL4K_128GPU_TP1PP2EP64.yaml": {TE_CE},
    "deepseek_v4_flash/gb300/mxfp8_SL4K_128GPU_TP1PP1EP64.yaml": {TE_CE},
    "qwen3_235b/b200/mxfp8_128GPU_TP2PP4EP16.yaml": {TE_CE},
    "qwen3_235b/b300/mxfp8_128GPU_TP2PP1EP16_partial_cg.yaml": {"graphs.expandable_segments", TE_CE},
    "qwen3_30b/gb200/bf16_16GPU_TP1PP1EP16.yaml": {TE_CE},
    "qwen3_30b/h100/fp8_32GPU_TP1PP1EP8.yaml": {TE_CE},
}
#: the recipes of a model moeplan does not model, and the feature named (DeepSeek-V4's are modelled:
#: tests/test_deepseek_v4.py)
NOT_MODELLED: dict[str, tuple[str, ...]] = {}


def test_all_moe_recipes_are_vendored():
    assert len(RECIPES) == 23 and (DATA / "megatron_lm" / "README.md").is_file()


@pytest.mark.parametrize("path", RECIPES, ids=lambda p: str(p.relative_to(DATA / "megatron_lm")))
def test_every_moe_recipe_imports_and_checks(path):
    rel = str(path.relative_to(DATA / "megatron_lm"))
    family = rel.split("/")[0]
    if family in NOT_MODELLED:
        with pytest.raises(InputError) as exc:
            import_any(path.read_text(encoding="utf-8"), "megatron-lm-yaml")
        assert exc.value.field in NOT_MODELLED[family] and "not modelled" in str(exc.value)
        return
    sc, notes = import_any(path.read_text(encoding="utf-8"), "megatron-lm-yaml")
    unknown = [n for n in notes if " dropped: " in n and "magnitude" not in n]
    assert unknown == []  # every key is mapped or kept in layout under its Megatron name
    errors = {f.rule_id for f in validate(load_scenario(sc)).findings if f.severity == "error"}
    assert errors == EXPECTED_ERRORS.get(rel, set())


def test_moe_recipe_sample_counts_are_kept():
    # train_samples 585937500, lr_decay_samples 584765624: Megatron-LM counts, far above a parallel size
    sc, notes = import_any(_read("megatron_lm/deepseek_v3/b200/mxfp8_256GPU_TP1PP8EP32.yaml"), "megatron-lm-yaml")
    assert sc["layout"].get("train_samples") == 585937500 and sc["layout"].get("lr_decay_samples") == 584765624
    assert not [n for n in notes if " dropped: " in n]


def _same(a, b) -> bool:
    """Equal as Megatron-LM reads them: an absent store_true switch is false, a one-item list its item."""
    a, b = (x[0] if isinstance(x, list) and len(x) == 1 else x for x in (a, b))
    return a == b or (a in (None, False) and b in (None, False))


@pytest.mark.parametrize("path", [p for p in RECIPES if p.parts[-3] not in NOT_MODELLED], ids=lambda p: p.name)
def test_moe_recipe_round_trips_through_megatron_lm_export(path):
    sc, _ = import_any(path.read_text(encoding="utf-8"), "megatron-lm-yaml")
    text, _ = to_megatron_lm(load_scenario(sc))
    back, _ = import_config(text, "megatron-lm-args")
    lost = {k: (v, back["layout"].get(k)) for k, v in sc["layout"].items() if not _same(v, back["layout"].get(k))}
    assert lost == {}
    for key in ("seq_length", "micro_batch_size", "global_batch_size", "precision"):
        assert back["training"].get(key) == sc["training"].get(key), key


def test_paged_stash_has_a_megatron_lm_flag():
    sc, _ = import_any(_read("megatron_lm/qwen3_30b/gb200/mxfp8_16GPU_TP1PP1EP16_paged_stash.yaml"), "megatron-lm-yaml")
    text, notes = to_megatron_lm(load_scenario(sc))
    assert "--moe-paged-stash" in text.split() and not any("moe_paged_stash" in n for n in notes)


# --- the framework axis ----------------------------------------------------------------------------


def test_megatron_lm_framework_turns_sp_off_with_tp1_and_says_so():
    s = load_scenario({"framework": "megatron-lm", "layout": {"sequence_parallel": True}})
    assert s.layout.sequence_parallel is False and s.framework == "megatron-core" and s.driver == "megatron-lm"
    assert any(r.key == "sequence_parallel" and "TP = 1" in r.reason for r in s.resolutions)
    assert s.summary()["driver"] == "megatron-lm"


def test_base_framework_names_no_driver():
    s = load_scenario({"framework": "megatron-core"})
    assert s.driver == "megatron-core" and "driver" not in s.summary()


def test_colocating_driver_states_the_rollout_memory():
    s = load_scenario({"framework": "verl"})
    assert any(r.key == "system.reserved_gib" and "rollout" in r.reason for r in s.resolutions)
    assert not any(
        r.key == "system.reserved_gib"
        for r in load_scenario({"framework": "verl", "system": {"reserved_gib": 20}}).resolutions
    )


def test_unknown_framework_is_an_input_error_naming_the_allowed():
    with pytest.raises(InputError) as exc:
        load_scenario({"framework": "deepspeed"})
    assert exc.value.field == "framework" and "slime" in exc.value.allowed


def test_moe_layer_freq_forms():
    assert moe_layer_pattern("([0]*3+[1]*2)", None) == [0, 0, 0, 1, 1]
    assert moe_layer_pattern(2, 4) == [1, 0, 1, 0]
    assert moe_layer_pattern("[1,0]*2", None) == [1, 0, 1, 0]
    assert moe_layer_pattern("__import__('os')", None) is None


def test_unknown_from_format_lists_every_format():
    with pytest.raises(InputError) as exc:
        import_any("x", "verl")
    assert "skyrl-overrides" in exc.value.allowed and "mbridge-yaml" in exc.value.allowed


# --- any text gives a result or an input error ------------------------------------------------------


@pytest.mark.parametrize("source", DRIVER_SOURCES)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(max_size=300))
def test_any_text_gives_a_scenario_or_an_input_error(source, text):
    try:
        sc, notes = import_any(text, source)
    except InputError:
        return
    assert isinstance(sc, dict) and isinstance(notes, list)


@pytest.mark.parametrize("source", DRIVER_SOURCES)
@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_mutated_real_configs_give_a_scenario_or_an_input_error(source, data):
    base = {
        "megatron-lm-yaml": "megatron_lm/qwen3_30b/h100/bf16_32GPU_TP1PP1EP8.yaml",
        "verl-yaml": "verl/_generated_ppo_megatron_trainer.yaml",
        "slime-args": "slime/run-qwen3-30B-A3B.sh",
        "nemo-rl-yaml": "nemo_rl/grpo_math_qwen30ba3b_megatron.yaml",
        "ms-swift-args": "ms_swift/qwen3_moe.sh",
        "skyrl-overrides": "skyrl/run_dapo_qwen3_30b_a3b_megatron_aime.sh",
    }[source]
    text = _read(base)
    cut = data.draw(st.integers(0, len(text)))
    junk = data.draw(st.text(max_size=40))
    with contextlib.suppress(InputError):
        import_any(text[:cut] + junk + text[cut:], source)


def test_check_loads_a_catalog_perf_recipe_by_its_id():
    doc = check_report(Path("deepseek_v3/64gpu_gb300_bf16_fsdp"), None, "mbridge-recipe")
    assert doc["scenario"]["parallel"]["EP"] == 64 and doc["scenario"]["num_gpus"] == 64
    assert any("deepseek_v3/64gpu_gb300_bf16_fsdp" in n for n in doc["import_notes"])
    with pytest.raises(InputError) as exc:
        check_report(Path("deepseek_v3/64gpu_gb300_bf16"), None, "mbridge-recipe")
    assert "deepseek_v3/64gpu_gb300_bf16_fsdp" in str(exc.value)


def test_check_reads_a_driver_config_and_names_the_driver(tmp_path):
    doc = check_report(DATA / "nemo_rl" / "grpo_math_qwen30ba3b_megatron.yaml", None, "nemo-rl-yaml")
    assert doc["scenario"]["framework"] == "megatron-bridge" and doc["scenario"]["driver"] == "nemo-rl"


def test_every_framework_name_has_its_driver_facts():
    names = get_args(ScenarioInput.model_fields["framework"].annotation)
    assert names == FRAMEWORK_NAMES and set(DRIVERS) == set(names)
    assert all(DRIVERS[n].base in ("megatron-core", "megatron-bridge") and DRIVERS[n].source for n in names)


def test_driver_defaults_name_their_source_and_leave_stated_keys():
    s = load_scenario(
        {"framework": "ms-swift", "model": "Qwen/Qwen3-30B-A3B", "layout": {"recompute_granularity": "full"}}
    )
    assert s.layout.recompute_granularity == "full"  # stated: ms-swift's selective default not applied
    fill = next(
        r for r in s.resolutions if r.key == "moe_token_dispatcher_type" or r.key == "cross_entropy_loss_fusion"
    )
    assert "ms-swift" in fill.reason and "megatron_args.py" in fill.reason


def test_driver_moe_defaults_skip_a_dense_model():
    s = load_scenario({"framework": "ms-swift", "model_overrides": {"num_layers": 4, "hidden_size": 512}})
    assert s.layout.moe_token_dispatcher_type is None and s.layout.moe_grouped_gemm is None


def test_import_notes_print_in_chinese(capsys):
    _, notes = import_any(_read("ms_swift/qwen3_moe.sh"), "ms-swift-args")
    render.set_lang("zh")
    try:
        render.print_lines("note", notes)
    finally:
        render.set_lang("en")
    err = capsys.readouterr().err
    assert "ms-swift 自身的设置，不是 Megatron 键" in err and "Megatron-LM 参数修正" in err


def test_verl_reads_megatron_optimizer_fields_from_the_actor_optim_overrides():
    # verl passes actor.optim.override_optimizer_config to Megatron's OptimizerConfig: the CPU optimizer
    text = _read("verl/_generated_ppo_megatron_trainer.yaml").replace(
        "      override_optimizer_config: {}\n    megatron:",
        "      override_optimizer_config: {optimizer_cpu_offload: true, optimizer_offload_fraction: 1.0,"
        " use_precision_aware_optimizer: true}\n    megatron:",
        1,
    )
    sc, _ = import_any(text, "verl-yaml")
    lay = sc["layout"]
    assert lay["optimizer_cpu_offload"] is True and lay["optimizer_offload_fraction"] == 1.0
    assert lay["use_precision_aware_optimizer"] is True


def test_nemo_rl_activation_checkpointing_is_full_recompute_of_every_layer():
    # nemo_rl/models/megatron/setup.py _apply_performance_config: full, uniform, 1 layer, whatever else is set
    text = _read("nemo_rl/grpo_math_qwen30ba3b_megatron.yaml").replace(
        "    sequence_parallel: True\n",
        "    sequence_parallel: True\n    activation_checkpointing: true\n    recompute_granularity: selective\n",
        1,
    )
    sc, notes = import_any(text, "nemo-rl-yaml")
    lay = sc["layout"]
    assert (lay["recompute_granularity"], lay["recompute_method"], lay["recompute_num_layers"]) == (
        "full",
        "uniform",
        1,
    )
    assert any("activation_checkpointing: true recomputes every layer in full" in n for n in notes)
    plain, _ = import_any(text.replace("    activation_checkpointing: true\n", "", 1), "nemo-rl-yaml")
    assert "recompute_granularity" not in plain["layout"]  # NeMo-RL applies no recompute key without it


def test_nemo_rl_own_settings_are_said_not_garbled():
    text = _read("nemo_rl/grpo_math_qwen30ba3b_megatron.yaml").replace(
        "    sequence_parallel: True\n", "    sequence_parallel: True\n    defer_fp32_logits: true\n", 1
    )
    _, notes = import_any(text, "nemo-rl-yaml")
    said = [n for n in notes if "defer_fp32_logits" in n]
    assert said == ["defer_fp32_logits: nemo-rl's own setting, not a Megatron key (ignored)"]


def test_verl_takes_the_model_its_actor_names():
    text = _read("verl/_generated_ppo_megatron_trainer.yaml")
    sc, notes = import_any(text, "verl-yaml")
    assert "model" not in sc and any("deepseek-llm-7b-chat" in n for n in notes)  # a local path: said
    sc, _ = import_any(text.replace("~/models/deepseek-llm-7b-chat", "Qwen/Qwen3-30B-A3B"), "verl-yaml")
    assert sc["model"] == "Qwen/Qwen3-30B-A3B"
