"""The page-writing benchmark scripts refuse arguments they do not take (exit 2, nothing written) and
answer ``--help`` without running (benchmarks/script_args.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ("long_context", "evidence", "held_out_release", "cp_comm_types", "fit_mamba_time", "calibrate_time")


@pytest.mark.parametrize("name", SCRIPTS)
def test_an_unknown_argument_is_refused_before_anything_runs(name):
    res = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / f"{name}.py"), "--bogus"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert res.returncode == 2, res.stderr
    assert "unrecognized arguments: --bogus" in res.stderr and res.stdout == ""


def test_help_says_what_the_script_does_and_writes_nothing():
    res = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "cp_comm_types.py"), "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert res.returncode == 0 and "takes no arguments" in res.stdout and "cp_comm_type" in res.stdout
