"""A candidate's check warnings, as the planner's tie-breaks read them (``Candidate.warning_ids``), come
from what its rule screen found (the rule memo's outcomes, the harvested families and the known-issue
database's affected entries) rather than from a second check: they must equal the check's own."""

from __future__ import annotations

import pytest

from moeplan.plan import plan
from moeplan.rules import validate

QWEN30 = "Qwen/Qwen3-30B-A3B"


def _request(**extra) -> dict:
    return {"model": QWEN30, "system": {"gpu": "h100", "num_gpus": 16}, "training": {"seq_length": 4096}, **extra}


@pytest.mark.parametrize(
    ("extra", "known_issue_warnings"),
    [
        ({}, False),  # no versions stated: no database entry is affected
        ({"versions": {"container": "25.09"}}, True),  # affected database entries warn
        ({"recipe_defaults": "mbridge-perf"}, False),  # recipe fills: the memo runs every rule
    ],
    ids=["no-versions", "container-25.09", "recipe-fills"],
)
def test_every_candidates_warning_ids_are_the_checks_own(extra, known_issue_warnings):
    res = plan(_request(**extra))
    cands = res.search.candidates
    assert cands
    assert all(c.warnings_source is not None for c in cands)  # none falls back to a second check
    seen_known = False
    for c in cands:
        want = tuple(sorted({f.rule_id for f in validate(c.scenario).warnings}))
        assert c.warning_ids() == want, c.parallel.label()
        seen_known |= any(x.startswith("known_issue.") for x in want)
    assert seen_known is known_issue_warnings
