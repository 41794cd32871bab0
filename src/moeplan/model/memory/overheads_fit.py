"""Learning a run's allocator reserve and memory outside PyTorch from its own memory reports.

Megatron prints ``max allocated`` and ``max reserved`` (torch's caching allocator) and, with
``--log-device-memory-used``, ``total device memory used`` (``torch.cuda.device_memory_used()``, what
nvidia-smi shows) — megatron/training/utils/common_utils.py ``report_memory``. moeplan predicts the
same three figures (:class:`moeplan.model.memory.breakdown.StageMemory`); two of its terms are planning
values no source pins and that a user's own runs can set:

- ``fragmentation_fraction``: measured reserve beyond the allocated peak (max reserved − max allocated),
  less the predicted CUDA-graph pool, over the predicted dynamic memory (activations and the backward
  working set), which is how :func:`moeplan.model.memory.other.fragmentation` applies it;
- ``cuda_context_gib``: measured memory outside PyTorch (device used − max reserved) less the predicted
  NCCL, DeepEP / HybridEP and TP-overlap buffers: the CUDA context plus whatever else lives outside
  the allocator on that machine.

Each is the median over the readings, clipped to its possible range (a fraction in [0, 1], a size
≥ 0). Full-iteration graphs carry no fragmentation term (their pool is laid out once), so their
readings do not vote on it. The allocated figure has no free term: its error is reported, not fitted.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from moeplan.model.memory.breakdown import StageMemory
from moeplan.model.memory.other import figure_of
from moeplan.units import GIB_BYTES


@dataclass(frozen=True)
class MemoryReading:
    """One run's measured memory next to moeplan's prediction for it.

    Attributes:
        source: where it came from (a log path).
        stage: moeplan's stage whose allocated peak is largest (Megatron prints from the first
            data-parallel rank of every stage; the log reader keeps the largest report).
        allocated_bytes / reserved_bytes / device_bytes: the measured maxima (None when not printed).
        full_iteration_graph: the run captures a full-iteration CUDA graph.
    """

    source: str
    stage: StageMemory
    allocated_bytes: float
    reserved_bytes: float | None
    device_bytes: float | None
    full_iteration_graph: bool = False


def _other(st: StageMemory, name: str) -> float:
    return st.items.get("other", {}).get(name, 0.0)


def predicted_dynamic_bytes(st: StageMemory) -> float:
    """The memory fragmentation is a share of: activations and the backward working set (bytes)."""
    return st.activations_bytes + _other(st, "backward_working_set")


def predicted_outside_torch_bytes(st: StageMemory, without: str = "cuda_context") -> float:
    """Predicted memory outside PyTorch's allocator (the ``device`` items), less ``without`` (bytes)."""
    return sum(v for k, v in st.items.get("other", {}).items() if figure_of(k) == "device" and k != without)


def _fraction(r: MemoryReading) -> float | None:
    if r.reserved_bytes is None or r.full_iteration_graph:
        return None
    dyn = predicted_dynamic_bytes(r.stage)
    if dyn <= 0:
        return None
    gap = r.reserved_bytes - r.allocated_bytes - _other(r.stage, "cuda_graph_pool")
    return gap / dyn


def _context_gib(r: MemoryReading) -> float | None:
    if r.device_bytes is None or r.reserved_bytes is None:
        return None
    return (r.device_bytes - r.reserved_bytes - predicted_outside_torch_bytes(r.stage)) / GIB_BYTES


def learned_overheads(readings: list[MemoryReading]) -> tuple[dict[str, float], dict[str, int]]:
    """The ``overheads:`` values the readings set (module docstring) and how many readings voted for
    each. A value no reading can set (no reserved figure, no device figure) is left out."""
    fracs = [f for r in readings if (f := _fraction(r)) is not None]
    ctxs = [c for r in readings if (c := _context_gib(r)) is not None]
    out: dict[str, float] = {}
    if fracs:
        out["fragmentation_fraction"] = round(min(1.0, max(0.0, statistics.median(fracs))), 4)
    if ctxs:
        out["cuda_context_gib"] = round(max(0.0, statistics.median(ctxs)), 3)
    return out, {"fragmentation_fraction": len(fracs), "cuda_context_gib": len(ctxs)}


def reading_row(r: MemoryReading) -> dict:
    """Measured against predicted, GiB, per figure (None where the log printed none), with the
    allocated error in %."""

    def gib(v: float | None) -> float | None:
        return None if v is None else round(v / GIB_BYTES, 3)

    st = r.stage
    return {
        "source": r.source,
        "stage": st.stage,
        "measured_gib": {
            "allocated": gib(r.allocated_bytes),
            "reserved": gib(r.reserved_bytes),
            "device": gib(r.device_bytes),
        },
        "predicted_gib": {
            "allocated": gib(st.peak_allocated_bytes),
            "reserved": gib(st.peak_reserved_bytes),
            "device": gib(st.device_used_bytes),
        },
        "allocated_error_pct": round(100 * (st.peak_allocated_bytes / r.allocated_bytes - 1), 1)
        if r.allocated_bytes > 0
        else None,
    }
