"""What the planner keeps between candidates answers as a fresh computation would: the search's rule
screen (the first broken rule, else a known issue to avoid at the stated versions), the stage plans of
a split, the deployment the deployment rules read, the balanced pipeline layouts, and a candidate's
memory mapping made on first read. Each is checked against the computation it stands for, and a
different candidate gets a different answer."""

from __future__ import annotations

import copy

from moeplan import estimate_memory, load_scenario, validate
from moeplan.plan.candidates import Candidate
from moeplan.plan.screening import RuleScreen
from moeplan.plan.space import Parallel
from moeplan.rules.deployment import scenario_deployment
from moeplan.rules.known_issue_checks import blocking_finding
from moeplan.structure.placement import stage_plan
from moeplan.structure.stages import balanced_layout, balanced_stages, plan_stages

BASE = {
    "model": "Qwen/Qwen3-30B-A3B",
    "system": {"gpu": "h100", "num_gpus": 16},
    "training": {"seq_length": 4096, "micro_batch_size": 1, "global_batch_size": 1024, "precision": "fp8-blockwise"},
    "layout": {
        "tensor_model_parallel_size": 1,
        "pipeline_model_parallel_size": 1,
        "context_parallel_size": 1,
        "expert_model_parallel_size": 16,
    },
}


def _scenario(layout: dict | None = None, versions: dict | None = None, system: dict | None = None):
    data = copy.deepcopy(BASE)
    data["layout"].update(layout or {})
    data["system"].update(system or {})
    if versions:
        data["versions"] = versions
    return load_scenario(data)


def _full_check(s) -> str | None:
    """What the search asked of the full check before the screen: the first error, else the first
    known issue to avoid."""
    res = validate(s)
    return res.errors[0].rule_id if res.errors else blocking_finding(res.findings)


def test_rule_screen_rejects_each_layout_as_the_full_check_does():
    # PyTorch 2.5.1 with megatron-core 0.15.0: EP all-to-all overlap asserts (a guaranteed error of the
    # known-issue database); the same layout without the overlap passes; TP 3 does not divide the heads
    versions = {"megatron_core": "0.15.0", "torch": "2.5.1"}
    screen = RuleScreen()
    cases = {
        "overlap": _scenario({"overlap_moe_expert_parallel_comm": True}, versions),
        "plain": _scenario({}, versions),
        "tp3": _scenario({"tensor_model_parallel_size": 3}, versions),
    }
    got = {name: screen.why_rejected(s) for name, s in cases.items()}
    assert got == {name: _full_check(s) for name, s in cases.items()}
    assert got["overlap"] == "known_issue.ep_overlap_torch_below_2_6_assert"
    assert got["plain"] is None
    assert got["tp3"] is not None and not got["tp3"].startswith("known_issue.")


def test_rule_screen_avoids_a_confirmed_hang_only_at_its_versions():
    # NCCL 2.29.2 hangs (a warning with a fixed release: avoided); NCCL 2.28.9 is outside the range
    screen = RuleScreen()
    hang = _scenario(versions={"nccl": "2.29.2"})
    other = _scenario(versions={"nccl": "2.28.9"})
    assert screen.why_rejected(hang) == _full_check(hang) == "known_issue.nccl_2_29_2_hang"
    assert screen.why_rejected(other) == _full_check(other)
    assert screen.why_rejected(other) != "known_issue.nccl_2_29_2_hang"
    assert len(screen.affected) == 2  # one entry per distinct versions


def test_rule_screen_evaluates_no_trigger_when_no_version_is_stated():
    # unstated versions make every entry "possible" (an info finding), never a rejection
    s = _scenario({"overlap_moe_expert_parallel_comm": True})
    screen = RuleScreen()
    assert screen.rejecting_entries(s.versions) == ()
    assert screen.why_rejected(s) == _full_check(s)


def test_stage_plan_answers_each_split_as_computed_afresh():
    # 48 layers: PP 2 → 24 per rank; PP 4 × VPP 2 → 6 per virtual stage; PP 5 does not divide (None
    # as given, a near-even split when allowed: 10, 10, 9, 10, 9 with the extra layers in the middle)
    splits = [
        {"pipeline_model_parallel_size": 2, "expert_model_parallel_size": 8},
        {"pipeline_model_parallel_size": 4, "virtual_pipeline_model_parallel_size": 2, "expert_model_parallel_size": 4},
    ]
    plans = []
    for layout in splits:
        s = _scenario(layout)
        fresh = plan_stages(48, s.pp, layout.get("virtual_pipeline_model_parallel_size"))
        for allow in (False, True):
            got = stage_plan(s, allow_balanced=allow)
            assert got == fresh
            assert stage_plan(s, allow_balanced=allow) is got  # kept
        plans.append(stage_plan(s))
    assert [len(p.layers[0][0]) for p in plans] == [24, 6]
    s5 = _scenario({"pipeline_model_parallel_size": 5}, system={"num_gpus": 80})
    assert stage_plan(s5) is None
    balanced = stage_plan(s5, allow_balanced=True)
    assert balanced == balanced_stages(48, 5)
    assert sorted(len(balanced.rank_layers(r)) for r in range(5)) == [9, 9, 10, 10, 10]


def test_deployment_is_rebuilt_when_what_it_is_built_from_changes():
    plain = scenario_deployment(_scenario())
    again = scenario_deployment(_scenario({"tensor_model_parallel_size": 2, "expert_model_parallel_size": 8}))
    assert again is plain  # the same stated build, environment and node: one deployment
    nvshmem = scenario_deployment(_scenario(system={"ep_library_build": ["deepep-nvshmem"]}))
    assert plain.build is None and nvshmem.build == frozenset({"deepep-nvshmem"})
    four = scenario_deployment(_scenario(system={"gpus_per_node": 4}))
    assert (plain.nvlink_peers, four.nvlink_peers) == (8, 4)


def test_balanced_layout_answers_each_request_as_computed():
    # DeepSeek-V3's 61 layers with one MTP block on PP 16 (the recipe layout), and on PP 8
    assert balanced_layout(61, 16, 1, 1, 3.9) == balanced_layout.__wrapped__(61, 16, 1, 1, 3.9)
    assert balanced_layout(61, 8, 1, 1, 0.0) == balanced_layout.__wrapped__(61, 8, 1, 1, 0.0)
    assert balanced_layout(61, 16, 1, 1, 3.9) != balanced_layout(61, 8, 1, 1, 0.0)


def test_candidate_memory_is_the_estimate_mapping_made_once():
    s = _scenario()
    mem = estimate_memory(s)
    c = Candidate(Parallel.of(s), {}, s, mem, {"tokens_per_s_per_gpu": 1.0}, "none", {})
    assert c.memory == mem.to_dict()
    assert c.memory is c.memory
    c.memory["verdict"] = "fits"  # a change to the mapping stays
    assert c.memory["verdict"] == "fits"
    other = _scenario({"pipeline_model_parallel_size": 2, "expert_model_parallel_size": 8})
    c2 = Candidate(Parallel.of(other), {}, other, estimate_memory(other), {"tokens_per_s_per_gpu": 1.0}, "none", {})
    assert c2.peak_gib != c.peak_gib


def test_candidate_throughput_is_the_estimate_mapping_made_once():
    from moeplan.model.step import estimate_step

    s = _scenario()
    now, later = estimate_step(s), estimate_step(s, notes_on_read=True)
    assert later.notes == [] and later.assumptions == now.assumptions and now.assumptions  # made on read
    c = Candidate(Parallel.of(s), {}, s, estimate_memory(s), later, "none", {})
    assert c._throughput is None and c.tokens_per_s_per_gpu == now.tokens_per_s_per_gpu  # no mapping made
    assert c.throughput == now.to_dict()
    assert c.throughput is c.throughput
    c.throughput["tokens_per_s_per_gpu"] = 2.0  # a change to the mapping stays, and is what the candidate says
    assert c.tokens_per_s_per_gpu == 2.0


def test_resolution_with_a_requests_shared_parts_equals_a_fresh_one():
    # two candidates of one request (TP 1 / EP 16 and TP 2 / EP 8): the second resolved with the parts
    # of the first (model, GPU, GPUs per node, versions) is the scenario a fresh resolution gives
    from moeplan.inputs.schema import scenario_from_dict
    from moeplan.resolve.defaults import request_parts, resolve

    first = copy.deepcopy(BASE)
    second = copy.deepcopy(BASE)
    second["layout"].update({"tensor_model_parallel_size": 2, "expert_model_parallel_size": 8})
    second["versions"] = first["versions"] = {"container": "nemo:26.06"}
    parts = request_parts(scenario_from_dict(first))
    shared = resolve(scenario_from_dict(second), None, parts)
    fresh = resolve(scenario_from_dict(second))
    assert shared.model is fresh.model  # the catalog's one model
    assert (shared.gpu, shared.gpus_per_node, shared.layout) == (fresh.gpu, fresh.gpus_per_node, fresh.layout)
    assert shared.resolutions == fresh.resolutions
    assert shared.versions == fresh.versions and shared.versions.values["megatron_core"] is not None
    assert (shared.tp, shared.ep) == (2, 8)


def test_candidate_input_refuses_a_bad_value_after_good_values_of_its_key():
    # a layout value that passed the input checks is not checked again; a new value of the same key
    # is: 2**21 is over the layout bound (MAX_LAYOUT_INT = MAX_GPUS = 2**20), a NaN float is not finite
    import pytest

    from moeplan.errors import InputError
    from moeplan.inputs.schema import scenario_from_dict, scenario_input_with

    template = scenario_from_dict(copy.deepcopy(BASE))
    ok = copy.deepcopy(BASE)
    ok["layout"]["tensor_model_parallel_size"] = 2
    assert scenario_input_with(template, ok).layout.tensor_model_parallel_size == 2
    assert scenario_input_with(template, ok).layout.tensor_model_parallel_size == 2  # answered again
    for bad_value, field in ((2**21, "layout.tensor_model_parallel_size"), (float("nan"), "layout.hidden_dropout")):
        bad = copy.deepcopy(BASE)
        bad["layout"][field.split(".")[1]] = bad_value
        with pytest.raises(InputError) as err:
            scenario_input_with(template, bad)
        assert err.value.field == field


def test_memory_notes_made_on_read_are_the_notes_made_at_once():
    # the planner's memory estimates make their notes when first read: the same notes in the same
    # order, and the same estimate, as estimate_memory makes them at once. Three requests that say
    # different things: MoE defaults unset (dropout, routing imbalance, fused cross entropy, fp32
    # grads), a selective layernorm recompute, 61 layers over PP 4 (near-even split), a VLM planned
    # without a workload (the planning image mix)
    dsv3 = {
        "model": "deepseek-ai/DeepSeek-V3",
        "system": {"gpu": "h100", "num_gpus": 256},
        "training": {"seq_length": 4096, "global_batch_size": 512},
        "layout": {"expert_model_parallel_size": 32, "pipeline_model_parallel_size": 4},
    }
    norm = copy.deepcopy(BASE)
    norm["layout"].update({"recompute_granularity": "selective", "recompute_modules": ["layernorm", "moe_act"]})
    vlm = {
        "model": "Qwen/Qwen3-VL-30B-A3B-Instruct",
        "system": {"gpu": "h100", "num_gpus": 16},
        "training": {"seq_length": 8192, "global_batch_size": 64},
        "layout": {"expert_model_parallel_size": 8, "tensor_model_parallel_size": 2},
    }
    for data in (BASE, norm, dsv3, vlm):
        s = load_scenario(copy.deepcopy(data))
        now, later = estimate_memory(s), estimate_memory(s, notes_on_read=True)
        assert later.notes == [] and later.assumptions == now.assumptions and len(now.assumptions) >= 3
        ids = [getattr(a, "msgid", None) for a in now.assumptions]
        assert [getattr(a, "msgid", None) for a in later.assumptions] == ids
        assert later.to_dict() == now.to_dict()
