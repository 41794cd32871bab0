"""What the planner's pick is compared with: the rule of thumb (CP ≈ seq/4096), the guidance's
layout family at the user's size (as written, and completed by a search when it does not run as
written), and the best Megatron-FSDP layout against the best 3D one for VLMs."""

from __future__ import annotations

import copy
import math
from typing import Any

from moeplan.catalog.perf_recipes import published_runs, run_scenario
from moeplan.errors import InputError
from moeplan.i18n.messages import msg
from moeplan.inputs.layout import PARALLEL_DIMS
from moeplan.model.memory import estimate_memory
from moeplan.model.step import estimate_step
from moeplan.plan.describe import candidate_dict, describe
from moeplan.plan.search import Candidate, SearchResult, search
from moeplan.plan.starting_points import skill_recipes
from moeplan.resolve.load import load_scenario
from moeplan.rules import validate


def rule_of_thumb_cp(seq_length: int) -> int:
    """CP ≈ seq_len / 4096, rounded to the nearest power of two (≥ 1). Source: the long-context
    guidance (``guidance.md``: "First guess CP ≈ seq_len / 4096, rounded to a power of two")."""
    x = max(1.0, seq_length / 4096)
    return 2 ** round(math.log2(x))


def _held_search(base: dict, layout: dict, constants=None, refine: int = 1, **search_kw) -> SearchResult | None:
    """A quick search of the request with ``layout`` held fixed (the ``refine`` best layouts refined),
    its candidates filled as the request's own (``search(recipe_from=base)``), so that a layout it finds
    is the same run as the main search's of that layout; None when those keys cannot fold into the world."""
    try:
        return search(
            {**base, "layout": layout}, refine=refine, constants=constants, recipe_from=base, exact=False, **search_kw
        )
    except InputError:
        return None


def rule_of_thumb_baseline(res: SearchResult, base: dict | None = None, constants=None, **search_kw) -> dict:
    """The rule-of-thumb CP (best layout the search found with that CP; when the search pruned that
    CP as far slower, a search with CP held at it, so its figure is its best) and the guidance's layout
    family for this model and GPU, evaluated as written at the request's size."""
    seq = res.request["seq_length"]
    cp = rule_of_thumb_cp(seq)
    out: dict = {"rule_of_thumb": {"rule": f"CP ≈ seq_len/4096 → CP {cp}", "context_parallel_size": cp}}
    win = res.candidates[0] if res.candidates else None
    match = next((c for c in res.candidates if c.parallel.cp == cp), None)
    rank: int | None = res.candidates.index(match) + 1 if match is not None else None
    held = dict((base or {}).get("layout") or {})
    fam = family_baseline(res, base, constants, **search_kw)
    if (win is None or win.parallel.cp != cp) and base is not None and "context_parallel_size" not in held:
        # the main search refines only its best layouts; a search with CP held, and the guidance family
        # completed at this CP, give the rule of thumb its best
        sub = _held_search(base, {**held, "context_parallel_size": cp}, constants, refine=2, **search_kw)
        others = [x for x in (sub.candidates[:1] if sub else []) + [(fam or {}).get("_candidate")] if x is not None]
        others = [x for x in others if x.parallel.cp == cp]
        best_other = max(others, key=lambda x: x.tokens_per_s_per_gpu, default=None)
        if best_other is not None and (match is None or best_other.tokens_per_s_per_gpu > match.tokens_per_s_per_gpu):
            match, rank = best_other, None
            out["rule_of_thumb"]["note"] = "its best with CP held at it (a search of its own)"
            out["_extra"] = [best_other]  # the planner ranks it with its own candidates
        elif match is None and sub is None:
            out["rule_of_thumb"]["why_not"] = (
                f"CP {cp} does not fold into {res.request['num_gpus']} GPUs with the keys held and the "
                "data-parallel minimum"
            )
        elif match is None and sub is not None and sub.rejected.counts:
            top = max(sub.rejected.counts, key=lambda r: sub.rejected.counts[r])
            out["rule_of_thumb"]["why_not"] = msg(
                "plan.no_legal_layout_with_cp_because",
                cp=cp,
                n=sub.rejected.counts[top],
                total=sum(sub.rejected.counts.values()),
                rule=top,
                example=sub.rejected.examples[top],
            )
    if match is not None:
        out["rule_of_thumb"]["candidate"] = candidate_dict(match, rank, None)
        if win is not None:
            out["rule_of_thumb"]["search_gain_pct"] = 100 * (win.tokens_per_s_per_gpu / match.tokens_per_s_per_gpu - 1)
    else:
        out["rule_of_thumb"]["candidate"] = None
        out["rule_of_thumb"].setdefault("why_not", msg("plan.no_legal_layout_with_cp", cp=cp))
    pub = published_baseline(res, constants)
    if pub is not None:
        out["published"] = pub
    if fam is not None:
        extra = fam.pop("_candidate", None)
        if extra is not None:
            out.setdefault("_extra", []).append(extra)
        out["family"] = fam
        if win is not None and fam.get("throughput"):
            fam["search_gain_pct"] = 100 * (win.tokens_per_s_per_gpu / fam["throughput"]["tokens_per_s_per_gpu"] - 1)
    return out


def _layout_label(lay: dict) -> str:
    names = (
        ("TP", "tensor_model_parallel_size"),
        ("PP", "pipeline_model_parallel_size"),
        ("VPP", "virtual_pipeline_model_parallel_size"),
        ("CP", "context_parallel_size"),
        ("EP", "expert_model_parallel_size"),
    )
    out = " ".join(f"{n}{lay[k]}" for n, k in names if lay.get(k) is not None)
    return ("FSDP " if lay.get("use_megatron_fsdp") else "") + out


def published_baseline(res: SearchResult, constants=None) -> dict | None:
    """The published Megatron Bridge run of the request's model, GPU, GPU count, precision and
    sequence length (the newest release; the request's global batch when one was published), with its
    measured tokens/s/GPU, what the model predicts for it as benchmarked (its own batch, release and
    the recipe's benchmark settings), and how far #1's prediction is from that prediction against the
    error band. None when no such run is published."""
    req = res.request
    same = [
        r
        for r in published_runs()
        if (r["model"], r["gpu"], r["num_gpus"]) == (req["model"], req["gpu"], req["num_gpus"])
        and r["training"].get("precision") == req["precision"]
        and r["training"].get("seq_length") == req["seq_length"]
    ]
    if not same:
        return None
    newest = max(r["release"] for r in same)
    pick = sorted(
        (r for r in same if r["release"] == newest),
        key=lambda r: (r["training"].get("global_batch_size") != req["global_batch_size"], r["id"]),
    )[0]
    data = run_scenario(pick)
    out = {
        "id": pick["id"],
        "release": pick["release"],
        "label": _layout_label(pick["layout"]),
        "global_batch_size": pick["training"].get("global_batch_size"),
        "micro_batch_size": pick["training"].get("micro_batch_size"),
        "measured_tokens_per_s_per_gpu": pick["measured"]["tokens_per_s_per_gpu"],
        "measured_model_tflops_per_gpu": pick["measured"].get("model_tflops_per_gpu"),
    }
    try:
        th = estimate_step(load_scenario(data), constants)
    except InputError:
        return out
    pred = th.tokens_per_s_per_gpu
    out["predicted_tokens_per_s_per_gpu"] = pred
    out["prediction_error_pct"] = 100 * (pred / out["measured_tokens_per_s_per_gpu"] - 1)
    out["error_band_pct"] = th.validity.get("error_band_pct")
    if res.candidates:
        out["first_vs_published_pct"] = 100 * (res.candidates[0].tokens_per_s_per_gpu / pred - 1)
        out["first_differs"] = differs(pick["layout"], res.candidates[0].scenario, complete=True)
    return out


#: the parallel sizes a published layout that leaves them out runs at 1 (VPP: none, the same)
_SIZES_AT_ONE = tuple(PARALLEL_DIMS[k] for k in ("TP", "PP", "VPP", "CP", "EP"))


def differs(layout: dict, s, complete: bool = False) -> list[str]:
    """The keys a published layout states that a candidate's scenario ``s`` runs differently, as
    ``key: published → candidate`` (e.g. ``moe_flex_dispatcher_backend: hybridep → unset``); with
    ``complete`` (a published run, whose unstated sizes are 1), also the TP, PP, VPP, CP and EP sizes
    it leaves out that the candidate does not run at 1 (``virtual_pipeline_model_parallel_size: unset
    → 4``). A guidance family's unstated sizes are unknown, not 1, so it is not ``complete``."""
    eff = s.layout.model_dump()

    def show(v) -> str:
        if isinstance(v, bool) or v is None:
            return {True: "true", False: "false", None: "unset"}[v]
        return "[" + ", ".join(map(str, v)) + "]" if isinstance(v, list) else str(v)

    out = [f"{k}: {show(v)} → {show(eff.get(k))}" for k, v in layout.items() if k in eff and eff.get(k) != v]
    for k in _SIZES_AT_ONE if complete else ():
        if k not in layout and (eff.get(k) or 1) != 1:
            out.append(f"{k}: {show(None if k == PARALLEL_DIMS['VPP'] else 1)} → {show(eff[k])}")
    return out


#: how far (in octaves of sequence length) the nearest guidance family may lie from the request's
#: sequence length and still be shown beside the plan: a factor of 2
FAMILY_SEQ_OCTAVES = 1.0


def family_baseline(res: SearchResult, base: dict | None = None, constants=None, **search_kw) -> dict | None:
    """The guidance layout family (packaged ``skill_recipes.yaml``) of the same model and GPU with the
    nearest sequence length, its layout applied at the request's GPU count, sequence and batch; when
    that breaks a rule or does not fit (the source often leaves EP, the pipeline layout or the offload
    fraction unstated), also ``completed``: the search's best with the family's parallel sizes held."""
    req = res.request
    same = [
        r
        for r in skill_recipes()
        if r["scenario"].get("model") == req["model"] and r["scenario"]["system"].get("gpu") == req["gpu"]
    ]
    if not same:
        return None

    def distance(r) -> float:  # a family that states no sequence length (the VLM ones) is at any
        seq = r["scenario"]["training"].get("seq_length")
        return abs(math.log2(seq / req["seq_length"])) if seq else 0.0

    rec = min(same, key=lambda r: (distance(r), r["id"]))
    if distance(rec) > FAMILY_SEQ_OCTAVES:
        return None  # a family for another length regime (e.g. 128K against a 4K request) says nothing here
    data = copy.deepcopy(rec["scenario"])
    data["system"]["num_gpus"] = req["num_gpus"]
    data["training"].update(
        seq_length=req["seq_length"], global_batch_size=req["global_batch_size"], precision=req["precision"]
    )
    data["training"].setdefault("micro_batch_size", 1)
    out = {"recipe": rec["id"], "family": rec["family"], "layout": dict(data["layout"])}
    if res.candidates:
        out["first_differs"] = differs(data["layout"], res.candidates[0].scenario)
    try:
        s = load_scenario(data)
        chk = validate(s)
        out["check"] = {"verdict": chk.verdict, "errors": [f"{f.rule_id}: {f.message}" for f in chk.errors]}
        mem = estimate_memory(s)
        out["memory"] = {
            "peak_gib": mem.peak_bytes / 2**30,
            "verdict": mem.verdict,
            "verdict_band": mem.memory_verdict.to_dict(),
            "dominant_items": mem.dominant_items(),
        }
        out["throughput"] = estimate_step(s).to_dict() if not chk.errors else None
    except InputError as exc:
        out["check"] = {"verdict": "invalid", "errors": [str(exc)]}
        out["throughput"] = None
    broken = out["check"]["errors"] or (out.get("memory") or {}).get("verdict") == "does-not-fit"
    if broken and base is not None:
        defining = (*PARALLEL_DIMS.values(), "use_megatron_fsdp", "data_parallel_sharding_strategy")
        sizes = {k: v for k, v in data["layout"].items() if k in defining and v is not None}
        asked = dict(base.get("layout") or {})
        sub = _held_search(base, {**sizes, **asked}, constants, **search_kw)
        if sub is not None and sub.candidates:
            c = sub.candidates[0]
            out["_candidate"] = c  # for the rule-of-thumb baseline; dropped before output
            out["completed"] = {
                "label": describe(c),
                "tokens_per_s_per_gpu": c.tokens_per_s_per_gpu,
                "peak_gib": c.peak_gib,
                "held": {k: v for k, v in sizes.items() if asked.get(k, v) == v},
                # the request's own held sizes win over the family's: said, never "its sizes held"
                "overridden": {k: [v, asked[k]] for k, v in sizes.items() if asked.get(k, v) != v},
            }
    return out


def fsdp_vs_3d(res: SearchResult) -> dict | None:
    """For a search over both families (VLMs): the best Megatron-FSDP and the best 3D-parallel
    layout side by side, with what each needs — the guidance's contrast (FSDP: bring-up simplicity and
    memory first; 3D: higher ceiling after tuning) in numbers."""
    fsdp = next((c for c in res.candidates if c.parallel.fsdp), None)
    three = next((c for c in res.candidates if not c.parallel.fsdp), None)
    if fsdp is None and three is None or res.request.get("families") != ["3d", "fsdp"]:
        return None

    def side(c: Candidate | None, needs: str) -> dict | None:
        if c is None:
            return None
        bd = c.throughput["breakdown_s"]
        step = c.throughput["step_time_s"]
        return {
            "label": c.parallel.label(),
            "micro_batch_size": c.data["training"]["micro_batch_size"],
            "recompute": c.recompute,
            "tokens_per_s_per_gpu": c.tokens_per_s_per_gpu,
            "peak_gib": c.peak_gib,
            "vision_share_pct": 100 * (bd.get("vision_encoder", 0) + bd.get("vision_projector", 0)) / step,
            "needs": needs,
            "layout": {k: v for k, v in c.data["layout"].items() if v is not None},
            "training": dict(c.data["training"]),
        }

    out: dict[str, Any] = {
        "fsdp": side(
            fsdp,
            "use_megatron_fsdp: true, data_parallel_sharding_strategy: optim_grads_params, EP inside; no "
            "pipeline layout to place the vision tower, embedding and decoder — the simplest bring-up",
        ),
        "3d": side(
            three,
            (
                "TP/PP/EP/ETP sizes, a pipeline split that puts the vision tower on stage 0 (it unbalances that "
                "stage), VPP and recompute tuning — a higher ceiling once tuned"
                if three is not None and three.parallel.pp > 1
                else "TP/EP/ETP sizes and recompute tuning (no pipeline here: the vision tower shares every rank)"
            ),
        ),
    }
    if fsdp is not None and three is not None:
        out["fsdp_vs_3d_pct"] = 100 * (fsdp.tokens_per_s_per_gpu / three.tokens_per_s_per_gpu - 1)
        out["memory_gib_diff"] = fsdp.peak_gib - three.peak_gib
    return out
