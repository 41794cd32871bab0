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
- Megatron-FSDP ``optim_grads_params`` (:mod:`moeplan.model.fsdp_units`): every microbatch
  all-gathers the units' parameters over their DP-shard group for forward and again for backward (the
  FP8 weights with ``fp8_param_gather``) and reduce-scatters their gradients, dense over DP·CP and
  routed experts over EDP within one optimizer instance, over the link that group spans; the forward
  gather hides behind the microbatch's forward, the backward gather and the reduce-scatter behind its
  backward (prefetch of the next unit), all but the first unit's gather and the last unit's
  reduce-scatter. With hybrid sharding the outer group adds, once per step, the all-gather of the
  inner shards in the first microbatch and their reduction in the last, hidden in what those passes
  leave. ``optim_grads`` reduce-scatters the gradients after every microbatch's backward and gathers
  the parameters once per step. These replace the step's DP traffic.
"""

from __future__ import annotations

from dataclasses import dataclass

from moeplan.i18n.messages import Message, msg
from moeplan.inputs.system import GpuSpec
from moeplan.model.comm import dp_time, link_bw
from moeplan.model.constants import OVERLAP_COMPUTE_SLOWDOWN, TimeConstants
from moeplan.model.fsdp_units import fsdp_params
from moeplan.model.time.context import StepContext
from moeplan.model.time.stage import StageTime
from moeplan.structure.numerics import (
    BF16_BYTES,
    fsdp_param_shard_degrees,
    fsdp_strategy,
    grad_bytes,
    param_gather_bytes,
)
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


@dataclass(frozen=True)
class FsdpTraffic:
    """Megatron-FSDP's transfers on one rank before overlap (s): per microbatch the forward
    all-gather ``ag_fwd_s``, the backward all-gather ``ag_bwd_s`` and the gradient reduce-scatter
    ``rs_s`` over the DP-shard groups; once per step what the first microbatch's forward
    (``first_fwd_s``: the whole-kept embedding and output layer, the outer group's all-gather) and
    backward (``first_bwd_s``: the outer all-gather of MXFP8's column-wise copy) and the last
    microbatch's backward (``last_bwd_s``: the outer group's gradient reduction) add."""

    ag_fwd_s: float
    ag_bwd_s: float
    rs_s: float
    first_fwd_s: float = 0.0
    first_bwd_s: float = 0.0
    last_bwd_s: float = 0.0


def _ring_s(elements: float, bytes_per: float, group: int, span: int, ctx: StepContext) -> float:
    """One ring all-gather or reduce-scatter of ``elements`` × ``bytes_per`` over ``group`` ranks
    spanning ``span`` consecutive ranks: ``n·b·(g−1)/g`` per rank over the link (s); 0 for one rank."""
    if group <= 1 or elements <= 0:
        return 0.0
    return elements * bytes_per * (group - 1) / group / link_bw(ctx.gpu, span, ctx.c)


def _outer_s(ctx: StepContext, dense_ag_bytes: float, dense_grads: float, expert: float) -> tuple[float, float, float]:
    """The outer group's once-per-step transfers (s): (all-gather in the first forward, all-gather of
    MXFP8's column-wise copy in the first backward, gradient reduction in the last backward) of the
    inner shards, over ``instances`` ranks strided by one instance (spanning all of DP·CP / EDP):
    ``optim`` gathers and reduce-scatters, ``no_shard`` only all-reduces (twice a reduce-scatter)."""
    s = ctx.s
    inst = s.layout.num_distributed_optimizer_instances
    pd, pe = fsdp_param_shard_degrees(s)
    if inst <= 1:
        return 0.0, 0.0, 0.0
    span_d, span_e = s.tp * pd * inst, s.etp * s.ep * pe * inst
    g_b = grad_bytes(s)
    ag_b = param_gather_bytes(s.training.precision, bool(s.layout.fp8_param_gather))
    optim = s.layout.outer_dp_sharding_strategy == "optim"
    red = (1 if optim else 2) * (
        _ring_s(dense_grads / pd, g_b, inst, span_d, ctx) + _ring_s(expert / pe, g_b, inst, span_e, ctx)
    )
    if not optim:
        return 0.0, 0.0, red
    ag = _ring_s(dense_ag_bytes / pd, 1.0, inst, span_d, ctx) + _ring_s(expert / pe, ag_b, inst, span_e, ctx)
    transposes = s.training.precision == "mxfp8" and bool(s.layout.fp8_param_gather)
    return ag, ag if transposes else 0.0, red


def fsdp_traffic(ctx: StepContext, params: RankParams) -> FsdpTraffic:
    """Megatron-FSDP ``optim_grads_params`` transfers of a rank holding ``params`` (module docstring):
    dense unit parameters over the DP·CP shard group (``tp·DP·CP / instances`` consecutive ranks),
    routed experts over the EDP shard group (``etp·ep·EDP / instances``), in the bytes of
    :func:`~moeplan.structure.numerics.param_gather_bytes` (GEMM weights) or BF16, gradients in the
    main-grad dtype; the embedding and output layer gathered once per step, reduced every microbatch."""
    s = ctx.s
    fp = fsdp_params(params)
    pd, pe = fsdp_param_shard_degrees(s)
    ag_b = param_gather_bytes(s.training.precision, bool(s.layout.fp8_param_gather))
    g_b = grad_bytes(s)
    span_d, span_e = s.tp * pd, s.etp * s.ep * pe
    unit_ag_bytes = fp.dense_gemm * ag_b + fp.dense_other * BF16_BYTES
    ag = _ring_s(unit_ag_bytes, 1.0, pd, span_d, ctx) + _ring_s(fp.expert, ag_b, pe, span_e, ctx)
    dense_grads = fp.dense_unit + fp.non_unit
    rs = _ring_s(dense_grads, g_b, pd, span_d, ctx) + _ring_s(fp.expert, g_b, pe, span_e, ctx)
    whole = _ring_s(fp.non_unit, BF16_BYTES, pd, span_d, ctx)
    o_fwd, o_bwd, o_red = _outer_s(ctx, unit_ag_bytes + fp.non_unit * BF16_BYTES, dense_grads, fp.expert)
    return FsdpTraffic(ag, ag, rs, whole + o_fwd, o_bwd, o_red)


def _fsdp(ctx: StepContext, params: RankParams, crit: StageTime) -> tuple[float, float]:
    """Megatron-FSDP's gathers and scatters of one step: (exposed, hidden) (s). Each microbatch's
    forward gather hides behind its forward (:data:`FORWARD_SHARE` of the microbatch's compute), the
    backward gather and the reduce-scatter behind its backward (:data:`BACKWARD_SHARE`), all but the
    first unit's gather and the last unit's reduce-scatter (:func:`exposed_time`, one unit per layer of
    the stage); the once-per-step transfers use what those windows leave in the first and the last
    microbatch."""
    tr = fsdp_traffic(ctx, params)
    n_mb = ctx.num_microbatches
    tail = 1.0 / max(1, ctx.model.num_layers // max(1, ctx.s.pp))
    compute_mb = crit.total_s - crit.parts.get("ep_comm_exposed", 0.0)
    fwd_w, bwd_w = FORWARD_SHARE * compute_mb, BACKWARD_SHARE * compute_mb
    per_mb = exposed_time(tr.ag_fwd_s, tail, fwd_w) + exposed_time(tr.ag_bwd_s + tr.rs_s, tail, bwd_w)
    fwd_left = max(0.0, fwd_w - tr.ag_fwd_s)
    bwd_left = max(0.0, bwd_w - tr.ag_bwd_s - tr.rs_s)
    once = (
        exposed_time(tr.first_fwd_s, 0.0, fwd_left)
        + exposed_time(tr.first_bwd_s, 0.0, bwd_left)
        + exposed_time(tr.last_bwd_s, tail, bwd_left)
    )
    total = n_mb * (tr.ag_fwd_s + tr.ag_bwd_s + tr.rs_s) + tr.first_fwd_s + tr.first_bwd_s + tr.last_bwd_s
    exposed = n_mb * per_mb + once
    return exposed, max(0.0, total - exposed)


def fsdp_time_notes(ctx: StepContext) -> list[Message]:
    """What the Megatron-FSDP exchange rests on (module docstring): its groups, the links they span
    and the overlap; the outer group's once-per-step transfers under hybrid sharding. Empty without
    ``optim_grads_params`` or without a shard group of more than one rank."""
    s = ctx.s
    if fsdp_strategy(s) != "optim_grads_params":
        return []
    pd, pe = fsdp_param_shard_degrees(s)
    if pd <= 1 and pe <= 1:
        return []
    dom = ctx.gpu.scaleup_domain_gpus
    if pe > 1:
        d_span, e_span = s.tp * pd, s.etp * s.ep * pe
        out = [msg("fsdp_ep.time_exchange", dense=pd, dense_span=d_span, expert=pe, expert_span=e_span, domain=dom)]
    else:
        out = [msg("fsdp_ep.time_exchange_dense", dense=pd, dense_span=s.tp * pd, domain=dom)]
    inst = s.layout.num_distributed_optimizer_instances
    if inst > 1:
        strategy = s.layout.outer_dp_sharding_strategy or "no_shard"
        out.append(msg("fsdp_ep.time_outer", instances=inst, strategy=strategy))
    return out


def exposed_time(t: float, tail: float, window: float) -> float:
    """Exposed time (s) of a transfer of ``t`` s overlapped with a compute window of ``window`` s when
    its last bucket (``tail``, a share of ``t``) cannot overlap: the tail, what exceeds the window,
    and :data:`OVERLAP_COMPUTE_SLOWDOWN` of what the window hides."""
    body = (1.0 - tail) * t
    hidden = min(body, window)
    return tail * t + (body - hidden) + OVERLAP_COMPUTE_SLOWDOWN * hidden


def _fsdp_grads_only(ctx: StepContext, params: RankParams, crit: StageTime) -> tuple[float, float]:
    """Megatron-FSDP ``optim_grads`` of one step: (exposed, hidden) (s). The gradients are
    reduce-scattered after every microbatch's backward (``grad_reduce_every_bprop``), hidden behind
    it but the last bucket; the parameters, whole between steps, are all-gathered once from the
    updated shards during the first forward (:func:`fsdp_traffic`'s bytes)."""
    tr = fsdp_traffic(ctx, params)
    tail = 1.0 / max(1, ctx.model.num_layers // max(1, ctx.s.pp))
    compute_mb = crit.total_s - crit.parts.get("ep_comm_exposed", 0.0)
    fwd_w, bwd_w = FORWARD_SHARE * compute_mb, BACKWARD_SHARE * compute_mb
    once_ag = tr.ag_fwd_s + tr.first_fwd_s
    exposed = (
        ctx.num_microbatches * exposed_time(tr.rs_s, tail, bwd_w)
        + exposed_time(once_ag, tail, fwd_w)
        + exposed_time(tr.last_bwd_s, tail, max(0.0, bwd_w - tr.rs_s))
    )
    total = ctx.num_microbatches * tr.rs_s + once_ag + tr.last_bwd_s
    return exposed, max(0.0, total - exposed)


def data_parallel_time(ctx: StepContext, params: RankParams, crit: StageTime) -> DataParallelTime:
    """DP traffic of one step for the critical stage ``crit`` holding ``params``."""
    s, lay = ctx.s, ctx.s.layout
    strategy = fsdp_strategy(s)
    if strategy in ("optim_grads_params", "optim_grads"):
        if ctx.dp * s.cp == 1 and (s.edp or 1) == 1:
            return DataParallelTime(0.0, 0.0)
        fsdp = _fsdp if strategy == "optim_grads_params" else _fsdp_grads_only
        return DataParallelTime(0.0, 0.0, *fsdp(ctx, params, crit))
    dense, expert = _trained_params(ctx, params)
    t_rs, t_ag = _reduce_and_gather_s(ctx, dense, expert)
    exchanges = ("ep_comm_exposed", "cp_comm_exposed", "tp_comm")
    compute_mb = crit.total_s - sum(crit.parts.get(k, 0.0) for k in exchanges)
    tail = min(1.0, max(MIN_BUCKET_PARAMS, 1e6 * ctx.dp * s.cp) / max(1.0, dense + expert))
    rs = t_rs if lay.overlap_grad_reduce is False else exposed_time(t_rs, tail, BACKWARD_SHARE * compute_mb)
    ag = t_ag if lay.overlap_param_gather is False else exposed_time(t_ag, tail, FORWARD_SHARE * compute_mb)
    return DataParallelTime(rs + ag, (t_rs - rs) + (t_ag - ag))
