"""Config files of growing size through the commands people read: a Hugging Face ``config.json``
(10 KB, 100 KB, 1 MB, padded with a list of short strings, the most objects per byte) as ``--model``
of ``check``, ``estimate`` and ``plan``, and a scenario YAML (10 KB, 100 KB; 1 MB in the long profile)
padded with environment variables, through ``check`` and ``estimate``. Each run is the
human-readable output at 80 columns, held to the fuzzers' contract (:func:`harness.judge`) and to
bounds that grow linearly with the file: CPU seconds (``time.process_time``) and peak Python memory
(``tracemalloc``). A reader or renderer that is quadratic in the file, or re-reads it per candidate,
breaks them by a wide margin (a 250 KB config.json took 38 s to plan when it was read per candidate).
"""

from __future__ import annotations

import json
import pathlib
import time
import tracemalloc

import yaml
from harness import LONG, judge, run_cli, sandbox

ROOT = pathlib.Path(__file__).resolve().parents[2]
BASE_CONFIG = json.loads((ROOT / "src/moeplan/catalog/data/models/Qwen__Qwen3-30B-A3B.json").read_text())
SCENARIO = {
    "model": "qwen3-30b-a3b",
    "system": {"gpu": "h100", "num_gpus": 16},
    "training": {"seq_length": 4096, "micro_batch_size": 1, "global_batch_size": 64},
    "layout": {"tensor_model_parallel_size": 1, "expert_model_parallel_size": 8},
}
#: file sizes in bytes; the pure-Python YAML reader takes about 2 s per MB, so 1 MB of YAML is for
#: the long profile only
CONFIG_SIZES = (10_000, 100_000, 1_000_000)
YAML_SIZES = (10_000, 100_000, 1_000_000) if LONG else (10_000, 100_000)
MODEL_ARGS = ["--gpu", "h100", "--num-gpus", "8", "--seq-length", "4096"]


def cpu_bound_s(size: int, per_mb_s: float) -> float:
    """CPU seconds a run on a file of ``size`` bytes may take: 3 s (the command itself, on a slow
    shared machine) plus ``per_mb_s`` per MB of file."""
    return 3.0 + per_mb_s * size / 1e6


def memory_bound_bytes(size: int) -> int:
    """Peak traced Python memory a run on a file of ``size`` bytes may reach: 64 MiB plus 64 bytes per
    byte of file (a parsed short string is about 50 bytes of objects)."""
    return 64 * 2**20 + 64 * size


def padded_config(folder: pathlib.Path, size: int) -> pathlib.Path:
    """The packaged Qwen3-30B-A3B config.json with a ``_padding`` list bringing it to about ``size``
    bytes (14 bytes per entry)."""
    cfg = dict(BASE_CONFIG)
    cfg["_padding"] = ["y" * 10] * max(0, (size - len(json.dumps(BASE_CONFIG))) // 14)
    path = folder / f"config_{size}.json"
    path.write_text(json.dumps(cfg))
    return path


def padded_scenario(folder: pathlib.Path, size: int) -> pathlib.Path:
    """A small scenario with environment variables bringing it to about ``size`` bytes (32 bytes
    per variable)."""
    env = {f"MOEPLAN_PAD_{i:07d}": "v" * 8 for i in range(max(0, (size - 250) // 32))}
    path = folder / f"scenario_{size}.yaml"
    path.write_text(yaml.safe_dump({**SCENARIO, "environment": env}))
    return path


def _bounded(cls: str, args: list, size: int, per_mb_s: float, memory: bool = True) -> None:
    """Run ``args`` as people read it (80 columns) and judge it, with the CPU-time bound and (when
    ``memory``) the peak-memory bound of a file of ``size`` bytes."""
    if memory:
        tracemalloc.start()
    t0 = time.process_time()
    try:
        out = run_cli(args, text=True)
        cpu = time.process_time() - t0
        peak = tracemalloc.get_traced_memory()[1] if memory else 0
    finally:
        if memory:
            tracemalloc.stop()
    problems = []
    if cpu > cpu_bound_s(size, per_mb_s):
        problems.append(f"slow: {cpu:.1f} s CPU for {size:,} bytes (bound {cpu_bound_s(size, per_mb_s):.1f} s)")
    if peak > memory_bound_bytes(size):
        problems.append(
            f"memory: {peak / 2**20:.0f} MiB for {size:,} bytes (bound {memory_bound_bytes(size) / 2**20:.0f})"
        )
    judge(cls, out, problems)


def test_growing_config_json_models():
    """check and estimate on config.json models of 10 KB, 100 KB and 1 MB within linear time and
    memory bounds; plan (hundreds of candidates) on the 1 MB one within its time bound."""
    with sandbox() as box:
        for size in CONFIG_SIZES:
            for command in ("check", "estimate"):
                cfg = padded_config(box, size)  # a new file each run: nothing read before helps
                _bounded("config sizes", [command, "--model", cfg, *MODEL_ARGS], size, per_mb_s=4.0)
        cfg = padded_config(box, CONFIG_SIZES[-1])
        _bounded("config sizes", ["plan", "--model", cfg, *MODEL_ARGS, "--top", "1"], CONFIG_SIZES[-1], 20.0, False)


def test_growing_scenario_yaml():
    """check and estimate on scenario YAML of 10 KB and 100 KB (and 1 MB in the long profile) within
    linear time and memory bounds."""
    with sandbox() as box:
        for size in YAML_SIZES:
            sc = padded_scenario(box, size)
            for command in ("check", "estimate"):
                _bounded("scenario sizes", [command, sc], size, per_mb_s=15.0)
