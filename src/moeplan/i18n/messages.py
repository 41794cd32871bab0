"""User-facing messages as ids with parameters, and their catalogues by id.

A message is written in code as ``msg("moe.experts_not_divisible_by_ep", experts=256, ep=48)``: an id and
its parameters. The English text comes from the English catalogue (``i18n/en/*.yaml``), the Chinese
one from ``i18n/zh/*.yaml``; both map ``id → template`` in :meth:`str.format` syntax, so a template
may format a number (``{gib:.1f}``). Changing an English text never breaks a translation: the two
catalogues share the id, and ``tests/test_messages.py`` checks that every id used in the code is in
both, with the same parameters, and that neither catalogue holds an id nothing uses.

A :class:`Message` *is* its English text (a ``str``), so documents, JSON and comparisons see plain
English. Parameters that are messages are translated with the message that holds them; a parameter
wrapped in :class:`Items` is a list of texts joined with ``"; "`` (``"；"`` in Chinese), each item
translated. The human-readable renderers receive documents (dicts of English strings) built in the
same process: every message records its English text (:func:`lookup`), so a renderer holding only the
text finds the message's id and parameters again. A text no message produced stays English.

Catalogue files are split by area (``rules_moe.yaml``, ``ui_plan.yaml``, ...); an id may appear in
one file only.
"""

from __future__ import annotations

import functools
import string
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from importlib import resources
from typing import Any

import yaml

#: the most English texts remembered for :func:`lookup` (a plan renders a few thousand at most)
REMEMBERED_TEXTS = 65_536
#: list separators: the English one → the Chinese one
SEPARATORS_ZH = {"; ": "；", ", ": "，", " + ": " + ", " · ": " · "}


class Items(tuple):
    """A list parameter whose items are texts (messages or plain strings), each translated, joined
    with ``sep`` (default ``"; "``) in English and its Chinese counterpart (:data:`SEPARATORS_ZH`:
    ``"；"``, ``"，"``, ...) in Chinese.

    Raises:
        ValueError: ``sep`` has no Chinese counterpart in :data:`SEPARATORS_ZH`.
    """

    sep: str

    def __new__(cls, items=(), sep: str = "; ") -> Items:
        if sep not in SEPARATORS_ZH:
            raise ValueError(f"Items separator {sep!r}: one of {sorted(SEPARATORS_ZH)}")
        self = super().__new__(cls, items)
        self.sep = sep
        return self

    def __reduce__(self):
        return (Items, (tuple(self), self.sep))

    def text(self, lang: str) -> str:
        sep = self.sep if lang == "en" else SEPARATORS_ZH[self.sep]
        return sep.join(str(_param_text(x, lang)) for x in self)


def _param_text(value: Any, lang: str) -> Any:
    if isinstance(value, Message):
        return value.text(lang)
    if isinstance(value, Items):
        return value.text(lang)
    if isinstance(value, str) and lang != "en":
        found = lookup(value)
        return found.text(lang) if found is not None else value
    return value


class Message(str):
    """A user-facing text: ``msgid`` in the catalogues, ``params`` (name → value) filling its
    templates; the ``str`` value is the English text.

    Raises:
        KeyError: ``msgid`` is not in the English catalogue.
        ValueError: the English template names a parameter that was not given.
    """

    msgid: str
    params: Mapping[str, Any]

    def __new__(cls, msgid: str, params: Mapping[str, Any]) -> Message:
        template = catalogue("en")[msgid]
        try:
            english = template.format(**{k: _param_text(v, "en") for k, v in params.items()})
        except (KeyError, IndexError) as exc:
            raise ValueError(f"message {msgid}: its template names {exc} which was not given") from None
        self = super().__new__(cls, english)
        self.msgid = msgid
        self.params = dict(params)
        _remember(self)
        return self

    def __reduce__(self):
        return (Message, (self.msgid, self.params))

    def text(self, lang: str) -> str:
        """This message in ``lang`` (``en`` or ``zh``); the English text where ``lang`` has no template."""
        if lang == "en":
            return str.__str__(self)
        template = catalogue(lang).get(self.msgid)
        if template is None:
            return str.__str__(self)
        return template.format(**{k: _param_text(v, lang) for k, v in self.params.items()})


def _represent(dumper: yaml.SafeDumper, m: Message) -> yaml.Node:
    return dumper.represent_str(str.__str__(m))


# a message written to YAML (a scenario, an export's notes) is its English text
yaml.SafeDumper.add_representer(Message, _represent)


def msg(msgid: str, **params: Any) -> Message:
    """The message ``msgid`` with ``params`` (see :class:`Message`)."""
    return Message(msgid, params)


_TEXTS: OrderedDict[str, Message] = OrderedDict()


def _remember(m: Message) -> None:
    key = str.__str__(m)
    _TEXTS[key] = m
    _TEXTS.move_to_end(key)
    if len(_TEXTS) > REMEMBERED_TEXTS:
        _TEXTS.popitem(last=False)


def lookup(text: str) -> Message | None:
    """The message whose English text is ``text`` (the most recent one made in this process), or
    None: ``text`` itself when it is a :class:`Message`."""
    if isinstance(text, Message):
        return text
    return _TEXTS.get(text)


def _load_dir(lang: str) -> dict[str, str]:
    out: dict[str, str] = {}
    where: dict[str, str] = {}
    folder = resources.files("moeplan.i18n").joinpath(lang)
    for f in sorted(folder.iterdir(), key=lambda p: p.name):
        if not f.name.endswith(".yaml"):
            continue
        raw = yaml.safe_load(f.read_text(encoding="utf-8")) or {}
        for k, v in raw.items():
            if not (isinstance(k, str) and isinstance(v, str)):
                raise ValueError(f"i18n/{lang}/{f.name}: {k!r}: ids and templates must be strings")
            if k in out:
                raise ValueError(f"i18n/{lang}: id {k} is in both {where[k]} and {f.name}")
            out[k], where[k] = v, f.name
    return out


@functools.cache
def catalogue(lang: str) -> dict[str, str]:
    """The templates of ``lang`` by id, from every ``i18n/<lang>/*.yaml`` (loaded once).

    Raises:
        ValueError: an entry that is not ``id: template`` (strings), or an id in two files.
    """
    return _load_dir(lang)


def fields(template: str) -> set[str]:
    """The parameter names a template uses (``{n}``, ``{gib:.1f}`` → ``{"n", "gib"}``)."""
    return {name.split(".")[0].split("[")[0] for _, name, _, _ in string.Formatter().parse(template) if name}


def ids_of(texts: Iterable[str]) -> set[str]:
    """The ids of the messages among ``texts`` (plain strings are skipped)."""
    return {m.msgid for t in texts if (m := lookup(t)) is not None}
