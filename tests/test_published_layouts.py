"""Published layouts are first-class. ``recipes`` shows each guidance layout as
published (every broken rule with its message) and, where it does not run as written, as completed
(what it needs to run, with its memory and step time); ``plan`` prints NVIDIA's layouts at the
request's size beside its pick — the published run with its measured figure where one exists, the
guidance family as written, how #1 differs from it, and as completed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from moeplan.cli.app import app
from moeplan.plan.starting_points import list_recipes

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()


@pytest.fixture(scope="module")
def guidance():
    return list_recipes("guidance")


def test_every_guidance_layout_that_does_not_run_as_written_is_completed(guidance):
    broken = [r for r in guidance if r["check"]["rule_ids"] or (r.get("memory") or {}).get("verdict") == "does-not-fit"]
    assert len(broken) >= 10
    completed = [r for r in broken if r.get("completed")]
    # the families without a GPU count or whose sizes cannot be legal cannot be completed; the rest are
    assert len(completed) >= len(broken) - 4, [r["id"] for r in broken if not r.get("completed")]
    for r in completed:
        c = r["completed"]
        assert c["peak_gib"] <= c["capacity_gib"] and c["tokens_per_s_per_gpu"] > 0, r["id"]
        assert c["needs"] and c["held"], r["id"]
    q = next(r for r in guidance if r["id"] == "lc-family-qwen3-235b-gb200-128k-bf16")
    assert "account_for_embedding_in_pipeline_split: true" in q["completed"]["needs"]


def test_recipes_prints_messages_beside_rule_ids_and_the_completion():
    r = runner.invoke(app, ["recipes", "--model", "Qwen/Qwen3-235B-A22B", "--kind", "guidance"], env={"COLUMNS": "100"})
    assert r.exit_code == 0
    text = " ".join(r.output.split())
    assert "pipeline.num_layers_divisible_by_pp: num_layers (94) is not divisible by PP (4)" in text
    assert "as published:" in text and "completed:" in text and "needs:" in text and "tok/s/GPU" in text


def test_plan_shows_the_published_run_with_its_measured_figure():
    doc = json.loads((ROOT / "tests" / "golden" / "plan" / "dsv3_gb300_4k.json").read_text())["output"]
    pub = doc["baseline"]["published"]
    assert pub["measured_tokens_per_s_per_gpu"] == 6338 and pub["release"] == "26.06"
    assert abs(pub["prediction_error_pct"]) < pub["error_band_pct"]
    assert "first_vs_published_pct" in pub


def test_plan_says_how_its_pick_differs_from_the_published_family():
    doc = json.loads((ROOT / "tests" / "golden" / "plan" / "qwen3_235b_gb200_128k.json").read_text())["output"]
    fam = doc["baseline"]["family"]
    assert fam["first_differs"] and all(" → " in x for x in fam["first_differs"])


def test_the_packaged_measured_figures_are_up_to_date():
    res = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "package_measured.py"), "--check"], capture_output=True, text=True
    )
    assert res.returncode == 0, res.stdout
