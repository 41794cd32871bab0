"""The known-issue database: every entry fires on its example scenario (taken from its public report)
and not on its near miss; the data is validated on load; `check` reports an issue only for versions
in range, an unpinned version as one info finding; generic warnings never stand in for an issue."""

from __future__ import annotations

import copy

import pytest
import yaml

from moeplan.catalog.known_issue_table import (
    AVOID_SYMPTOMS,
    HARVESTED_ONLY_SYMPTOMS,
    SYMPTOMS,
    KnownIssueDataError,
    compile_trigger,
    get_known_issue,
    known_issues,
    parse_known_issues,
)
from moeplan.resolve.load import load_scenario
from moeplan.rules import RULES, validate
from moeplan.rules.known_issue_checks import UNKNOWN_RULE, blocking_issue

ISSUES = known_issues()
IDS = [k.id for k in ISSUES]


def test_database_breadth():
    assert len(ISSUES) >= 40
    sources = {k.source.split("/")[3] + "/" + k.source.split("/")[4] for k in ISSUES}
    for repo in (
        "NVIDIA/Megatron-LM",
        "NVIDIA-NeMo/Megatron-Bridge",
        "NVIDIA/TransformerEngine",
        "deepseek-ai/DeepEP",
        "NVIDIA/nccl",
        "pytorch/pytorch",
    ):
        assert repo in sources, repo
    packages = {p.package for k in ISSUES for p in k.packages}
    assert packages == {"megatron_core", "megatron_bridge", "transformer_engine", "torch", "nccl", "deepep"}
    assert {k.symptom for k in ISSUES} == set(SYMPTOMS) - HARVESTED_ONLY_SYMPTOMS
    for k in ISSUES:
        assert k.reported.startswith(("2025-", "2026-")), k.id
        assert k.example is not None and k.near_miss is not None, k.id


def _unknown_messages(res) -> list[str]:
    return [f.message for f in res.findings if f.rule_id == UNKNOWN_RULE]


@pytest.mark.parametrize("issue_id", IDS)
def test_example_fires(issue_id):
    k = get_known_issue(issue_id)
    s = load_scenario(copy.deepcopy(k.example))
    assert k.triggered(s)
    assert k.version_status(s.versions)[0] == "affected"
    res = validate(s)
    found = [f for f in res.findings if f.rule_id == k.rule_id]
    assert len(found) == 1, [(f.rule_id, f.message) for f in res.findings]
    f = found[0]
    assert f.severity == k.severity
    assert k.source in f.message and SYMPTOMS[k.symptom] in f.message
    assert k.workaround in f.fix


@pytest.mark.parametrize("issue_id", IDS)
def test_near_miss_does_not_fire(issue_id):
    k = get_known_issue(issue_id)
    res = validate(load_scenario(copy.deepcopy(k.near_miss)))
    assert k.rule_id not in res.rule_ids()
    assert not any(f"{k.id} [" in m for m in _unknown_messages(res))


@pytest.mark.parametrize("issue_id", IDS)
def test_unpinned_versions_give_one_info_not_a_warning(issue_id):
    k = get_known_issue(issue_id)
    data = copy.deepcopy(k.example)
    data.pop("versions", None)
    res = validate(load_scenario(data))
    assert k.rule_id not in res.rule_ids()
    infos = [f for f in res.findings if f.rule_id == UNKNOWN_RULE]
    assert len(infos) == 1 and infos[0].severity == "info"
    assert f"{k.id} [{k.symptom}]" in infos[0].message


def test_fixed_versions_do_not_fire():
    for k in ISSUES:
        fixed = {p.package: str(p.fixed) for p in k.packages if p.fixed is not None}
        if not fixed:
            continue
        data = copy.deepcopy(k.example)
        data["versions"] = {**{kk: v for kk, v in (data.get("versions") or {}).items() if kk != "container"}, **fixed}
        s = load_scenario(data)
        assert k.version_status(s.versions)[0] == "not_affected", k.id
        assert k.rule_id not in validate(s).rule_ids(), k.id


def test_guaranteed_failures_are_errors_and_reports_warnings():
    k = get_known_issue("gdn_context_parallel_assert")
    assert k.certainty == "guaranteed" and k.severity == "error"
    res = validate(load_scenario(copy.deepcopy(k.example)))
    f = next(f for f in res.findings if f.rule_id == k.rule_id)
    assert f.severity == "error" and f.kind == "unsupported"
    assert res.verdict == "unsupported"
    k = get_known_issue("te_graphs_attn_ep_overlap_nan")
    assert k.severity == "warning"


def test_rc_below_the_fixed_release_is_affected():
    # 0.17.0rc0 < 0.17.0 (PEP 440); with the old parser "0.17.0rc0" read as 0.17.0 and looked fixed
    k = get_known_issue("mtp_aux_loss_tracker_hang")
    data = copy.deepcopy(k.example)
    data["versions"] = {"megatron_core": "0.16.1"}
    assert k.rule_id in validate(load_scenario(data)).rule_ids()
    data["versions"] = {"megatron_core": "0.17.0rc0"}
    # a pre-release of the fixed release counts as fixed (PEP 440: <0.17.0 excludes 0.17.0rc0)
    assert k.rule_id not in validate(load_scenario(data)).rule_ids()
    data["versions"] = {"megatron_core": "0.16.2.dev5+g1234"}
    assert k.rule_id in validate(load_scenario(data)).rule_ids()


def test_container_fills_the_versions_an_issue_needs():
    k = get_known_issue("gdn_context_parallel_assert")
    data = copy.deepcopy(k.example)
    data["versions"] = {"container": "nvcr.io/nvidia/nemo:26.04"}  # megatron-core 0.17.0 inside
    assert k.rule_id in validate(load_scenario(data)).rule_ids("error")
    data["versions"] = {"container": "nvcr.io/nvidia/nemo:26.06"}  # megatron-core 0.18.0
    assert k.rule_id not in validate(load_scenario(data)).rule_ids()


def test_every_package_must_be_in_range():
    k = get_known_issue("ep_overlap_torch_below_2_6_assert")
    data = copy.deepcopy(k.example)
    data["versions"] = {"torch": "2.5.1"}  # megatron-core unknown: possible, not a finding
    res = validate(load_scenario(data))
    assert k.rule_id not in res.rule_ids()
    assert any(k.id in m and "megatron-core" in m for m in _unknown_messages(res))
    data["versions"] = {"torch": "2.5.1", "megatron_core": "0.13.0"}  # the assertion came with 0.14
    res = validate(load_scenario(data))
    assert k.rule_id not in res.rule_ids() and not any(k.id in m for m in _unknown_messages(res))


def test_generic_graph_memory_warning_does_not_stand_in_for_a_known_issue():
    # the held-out kind of #5966: TE attention graphs + EP overlap + VPP. Its generic graph-memory warning
    # (graphs.inflight_microbatch_memory) says what it is; the release bug gets its own finding
    k = get_known_issue("te_graphs_attn_ep_overlap_nan")
    res = validate(load_scenario(copy.deepcopy(k.example)))
    assert k.rule_id in res.rule_ids("warning")
    generic = [f for f in res.findings if f.rule_id == "graphs.inflight_microbatch_memory"]
    assert generic and all("not a release-bug check" in f.message for f in generic)
    assert all(not f.rule_id.startswith("known_issue") for f in generic)
    # without versions the generic warning stays a warning but the issue is named in the info
    data = copy.deepcopy(k.example)
    data.pop("versions")
    res = validate(load_scenario(data))
    assert any(k.id in m for m in _unknown_messages(res))


def test_database_rule_is_registered():
    assert "known_issue.database" in RULES
    assert "known_issue.version_table" not in RULES


def test_blocking_issue_only_for_hang_or_crash_class_at_affected_versions():
    assert {"hang", "crash", "assertion"} == AVOID_SYMPTOMS
    # open reports are flagged, not avoided; a NaN is flagged
    assert not get_known_issue("ep_overlap_shared_event_deadlock").avoid
    assert not get_known_issue("qwen3_mxfp8_vpp_graphs_nan").avoid
    assert get_known_issue("nccl_2_29_2_hang").avoid and get_known_issue("gdn_context_parallel_assert").avoid
    k = get_known_issue("mtp_aux_loss_tracker_hang")
    assert blocking_issue(load_scenario(copy.deepcopy(k.example))) == k.rule_id
    data = copy.deepcopy(k.example)
    data.pop("versions")
    assert blocking_issue(load_scenario(data)) is None
    slow = get_known_issue("nccl_2_30_moe_alltoall_small_message_slowdown")
    data = copy.deepcopy(slow.example)
    s = load_scenario(data)
    assert "known_issue.nccl_2_30_nvls_moe_hang" in validate(s).rule_ids("warning")  # the same NCCL's NVLS hang
    assert blocking_issue(s) is None  # an open report: flagged, not avoided
    s = load_scenario({**data, "environment": {"NCCL_NVLS_ENABLE": "0"}})
    assert slow.rule_id in validate(s).rule_ids("warning")
    assert blocking_issue(s) is None  # a slowdown is flagged, not avoided


# ---------------------------------------------------------------------------------------------- load validation


def _minimal(**over) -> dict:
    entry = {
        "id": "x_issue",
        "title": "t",
        "source": "https://github.com/NVIDIA/Megatron-LM/issues/1",
        "reported": "2026-01-01",
        "packages": {"megatron_core": {"affected": "<0.17.0", "fixed": "0.17.0"}},
        "trigger": {"pp": {"gt": 1}},
        "symptom": "hang",
        "certainty": "reported",
        "workaround": "w",
    }
    entry.update(over)
    return {"schema": 1, "issues": [entry]}


def test_minimal_entry_loads():
    (k,) = parse_known_issues(_minimal())
    assert k.rule_id == "known_issue.x_issue"


@pytest.mark.parametrize(
    "over,match",
    [
        ({"colour": "red"}, "unknown keys"),
        ({"symptom": "flaky"}, "symptom"),
        ({"symptom": "slowdown"}, "size"),
        ({"certainty": "maybe"}, "certainty"),
        ({"packages": {"apex": {"affected": "<1", "fixed": None}}}, "unknown package"),
        ({"packages": {"megatron_core": {"affected": "before PR 5401", "fixed": None}}}, "specifier"),
        ({"packages": {"megatron_core": {"affected": "<0.17.0", "fixed": "soon"}}}, "PEP 440 version"),
        ({"packages": {"megatron_core": {"affected": "<0.17.0", "fixed": "0.16.0"}}}, "inside affected"),
        ({"packages": {"megatron_core": {"affected": "<0.17.0", "fixd": "0.17.0"}}}, "needs"),
        ({"packages": {}}, "packages"),
        ({"trigger": {"layout.no_such_key": True}}, "unknown path"),
        ({"trigger": {"pp": {"greater": 1}}}, "unknown operator"),
        ({"trigger": {"pp": {"gt": "one"}}}, "needs a number"),
        ({"trigger": {"pp": [1, 2]}}, "needs an operator"),
        ({"trigger": {"all": {"pp": 1}}}, "non-empty list"),
        ({"trigger": {"pp": {"stated": True}}}, "only layout keys"),
        ({"trigger": "pp > 1"}, "mapping"),
        ({"source": "see the forum"}, "GitHub"),
        ({"reported": "2019-01-01"}, "2025-2026"),
        ({"id": "Bad-Id"}, "snake_case"),
    ],
)
def test_bad_entries_fail_at_load(over, match):
    with pytest.raises(KnownIssueDataError, match=match):
        parse_known_issues(_minimal(**over))


def test_duplicate_ids_fail_at_load():
    data = _minimal()
    data["issues"].append(dict(data["issues"][0]))
    with pytest.raises(KnownIssueDataError, match="duplicate"):
        parse_known_issues(data)


def test_packaged_file_is_the_one_validated():
    from importlib import resources

    text = resources.files("moeplan.catalog").joinpath("data", "known_issues.yaml").read_text(encoding="utf-8")
    assert len(parse_known_issues(yaml.safe_load(text))) == len(ISSUES)


def test_trigger_language_combinators_and_env():
    pred, paths = compile_trigger({"any": [{"pp": 1}, {"cp": {"ge": 2}}], "not": {"env.NCCL_NVLS_ENABLE": "0"}})
    assert set(paths) == {"pp", "cp", "env.NCCL_NVLS_ENABLE"}
    assert pred(load_scenario({}))
    assert not pred(load_scenario({"environment": {"NCCL_NVLS_ENABLE": "0"}}))
    assert not pred(load_scenario({"layout": {"pipeline_model_parallel_size": 2}}))
    pred, _ = compile_trigger({"layout.mtp_num_layers": {"eq": 0, "stated": True}})
    assert pred(load_scenario({"layout": {"mtp_num_layers": 0}}))
    assert not pred(load_scenario({}))
    # unknown facts (no model) compare false, never raise
    pred, _ = compile_trigger({"model.num_layers": {"gt": 1}})
    assert not pred(load_scenario({}))


def test_the_unknown_versions_finding_asks_for_the_versions_that_decide_it():
    from moeplan.rules.known_issue_checks import versions_to_state

    nccl = get_known_issue("nccl_2_29_2_hang")
    assert {p.package for p in nccl.packages} == {"nccl"}
    data = copy.deepcopy(nccl.example)
    data.pop("versions", None)
    # no container: the container and NCCL, which no container row gives
    assert versions_to_state(load_scenario(data), [nccl]) == "versions.container and versions.nccl"
    # a container stated: NCCL alone, not the container again
    s = load_scenario({**data, "versions": {"container": "26.04"}})
    assert versions_to_state(s, [nccl]) == "versions.nccl"
    infos = [f for f in validate(s).findings if f.rule_id == UNKNOWN_RULE]
    assert infos and "stating versions.nccl decides all" in infos[0].message
    assert "or versions.container" not in infos[0].message
    # NCCL stated too: nothing of this issue is left to state (it no longer matches as possible)
    s = load_scenario({**data, "versions": {"container": "26.04", "nccl": "2.29.3"}})
    assert not any("nccl_2_29_2_hang" in f.message for f in validate(s).findings if f.rule_id == UNKNOWN_RULE)
