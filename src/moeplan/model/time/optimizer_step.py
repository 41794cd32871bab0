"""The optimizer step of one step on the critical stage (s).

On the GPU, Adam reads and writes the master weights, both moments, the gradients and the parameters
of its local shard: 32 bytes of HBM traffic per parameter (fp32 master, moments and gradient read,
bf16 parameter written, fp32 state written back). Offloaded state (``optimizer_offload_fraction``)
crosses the host link (fp32 gradients out, bf16 parameters back: 6 bytes per parameter) and runs
Adam on the host CPU (``HybridDeviceOptimizer``) at :data:`CPU_ADAM_PARAMS_PER_S` (a planning value).
Shards come from :func:`moeplan.structure.numerics.optimizer_numerics`.
"""

from __future__ import annotations

from moeplan.model.time.context import StepContext
from moeplan.structure.numerics import optimizer_numerics
from moeplan.structure.params import RankParams

#: CPU Adam throughput for offloaded optimizer state, parameters per second per GPU's share of host
#: cores (HybridDeviceOptimizer; a planning value)
CPU_ADAM_PARAMS_PER_S = 1.0e9
#: HBM bytes Adam moves per parameter on the GPU
ADAM_HBM_BYTES_PER_PARAM = 32
#: host-link bytes per offloaded parameter: fp32 gradient out, bf16 parameter back
OFFLOAD_LINK_BYTES_PER_PARAM = 4 + 2


def optimizer_step_s(ctx: StepContext, params: RankParams) -> float:
    """Optimizer time of one step for a rank holding ``params`` (its local shard only)."""
    num = optimizer_numerics(ctx.s)
    shard = params.dense / num.dense_shard + params.expert / num.expert_shard
    frac = num.offload_fraction
    t = (1 - frac) * shard * ADAM_HBM_BYTES_PER_PARAM / ctx.speeds.hbm_bytes_per_s
    if frac:
        t += frac * shard * OFFLOAD_LINK_BYTES_PER_PARAM / ctx.host_link_bytes_per_s
        t += frac * shard / CPU_ADAM_PARAMS_PER_S
    return t
