"""Host CPU memory per system, read lazily from ``catalog/data/host_memory.json`` (every figure with
its sources): the peak DRAM bandwidth of one host, the GPUs that share it and its CPU cores. The
offloaded optimizer step (:mod:`moeplan.model.time.cpu_offload`) streams the optimizer state through
this memory.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from importlib import resources


@dataclass(frozen=True)
class HostMemory:
    """One host's CPU memory, as published.

    Attributes:
        key: the entry's name in the data file (``dgx_h100``, ``grace_superchip``).
        name: the system in words.
        gpus_per_host: GPUs that share this host memory (8 on a DGX, 2 on a Grace superchip).
        cpu_cores: CPU cores of the host.
        dram_bytes_per_s: peak DRAM bandwidth of the host, bytes/s (channels x transfer rate x 8 B).
        derivation: how the bandwidth follows from the sources.
        sources: the sources' texts.
    """

    key: str
    name: str
    gpus_per_host: int
    cpu_cores: int
    dram_bytes_per_s: float
    derivation: str
    sources: tuple[str, ...]

    @property
    def dram_bytes_per_s_per_gpu(self) -> float:
        """The host's peak DRAM bandwidth over the GPUs that share it, bytes/s."""
        return self.dram_bytes_per_s / self.gpus_per_host


@functools.lru_cache(maxsize=1)
def _table() -> dict[str, HostMemory]:
    raw = json.loads((resources.files("moeplan.catalog") / "data" / "host_memory.json").read_text())
    out: dict[str, HostMemory] = {}
    for key, e in raw["hosts"].items():
        host = HostMemory(
            key=key,
            name=e["name"],
            gpus_per_host=int(e["gpus_per_host"]),
            cpu_cores=int(e["cpu_cores"]),
            dram_bytes_per_s=float(e["dram_gb_per_s"]) * 1e9,
            derivation=e["derivation"],
            sources=tuple(raw["_sources"][s] for s in e["_source"]),
        )
        out.update({gpu_id: host for gpu_id in e["gpus"]})
    return out


def host_memory(gpu_id: str) -> HostMemory | None:
    """The published host memory of the system a catalog GPU ``gpu_id`` comes in; None where no
    source describes it (a custom GPU, B200 / B300 HGX hosts, whose CPU is the integrator's choice)."""
    return _table().get(gpu_id)


__all__ = ["HostMemory", "host_memory"]
