"""The headline validation figures, one JSON file (``docs/figures.json``) that the benchmarks write
their section of and ``scripts/validation_doc.py`` renders into ``docs/validation.md``; the tests
compare the file with what the code computes now (``tests/test_validation_doc.py``,
``tests/test_accuracy_figures.py``, ``tests/test_plan_quality.py``), so the document cannot drift."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIGURES = ROOT / "docs" / "figures.json"


def load() -> dict:
    """Every section written so far ({} when the file does not exist)."""
    return json.loads(FIGURES.read_text(encoding="utf-8")) if FIGURES.exists() else {}


def update(section: str, data: dict) -> None:
    """Replace ``section`` of docs/figures.json with ``data`` (written atomically, keys sorted)."""
    figs = load()
    figs[section] = data
    fd, tmp = tempfile.mkstemp(dir=FIGURES.parent, prefix=".figures.", suffix=".json")
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(json.dumps(figs, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, FIGURES)
