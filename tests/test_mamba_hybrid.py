"""Mamba-2 / attention / MoE hybrids (Nemotron-H, Nemotron-3 Nano): the pattern, the Mamba-2 mixer's
parameters, FLOPs, saved activations and kernel time, its TP / CP rules, and check / estimate / plan at
Megatron Bridge's recipe layout. Expected values are derived by hand from the published shapes."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from moeplan import load_scenario, validate
from moeplan.catalog.models import get_model, load_config_file
from moeplan.cli.app import app
from moeplan.errors import InputError
from moeplan.inputs.model_spec import hybrid_kinds, model_from_hf_config
from moeplan.model.activations import ActContext, layer_activations
from moeplan.structure.flops import model_flops
from moeplan.structure.mamba_shapes import mamba_executed_flops, mamba_params, mamba_tp_params
from moeplan.structure.params import count_params, layer_shard

NANO = "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16"
NANO_PATTERN = "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME"
runner = CliRunner()


# ----- the pattern ---------------------------------------------------------------------------


def test_hybrid_pattern_gives_one_kind_per_symbol():
    kinds, moe = hybrid_kinds("M*E-")
    assert kinds == ("mamba", "full", "none", "none")
    assert moe == (False, False, True, False)


def test_nano_pattern_counts_23_mamba_23_moe_6_attention():
    m = get_model(NANO)
    assert m.hybrid_layer_pattern == NANO_PATTERN and m.num_layers == 52
    assert m.attention_kinds.count("mamba") == 23
    assert sum(m.moe_layers) == 23
    assert m.attention_kinds.count("full") == 6
    assert [i for i, k in enumerate(m.attention_kinds) if k == "full"] == [5, 12, 19, 26, 33, 42]
    assert not m.layer_has_mlp(0) and m.layer_has_mlp(1) and not m.layer_has_mlp(5)


def test_pattern_override_rederives_the_layer_kinds_and_follows_num_layers():
    m = get_model(NANO)
    six = m.with_overrides({"num_layers": 6})
    assert six.hybrid_layer_pattern == "MEMEM*" and six.attention_kinds[-1] == "full"
    # 3 Mamba layers + 2 MoE + 1 attention (each with its pre-norm), embeddings, final norm
    mamba, attn = 38_742_208 + 2688, 2 * 2688 * 4096 + 2 * 2688 * 256 + 2688
    moe = 128 * 2 * 2688 * 1856 + 2 * 2688 * 3712 + 128 * 2688 + 128 + 2688
    assert count_params(six).total == 2 * 131072 * 2688 + 3 * mamba + 2 * moe + attn + 2688
    dense = m.with_overrides({"hybrid_layer_pattern": "M*-E" * 13})
    assert dense.attention_kinds[:4] == ("mamba", "full", "none", "none")
    assert dense.moe_layers[:4] == (False, False, False, True)
    with pytest.raises(InputError) as err:
        m.with_overrides({"hybrid_layer_pattern": "MG" * 26})
    assert err.value.field == "model_overrides.hybrid_layer_pattern"


def _nano_cfg() -> dict:
    return load_config_file("tests/data/hf_configs/nvidia--NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.json")


def test_layers_block_type_list_reads_as_the_pattern():
    cfg = _nano_cfg()
    names = {"M": "mamba", "*": "attention", "E": "moe", "-": "mlp"}
    cfg["layers_block_type"] = [names[c] for c in cfg.pop("hybrid_override_pattern")]
    m = model_from_hf_config(cfg, "nano")
    assert m.hybrid_layer_pattern == NANO_PATTERN


@pytest.mark.parametrize(
    "pattern,want", [("MEMEG" + NANO_PATTERN[5:], "'G'"), (NANO_PATTERN[:-1], "one per layer (52)")]
)
def test_a_pattern_moeplan_cannot_build_is_an_input_error_naming_it(pattern, want):
    cfg = _nano_cfg()
    cfg["hybrid_override_pattern"] = pattern
    with pytest.raises(InputError) as err:
        model_from_hf_config(cfg, "nano")
    assert err.value.field == "config.json:hybrid_override_pattern"
    assert want in str(err.value)


def test_latent_moe_outside_nemotron_h_stays_refused_naming_it():
    """The latent MoE is modelled for ``nemotron_h`` (Nemotron-3 Super / Ultra, tests/test_latent_moe.py);
    another family carrying ``moe_latent_size`` is refused rather than read with nemotron_h's meaning."""
    cfg = load_config_file("tests/data/hf_configs/Qwen--Qwen3-Coder-480B-A35B-Instruct.json")
    with pytest.raises(InputError) as err:
        model_from_hf_config(dict(cfg, moe_latent_size=1024), "qwen-latent")
    assert err.value.field == "config.json:moe_latent_size"


# ----- parameters ----------------------------------------------------------------------------


def test_mamba_mixer_parameters_by_hand():
    m = get_model(NANO)
    # in_proj 2688·(2·4096 + 2·8·128 + 64) + conv (4096 + 2048)·(4 + 1) + A_log, D, dt_bias 3·64
    # + gated norm 4096 + out_proj 4096·2688
    want = 2688 * 10304 + 6144 * 5 + 192 + 4096 + 4096 * 2688
    assert want == 38_742_208
    assert mamba_params(m) == want
    assert mamba_tp_params(m, 8) == want // 8
    assert layer_shard(m, 0)["attention"].total == want and "routed_experts" not in layer_shard(m, 0)
    assert layer_shard(m, 0)["norms"].total == 2688  # one pre-norm per hybrid layer


def test_nano_total_matches_the_published_31_6b():
    c = count_params(get_model(NANO))
    # embedding + output 2·131072·2688; 23 Mamba layers (38,742,208 + norm 2688); 6 attention layers
    # (q, o 2·2688·4096, k, v 2·2688·256, norm 2688); 23 MoE layers (128 experts 2·2688·1856, shared
    # 2·2688·3712, router 128·2688 + expert bias 128, norm 2688); final norm 2688
    mamba = 38_742_208 + 2688
    attn = 2 * 2688 * 4096 + 2 * 2688 * 256 + 2688
    moe = 128 * 2 * 2688 * 1856 + 2 * 2688 * 3712 + 128 * 2688 + 128 + 2688
    want = 2 * 131072 * 2688 + 23 * mamba + 6 * attn + 23 * moe + 2688
    assert c.total == want == 31_577_940_288
    assert abs(c.total - 31.6e9) / 31.6e9 < 0.005  # NVIDIA: "31.6B total parameter model"
    assert abs(c.active() - 3.6e9) / 3.6e9 < 0.02  # "3.6B with embeddings"


def test_tp_that_does_not_divide_the_mamba_groups_is_refused():
    with pytest.raises(InputError, match="mamba_num_groups"):
        mamba_tp_params(get_model(NANO), 16)


# ----- FLOPs ---------------------------------------------------------------------------------


def test_model_flops_match_bridge_published_tflops_per_token():
    """Bridge's performance summary lists tokens/s/GPU and model TFLOP/s/GPU; their ratio is Bridge's
    FLOPs per token: 328e12 / 14719 (H100, 26.02 archive) and 885e12 / 39749 (GB300), both 22.27–22.28 G."""
    per_token = model_flops(get_model(NANO), 8192).per_token
    for tflops, tokens in ((328, 14719), (885, 39749), (747, 33522)):
        assert abs(per_token - tflops * 1e12 / tokens) / per_token < 0.002


def test_mamba_flops_term_as_bridge_counts_it():
    f = model_flops(get_model(NANO), 8192)
    # Bridge's mamba_layer_flops per token / 2 with d_in = 2·2688 = 5376: 2688·(2·5376 + 2·8·128 + 64)
    # + 3.5·5376·128 + 5376·2688; times 6 (2 FLOPs, fwd + bwd) and 23 layers
    term = 2688 * (2 * 5376 + 2048 + 64) + 3.5 * 5376 * 128 + 5376 * 2688
    assert f.parts["mamba"] == pytest.approx(6 * 23 * 8192 * term)


def test_executed_mamba_flops_by_hand():
    proj, conv, scan = mamba_executed_flops(get_model(NANO))
    assert proj == 2 * 2688 * 10304 + 2 * 4096 * 2688
    assert conv == 2 * 6144 * 4
    # SSD chunk 128: C·Bᵀ 2·g·Q·N, scores·x nh·Q·p (causal half of 2·), states 4·nh·N·p
    assert scan == 2 * 8 * 128 * 128 + 64 * 128 * 64 + 4 * 64 * 128 * 64


# ----- activations and kernel time -----------------------------------------------------------


def test_mamba_layer_saved_tensors_by_hand():
    ctx = ActContext(tokens=8192, seq_local=8192, micro_batch_size=1, tp=1, sp=False, etp=1)
    kept, rec = layer_activations(get_model(NANO), 0, ctx, frozenset({"layernorm", "core_attn"}))
    t = 8192
    want = {
        "mamba_norm_input": t * 2688 * 2,
        "mamba_norm_output": t * 2688 * 2 + t * 4,
        "mamba_zxbcdt": t * 10304 * 2,
        "mamba_scan_out": t * 4096 * 2,
        "mamba_norm_rstd": t * 8 * 4,
        "mamba_out_proj_in": t * 4096 * 2,
    }
    assert kept == want and rec == {}
    assert sum(kept.values()) == 391_413_760


def test_mixer_only_and_moe_only_layers_save_only_their_block():
    ctx = ActContext(tokens=8192, seq_local=8192, micro_batch_size=1, tp=1, sp=False, etp=1)
    m = get_model(NANO)
    attn, _ = layer_activations(m, 5, ctx, frozenset())
    moe, _ = layer_activations(m, 1, ctx, frozenset())
    assert "qkv" in attn and not any(k.startswith(("expert", "mlp", "router")) for k in attn)
    assert "expert_fc1_in" in moe and "qkv" not in moe and "attn_norm_input" not in moe


# ----- rules ---------------------------------------------------------------------------------


def _findings(num_gpus: int, **layout) -> list:
    s = load_scenario(
        {
            "model": NANO,
            "system": {"gpu": "h100", "num_gpus": num_gpus},
            "training": {"seq_length": 8192, "micro_batch_size": 1, "global_batch_size": 64},
            "layout": layout,
        }
    )
    return [f for f in validate(s).findings if f.rule_id == "mamba.heads_groups_vs_tp_cp"]


def test_tp_must_divide_mamba_groups():
    found = _findings(16, tensor_model_parallel_size=16)
    assert [f.severity for f in found] == ["error"] and "mamba_num_groups (8)" in found[0].message


def test_heads_per_tp_rank_must_divide_by_cp_and_groups_with_cp():
    found = _findings(12, tensor_model_parallel_size=4, context_parallel_size=3)
    text = " | ".join(f.message for f in found)
    assert "TP·CP = 4·3" in text and "(8 / 4 = 2) and CP (3)" in text


def test_heads_must_divide_by_groups():
    s = load_scenario(
        {
            "model": NANO,
            "model_overrides": {"mamba_num_groups": 6},
            "system": {"gpu": "h100", "num_gpus": 8},
            "training": {"seq_length": 8192, "micro_batch_size": 1, "global_batch_size": 64},
        }
    )
    found = [f for f in validate(s).findings if f.rule_id == "mamba.heads_groups_vs_tp_cp"]
    assert any("not divisible by mamba_num_groups (6)" in f.message for f in found)


def test_recipe_layouts_pass_the_mamba_rule():
    assert _findings(8, expert_model_parallel_size=8) == []
    assert _findings(32, tensor_model_parallel_size=4, expert_model_parallel_size=8) == []
    assert _findings(16, context_parallel_size=16) == []  # 64 heads / 16; CP 16 a multiple of 8 groups


def test_hybrid_pattern_takes_no_vpp_and_splits_evenly_over_pp():
    def found(num_gpus, **layout):
        s = load_scenario(
            {
                "model": NANO,
                "system": {"gpu": "h100", "num_gpus": num_gpus},
                "training": {"seq_length": 8192, "micro_batch_size": 1, "global_batch_size": 96},
                "layout": layout,
            }
        )
        return [f.message for f in validate(s).findings if f.rule_id == "mamba.hybrid_pipeline_split"]

    bad = found(24, pipeline_model_parallel_size=3, virtual_pipeline_model_parallel_size=2)
    assert any("VPP = 2" in t for t in bad) and any("52 layers do not split evenly over PP = 3" in t for t in bad)
    assert found(16, pipeline_model_parallel_size=2) == []  # 52 = 2 · 26
    assert found(24, pipeline_model_parallel_size=3, num_layers_in_first_pipeline_stage=18) == []


# ----- commands at Bridge's recipe layout ----------------------------------------------------

#: nemotron_3_nano_pretrain_8gpu_h100_bf16_config: TP1 PP1 CP1 EP8, seq 8192, MBS 1, GBS 1024
RECIPE = [
    "--model",
    NANO,
    "--gpu",
    "h100",
    "--num-gpus",
    "8",
    "--tp",
    "1",
    "--pp",
    "1",
    "--cp",
    "1",
    "--ep",
    "8",
    "--seq-length",
    "8192",
    "--mbs",
    "1",
    "--gbs",
    "1024",
]


@pytest.mark.parametrize("command", ["check", "estimate"])
def test_check_and_estimate_run_at_the_recipe_layout(command):
    r = runner.invoke(app, [command, *RECIPE, "--json"])
    assert r.exception is None or isinstance(r.exception, SystemExit), r.output
    assert r.exit_code in (0, 1), r.output
    doc = json.loads(r.output)
    if command == "estimate":
        assert doc["throughput"]["step_time_s"] > 0
        assert any("Mamba-2 mixer timed kernel by kernel" in str(n) for n in doc["throughput"]["assumptions"])


def test_plan_runs_at_the_recipe_layout():
    r = runner.invoke(app, ["plan", *RECIPE, "--json", "--top", "1"])
    assert r.exit_code in (0, 1), r.output
    assert "not modelled" not in r.output
