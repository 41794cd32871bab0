"""The type checker: ``mypy``, configured in ``pyproject.toml`` (``[tool.mypy]``: ``src/moeplan``,
Python 3.10), reports no error. CI runs it too (``.ci/run``)."""

from __future__ import annotations

import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_mypy_reports_no_error(monkeypatch: pytest.MonkeyPatch) -> None:
    api = pytest.importorskip(
        "mypy.api", reason="mypy is not installed (it is in the test extras: pip install -e '.[test]')"
    )
    monkeypatch.chdir(ROOT)  # mypy reads [tool.mypy] of the pyproject.toml in the working directory
    stdout, stderr, status = api.run([])
    assert status == 0, f"mypy reports errors:\n{stdout}{stderr}"
    assert "Success: no issues found" in stdout
