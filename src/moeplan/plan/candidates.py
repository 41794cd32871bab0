"""What a layout search produces and how it ranks it: the evaluated layout (:class:`Candidate`), the
rejected tally (:class:`Rejections`), the outcome (:class:`SearchResult`), the search's constants, and
the tie-breaking the model cannot decide (:func:`simplest_leads`, :func:`fewest_warnings`,
:func:`weak_dispatcher_tie`)."""

from __future__ import annotations

import collections
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

from moeplan.i18n.messages import msg
from moeplan.inputs.provenance import RecipeProvenance
from moeplan.inputs.resolved import Scenario
from moeplan.plan.space import (
    OPTIMIZER_OFFLOAD_KEYS,
    RECOMPUTE_KEYS,
    Parallel,
)
from moeplan.rules import RULES, validate
from moeplan.units import GIB_BYTES

#: headroom kept free on every GPU unless ``headroom_gib`` says otherwise (allocator spikes, NCCL
#: growth; ``estimate`` calls < 5 % "tight")
DEFAULT_HEADROOM_FRACTION = 0.05


OBJECTIVES = ("throughput", "time-to-train")


#: predicted throughputs closer than this fraction are treated as a tie (the step-time model's
#: in-sample error is far larger, docs/accuracy.md), broken first toward the layout ``moeplan check``
#: warns about least (fewest distinct warning rule ids: a warning every tied layout shares does not
#: decide), then toward the simpler layout; a flagged layout that leads by more is kept, and the plan
#: prints its warnings in full
TIE_FRACTION = 0.02


#: how far all-to-all may lead HybridEP on an NVL72 rack before the planner prefers it: HybridEP's rate
#: is its published kernel-only figure at one shape (4,096 tokens, hidden 7,168, top-8; DeepEP hybrid-ep
#: docs/README_Hybrid-EP.md), through its Torch API it runs 1.3–1.4× slower, and NVIDIA's NVL72 recipes
#: run it; within this margin the two are a tie on weak evidence and the explanation says so
WEAK_DISPATCHER_TIE = 0.25


#: a layout whose throughput without any recompute is below this fraction of the best found so far
#: is not fitted (branch and bound; tallied as ``dominated``)
DOMINATED_FRACTION = 0.5


#: phase-one layouts probed over VPP alone, per layout refined in full (:func:`_probe_vpp`)
PROBE_FACTOR = 3


KNOB_KEYS = {
    "recompute": RECOMPUTE_KEYS + OPTIMIZER_OFFLOAD_KEYS,
    "dispatcher": ("moe_token_dispatcher_type", "moe_flex_dispatcher_backend"),
    "graphs": ("cuda_graph_impl", "cuda_graph_scope"),
    "cp_comm": ("cp_comm_type", "hierarchical_context_parallel_sizes"),
    "vpp": ("virtual_pipeline_model_parallel_size", "pipeline_model_parallel_layout"),
    "ep_overlap": ("overlap_moe_expert_parallel_comm",),
}


def _mapping_of(source: Any) -> dict:
    """An estimate's ``to_dict`` mapping, or ``source`` itself when it is a mapping already."""
    return source if isinstance(source, dict) else source.to_dict()


@dataclass
class Candidate:
    """One evaluated layout.

    Attributes:
        parallel: the sizes and family, read from the resolved scenario (what was estimated).
        data: the full scenario mapping (what ``moeplan check``/``export`` take).
        scenario: resolved scenario.
        memory_source: the memory estimate, or its :meth:`to_dict` mapping; :attr:`memory` gives the
            mapping, made on first read (most candidates a search times are never shown).
        throughput_source: the step-time estimate, or its :meth:`to_dict` mapping; :attr:`throughput`
            gives the mapping, made on first read.
        memory / throughput: :meth:`to_dict` of the memory and step-time estimates.
        recompute: the ladder rung chosen (label); dispatcher / graphs / cp_comm labels likewise.
        tried: per knob family, label → tokens/s/GPU (None: rejected or does not fit) of the variants
            tried in refinement (for the explanation); under ``_why``, ``family:label`` → why that
            variant was rejected.
    """

    parallel: Parallel
    data: dict
    scenario: Scenario
    memory_source: Any
    throughput_source: Any
    recompute: str
    knobs: dict[str, str]
    ladder_tried: list[tuple[str, float | None]] = field(default_factory=list)
    capacity_gib: float = 0.0
    tried: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: makes :meth:`warning_ids` without running the check (set by the evaluator, from what its rule
    #: screen found); None: the check is run
    warnings_source: Callable[[], tuple[str, ...]] | None = field(default=None, repr=False, compare=False)
    _warned: tuple[str, ...] | None = field(default=None, repr=False, compare=False)
    _memory: dict | None = field(default=None, repr=False, compare=False)
    _throughput: dict | None = field(default=None, repr=False, compare=False)

    @property
    def memory(self) -> dict:
        """:meth:`~moeplan.model.memory.MemoryEstimate.to_dict` of the memory estimate (made on first
        read, then kept: changes to the mapping stay)."""
        if self._memory is None:
            self._memory = _mapping_of(self.memory_source)
        return self._memory

    @property
    def throughput(self) -> dict:
        """:meth:`~moeplan.model.step.ThroughputEstimate.to_dict` of the step-time estimate (made on first
        read, then kept: changes to the mapping stay)."""
        if self._throughput is None:
            self._throughput = _mapping_of(self.throughput_source)
        return self._throughput

    def warning_ids(self) -> tuple[str, ...]:
        """Rule ids of the warnings ``moeplan check`` gives this candidate's scenario, sorted
        (validated on first use, then kept: the scenario is frozen). A ``tight`` memory verdict is
        not among them: NVIDIA's published layouts run where the memory model's band reaches the
        HBM, and counting it cost the planner a published layout in its top 5 (the plan names the
        risk and the first layout free of it instead, :func:`moeplan.plan.planner.safer_alternative_note`)."""
        if self._warned is None:
            src = self.warnings_source
            self._warned = (
                src() if src is not None else tuple(sorted({f.rule_id for f in validate(self.scenario).warnings}))
            )
        return self._warned

    @property
    def tokens_per_s_per_gpu(self) -> float:
        """Predicted throughput, tokens per second per GPU."""
        src = self.throughput_source
        if self._throughput is None and not isinstance(src, dict):
            return src.tokens_per_s_per_gpu  # (the estimate's own figure: what its mapping would say)
        return self.throughput["tokens_per_s_per_gpu"]

    @property
    def peak_gib(self) -> float:
        """Predicted peak memory of the most loaded stage, GiB per GPU."""
        return self.memory["peak_bytes"] / GIB_BYTES

    def key(self) -> tuple:
        """Sort key: fastest first, then the layout tuple (deterministic ties)."""
        return (-round(self.tokens_per_s_per_gpu, 6), self.parallel, self.recompute, tuple(sorted(self.knobs.items())))

    def summary(self) -> dict:
        """JSON-ready mapping: label, layout and training as given to the estimate (null keys left
        out), DP/EDP, microbatches, recompute rung, knobs, memory and throughput estimates."""
        s = self.scenario
        lay = {k: v for k, v in self.data["layout"].items() if v is not None}
        return {
            "label": self.parallel.label(),
            "layout": lay,
            "training": dict(self.data["training"]),
            "dp": s.dp,
            "edp": s.edp,
            "num_microbatches": self.throughput["num_microbatches"],
            "recompute": self.recompute,
            "knobs": dict(self.knobs),
            "memory": self.memory,
            "throughput": self.throughput,
        }


@dataclass
class Rejections:
    """Tally of rejected layouts by reason (rule id, ``does-not-fit``, ``dp-budget``,
    ``gbs-divisibility``) with one example each."""

    counts: collections.Counter = field(default_factory=collections.Counter)
    examples: dict[str, str] = field(default_factory=dict)

    def add(self, reason: str, example: str) -> None:
        """Count one rejected layout under ``reason``, keeping the first ``example``."""
        self.counts[reason] += 1
        self.examples.setdefault(reason, example)

    def to_list(self) -> list[dict]:
        """``[{reason, count, example, meaning}]``, most frequent first; ``meaning`` says in words what
        the reason is (the rule's statement for a rule id)."""
        return [
            {"reason": r, "count": n, "example": self.examples[r], "meaning": rejection_meaning(r)}
            for r, n in sorted(self.counts.items(), key=lambda kv: (-kv[1], kv[0]))
        ]


#: what the planner's own rejection tags mean (the other reasons are rule ids)
REJECTION_TAGS = {
    "does-not-fit": "over the GPU's memory even at the last recompute / offload rung",
    "tight": (
        "may not fit even at the last recompute / offload rung (the memory model's band around the peak "
        "crosses the usable memory) and leaves less than the headroom kept free (--headroom-gib)"
    ),
    "headroom": "fits, but leaves less than the headroom kept free (--headroom-gib) even at the last rung",
    "dominated": "cannot beat a layout already found, even without recompute (bound)",
    "etp-not-needed": "ETP > 1 where EP alone places the experts",
    "gbs-divisibility": "the global batch does not divide by MBS · DP",
    "dp-budget": "below the data-parallel minimum (--min-dp)",
    "rules": "breaks a Megatron-Core rule",
}


def rejection_meaning(reason: str) -> str:
    """A rejection reason in words: the planner's own tags, else the rule's one-line statement."""
    if reason in REJECTION_TAGS:
        return REJECTION_TAGS[reason]
    r = RULES.get(reason)
    return r.summary if r is not None else reason


@dataclass
class SearchResult:
    """Outcome of :func:`search`.

    Attributes:
        candidates: every fitting layout (refined variants included), best first.
        rejected: the tally of rejected layouts by reason.
        evaluated: layouts evaluated (phase one and refinement).
        assumptions: what the search assumed for the request (e.g. a default global batch size).
        request: the request as searched (model, GPU, sizes, batch, precision, held keys).
        ladder: the recompute rungs' names.
        recipe: the request's recipe fills applied to every candidate (None: ``recipe_defaults: none``).
    """

    candidates: list[Candidate]
    rejected: Rejections
    evaluated: int
    assumptions: list[str]
    request: dict
    ladder: list[str] = field(default_factory=list)
    evaluator: object = None
    tie_note: str | None = None
    considered: int = 0
    fitting_phase1: int = 0
    refined_variants: int = 0
    #: the request's recipe fills, applied to every candidate (None: ``recipe_defaults: none``)
    recipe: RecipeProvenance | None = None


def fewest_warnings(tied: list[Candidate]) -> Candidate:
    """The first of ``tied`` (candidates the model cannot order, in preference order) with the fewest
    distinct warning rule ids (:meth:`Candidate.warning_ids`): a layout the checker flags never wins a
    tie against one it flags less. A single candidate is returned without validating it."""
    if len(tied) == 1:
        return tied[0]
    return min(tied, key=lambda c: (len(c.warning_ids()), tied.index(c)))


def simplest_leads(out: list[Candidate]) -> str | None:
    """Within :data:`TIE_FRACTION` of the fastest the model cannot tell layouts apart (its error is
    larger): the layout with the fewest check warnings, then the simplest (least CP, then PP, TP, VPP,
    ETP), is moved to the front of ``out`` (in place). Returns the note saying so, None when the
    fastest already leads."""
    if not out:
        return None
    top_tps = out[0].tokens_per_s_per_gpu
    pool = [c for c in out if c.tokens_per_s_per_gpu >= (1 - TIE_FRACTION) * top_tps]
    pool.sort(key=lambda c: (c.parallel.cp, c.parallel.pp, c.parallel.tp, c.parallel.vpp, c.parallel.etp, out.index(c)))
    lead = fewest_warnings(pool)
    if lead is out[0]:
        return None
    # the warnings decided when simplicity alone would have chosen another layout (pool[0]); name
    # the fastest's extra warnings, else the simplest's
    flagged = out[0] if len(out[0].warning_ids()) > len(lead.warning_ids()) else pool[0]
    dropped = ", ".join(sorted(set(flagged.warning_ids()) - set(lead.warning_ids())))
    why = (
        msg("plan.tie_fewer_warnings", layout=flagged.parallel.label(), ids=dropped)
        if lead is not pool[0]
        else msg("plan.tie_simpler")
    )
    note = msg(
        "plan.tie_note",
        lead=lead.parallel.label(),
        fastest=out[0].parallel.label(),
        pct=100 * (top_tps / lead.tokens_per_s_per_gpu - 1),
        tie=100 * TIE_FRACTION,
        why=why,
    )
    out.remove(lead)
    out.insert(0, lead)
    return note


def weak_dispatcher_tie(best: Candidate, variants: list[Candidate], top: float, gpu) -> Candidate:
    """On an NVL72 rack, HybridEP within :data:`WEAK_DISPATCHER_TIE` of the fastest dispatcher is a tie
    on weak evidence (the gap rests on HybridEP's kernel rate measured at one shape):
    the fastest prediction is kept, so that every candidate is ranked by what the model predicts for
    it, and the gap is recorded (``tried["_weak_tie"]``) so that the explanation says the choice is a
    tie with the guidance's HybridEP and to measure both. Returns ``best`` unchanged."""
    hyb = next((x for x in variants if x.knobs.get("dispatcher") == "hybridep"), None)
    if gpu is None or not gpu.is_nvl72 or hyb is None or best is hyb or hyb.tokens_per_s_per_gpu <= 0:
        return best
    if hyb.tokens_per_s_per_gpu >= top / (1 + WEAK_DISPATCHER_TIE):
        best.tried["_weak_tie"] = {"dispatcher": 100 * (1 - hyb.tokens_per_s_per_gpu / top)}
    return best


def time_to_train_s(c: Candidate, train_tokens: float) -> float:
    """Seconds to train ``train_tokens`` tokens at the candidate's predicted throughput."""
    tps = c.tokens_per_s_per_gpu * cast(int, c.scenario.num_gpus)  # the request's (_request() checked it)
    return math.inf if tps <= 0 else train_tokens / tps
