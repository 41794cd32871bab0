"""Complete fixes for layers that do not divide by PP. ``check`` offers
``account_for_embedding/loss_in_pipeline_split`` when they make the split divide (how Megatron Bridge
splits Qwen3-235B's 94 layers on PP 8) and a ready, balanced ``pipeline_model_parallel_layout``;
``estimate`` then estimates the layout with the fix applied (memory and step time) and says so;
``fit`` applies the same fix first."""

from __future__ import annotations

import re

from moeplan import load_scenario
from moeplan.api import estimate_report
from moeplan.inputs.overrides import ScenarioFlags
from moeplan.plan.fit import fit_layout
from moeplan.rules import validate
from moeplan.structure.stages import parse_layout, split_options

Q235 = {
    "model": "Qwen/Qwen3-235B-A22B",
    "system": {"gpu": "gb200", "num_gpus": 256},
    "training": {"seq_length": 131072, "global_batch_size": 64, "micro_batch_size": 1},
    "layout": {
        "tensor_model_parallel_size": 2,
        "pipeline_model_parallel_size": 8,
        "context_parallel_size": 8,
        "expert_model_parallel_size": 32,
    },
}
RULE = "pipeline.num_layers_divisible_by_pp"


def _finding(data):
    (f,) = [f for f in validate(load_scenario(data)).errors if f.rule_id == RULE]
    return f


def test_check_offers_account_for_and_a_ready_layout():
    f = _finding(Q235)
    assert "account_for_embedding_in_pipeline_split: true and account_for_loss_in_pipeline_split: true" in f.fix
    assert "94 + 2 = 96 = 8 × 12" in f.fix
    assert f.edits == {"account_for_embedding_in_pipeline_split": True, "account_for_loss_in_pipeline_split": True}
    layout = re.search(r"pipeline_model_parallel_layout: '([^']+)'", f.fix).group(1)
    stages = parse_layout(layout)
    assert len(stages) == 8 and sum(st.count("t") for st in stages) == 94
    # each fix the check offers makes the layout legal
    for opt in split_options(94, 8, 1):
        fixed = {**Q235, "layout": {**Q235["layout"], **opt}}
        assert RULE not in {e.rule_id for e in validate(load_scenario(fixed)).errors}, opt


def test_with_vpp_the_fix_covers_the_virtual_stages_too():
    """The guidance's Qwen3-235B PP4 VPP12: 94 + 2 = 96 = 48 × 2."""
    data = {
        **Q235,
        "layout": {**Q235["layout"], "pipeline_model_parallel_size": 4, "virtual_pipeline_model_parallel_size": 12},
    }
    f = _finding(data)
    assert f.edits == {"account_for_embedding_in_pipeline_split": True, "account_for_loss_in_pipeline_split": True}
    fixed = {**data, "layout": {**data["layout"], **f.edits}}
    assert not [e for e in validate(load_scenario(fixed)).errors if e.rule_id.startswith("pipeline.")]


def test_deepseek_v3_gets_a_balanced_layout_string():
    data = {
        "model": "deepseek-ai/DeepSeek-V3",
        "system": {"gpu": "h100", "num_gpus": 256},
        "training": {"seq_length": 4096},
        "layout": {"pipeline_model_parallel_size": 8, "expert_model_parallel_size": 32},
    }
    f = _finding(data)
    assert "pipeline_model_parallel_layout: '" in f.fix and f.edits
    assert f.edits == {"num_layers_in_first_pipeline_stage": 6, "num_layers_in_last_pipeline_stage": 7}


def test_estimate_estimates_with_the_fixed_split_and_says_so():
    flags = ScenarioFlags(
        model="Qwen/Qwen3-235B-A22B", gpu="gb200", num_gpus=256, seq_length=131072, gbs=64, tp=2, pp=8, cp=8, ep=32
    )
    rep = estimate_report(None, flags)
    doc = rep.document
    assert doc["check"]["verdict"] == "invalid" and rep.broken  # the layout as given still breaks the rule
    assert doc["fixed"]["rule_ids"] == [RULE]
    assert doc["fixed"]["edits"]["account_for_embedding_in_pipeline_split"] is True
    assert doc["throughput"] is not None and doc["throughput"]["step_time_s"] > 0


def test_fit_applies_the_checks_fix_first():
    res = fit_layout(Q235)
    assert "account_for_embedding_in_pipeline_split=true" in res["applied_first"]
    assert not any(e.startswith("pipeline.") for e in res["check_errors"])
