"""The planner's answer and its ``--json`` document."""

from __future__ import annotations

from dataclasses import dataclass, field

from moeplan.plan.baseline import fsdp_vs_3d
from moeplan.plan.describe import candidate_dict
from moeplan.plan.search import Candidate, SearchResult


@dataclass
class PlanResult:
    """Outcome of :func:`plan`; ``to_dict()`` is the JSON contract (``candidates[]`` each with
    ``layout``, ``memory``, ``throughput`` (as ``estimate``), ``explanation``; ``baseline``;
    ``rejected``)."""

    search: SearchResult
    top: int
    explanation: list[str]
    runner_up: list[str]
    baseline: dict
    seconds: float
    train_tokens: float | None = None
    notes: list[str] = field(default_factory=list)
    objective: str = "throughput"
    brief: list[str] = field(default_factory=list)

    @property
    def candidates(self) -> list[Candidate]:
        """The ``top`` best candidates."""
        return self.search.candidates[: self.top]

    def to_dict(self) -> dict:
        """The ``plan --json`` document: request, assumptions, notes, counts, candidates (each with
        rank, label, layout, memory in GiB, throughput in tokens/s/GPU, explanation), baseline,
        rejected tally, and ``fsdp_vs_3d`` when both families were searched."""
        cands = []
        for i, c in enumerate(self.candidates, start=1):
            d = candidate_dict(c, i, self.train_tokens)
            if i == 1:
                d["explanation"] = list(self.explanation)
                d["explanation_brief"] = list(self.brief)
            else:
                d["explanation"] = [line for line in self.runner_up if line.startswith(f"#{i} ")] or [
                    f"{100 * (c.tokens_per_s_per_gpu / self.candidates[0].tokens_per_s_per_gpu - 1):+.1f} % vs #1"
                ]
            cands.append(d)
        request = {k: v for k, v in self.search.request.items() if k != "assumes"}
        out = {
            "request": {**request, "objective": self.objective},
            "assumes": list(self.search.request.get("assumes", [])),
            "assumptions": list(self.search.assumptions),
            "notes": list(self.notes),
            "considered_layouts": self.search.considered,
            "fitting_layouts": self.search.fitting_phase1,
            "refined_variants": self.search.refined_variants,
            "seconds": self.seconds,
            "candidates": cands,
            "baseline": self.baseline,
            "rejected": self.search.rejected.to_list(),
        }
        fam = fsdp_vs_3d(self.search)
        if fam is not None:
            out["fsdp_vs_3d"] = fam
        return out
