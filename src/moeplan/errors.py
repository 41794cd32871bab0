"""The moeplan error family. Every user mistake is one of these, never a bare traceback."""

from __future__ import annotations

import difflib
import reprlib
import unicodedata
from collections.abc import Iterable

#: the most characters of a value quoted in an error or a note (longer values are cut with "...")
QUOTE_LIMIT = 80


class _ShortRepr(reprlib.Repr):
    """``reprlib`` bounded in time as well as length: a huge integer is described, never converted
    (``repr`` of a 5,000-digit int raises, of a 10**6-digit one takes seconds)."""

    def __init__(self) -> None:
        super().__init__()
        self.maxlevel, self.maxdict, self.maxlist, self.maxtuple, self.maxset = 3, 4, 6, 6, 6
        self.maxstring, self.maxother, self.maxlong = QUOTE_LIMIT, QUOTE_LIMIT, 40

    def repr_int(self, x: int, level: int) -> str:
        if x.bit_length() > 128:
            return f"<an integer of about {int(x.bit_length() * 0.30103) + 1} digits>"
        return super().repr_int(x, level)

    def repr_str(self, x: str, level: int) -> str:
        return super().repr_str(x[: 2 * QUOTE_LIMIT], level) if len(x) <= QUOTE_LIMIT else repr(x[:QUOTE_LIMIT]) + "..."


_SHORT = _ShortRepr()


def short_repr(value: object, limit: int = QUOTE_LIMIT) -> str:
    """``repr(value)`` cut to about ``limit`` characters, in time bounded by ``limit`` (not by the
    value's size): containers show their first items, strings their first characters, huge integers
    their size. For quoting user values in errors and notes."""
    try:
        text = _SHORT.repr(value)
    except Exception:  # noqa: BLE001 - a value whose repr fails is still quoted
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit + 8 else text[:limit] + "..."


#: the most characters of one part of an error (field, allowed, hint, sentence) shown whole
ECHO_LIMIT = 200
#: the most characters of what an error says is allowed (a list of 30 known names fits)
TEXT_LIMIT = 2000
#: the most names an error lists (unknown keys, known keys) before "… and N more"
LIST_LIMIT = 5


def cut_text(text: str, limit: int = ECHO_LIMIT) -> str:
    """``text`` when at most ``limit`` characters, else its first ``limit`` characters and
    ``… (N characters)``: what an error echoes stays one readable line."""
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text):,} characters)"


def name_some(names: Iterable[object], limit: int = LIST_LIMIT) -> str:
    """The first ``limit`` of ``names`` joined by ``, `` (each cut by :func:`cut_text`), then
    ``… and N more`` when there are more: ``a, b, c, d, e … and 4,995 more``."""
    items = [str(n) for n in names]
    shown = ", ".join(cut_text(n, 60) for n in items[:limit])
    return shown if len(items) <= limit else f"{shown} … and {len(items) - limit:,} more"


def quote_value(value: object) -> str:
    """A value as an error quotes it: :func:`short_repr`, and for a text longer than
    :data:`QUOTE_LIMIT` characters its length (``'aaaa…'... (60,000 characters)``)."""
    if isinstance(value, str) and len(value) > QUOTE_LIMIT:
        return f"{value[:QUOTE_LIMIT]!r}... ({len(value):,} characters)"
    return short_repr(value)


class MoeplanError(Exception):
    """Base of all errors moeplan raises on purpose."""


class InputError(MoeplanError, ValueError):
    """Bad user input: names the field, the value and what is allowed.

    Attributes:
        field: dotted path of the offending field (``layout.tensor_model_parallel_size``).
        value: the value given.
        allowed: what would have been accepted, in words.
        sentence: the message as one plain sentence when the ``not valid; allowed:`` template reads
            badly (a missing file, a missing optional package): ``field: sentence``.
    """

    def __init__(
        self, field: str, value: object, allowed: str, hint: str | None = None, *, sentence: str | None = None
    ):
        # the field cut to ECHO_LIMIT characters, the other parts (lists of what is allowed) to
        # TEXT_LIMIT, each with its length: an error stays a line, never megabytes
        field, allowed = cut_text(field), cut_text(allowed, TEXT_LIMIT)
        hint = None if hint is None else cut_text(hint, TEXT_LIMIT)
        sentence = None if sentence is None else cut_text(sentence, TEXT_LIMIT)
        self.field = field
        self.value = value
        self.allowed = allowed
        self.hint = hint
        self.sentence = sentence
        if sentence is not None:
            msg = f"{field}: {sentence}"
        else:
            shown = "missing" if value is None else f"{quote_value(value)} is not valid"
            msg = f"{field}: {shown}; allowed: {allowed}"
            if hint:
                msg += f" ({hint})"
        super().__init__(msg)

    def renamed(self, field: str) -> InputError:
        """The same error for another field name (e.g. inside a runs file), sentence and hint kept."""
        return InputError(field, self.value, self.allowed, self.hint, sentence=self.sentence)


def missing_file(field: str, path: object, what: str = "file") -> InputError:
    """``field: no such file: PATH`` (``what`` names the kind, e.g. ``YAML file``)."""
    return InputError(field, str(path), f"an existing {what}", sentence=f"no such {what}: {path}")


def missing_extra(field: str, packages: str, extra: str) -> InputError:
    """``field: needs PACKAGES, which are not installed: pip install 'moeplan[EXTRA]'``."""
    return InputError(
        field,
        packages,
        f"{packages} installed",
        sentence=f"needs {packages}, which are not installed: pip install 'moeplan[{extra}]'",
    )


#: what people type for a Megatron key (flag names, Megatron-LM's abbreviations) → the key
ALIASES = {
    "tp": "tensor_model_parallel_size",
    "pp": "pipeline_model_parallel_size",
    "vpp": "virtual_pipeline_model_parallel_size",
    "cp": "context_parallel_size",
    "ep": "expert_model_parallel_size",
    "etp": "expert_tensor_parallel_size",
    "sp": "sequence_parallel",
    "mbs": "micro_batch_size",
    "gbs": "global_batch_size",
    "seq": "seq_length",
    "seq_len": "seq_length",
    "sequence_length": "seq_length",
    "gpus": "num_gpus",
    "world_size": "num_gpus",
}


class UnknownNameError(InputError):
    """A name (model, GPU, key) that is not known; suggests the closest known names (an abbreviation
    such as ``tp`` first: :data:`ALIASES`). With a suggestion the message is one sentence (``'tp' is
    not known; did you mean 'tensor_model_parallel_size'?``); without one it lists what is known in
    the same sentence (``'mode' is not one of the training keys (allowed: global_batch_size, ...)``)."""

    def __init__(self, field: str, value: str, known: Iterable[str], what: str = "one of"):
        known = sorted(set(known))
        alias = ALIASES.get(str(value).lower().replace("-", "_"))
        close = difflib.get_close_matches(str(value), known, n=3, cutoff=0.5)
        if alias in known:
            close = [alias, *[c for c in close if c != alias]][:3]
        hint = f"did you mean {', '.join(repr(c) for c in close)}?{_lookalikes(value)}" if close else None
        shown = ", ".join(known) if len(known) <= 30 else ", ".join(known[:30]) + ", ..."
        kind = what.strip().rstrip(":")
        what_it_is = "known" if kind == "one of" else kind
        quoted = repr(value) if isinstance(value, str) and len(value) <= QUOTE_LIMIT else quote_value(value)
        # one sentence either way: with a close name the suggestion, else what is known
        sentence = (
            f"{quoted} is not {what_it_is}; {hint}"
            if close
            else f"{quoted} is not {what_it_is} ({'known' if kind == 'one of' else 'allowed'}: {shown})"
        )
        super().__init__(field, value, f"{what} {shown}", hint, sentence=sentence)
        self.known = known
        self.suggestions = close


def _lookalikes(value: object) -> str:
    """For a name holding characters outside ASCII (a Cyrillic ``е`` that reads as a Latin ``e``), a clause
    naming the first three with their position and Unicode name, so that a suggestion that looks identical
    says what differs; ``""`` for an ASCII name."""
    if not isinstance(value, str) or value.isascii():
        return ""
    odd = [(i, ch) for i, ch in enumerate(value) if not ch.isascii()][:3]
    named = ", ".join(f"U+{ord(ch):04X} {unicodedata.name(ch, 'unnamed')} at position {i + 1}" for i, ch in odd)
    return f" ({repr(value)} holds {named})"


def did_you_mean(name: str, known: Iterable[str]) -> list[str]:
    """Closest known names to ``name`` (difflib ratio ≥ 0.5), best first."""
    return difflib.get_close_matches(name, sorted(set(known)), n=3, cutoff=0.5)
