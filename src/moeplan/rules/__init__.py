"""Megatron-Core layout rules. :func:`validate` runs every rule and returns every finding at once.

One module per family: world (sizes, batch), attention, sequence (CP/SP), pipeline, moe, recompute
(+ activation offload), graphs, optimizer (offload, FSDP), precision (+ reported figures), known issues,
deployment (the communication libraries' builds and settings).
"""

from __future__ import annotations

from dataclasses import dataclass

from moeplan.inputs.resolved import Scenario
from moeplan.rules import (  # noqa: F401  (imported to register their rules)
    attention,
    deployment,
    dsa,
    dsv4,
    fsdp_ep,
    gemma4,
    graphs,
    hybrid_mtp,
    kimi_k3,
    known_issue_checks,
    known_issue_families,
    latent_moe,
    mamba,
    moe,
    msa,
    optimizer,
    pipeline,
    precision,
    recompute,
    sequence,
    world,
)
from moeplan.rules.base import RULES, Finding, Rule, overall_verdict

_ORDER = {"error": 0, "warning": 1, "info": 2}


#: model rules skipped for lack of the model's fields from which a check without errors is
#: ``incomplete``, not valid
INCOMPLETE_SKIPS = 3


@dataclass(frozen=True)
class CheckResult:
    """All findings for one scenario, sorted by severity then rule id, and the overall verdict
    (``valid`` | ``warn`` | ``incomplete`` | ``invalid`` | ``unsupported``). ``incomplete``: no rule
    is broken, but the scenario names no model, or :data:`INCOMPLETE_SKIPS` or more model rules were
    skipped for lack of the model's fields (a check that skipped most of its rules is not "valid";
    a missing GPU, world size or batch skips a few rules each, named by info findings)."""

    verdict: str
    findings: list[Finding]
    scenario: Scenario

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "error"]

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "warning"]

    def rule_ids(self, severity: str | None = None) -> set[str]:
        return {f.rule_id for f in self.findings if severity is None or f.severity == severity}

    def to_dict(self) -> dict:
        return {
            "verdict": self.verdict,
            "scenario": self.scenario.summary(),
            "counts": {k: sum(f.severity == k for f in self.findings) for k in _ORDER},
            "findings": [f.to_dict() for f in self.findings],
        }


def validate(scenario: Scenario, skip: frozenset[str] = frozenset()) -> CheckResult:
    """Run every registered rule on a resolved scenario; never stops at the first failure.

    Args:
        scenario: the resolved scenario.
        skip: rule ids not to run (default none). The planner skips ``known_issue.harvested``: its
            findings are warnings that never reject a layout, and it costs a trigger per harvested entry.

    Returns:
        :class:`CheckResult` with findings sorted errors → warnings → infos.
    """
    found: list[Finding] = []
    for r in RULES.values():
        if r.rule_id not in skip:
            found.extend(r.check(scenario))
    found.sort(key=lambda f: (_ORDER[f.severity], f.rule_id))
    verdict = overall_verdict(found)
    skipped = sum(f.severity == "info" and f.message.startswith("skipped: needs the model's") for f in found)
    if verdict in ("valid", "warn") and (scenario.model is None or skipped >= INCOMPLETE_SKIPS):
        verdict = "incomplete"
    return CheckResult(verdict, found, scenario)


__all__ = ["INCOMPLETE_SKIPS", "RULES", "CheckResult", "Finding", "Rule", "validate"]
