"""``--lang zh`` (and LC_ALL / LC_MESSAGES / LANG) prints the human-readable output
in Chinese; the JSON stays English.

The Chinese texts are data: messages by id (``src/moeplan/i18n/zh/*.yaml``, tests/test_messages.py),
rule statements, table labels and known-issue texts in ``src/moeplan/i18n/zh.yaml``. These tests
fail naming what has no Chinese text: a rule id without a statement, a rule no scenario of
``tests/i18n_corpus.py`` reaches, a message or fix without a Chinese text, a known issue without its
Chinese title / workaround.
"""

from __future__ import annotations

import collections
import json
import re

import pytest
from rich.cells import cell_len
from typer.testing import CliRunner

from moeplan.catalog.known_issue_table import SYMPTOMS, known_issues
from moeplan.cli import render
from moeplan.cli.app import app
from moeplan.cli.render.check_view import render_check
from moeplan.errors import InputError
from moeplan.i18n import catalog, known_issue_text, resolve_lang, summary, translate, translation, ui_translation
from moeplan.rules import RULES
from tests.i18n_corpus import corpus_findings

runner = CliRunner()
#: registered rules that never emit a finding under their own id (the known-issue rule emits
#: known_issue.<id> and known_issue.versions_unknown, which the corpus covers)
NO_OWN_FINDINGS = {"known_issue.database", "known_issue.harvested"}
CJK = re.compile(r"[\u4e00-\u9fff]")
#: fixes that are a command and nothing else (nothing to translate)
COMMAND = re.compile(r"export \w+=\S+")


@pytest.fixture(autouse=True)
def _english_after():
    """The CLI runs in-process here: leave the tables' language English for the tests that follow
    (a command without --lang, e.g. ``recipes``, does not set it)."""
    yield
    render.set_lang("en")


def _texts():
    for f in corpus_findings():
        yield f.rule_id, "message", f.message
        if f.fix:
            yield f.rule_id, "fix", f.fix


def test_every_rule_has_a_chinese_statement():
    missing = sorted(set(RULES) - set(catalog("zh").summaries))
    assert not missing, f"rules without a Chinese summary in i18n/zh.yaml: {missing}"
    assert all(CJK.search(summary(r, RULES[r].summary, "zh")) for r in RULES)


def test_every_rule_fires_in_the_corpus():
    """A rule no corpus scenario reaches would have its messages untested: add a scenario to
    tests/i18n_corpus.py (TARGETED) that breaks it."""
    fired = {f.rule_id for f in corpus_findings()}
    unreached = sorted(set(RULES) - fired - NO_OWN_FINDINGS)
    assert not unreached, f"rules that no scenario of tests/i18n_corpus.py fires: {unreached}"
    assert any(r.startswith("known_issue.") and r != "known_issue.versions_unknown" for r in fired)
    assert "known_issue.versions_unknown" in fired
    assert any(r.startswith("known_issue.family.") for r in fired)


def test_every_message_and_fix_has_a_chinese_text():
    texts = list(_texts())
    assert len(texts) > 400  # the corpus is broad (about 480 distinct texts today)
    untranslated = sorted({(rid, kind, text) for rid, kind, text in texts if translation(rid, text) is None})
    assert not untranslated, "no Chinese text (i18n/zh/*.yaml) for:\n" + "\n".join(
        f"  {rid} ({kind}): {text}" for rid, kind, text in untranslated
    )


def test_every_known_issue_has_a_chinese_title_workaround_and_size():
    missing = [
        f"{k.id}.{attr}"
        for k in known_issues()
        for attr in ("title", "workaround", "size")
        if getattr(k, attr) and not known_issue_text(k.id, attr, "zh")
    ]
    assert not missing, f"known issues without a Chinese text (i18n/zh.yaml known_issues): {missing}"
    orphans = sorted(set(catalog("zh").known_issues) - {k.id for k in known_issues()})
    assert not orphans, f"i18n/zh.yaml known_issues for issues the database does not have: {orphans}"


def _tokens(text: str) -> collections.Counter:
    """Numbers, Megatron key names (snake_case) and model ids of a text; the known-issue symptom keys
    (``[wrong_result]``) are words, translated like the symptom they name."""
    pat = r"[\w.-]+/[\w.-]*[A-Z0-9][\w.-]*|\d+(?:\.\d+)?|[A-Za-z][A-Za-z0-9]*(?:_[A-Za-z0-9]+)+"
    return collections.Counter(t for t in re.findall(pat, text) if t not in SYMPTOMS)


def test_values_and_key_names_carry_over_unchanged():
    """Every number, key name and model id of the English text is in the Chinese one (as many times):
    the templates carry the values over, they never retype them."""
    lost = []
    for rid, kind, text in _texts():
        zh = translation(rid, text)
        if zh is None:
            continue
        gone = _tokens(text) - _tokens(zh)
        if gone:
            lost.append(f"{rid} ({kind}): {sorted(gone.elements())} lost in {zh!r}")
    assert not lost, "\n".join(lost)


def test_chinese_texts_are_chinese():
    """A message or fix in Chinese has Chinese characters (a template is not left English), unless the
    fix is a shell command."""
    english = [
        (rid, text)
        for rid, kind, text in _texts()
        if not CJK.search(translation(rid, text) or "") and not COMMAND.fullmatch(text)
    ]
    assert not english, english


def test_unmatched_text_falls_back_to_english():
    assert translation("world.dense_grid_divides_world", "a message nobody wrote") is None
    assert translate("world.dense_grid_divides_world", "a message nobody wrote", "zh") == "a message nobody wrote"
    # a text no message produced (a message's text translates by its id whatever the rule id)
    assert translate("no.such_rule", "num_layers (1001) is not divisible by PP (7)", "zh") == (
        "num_layers (1001) is not divisible by PP (7)"
    )
    assert translate("pipeline.num_layers_divisible_by_pp", "num_layers (30) is not divisible by PP (4)", "zh") == (
        "num_layers（30）不能被 PP（4）整除"
    )
    assert translate("x.y", None, "zh") is None
    assert translate("pipeline.num_layers_divisible_by_pp", "num_layers (30) is not divisible by PP (4)", "en") == (
        "num_layers (30) is not divisible by PP (4)"
    )
    assert ui_translation("a line nobody wrote") is None


@pytest.mark.parametrize(
    "option,env,want",
    [
        (None, {}, "en"),
        (None, {"LANG": "zh_CN.UTF-8"}, "zh"),
        (None, {"LANG": "zh_TW.UTF-8"}, "zh"),
        (None, {"LANG": "en_US.UTF-8"}, "en"),
        # POSIX precedence: LC_ALL, then LC_MESSAGES, then LANG
        (None, {"LC_ALL": "C", "LANG": "zh_CN.UTF-8"}, "en"),
        (None, {"LC_MESSAGES": "zh_CN.UTF-8", "LANG": "en_US.UTF-8"}, "zh"),
        (None, {"LC_ALL": "", "LANG": "zh_CN.UTF-8"}, "zh"),  # an empty variable is unset
        ("en", {"LANG": "zh_CN.UTF-8"}, "en"),  # the option wins
        ("zh", {}, "zh"),
        ("zh_CN", {}, "zh"),
        ("ZH-cn", {}, "zh"),
    ],
)
def test_resolve_lang(option, env, want):
    assert resolve_lang(option, env) == want


def test_bad_lang_is_an_input_error():
    with pytest.raises(InputError, match="--lang"):
        resolve_lang("fr", {})
    res = runner.invoke(app, ["check", "--model", "Qwen/Qwen3-30B-A3B", "--lang", "fr"])
    assert res.exit_code == 2
    assert "--lang" in res.stderr and "en or zh" in res.stderr


def _invoke(args, env=None, columns=80):
    base = {"COLUMNS": str(columns), "LC_ALL": None, "LC_MESSAGES": None, "LANG": None}
    return runner.invoke(app, args, env={**base, **(env or {})})


def _assert_fits(text: str, columns: int = 80) -> None:
    wide = [line for line in text.splitlines() if cell_len(line.rstrip()) > columns]
    assert not wide, f"lines wider than {columns} cells:\n" + "\n".join(wide)


def test_every_finding_renders_in_chinese_at_80_columns(capsys, monkeypatch):
    """Every corpus finding, drawn by ``check``'s renderer in Chinese on an 80-column console: no line
    is wider than 80 cells (a CJK character takes two), and each message and fix is printed whole."""
    monkeypatch.setenv("COLUMNS", "80")
    doc = {
        "verdict": "invalid",
        "scenario": {
            "model": "m",
            "num_gpus": 8,
            "gpu": "h100",
            "framework": "megatron-bridge",
            "megatron_core_version": "0.20.0",
            "parallel": {"TP": 1},
            "resolved_defaults": [],
        },
        "counts": {"error": 1, "warning": 0, "info": 0},
        "findings": [f.to_dict() for f in corpus_findings()],
    }
    render.set_lang("zh")
    try:
        render_check(doc)
    finally:
        render.set_lang("en")
    out = capsys.readouterr().out
    _assert_fits(out)
    flat = re.sub(r"\s+", "", out)
    for rid, _, text in _texts():
        assert re.sub(r"\s+", "", translation(rid, text)) in flat, (rid, text)
    assert "结论：无效（错误 1，警告 0，信息 0）" in out


BROKEN = ["check", "examples/long_context_broken.yaml"]


def test_check_lang_zh_and_locale():
    zh = _invoke([*BROKEN, "--lang", "zh"])
    assert zh.exit_code == 1
    assert "num_layers（94）不能被 PP（8）整除" in zh.stdout
    assert "修复：设置 sequence_parallel: true" in zh.stdout
    assert "结论：不支持（错误 8，警告 1，信息 1）" in zh.stdout
    _assert_fits(zh.stdout)
    # the locale decides without the option, and the option wins over it
    assert _invoke(BROKEN, {"LANG": "zh_CN.UTF-8"}).stdout == zh.stdout
    en = _invoke(BROKEN)
    assert "num_layers (94) is not divisible by PP (8)" in en.stdout and not CJK.search(en.stdout)
    assert _invoke([*BROKEN, "--lang", "en"], {"LANG": "zh_CN.UTF-8"}).stdout == en.stdout


def test_rules_lang_zh():
    out = _invoke(["rules", "--lang", "zh"], columns=120).stdout
    assert "num_attention_heads必须能被TP整除" in re.sub(r"[\s│]+", "", out)
    _assert_fits(out, 120)


@pytest.mark.parametrize(
    "args",
    [
        BROKEN,
        ["estimate", "examples/deepseek_v3_gb300.yaml"],
        ["fit", "examples/qwen3_30b_64k_oom.yaml", "--gbs", "64"],
        ["rules"],
    ],
)
def test_json_is_the_same_in_every_language(args):
    """``--lang zh --json`` (and a Chinese locale) prints exactly the English JSON."""
    en = _invoke([*args, "--json"])
    zh = _invoke([*args, "--json", "--lang", "zh"])
    env = _invoke([*args, "--json"], {"LANG": "zh_CN.UTF-8"})
    assert en.stdout == zh.stdout == env.stdout
    assert not CJK.search(en.stdout)
    json.loads(en.stdout)


OOM_LOG = "tests/data/diagnose/oom_llava_v100_gpu3_old.txt"
COMMANDS = {
    "estimate": (["estimate", "examples/deepseek_v3_gb300.yaml"], ["每 GPU 峰值显存（GiB）", "→ 放得下", "单步时间"]),
    "fit": (
        ["fit", "examples/qwen3_30b_64k_oom.yaml", "--gbs", "64"],
        ["能放得下的改动", "放不下：94.4 GiB 激活", "单独不够"],
    ),
    "plan": (
        [
            "plan",
            "--model",
            "Qwen/Qwen3-30B-A3B",
            "--gpu",
            "h100",
            "--num-gpus",
            "16",
            "--seq-length",
            "8192",
            "--gbs",
            "64",
        ],
        ["个放得下的配置中的前", "#1 胜出的原因", "预期误差"],
    ),
    "oom": (
        ["oom", OOM_LOG, "--scenario", "examples/qwen3_30b_64k_oom.yaml"],
        ["GPU 3 上申请", "按估算节省量排序的修复"],
    ),
    "check": (BROKEN, ["结论：不支持"]),
}


def _numbers(text: str) -> collections.Counter:
    return collections.Counter(re.findall(r"\d+(?:[.,]\d+)*", text))


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_commands_in_chinese_at_80_columns(name):
    """Each of the five commands in Chinese: the same exit code, its headers and verdict in Chinese,
    no line wider than 80 cells, and every number of the English output still there."""
    args, needles = COMMANDS[name]
    en, zh = _invoke(args), _invoke([*args, "--lang", "zh"])
    assert zh.exit_code == en.exit_code, zh.output
    for needle in needles:
        assert needle in zh.stdout, (needle, zh.stdout)
    _assert_fits(zh.stdout)
    missing = _numbers(en.stdout) - _numbers(zh.stdout)
    assert not missing, f"numbers of the English output missing in Chinese: {dict(missing)}"


def test_catalog_entries_are_checked_on_load():
    """A key YAML reads as a boolean (unquoted yes / no) is refused on load, never silently left
    English."""
    ui = catalog("zh").ui
    assert ui["yes"] == "是" and ui["no"] == "否"
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in ui.items())


def _fixed_labels() -> list[tuple[str, int, str]]:
    """``(file, line, text)`` of every ``T("...")`` call with a literal text in the package."""
    import ast
    import pathlib

    src = pathlib.Path(__file__).resolve().parents[1] / "src" / "moeplan"
    return [
        (str(p.relative_to(src)), c.lineno, c.args[0].value)
        for p in sorted(src.rglob("*.py"))
        for c in ast.walk(ast.parse(p.read_text()))
        if isinstance(c, ast.Call)
        and isinstance(c.func, ast.Name)
        and c.func.id == "T"
        and c.args
        and isinstance(c.args[0], ast.Constant)
        and isinstance(c.args[0].value, str)
    ]


def test_every_fixed_label_has_a_chinese_text():
    """A fixed table text (``T("Memory per GPU")``) is keyed by its English text in zh.yaml ``ui``
    (gettext's way for a text without parameters): a changed label shows here, never silently English."""
    labels = _fixed_labels()
    assert len(labels) > 100
    ui = catalog("zh").ui
    missing = [f"{f}:{line} {text!r}" for f, line, text in labels if text not in ui]
    assert not missing, "labels without a Chinese text in i18n/zh.yaml ui:\n" + "\n".join(missing)


def test_the_notes_under_the_first_candidate_read_in_chinese():
    """The README's main job (DeepSeek-V3 at 128K on 256 H100) has notes on #1's possible known issue
    and its memory risk: in Chinese they are Chinese, with the issue id and figures kept."""
    args = ["plan", "--model", "deepseek-ai/DeepSeek-V3", "--gpu", "h100", "--num-gpus", "256"]
    args += ["--seq-length", "131072", "--precision", "fp8-blockwise", "--gbs", "32", "--lang", "zh"]
    out = _invoke(args, columns=120).stdout
    flat = re.sub(r"\s+", "", out)
    assert "#1可能触发optimizer_offload_h2d_stream_sync（若其版本受影响；未给出版本）" in flat
    assert "#1有风险：可能放不下" in flat
    assert "may hit" not in out and "may not fit" not in out
