"""Known issues: problems of specific Megatron-Core / Bridge versions, containers or GPUs, reported as
warnings only when the scenario's versions (or unpinned reports) match.

Each entry names its source and the versions it affects; ``affected_mcore`` is an inclusive range of
megatron-core versions, or None when the report pins none (then the warning asks the user to check).
Add entries here as they are found.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from moeplan.rules.base import rule
from moeplan.spec.scenario import Scenario


@dataclass(frozen=True)
class KnownIssue:
    issue_id: str
    summary: str
    source: str
    applies: Callable[[Scenario], bool]
    affected_mcore: tuple[tuple[int, ...], tuple[int, ...]] | None
    workaround: str


KNOWN_ISSUES: tuple[KnownIssue, ...] = (
    KnownIssue(
        "ep_overlap_nccl_order_deadlock",
        "EP all-to-all overlap can issue NCCL operations in different orders on different ranks and hang at "
        "scale (reported with interleaved pipelines)",
        "NVIDIA/Megatron-LM issue #1810 (also #1852)",
        lambda s: s.layout.overlap_moe_expert_parallel_comm and s.pp > 1,
        None,
        "run a short job at full scale first; if it hangs, turn overlap_moe_expert_parallel_comm off or upgrade",
    ),
)


@rule(
    "known_issue.version_table",
    "moeplan known-issue table (rules/known_issues.py)",
    "warns about issues known for the scenario's versions, containers or GPUs",
)
def _known(s, e):
    out = []
    for k in KNOWN_ISSUES:
        if not k.applies(s):
            continue
        if k.affected_mcore is None:
            versions = "affected versions not pinned by the report: check yours"
        else:
            lo, hi = k.affected_mcore
            if not (lo <= s.mcore_version <= hi):
                continue
            versions = f"megatron-core {'.'.join(map(str, lo))}–{'.'.join(map(str, hi))}"
        out.append(
            e.warning(
                f"known issue {k.issue_id}: {k.summary} ({versions}; {k.source})",
                k.workaround,
                "versions.megatron_core",
            )
        )
    return out
