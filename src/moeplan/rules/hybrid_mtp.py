"""The MTP block of a hybrid (Mamba-2) model vs the megatron-core release and the pipeline.

megatron-core builds a hybrid model's MTP block (``mtp_hybrid_override_pattern``, or the part of
``hybrid_layer_pattern`` after ``/``) from core_v0.17.0 on (``ssm/mamba_hybrid_layer_allocation.py``
``parse_hybrid_pattern``; ``transformer/multi_token_prediction.py`` ``MultiTokenPredictionLayer`` with a
``MambaStack``); core_v0.16.x has neither. ``models/mamba/mamba_model.py`` (core_v0.17.0; the same in
``models/hybrid/hybrid_model.py`` at dev) builds it only where ``mtp_on_this_rank`` holds and says
the hybrid model forces MTP onto the final pipeline stage (MTP standalone is not supported there),
and ``MultiTokenPredictionBlock.__init__`` asserts the last virtual pipeline stage.
"""

from __future__ import annotations

from packaging.version import Version

from moeplan.i18n.messages import msg
from moeplan.rules.base import rule
from moeplan.structure.placement import stage_plan

#: first megatron-core release with a hybrid model's MTP block (tag core_v0.17.0)
HYBRID_MTP_MIN_MCORE = Version("0.17.0")


def _hybrid_mtp(s) -> str | None:
    """The MTP layer pattern of a hybrid model that builds MTP depths, else None."""
    m = s.model
    if m is None or m.mtp_layer_pattern is None or s.mtp_num_layers <= 0:
        return None
    return m.mtp_layer_pattern


@rule(
    "mamba.hybrid_mtp_needs_mcore",
    "megatron-core ssm/mamba_hybrid_layer_allocation.py, transformer/multi_token_prediction.py (core_v0.17.0)",
    "a hybrid model's MTP block (mtp_hybrid_override_pattern) needs megatron-core 0.17.0 or later",
    kind="unsupported",
)
def _hybrid_mtp_release(s, e):
    pattern = _hybrid_mtp(s)
    if pattern is None or s.mcore_version >= HYBRID_MTP_MIN_MCORE:
        return None
    first = str(HYBRID_MTP_MIN_MCORE)
    return [
        e.error(
            msg("model_hybrid_mtp.needs_mcore", pattern=pattern, version=str(s.mcore_version), first=first),
            msg("model_hybrid_mtp.needs_mcore.fix", first=first),
            "versions.megatron_core",
        )
    ]


@rule(
    "mamba.hybrid_mtp_last_stage",
    "megatron-core models/mamba/mamba_model.py (core_v0.17.0: mtp_process), "
    "transformer/multi_token_prediction.py (MultiTokenPredictionBlock: last virtual stage)",
    "a hybrid model's MTP block runs on the last pipeline stage (and its last virtual stage), with the loss",
)
def _hybrid_mtp_stage(s, e):
    if _hybrid_mtp(s) is None or s.pp * (s.vpp or 1) <= 1:
        return None
    plan = stage_plan(s)
    if plan is None:
        return None  # the pipeline rules report an illegal split
    last = (s.pp - 1, (s.vpp or 1) - 1)
    off = sorted({holder for holder in plan.mtp if holder != last})
    if not off:
        return None
    rank, chunk = off[0]
    return [
        e.error(
            msg("model_hybrid_mtp.last_stage", rank=rank, chunk=chunk, last_rank=last[0], last_chunk=last[1]),
            msg("model_hybrid_mtp.last_stage.fix"),
            "pipeline_model_parallel_layout",
            kind="unsupported",
        )
    ]
