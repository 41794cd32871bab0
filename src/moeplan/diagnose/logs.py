"""Parse Megatron-LM / Megatron Bridge training logs into steady-state statistics.

Recognised lines (Megatron's ``training.py`` ``training_log`` and memory report formats):

- ``iteration  123/ 250000 | consumed samples: ... | elapsed time per iteration (ms): 86545.2 |
  throughput per GPU (TFLOP/s/GPU): 456.7 | ... | lm loss: 2.50E+00 | ... | grad norm: 0.231 |
  number of skipped iterations: 0 | number of nan iterations: 0 |`` (field order free, any subset);
- ``[Rank 0] (after 10 iterations) memory (MB) | allocated: ... | max allocated: ... | reserved: ... |
  max reserved: ...``;
- the argument dump (read by :mod:`moeplan.io.imports`);
- the environment banner: container release (``NVIDIA Release 25.09``), ``PyTorch Version``, Megatron's
  ``using world size: W, data-parallel size: D, context-parallel size: C, ... tensor-model-parallel size:
  T, ... pipeline-model-parallel size: P`` line, and ``number of parameters on (tensor, pipeline) model
  parallel rank (t, p): N`` (compare with ``moeplan params``).

Lines may carry rank prefixes (``[rank3]:``, ``3:``), timestamps and ANSI colours; interleaved ranks
report the same iteration more than once (the first report of each iteration is kept). Unreadable
lines are counted, never fatal. Warm-up: the leading iterations slower than 1.1 × the median of the
second half are skipped (at most 20, at most half), and the statistics are median and spread.
"""

from __future__ import annotations

import math
import re
import statistics
from dataclasses import dataclass, field

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_ITER = re.compile(r"iteration\s+(\d+)\s*/\s*(\d+)")
_FIELD = re.compile(r"\|\s*([A-Za-z][A-Za-z /()\-_]*?)\s*:\s*([-+0-9.eE]+|nan|inf)")
_MEM = re.compile(
    r"memory \(MB\)\s*\|\s*allocated:\s*([0-9.]+)\s*\|\s*max allocated:\s*([0-9.]+)\s*\|\s*reserved:\s*([0-9.]+)"
    r"\s*\|\s*max reserved:\s*([0-9.]+)"
)
_BANNER = [
    ("container_release", re.compile(r"NVIDIA Release (\d\d\.\d\d(?:\.\d\d)?)")),
    ("torch", re.compile(r"PyTorch Version\s+(\S+)")),
    ("world_size", re.compile(r"using world size:\s*(\d+)")),
    ("data_parallel_size", re.compile(r"data-parallel[- ]size:\s*(\d+)")),
    ("context_parallel_size", re.compile(r"(?<!hierarchical )context-parallel[- ]size:\s*(\d+)")),
    ("tensor_model_parallel_size", re.compile(r"(?<!encoder-)tensor-model-parallel[- ]size:\s*(\d+)")),
    ("pipeline_model_parallel_size", re.compile(r"(?<!encoder-)pipeline-model-parallel[- ]size:\s*(\d+)")),
]
_RANK_PARAMS = re.compile(r"number of parameters on \(tensor, pipeline\) model parallel rank \((\d+), (\d+)\):\s*(\d+)")
_AFTER = re.compile(r"after (\d+) iterations")
_NAMES_SPACED = {
    "elapsed time per iteration (ms)": "iteration_time_ms",
    "throughput per gpu (tflop/s/gpu)": "tflops_per_gpu",
    "tokens per sec per gpu": "tokens_per_s_per_gpu",
    "lm loss": "loss",
    "grad norm": "grad_norm",
    "number of skipped iterations": "skipped",
    "number of nan iterations": "nan",
    "global batch size": "global_batch_size",
}
_NAMES = {re.sub(r"\s+", "", k): v for k, v in _NAMES_SPACED.items()}


#: keys whose logged values must be positive to be real measurements
POSITIVE_KEYS = frozenset({"iteration_time_ms", "tflops_per_gpu", "tokens_per_s_per_gpu", "global_batch_size"})
#: longest plausible iteration (a week, in ms): beyond it a value is corrupt, not slow
MAX_ITERATION_MS = 7 * 86400 * 1e3
#: shortest plausible iteration (a microsecond, in ms): below it a value is corrupt, not fast
MIN_ITERATION_MS = 1e-3


@dataclass
class LogStats:
    """Steady-state statistics of one log (times in seconds, memory in MiB as Megatron prints it)."""

    iterations: dict[int, dict[str, float]] = field(default_factory=dict)
    memory_mb: dict[str, float] = field(default_factory=dict)
    memory_reports: list[tuple[int, float]] = field(default_factory=list)  # (iteration, max allocated MiB)
    environment: dict[str, str | int] = field(default_factory=dict)  # banner facts (first seen wins)
    rank_params: dict[str, int] = field(default_factory=dict)  # "tp,pp" -> parameters on that rank
    truncated: bool = False  # the file ends inside a record (dropped)
    lines: int = 0
    unreadable_lines: int = 0
    warmup_skipped: int = 0
    text: str = ""

    def series(self, key: str, steady: bool = True) -> list[float]:
        """Finite values of ``key`` in iteration order (after the warm-up when ``steady``); for the
        rates, times and batch sizes only physically possible ones (positive, and an iteration under
        :data:`MAX_ITERATION_MS`), so a corrupt line cannot turn a median into 0, a negative or inf."""
        its = sorted(self.iterations)
        if steady:
            its = its[self.warmup_skipped :]
        vals = [v for i in its if math.isfinite(v := self.iterations[i].get(key, math.nan))]
        if key in POSITIVE_KEYS:
            lo, hi = (MIN_ITERATION_MS, MAX_ITERATION_MS) if key == "iteration_time_ms" else (0.0, math.inf)
            vals = [v for v in vals if lo < v < hi]
        return vals

    def impossible(self, key: str) -> int:
        """How many logged values of ``key`` (after the warm-up) :meth:`series` left out as impossible."""
        its = sorted(self.iterations)[self.warmup_skipped :]
        return sum(1 for i in its if key in self.iterations[i]) - len(self.series(key))

    def summary(self) -> dict:
        out: dict = {
            "iterations": len(self.iterations),
            "warmup_skipped": self.warmup_skipped,
            "lines": self.lines,
            "unreadable_lines": self.unreadable_lines,
            "truncated": self.truncated,
        }
        dropped = {k: n for k in sorted(POSITIVE_KEYS) if (n := self.impossible(k))}
        if dropped:
            out["impossible_values_left_out"] = dropped  # zero, negative, non-finite or absurd
        for key in ("iteration_time_ms", "tflops_per_gpu", "tokens_per_s_per_gpu", "loss", "grad_norm"):
            vals = self.series(key)  # finite values only: NaN / inf never reach the statistics or JSON
            if vals:
                med = statistics.median(vals)
                quart = statistics.quantiles(vals, n=4) if len(vals) >= 4 else None
                spread = quart[2] - quart[0] if quart else None
                out[key] = {"median": med, "iqr": spread, "min": min(vals), "max": max(vals), "n": len(vals)}
        if "loss" in out:
            out["loss"]["last"] = self.series("loss")[-1]  # the loss falls: its median says little alone
        bad = sum(1 for v in self.iterations.values() if "grad_norm" in v and not math.isfinite(v["grad_norm"]))
        if bad:
            out["grad_norm_nonfinite_iterations"] = bad  # NaN / inf grad norms are left out of the statistics
        if self.iterations:
            # Megatron resets both counters every log interval (training_log): the run's totals are sums
            for key, name in (("skipped", "skipped_iterations"), ("nan", "nan_iterations")):
                out[name] = sum(v.get(key, 0.0) for v in self.iterations.values() if math.isfinite(v.get(key, 0.0)))
        if self.memory_mb:
            out["memory_mb"] = dict(self.memory_mb)
        if self.environment:
            out["environment"] = dict(self.environment)
        if self.rank_params:
            out["rank_params"] = dict(self.rank_params)
        return out


_RECORD_START = re.compile(r"iteration\s+\d+\s*/\s*\d+|memory \(MB\)")


def _logical_lines(text: str) -> tuple[list[str], int]:
    """ANSI-free lines, with hard-wrapped continuations of an iteration or memory record joined back
    (as when a log is pasted at a fixed width: ``... | number of s`` / ``kipped iterations: 0 |``).

    A continuation starts with neither white space nor ``[`` (timestamps and rank prefixes do), holds
    a ``|`` and starts no record itself; it is appended without a separator (wraps fall mid-word, and
    field names are matched with white space removed)."""
    out: list[str] = []
    in_record = False
    physical = 0
    for raw in text.splitlines():
        physical += 1
        line = _ANSI.sub("", raw)
        cont = (
            in_record
            and line[:1] not in ("", " ", "\t", "[")
            and "|" in line
            and not _RECORD_START.search(line)
            and not re.match(r"\d+:", line)
        )
        if cont:
            out[-1] += line.rstrip()
            continue
        in_record = bool(_RECORD_START.search(line))
        out.append(line)
    return out, physical


def parse_log(text: str) -> LogStats:
    """Parse a training log (any number of ranks interleaved, hard-wrapped records rejoined).
    Never raises on content."""
    st = LogStats(text=text)
    lines, st.lines = _logical_lines(text)
    last = lines[-1].rstrip() if lines else ""
    if text and not text.endswith(("\n", "\r")) and _ITER.search(last) and not last.endswith("|"):
        lines.pop()  # an iteration record (which ends in '|') cut off by truncation ("...(ms): 99" of 994.2) is not trusted
        st.unreadable_lines += 1
        st.truncated = True
    for line in lines:
        if "iteration" not in line or "|" not in line:
            rp = _RANK_PARAMS.search(line)
            if rp:
                st.rank_params.setdefault(f"{rp.group(1)},{rp.group(2)}", int(rp.group(3)))
                continue
            for key, rx in _BANNER:
                mb = rx.search(line)
                if mb and key not in st.environment:
                    v = mb.group(1)
                    st.environment[key] = int(v) if v.isdigit() else v
        mm = _MEM.search(line)  # checked first: the memory report also says "(after N iterations) ... |"
        if mm:
            try:
                a, ma, r, mr = (float(x) for x in mm.groups())
            except ValueError:  # "1.2.3"
                st.unreadable_lines += 1
                continue
            for k, v in (("allocated", a), ("max_allocated", ma), ("reserved", r), ("max_reserved", mr)):
                st.memory_mb[k] = max(st.memory_mb.get(k, 0.0), v)
            after = _AFTER.search(line)
            if after:
                st.memory_reports.append((int(after.group(1)), ma))
            continue
        if "iteration" in line and "|" in line:
            mt = _ITER.search(line)
            if not mt:
                st.unreadable_lines += 1
                continue
            it = int(mt.group(1))
            vals: dict[str, float] = {}
            for name, val in _FIELD.findall(line[mt.end() :]):
                key = _NAMES.get(re.sub(r"\s+", "", name).lower(), "")
                if key:
                    try:
                        vals[key] = float(val)
                    except ValueError:
                        continue
            if not vals:
                st.unreadable_lines += 1
                continue
            st.iterations.setdefault(it, vals)  # first report of an iteration wins
            continue
    st.warmup_skipped = _warmup(st)
    return st


def _warmup(st: LogStats) -> int:
    """Leading iterations slower than 1.1 × the median time of the second half (at most 20, at most
    half of the iterations, at least one may go). A log excerpt that starts in steady state skips
    nothing; a run start or a resume (compilation, allocator growth, NCCL setup) is skipped."""
    its = sorted(st.iterations)
    n = len(its)
    if n < 2:
        return 0
    times = [st.iterations[i].get("iteration_time_ms", math.nan) for i in its]
    tail = [t for t in times[n // 2 :] if math.isfinite(t)]
    if not tail:
        return 0
    ref = statistics.median(tail)
    k = 0
    while k < min(20, max(1, n // 2)) and math.isfinite(times[k]) and times[k] > 1.1 * ref:
        k += 1
    return k


def tokens_per_s_per_gpu(global_batch_size: int, seq_length: int, iteration_ms: float, num_gpus: int) -> float:
    """Training tokens per second per GPU of a step: GBS · seq_length / (iteration time · GPUs)
    (``iteration_ms`` in ms as Megatron prints it, positive)."""
    return global_batch_size * seq_length / (iteration_ms / 1e3) / num_gpus


def derive_tokens_per_s(summary: dict, config: dict | None) -> dict:
    """``summary`` with ``tokens_per_s_per_gpu`` derived as GBS · seq_length / (iteration time ·
    world size) when the log prints no throughput but its argument dump (``config``, a scenario
    mapping) gives the global batch size, sequence length and GPU count; the derived figures carry
    ``"derived": True``. Times in ms as Megatron prints them. Unchanged otherwise."""
    if "tokens_per_s_per_gpu" in summary or "iteration_time_ms" not in summary or not config:
        return summary
    tr = config.get("training") or {}
    gbs, seq, world = tr.get("global_batch_size"), tr.get("seq_length"), (config.get("system") or {}).get("num_gpus")
    if not (isinstance(gbs, int) and isinstance(seq, int) and isinstance(world, int) and min(gbs, seq, world) > 0):
        return summary
    it = summary["iteration_time_ms"]

    def tps(ms: float) -> float:
        return tokens_per_s_per_gpu(gbs, seq, ms, world)  # ms ≥ MIN_ITERATION_MS (series): finite

    # throughput falls as time rises: the slowest iteration gives the minimum
    derived = {"median": tps(it["median"]), "iqr": None, "min": tps(it["max"]), "max": tps(it["min"])}
    return {**summary, "tokens_per_s_per_gpu": {**derived, "n": it["n"], "derived": True}}
