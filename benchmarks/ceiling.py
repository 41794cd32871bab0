"""What any time model allowed by issue #4 can reach on the published runs.

The issue allows one software factor per container release, shared by every model and GPU, and no
constant per model or per run. Any such model predicts a run as ``f(layout) × r(release)``: two runs
of one layout (same model, GPU, GPU count, sizes, MBS, GBS, sequence, precision) in two releases are
ordered by the release factors alone, whatever ``f`` is. Two bounds follow from the measurements:

- :func:`oracle_errors`: the best least-squares fit of that form with ``f`` free for every layout (a
  lookup table; layouts measured once are fitted exactly) — an optimistic floor
  for the error of any model of that form;
- :func:`within_group_ceiling`: for every strict order of the release factors, which (model, GPU)
  groups can still reach a within-group Spearman ≥ ``target``. A group's best Spearman is bounded
  by trying every predicted ranking of its runs that puts same-layout runs in release-factor order
  (rankings across layouts are left free, so the bound is generous). The most groups any one order
  lets through is a ceiling for every model of that form; below the group count the criterion
  cannot be met under the issue's own rules.
"""

from __future__ import annotations

import collections
import itertools

import numpy as np
from scipy.optimize import least_squares
from timefit import layout_key, spearman


def _key(r: dict) -> tuple:
    return (*layout_key(r), r["precision"])


def oracle_errors(runs: list[dict]) -> np.ndarray:
    """Absolute % errors of the least-squares fit log(measured) ≈ a[layout] + b[release] over
    ``runs`` (one free constant per layout and per release, the oldest release's fixed at 0)."""
    layouts = sorted({_key(r) for r in runs}, key=str)
    releases = sorted({r["release"] for r in runs})
    li = {k: i for i, k in enumerate(layouts)}
    ri = {k: i for i, k in enumerate(releases)}
    a = np.zeros((len(runs), len(layouts) + len(releases) - 1))
    for n, r in enumerate(runs):
        a[n, li[_key(r)]] = 1.0
        if ri[r["release"]]:
            a[n, len(layouts) + ri[r["release"]] - 1] = 1.0
    y = np.log([r["measured"] for r in runs])
    z = least_squares(lambda z: a @ z - y, np.zeros(a.shape[1])).x
    return np.abs(np.exp(a @ z - y) - 1) * 100


def _feasible_rankings(members: list[dict], target: float) -> list[frozenset]:
    """The release-order constraints of every predicted ranking of ``members`` whose Spearman with
    the measurements is ≥ ``target``: each is a set of (faster release, slower release) pairs the
    ranking needs; an empty set means no constraint."""
    meas = [r["measured"] for r in members]
    out = set()
    for perm in itertools.permutations(range(len(members))):
        pred = [0.0] * len(members)
        for rank, i in enumerate(perm):
            pred[i] = float(rank)
        if spearman(pred, meas) < target:
            continue
        need = set()
        for i, j in itertools.combinations(range(len(members)), 2):
            a, b = members[i], members[j]
            if _key(a) == _key(b) and a["release"] != b["release"]:
                need.add((a["release"], b["release"]) if pred[i] > pred[j] else (b["release"], a["release"]))
        out.add(frozenset(need))
    return list(out)


def within_group_ceiling(runs: list[dict], target: float = 0.8, min_runs: int = 3) -> dict:
    """The most (model, GPU) groups of ≥ ``min_runs`` runs that any strict order of the release
    factors lets reach a within-group Spearman ≥ ``target``, the group count, one best order with the
    groups it leaves below ``target``, and the groups no order lets through. Cost: permutations of each group's runs (≤ 8 here)."""
    groups = collections.defaultdict(list)
    for r in runs:
        groups[(r["model"].split("/")[-1], r["gpu"])].append(r)
    groups = {k: v for k, v in groups.items() if len(v) >= min_runs}
    feasible = {k: _feasible_rankings(v, target) for k, v in groups.items()}
    releases = sorted({r["release"] for r in runs})
    best: tuple[int, tuple, list] = (-1, (), [])
    ever = set()
    for order in itertools.permutations(releases):
        rank = {rel: i for i, rel in enumerate(order)}  # a lower index is a faster release factor
        ok = [k for k, sets in feasible.items() if any(all(rank[f] < rank[s] for f, s in need) for need in sets)]
        ever.update(ok)
        if len(ok) > best[0]:
            best = (len(ok), order, ok)
    return {
        "groups": len(groups),
        "max_reachable": best[0],
        "best_order": list(best[1]),
        "failing_under_best": sorted(f"{m} on {g}" for m, g in set(groups) - set(best[2])),
        "never": sorted(f"{m} on {g}" for m, g in set(groups) - ever),
    }
