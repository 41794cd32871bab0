"""The MoE, pipeline and precision rules' findings are messages whose parts translate with them: a list
of alternatives joined with ", or ", a list of requirements joined with "; ", an optional note, and a
choice of phrase each come out in Chinese while the English text stays as it was.
"""

from __future__ import annotations

from moeplan import load_scenario, validate
from moeplan.i18n import translate
from moeplan.i18n.messages import lookup


def _finding(rule_id: str, layout: dict, training: dict | None = None):
    s = load_scenario(
        {
            "model": "Qwen/Qwen3-30B-A3B",
            "system": {"gpu": "h100", "num_gpus": 64},
            "training": {"seq_length": 4096, "micro_batch_size": 1, "global_batch_size": 64, **(training or {})},
            "layout": layout,
        }
    )
    found = [f for f in validate(s).findings if f.rule_id == rule_id]
    assert len(found) == 1, found
    return found[0]


def test_pipeline_split_alternatives_translate_each_and_join_with_chinese_or():
    # 48 layers on PP 5: 48 + 2 = 50 = 5 × 10 with both account_for_* keys; the uneven split has
    # k = ⌈48/5⌉ = 10 on each of the 3 middle stages and (48 − 30) = 18 → 9 + 9 on the ends; 48 divides
    # by PP 1, 2, 4, 8, 16
    f = _finding("pipeline.num_layers_divisible_by_pp", {"pipeline_model_parallel_size": 5})
    assert f.message == "num_layers (48) is not divisible by PP (5)"
    assert f.fix.startswith(
        "account_for_embedding_in_pipeline_split: true and account_for_loss_in_pipeline_split: true "
        "(48 + 2 = 50 = 5 × 10), or num_layers_in_first_pipeline_stage: 9 and "
        "num_layers_in_last_pipeline_stage: 9 (10 on each of the 3 middle stages), or "
        "pipeline_model_parallel_layout: '"
    )
    assert f.fix.endswith("' (balanced), or PP in [1, 2, 4, 8, 16]")
    zh = translate(f.rule_id, f.fix, "zh")
    assert zh.startswith(
        "account_for_embedding_in_pipeline_split: true 且 account_for_loss_in_pipeline_split: true"
        "（48 + 2 = 50 = 5 × 10）；或 num_layers_in_first_pipeline_stage: 9 且 "
        "num_layers_in_last_pipeline_stage: 9（中间 3 个 stage 各 10 层）；或 pipeline_model_parallel_layout: '"
    )
    assert zh.endswith("'（均衡）；或 PP 取 [1, 2, 4, 8, 16] 之一")
    assert translate(f.rule_id, f.message, "zh") == "num_layers（48）不能被 PP（5）整除"
    assert lookup(f.fix).msgid == "pipeline.or"


def test_ep_overlap_requirements_translate_item_by_item():
    f = _finding(
        "moe.ep_overlap_requirements",
        {
            "overlap_moe_expert_parallel_comm": True,
            "expert_model_parallel_size": 1,
            "moe_token_dispatcher_type": "allgather",
        },
    )
    assert f.message == (
        "overlap_moe_expert_parallel_comm requires EP > 1 (is 1); the alltoall or flex dispatcher (is allgather)"
    )
    assert translate(f.rule_id, f.message, "zh") == (
        "overlap_moe_expert_parallel_comm 需要：EP > 1（当前为 1）；alltoall 或 flex dispatcher（当前为 allgather）"
    )
    assert lookup(f.message).msgid == "moe.ep_overlap_requirements"


def test_the_optional_pad_seq_to_mult_note_translates_with_its_message():
    # FP8 (tensorwise) needs 16 tokens per rank; TP 1, CP 1: pad_seq_to_mult must be a multiple of 16,
    # and unset it is Bridge's default 1
    layout = {"tensor_model_parallel_size": 1, "sequence_parallel": False, "expert_model_parallel_size": 8}
    f = _finding("precision.fp8_packed_padding", layout, {"precision": "fp8-tensorwise", "packed_sequences": True})
    assert f.message.startswith(
        "packed microbatches are padded only to a multiple of 1 tokens (pad_seq_to_mult unset: Bridge default 1), "
        "so a packed microbatch need not give a multiple of 16 tokens per rank (÷ CP 1) as fp8-tensorwise GEMMs"
    )
    zh = translate(f.rule_id, f.message, "zh")
    assert zh.startswith("packed 微批次只填充到 1 个 token 的倍数（pad_seq_to_mult 未设置：Bridge 默认为 1），")
    assert "（÷ CP 1）" in zh
    assert lookup(f.message).params["unset"].msgid == "precision.pad_seq_to_mult_unset"
    stated = _finding(
        "precision.fp8_packed_padding",
        layout,
        {"precision": "fp8-tensorwise", "packed_sequences": True, "pad_seq_to_mult": 8},
    )
    assert "(pad_seq_to_mult), so" in stated.message
    assert "（pad_seq_to_mult），" in translate(stated.rule_id, stated.message, "zh")
    assert stated.fix == (
        "set training.pad_seq_to_mult: 16 (dataset.offline_packing_specs.pad_seq_to_mult), or pad_to_max_length: true"
    )
