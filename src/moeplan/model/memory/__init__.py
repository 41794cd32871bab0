"""Per-GPU memory of a layout, per pipeline stage (see :mod:`.estimate`)."""

from moeplan.model.memory.estimate import TIGHT_HEADROOM, MemoryEstimate, StageMemory, estimate_memory, headroom_gib
from moeplan.spec.numerics import DEFAULT_ROUTING_IMBALANCE

__all__ = [
    "DEFAULT_ROUTING_IMBALANCE",
    "TIGHT_HEADROOM",
    "MemoryEstimate",
    "StageMemory",
    "estimate_memory",
    "headroom_gib",
]
