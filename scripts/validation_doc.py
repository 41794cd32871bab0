"""Render docs/validation.md from docs/validation.md.in and the figures the benchmarks write.

``python scripts/validation_doc.py`` writes the page; ``--check`` exits 1 when the page differs from
what it would write (the test suite runs the same comparison)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "src" / "moeplan" / "catalog" / "data"
TEMPLATE = ROOT / "docs" / "validation.md.in"
PAGE = ROOT / "docs" / "validation.md"


def _load(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def figures() -> dict:
    """Every figure the template names, with the tables pre-rendered."""
    figs = _load(ROOT / "docs" / "figures.json")
    memory = _load(DATA / "memory_validity.json")
    memory["n"] = len(memory["readings"])
    st, held = figs["step_time"], figs["step_time"]["held_out"]
    better = held["better_baseline"]
    lc = _load(DATA / "long_context_check.json")
    return {
        **figs,
        "memory": memory,
        "time_validity": _load(DATA / "time_validity.json"),
        "long_context": lc,
        "memory_rows": "\n".join(
            f"| {r['id']} | {r['measured_gib']:.2f} | {r['predicted_gib']:.2f} | {r['error_pct']:+.1f} |"
            for r in memory["readings"]
        ),
        "step_time_rows": "\n".join(
            f"| {k} | {m['median_pct']:.1f} | {m['worst_pct']:.1f} | {m['spearman']:.3f} |"
            for k, m in sorted(st["all"].items(), key=lambda kv: (kv[0] != "moeplan", kv[0]))
        ),
        "held_better": better,
        "held_rows": "\n".join(
            f"| {k} | {v['moeplan']:.1f} | {v[better]:.1f} |"
            for k, v in [*held["cases"].items(), (f"median of the {len(held['cases'])}", held["median_of_cases"])]
        ),
        "held_ratio": held["ratio_to_better"],
        "release_rows": "\n".join(
            f"| release {k} | {v['moeplan']:.1f} | {v[better]:.1f} |" for k, v in held.get("releases", {}).items()
        ),
        "lc_moe": ", ".join(f"{x:.1f}" for x in lc["moe_out_of_sample_abs_pct"]),
        "planner_pct": 100 * figs["planner"]["hits"] / figs["planner"]["runs"],
        "oos": figs["planner_oos_release"],
        "oos_pct": 100 * figs["planner_oos_release"]["hits"] / figs["planner_oos_release"]["runs"],
        "oos_rows": "\n".join(
            f"| {k} | {v['runs']} | {v['hits']} | {v['top1']} | {v['top5']} |"
            for k, v in figs["planner_oos_release"]["releases"].items()
        ),
    }


def render() -> str:
    """The page's text."""
    return TEMPLATE.read_text(encoding="utf-8").format(**figures())


def main() -> int:
    text = render()
    if "--check" in sys.argv:
        same = PAGE.exists() and PAGE.read_text(encoding="utf-8") == text
        print(
            "docs/validation.md is up to date" if same else "docs/validation.md is stale: run scripts/validation_doc.py"
        )
        return 0 if same else 1
    PAGE.write_text(text, encoding="utf-8")
    print(f"wrote {PAGE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
