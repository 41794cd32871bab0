"""``scripts/regen.py``: every script that writes a derived file is one of its steps (or named as not one,
with the reason), its steps exist, and its summary names the values that moved, largest first."""

from __future__ import annotations

import importlib.util
import json
import re
import sys

import pytest

from tests.conftest import ROOT

_spec = importlib.util.spec_from_file_location("regen", ROOT / "scripts" / "regen.py")
assert _spec is not None and _spec.loader is not None
regen = importlib.util.module_from_spec(_spec)
sys.modules["regen"] = regen  # dataclasses look their module up there
_spec.loader.exec_module(regen)

#: what a script that writes a file contains
WRITES = re.compile(r"write_text\(|figures\.update\(|open\(.*\"w\"|\.write\(")


def test_every_script_that_writes_a_file_is_a_step_or_says_why_not():
    steps = {s.argv[0] for s in regen.STEPS if s.argv[0] != "-m"}
    writers = {
        p.relative_to(ROOT).as_posix()
        for folder in ("benchmarks", "scripts", "skills")
        for p in sorted((ROOT / folder).glob("*.py"))
        if WRITES.search(p.read_text(encoding="utf-8"))
    }
    assert writers - steps - set(regen.NOT_STEPS) == set()
    assert all((ROOT / s).is_file() for s in steps), steps
    assert set(regen.NOT_STEPS) <= writers  # no stale exemption


def test_fast_leaves_out_the_slow_steps_and_an_unknown_name_is_refused():
    fast = [s.name for s in regen.select([], [], fast=True)]
    assert "constants" not in fast and "plan_quality" not in fast and "goldens" in fast
    assert [s.name for s in regen.select(["goldens", "recipes"], [], fast=False)] == ["recipes", "goldens"]
    with pytest.raises(ValueError, match="unknown step 'golden'.*goldens"):
        regen.select(["golden"], [], fast=False)


def test_a_moved_golden_names_the_term_that_moved_it_largest_first():
    old = {
        "exit_code": 0,
        "output": {"memory": {"stages": [{"items": {"activations_gib": 41.2, "weights_gib": 10.0}}]}},
    }
    new = json.loads(json.dumps(old))
    new["output"]["memory"]["stages"][0]["items"]["activations_gib"] = 43.0  # (43.0 − 41.2) / 41.2 = +4.37 %
    new["output"]["memory"]["stages"][0]["items"]["weights_gib"] = 10.1  # +1.0 %
    lines = regen.describe_json("tests/golden/estimate/dsv3_h100_128k.json", json.dumps(old), json.dumps(new))
    assert lines == [
        "estimate/dsv3_h100_128k.json: 2 value(s) moved",
        "    estimate/dsv3_h100_128k.json memory.stages[0].items.activations_gib 41.2 → 43 (+4.4 %)",
        "    estimate/dsv3_h100_128k.json memory.stages[0].items.weights_gib 10 → 10.1 (+1.0 %)",
    ]


def test_a_golden_lists_five_moves_and_counts_the_rest():
    old = {"output": {f"v{i}": 100.0 for i in range(7)}}
    new = {"output": {f"v{i}": 100.0 + i + 1 for i in range(7)}}  # v6 moved most: +7 %
    lines = regen.describe_json("tests/golden/plan/x.json", json.dumps(old), json.dumps(new))
    assert lines[1] == "    plan/x.json v6 100 → 107 (+7.0 %)"
    assert len(lines) == 1 + 5 + 1 and lines[-1] == "    … and 2 more"


def test_a_text_file_counts_its_changed_lines():
    assert regen.describe_text("docs/a.md", "a\nb\nc\n", "a\nB\nc\nd\n") == ["docs/a.md: +2 −1 lines"]
