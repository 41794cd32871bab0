"""Gemma-4 26B-A4B as Megatron Bridge builds it (``Gemma4ModelProvider``, v0.6.0): the config
mapping, exact parameters by hand, model FLOPs, activations per recompute module, the unfused
wide-head layers' kernel time, the rules Bridge and Transformer Engine enforce, and the CLI at
Bridge's published SFT layout (``recipes/gemma4_vl/h100/gemma4_vl.py``: 8 H100, TP 4, EP 8, full
recompute, seq 4096, GBS 32, MBS 1).

Shapes (config.json, ``tests/data/hf_configs/google--gemma-4-26B-A4B.json``): h = 2816, 30 layers
(5 sliding then 1 full, repeated: 25 sliding, 5 full), 16 heads; sliding head dim 256 with 8 KV heads,
full head dim 512 with 2 KV heads and K = V; 128 experts of 704, top 8, a dense MLP of 2112 beside
them; vocabulary 262144, tied embeddings.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from moeplan import get_model, load_scenario, validate
from moeplan.cli.app import app
from moeplan.errors import InputError
from moeplan.inputs.model_spec import model_from_hf_config
from moeplan.model.activations import ActContext, layer_activations
from moeplan.model.executed_flops import layer_flops
from moeplan.structure.flops import model_flops
from moeplan.structure.params import count_params

CONFIG = Path(__file__).parent / "data" / "hf_configs" / "google--gemma-4-26B-A4B.json"
H, V, E, FE, FS = 2816, 262144, 128, 704, 2112
SLIDING_LAYER, FULL_LAYER = 0, 5
#: Bridge's published SFT layout for the 26B-A4B (gemma4_vl_26b_sft_8gpu_h100_bf16_config)
RECIPE = {
    "model": "google/gemma-4-26B-A4B",
    "system": {"gpu": "h100", "num_gpus": 8},
    "training": {"seq_length": 4096, "micro_batch_size": 1, "global_batch_size": 32, "precision": "bf16"},
    "layout": {
        "tensor_model_parallel_size": 4,
        "expert_model_parallel_size": 8,
        "sequence_parallel": True,
        "recompute_granularity": "full",
        "recompute_method": "uniform",
        "recompute_num_layers": 1,
    },
}


def _config() -> dict:
    return json.loads(CONFIG.read_text())


def _with_text(**fields) -> dict:
    cfg = _config()
    cfg["text_config"].update(fields)
    return cfg


def test_gemma4_maps_to_bridge_moe_provider_fields():
    m = model_from_hf_config(_config(), "gemma4")
    assert (m.num_moe_experts, m.moe_router_topk, m.moe_ffn_hidden_size) == (128, 8, 704)
    # the dense MLP beside the experts is Bridge's ungated shared expert of intermediate_size
    assert (m.moe_shared_expert_intermediate_size, m.moe_shared_expert_gate) == (2112, False)
    assert all(m.moe_layers)
    assert (m.kv_channels, m.num_query_groups) == (256, 8)
    assert (m.global_kv_channels, m.global_num_query_groups, m.attention_k_eq_v) == (512, 2, True)
    assert m.attention_kinds.count("sliding") == 25 and m.attention_kinds.count("full") == 5
    full = m.attention_widths("full")
    assert (full.kv_channels, full.num_query_groups) == (512, 2)
    assert m.attention_widths("sliding") is m
    assert m.gated_linear_unit and not m.untie_embeddings_and_output_weights
    assert m.vision is None and m.vision_not_counted == "gemma4_vision"


def test_gemma4_parameters_by_hand_match_the_published_total():
    c = count_params(get_model("google/gemma-4-26B-A4B"))
    # sliding layer: q 2816·16·256 + k, v 2816·8·256 each + o 16·256·2816 + q/k norms 2·256
    sliding = 2816 * 4096 + 2 * 2816 * 2048 + 4096 * 2816 + 2 * 256
    # full layer: q 2816·16·512 + k, v 2816·2·512 each (Bridge builds the value rows even with K = V)
    # + o 16·512·2816 + q/k norms 2·512
    full = 2816 * 8192 + 2 * 2816 * 1024 + 8192 * 2816 + 2 * 512
    assert (sliding, full) == (34_603_520, 51_905_536)
    assert c.by_kind["attention"] == 25 * sliding + 5 * full == 1_124_615_680
    # 7 RMSNorm(h) per layer (input, pre-MLP and Gemma-4's five) + the final norm
    assert c.by_kind["norms"] == 30 * 7 * H + H == 594_176
    # router h·E + its input scale h + per-expert scale E
    assert c.by_kind["router"] == 30 * (H * E + H + E) == 10_901_760
    assert c.by_kind["shared_experts"] == 30 * 3 * H * FS == 535_265_280
    assert c.by_kind["routed_experts"] == 30 * E * 3 * H * FE == 22_837_985_280
    assert c.by_kind["embedding"] == V * H == 738_197_504 and c.by_kind["output_layer"] == 0
    assert c.total == 25_247_559_680
    # the Hugging Face checkpoint has no v_proj on the 5 full layers: 5 · 2816 · 1024 fewer
    assert c.total - 5 * 2816 * 1024 == 25_233_141_760
    # published 25.2B (language model, model card): +0.19 %
    assert abs(c.total - 25.2e9) / 25.2e9 < 0.005
    # active: all but 120 of 128 experts' share: 25,247,559,680 − 22,837,985,280 + 22,837,985,280·8/128
    assert c.active() == 3_836_948_480
    assert abs(c.active() - 3.8e9) / 3.8e9 < 0.01  # published 3.8B


@pytest.mark.parametrize(
    "field,value",
    [("hidden_size_per_layer_input", 256), ("num_kv_shared_layers", 18), ("use_double_wide_mlp", True)],
)
def test_gemma4_dense_provider_features_stay_refused_by_name(field, value):
    with pytest.raises(InputError) as err:
        model_from_hf_config(_with_text(**{field: value}), "gemma4")
    assert err.value.field == f"config.json:{field}"
    assert "not modelled" in str(err.value)


def test_gemma4_dense_model_is_refused_naming_enable_moe_block():
    with pytest.raises(InputError) as err:
        model_from_hf_config(_with_text(enable_moe_block=False), "gemma4")
    assert err.value.field == "config.json:enable_moe_block"
    assert "Gemma4DenseProvider" in str(err.value)


def test_gemma4_model_flops_count_each_layer_at_its_own_widths():
    m = get_model("google/gemma-4-26B-A4B")
    s = 4096
    f = model_flops(m, s)
    # per-token projections: sliding 2816·(4096 + 2·2048) + 4096·2816 = 34,603,008;
    # full 2816·(8192 + 2·1024) + 8192·2816 = 51,904,512
    lin = 25 * 34_603_008 + 5 * 51_904_512
    assert f.parts["attention_linear"] == pytest.approx(6 * s * lin, rel=1e-12)
    # core: 6·s²·q per layer (Bridge's uncausal form), q = 4096 sliding, 8192 full
    assert f.parts["attention_quadratic"] == pytest.approx(6 * s * s * (25 * 4096 + 5 * 8192), rel=1e-12)
    w = model_flops(m, s, sliding_window_term=True)
    # with the window term the sliding layers see window + 1 = 1025 keys
    assert w.parts["attention_quadratic"] == pytest.approx(6 * s * (25 * 4096 * 1025 + 5 * 8192 * s), rel=1e-12)
    assert f.parts["shared_experts"] == pytest.approx(6 * s * H * FS * 3 * 30, rel=1e-12)
    assert f.parts["mlp"] == pytest.approx(6 * s * H * FE * 8 * 3 * 30, rel=1e-12)


def test_gemma4_executed_flops_of_a_full_layer_use_the_global_widths():
    m = get_model("google/gemma-4-26B-A4B")
    t = 4096.0
    sliding = layer_flops(m, SLIDING_LAYER, t, t, 4096, 1, 1, 1, 1.0)
    full = layer_flops(m, FULL_LAYER, t, t, 4096, 1, 1, 1, 1.0)
    # the MLP side is the same; the projections differ by 51,904,512 − 34,603,008 per token
    assert full.dense_gemm - sliding.dense_gemm == pytest.approx(2 * t * (51_904_512 - 34_603_008), rel=1e-12)
    # core: 2·t·span·2·q with span min(window 1024, s/2) on the sliding layer, s/2 on the full one
    assert sliding.attention_core == pytest.approx(2 * t * 1024 * 2 * 4096, rel=1e-12)
    assert full.attention_core == pytest.approx(2 * t * 2048 * 2 * 8192, rel=1e-12)


def _act(modules=frozenset()):
    m = get_model("google/gemma-4-26B-A4B")
    c = ActContext(tokens=4096, seq_local=4096, micro_batch_size=1, tp=1, sp=False, etp=1)
    return (
        layer_activations(m, SLIDING_LAYER, c, frozenset(modules)),
        layer_activations(m, FULL_LAYER, c, frozenset(modules)),
    )


def test_gemma4_wide_head_layers_keep_the_unfused_scores():
    (s_kept, s_rec), (f_kept, f_rec) = _act({"core_attn"})
    # the 512-wide heads run TE's unfused attention, which keeps the bf16 softmax output: 16 heads · s² · 2
    assert f_rec["attention_scores"] == 16 * 4096 * 4096 * 2 == 536_870_912
    assert "softmax_lse" not in f_rec
    # the 256-wide sliding heads stay fused: fp32 log-sum-exp per head and token
    assert s_rec["softmax_lse"] == 4096 * 16 * 4 and "attention_scores" not in s_rec
    # the value norm's input: t·g·d bf16 + fp32 1/rms per KV head
    assert s_kept["v_norm_input"] == 4096 * 8 * 256 * 2 + 4096 * 8 * 4
    assert f_kept["v_norm_input"] == 4096 * 2 * 512 * 2 + 4096 * 2 * 4
    # Q/K/V at the layer's own widths
    assert f_kept["qkv"] == 4096 * (16 * 512 + 2 * 2 * 512) * 2


def test_gemma4_extra_norms_are_dropped_by_moe_recompute_only_inside_the_block():
    (_, _), (kept, _) = _act()
    (_, _), (kept_moe, rec_moe) = _act({"moe"})
    per_norm = 4096 * (H * 2 + 4)  # bf16 input + fp32 1/rms per token
    assert kept["post_expert_norms_input"] == 2 * per_norm
    assert rec_moe["post_expert_norms_input"] == 2 * per_norm and "post_expert_norms_input" not in kept_moe
    # the post-attention and post-MLP norms run outside the MoE block: kept either way
    assert kept_moe["post_attn_norm_input"] == kept_moe["post_mlp_norm_input"] == per_norm
    assert rec_moe["router_norm_output"] == 4096 * H * 2


def test_gemma4_unfused_layers_time_their_core_at_the_gemm_rate():
    from moeplan.catalog.gpus import measured_gemm_fractions
    from moeplan.model.constants import load_constants
    from moeplan.model.time.compute import layer_compute
    from moeplan.model.time.context import step_context

    s = load_scenario(RECIPE)
    ctx = step_context(s, load_constants(), measured_gemm_fractions(s.gpu.id), None)
    m = s.model
    full = layer_flops(m, FULL_LAYER, ctx.tokens, ctx.seq_local, ctx.seq_length, 4, 1, 8, ctx.routing_factor)
    # fwd + bwd (3×) of the whole s × s (2× the causal count) at the dense GEMM rate
    want = 3 * 2 * full.attention_core / ctx.speeds.gemm_flops_per_s
    assert layer_compute(ctx, FULL_LAYER).attention_s == pytest.approx(want, rel=1e-12)
    sliding = layer_compute(ctx, SLIDING_LAYER).attention_s
    assert 0 < sliding < layer_compute(ctx, FULL_LAYER).attention_s


def _rules(**layout):
    data = json.loads(json.dumps(RECIPE))
    data["layout"].update(layout)
    data["system"]["num_gpus"] = 16
    return validate(load_scenario(data))


def test_gemma4_context_parallelism_is_refused_for_the_wide_heads():
    r = _rules(context_parallel_size=2, cp_comm_type="a2a")
    assert "gemma4.wide_heads_no_cp" in r.rule_ids("error")
    f = next(x for x in r.findings if x.rule_id == "gemma4.wide_heads_no_cp")
    assert "512-wide" in f.message and "CP = 2" in f.message
    assert "gemma4.wide_heads_no_cp" not in _rules().rule_ids("error")


def test_gemma4_global_kv_heads_follow_the_gqa_tp_rule():
    r = _rules()  # TP 4 over 2 global KV heads: replicated from megatron-core 0.16
    assert "gemma4.global_query_groups_vs_tp" in r.rule_ids("info")
    old = json.loads(json.dumps(RECIPE))
    old["versions"] = {"megatron_core": "0.15.0"}
    r = validate(load_scenario(old))
    assert "gemma4.global_query_groups_vs_tp" in r.rule_ids("error")
    f = next(x for x in r.findings if x.rule_id == "gemma4.global_query_groups_vs_tp")
    assert "num_global_key_value_heads = 2" in f.message
    assert "gemma4.global_query_groups_vs_tp" not in _rules(tensor_model_parallel_size=2).rule_ids()


@pytest.mark.parametrize(
    "layout,key",
    [
        ({"cuda_graph_impl": "transformer_engine"}, "cuda_graph_impl"),
        ({"moe_shared_expert_overlap": True}, "moe_shared_expert_overlap"),
        (
            {"recompute_granularity": "selective", "recompute_modules": ["layernorm", "moe_act"]},
            "recompute_modules",
        ),
    ],
)
def test_gemma4_modes_bridge_refuses_are_errors(layout, key):
    r = _rules(**layout)
    found = [x for x in r.findings if x.rule_id == "gemma4.bridge_moe_modes"]
    assert found and found[0].severity == "error" and key in found[0].fix
    assert not [x for x in _rules().findings if x.rule_id == "gemma4.bridge_moe_modes"]


def test_gemma4_estimate_at_the_bridge_recipe_says_what_it_does_not_count(tmp_path):
    path = tmp_path / "gemma4.yaml"
    path.write_text(json.dumps(RECIPE))
    runner = CliRunner()
    r = runner.invoke(app, ["estimate", str(path)])
    assert r.exit_code == 0, r.output
    text = " ".join(r.output.split())
    assert "gemma4_vision vision tower is not counted" in text
    assert "512-wide heads" in text and "unfused attention" in text
    assert "→ fits" in text
    p = runner.invoke(app, ["params", "--model", "google/gemma-4-26B-A4B"])
    assert p.exit_code == 0 and "25.25B" in p.output and "not counted" in " ".join(p.output.split())
