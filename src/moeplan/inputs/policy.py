"""The one input policy every reader follows: bounded documents, plain text, bounded
numbers, regular files.

- Documents (YAML, JSON) are at most :data:`MAX_YAML_BYTES` / :data:`MAX_JSON_BYTES` long and nest at
  most :data:`MAX_DEPTH` deep; YAML has no aliases, tags or duplicate keys, JSON no duplicate keys,
  no ``NaN`` / ``Infinity`` and no number that does not fit (:mod:`moeplan.inputs.loading` parses them).
- Text values hold no control characters (C0/C1 controls, line and paragraph separators, format
  characters such as U+202E): a newline in a layout value would otherwise become a second Hydra
  override or a second shell line in a generated script. Each is at most :data:`MAX_TEXT_CHARS` long.
- Numbers are ASCII digits (``²`` and ``８`` are not digits here), integers at most
  :data:`MAX_INT_DIGITS` digits, floats finite; each field then has its own plausible range.
- Files are read only when they are regular files (a FIFO or a device would block or never end),
  and only up to a stated size.

Every violation is an :class:`~moeplan.errors.InputError` naming the field (exit code 2).
"""

from __future__ import annotations

import math
import os
import re
import stat
import unicodedata
from pathlib import Path

from moeplan.errors import InputError, missing_file, short_repr

#: the longest YAML document read: pure-Python YAML parses 0.07–0.5 MB/s and holds about 350 bytes
#: per input byte (a 4 MB list of lists took 57 s and 1.4 GB), so 1 MiB bounds a document at about
#: 15 s and 350 MB; a scenario, a Bridge config dump or a runs file of a few thousand runs is far smaller
MAX_YAML_BYTES = 2**20
#: the longest JSON document read (a calibration profile, a sweep manifest, a config.json)
MAX_JSON_BYTES = 16 * 2**20
#: the deepest nesting of mappings and lists in any document
MAX_DEPTH = 64
#: the longest text value
MAX_TEXT_CHARS = 65536
#: the most items in one list or mapping
MAX_ITEMS = 100_000
#: the most digits of an integer (anything longer is no count of anything moeplan knows)
MAX_INT_DIGITS = 30
#: the largest magnitude of a float in any input (far beyond every physical quantity moeplan reads)
MAX_FLOAT = 1e30

#: Unicode categories refused in text: controls, format characters, line / paragraph separators,
#: surrogates, unassigned
_BAD_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs", "Cn"})
#: the ASCII characters refused in text: C0 controls and DEL
_ASCII_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_ASCII_INT = re.compile(r"[+-]?[0-9]+")
_ASCII_FLOAT = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")


def bad_char(text: str) -> str | None:
    """The first character of ``text`` that text values may not hold (a control character, a line
    or paragraph separator, a format character), or None. Linear in ``len(text)``."""
    if text.isascii():
        bad = _ASCII_CONTROL.search(text)
        return bad.group() if bad else None
    for ch in text:
        if unicodedata.category(ch) in _BAD_CATEGORIES:
            return ch
    return None


#: short texts found plain, with the limit they passed under (keys and values recur in every candidate
#: of a plan); emptied past 10,000 entries
_PLAIN_TEXTS: set[tuple[str, int]] = set()


def check_text(text: str, field: str, limit: int = MAX_TEXT_CHARS) -> str:
    """``text`` when it is plain (no control character, at most ``limit`` characters). A text of at
    most 256 characters that passed once under a limit passes again without a second look.

    Raises:
        InputError: naming ``field``, the value (cut) and the rule.
    """
    if (text, limit) in _PLAIN_TEXTS:
        return text
    _check_text(text, field, limit)
    if len(text) <= 256:
        if len(_PLAIN_TEXTS) > 10000:
            _PLAIN_TEXTS.clear()
        _PLAIN_TEXTS.add((text, limit))
    return text


def _check_text(text: str, field: str, limit: int) -> None:
    """:func:`check_text` without the memory of passed texts."""
    if len(text) > limit:
        raise InputError(field, text, f"text of at most {limit} characters")
    ch = bad_char(text)
    if ch is not None:
        raise InputError(field, text, f"printable text (no control characters; found U+{ord(ch):04X})")


def check_number(value: int | float, field: str) -> int | float:
    """``value`` when it is an integer of at most :data:`MAX_INT_DIGITS` digits or a finite float of
    magnitude at most :data:`MAX_FLOAT`.

    Raises:
        InputError: naming ``field``.
    """
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        # 2**100 has 31 digits; below it, count them exactly (bit_length × 3.33 refused 30-digit numbers)
        if value.bit_length() > 100 or len(str(abs(value))) > MAX_INT_DIGITS:
            raise InputError(field, value, f"an integer of at most {MAX_INT_DIGITS} digits")
        return value
    if not math.isfinite(value) or abs(value) > MAX_FLOAT:
        raise InputError(field, value, f"a finite number of magnitude at most {MAX_FLOAT:g}")
    return value


def check_plain(data: object, field: str, depth: int = 0) -> None:
    """Walk a parsed document (mappings, lists, text, numbers, booleans, None) and apply the policy
    to every key and value: plain text, bounded numbers, at most :data:`MAX_ITEMS` items per
    container, at most :data:`MAX_DEPTH` levels. Iterative in the items, recursive in the depth
    (bounded), linear in the size.

    Raises:
        InputError: the first violation, named by its dotted path under ``field``.
    """
    if depth > MAX_DEPTH:
        raise InputError(field, "(nested too deeply)", f"at most {MAX_DEPTH} levels of nesting")
    if isinstance(data, str):
        check_text(data, field)
    elif isinstance(data, (int, float)):
        check_number(data, field)
    elif isinstance(data, dict):
        if len(data) > MAX_ITEMS:
            raise InputError(field, f"{len(data)} keys", f"at most {MAX_ITEMS} keys")
        for k, v in data.items():
            key = check_text(k, f"{field}.(key)", 256) if isinstance(k, str) else k
            check_plain(v, f"{field}.{key}" if field else str(key), depth + 1)
    elif isinstance(data, (list, tuple)):
        if len(data) > MAX_ITEMS:
            raise InputError(field, f"{len(data)} items", f"at most {MAX_ITEMS} items")
        for i, v in enumerate(data):
            check_plain(v, f"{field}[{i}]", depth + 1)


def ascii_int(text: str, lo: int | None = None, hi: int | None = None) -> int | None:
    """The integer ``text`` spells in ASCII digits (optional sign, surrounding blanks), within
    [lo, hi] when given; None otherwise (``²``, ``８``, ``1e3``, 40 digits, out of range). Never
    raises; linear in ``len(text)``."""
    t = text.strip()
    if len(t) > MAX_INT_DIGITS + 1 or not _ASCII_INT.fullmatch(t):
        return None
    v = int(t)
    if (lo is not None and v < lo) or (hi is not None and v > hi):
        return None
    return v


def ascii_float(text: str) -> float | None:
    """The finite float ``text`` spells in ASCII (``12.5``, ``1.2E+03``; ``nan`` and ``inf`` too,
    as logs print them), None for anything else (overflow to inf included when not spelled so).
    Never raises; linear in ``len(text)``."""
    t = text.strip()
    low = t.lower()
    if low in ("nan", "+nan", "-nan"):
        return math.nan
    if low in ("inf", "+inf", "-inf", "infinity", "+infinity", "-infinity"):
        return -math.inf if low.startswith("-") else math.inf
    if len(t) > 64 or not _ASCII_FLOAT.fullmatch(t):
        return None
    v = float(t)
    return v if math.isfinite(v) else None


def open_regular(path: Path | str, field: str):
    """Open ``path`` for binary reading when it is a regular file (never blocks: a FIFO, a device or
    a directory is refused before any read).

    Returns:
        A binary file object (the caller closes it).

    Raises:
        InputError: missing, not a regular file, or unreadable.
    """
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise missing_file(field, path) from None
    except OSError as exc:
        raise InputError(field, str(path), f"a readable file ({exc.strerror or type(exc).__name__})") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise InputError(field, str(path), "a regular file (not a directory, FIFO or device)")
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_bytes(path: Path | str, field: str, limit: int) -> bytes:
    """The content of the regular file ``path``, at most ``limit`` bytes.

    Raises:
        InputError: not a readable regular file, or longer than ``limit``.
    """
    with open_regular(path, field) as fh:
        try:
            data = fh.read(limit + 1)
        except OSError as exc:
            raise InputError(field, str(path), f"a readable file ({exc.strerror or type(exc).__name__})") from None
    if len(data) > limit:
        raise InputError(field, str(path), f"a file of at most {limit // 2**20} MiB")
    return data


def read_text(path: Path | str, field: str, limit: int) -> str:
    """The UTF-8 text of the regular file ``path`` (a byte-order mark dropped), at most ``limit`` bytes.

    Raises:
        InputError: not a readable regular file, too long, or not UTF-8.
    """
    data = read_bytes(path, field, limit)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise InputError(field, str(path), "a UTF-8 text file") from None


def quote(value: object) -> str:
    """A user value as notes quote it: ``repr`` cut to a few dozen characters (see
    :func:`moeplan.errors.short_repr`)."""
    return short_repr(value)


__all__ = [
    "MAX_DEPTH",
    "MAX_FLOAT",
    "MAX_INT_DIGITS",
    "MAX_ITEMS",
    "MAX_JSON_BYTES",
    "MAX_TEXT_CHARS",
    "MAX_YAML_BYTES",
    "ascii_float",
    "ascii_int",
    "bad_char",
    "check_number",
    "check_plain",
    "check_text",
    "open_regular",
    "quote",
    "read_bytes",
    "read_text",
]
