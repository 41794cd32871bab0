"""Scenario: model + system + training + layout (+ framework, versions, environment), loaded from
YAML or a mapping, validated, then *resolved*: Megatron's effective defaults are filled for keys the
user did not state, each fill recorded with its reason, and DP / EDP derived.

Schema (documented in the README, section "Scenario files"):

```yaml
model: deepseek-ai/DeepSeek-V3   # HF id, short name, path to config.json, or null
model_overrides: {num_layers: 16}
system: {gpu: h100, num_gpus: 256, gpus_per_node: 8, gpu_overrides: {usable_hbm_gib: 75}}
training: {seq_length: 131072, micro_batch_size: 1, global_batch_size: 512, precision: bf16}
layout: {tensor_model_parallel_size: 2, context_parallel_size: 16, ...}
framework: megatron-bridge        # or megatron-core (resolves ETP/dispatcher defaults differently)
recipe_defaults: none             # or mbridge-perf (fill unstated keys from Bridge's perf recipes)
versions: {megatron_core: "0.20.0", megatron_bridge: "0.3.0"}
environment: {PYTORCH_CUDA_ALLOC_CONF: "expandable_segments:True"}
reported: {model_tflops_per_gpu: 1937}
```

This module is the entry point (:func:`load_scenario`) and re-exports every name of the pieces it
is built from, so ``from moeplan.spec.scenario import X`` keeps working:

- :mod:`moeplan.spec.inputs` — the input schema (pydantic models), :func:`scenario_from_dict`;
- :mod:`moeplan.spec.loading` — strict YAML, scenario files, ``--set`` values, override merging;
- :mod:`moeplan.spec.defaults` — :func:`resolve`: framework defaults, one function per concern;
- :mod:`moeplan.spec.recipes` / :mod:`moeplan.spec.provenance` — recipe fills as a record;
- :mod:`moeplan.spec.resolved` — the frozen :class:`Scenario`, :class:`Resolution`, versions.
"""

from __future__ import annotations

from pathlib import Path

from moeplan.spec.defaults import _resolve_gpu, framework_defaults, resolve, resolve_model
from moeplan.spec.inputs import (
    _SECTIONS,
    FRAMEWORKS,
    AssumptionsInput,
    OverheadsInput,
    ReportedInput,
    ScenarioInput,
    SystemInput,
    VersionsInput,
    WorkloadInput,
    _check_unknown_keys,
    _pydantic_to_input_error,
    scenario_from_dict,
)
from moeplan.spec.loading import (
    _construct_mapping,
    _deep_merge,
    _UniqueKeyLoader,
    load_scenario_file,
    load_yaml_text,
    merge_overrides,
    parse_yaml_value,
)
from moeplan.spec.provenance import RecipeFill, RecipeProvenance, RecipeRow
from moeplan.spec.recipes import _RECIPE_KEY_GROUPS, _STATIC_BUDGET, apply_recipe, recipe_for_input
from moeplan.spec.resolved import NEWEST_BRIDGE, NEWEST_MCORE, Resolution, Scenario, parse_version


def load_scenario(
    source: str | Path | dict | None = None,
    overrides: dict[str, dict] | None = None,
    *,
    recipe: RecipeProvenance | None = None,
) -> Scenario:
    """Load (file path or mapping), merge CLI overrides, validate and resolve a scenario.

    Args:
        source: a YAML file path, a scenario mapping (not changed), or None (an empty scenario).
        overrides: CLI values, section → key → value (:func:`merge_overrides`).
        recipe: recipe fills computed once for a request (the planner's), applied instead of matching
            a recipe row for this scenario's own layout (see :func:`moeplan.spec.defaults.resolve`).

    Raises:
        InputError: anything wrong with the input, naming the field, value and what is allowed.
    """
    if source is None:
        data: dict = {}
    elif isinstance(source, dict):
        data = dict(source)
    else:
        data = load_scenario_file(source)
    if overrides:
        data = merge_overrides(data, overrides)
    return resolve(scenario_from_dict(data), recipe)


__all__ = [
    "FRAMEWORKS",
    "NEWEST_BRIDGE",
    "NEWEST_MCORE",
    "_RECIPE_KEY_GROUPS",
    "_SECTIONS",
    "_STATIC_BUDGET",
    "AssumptionsInput",
    "OverheadsInput",
    "RecipeFill",
    "RecipeProvenance",
    "RecipeRow",
    "ReportedInput",
    "Resolution",
    "Scenario",
    "ScenarioInput",
    "SystemInput",
    "VersionsInput",
    "WorkloadInput",
    "_UniqueKeyLoader",
    "_check_unknown_keys",
    "_construct_mapping",
    "_deep_merge",
    "_pydantic_to_input_error",
    "_resolve_gpu",
    "apply_recipe",
    "framework_defaults",
    "load_scenario",
    "load_scenario_file",
    "load_yaml_text",
    "merge_overrides",
    "parse_version",
    "parse_yaml_value",
    "recipe_for_input",
    "resolve",
    "resolve_model",
    "scenario_from_dict",
]
