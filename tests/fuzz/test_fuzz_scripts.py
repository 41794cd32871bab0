"""Fuzz the script generators: shell and Hydra payloads in every free-text value that
reaches an export or a sweep (layout text, versions, names, environment values, a custom GPU id). A
payload is refused at input (exit 2) or written quoted: the script passes ``bash -n``, runs with a
recording ``srun`` on PATH in a sandbox without creating any file there (no injected command), and
hands ``run_recipe.py`` exactly the overrides moeplan meant (no smuggled ``checkpoint.save``); a smoke
script keeps ``train.train_iters`` and ``model.num_layers``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from harness import fuzz_settings, judge, listing, outside, run_cli, sandbox
from hypothesis import given
from hypothesis import strategies as st
from strategies import HYDRA_PAYLOADS, SHELL_PAYLOADS

from moeplan.io.imports import hydra_value

BASH = shutil.which("bash")
SMALL = {
    "model": "qwen3-30b-a3b",
    "system": {"gpu": "h100", "num_gpus": 16},
    "training": {"seq_length": 4096, "micro_batch_size": 1, "global_batch_size": 64},
    "layout": {"tensor_model_parallel_size": 1, "expert_model_parallel_size": 8},
}
GPU = {"id": "mygpu", "usable_hbm_gib": 80, "peak_dense_tflops": {"bf16": 989}, "compute_capability": 9.0}
#: where a payload goes: a path of keys into the scenario
PLACES = [
    ("layout", "moe_router_load_balancing_type"),
    ("layout", "pipeline_model_parallel_layout"),
    ("layout", "recompute_modules"),
    ("versions", "container"),
    ("versions", "megatron_core"),
    ("name",),
    ("environment", "MY_VAR"),
    ("system", "gpu", "id"),
    ("system", "gpu", "name"),
]
PAYLOADS = SHELL_PAYLOADS + HYDRA_PAYLOADS
#: the recording srun: writes its arguments, one per line, NUL-free, beside the script
STUB = '#!/bin/bash\nfor a in "$@"; do printf "%s\\0" "$a"; done > "$SRUN_RECORD"\n'
SKIP_NO_BASH = pytest.mark.skipif(BASH is None, reason="bash not found")


def _scenario(place: tuple, payload: str) -> dict:
    sc = json.loads(json.dumps(SMALL))
    if place[:2] == ("system", "gpu"):
        sc["system"]["gpu"] = dict(GPU)
    node = sc
    for k in place[:-1]:
        node = node.setdefault(k, {})
    node[place[-1]] = [payload] if place[-1] == "recompute_modules" else payload
    return sc


def run_script(script: Path, box: Path) -> tuple[list[str], list[str]]:
    """Run ``script`` with the recording ``srun`` first on PATH, in ``box``; returns (the arguments
    srun received, files that appeared in ``box`` other than the record)."""
    stub_dir = box / ".stub"
    stub_dir.mkdir(exist_ok=True)
    (stub_dir / "srun").write_text(STUB)
    (stub_dir / "srun").chmod(0o755)
    record = stub_dir / "record"
    before = set(listing(box))
    env = {
        "PATH": f"{stub_dir}:{os.environ.get('PATH', '')}",
        "CONTAINER": "img",
        "RECIPE": "r",
        "SRUN_RECORD": str(record),
    }
    subprocess.run([BASH, str(script)], cwd=box, env=env, capture_output=True, timeout=30, check=False)  # noqa: S603
    new = [p for p in set(listing(box)) - before if not p.startswith(".stub")]
    args = record.read_bytes().decode().split("\0")[:-1] if record.exists() else []
    return args, new


def overrides_of(srun_args: list[str]) -> dict[str, object]:
    """The Hydra overrides run_recipe.py received (after ``--recipe R``), as key → value."""
    if "--recipe" not in srun_args:
        return {}
    rest = srun_args[srun_args.index("--recipe") + 2 :]
    return {k: hydra_value(v) for k, _, v in (a.partition("=") for a in rest)}


def _check_script(script: Path, box: Path, payload: str) -> list[str]:
    problems = []
    syntax = subprocess.run([BASH, "-n", str(script)], capture_output=True, text=True, check=False)  # noqa: S603
    if syntax.returncode:
        problems.append(f"injected: bash -n fails: {syntax.stderr[:200]}")
    args, new = run_script(script, box)
    if new:
        problems.append(f"injected: files created by running the script: {new}")
    ov = overrides_of(args)
    smuggled = [k for k in ov if k.split(".")[0] in ("checkpoint", "logger") or not k]
    if smuggled:
        problems.append(f"injected: overrides smuggled in: {smuggled}")
    if not ov:
        problems.append("partial: srun got no overrides")
    return problems


@SKIP_NO_BASH
@fuzz_settings(25)
@given(place=st.sampled_from(PLACES), payload=st.sampled_from(PAYLOADS) | st.text(max_size=20))
def test_payloads_in_exported_scripts(place, payload):
    with sandbox() as box:
        (box / "s.yaml").write_text(yaml.safe_dump(_scenario(place, payload)))
        out = run_cli(["export", box / "s.yaml", "-f", "slurm", "-o", box / "launch.sh", "--force"])
        problems = [f"outside: {s}" for s in outside({}, listing(box), {"s.yaml", "launch.sh"})]
        if out.code == 0:
            problems += _check_script(box / "launch.sh", box, payload)
            for fmt in ("mbridge-overrides", "megatron-lm-args"):
                text = run_cli(["export", box / "s.yaml", "-f", fmt, "--force"]).stdout
                keys = [ln.split("=", 1)[0] for ln in text.splitlines() if ln and not ln.startswith(("#", "--"))]
                if any(k.split(".")[0] in ("checkpoint", "logger") for k in keys):
                    problems.append(f"injected: {fmt} carries a smuggled override")
        judge("exports", out, problems)


@SKIP_NO_BASH
@fuzz_settings(3)
@given(place=st.sampled_from(PLACES), payload=st.sampled_from(SHELL_PAYLOADS))
def test_payloads_in_sweep_scripts(place, payload):
    with sandbox() as box:
        (box / "s.yaml").write_text(yaml.safe_dump(_scenario(place, payload)))
        out = run_cli(["sweep", box / "s.yaml", "-o", box / "sw", "--top", "1", "--no-mbs-variants"])
        problems = [f"outside: {s}" for s in outside({}, listing(box), {"s.yaml", "sw"})]
        if out.code == 0:
            problems += sweep_problems(box / "sw", payload)
        judge("sweeps", out, problems)


def sweep_problems(sw: Path, payload: str = "") -> list[str]:
    """Run every launch and smoke script of a sweep with the recording srun: no injection, and each
    smoke run keeps its reduced length."""
    problems = []
    for script in sorted(sw.glob("*/*.sh")):
        problems += _check_script(script, script.parent, payload)
        if script.name == "smoke.sh":
            ov = overrides_of(run_script(script, script.parent)[0])
            if ov.get("train.train_iters") != 20:
                problems.append(f"partial: {script.parent.name}/smoke.sh lost train.train_iters=20")
            entries = json.loads((sw / "manifest.json").read_text())["entries"]
            entry = next(e for e in entries if e["id"] == script.parent.name)
            proxy = entry.get("smoke", "").startswith("proxy")
            if proxy and "model.num_layers" not in ov:
                problems.append(f"partial: {script.parent.name}/smoke.sh lost model.num_layers")
    return problems
