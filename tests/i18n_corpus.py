"""A broad set of scenarios run through ``validate()``, so that the Chinese-translation test sees every
rule message and fix that the rules can produce: the goldens' scenarios, the examples, the bug-log
cases (tests/data/reference/cases), each known issue's example and near miss (pinned and unpinned),
the published runs, and layouts generated from several models by breaking one rule family at a time.
"""

from __future__ import annotations

import functools
import itertools
import pathlib

from moeplan import load_scenario, validate
from moeplan.catalog.known_issues import known_issues
from moeplan.errors import InputError
from moeplan.rules import Finding

ROOT = pathlib.Path(__file__).resolve().parents[1]

#: models × GPUs the generated layouts start from (MLA + MTP, GQA, sinks + sliding window, linear attention, VLM)
MODELS = (
    "deepseek-ai/DeepSeek-V3",
    "Qwen/Qwen3-30B-A3B",
    "Qwen/Qwen3-235B-A22B",
    "openai/gpt-oss-120b",
    "Qwen/Qwen3-Next-80B-A3B-Instruct",
    "Qwen/Qwen3-VL-235B-A22B-Instruct",
)
#: one layout change at a time, each meant to break (or warn about) one family of rules
VARIANTS: tuple[dict, ...] = (
    {},
    {"tensor_model_parallel_size": 3},
    {"tensor_model_parallel_size": 8, "sequence_parallel": False},
    {"tensor_model_parallel_size": 1, "sequence_parallel": True},
    {"pipeline_model_parallel_size": 7},
    {"pipeline_model_parallel_size": 4, "virtual_pipeline_model_parallel_size": 5},
    {"pipeline_model_parallel_size": 2, "decoder_first_pipeline_num_layers": 1, "decoder_last_pipeline_num_layers": 1},
    {"pipeline_model_parallel_size": 4, "pipeline_model_parallel_layout": "Et*3|t*3|t*3|tL"},
    {"context_parallel_size": 3},
    {"context_parallel_size": 4, "cp_comm_type": "a2a+p2p"},
    {"context_parallel_size": 4, "cp_comm_type": "a2a+p2p", "hierarchical_context_parallel_sizes": [2, 4]},
    {"context_parallel_size": 16, "cp_comm_type": "a2a"},
    {"context_parallel_size": 8, "cp_comm_type": "all_gather"},
    {"expert_model_parallel_size": 7},
    {"expert_model_parallel_size": 64, "expert_tensor_parallel_size": 4},
    {"expert_model_parallel_size": 8, "moe_token_dispatcher_type": "flex", "moe_flex_dispatcher_backend": "deepep"},
    {"expert_model_parallel_size": 1, "moe_token_dispatcher_type": "flex", "moe_flex_dispatcher_backend": "hybridep"},
    {"expert_model_parallel_size": 8, "overlap_moe_expert_parallel_comm": True},
    {"expert_model_parallel_size": 8, "moe_shared_expert_overlap": True},
    {"recompute_granularity": "full", "recompute_method": "uniform", "recompute_num_layers": 5},
    {"recompute_granularity": "full"},
    {"recompute_granularity": "selective", "recompute_modules": ["up_proj", "moe_act", "mla_up_proj"]},
    {"recompute_granularity": "selective", "recompute_modules": ["moe"], "fine_grained_activation_offloading": True},
    {"cpu_offloading": True, "cpu_offloading_num_layers": 2},
    {"cuda_graph_impl": "transformer_engine", "cuda_graph_scope": ["moe"]},
    {"cuda_graph_impl": "transformer_engine", "cuda_graph_scope": ["moe_preprocess"]},
    {"cuda_graph_impl": "transformer_engine", "cuda_graph_scope": ["mlp"], "recompute_granularity": "full"},
    {"cuda_graph_impl": "local", "cuda_graph_scope": ["full_iteration"]},
    {"optimizer_cpu_offload": True, "use_distributed_optimizer": False},
    {"optimizer_cpu_offload": True, "use_precision_aware_optimizer": False},
    {"use_megatron_fsdp": True, "data_parallel_sharding_strategy": "optim_grads_params"},
    {"use_megatron_fsdp": True, "pipeline_model_parallel_size": 2},
)
GPUS = (("h100", 64, 4096), ("gb200", 256, 131072), ("a100", 16, 8192))
PRECISIONS = ("bf16", "fp8-blockwise", "mxfp8", "nvfp4")


def _scenario_files() -> list[pathlib.Path]:
    return sorted((ROOT / "tests/golden/scenarios").glob("*.yaml")) + sorted((ROOT / "examples").glob("*.yaml"))


def _cases() -> list[dict]:
    from tests.test_cases import HARD, case_to_scenario

    return [case_to_scenario(p.values[0], p.values[1]) for p in HARD]


def _known_issue_examples() -> list[dict]:
    out = []
    for k in known_issues():
        for sc in (k.example, k.near_miss):
            if sc:
                out.append(sc)
                out.append({**sc, "versions": {}})
    return out


def _generated() -> list[dict]:
    out = []
    for (model, (gpu, n, seq)), var in itertools.product(itertools.product(MODELS, GPUS), VARIANTS):
        out.append(
            {
                "model": model,
                "system": {"gpu": gpu, "num_gpus": n},
                "training": {"seq_length": seq, "micro_batch_size": 1, "global_batch_size": 96},
                "layout": {"sequence_parallel": True, **var},
            }
        )
    for prec, model in itertools.product(PRECISIONS, MODELS[:3]):
        out.append(
            {
                "model": model,
                "system": {"gpu": "h100", "num_gpus": 8},
                "training": {"seq_length": 4000, "micro_batch_size": 1, "global_batch_size": 7, "precision": prec},
                "layout": {"expert_model_parallel_size": 8, "fp8_param_gather": True, "optimizer_cpu_offload": True},
            }
        )
    out += [{}, {"model": MODELS[0]}, {"system": {"gpu": "h100"}}, {"training": {"global_batch_size": 8}}]
    return out


@functools.lru_cache(maxsize=1)
def corpus_findings() -> tuple[Finding, ...]:
    """Every distinct finding (by rule id, message and fix) of every scenario above."""
    seen: dict[tuple, Finding] = {}
    sources: list = [*_scenario_files(), *_cases(), *_known_issue_examples(), *_generated()]
    for src in sources:
        try:
            res = validate(load_scenario(src))
        except InputError:
            continue
        for f in res.findings:
            seen.setdefault((f.rule_id, f.message, f.fix), f)
    return tuple(seen.values())
