"""The ``moeplan`` command: the Typer app, its commands (one module per group) and :func:`main`.

Exit codes: 0 ok, 1 the scenario breaks a rule (or does not fit, or B is slower, ...), 2 bad input
or an output that cannot be written (standard output full or closed: one line on stderr), 3 a
moeplan bug, 141 (quietly) when the reader of a pipe closed it, as for a Unix tool ended by SIGPIPE. On a standard output or error that cannot encode a character (``LANG=C`` on old
Pythons, ``PYTHONIOENCODING=ascii``) the character is written as an ASCII fallback (``×`` → ``x``,
``≥`` → ``>=``) or ``?``, never an error.
"""

from __future__ import annotations

import codecs
import contextlib
import errno
import os
import sys
import unicodedata
from typing import Any, NoReturn, TextIO, cast

import typer

from moeplan.cli import (
    check_cmds,
    diagnose_cmds,
    estimate_cmds,
    known_issues_cmds,
    plan_cmds,
    serve_cmds,
    vlm_cmds,
)
from moeplan.cli.help import FoldingHelpCommand, FoldingHelpGroup

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    cls=FoldingHelpGroup,
    help="Check, estimate and plan Megatron-Core / Megatron Bridge layouts for MoE training.",
)

#: (name, function) of every command, in ``--help`` order
COMMANDS = (
    ("check", check_cmds.check),
    ("estimate", estimate_cmds.estimate),
    ("export", estimate_cmds.export_cmd),
    ("log", diagnose_cmds.log_cmd),
    ("compare", diagnose_cmds.compare_cmd),
    ("oom", diagnose_cmds.oom_cmd),
    ("calibrate", diagnose_cmds.calibrate_cmd),
    ("doctor", diagnose_cmds.doctor_cmd),
    ("models", check_cmds.models),
    ("gpus", check_cmds.gpus),
    ("params", check_cmds.params),
    ("rules", check_cmds.rules_cmd),
    ("plan", plan_cmds.plan_cmd),
    ("fit", plan_cmds.fit_cmd),
    ("recipes", plan_cmds.recipes_cmd),
    ("sweep", plan_cmds.sweep_cmd),
    ("vlm-stats", vlm_cmds.vlm_stats_cmd),
    ("serve", serve_cmds.serve_cmd),
    ("known-issues", known_issues_cmds.known_issues_cmd),
)
for _name, _command in COMMANDS:
    app.command(_name, cls=FoldingHelpCommand)(_command)


#: ASCII spellings of the characters the output uses, for a stream that cannot encode them
ASCII_FALLBACKS = {
    "×": "x", "≥": ">=", "≤": "<=", "≈": "~", "±": "+-", "≠": "!=", "→": "->", "←": "<-", "↔": "<->",
    "–": "-", "—": "-", "−": "-", "…": "...", "·": "*", "•": "*", "µ": "u", "Δ": "d", "‘": "'", "’": "'",
    "“": '"', "”": '"', "✓": "ok", "✗": "x", "│": "|", "─": "-", "┃": "|", "━": "-", "²": "^2",
}  # fmt: skip
#: the name of the codec error handler that writes :data:`ASCII_FALLBACKS` (else ``?``)
FALLBACK_ERRORS = "moeplan-ascii-fallback"


def _ascii_fallback(exc: UnicodeError) -> tuple[str, int]:
    """Codec error handler: each character the stream cannot encode becomes its
    :data:`ASCII_FALLBACKS` spelling, its decomposition's ASCII letters (``é`` → ``e``), or ``?``."""
    if not isinstance(exc, UnicodeEncodeError):
        raise exc
    out = []
    for ch in exc.object[exc.start : exc.end]:
        plain = unicodedata.normalize("NFKD", ch).encode("ascii", "ignore").decode()
        out.append(ASCII_FALLBACKS.get(ch) or plain or "?")
    return "".join(out), exc.end


codecs.register_error(FALLBACK_ERRORS, _ascii_fallback)


def _tolerant_streams() -> None:
    """Standard output and error that write what their encoding cannot hold as ASCII fallbacks
    (:func:`_ascii_fallback`) instead of raising ``UnicodeEncodeError``."""
    for stream in (sys.stdout, sys.stderr):
        enc = str(getattr(stream, "encoding", "") or "").lower().replace("_", "-")
        if stream is not None and not enc.startswith("utf") and hasattr(stream, "reconfigure"):
            stream.reconfigure(errors=FALLBACK_ERRORS)


class OutputClosed(Exception):
    """Standard output could not be written (full device, closed pipe or descriptor, I/O error):
    raised by :class:`_GuardedOutput` in place of the ``OSError``, so that no command or framework
    layer mistakes it for anything else; :func:`main` turns it into exit 2."""

    def __init__(self, cause: OSError) -> None:
        super().__init__(cause.strerror or errno.errorcode.get(cause.errno or 0, type(cause).__name__))
        self.errno = cause.errno


class _GuardedOutput:
    """Standard output whose write and flush failures raise :class:`OutputClosed`; every other
    attribute is the stream's. ``None`` (a descriptor closed before the start) fails on first write."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        if self._stream is None:
            raise OutputClosed(OSError(errno.EBADF, "standard output is closed"))
        try:
            return int(self._stream.write(text))
        except OSError as exc:
            raise OutputClosed(exc) from None

    def flush(self) -> None:
        try:
            if self._stream is not None:
                self._stream.flush()
        except OSError as exc:
            raise OutputClosed(exc) from None

    def isatty(self) -> bool:
        return self._stream is not None and bool(self._stream.isatty())

    def __getattr__(self, name: str) -> Any:
        if self._stream is None:
            raise AttributeError(name)
        return getattr(self._stream, name)


#: exit code when the reader closed the pipe (``moeplan rules | head``): what a shell reports for a
#: Unix tool that SIGPIPE ended (128 + 13), said without a message as such tools do
EXIT_PIPE_CLOSED = 141


def _output_failed(exc: OutputClosed) -> NoReturn:
    """One line on stderr, standard output pointed at the null device (so the interpreter's final
    flush raises nothing), exit 2; a pipe its reader closed (EPIPE) ends quietly with
    :data:`EXIT_PIPE_CLOSED`."""
    with contextlib.suppress(OSError, AttributeError, ValueError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), cast(Any, sys.__stdout__).fileno())
    if exc.errno == errno.EPIPE:
        raise SystemExit(EXIT_PIPE_CLOSED) from None
    with contextlib.suppress(OSError, AttributeError, ValueError):
        sys.stderr.write(f"error: standard output: cannot write the output ({exc})\n")
        sys.stderr.flush()
    raise SystemExit(2) from None


def main() -> None:
    """Console-script entry point. Unexpected errors (moeplan bugs) exit with code 3 and one line,
    so that scripts can tell them from a broken rule (1) or bad input (2); an output that cannot be
    written (standard output full or closed) exits 2 with one line on stderr."""
    _tolerant_streams()
    sys.stdout = cast(TextIO, _GuardedOutput(sys.stdout))
    try:
        try:
            app(standalone_mode=True)
        finally:
            sys.stdout.flush()  # a full device fails here, on the last buffered block
    except SystemExit:
        raise
    except OutputClosed as exc:
        _output_failed(exc)
    except Exception as exc:  # noqa: BLE001 - last resort: never a traceback for the user
        _internal_error(exc)


def _internal_error(exc: Exception) -> NoReturn:
    """One line on stderr for a moeplan bug; exit 3."""
    sys.stderr.write(f"internal error (a moeplan bug, please report): {type(exc).__name__}: {exc}\n")
    raise SystemExit(3) from None


if __name__ == "__main__":
    main()
