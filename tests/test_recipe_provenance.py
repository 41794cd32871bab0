"""Recipe provenance as data: ``recipe_defaults: mbridge-perf`` fills are a structured record on the
resolved scenario (row, table, commit, source file/function, precision, borrowed, and per key the
value and the helper that set it); the printed reasons are unchanged and the export reads the record,
never the prose. Also: ``moeplan.resolve.load`` keeps every name it had before the split."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from moeplan import load_scenario
from moeplan.inputs.provenance import FILL_SOURCES, RecipeProvenance
from moeplan.io.export import matched_recipe

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "deepseek_v3_gb300.yaml"
GOLDEN_RECIPE = "megatron.bridge.perf_recipes.deepseek.gb300.deepseek_v3:deepseek_v3_pretrain_256gpu_gb300_fp8mx_config"


def test_the_example_carries_its_row_and_each_fills_source():
    s = load_scenario(EXAMPLE)
    rec = s.recipe
    assert isinstance(rec, RecipeProvenance) and rec.name == "mbridge-perf"
    row = rec.row
    assert (row.id, row.table, row.ref, row.file) == (
        "deepseek_v3/256gpu_gb300_fp8mx",
        "A",
        "067f987",
        "deepseek/gb300/deepseek_v3.py",
    )
    assert row.precisions == ("mxfp8",) and row.precision == "mxfp8" and not row.borrowed
    assert row.function == GOLDEN_RECIPE
    src = {f.key: f.source for f in rec.fills}
    assert src["grad_reduce_in_fp32"] == "_benchmark_common"
    assert src["fp8_param_gather"] == "_perf_precision"
    assert src["main_grads_dtype"] == "base_recipe"
    assert src["cuda_graph_impl"] == "row"
    assert set(src.values()) <= set(FILL_SOURCES)
    # stated keys are not in the applied record
    assert "recompute_granularity" not in rec.filled_keys() and "moe_token_dispatcher_type" not in rec.filled_keys()


def test_printed_reasons_are_the_records_text_in_order():
    s = load_scenario(EXAMPLE)
    printed = [r for r in s.summary()["resolved_defaults"] if r["reason"].startswith("recipe fill: ")]
    assert printed == [{"key": f.key, "value": f.value, "reason": "recipe fill: " + f.reason} for f in s.recipe.fills]
    assert printed[0]["reason"] == "recipe fill: recipe deepseek_v3/256gpu_gb300_fp8mx (Table A @067f987)"


def test_export_reads_the_record_not_the_prose():
    s = load_scenario(EXAMPLE)
    assert matched_recipe(s) == GOLDEN_RECIPE
    # the prose removed: the record still names the recipe
    assert matched_recipe(dataclasses.replace(s, resolutions=[])) == GOLDEN_RECIPE
    # the record removed: the prose alone names nothing
    assert matched_recipe(dataclasses.replace(s, recipe=None)) is None
    # a record whose row filled nothing (every row key stated) names no recipe
    only_helpers = dataclasses.replace(s.recipe, fills=tuple(f for f in s.recipe.fills if f.source != "row"))
    assert matched_recipe(dataclasses.replace(s, recipe=only_helpers)) is None


def test_a_borrowed_row_is_marked_and_lends_no_precision_key():
    from moeplan.catalog.perf_recipes import PRECISION_KEYS

    s = load_scenario(
        {
            "model": "Qwen/Qwen3-235B-A22B",
            "system": {"gpu": "h100", "num_gpus": 256},
            "training": {
                "seq_length": 4096,
                "micro_batch_size": 1,
                "global_batch_size": 8192,
                "precision": "fp8-blockwise",
            },
            "layout": {
                "tensor_model_parallel_size": 2,
                "pipeline_model_parallel_size": 8,
                "virtual_pipeline_model_parallel_size": 4,
                "expert_model_parallel_size": 32,
            },
            "recipe_defaults": "mbridge-perf",
        }
    )
    row = s.recipe.row
    assert row.id == "qwen3_235b_a22b/256gpu_h100_fp8cs" and row.borrowed and row.precision == "fp8-blockwise"
    assert "no fp8-blockwise row for this layout, fp8-tensorwise row's knobs" in row.reason
    assert not any(f.source == "row" and f.key in PRECISION_KEYS for f in s.recipe.fills)


def test_a_table_b_row_names_no_recipe_function():
    """DeepSeek-V3 TP1 PP2 EP64 on VR200 has only a legacy workload config (Table B @v0.5.1)."""
    from moeplan.catalog import get_model
    from moeplan.resolve.recipe_fills import recipe_provenance

    layout = {
        "tensor_model_parallel_size": 1,
        "pipeline_model_parallel_size": 2,
        "virtual_pipeline_model_parallel_size": 8,
        "context_parallel_size": 1,
        "expert_model_parallel_size": 64,
    }
    rec = recipe_provenance("mbridge-perf", get_model("deepseek-ai/DeepSeek-V3"), "bf16", 2, 8, "vr200", layout, 1, 128)
    assert rec.row.id == "DEEPSEEK_V3/VR200/V1/BF16+FP8_CS+FP8_MX+NVFP4"
    assert (rec.row.table, rec.row.ref, rec.row.function) == ("B", "v0.5.1", None)
    assert rec.row.reason.startswith("recipe DEEPSEEK_V3/VR200/V1/BF16+FP8_CS+FP8_MX+NVFP4 (Table B @v0.5.1")
    assert rec.to_dict()["row"]["table"] == "B"


def test_no_recipe_defaults_no_record():
    s = load_scenario({**_dsv3_request(), "recipe_defaults": "none"})
    assert s.recipe is None
    assert not any(r.reason.startswith("recipe fill") for r in s.resolutions)


def test_the_resolved_scenario_is_frozen():
    s = load_scenario(EXAMPLE)
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.num_gpus = 8  # type: ignore[misc]


def test_a_record_passed_in_is_applied_without_matching_a_row():
    """``load_scenario(..., recipe=record)`` applies the given record: the scenario's own layout
    (here the 64-GPU FSDP row's sizes) matches no row."""
    from moeplan.inputs.schema import scenario_from_dict
    from moeplan.resolve.defaults import resolve_model
    from moeplan.resolve.recipe_fills import recipe_for_input

    data = {
        **_dsv3_request(),
        "layout": {
            "tensor_model_parallel_size": 1,
            "pipeline_model_parallel_size": 1,
            "expert_model_parallel_size": 64,
        },
    }
    own = load_scenario(data)
    assert own.recipe.row.id == "deepseek_v3/64gpu_gb300_fp8mx_fsdp" and own.layout.use_megatron_fsdp
    inp = scenario_from_dict(_dsv3_request())
    free = recipe_for_input(inp, resolve_model(inp), match_row=False)
    assert free.row is None
    given = load_scenario(data, recipe=free)
    assert given.recipe.row is None and not given.layout.use_megatron_fsdp
    # every unconditional fill applies; the full-iteration companion does not (no such graph here)
    assert [f.key for f in given.recipe.fills] == [f.key for f in free.fills if f.requires is None]


def _dsv3_request() -> dict:
    return {
        "recipe_defaults": "mbridge-perf",
        "model": "deepseek-ai/DeepSeek-V3",
        "system": {"gpu": "gb300", "num_gpus": 256},
        "training": {"seq_length": 4096, "micro_batch_size": 1, "global_batch_size": 4096, "precision": "mxfp8"},
    }
