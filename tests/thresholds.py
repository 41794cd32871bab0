"""The accuracy thresholds the tests assert, read from ``benchmarks/thresholds.yaml`` (the one place they
live; each entry's bound, today's measured figure, the benchmark that computes it and why)."""

from __future__ import annotations

import functools
from pathlib import Path

import yaml

#: the file every accuracy threshold lives in
THRESHOLDS_FILE = Path(__file__).resolve().parents[1] / "benchmarks" / "thresholds.yaml"


@functools.cache
def entries() -> dict[str, dict]:
    """Every entry of the file, by dotted name (a mapping of ``max`` or ``min``, ``measured``,
    ``set_by``, ``why``). Raises ``ValueError`` naming the file when its top level is not a mapping."""
    data = yaml.safe_load(THRESHOLDS_FILE.read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise ValueError(f"{THRESHOLDS_FILE}: expected a mapping of dotted names to entries, got {type(data).__name__}")
    return data


def threshold(name: str) -> float:
    """The bound of entry ``name`` (its ``max`` or its ``min``, whichever it has), as a float.

    Raises ``KeyError`` naming the file when no entry has that name."""
    entry = entries().get(name)
    if entry is None:
        raise KeyError(f"no threshold {name!r} in {THRESHOLDS_FILE} (its entries: {', '.join(sorted(entries()))})")
    return float(entry["max"] if "max" in entry else entry["min"])
