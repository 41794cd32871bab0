"""Quality of the planner against the published Megatron Bridge runs (``published_runs.yaml``).

For each run: plan with the same model, GPU, GPU count, sequence length, precision and global batch
size (``moe_router_force_load_balancing`` as published), and the numerics its recipe sets, held like
the precision (the planner never changes numerics for the user): the optimizer-state dtypes
(DeepSeek-V3's BF16 moments) and the gradient-reduction precision (every perf recipe reduces
gradients in BF16, ``_benchmark_common``: ``grad_reduce_in_fp32=False``); everything else searched.
Then:

- the published layout's rank: its sizes (TP, PP, VPP, CP, EP, ETP, MBS) planned alone — the best
  recompute / dispatcher / graphs our search finds for them — ranked by predicted tokens/s/GPU among
  the search's candidates (distinct layouts);
- hit: the published layout, or a layout predicted within 3 % of it, is in our top 5;
- whether our top-1 is predicted at least as fast as the published layout as published (its recipe's
  knobs filled, ``recipe_defaults: mbridge-perf``).

Goal: a hit for ≥ 80 % of runs. Writes docs/plan_quality.md.

Usage: python benchmarks/plan_quality.py [--limit N] [--exact]

``--exact`` plans with the exact search (``plan(exact=True)``) and only prints the figures; so does
``--limit N`` (the first N runs).
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
import figures  # noqa: E402

from moeplan import estimate_step, load_scenario
from moeplan.inputs.layout import PARALLEL_DIMS
from moeplan.model.constants_fit import release_key
from moeplan.plan import plan

ROOT = Path(__file__).resolve().parents[1]
REF = ROOT / "tests" / "data" / "reference"  # vendored copy of the shared reference data
SIZES = ("TP", "PP", "VPP", "CP", "EP", "ETP")
#: optimizer numerics a run's recipe fixes (held in the plan like the precision)
NUMERICS = ("main_grads_dtype", "exp_avg_dtype", "exp_avg_sq_dtype")


def _sizes(layout: dict, mbs: int) -> tuple:
    vals = []
    for d in SIZES:
        v = layout.get(PARALLEL_DIMS[d])
        if d == "VPP":
            v = v or 1
        elif d == "ETP":
            v = v if v is not None else 1
        else:
            v = v or 1
        vals.append(v)
    return (*vals, mbs)


def one(r: dict, constants=None, exact: bool = False) -> dict:
    """Plan published run ``r`` (see the module docstring) with the packaged step-time constants, or ``constants``;
    ``exact``: both searches exact (``plan(exact=True)``)."""
    sc = r["scenario"]
    tr = sc["training"]
    req = {
        "model": sc["model"],
        "system": dict(sc["system"]),
        "training": {
            "seq_length": tr["seq_length"],
            "global_batch_size": tr["global_batch_size"],
            "precision": tr.get("precision", "bf16"),
        },
        "layout": {"moe_router_force_load_balancing": True}
        if sc["layout"].get("moe_router_force_load_balancing")
        else {},
        "versions": {"container": r["release"]},
    }
    # the run's optimizer numerics are held like its precision: the optimizer-state dtypes its recipe
    # sets (BF16 main grads and moments for DeepSeek-V3), with the precision-aware optimizer they need
    resolved = load_scenario(
        {**sc, "recipe_defaults": "mbridge-perf-benchmark", "versions": {"container": r["release"]}}
    )
    filled = {x.key for x in resolved.resolutions if "recipe" in x.reason.lower()} | resolved.layout.model_fields_set
    held = {k: getattr(resolved.layout, k) for k in NUMERICS if k in filled and getattr(resolved.layout, k) == "bf16"}
    if held:
        req["layout"].update(held, use_precision_aware_optimizer=True)
    if "grad_reduce_in_fp32" in filled and resolved.layout.grad_reduce_in_fp32 is False:
        req["layout"]["grad_reduce_in_fp32"] = False  # BF16 gradient reduction: numerics, held too
    t0 = time.perf_counter()
    res = plan(req, top=5, constants=constants, exact=exact)
    secs = time.perf_counter() - t0
    lay = sc["layout"]
    mbs = tr.get("micro_batch_size", 1)
    pub = _sizes(lay, mbs)
    fixed = {PARALLEL_DIMS[d]: v for d, v in zip(SIZES, pub[:-1], strict=True) if not (d == "VPP" and v == 1)}
    fixed_req = {**req, "layout": {**req["layout"], **fixed}, "training": {**req["training"], "micro_batch_size": mbs}}
    alone = plan(fixed_req, top=1, constants=constants, exact=exact)
    # as published: the recipe's knobs
    as_pub = {**sc, "recipe_defaults": "mbridge-perf-benchmark", "versions": {"container": r["release"]}}
    try:
        pub_tps = estimate_step(load_scenario(as_pub), constants).tokens_per_s_per_gpu
    except Exception:  # noqa: BLE001 - a published layout our estimate cannot take is reported
        pub_tps = None
    cands = res.search.candidates
    out = {"id": r["id"], "seconds": secs, "n": len(cands), "published": pub}
    if not cands:
        out.update(rank=None, hit=False, top1_faster=None)
        return out
    tps_pub_ours = alone.candidates[0].tokens_per_s_per_gpu if alone.candidates else None
    seen, ranked = set(), []
    for c in cands:
        key = _sizes(c.data["layout"], c.data["training"]["micro_batch_size"])
        if key not in seen:
            seen.add(key)
            ranked.append((key, c.tokens_per_s_per_gpu))
    rank = None if tps_pub_ours is None else 1 + sum(1 for k, t in ranked if t > tps_pub_ours and k != pub)
    top5 = [t for _, t in ranked[:5]]
    in_top = rank is not None and rank <= 5
    near = tps_pub_ours is not None and any(abs(t / tps_pub_ours - 1) <= 0.03 for t in top5)
    out.update(
        rank=rank,
        hit=in_top or near,
        top1=res.candidates[0].parallel.label() + f" MBS{res.candidates[0].data['training']['micro_batch_size']}",
        top1_sizes=_sizes(res.candidates[0].data["layout"], res.candidates[0].data["training"]["micro_batch_size"]),
        top1_tps=res.candidates[0].tokens_per_s_per_gpu,
        published_ours_tps=tps_pub_ours,
        published_as_published_tps=pub_tps,
        top1_faster=None if pub_tps is None else res.candidates[0].tokens_per_s_per_gpu >= pub_tps,
    )
    return out


def superseded(row: dict, runs: list[dict]) -> dict | None:
    """A later release's run of the same model, GPU type and GPU count whose layout is exactly our top-1
    (TP, PP, VPP, CP, EP, ETP, MBS) and which measured faster than the published run of ``row``: the
    publisher itself replaced its layout by ours. None when there is none."""
    r = next(x for x in runs if x["id"] == row["id"])
    sc = r["scenario"]
    for o in runs:
        osc = o["scenario"]
        if (
            osc["model"] == sc["model"]
            and osc["system"] == sc["system"]
            and release_key(o["release"]) > release_key(r["release"])
            and _sizes(osc["layout"], osc["training"].get("micro_batch_size", 1)) == row.get("top1_sizes")
            and o["measured"]["tokens_per_s_per_gpu"] > r["measured"]["tokens_per_s_per_gpu"]
        ):
            return o
    return None


def load_runs() -> list[dict]:
    """The published runs (``tests/data/reference/published_runs.yaml``, the vendored reference data)."""
    path = REF / "published_runs.yaml"
    if not path.is_file():
        raise SystemExit(f"error: {path} not found: this benchmark reads the reference data vendored under tests/data")
    return yaml.safe_load(path.read_text())["runs"]


def evaluate(runs: list[dict], workers: int = 2, exact: bool = False) -> list[dict]:
    """:func:`one` for every run, in order, over ``workers`` processes (1: in this process); ``exact``: as
    :func:`one`."""
    job = functools.partial(one, exact=exact)
    if workers <= 1:
        return [job(r) for r in runs]
    with ProcessPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(job, runs))


def summarise(rows: list[dict]) -> dict:
    """The headline figures of :func:`one`'s rows: runs, hits (published layout, or one within 3 %, in our
    top 5), the published layout's rank (median; how many ranked 1, ≤ 5, ≤ 20, of those ranked), and how
    often our top-1 is predicted at least as fast as the layout as published."""
    ranks = [r["rank"] for r in rows if r["rank"] is not None]
    faster = [r["top1_faster"] for r in rows if r["top1_faster"] is not None]
    return {
        "runs": len(rows),
        "hits": sum(r["hit"] for r in rows),
        "ranked": len(ranks),
        "rank_median": statistics.median(ranks) if ranks else None,
        "top1": sum(1 for x in ranks if x == 1),
        "top5": sum(1 for x in ranks if x <= 5),
        "top20": sum(1 for x in ranks if x <= 20),
        "top1_faster": sum(faster),
        "top1_compared": len(faster),
    }


def _positive(text: str) -> int:
    """``--limit``'s value: a whole number of runs, at least 1."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"{n} runs: at least 1 is needed")
    return n


def _args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description="The planner against every published layout.")
    ap.add_argument("--limit", type=_positive, default=None, help="plan only the first N runs (printed, not written)")
    ap.add_argument("--exact", action="store_true", help="plan(exact=True); the figures are printed, not written")
    return ap.parse_args()


def main() -> None:
    args = _args()
    runs = load_runs()
    if args.limit is not None:
        runs = runs[: args.limit]
    exact = args.exact
    rows = evaluate(runs, exact=exact)
    fig = summarise(rows)
    hits = fig["hits"]
    ranks = [r["rank"] for r in rows if r["rank"] is not None]
    sup = {r["id"]: superseded(r, runs) for r in rows if not r["hit"]}
    sup = {k: v for k, v in sup.items() if v is not None}
    sup_text = "; ".join(
        f"{k} → {v['id']} ({v['measured']['tokens_per_s_per_gpu'] / next(x for x in runs if x['id'] == k)['measured']['tokens_per_s_per_gpu']:.1f}× faster)"
        for k, v in sorted(sup.items())
    )
    lines = [
        "# Planner quality against the published Megatron Bridge runs",
        "",
        "Generated by `python benchmarks/plan_quality.py` over `tests/data/reference/published_runs.yaml`: each run "
        "planned with its model, GPU, GPU count, sequence length, precision and GBS, and the numerics its recipe sets (held like the precision): optimizer-state dtypes and BF16 gradient reduction.",
        "",
        f"- published layout (or one predicted within 3 % of it) in our top 5: **{hits}/{len(rows)} "
        f"({100 * hits / len(rows):.1f} %)** (goal ≥ 80 %)",
        f"- rank of the published layout: median {fig['rank_median']:.0f}, "
        f"top-1 {fig['top1']}, top-5 {fig['top5']}, top-20 {fig['top20']} of {len(ranks)}",
        f"- our top-1 predicted at least as fast as the published layout as published: "
        f"{fig['top1_faster']}/{fig['top1_compared']}",
        f"- misses the publisher itself superseded: a later release runs exactly our top-1 and measured faster: "
        f"{len(sup)}" + (f" ({sup_text})" if sup else "") + "; not counted as hits above",
        f"- plan time per run: median {statistics.median(r['seconds'] for r in rows):.2f} s, "
        f"max {max(r['seconds'] for r in rows):.2f} s",
        "",
        "| run | published (TP,PP,VPP,CP,EP,ETP,MBS) | rank | hit | our top-1 | top-1 / published (ours) |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        ratio = (
            f"{r['top1_tps'] / r['published_ours_tps']:.2f}"
            if r.get("published_ours_tps") and r.get("top1_tps")
            else "–"
        )
        lines.append(
            f"| {r['id']} | {','.join(map(str, r['published']))} | {r['rank']} | {'yes' if r['hit'] else 'no'} | "
            f"{r.get('top1', '–')} | {ratio} |"
        )
    if not exact and args.limit is None:  # only the full default run writes the page and the figures
        (ROOT / "docs" / "plan_quality.md").write_text("\n".join(lines) + "\n")
        figures.update("planner", {**fig, "superseded": len(sup)})
    print("\n".join(lines[4:10]))


if __name__ == "__main__":
    main()
