"""Regenerate every derived file of the repository in dependency order, and print what moved.

The steps (``--list`` shows them with what each writes and its rough wall time on a 2-core machine):
the Megatron key tables, the packaged recipe and measured-run tables, the fitted time constants, the benchmark reports and the
validity figures the package prints, the generated pages (validation, scenario reference), the CLI
surface and the golden outputs, the skills' examples. Each step runs its generator as a separate
process in a copy of the tree (``moeplan`` imported from the copy's ``src``), so a failing step leaves
the tree as it was and a later step sees what the earlier ones wrote. Then every file the steps write
is compared with the tree: per changed file, for JSON the numeric values that moved (path, old → new,
% change; largest relative move first; the 5 largest for the golden ``estimate`` / ``plan`` outputs),
for text the lines added and removed.

Usage::

    python scripts/regen.py                 # run every step, write what changed, print the summary
    python scripts/regen.py --check         # write nothing; exit 1 when anything would change
    python scripts/regen.py --fast          # leave out the slow steps (the constants refit, the planner runs)
    python scripts/regen.py --only NAME ... # just these steps (repeatable); --skip NAME ... leaves them out
    python scripts/regen.py --list          # the steps, what each writes, how long it takes

Exit status: 0 done (or, with ``--check``, nothing would change); 1 something would change (``--check``)
or a step failed (its output is printed); 2 an unknown step name.

Scripts that write files but are not steps are named in :data:`NOT_STEPS` with the reason.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = "src/moeplan/catalog/data"
#: what the copy of the tree leaves out: version control, environments, caches
IGNORED = (".git", ".venv", "venv", ".mypy_cache", ".ruff_cache", ".hypothesis", ".pytest_cache", "__pycache__")
#: golden JSON outputs: their summary names the 5 largest relative moves
GOLDEN_JSON = ("tests/golden/estimate/", "tests/golden/plan/")
GOLDEN_MOVES = 5
#: numeric moves listed per other JSON file
JSON_MOVES = 10
#: scripts that write files but are not steps, and why (tests/test_regen.py: every writer is one or the other)
NOT_STEPS = {
    "benchmarks/figures.py": "the helper the benchmarks write docs/figures.json with, not a generator",
    "benchmarks/bench_logs.py": "timings of synthetic logs it writes to a temporary folder",
    "benchmarks/fuzz_counts.py": "a tally of random fuzz inputs (--write), not derived from the tree",
    "scripts/import_recipe_history.py": "reads a Megatron Bridge git clone, which the tree does not hold",
    "scripts/regen.py": "this command",
}


@dataclass(frozen=True)
class Step:
    """One generator: ``argv`` (a script path relative to the root, then its arguments) run with this
    Python; ``writes``: the files (glob patterns relative to the root) it writes; ``seconds``: rough wall
    time on a shared 2-core machine; ``slow``: left out by ``--fast``; ``stdout_to``: the file its
    standard output is (for a generator that prints rather than writes)."""

    name: str
    argv: tuple[str, ...]
    writes: tuple[str, ...]
    seconds: int
    what: str
    slow: bool = False
    stdout_to: str | None = None


STEPS: tuple[Step, ...] = (
    Step(
        "megatron_keys",
        ("scripts/gen_megatron_keys.py",),
        ("src/moeplan/inputs/data/megatron_keys.json",),
        5,
        "Megatron key tables from the Megatron-LM / Megatron Bridge git mirrors (skips without them)",
    ),
    Step(
        "recipes",
        ("scripts/import_recipes.py",),
        (f"{DATA}/mbridge_perf_recipes.yaml",),
        3,
        "Bridge recipe tables from tests/data/reference/megatron_recipes.md",
    ),
    Step(
        "moe_recipe_releases",
        ("scripts/import_moe_recipe_releases.py",),
        (f"{DATA}/moe_recipe_releases.yaml",),
        3,
        "megatron-core of each Megatron-LM MoE recipe's commit, from the Megatron-LM mirror (skips without it)",
    ),
    Step(
        "measured",
        ("scripts/package_measured.py",),
        (f"{DATA}/published_measured.json",),
        2,
        "published runs' measured figures from published_runs.yaml",
    ),
    Step(
        "constants",
        ("benchmarks/calibrate_time.py",),
        (f"{DATA}/time_constants.json",),
        600,
        "refit of the shared time-model constants (SLOW; changes every prediction)",
        slow=True,
    ),
    Step(
        "mamba_time",
        ("benchmarks/fit_mamba_time.py",),
        (f"{DATA}/mamba_time.json",),
        5,
        "the Mamba-2 SSD kernels' rate, fitted on the Nemotron-3 rows of releases up to 26.06",
    ),
    Step(
        "accuracy",
        ("benchmarks/accuracy.py",),
        ("docs/accuracy.md", "docs/figures.json", f"{DATA}/time_validity.json"),
        90,
        "step-time accuracy report, held-out refits, validity bands",
    ),
    Step(
        "long_context",
        ("benchmarks/long_context.py",),
        ("docs/long_context.md", f"{DATA}/long_context_check.json"),
        5,
        "long-context check against NeMo's CP runs",
    ),
    Step(
        "memory_accuracy",
        ("benchmarks/memory_accuracy.py",),
        ("docs/memory_accuracy.md", f"{DATA}/memory_validity.json"),
        5,
        "memory against public readings, memory validity band",
    ),
    Step(
        "evidence",
        ("benchmarks/evidence.py",),
        ("docs/evidence.md", "docs/figures.json"),
        10,
        "out-of-sample evidence against the baselines",
    ),
    Step(
        "held_out_release",
        ("benchmarks/held_out_release.py",),
        ("docs/held_out_release.md",),
        5,
        "the held-out release 26.08 (Bridge v0.6.0 summary) scored, validation only",
    ),
    Step(
        "cp_comm_types",
        ("benchmarks/cp_comm_types.py",),
        ("docs/cp_comm_types.md",),
        10,
        "long-context step time by CP exchange",
    ),
    Step(
        "plan_quality",
        ("benchmarks/plan_quality.py",),
        ("docs/plan_quality.md", "docs/figures.json"),
        420,
        "planner against every published layout (SLOW)",
        slow=True,
    ),
    Step(
        "plan_oos_release",
        ("benchmarks/plan_oos_release.py",),
        ("docs/plan_quality_oos.md", "docs/figures.json"),
        1800,
        "planner out of sample by release: a refit per release (SLOW)",
        slow=True,
    ),
    Step(
        "known_issues",
        ("scripts/harvest_known_issues.py",),
        (f"{DATA}/known_issues_harvested.yaml",),
        10,
        "known issues harvested from the Megatron-LM / Megatron Bridge git mirrors (skipped, with a message, "
        "where the mirrors are absent)",
    ),
    Step("validation_doc", ("scripts/validation_doc.py",), ("docs/validation.md",), 2, "docs/validation.md"),
    Step("scenario_doc", ("scripts/scenario_doc.py",), ("docs/scenario.md",), 2, "docs/scenario.md"),
    Step(
        "cli_surface",
        ("-m", "moeplan.cli.surface"),
        ("tests/golden/cli_surface.json",),
        3,
        "every command's flags",
        stdout_to="tests/golden/cli_surface.json",
    ),
    Step(
        "goldens",
        ("scripts/regen_golden.py",),
        ("tests/golden/**/*.json", "tests/golden/**/*.txt", "tests/golden/deepseek_v3_gb300.*"),
        120,
        "golden estimate / plan JSON, exports, text snapshots",
    ),
    Step("skills", ("skills/generate.py",), ("skills/*/SKILL.md",), 20, "the skills' example outputs"),
)


def select(only: list[str], skip: list[str], fast: bool) -> list[Step]:
    """The steps to run, in dependency order. Raises ``ValueError`` naming an unknown step and the known ones."""
    names = [s.name for s in STEPS]
    for n in [*only, *skip]:
        if n not in names:
            raise ValueError(f"unknown step {n!r}; the steps are: {', '.join(names)}")
    return [s for s in STEPS if (not only or s.name in only) and s.name not in skip and not (fast and s.slow)]


def copy_tree(dest: Path) -> Path:
    """A copy of the repository under ``dest`` without version control, environments and caches."""
    work = dest / "tree"
    shutil.copytree(ROOT, work, ignore=shutil.ignore_patterns(*IGNORED), symlinks=True)
    return work


def run_step(step: Step, work: Path) -> tuple[bool, float, str]:
    """Run ``step`` in ``work`` with ``moeplan`` imported from the copy: (succeeded, seconds, output tail)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(work / "src"), str(work)])}
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, *(step.argv if step.argv[0] == "-m" else (str(work / step.argv[0]), *step.argv[1:]))],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if step.stdout_to is not None and proc.returncode == 0:
        (work / step.stdout_to).write_text(proc.stdout, encoding="utf-8")
    tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-20:])
    return proc.returncode == 0, time.perf_counter() - t0, tail


def outputs(steps: list[Step], trees: tuple[Path, ...]) -> list[str]:
    """Every file the steps write, as paths relative to the root, found in any of ``trees``."""
    found = {
        p.relative_to(tree).as_posix()
        for step in steps
        for pattern in step.writes
        for tree in trees
        for p in tree.glob(pattern)
        if p.is_file()
    }
    return sorted(found)


def flatten(doc: object, path: str = "") -> dict[str, float]:
    """Every number of a JSON document by its path (``a.b[0].c``); booleans are not numbers."""
    if isinstance(doc, dict):
        return {
            k: v for key, val in doc.items() for k, v in flatten(val, f"{path}.{key}" if path else str(key)).items()
        }
    if isinstance(doc, list):
        return {k: v for i, val in enumerate(doc) for k, v in flatten(val, f"{path}[{i}]").items()}
    if isinstance(doc, (int, float)) and not isinstance(doc, bool):
        return {path: float(doc)}
    return {}


def relative_move(old: float, new: float) -> float:
    """(new − old) / |old| × 100; infinite when a zero became non-zero."""
    if old == new:
        return 0.0
    return (new - old) / abs(old) * 100 if old else float("inf") * (1 if new > old else -1)


def _number(x: float) -> str:
    return f"{x:.6g}"


def json_moves(old_text: str, new_text: str, strip: str = "") -> tuple[list[tuple[str, float, float, float]], int]:
    """The numeric values that moved between two JSON texts, largest relative move first, as (path, old,
    new, % change), and the count of other differences (numbers added or removed, non-numeric values)."""
    old, new = json.loads(old_text), json.loads(new_text)
    if strip and isinstance(old, dict) and isinstance(new, dict):
        old, new = old.get(strip, old), new.get(strip, new)
    a, b = flatten(old), flatten(new)
    moved = [(k, a[k], b[k], relative_move(a[k], b[k])) for k in a.keys() & b.keys() if a[k] != b[k]]
    moved.sort(key=lambda m: (-abs(m[3]), m[0]))
    only = len(a.keys() ^ b.keys())
    return moved, only


def describe_json(rel: str, old_text: str, new_text: str) -> list[str]:
    """Summary lines of a changed JSON file: its moved numbers (5 for a golden, else up to 10)."""
    golden = rel.startswith(GOLDEN_JSON)
    shown = GOLDEN_MOVES if golden else JSON_MOVES
    try:
        moved, only = json_moves(old_text, new_text, strip="output" if golden else "")
    except json.JSONDecodeError:
        return describe_text(rel, old_text, new_text)
    name = rel.removeprefix("tests/golden/") if golden else rel
    lines = [f"{name}: {len(moved)} value(s) moved" + (f", {only} added or removed" if only else "")]
    for path, a, b, pct in moved[:shown]:
        lines.append(f"    {name} {path} {_number(a)} → {_number(b)} ({pct:+.1f} %)")
    if len(moved) > shown:
        lines.append(f"    … and {len(moved) - shown} more")
    if not moved and not only:
        lines[0] = f"{name}: changed (no number moved; text or layout only)"
    return lines


def describe_text(rel: str, old_text: str, new_text: str) -> list[str]:
    """One summary line of a changed text file: lines added and removed."""
    diff = list(difflib.unified_diff(old_text.splitlines(), new_text.splitlines(), lineterm="", n=0))
    added = sum(1 for d in diff if d.startswith("+") and not d.startswith("+++"))
    removed = sum(1 for d in diff if d.startswith("-") and not d.startswith("---"))
    return [f"{rel}: +{added} −{removed} lines"]


def _read(path: Path) -> str | None:
    return path.read_text(encoding="utf-8") if path.is_file() else None


def changes(steps: list[Step], work: Path) -> list[tuple[str, list[str]]]:
    """The files that differ between the tree and the copy ``work``, each with its summary lines."""
    out = []
    for rel in outputs(steps, (ROOT, work)):
        before, after = _read(ROOT / rel), _read(work / rel)
        if before == after:
            continue
        if before is None or after is None:
            out.append((rel, [f"{rel}: {'new' if before is None else 'removed'}"]))
        elif rel.endswith(".json"):
            out.append((rel, describe_json(rel, before, after)))
        else:
            out.append((rel, describe_text(rel, before, after)))
    return out


def list_steps() -> None:
    """Print the steps in order with what each writes and its rough time."""
    for s in STEPS:
        took = f"~{s.seconds // 60} min" if s.seconds >= 60 else f"~{s.seconds} s"
        slow = "  [slow: left out by --fast]" if s.slow else ""
        print(f"{s.name:17s} {took:>8s}  {s.what}{slow}")
        print(f"{'':17s} {'':>8s}  writes: {', '.join(s.writes)}")


def run_all(steps: list[Step], work: Path) -> bool:
    """Run ``steps`` in order in ``work``, printing each one's time; stop at the first failure."""
    for step in steps:
        print(f"[{step.name}] running ({step.what}) …", flush=True)
        ok, took, tail = run_step(step, work)
        print(f"[{step.name}] {'done' if ok else 'FAILED'} in {took:.0f} s", flush=True)
        if not ok:
            print(tail)
            return False
    return True


def write_back(found: list[tuple[str, list[str]]], work: Path) -> None:
    """Copy the changed files from ``work`` into the tree (a file the steps removed is removed)."""
    for rel, _ in found:
        src, dst = work / rel, ROOT / rel
        if src.is_file():
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dst)
        elif dst.is_file():
            dst.unlink()


def parse(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description="Regenerate every derived file and print what moved.")
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 when anything would change")
    ap.add_argument("--fast", action="store_true", help="leave out the slow steps (marked in --list)")
    ap.add_argument("--only", action="append", default=[], metavar="NAME", help="run only this step (repeatable)")
    ap.add_argument("--skip", action="append", default=[], metavar="NAME", help="leave this step out (repeatable)")
    ap.add_argument("--list", action="store_true", help="list the steps, what each writes and how long it takes")
    return ap.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse(argv)
    if args.list:
        list_steps()
        return 0
    try:
        steps = select(args.only, args.skip, args.fast)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="moeplan-regen-") as tmp:
        work = copy_tree(Path(tmp))
        ok = run_all(steps, work)
        found = changes(steps, work)
        if found and not args.check and ok:
            write_back(found, work)
    verb = "would change" if args.check else "changed"
    print(f"\n{len(found)} file(s) {verb}" + (":" if found else "."))
    for _, lines in found:
        print("\n".join(lines))
    if not ok:
        print("a step failed (output above); nothing was written" if not args.check else "a step failed")
        return 1
    return 1 if (args.check and found) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
