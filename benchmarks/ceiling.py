"""What any time model of the accepted form can reach on the published runs.

The accepted form has one software factor per container release, shared by every model and GPU, and no
constant per model or per run. Any such model predicts a run as ``f(layout) × r(release)``: two runs
of one layout (same model, GPU, GPU count, sizes, MBS, GBS, sequence, precision) in two releases are
ordered by the release factors alone, whatever ``f`` is. Two bounds follow from the measurements:

- :func:`oracle_errors`: the best least-squares fit of that form with ``f`` free for every layout (a
  lookup table; layouts measured once are fitted exactly) — an optimistic floor
  for the error of any model of that form;
- :func:`within_group_ceiling`: for every order of the release factors (ties allowed), which
  (model, GPU) groups can still reach a within-group Spearman ≥ ``target``. A group's best Spearman
  is bounded by trying every predicted ranking of its runs, ties allowed, that puts same-layout runs
  in release-factor order (rankings across layouts are left free, so the bound is generous). The most groups any one order
  lets through is a ceiling for every model of that form; below the group count the criterion
  cannot be met by any model of that form.
"""

from __future__ import annotations

import collections
import itertools

import numpy as np
from scipy.optimize import least_squares
from timefit import layout_key


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


def _weak_orders(n: int) -> np.ndarray:
    """Every ranking of ``n`` items with ties allowed (ordered set partitions), as rows of levels
    0..k−1 (Fubini number of rows: 13 for 3 items, 545 835 for 8)."""
    rows: list[tuple[int, ...]] = []

    def grow(levels: list[int], used: int) -> None:
        if len(levels) == n:
            if used == max(levels) + 1:
                rows.append(tuple(levels))
            return
        for lv in range(min(used + 1, n)):
            grow(levels + [lv], max(used, lv + 1))

    grow([], 0)
    # levels were assigned in first-use order: every permutation of the level labels is another ranking
    out = set()
    for row in rows:
        k = max(row) + 1
        for perm in itertools.permutations(range(k)):
            out.add(tuple(perm[x] for x in row))
    return np.array(sorted(out), dtype=float)


def _average_ranks(levels: np.ndarray) -> np.ndarray:
    """Row-wise average ranks (1-based, ties shared) of a (rows × n) array."""
    less = (levels[:, None, :] < levels[:, :, None]).sum(axis=2)
    same = (levels[:, None, :] == levels[:, :, None]).sum(axis=2)
    return less + (same + 1) / 2


def _sign(a: float, b: float) -> int:
    return int(a > b) - int(a < b)


def _feasible_signs(members: list[dict], target: float) -> tuple[list[tuple[str, str]], set[tuple[int, ...]]]:
    """The release pairs that same-layout runs of ``members`` tie together, and the sign patterns
    (+1: the first release predicted faster, 0: equal, −1: slower) of every predicted ranking, ties
    allowed, whose Spearman with the measurements is ≥ ``target``."""
    n = len(members)
    levels = _weak_orders(n)
    pred = _average_ranks(levels)
    meas = _average_ranks(np.array([[r["measured"] for r in members]], dtype=float))[0]
    pc = pred - pred.mean(axis=1, keepdims=True)
    mc = meas - meas.mean()
    denom = np.sqrt((pc**2).sum(axis=1) * (mc**2).sum())
    with np.errstate(invalid="ignore", divide="ignore"):
        rho = np.where(denom > 0, (pc @ mc) / denom, -1.0)
    pairs = [
        (i, j)
        for i, j in itertools.combinations(range(n), 2)
        if _key(members[i]) == _key(members[j]) and members[i]["release"] != members[j]["release"]
    ]
    names = [(members[i]["release"], members[j]["release"]) for i, j in pairs]
    ok = pred[rho >= target - 1e-12]
    return names, {tuple(_sign(row[i], row[j]) for i, j in pairs) for row in ok}


def within_group_ceiling(runs: list[dict], target: float = 0.8, min_runs: int = 3) -> dict:
    """The most (model, GPU) groups of ≥ ``min_runs`` runs that any order of the release factors
    (ties allowed) lets reach a within-group Spearman ≥ ``target``, the group count, one best order
    (fastest first, tied releases joined by ``=``) with the groups it leaves below ``target``, and the groups no order lets through. Cost: every
    ranking with ties of each group's runs (545 835 for the largest group, 8 runs)."""
    groups = collections.defaultdict(list)
    for r in runs:
        groups[(r["model"].split("/")[-1], r["gpu"])].append(r)
    groups = {k: v for k, v in groups.items() if len(v) >= min_runs}
    feasible = {k: _feasible_signs(v, target) for k, v in groups.items()}
    releases = sorted({r["release"] for r in runs})
    best: tuple[int, tuple, list] = (-1, (), [])
    ever = set()
    for levels in _weak_orders(len(releases)):
        speed = dict(zip(releases, -levels, strict=True))  # level 0 is the fastest release factor
        ok = [
            k for k, (names, signs) in feasible.items() if tuple(_sign(speed[a], speed[b]) for a, b in names) in signs
        ]
        ever.update(ok)
        if len(ok) > best[0]:
            tiers = sorted({speed[rel] for rel in releases}, reverse=True)
            order = tuple(" = ".join(rel for rel in releases if speed[rel] == t) for t in tiers)
            best = (len(ok), order, ok)
    return {
        "groups": len(groups),
        "max_reachable": best[0],
        "best_order": list(best[1]),
        "failing_under_best": sorted(f"{m} on {g}" for m, g in set(groups) - set(best[2])),
        "never": sorted(f"{m} on {g}" for m, g in set(groups) - ever),
    }
