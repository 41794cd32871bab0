"""Benchmark (not a test): `moeplan check` cold-start time (goal ≤ 1 s), `validate()` time per
layout (goal ≤ 0.2 ms) and one full memory estimate (goal ≤ 2 ms). Prints the figures; never fails on speed.

Usage: python benchmarks/bench_check.py [--quick]
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def cold_start(runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "moeplan.cli.app", "check", str(ROOT / "examples/deepseek_v3_gb300.yaml")],
            check=True,
            capture_output=True,
        )
        times.append(time.perf_counter() - t0)
    return times


def validate_per_layout(n: int) -> tuple[float, float]:
    from moeplan import load_scenario, validate

    scns = []
    for tp in (1, 2, 4, 8):
        for pp in (1, 2, 4, 8, 16):
            for cp in (1, 2, 4, 8):
                for ep in (1, 8, 32, 64):
                    scns.append(
                        load_scenario(
                            {
                                "model": "deepseek-ai/DeepSeek-V3",
                                "system": {"gpu": "h100", "num_gpus": 1024},
                                "training": {"seq_length": 131072, "micro_batch_size": 1, "global_batch_size": 1024},
                                "layout": {
                                    "tensor_model_parallel_size": tp,
                                    "pipeline_model_parallel_size": pp,
                                    "context_parallel_size": cp,
                                    "expert_model_parallel_size": ep,
                                    "recompute_granularity": "selective",
                                    "recompute_modules": ["moe_act"],
                                },
                            }
                        )
                    )
    scns = (scns * (n // len(scns) + 1))[:n]
    t0 = time.perf_counter()
    for s in scns:
        validate(s)
    v = (time.perf_counter() - t0) / n
    t0 = time.perf_counter()
    for s in scns[: min(n, 200)]:
        load_scenario({"model": "deepseek-ai/DeepSeek-V3", "layout": {"tensor_model_parallel_size": s.tp}})
    r = (time.perf_counter() - t0) / min(n, 200)
    return v, r


def memory_estimate(n: int) -> float:
    from moeplan import estimate_memory, load_scenario

    scn = load_scenario(str(ROOT / "examples/deepseek_v3_gb300.yaml"))
    estimate_memory(scn)
    t0 = time.perf_counter()
    for _ in range(n):
        estimate_memory(scn)
    return (time.perf_counter() - t0) / n


def main() -> None:
    quick = "--quick" in sys.argv
    cs = cold_start(2 if quick else 5)
    v, r = validate_per_layout(640 if quick else 6400)
    print(f"moeplan check cold start: median {statistics.median(cs):.3f} s over {len(cs)} runs (goal ≤ 1 s)")
    print(f"validate() per layout:    {v * 1e3:.3f} ms (goal ≤ 0.2 ms)")
    print(f"load_scenario() per call: {r * 1e3:.3f} ms")
    mem = memory_estimate(20 if quick else 200)
    print(f"estimate_memory() (DeepSeek-V3, 2 stages × 8 virtual): {mem * 1e3:.2f} ms (goal ≤ 2 ms)")


if __name__ == "__main__":
    main()
