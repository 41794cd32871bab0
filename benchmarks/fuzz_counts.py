"""Run the repository's fuzzers (``tests/fuzz``) and tabulate what they found: inputs tried
per input class, exit codes, hangs, tracebacks, human-readable runs and their lines over 80 columns,
config files of growing size over their time or memory bound, files written outside the stated
output, injected commands and partial outputs.

Each fuzz test is called directly (hypothesis runs its examples); failures are tallied, not raised
(``MOEPLAN_FUZZ_RECORD_ONLY=1``), so one defect does not stop the count.

Usage::

    python benchmarks/fuzz_counts.py [--scale N] [--seed S] [--only NAME] [--write]

``--scale``: examples per fuzzer = its CI count × N (default 50, the ``MOEPLAN_FUZZ=long`` profile);
``--write``: also write the table into ``benchmarks/fuzz_report.md`` (between its markers).
"""

from __future__ import annotations

import argparse
import importlib
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FUZZ = ROOT / "tests" / "fuzz"
REPORT = ROOT / "benchmarks" / "fuzz_report.md"
BEGIN, END = "<!-- fuzz-counts:begin -->", "<!-- fuzz-counts:end -->"
#: "text": runs of the human-readable output (80 columns), "wide": of those, with a line wider;
#: "slow" / "memory": config files of growing size over their CPU-time / memory bound
COLUMNS = (
    "runs", "text", "exit 0", "exit 1", "exit 2", "exit 3", "hang", "traceback", "wide", "slow", "memory",
    "outside", "injected", "partial",
)  # fmt: skip


def _tests(only: str | None):
    for path in sorted(FUZZ.glob("test_fuzz_*.py")):
        mod = importlib.import_module(path.stem)
        for name in sorted(dir(mod)):
            fn = getattr(mod, name)
            if name.startswith("test_") and callable(fn) and (only is None or only in f"{path.stem}.{name}"):
                yield f"{path.stem}.{name}", fn


def table(tally: dict) -> str:
    """The tally as a Markdown table, one row per input class and a total."""
    rows = ["| input class | " + " | ".join(COLUMNS) + " |", "|---" * (len(COLUMNS) + 1) + "|"]
    total = {c: 0 for c in COLUMNS}
    for cls in sorted(tally):
        rows.append(f"| {cls} | " + " | ".join(f"{tally[cls].get(c, 0):,}" for c in COLUMNS) + " |")
        for c in COLUMNS:
            total[c] += tally[cls].get(c, 0)
    rows.append("| **all** | " + " | ".join(f"**{total[c]:,}**" for c in COLUMNS) + " |")
    return "\n".join(rows)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", type=int, default=50)
    ap.add_argument("--seed", type=int, default=None, help="(recorded only: hypothesis draws its own)")
    ap.add_argument("--only", default=None, help="run only the fuzzers whose name contains this")
    ap.add_argument("--write", action="store_true", help=f"write the table into {REPORT.name}")
    ns = ap.parse_args(argv)
    os.environ.update(MOEPLAN_FUZZ="long", MOEPLAN_FUZZ_SCALE=str(ns.scale), MOEPLAN_FUZZ_RECORD_ONLY="1")
    sys.path.insert(0, str(FUZZ))
    harness = importlib.import_module("harness")
    t0 = time.perf_counter()
    timings = []
    for name, fn in _tests(ns.only):
        t1 = time.perf_counter()
        try:
            fn()
        except Exception as exc:  # noqa: BLE001 - a fuzzer's own error is reported, the count goes on
            harness.FAILURES.append(("(fuzzer)", f"{name}: {type(exc).__name__}: {exc}"[:300], ""))
        timings.append((name, time.perf_counter() - t1))
        print(f"{name}: {timings[-1][1]:.0f} s", file=sys.stderr)
    elapsed = time.perf_counter() - t0
    text = table(harness.TALLY)
    fails = "\n".join(f"- {c}: {w} (`{a}`)" for c, w, a in harness.FAILURES[:50]) or "none"
    body = (
        f"{text}\n\nRun: `python benchmarks/fuzz_counts.py --scale {ns.scale}` on Python "
        f"{platform.python_version()}, {elapsed / 60:.0f} min; per-run wall-time bound {harness.TIMEOUT_S:g} s.\n\n"
        f"Failures: {fails}\n"
    )
    print(body)
    if ns.write:
        old = REPORT.read_text() if REPORT.exists() else f"# Fuzz report\n\n{BEGIN}\n{END}\n"
        head, _, rest = old.partition(BEGIN)
        _, _, tail = rest.partition(END)
        REPORT.write_text(f"{head}{BEGIN}\n{body}{END}{tail}")
    return 1 if harness.FAILURES else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
