"""Megatron-LM's examples/moe_recipes (vendored in tests/data/recipes/megatron_lm, PROVENANCE.md): every one
is checked, estimated (memory and step time) and planned at its published layout without a refusal.

Sources: megatron-core ``pipeline_parallel_layer_layout.py`` ``validate_layer_layout`` at core_v0.15.0 (MTP
only in the last stage, with the loss) and from core_v0.16.0 (commit 5247a1f: MTP in the last virtual stage
of any PP rank, a standalone MTP stage); Megatron-LM ``arguments.py`` (at the Qwen3-235B B300 recipe's
commit 74ff982, L2103-2110) asserts NCCL_GRAPH_REGISTER=0 for TE CUDA graphs with expandable segments.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from moeplan import estimate_memory, load_scenario, validate
from moeplan.api.estimate import estimate_report
from moeplan.api.plan import plan_report
from moeplan.api.side_inputs import read_config, scenario_request
from moeplan.inputs.overrides import ScenarioFlags
from moeplan.model.activations import ActContext, layer_activations
from moeplan.plan.changes import apply_check_fixes

RECIPES = Path(__file__).parent / "data" / "recipes" / "megatron_lm"
ALL = sorted(RECIPES.rglob("*.yaml"))
DSV3_FP8 = RECIPES / "deepseek_v3/h100/fp8_1024GPU_TP2PP8EP64.yaml"
DSV3_BF16 = RECIPES / "deepseek_v3/h100/bf16_1024GPU_TP1PP16EP64.yaml"
Q235_B300 = RECIPES / "qwen3_235b/b300/mxfp8_128GPU_TP2PP1EP16_partial_cg.yaml"


def _flags(path: Path) -> ScenarioFlags:
    """The recipe's GPU (its folder) and GPU count (its file name, ``_<N>GPU_``)."""
    found = re.search(r"_(\d+)GPU_", path.name)
    assert found is not None
    return ScenarioFlags(gpu=path.parts[-2], num_gpus=int(found.group(1)))


def _dsv3(layout: dict, version: str, num_gpus: int = 1024):
    return load_scenario(
        {
            "model": "deepseek-ai/DeepSeek-V3",
            "system": {"gpu": "h100", "num_gpus": num_gpus},
            "training": {"seq_length": 4096, "micro_batch_size": 1, "global_batch_size": 8192},
            "layout": layout,
            "versions": {"megatron_core": version},
        }
    )


# --- MTP placement ------------------------------------------------------------------------------------

#: the H100 FP8 recipe's layout: 32 virtual stages over PP 8 (VPP 4); stage 30 ('m') is PP rank 30 mod 8 = 6,
#: virtual stage 30 div 8 = 3, the last virtual stage of rank 6; stage 31 ('L') is rank 7's
STANDALONE = {
    "tensor_model_parallel_size": 2,
    "pipeline_model_parallel_size": 8,
    "expert_model_parallel_size": 64,
    "pipeline_model_parallel_layout": "Et*3|(tt|)*29m|L",
}


def _layout_errors(s) -> list[str]:
    return [f.message for f in validate(s).errors if f.rule_id == "pipeline.layout_valid"]


def test_mtp_in_the_last_virtual_stage_of_another_rank_is_a_standalone_stage_from_mcore_0_16():
    assert _layout_errors(_dsv3(STANDALONE, "0.16.0")) == []
    assert _layout_errors(_dsv3(STANDALONE, "0.19.0")) == []


def test_before_mcore_0_16_mtp_must_share_the_last_stage_with_the_loss():
    # core_v0.15.0 validate_layer_layout asserts "MTP layers must be in the last stage together with Loss
    # stage": no standalone MTP stage is built there, the layout is refused
    assert _layout_errors(_dsv3(STANDALONE, "0.15.0")) == [
        "MTP layers must all sit in the last virtual stage of the last PP rank, with the loss: "
        "megatron-core 0.15.0 asserts it (validate_layer_layout); a standalone MTP stage on another rank "
        "comes with 0.16"
    ]


def test_mtp_outside_a_ranks_last_virtual_stage_is_refused_naming_the_stages_allowed():
    # PP 2, 4 stages: stage 1 is rank 1's first virtual stage; ranks' last virtual stages are 2 and 3
    layout = {
        "pipeline_model_parallel_size": 2,
        "expert_model_parallel_size": 64,
        "pipeline_model_parallel_layout": "Et*30|t*31m||L",
    }
    assert _layout_errors(_dsv3(layout, "0.19.0", num_gpus=256)) == [
        "MTP layers must all sit in one virtual stage that is the last virtual stage of its PP rank "
        "(layout stages 2-3; megatron-core builds it as a standalone MTP stage off the last rank); "
        "the layout puts them in stages [1]"
    ]


def test_the_h100_fp8_recipe_gets_a_step_time_with_its_standalone_mtp_stage():
    doc = estimate_report(DSV3_FP8, _flags(DSV3_FP8), from_format="megatron-lm-yaml").document
    assert "pipeline.layout_valid" not in {e["rule_id"] for e in doc["check"]["errors"]}
    assert doc["throughput"]["step_time_s"] > 0


# --- a launch check whose fix is an environment variable ---------------------------------------------


def test_graphs_with_expandable_segments_are_estimated_and_planned_with_nccl_graph_register_off():
    doc = estimate_report(Q235_B300, _flags(Q235_B300), from_format="megatron-lm-yaml").document
    # the error stays where the user reads it; the estimate applies its one-change fix
    assert "graphs.expandable_segments" in {e["rule_id"] for e in doc["check"]["errors"]}
    assert doc["fixed"]["edits"]["environment.NCCL_GRAPH_REGISTER"] == "0"
    assert doc["throughput"]["step_time_s"] > 0
    out = plan_report(Q235_B300, _flags(Q235_B300), top=1, from_format="megatron-lm-yaml")
    assert out["candidates"]
    assert any("environment.NCCL_GRAPH_REGISTER: 0" in n for n in out["notes"])


def test_a_known_issue_error_leaves_the_step_timed_and_says_so(tmp_path):
    data = {
        "model": "Qwen/Qwen3-30B-A3B",
        "system": {"gpu": "h100", "num_gpus": 16},
        "training": {"seq_length": 4096, "micro_batch_size": 1, "global_batch_size": 256, "precision": "bf16"},
        "layout": {"expert_model_parallel_size": 8, "overlap_moe_expert_parallel_comm": True},
        "versions": {"megatron_core": "0.15.0", "torch": "2.5.1"},  # EP overlap asserts below torch 2.6
    }
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    rep = estimate_report(path)
    doc = rep.document
    assert rep.broken and doc["check"]["errors"][0]["rule_id"] == "known_issue.ep_overlap_torch_below_2_6_assert"
    assert doc["throughput"]["step_time_s"] > 0
    assert doc["timed_despite"]["rule_ids"] == ["known_issue.ep_overlap_torch_below_2_6_assert"]
    assert doc["timed_despite"]["text"].startswith("the run as given stops or hangs on a known issue")


# --- DeepSeek-V3 H100 BF16: 61 layers on PP 16, no recompute -------------------------------------------


def test_deepseek_v3_moe_layer_activations_term_by_term():
    # one microbatch of 4096 tokens, TP 1, BF16, no recompute; h 7168, 128 heads, q/k head 128 + 64 rope,
    # v head 128, top-8 of 256 experts (forced balance: 4096·8 routed rows), expert FFN 2048 (SwiGLU)
    s, h, k = 4096, 7168, 8
    kept, _ = layer_activations(
        _dsv3({}, "0.19.0").complete_model,
        10,
        ActContext(tokens=s, seq_local=s, micro_batch_size=1, tp=1, sp=False, etp=1),
        frozenset(),
    )
    assert kept["mla_qkv"] == s * 128 * (192 + 192 + 128) * 2  # Q, K, V into the attention kernel
    assert kept["attn_out"] == s * 128 * 128 * 2
    assert kept["expert_fc1_in"] == s * k * h * 2  # the dispatched rows, saved once
    assert kept["expert_fc1_out"] == s * k * 2 * 2048 * 2
    assert kept["expert_fc2_in"] == s * k * 2048 * 2
    assert kept["attn_norm_output"] == kept["mlp_norm_output"] == s * h * 2  # each norm output saved once
    assert 1.7 * 2**30 < sum(kept.values()) < 1.8 * 2**30


def test_deepseek_v3_h100_bf16_peak_is_its_in_flight_microbatches_of_whole_layers():
    rep = estimate_report(DSV3_BF16, _flags(DSV3_BF16), from_format="megatron-lm-yaml")
    doc = rep.document
    # the check's fix splits 61 layers 2 + 14·4 + 3; 1F1B keeps PP - r = 14 microbatches on stage 2
    assert doc["fixed"]["edits"]["num_layers_in_first_pipeline_stage"] == 2
    mem = estimate_memory(load_scenario(_fixed_request()))
    stage = mem.stages[2]
    assert (stage.num_layers, stage.inflight_microbatches) == (4, 14)
    kept, _ = layer_activations(
        _dsv3({}, "0.19.0").complete_model,
        10,
        ActContext(tokens=4096, seq_local=4096, micro_batch_size=1, tp=1, sp=False, etp=1),
        frozenset(),
    )
    assert sum(stage.items["activations"].values()) == pytest.approx(4 * 14 * sum(kept.values()), rel=1e-6)
    assert doc["memory"]["verdict"] == "does-not-fit"


def _fixed_request() -> dict:
    """The H100 BF16 recipe's request with the check's own fixes applied, as ``estimate`` applies them."""
    src, _ = read_config(DSV3_BF16, "megatron-lm-yaml")
    data, _ = scenario_request(src, _flags(DSV3_BF16), None, default_batch=True)
    got = apply_check_fixes(data, validate(load_scenario(data)).errors)
    assert got is not None
    return got[0]


def test_plan_at_a_published_layout_that_does_not_fit_says_so_and_adds_what_it_leaves_out():
    out = plan_report(DSV3_BF16, _flags(DSV3_BF16), top=1, from_format="megatron-lm-yaml")
    assert out["candidates"]
    best = out["candidates"][0]["layout"]
    assert (best["tensor_model_parallel_size"], best["pipeline_model_parallel_size"]) == (1, 16)
    assert best.get("recompute_granularity") in ("selective", "full")
    said = [n for n in out["notes"] if n.startswith("the layout as given does not fit: ")]
    assert len(said) == 1 and "GiB per GPU on stage 2 of 79.6 GiB usable" in said[0]


# --- every recipe ------------------------------------------------------------------------------------


def test_all_moe_recipes_are_here():
    assert len(ALL) == 23


@pytest.mark.parametrize("path", ALL, ids=lambda p: str(p.relative_to(RECIPES)))
def test_every_moe_recipe_is_estimated_and_planned_at_its_published_layout(path):
    doc = estimate_report(path, _flags(path), from_format="megatron-lm-yaml").document
    assert doc["memory"] is not None and doc["throughput"] is not None
    out = plan_report(path, _flags(path), top=1, from_format="megatron-lm-yaml")
    assert out["candidates"], out["notes"]
