"""Megatron Bridge performance recipes (Table A: flat perf recipes at Bridge 067f987; Table B: legacy
workload base configs at v0.5.1), read lazily from ``catalog/data/mbridge_perf_recipes.yaml``
(generated from the project's reference digest by ``scripts/import_recipes.py``)."""

from __future__ import annotations

import functools
import json
from importlib import resources

import yaml


@functools.lru_cache(maxsize=1)
def perf_recipes() -> list[dict]:
    """Every recipe row (a list of mappings, cached): ``id``, ``table`` (``A``: flat perf recipes at
    Megatron Bridge 067f987; ``B``: workload base configs at v0.5.1), ``model`` (HF id), ``gpu``
    (catalog id), ``num_gpus``, ``precisions`` (moeplan names), ``training`` (seq_length,
    micro_batch_size, global_batch_size in sequences), ``layout`` (LayoutSpec keys), ``extra``
    (``file``: the Bridge source file; other knobs as strings), ``inherited``, ``row`` (the digest's
    table row). Source: ``megatron_recipes.md`` §1.4–1.5 (vendored in ``tests/data/reference``) via
    ``scripts/import_recipes.py``."""
    text = (resources.files("moeplan.catalog") / "data" / "mbridge_perf_recipes.yaml").read_text()
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when present: ~20x faster
    return yaml.load(text, Loader=loader)["recipes"]  # noqa: S506 - a safe loader


@functools.lru_cache(maxsize=1)
def perf_recipe_history() -> dict[str, list[dict]]:
    """The workload base configs each container release shipped, by release (cached): rows of the
    schema of :func:`perf_recipes` with ``table: "H"``, ``release`` and ``extra`` naming the Bridge
    ``tag``, ``commit`` and ``file``. Source: Megatron Bridge ``scripts/performance/configs`` at the
    release's tag (25.11 v0.2.0 … 26.06 v0.5.0), and from 26.08 (v0.6.0) the flat perf recipes
    ``src/megatron/bridge/perf_recipes``, evaluated by ``scripts/import_recipe_history.py``. Rows of models
    the catalog does not hold yet are kept; no scenario names them, so they are never matched."""
    text = (resources.files("moeplan.catalog") / "data" / "mbridge_perf_recipes_by_release.yaml").read_text()
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    out: dict[str, list[dict]] = {}
    for row in yaml.load(text, Loader=loader)["recipes"]:  # noqa: S506 - a safe loader
        out.setdefault(row["release"], []).append(row)
    return out


def listed_release_recipes() -> list[dict]:
    """The perf recipes of the newest release :func:`perf_recipe_history` holds (26.08, Megatron Bridge
    v0.6.0's flat perf recipes) of the models the current tables (:func:`perf_recipes`) have no row of
    (Nemotron-3 Nano / Super / Ultra, Nemotron-3.5 Lightning, DeepSeek-V4-Flash), in the schema of
    :func:`perf_recipe_history` (``release`` names the container release; ``training.seq_length`` is the
    perf recipe's own or, where it leaves it to its model recipe, the model recipe's, named in
    ``extra.seq_length_from``). ``moeplan recipes`` lists them beside the current tables."""
    history = perf_recipe_history()
    if not history:
        return []
    newest = list(history)[-1]
    have = {r["model"] for r in perf_recipes()}
    return [r for r in history[newest] if r["model"] not in have]


def release_bridge_tag(release: str) -> str | None:
    """The Megatron Bridge tag whose workload configs :func:`perf_recipe_history` holds for container
    ``release`` (``26.08`` -> ``v0.6.0``), or None when it holds none for that release."""
    rows = perf_recipe_history().get(release)
    return rows[0]["extra"]["tag"] if rows else None


@functools.lru_cache(maxsize=1)
def published_runs() -> list[dict]:
    """The measured Megatron Bridge performance-summary runs (cached): ``id``, ``release``, ``model``,
    ``gpu``, ``num_gpus``, ``training`` (seq_length, micro/global batch in sequences, precision),
    ``layout`` (the published sizes), ``measured`` (tokens_per_s_per_gpu, model_tflops_per_gpu).
    Source: ``catalog/data/published_measured.json`` (``scripts/package_measured.py``)."""
    text = resources.files("moeplan.catalog").joinpath("data").joinpath("published_measured.json").read_text()
    return json.loads(text)["runs"]


def run_scenario(run: dict) -> dict:
    """The scenario a published run (:func:`published_runs`, :func:`held_out_runs`) is predicted with:
    its model, system, training and published sizes, the perf recipe's benchmark settings
    (``recipe_defaults: mbridge-perf-benchmark``: forced balance, as the summaries benchmark) and its
    container release (whose recipe fills and software efficiency apply)."""
    return {
        "model": run["model"],
        "system": {"gpu": run["gpu"], "num_gpus": run["num_gpus"]},
        "training": dict(run["training"]),
        "layout": dict(run["layout"]),
        "recipe_defaults": "mbridge-perf-benchmark",
        "versions": {"container": run["release"]},
    }


@functools.lru_cache(maxsize=1)
def held_out_runs() -> list[dict]:
    """The measured runs of the held-out releases (cached; 26.08, Megatron Bridge v0.6.0's summary), in
    the schema of :func:`published_runs`: validation only, never fitted nor read by the planner's
    baseline. Their models may not be in the catalog yet (Nemotron-3 Super / Ultra, Nemotron-3.5
    Lightning, DeepSeek-V4-Flash); a reader resolves each and skips, saying why, the ones it cannot.
    Source: ``catalog/data/published_measured.json`` ``held_out_runs`` (``scripts/package_measured.py``)."""
    text = resources.files("moeplan.catalog").joinpath("data").joinpath("published_measured.json").read_text()
    return json.loads(text)["held_out_runs"]


def held_out_releases() -> tuple[str, ...]:
    """The container releases declared out of sample (``26.08``): no constant is fitted on their runs."""
    text = resources.files("moeplan.catalog").joinpath("data").joinpath("published_measured.json").read_text()
    return tuple(json.loads(text)["held_out_releases"])


_CORE = (
    "tensor_model_parallel_size",
    "pipeline_model_parallel_size",
    "context_parallel_size",
    "expert_model_parallel_size",
)


#: when no recipe row has the run's precision, the row of the precision its recipe derives from, with
#: the same model, GPU and layout, carries the knobs the run did not publish: Bridge's ``fp8sc`` recipes
#: start from ``fp8_cs`` and then set ``fp8_recipe="blockwise"`` (megatron_recipes.md §1; DeepSeek-V3
#: H100 also sets ``fp8_param_gather=False``, a precision key that is not borrowed). The H100 "FP8" rows
#: of the 26.02+ tables are recorded as fp8-blockwise and have no fp8_sc row at 067f987.
PRECISION_FALLBACK = {"fp8-blockwise": ("fp8-tensorwise",)}
#: layout keys that belong to a recipe's precision and are not borrowed from another precision's row
PRECISION_KEYS = frozenset(
    {
        "fp8_dot_product_attention",
        "fp8_param_gather",
        "use_precision_aware_optimizer",
        "exp_avg_dtype",
        "exp_avg_sq_dtype",
        "main_grads_dtype",
    }
)


def match_perf_recipe(
    model_id: str,
    gpu_id: str | None,
    precision: str,
    layout: dict,
    micro_batch_size: int | None,
    num_gpus: int | None = None,
    release: str | None = None,
    global_batch_size: int | None = None,
):
    """The recipe row a published run most likely used: same model, GPU and precision, and the same
    TP, PP, CP and EP; among those, the same VPP, then the same micro-batch size, then the same GPU
    count, then the same global batch size (Bridge's ``V1``/``V2`` variants of one layout differ by
    it: gpt-oss-120b on GB200, GBS 512 without EP overlap, GBS 1280 with it), then Table A (the newer
    recipes) first. When no row has the precision, the row of the
    precision it derives from (:data:`PRECISION_FALLBACK`) with the same core layout, ranked the same
    way; the caller keeps only its precision-neutral keys (:data:`PRECISION_KEYS`).

    With a container ``release`` that :func:`perf_recipe_history` covers, the rows that release
    shipped are searched first, ranked the same way: a run is filled with what its own release's
    recipe set (e.g. 26.02's EP A2A overlap for Qwen3-235B on B300, not HEAD's HybridEP). When none
    has this TP/PP/CP/EP, the release's config for the same model, GPU and precision of the closest
    layout (most of TP/PP/CP/EP equal, then the ranking above) is returned, marked
    ``"layout_unmatched": True``: its settings (dispatcher, graphs, recompute, overlap) are what that
    release ran this model with on this GPU, and the caller keeps its settings, not its sizes
    (``resolve.recipe_fills``). 25.11 published DeepSeek-V3 on GB300 at PP 2, EP 32 while its workload config is
    PP 4, EP 64 with HybridEP and TE graphs; HEAD's row of the published layout has full-iteration graphs
    and a paged stash that 25.11's megatron-core does not have. Only when the release shipped no config
    for this model, GPU and precision are the current tables searched.

    Args:
        model_id: HF id (``deepseek-ai/DeepSeek-V3``); gpu_id: lower-case catalog id.
        precision: moeplan precision name; layout: LayoutSpec keys (missing sizes count as 1).
        micro_batch_size / num_gpus / global_batch_size: tie-breaks (sequences; GPUs; sequences).
        release: the container release (``26.02``), or None for the current tables only.

    Returns:
        the row mapping (:func:`perf_recipes`; a copy with ``layout_unmatched`` set when it is the
        release's config of another layout), or ``None`` when no row qualifies. Never raises.
    """

    shipped = perf_recipe_history().get(release, []) if release is not None else []
    sizes = (micro_batch_size, num_gpus, global_batch_size)
    found = _best_row(shipped, model_id, gpu_id, precision, layout, sizes)
    if found is not None:
        return found
    other = _best_row(shipped, model_id, gpu_id, precision, layout, sizes, same_core=False)
    if other is not None:
        return {**other, "layout_unmatched": True}
    return _best_row(perf_recipes(), model_id, gpu_id, precision, layout, sizes)


def _best_row(rows, model_id, gpu_id, precision, layout, sizes, same_core: bool = True):
    """The best-ranked row of ``rows`` as :func:`match_perf_recipe` ranks them, or None; with
    ``same_core=False`` rows of another TP/PP/CP/EP qualify too, the most of those sizes equal first."""

    def norm_vpp(v):
        return None if v in (None, 1) else v

    micro_batch_size, num_gpus, global_batch_size = sizes
    order = (precision, *PRECISION_FALLBACK.get(precision, ()))
    best, best_score = None, None
    for r in rows:
        if r["model"] != model_id or r["gpu"] != gpu_id:
            continue
        prec_rank = min((i for i, p in enumerate(order) if p in r["precisions"]), default=None)
        if prec_rank is None:
            continue
        lay = r["layout"]
        equal_core = sum(lay.get(k, 1) == layout.get(k, 1) for k in _CORE)
        if same_core and equal_core < len(_CORE):
            continue
        score = (
            -prec_rank,
            equal_core,
            norm_vpp(lay.get("virtual_pipeline_model_parallel_size"))
            == norm_vpp(layout.get("virtual_pipeline_model_parallel_size")),
            (r.get("training") or {}).get("micro_batch_size") == micro_batch_size,
            num_gpus is None or r.get("num_gpus") == num_gpus,
            global_batch_size is None or (r.get("training") or {}).get("global_batch_size") == global_batch_size,
            r["table"] == "A",
            "dev" not in r["id"].lower() and "large_scale" not in r["id"].lower(),
        )
        if best_score is None or score > best_score:
            best, best_score = r, score
    return best
