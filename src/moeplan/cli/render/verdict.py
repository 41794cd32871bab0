"""The memory verdict in words, as every command prints it beside its number: ``does-not-fit`` with
the parts that push the peak over (:func:`moeplan.model.memory.dominant_items`), ``tight`` as "may
not fit" with the peak, the memory model's error band and the usable HBM."""

from __future__ import annotations

from moeplan.cli.render import T
from moeplan.model.memory import ITEM_LABELS, TIGHT_HEADROOM
from moeplan.units import GIB_BYTES


def dominant_text(items: list[dict] | None) -> str:
    """``392.1 GiB attention masks and inputs held by CUDA graphs, 155.4 GiB activations`` from
    ``dominant_items`` (bytes), in the current language (:func:`moeplan.model.memory.dominant_items_text`
    in English); empty when there are none."""
    return T(", ").join(
        f"{it['bytes'] / GIB_BYTES:.1f} GiB {T(ITEM_LABELS.get(it['item'], it['item']))}" for it in items or []
    )


def verdict_text(mem: dict) -> str:
    """The verdict of a memory document (``verdict`` and ``dominant_items``) with its reason:
    ``does-not-fit: 392.1 GiB ..., 155.4 GiB activations``; ``tight: may not fit: the peak ...``
    (:func:`may_not_fit_text`; ``tight: may not fit`` where the document has no peak and capacity in
    bytes); the verdict alone when it fits or nothing is itemised."""
    verdict = mem.get("verdict") or "unknown"
    if verdict == "tight":
        return T("tight") + T(": ") + (may_not_fit_text(mem) or T("may not fit"))
    why = dominant_text(mem.get("dominant_items")) if verdict == "does-not-fit" else ""
    if not why and verdict == "does-not-fit":
        why = T((mem.get("verdict_band") or {}).get("text") or "")
    return T(verdict) + (T(": ") + why if why else "")


def may_not_fit_text(mem: dict) -> str:
    """``may not fit: the peak 77.1 GiB may measure 69.5–86.6 GiB (the memory model's ±11 %), across the
    usable 79.6 GiB (largest: ...)`` for a ``tight`` memory document (the model's reason in
    ``verdict_band.text``, :class:`moeplan.model.memory.MemoryVerdict`; from ``peak_bytes``,
    ``error_band_pct`` and ``capacity_bytes`` where a document has none); empty otherwise."""
    banded = (mem.get("verdict_band") or {}).get("text")
    if mem.get("verdict") != "tight" or (
        not banded and (mem.get("capacity_bytes") is None or mem.get("peak_bytes") is None)
    ):
        return ""
    band = mem.get("error_band_pct")
    if banded:
        text = T(banded)
    elif band is not None:
        text = T("may not fit: the peak {peak} GiB ±{pct} % reaches the usable {cap} GiB").format(
            peak=f"{mem['peak_bytes'] / GIB_BYTES:.1f}",
            pct=f"{band:.0f}",
            cap=f"{mem['capacity_bytes'] / GIB_BYTES:.1f}",
        )
    else:
        text = T("may not fit: the peak {peak} GiB leaves under {pct} % of the usable {cap} GiB").format(
            peak=f"{mem['peak_bytes'] / GIB_BYTES:.1f}",
            pct=f"{TIGHT_HEADROOM * 100:.0f}",
            cap=f"{mem['capacity_bytes'] / GIB_BYTES:.1f}",
        )
    largest = dominant_text(mem.get("dominant_items"))
    return text + (T(" (largest: {items})").format(items=largest) if largest else "")


__all__ = ["dominant_text", "may_not_fit_text", "verdict_text"]
