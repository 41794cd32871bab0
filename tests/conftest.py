"""Shared test fixtures: the project's reference data, vendored under ``tests/data/reference``
(compiled from public Megatron-Core / Megatron Bridge sources; provenance in ``tests/data/README.md``)."""

from __future__ import annotations

import importlib
import os
import pathlib
import sys
from types import ModuleType
from typing import NoReturn

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"
REF = DATA / "reference"
BENCHMARKS = ROOT / "benchmarks"
#: environment variable: when set (to anything but ``""`` or ``0``), a test whose external tool
#: (shellcheck, chromium, chromedriver, Selenium) is missing fails instead of skipping. ``.ci/run``
#: sets it, so CI never passes without the tools it installed; unset, such a test skips, saying why.
REQUIRE_TOOLS = "MOEPLAN_REQUIRE_TOOLS"
#: environment variable: when set (to anything but ``""`` or ``0``), the ``slow`` tests run with the
#: rest; unset, a plain ``python -m pytest`` leaves them out (``-m slow`` selects them alone)
RUN_SLOW = "MOEPLAN_SLOW"


def pytest_configure(config) -> None:
    # the human-readable output follows the locale (moeplan.i18n): the snapshots are English, so a
    # Chinese locale of the developer's shell must not switch them (tests/test_i18n.py sets its own)
    for var in ("LC_ALL", "LC_MESSAGES", "LANG"):
        if os.environ.get(var, "").lower().startswith("zh"):
            os.environ[var] = "C.UTF-8"
    # the tables follow the terminal's width (COLUMNS): the snapshots are taken at moeplan's width for
    # a pipe (140), so a width exported in the developer's shell must not change them; a test that
    # needs a width sets it (CliRunner env / terminal_width, monkeypatch)
    for var in ("COLUMNS", "LINES", "TERMINAL_WIDTH"):
        os.environ.pop(var, None)
    config.addinivalue_line(
        "markers",
        f"slow: a benchmark over every published run (minutes); left out unless `-m slow` or {RUN_SLOW}=1 (CI)",
    )


def missing_tool(reason: str) -> NoReturn:
    """End the calling test because an external tool it needs is absent: a failure when
    ``MOEPLAN_REQUIRE_TOOLS`` is set (CI), else a skip; ``reason`` says what is missing and how to
    install it. Raises pytest's ``Failed`` or ``Skipped`` outcome, never returns."""
    if os.environ.get(REQUIRE_TOOLS, "") not in ("", "0"):
        pytest.fail(f"{reason}; {REQUIRE_TOOLS} is set, so a missing tool is a failure", pytrace=False)
    pytest.skip(reason)


def load_benchmark(name: str) -> ModuleType:
    """Import ``benchmarks/<name>.py``. The benchmarks are scripts, not a package: their folder goes on
    ``sys.path`` as they put it there themselves (``accuracy.py`` imports ``timefit`` and ``ceiling``)."""
    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))
    return importlib.import_module(name)


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


@pytest.hookimpl(trylast=True)  # after -m / -k have deselected what they deselect
def pytest_collection_modifyitems(config, items) -> None:
    """When the full planner-quality test (``slow``, every published run) is selected, the 26.06 subset
    test (the same check on 13 of those runs, for ``-m 'not slow'`` sessions) adds nothing: deselect it.
    The ``slow`` tests are left out of a session that does not ask for them (``-m`` naming ``slow``, or
    :data:`RUN_SLOW` set): the default run keeps the 13-run sample."""
    asked = "slow" in (config.option.markexpr or "") or os.environ.get(RUN_SLOW, "") not in ("", "0")
    slow = [] if asked else [i for i in items if i.get_closest_marker("slow") is not None]
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = [i for i in items if i not in slow]
    full = any(i.nodeid.endswith("test_plan_quality.py::test_plan_quality_on_every_published_run") for i in items)
    if not full:
        return
    subset = [i for i in items if i.nodeid.endswith("test_plan_quality.py::test_plan_quality_on_the_newest_release")]
    if subset:
        config.hook.pytest_deselected(items=subset)
        items[:] = [i for i in items if i not in subset]
