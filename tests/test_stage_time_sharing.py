"""Pipeline stages with the same layers (by kind, in order), recompute flags, MTP depths, output layer
and embedding share one stage-time computation, and the shared record is what each computes alone."""

from __future__ import annotations

import pytest

from moeplan import load_scenario
from moeplan.catalog.gpus import measured_gemm_fractions
from moeplan.model.constants import load_constants
from moeplan.model.time.context import step_context
from moeplan.model.time.stage import compute_stage_time, layer_groups, stage_time
from moeplan.structure.placement import stage_params, stage_plan


@pytest.mark.parametrize(
    "layout",
    [
        {"pipeline_model_parallel_size": 8},
        {"pipeline_model_parallel_size": 4, "virtual_pipeline_model_parallel_size": 2},
        {
            "pipeline_model_parallel_size": 8,
            "recompute_granularity": "full",
            "recompute_method": "block",
            "recompute_num_layers": 1,
        },
    ],
    ids=["pp8", "pp4-vpp2", "pp8-block-recompute"],
)
def test_shared_stage_time_equals_each_stage_computed_alone(layout):
    s = load_scenario(
        {
            "model": "deepseek-ai/DeepSeek-V3",
            "system": {"gpu": "h100", "num_gpus": 256},
            "training": {"seq_length": 4096, "micro_batch_size": 1, "global_batch_size": 512},
            "layout": {"expert_model_parallel_size": 32, **layout},
        }
    )
    ctx = step_context(s, load_constants(), measured_gemm_fractions("h100"), None)
    plan = stage_plan(s, allow_balanced=True)
    stages = stage_params(s, allow_balanced=True)
    for st in stages:
        shared = stage_time(ctx, st, plan)
        alone = compute_stage_time(ctx, st, layer_groups(ctx, st, plan))
        assert shared == alone
    if len(stages) == 8:  # PP 8: the middle stages build the same 8 MoE layers (PP 4 × VPP 2 splits unevenly)
        assert len(ctx.__dict__["_stage_times"]) < len(stages)
    # each call returns its own record: changing one leaves the shared one as it was
    a = stage_time(ctx, stages[1], plan)
    before = a.parts["dense_gemm"]
    a.parts["dense_gemm"] += 1.0
    assert stage_time(ctx, stages[1], plan).parts["dense_gemm"] == before
