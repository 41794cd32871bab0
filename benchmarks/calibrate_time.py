"""Fit the shared time-model constants on every published Megatron Bridge run whose precision is
published (release anomalies left out: ``timefit.release_anomalies``), and write
``src/moeplan/catalog/data/time_constants.json`` with provenance.

Usage: python benchmarks/calibrate_time.py
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from timefit import ROOT, constants_to_json, fit, load_runs  # noqa: E402


def main() -> None:
    t0 = time.time()
    runs = load_runs()
    c, info = fit(runs)
    from timefit import PARAMS, constants_values

    vals = constants_values(c)
    info["at_bounds"] = sorted(
        name for name, lo, hi, _ in PARAMS if name in vals and (vals[name] <= lo * 1.001 or vals[name] >= hi / 1.001)
    )
    info.update(
        {
            "fitted_on": "tests/data/reference/published_runs.yaml (Megatron Bridge performance summary, releases "
            "25.11–26.06, runs with a published precision, release anomalies left out by "
            "timefit.release_anomalies), recipe knobs filled from the workload "
            "configs of each run's own release (catalog/data/mbridge_perf_recipes_by_release.yaml), else the "
            "packaged perf recipes (recipe_defaults: mbridge-perf-benchmark)",
            "method": "Huber-robust least squares on log(predicted/measured tokens/s/GPU), the Huber scale 1.345 × the normal-consistent MAD of the residuals, re-estimated until stable; benchmarks/timefit.py",
            "seconds": round(time.time() - t0, 1),
        }
    )
    out = ROOT / "src" / "moeplan" / "catalog" / "data" / "time_constants.json"
    out.write_text(json.dumps(constants_to_json(c, info), indent=2) + "\n")
    print(json.dumps(info, indent=2))


if __name__ == "__main__":
    from script_args import takes_no_arguments

    takes_no_arguments(__doc__)
    main()
