"""The moeplan error family. Every user mistake is one of these, never a bare traceback."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class MoeplanError(Exception):
    """Base of all errors moeplan raises on purpose."""


class InputError(MoeplanError, ValueError):
    """Bad user input: names the field, the value and what is allowed.

    Attributes:
        field: dotted path of the offending field (``layout.tensor_model_parallel_size``).
        value: the value given.
        allowed: what would have been accepted, in words.
    """

    def __init__(self, field: str, value: object, allowed: str, hint: str | None = None):
        self.field = field
        self.value = value
        self.allowed = allowed
        self.hint = hint
        shown = "missing" if value is None else f"{value!r} is not valid"
        msg = f"{field}: {shown}; allowed: {allowed}"
        if hint:
            msg += f" ({hint})"
        super().__init__(msg)


class UnknownNameError(InputError):
    """A name (model, GPU, key) that is not known; suggests the closest known names."""

    def __init__(self, field: str, value: str, known: Iterable[str], what: str = "one of"):
        known = sorted(set(known))
        close = difflib.get_close_matches(str(value), known, n=3, cutoff=0.5)
        hint = f"did you mean {', '.join(repr(c) for c in close)}?" if close else None
        shown = ", ".join(known) if len(known) <= 30 else ", ".join(known[:30]) + ", ..."
        super().__init__(field, value, f"{what} {shown}", hint)
        self.known = known
        self.suggestions = close


def did_you_mean(name: str, known: Iterable[str]) -> list[str]:
    """Closest known names to ``name`` (difflib ratio ≥ 0.5), best first."""
    return difflib.get_close_matches(name, sorted(set(known)), n=3, cutoff=0.5)
