"""Parse Megatron-LM / Megatron Bridge training logs into steady-state statistics.

Recognised lines (Megatron's ``training.py`` ``training_log`` and memory report formats):

- ``iteration  123/ 250000 | consumed samples: ... | elapsed time per iteration (ms): 86545.2 |
  throughput per GPU (TFLOP/s/GPU): 456.7 | ... | lm loss: 2.50E+00 | ... | grad norm: 0.231 |
  number of skipped iterations: 0 | number of nan iterations: 0 |`` (field order free, any subset);
- ``[Rank 0] (after 10 iterations) memory (MB) | allocated: ... | max allocated: ... | reserved: ... |
  max reserved: ...`` and, with ``--log-device-memory-used``, ``| total device memory used: ...``
  (``torch.cuda.device_memory_used()``, what nvidia-smi shows; megatron/training/utils/common_utils.py
  ``report_memory``);
- Megatron Bridge's interval throughput line, ``Step Time : 14.26s GPU utilization: 58.2MODEL_TFLOP/s/GPU``
  (``58.2TFLOP/s/GPU`` before November 2025), which rank 0 prints just before the interval's iteration
  record (``training/utils/train_utils.py`` ``training_log``): its TFLOP/s/GPU is that record's when the
  record logs none and its iteration time rounds to the line's step time;
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

import codecs
import io
import math
import re
import statistics
from array import array
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from moeplan.errors import InputError
from moeplan.i18n.messages import Items, msg
from moeplan.inputs.policy import ascii_int, open_regular, read_bytes
from moeplan.inputs.versions import RELEASE_FORM
from moeplan.io.imports import DumpReader, import_config, import_dump

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_ITER = re.compile(r"iteration\s+([0-9]{1,18})\s*/\s*([0-9]{1,18})", re.ASCII)
#: a field name as Megatron prints it (``elapsed time per iteration (ms)``), and its value
_FIELD_NAME = re.compile(r"[A-Za-z][A-Za-z /()\-_]*")
_FIELD_VALUE = re.compile(r"\s*([-+0-9.eE]{1,64}(?![-+0-9.eE])|nan|inf)")
#: ``| name: value`` fields, linear on any line: the name runs to the next ':' or '|' (a negated class,
#: no backtracking into it), the value is at most 64 characters
_FIELDS = re.compile(r"\|([^|:]*):\s*([-+0-9.eE]{1,64}(?![-+0-9.eE])|nan|inf)")
_MEM = re.compile(
    r"memory \(MB\)\s*\|\s*allocated:\s*([0-9.]{1,64})\s*\|\s*max allocated:\s*([0-9.]{1,64})\s*\|"
    r"\s*reserved:\s*([0-9.]{1,64})\s*\|\s*max reserved:\s*([0-9.]{1,64})"
    r"(?:\s*\|\s*total device memory used:\s*([0-9.]{1,64}))?",
    re.ASCII,
)
_BANNER = [
    ("container_release", re.compile(rf"NVIDIA Release ({RELEASE_FORM})")),
    ("torch", re.compile(r"PyTorch Version\s+(\S{1,200})")),
    ("world_size", re.compile(r"using world size:\s*([0-9]{1,9})")),
    ("data_parallel_size", re.compile(r"data-parallel[- ]size:\s*([0-9]{1,9})")),
    ("context_parallel_size", re.compile(r"(?<!hierarchical )context-parallel[- ]size:\s*([0-9]{1,9})")),
    ("tensor_model_parallel_size", re.compile(r"(?<!encoder-)tensor-model-parallel[- ]size:\s*([0-9]{1,9})")),
    ("pipeline_model_parallel_size", re.compile(r"(?<!encoder-)pipeline-model-parallel[- ]size:\s*([0-9]{1,9})")),
]
_RANK_PARAMS = re.compile(
    r"number of parameters on \(tensor, pipeline\) model parallel rank \(([0-9]{1,9}), ([0-9]{1,9})\):\s*([0-9]{1,18})"
)
_AFTER = re.compile(r"after ([0-9]{1,18}) iterations")
_NUMBER = r"([0-9]{1,12}(?:\.[0-9]{1,9})?)"
#: Megatron Bridge's interval throughput line (module docstring)
_BRIDGE_STEP = re.compile(rf"Step Time\s*:\s*{_NUMBER}\s*s\s+GPU utilization:\s*{_NUMBER}\s*(?:MODEL_)?TFLOP/s/GPU")
#: how far an iteration time may be from the step time Bridge's line prints with two decimals (s)
_STEP_ROUNDING_S = 0.0051
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
#: the per-iteration figures kept, one column each
KEYS: tuple[str, ...] = tuple(dict.fromkeys(_NAMES.values()))
_BIT = {k: 1 << i for i, k in enumerate(KEYS)}

#: keys whose logged values must be positive to be real measurements
POSITIVE_KEYS = frozenset({"iteration_time_ms", "tflops_per_gpu", "tokens_per_s_per_gpu", "global_batch_size"})
#: longest plausible iteration (a week, in ms): beyond it a value is corrupt, not slow
MAX_ITERATION_MS = 7 * 86400 * 1e3
#: shortest plausible iteration (a microsecond, in ms): below it a value is corrupt, not fast
MIN_ITERATION_MS = 1e-3
#: the longest physical line read whole (a longer one is cut there and counted unreadable)
MAX_LINE_CHARS = 2**20
#: the longest record rejoined from hard-wrapped lines (its pieces beyond are not joined)
MAX_RECORD_CHARS = 2**16


class IterationTable(Mapping):
    """The iterations of a log as a read-only mapping ``iteration → {key: value}`` (the keys that
    iteration logged), in iteration order, backed by one compact column per figure (8 bytes per
    iteration and figure) instead of a dict per iteration."""

    def __init__(self, its: array, cols: dict[str, array], mask: array) -> None:
        self._its, self._cols, self._mask = its, cols, mask
        self._index: dict[int, int] | None = None

    def __len__(self) -> int:
        return len(self._its)

    def __iter__(self) -> Iterator[int]:
        return iter(self._its)

    def _row(self, r: int) -> dict[str, float]:
        m = self._mask[r]
        return {k: self._cols[k][r] for k in KEYS if m & _BIT[k]}

    def __getitem__(self, it: int) -> dict[str, float]:
        if self._index is None:
            self._index = {i: r for r, i in enumerate(self._its)}
        return self._row(self._index[it])

    def values(self):  # noqa: D102 - Mapping's, without a lookup per row
        return (self._row(r) for r in range(len(self._its)))

    def items(self):  # noqa: D102
        return ((i, self._row(r)) for r, i in enumerate(self._its))

    def column(self, key: str) -> list[float]:
        """The values of ``key`` in iteration order, for the iterations that logged it."""
        if key not in self._cols:
            return []
        bit, col, mask = _BIT[key], self._cols[key], self._mask
        return [col[r] for r in range(len(mask)) if mask[r] & bit]

    def points(self, key: str) -> tuple[list[int], list[float]]:
        """(iterations, values) of ``key`` where it was logged with a finite value, in iteration order."""
        col = self._cols.get(key)
        if col is None:
            return [], []
        bit, mask = _BIT[key], self._mask
        rows = [r for r in range(len(mask)) if mask[r] & bit and math.isfinite(col[r])]
        return [self._its[r] for r in rows], [col[r] for r in rows]

    def count(self, key: str, start: int = 0) -> int:
        """How many iterations from position ``start`` on logged ``key``."""
        bit, mask = _BIT[key], self._mask
        return sum(1 for r in range(start, len(mask)) if mask[r] & bit)


@dataclass
class LogStats:
    """Steady-state statistics of one log (times in seconds, memory in MiB as Megatron prints it).

    ``iterations`` holds each iteration's figures (first report wins) in iteration order; ``dump`` the
    log's last argument dump (:class:`~moeplan.io.imports.DumpReader`: raw text per name)."""

    iterations: IterationTable = field(default_factory=lambda: IterationTable(array("q"), {}, array("B")))
    memory_mb: dict[str, float] = field(default_factory=dict)
    memory_reports: list[tuple[int, float]] = field(default_factory=list)  # (iteration, max allocated MiB)
    environment: dict[str, str | int] = field(default_factory=dict)  # banner facts (first seen wins)
    rank_params: dict[str, int] = field(default_factory=dict)  # "tp,pp" -> parameters on that rank
    truncated: bool = False  # the file ends inside a record (dropped)
    lines: int = 0
    unreadable_lines: int = 0
    warmup_skipped: int = 0
    dump: DumpReader = field(default_factory=DumpReader)

    @property
    def args(self) -> dict[str, str]:
        """The log's last argument dump: name → value text (empty without one)."""
        return self.dump.args

    def series(self, key: str, steady: bool = True) -> list[float]:
        """Finite values of ``key`` in iteration order (after the warm-up when ``steady``); for the
        rates, times and batch sizes only physically possible ones (positive, and an iteration under
        :data:`MAX_ITERATION_MS`), so a corrupt line cannot turn a median into 0, a negative or inf."""
        tab = self.iterations
        bit, col, mask = _BIT[key], tab._cols.get(key), tab._mask
        if col is None:
            return []
        start = self.warmup_skipped if steady else 0
        vals = [v for r in range(start, len(mask)) if mask[r] & bit and math.isfinite(v := col[r])]
        if key in POSITIVE_KEYS:
            lo, hi = (MIN_ITERATION_MS, MAX_ITERATION_MS) if key == "iteration_time_ms" else (0.0, math.inf)
            vals = [v for v in vals if lo < v < hi]
        return vals

    def impossible(self, key: str) -> int:
        """How many logged values of ``key`` (after the warm-up) :meth:`series` left out as impossible."""
        if key not in self.iterations._cols:
            return 0
        return self.iterations.count(key, self.warmup_skipped) - len(self.series(key))

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
                if key == "loss":
                    out["loss"]["last"] = vals[-1]  # the loss falls: its median says little alone
        tab = self.iterations
        if "grad_norm" in tab._cols:
            bad = sum(1 for v in tab.column("grad_norm") if not math.isfinite(v))
            if bad:
                out["grad_norm_nonfinite_iterations"] = bad  # NaN / inf grad norms are left out of the statistics
        if len(tab):
            # Megatron resets both counters every log interval (training_log): the run's totals are sums
            for key, name in (("skipped", "skipped_iterations"), ("nan", "nan_iterations")):
                vals = tab.column(key) if key in tab._cols else []
                out[name] = math.fsum(v for v in vals if math.isfinite(v))
        if self.memory_mb:
            out["memory_mb"] = dict(self.memory_mb)
        if self.environment:
            out["environment"] = dict(self.environment)
        if self.rank_params:
            out["rank_params"] = dict(self.rank_params)
        return out


_RECORD_START = re.compile(r"iteration\s+[0-9]+\s*/\s*[0-9]+|memory \(MB\)", re.ASCII)
_RANK_PREFIX = re.compile(r"[0-9]+:", re.ASCII)


def _completes_a_field(tail: str, line: str) -> bool:
    """True when ``line`` reads as the rest of a hard-wrapped record whose last piece ends in
    ``tail`` (the text after its last ``|``): joined, they start with ``name: number`` (``number of s``
    + ``kipped iterations: 0 |``), as Megatron's fields do; a line of another logger (``2025-10-02
    12:00:00 | INFO | ...``) does not."""
    head = (tail + line.split("|", 1)[0]).strip()
    name, sep, rest = head.partition(":")
    if not sep or not _FIELD_NAME.fullmatch(name.strip()):
        return False
    return _FIELD_VALUE.match(rest) is not None


class _Records:
    """Physical lines → logical lines: ANSI colours removed, hard-wrapped continuations of an
    iteration or memory record joined back (a continuation starts with neither white space nor
    ``[``, holds a ``|``, starts no record, and completes the record's last field, see
    :func:`_completes_a_field`); it is appended without a separator (wraps fall mid-word, and field
    names are matched with white space removed). Linear: the pieces of a record are joined once, and
    a record is at most :data:`MAX_RECORD_CHARS` long."""

    def __init__(self, on_physical) -> None:
        self._pieces: list[str] = []
        self._size = 0
        self._in_record = False
        self._on_physical = on_physical

    def feed(self, raw: str) -> str | None:
        """Read one physical line; returns the logical line it completes, if any."""
        line = _ANSI.sub("", raw) if "\x1b" in raw else raw
        self._on_physical(line)
        if self._in_record and self._continues(line):
            self._pieces.append(line.rstrip())
            self._size += len(line)
            return None
        done = self.flush()
        self._in_record = bool(("iteration" in line or "memory (MB)" in line) and _RECORD_START.search(line))
        self._pieces, self._size = [line], len(line)
        return done

    def _continues(self, line: str) -> bool:
        if line[:1] in ("", " ", "\t", "[") or "|" not in line or self._size + len(line) > MAX_RECORD_CHARS:
            return False
        if ("iteration" in line or "memory (MB)" in line) and _RECORD_START.search(line):
            return False
        if _RANK_PREFIX.match(line):
            return False
        last = self._pieces[-1]
        return _completes_a_field(last[last.rfind("|") + 1 :], line)

    def flush(self) -> str | None:
        """The logical line in progress (None when there is none)."""
        if not self._pieces:
            return None
        out = self._pieces[0] if len(self._pieces) == 1 else "".join(self._pieces)
        self._pieces, self._size = [], 0
        return out


class _Parser:
    """One pass over a log's lines into a :class:`LogStats`; memory bounded by the statistics kept
    (one column entry per iteration and figure, the argument dump, the banner), never by the file."""

    def __init__(self) -> None:
        self.st = LogStats()
        self.dump = DumpReader()
        self._its = array("q")
        self._cols: dict[str, array] = {}
        self._mask = array("B")
        self._last: int | None = None
        self._sorted = True
        self._names: dict[str, str | None] = {}
        #: the last Bridge throughput line not yet matched to its record: (step time s, TFLOP/s/GPU)
        self._bridge_step: tuple[float, float] | None = None

    def line(self, line: str) -> None:
        """Read one logical line."""
        has_iter = "iteration" in line and "|" in line
        if not has_iter:
            if "GPU utilization" in line and (mb := _BRIDGE_STEP.search(line)):
                self._bridge_step = (float(mb.group(1)), float(mb.group(2)))
                return
            self._banner(line)
        if "memory (MB)" in line:  # checked first: the memory report also says "(after N iterations) ... |"
            mm = _MEM.search(line)
            if mm:
                self._memory(line, mm)
                return
        if has_iter:
            self._iteration(line)

    def _banner(self, line: str) -> None:
        st = self.st
        if "number of parameters on" in line:
            rp = _RANK_PARAMS.search(line)
            if rp:
                st.rank_params.setdefault(f"{rp.group(1)},{rp.group(2)}", int(rp.group(3)))
                return
        if not ("Release" in line or "Version" in line or "size" in line):
            return
        for key, rx in _BANNER:
            if key not in st.environment:
                mb = rx.search(line)
                if mb:
                    v = mb.group(1)
                    st.environment[key] = int(v) if v.isdigit() and v.isascii() else v

    def _memory(self, line: str, mm: re.Match) -> None:
        st = self.st
        try:
            a, ma, r, mr, du = (float(x) if x is not None else math.nan for x in mm.groups())
        except ValueError:  # "1.2.3"
            st.unreadable_lines += 1
            return
        pairs = (("allocated", a), ("max_allocated", ma), ("reserved", r), ("max_reserved", mr), ("device_used", du))
        for k, v in pairs:
            if math.isfinite(v):
                st.memory_mb[k] = max(st.memory_mb.get(k, 0.0), v)
        after = _AFTER.search(line)
        if after and math.isfinite(ma):
            st.memory_reports.append((int(after.group(1)), ma))

    def _key(self, raw: str) -> str | None:
        """The figure a field name stands for (None: not one moeplan keeps); names are cached as
        they appear (with their blanks)."""
        key = self._names.get(raw, "")
        if key == "":
            name = raw.strip()
            ok = len(name) <= 64 and _FIELD_NAME.fullmatch(name)  # no field moeplan keeps has a longer name
            key = _NAMES.get("".join(name.split()).lower()) if ok else None
            if len(self._names) < 4096 and len(raw) <= 128:
                self._names[raw] = key
        return key

    def _iteration(self, line: str) -> None:
        st = self.st
        mt = _ITER.search(line)
        if not mt:
            st.unreadable_lines += 1
            return
        vals: dict[str, float] = {}
        names = self._names
        for raw, val in _FIELDS.findall(line, mt.end()):
            key = names.get(raw, "")
            if key == "":
                key = self._key(raw)
            if key is not None:
                try:
                    vals[key] = float(val)
                except ValueError:
                    continue
        if not vals:
            st.unreadable_lines += 1
            return
        self._take_bridge_step(vals)
        self._add(int(mt.group(1)), vals)

    def _take_bridge_step(self, vals: dict[str, float]) -> None:
        """Give an iteration record without a TFLOP/s figure the one of the Bridge throughput line just
        before it, when the record's iteration time rounds to the line's step time."""
        pending, self._bridge_step = self._bridge_step, None
        ms = vals.get("iteration_time_ms")
        if pending is None or ms is None or "tflops_per_gpu" in vals:
            return
        if abs(ms / 1e3 - pending[0]) <= _STEP_ROUNDING_S:
            vals["tflops_per_gpu"] = pending[1]

    def _add(self, it: int, vals: dict[str, float]) -> None:
        """Append an iteration (the first report of it wins: a repeat of the last one is dropped
        here, earlier ones when the columns are put in order)."""
        if self._last is not None and it <= self._last:
            if it == self._last:
                return
            self._sorted = False
        self._last = it if self._last is None else max(self._last, it)
        n = len(self._its)
        self._its.append(it)
        mask = 0
        for k, v in vals.items():
            col = self._cols.get(k)
            if col is None:
                col = self._cols[k] = array("d", bytes(8 * n))
            col.append(v)
            mask |= _BIT[k]
        for k, col in self._cols.items():
            if not mask & _BIT[k]:
                col.append(math.nan)
        self._mask.append(mask)

    def finish(self) -> LogStats:
        """The statistics: columns in iteration order, first report of each iteration kept, the
        warm-up measured, the argument dump attached."""
        its, cols, mask = self._its, self._cols, self._mask
        if not self._sorted:
            order = sorted(range(len(its)), key=its.__getitem__)  # stable: the first report first
            keep = [r for j, r in enumerate(order) if j == 0 or its[r] != its[order[j - 1]]]
            its = array("q", (its[r] for r in keep))
            cols = {k: array("d", (c[r] for r in keep)) for k, c in cols.items()}
            mask = array("B", (mask[r] for r in keep))
        st = self.st
        st.iterations = IterationTable(its, cols, mask)
        st.dump = self.dump
        st.warmup_skipped = _warmup(st)
        return st


def read_lines(stream: TextIO) -> Iterator[tuple[str, bool]]:
    """``(line, ended)`` for each physical line of ``stream`` (without its line break; ``ended``:
    it had one). A line longer than :data:`MAX_LINE_CHARS` is returned cut there, its rest skipped:
    memory stays bounded on a file without line breaks."""
    while True:
        line = stream.readline(MAX_LINE_CHARS)
        if not line:
            return
        if line.endswith(("\n", "\r")):
            yield line.rstrip("\r\n"), True
            continue
        if len(line) < MAX_LINE_CHARS:
            yield line, False  # the last line, without a break
            return
        rest = line
        while rest and not rest.endswith(("\n", "\r")):
            rest = stream.readline(MAX_LINE_CHARS)
        yield line, bool(rest)


def parse_log_stream(stream: TextIO) -> LogStats:
    """Parse a training log read line by line from ``stream`` (any number of ranks interleaved,
    hard-wrapped records rejoined), in time linear in its length and memory bounded by the
    statistics kept. Never raises on content."""
    parser = _Parser()
    st = parser.st
    records = _Records(parser.dump.feed)
    ended = True
    for raw, line_ended in read_lines(stream):
        st.lines += 1
        ended = line_ended
        if len(raw) >= MAX_LINE_CHARS:
            st.unreadable_lines += 1
        done = records.feed(raw)
        if done is not None:
            parser.line(done)
    last = records.flush()
    if last is not None:
        tail = last.rstrip()
        if not ended and _ITER.search(tail) and not tail.endswith("|"):
            # an iteration record (which ends in '|') cut off by truncation ("...(ms): 99" of 994.2) is not trusted
            st.unreadable_lines += 1
            st.truncated = True
        else:
            parser.line(last)
    return parser.finish()


def parse_log(text: str) -> LogStats:
    """Parse a training log given as text (see :func:`parse_log_stream`). Never raises on content."""
    return parse_log_stream(io.StringIO(text, newline=None))


def _warmup(st: LogStats) -> int:
    """Leading iterations slower than 1.1 × the median time of the second half (at most 20, at most
    half of the iterations, at least one may go). A log excerpt that starts in steady state skips
    nothing; a run start or a resume (compilation, allocator growth, NCCL setup) is skipped."""
    tab = st.iterations
    n = len(tab)
    col = tab._cols.get("iteration_time_ms")
    if n < 2 or col is None:
        return 0
    bit, mask = _BIT["iteration_time_ms"], tab._mask

    def time(r: int) -> float:
        return col[r] if mask[r] & bit else math.nan

    tail = [t for r in range(n // 2, n) if math.isfinite(t := time(r))]
    if not tail:
        return 0
    ref = statistics.median(tail)
    k = 0
    while k < min(20, max(1, n // 2)) and math.isfinite(time(k)) and time(k) > 1.1 * ref:
        k += 1
    return k


def tokens_per_s_per_gpu(global_batch_size: int, seq_length: int, iteration_ms: float, num_gpus: int) -> float:
    """Training tokens per second per GPU of a step: GBS · seq_length / (iteration time · GPUs)
    (``iteration_ms`` in ms as Megatron prints it, positive)."""
    return global_batch_size * seq_length / (iteration_ms / 1e3) / num_gpus


#: the layout and batch keys a log's argument dump must agree on with the layout a run is attributed
#: to (Megatron-LM argument names, megatron/training/arguments.py)
DUMP_CHECK_KEYS: tuple[str, ...] = (
    "tensor_model_parallel_size",
    "pipeline_model_parallel_size",
    "virtual_pipeline_model_parallel_size",
    "context_parallel_size",
    "expert_model_parallel_size",
    "expert_tensor_parallel_size",
    "micro_batch_size",
    "global_batch_size",
    "seq_length",
)


def dump_sizes(args: Mapping[str, str]) -> dict[str, int]:
    """The sizes of :data:`DUMP_CHECK_KEYS` an argument dump states (name → raw text, as
    :class:`~moeplan.io.imports.DumpReader` keeps it), as Megatron-LM resolved them: a positive ASCII
    integer; ``virtual_pipeline_model_parallel_size`` None is 1 (no interleaving), and
    ``expert_tensor_parallel_size`` None is the TP size (``validate_args`` sets it so). A key the dump
    leaves out, or gives as anything else, is left out."""
    out: dict[str, int] = {}
    for key in DUMP_CHECK_KEYS:
        raw = args.get(key)
        v = ascii_int(raw, 1) if raw is not None else None
        if v is not None:
            out[key] = v
        elif raw == "None" and key == "virtual_pipeline_model_parallel_size":
            out[key] = 1
    tp = out.get("tensor_model_parallel_size")
    if args.get("expert_tensor_parallel_size") == "None" and tp is not None:
        out["expert_tensor_parallel_size"] = tp
    return out


def scenario_sizes(s: Any) -> dict[str, int | None]:
    """The sizes of :data:`DUMP_CHECK_KEYS` of a resolved scenario (``moeplan.inputs.resolved.Scenario``;
    VPP 1 when not interleaved, ETP 1 when unset), None where it states no batch or sequence."""
    t = s.training
    return {
        "tensor_model_parallel_size": s.tp,
        "pipeline_model_parallel_size": s.pp,
        "virtual_pipeline_model_parallel_size": s.vpp,
        "context_parallel_size": s.cp,
        "expert_model_parallel_size": s.ep,
        "expert_tensor_parallel_size": s.etp,
        "micro_batch_size": t.micro_batch_size,
        "global_batch_size": t.global_batch_size,
        "seq_length": t.seq_length,
    }


def dump_mismatches(args: Mapping[str, str], attributed: Mapping[str, int | None]) -> list[tuple[str, int, int]]:
    """``(key, the log's value, the attributed value)`` for each key of :data:`DUMP_CHECK_KEYS` that a
    log's argument dump (``args``) and the layout the log is attributed to (``attributed``, as
    :func:`scenario_sizes` gives it) both state and disagree on; empty for a log without a dump."""
    logged = dump_sizes(args)
    return [
        (k, logged[k], v)
        for k in DUMP_CHECK_KEYS
        if k in logged and (v := attributed.get(k)) is not None and logged[k] != v
    ]


def mismatch_text(mismatches: list[tuple[str, int, int]], attributed: str = "the run") -> str:
    """``tensor_model_parallel_size 8 in the log, 4 in the entry; ...``: each key a log ran
    differently with both values (``attributed`` names what the log was attributed to), for messages
    and notes."""
    if attributed == "the entry":
        each = [msg("run_logs.key_differs_from_entry", key=k, logged=got, stated=want) for k, got, want in mismatches]
        return msg("run_logs.keys_differ", keys=Items(each))
    return "; ".join(f"{k} {got} in the log, {want} in {attributed}" for k, got, want in mismatches)


def other_layout(
    path: Any,
    args: Mapping[str, str],
    sizes: Mapping[str, int | None],
    *,
    where: str,
    attributed: str,
    remedy: str,
    accept: bool,
) -> str | None:
    """Hold a log's argument dump (``args``) to the sizes of the layout it is attributed to
    (``sizes``, :func:`scenario_sizes`): None when they agree or the log has no dump; the
    :func:`mismatch_text` when they differ and ``accept`` (``--accept-mismatch``).

    Raises:
        InputError: they differ and not ``accept``; the message names the log, every key with both
            values, ``where`` it sits (``the sweep entry it sits in``) and the ``remedy``.
    """
    bad = dump_mismatches(args, sizes)
    if not bad:
        return None
    text = mismatch_text(bad, attributed)
    if not accept:
        raise InputError(
            f"log {path}",
            text,
            "",
            sentence=f"its argument dump ran another layout than {where} ({text}); {remedy} (nothing was written)",
        )
    return text


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


#: the longest OOM message file read whole (the message is near its end; a log is read as a log)
MAX_TEXT_FILE_BYTES = 256 * 2**20


def _decoded(raw) -> io.TextIOWrapper:
    """A text stream over the binary file ``raw``: UTF-16 with a byte-order mark, else UTF-8 (a BOM
    dropped); undecodable bytes replaced; universal newlines."""
    head = raw.peek(3)[:3] if hasattr(raw, "peek") else b""
    encoding = "utf-16" if head[:2] in (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE) else "utf-8-sig"
    return io.TextIOWrapper(raw, encoding=encoding, errors="replace", newline=None)


def read_log(path: Path, field: str = "log") -> LogStats:
    """Parse the training log at ``path`` in one streaming pass (time linear in its length, memory
    bounded by the statistics kept, never by the file), argument dump included.

    Raises:
        InputError: the path is not an existing, readable regular file (a FIFO is refused, never read).
    """
    with open_regular(path, field) as raw:
        try:
            return parse_log_stream(_decoded(raw))
        except OSError as exc:
            raise InputError(field, str(path), f"a readable file ({exc.strerror or type(exc).__name__})") from None


def read_text_file(path: Path, field: str = "log") -> str:
    """Read a log-like text file whole: UTF-8 (undecodable bytes replaced) or UTF-16 with a BOM.

    Raises:
        InputError: the path is not an existing, readable regular file, or longer than
            :data:`MAX_TEXT_FILE_BYTES`.
    """
    data = read_bytes(path, field, MAX_TEXT_FILE_BYTES)
    if data[:2] in (b"\xff\xfe", b"\xfe\xff"):
        return data.decode("utf-16", errors="replace")
    return data.decode("utf-8-sig", errors="replace")


def log_config(text: str) -> tuple[dict | None, list[str]]:
    """The scenario mapping read from a log's argument dump (and the import notes), or (None, [])
    when the log has no dump."""

    try:
        return import_config(text, "megatron-log")
    except InputError:
        return None, []


def stats_config(st: LogStats) -> tuple[dict | None, list[str]]:
    """As :func:`log_config`, from the argument dump a streaming parse kept (:func:`read_log`)."""
    try:
        return import_dump(st.dump)
    except InputError:
        return None, []
