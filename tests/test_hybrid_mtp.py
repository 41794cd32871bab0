"""The MTP block of hybrid (Mamba-2) models: Nemotron-3.5 Lightning, and the MTP of Nemotron-3 Super /
Ultra. Its layer pattern from both HF spellings, its parameters (one block reused per depth), its FLOPs
as Megatron Bridge counts them, its activations and step time per depth, where the pipeline places it,
and check / estimate / plan at Bridge 26.08's published layout. Expected values are derived by hand
from the published shapes."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from moeplan import load_scenario, validate
from moeplan.catalog.models import get_model, load_config_file
from moeplan.cli.app import app
from moeplan.errors import InputError
from moeplan.inputs.model_spec import model_from_hf_config
from moeplan.model.activations import ActContext, layer_activations, mtp_activations, output_layer_activations
from moeplan.model.step import estimate_step
from moeplan.structure.flops import model_flops
from moeplan.structure.params import count_params, mtp_shard, rank_params
from moeplan.structure.placement import stage_params

LIGHTNING = "nvidia/NVIDIA-Nemotron-3.5-Lightning-30B-A3B-NVFP4"
HF = "tests/data/hf_configs/"
EXAMPLE = "examples/nemotron_3_5_lightning_gb200.yaml"
runner = CliRunner()

# Lightning's shapes: h 2688, 32 query heads x 128, 2 KV groups, 128 experts x 1856 (top-6, squared
# ReLU: 2 matrices), one shared expert of 3712, sigmoid router with expert bias, vocabulary 131072
H = 2688
ATTN_LAYER = 2 * H * 4096 + 2 * H * 256 + H  # q, o + k, v + the layer's pre-norm = 23,399,040
MOE_LAYER = 128 * 2 * H * 1856 + 2 * H * 3712 + 128 * H + 128 + H  # experts, shared, router, bias, norm
MTP_BLOCK = 2 * H * H + 3 * H + ATTN_LAYER + MOE_LAYER  # eh_proj, enorm + hnorm + final_layernorm


def _lightning_cfg() -> dict:
    return load_config_file(HF + "nvidia--NVIDIA-Nemotron-3.5-Lightning-30B-A3B-NVFP4.json")


# ----- the pattern ---------------------------------------------------------------------------


def test_lightning_mtp_block_is_attention_then_moe_reused_per_depth():
    m = get_model(LIGHTNING)
    assert m.mtp_layer_pattern == "*E" and m.mtp_num_layers == 1 and m.mtp_use_repeated_layer
    # the first attention layer of the decoder is layer 5 (MEMEM*), the first MoE layer is layer 1
    assert m.mtp_stand_ins == (5, 1)
    assert m.hybrid_layer_pattern == get_model("nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16").hybrid_layer_pattern


def test_pattern_string_and_block_type_list_read_the_same():
    cfg = _lightning_cfg()
    cfg["mtp_hybrid_override_pattern"] = "".join(
        {"attention": "*", "moe": "E"}[b] for b in cfg.pop("mtp_layers_block_type")
    )
    m = model_from_hf_config(cfg, "lightning")
    assert m.mtp_layer_pattern == "*E" and m.mtp_stand_ins == (5, 1)


@pytest.mark.parametrize("nemotron3", ["Super-120B-A12B-FP8", "Ultra-550B-A55B-BF16"])
def test_nemotron3_super_and_ultra_read_their_mtp_block(nemotron3):
    m = model_from_hf_config(load_config_file(f"{HF}nvidia--NVIDIA-Nemotron-3-{nemotron3}.json"), nemotron3)
    assert m.mtp_layer_pattern == "*E" and m.mtp_use_repeated_layer and m.mtp_num_layers == 1


@pytest.mark.parametrize(
    "blocks,want", [(["mlp"], "kinds the decoder pattern has"), (["attention", "gdn"], "a list of mamba")]
)
def test_an_mtp_block_moeplan_cannot_build_is_an_input_error_naming_it(blocks, want):
    cfg = _lightning_cfg()
    cfg["mtp_layers_block_type"] = blocks
    with pytest.raises(InputError) as err:
        model_from_hf_config(cfg, "lightning")
    assert err.value.field == "config.json:mtp_layers_block_type" and want in str(err.value)


def test_no_mtp_depths_builds_no_block():
    cfg = _lightning_cfg()
    cfg["num_nextn_predict_layers"] = 0
    m = model_from_hf_config(cfg, "lightning")
    assert m.mtp_layer_pattern is None and count_params(m).mtp == 0


def test_cutting_the_decoder_below_the_mtp_kinds_is_refused():
    with pytest.raises(InputError) as err:
        get_model(LIGHTNING).with_overrides({"num_layers": 2})  # "ME": no attention layer left
    assert err.value.field == "model_overrides.mtp_layer_pattern"


# ----- parameters ----------------------------------------------------------------------------


def test_lightning_params_by_hand():
    c = count_params(get_model(LIGHTNING))
    # MTP: eh_proj 2·2688² = 14,450,688; enorm, hnorm, final_layernorm 3·2688; attention 23,399,040;
    # MoE 128·2·2688·1856 + 2·2688·3712 + 128·2688 + 128 + 2688 = 1,297,468,160
    assert MOE_LAYER == 1_297_468_160
    assert c.mtp == MTP_BLOCK == 1_335_325_952
    # the decoder is Nemotron 3 Nano's: 31,577,940,288 (tests/test_mamba_hybrid.py derives it)
    assert c.total == 31_577_940_288
    assert abs(c.total - 31.6e9) / 31.6e9 < 0.005  # published 31.6B excludes the MTP block
    assert c.total_with(mtp=True) == 32_913_266_240


def test_repeated_block_holds_its_weights_once_for_every_depth():
    m = get_model(LIGHTNING)
    one = mtp_shard(m, 1, 8, 1)
    # on an EP8 rank: dense parts whole, the 128 experts' 1,277,165,568 elements over 8
    assert one.total == MTP_BLOCK - 128 * 2 * H * 1856 + 128 * 2 * H * 1856 // 8 == 217_806_080
    two_depths = rank_params(m, [], ep=8, output_layer=True, mtp_layers=2)
    assert two_depths.by_kind["mtp"] == one.total
    separate = m.with_overrides({"mtp_use_repeated_layer": False})
    assert rank_params(separate, [], ep=8, output_layer=True, mtp_layers=2).by_kind["mtp"] == 2 * one.total


# ----- FLOPs ---------------------------------------------------------------------------------


def test_model_flops_match_bridge_published_lightning_tflops_per_token():
    """Bridge 26.08's summary: 807 model TFLOP/s/GPU at 28,672 tokens/s/GPU (GB200, MXFP8, seq 8192,
    MTP at 2 depths): 28.146 GFLOP per token."""
    per_token = model_flops(get_model(LIGHTNING), 8192, 1, 2).per_token
    assert abs(per_token - 807e12 / 28672) / per_token < 0.002


def test_each_mtp_depth_adds_its_layers_and_logits_as_bridge_counts_them():
    m = get_model(LIGHTNING)
    s = 8192
    base, two = model_flops(m, s, 1, 0), model_flops(m, s, 1, 2)
    # per depth (fwd + bwd = 6 per multiply-add): attention 6·[2688·(4096 + 2·256) + 4096·2688] per
    # token + 6·4096 per squared token; MoE 6·2688·(6·1856·2 + 3712·2); logits 6·2688·131072
    attn = 6 * s * (H * (4096 + 512) + 4096 * H) + 6 * s * s * 4096
    moe = 6 * s * H * (6 * 1856 * 2 + 3712 * 2)
    logits = 6 * s * H * 131072
    assert two.total - base.total == pytest.approx(2 * (attn + moe + logits))
    assert "mtp_proj" not in two.parts  # Bridge's hybrid count has no eh_proj term


# ----- activations and step time -------------------------------------------------------------


def test_mtp_depth_saves_its_two_layers_and_its_own_logits():
    m = get_model(LIGHTNING)
    ctx = ActContext(tokens=8192, seq_local=8192, micro_batch_size=1, tp=1, sp=False, etp=1)
    got = mtp_activations(m, ctx, 131072, True, frozenset())
    want = {"mtp_norms_in": 8192 * 2 * H * 2, "mtp_eh_proj_in": 8192 * 2 * H * 2}
    for li in (5, 1):  # the attention layer, then the MoE layer
        for k, v in layer_activations(m, li, ctx, frozenset())[0].items():
            want["mtp_" + k] = want.get("mtp_" + k, 0.0) + v
    for k, v in output_layer_activations(m, ctx, 131072, True).items():
        want["mtp_" + k] = v
    assert got == pytest.approx(want)
    assert "mtp_qkv" in got and "mtp_expert_fc1_in" in got


def test_estimate_times_every_depth_and_says_how():
    one = load_scenario(EXAMPLE, overrides={"layout": {"mtp_num_layers": 1}})
    two = load_scenario(EXAMPLE)
    t1, t2 = estimate_step(one), estimate_step(two)
    assert t2.step_time_s > t1.step_time_s
    assert any("hybrid MTP block '*E' run at 2 depth(s) with 1 set(s)" in str(n) for n in t2.assumptions)


# ----- pipeline placement --------------------------------------------------------------------


def _mtp_findings(**overrides) -> list:
    s = load_scenario(EXAMPLE, overrides=overrides)
    return [f for f in validate(s).findings if f.rule_id.startswith("mamba.hybrid_mtp")]


def test_mtp_block_sits_on_the_last_stage_with_the_loss():
    s = load_scenario(
        EXAMPLE, overrides={"layout": {"pipeline_model_parallel_size": 2, "expert_model_parallel_size": 4}}
    )
    stages = stage_params(s)
    assert [st.mtp_layers for st in stages] == [0, 2] and stages[1].output_layer
    assert stages[1].params.by_kind["mtp"] == mtp_shard(s.complete_model, 1, 4, 1).total


def test_mtp_block_off_the_last_stage_is_refused():
    pp2 = {"pipeline_model_parallel_size": 2, "expert_model_parallel_size": 4}
    bad = _mtp_findings(layout={**pp2, "pipeline_model_parallel_layout": "Et*26mm|t*26L"})
    assert [f.rule_id for f in bad] == ["mamba.hybrid_mtp_last_stage"] and bad[0].severity == "error"
    assert "pipeline rank 0, virtual stage 0" in bad[0].message and "(rank 1, virtual stage 0)" in bad[0].message
    assert _mtp_findings(layout={**pp2, "pipeline_model_parallel_layout": "Et*26|t*26mmL"}) == []


def test_hybrid_mtp_needs_megatron_core_0_17():
    old = _mtp_findings(versions={"megatron_core": "0.16.1"})
    assert [f.rule_id for f in old] == ["mamba.hybrid_mtp_needs_mcore"]
    assert "megatron-core 0.16.1 cannot build (first in 0.17.0)" in old[0].message
    assert _mtp_findings(versions={"megatron_core": "0.17.0"}) == []
    assert _mtp_findings(versions={"megatron_core": "0.16.1"}, layout={"mtp_num_layers": 0}) == []


# ----- commands at Bridge 26.08's published layout -------------------------------------------


@pytest.mark.parametrize("command", ["check", "estimate"])
def test_check_and_estimate_accept_the_published_layout(command):
    r = runner.invoke(app, [command, EXAMPLE, "--json"])
    assert r.exception is None or isinstance(r.exception, SystemExit), r.output
    assert r.exit_code in (0, 1), r.output
    doc = json.loads(r.output)
    if command == "estimate":
        assert doc["throughput"]["model_tflops_per_gpu"] > 0
    else:
        assert not [f for f in doc["findings"] if f["severity"] == "error"]


def test_plan_accepts_the_published_layout():
    r = runner.invoke(app, ["plan", EXAMPLE, "--json", "--top", "1"])
    assert r.exit_code in (0, 1), r.output
    assert "not modelled" not in r.output
