"""Memory-saving changes to a scenario, generated in one place for ``moeplan fit`` and ``moeplan oom``,
and tried the same way for both (every rule checked, memory estimated, step time when it can be).

Each change edits the user's scenario mapping and holds the world size, sequence length and global
batch size:

- recompute: each rung of :func:`moeplan.plan.space.recompute_ladder` beyond where the scenario
  stands (selective modules, cheapest per GiB first, added to the modules already set; then full
  recompute, uniform, one layer per checkpoint);
- offload: optimizer CPU offload of 0.25, 0.5 or all of the state (with the precision-aware optimizer
  it requires);
- parallel: CP×2, PP×2 (VPP dropped, a legal split of the layers), TP×2 (with SP), EP×2, ETP = TP;
- batch: MBS/2;
- numerics: an FP8 recipe the GPU runs (MXFP8 on Blackwell, blockwise FP8 on Hopper) — it changes the
  training numerics, so it is marked and ranked apart.

Nothing is filtered silently: a change that breaks a Megatron-Core rule comes back as a
:class:`Rejection` naming the rule.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, cast

from moeplan.errors import MoeplanError
from moeplan.i18n.messages import msg
from moeplan.inputs.resolved import Scenario
from moeplan.model.constants import TimeConstants
from moeplan.model.memory import MemoryEstimate, estimate_memory
from moeplan.model.step import estimate_step
from moeplan.plan.space import RECOMPUTE_KEYS, recompute_ladder, rung_text
from moeplan.resolve.load import load_scenario
from moeplan.rules import validate
from moeplan.structure.stages import output_stage_layers, pipeline_split

#: the kinds of change, in the order they are listed
KINDS = ("recompute", "offload", "parallel", "batch", "numerics")
#: optimizer offload fractions tried
OFFLOAD_FRACTIONS = (0.25, 0.5, 1.0)
_SPLIT_RESET = {
    "pipeline_model_parallel_layout": None,
    "account_for_embedding_in_pipeline_split": None,
    "account_for_loss_in_pipeline_split": None,
    "num_layers_in_first_pipeline_stage": None,
    "num_layers_in_last_pipeline_stage": None,
}


@dataclass(frozen=True)
class Change:
    """One change: a label for people, the edits (section → key → value; None removes the key) and
    its kind (one of :data:`KINDS`)."""

    label: str
    edits: dict[str, dict[str, Any]]
    kind: str

    @property
    def changes_numerics(self) -> bool:
        """True when the change alters the training numerics (precision), not just the layout."""
        return self.kind == "numerics"


@dataclass(frozen=True)
class Outcome:
    """A legal change with its effect: the changed mapping, its memory estimate and, when the step
    time can be estimated, its step time (s) and tokens/s/GPU."""

    change: Change
    data: dict
    memory: MemoryEstimate
    step_time_s: float | None
    tokens_per_s_per_gpu: float | None


@dataclass(frozen=True)
class Rejection:
    """A change that cannot run: the first broken rule (``rule_id``, ``input`` for a scenario that
    does not load) and its message."""

    change: Change
    rule_id: str
    message: str


def apply_edits(data: dict, edits: dict[str, dict[str, Any]]) -> dict:
    """A deep copy of ``data`` with ``edits`` applied (value None removes the key)."""
    d = copy.deepcopy(data)
    for sec, vals in edits.items():
        node = d.setdefault(sec, {})
        for k, v in vals.items():
            if v is None:
                node.pop(k, None)
            else:
                node[k] = v
    return d


#: the prefix of a ``Finding.edits`` key that names an environment variable rather than a layout key
ENV_EDIT = "environment."


def edit_sections(edits: dict) -> dict[str, dict]:
    """``Finding.edits`` (layout keys, and ``environment.NAME`` for an environment variable) as the
    sections :func:`apply_edits` takes: ``{"layout": {...}, "environment": {NAME: value}}``."""
    out: dict[str, dict] = {"layout": {k: v for k, v in edits.items() if not k.startswith(ENV_EDIT)}}
    env = {k.removeprefix(ENV_EDIT): v for k, v in edits.items() if k.startswith(ENV_EDIT)}
    if env:
        out["environment"] = env
    return out


def apply_check_fixes(data: dict, errors) -> tuple[dict, dict] | None:
    """``data`` with the check's own fixes applied, when every error comes with one applicable change
    (``Finding.edits``: the pipeline split, the precision-aware optimizer offload needs, SP for MoE
    with TP, an environment variable a launch check needs) and the fixed layout breaks no rule:
    (fixed mapping, the edits); None otherwise."""
    if not errors or any(f.edits is None for f in errors):
        return None
    edits: dict = {}
    for f in errors:
        edits.update(f.edits)
    fixed = apply_edits(data, edit_sections(edits))
    try:
        if validate(load_scenario(fixed)).errors:
            return None
    except MoeplanError:
        return None
    return fixed, edits


def combine(a: Change, b: Change) -> Change | None:
    """Two changes together; None when they set the same key differently."""
    edits = copy.deepcopy(a.edits)
    for sec, vals in b.edits.items():
        node = edits.setdefault(sec, {})
        for k, v in vals.items():
            if k in node and node[k] != v:
                return None
            node[k] = v
    kind = "numerics" if "numerics" in (a.kind, b.kind) else a.kind
    return Change(msg("plan.change_both", first=a.label, second=b.label), edits, kind)


def _current_rung(s: Scenario, ladder: list[tuple[str, dict]]) -> int:
    """Index of the highest ladder rung the scenario already covers (-1: below the first)."""
    lay = s.layout
    if lay.recompute_granularity == "full":
        return len(ladder) - 1
    if lay.recompute_granularity != "selective":
        return -1
    mods = set(lay.recompute_modules or ["core_attn"])
    covered = [
        i
        for i, (_, keys) in enumerate(ladder)
        if keys.get("recompute_granularity") == "selective" and set(keys["recompute_modules"]) <= mods
    ]
    return max(covered, default=0)


def recompute_changes(s: Scenario) -> list[Change]:
    """Every rung of the recompute ladder above the scenario's, modules added to those already set."""
    lay = s.layout
    ladder = [r for r in recompute_ladder(s.complete_model) if "optimizer_cpu_offload" not in r[1]]
    here = max(_current_rung(s, ladder), 0)
    out = []
    for name, keys in ladder[here + 1 :]:
        if keys.get("recompute_granularity") == "selective" and lay.recompute_granularity == "selective":
            have = list(lay.recompute_modules or ["core_attn"])
            keys = {**keys, "recompute_modules": have + [x for x in keys["recompute_modules"] if x not in have]}
        edits = dict.fromkeys(RECOMPUTE_KEYS)
        edits.update(keys)
        out.append(Change(rung_text(name), {"layout": edits}, "recompute"))
    return out


def offload_changes(s: Scenario) -> list[Change]:
    """Optimizer CPU offload of :data:`OFFLOAD_FRACTIONS` of the state (none when already offloading)."""
    if s.layout.optimizer_cpu_offload:
        return []
    keys = {"optimizer_cpu_offload": True, "use_precision_aware_optimizer": True}
    return [
        Change(
            msg("plan.change_offload", fraction=f"{f:g}"),
            {"layout": {**keys, "optimizer_offload_fraction": f}},
            "offload",
        )
        for f in OFFLOAD_FRACTIONS
    ]


def parallel_changes(s: Scenario) -> list[Change]:
    """CP×2 (with ``hierarchical_context_parallel_sizes``, whose product must equal CP, its last level
    doubled: the ring across the outer groups grows, the all-to-all groups stay as they are), PP×2 (with a
    legal split of the layers), TP×2 (SP), and for MoE EP×2 and ETP = TP."""
    m = s.complete_model
    cp: dict = {"context_parallel_size": s.cp * 2}
    levels = s.layout.hierarchical_context_parallel_sizes
    if levels:
        cp["hierarchical_context_parallel_sizes"] = [*levels[:-1], levels[-1] * 2]
    out = [Change(msg("plan.change_size", name="CP", old=s.cp, new=s.cp * 2), {"layout": cp}, "parallel")]
    seq = cast(int, s.training.seq_length)  # the callers estimated memory for s, which needs it
    tail = output_stage_layers(m, seq, 1, s.mtp_num_layers)
    split = pipeline_split(m.num_layers, s.pp * 2, 1, s.mtp_num_layers, tail)
    pp = {**_SPLIT_RESET, "pipeline_model_parallel_size": s.pp * 2, "virtual_pipeline_model_parallel_size": None}
    pp.update(split or {})
    out.append(Change(msg("plan.change_size", name="PP", old=s.pp, new=s.pp * 2), {"layout": pp}, "parallel"))
    tp = {"tensor_model_parallel_size": s.tp * 2, "sequence_parallel": True}
    out.append(Change(msg("plan.change_size_sp", name="TP", old=s.tp, new=s.tp * 2), {"layout": tp}, "parallel"))
    if m.is_moe:
        out.append(
            Change(
                msg("plan.change_size", name="EP", old=s.ep, new=s.ep * 2),
                {"layout": {"expert_model_parallel_size": s.ep * 2}},
                "parallel",
            )
        )
        if s.tp > 1 and s.etp != s.tp:
            etp = {"expert_tensor_parallel_size": s.tp}
            out.append(Change(msg("plan.change_size", name="ETP", old=s.etp, new=s.tp), {"layout": etp}, "parallel"))
    return out


def batch_and_numerics_changes(s: Scenario) -> list[Change]:
    """MBS/2 (when above 1) and an FP8 recipe the GPU runs (BF16 runs only)."""
    out = []
    mbs = s.training.micro_batch_size or 1
    if mbs > 1:
        out.append(
            Change(
                msg("plan.change_size", name="MBS", old=mbs, new=mbs // 2),
                {"training": {"micro_batch_size": mbs // 2}},
                "batch",
            )
        )
    if s.training.precision == "bf16" and s.gpu is not None:
        fp8 = "mxfp8" if s.gpu.supports_mxfp8 else ("fp8-blockwise" if s.gpu.supports_te_fp8 else None)
        if fp8:
            out.append(
                Change(msg("plan.change_precision", old="bf16", new=fp8), {"training": {"precision": fp8}}, "numerics")
            )
    return out


def memory_changes(s: Scenario) -> list[Change]:
    """Every single memory-saving change for scenario ``s``, by kind (see the module docstring)."""
    return recompute_changes(s) + offload_changes(s) + parallel_changes(s) + batch_and_numerics_changes(s)


def try_change(data: dict, change: Change, constants: TimeConstants | None, timed: bool) -> Outcome | Rejection:
    """Apply ``change`` to ``data``, check every rule, estimate memory and (``timed``) step time."""
    d = apply_edits(data, change.edits)
    try:
        s = load_scenario(d)
        errors = validate(s).errors
        if errors:
            return Rejection(change, errors[0].rule_id, errors[0].message)
        mem = estimate_memory(s)
        th = estimate_step(s, constants) if timed else None
    except MoeplanError as exc:
        return Rejection(change, "input", str(exc))
    return Outcome(change, d, mem, th.step_time_s if th else None, th.tokens_per_s_per_gpu if th else None)


__all__ = [
    "ENV_EDIT",
    "KINDS",
    "apply_check_fixes",
    "edit_sections",
    "Change",
    "Outcome",
    "Rejection",
    "apply_edits",
    "combine",
    "memory_changes",
    "try_change",
]
