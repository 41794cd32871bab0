"""Shared test fixtures: the project's reference data, vendored under ``tests/data/reference``
(copied from the project's shared folder ``shared/reference``; provenance in ``tests/data/README.md``)."""

from __future__ import annotations

import pathlib

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"
REF = DATA / "reference"


def load_cases() -> list[dict]:
    """Every bug-log case ``reference/cases/B*.yaml``, in file order (25 of them; an empty folder
    is an error, never an empty list that would quietly drop the tests built from it)."""
    paths = sorted((REF / "cases").glob("B*.yaml"))
    if not paths:
        raise FileNotFoundError(f"no bug-log cases under {REF / 'cases'} (see tests/data/README.md)")
    return [yaml.safe_load(p.read_text()) for p in paths]


def load_published_runs() -> list[dict]:
    """The 113 runs of ``reference/published_runs.yaml``."""
    return yaml.safe_load((REF / "published_runs.yaml").read_text())["runs"]
