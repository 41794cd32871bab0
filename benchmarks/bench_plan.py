"""Speed and agreement of the planner, this working tree beside an older commit, in one run.

Two requests are planned in full (the plan and its two baselines), each in a child process per tree
(``PYTHONPATH`` set to that tree's ``src``), timed in CPU seconds (``time.process_time`` inside the
child: the machine is shared and wall time is noisy):

- DeepSeek-V3 on 1,024 H100 at 131,072 tokens, FP8 blockwise: the median of ``--repeat`` plans after
  one warm-up (goal ≤ 1 s);
- Kimi-K2 (moonshotai/Kimi-K2-Instruct) on 4,096 H100 at 262,144 tokens, FP8 blockwise: one plan after
  the warm-up (goal ≤ 3 s).

The older commit (``--against``, default 282b6d9) is checked out with ``git worktree add`` in a
temporary folder and removed afterwards; the main work tree is not touched. Planner agreement with
the published layouts (``benchmarks/plan_quality.py``: the published layout, or one predicted within
3 % of it, in the top 5) is read from each tree's ``docs/plan_quality.md``; ``--agreement N`` also
recomputes this tree's over the first N published runs (all 113 take minutes).

The two trees run in alternation, ``--rounds`` times (default 3), each round one child process per tree
with ``--repeat`` plans: the CPU seconds are the median over every round, and the ratio of this tree to
the older one is the median of the rounds' ratios (a shared machine's speed drifts; back-to-back runs
of the two trees see the same machine).

Usage: python benchmarks/bench_plan.py [--repeat N] [--rounds N] [--against COMMIT] [--agreement N]
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DSV3 = {
    "model": "deepseek-ai/DeepSeek-V3",
    "system": {"gpu": "h100", "num_gpus": 1024},
    "training": {"seq_length": 131072, "precision": "fp8-blockwise"},
}
KIMI = {
    "model": "moonshotai/Kimi-K2-Instruct",
    "system": {"gpu": "h100", "num_gpus": 4096},
    "training": {"seq_length": 262144, "precision": "fp8-blockwise"},
}
AGREEMENT = re.compile(r"in our top 5: \*\*(\d+)/(\d+) \(([\d.]+) %\)\*\*")


def _timed_plan(request: dict) -> tuple[float, dict]:
    """(CPU seconds, the plan's JSON document) of one plan in this process."""
    from moeplan.plan import plan

    t = time.process_time()
    res = plan(request)
    return time.process_time() - t, res.to_dict()


def _summary(cpu: list[float], d: dict) -> dict:
    top = d["candidates"][0] if d["candidates"] else None
    return {
        "cpu_s": statistics.median(cpu),
        "cpu_all_s": [round(x, 3) for x in cpu],
        "considered": d.get("considered_layouts", 0) + d.get("refined_variants", 0),
        "top1": top["label"] if top else None,
        "tokens_per_s_per_gpu": top["throughput"]["tokens_per_s_per_gpu"] if top else None,
    }


def child(repeat: int) -> None:
    """Measure in this process (the tree on ``PYTHONPATH``) and print one JSON line."""
    import moeplan

    out: dict = {"moeplan": str(Path(moeplan.__file__).parents[1])}
    _timed_plan(DSV3)  # warm-up: catalog, imports, fitted constants
    runs = [_timed_plan(DSV3) for _ in range(repeat)]
    out["dsv3"] = _summary([c for c, _ in runs], runs[-1][1])
    try:
        cpu, d = _timed_plan(KIMI)
        out["kimi"] = _summary([cpu], d)
    except Exception as exc:  # an older tree may not plan it: say so in the table
        out["kimi"] = {"error": f"{type(exc).__name__}: {str(exc)[:120]}"}
    print(json.dumps(out))


def _run_tree(src: Path, repeat: int) -> dict:
    """Run :func:`child` under ``src`` in a subprocess; its JSON (or the error it printed)."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", "--repeat", str(repeat)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        return {"error": proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"exit {proc.returncode}"}
    return json.loads(lines[-1])


def _merge(rounds: list[dict]) -> dict:
    """One tree's rounds (:func:`_run_tree` documents) as one: every DSV3 plan's CPU seconds together
    and their median, Kimi-K2's median over the rounds; the first error any round gave, if one did."""
    bad = [r for r in rounds if "error" in r]
    if bad:
        return bad[0]
    out = json.loads(json.dumps(rounds[-1]))
    out["dsv3"]["cpu_all_s"] = [x for r in rounds for x in r["dsv3"]["cpu_all_s"]]
    out["dsv3"]["cpu_s"] = statistics.median(out["dsv3"]["cpu_all_s"])
    kimi = [r["kimi"]["cpu_s"] for r in rounds if "cpu_s" in r.get("kimi", {})]
    if kimi:
        out["kimi"]["cpu_s"] = statistics.median(kimi)
    return out


def _ratio(new: list[dict], old: list[dict]) -> str:
    """This tree's DSV3 CPU seconds over the other's: the median of the rounds' ratios (each round runs
    both trees back to back, so a machine that speeds up or slows down between rounds moves both)."""
    pairs = [
        (a["dsv3"]["cpu_s"], b["dsv3"]["cpu_s"]) for a, b in zip(new, old, strict=True) if "dsv3" in a and "dsv3" in b
    ]
    if not pairs:
        return "n/a"
    each = [a / b for a, b in pairs]
    return f"{statistics.median(each):.2f} (rounds: {', '.join(f'{x:.2f}' for x in each)})"


def _agreement_doc(tree: Path) -> str:
    """The agreement figure ``docs/plan_quality.md`` of ``tree`` states."""
    doc = tree / "docs" / "plan_quality.md"
    m = AGREEMENT.search(doc.read_text()) if doc.exists() else None
    return f"{m.group(1)}/{m.group(2)} ({m.group(3)} %)" if m else "n/a"


def _agreement_now(limit: int) -> str:
    """This tree's agreement recomputed over the first ``limit`` published runs."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import plan_quality

    rows = plan_quality.evaluate(plan_quality.load_runs()[:limit])
    hits = sum(1 for r in rows if r.get("hit"))
    return f"{hits}/{len(rows)} ({100 * hits / max(1, len(rows)):.1f} %) over the first {len(rows)} runs"


def _cell(doc: dict, key: str, field: str, fmt: str) -> str:
    part = doc.get(key) or {}
    if "error" in doc or "error" in part:
        return "error: " + (doc.get("error") or part.get("error", ""))[:60]
    return format(part[field], fmt) if part.get(field) is not None else "n/a"


def _print_table(new: dict, old: dict, against: str, agree: tuple[str, str], ratio: str) -> None:
    rows = [
        ("DSV3 1024×H100 128K: CPU s (median)", "dsv3", "cpu_s", ".2f"),
        ("  top-1", "dsv3", "top1", ""),
        ("  top-1 tokens/s/GPU", "dsv3", "tokens_per_s_per_gpu", ",.1f"),
        ("  layouts and variants considered", "dsv3", "considered", ","),
        ("Kimi-K2 4096×H100 256K: CPU s", "kimi", "cpu_s", ".2f"),
        ("  top-1", "kimi", "top1", ""),
        ("  top-1 tokens/s/GPU", "kimi", "tokens_per_s_per_gpu", ",.1f"),
    ]
    w = max(len(r[0]) for r in rows) + 2
    print(f"{'':{w}}{'this tree':>34}{against:>34}")
    for label, key, field, fmt in rows:
        print(f"{label:{w}}{_cell(new, key, field, fmt):>34}{_cell(old, key, field, fmt):>34}")
    print(f"{'agreement (docs/plan_quality.md)':{w}}{agree[0]:>34}{agree[1]:>34}")
    each = (new.get("dsv3", {}).get("cpu_all_s"), old.get("dsv3", {}).get("cpu_all_s"))
    print(f"DSV3 CPU s, this tree ÷ {against}: {ratio}")
    print(f"DSV3 CPU s of each plan: this tree {each[0]}, {against} {each[1]}")


def main() -> None:
    argv = sys.argv
    repeat = int(argv[argv.index("--repeat") + 1]) if "--repeat" in argv else 3
    if "--child" in argv:
        child(repeat)
        return
    against = argv[argv.index("--against") + 1] if "--against" in argv else "282b6d9"
    rounds = int(argv[argv.index("--rounds") + 1]) if "--rounds" in argv else 3
    news: list[dict] = []
    olds: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="moeplan-bench-") as tmp:
        wt = Path(tmp) / "tree"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(wt), against], check=True)
        try:
            for _ in range(rounds):  # the trees alternate, so that a drifting machine moves both alike
                news.append(_run_tree(ROOT / "src", repeat))
                olds.append(_run_tree(wt / "src", repeat))
            agree = (_agreement_doc(ROOT), _agreement_doc(wt))
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(wt)], check=False)
    if "--agreement" in argv:
        agree = (_agreement_now(int(argv[argv.index("--agreement") + 1])), agree[1])
    _print_table(_merge(news), _merge(olds), against, agree, _ratio(news, olds))


if __name__ == "__main__":
    main()
