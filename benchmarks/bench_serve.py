"""Speed of ``moeplan serve``: how long the server takes to start (the command launched until the page's
API answers), and a plan through the JSON API against the same plan in-process (``plan_report``, what
the CLI calls) and against the whole CLI command (``moeplan plan ... --json``, a new process each time).
The request is a long-context plan: DeepSeek-V3 at 131072 tokens on 256 H100, FP8 blockwise. Medians of
``--repeat`` runs after one warm-up; the server runs in its own process, as a user starts it. Beside
each wall-clock time, the CPU seconds the work took (the server's process read from /proc, this
process, the CLI's child process), which a machine shared with other work does not inflate.

Usage: python benchmarks/bench_serve.py [--repeat N]
"""

from __future__ import annotations

import json
import os
import re
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from moeplan.api import ScenarioFlags, plan_report

REQUEST = {
    "model": "deepseek-ai/DeepSeek-V3",
    "gpu": "h100",
    "num_gpus": 256,
    "seq_length": 131072,
    "precision": "fp8-blockwise",
}
CLI_ARGS = ["plan", "--model", "deepseek-ai/DeepSeek-V3", "--gpu", "h100", "--num-gpus", "256", "--seq-length", "131072",
            "--precision", "fp8-blockwise", "--json"]  # fmt: skip


def _moeplan() -> list[str]:
    exe = Path(sys.executable).parent / "moeplan"
    return [str(exe)] if exe.exists() else [shutil.which("moeplan") or "moeplan"]


def cpu_of(pid: int) -> float | None:
    """CPU seconds (user + system) a process has used so far; None where /proc is not there."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_server() -> tuple[subprocess.Popen, str, float]:
    """``moeplan serve --port 0`` in a new process: (process, URL, seconds until /api/health answered)."""
    t = time.perf_counter()
    proc = subprocess.Popen([*_moeplan(), "serve", "--port", "0"], stderr=subprocess.PIPE, text=True)
    line = proc.stderr.readline()
    match = re.search(r"http://\S+/", line)
    if not match:
        proc.kill()
        raise SystemExit(f"moeplan serve did not start: {line!r}")
    url = match.group(0)
    while True:
        try:
            with urllib.request.urlopen(url + "api/health", timeout=5) as r:
                json.load(r)
            break
        except OSError:
            if time.perf_counter() - t > 60:
                raise
            time.sleep(0.02)
    return proc, url, time.perf_counter() - t


def stop_server(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=30)


def api_plan(url: str, pid: int) -> tuple[float, float | None]:
    """(wall seconds, server CPU seconds) of one POST /api/plan."""
    body = json.dumps(REQUEST).encode()
    req = urllib.request.Request(url + "api/plan", body, {"Content-Type": "application/json"})
    c, t = cpu_of(pid), time.perf_counter()
    with urllib.request.urlopen(req, timeout=300) as r:
        doc = json.load(r)
    wall, c2 = time.perf_counter() - t, cpu_of(pid)
    assert doc["candidates"], "the plan found nothing"
    return wall, (c2 - c if c is not None and c2 is not None else None)


def library_plan() -> tuple[float, float]:
    """(wall, CPU) seconds of ``plan_report`` in this process."""
    flags = ScenarioFlags(**REQUEST)
    c, t = time.process_time(), time.perf_counter()
    plan_report(None, flags)
    return time.perf_counter() - t, time.process_time() - c


def cli_plan() -> tuple[float, float]:
    """(wall, CPU) seconds of the CLI command in a new process."""

    def children() -> float:
        ru = resource.getrusage(resource.RUSAGE_CHILDREN)
        return ru.ru_utime + ru.ru_stime

    c, t = children(), time.perf_counter()
    subprocess.run([*_moeplan(), *CLI_ARGS], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t, children() - c


def _med(pairs: list[tuple[float, float | None]]) -> tuple[float, float | None]:
    cpus = [c for _, c in pairs if c is not None]
    return statistics.median(w for w, _ in pairs), (statistics.median(cpus) if cpus else None)


def _fmt(wall: float, cpu: float | None) -> str:
    return f"{wall:5.2f} s wall" + (f", {cpu:5.2f} s CPU" if cpu is not None else "")


def main() -> None:
    repeat = int(sys.argv[sys.argv.index("--repeat") + 1]) if "--repeat" in sys.argv else 3
    starts = []
    for _ in range(repeat):
        proc, url, secs = start_server()
        starts.append((secs, cpu_of(proc.pid)))
        stop_server(proc)
    wall, cpu = _med(starts)
    print(f"startup (moeplan serve launched → /api/health answers), median of {repeat}: {_fmt(wall, cpu)}")
    proc, url, _ = start_server()
    try:
        first = api_plan(url, proc.pid)
        api = _med([api_plan(url, proc.pid) for _ in range(repeat)])
    finally:
        stop_server(proc)
    library_plan()  # warm-up: catalog, imports
    lib = _med([library_plan() for _ in range(repeat)])
    cli = _med([cli_plan() for _ in range(repeat)])
    print(f"plan DeepSeek-V3 / 256 × H100 / 131072 / fp8-blockwise, median of {repeat}:")
    print(f"  POST /api/plan (HTTP, warm server)         {_fmt(*api)}   (first after start: {_fmt(*first)})")
    print(f"  plan_report in-process (what the CLI calls) {_fmt(*lib)}")
    print(f"  `moeplan plan ... --json` (a new process)   {_fmt(*cli)}")
    if api[1] is not None:
        print(
            f"  the API's own cost: {api[1] - lib[1]:+.2f} s CPU over plan_report; {api[0] / cli[0]:.2f}× the CLI's wall time"
        )


if __name__ == "__main__":
    main()
