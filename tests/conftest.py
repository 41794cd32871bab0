"""Shared test fixtures: the project's reference folder (../shared/reference) beside the repo."""

from __future__ import annotations

import pathlib

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
REF = SHARED / "reference"


def load_cases() -> list[dict]:
    if not REF.is_dir():
        return []
    return [yaml.safe_load(p.read_text()) for p in sorted((REF / "cases").glob("B*.yaml"))]


@pytest.fixture(scope="session")
def ref_dir() -> pathlib.Path:
    if not REF.is_dir():
        pytest.skip("../shared/reference not present")
    return REF
