"""Run diagnostics: training logs, OOM messages, run comparison, memory fixes, environment doctor."""

from __future__ import annotations

from pathlib import Path

from moeplan.errors import InputError, missing_file
from moeplan.io.imports import import_config


def read_text_file(path: Path, field: str = "log") -> str:
    """Read a log-like text file: UTF-8 (undecodable bytes replaced) or UTF-16 with a BOM.

    Raises:
        InputError: the path is not an existing, readable regular file.
    """
    try:
        if not path.is_file():
            raise missing_file(field, path)
        data = path.read_bytes()
    except OSError as exc:
        raise InputError(field, str(path), f"a readable file ({exc.strerror or type(exc).__name__})") from None
    if data[:2] in (b"\xff\xfe", b"\xfe\xff"):
        return data.decode("utf-16", errors="replace")
    return data.decode("utf-8-sig", errors="replace")


def log_config(text: str) -> tuple[dict | None, list[str]]:
    """The scenario mapping read from a log's argument dump (and the import notes), or (None, [])
    when the log has no dump."""

    try:
        return import_config(text, "megatron-log")
    except InputError:
        return None, []
