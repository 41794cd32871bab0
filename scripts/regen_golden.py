"""Regenerate the golden export files in tests/golden from examples/deepseek_v3_gb300.yaml.

Usage: python scripts/regen_golden.py
"""

from __future__ import annotations

from pathlib import Path

from moeplan import load_scenario
from moeplan.io.export import FORMATS, export

ROOT = Path(__file__).resolve().parents[1]
SUFFIX = {
    "mbridge-overrides": "txt",
    "mbridge-yaml": "yaml",
    "mbridge-python": "py",
    "megatron-lm-args": "txt",
    "slurm": "sh",
}


def main() -> None:
    scn = load_scenario(ROOT / "examples" / "deepseek_v3_gb300.yaml")
    for fmt in FORMATS:
        text, _ = export(scn, fmt)
        (ROOT / "tests" / "golden" / f"deepseek_v3_gb300.{fmt}.{SUFFIX[fmt]}").write_text(text)


if __name__ == "__main__":
    main()
