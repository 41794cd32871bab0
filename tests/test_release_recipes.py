"""The perf recipes of release 26.08 (Megatron Bridge v0.6.0's flat perf recipes) of the models the current
tables have no row of: listed by ``moeplan recipes`` with their release, read by ``--from mbridge-recipe``,
and each checked and estimated without a refusal.

Sequence lengths were read off Bridge v0.6.0 by eye: the Nemotron-3 Super perf recipes
(``perf_recipes/nemotronh/<gpu>/nemotronh.py``) start from ``nemotron_3_super_pretrain_config``, an alias
(``perf_recipes/nemotronh/common.py`` L23-25) of ``recipes/nemotronh/h100/nemotron_3_super.py::
nemotron_3_super_pretrain_16gpu_h100_bf16_config``, which sets ``cfg.model.seq_length = 8192`` (L56); the
DeepSeek-V4-Flash ones start from ``recipes/deepseek/gb200/deepseek_v4.py::
deepseek_v4_flash_pretrain_64gpu_gb200_fp8mx_config``, which starts from the BF16 one setting 4096 (L64).
"""

from __future__ import annotations

import ast
import importlib.util
import pathlib

import pytest
from typer.testing import CliRunner

from moeplan import estimate_memory, estimate_step, load_scenario, validate
from moeplan.catalog.perf_recipes import held_out_runs, listed_release_recipes, perf_recipes
from moeplan.cli.app import app
from moeplan.plan.starting_points import list_recipes, published_scenario

ROOT = pathlib.Path(__file__).resolve().parents[1]
MIRROR = pathlib.Path("/work/.mirror/NVIDIA-NeMo+Megatron-Bridge/repo")
SUPER = "nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-FP8"
NEW_MODELS = {
    "deepseek-ai/DeepSeek-V4-Flash",
    "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16",
    SUPER,
    "nvidia/NVIDIA-Nemotron-3-Ultra-550B-A55B-BF16",
    "nvidia/NVIDIA-Nemotron-3.5-Lightning-30B-A3B-NVFP4",
}


def _importer():
    spec = importlib.util.spec_from_file_location(
        "import_recipe_history_seq", ROOT / "scripts/import_recipe_history.py"
    )
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_new_models_of_release_26_08_are_listed_and_no_model_of_the_current_tables_twice():
    rows = listed_release_recipes()
    assert {r["model"] for r in rows} == NEW_MODELS
    assert not {r["model"] for r in rows} & {r["model"] for r in perf_recipes()}
    # 2 DeepSeek-V4-Flash + 14 Nano + 12 Super + 2 Ultra + 6 Lightning recipe functions at v0.6.0
    assert len(rows) == 36 and all(r["release"] == "26.08" for r in rows)


def test_every_listed_release_recipe_has_a_sequence_length():
    assert all((r["training"] or {}).get("seq_length") for r in listed_release_recipes())


def test_a_sequence_length_left_to_the_model_recipe_is_the_model_recipes_and_says_so():
    rows = [r for r in listed_release_recipes() if r["model"] == SUPER]
    assert len(rows) == 12
    for r in rows:
        assert r["training"]["seq_length"] == 8192
        assert r["extra"]["seq_length_from"].endswith("nemotron_3_super_pretrain_16gpu_h100_bf16_config")
    flash = [r for r in listed_release_recipes() if r["model"] == "deepseek-ai/DeepSeek-V4-Flash"]
    assert [r["training"]["seq_length"] for r in flash] == [4096, 4096]


def test_listed_sequence_lengths_agree_with_the_26_08_summary():
    # the summary's runs (validation only) ran at the sequence length the recipe resolves to
    by_run = {(r["model"], r["gpu"], r["num_gpus"]): r["training"]["seq_length"] for r in held_out_runs()}
    compared = 0
    for r in listed_release_recipes():
        key = (r["model"], r["gpu"], r["num_gpus"])
        if key in by_run:
            assert r["training"]["seq_length"] == by_run[key], r["id"]
            compared += 1
    assert compared >= 10


def test_the_model_recipe_sequence_length_is_read_from_its_source():
    src = """
def base_config():
    cfg = _pretrain_common()
    cfg.model.seq_length = 8192
    return cfg

def long_config():
    cfg = base_config()
    seq_length = 2048
    cfg.model.seq_length = seq_length
    return cfg

def derived_config():
    cfg = base_config()
    cfg.train.micro_batch_size = 2
    return cfg
"""
    fns = {f.name: f for f in ast.parse(src).body if isinstance(f, ast.FunctionDef)}
    read = _importer()._function_seq_length
    assert read(fns["base_config"]) == (8192, "_pretrain_common")
    assert read(fns["long_config"]) == (2048, "base_config")  # a local constant, the later assignment
    assert read(fns["derived_config"]) == (None, "base_config")  # none of its own: its base's


@pytest.mark.skipif(not MIRROR.is_dir(), reason="needs a Megatron Bridge git mirror")
def test_an_alias_and_a_base_recipe_are_followed_to_the_sequence_length():
    mod = _importer()
    found = mod.model_recipe_seq_length(
        str(MIRROR),
        "v0.6.0",
        "megatron.bridge.recipes.deepseek.gb200.deepseek_v4",
        "deepseek_v4_flash_pretrain_64gpu_gb200_fp8mx_config",
    )
    assert found == (
        4096,
        "megatron.bridge.recipes.deepseek.gb200.deepseek_v4.deepseek_v4_flash_pretrain_64gpu_gb200_bf16_config",
    )
    # recipes/deepseek/deepseek_v3.py re-exports the 1024-GPU H100 recipe, which sets 4096 (L120)
    found = mod.model_recipe_seq_length(
        str(MIRROR), "v0.6.0", "megatron.bridge.recipes.deepseek.deepseek_v3", "deepseek_v3_pretrain_config"
    )
    assert found is not None and found[0] == 4096


def test_every_listed_release_recipe_checks_and_estimates_without_a_refusal():
    for r in listed_release_recipes():
        scn = published_scenario(r["id"])
        assert scn["versions"] == {"container": "26.08"}
        s = load_scenario(scn)
        assert not validate(s).errors, r["id"]
        assert estimate_memory(s).peak_bytes > 0
        assert estimate_step(s).tokens_per_s_per_gpu > 0


def test_recipes_lists_a_release_recipe_with_its_release_and_where_its_values_come_from():
    rows = list_recipes("published", SUPER)
    assert len(rows) == 12
    row = next(r for r in rows if r["id"] == "26.08/nemotron_3_super_pretrain_64gpu_gb300_fp8mx_config")
    assert row["release"] == "26.08" and row["family"] == "mbridge 26.08"
    assert row["scenario"]["training"]["seq_length"] == 8192
    assert row["check"]["verdict"] != "invalid" and row["throughput"]["tokens_per_s_per_gpu"] > 0
    assert row["notes"][0].startswith("release 26.08 perf recipe (Megatron Bridge v0.6.0: ")
    assert row["notes"][1].startswith("seq_length 8192 from its model recipe ")


def test_recipes_command_shows_the_release_of_a_release_recipe():
    out = CliRunner().invoke(app, ["recipes", "--kind", "published", "--model", SUPER], env={"COLUMNS": "200"})
    assert out.exit_code == 0
    assert "26.08/nemotron_3_super_pretrain_64gpu_gb300_fp8mx_config (published, release 26.08)" in out.output


def test_estimate_reads_a_release_recipe_by_its_id():
    out = CliRunner().invoke(
        app, ["estimate", "--from", "mbridge-recipe", "26.08/deepseek_v4_flash_pretrain_128gpu_gb300_fp8mx_config"]
    )
    assert out.exit_code == 0, out.output
    assert "DeepSeek-V4-Flash" in out.output
