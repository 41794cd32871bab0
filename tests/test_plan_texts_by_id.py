"""The planner's explanation lines and the ``fit`` change labels are messages: their English text is
unchanged and their Chinese text comes by id, part by part (a recompute rung, a knob family's title,
each option of a list), never by matching the English text."""

from __future__ import annotations

from types import SimpleNamespace

from typer.testing import CliRunner

from moeplan.cli.app import app
from moeplan.cli.render import set_lang
from moeplan.i18n.messages import lookup
from moeplan.plan.explain import knob_line
from moeplan.plan.space import rung_text

runner = CliRunner()


def test_a_recompute_rung_reads_the_same_in_english_and_by_its_parts_in_chinese():
    cases = [
        ("none", True, "recompute none", "不重计算"),
        ("full", True, "recompute full", "全量重计算"),
        ("full", False, "full", "全量"),
        ("selective moe_act,layernorm", False, "selective moe_act,layernorm", "选择性 moe_act,layernorm"),
        (
            "selective moe_act + optimizer offload 0.5",
            True,
            "recompute selective moe_act + optimizer offload 0.5",
            "选择性重计算 moe_act + 优化器卸载 0.5",
        ),
        ("full + optimizer offload 1", False, "full + optimizer offload 1", "全量 + 优化器卸载 1"),
        ("full (given)", True, "recompute full (given)", "全量重计算（已指定）"),
        (
            "selective core_attn (given)",
            True,
            "recompute selective core_attn (given)",
            "选择性重计算 core_attn（已指定）",
        ),
    ]
    for rung, prefix, en, zh in cases:
        m = rung_text(rung, prefix)
        assert m == en and m.text("zh") == zh, rung


def _winner(fam: str, tried: dict, chosen: str, why: dict | None = None) -> SimpleNamespace:
    return SimpleNamespace(
        tried={fam: tried, "_why": why or {}},
        knobs={fam: chosen},
        parallel=SimpleNamespace(vpp=1),
        scenario=SimpleNamespace(gpu=None),
    )


def test_a_knob_line_with_a_tie_note_is_chinese_throughout():
    # deepep 1012 against alltoall's 1000: +1.2 %, within the 2 % tie margin, so the simpler
    # all-to-all stays; hybridep 991: -0.9 %
    w = _winner("dispatcher", {"alltoall": 1000.0, "deepep": 1012.0, "hybridep": 991.0}, "alltoall")
    line = knob_line(w, "dispatcher", "dispatcher")
    assert line == (
        "dispatcher alltoall: deepep +1.2 %; hybridep -0.9 % (deepep within 2 %: below the model's resolution,"
        " the simpler setting is kept)."
    )
    assert line.text("zh") == (
        "dispatcher alltoall：deepep +1.2 %；hybridep -0.9 %（deepep 在 2 % 以内：低于模型的分辨率，保留更简单的设置）。"
    )


def test_a_rejected_option_names_its_reason_in_chinese():
    w = _winner("graphs", {"eager": 1000.0, "te:attn": None}, "eager", {"graphs:te:attn": "does-not-fit"})
    line = knob_line(w, "graphs", "CUDA graphs")
    assert line == "CUDA graphs eager: te:attn rejected (does-not-fit)."
    assert line.text("zh") == "CUDA 图 eager：te:attn 被排除（放不下）。"
    # a VPP line names its setting alone ("VPP4", not "VPP VPP4") and is translated too
    w = SimpleNamespace(tried={"vpp": {"VPP1": 950.0, "VPP4": 1000.0}}, knobs={}, parallel=SimpleNamespace(vpp=4))
    line = knob_line(w, "vpp", "VPP")
    assert line == "VPP4: VPP1 -5.0 %." and line.text("zh") == "VPP4：VPP1 -5.0 %。"


def test_fit_change_labels_are_messages_in_both_languages():
    args = ["fit", "examples/qwen3_30b_64k_oom.yaml", "--gbs", "64"]
    try:
        en = runner.invoke(app, args, env={"COLUMNS": "200"})
        zh = runner.invoke(app, [*args, "--lang", "zh"], env={"COLUMNS": "200"})
    finally:
        set_lang("en")
    assert "selective moe_act,layernorm,moe + optimizer offload 1" in en.stdout
    assert "CP 2 → 4 + TP 2 → 4 (SP)" in en.stdout
    assert "选择性重计算 moe_act,layernorm,moe + 优化器卸载 1" in zh.stdout
    assert "精度 bf16 → fp8-blockwise" in zh.stdout
    label = lookup("recompute selective moe_act,layernorm,moe + optimizer offload 1")
    assert label is not None and label.msgid == "plan.change_both"
