"""The texts every rule family shares (a skipped rule's ``skipped: needs ...``, ``set <key>: <value>``,
``use EP in [...]``, ``... (Megatron-LM asserts it)``), the CUDA graph rules' texts and the known-issue
findings are messages by id: the English text is the one the rules always printed, the Chinese one comes
from ``i18n/zh/*.yaml`` and, for a known issue's own title, workaround and size, from ``i18n/zh.yaml``
``known_issues`` keyed by the issue id.
"""

from __future__ import annotations

import copy
from importlib import resources

import pytest
import yaml

from moeplan import load_scenario, validate
from moeplan.catalog.known_issue_table import SYMPTOMS, get_known_issue, parse_known_issues
from moeplan.i18n import translate
from moeplan.i18n.messages import Message, lookup, msg
from moeplan.rules import RULES
from moeplan.rules.base import (
    Emitter,
    both,
    megatron_lm_asserts,
    set_key,
    use_ep_in,
    why_for_dp,
    why_microbatch_count,
    why_precision_support,
)
from moeplan.rules.graphs import nan_check_off_note
from moeplan.rules.known_issue_checks import (
    SYMPTOM_KEY_MESSAGES,
    SYMPTOM_MESSAGES,
    UNKNOWN_RULE,
    fix_message,
    versions_to_state,
)

RULE = "world.dense_grid_divides_world"


def _zh_issue(issue_id: str) -> dict:
    """The Chinese title / workaround / size of a known issue, read from i18n/zh.yaml by its id."""
    raw = yaml.safe_load(resources.files("moeplan.i18n").joinpath("zh.yaml").read_text(encoding="utf-8"))
    return raw["known_issues"][issue_id]


def _both_languages(text: str) -> tuple[str, str]:
    return str.__str__(text), translate(RULE, text, "zh")


def test_a_skipped_rule_names_the_missing_input_in_both_languages():
    e = Emitter(RULES[RULE])
    cases = [
        (e.missing("training.seq_length"), "skipped: needs training.seq_length", "已跳过：需要 training.seq_length"),
        (
            e.missing("system.num_gpus", why_for_dp()),
            "skipped: needs system.num_gpus (for DP)",
            "已跳过：需要 system.num_gpus（用于计算 DP）",
        ),
        (
            e.missing(both("training.global_batch_size", "system.num_gpus"), why_microbatch_count()),
            "skipped: needs training.global_batch_size and system.num_gpus (microbatch count)",
            "已跳过：需要 training.global_batch_size 和 system.num_gpus（用于计算微批次数）",
        ),
        (
            e.missing("system.gpu", why_precision_support()),
            "skipped: needs system.gpu (precision support)",
            "已跳过：需要 system.gpu（用于判断精度支持）",
        ),
        (e.missing_model("num_layers"), "skipped: needs the model's num_layers", "已跳过：需要模型的 num_layers"),
        (
            e.missing_model("num_layers", msg("rules_common.why_for_dp")),
            "skipped: needs the model's num_layers (for DP)",
            "已跳过：需要模型的 num_layers（用于计算 DP）",
        ),
        (
            e.missing_integer_dp_world(),
            "skipped: needs a world size that gives an integer DP",
            "已跳过：需要一个能得出整数 DP 的总卡数",
        ),
    ]
    for f, en, zh in cases:
        assert f.severity == "info" and f.rule_id == RULE and f.fix is None
        assert isinstance(f.message, Message)
        assert _both_languages(f.message) == (en, zh)


@pytest.mark.parametrize(
    ("num_gpus", "reason"),
    [
        (None, "skipped: needs system.num_gpus (for DP)"),
        # 32 GPUs are stated, but TP·PP·CP = 5 does not divide them: world.dense_grid_divides_world says so,
        # and the batch rule names the missing integer DP, not the stated world size
        (32, "skipped: needs a world size that gives an integer DP"),
    ],
)
def test_the_batch_rule_says_why_it_has_no_dp(num_gpus, reason):
    system = {"gpu": "h100"} if num_gpus is None else {"gpu": "h100", "num_gpus": num_gpus}
    data = {
        "model": "Qwen/Qwen3-30B-A3B",
        "system": system,
        "training": {"seq_length": 4096, "global_batch_size": 64},
        "layout": {"pipeline_model_parallel_size": 5},
    }
    (f,) = [f for f in validate(load_scenario(data)).findings if f.rule_id == "batch.global_batch_divisible"]
    assert f.severity == "info" and str(f.message) == reason


def test_a_skip_reason_written_as_free_text_is_refused():
    """Free English text would have no Chinese: a rule names a key or passes a message."""
    with pytest.raises(ValueError, match="neither a scenario key nor a message"):
        Emitter(RULES[RULE]).missing("the model's num_layers (to count 't')")


def test_shared_fix_phrases_translate_with_their_values():
    assert _both_languages(set_key("pad_to_max_length", "true")) == (
        "set pad_to_max_length: true",
        "设置 pad_to_max_length: true",
    )
    assert _both_languages(use_ep_in([1, 2, 4, 8])) == ("use EP in [1, 2, 4, 8]", "将 EP 设为 [1, 2, 4, 8] 之一")
    asserted = megatron_lm_asserts(msg("graphs.scope_and_modules_both_set"))
    assert _both_languages(asserted) == (
        "cuda_graph_scope and cuda_graph_modules cannot both be set (Megatron-LM asserts it)",
        "cuda_graph_scope 和 cuda_graph_modules 不能同时设置（Megatron-LM 会断言失败）",
    )


def test_the_nan_check_note_states_the_graph_gain_in_both_languages():
    s = load_scenario(
        {
            "model": "Qwen/Qwen3-30B-A3B",
            "system": {"gpu": "h100", "num_gpus": 8},
            "layout": {"cuda_graph_impl": "full_iteration", "check_for_nan_in_loss": False},
            "versions": {"megatron_core": "0.18.0"},
        }
    )
    head = (
        "NaN check off: the full-iteration CUDA graph needs check_for_nan_in_loss=false (rule "
        "graphs.full_iteration_nan_check), so a diverging loss is not caught; without the graph"
    )
    zh_head = (
        "NaN 检查关闭：整迭代 CUDA 图需要 check_for_nan_in_loss=false（规则 graphs.full_iteration_nan_check），"
        "因此发散的损失不会被发现；不用该 CUDA 图时"
    )
    assert _both_languages(nan_check_off_note(s)) == (head + " the check stays on", zh_head + "检查保持开启")
    # 9.14 % credited to the graph: "-9.1 %" (one decimal, the sign of a cost removed)
    assert _both_languages(nan_check_off_note(s, 9.14)) == (
        head + " (predicted -9.1 %) the check stays on",
        zh_head + "（预测 -9.1 %）检查保持开启",
    )


def test_a_known_issue_finding_takes_its_chinese_title_size_and_workaround_by_issue_id():
    k = get_known_issue("nccl_2_30_moe_alltoall_small_message_slowdown")
    found = [f for f in validate(load_scenario(k.example)).findings if f.rule_id == k.rule_id]
    assert len(found) == 1
    f = found[0]
    zh = _zh_issue(k.id)
    assert f.message == (f"known issue {k.id}: {k.title} — slowdown ({k.size}) (NCCL 2.30.4 in >=2.30.4; {k.source})")
    assert translate(f.rule_id, f.message, "zh") == (
        f"已知问题 {k.id}：{zh['title']} —— 变慢（{zh['size']}）（NCCL 2.30.4（受影响范围 >=2.30.4）；{k.source}）"
    )
    # no package has a fixed release: the fix is the workaround alone
    assert f.fix == k.workaround
    assert translate(f.rule_id, f.fix, "zh") == zh["workaround"]
    # the JSON stays English and survives a deep copy (a finding's to_dict)
    assert f.to_dict()["message"] == f.message
    assert translate(f.rule_id, copy.deepcopy(f.message), "zh") == translate(f.rule_id, f.message, "zh")


def test_fixed_releases_of_two_packages_are_joined_in_the_fix():
    (k,) = parse_known_issues(
        {
            "schema": 1,
            "issues": [
                {
                    "id": "two_fixed_packages",
                    "title": "a title",
                    "source": "https://github.com/NVIDIA/Megatron-LM/issues/1",
                    "reported": "2026-01-02",
                    "packages": {
                        "megatron_core": {"affected": ">=0.15,<0.16", "fixed": "0.16.0"},
                        "transformer_engine": {"affected": "<2.9", "fixed": "2.9"},
                    },
                    "trigger": {"tp": {"gt": 1}},
                    "symptom": "crash",
                    "certainty": "reported",
                    "workaround": "use TP = 1",
                }
            ],
        }
    )
    fix = fix_message(k)
    # the English one is the workaround and KnownIssue.upgrade_text, as the rule always wrote it
    assert fix == f"use TP = 1; fixed by: {k.upgrade_text()}"
    assert fix == "use TP = 1; fixed by: upgrade to megatron-core ≥ 0.16.0 and Transformer Engine ≥ 2.9"
    # an issue zh.yaml has no text for keeps its English workaround inside the Chinese sentence
    assert fix.text("zh") == "use TP = 1；已修复：升级到 megatron-core ≥ 0.16.0 且 Transformer Engine ≥ 2.9"


def test_the_unknown_versions_finding_names_the_assumed_container_in_both_languages():
    k = get_known_issue("te_graphs_attn_ep_overlap_nan")
    data = copy.deepcopy(k.example)
    data.pop("versions")
    (f,) = [f for f in validate(load_scenario(data)).findings if f.rule_id == UNKNOWN_RULE]
    # six issues of that layout are possible; at nemo:26.06 (megatron-core 0.18.0, PyTorch 2.12.0a0,
    # Megatron Bridge 0.5.0) the EP-overlap event deadlock (>=0.14.0) and the 26.06 TP slowdown apply;
    # the container decides the four that name no NCCL, versions.nccl the two NCCL hangs
    assert f.message.startswith("versions not stated: 6 known issue(s) may apply (")
    assert f"{k.id} [nan]" in f.message
    assert "moeplan assumes the newest container it knows, nemo:26.06 (" in f.message
    assert f.message.endswith(
        "and 2 of the 6 apply there; stating versions.container decides 4 of them, versions.nccl the other 2 "
        "(moeplan known-issues lists them)"
    )
    zh = translate(UNKNOWN_RULE, f.message, "zh")
    assert f"{k.id} [loss / 梯度出现 NaN]" in zh
    assert zh.endswith(
        "在该容器下 6 个中有 2 个适用；给出 versions.container 可判定其中 4 个，versions.nccl 判定其余 2 个"
        "（moeplan known-issues 会列出这些问题）"
    )


def test_the_versions_to_state_join_the_container_and_nccl_in_both_languages():
    nccl = get_known_issue("nccl_2_29_2_hang")
    data = copy.deepcopy(nccl.example)
    data.pop("versions", None)
    ask = versions_to_state(load_scenario(data), [nccl])
    assert _both_languages(ask) == ("versions.container and versions.nccl", "versions.container 和 versions.nccl")


def test_symptom_texts_are_the_databases():
    assert set(SYMPTOM_MESSAGES) == set(SYMPTOM_KEY_MESSAGES) == set(SYMPTOMS)
    for key, words in SYMPTOMS.items():
        assert SYMPTOM_MESSAGES[key]() == words
        assert SYMPTOM_KEY_MESSAGES[key]() == key
        assert lookup(SYMPTOM_MESSAGES[key]()).text("zh") == SYMPTOM_KEY_MESSAGES[key]().text("zh")
