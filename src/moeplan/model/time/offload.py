"""Fine-grained activation offload (``fine_grained_activation_offloading`` with ``offload_modules``):
the chosen saved tensors go to the host after forward and come back for backward over the host link,
behind the layer's dense GEMMs and memory-bound work up to ``overlap_hidden_fraction`` of them
(``megatron_facts.md`` §3.8, vendored in ``tests/data/reference``)."""

from __future__ import annotations

from moeplan.model.time.compute import LayerCompute
from moeplan.model.time.context import StepContext


def activation_offload_s(ctx: StepContext, compute: LayerCompute) -> float:
    """Exposed host-link time of one layer's offloaded tensors, out and back (s)."""
    if not ctx.offload_items:
        return 0.0
    moved = sum(v for k, v in compute.kept_bytes.items() if k in ctx.offload_items)
    t_link = 2 * moved / ctx.host_link_bytes_per_s
    return max(0.0, t_link - ctx.c.overlap_hidden_fraction * (compute.dense_gemm_s + compute.memory_bound_s))
