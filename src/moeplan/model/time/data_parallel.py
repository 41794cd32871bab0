"""Data-parallel traffic of one step on the critical stage (s), and what overlap hides of it.

- distributed optimizer: a reduce-scatter of the gradients (in the main-grad dtype) and an all-gather
  of the parameters (BF16, or FP8 with ``fp8_param_gather``) over DP·CP for dense and EDP for expert
  parameters; plain DDP all-reduces the gradients (twice a reduce-scatter's volume);
- overlap (Megatron DDP): gradients are reduced bucket by bucket during the backward of the step's
  last microbatch (earlier ones accumulate locally), parameters gathered during the forward of the
  next step's first microbatch; each hides behind that one pass of the critical stage, except the
  last bucket (``max(40M, 1M·DP)`` parameters, ``distributed/distributed_data_parallel_config.py``);
  what the window hides still costs :data:`~moeplan.model.constants.OVERLAP_COMPUTE_SLOWDOWN` of its
  length (the NCCL kernels hold SMs and HBM bandwidth beside the compute: arXiv 2507.03114), and what
  exceeds the window is exposed;
- Megatron-FSDP ``optim_grads_params``: every microbatch all-gathers the stage's parameters for
  forward and again for backward and reduce-scatters its gradients; prefetching hides it behind the
  layer compute up to ``overlap_hidden_fraction``. These replace the step's DP traffic.
"""

from __future__ import annotations

from dataclasses import dataclass

from moeplan.inputs.system import GpuSpec
from moeplan.model.comm import dp_time
from moeplan.model.constants import OVERLAP_COMPUTE_SLOWDOWN, TimeConstants
from moeplan.model.time.context import StepContext
from moeplan.model.time.stage import StageTime
from moeplan.structure.numerics import fsdp_strategy, grad_bytes, param_gather_bytes
from moeplan.structure.params import RankParams

#: Megatron DDP's smallest gradient bucket, parameters (bucket size max(40M, 1M·DP))
MIN_BUCKET_PARAMS = 40e6
#: backward and forward shares of a microbatch's compute (backward 2/3, forward 1/3)
BACKWARD_SHARE, FORWARD_SHARE = 2 / 3, 1 / 3


@dataclass(frozen=True)
class DataParallelTime:
    """Exposed and hidden DP traffic of one step (s); ``fsdp_*`` None without sharded parameters."""

    dp_exposed_s: float
    dp_hidden_s: float
    fsdp_exposed_s: float | None = None
    fsdp_hidden_s: float | None = None


def _trained_params(ctx: StepContext, params: RankParams) -> tuple[float, float]:
    """(dense, expert) parameters whose gradients are reduced: frozen parts excluded."""
    t = ctx.s.training
    dense, expert = params.dense, params.expert
    vis = params.by_kind.get("vision", 0)
    if t.freeze_vision_model:
        dense -= vis
    if t.freeze_language_model:
        dense, expert = vis, 0  # only the tower's gradients are reduced
    return dense, expert


def _group_args(ctx: StepContext) -> tuple[int, int, int, int, GpuSpec, TimeConstants]:
    s = ctx.s
    return (ctx.dp * s.cp, s.edp or 1, s.tp * s.cp * ctx.dp, s.etp * s.ep * (s.edp or 1), ctx.gpu, ctx.c)


def _reduce_and_gather_s(ctx: StepContext, dense: float, expert: float) -> tuple[float, float]:
    """(gradient reduction, parameter gather) of one step before overlap (s)."""
    s = ctx.s
    grad_b = grad_bytes(s)
    args = _group_args(ctx)
    if not s.layout.use_distributed_optimizer:
        return dp_time(dense, expert, 2 * grad_b, *args, param_bytes=0.0), 0.0
    t_rs = dp_time(dense, expert, grad_b, *args, param_bytes=0.0)
    ag_b = param_gather_bytes(s.training.precision, bool(s.layout.fp8_param_gather))
    return t_rs, dp_time(dense, expert, 0.0, *args, param_bytes=ag_b)


def _fsdp(ctx: StepContext, params: RankParams, crit: StageTime) -> tuple[float, float]:
    """Megatron-FSDP's per-microbatch gathers and scatters: (exposed, hidden) of one step."""
    c = ctx.c
    ag = dp_time(params.dense, params.expert, 0.0, *_group_args(ctx))
    per_mb = 3 * ag
    compute_mb = crit.total_s - crit.parts.get("ep_comm_exposed", 0.0)
    exposed = ctx.num_microbatches * max(per_mb - c.overlap_hidden_fraction * compute_mb, 0.0)
    return exposed, ctx.num_microbatches * per_mb - exposed


def exposed_time(t: float, tail: float, window: float) -> float:
    """Exposed time (s) of a transfer of ``t`` s overlapped with a compute window of ``window`` s when
    its last bucket (``tail``, a share of ``t``) cannot overlap: the tail, what exceeds the window,
    and :data:`OVERLAP_COMPUTE_SLOWDOWN` of what the window hides."""
    body = (1.0 - tail) * t
    hidden = min(body, window)
    return tail * t + (body - hidden) + OVERLAP_COMPUTE_SLOWDOWN * hidden


def data_parallel_time(ctx: StepContext, params: RankParams, crit: StageTime) -> DataParallelTime:
    """DP traffic of one step for the critical stage ``crit`` holding ``params``."""
    s, lay = ctx.s, ctx.s.layout
    if fsdp_strategy(s) == "optim_grads_params":
        if ctx.dp * s.cp > 1 or (s.edp or 1) > 1:
            return DataParallelTime(0.0, 0.0, *_fsdp(ctx, params, crit))
        return DataParallelTime(0.0, 0.0)
    dense, expert = _trained_params(ctx, params)
    t_rs, t_ag = _reduce_and_gather_s(ctx, dense, expert)
    exchanges = ("ep_comm_exposed", "cp_comm_exposed", "tp_comm")
    compute_mb = crit.total_s - sum(crit.parts.get(k, 0.0) for k in exchanges)
    tail = min(1.0, max(MIN_BUCKET_PARAMS, 1e6 * ctx.dp * s.cp) / max(1.0, dense + expert))
    rs = t_rs if lay.overlap_grad_reduce is False else exposed_time(t_rs, tail, BACKWARD_SHARE * compute_mb)
    ag = t_ag if lay.overlap_param_gather is False else exposed_time(t_ag, tail, FORWARD_SHARE * compute_mb)
    return DataParallelTime(rs + ag, (t_rs - rs) + (t_ag - ag))
