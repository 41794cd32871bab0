"""Latent MoE (megatron-core ``moe_latent_size``; Nemotron-3 Super and Ultra): the field read from the
config, exact parameter counts against the published ones, model and executed FLOPs, saved activations,
the dispatch / combine volume at the latent width, and the rules megatron-core puts on it.

Expected values are derived by hand from the published config.json shapes (tests/data/hf_configs) and
megatron-core ``transformer/moe/moe_layer.py``, ``moe/experts.py``, ``moe/token_dispatcher.py``
(core_v0.16.0 and dev): per MoE layer ``fc1_latent_proj`` (h → l) and ``fc2_latent_proj`` (l → h),
replicated on every TP rank, no bias, no norm; routed experts at l; tokens dispatched at l.
"""

from __future__ import annotations

import dataclasses

import pytest

from moeplan import count_params, get_model, load_scenario, validate
from moeplan.catalog.gpus import measured_gemm_fractions
from moeplan.errors import InputError
from moeplan.model.activations import ActContext, layer_activations
from moeplan.model.constants import load_constants
from moeplan.model.executed_flops import layer_flops
from moeplan.model.time.compute import layer_compute
from moeplan.model.time.context import step_context
from moeplan.model.time.exchange import ep_exchange
from moeplan.structure.flops import model_flops
from moeplan.structure.params import layer_shard

SUPER = "nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-FP8"
ULTRA = "nvidia/NVIDIA-Nemotron-3-Ultra-550B-A55B-BF16"


def _mamba(h: int, heads: int, head_dim: int = 64, state: int = 128, groups: int = 8, conv: int = 4) -> int:
    """One Mamba-2 layer of Nemotron-H: in_proj h·(2·d_inner + 2·G·N + heads), depthwise conv with bias
    over d_inner + 2·G·N channels, dt_bias / A_log / D (heads each), gated norm (d_inner), out_proj
    d_inner·h, pre-norm h."""
    d_inner = heads * head_dim
    conv_ch = d_inner + 2 * groups * state
    return h * (2 * d_inner + 2 * groups * state + heads) + conv_ch * (conv + 1) + 3 * heads + d_inner + d_inner * h + h


def _attention(h: int, heads: int, kv_heads: int, d: int = 128) -> int:
    """One GQA layer: q and o (h·heads·d each), k and v (h·kv_heads·d each), pre-norm h."""
    return 2 * h * heads * d + 2 * h * kv_heads * d + h


def _latent_moe(h: int, latent: int, experts: int, f: int, shared: int) -> int:
    """One latent MoE layer (squared-ReLU, not gated): router h·E + expert bias E, fc1 / fc2 latent
    projections 2·h·l, E experts of 2·l·f, one shared expert 2·h·f_s at the hidden width, pre-norm h."""
    return h * experts + experts + 2 * h * latent + experts * 2 * latent * f + 2 * h * shared + h


def _mtp(h: int, attention: int, moe: int) -> int:
    """The hybrid MTP block '*E': eh_proj 2h·h, enorm + hnorm + final norm 3h, one attention and one
    latent MoE layer (embedding and output head shared with the main model)."""
    return 2 * h * h + 3 * h + attention + moe


# ----- parameters ----------------------------------------------------------------------------


def test_super_parameters_by_hand_match_the_verified_checkpoint_element_count():
    """Super: 40 Mamba-2 (128 heads) + 8 attention (32 / 2 heads) + 40 latent MoE (h 4096, l 1024, 512
    experts of 2688, shared 5376) + untied vocab 2·131072·4096 + final norm; 120,668,707,840 without MTP
    (the published "120B"), 123,611,033,088 with its MTP block: exactly the element count Megatron
    Bridge's verification card (v0.6.0, nemotron-3-super-120b-a12b, megatron_to_hf_gpu) reports."""
    h = 4096
    mamba, attn = _mamba(h, 128), _attention(h, 32, 2)
    moe = _latent_moe(h, 1024, 512, 2688, 5376)
    assert (mamba, attn, moe) == (109_640_064, 35_655_680, 2_873_102_848)
    main = 40 * mamba + 8 * attn + 40 * moe + 2 * 131072 * h + h
    assert main == 120_668_707_840
    c = count_params(get_model(SUPER))
    assert c.total == main
    assert c.by_kind["moe_latent_proj"] == 40 * 2 * h * 1024
    assert c.mtp == _mtp(h, attn, moe) == 2_942_325_248
    assert c.total_with(mtp=True) == 123_611_033_088 == get_model(SUPER).measured_params["total_in_checkpoint"]


def test_ultra_parameters_by_hand_are_within_half_a_percent_of_550b():
    """Ultra (no exact count published; derived by hand from its config): 48 Mamba-2 (256 heads) + 12
    attention (64 / 2 heads) + 48 latent MoE (h 8192, l 2048, 512 experts of 5120, shared 10240) +
    2·131072·8192 + final norm = 549,308,993,536, 0.13 % under the published 550B; the MTP block adds
    11,215,610,368."""
    h = 8192
    mamba, attn = _mamba(h, 256), _attention(h, 64, 2)
    moe = _latent_moe(h, 2048, 512, 5120, 10240)
    main = 48 * mamba + 12 * attn + 48 * moe + 2 * 131072 * h + h
    assert main == 549_308_993_536
    m = get_model(ULTRA)
    assert m.num_layers == 108  # from layers_block_type: the config has no num_hidden_layers
    c = count_params(m)
    assert c.total == main
    assert c.mtp == _mtp(h, attn, moe) == 11_215_610_368
    assert abs(c.total - 550e9) / 550e9 < 0.005


def test_latent_projections_are_whole_on_every_tp_rank_and_experts_split_by_ep():
    """Super layer 1 (E) at TP 2, EP 64: the two latent projections replicated (2·4096·1024, not split by
    TP), 8 local experts of 2·1024·2688, the router replicated."""
    m = get_model(SUPER)
    assert m.hybrid_layer_pattern[1] == "E"
    parts = layer_shard(m, 1, tp=2, ep=64, etp=1)
    assert parts["moe_latent_proj"].rep == 2 * 4096 * 1024 and parts["moe_latent_proj"].tp == 0
    assert parts["routed_experts"].exp == 8 * 2 * 1024 * 2688
    assert parts["shared_experts"].tp == 2 * 4096 * 5376 // 2


def test_latent_size_out_of_range_is_an_input_error_naming_the_field():
    with pytest.raises(InputError) as err:
        get_model(SUPER).with_overrides({"moe_latent_size": 0})
    assert err.value.field == "model_overrides.moe_latent_size"
    m = get_model(SUPER).with_overrides({"moe_latent_size": 2048})
    assert count_params(m).by_kind["moe_latent_proj"] == 40 * 2 * 4096 * 2048


def test_latent_size_from_config_must_be_a_non_negative_integer():
    from moeplan.catalog.models import load_raw
    from moeplan.inputs.model_spec import model_from_hf_config

    cfg = dict(load_raw(SUPER), moe_latent_size=-4)
    with pytest.raises(InputError) as err:
        model_from_hf_config(cfg, "x")
    assert err.value.field == "config.json:moe_latent_size"


# ----- FLOPs ---------------------------------------------------------------------------------


def test_model_flops_count_experts_at_the_latent_width_and_both_projections():
    """Bridge's ``moe_layer_flops`` (flop_utils.py, v0.6.0) with ``moe_latent_size``: forward
    4·s·l·f·k + 4·s·h·l per MoE layer (squared-ReLU: no 3/2 factor), times 3 for fwd + bwd."""
    m = get_model(SUPER)
    s = 8192
    f = model_flops(m, s, mtp_num_layers=0)
    assert f.parts["mlp"] == pytest.approx(3 * 4 * s * 1024 * 2688 * 22 * 40)
    assert f.parts["moe_latent_proj"] == pytest.approx(3 * 4 * s * 4096 * 1024 * 40)
    assert f.parts["shared_experts"] == pytest.approx(3 * 4 * s * 4096 * 5376 * 40)


def test_executed_flops_of_a_latent_moe_layer_by_hand():
    """Forward FLOPs of Super layer 1 (E) on one rank, 8192 tokens, TP 1: experts 2·t·l·f·2·k (fc1 +
    fc2), dense: shared 2·t·h·f_s·2, router 2·t·h·E, latent projections 2·t·2·h·l."""
    m, t = get_model(SUPER), 8192
    lf = layer_flops(m, 1, t, t, t, 1, 1, 64, 1.0)
    assert lf.expert_gemm == pytest.approx(2 * t * 1024 * 2688 * 2 * 22)
    assert lf.dense_gemm == pytest.approx(2 * t * 4096 * 5376 * 2 + 2 * t * 4096 * 512 + 2 * t * 2 * 4096 * 1024)


# ----- activations and dispatch --------------------------------------------------------------


def test_routed_tokens_are_saved_at_the_latent_width():
    """Super layer 1 (E), 8192 tokens, TP 1, bf16: the experts' FC1 input is 8192·22 tokens × 1024 ×
    2 bytes, and fc2_latent_proj keeps its 8192 × 1024 input; both dropped by the ``moe`` recompute."""
    ctx = ActContext(tokens=8192, seq_local=8192, micro_batch_size=1, tp=1, sp=False, etp=1)
    kept, _ = layer_activations(get_model(SUPER), 1, ctx, frozenset())
    assert kept["expert_fc1_in"] == 8192 * 22 * 1024 * 2
    assert kept["latent_fc2_in"] == 8192 * 1024 * 2
    _, dropped = layer_activations(get_model(SUPER), 1, ctx, frozenset({"moe"}))
    assert {"expert_fc1_in", "latent_fc2_in"} <= set(dropped)


def _exchange(model_overrides: dict) -> float:
    s = load_scenario(
        {
            "model": SUPER,
            "model_overrides": model_overrides,
            "system": {"gpu": "gb300", "num_gpus": 64},
            "training": {"seq_length": 8192, "micro_batch_size": 1, "global_batch_size": 512, "precision": "bf16"},
            "layout": {"expert_model_parallel_size": 64, "moe_token_dispatcher_type": "alltoall"},
        }
    )
    c = load_constants()
    ctx = step_context(s, c, measured_gemm_fractions(s.gpu.id), None)
    return ep_exchange(ctx, layer_compute(ctx, 1)).exposed_s


def test_dispatch_and_combine_move_latent_width_tokens():
    """megatron-core dispatches after fc1_latent_proj: EP 64 inside one NVL72 domain, all-to-all, the
    exchanged bytes scale with the token width, so latent 1024 moves a quarter of hidden 4096's."""
    latent = _exchange({})
    hidden_wide = _exchange({"moe_latent_size": 4096})
    assert latent > 0
    assert latent / hidden_wide == pytest.approx(1024 / 4096)


# ----- rules ---------------------------------------------------------------------------------


def _check(layout: dict, mcore: str = "0.16.1", model: str = SUPER) -> dict:
    s = load_scenario(
        {
            "model": model,
            "system": {"gpu": "gb300", "num_gpus": 64},
            "training": {"seq_length": 8192, "micro_batch_size": 1, "global_batch_size": 512},
            "layout": {"expert_model_parallel_size": 64, **layout},
            "versions": {"megatron_core": mcore},
        }
    )
    return {f.rule_id: f for f in validate(s).findings}


def test_latent_moe_before_megatron_core_016_is_unsupported():
    f = _check({}, mcore="0.15.3")["moe.latent_needs_mcore"]
    assert f.severity == "error" and f.kind == "unsupported"
    assert "moe_latent_size = 1024" in f.message and "0.15.3" in f.message and "0.16.0" in f.message
    assert "moe.latent_needs_mcore" not in _check({}, mcore="0.16.1")


def test_shared_expert_overlap_with_latent_moe_is_refused():
    f = _check({"moe_shared_expert_overlap": True})["moe.latent_shared_expert_overlap"]
    assert f.severity == "error" and "moe_shared_expert_overlap: false" in f.fix
    assert "moe.latent_shared_expert_overlap" not in _check({"moe_shared_expert_overlap": False})
    nano = _check({"moe_shared_expert_overlap": True}, model="nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16")
    assert "moe.latent_shared_expert_overlap" not in nano


def test_legacy_grouped_gemm_of_megatron_core_016_has_no_latent_moe():
    f = _check({"moe_use_legacy_grouped_gemm": True})["moe.latent_legacy_grouped_gemm"]
    assert f.severity == "error" and "0.16.1" in f.message
    assert "moe.latent_legacy_grouped_gemm" not in _check({"moe_use_legacy_grouped_gemm": False})


def test_a_model_without_latent_has_no_latent_projections():
    m = get_model("nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16")
    assert m.moe_latent_size is None and m.moe_token_width == m.hidden_size
    assert "moe_latent_proj" not in count_params(m).by_kind
    assert "moe_latent_proj" not in model_flops(m, 4096).parts
    assert dataclasses.replace(m, moe_latent_size=512).moe_token_width == 512


def test_super_flops_per_token_match_the_published_gb300_row():
    """Megatron Bridge 26.08 perf summary, Nemotron_3_Super DGX-GB300 MXFP8 (TP1 EP64, seq 8192): 831
    model TFLOP/s/GPU at 9,856 tokens/s/GPU = 84.31 GFLOP per token; the recipes run MTP at
    ``mtp_num_layers: 2`` (recipes/nemotronh/*/nemotron_3_super.py). Ours 84.73 (+0.5 %): within 1 %."""
    per_token = model_flops(get_model(SUPER), 8192, mtp_num_layers=2).per_token
    assert per_token == pytest.approx(831e12 / 9856, rel=0.01)


def test_lora_on_latent_experts_adapts_the_latent_width():
    """Bridge's LoRA on the routed experts' linear_fc1 / linear_fc2 (one shared adapter per EP rank by
    default) of Super layer 1 at rank 16: fc1 16·(1024 + 2688), fc2 16·(2688 + 1024)."""
    from moeplan.inputs.peft import PeftInput, layer_adapters

    la = layer_adapters(get_model(SUPER), PeftInput(dim=16, target_modules=("linear_fc1", "linear_fc2")), 1, 1, 64, 1)
    routed = [s for s in la.shapes if s[1] == "routed"]
    assert [(s[2], s[3]) for s in routed] == [(1024, 2688), (2688, 1024)]
    assert la.expert == 2 * 16 * (1024 + 2688)
