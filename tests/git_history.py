"""A throwaway git history for the harvesters' tests: ``git`` run in a scratch repository with a fixed
identity, a fixed commit date and only the system PATH (no user configuration leaks in)."""

from __future__ import annotations

import subprocess
from pathlib import Path


def run_git(repo: Path, *args: str, date: str) -> str:
    """``git args`` in ``repo`` with author and committer date ``date`` (ISO 8601); its stdout, stripped.
    Raises ``subprocess.CalledProcessError`` when git fails."""
    env = {"GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date, "PATH": "/usr/bin:/bin"}
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
        cwd=repo,
        check=True,
        capture_output=True,
        text=True,
        env=env,
    ).stdout.strip()
