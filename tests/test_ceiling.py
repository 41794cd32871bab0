"""benchmarks/ceiling.py: what a per-release-factor model can reach, on hand-made runs."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from ceiling import oracle_errors, within_group_ceiling  # noqa: E402


def _run(model: str, gpu: str, release: str, measured: float, ep: int = 8) -> dict:
    training = SimpleNamespace(micro_batch_size=1, global_batch_size=512, seq_length=4096)
    scenario = SimpleNamespace(num_gpus=64, tp=1, pp=1, vpp=1, cp=1, ep=ep, etp=1, training=training)
    return {
        "id": f"{model}-{gpu}-{release}-{ep}",
        "model": model,
        "gpu": gpu,
        "release": release,
        "precision": "bf16",
        "measured": measured,
        "scenario": scenario,
    }


def test_contradicting_release_orders_cap_the_groups():
    # group A: one layout, releases r1 < r2 < r3 in speed; group B: the same releases, reversed.
    # One release factor order serves one group: Spearman +1 there and -1 in the other.
    a = [_run("m/A", "h100", r, v) for r, v in (("r1", 100), ("r2", 110), ("r3", 120))]
    b = [_run("m/B", "h100", r, v) for r, v in (("r1", 120), ("r2", 110), ("r3", 100))]
    out = within_group_ceiling(a + b)
    assert out["groups"] == 2
    assert out["max_reachable"] == 1
    assert out["never"] == []
    assert len(out["failing_under_best"]) == 1


def test_free_layouts_leave_a_group_reachable():
    # three different layouts in one group: rankings across layouts are free, so any order passes
    runs = [_run("m/A", "h100", r, v, ep) for r, v, ep in (("r1", 100, 8), ("r2", 90, 16), ("r3", 80, 32))]
    runs += [_run("m/B", "h100", r, v) for r, v in (("r1", 100), ("r2", 110), ("r3", 120))]
    assert within_group_ceiling(runs)["max_reachable"] == 2


def test_oracle_fits_consistent_releases_exactly_and_shows_the_spread_otherwise():
    # both layouts gain 10 % from r1 to r2: a per-release factor explains them exactly
    runs = [_run("m/A", "h100", "r1", 100), _run("m/A", "h100", "r2", 110)]
    runs += [_run("m/B", "h100", "r1", 200), _run("m/B", "h100", "r2", 220)]
    assert oracle_errors(runs) == pytest.approx(np.zeros(4), abs=1e-6)
    # one gains 21 %, the other nothing: the shared factor takes the mean gain √1.21 = 1.1 and each
    # layout's constant splits its own miss, so every run is off by √1.1 (+4.88 %) or 1/√1.1 (−4.65 %)
    runs[1]["measured"] = 121.0
    runs[3]["measured"] = 200.0
    up, down = (1.1**0.5 - 1) * 100, (1 - 1.1**-0.5) * 100
    assert oracle_errors(runs) == pytest.approx([up, down, down, up], abs=1e-3)
