"""Speed of ``moeplan vlm-stats``: 10 000 real image files (JPEG, sides 336–1344 px) read from their
headers on this machine (issue goal: ≤ 10 s on 2 cores). The images are generated once into
``--dir`` (default: moeplan-vlm-bench in the system temporary folder) and reused.

Usage: python benchmarks/bench_vlm_stats.py [--n 10000] [--dir DIR]   (needs Pillow)
"""

from __future__ import annotations

import random
import sys
import tempfile
import time
from pathlib import Path

from moeplan.vlm.stats import scan, summarize


def main() -> None:
    n = int(sys.argv[sys.argv.index("--n") + 1]) if "--n" in sys.argv else 10000
    d = (
        Path(sys.argv[sys.argv.index("--dir") + 1])
        if "--dir" in sys.argv
        else Path(tempfile.gettempdir()) / "moeplan-vlm-bench"
    )
    d.mkdir(parents=True, exist_ok=True)
    have = len(list(d.glob("*.jpg")))
    if have < n:
        from PIL import Image

        rng = random.Random(0)
        t = time.perf_counter()
        for i in range(have, n):
            Image.new("L", (rng.randint(336, 1344), rng.randint(336, 1344))).save(d / f"{i:05d}.jpg", quality=10)
        print(f"generated {n - have} images in {time.perf_counter() - t:.1f} s (not timed below)")
    t = time.perf_counter()
    sc = scan(d)
    out = summarize(sc, seq_length=8192, packing="greedy")
    dt = time.perf_counter() - t
    print(
        f"vlm-stats on {out['samples']:,} images: {dt:.2f} s ({out['samples'] / dt:,.0f} images/s); "
        f"mean {out['image_tokens_per_sample']['mean']:.0f} image tokens per image"
    )


if __name__ == "__main__":
    main()
