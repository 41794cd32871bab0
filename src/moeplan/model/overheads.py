"""Memory outside PyTorch's tensors, as named constants with their sources, overridable per scenario
(``overheads:`` section, GiB).

None of these is fitted to a run; they are planning figures with the reasoning below. The estimate
lists which values were used.
"""

from __future__ import annotations

import functools
from dataclasses import asdict, dataclass

#: CUDA context, cuBLAS/cuDNN handles and the kernels PyTorch, TE and NCCL load: not visible to the
#: caching allocator. About 0.5–0.8 GiB on Hopper/Blackwell with CUDA 12 lazy loading (nvidia-smi
#: "used" minus torch.cuda.memory_reserved on an idle initialised process). Planning value.
CUDA_CONTEXT_GIB = 0.75
#: NCCL communicator buffers: NCCL_BUFFSIZE (4 MiB) per channel per peer for each communicator
#: (TP, CP, EP, PP, DP, EDP groups and their combinations); with NVLS/SHARP registration more.
#: Planning value for a 3D+EP layout.
NCCL_BUFFERS_GIB = 1.0
#: NCCL EP's buffers (the flex dispatcher's ``ncclep`` backend through Transformer Engine): no source
#: sizes them here; planning value. DeepEP's and HybridEP's buffers are sized from their sources
#: (:mod:`moeplan.model.memory.dispatcher_buffers`) unless ``overheads:`` states them.
NCCLEP_BUFFERS_GIB = 2.0
#: cuBLASLt/TE workspaces (32 MiB per stream and handle) and TE's FP8 scaling state.
WORKSPACES_GIB = 0.25
#: Extra of CUDA graph memory pools beyond the tensors they hold, as a fraction of activations: a
#: graph's private pool blocks cannot serve eager allocations (nor eager blocks the graphs), and the
#: instantiated graphs hold executable memory; neither Megatron nor TE sizes these. Static inputs,
#: outputs and grad surfaces are modelled from the source (``moeplan.model.memory.graph_memory``). Planning
#: value.
CUDA_GRAPH_POOL_FRACTION = 0.05
#: Caching-allocator fragmentation (reserved minus allocated) as a fraction of the dynamic memory
#: (activations and transients): 5–15 % is what PyTorch memory snapshots of Megatron runs typically
#: show; ``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`` lowers it (we take half).
FRAGMENTATION_FRACTION = 0.10


@dataclass(frozen=True)
class Overheads:
    """Effective non-tensor memory settings (GiB or fractions) and where each came from."""

    cuda_context_gib: float = CUDA_CONTEXT_GIB
    nccl_buffers_gib: float = NCCL_BUFFERS_GIB
    deepep_buffers_gib: float | None = None  # None: sized from DeepEP's source
    hybridep_buffers_gib: float | None = None  # None: sized from HybridEP's source
    workspaces_gib: float = WORKSPACES_GIB
    cuda_graph_pool_fraction: float = CUDA_GRAPH_POOL_FRACTION
    fragmentation_fraction: float = FRAGMENTATION_FRACTION
    overridden: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        return asdict(self)


def resolve_overheads(user: dict | None, expandable_segments: bool = False) -> Overheads:
    """Defaults overlaid with the scenario's ``overheads:`` values (None = keep the default); one
    :class:`Overheads` (frozen) per distinct values and allocator setting."""
    key = tuple(sorted((user or {}).items(), key=lambda kv: str(kv[0])))
    try:
        return _resolved_overheads(key, expandable_segments)
    except TypeError:  # a value that cannot key a cache: computed as is
        return _resolve_overheads(user, expandable_segments)


@functools.lru_cache(maxsize=64)
def _resolved_overheads(items: tuple, expandable_segments: bool) -> Overheads:
    return _resolve_overheads(dict(items), expandable_segments)


def _resolve_overheads(user: dict | None, expandable_segments: bool) -> Overheads:
    vals = {k: v for k, v in (user or {}).items() if v is not None}
    base = Overheads()
    if expandable_segments and "fragmentation_fraction" not in vals:
        vals["fragmentation_fraction"] = FRAGMENTATION_FRACTION / 2
    fields = {k: vals.get(k, getattr(base, k)) for k in asdict(base) if k != "overridden"}
    return Overheads(**fields, overridden=tuple(sorted(k for k in (user or {}) if (user or {})[k] is not None)))
