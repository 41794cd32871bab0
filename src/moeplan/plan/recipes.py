"""Built-in starting points: the layout families of the long-context and VLM guidance (packaged
``catalog/data/skill_recipes.yaml``, from the Megatron Bridge agent skills @067f987) and the published
Megatron Bridge performance layouts (packaged ``mbridge_perf_recipes.yaml``), each checked by the
rules and estimated."""

from __future__ import annotations

import functools
from importlib import resources

import yaml

from moeplan.catalog.models import get_model
from moeplan.errors import InputError
from moeplan.model.memory import estimate_memory
from moeplan.model.step import estimate_step
from moeplan.rules import validate
from moeplan.spec.scenario import load_scenario


@functools.lru_cache(maxsize=1)
def skill_recipes() -> list[dict]:
    """The guidance layout families (id, family, scenario, notes, as_written)."""
    text = (resources.files("moeplan.catalog") / "data" / "skill_recipes.yaml").read_text(encoding="utf-8")
    return list(yaml.safe_load(text)["recipes"])


@functools.lru_cache(maxsize=1)
def published_recipes() -> list[dict]:
    """The packaged Megatron Bridge performance recipe rows (Table A @067f987, Table B @v0.5.1)."""
    text = (resources.files("moeplan.catalog") / "data" / "mbridge_perf_recipes.yaml").read_text(encoding="utf-8")
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
        # a perf recipe runs with its helpers' settings (fused CE, bf16 grads, FP8 param gather, layouts)
        "recipe_defaults": "mbridge-perf",
    }


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
        out["memory"] = {"peak_gib": mem.peak_bytes / 2**30, "verdict": mem.verdict}
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


def list_recipes(kind: str = "all", model: str | None = None) -> list[dict]:
    """Built-in starting points, each checked and estimated.

    Args:
        kind: ``all``, ``guidance`` (skill layout families) or ``published`` (Bridge perf recipes).
        model: keep only this model (HF id, short name or unique prefix, as elsewhere).

    Returns:
        rows with ``id``, ``source`` (guidance / published), ``family``, ``scenario``, ``notes``,
        ``check`` (verdict, rule ids, errors with fixes), ``memory`` and ``throughput`` when computable.

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
            rows.append(row)
    if kind in ("all", "published"):
        for r in published_recipes():
            if want and r["model"] != want:
                continue
            scn = _published_scenario(r)
            row = {
                "id": r["id"],
                "source": "published",
                "family": f"mbridge table {r['table']}",
                "scenario": scn,
                "notes": [],
            }
            row.update(_evaluate(scn))
            rows.append(row)
    return rows
