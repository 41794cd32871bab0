"""The rule memo of a request's candidates answers what running every rule answers: the same error rule
ids for each candidate, in sequence, whatever was remembered from the candidates before it."""

from __future__ import annotations

import copy
import itertools

from moeplan.plan.evaluation import EvaluationCache
from moeplan.plan.rule_memo import RuleMemo
from moeplan.plan.screening import SCREEN_SKIPPED_RULES
from moeplan.resolve.defaults import resolve
from moeplan.rules import validate

BASE = {
    "model": "Qwen/Qwen3-30B-A3B",
    "system": {"gpu": "h100", "num_gpus": 64},
    "training": {"seq_length": 32768, "micro_batch_size": 1, "global_batch_size": 64, "precision": "fp8-blockwise"},
    "layout": {},
}
SIZES = [
    {"tensor_model_parallel_size": tp, "pipeline_model_parallel_size": pp, "context_parallel_size": cp}
    for tp, pp, cp in itertools.product((1, 2, 3, 4), (1, 4), (1, 2))
]
KNOBS = [
    {},
    {"recompute_granularity": "full", "recompute_method": "uniform", "recompute_num_layers": 1},
    {"recompute_granularity": "selective", "recompute_modules": ["moe_act", "layernorm"]},
    {"overlap_moe_expert_parallel_comm": True, "moe_token_dispatcher_type": "alltoall"},
    {"overlap_moe_expert_parallel_comm": True, "recompute_granularity": "full", "recompute_method": "uniform"},
    {"moe_token_dispatcher_type": "flex", "moe_flex_dispatcher_backend": "deepep"},
    {"virtual_pipeline_model_parallel_size": 2},
    {"cuda_graph_impl": "transformer_engine", "cuda_graph_scope": ["attn", "moe"]},
    {"cp_comm_type": "a2a"},
]


def _candidates():
    for sizes, ep, knobs, mbs in itertools.product(SIZES, (8, 16), KNOBS, (1, 2)):
        data = copy.deepcopy(BASE)
        data["layout"] = {**sizes, "expert_model_parallel_size": ep, **knobs}
        data["training"]["micro_batch_size"] = mbs
        yield data


def test_remembered_rule_errors_equal_every_rule_run_on_each_candidate():
    cache, memo = EvaluationCache(), RuleMemo()
    checked = broken = 0
    for data in _candidates():
        key = cache.request_key(data)
        try:
            s = resolve(cache.scenario_input(data, key))
        except Exception:  # noqa: BLE001 - an input the resolution refuses never reaches the rules
            continue
        want = [f.rule_id for f in validate(s, skip=SCREEN_SKIPPED_RULES).errors]
        assert sorted(memo.errors(s, SCREEN_SKIPPED_RULES)) == sorted(want), data["layout"]
        checked += 1
        broken += bool(want)
    # the sample exercises both answers, and the memo answered most rules without running them
    assert checked > 500 and 0 < broken < checked
    assert memo.hits > 10 * memo.runs
