"""The formatted lines of the estimate's header and notes, of ``oom`` and of the run-log checks are
messages (``moeplan/i18n/messages.py``): their Chinese text comes by id, the values carried over
unchanged, and a sub-phrase (a recipe fill left out, the reason a split breaks) is translated with
the line that holds it.
"""

from __future__ import annotations

import pathlib
import re

from moeplan import load_scenario
from moeplan.diagnose.oom import parse_oom, reconcile_with_model
from moeplan.i18n import ui_translation
from moeplan.i18n.messages import Message, lookup
from moeplan.io.run_logs import mismatch_text
from moeplan.model.validity import assess
from moeplan.resolve.assumptions import verdict_assumptions

DATA = pathlib.Path(__file__).resolve().parent / "data" / "diagnose"
GIB = 2**30


def _zh(text: str) -> str:
    """``text`` in Chinese by its message id alone (never by a pattern of ``i18n/zh.yaml``)."""
    m = lookup(text)
    assert isinstance(m, Message), f"not a message: {text!r}"
    return m.text("zh")


def test_a_recipe_fill_left_out_reads_in_chinese_inside_the_recipe_assumption():
    # Kimi-K2 builds no MTP layer; DeepSeek-V3's layout map for PP·VPP = 16 holds one ('tmL'): left out
    s = load_scenario(
        {
            "model": "moonshotai/Kimi-K2-Instruct",
            "system": {"gpu": "h100", "num_gpus": 512},
            "training": {"seq_length": 4096, "global_batch_size": 1024},
            "layout": {
                "tensor_model_parallel_size": 1,
                "pipeline_model_parallel_size": 8,
                "virtual_pipeline_model_parallel_size": 2,
                "expert_model_parallel_size": 64,
            },
            "recipe_defaults": "mbridge-perf",
        }
    )
    recipe = next(a for a in verdict_assumptions(s) if a.what == "recipe")
    fill = "pipeline_model_parallel_layout=Et*4|(t*4|)*14tmL"
    assert recipe.text == (
        "recipe training fills (no matching row, shared helpers; not filled, it would break a rule for this model: "
        f"{fill} (it holds 1 MTP layer ('m'), the model builds 0))"
    )
    assert _zh(recipe.text) == (
        "按 recipe 填充训练设置（no matching row, shared helpers；未填充（会违反该模型的规则）："
        f"{fill}（其中含 1 个 MTP 层（'m'），而该模型构建 0 个））"
    )


def test_the_optimizer_and_routing_assumptions_read_in_chinese():
    s = load_scenario("examples/deepseek_v3_gb300.yaml")
    texts = {a.what: a.text for a in verdict_assumptions(s)}
    assert _zh(texts["grad_reduce"]) == "梯度以 BF16 规约"
    assert (
        _zh(texts["optimizer"])
        == "精度感知优化器（precision-aware optimizer），FP32 主权重由 megatron-core 保存，优化器矩以 BF16 保存"
    )
    assert _zh(texts["routing"]) == "路由不均衡 1.2×"


def test_the_one_line_error_band_finds_the_coverage_heads_by_id():
    """``band_line`` prints each coverage gap up to its first ``:`` / ``(``: that head is a message."""
    v = assess(
        load_scenario(
            {
                "model": "meta-llama/Llama-3.1-8B",
                "system": {"gpu": "h100", "num_gpus": 8},
                "training": {"seq_length": 131072, "global_batch_size": 8},
                "layout": {"tensor_model_parallel_size": 8},
            }
        )
    )
    heads = [re.split(r"[:(;]", item, maxsplit=1)[0].strip() for item in v.outside]
    assert _zh("model meta-llama/Llama-3.1-8B was not measured") == "模型 meta-llama/Llama-3.1-8B 未实测"
    assert "seq_length 131072 outside the fitted 4096–8192" in heads
    assert _zh("seq_length 131072 outside the fitted 4096–8192") == "seq_length 131072 超出拟合范围 4096–8192"


def test_a_fragmentation_diagnosis_reads_whole_in_chinese():
    # "1.15 GiB reserved but unallocated" against a 786 MiB request: fragmentation; the line used to
    # come out half English ("碎片：1.15 GiB is reserved by PyTorch but unallocated, ...")
    rep = parse_oom((DATA / "oom_megatron_gpt2_v100_old.txt").read_text())
    assert rep.fragmentation is True
    assert (
        ui_translation(rep.diagnosis)
        == "碎片：PyTorch 已预留但未分配 1.15 GiB，多于这次 786.00 MiB 的申请能一次用上的量"
    )
    assert [_zh(f) for f in rep.fixes] == [
        "设置 PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True（使用 TE CUDA 图时还需 NCCL_GRAPH_REGISTER=0）",
        "然后用 `moeplan estimate` 重新核对峰值",
    ]


def test_real_demand_names_what_the_message_alone_suggested_in_chinese():
    rep = parse_oom((DATA / "oom_megatron_gpt2_v100_old.txt").read_text())
    out, _ = reconcile_with_model(rep, predicted_peak_bytes=100 * GIB, capacity_bytes=80 * GIB)
    assert out.diagnosis.endswith("(the message alone suggested fragmentation)")
    assert _zh(out.diagnosis) == (
        "真实需求：显存模型预测峰值为 100.00 GiB，超过可用的 80.00 GiB；需要降低该配置每 GPU 的显存占用"
        "（仅看报错信息会判断为碎片）"
    )


def test_the_keys_a_log_ran_differently_read_in_chinese_item_by_item():
    text = mismatch_text([("tensor_model_parallel_size", 8, 4), ("pipeline_model_parallel_size", 2, 1)], "the entry")
    assert text == (
        "tensor_model_parallel_size 8 in the log, 4 in the entry; pipeline_model_parallel_size 2 in the log, 1 in the entry"
    )
    assert (
        _zh(text)
        == "tensor_model_parallel_size 日志中为 8，条目中为 4；pipeline_model_parallel_size 日志中为 2，条目中为 1"
    )
