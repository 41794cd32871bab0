"""Pipeline terms of one step (s): the bubble and the stage-boundary sends.

The pipeline runs ``m`` microbatches on the slowest stage plus a bubble of ``(p − 1)/v`` stage-times
(Narayanan et al. 2021, interleaved schedule). Each microbatch crosses every stage boundary forward
and backward: the critical stage sends and receives once per microbatch (per virtual chunk with VPP).
Plain 1F1B waits for these transfers; the interleaved schedule overlaps them with the next chunk's
compute (``overlap_p2p_comm``, on by default with VPP), so only the non-hidden share remains.
"""

from __future__ import annotations

from moeplan.model.comm import pp_time
from moeplan.model.kimi_k3_activations import attn_res_boundary_width
from moeplan.model.time.context import StepContext


def pipeline_bubble_s(ctx: StepContext, stage_microbatch_s: float) -> float:
    """The bubble of one step: ``(p − 1)/v`` times the critical stage's microbatch time."""
    s = ctx.s
    return (s.pp - 1) / s.vpp * stage_microbatch_s if s.pp > 1 else 0.0


def pipeline_comm_s(ctx: StepContext) -> float:
    """Exposed stage-boundary sends and receives of one step on the critical stage."""
    s, m = ctx.s, ctx.model
    if s.pp == 1:
        return 0.0
    v = s.vpp
    width = m.hidden_size * attn_res_boundary_width(m, s.pp)  # Kimi-K3's AttnRes bank travels too
    per_mb = pp_time(ctx.tokens, width, s.tp, s.sp, ctx.gpu, ctx.c, ctx.num_gpus)
    exposed = (1 - ctx.c.overlap_hidden_fraction) * v if v > 1 else 1.0
    return per_mb * (ctx.num_microbatches * exposed + 2 * (s.pp - 1) / v)
