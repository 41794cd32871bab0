"""The 2026 catalog models: MiniMax-M2.5 (QK norm over the whole layer, MTP modules Megatron does not
build), Kimi-K2.5 (the MoonViT vision tower), Moonlight-16B-A3B and Qwen3.6-35B-A3B. Parameter counts by
hand against the published totals, the MoonViT tower's parameters, FLOPs and activations, the full-
dimension QK norm's shards and activations, and check / estimate on each at a working layout."""

from __future__ import annotations

import copy
import json
import pathlib

import pytest
from typer.testing import CliRunner

from moeplan import count_params, get_model, load_scenario
from moeplan.cli.app import app
from moeplan.errors import InputError
from moeplan.inputs.model_spec import model_from_hf_config
from moeplan.model.activations import ActContext, layer_activations
from moeplan.model.vision import vision_cost
from moeplan.structure.params import attention_shard, qk_norm_full_dim_rank, rank_params, vision_shard

runner = CliRunner()
HF = pathlib.Path(__file__).resolve().parent / "data" / "hf_configs"


def _config(stem: str) -> dict:
    return json.loads((HF / f"{stem}.json").read_text())


def within_half_percent(ours: int, published: float) -> bool:
    return abs(ours - published) <= 0.005 * published


# ----- MiniMax-M2.5 ---------------------------------------------------------------------------


def test_minimax_m2_5_layer_and_total_by_hand():
    """h 3072, 48 heads × 128, 8 groups, 256 experts × 1536 (SwiGLU), vocab 200064, untied, 62 layers.
    attention: q 3072·6144 + k, v 2·3072·1024 + o 6144·3072 = 44,040,192; QK norm over the layer
    (48 + 8)·128 = 7,168; norms 2·3072; router 3072·256 + expert bias 256 = 786,688;
    experts 256 · 3·3072·1536 = 3,623,878,656 → one layer 3,668,718,848;
    62 layers 227,460,568,576 + embedding and output 2·200064·3072 = 1,229,193,216 + final norm 3072
    = 228,689,764,864: within 0.5 % of the Hub's 229B (MTP modules not built, not in the checkpoint)."""
    m = get_model("MiniMaxAI/MiniMax-M2.5")
    assert m.qk_layernorm and m.qk_layernorm_full_dim
    assert (m.num_moe_experts, m.moe_ffn_hidden_size, m.ffn_hidden_size) == (256, 1536, None)
    assert m.moe_router_expert_bias and not m.moe_shared_expert_intermediate_size
    assert (m.mtp_num_layers, m.unbuilt_mtp_modules) == (0, 3)
    one = count_params(m.with_overrides({"num_layers": 1}))
    assert one.by_kind["attention"] == 44_040_192 + 7_168
    assert one.by_kind["router"] == 786_688
    assert one.by_kind["routed_experts"] == 3_623_878_656
    layer = 44_040_192 + 7_168 + 2 * 3072 + 786_688 + 3_623_878_656
    assert layer == 3_668_718_848
    c = count_params(m)
    assert c.total == 62 * layer + 2 * 200064 * 3072 + 3072 == 228_689_764_864
    assert within_half_percent(c.total, 229e9)
    # '10B activated' (9.8B in MiniMax's report) counts neither vocabulary table:
    # 62 · (44,047,360 + 6,144 + 786,688 + 8 · 14,155,776) + 3072 = 9,801,359,872
    active = c.active(input_embedding=False, output_layer=False)
    assert active == 62 * (44_047_360 + 6_144 + 786_688 + 8 * 14_155_776) + 3072 == 9_801_359_872
    assert abs(active - 10e9) <= 0.5e9


def test_minimax_config_was_refused_for_its_mtp_modules_and_now_builds():
    cfg = _config("MiniMaxAI--MiniMax-M2.5")
    m = model_from_hf_config(cfg, "m")
    assert m.unbuilt_mtp_modules == 3 and m.mtp_num_layers == 0
    no_mtp = dict(cfg, use_mtp=False)
    assert model_from_hf_config(no_mtp, "m").unbuilt_mtp_modules == 0


def test_minimax_shared_expert_width_is_refused_by_name():
    cfg = dict(_config("MiniMaxAI--MiniMax-M2.5"), shared_intermediate_size=1536)
    with pytest.raises(InputError) as err:
        model_from_hf_config(cfg, "m")
    assert err.value.field == "config.json:shared_intermediate_size"
    assert "not modelled" in str(err.value)


@pytest.mark.parametrize(
    "tp,per_rank",
    [
        (1, (48 + 8) * 128),  # 7,168
        (2, 24 * 128 + 4 * 128),  # Q 24 heads, K 4 groups
        (8, 6 * 128 + 1 * 128),  # K: one group per rank
        (16, 3 * 128 + 1 * 128),  # K: 8 groups over 16 ranks, each holds one group's 128 (replicated ×2)
    ],
)
def test_full_dim_qk_norm_shards_as_bridge_splits_it(tp, per_rank):
    """Bridge FullDimQNorm: nh/TP · d; FullDimKNorm: ng·d / min(TP, ng) (``_get_k_norm_layout``)."""
    assert qk_norm_full_dim_rank(48, 8, 128, tp) == per_rank
    m = get_model("MiniMaxAI/MiniMax-M2.5")
    qkv_o = (3072 * (6144 + 2 * 1024) + 6144 * 3072) // tp
    assert attention_shard(m, "full", tp)["attention"].total == qkv_o + per_rank


def test_full_dim_qk_norm_activations_keep_the_fp32_copy():
    """Bridge ``_FullDimRMSNorm`` is plain PyTorch: autograd keeps Q and K in fp32 (pow / mul) and the
    bf16 normed tensor (weight mul), 4 + 2 bytes per element, plus one fp32 1/rms per token per norm;
    the per-head TE norm keeps its bf16 input and one fp32 1/rms per head. 8192 tokens, TP 1:
    full-dim 8192·7168·6 + 8192·2·4 = 352,387,072; per-head 8192·7168·2 + 8192·56·4 = 119,275,520."""
    ctx = ActContext(tokens=8192, seq_local=8192, micro_batch_size=1, tp=1, sp=False, etp=1)
    full = get_model("MiniMaxAI/MiniMax-M2.5").with_overrides({"num_layers": 1})
    per_head = full.with_overrides({"qk_layernorm_full_dim": False})
    kept_full, _ = layer_activations(full, 0, ctx, frozenset())
    kept_head, _ = layer_activations(per_head, 0, ctx, frozenset())
    assert kept_full["qk_norm_input"] == 8192 * 7168 * 6 + 8192 * 2 * 4 == 352_387_072
    assert kept_head["qk_norm_input"] == 8192 * 7168 * 2 + 8192 * 56 * 4 == 119_275_520


# ----- Kimi-K2.5 and MoonViT ------------------------------------------------------------------

#: MoonViT of Kimi-K2.5 by hand (h 1152, f 4304, 27 blocks, patch 14, 64×64 positions, 2×2 merge → 7168)
MOONVIT_BLOCK = 4 * 1152 + (1152 * 3456 + 3456) + (1152 * 1152 + 1152) + (1152 * 4304 + 4304) + (4304 * 1152 + 1152)
MOONVIT = (
    (3 * 14 * 14 * 1152 + 1152)  # Conv2d patch embed with bias: 678,528
    + 64 * 64 * 1152  # learned position table: 4,718,592
    + 27 * MOONVIT_BLOCK  # 27 × 15,239,504 = 411,466,608
    + 2 * 1152  # final LayerNorm
    + 2 * 1152  # projector pre_norm LayerNorm(1152)
    + (4608 * 4608 + 4608)  # Linear 4608 → 4608
    + (4608 * 7168 + 7168)  # Linear 4608 → 7168
)


def test_moonvit_parameters_by_hand():
    assert MOONVIT_BLOCK == 15_239_504
    assert MOONVIT == 471_143_920
    m = get_model("moonshotai/Kimi-K2.5")
    v = m.vision
    assert (v.kind, v.depth, v.hidden_size, v.intermediate_size, v.num_heads) == ("moonvit", 27, 1152, 4304, 16)
    assert (v.patch_size, v.spatial_merge_size, v.out_hidden_size, v.num_position_embeddings) == (14, 2, 7168, 4096)
    assert count_params(m).vision == MOONVIT


def test_kimi_k2_5_counts_against_the_published_figures():
    """Language model = Kimi-K2's shapes: 1,026,408,232,448 (1.0264T) + MoonViT 471,143,920.
    NVIDIA's table: 1T total, 32.86B active (input embedding included, tower not): ours 32,861,500,928."""
    c = count_params(get_model("moonshotai/Kimi-K2.5"))
    assert c.total == count_params(get_model("moonshotai/Kimi-K2-Instruct")).total == 1_026_408_232_448
    assert c.total_with(vision=True) == 1_026_408_232_448 + MOONVIT
    assert c.active() == 32_861_500_928
    assert within_half_percent(c.active(), 32.86e9)


@pytest.mark.parametrize("tp", [1, 8])
def test_moonvit_is_whole_on_every_tp_rank(tp):
    """Bridge builds MoonViT from the HF modules on every TP rank (not split by TP)."""
    v = get_model("moonshotai/Kimi-K2.5").vision
    shard = vision_shard(v, tp)
    assert (shard.tp, shard.rep) == (0, MOONVIT)
    m = get_model("moonshotai/Kimi-K2.5")
    assert rank_params(m, [0], tp=tp, ep=8, vision=True).by_kind["vision"] == MOONVIT


def _kimi_scenario(tp: int) -> object:
    return load_scenario(
        {
            "model": "moonshotai/Kimi-K2.5",
            "system": {"gpu": "h100", "num_gpus": 512},
            "training": {"seq_length": 8192, "micro_batch_size": 1, "global_batch_size": 512},
            "layout": {
                "tensor_model_parallel_size": tp,
                "pipeline_model_parallel_size": 16,
                "expert_model_parallel_size": 32,
            },
            "workload": {"image_patches_per_sequence": 16384, "mean_patches_per_image": 4096},
        }
    )


def test_moonvit_flops_and_activations_by_hand():
    """16,384 patches (4 images of 4,096), h 1152, f 4304, 27 blocks, merge 2×2 → out 7168:
    GEMM 2·16384·27·(5,308,416 + 9,916,416) = 13,469,956,964,352 FLOPs; attention 2·2·16384·27·1152·4096;
    merger 2·4096·(21,233,664 + 33,030,144) = 444,529,115,136; saved 2·(9·1152 + 2·4304)·27·16384 bytes —
    the same at TP 8 as at TP 1 (the tower is not split)."""
    for tp in (1, 8):
        vc = vision_cost(_kimi_scenario(tp))
        assert vc.patches == 16384
        assert vc.gemm_flops_fwd == 2 * 16384 * 27 * (4 * 1152**2 + 2 * 1152 * 4304) == 13_469_956_964_352
        assert vc.attention_flops_fwd == 2 * 2 * 16384 * 27 * 1152 * 4096
        assert vc.merger_flops_fwd == 2 * 4096 * (4608**2 + 4608 * 7168) == 444_529_115_136
        assert vc.activation_bytes == 2 * (9 * 1152 + 2 * 4304) * 27 * 16384


@pytest.mark.parametrize(
    "field,value",
    [("merge_type", "sd2"), ("pos_emb_type", "learnable"), ("mm_projector_type", "mlp")],
)
def test_moonvit_variant_other_than_modelled_is_refused_by_name(field, value):
    cfg = copy.deepcopy(_config("moonshotai--Kimi-K2.5"))
    cfg["vision_config"][field] = value
    with pytest.raises(InputError) as err:
        model_from_hf_config(cfg, "k")
    assert err.value.field == f"config.json:vision_config.{field}"
    assert "not modelled" in str(err.value)


def test_moonvit_missing_width_is_named():
    cfg = copy.deepcopy(_config("moonshotai--Kimi-K2.5"))
    del cfg["vision_config"]["vt_intermediate_size"]
    with pytest.raises(InputError) as err:
        model_from_hf_config(cfg, "k")
    assert err.value.field == "config.json:vision_config.vt_intermediate_size"


def test_moonvit_non_square_merge_is_refused():
    cfg = copy.deepcopy(_config("moonshotai--Kimi-K2.5"))
    cfg["vision_config"]["merge_kernel_size"] = [2, 1]
    with pytest.raises(InputError) as err:
        model_from_hf_config(cfg, "k")
    assert err.value.field == "config.json:vision_config.merge_kernel_size"


# ----- Moonlight-16B-A3B -----------------------------------------------------------------------


def test_moonlight_by_hand_against_the_checkpoint_size():
    """h 2048, 27 layers, MLA without query LoRA (16 heads, nope 128 + rope 64, v 128, kv rank 512):
    attention q 2048·16·192 + kv down 2048·576 + kv norm 512 + kv up 512·16·256 + o 16·128·2048
    = 13,763,072; norms 2·2048; layer 0 dense 3·2048·11264 = 69,206,016; 26 MoE layers of 64 experts
    × 3·2048·1408 = 553,648,128 + 2 shared (2816) 17,301,504 + router 131,072 + bias 64.
    With the checkpoint's 163,842 embedding rows: 15,960,118,400 = (31,920,240,256 − 27·32·4) / 2,
    the Bridge verification card's BF16 export; config.json's 163,840 rows count 8,192 fewer."""
    m = get_model("moonshotai/Moonlight-16B-A3B")
    assert (m.num_layers, m.q_lora_rank, m.num_moe_experts, m.moe_router_topk) == (27, None, 64, 6)
    attn = 2048 * 16 * 192 + 2048 * 576 + 512 + 512 * 16 * 256 + 16 * 128 * 2048
    assert attn == 13_763_072
    moe = 553_648_128 + 17_301_504 + 131_072 + 64
    layers = 27 * (attn + 2 * 2048) + 69_206_016 + 26 * moe
    c = count_params(m)
    assert c.total == layers + 2 * 163840 * 2048 + 2048 == 15_960_110_208
    checkpoint = count_params(m.with_overrides({"vocab_size": 163842})).total
    assert 2 * checkpoint + 27 * 32 * 4 == 31_920_240_256
    assert within_half_percent(c.total, 15.96e9)
    assert abs(c.active() - 3e9) <= 0.5e9


# ----- Qwen3.6-35B-A3B -------------------------------------------------------------------------


def test_qwen3_6_has_qwen3_5_35b_shapes_and_the_published_total():
    q36 = count_params(get_model("Qwen/Qwen3.6-35B-A3B"))
    q35 = count_params(get_model("Qwen/Qwen3.5-35B-A3B"))
    assert (q36.total, q36.vision, q36.mtp) == (q35.total, q35.vision, q35.mtp)
    assert q36.total_with(vision=True) == 35_107_181_936
    assert abs(q36.total_with(vision=True) - 35e9) <= 0.5e9


# ----- the commands ----------------------------------------------------------------------------

LAYOUTS = {
    "MiniMaxAI/MiniMax-M2.5": ["--num-gpus", "128", "--tp", "1", "--pp", "2", "--ep", "64", "--gbs", "512"],
    "moonshotai/Kimi-K2.5": ["--num-gpus", "512", "--tp", "1", "--pp", "16", "--ep", "32", "--gbs", "1024"],
    "moonshotai/Moonlight-16B-A3B": ["--num-gpus", "16", "--tp", "1", "--pp", "1", "--ep", "8", "--gbs", "1024"],
    "Qwen/Qwen3.6-35B-A3B": ["--num-gpus", "16", "--tp", "1", "--pp", "1", "--ep", "16", "--gbs", "256"],
}


@pytest.mark.parametrize("model", sorted(LAYOUTS))
@pytest.mark.parametrize("command", ["check", "estimate"])
def test_check_and_estimate_run_on_each_new_model(model, command):
    args = [command, "--model", model, "--gpu", "h100", "--seq-length", "4096", "--precision", "bf16", *LAYOUTS[model]]
    r = runner.invoke(app, args)
    assert r.exception is None or isinstance(r.exception, SystemExit), r.output
    assert r.exit_code in (0, 1), r.output


def test_estimate_states_what_the_minimax_model_leaves_out():
    args = ["estimate", "--model", "MiniMax-M2.5", "--gpu", "h100", "--seq-length", "4096", "--precision", "bf16"]
    r = runner.invoke(app, [*args, "--num-gpus", "128", "--tp", "2", "--pp", "2", "--ep", "32", "--gbs", "512"])
    text = " ".join(r.output.split())
    assert "3 MiniMax MTP modules are not built" in text
    assert "all-reduces its sum of squares over TP = 2" in text


def test_estimate_states_that_moonvit_runs_whole_per_tp_rank():
    args = ["estimate", "--model", "Kimi-K2.5", "--gpu", "h100", "--seq-length", "4096", "--precision", "bf16"]
    r = runner.invoke(app, [*args, "--num-gpus", "512", "--tp", "2", "--pp", "16", "--ep", "16", "--gbs", "1024"])
    assert "MoonViT vision tower runs whole on each of the TP = 2" in " ".join(r.output.split())


def test_moonvit_heads_need_not_divide_tp():
    """MoonViT's 16 heads at TP 32: the tower is not split by TP, so the ViT-heads rule does not apply
    (a Qwen3-VL tower's would)."""
    r = runner.invoke(
        app,
        ["check", "--model", "Kimi-K2.5", "--gpu", "h100", "--num-gpus", "512", "--seq-length", "4096"]
        + ["--tp", "32", "--pp", "4", "--ep", "128", "--gbs", "1024", "--json"],
    )
    assert "attention.vision_heads_divisible_by_tp" not in {f["rule_id"] for f in json.loads(r.output)["findings"]}


def test_plan_states_the_unbuilt_mtp_modules():
    args = ["plan", "--model", "MiniMax-M2.5", "--gpu", "h100", "--num-gpus", "128", "--seq-length", "8192"]
    r = runner.invoke(app, [*args, "--gbs", "512", "--precision", "bf16", "--top", "1"])
    assert "3 MiniMax MTP modules are not built" in " ".join(r.output.split())
