"""Refinement starts each knob variant's recompute search at the rung its layout fitted at
(:meth:`moeplan.plan.evaluation.Evaluator.evaluate` with ``hint``); the rung it settles on is the one
the search from scratch finds, for every knob option of the layouts a plan ranks first."""

from __future__ import annotations

from typing import cast

import pytest

from moeplan.inputs.system import GpuSpec
from moeplan.plan.candidates import Rejections
from moeplan.plan.evaluation import Evaluator, apply_keys, copy_mapping, evaluation_cache
from moeplan.plan.refinement import knob_families
from moeplan.plan.search import search
from moeplan.plan.space import recompute_ladder

DSV3_4K = {
    "model": "deepseek-ai/DeepSeek-V3",
    "system": {"gpu": "h100", "num_gpus": 1024},
    "training": {"seq_length": 4096, "micro_batch_size": 1, "global_batch_size": 8192, "precision": "fp8-blockwise"},
}
DSV3_128K = {
    "model": "deepseek-ai/DeepSeek-V3",
    "system": {"gpu": "h100", "num_gpus": 1024},
    "training": {"seq_length": 131072, "precision": "fp8-blockwise"},
}
QWEN3_30B_32K = {
    "model": "Qwen/Qwen3-30B-A3B",
    "system": {"gpu": "h100", "num_gpus": 16},
    "training": {"seq_length": 32768, "global_batch_size": 32},
}


def _fresh(ev: Evaluator) -> Evaluator:
    with evaluation_cache():  # a cache of its own: nothing another evaluator tried is reused
        out = Evaluator(ev.base, ev.margin, ev.constants, ev.recipe)
    out.alternatives = list(ev.alternatives)
    return out


@pytest.mark.parametrize("req", [DSV3_4K, DSV3_128K, QWEN3_30B_32K], ids=["dsv3-4k", "dsv3-128k", "qwen3-30b-32k"])
def test_hinted_rung_is_the_rung_a_search_from_scratch_finds(req):
    res = search(req)
    ev = cast(Evaluator, res.evaluator)
    ladder = recompute_ladder(res.candidates[0].scenario.complete_model)  # (no key held: the whole ladder)
    assert [n for n, _ in ladder] == res.ladder
    labels = [n for n, _ in ladder]
    hinted, scratch = _fresh(ev), _fresh(ev)
    compared = moved = 0
    for c in res.candidates[:6]:
        if c.recompute not in labels:
            continue
        hint = labels.index(c.recompute)
        for _fam, opts in knob_families(c, {}, cast(GpuSpec, c.scenario.gpu)):
            for name, keys in opts:
                d = apply_keys(c.data, keys, {})
                a = hinted.evaluate(copy_mapping(d), ladder, Rejections(), name, hint=hint)
                b = scratch.evaluate(copy_mapping(d), ladder, Rejections(), name)
                assert (a[0] if a else None) == (b[0] if b else None), f"{c.parallel.label()} {name}"
                compared += 1
                moved += b is not None and b[0] != c.recompute
    assert compared > 20
    if req is DSV3_128K:
        assert moved  # some knob moves the rung (the hint is not simply the answer)


@pytest.mark.parametrize("req", [DSV3_4K, QWEN3_30B_32K], ids=["dsv3-4k", "qwen3-30b-32k"])
def test_a_bounded_search_settles_where_the_unbounded_search_does(req):
    """With a throughput floor (phase one's branch and bound) the no-recompute rung is built for its
    bound; when it fits it is the answer without the binary search. Every layout the plan kept settles
    on the rung the search without a floor finds."""
    res = search(req)
    ev = cast(Evaluator, res.evaluator)
    ladder = recompute_ladder(res.candidates[0].scenario.complete_model)
    bounded, free = _fresh(ev), _fresh(ev)
    at_zero = 0
    for c in res.candidates[:12]:
        d = {**copy_mapping(c.data)}
        a = bounded.evaluate(copy_mapping(d), ladder, Rejections(), "bounded", floor_tps=1e-9)
        b = free.evaluate(copy_mapping(d), ladder, Rejections(), "free")
        assert a is not None and b is not None
        assert a[0] == b[0], c.parallel.label()
        at_zero += a[0] == ladder[0][0]
    assert at_zero  # some layout fits without recompute (the shortcut is exercised)
