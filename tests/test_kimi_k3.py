"""Kimi-K3 (Kimi Delta Attention / MLA hybrid with attention residuals and a latent MoE): the config
read into a model, exact parameter counts against the published total, Bridge's model FLOPs, the
executed FLOPs, saved activations and kernel time of a KDA layer, and the rules Megatron Bridge puts
on it.

Expected values are derived by hand from the published config (tests/data/hf_configs/
moonshotai--Kimi-K3.json: h = 7168, 93 layers, KDA 96 heads × 128 with a 4-tap short convolution,
MLA 96 heads with q_lora 1536, kv_lora 512, 128 + 64 / 128 head dims, 896 experts × 3072 at latent
3584, top-16, 2 shared experts, dense first layer 33792, vocabulary 163840) and Megatron Bridge main
(067f987, after v0.6.0) ``models/kimi/kimi_k3_layers.py``, ``kimi_k3_bridge.py``, ``kimi_k3_spec.py``,
``kimi_k3_pipeline.py`` and ``training/utils/flop_utils.py``.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from moeplan import count_params, estimate_memory, estimate_step, get_model, load_scenario, validate
from moeplan.catalog.gpus import get_gpu
from moeplan.errors import InputError
from moeplan.inputs.model_spec import model_from_hf_config
from moeplan.model.activations import ActContext, layer_activations
from moeplan.model.executed_flops import layer_flops
from moeplan.model.gdn import gdn_kernel_s, kda_kernel_s
from moeplan.model.kimi_k3_activations import attn_res_boundary_width, attn_res_rows
from moeplan.structure.flops import model_flops
from moeplan.structure.params import attention_shard, layer_shard

K3 = "moonshotai/Kimi-K3"
CONFIG = Path(__file__).parent / "data" / "hf_configs" / "moonshotai--Kimi-K3.json"
H, P, D = 7168, 96 * 128, 128  # hidden, KDA heads · head dim, head dim

#: one KDA mixer (Bridge _init_kda): q, k, v, g_proj 4·h·P; three convolutions 3·P·4; f_a h·d
#: (replicated); f_b d·P; b_proj h·96; A_log 96; dt_bias P; o_norm d (replicated); o_proj P·h
KDA = 4 * H * P + 3 * P * 4 + H * D + D * P + H * 96 + 96 + P + D + P * H
#: one MLA layer (Bridge _init_mla): q_a h·1536 + norm 1536, q_b 1536·96·(128 + 64), kv_a h·(512 + 64)
#: + norm 512, kv_b 512·96·(128 + 128), output gate h·96·128, o_proj 96·128·h
MLA = H * 1536 + 1536 + 1536 * 96 * 192 + H * 576 + 512 + 512 * 96 * 256 + H * 96 * 128 + 96 * 128 * H
#: one latent MoE block: router h·896 + expert bias 896, 896 experts of 3·3584·3072, latent projections
#: 2·h·3584 and the latent RMSNorm 3584, two shared experts 3·h·6144 (SiTU is gated: 3 projections)
MOE = H * 896 + 896 + 896 * 3 * 3584 * 3072 + 2 * H * 3584 + 3584 + 3 * H * 6144
DENSE = 3 * H * 33792
#: per layer input and pre-MLP norms 2h plus the AttnRes norms and projections 4h
PER_LAYER = 2 * H + 4 * H


def _config() -> dict:
    return json.loads(CONFIG.read_text())


# ----- the config ----------------------------------------------------------------------------


def test_kda_and_mla_layers_follow_the_one_indexed_lists():
    m = get_model(K3)
    kinds = m.attention_kinds
    assert kinds.count("linear") == 69 and kinds.count("full") == 24
    # layer numbers 4, 8, ..., 92 and 93 are MLA: 0-based 3, 7, ..., 91 and 92
    assert [i for i, k in enumerate(kinds) if k == "full"] == [*range(3, 92, 4), 92]
    assert m.kimi_delta_attention and m.multi_latent_attention and m.attention_output_gate
    assert (m.linear_num_key_heads, m.linear_num_value_heads, m.linear_key_head_dim) == (96, 96, 128)
    assert (m.moe_latent_size, m.moe_router_topk, m.moe_shared_expert_intermediate_size) == (3584, 16, 6144)
    assert m.moe_layers.count(True) == 92 and not m.moe_layers[0]
    assert m.attn_res_block_size == 12 and m.moe_latent_norm and m.gated_linear_unit
    assert m.vision is None and m.vision_not_counted


@pytest.mark.parametrize(
    "path,value",
    [
        (("text_config", "linear_attn_config", "use_full_rank_gate"), False),
        (("text_config", "mla_use_output_gate"), False),
        (("text_config", "mla_use_nope"), False),
        (("text_config", "hidden_act"), "silu"),
    ],
)
def test_a_variant_bridge_does_not_build_is_refused_naming_the_field(path, value):
    cfg = _config()
    node = cfg
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    with pytest.raises(InputError) as err:
        model_from_hf_config(cfg, "k3")
    assert err.value.field == "config.json:" + ".".join(path[1:])


def test_a_bare_kimi_linear_config_is_refused_naming_the_model_type():
    cfg = _config()
    text = dict(cfg["text_config"])
    with pytest.raises(InputError) as err:
        model_from_hf_config(text, "kimi-linear")
    assert err.value.field == "config.json:model_type"


def test_overlapping_layer_lists_are_refused():
    cfg = copy.deepcopy(_config())
    cfg["text_config"]["linear_attn_config"]["kda_layers"].append(4)  # 4 is an MLA layer too
    with pytest.raises(InputError) as err:
        model_from_hf_config(cfg, "k3")
    assert err.value.field == "config.json:linear_attn_config.full_attn_layers"


# ----- parameters ----------------------------------------------------------------------------


def test_kda_layer_parameters_by_hand_and_split_by_tp():
    m = get_model(K3)
    assert KDA == 443_740_384
    one = attention_shard(m, "linear", 1)["attention"]
    assert one.total == KDA
    eight = attention_shard(m, "linear", 8)["attention"]
    replicated = H * D + D  # f_a_proj and o_norm stay whole on every TP rank
    assert eight.rep == replicated and eight.tp == (KDA - replicated) // 8


def test_mla_layer_with_its_output_gate_by_hand():
    assert MLA == 232_196_096
    assert attention_shard(get_model(K3), "full", 1)["attention"].total == MLA


def test_attn_res_adds_4h_per_layer_and_2h_on_the_last():
    m = get_model(K3)
    assert layer_shard(m, 5)["attn_res"].total == 4 * H
    assert layer_shard(m, 92)["attn_res"].total == 6 * H


def test_total_matches_the_published_2_78t_within_half_a_percent():
    """69 KDA + 24 MLA layers, 92 latent MoE blocks + 1 dense MLP, per-layer norms and AttnRes, the
    output AttnRes 2h, the final norm h, untied embedding and output 2·V·h."""
    total = 69 * KDA + 24 * MLA + 92 * MOE + DENSE + 93 * PER_LAYER + 2 * H + H + 2 * 163840 * H
    c = count_params(get_model(K3))
    assert c.total == total == 2_779_484_476_000
    assert abs(total - 2.78e12) / 2.78e12 < 0.005
    # active: top-16 of 896 experts per MoE layer, the input embedding left out (104B published)
    routed_active = 92 * 16 * 3 * 3584 * 3072
    active = total - 92 * 896 * 3 * 3584 * 3072 + routed_active - 163840 * H
    assert c.active(input_embedding=False) == active
    assert abs(active - 104e9) / 104e9 < 0.005


# ----- FLOPs ---------------------------------------------------------------------------------


def test_bridge_model_flops_of_the_kda_layers():
    """Bridge main's kimi_kda_layers branch: 6·(5·h·P + h·96 + h·d + d·P + 4·3·P + 4·96·d²) per token
    and KDA layer, 69 layers."""
    s = 4096
    per_token = 5 * H * P + H * 96 + H * D + D * P + 4 * 3 * P + 4 * 96 * D * D
    f = model_flops(get_model(K3), s)
    assert f.parts["kimi_delta_attention"] == pytest.approx(6 * 69 * s * per_token)
    assert "gated_deltanet" not in f.parts


def test_executed_flops_of_a_kda_layer_by_hand():
    """Layer 1 (KDA, MoE) forward on one TP-2 rank, 4096 tokens: split GEMMs 2·(4·h·P + h·96 + d·P +
    P·h)/2 and the replicated f_a_proj 2·h·d whole; the MoE side as for every latent MoE (router and
    latent projections over the SP-local half of the tokens, shared experts split by TP); the three
    convolutions 2·4·3·P/2 as attention-core work."""
    t = 4096
    lf = layer_flops(get_model(K3), 1, t, t, t, 2, 1, 8, 1.0)
    attn = 2 * t * (4 * H * P + H * 96 + D * P + P * H) / 2 + 2 * t * H * D
    router, shared, latent = 2 * t * H * 896 / 2, 2 * t * 3 * H * 6144 / 2, 2 * t * 2 * H * 3584 / 2
    assert lf.dense_gemm == pytest.approx(attn + router + shared + latent)
    assert lf.attention_core == pytest.approx(2 * t * 4 * 3 * P / 2)


# ----- kernel time ---------------------------------------------------------------------------

GB200 = get_gpu("gb200")
# flash-linear-attention README (GB200, bf16, head dim 128, forward + backward, commit 0a484709), ms:
# chunk_gdn, chunk_gla (per-channel gate) and chunk_retention (scalar decay) at (B, T, H)
FLA = {
    (1, 8192, 96): (4.738, 7.670, 2.618),
    (4, 4096, 64): (5.964, 10.216, 3.459),
    (2, 16384, 16): (3.616, 5.984, 2.122),
}


@pytest.mark.parametrize("shape", sorted(FLA))
def test_kda_kernel_is_gdn_plus_measured_per_channel_gating(shape):
    """KDA = Gated DeltaNet + (chunk_gla − chunk_retention). The first two rows set the gating constant
    (6.434 ns per token·head); the third is held out: within 5 % on the rows, 10 % held out."""
    b, t, h = shape
    gdn, gla, ret = FLA[shape]
    expected = gdn + (gla - ret)
    rel = 0.10 if shape == (2, 16384, 16) else 0.05
    assert kda_kernel_s(GB200, b, t, h, 128, 128) * 1e3 == pytest.approx(expected, rel=rel)
    assert kda_kernel_s(GB200, b, t, h, 128, 128) > gdn_kernel_s(GB200, b, t, h, 128, 128)


# ----- activations ---------------------------------------------------------------------------


def test_kda_saved_tensors_by_hand():
    """Layer 1 (KDA), 4096 tokens, TP 1, bf16: convolution inputs and outputs 2·3·P·2, the output gate
    P·2, the gate's bottleneck (d) and per-channel gate (P) in bf16 plus its fp32 cumulative sum P·4,
    fp32 beta 96·4 and 1/‖q‖, 1/‖k‖ 2·96·4, Aqk and Akk 2·96·64·4, core and norm outputs 2·P·2."""
    t = 4096
    ctx = ActContext(tokens=t, seq_local=t, micro_batch_size=1, tp=1, sp=False, etp=1)
    kept, _ = layer_activations(get_model(K3), 1, ctx, frozenset())
    kda = {k: v for k, v in kept.items() if k.startswith("kda_")}
    per_token = 2 * 3 * P * 2 + P * 2 + (D + P) * 2 + P * 4 + 96 * 4 + 2 * 96 * 4 + 2 * 96 * 64 * 4 + 2 * P * 2
    assert sum(kda.values()) == pytest.approx(t * per_token)
    assert kept["kimi_gathered_attention_input"] == 0  # no SP: the norm output is already whole


@pytest.mark.parametrize("layer", [1, 3])  # a KDA and an MLA layer
def test_attention_keeps_its_gathered_input_whole_under_sequence_parallelism(layer):
    """SP over TP 8: the norm output is counted at t/8 tokens; the layer's own gather keeps 7/8 more."""
    t = 4096
    ctx = ActContext(tokens=t, seq_local=t, micro_batch_size=1, tp=8, sp=True, etp=1)
    kept, _ = layer_activations(get_model(K3), layer, ctx, frozenset())
    assert kept["kimi_gathered_attention_input"] == pytest.approx((t - t / 8) * H * 2)


def test_attn_res_mixes_read_the_bank_plus_the_running_sum():
    """Bank rows on entry ceil(l/12); layer 0 has no attention mix; a layer l % 12 == 0 writes its input
    first; the last layer mixes once more for the output."""
    m = get_model(K3)
    assert attn_res_rows(m, 0) == (0, 2, 0)
    assert attn_res_rows(m, 12) == (2, 3, 0)
    assert attn_res_rows(m, 90) == (9, 9, 0)
    assert attn_res_rows(m, 92) == (9, 9, 9)
    t = 4096
    ctx = ActContext(tokens=t, seq_local=t, micro_batch_size=1, tp=1, sp=False, etp=1)
    kept, _ = layer_activations(m, 90, ctx, frozenset())
    assert kept["attn_res_mix"] == t * 18 * (8 * H + 12)  # two fp32 copies of 18 rows, plus 3 fp32 per row


def test_pipeline_boundary_carries_the_snapshot_bank():
    """PP 8 evenly: the last stage starts at layer floor(93·7/8) = 81, with ceil(81/12) = 7 snapshots."""
    m = get_model(K3)
    assert attn_res_boundary_width(m, 8) == 8
    assert attn_res_boundary_width(m, 1) == 1


# ----- rules and end to end ------------------------------------------------------------------


def _scenario(layout: dict, framework: str = "megatron-bridge", bridge: str = "0.7.0"):
    return load_scenario(
        {
            "model": K3,
            "system": {"gpu": "gb300", "num_gpus": 1984},
            "training": {"seq_length": 4096, "micro_batch_size": 1, "global_batch_size": 2048},
            "layout": {
                "tensor_model_parallel_size": 4,
                "pipeline_model_parallel_size": 31,
                "expert_model_parallel_size": 64,
                **layout,
            },
            "framework": framework,
            "versions": {"megatron_bridge": bridge},
        }
    )


def _findings(layout: dict, **kw) -> dict:
    return {f.rule_id: f for f in validate(_scenario(layout, **kw)).findings}


def test_kda_with_context_parallelism_is_unsupported():
    f = _findings({"context_parallel_size": 2})["kimi_k3.kda_no_cp"]
    assert f.severity == "error" and f.kind == "unsupported"
    assert "69 KDA layers" in f.message and "CP = 2" in f.message
    assert "kimi_k3.kda_no_cp" not in _findings({})


def test_virtual_pipeline_is_refused():
    f = _findings({"virtual_pipeline_model_parallel_size": 3})["kimi_k3.no_vpp"]
    assert f.severity == "error" and "= 3" in f.message


def test_kda_heads_must_divide_by_tp():
    f = _findings({"tensor_model_parallel_size": 64})["attention.gdn_heads_vs_tp_cp"]
    assert "96" in f.message and "TP" in f.message


def test_megatron_lm_alone_cannot_build_it_and_bridge_06_warns():
    f = _findings({}, framework="megatron-lm")["kimi_k3.bridge_release"]
    assert f.severity == "error" and f.kind == "unsupported"
    w = _findings({}, bridge="0.6.0")["kimi_k3.bridge_release"]
    assert w.severity == "warning" and "0.6.0" in w.message
    assert "kimi_k3.bridge_release" not in _findings({})


def test_a_sensible_layout_estimates_memory_and_time():
    """GB300, TP4 PP31 EP64, 4096 tokens: every rule passes, the layout fits, and the step has time."""
    s = _scenario({})
    assert not [f for f in validate(s).findings if f.severity == "error"]
    mem = estimate_memory(s)
    assert mem.fits
    step = estimate_step(s)
    assert step.step_time_s > 0 and step.tokens_per_s_per_gpu > 0


def test_megatron_core_linear_attention_known_issues_do_not_reach_kimi_delta_attention():
    # the harvested mcore_linear_attention fixes touch megatron-core's ssm/ and gated_delta_net code, which
    # Kimi-K3's KDA layers (Bridge's KimiK3Attention) never run; Qwen3-Next's Gated DeltaNet does.
    # At megatron-core 0.17.0 three such fixes are later (PR 4442, 4455: 0.18.0; PR 5502, 5750: 0.19.0)
    def families(model: str) -> set[str]:
        sc = {
            "model": model,
            "system": {"gpu": "gb200", "num_gpus": 64},
            "training": {"seq_length": 8192, "micro_batch_size": 1, "global_batch_size": 64},
            "layout": {"expert_model_parallel_size": 8},
            "versions": {"megatron_core": "0.17.0"},
        }
        return {f.rule_id for f in validate(load_scenario(sc)).findings}

    assert "known_issue.family.mcore_linear_attention" not in families("moonshotai/Kimi-K3")
    assert "known_issue.family.mcore_linear_attention" in families("Qwen/Qwen3-Next-80B-A3B-Instruct")
