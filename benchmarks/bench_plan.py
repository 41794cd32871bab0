"""Speed of the planner: DeepSeek-V3 on 1024 H100 at 131072 tokens, the full search space
(issue goal: ≤ 3 s on a 2-core machine, stretch ≤ 1 s). Prints seconds, layouts evaluated and
layouts per second (median of ``--repeat`` runs after one warm-up).

Usage: python benchmarks/bench_plan.py [--repeat N]
"""

from __future__ import annotations

import statistics
import sys
import time

from moeplan.plan import plan

REQUEST = {
    "model": "deepseek-ai/DeepSeek-V3",
    "system": {"gpu": "h100", "num_gpus": 1024},
    "training": {"seq_length": 131072, "precision": "fp8-blockwise"},
}


def main() -> None:
    repeat = int(sys.argv[sys.argv.index("--repeat") + 1]) if "--repeat" in sys.argv else 3
    t = time.perf_counter()
    plan(REQUEST)  # warm-up: catalog, imports
    print(f"first plan (cold caches): {time.perf_counter() - t:.2f} s")
    times, res = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        res = plan(REQUEST)
        times.append(time.perf_counter() - t)
    med = statistics.median(times)
    d = res.to_dict()
    n = d["considered_layouts"] + d["refined_variants"]
    print(
        f"plan DeepSeek-V3 / 1024 × H100 / 131072: {med:.2f} s median of {repeat} "
        f"({n} layouts and variants considered, {n / med:,.0f} per s; {d['fitting_layouts']} fit; "
        f"{sum(r['count'] for r in d['rejected'])} rejected)"
    )
    print(
        "top-1:",
        d["candidates"][0]["label"],
        f"{d['candidates'][0]['throughput']['tokens_per_s_per_gpu']:.0f} tok/s/GPU",
    )


if __name__ == "__main__":
    main()
