"""The recompute, activation-offload, optimizer and FSDP rules speak in catalogued messages: the English
text is the one users and goldens read, the Chinese one is built from the same id and parameters, and
the parts a rule picks (the "recompute_modules unset" note, the shorthand label's fix, the gradient-copy
clause of the fp32-master note) are whole messages or translated with the message that holds them."""

from __future__ import annotations

from moeplan import load_scenario, validate
from moeplan.i18n.messages import Message


def _findings(rule_id: str, layout: dict, **training) -> list:
    scenario = {
        "model": "Qwen/Qwen3-30B-A3B",
        "system": {"gpu": "h100", "num_gpus": 16},
        "training": {"seq_length": 4096, "micro_batch_size": 1, "global_batch_size": 64, **training},
        "layout": layout,
    }
    found = [f for f in validate(load_scenario(scenario)).findings if f.rule_id == rule_id]
    assert found, f"{rule_id} did not fire"
    for f in found:
        assert isinstance(f.message, Message) and (f.fix is None or isinstance(f.fix, Message))
    return found


def test_core_attention_note_at_long_context_depends_on_whether_modules_are_set():
    (unset,) = _findings("recompute.core_attn_long_context", {"recompute_granularity": "selective"}, seq_length=65536)
    assert unset.message.startswith(
        "recomputing core attention at 65,536 tokens (recompute_modules unset: Megatron recomputes core_attn) "
        "repeats the attention forward"
    )
    assert unset.message.text("zh").startswith(
        "在 65,536 个 token 上重计算 core attention（未设置 recompute_modules：Megatron 默认重计算 core_attn）会重复"
    )
    (stated,) = _findings(
        "recompute.core_attn_long_context",
        {"recompute_granularity": "selective", "recompute_modules": ["core_attn"]},
        seq_length=32768,
    )
    assert stated.message.startswith("recomputing core attention at 32,768 tokens repeats the attention forward")
    assert stated.message.text("zh").startswith("在 32,768 个 token 上重计算 core attention 会重复注意力前向")
    assert (
        stated.fix.text("zh") == "改为重计算其他模块（layernorm、moe_act、mla_up_proj、mlp/moe），卸载优化器，或增大 CP"
    )


def test_shorthand_and_unknown_labels_keep_their_quotes_in_both_languages():
    # Qwen3-30B-A3B: GQA, no Gated DeltaNet: 'gdn' and 'up_proj' are dropped, 'attn' is renamed
    found = _findings(
        "recompute.module_labels",
        {"recompute_granularity": "selective", "recompute_modules": ["gdn", "up_proj", "attn", "it's"]},
    )
    got = [(f.message, f.fix) for f in found]
    assert got == [
        (
            "recompute module 'gdn' is shorthand, not a Megatron-Core label (it means 'gdn_norm_out')",
            "drop 'gdn': Qwen/Qwen3-30B-A3B has no Gated DeltaNet layers",
        ),
        (
            "recompute module 'up_proj' is shorthand, not a Megatron-Core label (it means 'mla_up_proj')",
            "drop 'up_proj': Qwen/Qwen3-30B-A3B has no MLA up-projections (for GQA use 'core_attn' or 'layernorm')",
        ),
        (
            "recompute module 'attn' is shorthand, not a Megatron-Core label (it means 'core_attn')",
            "use 'core_attn'",
        ),
        (
            'unknown recompute module "it\'s"',
            "use labels from core_attn, moe_act, layernorm, mla_up_proj, mlp, moe, shared_experts, gdn_norm_out",
        ),
    ]
    assert found[0].fix.text("zh") == "去掉 'gdn'：Qwen/Qwen3-30B-A3B 没有 Gated DeltaNet 层"
    assert found[2].fix.text("zh") == "改用 'core_attn'"
    assert found[3].message.text("zh") == '未知的重计算模块 "it\'s"'


def test_fp32_master_note_adds_the_gradient_copy_only_for_16_bit_gradients():
    layout = {"use_distributed_optimizer": True, "use_precision_aware_optimizer": True}
    clause_en = " and copies the bf16 gradient shard to fp32 at every step (4 B more per element while it steps)"
    clause_zh = "，并且每一步都把 bf16 梯度分片复制为 fp32（优化器步进期间每个元素多 4 B）"
    rule = "optimizer.precision_aware_master_kept_by_megatron_core"
    (bf16,) = _findings(rule, {**layout, "main_grads_dtype": "bf16"})
    (fp32,) = _findings(rule, {**layout, "main_grads_dtype": "fp32"})
    assert clause_en in bf16.message and clause_en not in fp32.message
    assert clause_zh in bf16.message.text("zh") and clause_zh not in fp32.message.text("zh")
    assert "mixed_precision.fp8_recipe（默认 'tensorwise'，即使未开启 FP8）" in fp32.message.text("zh")


def test_optimizer_offload_notes_an_unset_precision_aware_optimizer():
    (f,) = _findings(
        "offload.optimizer_requires_precision_aware_optimizer",
        {"optimizer_cpu_offload": True, "use_distributed_optimizer": True, "optimizer_offload_fraction": 1.0},
    )
    assert (
        f.message
        == "optimizer_cpu_offload needs use_precision_aware_optimizer: true (unset; OptimizerConfig default false)"
    )
    assert f.message.text("zh") == (
        "optimizer_cpu_offload 需要 use_precision_aware_optimizer: true（未设置；OptimizerConfig 默认为 false）"
    )
    assert f.fix.text("zh") == "设置 use_precision_aware_optimizer: true"


def test_offloaded_layer_count_bound_carries_its_numbers():
    # Qwen3-30B-A3B has 48 layers: at most 47 can be offloaded
    (f,) = _findings("offload.activation_cpu_offloading", {"cpu_offloading": True, "cpu_offloading_num_layers": 48})
    assert (f.message, f.fix) == ("cpu_offloading_num_layers (48) must be < num_layers (48)", "use at most 47")
    assert (f.message.text("zh"), f.fix.text("zh")) == (
        "cpu_offloading_num_layers（48）必须 < num_layers（48）",
        "最多使用 47",
    )
