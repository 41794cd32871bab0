"""Layout planner: search, rank and explain (``moeplan plan``), make a layout fit (``moeplan fit``),
and the built-in starting points (``moeplan recipes``).

Public API:

- :func:`plan` — request mapping → :class:`PlanResult` (top candidates, explanation, baseline,
  rejected tally); ``to_dict()`` is the ``--json`` contract.
- :func:`rule_of_thumb_cp` — CP ≈ seq_len / 4096 rounded to a power of two (the guidance's first guess).
"""

from __future__ import annotations

from moeplan.plan.baseline import family_baseline, fsdp_vs_3d, rule_of_thumb_cp
from moeplan.plan.describe import candidate_dict, describe
from moeplan.plan.planner import plan
from moeplan.plan.result import PlanResult

__all__ = ["PlanResult", "candidate_dict", "describe", "family_baseline", "fsdp_vs_3d", "plan", "rule_of_thumb_cp"]
