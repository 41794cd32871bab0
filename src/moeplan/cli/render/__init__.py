"""Rendering of the library's documents: JSON, and rich tables per command group (``check``,
``estimate``, ``plan``, ``diagnose``, ``vlm``). Each ``render_*`` function draws the document of the
:mod:`moeplan.api` function its docstring names (units as there: bytes shown as GiB, seconds, tokens/s)
to stdout and raises nothing for such a document. rich is imported inside the functions that draw,
so that ``moeplan --help`` stays fast."""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from rich.cells import cell_len
from rich.console import Console
from rich.padding import Padding
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.segment import Segment
from rich.text import Text

import moeplan.i18n as i18n

#: a space that must not become a line break: between a figure and its unit (``-7.4 %``,
#: ``170.9 GiB``, ``1,260 tok/s/GPU``, ``11.63 s``), so a wrapped line never leaves a figure's unit
#: (or its sign, for ``%``) on the next line
_UNIT_SPACE = re.compile(r"(?<=\d) (?=(%|[KMGT]i?B\b|GB/s|s\b|ms\b|µs\b|tok/s|tokens/s|TFLOP/s|Mi\b|×))")


def break_offsets(plain: str, width: int) -> list[int]:
    """Where to break ``plain`` (greedy, at spaces other than :data:`_UNIT_SPACE`) so that no line is
    wider than ``width`` cells; a word wider than ``width`` is sliced at the width. Offsets point just
    past the space that ends a line (or at the first character of a slice's next line).

    Linear in ``len(plain)``: line widths come from running cell sums, never from re-measuring the
    line (which made a 200,000-character path take minutes)."""
    protected = {m.start() for m in _UNIT_SPACE.finditer(plain)}
    cells = [0]  # cells[k]: the width of plain[:k]
    for ch in plain:
        cells.append(cells[-1] + cell_len(ch))
    offsets: list[int] = []
    start = end = 0  # the current line starts at `start`; plain[start:end] is it without trailing spaces
    last_space = -1  # the last breakable space on the current line
    for i, ch in enumerate(plain):
        if ch == "\n":
            start, end, last_space = i + 1, i + 1, -1
            continue
        if ch != " ":
            end = i + 1
        elif i not in protected:
            last_space = i
        while cells[end] - cells[start] > width:
            cut = last_space + 1 if last_space > start else i  # at a space, else slice the word here
            if cut <= start:
                break
            offsets.append(cut)
            start, end, last_space = cut, max(end, cut), -1
    return offsets


#: control characters of the terminal (C0 but newline and tab, DEL, C1): in text they would move the
#: cursor, set the title or the colour (an environment value or a file name can hold them)
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def _visible(text: str) -> str:
    """``text`` with every terminal control character written as its escape (``\\x1b``)."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


class _Console(Console):
    """A console whose plain-text lines (a string, or a string in a ``Padding``) wrap between words
    but never between a figure and its unit (:data:`_UNIT_SPACE`); tables and other renderables
    as rich draws them. Terminal control characters in any text it prints are shown as escapes
    (:func:`_visible`); only its own styling reaches the terminal as codes."""

    def _render_buffer(self, buffer: Iterable[Segment]) -> str:
        clean = (
            seg if seg.control or not _CONTROL.search(seg.text) else seg._replace(text=_visible(seg.text))
            for seg in buffer
        )
        return super()._render_buffer(clean)

    def _wrapped(self, obj: Any, width: int, kw: dict) -> Any:
        if not isinstance(obj, str) or width < 20:
            return obj
        text = self.render_str(obj, style=kw.get("style") or "", markup=kw.get("markup"), highlight=False)
        cuts = break_offsets(text.plain, width)
        if not cuts:
            return text
        lines = text.divide(cuts)
        for line in lines:
            line.rstrip()
        return Text("\n").join(lines)

    def print(self, *objects: Any, **kw: Any) -> None:
        if len(objects) == 1 and not kw.get("soft_wrap") and "width" not in kw and "justify" not in kw:
            obj = objects[0]
            if isinstance(obj, Padding) and isinstance(obj.renderable, str):
                inner = self._wrapped(obj.renderable, self.width - obj.left - obj.right, kw)
                # not expanded: a padded line ends at its text, not in spaces to the console's width
                objects = (Padding(inner, (obj.top, obj.right, obj.bottom, obj.left), style=obj.style, expand=False),)
            else:
                objects = (self._wrapped(obj, self.width, kw),)
        super().print(*objects, **kw)


#: the language of this command's tables (set by :func:`set_lang`; the JSON output never reads it)
_STATE = {"lang": "en"}


def set_lang(option: str | None) -> str:
    """Set the language of the tables from ``--lang`` (or, when None, the locale environment);
    returns it. Raises :class:`moeplan.errors.InputError` for a language that is not en or zh."""
    _STATE["lang"] = i18n.resolve_lang(option)
    return _STATE["lang"]


def lang() -> str:
    """The language of the tables: ``en`` or ``zh``."""
    return _STATE["lang"]


def T(text: str) -> str:
    """A table text (title, column label, formatted line) in the current language (English where
    ``i18n/zh.yaml`` has none)."""
    return i18n.ui(text, _STATE["lang"])


def rule_text(rule_id: str, text: str | None) -> str | None:
    """A rule's message or fix in the current language (English where there is no Chinese text)."""
    return i18n.translate(rule_id, text, _STATE["lang"])


def finding_line(line: str) -> str:
    """``rule_id: message`` (as the plan and fit documents list broken rules) in the current language."""
    rule_id, sep, message = line.partition(": ")
    return f"{rule_id}{sep}{rule_text(rule_id, message)}" if sep else line


def console(stderr: bool = False):
    """A rich console on stdout (or stderr), 140 columns wide when not a terminal and COLUMNS is unset;
    its lines never break between a figure and its unit."""

    c = _Console(stderr=stderr, highlight=False, soft_wrap=False)
    if not c.is_terminal and "COLUMNS" not in os.environ:
        c = _Console(stderr=stderr, highlight=False, soft_wrap=False, width=140)
    return c


@contextlib.contextmanager
def progress_bar(description: str) -> Iterator[Callable[[int, int], None]]:
    """A transient progress bar on stderr, shown only on a terminal and once the work has taken more
    than a second (so piped and captured output never contains it); yields ``tick(done, total)``."""

    t0 = time.perf_counter()
    prog = Progress(
        TextColumn(description),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        transient=True,
        console=console(True),
    )
    state: dict = {}

    interactive = prog.console.is_terminal

    def tick(done: int, total: int) -> None:
        if "task" not in state:
            if not interactive or time.perf_counter() - t0 < 1.0:
                return
            prog.start()
            state["task"] = prog.add_task(description, total=total)
        prog.update(state["task"], completed=done, total=total)

    try:
        yield tick
    finally:
        if "task" in state:
            prog.stop()


@contextlib.contextmanager
def fit_spinner() -> Iterator[Callable[[int, int], None]]:
    """A transient spinner on stderr while constants are fitted, started by the first
    ``tick(evaluations, runs)`` (``tick(0, runs)`` when the fit starts)."""

    prog = Progress(SpinnerColumn(), TextColumn("{task.description}"), transient=True, console=console(True))
    state: dict = {}

    def tick(n: int, runs: int) -> None:
        if "task" not in state:
            prog.start()
            state["task"] = prog.add_task("fitting", total=None)
        if n:
            prog.update(state["task"], description=f"fitting: {n} model evaluations over {runs} runs")

    try:
        yield tick
    finally:
        if "task" in state:
            prog.stop()


def print_json(obj: Any) -> None:
    """Print a JSON document to stdout (indented, keys in the order built; non-JSON values as str)."""
    sys.stdout.write(json.dumps(obj, indent=2, default=str) + "\n")


def print_lines(prefix: str, lines: list[str]) -> None:
    """Each line to stderr as ``prefix: line`` (notes and warnings next to the output), a message in
    the current language."""
    for line in lines:
        sys.stderr.write(f"{prefix}: {T(line)}\n")
