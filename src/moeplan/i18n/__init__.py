"""Chinese texts of the human-readable output: which language to print (``--lang`` or the locale
environment) and the lookup of a rule's message, fix or statement, or of a line of the tables, in
``i18n/zh.yaml``. The JSON documents never pass through here: they stay English, with stable keys.

The data file holds, per rule id, the rule's statement (``summary``) and a list of
``[English pattern, Chinese template]`` pairs: the pattern is a regular expression that must match
the whole English text, its named groups carry the values (numbers, Megatron key names, model ids)
into the template unchanged. A group named ``t_<name>`` is itself translated (with the same rule's
patterns), a group named ``ls_<name>`` is a ``"; "``-separated list translated item by item, and a
group named ``p_<name>`` is a free-text phrase looked up whole: the title, workaround and size of a
known issue (``known_issues: {id: {title, workaround, size}}``, matched against the English texts of
``catalog/data/known_issues.yaml``) or an entry of ``phrases``.
``common`` patterns apply to every rule (e.g. ``skipped: needs ...``), ``ui`` maps exact table texts
and ``ui_patterns`` formatted lines. Text no pattern matches is printed in English
(:func:`translate` returns it unchanged; :func:`translation` returns None, which the tests use to
list what has no Chinese text).

Source of the terms: the Chinese Megatron-LM / Megatron-Core community's usage (张量并行 TP,
流水线并行 PP, 上下文并行 CP, 专家并行 EP, 重计算, 显存, 激活, 优化器状态); key names stay English.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources

import yaml

from moeplan.catalog.known_issues import known_issues
from moeplan.errors import InputError

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
class _Pattern:
    regex: re.Pattern
    template: str


@dataclass(frozen=True)
class Catalog:
    """One language's texts: per rule id its statement and patterns, the common patterns, the table texts."""

    summaries: dict[str, str]
    patterns: dict[str, tuple[_Pattern, ...]]
    common: tuple[_Pattern, ...]
    ui: dict[str, str]
    ui_patterns: tuple[_Pattern, ...]
    phrases: dict[str, str]


def _compile(pairs: list, where: str) -> tuple[_Pattern, ...]:
    out = []
    for i, pair in enumerate(pairs or []):
        if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(x, str) for x in pair)):
            raise ValueError(f"{where}[{i}]: expected [English pattern, Chinese template], got {pair!r}")
        out.append(_Pattern(re.compile(pair[0], re.S), pair[1]))
    return tuple(out)


@functools.cache
def catalog(lang: str = "zh") -> Catalog:
    """The texts of ``lang`` from ``i18n/<lang>.yaml`` (loaded once).

    Raises:
        ValueError: a malformed entry (the file ships with the package; tests load it).
    """
    raw = yaml.safe_load(resources.files("moeplan.i18n").joinpath(f"{lang}.yaml").read_text(encoding="utf-8"))
    rules = raw.get("rules") or {}
    for section in ("ui", "phrases"):
        bad = [k for k, v in (raw.get(section) or {}).items() if not (isinstance(k, str) and isinstance(v, str))]
        if bad:  # e.g. an unquoted yes / no / on / off key, which YAML reads as a boolean
            raise ValueError(f"{lang}.yaml {section}: keys and texts must be strings, not {bad!r}")
    phrases = dict(raw.get("phrases") or {})
    zh_issues = raw.get("known_issues") or {}
    for k in known_issues():
        for attr in ("title", "workaround", "size"):
            text = (zh_issues.get(k.id) or {}).get(attr)
            if text and getattr(k, attr):
                phrases[getattr(k, attr)] = text
    return Catalog(
        summaries={rid: v["summary"] for rid, v in rules.items() if v.get("summary")},
        patterns={rid: _compile(v.get("patterns"), f"rules.{rid}.patterns") for rid, v in rules.items()},
        common=_compile(raw.get("common"), "common"),
        ui=dict(raw.get("ui") or {}),
        ui_patterns=_compile(raw.get("ui_patterns"), "ui_patterns"),
        phrases=phrases,
    )


def _fill(m: re.Match, template: str, sub, phrases: dict[str, str]) -> str | None:
    vals: dict[str, str] = {}
    for name, val in m.groupdict().items():
        val = val or ""
        if name.startswith("p_") and val:
            val = phrases.get(val)
        elif name.startswith("t_") and val:
            val = sub(val)
        elif name.startswith("ls_") and val:
            items = [sub(x) for x in val.split("; ")]
            val = None if None in items else "；".join(items)
        if val is None:
            return None
        vals[name] = val
    try:
        return template.format(**vals)
    except (KeyError, IndexError, ValueError):  # a template naming a group its pattern lacks: no text
        return None


def _apply(text: str, pats: tuple[_Pattern, ...], sub, phrases: dict[str, str]) -> str | None:
    for p in pats:
        m = p.regex.fullmatch(text)
        if m:
            out = _fill(m, p.template, sub, phrases)
            if out is not None:
                return out
    return None


def _rule_patterns(cat: Catalog, rule_id: str) -> tuple[_Pattern, ...]:
    if rule_id in cat.patterns:
        return cat.patterns[rule_id] + cat.common
    family = rule_id.split(".", 1)[0] + ".*"  # e.g. known_issue.* for every known-issue finding
    return cat.patterns.get(family, ()) + cat.common


def translation(rule_id: str, text: str, lang: str = "zh") -> str | None:
    """The ``lang`` text of a rule's message or fix (None when no pattern of ``rule_id`` or the
    common ones matches it, or a translated group does not match either)."""
    if lang == "en":
        return text
    cat = catalog(lang)
    pats = _rule_patterns(cat, rule_id)

    def sub(part: str) -> str | None:
        return _apply(part, pats, sub, cat.phrases)

    return _apply(text, pats, sub, cat.phrases)


def translate(rule_id: str, text: str | None, lang: str) -> str | None:
    """A rule's message or fix in ``lang``; the English text where no Chinese one matches."""
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
    cat = catalog(lang)
    if text in cat.ui:
        return cat.ui[text]

    def sub(part: str) -> str | None:
        return cat.ui.get(part) or _apply(part, cat.ui_patterns, sub, cat.phrases)

    return _apply(text, cat.ui_patterns, sub, cat.phrases)


def ui(text: str, lang: str) -> str:
    """A text of the tables in ``lang``; the English text where there is none."""
    return text if lang == "en" else (ui_translation(text, lang) or text)


__all__ = [
    "LANGS",
    "LOCALE_VARS",
    "Catalog",
    "catalog",
    "resolve_lang",
    "summary",
    "translate",
    "translation",
    "ui",
    "ui_translation",
]
