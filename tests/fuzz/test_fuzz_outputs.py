"""Fuzz the writers: every command that writes, pointed at hostile targets (its own input,
a symlink or hard link to it, a symlink loop, a dangling link, a folder, a FIFO, a missing folder, an
empty name, a name too long) must exit 0, 1 or 2, leave its inputs unchanged, write nothing but the
stated output (no temporary file left), and either write the output whole or leave it as it was."""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import time

import yaml
from harness import fuzz_settings, judge, listing, outside, run_cli, sandbox
from hypothesis import given
from hypothesis import strategies as st

from moeplan.io.write import TMP_MARKER

ROOT = pathlib.Path(__file__).resolve().parents[2]
SMALL = (
    "model: qwen3-30b-a3b\nsystem: {gpu: h100, num_gpus: 16}\n"
    "training: {seq_length: 4096, micro_batch_size: 1, global_batch_size: 64}\n"
    "layout: {tensor_model_parallel_size: 1, expert_model_parallel_size: 8}\n"
)
LOG = "".join(
    f" iteration {i:8d}/     100 | elapsed time per iteration (ms): {1000.0 + (i % 7):.1f} | lm loss: 1.0E+00 |\n"
    for i in range(1, 40)
)
RUNS = {
    "runs": [
        {
            "id": f"r{gbs}",
            "release": "25.09",
            "scenario": yaml.safe_load(SMALL)
            | {"training": {"seq_length": 4096, "micro_batch_size": 1, "global_batch_size": gbs}},
            "measured": {"tokens_per_s_per_gpu": 5000 + gbs},
        }
        for gbs in (64, 128)
    ]
}
#: writer → (its input files: name → text, the arguments with OUT for the target, the output's suffix)
WRITERS = {
    "export": ({"s.yaml": SMALL}, ["export", "s.yaml", "-f", "slurm", "-o", "OUT"], ".sh"),
    "plan --save": ({"s.yaml": SMALL}, ["plan", "s.yaml", "--top", "1", "--save", "OUT"], ".yaml"),
    "plan --report": ({"s.yaml": SMALL}, ["plan", "s.yaml", "--top", "1", "--report", "OUT"], ".html"),
    "calibrate -o": ({"runs.yaml": yaml.safe_dump(RUNS)}, ["calibrate", "runs.yaml", "-o", "OUT"], ".json"),
    "vlm-stats -o": (
        {"m.jsonl": (ROOT / "examples" / "vlm_manifest.jsonl").read_text()},
        ["vlm-stats", "m.jsonl", "-s", "8192", "-o", "OUT"],
        ".yaml",
    ),
    "compare --plot": ({"a.log": LOG, "b.log": LOG}, ["compare", "a.log", "b.log", "--plot", "OUT"], ".png"),
    "recipes --write": ({}, ["recipes", "--kind", "published", "--model", "qwen3-30b-a3b", "--write", "OUT"], "/"),
}
TARGETS = [
    "new",
    "existing",
    "the input",
    "symlink to the input",
    "hard link to the input",
    "symlink loop",
    "dangling symlink",
    "symlink to a new file",
    "folder",
    "fifo",
    "missing folder",
    "empty",
    "too long",
    "newline in the name",
    "symlink to a folder",
    "chain of links to the input",
]


def _digest(p: pathlib.Path) -> str | None:
    try:
        return hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else None
    except OSError:
        return None


def _target(box: pathlib.Path, kind: str, first_input: str | None, suffix: str) -> tuple[str, set[str]]:
    """Make the target of ``kind`` in ``box``; returns (the path given, the names a write may touch)."""
    name = "out" + (suffix if suffix != "/" else "")
    ok = {name}
    if kind == "existing":
        (box / name).write_text("old content\n") if suffix != "/" else (box / name).mkdir()
    elif kind in ("the input", "symlink to the input", "hard link to the input") and first_input:
        if kind == "the input":
            return first_input, set()
        if kind == "symlink to the input":
            os.symlink(first_input, box / name)
        else:
            os.link(box / first_input, box / name)
        return name, set()
    elif kind == "chain of links to the input" and first_input:
        os.symlink(first_input, box / "link1")
        os.symlink("link1", box / name)
        return name, set()
    elif kind == "newline in the name":
        weird = "out\nx" + (suffix if suffix != "/" else "")
        return weird, {weird}
    elif kind == "symlink to a folder":
        (box / "real_dir").mkdir()
        os.symlink("real_dir", box / name)
        return name, {name, "real_dir"}
    elif kind == "symlink loop":
        os.symlink("loop2" + suffix.strip("/"), box / name)
        os.symlink(name, box / ("loop2" + suffix.strip("/")))
        return name, set()
    elif kind == "dangling symlink" or kind == "symlink to a new file":
        target = "real" + (suffix if suffix != "/" else "")
        os.symlink(target if kind == "symlink to a new file" else "nowhere/x", box / name)
        return name, {name, target}
    elif kind == "folder":
        (box / ("d" + suffix.strip("/"))).mkdir()
        return "d" + suffix.strip("/"), {"d" + suffix.strip("/")}
    elif kind == "fifo":
        os.mkfifo(box / name)
    elif kind == "missing folder":
        return "no/such/" + name, set()
    elif kind == "empty":  # typer reads "" as Path(""), the current folder: a folder writer writes there
        return "", {"*"} if suffix == "/" else set()
    elif kind == "too long":
        return "x" * 300 + suffix.strip("/"), set()
    return name, ok


def _complete(path: pathlib.Path, suffix: str) -> bool:
    """The output is whole: it parses as what the writer writes."""
    if suffix == "/":
        return path.is_dir() and all(yaml.safe_load(p.read_text()) for p in path.glob("*.yaml"))
    data = path.read_bytes()
    if suffix == ".png":
        return data.startswith(b"\x89PNG") and data.rstrip().endswith(b"IEND\xaeB`\x82")
    if suffix == ".html":
        return data.rstrip().endswith(b"</html>")
    if suffix == ".json":
        return isinstance(json.loads(data), dict)
    if suffix == ".sh":
        return data.startswith(b"#!/bin/bash") and data.rstrip().endswith(b'"${OVERRIDES[@]}"')
    return yaml.safe_load(data) is not None


def _run_writer(writer: str, kind: str) -> None:
    inputs, args, suffix = WRITERS[writer]
    with sandbox() as box:
        for fn, text in inputs.items():
            (box / fn).write_text(text)
        given_path, may_touch = _target(box, kind, next(iter(inputs), None), suffix)
        digests = {fn: _digest(box / fn) for fn in inputs}
        before = listing(box)
        old = {p: _digest(box / p) for p in may_touch - {"*"}}
        out = run_cli([given_path if a == "OUT" else a for a in args])
        problems = []
        changed_inputs = [fn for fn in inputs if _digest(box / fn) != digests[fn]]
        if changed_inputs:
            problems.append(f"partial: the inputs {changed_inputs} were overwritten")
        stray = [] if "*" in may_touch else outside(before, listing(box), may_touch)
        if stray:
            problems.append(f"outside: {stray}")
        temps = [p for p in listing(box) if TMP_MARKER in p]
        if temps:
            problems.append(f"partial: temporary files left {temps}")
        for p in may_touch - {"*"}:
            real = box / p
            if real.is_symlink():
                continue
            if out.code == 0 and real.exists() and _digest(real) != old[p] and not _complete(real, suffix):
                problems.append(f"partial: {p} is not whole")
            if out.code != 0 and old[p] is not None and _digest(real) != old[p]:
                problems.append(f"partial: {p} changed by a failed run")
        judge("output paths", out, problems)
        shutil.rmtree(box / "no", ignore_errors=True)


@fuzz_settings(16)
@given(
    writer=st.sampled_from(["export", "vlm-stats -o", "compare --plot", "calibrate -o"]), kind=st.sampled_from(TARGETS)
)
def test_fast_writers_on_hostile_targets(writer, kind):
    _run_writer(writer, kind)


@fuzz_settings(4)
@given(writer=st.sampled_from(["plan --save", "plan --report", "recipes --write"]), kind=st.sampled_from(TARGETS))
def test_slow_writers_on_hostile_targets(writer, kind):
    _run_writer(writer, kind)


def test_every_writer_refuses_its_own_input():
    """The reproducers: ``plan s.yaml --report s.yaml`` and the others replaced the scenario with the output."""
    for writer in ("export", "plan --save", "plan --report", "calibrate -o", "vlm-stats -o", "compare --plot"):
        for kind in ("the input", "symlink to the input", "hard link to the input", "chain of links to the input"):
            _run_writer(writer, kind)


KILL_CODE = (
    "import sys; from moeplan.io.write import write_atomically\n"
    "while True: write_atomically(sys.argv[1], sys.argv[2] * 1_000_000)\n"
)


def _killed(cmd: list[str], delay: float, cwd: pathlib.Path) -> None:
    p = subprocess.Popen([sys.executable, *cmd], cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # noqa: S603
    time.sleep(delay)
    p.send_signal(signal.SIGKILL)
    p.wait()


@fuzz_settings(2)
@given(delay=st.floats(0.2, 6.0), target=st.sampled_from(["file", "sweep"]))
def test_kill_9_during_writes(delay, target):
    """``kill -9`` at a random moment of a write: the target is absent, the old one or the new one
    whole (never half), and the next run is not refused (the killed run's temporary name is cleaned)."""
    with sandbox() as box:
        (box / "s.yaml").write_text(SMALL)
        problems = []
        if target == "file":
            (box / "out.txt").write_text("old")
            _killed(["-c", KILL_CODE, "out.txt", "new"], delay / 6, box)
            if (box / "out.txt").read_text() not in ("old", "new" * 1_000_000):
                problems.append("partial: out.txt is neither the old nor the new content")
            out = run_cli(["export", "s.yaml", "-o", "out.txt"])
        else:
            _killed(
                ["-m", "moeplan.cli.app", "sweep", "s.yaml", "-o", "sw", "--top", "1", "--no-mbs-variants"], delay, box
            )
            sw = box / "sw"
            if sw.exists() and not ((sw / "manifest.json").exists() and (sw / "README.md").exists()):
                problems.append(f"partial: a half-written sweep folder {sorted(p.name for p in sw.iterdir())}")
            out = (
                run_cli(["sweep", "s.yaml", "-o", "sw2", "--top", "1", "--no-mbs-variants"])
                if sw.exists()
                else run_cli(["sweep", "s.yaml", "-o", "sw", "--top", "1", "--no-mbs-variants"])
            )
        temps = [p for p in listing(box) if TMP_MARKER in p]
        if temps:
            problems.append(f"partial: temporary files left after the next run {temps}")
        judge("kill -9 during writes", out, problems, codes=(0,))
