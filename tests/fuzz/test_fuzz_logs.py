"""Fuzz the log readers: hostile line shapes (runs of spaces after ``| a``, wrapped records
of millions of pieces, other loggers' ``date | INFO |`` lines, huge and non-ASCII numbers, binary,
a line without end) through ``log`` and ``compare``, and the linear-time contract of the parser: a
log ten times longer takes about ten times longer, never a hundred."""

from __future__ import annotations

import time

from harness import TIMEOUT_S, fuzz_settings, judge, listing, outside, run_cli, sandbox, time_limit
from hypothesis import given
from hypothesis import strategies as st

from moeplan.io.run_logs import parse_log

ITER = (
    " iteration {it:8d}/     100 | consumed samples: {cs:8d} | elapsed time per iteration (ms): {ms} | "
    "throughput per GPU (TFLOP/s/GPU): {tf} | lm loss: {loss} | grad norm: {gn} | "
    "number of skipped iterations: {sk} | number of nan iterations:   0 |"
)
MEM = "[Rank 0] (after {it} iterations) memory (MB) | allocated: {a} | max allocated: {a} | reserved: {a} | max reserved: {a}"
NUMBERS = [
    "1000.0",
    "0",
    "-5",
    "nan",
    "inf",
    "1e999",
    "9" * 400 + ".5",
    "9" * 5000,
    "²",
    "８",
    "1.2.3",
    "",
    "e",
    "1e-320",
]
JUNK = [
    "| a" + " " * 100_000,
    "iteration 1/ 1 |" + " |" * 50_000,
    "2025-10-02 12:00:00 | INFO | lm loss: 5.0 | something",
    "\x00\x01\xff binary junk",
    "[rank3]: " + "x" * 10_000,
    "using world size: " + "9" * 5000,
    "NVIDIA Release 25.09",
    " > number of parameters on (tensor, pipeline) model parallel rank (0, 0): " + "9" * 5000,
    "------------------------ arguments ------------------------",
    "  tensor_model_parallel_size " + "." * 50_000 + " 2",
    "-------------------- end of arguments ---------------------",
    "\x1b[" + "1;" * 10_000,
    "iteration" * 10_000,
]


@st.composite
def log_text(draw) -> str:
    lines = []
    for it in range(1, draw(st.integers(0, 30)) + 1):
        kind = draw(st.sampled_from(["iter", "iter", "iter", "mem", "junk", "wrap"]))
        num = st.sampled_from(NUMBERS) | st.floats(allow_nan=True).map(repr)
        if kind == "junk":
            lines.append(draw(st.sampled_from(JUNK) | st.text(max_size=60)))
            continue
        if kind == "mem":
            lines.append(MEM.format(it=it, a=draw(num)))
            continue
        line = ITER.format(it=it, cs=it, ms=draw(num), tf=draw(num), loss=draw(num), gn=draw(num), sk=draw(num))
        if kind == "wrap":  # hard-wrapped at a random width
            w = draw(st.integers(5, 90))
            lines += [line[i : i + w] for i in range(0, len(line), w)]
        else:
            lines.append(line)
    text = "\n".join(lines)
    return text if draw(st.booleans()) else text + "\n"


def _judge_log_run(cls: str, args_of, texts: list[str]) -> None:
    with sandbox() as box:
        paths = []
        for i, text in enumerate(texts):
            p = box / f"{i}.log"
            p.write_bytes(text.encode("utf-8", "surrogatepass"))
            paths.append(p)
        before = listing(box)
        out = run_cli(args_of(paths))
        stray = outside(before, listing(box), set())
        judge(cls, out, [f"outside: {stray}"] if stray else [])


@fuzz_settings(40)
@given(text=log_text())
def test_hostile_logs(text):
    _judge_log_run("logs", lambda ps: ["log", ps[0], "--json"], [text])


@fuzz_settings(15)
@given(a=log_text(), b=log_text())
def test_hostile_log_pairs_compare(a, b):
    _judge_log_run("logs", lambda ps: ["compare", ps[0], ps[1], "--json"], [a, b])


def _seconds(text: str) -> float:
    t0 = time.perf_counter()
    with time_limit(TIMEOUT_S):
        parse_log(text)
    return time.perf_counter() - t0


SHAPES = {
    "spaces after '| a'": lambda n: "iteration 1/ 10 | a" + " " * n + "\n",
    "wrapped record": lambda n: (
        " iteration 1/ 10 | elapsed time per iteration (ms): 1.0 | lm loss: 1.0 | x"
        + "".join("x: 1 |\n" for _ in range(n // 7))
    ),
    "pipes": lambda n: "iteration 1/ 10 " + "|" * n + "\n",
    "dump dots": lambda n: "-- arguments --\n  name " + "." * n + "\n",
    "colons": lambda n: "iteration 1/ 10 | a" + ":" * n + "\n",
    "ansi": lambda n: "\x1b[" + "1;" * (n // 2) + "\n",
    "one long line": lambda n: "x" * n,
    "iterations": lambda n: "".join(
        f" iteration {i}/ 10 | elapsed time per iteration (ms): 1.0 |\n" for i in range(n // 55)
    ),
}


def test_parser_is_linear_on_every_line_shape():
    """200 K → 2 M characters of each shape: at most ~10x (with slack for timer noise) the time; the
    quadratic shapes of the adversarial pass took 100x."""
    slow = []
    for name, make in SHAPES.items():
        small, big = _seconds(make(200_000)), _seconds(make(2_000_000))
        if big > 25 * max(small, 0.01):
            slow.append(f"{name}: {small:.3f} s -> {big:.3f} s")
    assert not slow, "super-linear log parsing:\n" + "\n".join(slow)
