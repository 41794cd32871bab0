"""Regenerate the golden files under tests/golden.

- exports: ``tests/golden/deepseek_v3_gb300.<format>.<ext>`` from ``examples/deepseek_v3_gb300.yaml``;
- JSON outputs: for every ``tests/golden/scenarios/<name>.yaml``, ``moeplan estimate --json`` into
  ``tests/golden/estimate/<name>.json`` and ``moeplan plan --json`` of the same request without its
  layout into ``tests/golden/plan/<name>.json`` (normalised by :func:`normalise`: wall-clock fields
  dropped, floats to 9 significant digits).

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
        raise SystemExit(f"moeplan {' '.join(args)} printed no JSON (exit {res.exit_code}): {res.output[-500:]}") from None
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
