"""How the planner describes a candidate: one line for people, one mapping for ``--json``."""

from __future__ import annotations

from moeplan.plan.search import Candidate, time_to_train_s
from moeplan.rules import validate
from moeplan.rules.known_issues import summary as known_issue_summary


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


def candidate_dict(c: Candidate, rank: int | None, train_tokens: float | None) -> dict:
    """A candidate as the ``plan --json`` document lists it: its summary, rank, the rule warnings
    it carries, the known issues it may hit (``known_issues``: id, status affected | possible, symptom,
    severity, source), memory in GiB and bytes, and (with ``train_tokens``) the time to train them (s)."""
    d = c.summary()
    d["rank"] = rank
    d["warnings"] = [f"{f.rule_id}: {f.message}" for f in validate(c.scenario).warnings]
    d["known_issues"] = known_issue_summary(c.scenario)
    d["memory"] = {
        "peak_gib": c.peak_gib,
        "capacity_gib": c.capacity_gib,
        "peak_stage": c.memory["peak_stage"],
        "verdict": c.memory["verdict"],
        "stages": c.memory["stages"],
        "peak_bytes": c.memory["peak_bytes"],
        "peak_allocated_bytes": c.memory["peak_allocated_bytes"],
        "peak_reserved_bytes": c.memory["peak_reserved_bytes"],
        "device_used_bytes": c.memory["device_used_bytes"],
    }
    if train_tokens:
        d["time_to_train_s"] = time_to_train_s(c, train_tokens)
    return d
