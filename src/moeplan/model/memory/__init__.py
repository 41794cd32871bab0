"""Per-GPU memory of a layout, per pipeline stage (see :mod:`.estimate`)."""

from moeplan.model.memory.breakdown import (
    ITEM_LABELS,
    TIGHT_HEADROOM,
    MemoryEstimate,
    StageMemory,
    dominant_items,
    dominant_items_text,
    estimate_memory,
    headroom_gib,
)
from moeplan.model.memory.memory_band import (
    MemoryVerdict,
    band_edges,
    band_factors,
    judge_memory,
    largest_fitting_peak,
)
from moeplan.structure.numerics import DEFAULT_ROUTING_IMBALANCE

__all__ = [
    "DEFAULT_ROUTING_IMBALANCE",
    "ITEM_LABELS",
    "TIGHT_HEADROOM",
    "MemoryEstimate",
    "MemoryVerdict",
    "StageMemory",
    "band_edges",
    "band_factors",
    "dominant_items",
    "dominant_items_text",
    "estimate_memory",
    "headroom_gib",
    "judge_memory",
    "largest_fitting_peak",
]
