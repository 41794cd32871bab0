"""Chinese texts of the human-readable output: which language to print (``--lang`` or the locale
environment), and the texts that are not messages with parameters. The JSON documents never pass
through here: they stay English, with stable keys.

Messages with parameters (a rule's message and fix, a formatted line of the tables) are ids with
English and Chinese catalogues (:mod:`moeplan.i18n.messages`, ``i18n/en/*.yaml`` and
``i18n/zh/*.yaml``). The rest is in ``i18n/zh.yaml``, each by its own key:

- ``rules: {<rule id>: {summary}}``: a rule's one-line statement (``moeplan rules``);
- ``ui: {<English label>: <Chinese label>}``: the fixed texts of the tables (titles, column labels,
  words such as ``fits``), keyed by their English text, as gettext keys a text without parameters;
- ``known_issues: {<issue id>: {title, workaround, size}}``: the Chinese texts of an entry of the
  known-issue database (:func:`known_issue_text`).

A text that is none of these is printed in English (:func:`translate` returns it unchanged;
:func:`translation` returns None, which the tests use to list what has no Chinese text).

Source of the terms: the Chinese Megatron-LM / Megatron-Core community's usage (张量并行 TP,
流水线并行 PP, 上下文并行 CP, 专家并行 EP, 重计算, 显存, 激活, 优化器状态); key names stay English.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources

import yaml

from moeplan.errors import InputError
from moeplan.i18n.messages import catalogue, lookup

#: languages of the human-readable output
LANGS = ("en", "zh")
#: the locale variables, in POSIX precedence (the first one set decides)
LOCALE_VARS = ("LC_ALL", "LC_MESSAGES", "LANG")


def resolve_lang(option: str | None, environ: Mapping[str, str] | None = None) -> str:
    """The output language: ``option`` (``en`` or ``zh``, e.g. from ``--lang``) when given, else the
    first of ``LC_ALL``, ``LC_MESSAGES``, ``LANG`` that is set: ``zh`` when it starts with ``zh``
    (``zh_CN.UTF-8``, ``zh_TW``), else ``en``.

    Raises:
        InputError: ``option`` is not one of :data:`LANGS`.
    """
    if option is not None:
        lang = option.strip().lower().replace("-", "_")
        if lang.startswith("zh"):
            return "zh"
        if lang in ("en", "c", "posix") or lang.startswith("en_"):
            return "en"
        raise InputError("--lang", option, "en or zh")
    env = os.environ if environ is None else environ
    for var in LOCALE_VARS:
        val = env.get(var)
        if val:
            return "zh" if val.lower().startswith("zh") else "en"
    return "en"


@dataclass(frozen=True)
class Catalog:
    """One language's texts that are not messages: rule statements by rule id, table labels by their
    English text, known-issue texts by issue id and field."""

    summaries: dict[str, str]
    ui: dict[str, str]
    known_issues: dict[str, dict[str, str]]


def _strings(raw: dict, section: str, lang: str) -> dict[str, str]:
    table = raw.get(section) or {}
    bad = [k for k, v in table.items() if not (isinstance(k, str) and isinstance(v, str))]
    if bad:  # e.g. an unquoted yes / no / on / off key, which YAML reads as a boolean
        raise ValueError(f"{lang}.yaml {section}: keys and texts must be strings, not {bad!r}")
    return dict(table)


@functools.cache
def catalog(lang: str = "zh") -> Catalog:
    """The texts of ``lang`` from ``i18n/<lang>.yaml`` (loaded once).

    Raises:
        ValueError: a malformed entry (the file ships with the package; tests load it).
    """
    raw = yaml.safe_load(resources.files("moeplan.i18n").joinpath(f"{lang}.yaml").read_text(encoding="utf-8"))
    rules = raw.get("rules") or {}
    issues = raw.get("known_issues") or {}
    bad = [k for k, v in issues.items() if not (isinstance(v, dict) and all(isinstance(x, str) for x in v.values()))]
    if bad:
        raise ValueError(f"{lang}.yaml known_issues: each entry maps title / workaround / size to a text: {bad!r}")
    return Catalog(
        summaries={rid: v["summary"] for rid, v in rules.items() if v.get("summary")},
        ui=_strings(raw, "ui", lang),
        known_issues={k: dict(v) for k, v in issues.items()},
    )


def known_issue_text(issue_id: str, field: str, lang: str) -> str | None:
    """The ``lang`` text of a known issue's ``field`` (``title``, ``workaround`` or ``size``), or None
    where ``i18n/<lang>.yaml`` has none (English: always None, the database's text is the English)."""
    if lang == "en":
        return None
    return catalog(lang).known_issues.get(issue_id, {}).get(field)


def _by_id(text: str, lang: str) -> str | None:
    """``text`` in ``lang`` when a message (:mod:`moeplan.i18n.messages`) produced it and ``lang``'s
    catalogue has its id; None otherwise."""
    m = lookup(text)
    return m.text(lang) if m is not None and m.msgid in catalogue(lang) else None


def translation(rule_id: str, text: str, lang: str = "zh") -> str | None:
    """The ``lang`` text of a rule's message or fix: the message's text by its id (None when no
    message produced ``text`` or ``lang`` has no text for its id). ``rule_id`` names the rule for
    the error a caller reports; the id of the message decides the text."""
    if lang == "en":
        return text
    return _by_id(text, lang)


def translate(rule_id: str, text: str | None, lang: str) -> str | None:
    """A rule's message or fix in ``lang``; the English text where there is no ``lang`` text."""
    if text is None or lang == "en":
        return text
    return translation(rule_id, text, lang) or text


def summary(rule_id: str, text: str, lang: str) -> str:
    """A rule's one-line statement in ``lang`` (English where it has none)."""
    return text if lang == "en" else catalog(lang).summaries.get(rule_id, text)


def ui_translation(text: str, lang: str = "zh") -> str | None:
    """A text of the tables (a title, a column label, a formatted line) in ``lang``, or None."""
    if lang == "en":
        return text
    by_id = _by_id(text, lang)
    return by_id if by_id is not None else catalog(lang).ui.get(text)


def ui(text: str, lang: str) -> str:
    """A text of the tables in ``lang``; the English text where there is none."""
    return text if lang == "en" else (ui_translation(text, lang) or text)


__all__ = [
    "LANGS",
    "LOCALE_VARS",
    "Catalog",
    "catalog",
    "known_issue_text",
    "resolve_lang",
    "summary",
    "translate",
    "translation",
    "ui",
    "ui_translation",
]
