"""Planner agreement with the published Megatron Bridge layouts, asserted so that a regression fails CI.

Computed by the code ``benchmarks/plan_quality.py`` reports them with (:func:`plan_quality.one` per
run, :func:`plan_quality.summarise` over them; the runs of ``tests/data/reference/published_runs.yaml``).
A hit: the published layout, or one predicted within 3 % of it, is in our top 5 (the issue's goal:
≥ 80 % of runs). Rank: where the published layout's sizes, planned alone, rank among our candidates.

Thresholds: the values measured on 2026-12-01 (after CUDA-graph memory was set to what Megatron and
TE allocate, EP overlap became a planner key and HybridEP's weak-evidence tie was said rather than
enacted; before: hits 94, rank ≤ 5 78, top-1 at least as fast 104 — the graph buffers make TE attention
graphs cost memory, so for five runs our top-1 runs without them and is predicted slower than the
published layout as published, whose estimate does not check memory), less one run, so a change that
loses more than one run fails; a change that gains runs passes and should raise them (rerun
``python benchmarks/plan_quality.py`` and update them with its figures, docs/plan_quality.md):

======================  ===============  ===============  =========================
figure                  all 113 (slow)   26.06 subset     thresholds (all / subset)
======================  ===============  ===============  =========================
hits (top 5 or ≤ 3 %)   95 (84.1 %)      13 of 13         ≥ 94 / ≥ 12
published rank 1        60               7                ≥ 59 / ≥ 6
published rank ≤ 5      82               10               ≥ 81 / ≥ 9
published rank ≤ 20     108              13               ≥ 107 / ≥ 12
top-1 ≥ as published    99 of 113        10 of 13         ≥ 98 / ≥ 9
======================  ===============  ===============  =========================

The full run plans every published run three times (about 3.5 CPU-minutes: 7 wall-minutes with two
workers on a shared 2-core machine), so it is marked ``slow`` (CI runs it; ``-m 'not slow'`` leaves it
out while working). The subset, every run of the newest release in the data (26.06: 13 runs, all four
models, five GPU types), runs by default in about 30 s.
"""

from __future__ import annotations

import json

import pytest

from tests.conftest import ROOT, load_benchmark

plan_quality = load_benchmark("plan_quality")

#: the documented subset: every published run of the newest release in the data
SUBSET_RELEASE = "26.06"


def _check(fig: dict, runs: int, hits: int, top1: int, top5: int, top20: int, faster: int) -> None:
    assert fig["runs"] == fig["ranked"] == runs, fig  # every published layout planned alone ranks
    assert fig["hits"] >= hits, fig
    assert fig["top1"] >= top1 and fig["top5"] >= top5 and fig["top20"] >= top20, fig
    assert fig["top1_faster"] >= faster and fig["top1_compared"] == runs, fig


def test_plan_quality_on_the_newest_release():
    runs = [r for r in plan_quality.load_runs() if r["release"] == SUBSET_RELEASE]
    assert len(runs) == 13
    fig = plan_quality.summarise(plan_quality.evaluate(runs, workers=2))
    _check(fig, runs=13, hits=12, top1=6, top5=9, top20=12, faster=9)


@pytest.mark.slow
def test_plan_quality_on_every_published_run():
    rows = plan_quality.evaluate(plan_quality.load_runs(), workers=2)
    fig = plan_quality.summarise(rows)
    _check(fig, runs=113, hits=94, top1=59, top5=81, top20=107, faster=98)
    assert fig["hits"] / fig["runs"] >= 0.80  # the goal, implied by 94 of 113 = 83.2 %
    # docs/figures.json (rendered into docs/validation.md) holds what the planner does now: rerun
    # python benchmarks/plan_quality.py (then scripts/validation_doc.py) when this fails
    stored = json.loads((ROOT / "docs" / "figures.json").read_text(encoding="utf-8"))["planner"]
    assert {k: stored[k] for k in fig} == fig, (stored, fig)
