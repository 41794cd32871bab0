"""Release 26.08 (Megatron Bridge v0.6.0): its perf recipes in the per-release table and its performance
summary as a held-out release.

The summary rows below were read off ``docs/performance-summary.md`` at tag v0.6.0 ("26.08 NeMo
Container", every table row; ``git show v0.6.0:docs/performance-summary.md``): model, system, GPU count,
precision, published model TFLOP/s per GPU. The recipe spot values were read off
``src/megatron/bridge/perf_recipes/<family>/<gpu>/*.py`` at v0.6.0 by eye.
"""

from __future__ import annotations

import importlib.util
import json
import math
import pathlib
import sys

import pytest

import moeplan
from moeplan.catalog.models import resolve_model_name
from moeplan.catalog.perf_recipes import (
    held_out_releases,
    held_out_runs,
    match_perf_recipe,
    perf_recipe_history,
    published_runs,
)
from moeplan.errors import InputError

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import held_out_release  # noqa: E402

DSV3 = "deepseek-ai/DeepSeek-V3"
DSV4_FLASH = "deepseek-ai/DeepSeek-V4-Flash"
GPT_OSS = "openai/gpt-oss-120b"
Q30 = "Qwen/Qwen3-30B-A3B"
Q235 = "Qwen/Qwen3-235B-A22B"
NANO = "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16"
LIGHTNING = "nvidia/NVIDIA-Nemotron-3.5-Lightning-30B-A3B-NVFP4"
SUPER = "nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-FP8"
ULTRA = "nvidia/NVIDIA-Nemotron-3-Ultra-550B-A55B-BF16"

#: every row of the 26.08 summary: (model, gpu, GPUs, precision, published model TFLOP/s per GPU)
SUMMARY_26_08 = [
    (DSV3, "gb300", 256, "mxfp8", 1635),
    (DSV3, "gb200", 256, "mxfp8", 1276),
    (DSV4_FLASH, "gb300", 128, "mxfp8", 748),
    (DSV4_FLASH, "gb200", 128, "mxfp8", 706),
    (GPT_OSS, "gb300", 64, "mxfp8", 1077),
    (GPT_OSS, "gb200", 64, "mxfp8", 934),
    (Q30, "gb300", 8, "mxfp8", 1029),
    (Q30, "gb200", 8, "mxfp8", 923),
    (Q235, "gb300", 256, "mxfp8", 1306),
    (Q235, "gb200", 256, "mxfp8", 1077),
    (NANO, "gb300", 8, "mxfp8", 901),
    (LIGHTNING, "gb200", 8, "mxfp8", 807),
    (SUPER, "gb300", 64, "mxfp8", 831),
    (SUPER, "gb300", 64, "nvfp4", 864),
    (SUPER, "gb200", 64, "mxfp8", 600),
    (SUPER, "gb200", 64, "nvfp4", 610),
    (ULTRA, "gb300", 256, "mxfp8", 1281),
    (ULTRA, "gb200", 256, "mxfp8", 923),
]


def _in_catalog(model_id: str) -> bool:
    try:
        return resolve_model_name(model_id) == model_id
    except InputError:
        return False


@pytest.fixture(scope="module")
def outcomes() -> list[dict]:
    return held_out_release.outcomes()


def test_every_26_08_summary_row_is_listed_with_what_moeplan_does_with_it(outcomes):
    # one line per row: estimated (predicted vs published) or skipped (what the model lacks); a model that
    # lands in the catalog moves from skipped to estimated here
    listed = [(r["model"], r["gpu"], r["num_gpus"], r["precision"], r["measured"]) for r in outcomes]
    assert listed == SUMMARY_26_08
    for r in outcomes:
        if r["status"] == "estimated":
            line = f"{r['id']}: estimated {r['predicted']:.0f} vs {r['measured']:.0f} ({r['error_pct']:+.1f} %)"
        else:
            line = f"{r['id']}: skipped: {r['reason']}"
        print(line)
        if _in_catalog(r["model"]):
            assert r["status"] == "estimated", line
            assert math.isfinite(r["predicted"]) and r["predicted"] > 0
        else:
            assert r["status"] == "skipped" and r["model"] in r["reason"], line


def test_a_model_missing_from_the_catalog_is_skipped_naming_it():
    run = {**held_out_runs()[0], "model": "example-org/Not-A-Model"}
    row = held_out_release.outcome(run)
    assert row["status"] == "skipped"
    assert row["reason"].startswith("model: 'example-org/Not-A-Model'")


def test_the_models_already_modelled_are_estimated(outcomes):
    # DeepSeek-V3, gpt-oss-120b, Qwen3-30B-A3B, Qwen3-235B-A22B and Nemotron-3 Nano were modelled
    # before 26.08: all 9 of their rows are estimated
    done = {DSV3, GPT_OSS, Q30, Q235, NANO}
    rows = [r for r in outcomes if r["model"] in done]
    assert len(rows) == 9 and all(r["status"] == "estimated" for r in rows)


def test_the_held_out_release_is_never_fitted_nor_a_baseline():
    # 26.08 is declared out of sample: not a release of the fit, not in the fitted runs, not in the runs
    # the planner's published baseline reads, and the constants' provenance names only the fitting file
    timefit = pytest.importorskip("timefit")
    assert held_out_releases() == ("26.08",)
    assert not set(held_out_releases()) & set(timefit.RELEASES)
    held_ids = {r["id"] for r in held_out_runs()}
    assert len(held_ids) == 18 and all(r["release"] == "26.08" for r in held_out_runs())
    fitted = {r["id"] for r in timefit.load_runs()}
    assert fitted and not held_ids & fitted
    assert not held_ids & {r["id"] for r in published_runs()}
    constants = json.loads((ROOT / "src/moeplan/catalog/data/time_constants.json").read_text())
    assert "held_out" not in constants["provenance"]["fitted_on"]
    assert "26.08" not in constants["release_factor"]


def test_the_26_08_recipes_are_read_from_the_flat_perf_recipes():
    # v0.6.0 perf_recipes/qwen/gb300/qwen3_moe.py qwen3_30b_a3b_pretrain_8gpu_gb300_fp8mx_config: PP 1, EP 8,
    # MBS 8, GBS 512, HybridEP; _benchmark_common then _enable_hybridep_full_iteration_mxfp8 (common.py):
    # full-iteration graph, paged stash, capacity factor 1.5, the TE op fuser (set after _benchmark_common
    # clears it), EP overlap with delayed wgrad, FP8 attention
    lay = {"tensor_model_parallel_size": 1, "pipeline_model_parallel_size": 1, "expert_model_parallel_size": 8}
    row = match_perf_recipe(Q30, "gb300", "mxfp8", lay, 8, 8, release="26.08")
    assert row["id"] == "26.08/qwen3_30b_a3b_pretrain_8gpu_gb300_fp8mx_config" and row["extra"]["tag"] == "v0.6.0"
    assert row["training"] == {"seq_length": 4096, "micro_batch_size": 8, "global_batch_size": 512}
    got = row["layout"]
    assert got["moe_token_dispatcher_type"] == "flex" and got["moe_flex_dispatcher_backend"] == "hybridep"
    assert got["cuda_graph_impl"] == "full_iteration" and got["cuda_graph_scope"] == []
    assert got["moe_paged_stash"] is True and got["moe_expert_rank_capacity_factor"] == 1.5
    assert got["use_transformer_engine_op_fuser"] is True
    assert got["overlap_moe_expert_parallel_comm"] is True and got["delay_wgrad_compute"] is True
    assert got["fp8_dot_product_attention"] is True


def test_the_26_08_deepseek_row_carries_its_pipeline_layout():
    # v0.6.0 perf_recipes/deepseek/gb300/deepseek_v3.py ..._256gpu_gb300_fp8mx_config: PP 2, VPP 8, EP 32,
    # set_deepseek_v3_pipeline_model_parallel_layout(cfg.model, "Et*4|(t*4|)*14tmL")
    rows = {r["id"]: r for r in perf_recipe_history()["26.08"]}
    lay = rows["26.08/deepseek_v3_pretrain_256gpu_gb300_fp8mx_config"]["layout"]
    assert (lay["pipeline_model_parallel_size"], lay["virtual_pipeline_model_parallel_size"]) == (2, 8)
    assert lay["expert_model_parallel_size"] == 32
    assert lay["pipeline_model_parallel_layout"] == "Et*4|(t*4|)*14tmL"


def test_the_26_08_table_keeps_every_summary_model_and_no_development_recipe():
    rows = perf_recipe_history()["26.08"]
    assert {m for m, *_ in SUMMARY_26_08} <= {r["model"] for r in rows}
    assert not [r for r in rows if r["variant"].endswith("DEV")]
    # sizes a perf recipe leaves to its model recipe are not read: no row without them
    assert all(r["layout"].get("expert_model_parallel_size") and r["training"]["micro_batch_size"] for r in rows)


def test_a_26_08_container_says_its_fills_come_from_its_own_release():
    s = moeplan.load_scenario(
        {
            "model": Q30,
            "system": {"gpu": "gb200", "num_gpus": 8},
            "training": {"seq_length": 4096, "micro_batch_size": 4, "global_batch_size": 512, "precision": "mxfp8"},
            "layout": {
                "tensor_model_parallel_size": 1,
                "pipeline_model_parallel_size": 1,
                "expert_model_parallel_size": 8,
            },
            "recipe_defaults": "mbridge-perf",
            "versions": {"container": "26.08"},
        }
    )
    assert s.recipe.row.id == "26.08/qwen3_30b_a3b_pretrain_8gpu_gb200_fp8mx_config"
    found = [f for f in moeplan.validate(s).findings if f.rule_id == "versions.container_unknown"]
    assert len(found) == 1
    assert found[0].message.endswith(
        "; the recipe fills come from release 26.08's own workload configs (Megatron Bridge v0.6.0)"
    )


def _importer():
    spec = importlib.util.spec_from_file_location(
        "import_recipe_history_26_08", ROOT / "scripts/import_recipe_history.py"
    )
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_a_recorded_perf_recipe_maps_as_the_bridge_sets_it():
    mod = _importer()
    cfg = mod._Container()
    cfg.model.tensor_model_parallel_size = 2
    cfg.model.pipeline_model_parallel_size = 4
    cfg.model.expert_model_parallel_size = 8
    cfg.model.moe_flex_dispatcher_backend = "hybridep"
    cfg.model.cuda_graph_impl = "none"
    cfg.model.moe_router_fusion = True  # a LayoutSpec key: kept
    cfg.model.masked_softmax_fusion = True  # not a LayoutSpec key: not kept
    cfg.comm_overlap.overlap_moe_expert_parallel_comm = True
    cfg.comm_overlap.overlap_param_gather_with_optimizer_step = True  # not kept
    cfg.optimizer.exp_avg_dtype = "bf16"
    cfg.train.micro_batch_size, cfg.train.global_batch_size = 1, 256
    lay, training = mod.perf_layout_of(cfg)
    assert training == {"micro_batch_size": 1, "global_batch_size": 256}  # no seq_length set: none
    assert lay["sequence_parallel"] is True  # unset, TP 2 > 1
    assert lay["moe_token_dispatcher_type"] == "flex"  # unset, a flex backend set
    assert lay["cuda_graph_scope"] == []  # "none" clears the scope
    assert lay["overlap_moe_expert_parallel_comm"] is True and lay["exp_avg_dtype"] == "bf16"
    assert lay["moe_router_fusion"] is True
    assert "masked_softmax_fusion" not in lay and "overlap_param_gather_with_optimizer_step" not in lay


@pytest.mark.parametrize(
    "name, expected",
    [
        ("qwen3_30b_a3b_pretrain_8gpu_gb300_fp8mx_config", (Q30, "gb300", 8, "mxfp8", "V1")),
        ("deepseek_v3_pretrain_256gpu_gb200_fp8mx_large_scale_config", (DSV3, "gb200", 256, "mxfp8", "LARGE_SCALE")),
        ("nemotron_3_super_pretrain_64gpu_gb300_nvfp4_config", (SUPER, "gb300", 64, "nvfp4", "V1")),
        ("deepseek_v4_flash_pretrain_128gpu_gb200_fp8mx_config", (DSV4_FLASH, "gb200", 128, "mxfp8", "V1")),
        ("qwen3_30b_a3b_pretrain_16gpu_gb200_fp8mx_partial_cg_dev_config", None),  # a development recipe
        ("qwen3_30b_a3b_pretrain_8gpu_vr200_bf16_config", None),  # a GPU moeplan has no figures of
        ("qwen3_next_80b_a3b_pretrain_64gpu_b200_bf16_config", None),  # no published run
        ("_nemotron_3_ultra_gb300_fp8mx_config", None),
    ],
)
def test_perf_recipe_names_parse(name, expected):
    assert _importer().parse_perf_name(name) == expected
