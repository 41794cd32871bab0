"""A candidate's scenario built from its request's validated input equals the whole mapping validated,
layer terms shared between step contexts that differ only in the dispatcher and EP overlap equal their
own computation, and the knob floor leaves out only options the rules reject whatever the other knobs."""

from __future__ import annotations

import copy
import dataclasses

import pytest

from moeplan import load_scenario
from moeplan.errors import InputError
from moeplan.inputs.schema import layout_only_change, scenario_from_dict
from moeplan.model.constants import load_constants
from moeplan.model.time.context import step_context
from moeplan.model.time.layer import compute_layer_time, layer_time, share_dispatch_free_terms
from moeplan.plan.bounds import ep_overlap_allowed, interleaving_allowed
from moeplan.plan.evaluation import EvaluationCache

BASE = {
    "model": "Qwen/Qwen3-30B-A3B",
    "system": {"gpu": "h100", "num_gpus": 64},
    "training": {"seq_length": 4096, "micro_batch_size": 1, "global_batch_size": 32, "precision": "fp8-blockwise"},
    "layout": {"tensor_model_parallel_size": 1, "pipeline_model_parallel_size": 4, "expert_model_parallel_size": 16},
}


def _with(layout: dict | None = None, mbs: int = 1) -> dict:
    data = copy.deepcopy(BASE)
    data["layout"].update(layout or {})
    data["training"]["micro_batch_size"] = mbs
    return data


def _same_input(a, b) -> None:
    assert a == b
    assert a.model_fields_set == b.model_fields_set
    assert a.layout.model_fields_set == b.layout.model_fields_set
    assert a.training.model_fields_set == b.training.model_fields_set


def test_candidate_inputs_built_from_the_request_equal_the_whole_mapping_validated():
    cache = EvaluationCache()
    first = cache.scenario_input(_with(), cache.request_key(_with()))
    _same_input(first, scenario_from_dict(_with()))
    for layout, mbs in [
        ({"recompute_granularity": "selective", "recompute_modules": ["moe_act"]}, 1),
        ({"context_parallel_size": 2, "cp_comm_type": "a2a", "recompute_granularity": None}, 2),
        ({"virtual_pipeline_model_parallel_size": 2, "moe_token_dispatcher_type": "flex"}, 1),
    ]:
        data = _with(layout, mbs)
        assert layout_only_change(data)
        _same_input(cache.scenario_input(data, cache.request_key(data)), scenario_from_dict(data))
    # a null reads as unset in both: the key is not among the stated ones
    assert (
        "recompute_granularity"
        not in cache.scenario_input(
            _with({"recompute_granularity": None}), cache.request_key(_with())
        ).layout.model_fields_set
    )


@pytest.mark.parametrize(
    ("layout", "field"),
    [
        ({"context_parallel_size": 10**13}, "layout.context_parallel_size"),  # beyond the layout bound
        ({"tensor_model_parallel_size": 0}, "layout.tensor_model_parallel_size"),  # a value pydantic refuses
    ],
)
def test_a_bad_candidate_layout_names_the_field_the_whole_mapping_names(layout, field):
    cache = EvaluationCache()
    cache.scenario_input(_with(), cache.request_key(_with()))  # the request's input, the template of the next
    with pytest.raises(InputError) as built:
        cache.scenario_input(_with(layout), cache.request_key(_with(layout)))
    with pytest.raises(InputError) as whole:
        scenario_from_dict(_with(layout))
    assert built.value.field == whole.value.field == field
    assert str(built.value) == str(whole.value)


def test_an_unmodelled_layout_key_is_validated_in_full():
    assert not layout_only_change(_with({"train_iters": 10}))
    assert layout_only_change(_with())


def test_layer_terms_shared_between_dispatcher_variants_equal_their_own_computation():
    s = load_scenario(_with())
    c = load_constants()
    ctx = step_context(s, c, None, None)
    variants = [
        dataclasses.replace(ctx, dispatcher=d, ep_overlap=on, ep_paired_share=1.0 if on else 0.0)
        for d in ("alltoall", "deepep")
        for on in (False, True)
    ]
    share_dispatch_free_terms(ctx, variants)
    for v in variants:
        fresh = dataclasses.replace(v)  # a context of the same fields with its own record
        for layer in (0, 47):
            assert layer_time(v, layer) == compute_layer_time(fresh, layer)
    # the dispatcher still moves the EP exchange: the variants differ where they should
    assert layer_time(variants[0], 0).parts["ep_comm_exposed"] != layer_time(variants[2], 0).parts["ep_comm_exposed"]


def test_vpp_options_the_interleaving_rule_rejects_are_left_out_of_the_knob_floor():
    # 64 GPUs, TP1 PP4 EP16: DP 16; GBS 32 at MBS 1 gives 32 / 16 = 2 microbatches < PP 4 (rejected);
    # GBS 64 gives 4 microbatches, a group of PP = 4 divides them (allowed)
    s = load_scenario(_with())
    vpp2 = {"virtual_pipeline_model_parallel_size": 2}
    assert interleaving_allowed(s, {"virtual_pipeline_model_parallel_size": None})
    assert not interleaving_allowed(s, vpp2)
    more = _with()
    more["training"]["global_batch_size"] = 64
    assert interleaving_allowed(load_scenario(more), vpp2)


def test_ep_overlap_is_left_out_of_the_knob_floor_only_at_full_or_layer_wise_recompute():
    assert not ep_overlap_allowed(
        {"recompute_granularity": "full", "recompute_method": "uniform", "recompute_num_layers": 1}
    )
    assert not ep_overlap_allowed({"recompute_granularity": None, "recompute_method": "block"})
    assert ep_overlap_allowed({"recompute_granularity": "selective", "recompute_modules": ["moe_act"]})
    assert ep_overlap_allowed({})


def test_the_collector_is_paused_inside_nested_blocks_and_restored_as_found():
    import gc

    from moeplan.plan.evaluation import collector_paused

    was = gc.isenabled()
    try:
        gc.enable()
        with collector_paused():
            assert not gc.isenabled()
            with collector_paused():
                assert not gc.isenabled()
            assert not gc.isenabled()  # the outer block still runs
        assert gc.isenabled()
        gc.disable()
        with collector_paused():
            pass
        assert not gc.isenabled()  # off before, off after
    finally:
        (gc.enable if was else gc.disable)()


def test_what_a_paused_block_leaves_alive_reaches_the_oldest_generation_without_a_pass():
    import gc

    from moeplan.plan.evaluation import collector_paused

    was = gc.isenabled()
    calls: list[int] = []

    def seen(phase: str, info: dict) -> None:
        if phase == "start":
            calls.append(info["generation"])

    gc.callbacks.append(seen)
    try:
        gc.enable()
        with collector_paused():
            kept = [[i] for i in range(50_000)]  # far past the young generation's threshold
        assert gc.get_count()[0] < 10  # the young generation starts empty after the block
        more = [[i] for i in range(100)]
        assert calls == []  # no pass ran over the block's objects
        assert len(kept) + len(more) == 50_100
    finally:
        gc.callbacks.remove(seen)
        (gc.enable if was else gc.disable)()


def test_a_user_frozen_set_is_left_frozen_by_a_paused_block():
    import gc

    from moeplan.plan.evaluation import collector_paused

    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        with collector_paused():
            _ = [[i] for i in range(1000)]
        assert gc.get_freeze_count() == frozen
    finally:
        gc.unfreeze()


def test_a_plan_makes_no_reference_cycles():
    """Objects a plan leaves alive move to the oldest generation without a pass (collector_paused):
    that is only sound if nothing the plan makes is cyclic garbage."""
    import gc

    from moeplan.plan import plan

    req = {
        "model": "Qwen/Qwen3-30B-A3B",
        "system": {"gpu": "h100", "num_gpus": 16},
        "training": {"seq_length": 4096},
    }
    plan(req)  # first use: catalogs and caches
    gc.collect()
    res = plan(req)
    assert res.candidates
    assert gc.collect() == 0
