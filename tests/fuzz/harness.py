"""The fuzzers' harness: run the ``moeplan`` CLI in-process on hostile input and hold every
run to the contract: exit code 0, 1 or 2 (never 3, a bug), no Python traceback, a wall-time bound (a
``SIGALRM`` guard: a hang is a failure, not a stuck CI job), and no file written outside the stated
outputs (each run works in its own sandbox folder, which is listed before and after). Every other
run given ``--json`` is run without it instead, drawn 80 columns wide as people read it, and held to
that width as well (:func:`run_cli`): the tables, wrapping and quoting of hostile values are fuzzed
as much as the JSON.

Profiles: ``MOEPLAN_FUZZ=ci`` (the default: a bounded, derandomised run, about a minute for all the
fuzzers) or ``MOEPLAN_FUZZ=long`` (``MOEPLAN_FUZZ_SCALE`` times more examples each, default 50, new
random examples each run); ``MOEPLAN_FUZZ_TIMEOUT`` overrides the per-run wall-time bound (s).

Every outcome is tallied per input class (:data:`TALLY`); ``benchmarks/fuzz_counts.py`` runs the
fuzzers and writes the tally to ``benchmarks/fuzz_report.md``. With ``MOEPLAN_FUZZ_RECORD_ONLY=1``
(the counts script) a failed run is tallied, not raised, so one defect does not stop the count.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import tempfile
import time
import traceback
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from hypothesis import HealthCheck, settings
from rich.cells import cell_len
from typer.testing import CliRunner

from moeplan.cli.app import app

MODE = os.environ.get("MOEPLAN_FUZZ", "ci")
LONG = MODE == "long"
SCALE = int(os.environ.get("MOEPLAN_FUZZ_SCALE", "50")) if LONG else 1
TIMEOUT_S = float(os.environ.get("MOEPLAN_FUZZ_TIMEOUT", "60" if LONG else "30"))
RECORD_ONLY = os.environ.get("MOEPLAN_FUZZ_RECORD_ONLY") == "1"
OK_CODES = (0, 1, 2)
#: input class → outcome → count (``exit 0`` .. ``exit 3``, ``hang``, ``traceback``, ``outside``,
#: ``injected``, ``partial``, ``runs``; ``text``: runs of the human-readable output, ``wide``: of
#: those, runs with a line over :data:`TEXT_COLUMNS` columns)
TALLY: dict[str, Counter] = defaultdict(Counter)
#: examples of each failure, for the report (class, what, the arguments)
FAILURES: list[tuple[str, str, str]] = []


def fuzz_settings(ci_examples: int, **kw) -> settings:
    """Hypothesis settings of one fuzzer: ``ci_examples`` examples (times :data:`SCALE` in the long
    profile), no deadline (the :func:`run_cli` alarm bounds each run), derandomised in CI."""
    return settings(
        max_examples=ci_examples * SCALE,
        deadline=None,
        derandomize=not LONG,
        database=None,
        print_blob=True,
        suppress_health_check=list(HealthCheck),
        **kw,
    )


#: the terminal width of the human-readable runs (every output fits an 80-column terminal)
TEXT_COLUMNS = 80
#: the environment of a human-readable run: English, TEXT_COLUMNS wide
TEXT_ENV = {"COLUMNS": str(TEXT_COLUMNS), "LC_ALL": "C.UTF-8", "LANG": "C.UTF-8"}
#: counts the runs given --json: every other one is run without it (:func:`run_cli`)
_ALTERNATE = itertools.count()


class Hang(BaseException):
    """Raised by the alarm inside a run that outlived the bound (a BaseException: no ``except
    Exception`` in the code under test can swallow it)."""


@dataclass
class Outcome:
    """One CLI run: exit code (3 for an unhandled exception, None for a hang), output, seconds."""

    args: list[str]
    code: int | None
    stdout: str = ""
    stderr: str = ""
    seconds: float = 0.0
    trace: str = ""
    problems: list[str] = field(default_factory=list)
    text: bool = False  # the human-readable output (no --json), at TEXT_COLUMNS columns


def _alarm(signum, frame) -> None:
    raise Hang()


@contextlib.contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Raise :class:`Hang` in the block after ``seconds`` of wall time."""
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def as_read(args: list) -> list[str]:
    """``args`` without ``--json``: the run whose output people read (tables and lines)."""
    return [str(a) for a in args if str(a) != "--json"]


def run_cli(args: list, timeout: float | None = None, text: bool | None = None) -> Outcome:
    """Run ``moeplan ARGS`` in-process under the wall-time bound, as the console script would
    (an unhandled exception is exit code 3).

    ``text``: run without ``--json``, drawn at :data:`TEXT_COLUMNS` columns (the output people
    read, where a long value is wrapped and quoted). None (the default): every other run given
    ``--json`` is run so, so that each fuzzer reaches the human-readable output as well as the JSON
    at no extra cost."""
    if text is None:
        text = "--json" in map(str, args) and next(_ALTERNATE) % 2 == 1
    argv = as_read(args) if text else [str(a) for a in args]
    runner = CliRunner()
    t0 = time.perf_counter()
    try:
        with time_limit(timeout or TIMEOUT_S):
            res = runner.invoke(app, argv, catch_exceptions=True, env=TEXT_ENV if text else None)
    except Hang:
        return Outcome(argv, None, seconds=time.perf_counter() - t0, text=text)
    out = Outcome(argv, res.exit_code, res.stdout, res.stderr, time.perf_counter() - t0, text=text)
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        out.code = 3
        out.trace = "".join(traceback.format_exception(*res.exc_info))
    return out


def listing(folder: Path) -> dict[str, tuple[int, float]]:
    """Every path under ``folder`` (relative) with its size and modification time."""
    out = {}
    for p in folder.rglob("*"):
        try:
            st = p.lstat()
        except OSError:
            continue
        out[str(p.relative_to(folder))] = (st.st_size, st.st_mtime_ns)
    return out


@contextlib.contextmanager
def sandbox() -> Iterator[Path]:
    """A fresh folder, also the working directory during the block (a stray relative write lands in
    it and is seen)."""
    old = os.getcwd()
    with tempfile.TemporaryDirectory(prefix="moeplan-fuzz-") as d:
        os.chdir(d)
        try:
            yield Path(d)
        finally:
            os.chdir(old)


def outside(before: dict, after: dict, allowed: set[str]) -> list[str]:
    """Paths created or changed between two listings that are not ``allowed`` (nor inside an
    allowed folder)."""
    changed = [p for p, v in after.items() if before.get(p) != v]
    return [p for p in changed if not any(p == a or p.startswith(a.rstrip("/") + "/") for a in allowed)]


def judge(cls: str, out: Outcome, extra: list[str] = (), codes: tuple[int, ...] = OK_CODES) -> Outcome:
    """Tally one run of input class ``cls`` and hold it to the contract: exit code in ``codes``, no
    traceback, within the bound, no line of a human-readable run wider than :data:`TEXT_COLUMNS`
    columns, and none of ``extra`` problems (files outside the output, an injected command, a
    partial output). Raises AssertionError unless :data:`RECORD_ONLY`."""
    t = TALLY[cls]
    t["runs"] += 1
    t["hang" if out.code is None else f"exit {out.code}"] += 1
    problems = list(extra)
    if out.code is None:
        problems.append(f"hang: more than {TIMEOUT_S:g} s")
    elif out.code not in codes:
        problems.append(f"exit {out.code}" + (f"\n{out.trace}" if out.trace else f"\n{out.stderr[-2000:]}"))
    if "Traceback (most recent call last)" in out.stdout + out.stderr:
        t["traceback"] += 1
        problems.append("a traceback in the output")
    if out.text:
        t["text"] += 1
        wide = [ln for ln in out.stdout.splitlines() if cell_len(ln) > TEXT_COLUMNS]
        if wide:
            t["wide"] += 1
            problems.append(f"wide: {len(wide)} lines over {TEXT_COLUMNS} columns, e.g. {wide[0][:200]!r}")
    for p in extra:
        t[p.split(":", 1)[0]] += 1
    out.problems = problems
    if problems:
        FAILURES.append((cls, problems[0][:300], " ".join(a[:80] for a in out.args)[:400]))
        if not RECORD_ONLY:
            raise AssertionError(f"{cls}: moeplan {' '.join(a[:200] for a in out.args)}\n" + "\n".join(problems))
    return out


__all__ = [
    "FAILURES",
    "LONG",
    "OK_CODES",
    "RECORD_ONLY",
    "SCALE",
    "TALLY",
    "TEXT_COLUMNS",
    "TEXT_ENV",
    "TIMEOUT_S",
    "Hang",
    "Outcome",
    "as_read",
    "fuzz_settings",
    "judge",
    "listing",
    "outside",
    "run_cli",
    "sandbox",
    "time_limit",
]
