"""Refining one layout over its knob families (VPP, dispatcher, EP overlap, CUDA graphs, CP exchange) by
coordinate descent, each variant re-checked by the rules and re-fitted (:func:`refine_candidate`)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import cast

from moeplan.inputs.system import GpuSpec
from moeplan.plan.candidates import TIE_FRACTION, Candidate, Rejections, fewest_warnings, weak_dispatcher_tie
from moeplan.plan.evaluation import Evaluator, apply_keys
from moeplan.plan.space import (
    cp_comm_options,
    dispatcher_options,
    ep_overlap_options,
    graph_options,
    vpp_options,
)
from moeplan.structure.attention_kernels import heads_per_tp_rank
from moeplan.structure.stages import output_stage_layers, pipeline_split


def candidate_signature(c: Candidate) -> tuple:
    lay = c.data["layout"]
    return (c.parallel, c.data["training"]["micro_batch_size"], tuple(sorted((k, str(v)) for k, v in lay.items())))


def _tally_known_issues(rej: Rejections, reasons: list[str], example: str) -> None:
    """Count a knob variant dropped for a known issue (``known_issue.<id>``) in the rejected tally."""
    for r in reasons:
        if r.startswith("known_issue."):
            rej.add(r, example)


def knob_families(c: Candidate, fixed_layout: dict, gpu: GpuSpec) -> list[tuple[str, list[tuple[str, dict]]]]:
    """The knob families :func:`refine_candidate` tries on ``c``, in order (VPP first), each with its options
    (label, layout keys); a family whose key the request holds is left out."""
    m = c.scenario.complete_model
    families: list[tuple[str, list[tuple[str, dict]]]] = []
    if (
        "virtual_pipeline_model_parallel_size" not in fixed_layout
        and "pipeline_model_parallel_layout" not in fixed_layout
    ):
        vopts = []
        for v in vpp_options(m.num_layers, c.parallel.pp):
            mtp_c, seq = c.scenario.mtp_num_layers, cast(int, c.scenario.training.seq_length)
            split = pipeline_split(m.num_layers, c.parallel.pp, v, mtp_c, output_stage_layers(m, seq, 1, mtp_c))
            if split is None:
                continue
            keys = {
                "virtual_pipeline_model_parallel_size": v if v > 1 else None,
                "pipeline_model_parallel_layout": None,
                "account_for_embedding_in_pipeline_split": None,
                "account_for_loss_in_pipeline_split": None,
                **split,
            }
            vopts.append((f"VPP{v}", keys))
        families.append(("vpp", vopts))
    if "moe_token_dispatcher_type" not in fixed_layout:
        families.append(
            (
                "dispatcher",
                [(n, {"moe_flex_dispatcher_backend": None, **k}) for n, k in dispatcher_options(m, gpu, c.parallel.ep)],
            )
        )
    if "overlap_moe_expert_parallel_comm" not in fixed_layout:
        families.append(("ep_overlap", ep_overlap_options(m, c.parallel.ep)))
    if "cuda_graph_impl" not in fixed_layout:
        families.append(("graphs", [(n, {"cuda_graph_scope": None, **k}) for n, k in graph_options(m, gpu)]))
    if "cp_comm_type" not in fixed_layout:
        domain = gpu.scaleup_domain_gpus if gpu is not None else 8
        heads = heads_per_tp_rank(m, c.parallel.tp)
        head_split = math.gcd(*heads) if heads else None  # an all-to-all level must split both (the rules)
        families.append(("cp_comm", cp_comm_options(c.parallel.cp, c.parallel.tp, domain, head_split)))
    return families


def refine_candidate(
    c: Candidate,
    ev: Evaluator,
    ladder,
    fixed_layout: dict,
    rej: Rejections,
    only: tuple[str, ...] | None = None,
    skip: tuple[str, ...] = (),
    stop: Callable[[Candidate, list[tuple[str, list[tuple[str, dict]]]]], bool] | None = None,
) -> Candidate:
    """Coordinate descent over VPP, dispatcher, EP overlap, graphs and CP comm type (``only`` these
    families when given, never those in ``skip``); keeps the best variant and records what each
    option gave. ``stop(best so far, the families left)`` is asked before each family: True ends the
    descent there (the layout cannot win, :func:`moeplan.plan.phases.refine_within_bound`)."""
    gpu = cast(GpuSpec, c.scenario.gpu)  # the request's (_request() checked it)
    best = c
    families = knob_families(c, fixed_layout, gpu)
    for i, (fam, opts) in enumerate(families):
        if len(opts) < 2 or (only is not None and fam not in only) or fam in skip:
            continue
        if stop is not None and best is not c and stop(best, families[i:]):
            break
        tried: dict[str, float | None] = {}
        start = best  # every option of a family is applied to the same layout (a bundle's extra keys stay its own)
        start.tried.setdefault("_why", {})  # shared by the variants' shallow copies below
        variants: list[Candidate] = []
        labels = [x[0] for x in ladder]
        hint = labels.index(start.recompute) if start.recompute in labels else None  # (an off-ladder rung: none)
        for name, keys in opts:
            d = apply_keys(start.data, keys, fixed_layout)
            sub = Rejections()
            got = ev.evaluate(d, ladder, sub, name, hint=hint)
            if got is None:
                tried[name] = None
                reasons = sorted(sub.counts)
                start.tried.setdefault("_why", {})[f"{fam}:{name}"] = reasons[0] if reasons else "rejected"
                _tally_known_issues(rej, reasons, f"{start.parallel.label()} {fam} {name}")
                continue
            knobs = dict(start.knobs)
            if fam != "vpp":
                knobs[fam] = name
            if fam == "graphs" and "moe_flex_dispatcher_backend" in keys and "dispatcher" in knobs:
                knobs["dispatcher"] = keys["moe_flex_dispatcher_backend"]  # the graph bundle sets it
            cand = ev.timed(got, knobs)
            cand.tried = dict(start.tried)
            tried[name] = cand.tokens_per_s_per_gpu
            variants.append(cand)
        # options are listed simplest first (VPP 1, all-to-all, no EP overlap, eager, p2p): the first
        # within the tie margin of the fastest is kept, as for layouts (the model cannot tell them apart)
        # and of those the one the check warns about least (:func:`fewest_warnings`)
        pool = [start, *variants]
        top = max(x.tokens_per_s_per_gpu for x in pool)
        tied = [x for x in pool if x.tokens_per_s_per_gpu >= top / (1 + TIE_FRACTION)]
        best = fewest_warnings(tied)
        _record_warned(best, fam, [x for x in tied if x is not start], tried)
        if fam == "dispatcher":
            best = weak_dispatcher_tie(best, variants, top, gpu)
        best.tried[fam] = tried
    return best


def _record_warned(best: Candidate, fam: str, tied: list[Candidate], tried: dict[str, float | None]) -> None:
    """Under ``best.tried["_warns"]``, ``family:option`` → the warning rule ids of each tied variant
    passed over because the check warns about it more than about ``best`` (so that the explanation
    says why a faster option lost)."""
    names = {v: k for k, v in tried.items() if v is not None}
    for x in tied:
        if x is best or len(x.warning_ids()) <= len(best.warning_ids()):
            continue
        name = names.get(x.tokens_per_s_per_gpu)
        if name is not None:
            extra = sorted(set(x.warning_ids()) - set(best.warning_ids()))
            best.tried.setdefault("_warns", {})[f"{fam}:{name}"] = ", ".join(extra)
