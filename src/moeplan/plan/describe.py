"""How the planner describes a candidate: one line for people, one mapping for ``--json``."""

from __future__ import annotations

from moeplan.plan.search import Candidate, time_to_train_s
from moeplan.rules import validate
from moeplan.rules.graphs import nan_check_off_note
from moeplan.rules.known_issue_checks import summary as known_issue_summary


def describe(c: Candidate) -> str:
    """One line: sizes, MBS, recompute and the knobs that differ from the defaults."""
    k = c.knobs
    bits = [f"{c.parallel.label()} MBS{c.data['training']['micro_batch_size']}", f"recompute {c.recompute}"]
    if k.get("dispatcher", "alltoall") != "alltoall":
        bits.append(k["dispatcher"])
    if k.get("ep_overlap") == "on":
        bits.append("EP overlap")
    if k.get("graphs", "eager") != "eager":
        bits.append("graphs " + k["graphs"])
    if k.get("cp_comm", "p2p") != "p2p":
        bits.append("CP " + k["cp_comm"])
    return ", ".join(bits)


#: the rule whose warning says a candidate runs without the loss NaN check
NAN_RULE = "graphs.full_iteration_nan_check"


def graph_gain_pct(c: Candidate) -> float | None:
    """How much faster the candidate's CUDA graph setting is predicted than eager execution of the
    same layout, in percent, as the explanation's graphs line states it (both measured when the
    refinement tried the graph settings, :func:`moeplan.plan.search._refine`); None when eager was not tried
    (graphs held fixed, or not refined) or the candidate runs eager."""
    tried = c.tried.get("graphs") or {}
    chosen = c.knobs.get("graphs", "eager")
    eager, ref = tried.get("eager"), tried.get(chosen)
    if chosen == "eager" or not eager or not ref:
        return None
    return 100 * (1 - eager / ref)


def candidate_dict(c: Candidate, rank: int | None, train_tokens: float | None) -> dict:
    """A candidate as the ``plan --json`` document lists it: its summary, rank, the rule warnings
    it carries (the NaN check's with the graph's credited speed-up), ``nan_check_off`` (the statement
    of :func:`~moeplan.rules.graphs.nan_check_off_note` when it runs without the NaN check, else null), the known issues it may hit (``known_issues``: id, status affected | possible, symptom,
    severity, source), memory in GiB and bytes, and (with ``train_tokens``) the time to train them (s)."""
    d = c.summary()
    d["rank"] = rank
    nan_note = nan_check_off_note(c.scenario, graph_gain_pct(c))
    d["warnings"] = [
        f"{f.rule_id}: {nan_note if f.rule_id == NAN_RULE and nan_note else f.message}"
        for f in validate(c.scenario).warnings
    ]
    d["nan_check_off"] = nan_note
    d["known_issues"] = known_issue_summary(c.scenario)
    d["memory"] = {
        "peak_gib": c.peak_gib,
        "capacity_gib": c.capacity_gib,
        "peak_stage": c.memory["peak_stage"],
        "verdict": c.memory["verdict"],
        "verdict_band": c.memory.get("verdict_band"),
        "capacity_bytes": c.memory.get("capacity_bytes"),
        "error_band_pct": c.memory.get("error_band_pct"),
        "dominant_items": c.memory.get("dominant_items", []),
        "stages": c.memory["stages"],
        "peak_bytes": c.memory["peak_bytes"],
        "peak_allocated_bytes": c.memory["peak_allocated_bytes"],
        "peak_reserved_bytes": c.memory["peak_reserved_bytes"],
        "device_used_bytes": c.memory["device_used_bytes"],
    }
    if train_tokens:
        d["time_to_train_s"] = time_to_train_s(c, train_tokens)
    return d
