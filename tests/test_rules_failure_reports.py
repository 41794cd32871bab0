"""Rules and keys from held-out failure reports: HybridEP's token limit across NVLink domains,
FP8 padding of packed sequences, Megatron-FSDP with PP on a VLM, an unset ETP that becomes TP, EP checked
from num_moe_experts alone, the first release with Gated DeltaNet CP, the keys moe_deepep_num_sms /
moe_z_loss_coeff / cross_entropy_fusion_impl / apply_rope_fusion / vision_cuda_graph_*, and the MoE-VLM
guidance's 3D row (docs/model/rules.md, "MoE-VLM graph scopes")."""

from __future__ import annotations

import pytest

from moeplan import load_scenario, validate
from moeplan.io.export import export
from moeplan.rules.moe import HYBRIDEP_MAX_TOKENS_PER_RANK_MULTI_NODE, hybridep_buffer_tokens


def _run(model=None, gpu="h100", num_gpus=64, training=None, versions=None, framework="megatron-bridge", **layout):
    data = {
        "system": {"gpu": gpu, "num_gpus": num_gpus},
        "training": {"seq_length": 4096, "micro_batch_size": 1, "global_batch_size": 256, **(training or {})},
        "layout": layout,
        "framework": framework,
    }
    if model is not None:
        data["model"] = model
    if versions:
        data["versions"] = versions
    return validate(load_scenario(data))


def _of(r, rule_id, severity=None):
    return [f for f in r.findings if f.rule_id == rule_id and (severity is None or f.severity == severity)]


# --- 1. HybridEP across NVLink domains -------------------------------------------------------------


def test_hybridep_limit_is_the_queue_pair_depth():
    # DeepEP hybrid-ep config.cuh: valid when 3·T + 1 < 65,536 → T ≤ (65,536 − 2) // 3 = 21,844
    # (3·21,844 + 1 = 65,533 is accepted, 3·21,845 + 1 = 65,536 is not)
    assert HYBRIDEP_MAX_TOKENS_PER_RANK_MULTI_NODE == 21_844
    # buffer tokens: align up to 16, at least 512, then up to the 64-token combine chunk
    assert hybridep_buffer_tokens(100) == 512
    assert hybridep_buffer_tokens(21_824) == 21_824  # 1,364·16 = 341·64: fits
    assert hybridep_buffer_tokens(21_825) == 21_888  # → 21,840 (16) → 21,888 (64) > 21,844
    assert hybridep_buffer_tokens(21_824, chunk=128) == 21_888  # the recipes' 128-token chunk: 171·128


def _hybridep(seq, ep, cp=1):
    return _run(
        "Qwen/Qwen3-30B-A3B",
        num_gpus=64,
        training={"seq_length": seq, "global_batch_size": 64},
        expert_model_parallel_size=ep,
        context_parallel_size=cp,
        moe_token_dispatcher_type="flex",
        moe_flex_dispatcher_backend="hybridep",
    )


def test_hybridep_32k_tokens_per_rank_across_two_h100_nodes_fails():
    # EP16 on 8-GPU H100 nodes: 2 NVLink domains; 32,768 tokens per rank (MBS 1, CP 1, TP 1) > 21,844
    r = _hybridep(32768, 16)
    (f,) = _of(r, "moe.hybridep_internode_token_limit", "error")
    assert "spans 2 NVLink domains" in f.message and "32,768 tokens" in f.message
    assert f.kind == "unsupported" and "≤ 21,824" in f.fix  # 341·64
    # 16K tokens fit; EP8 stays inside one domain (no inter-node queue pair); CP2 halves the tokens
    assert not _of(_hybridep(16384, 16), "moe.hybridep_internode_token_limit")
    assert not _of(_hybridep(32768, 8), "moe.hybridep_internode_token_limit")
    assert not _of(_hybridep(32768, 16, cp=2), "moe.hybridep_internode_token_limit")


def test_hybridep_within_one_nvl72_domain_has_no_limit():
    r = _run(
        "Qwen/Qwen3-30B-A3B",
        gpu="gb200",
        num_gpus=64,
        training={"seq_length": 65536, "global_batch_size": 64},
        expert_model_parallel_size=64,
        moe_token_dispatcher_type="flex",
        moe_flex_dispatcher_backend="hybridep",
    )
    assert not _of(r, "moe.hybridep_internode_token_limit")


# --- 2. FP8 padding of packed sequences ---------------------------------------------------------------


def _packed(precision="fp8-blockwise", gpu="h100", **training):
    return _run(
        "Qwen/Qwen3-30B-A3B",
        gpu=gpu,
        training={"precision": precision, "packed_sequences": True, "task": "finetune", **training},
        tensor_model_parallel_size=2,
        sequence_parallel=True,
        context_parallel_size=2,
        expert_model_parallel_size=8,
        calculate_per_token_loss=True,
    )


def test_packed_fp8_needs_pad_seq_to_mult():
    # 16 tokens per rank × CP 2 × TP 2 (SP) = 64, lcm with 2·CP = 4 → 64; Bridge's default multiple is 1
    (f,) = _of(_packed(), "precision.fp8_packed_padding", "error")
    assert "unset: Bridge default 1" in f.message and "pad_seq_to_mult: 64" in f.fix
    # 64 satisfies the GEMMs; blockwise still gathers SP inputs in BF16 unless 128·4 = 512 divides it
    r = _packed(pad_seq_to_mult=64)
    assert not _of(r, "precision.fp8_packed_padding", "error")
    (w,) = _of(r, "precision.fp8_packed_padding", "warning")
    assert "pad_seq_to_mult: 512" in w.fix
    assert not _of(_packed(pad_seq_to_mult=512), "precision.fp8_packed_padding")
    # padded to max length: the packed length is seq_length, checked by precision.fp8_token_alignment
    assert not _of(_packed(pad_to_max_length=True), "precision.fp8_packed_padding")
    assert not _of(_packed(precision="bf16"), "precision.fp8_packed_padding")


def test_packed_mxfp8_needs_32_tokens_per_rank():
    # MXFP8: 32 × 4 = 128; 64 is not enough
    (f,) = _of(_packed("mxfp8", gpu="b200", pad_seq_to_mult=64), "precision.fp8_packed_padding", "error")
    assert "pad_seq_to_mult: 128" in f.fix


# --- 3. Megatron-FSDP with PP on a VLM ------------------------------------------------------------------


def _fsdp(model, pp):
    return _run(
        model,
        gpu="gb200",
        num_gpus=64,
        use_megatron_fsdp=True,
        pipeline_model_parallel_size=pp,
        expert_model_parallel_size=8,
    )


def test_megatron_fsdp_with_pp_on_a_vlm_is_unsupported():
    (f,) = _of(_fsdp("Qwen/Qwen3-VL-30B-A3B-Instruct", 2), "fsdp.pp_on_vlm", "error")
    assert f.kind == "unsupported" and "PP = 2" in f.message
    assert not _of(_fsdp("Qwen/Qwen3-VL-30B-A3B-Instruct", 1), "fsdp.pp_on_vlm")
    assert not _of(_fsdp("Qwen/Qwen3-30B-A3B", 2), "fsdp.pp_on_vlm")  # a text model


# --- 4. an unset ETP becomes TP -------------------------------------------------------------------------


def test_unset_etp_becoming_tp_is_said():
    kw = {"tensor_model_parallel_size": 2, "expert_model_parallel_size": 8, "sequence_parallel": True}
    r = _run("Qwen/Qwen3-30B-A3B", framework="megatron-core", **kw)
    (w,) = _of(r, "moe.etp_unset_follows_tp", "warning")
    # megatron-core: ETP None → TP = 2, so the expert group is ETP·EP = 2·8 = 16 GPUs, not 8
    assert "TP = 2" in w.message and "2·8 = 16 GPUs" in w.message and "it would be 8" in w.message
    assert not _of(_run("Qwen/Qwen3-30B-A3B", **kw), "moe.etp_unset_follows_tp")  # Bridge: ETP 1 with EP > 1
    stated = _run("Qwen/Qwen3-30B-A3B", framework="megatron-core", expert_tensor_parallel_size=2, **kw)
    assert not _of(stated, "moe.etp_unset_follows_tp")


# --- 5. experts versus EP without num_layers -------------------------------------------------------------


def test_ep_divisibility_runs_when_only_the_experts_are_known():
    data = {
        "model_overrides": {"num_moe_experts": 60},
        "system": {"gpu": "h100", "num_gpus": 64},
        "layout": {"expert_model_parallel_size": 16},
    }
    r = validate(load_scenario(data))
    (f,) = _of(r, "moe.experts_divisible_by_ep", "error")
    assert f.message == "num_moe_experts (60) is not divisible by expert_model_parallel_size (16)"
    data["layout"] = {"expert_model_parallel_size": 4}  # 60 = 4·15
    assert not _of(validate(load_scenario(data)), "moe.experts_divisible_by_ep", "error")


# --- 6. Gated DeltaNet with CP: 0.18.0 first ------------------------------------------------------------


@pytest.mark.parametrize(
    ("version", "refused"), [("0.16.1", True), ("0.17.1", True), ("0.18.0", False), ("0.19.0", False)]
)
def test_gdn_context_parallel_first_supported_in_0_18(version, refused):
    r = _run(
        "Qwen/Qwen3-Next-80B-A3B-Instruct",
        gpu="gb200",
        num_gpus=32,
        training={"seq_length": 65536, "global_batch_size": 32},
        versions={"megatron_core": version},
        context_parallel_size=2,
        expert_model_parallel_size=8,
    )
    found = _of(r, "attention.gdn_heads_vs_tp_cp")
    assert bool(found) is refused
    if refused:
        assert found[0].severity == "error" and "0.18.0 is the first release" in found[0].message


# --- 7. keys that decide reported failures -----------------------------------------------------------------


def test_deepep_num_sms_must_be_even():
    kw = {"expert_model_parallel_size": 8, "moe_token_dispatcher_type": "flex", "moe_flex_dispatcher_backend": "deepep"}
    (f,) = _of(
        _run("Qwen/Qwen3-30B-A3B", versions={"megatron_core": "0.18.0"}, moe_deepep_num_sms=21, **kw),
        "moe.deepep_num_sms_even",
        "error",
    )
    assert "odd" in f.message and "moe_deepep_num_sms: 22" in f.fix
    ok = _run("Qwen/Qwen3-30B-A3B", versions={"megatron_core": "0.18.0"}, moe_deepep_num_sms=20, **kw)
    assert not _of(ok, "moe.deepep_num_sms_even")


def test_te_cross_entropy_fusion_refused_by_megatron_lm_0_19():
    kw = {"cross_entropy_loss_fusion": True, "cross_entropy_fusion_impl": "te"}
    mlm = _run("Qwen/Qwen3-30B-A3B", framework="megatron-core", versions={"megatron_core": "0.19.0"}, **kw)
    assert _of(mlm, "loss.te_cross_entropy_fusion", "error")
    bridge = _run("Qwen/Qwen3-30B-A3B", versions={"megatron_core": "0.19.0"}, **kw)
    assert _of(bridge, "loss.te_cross_entropy_fusion", "warning") and not _of(
        bridge, "loss.te_cross_entropy_fusion", "error"
    )
    native = _run(
        "Qwen/Qwen3-30B-A3B",
        framework="megatron-core",
        cross_entropy_loss_fusion=True,
        cross_entropy_fusion_impl="native",
    )
    assert not _of(native, "loss.te_cross_entropy_fusion")


def test_new_keys_are_exported_under_megatron_names():
    s = load_scenario(
        {
            "model": "Qwen/Qwen3-30B-A3B",
            "system": {"gpu": "h100", "num_gpus": 64},
            "training": {"seq_length": 4096, "micro_batch_size": 1, "global_batch_size": 256},
            "layout": {
                "expert_model_parallel_size": 8,
                "moe_token_dispatcher_type": "flex",
                "moe_flex_dispatcher_backend": "deepep",
                "moe_deepep_num_sms": 24,
                "moe_z_loss_coeff": 0.001,
                "cross_entropy_loss_fusion": True,
                "cross_entropy_fusion_impl": "native",
                "apply_rope_fusion": False,
            },
        }
    )
    text, _ = export(s, "mbridge-overrides")
    for line in (
        "model.moe_deepep_num_sms=24",
        "model.moe_z_loss_coeff=0.001",
        "model.cross_entropy_fusion_impl=native",
        "model.apply_rope_fusion=false",
    ):
        assert line in text.splitlines()
    args, _ = export(s, "megatron-lm-args")
    lines = args.splitlines()
    for line in (
        "--moe-deepep-num-sms 24",
        "--moe-z-loss-coeff 0.001",
        "--cross-entropy-fusion-impl native",
        "--no-rope-fusion",
    ):
        assert line in lines


@pytest.mark.parametrize(
    "key,bad",
    [
        ("moe_deepep_num_sms", 0),
        ("moe_z_loss_coeff", -0.1),
        ("cross_entropy_fusion_impl", "apex"),
        ("vision_cuda_graph_scope", ["moe"]),
    ],
)
def test_new_keys_refuse_values_megatron_does_not_take(key, bad):
    from moeplan.errors import InputError

    with pytest.raises(InputError) as ei:
        load_scenario({"model": "Qwen/Qwen3-30B-A3B", "layout": {key: bad}})
    assert key in str(ei.value)


# --- 8. the MoE-VLM guidance's 3D row (Qwen3-VL-235B, 64 GB200) --------------------------------------------

_ROW = {
    "model": "Qwen/Qwen3-VL-235B-A22B-Instruct",
    "system": {"gpu": "gb200", "num_gpus": 64},
    "training": {"seq_length": 4096, "micro_batch_size": 4, "global_batch_size": 1024},
}
_ROW_LAYOUT = {
    "tensor_model_parallel_size": 8,
    "sequence_parallel": True,
    "expert_model_parallel_size": 8,
    "expert_tensor_parallel_size": 8,
    "recompute_granularity": "full",
    "recompute_method": "uniform",
    "recompute_num_layers": 1,
    "moe_token_dispatcher_type": "flex",
    "moe_flex_dispatcher_backend": "hybridep",
}


def test_published_vlm_row_as_written_names_the_language_model():
    r = validate(
        load_scenario(
            {**_ROW, "layout": {**_ROW_LAYOUT, "cuda_graph_impl": "transformer_engine", "cuda_graph_scope": ["mlp"]}}
        )
    )
    (mlp,) = _of(r, "graphs.moe_scopes", "error")
    assert "language model (94 layers, all MoE)" in mlp.message and "vision_cuda_graph_scope: [mlp]" in mlp.fix
    (rc,) = _of(r, "graphs.recompute_compatibility", "error")
    assert "configure the language model" in rc.message and "cuda_graph_impl: none" in rc.fix


def test_published_vlm_row_with_vision_graphs_passes_the_graph_rules():
    r = validate(
        load_scenario(
            {
                **_ROW,
                "layout": {
                    **_ROW_LAYOUT,
                    "vision_cuda_graph_impl": "transformer_engine",
                    "vision_cuda_graph_scope": ["mlp"],
                },
            }
        )
    )
    for rid in ("graphs.moe_scopes", "graphs.recompute_compatibility", "graphs.vision_graph_keys"):
        assert not _of(r, rid, "error"), rid
    old = validate(
        load_scenario(
            {
                **_ROW,
                "versions": {"megatron_bridge": "0.4.2"},
                "layout": {**_ROW_LAYOUT, "vision_cuda_graph_impl": "transformer_engine"},
            }
        )
    )
    assert _of(old, "graphs.vision_graph_keys", "error")  # Bridge PR 2334 shipped in 0.5.0
    text = validate(
        load_scenario(
            {
                "model": "Qwen/Qwen3-30B-A3B",
                "system": {"gpu": "gb200", "num_gpus": 64},
                "layout": {"vision_cuda_graph_impl": "transformer_engine"},
            }
        )
    )
    assert _of(text, "graphs.vision_graph_keys", "error")  # no vision tower


def test_new_keys_read_back_from_every_export():
    from moeplan.io.imports import import_config

    layout = {
        "expert_model_parallel_size": 8,
        "moe_token_dispatcher_type": "flex",
        "moe_flex_dispatcher_backend": "deepep",
        "moe_deepep_num_sms": 24,
        "moe_z_loss_coeff": 0.001,
        "cross_entropy_fusion_impl": "native",
        "apply_rope_fusion": False,
    }
    s = load_scenario({"model": "Qwen/Qwen3-30B-A3B", "system": {"gpu": "h100", "num_gpus": 64}, "layout": layout})
    for fmt in ("mbridge-yaml", "mbridge-overrides", "megatron-lm-args"):
        back, _ = import_config(export(s, fmt)[0], fmt)
        assert {k: back["layout"].get(k) for k in layout} == layout, fmt


def test_cp_partition_mode_contiguous_needs_thd_and_gdn():
    # dev-branch TransformerConfig: contiguous + CP > 1 needs THD, GDN (or DSv4) attention, no MLA
    kw = {"context_parallel_size": 2, "expert_model_parallel_size": 8, "cp_partition_mode": "contiguous"}
    r = _run("Qwen/Qwen3-30B-A3B", training={"seq_length": 8192}, **kw)
    (f,) = _of(r, "sequence.cp_partition_mode", "error")
    assert "THD inputs" in f.message and "Gated DeltaNet" in f.message
    assert _of(r, "sequence.cp_partition_mode", "warning")  # dev branch only
    gdn = _run(
        "Qwen/Qwen3-Next-80B-A3B-Instruct",
        gpu="gb200",
        num_gpus=32,
        training={"seq_length": 65536, "global_batch_size": 32, "packed_sequences": True},
        **kw,
    )
    assert not _of(gdn, "sequence.cp_partition_mode", "error")


def test_deepep_num_sms_is_every_backends_alias_from_0_19():
    kw = {
        "expert_model_parallel_size": 8,
        "moe_token_dispatcher_type": "flex",
        "moe_flex_dispatcher_backend": "hybridep",
    }
    old = _run("Qwen/Qwen3-30B-A3B", versions={"megatron_core": "0.18.0"}, moe_deepep_num_sms=21, **kw)
    assert _of(old, "moe.deepep_num_sms_even", "warning") and not _of(old, "moe.deepep_num_sms_even", "error")
    new = _run("Qwen/Qwen3-30B-A3B", versions={"megatron_core": "0.20.0"}, moe_deepep_num_sms=24, **kw)
    assert [f.severity for f in _of(new, "moe.deepep_num_sms_even")] == ["info"]


def test_hybridep_domains_are_counted_up():
    # 128 GB200 in EP 128: 72-GPU domains → ⌈128/72⌉ = 2 domains; 65,536 tokens per rank > 21,844
    r = _run(
        "Qwen/Qwen3-30B-A3B",
        gpu="gb200",
        num_gpus=128,
        training={"seq_length": 65536, "global_batch_size": 128},
        expert_model_parallel_size=128,
        moe_token_dispatcher_type="flex",
        moe_flex_dispatcher_backend="hybridep",
    )
    (f,) = _of(r, "moe.hybridep_internode_token_limit", "error")
    assert "spans 2 NVLink domains" in f.message
    # the domain the time and memory models use: the largest divisor of 128 within 72 GPUs, 64
    assert "64 ranks per domain" in f.message


def test_hybridep_domain_of_the_token_limit_follows_the_environment():
    """The token limit judges the domain HybridEPBuffer runs with: NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN=8 on
    16 GB200 in EP 16 splits the group into 16 / 8 = 2 domains (16,384 tokens per rank at 16K pass the limit,
    65,536 at 64K do not); a value it cannot run with (12 does not divide 16) leaves the detected domain: one
    NVL72 domain holds all 16 ranks and no limit applies."""
    kw = {
        "gpu": "gb200",
        "num_gpus": 16,
        "expert_model_parallel_size": 16,
        "moe_token_dispatcher_type": "flex",
        "moe_flex_dispatcher_backend": "hybridep",
    }

    def errors(seq: int, value: str) -> list:
        data = {
            "model": "Qwen/Qwen3-30B-A3B",
            "system": {"gpu": kw["gpu"], "num_gpus": kw["num_gpus"]},
            "training": {"seq_length": seq, "micro_batch_size": 1, "global_batch_size": 16},
            "layout": {k: v for k, v in kw.items() if k not in ("gpu", "num_gpus")},
            "environment": {"NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN": value},
        }
        return _of(validate(load_scenario(data)), "moe.hybridep_internode_token_limit", "error")

    (f,) = errors(65536, "8")
    assert "spans 2 NVLink domains (ETP·EP = 16, 8 ranks per domain)" in f.message
    assert not errors(16384, "8")
    assert not errors(65536, "12")
