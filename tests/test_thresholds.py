"""The accuracy thresholds live in one file, ``benchmarks/thresholds.yaml``: every entry is complete,
used by a test and met by today's measured figure, and the file changes only in a commit that says why
(a line starting with ``thresholds:`` in its message)."""

from __future__ import annotations

import re
import subprocess

import pytest

from tests.conftest import ROOT
from tests.thresholds import THRESHOLDS_FILE, entries, threshold

#: the commit-message line a change of the thresholds file must carry
COMMIT_LINE = re.compile(r"^thresholds:", re.M)
REQUIRED = ("measured", "set_by", "why")


def _test_sources() -> str:
    here = ROOT / "tests"
    return "\n".join(
        p.read_text(encoding="utf-8") for p in sorted(here.rglob("*.py")) if p.name not in ("test_thresholds.py",)
    )


def test_every_entry_has_one_bound_its_figure_its_source_and_a_reason():
    bad = []
    for name, e in entries().items():
        if not isinstance(e, dict) or ("max" in e) == ("min" in e):
            bad.append(f"{name}: needs exactly one of max / min")
            continue
        bad += [f"{name}: no {key}" for key in REQUIRED if e.get(key) in (None, "")]
        if not isinstance(e.get("max", e.get("min")), (int, float)) or not isinstance(e.get("measured"), (int, float)):
            bad.append(f"{name}: the bound and the measured figure must be numbers")
    assert not bad, bad


def test_every_entry_is_used_by_a_test():
    sources = _test_sources()
    unused = [name for name in entries() if f'"{name}"' not in sources]
    assert not unused, f"entries of {THRESHOLDS_FILE.name} no test reads: {unused}"


def test_every_name_a_test_reads_is_an_entry():
    # the slow tests read theirs only in CI: a misspelt name must fail here first
    read = set(re.findall(r"threshold\(\"([^\"]+)\"\)", _test_sources()))
    assert read and read - set(entries()) == set(), read - set(entries())


def test_the_measured_figure_meets_its_bound():
    missed = []
    for name, e in entries().items():
        if "max" in e and not e["measured"] <= e["max"]:
            missed.append(f"{name}: measured {e['measured']} > max {e['max']}")
        if "min" in e and not e["measured"] >= e["min"]:
            missed.append(f"{name}: measured {e['measured']} < min {e['min']}")
    assert not missed, missed


def test_an_unknown_name_is_a_key_error_naming_the_file():
    with pytest.raises(KeyError, match="thresholds.yaml"):
        threshold("step_time.no_such_figure")
    assert threshold("step_time.in_sample.all.spearman") == float(entries()["step_time.in_sample.all.spearman"]["min"])


def _git(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=False)


def test_every_commit_that_changed_the_thresholds_says_why():
    """Every commit that touched the file has a message line starting with ``thresholds:``. Skipped where
    the history cannot answer: no git, no repository, or a shallow clone (its oldest commit would look
    like it added the file)."""
    try:
        inside = _git("rev-parse", "--is-inside-work-tree")
    except OSError as exc:
        pytest.skip(f"git is not available: {exc}")
    if inside.returncode != 0 or inside.stdout.strip() != "true":
        pytest.skip("no git repository here: the commit rule cannot be checked")
    if _git("rev-parse", "--is-shallow-repository").stdout.strip() == "true":
        pytest.skip("a shallow clone: the history that touched the file may be cut off")
    rel = THRESHOLDS_FILE.relative_to(ROOT).as_posix()
    log = _git("log", "--format=%H%x00%B%x01", "--", rel)
    assert log.returncode == 0, log.stderr
    commits = [c.strip("\n").split("\0", 1) for c in log.stdout.split("\x01") if c.strip()]
    silent = [sha[:12] for sha, body in commits if not COMMIT_LINE.search(body)]
    assert not silent, f"commits that changed {rel} without a line starting with 'thresholds:': {silent}"
