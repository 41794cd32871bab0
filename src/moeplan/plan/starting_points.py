"""Built-in starting points: the layout families of the long-context and VLM guidance (packaged
``catalog/data/skill_recipes.yaml``, from the Megatron Bridge agent skills @067f987) and the published
Megatron Bridge performance layouts (:func:`moeplan.catalog.perf_recipes.perf_recipes`), each checked by the
rules and estimated as published, and — where the source leaves out what it needs to run (EP, the
offload fraction, an uneven split, ...) — as completed: every stated key held, the check's own fixes
applied, the keys the source leaves out searched by the planner with the recipes' training settings
(:func:`complete`)."""

from __future__ import annotations

import copy
import functools
from importlib import resources

import yaml

from moeplan.catalog.models import get_model
from moeplan.catalog.perf_recipes import listed_release_recipes, perf_recipes
from moeplan.errors import InputError, UnknownNameError
from moeplan.i18n.messages import msg
from moeplan.inputs.layout import PARALLEL_DIMS
from moeplan.inputs.resolved import Scenario
from moeplan.model.memory import estimate_memory
from moeplan.model.step import estimate_step
from moeplan.plan.changes import apply_check_fixes
from moeplan.plan.describe import describe
from moeplan.plan.search import search
from moeplan.resolve.load import load_scenario
from moeplan.rules import validate

#: the keys that define a layout's shape (held when a stated knob cannot be)
_DEFINING = (*PARALLEL_DIMS.values(), "use_megatron_fsdp", "data_parallel_sharding_strategy")


@functools.lru_cache(maxsize=1)
def skill_recipes() -> list[dict]:
    """The guidance layout families (id, family, scenario, notes, as_written)."""
    text = (resources.files("moeplan.catalog") / "data" / "skill_recipes.yaml").read_text(encoding="utf-8")
    return list(yaml.safe_load(text)["recipes"])


def _published_scenario(r: dict) -> dict:
    lay = {k: v for k, v in r["layout"].items() if v is not None and v != []}
    training = dict(r.get("training") or {})
    training.setdefault("seq_length", 4096)  # the perf recipes' default (rows that inherit it leave it out)
    if r.get("precisions"):
        training["precision"] = r["precisions"][0]
    return {
        "model": r["model"],
        "system": {"gpu": r["gpu"], "num_gpus": r["num_gpus"]},
        "training": training,
        "layout": lay,
        # a perf recipe as benchmarked: its helpers' settings (fused CE, bf16 grads, FP8 param gather,
        # layouts) and the benchmark-only ones (forced balance, no NaN check)
        "recipe_defaults": "mbridge-perf-benchmark",
        # a release's own recipe: its fills and software come from that container release
        **({"versions": {"container": r["release"]}} if r.get("release") else {}),
    }


def published_scenario(recipe_id: str) -> dict:
    """The scenario of one Megatron Bridge perf recipe of the catalog, by its id (``moeplan recipes
    --kind published`` lists them; e.g. ``deepseek_v3/64gpu_gb300_bf16_fsdp``), as ``recipes`` checks
    it: its model, GPUs, training, layout, ``recipe_defaults: mbridge-perf-benchmark``; a recipe of a
    release (:func:`moeplan.catalog.perf_recipes.listed_release_recipes`, e.g.
    ``26.08/nemotron_3_super_pretrain_64gpu_gb300_fp8mx_config``) also names its container release.

    Raises:
        UnknownNameError: an id that is no recipe of the catalog (with the closest ids).
    """
    rows = [*perf_recipes(), *listed_release_recipes()]
    for r in rows:
        if r["id"] == recipe_id:
            return _published_scenario(r)
    raise UnknownNameError("--from mbridge-recipe", recipe_id, [r["id"] for r in rows], "a perf recipe id:")


def _evaluate(scn: dict) -> dict:
    """Rules, memory and (with a global batch size) throughput of one recipe scenario."""

    out: dict = {}
    try:
        s = load_scenario(scn)
    except InputError as exc:
        out["check"] = {
            "verdict": "invalid",
            "rule_ids": ["input"],
            "errors": [{"rule_id": "input", "message": str(exc), "fix": None}],
            "warnings": [],
        }
        return out
    chk = validate(s)
    out["check"] = {
        "verdict": chk.verdict,
        "rule_ids": sorted({f.rule_id for f in chk.errors}),
        "errors": [{"rule_id": f.rule_id, "message": f.message, "fix": f.fix} for f in chk.errors],
        "warnings": sorted({f.rule_id for f in chk.warnings}),
    }
    try:
        mem = estimate_memory(s)
        out["memory"] = {
            "peak_gib": mem.peak_bytes / 2**30,
            "verdict": mem.verdict,
            "verdict_band": mem.memory_verdict.to_dict(),
            "dominant_items": mem.dominant_items(),
        }
    except InputError as exc:
        out["memory"] = None
        out["memory_note"] = str(exc)
        return out
    if s.training.global_batch_size and not chk.errors:
        th = estimate_step(s)
        out["throughput"] = {
            "tokens_per_s_per_gpu": th.tokens_per_s_per_gpu,
            "mfu": th.mfu,
            "validated": th.validity.get("validated"),
        }
    return out


#: the sequence length a source without one is completed at (the perf recipes' default)
DEFAULT_SEQ = 4096


def _held(data: dict, keys: dict):
    """The planner's best layout of ``data`` with ``keys`` held (one refined layout), or None."""
    try:
        res = search({**data, "layout": keys}, refine=1)
    except InputError:
        return None
    return res.candidates[0] if res.candidates else None


def _needs(source: Scenario, done: dict, training: dict) -> list[str]:
    """What the completed layout adds to or changes in the source's effective layout, ``key: value``
    each (a key at the value the source already resolves to is no need)."""
    have = source.layout.model_dump()
    out = []
    for k, v in done.items():
        if v is None or have.get(k) == v or (k == "cuda_graph_scope" and v == [] and not have.get(k)):
            continue
        out.append(f"{k}: {_show(have[k])} → {_show(v)}" if k in source.stated else f"{k}: {_show(v)}")
    out += [f"{k}: {v}" for k, v in training.items()]
    return out


def _show(v) -> str:
    if isinstance(v, bool) or v is None:
        return {True: "true", False: "false", None: "unset"}[v]
    return "[" + ", ".join(map(str, v)) + "]" if isinstance(v, (list, tuple)) else str(v)


#: what completion relaxes, in turn, when the layout as stated cannot fit: the recompute / offload
#: rung, then the CUDA graphs and EP overlap, then every knob (the parallel sizes stay)
#: the recompute / offload rung's keys, and the CUDA graphs' and EP overlap's
_RUNG_KEYS = (
    "recompute_granularity",
    "recompute_modules",
    "recompute_method",
    "recompute_num_layers",
    "optimizer_cpu_offload",
    "optimizer_offload_fraction",
)
_GRAPH_KEYS = ("cuda_graph_impl", "cuda_graph_scope", "cuda_graph_modules", "overlap_moe_expert_parallel_comm")
_RELAX = (
    ("every stated key", ()),
    ("every stated key but the recompute rung", _RUNG_KEYS),
    ("every stated key but the recompute rung and the CUDA graphs", _RUNG_KEYS + _GRAPH_KEYS),
)


def _complete_search(data: dict, lay: dict):
    """The first of :data:`_RELAX`'s holds (then the parallel sizes alone) under which a layout fits:
    (candidate, what was held), or (None, "")."""
    for how, drop in _RELAX:
        c = _held(data, {k: v for k, v in lay.items() if k not in drop})
        if c is not None:
            return c, how
    c = _held(data, {k: v for k, v in lay.items() if k in _DEFINING})
    return (c, "the parallel sizes only") if c is not None else (None, "")


def complete(scenario: dict) -> dict | None:
    """What a published layout needs to run, and how it then does: the keys the source states held,
    the check's own fixes applied (a pipeline split, the precision-aware optimizer offload needs, SP),
    the rest searched by the planner with the recipes' training settings (``recipe_defaults:
    mbridge-perf``) at the source's size (sequence length 4096 and about 4 Mi tokens per step where
    it gives none); when the stated knobs cannot fit, the recompute rung, then the graphs, then every
    knob is searched too (:data:`_RELAX`).

    Returns:
        ``{label, layout, needs [key: value], settings [the recipe training fills it rests on, key:
        value], held (what was held), peak_gib, capacity_gib,
        tokens_per_s_per_gpu, model_tflops_per_gpu, assumed [str]}``, or None when the source names
        no GPU count or nothing fits.
    """
    src = copy.deepcopy(scenario)
    if not (src.get("system") or {}).get("num_gpus"):
        return None
    training = dict(src.get("training") or {})
    assumed = []
    if "seq_length" not in training:
        training["seq_length"] = DEFAULT_SEQ
        assumed.append(f"seq_length {DEFAULT_SEQ} (the source gives none)")
    data = {**src, "training": training, "recipe_defaults": "mbridge-perf"}
    lay = dict(src.get("layout") or {})
    try:
        source = load_scenario({**data, "recipe_defaults": "none"})  # as written: what it needs is new
        fix = apply_check_fixes(data, validate(load_scenario(data)).errors)
    except InputError:
        return None
    if fix is not None:
        lay = dict(fix[0]["layout"])
    c, how = _complete_search(data, lay)
    if c is None:
        return None
    filled = c.scenario.recipe.filled_keys() if c.scenario.recipe is not None else frozenset()
    eff = {k: v for k, v in c.scenario.layout.model_dump().items() if v is not None}
    th = c.throughput
    added = {k: v for k, v in c.data["training"].items() if k not in (src.get("training") or {})}
    return {
        "label": describe(c),
        "layout": {k: v for k, v in c.data["layout"].items() if v is not None},
        "needs": _needs(source, {k: v for k, v in eff.items() if k not in filled}, added),
        "settings": _needs(source, {k: v for k, v in eff.items() if k in filled}, {}),
        "held": how,
        "peak_gib": c.peak_gib,
        "capacity_gib": c.capacity_gib,
        "tokens_per_s_per_gpu": th["tokens_per_s_per_gpu"],
        "model_tflops_per_gpu": th["model_tflops_per_gpu"],
        "assumed": assumed + ["the recipes' training settings (recipe_defaults: mbridge-perf)"],
    }


def list_recipes(kind: str = "all", model: str | None = None) -> list[dict]:
    """Built-in starting points, each checked and estimated.

    Args:
        kind: ``all``, ``guidance`` (skill layout families) or ``published`` (Bridge perf recipes).
        model: keep only this model (HF id, short name or unique prefix, as elsewhere).

    Returns:
        rows with ``id``, ``source`` (guidance / published), ``family``, ``scenario``, ``notes``,
        ``check`` (verdict, rule ids, errors with fixes), ``memory`` and ``throughput`` when computable,
        as published; for a guidance layout that does not run as written, ``completed``
        (:func:`complete`, None when the source gives no GPU count or nothing fits).

    Raises:
        InputError: unknown model name.
    """

    want = get_model(model).name if model else None
    rows = []
    if kind in ("all", "guidance"):
        for r in skill_recipes():
            if want and r["scenario"].get("model") != want:
                continue
            row = {
                "id": r["id"],
                "source": "guidance",
                "family": r["family"],
                "scenario": r["scenario"],
                "notes": list(r.get("notes") or []),
                "as_written": r.get("as_written"),
            }
            row.update(_evaluate(r["scenario"]))
            broken = row["check"]["rule_ids"] or (row.get("memory") or {}).get("verdict") == "does-not-fit"
            if broken and row["check"]["rule_ids"] != ["input"]:
                row["completed"] = complete(r["scenario"])
            rows.append(row)
    if kind in ("all", "published"):
        for r in [*perf_recipes(), *listed_release_recipes()]:  # read only: each row is copied into its scenario
            if want and r["model"] != want:
                continue
            scn = _published_scenario(r)
            row = {
                "id": r["id"],
                "source": "published",
                "family": f"mbridge {r['release']}" if r.get("release") else f"mbridge table {r['table']}",
                "release": r.get("release"),
                "scenario": scn,
                "notes": _release_notes(r),
            }
            row.update(_evaluate(scn))
            rows.append(row)
    return rows


def _release_notes(r: dict) -> list[str]:
    """What a release's recipe row rests on: its release and Bridge file, and where its sequence length
    comes from when the perf recipe leaves it to its model recipe."""
    if not r.get("release"):
        return []
    extra = r.get("extra") or {}
    notes: list[str] = [
        msg("recipes_2026.release_recipe", release=r["release"], tag=extra.get("tag"), file=extra.get("file"))
    ]
    if extra.get("seq_length_from"):
        seq = (r.get("training") or {}).get("seq_length")
        notes.append(msg("recipes_2026.seq_from_model_recipe", seq=seq, recipe=extra["seq_length_from"]))
    return notes
