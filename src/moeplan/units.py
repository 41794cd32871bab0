"""Unit conventions and the only place where units are converted.

Base units: bytes for memory, FLOPs for work, seconds for time, bytes/s for bandwidth.
GiB = 2**30 bytes; GB = 10**9 bytes (HBM nominal sizes and link bandwidths are decimal, as vendors
state them). Parameter counts are plain integers (never divided by 1024).
"""

from __future__ import annotations

GIB_BYTES = 2**30
GB_BYTES = 10**9
MIB_BYTES = 2**20
TFLOPS = 10**12


def gib_to_bytes(gib: float) -> int:
    """Convert GiB (2**30 bytes) to bytes, rounded down to an integer."""
    return int(gib * GIB_BYTES)


def bytes_to_gib(num_bytes: float) -> float:
    """Convert bytes to GiB (2**30 bytes)."""
    return num_bytes / GIB_BYTES


def gb_to_bytes(gb: float) -> int:
    """Convert decimal GB (10**9 bytes) to bytes."""
    return int(gb * GB_BYTES)


def mib_to_gib(mib: float) -> float:
    """Convert MiB (2**20 bytes) to GiB (2**30 bytes)."""
    return mib / 1024.0


def format_count(n: int) -> str:
    """Human-readable parameter count with decimal prefixes (1.23B = 1.23e9)."""
    for div, suffix in ((10**12, "T"), (10**9, "B"), (10**6, "M"), (10**3, "K")):
        if abs(n) >= div:
            return f"{n / div:.2f}{suffix}"
    return str(n)


def parse_count(text: str) -> float:
    """Parse a published count such as '30.5B', '1T', '671B' into a number of parameters.

    Raises:
        ValueError: when the text is not a number followed by K, M, B or T.
    """
    mult = {"K": 10**3, "M": 10**6, "B": 10**9, "T": 10**12}
    t = text.strip().upper()
    if not t or t[-1] not in mult:
        raise ValueError(f"count {text!r} must end in K, M, B or T")
    return float(t[:-1]) * mult[t[-1]]
