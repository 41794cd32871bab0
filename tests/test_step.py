"""Step-time model (work in progress, not yet exposed by the CLI): structural invariants."""

from __future__ import annotations

import pytest

from moeplan import load_scenario
from moeplan.model.step import estimate_step

SCN = {
    "model": "deepseek-ai/DeepSeek-V3",
    "system": {"gpu": "gb300", "num_gpus": 256},
    "training": {"seq_length": 4096, "micro_batch_size": 1, "global_batch_size": 4096, "precision": "mxfp8"},
    "layout": {
        "pipeline_model_parallel_size": 2,
        "virtual_pipeline_model_parallel_size": 8,
        "expert_model_parallel_size": 32,
        "pipeline_model_parallel_layout": "Et*4|(t*4|)*14tmL",
    },
    "recipe_defaults": "mbridge-perf",
}


def test_breakdown_sums_to_step_and_units_agree():
    e = estimate_step(load_scenario(SCN))
    assert sum(e.breakdown_s.values()) == pytest.approx(e.step_time_s)
    assert e.tokens_per_s_per_gpu == pytest.approx(4096 * 4096 / (e.step_time_s * 256))
    assert 0 < e.mfu < 1 and e.num_microbatches == 4096 // 128
    d = e.to_dict()
    assert {"step_time_s", "tokens_per_s_per_gpu", "model_tflops_per_gpu", "mfu", "breakdown_s"} <= set(d)


def test_more_microbatches_shrink_the_bubble_share():
    small = estimate_step(load_scenario({**SCN, "training": {**SCN["training"], "global_batch_size": 512}}))
    big = estimate_step(load_scenario(SCN))
    assert (
        small.breakdown_s["pipeline_bubble"] / small.step_time_s > big.breakdown_s["pipeline_bubble"] / big.step_time_s
    )
