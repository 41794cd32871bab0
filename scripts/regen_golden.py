"""Regenerate the golden files under tests/golden.

- exports: ``tests/golden/deepseek_v3_gb300.<format>.<ext>`` from ``examples/deepseek_v3_gb300.yaml``;
- JSON outputs: for every ``tests/golden/scenarios/<name>.yaml``, ``moeplan estimate --json`` into
  ``tests/golden/estimate/<name>.json`` and ``moeplan plan --json`` of the same request without its
  layout into ``tests/golden/plan/<name>.json`` (normalised by :func:`normalise`: wall-clock fields
  dropped, floats to 9 significant digits);
- text snapshots: the README tour (``check``, ``estimate``, ``plan``, ``fit``, ``recipes``) as a
  terminal of 80 and of 120 columns shows it, into ``tests/golden/text/<name>.<columns>.txt``
  (:data:`TEXT_COMMANDS`; trailing spaces stripped).

Usage: python scripts/regen_golden.py [--check]   (--check: exit 1 listing the files that would change)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "golden"
SUFFIX = {
    "mbridge-overrides": "txt",
    "mbridge-yaml": "yaml",
    "mbridge-python": "py",
    "megatron-lm-args": "txt",
    "slurm": "sh",
}
#: keys whose values are wall-clock measurements, not outputs of the models
VOLATILE_KEYS = frozenset({"seconds"})
#: the plan request's options (the same for every golden)
PLAN_ARGS = ("--top", "5")


def normalise(obj: object) -> object:
    """A JSON document with wall-clock keys dropped and floats rounded to 9 significant digits
    (summation order may move the last bits of a float; nothing the models mean does)."""
    if isinstance(obj, dict):
        return {k: normalise(v) for k, v in obj.items() if k not in VOLATILE_KEYS}
    if isinstance(obj, list):
        return [normalise(v) for v in obj]
    if isinstance(obj, float):
        return float(f"{obj:.9g}")
    return obj


def plan_request(scenario: Path, tmp: Path) -> Path:
    """The scenario without its layout (what ``plan`` is asked), written to ``tmp``."""
    import yaml

    data = yaml.safe_load(scenario.read_text())
    data.pop("layout", None)
    tmp.write_text(yaml.safe_dump(data, sort_keys=False))
    return tmp


def run_json(args: list[str]) -> tuple[int, object]:
    """Run the CLI in-process with ``args`` and return (exit code, normalised JSON of stdout)."""
    from typer.testing import CliRunner

    from moeplan.cli.app import app

    res = CliRunner().invoke(app, args)
    try:
        doc = json.loads(res.stdout)
    except ValueError:
        raise SystemExit(
            f"moeplan {' '.join(args)} printed no JSON (exit {res.exit_code}): {res.output[-500:]}"
        ) from None
    return res.exit_code, normalise(doc)


def outputs(name: str, tmp_dir: Path) -> dict[str, str]:
    """Golden text of the estimate and the plan of one scenario (relative path → text)."""
    scn = GOLDEN / "scenarios" / f"{name}.yaml"
    out = {}
    code, doc = run_json(["estimate", str(scn), "--json"])
    out[f"estimate/{name}.json"] = json.dumps({"exit_code": code, "output": doc}, indent=1, sort_keys=False) + "\n"
    req = plan_request(scn, tmp_dir / f"{name}.yaml")
    code, doc = run_json(["plan", str(req), "--json", *PLAN_ARGS])
    out[f"plan/{name}.json"] = json.dumps({"exit_code": code, "output": doc}, indent=1, sort_keys=False) + "\n"
    return out


#: the text snapshots: name → arguments of ``moeplan`` (the README tour)
TEXT_COMMANDS = {
    "check_long_context_broken": ["check", "examples/long_context_broken.yaml"],
    "estimate_deepseek_v3_gb300": ["estimate", "examples/deepseek_v3_gb300.yaml"],
    "plan_deepseek_v3_h100_128k": [
        "plan",
        "--model",
        "deepseek-ai/DeepSeek-V3",
        "--gpu",
        "h100",
        "--num-gpus",
        "256",
        "--seq-length",
        "131072",
        "--precision",
        "fp8-blockwise",
        "--gbs",
        "32",
    ],
    "fit_qwen3_30b_64k_oom": ["fit", "examples/qwen3_30b_64k_oom.yaml", "--gbs", "64"],
    "recipes_qwen3_235b_guidance": ["recipes", "--model", "Qwen/Qwen3-235B-A22B", "--kind", "guidance"],
}
#: the terminal widths of the snapshots
TEXT_WIDTHS = (80, 120)


def text_outputs(names: list[str] | None = None) -> dict[str, str]:
    """The text snapshots (relative path → text): each command of :data:`TEXT_COMMANDS` run in-process
    from the repository root at each of :data:`TEXT_WIDTHS` columns, with its exit code."""
    import os

    from typer.testing import CliRunner

    from moeplan.cli.app import app

    out = {}
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        for name, args in TEXT_COMMANDS.items():
            if names is not None and name not in names:
                continue
            for width in TEXT_WIDTHS:
                res = CliRunner().invoke(app, args, env={"COLUMNS": str(width), "TERM": "dumb"})
                lines = [ln.rstrip() for ln in res.output.splitlines()]
                text = f"$ moeplan {' '.join(args)}   # {width} columns, exit {res.exit_code}\n" + "\n".join(lines)
                out[f"text/{name}.{width}.txt"] = text + "\n"
    finally:
        os.chdir(cwd)
    return out


def scenario_names() -> list[str]:
    return sorted(p.stem for p in (GOLDEN / "scenarios").glob("*.yaml"))


def export_outputs() -> dict[str, str]:
    from moeplan import load_scenario
    from moeplan.io.export import FORMATS, export

    scn = load_scenario(ROOT / "examples" / "deepseek_v3_gb300.yaml")
    return {f"deepseek_v3_gb300.{fmt}.{SUFFIX[fmt]}": export(scn, fmt)[0] for fmt in FORMATS}


def main(argv: list[str]) -> int:
    import tempfile

    check = "--check" in argv
    with tempfile.TemporaryDirectory() as tmp:
        files = export_outputs()
        files.update(text_outputs())
        for name in scenario_names():
            files.update(outputs(name, Path(tmp)))
    changed = []
    for rel, text in files.items():
        path = GOLDEN / rel
        if not path.is_file() or path.read_text() != text:
            changed.append(rel)
            if not check:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text)
    for rel in changed:
        print(("would change: " if check else "wrote: ") + rel)
    return 1 if (check and changed) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
