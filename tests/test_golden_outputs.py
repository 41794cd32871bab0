"""Golden outputs: ``estimate --json`` and ``plan --json`` of a fixed matrix of scenarios
(``tests/golden/scenarios``: the examples, DeepSeek-V3 at 4K and 128K, Qwen3-235B at 128K, gpt-oss-120b,
Qwen3-Next, a VLM, a long-context dense model, ...) and the export formats, compared with the files
``scripts/regen_golden.py`` writes. A refactor must leave them identical; a deliberate change of
behaviour regenerates them (``python scripts/regen_golden.py``) and says why in its commit."""

from __future__ import annotations

import importlib.util
import json
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("regen_golden", ROOT / "scripts" / "regen_golden.py")
regen = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(regen)

NAMES = regen.scenario_names()


def test_matrix_is_the_documented_one():
    assert len(NAMES) >= 12
    assert {"dsv3_gb300_4k", "dsv3_h100_128k", "qwen3_235b_gb200_128k", "gpt_oss_120b_gb200"} <= set(NAMES)


def _diff(expected: object, actual: object, path: str = "$") -> str | None:
    """The first place two JSON documents differ (for a readable failure)."""
    if type(expected) is not type(actual):
        return f"{path}: {expected!r} != {actual!r}"
    if isinstance(expected, dict):
        for k in sorted(set(expected) | set(actual)):
            if k not in expected or k not in actual:
                return f"{path}.{k}: only in {'golden' if k in expected else 'output'}"
            d = _diff(expected[k], actual[k], f"{path}.{k}")
            if d:
                return d
        if list(expected) != list(actual):
            return f"{path}: key order {list(expected)} != {list(actual)}"
        return None
    if isinstance(expected, list):
        if len(expected) != len(actual):
            return f"{path}: length {len(expected)} != {len(actual)}"
        for i, (a, b) in enumerate(zip(expected, actual, strict=True)):
            d = _diff(a, b, f"{path}[{i}]")
            if d:
                return d
        return None
    return None if expected == actual else f"{path}: golden {expected!r} != output {actual!r}"


@pytest.mark.parametrize("name", NAMES)
def test_estimate_and_plan_match_golden(name, tmp_path):
    for rel, text in regen.outputs(name, tmp_path).items():
        golden = ROOT / "tests" / "golden" / rel
        assert golden.is_file(), f"{rel} missing: python scripts/regen_golden.py"
        d = _diff(json.loads(golden.read_text()), json.loads(text))
        assert d is None, f"{rel} differs from the golden at {d} (python scripts/regen_golden.py if deliberate)"


def test_normalise_drops_wall_clock_and_rounds():
    assert regen.normalise({"seconds": 1.5, "a": [1 / 3, 2]}) == {"a": [0.333333333, 2]}


@pytest.mark.parametrize("name", sorted(regen.TEXT_COMMANDS))
def test_text_snapshots_at_80_and_120_columns(name):
    """The README tour as a terminal of 80 and of 120 columns shows it: every
    number visible at 80 columns, no line longer than the terminal."""
    for rel, text in regen.text_outputs([name]).items():
        golden = ROOT / "tests" / "golden" / rel
        assert golden.is_file(), f"{rel} missing: python scripts/regen_golden.py"
        width = int(rel.rsplit(".", 2)[-2])
        body = text.splitlines()[1:]
        assert all(len(line) <= width for line in body), rel
        assert "…" not in text, f"{rel}: a cell was cut (ellipsis)"
        assert golden.read_text() == text, (
            f"{rel} differs from the golden (python scripts/regen_golden.py if deliberate)"
        )
