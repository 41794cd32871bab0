"""Mamba-2 mixers of hybrid models vs TP / CP (megatron-core ``ssm/mamba_mixer.py`` and
``ssm/mamba_context_parallel.py``).

``MambaMixer.__init__`` asserts ``nheads % tp == 0``, ``ngroups % tp == 0`` and
``nheads % ngroups == 0``; ``MambaContextParallel`` (context parallelism by head-split all-to-alls,
in every megatron-core release moeplan knows: the module is there since core 0.13) asserts
``(nheads / tp) % cp == 0`` and, per TP rank, that groups and CP divide one another
(``cp % (ngroups / tp) == 0`` when there are fewer local groups than CP ranks, else
``(ngroups / tp) % cp == 0``).
"""

from __future__ import annotations

from moeplan.i18n.messages import msg
from moeplan.rules.base import rule


def _tp_findings(s, e, nh: int, g: int) -> list:
    out = []
    for key, n in (("mamba_num_heads", nh), ("mamba_num_groups", g)):
        if n % s.tp:
            ok = [t for t in (1, 2, 4, 8, 16, 32, 64) if n % t == 0]
            out.append(
                e.error(
                    msg("mamba.not_divisible_by_tp", key=key, value=n, tp=s.tp),
                    msg("common.use_tp_in", values=ok),
                    "tensor_model_parallel_size",
                )
            )
    if nh % g:
        out.append(
            e.error(
                msg("mamba.heads_not_divisible_by_groups", heads=nh, groups=g),
                msg("common.fix_the_model_config"),
                "model",
            )
        )
    return out


def _cp_findings(s, e, nh: int, g: int) -> list:
    heads_local, groups_local = nh // s.tp, g // s.tp
    out = []
    if heads_local % s.cp:
        out.append(
            e.error(
                msg("mamba.heads_not_divisible_by_tp_cp", heads=nh, tp=s.tp, cp=s.cp),
                msg("mamba.heads_not_divisible_by_tp_cp.fix", heads=nh),
                "context_parallel_size",
                "tensor_model_parallel_size",
            )
        )
    bad = (s.cp % groups_local) if groups_local < s.cp else (groups_local % s.cp)
    if groups_local and bad:
        out.append(
            e.error(
                msg("mamba.groups_vs_cp", groups=g, tp=s.tp, local=groups_local, cp=s.cp),
                msg("mamba.groups_vs_cp.fix"),
                "context_parallel_size",
                "tensor_model_parallel_size",
            )
        )
    return out


@rule(
    "mamba.heads_groups_vs_tp_cp",
    "megatron-core ssm/mamba_mixer.py, ssm/mamba_context_parallel.py",
    "mamba_num_heads and mamba_num_groups must be divisible by TP, heads by groups; heads per TP rank by CP, "
    "and groups per TP rank and CP must divide one another",
)
def _mamba(s, e):
    m = s.model
    if m is None or not m.has_mamba:
        return None
    nh, g = m.mamba_num_heads, m.mamba_num_groups
    if nh is None or g is None:
        return [e.missing_model("mamba_num_heads" if nh is None else "mamba_num_groups")]
    out = _tp_findings(s, e, nh, g)
    if not out and s.cp > 1:
        out += _cp_findings(s, e, nh, g)
    return out


@rule(
    "mamba.hybrid_pipeline_split",
    "megatron-core ssm/mamba_block.py (core 0.16: _select_layers_for_pipeline_parallel), "
    "models/hybrid/hybrid_layer_allocation.py (select_pipeline_segment)",
    "a hybrid pattern without '|' stage separators takes no virtual pipeline stages, and its layers must "
    "split evenly over PP unless first / last stage sizes are given",
)
def _hybrid_pp(s, e):
    m = s.model
    if m is None or m.hybrid_layer_pattern is None:
        return None
    lay, n, out = s.layout, len(m.hybrid_layer_pattern), []
    if s.vpp > 1:
        out.append(
            e.error(
                msg("mamba.hybrid_vpp", vpp=s.vpp),
                msg("mamba.hybrid_vpp.fix"),
                "virtual_pipeline_model_parallel_size",
                kind="unsupported",
            )
        )
    uneven = lay.num_layers_in_first_pipeline_stage is not None or lay.num_layers_in_last_pipeline_stage is not None
    if s.pp > 1 and not uneven and n % s.pp:
        ok = [p for p in range(1, n + 1) if n % p == 0 and p <= 16]
        out.append(
            e.error(
                msg("mamba.hybrid_pp_uneven", layers=n, pp=s.pp),
                msg("mamba.hybrid_pp_uneven.fix", values=ok),
                "pipeline_model_parallel_size",
            )
        )
    return out
