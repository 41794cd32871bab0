"""Regenerate the example outputs embedded in the skills' SKILL.md files.

Every block

    <!-- moeplan-output: ARGS -->
    ```text
    ...
    ```
    <!-- /moeplan-output -->

is replaced by the output of ``moeplan ARGS`` run in-process at 100 columns, so the examples are
generated, never typed. ``--check`` exits 1 when a file is out of date (the tests use it).

Usage: python skills/generate.py [--check]
"""

from __future__ import annotations

import os
import re
import shlex
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent
BLOCK = re.compile(r"(<!-- moeplan-output: (?P<args>.*?) -->\n)```text\n.*?```\n(<!-- /moeplan-output -->)", re.S)
MAX_LINES = 70


def run(args: str) -> str:
    """Output of ``moeplan ARGS`` (stdout and stderr), at most ``MAX_LINES`` lines, paths relative."""
    from typer.testing import CliRunner

    from moeplan.cli.app import app

    os.environ["COLUMNS"] = "100"
    cwd = os.getcwd()
    os.chdir(ROOT.parent)
    try:
        res = CliRunner().invoke(app, shlex.split(args), env={"COLUMNS": "100", "TERM": "dumb"})
    finally:
        os.chdir(cwd)
    lines = [ln.rstrip() for ln in res.output.splitlines()]
    if len(lines) > MAX_LINES:
        lines = lines[:MAX_LINES] + [f"... ({len(lines) - MAX_LINES} more lines)"]
    return "\n".join(lines) + f"\n[exit code {res.exit_code}]\n"


def render(text: str) -> str:
    return BLOCK.sub(lambda mt: f"{mt.group(1)}```text\n{run(mt.group('args'))}```\n{mt.group(3)}", text)


def main() -> int:
    check = "--check" in sys.argv
    stale = []
    for p in sorted(ROOT.glob("*/SKILL.md")):
        old = p.read_text(encoding="utf-8")
        new = render(old)
        if new != old:
            stale.append(p)
            if not check:
                p.write_text(new, encoding="utf-8")
    if check and stale:
        print("out of date (run python skills/generate.py):", ", ".join(str(p) for p in stale))
        return 1
    print("updated" if stale else "up to date", *[str(p) for p in stale])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
