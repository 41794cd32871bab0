"""GPU figures the step-time model needs, with the one place where a missing figure becomes a
documented planning value.

A catalog GPU has every figure (``catalog/data/gpus.json``, each with its source). A custom GPU may
leave bandwidths out; the step-time model then uses the planning values below and says so in the
estimate's assumptions (:func:`planning_notes`) — it never substitutes a number silently. Memory
estimates need none of these figures. Bandwidths are decimal GB/s (Gb/s for the NIC), one direction.
"""

from __future__ import annotations

from dataclasses import dataclass

from moeplan.inputs.system import GpuSpec


@dataclass(frozen=True)
class PlanningValue:
    """A figure used when a GPU does not give one: value, unit, and what it is based on."""

    value: float
    unit: str
    basis: str


#: planning values of the figures a custom GPU may omit
PLANNING_VALUES: dict[str, PlanningValue] = {
    "hbm_bandwidth_gb_per_s": PlanningValue(3000, "GB/s", "H100 SXM's 3.35 TB/s HBM3, rounded down"),
    "scaleup_unidir_gb_per_s": PlanningValue(100, "GB/s", "a quarter of NVLink 4's 450 GB/s per direction"),
    "nic_gbit_per_s_per_gpu": PlanningValue(200, "Gb/s", "half of a ConnectX-7 400 Gb/s port per GPU"),
    "host_link_unidir_gb_per_s": PlanningValue(25, "GB/s", "PCIe Gen4 x16, one direction"),
}


def figure(gpu: GpuSpec, key: str) -> float:
    """The GPU's figure ``key`` (one of :data:`PLANNING_VALUES`), or its planning value when the
    GPU does not give it (in the figure's own unit).

    Raises:
        KeyError: ``key`` is not a figure with a planning value.
    """
    value = getattr(gpu, key)
    return float(value) if value is not None else PLANNING_VALUES[key].value


def hbm_bytes_per_s(gpu: GpuSpec) -> float:
    """HBM bandwidth, bytes/s."""
    return figure(gpu, "hbm_bandwidth_gb_per_s") * 1e9


def nvlink_bytes_per_s(gpu: GpuSpec) -> float:
    """NVLink bandwidth per GPU, one direction, bytes/s (before NCCL efficiency)."""
    return figure(gpu, "scaleup_unidir_gb_per_s") * 1e9


def nic_bytes_per_s(gpu: GpuSpec) -> float:
    """Scale-out NIC bandwidth per GPU, one direction, bytes/s (before NCCL efficiency)."""
    return figure(gpu, "nic_gbit_per_s_per_gpu") / 8 * 1e9


def host_link_bytes_per_s(gpu: GpuSpec) -> float:
    """GPU ↔ host link bandwidth, one direction, bytes/s."""
    return figure(gpu, "host_link_unidir_gb_per_s") * 1e9


def planning_notes(gpu: GpuSpec, uses_host_link: bool = True) -> list[str]:
    """One assumption line per figure the GPU leaves out, naming the planning value used and the key
    that gives it (``system.gpu_overrides.KEY``, which a catalog GPU and a custom one both take); the
    host link only when ``uses_host_link`` (something is offloaded: nothing else crosses it)."""
    return [
        f"the GPU's {key} is not known: {pv.value:g} {pv.unit} assumed ({pv.basis}); give system.gpu_overrides.{key}"
        for key, pv in PLANNING_VALUES.items()
        if getattr(gpu, key) is None and (uses_host_link or key != "host_link_unidir_gb_per_s")
    ]


__all__ = [
    "PLANNING_VALUES",
    "PlanningValue",
    "figure",
    "hbm_bytes_per_s",
    "host_link_bytes_per_s",
    "nic_bytes_per_s",
    "nvlink_bytes_per_s",
    "planning_notes",
]
