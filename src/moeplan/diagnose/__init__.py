"""Run diagnostics: training logs, OOM messages, run comparison, memory fixes, environment doctor."""

from __future__ import annotations

import codecs
import io
from pathlib import Path

from moeplan.diagnose.logs import LogStats, parse_log_stream
from moeplan.errors import InputError
from moeplan.io.imports import import_config, import_dump
from moeplan.spec.policy import open_regular, read_bytes

#: the longest OOM message file read whole (the message is near its end; a log is read as a log)
MAX_TEXT_FILE_BYTES = 256 * 2**20


def _decoded(raw) -> io.TextIOWrapper:
    """A text stream over the binary file ``raw``: UTF-16 with a byte-order mark, else UTF-8 (a BOM
    dropped); undecodable bytes replaced; universal newlines."""
    head = raw.peek(3)[:3] if hasattr(raw, "peek") else b""
    encoding = "utf-16" if head[:2] in (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE) else "utf-8-sig"
    return io.TextIOWrapper(raw, encoding=encoding, errors="replace", newline=None)


def read_log(path: Path, field: str = "log") -> LogStats:
    """Parse the training log at ``path`` in one streaming pass (time linear in its length, memory
    bounded by the statistics kept, never by the file), argument dump included.

    Raises:
        InputError: the path is not an existing, readable regular file (a FIFO is refused, never read).
    """
    with open_regular(path, field) as raw:
        try:
            return parse_log_stream(_decoded(raw))
        except OSError as exc:
            raise InputError(field, str(path), f"a readable file ({exc.strerror or type(exc).__name__})") from None


def read_text_file(path: Path, field: str = "log") -> str:
    """Read a log-like text file whole: UTF-8 (undecodable bytes replaced) or UTF-16 with a BOM.

    Raises:
        InputError: the path is not an existing, readable regular file, or longer than
            :data:`MAX_TEXT_FILE_BYTES`.
    """
    data = read_bytes(path, field, MAX_TEXT_FILE_BYTES)
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


def stats_config(st: LogStats) -> tuple[dict | None, list[str]]:
    """As :func:`log_config`, from the argument dump a streaming parse kept (:func:`read_log`)."""
    try:
        return import_dump(st.dump)
    except InputError:
        return None, []
