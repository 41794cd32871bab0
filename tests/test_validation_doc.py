"""docs/validation.md is generated (scripts/validation_doc.py) from docs/figures.json and the validity
files the benchmarks write: the page must be what the generator makes of them, and every placeholder
of the template must resolve. Whether those files match what the code computes now is asserted where
the figures are computed (test_accuracy_figures, test_plan_quality, test_memory_readings)."""

from __future__ import annotations

import importlib.util

from tests.conftest import ROOT

_spec = importlib.util.spec_from_file_location("validation_doc", ROOT / "scripts" / "validation_doc.py")
assert _spec is not None and _spec.loader is not None
validation_doc = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(validation_doc)


def test_validation_page_is_generated_from_the_figures():
    want = validation_doc.render()
    got = (ROOT / "docs" / "validation.md").read_text(encoding="utf-8")
    assert got == want, "docs/validation.md is stale: run python scripts/validation_doc.py"


def test_every_placeholder_resolves_and_the_headline_figures_are_printed():
    text = validation_doc.render()
    assert "{" not in text.replace("`{", "")  # no placeholder left (format would have raised on a missing key)
    figs = validation_doc.figures()
    st = figs["step_time"]["all"]["moeplan"]
    assert f"| moeplan | {st['median_pct']:.1f} |" in text
    p = figs["planner"]
    assert f"**{p['hits']}/{p['runs']} (" in text
