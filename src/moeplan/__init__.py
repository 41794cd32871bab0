"""moeplan: check, estimate and plan Megatron-Core / Megatron Bridge layouts for MoE training.

Public API (the CLI reaches it through :mod:`moeplan.api`, one report function per command):

- :func:`load_scenario` — YAML path or mapping (+ CLI overrides) → resolved :class:`Scenario`
- :func:`validate` — every Megatron-Core rule → :class:`CheckResult`
- :func:`get_model`, :func:`list_models`, :func:`count_params`, :func:`stage_params`
- :func:`estimate_memory` — per-stage peak memory per GPU → :class:`MemoryEstimate`
- :func:`estimate_step` — step time, tokens/s/GPU, model TFLOP/s/GPU, MFU → :class:`ThroughputEstimate`
- :func:`get_gpu`, :func:`list_gpus`
- :class:`InputError` — every user mistake (CLI exit code 2)
"""

from moeplan.catalog import COUNTING_CONVENTIONS, get_gpu, get_model, list_gpus, list_models
from moeplan.errors import InputError, MoeplanError, UnknownNameError
from moeplan.inputs.model_spec import ModelSpec, VisionSpec
from moeplan.inputs.resolved import Scenario
from moeplan.inputs.system import GpuSpec
from moeplan.model.memory import MemoryEstimate, StageMemory, estimate_memory
from moeplan.model.step import ThroughputEstimate, estimate_step
from moeplan.resolve.load import load_scenario
from moeplan.rules import RULES, CheckResult, Finding, validate
from moeplan.structure.params import ParamCounts, RankParams, count_params, rank_params
from moeplan.structure.placement import StageParams, stage_params

__version__ = "0.1.0"

__all__ = [
    "COUNTING_CONVENTIONS",
    "RULES",
    "CheckResult",
    "Finding",
    "GpuSpec",
    "InputError",
    "MemoryEstimate",
    "ModelSpec",
    "MoeplanError",
    "ParamCounts",
    "RankParams",
    "Scenario",
    "StageMemory",
    "StageParams",
    "ThroughputEstimate",
    "UnknownNameError",
    "VisionSpec",
    "count_params",
    "estimate_memory",
    "estimate_step",
    "get_gpu",
    "get_model",
    "list_gpus",
    "list_models",
    "load_scenario",
    "rank_params",
    "stage_params",
    "validate",
]
