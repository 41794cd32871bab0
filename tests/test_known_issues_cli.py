"""`moeplan known-issues` lists the database (filters, JSON, container table); `moeplan check` reports an
issue a scenario triggers, with its source and the versions matched."""

from __future__ import annotations

import json

import yaml
from typer.testing import CliRunner

from moeplan.api.known_issues import known_issues_report
from moeplan.catalog.known_issue_table import all_known_issues, get_known_issue, known_issues
from moeplan.cli.app import app

RUN = CliRunner()


def _run(args):
    return RUN.invoke(app, args, env={"COLUMNS": "200"}, terminal_width=200)


def test_known_issues_json_lists_every_entry_with_sources_and_versions():
    r = _run(["known-issues", "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert doc["count"] == len(all_known_issues()) and len(known_issues()) >= 40
    row = next(i for i in doc["issues"] if i["id"] == "mtp_aux_loss_tracker_hang")
    assert row["source"] == "https://github.com/NVIDIA/Megatron-LM/pull/3401"
    assert row["packages"] == {"megatron_core": {"affected": "<0.17.0", "fixed": "0.17.0"}}
    assert row["symptom"] == "hang" and row["rule_id"] == "known_issue.mtp_aux_loss_tracker_hang"
    assert row["trigger"]["derived.pp_rank_without_moe_layer"] is True


def test_known_issues_filters():
    doc = known_issues_report(package="te")
    assert doc["filters"]["package"] == "transformer_engine" and doc["count"] >= 4
    assert all("transformer_engine" in i["packages"] for i in doc["issues"])
    doc = known_issues_report(symptom="slowdown")
    assert doc["count"] >= 2 and all(i["symptom"] == "slowdown" and i["size"] for i in doc["issues"])
    doc = known_issues_report(package="nccl", symptom="hang")
    assert {i["id"] for i in doc["issues"]} >= {"nccl_2_29_2_hang", "nccl_2_30_nvls_moe_hang"}


def test_known_issues_bad_filter_is_exit_2():
    r = _run(["known-issues", "--symptom", "flaky"])
    assert r.exit_code == 2 and "--symptom" in r.output
    r = _run(["known-issues", "--package", "apex"])
    assert r.exit_code == 2 and "--package" in r.output


def test_known_issues_table_and_container_table():
    r = _run(["known-issues", "--package", "megatron-core", "--containers"])
    assert r.exit_code == 0, r.output
    assert "ep_overlap_shared_event_deadlock" in r.output and "nccl_2_29_2_hang" not in r.output
    assert "nemo:26.04" in r.output and "software-versions.md" in r.output


def test_check_reports_the_issue_a_scenario_triggers(tmp_path):
    k = get_known_issue("gdn_context_parallel_assert")
    path = tmp_path / "gdn.yaml"
    path.write_text(yaml.safe_dump(k.example))
    r = _run(["check", str(path), "--json"])
    assert r.exit_code == 1, r.output  # a guaranteed assertion: an error
    doc = json.loads(r.output)
    f = next(f for f in doc["findings"] if f["rule_id"] == k.rule_id)
    assert f["severity"] == "error" and k.source in f["message"] and "megatron-core 0.17.0 in" in f["message"]
    assert "0.18.0" in f["fix"]
    r = _run(["check", str(path), "--set", "versions.megatron_core=0.18.0", "--json"])
    assert k.rule_id not in {f["rule_id"] for f in json.loads(r.output)["findings"]}
    r = _run(["check", str(path), "--set", "versions.megatron_core=before PR 5401"])
    assert r.exit_code == 2 and "versions.megatron_core" in r.output
