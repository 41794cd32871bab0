"""The command line of a benchmark script that takes no arguments: ``--help`` prints what it does and
writes nothing; any other argument is refused (exit 2) instead of being ignored while the script
rewrites its page."""

from __future__ import annotations

import argparse


def takes_no_arguments(doc: str | None, argv: list[str] | None = None) -> None:
    """Parse ``argv`` (default: the process's arguments) with no options but ``--help``, whose text is
    the first paragraph of ``doc`` (the script's docstring).

    Raises:
        SystemExit: 0 after ``--help``; 2 for any argument (argparse's usage error)."""
    first = (doc or "").strip().split("\n\n")[0]
    argparse.ArgumentParser(description=first, epilog="It takes no arguments.").parse_args(argv)
