"""How many microbatches' activations a pipeline rank holds at its peak.

Megatron-Core schedules (``megatron/core/pipeline_parallel/schedules.py``):

- no pipelining: one microbatch at a time;
- 1F1B: rank ``r`` of ``p`` runs ``p − r − 1`` warm-up forwards, so it holds ``min(p − r, m)``
  microbatches (Narayanan et al. 2021, §2.2);
- interleaved 1F1B with ``v`` virtual stages: warm-up ``2(p − r − 1) + (v − 1)·g`` chunk forwards
  (``get_num_warmup_microbatches`` with microbatch group ``g``, default ``p``) plus the current one,
  at most ``m·v`` chunks; each chunk holds ``1/v`` of the rank's layers. For the first rank this is
  Korthikanti et al.'s factor ``L·(1 + (p − 1)/(p·v))`` (arXiv 2205.05198, §4.2.3);
- EP all-to-all overlap (``overlap_moe_expert_parallel_comm``) pairs the forward of one microbatch
  with the backward of another layer by layer (``combined_1f1b``); the memory model adds about one
  layer for it rather than a microbatch.
"""

from __future__ import annotations

import functools


def inflight_chunks(
    pp: int,
    rank: int,
    vpp: int = 1,
    num_microbatches: int | None = None,
    group_size: int | None = None,
    ep_overlap: bool = False,
) -> int:
    """Chunks (a rank's layers / ``vpp``) whose activations rank ``rank`` holds at its peak.

    ``num_microbatches`` None means "enough to fill the pipeline". Without pipelining the answer is
    ``vpp`` chunks (one microbatch through all of this rank's layers).
    """
    v = max(vpp, 1)
    m = num_microbatches
    if pp == 1:
        n = v
    elif v == 1:
        n = pp - rank if m is None else min(pp - rank, m)
    else:
        g = group_size or pp
        n = 2 * (pp - rank - 1) + (v - 1) * g + 1
        if m is not None:
            n = min(n, m * v)
    return n + (1 if ep_overlap else 0)


def inflight_microbatches(
    pp: int,
    rank: int,
    vpp: int = 1,
    num_microbatches: int | None = None,
    group_size: int | None = None,
    ep_overlap: bool = False,
) -> float:
    """The same in units of a whole rank's layers (``chunks / vpp``)."""
    return inflight_chunks(pp, rank, vpp, num_microbatches, group_size, ep_overlap) / max(vpp, 1)


@functools.lru_cache(maxsize=4096)
def inflight_per_rank(
    pp: int, vpp: int = 1, num_microbatches: int | None = None, group_size: int | None = None
) -> tuple:
    """:func:`inflight_microbatches` of every pipeline rank, first rank first (computed once per arguments)."""
    return tuple(inflight_microbatches(pp, r, vpp, num_microbatches, group_size) for r in range(pp))
