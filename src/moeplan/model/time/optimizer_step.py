"""The optimizer step of one step on the critical stage (s).

On the GPU, Adam reads and writes the master weights, both moments, the gradients and the parameters
of its local shard: 32 bytes of HBM traffic per parameter (fp32 master, moments and gradient read,
bf16 parameter written, fp32 state written back). Offloaded state (``optimizer_offload_fraction``)
runs in megatron-core's ``HybridDeviceOptimizer``: gradients to the host, fused AdamW on the host
CPU at its share of host DRAM bandwidth, parameters back (:mod:`moeplan.model.time.cpu_offload`).
With part of the state on each side, ``HybridDeviceOptimizer.step`` launches the GPU optimizer
(asynchronous kernels) before it runs the host optimizers, so the two overlap and the step takes the
longer of them (``hybrid_optimizer.py`` at core_v0.16.0 to core_v0.19.0).
Shards come from :func:`moeplan.structure.numerics.optimizer_numerics`.
"""

from __future__ import annotations

from moeplan.model.time.context import StepContext
from moeplan.model.time.cpu_offload import offloaded_step
from moeplan.structure.numerics import optimizer_numerics
from moeplan.structure.params import RankParams

#: HBM bytes Adam moves per parameter on the GPU
ADAM_HBM_BYTES_PER_PARAM = 32


def optimizer_step_s(ctx: StepContext, params: RankParams) -> float:
    """Optimizer time of one step for a rank holding ``params`` (its local shard only), seconds: the
    GPU part, the offloaded part (:func:`~moeplan.model.time.cpu_offload.offloaded_step`) or, with
    both, the longer of the two."""
    num = optimizer_numerics(ctx.s)
    shard = params.dense / num.dense_shard + params.expert / num.expert_shard
    frac = num.offload_fraction
    t_gpu = (1 - frac) * shard * ADAM_HBM_BYTES_PER_PARAM / ctx.speeds.hbm_bytes_per_s
    if not frac:
        return t_gpu
    return max(t_gpu, offloaded_step(ctx, frac * shard).total_s)
