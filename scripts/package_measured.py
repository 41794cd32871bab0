"""Package the measured figures of the published Megatron Bridge runs for ``plan`` and ``recipes``.

Reads ``tests/data/reference/published_runs.yaml`` (the vendored Megatron Bridge performance summary,
releases 25.09–26.06, every number copied from NVIDIA's table; the 26.06.01 and 26.08 rows are held
back upstream and are not in it) and writes ``src/moeplan/catalog/data/published_measured.json``: per
run its id, release, model, GPU, GPU count, precision, sequence length, batch sizes, the parallel sizes
the table publishes (TP, PP, VPP, CP, EP, FSDP) and the measured tokens/s/GPU and model TFLOP/s/GPU.
Nothing is estimated. The runs of the held-out releases (``tests/data/held_out/published_runs_26_08.yaml``:
26.08, the v0.6.0 summary) go under ``held_out_runs``, apart from ``runs``: no fit, baseline or planner
reads them. ``--check`` exits 1 when the packaged file is out of date (the tests use it).

Usage: python scripts/package_measured.py [--check]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "tests" / "data" / "reference" / "published_runs.yaml"
#: the releases held out of every fit (validation only), same schema
HELD_OUT = ROOT / "tests" / "data" / "held_out" / "published_runs_26_08.yaml"
OUT = ROOT / "src" / "moeplan" / "catalog" / "data" / "published_measured.json"
_SIZES = (
    "tensor_model_parallel_size",
    "pipeline_model_parallel_size",
    "virtual_pipeline_model_parallel_size",
    "context_parallel_size",
    "expert_model_parallel_size",
    "use_megatron_fsdp",
    "moe_router_force_load_balancing",
)


def _row(r: dict) -> dict:
    """One packaged run: id, release, model, GPU, GPU count, training, the published sizes, measured."""
    sc = r["scenario"]
    return {
        "id": r["id"],
        "release": r["release"],
        "model": sc["model"],
        "gpu": sc["system"]["gpu"],
        "num_gpus": sc["system"]["num_gpus"],
        "training": sc["training"],
        "layout": {k: v for k, v in sc["layout"].items() if k in _SIZES and v is not None},
        "measured": r["measured"],
    }


def build() -> str:
    runs = yaml.safe_load(SRC.read_text())["runs"]
    # 25.09 publishes no precision: not comparable
    out = [_row(r) for r in runs if "precision" in r["scenario"].get("training", {})]
    held = yaml.safe_load(HELD_OUT.read_text())
    doc = {
        "source": "NVIDIA-NeMo/Megatron-Bridge docs/performance-summary.md and performance-summary-archive.md "
        "@067f987df03b8355b03192d88d70f1709fedf51a (via tests/data/reference/published_runs.yaml; "
        "scripts/package_measured.py)",
        "units": "tokens_per_s_per_gpu: training tokens per second per GPU; model_tflops_per_gpu: 10^12 FLOP/s",
        "runs": out,
        "held_out_source": "NVIDIA-NeMo/Megatron-Bridge docs/performance-summary.md @v0.6.0 (51885cf), section "
        "26.08 (via tests/data/held_out/published_runs_26_08.yaml; scripts/package_measured.py): never fitted",
        "held_out_releases": held["held_out_releases"],
        "held_out_runs": [_row(r) for r in held["runs"]],
    }
    return json.dumps(doc, indent=1) + "\n"


def main(argv: list[str]) -> int:
    text = build()
    if "--check" in argv:
        if not OUT.is_file() or OUT.read_text() != text:
            print("out of date: python scripts/package_measured.py")
            return 1
        return 0
    OUT.write_text(text)
    print(f"wrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
