"""Time and peak memory of ``moeplan log`` and ``moeplan compare`` on big training logs.

Writes two synthetic Megatron-LM logs of ``--iterations`` iterations each (default 10^6; an argument
dump, then one ``training_log`` line per iteration in Megatron's format, about 300 bytes each, with a
memory report every 1,000 iterations; B is 2 % slower than A), runs ``moeplan log A`` and
``moeplan compare A B`` as separate processes and reports each one's wall time and peak resident
memory (``wait4``'s ``ru_maxrss``), with the logs' size for scale.

Usage::

    python benchmarks/bench_logs.py [--iterations N] [--dir DIR] [--keep] [--markdown]

Recorded results (before → after the streaming parser) are in ``benchmarks/fuzz_report.md``.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DUMP = """------------------------ arguments ------------------------
  tensor_model_parallel_size ...................... 1
  pipeline_model_parallel_size .................... 1
  expert_model_parallel_size ...................... 8
  seq_length ...................................... 4096
  micro_batch_size ................................ 1
  global_batch_size ............................... 512
  world_size ...................................... 64
-------------------- end of arguments ---------------------
"""


def write_log(path: Path, iterations: int, base_ms: float, seed: int) -> int:
    """Write a synthetic log of ``iterations`` iterations; returns its size in bytes."""
    rng = random.Random(seed)
    with path.open("w") as fh:
        fh.write(DUMP)
        chunk = []
        for i in range(1, iterations + 1):
            ms = base_ms * (3.0 if i <= 5 else 1.0) * (1 + rng.gauss(0, 0.01))
            chunk.append(
                f" [2025-10-02 22:52:07] iteration {i:8d}/{iterations:8d} | consumed samples: {512 * i:12d} | "
                f"elapsed time per iteration (ms): {ms:.1f} | throughput per GPU (TFLOP/s/GPU): "
                f"{456.7 * base_ms / ms:.1f} | learning rate: 3.000000E-04 | global batch size:   512 | "
                f"lm loss: {2.5 + rng.random():.6E} | loss scale: 1.0 | grad norm: {0.2 + rng.random() / 10:.3f} | "
                "number of skipped iterations:   0 | number of nan iterations:   0 |\n"
            )
            if i % 1000 == 0:
                chunk.append(
                    f"[Rank 0] (after {i} iterations) memory (MB) | allocated: 11908.05 | max allocated: "
                    "12712.43 | reserved: 12954.0 | max reserved: 12954.0\n"
                )
                fh.write("".join(chunk))
                chunk = []
        fh.write("".join(chunk))
    return path.stat().st_size


def measure(args: list[str]) -> tuple[float, float, float, int]:
    """(wall seconds, CPU seconds, peak resident MiB, exit code) of one ``moeplan`` process."""
    cmd = [sys.executable, "-m", "moeplan.cli.app", *args]  # PYTHONPATH picks the moeplan measured
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # noqa: S603
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, proc.returncode


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iterations", type=int, default=10**6)
    ap.add_argument("--dir", type=Path, default=None, help="where to write the logs (default: a temp dir)")
    ap.add_argument("--keep", action="store_true", help="keep the logs")
    ap.add_argument("--reuse", action="store_true", help="reuse the logs in --dir when they exist")
    ap.add_argument("--markdown", action="store_true", help="print a Markdown table row per command")
    ns = ap.parse_args(argv)
    work = ns.dir or Path(tempfile.mkdtemp(prefix="moeplan-bench-logs-"))
    work.mkdir(parents=True, exist_ok=True)
    a, b = work / "a.log", work / "b.log"
    try:
        if ns.reuse and a.exists() and b.exists():
            size = a.stat().st_size
        else:
            size = write_log(a, ns.iterations, 1000.0, 1)
            write_log(b, ns.iterations, 1020.0, 2)
        rows = [
            ("log A", *measure(["log", "--json", str(a)])),
            ("compare A B", *measure(["compare", "--json", str(a), str(b)])),
        ]
    finally:
        if not ns.keep:
            shutil.rmtree(work, ignore_errors=True) if ns.dir is None else (a.unlink(True), b.unlink(True))
    print(f"{ns.iterations:,} iterations per log, {size / 2**20:.0f} MiB per log")
    for name, wall, cpu, rss, rc in rows:
        if ns.markdown:
            print(f"| `{name}` | {wall:.1f} s | {cpu:.1f} s | {rss:,.0f} MiB | {rc} |")
        else:
            print(f"{name:12s} {wall:8.1f} s wall {cpu:8.1f} s CPU {rss:10,.0f} MiB peak  exit {rc}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
