"""`plan` and known issues: candidates list the issues they may hit, a confirmed hang, crash or assertion
at the stated versions removes the layouts that trigger it (rejection reason known_issue.<id>), a slowdown
(or NaN, or an open report) is flagged in a note, and unstated versions leave the ranking as it was."""

from __future__ import annotations

import copy
from pathlib import Path

import yaml

from moeplan.plan.planner import plan

REQUEST = yaml.safe_load((Path(__file__).parent / "golden" / "scenarios" / "qwen3_30b_h100_4k.yaml").read_text())
REQUEST.pop("layout")


def _plan(versions: dict | None = None, **over):
    req = copy.deepcopy(REQUEST)
    req.update(over)
    if versions:
        req["versions"] = versions
    return plan(req, top=3).to_dict()


def test_unstated_versions_flag_possible_issues_without_changing_the_ranking():
    doc = _plan()
    for c in doc["candidates"]:
        assert "known_issues" in c
        assert all(k["status"] == "possible" for k in c["known_issues"])
    assert sum("versions not stated: " in n for n in doc["notes"]) == 1
    assert not any(r["reason"].startswith("known_issue.") for r in doc["rejected"])


def test_assertion_at_stated_versions_rejects_the_layouts_that_trigger_it():
    # PyTorch 2.5 with megatron-core 0.15: EP overlap asserts (NVIDIA/Megatron-LM#1828)
    doc = _plan({"megatron_core": "0.15.0", "torch": "2.5.1"})
    reasons = {r["reason"]: r for r in doc["rejected"]}
    assert "known_issue.ep_overlap_torch_below_2_6_assert" in reasons
    assert doc["candidates"]
    assert all(c["knobs"].get("ep_overlap") != "on" for c in doc["candidates"])


def test_hang_at_stated_versions_rejects_every_layout_it_covers():
    # NCCL 2.29.2 hangs (pytorch/pytorch#174338): no multi-GPU layout is recommended
    doc = _plan({"nccl": "2.29.2"})
    assert not doc["candidates"]
    assert any(r["reason"] == "known_issue.nccl_2_29_2_hang" for r in doc["rejected"])
    assert any("known_issue.nccl_2_29_2_hang" in n for n in doc["notes"])


def test_slowdown_at_stated_versions_is_flagged_not_avoided():
    # NeMo 26.06: MoE recipes slow down with TP > 1 (Megatron Bridge known issues 26.06)
    doc = _plan({"container": "nvcr.io/nvidia/nemo:26.06"})
    flagged = [
        c
        for c in doc["candidates"]
        if any(
            k["id"] == "nemo_26_06_tp_slowdown_pytorch_base" and k["status"] == "affected" for k in c["known_issues"]
        )
    ]
    assert all("TP1 " not in c["label"] for c in flagged)
    if flagged:
        assert any("flagged, not avoided" in n for n in doc["notes"])
    assert not any(r["reason"] == "known_issue.nemo_26_06_tp_slowdown_pytorch_base" for r in doc["rejected"])


def test_first_candidate_run_breaking_issues_are_said_in_full():
    # #1 meeting an open NaN report with its versions unstated gets its own note with title and
    # workaround; an issue a current release escapes (torch < 2.6, fixed in 2.6) stays in the id list
    from types import SimpleNamespace

    from moeplan import load_scenario
    from moeplan.plan.planner import first_candidate_risk_notes

    layout = {
        "tensor_model_parallel_size": 2,
        "pipeline_model_parallel_size": 8,
        "virtual_pipeline_model_parallel_size": 4,
        "expert_model_parallel_size": 8,
        "overlap_moe_expert_parallel_comm": True,
        "cuda_graph_impl": "transformer_engine",
        "cuda_graph_scope": ["attn"],
    }
    s = load_scenario({"model": "Qwen/Qwen3-235B-A22B", "system": {"gpu": "h100", "num_gpus": 2048}, "layout": layout})
    notes = first_candidate_risk_notes([SimpleNamespace(scenario=s)])
    nan = [n for n in notes if "te_graphs_attn_ep_overlap_nan" in n]
    assert len(nan) == 1
    assert "not stated" in nan[0] and "drop the TE attention graphs" in nan[0] and "5966" in nan[0]
    assert not any("ep_overlap_torch_below_2_6_assert" in n for n in notes)
    stated = load_scenario(
        {
            "model": "Qwen/Qwen3-235B-A22B",
            "system": {"gpu": "h100", "num_gpus": 2048},
            "layout": layout,
            "versions": {"megatron_core": "0.19.0", "transformer_engine": "2.16.0"},
        }
    )
    said = [n for n in first_candidate_risk_notes([SimpleNamespace(scenario=stated)]) if "nan" in n]
    assert any("at the stated versions" in n for n in said)
    assert first_candidate_risk_notes([]) == []
