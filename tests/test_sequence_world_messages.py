"""The sequence, world-size, batch and scenario rules speak in catalogued messages: the English text is
the one users and goldens read, the Chinese one is built from the same id and parameters, and the
parts a rule picks or lists (the alignment terms, the hybrid-CP conflicts, the missing inputs, the
"Megatron-LM asserts it" variants) are translated with the message that holds them."""

from __future__ import annotations

from moeplan import load_scenario, validate
from moeplan.i18n.messages import Message


def _finding(rule_id: str, scenario: dict):
    res = validate(load_scenario(scenario))
    found = [f for f in res.findings if f.rule_id == rule_id]
    assert found, f"{rule_id} did not fire"
    return found[0]


def _qwen(layout: dict, **over) -> dict:
    return {
        "model": "Qwen/Qwen3-30B-A3B",
        "system": {"gpu": "h100", "num_gpus": 16},
        "training": {"seq_length": 4096, "micro_batch_size": 1, "global_batch_size": 64, **over.get("training", {})},
        "layout": layout,
        **{k: v for k, v in over.items() if k != "training"},
    }


def test_alignment_names_both_terms_and_translates_the_conjunction():
    # CP 2, TP 4 with SP: unit = 2·lcm(2, 4) = 8; 4100 = 512·8 + 4 → next multiples 4104 and 4096
    f = _finding(
        "sequence.cp_sp_alignment",
        _qwen(
            {"context_parallel_size": 2, "tensor_model_parallel_size": 4, "sequence_parallel": True},
            training={"seq_length": 4100},
        ),
    )
    assert f.message == "seq_length 4100 is not a multiple of 8 (needed: 2·CP = 4 and CP·TP = 8)"
    assert f.fix == "use seq_length 4104 or 4096"
    assert isinstance(f.message, Message) and isinstance(f.fix, Message)
    assert f.message.text("zh") == "seq_length 4100 不是 8 的倍数（要求：2·CP = 4 且 CP·TP = 8）"
    assert f.fix.text("zh") == "使用 seq_length 4104 或 4096"


def test_alignment_fix_below_one_unit_offers_only_the_next_multiple():
    # CP 4 without SP: unit = 2·4 = 8; seq_length 2 → 8 (0 is no length)
    f = _finding("sequence.cp_sp_alignment", _qwen({"context_parallel_size": 4}, training={"seq_length": 2}))
    assert f.message == "seq_length 2 is not a multiple of 8 (needed: 2·CP = 8)"
    assert f.fix == "use seq_length 8"
    assert f.fix.text("zh") == "使用 seq_length 8"


def test_hybrid_cp_conflicts_are_listed_with_commas_and_translated_each():
    f = _finding(
        "sequence.hybrid_cp_restrictions",
        _qwen(
            {
                "hybrid_context_parallel": True,
                "context_parallel_size": 2,
                "pipeline_model_parallel_size": 2,
                "cuda_graph_impl": "transformer_engine",
                "use_megatron_fsdp": True,
            }
        ),
    )
    assert f.message == "hybrid_context_parallel cannot be combined with PP = 2, CUDA graphs, Megatron-FSDP"
    assert f.fix == "turn hybrid_context_parallel off or remove PP = 2, CUDA graphs, Megatron-FSDP"
    assert f.message.text("zh") == "hybrid_context_parallel 不能与 PP = 2、CUDA 图、Megatron-FSDP 同时使用"
    assert f.fix.text("zh") == "关闭 hybrid_context_parallel，或去掉 PP = 2、CUDA 图、Megatron-FSDP"


def test_missing_inputs_are_a_translated_list():
    f = _finding("scenario.inputs_missing", {"training": {"global_batch_size": 8}})
    assert f.message == (
        "not checked for lack of input: model (every model-dependent rule: heads, layers, experts, pipeline split); "
        "system.gpu (GPU-dependent rules: precision, dispatcher backend); system.num_gpus (world-size and batch "
        "rules); training.seq_length (sequence alignment rules)"
    )
    assert f.message.text("zh") == (
        "因缺少输入而未检查：model（所有依赖模型的规则：注意力头、层数、专家、流水线切分）；"
        "system.gpu（依赖 GPU 的规则：精度、dispatcher 后端）；system.num_gpus（总卡数与批大小规则）；"
        "training.seq_length（序列对齐规则）"
    )


def test_megatron_core_assertions_say_so_in_both_languages():
    # Qwen3-30B-A3B: max_position_embeddings 40960 < 65536
    f = _finding(
        "sequence.max_position_embeddings",
        _qwen({}, framework="megatron-core", training={"seq_length": 65536}),
    )
    assert f.severity == "error"
    assert f.message == (
        "seq_length (65536) exceeds max_position_embeddings (40960) of the model config (Megatron-LM asserts it)"
    )
    assert f.message.text("zh") == (
        "seq_length（65536）超过了模型配置中的 max_position_embeddings（40960）（Megatron-LM 会断言失败）"
    )
    g = _finding(
        "env.cuda_device_max_connections",
        _qwen(
            {"tensor_model_parallel_size": 2, "sequence_parallel": True},
            framework="megatron-core",
            environment={"CUDA_DEVICE_MAX_CONNECTIONS": "8"},
        ),
    )
    assert g.message == (
        "CUDA_DEVICE_MAX_CONNECTIONS=8 on h100 with TP = 2, CP = 1: kernels of the TP/CP communication overlap "
        "can be reordered (Megatron-LM asserts it)"
    )
    assert g.message.text("zh").endswith("（Megatron-LM 会断言失败）")


def test_expert_grid_names_the_resolved_etp_only_when_it_was_unset():
    # 6 GPUs, EP 4, ETP 1 stated: 6 % (1·4·1) = 2 → the next multiple of 4 above 6 is 8
    f = _finding(
        "world.expert_grid_divides_world",
        _qwen(
            {"expert_model_parallel_size": 4, "expert_tensor_parallel_size": 1},
            system={"gpu": "h100", "num_gpus": 6},
        ),
    )
    assert f.message == "num_gpus (6) is not divisible by ETP·EP·PP = 1·4·1 = 4"
    assert f.fix == (
        "lower EP or ETP (ETP = 1 folds experts across TP ranks) so ETP·EP·PP divides 6, "
        "or use a world size that is a multiple of 4 (e.g. 8)"
    )
    assert f.fix.text("zh") == (
        "降低 EP 或 ETP（ETP = 1 时专家会折叠到各 TP rank 上），使 ETP·EP·PP 能整除 6；或使用 4 的倍数的总卡数（例如 8）"
    )
    # ETP unset under Bridge resolves to 1: 16 % (1·7·1) = 2
    g = _finding("world.expert_grid_divides_world", _qwen({"expert_model_parallel_size": 7}))
    assert g.message == (
        "num_gpus (16) is not divisible by ETP·EP·PP = 1·7·1 = 7 (ETP was unset and resolves to 1 under megatron-bridge)"
    )
    assert g.message.text("zh") == (
        "num_gpus（16）不能被 ETP·EP·PP = 1·7·1 = 7 整除（ETP 未设置，在 megatron-bridge 下取 1）"
    )
