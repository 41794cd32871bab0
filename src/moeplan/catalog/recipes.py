"""Megatron Bridge performance recipes (Table A: flat perf recipes at Bridge 067f987; Table B: legacy
workload base configs at v0.5.1), read lazily from ``catalog/data/mbridge_perf_recipes.yaml``
(generated from the project's reference digest by ``scripts/import_recipes.py``)."""

from __future__ import annotations

import functools
from importlib import resources

import yaml


@functools.lru_cache(maxsize=1)
def perf_recipes() -> list[dict]:
    """Every recipe row: id, table, model (HF id), gpu, num_gpus, precisions, training, layout, extra."""
    text = resources.files("moeplan.catalog").joinpath("data", "mbridge_perf_recipes.yaml").read_text()
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when present: ~20x faster
    return yaml.load(text, Loader=loader)["recipes"]  # noqa: S506 - a safe loader


_CORE = (
    "tensor_model_parallel_size",
    "pipeline_model_parallel_size",
    "context_parallel_size",
    "expert_model_parallel_size",
)


def match_perf_recipe(model_id: str, gpu_id: str | None, precision: str, layout: dict, micro_batch_size: int | None):
    """The recipe row a published run most likely used: same model, GPU and precision, and the same
    TP, PP, CP and EP; among those, the same VPP, then the same micro-batch size, then Table A (the
    newer recipes) first. Returns ``None`` when no row has the same core layout."""

    def norm_vpp(v):
        return None if v in (None, 1) else v

    best, best_score = None, None
    for r in perf_recipes():
        if r["model"] != model_id or r["gpu"] != gpu_id or precision not in r["precisions"]:
            continue
        lay = r["layout"]
        if any(lay.get(k, 1) != layout.get(k, 1) for k in _CORE):
            continue
        score = (
            norm_vpp(lay.get("virtual_pipeline_model_parallel_size"))
            == norm_vpp(layout.get("virtual_pipeline_model_parallel_size")),
            (r.get("training") or {}).get("micro_batch_size") == micro_batch_size,
            r["table"] == "A",
            "dev" not in r["id"] and "large_scale" not in r["id"],
        )
        if best_score is None or score > best_score:
            best, best_score = r, score
    return best
