"""User-facing messages are ids with parameters, with English and Chinese catalogues by id
(``moeplan/i18n/messages.py``): every id the code uses is in both catalogues with the same
parameters, no catalogue holds an id nothing uses, and every rule finding is such a message.
"""

from __future__ import annotations

import ast
import pathlib
import pickle

import pytest

from moeplan.i18n.messages import Items, Message, catalogue, fields, lookup, msg
from tests.i18n_corpus import corpus_findings

SRC = pathlib.Path(__file__).resolve().parents[1] / "src" / "moeplan"


def _calls(tree: ast.AST) -> list[tuple[str, set[str], int]]:
    """``(id, parameter names, line)`` of every ``msg("id", name=...)`` call with a literal id."""
    out = []
    for n in ast.walk(tree):
        if (
            isinstance(n, ast.Call)
            and isinstance(n.func, ast.Name)
            and n.func.id == "msg"
            and n.args
            and isinstance(n.args[0], ast.Constant)
            and isinstance(n.args[0].value, str)
        ):
            out.append((n.args[0].value, {k.arg for k in n.keywords if k.arg}, n.lineno))
    return out


def _used() -> list[tuple[str, set[str], str]]:
    return [
        (mid, names, f"{p.relative_to(SRC)}:{line}")
        for p in sorted(SRC.rglob("*.py"))
        for mid, names, line in _calls(ast.parse(p.read_text()))
    ]


def test_every_message_id_is_in_both_catalogues_with_its_parameters():
    en, zh = catalogue("en"), catalogue("zh")
    bad = []
    for mid, names, where in _used():
        if mid not in en or mid not in zh:
            bad.append(f"{where}: {mid} missing from {'en' if mid not in en else 'zh'}")
            continue
        if fields(en[mid]) != names:
            bad.append(
                f"{where}: {mid} is called with {sorted(names)}, its English text uses {sorted(fields(en[mid]))}"
            )
        if fields(zh[mid]) != fields(en[mid]):
            bad.append(f"{mid}: Chinese uses {sorted(fields(zh[mid]))}, English {sorted(fields(en[mid]))}")
    assert not bad, "\n".join(bad)


def test_no_catalogue_holds_an_id_nothing_uses():
    used = {mid for mid, _, _ in _used()}
    for lang in ("en", "zh"):
        orphans = sorted(set(catalogue(lang)) - used)
        assert not orphans, f"i18n/{lang}: ids no code uses: {orphans}"


def test_every_rule_finding_is_a_message():
    """Each message and fix the corpus scenarios produce is a catalogued message (no free text the
    Chinese output could not translate by id)."""
    free = sorted(
        {
            f"{f.rule_id}: {text}"
            for f in corpus_findings()
            for text in (f.message, f.fix)
            if text is not None and lookup(text) is None
        }
    )
    assert not free, f"{len(free)} finding texts are not messages:\n" + "\n".join(free)


def test_a_message_is_its_english_text_and_translates_by_id():
    m = msg("attention.heads_not_divisible_by_tp", heads=28, tp=8)
    assert m == "num_attention_heads (28) is not divisible by TP (8)"
    assert m.text("zh") == "num_attention_heads（28）不能被 TP（8）整除"
    assert lookup("num_attention_heads (28) is not divisible by TP (8)") is m
    assert lookup("a text no message produced") is None
    # copies (a finding's to_dict deep-copies it) and pickles keep the id and parameters
    again = pickle.loads(pickle.dumps(m))
    assert isinstance(again, Message) and again.msgid == m.msgid and again.text("zh") == m.text("zh")


def test_nested_messages_and_item_lists_translate_with_their_holder():
    fix = msg("common.use_tp_in", values=[1, 2, 4])
    assert fix == "use TP in [1, 2, 4]" and fix.text("zh") == "将 TP 设为 [1, 2, 4] 之一"
    items = Items([msg("common.fix_the_model_config"), "plain"])
    assert items.text("en") == "fix the model config; plain"
    assert items.text("zh") == "修正模型配置；plain"


def test_a_wrong_call_fails_loudly():
    with pytest.raises(KeyError):
        msg("no.such_message")
    with pytest.raises(ValueError, match="heads"):
        msg("attention.heads_not_divisible_by_tp", tp=8)


def test_the_extraction_sees_calls():
    tree = ast.parse('x = msg("a.b", n=1, gib=2.0)\ny = msg(name)\n')
    assert _calls(tree) == [("a.b", {"n", "gib"}, 1)]


def test_item_lists_keep_their_separator():
    parts = [msg("common.fix_the_model_config"), "x"]
    assert Items(parts, ", ").text("en") == "fix the model config, x"
    assert Items(parts, ", ").text("zh") == "修正模型配置，x"
    with pytest.raises(ValueError, match="separator"):
        Items(parts, " / ")


def test_a_message_is_written_to_yaml_and_json_as_its_english_text():
    import json

    import yaml

    m = msg("common.use_tp_in", values=[1, 2])
    assert yaml.safe_dump({"note": m}) == "note: use TP in [1, 2]\n"
    assert json.dumps({"note": m}) == '{"note": "use TP in [1, 2]"}'
