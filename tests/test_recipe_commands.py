"""``estimate`` and ``plan`` on a foreign configuration (``--from``), and what the Megatron-LM recipe
importer reads the way Megatron-LM's launcher does: the vocabulary from the tokenizer, THD packing from
the sequence-packing scheduler, recipe keys that are flags. Recipes: tests/data/recipes/megatron_lm
(PROVENANCE.md); expected values read off the files by hand."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from moeplan.api.estimate import estimate_report
from moeplan.api.plan import fixed_held_settings, plan_report
from moeplan.catalog.models import get_model
from moeplan.cli.app import app
from moeplan.inputs.megatron_keys import key_status
from moeplan.inputs.overrides import ScenarioFlags
from moeplan.io.driver_configs import import_any, tokenizer_model_id
from moeplan.resolve.load import load_scenario
from moeplan.rules import validate

RECIPES = Path(__file__).parent / "data" / "recipes" / "megatron_lm"
QWEN30 = RECIPES / "qwen3_30b" / "h100" / "fp8_32GPU_TP1PP1EP8.yaml"
DSV4_64K = RECIPES / "deepseek_v4_flash" / "gb200" / "mxfp8_THD64K_128GPU_TP1PP2EP64CP16.yaml"
runner = CliRunner()


def _import(path: Path) -> tuple[dict, list[str]]:
    return import_any(path.read_text(encoding="utf-8"), "megatron-lm-yaml")


def test_recipe_vocabulary_comes_from_its_tokenizer():
    # ARGS give the architecture but no vocabulary; tokenizer_model: Qwen/Qwen3-30B-A3B (vocab 151936)
    sc, notes = _import(QWEN30)
    assert sc["model_overrides"]["vocab_size"] == 151936 == get_model("Qwen/Qwen3-30B-A3B").vocab_size
    assert any("tokenizer_model Qwen/Qwen3-30B-A3B" in n for n in notes)


def test_a_reuploaded_tokenizer_names_the_catalog_model_of_the_same_name():
    assert tokenizer_model_id("unsloth/DeepSeek-V3") == "deepseek-ai/DeepSeek-V3"
    assert tokenizer_model_id("someone/NotAModel") is None and tokenizer_model_id(None) is None


def test_sequence_packing_scheduler_means_thd_packing_padded_as_stated():
    # sequence_packing_scheduler: dp_balanced, pad_packed_seq_alignment: max
    sc, notes = _import(DSV4_64K)
    assert sc["training"]["packed_sequences"] is True and sc["training"]["pad_to_max_length"] is True
    assert sum("sequence_packing_scheduler" in n or "pad_packed_seq_alignment" in n for n in notes) == 2


def test_a_recipe_key_that_is_a_flag_of_the_release_is_accepted():
    # --norm-epsilon sets layernorm_epsilon from 0.16 on (ArgumentGroupFactory arg_names); the dest
    # norm_epsilon exists only up to 0.15.3
    assert key_status("norm_epsilon", mcore="0.20.0.dev0") == "accepted"
    assert key_status("norm_epsilon", mcore="0.14.0") == "accepted"
    assert key_status("norm_epsilonn", mcore="0.20.0.dev0") == "unknown"


def test_dev_only_partition_key_is_refused_only_for_a_stated_release():
    # cp_partition_mode exists only on megatron-core's dev branch: a stated release refuses it, a stated
    # dev build has it, and with no version stated it is accepted (its own rule warns: dev only)
    sc, _ = _import(DSV4_64K)
    sc["system"] = {"gpu": "gb200", "num_gpus": 128}

    def errors(version: str | None) -> set[str]:
        scn = load_scenario({**sc, "versions": {"megatron_core": version}} if version else sc)
        return {f.rule_id for f in validate(scn).errors}

    # (the recipe's other dev-only keys make a stated release an input error: a plain scenario here)
    released = {"model": "deepseek-ai/DeepSeek-V4-Flash", "layout": {"cp_partition_mode": "zigzag"}}
    at_release = validate(load_scenario({**released, "versions": {"megatron_core": "0.19.0"}}))
    assert "scenario.keys_vs_version" in at_release.rule_ids("error")
    assert errors("0.20.0.dev0") == set() and errors(None) == set()
    warned = {f.rule_id for f in validate(load_scenario(sc)).findings if f.severity == "warning"}
    assert "sequence.cp_partition_mode" in warned


def test_estimate_reads_a_recipe_and_states_the_fix_it_applied():
    flags = ScenarioFlags(gpu="h100", num_gpus=32)
    rep = estimate_report(QWEN30, flags, from_format="megatron-lm-yaml")
    doc = rep.document
    assert doc["fixed"]["edits"] == {"cross_entropy_fusion_impl": "native"}
    assert doc["fixed"]["rule_ids"] == ["loss.te_cross_entropy_fusion"]
    assert doc["throughput"]["tokens_per_s_per_gpu"] > 0 and doc["import_notes"]


def test_plan_holds_the_recipe_with_the_checks_fix_of_a_held_setting():
    out = plan_report(QWEN30, ScenarioFlags(gpu="h100", num_gpus=32), top=1, from_format="megatron-lm-yaml")
    assert out["candidates"] and out["import_notes"]
    assert any("cross_entropy_fusion_impl: native" in n for n in out["notes"])
    best = out["candidates"][0]["layout"]
    assert (best["tensor_model_parallel_size"], best["expert_model_parallel_size"]) == (1, 8)


def test_fixed_held_settings_leave_a_valid_request_and_unstated_keys_alone():
    # Megatron-LM refuses TE's cross-entropy fusion from 0.19 (Bridge only warns)
    ok = {
        "model": "Qwen/Qwen3-30B-A3B",
        "framework": "megatron-lm",
        "system": {"gpu": "h100", "num_gpus": 8},
        "layout": {},
    }
    assert fixed_held_settings(ok) == (ok, None)
    bad = {**ok, "layout": {"cross_entropy_loss_fusion": True, "cross_entropy_fusion_impl": "te"}}
    fixed, note = fixed_held_settings(bad)
    assert fixed["layout"]["cross_entropy_fusion_impl"] == "native" and note is not None
    # below megatron-core 0.19 the same setting is a warning: nothing to fix
    older = {**bad, "versions": {"megatron_core": "0.18.2"}}
    assert fixed_held_settings(older) == (older, None)


def test_estimate_and_plan_take_from_on_the_command_line():
    args = [str(QWEN30), "--from", "megatron-lm-yaml", "--gpu", "h100", "--num-gpus", "32"]
    est = runner.invoke(app, ["estimate", *args])
    assert est.exit_code == 1 and "model TFLOP/s/GPU" in est.output  # the recipe breaks a rule as given
    assert "estimated with the check's fix" in est.output
    plan = runner.invoke(app, ["plan", *args, "--top", "1"])
    assert plan.exit_code == 0 and "planned with the check's fix" in plan.output
    bad = runner.invoke(app, ["estimate", str(QWEN30), "--from", "no-such-format"])
    assert bad.exit_code == 2 and "megatron-lm-yaml" in bad.output
