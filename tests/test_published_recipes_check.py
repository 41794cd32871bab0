"""Every published Megatron Bridge perf recipe of the catalog loads and checks with no error finding,
except the short list of recipes that really break at their own release (each with its reason and source)
and the recipes on a GPU whose figures NVIDIA has not published (refused with an input error).

The recipes are the rows of ``catalog/data/mbridge_perf_recipes.yaml`` (``scripts/import_recipes.py``);
Bridge sources cited below are NVIDIA-NeMo/Megatron-Bridge at 067f987 (Table A) or tag v0.5.1 (Table B),
megatron-core sources NVIDIA/Megatron-LM at d98e8a6.
"""

from __future__ import annotations

import importlib.util
import pathlib

import pytest

from moeplan import load_scenario, validate
from moeplan.catalog.gpus import UNPUBLISHED_GPUS
from moeplan.catalog.perf_recipes import perf_recipes
from moeplan.errors import InputError
from moeplan.plan.starting_points import published_scenario

ROOT = pathlib.Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "import_recipes.py"

_EXPERT_GRID_64 = (
    "world.expert_grid_divides_world",
    "the recipe body sets ETP·EP·PP above its 64 GPUs, so megatron-core's initialize_model_parallel raises "
    "'world_size is not divisible by expert_tensor_model_pipeline_parallel size' (parallel_state.py L881)",
)
_STALE_LAYOUT = (
    "pipeline.layout_valid",
    "the recipe keeps the 16-stage layout of its PP 16 base (recipes/deepseek/h100/deepseek_v3.py L126-155) "
    "but sets PP 4, VPP 2 without rebuilding it (perf_recipes/deepseek/<gpu>/deepseek_v3.py, "
    "*_partial_cg_dev_config): TransformerConfig asserts the VPP conflicts with the layout "
    "(transformer_config.py L2276-2285); a development variant",
)
_QWEN3_VL_H100 = (
    "pipeline.num_layers_divisible_by_pp",
    "94 layers on PP 8 with no uneven first / last stage: the H100 recipe omits the "
    "num_layers_in_first/last_pipeline_stage = 10 / 12 that the B200 / GB200 recipes set "
    "(perf_recipes/qwen_vl/h100/qwen3_vl.py; v0.5.1 scripts/performance/configs/qwen_vl/qwen3_vl_pretrain.py "
    "L153-170), so TransformerBlock asserts num_layers % PP == 0 (transformer_block.py L156-158)",
)
#: recipe id -> (the error rule, why the recipe really breaks at its own release, with the source)
REAL_ERRORS: dict[str, tuple[str, str]] = {
    # 1024-GPU layout TP2 PP8 VPP4 EP64 at 64 GPUs: ETP·EP·PP = 1·64·8 = 512 > 64
    # (perf_recipes/deepseek/h100/deepseek_v3.py L163-216, "1024-GPU layout with legacy-scaled GBS")
    "deepseek_v3/64gpu_h100_bf16": _EXPERT_GRID_64,
    "deepseek_v3/64gpu_h100_fp8cs": _EXPERT_GRID_64,
    # GB300: PP 4 EP 32 (1·32·4 = 128 > 64) although the docstrings say EP = 64
    # (perf_recipes/qwen/gb300/qwen3_moe.py L33-50, L87-104, L141-158, L542)
    "qwen3_235b_a22b/64gpu_gb300_bf16": _EXPERT_GRID_64,
    "qwen3_235b_a22b/64gpu_gb300_fp8cs": _EXPERT_GRID_64,
    "qwen3_235b_a22b/64gpu_gb300_fp8mx": _EXPERT_GRID_64,
    "qwen3_235b_a22b/64gpu_gb300_nvfp4": _EXPERT_GRID_64,
    # GB200: PP 8 EP 32 (1·32·8 = 256 > 64) although the docstrings say PP = 8 EP = 8
    # (perf_recipes/qwen/gb200/qwen3_moe.py L88-105, L142-159, L543)
    "qwen3_235b_a22b/64gpu_gb200_fp8cs": _EXPERT_GRID_64,
    "qwen3_235b_a22b/64gpu_gb200_fp8mx": _EXPERT_GRID_64,
    "qwen3_235b_a22b/64gpu_gb200_nvfp4": _EXPERT_GRID_64,
    "deepseek_v3/256gpu_gb300_fp8mx_partial_cg_dev": _STALE_LAYOUT,
    "deepseek_v3/256gpu_gb200_fp8mx_partial_cg_dev": _STALE_LAYOUT,
    "qwen3_vl_235b_a22b/256gpu_h100_bf16": _QWEN3_VL_H100,
    "qwen3_vl_235b_a22b/256gpu_h100_fp8cs": _QWEN3_VL_H100,
    "QWEN3_VL_235B_A22B/H100/-/BF16+FP8_CS": _QWEN3_VL_H100,
}


def _errors(recipe_id: str) -> list[str]:
    report = validate(load_scenario(published_scenario(recipe_id)))
    return [f.rule_id for f in report.findings if f.severity == "error"]


def _outcomes() -> dict[str, object]:
    """recipe id -> its error rule ids, or the InputError that refused it."""
    out: dict[str, object] = {}
    for r in perf_recipes():
        try:
            out[r["id"]] = _errors(r["id"])
        except InputError as exc:
            out[r["id"]] = exc
    return out


@pytest.fixture(scope="module")
def outcomes() -> dict[str, object]:
    return _outcomes()


def test_every_published_recipe_checks_without_a_false_error(outcomes):
    unexpected = {
        rid: errs for rid, errs in outcomes.items() if isinstance(errs, list) and errs and rid not in REAL_ERRORS
    }
    assert unexpected == {}


def test_each_real_error_is_raised_by_its_named_rule(outcomes):
    for rid, (rule_id, reason) in REAL_ERRORS.items():
        assert reason
        assert outcomes[rid] == [rule_id], rid


def test_only_recipes_on_gpus_with_unpublished_figures_are_refused(outcomes):
    refused = {rid: exc for rid, exc in outcomes.items() if isinstance(exc, InputError)}
    gpus = {r["id"]: r["gpu"] for r in perf_recipes()}
    assert refused and {gpus[rid] for rid in refused} == {"vr200"}
    assert all(gpu not in UNPUBLISHED_GPUS for rid, gpu in gpus.items() if rid not in refused)
    for exc in refused.values():
        assert exc.field == "system.gpu" and "NVIDIA has not published" in str(exc)


def test_gpt_oss_recipes_inherit_the_a2a_context_parallel_exchange_of_their_base():
    # gpt_oss_20b_pretrain_config = the 16-GPU H100 recipe, which sets cp_comm_type = "a2a"
    # (recipes/gpt_oss/h100/gpt_oss.py L70); the GB300 recipe sets CP = 2 and never overrides it.
    # gpt-oss-20b: 64 query heads, 8 KV groups; TP 1, CP 2: 64 % 2 == 8 % 2 == 0, so a2a fits.
    scenario = published_scenario("gpt_oss_20b/8gpu_gb300_nvfp4")
    assert scenario["layout"]["context_parallel_size"] == 2
    assert scenario["layout"]["cp_comm_type"] == "a2a"
    assert _errors("gpt_oss_20b/8gpu_gb300_nvfp4") == []


def test_qwen3_next_recipes_build_the_mtp_layer_their_layout_places():
    # qwen3_next_80b_a3b_pretrain_config sets mtp_num_layers = 1 (recipes/qwen/h100/qwen3_next.py L63);
    # 'Et*4|(t*7|)*5t*8|tmL' holds 4 + 35 + 8 + 1 = 48 decoder layers, one 'm', 8 stages = PP 2 × VPP 4.
    scenario = published_scenario("qwen3_next_80b_a3b/64gpu_gb300_bf16")
    assert scenario["layout"]["mtp_num_layers"] == 1
    assert scenario["layout"]["pipeline_model_parallel_layout"] == "Et*4|(t*7|)*5t*8|tmL"
    assert _errors("qwen3_next_80b_a3b/64gpu_gb300_bf16") == []
    assert _errors("QWEN3_NEXT_80B_A3B/GB300/V1/BF16+FP8_MX") == []


def test_legacy_full_iteration_rows_carry_the_static_expert_budget_of_their_launcher():
    # v0.5.1 deepseek_llm_pretrain.py L53-65, L100: full_iteration -> set_full_iter_cg_configs
    # (moe_paged_stash = True, moe_expert_rank_capacity_factor = 1.5) on top of the workload base config
    for rid in ("DEEPSEEK_V3/GB300/V1/FP8_MX", "QWEN3_30B_A3B/B200/V1/FP8_MX"):
        layout = published_scenario(rid)["layout"]
        assert layout["cuda_graph_impl"] == "full_iteration"
        assert layout["moe_expert_rank_capacity_factor"] == 1.5
        assert layout["moe_paged_stash"] is True
        assert _errors(rid) == []


def _importer():
    spec = importlib.util.spec_from_file_location("import_recipes_under_test", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_qwen3_launcher_adds_the_static_expert_budget_only_for_mxfp8():
    # v0.5.1 qwen3_llm_pretrain.py L80: `if precision == "fp8_mx" and is_full_iteration_cuda_graph(...)`
    mod = _importer()
    bf16, mx = mod.Recipe(), mod.Recipe()
    mod.full_iter_cg_configs(bf16, "qwen3_30b_a3b", ["bf16"])
    mod.full_iter_cg_configs(mx, "qwen3_30b_a3b", ["mxfp8"])
    assert bf16.layout == {}
    assert mx.layout == {"moe_paged_stash": True, "moe_expert_rank_capacity_factor": 1.5}
    with pytest.raises(mod.ParseError):
        mod.full_iter_cg_configs(mod.Recipe(), "qwen3_30b_a3b", ["bf16", "mxfp8"])


def test_a_vera_rubin_scenario_is_refused_naming_the_missing_public_figures():
    with pytest.raises(InputError) as info:
        load_scenario(published_scenario("qwen3_30b_a3b/8gpu_vr200_bf16"))
    text = str(info.value)
    assert text.startswith("system.gpu: 'vr200'")
    assert "dense BF16 / FP8 / FP4 TFLOP/s" in text and "gb300" in text
