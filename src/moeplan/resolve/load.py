"""The entry point of resolution: a scenario file, a mapping or nothing, plus CLI overrides → a
validated, resolved :class:`~moeplan.inputs.resolved.Scenario`, in one pass.

Schema (documented in ``docs/scenario.md``, rendered from the field declarations):
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
The steps live where they belong: reading (:mod:`moeplan.inputs.loading`), validation
(:mod:`moeplan.inputs.schema`), then resolution (:func:`moeplan.resolve.defaults.resolve`: the
model and GPU from the catalog, recipe fills, Megatron's effective defaults, DP / EDP).
"""

from __future__ import annotations

from pathlib import Path

from moeplan.inputs.loading import load_scenario_file, merge_overrides
from moeplan.inputs.provenance import RecipeProvenance
from moeplan.inputs.resolved import Scenario
from moeplan.inputs.schema import scenario_from_dict
from moeplan.resolve.defaults import resolve


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
            a recipe row for this scenario's own layout (see :func:`moeplan.resolve.defaults.resolve`).

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
