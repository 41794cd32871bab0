"""The search's throughput bounds are bounds: no refinement of a layout beats them.

The search refines every layout whose bound can still beat the best found
(:func:`moeplan.plan.phases.refine_within_bound`), so a bound below what refinement reaches would
drop a winner. Sampled phase-one layouts of two small requests are refined over every knob family and
compared with both bounds: the compute floor (:func:`moeplan.plan.bounds.throughput_bound`) and the
knob floor with the layout's memory floor (:func:`moeplan.plan.bounds.refined_bound`).
"""

from __future__ import annotations

import functools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from moeplan.plan.bounds import refined_bound, throughput_bound
from moeplan.plan.phases import memory_floor_rungs, phase_one
from moeplan.plan.refinement import knob_families, refine_candidate
from moeplan.plan.search_setup import layout_combos, setup_search
from moeplan.plan.space import with_sections

REQUESTS = {
    "qwen3-30b-32k-16xh100": {
        "model": "Qwen/Qwen3-30B-A3B",
        "system": {"gpu": "h100", "num_gpus": 16},
        "training": {"seq_length": 32768, "global_batch_size": 32},
    },
    "qwen3-30b-128k-32xh100": {
        "model": "Qwen/Qwen3-30B-A3B",
        "system": {"gpu": "h100", "num_gpus": 32},
        "training": {"seq_length": 131072, "global_batch_size": 64},
    },
}


@functools.cache
def _phase_one(name: str):
    """The search setup of a request and its phase-one layouts (default knobs), best first."""
    setup = setup_search(with_sections(REQUESTS[name]), None, None)
    found = phase_one(setup, layout_combos(setup, 1), None).found
    assert found, name
    return setup, sorted(found, key=lambda c: c.key())


@settings(max_examples=6, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(sorted(REQUESTS)), pick=st.floats(min_value=0.0, max_value=0.999))
def test_no_refined_layout_beats_its_throughput_bounds(name, pick):
    setup, found = _phase_one(name)
    c = found[int(pick * len(found))]
    refined = refine_candidate(c, setup.ev, setup.ladder, setup.fixed_layout, setup.rej)
    tps = refined.tokens_per_s_per_gpu
    assert tps <= throughput_bound(c.scenario) * (1 + 1e-9), c.parallel.label()
    families = knob_families(c, setup.fixed_layout, setup.gpu)
    bound = refined_bound(c.scenario, families, None, memory_floor_rungs(setup, c))
    assert tps <= bound * (1 + 1e-9), (c.parallel.label(), refined.knobs, refined.recompute, tps, bound)
    assert c.tokens_per_s_per_gpu <= bound * (1 + 1e-9)  # the layout at the default knobs is a variant too


def test_the_knob_bound_is_tighter_than_the_compute_floor_and_above_the_best_refinement():
    """The knob floor counts exchange, launch, recompute and bubble the compute floor leaves out, so it
    bounds lower, and still above the fastest refined layout of the request."""
    setup, found = _phase_one("qwen3-30b-128k-32xh100")
    c = found[0]
    families = knob_families(c, setup.fixed_layout, setup.gpu)
    knob = refined_bound(c.scenario, families, None, memory_floor_rungs(setup, c))
    assert knob < throughput_bound(c.scenario)
    refined = refine_candidate(c, setup.ev, setup.ladder, setup.fixed_layout, setup.rej)
    assert refined.tokens_per_s_per_gpu <= knob
    assert knob == pytest.approx(refined.tokens_per_s_per_gpu, rel=0.5)
