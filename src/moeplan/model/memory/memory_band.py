"""The one memory verdict every command gives: ``fits``, ``tight`` or ``does-not-fit``, from the peak
estimate and the memory model's measured error band.

The band comes from the memory model's validation against measured allocator peaks
(``benchmarks/memory_accuracy.py`` writes ``src/moeplan/catalog/data/memory_validity.json`` and the
table of ``docs/memory_accuracy.md``): for every reading, measured / predicted. Its smallest and
largest value are the band's factors: a layout estimated at ``peak`` measures between
``peak × low`` and ``peak × high``. Today, over 11 readings, ``high`` = 13.41 / 12.062 = 1.1118
(mixtral-8x2b-4layer-tp1-mbs1, error −10.05 %: the model under-predicted) and ``low`` = 7.96 / 8.755 =
0.9092 (mixtral-8x2b-4layer-tp2-mbs2, error +9.98 %: it over-predicted), i.e. −9.1 % / +11.2 % around
the estimate. The verdict compares that interval with the capacity (usable HBM less
``system.reserved_gib``):

- ``fits``: the whole interval is at or under the capacity (``peak × high ≤ capacity``);
- ``does-not-fit``: the whole interval is over it (``peak × low > capacity``), or offloaded optimizer
  state overflows the node's host memory;
- ``tight``: the interval crosses the capacity: the model cannot tell, the layout may or may not fit;
- ``unknown``: no GPU, so no capacity.

Without packaged readings the factors are ``1 ∓`` :data:`FALLBACK_BAND_PCT` % (the headroom ``estimate``
called tight before the band was measured), and the verdict's source says so.
"""

from __future__ import annotations

from dataclasses import dataclass

from moeplan.i18n.messages import Message, msg
from moeplan.model.validity import memory_validity
from moeplan.units import GIB_BYTES

FITS, TIGHT, DOES_NOT_FIT, UNKNOWN = "fits", "tight", "does-not-fit", "unknown"
#: the band (%, both ways) when no memory readings are packaged
FALLBACK_BAND_PCT = 5.0
BAND_SOURCE = "docs/memory_accuracy.md: the smallest and largest measured / predicted allocator peak of its readings"
FALLBACK_SOURCE = "no memory readings packaged: a 5 % planning band"


def band_factors() -> tuple[float, float, str]:
    """``(low, high, source)``: the smallest and largest measured / predicted peak over the packaged
    memory readings (``memory_validity.json``, ``benchmarks/memory_accuracy.py``, the table of
    docs/memory_accuracy.md; 0.9092 and 1.1118 today), else ``1 ∓`` :data:`FALLBACK_BAND_PCT` %."""
    ratios = [
        r["measured_gib"] / r["predicted_gib"]
        for r in memory_validity().get("readings") or []
        if r.get("predicted_gib") and r.get("measured_gib")
    ]
    if ratios:
        return min(ratios), max(ratios), BAND_SOURCE
    b = FALLBACK_BAND_PCT / 100
    return 1 - b, 1 + b, FALLBACK_SOURCE


def band_edges(peak_bytes: float, factors: tuple[float, float] | None = None) -> tuple[float, float]:
    """What a layout estimated at ``peak_bytes`` may measure (bytes): ``(peak × low, peak × high)``
    with ``factors`` = ``(low, high)``, by default :func:`band_factors`."""
    lo, hi = band_factors()[:2] if factors is None else factors
    return peak_bytes * lo, peak_bytes * hi


def largest_fitting_peak(capacity_bytes: float, factors: tuple[float, float] | None = None) -> float:
    """The largest estimated peak (bytes) whose verdict is ``fits``: ``capacity / high``."""
    hi = band_factors()[1] if factors is None else factors[1]
    return capacity_bytes / hi


@dataclass(frozen=True)
class MemoryVerdict:
    """A memory verdict (``fits`` | ``tight`` | ``does-not-fit`` | ``unknown``) with what it rests on.

    ``peak_bytes``: the estimated device use of the peak stage; ``capacity_bytes``: usable HBM less
    ``system.reserved_gib`` (None without a GPU); ``low_pct`` / ``high_pct``: how far below and above
    the estimate the measured peak may lie (%); ``low_bytes`` / ``high_bytes``: :func:`band_edges` of
    the peak; ``host_fits``: offloaded optimizer state against the node's host memory (None when
    nothing is offloaded or it is unknown); ``band_source``.
    """

    verdict: str
    peak_bytes: int
    capacity_bytes: int | None
    low_pct: float
    high_pct: float
    low_bytes: int
    high_bytes: int
    host_fits: bool | None
    band_source: str

    @property
    def fits(self) -> bool:
        """True only for ``fits``: the whole band is under the capacity."""
        return self.verdict == FITS

    def text(self) -> Message:
        """Why the verdict (the verdict word itself is not part of it): the band's edge or edges
        against the capacity, or the host memory that overflows."""
        if self.verdict == UNKNOWN or self.capacity_bytes is None:
            return msg("model_verdict.unknown")
        peak, low, high = self.peak_bytes / GIB_BYTES, self.low_bytes / GIB_BYTES, self.high_bytes / GIB_BYTES
        cap, lo, hi = self.capacity_bytes / GIB_BYTES, self.low_pct, self.high_pct
        if self.verdict == TIGHT:
            return msg("model_verdict.tight", peak=peak, low=low, high=high, cap=cap, lo=lo, hi=hi)
        if self.verdict == FITS:
            return msg("model_verdict.fits", high=high, cap=cap, hi=hi)
        if self.host_fits is False and self.low_bytes <= self.capacity_bytes:
            return msg("model_verdict.host_over")
        return msg("model_verdict.does_not_fit", low=low, cap=cap, lo=lo)

    def to_dict(self) -> dict:
        return {
            "verdict": self.verdict,
            "peak_bytes": self.peak_bytes,
            "capacity_bytes": self.capacity_bytes,
            "low_pct": self.low_pct,
            "high_pct": self.high_pct,
            "low_bytes": self.low_bytes,
            "high_bytes": self.high_bytes,
            "host_fits": self.host_fits,
            "band_source": self.band_source,
            "text": self.text(),
        }


def judge_memory(
    peak_bytes: float,
    capacity_bytes: float | None,
    host_fits: bool | None = None,
    factors: tuple[float, float] | None = None,
) -> MemoryVerdict:
    """The memory verdict of a peak estimate (bytes) against the capacity (bytes; None: no GPU).

    ``fits`` when ``peak × high ≤ capacity``; ``does-not-fit`` when ``peak × low > capacity`` or
    ``host_fits`` is False; ``tight`` between; ``unknown`` without a capacity. ``factors``
    (``(low, high)``, measured / predicted) default to :func:`band_factors` (docs/memory_accuracy.md).

    Raises:
        ValueError: factors that do not satisfy ``0 < low ≤ 1 ≤ high``.
    """
    if factors is None:
        lo, hi, source = band_factors()
    else:
        (lo, hi), source = factors, "given"
    if not 0 < lo <= 1 <= hi:
        raise ValueError(f"band factors ({lo}, {hi}): 0 < low ≤ 1 ≤ high")
    low, high = peak_bytes * lo, peak_bytes * hi
    if host_fits is False:
        verdict = DOES_NOT_FIT
    elif not capacity_bytes:
        verdict = UNKNOWN
    elif low > capacity_bytes:
        verdict = DOES_NOT_FIT
    elif high > capacity_bytes:
        verdict = TIGHT
    else:
        verdict = FITS
    cap = None if not capacity_bytes else int(capacity_bytes)
    pct_lo, pct_hi = 100 * (1 - lo), 100 * (hi - 1)
    return MemoryVerdict(verdict, int(peak_bytes), cap, pct_lo, pct_hi, int(low), int(high), host_fits, source)


__all__ = [
    "DOES_NOT_FIT",
    "FALLBACK_BAND_PCT",
    "FITS",
    "TIGHT",
    "UNKNOWN",
    "MemoryVerdict",
    "band_edges",
    "band_factors",
    "judge_memory",
    "largest_fitting_peak",
]
