"""Plot two runs side by side: iteration time over steps and max-allocated memory over steps.

Uses matplotlib (a core dependency); the figure is written atomically.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from moeplan.diagnose.logs import LogStats
from moeplan.errors import InputError


def plot_runs(a: LogStats, b: LogStats, path: Path, labels: tuple[str, str] = ("A", "B")) -> None:
    """Write a two-panel figure (iteration time in s; max allocated memory in GiB) to ``path``.

    Raises:
        InputError: matplotlib is not installed, or ``path`` cannot be written.
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
        its = sorted(i for i in st.iterations if "iteration_time_ms" in st.iterations[i])
        ax_t.plot(its, [st.iterations[i]["iteration_time_ms"] / 1e3 for i in its], label=label, lw=1)
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
    path = Path(path)
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent or ".", suffix=path.suffix)
        os.close(fd)
        fig.savefig(tmp, format=path.suffix.lstrip(".").lower())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; a plot is an ordinary file
        os.replace(tmp, path)
    except OSError as exc:
        raise InputError("--plot", str(path), f"a writable file ({exc.strerror})") from None
    finally:
        plt.close(fig)
        if "tmp" in locals() and os.path.exists(tmp):
            os.unlink(tmp)
