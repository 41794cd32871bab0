"""Plot two runs side by side: iteration time over steps and max-allocated memory over steps.

Uses matplotlib (a core dependency); the figure is written atomically.
"""

from __future__ import annotations

import io
from pathlib import Path

from moeplan.errors import InputError
from moeplan.io.run_logs import LogStats
from moeplan.io.write import write_atomically


def plot_runs(a: LogStats, b: LogStats, path: Path, labels: tuple[str, str] = ("A", "B"), inputs: tuple = ()) -> None:
    """Write a two-panel figure (iteration time in s; max allocated memory in GiB) to ``path``
    (atomically, under the output policy of :mod:`moeplan.io.write`: a symlink there is replaced, never
    written through).

    Raises:
        InputError: matplotlib is not installed, or ``path`` cannot be written (or is one of ``inputs``).
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise InputError(
            "--plot", str(path), "matplotlib importable (a moeplan dependency: reinstall with pip install .)"
        ) from None
    fig, (ax_t, ax_m) = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    steady = [v / 1e3 for st in (a, b) for v in st.series("iteration_time_ms")]
    for st, label in ((a, labels[0]), (b, labels[1])):
        its, ms = st.iterations.points("iteration_time_ms")  # finite values only
        ax_t.plot(its, [v / 1e3 for v in ms], label=label, lw=1)
        if its and st.warmup_skipped:
            ax_t.axvline(its[min(st.warmup_skipped, len(its) - 1)], color="grey", ls=":", lw=0.8)
        if st.memory_reports:
            pts = sorted(st.memory_reports)
            # one point per report and rank: markers only (a line would zigzag between ranks)
            ax_m.plot([p[0] for p in pts], [p[1] / 1024 for p in pts], marker="o", ls="none", label=label)
    if steady:
        # scale to the steady state: the warm-up iterations (often 5-10x slower) would flatten a few %
        lo, hi = min(steady), max(steady)
        pad = 0.15 * (hi - lo) or 0.05 * hi
        ax_t.set_ylim(lo - pad, hi + pad)
    ax_t.set_ylabel("iteration time (s)")
    ax_t.legend(fontsize=8)
    ax_m.set_ylabel("max allocated (GiB)")
    ax_m.set_xlabel("iteration")
    ax_t.set_title("iteration time, steady-state scale (dotted: end of warm-up), and memory")
    fig.tight_layout()
    buf = io.BytesIO()
    try:
        fig.savefig(buf, format=Path(path).suffix.lstrip(".").lower())
    finally:
        plt.close(fig)
    write_atomically(path, buf.getvalue(), field="--plot", inputs=inputs)
