"""Memory of Qwen3-235B-A22B at 128K on 128 GB200 (TP4 PP4 VPP12 CP4 EP32, SP, selective recompute
moe_act + layernorm, HybridEP, TE graphs on attn / moe_router / moe_preprocess), term by term, as
Megatron-Core and Transformer Engine allocate it.

Shapes (Qwen3-235B-A22B config.json): h = 4096, 64 query heads and 4 KV heads of 128, 94 layers, 128
experts of FFN 1536, top-8, SwiGLU. Per microbatch and rank: CP-local tokens n = 131072 / 4 = 32768;
SP-local tokens T = n / TP = 8192; routed token copies per expert rank (balanced, ETP 1) = T · 8 = 65536.
bf16 = 2 bytes. Sources are cited in the modules under test.
"""

from __future__ import annotations

import pytest

from moeplan import estimate_memory, load_scenario
from moeplan.model.activations import ActContext, layer_activations
from moeplan.model.memory.dispatcher_buffers import hybridep_buffers
from moeplan.model.schedule import inflight_chunks

MIB = 2**20
GIB = 2**30
T, N, H = 8192, 32768, 4096

CARD_LAYOUT = {
    "tensor_model_parallel_size": 4,
    "pipeline_model_parallel_size": 4,
    "virtual_pipeline_model_parallel_size": 12,
    "context_parallel_size": 4,
    "expert_model_parallel_size": 32,
    "expert_tensor_parallel_size": 1,
    "sequence_parallel": True,
    "recompute_granularity": "selective",
    "recompute_modules": ["moe_act", "layernorm"],
    "moe_token_dispatcher_type": "flex",
    "moe_flex_dispatcher_backend": "hybridep",
    "cuda_graph_impl": "transformer_engine",
    "cuda_graph_scope": ["attn", "moe_router", "moe_preprocess"],
}


def _card(megatron_core: str | None = None, **layout):
    lay = dict(CARD_LAYOUT)
    lay.update(layout)
    data = {
        "model": "Qwen/Qwen3-235B-A22B",
        "system": {"gpu": "gb200", "num_gpus": 128},
        "training": {"seq_length": 131072, "micro_batch_size": 1, "global_batch_size": 32, "precision": "bf16"},
        "layout": lay,
        "recipe_defaults": "mbridge-perf-benchmark",
    }
    if megatron_core is not None:
        data["versions"] = {"megatron_core": megatron_core}
    return load_scenario(data)


def _ctx(**kw) -> ActContext:
    base = dict(tokens=N, seq_local=N, micro_batch_size=1, tp=4, sp=True, etp=1, routing_factor=1.0)
    base.update(kw)
    return ActContext(**base)


@pytest.fixture(scope="module")
def card():
    return _card()


def test_layernorm_recompute_keeps_the_fused_attention_norm_output(card):
    # TE spec: the input norm is fused into linear_qkv (LayerNormLinear saves ln_out, the SP-local
    # [T, h] shard, and rsigma): no selective module drops it. The MoE pre-MLP norm is a TENorm:
    # layernorm recompute drops its output [T, h] = 8192 · 4096 · 2 = 67,108,864 B.
    kept, rec = layer_activations(card.complete_model, 0, _ctx(), frozenset({"moe_act", "layernorm"}))
    assert kept["attn_norm_output"] == T * H * 2 == 67_108_864
    assert "attn_norm_output" not in rec
    assert rec["mlp_norm_output"] == 67_108_864
    assert kept["norm_rsigma"] == rec["norm_rsigma"] == T * 4  # one fp32 1/rms per token each


def test_separate_norms_stay_recomputable():
    # the local spec (separate input_layernorm) and MLA (a separate input norm in the TE spec) keep
    # layernorm recompute of the attention input norm
    qwen = _card().complete_model
    _, rec = layer_activations(qwen, 0, _ctx(fused_input_norm=False), frozenset({"layernorm"}))
    assert rec["attn_norm_output"] == 67_108_864
    dsv3 = load_scenario({"model": "deepseek-ai/DeepSeek-V3"}).complete_model  # h = 7168
    _, rec = layer_activations(dsv3, 5, _ctx(), frozenset({"layernorm"}))
    assert rec["attn_norm_output"] == T * 7168 * 2


def test_dense_mlp_norm_is_dropped_only_by_mlp_recompute():
    # Qwen3-8B (dense, h 4096): the MLP norm is fused into linear_fc1 (pre_mlp_layernorm IdentityOp):
    # layernorm keeps it, mlp recompute (the whole MLP checkpointed from its input) drops it.
    m = load_scenario({"model": "Qwen/Qwen3-8B"}).complete_model
    kept, _ = layer_activations(m, 0, _ctx(), frozenset({"layernorm"}))
    assert kept["mlp_norm_output"] == T * 4096 * 2
    _, rec = layer_activations(m, 0, _ctx(), frozenset({"mlp"}))
    assert rec["mlp_norm_output"] == T * 4096 * 2


def test_card_layer_saves_by_hand(card):
    # kept per layer and microbatch under moe_act + layernorm (bytes):
    kept, rec = layer_activations(card.complete_model, 0, _ctx(), frozenset({"moe_act", "layernorm"}))
    by_hand = {
        "attn_norm_input": T * H * 2,  # 67,108,864: the layer input, LayerNormLinear's inputmat
        "attn_norm_output": T * H * 2,  # 67,108,864: ln_out (fused norm)
        "norm_rsigma": T * 4,  # 32,768
        "qkv": N * (64 * 128 + 2 * 4 * 128) // 4 * 2,  # 150,994,944: CP P2P saves q and the kv pair
        "qk_norm_input": N * 68 * 128 // 4 * 2 + N * 68 // 4 * 4,  # 144,834,560: q/k before their norms
        "attn_out": N * 64 * 128 // 4 * 2,  # 134,217,728: the core output, linear_proj's input
        "softmax_lse": N * 64 // 4 * 4,  # 2,097,152: fp32 statistics, no s x s
        "mlp_norm_input": T * H * 2,  # 67,108,864: the residual after attention
        "router": T * 128 * (2 + 4 + 1),  # 7,340,032: logits bf16, scores fp32, routing map
        "expert_fc1_in": 65536 * H * 2,  # 536,870,912: the permuted tokens GroupedLinear keeps
        "expert_fc1_out": 65536 * 2 * 1536 * 2,  # 402,653,184: moe_act's checkpoint input
        "routed_probs": 65536 * 4,  # 262,144
        "permute_indices": 65536 * 8,  # 524,288
    }
    assert kept == pytest.approx(by_hand, rel=1e-12)
    assert sum(by_hand.values()) == 1_581_154_304  # 1.4726 GiB
    # dropped: the expert activation's output (fc2 input) and the pre-MLP norm output
    assert rec == {"expert_fc2_in": 65536 * 1536 * 2, "mlp_norm_output": T * H * 2, "norm_rsigma": T * 4}


def test_interleaved_warmup_sets_the_chunks_in_flight():
    # get_pp_rank_microbatches: warm-up 2·(PP − r − 1) + (VPP − 1)·PP chunk forwards, plus the current
    # one; 16 microbatches × 12 chunks = 192 bound none of them
    assert [inflight_chunks(4, r, 12, 16) for r in range(4)] == [51, 49, 47, 45]


def test_te_attention_graphs_keep_a_4_gib_mask_per_sample(card):
    # megatron-core ≤ 0.19 TransformerLayer.get_layer_static_inputs: [b, 1, s/CP, s] bool per (layer,
    # microbatch) sample = 32768 · 131072 = 4 GiB; TE reuses a sample's buffers only after its chunk's
    # backward, so stage 1 holds 49 chunks × 2 layers = 98 masks = 392 GiB, plus one fp32 rotary table
    # [131072, 128] = 64 MiB.
    stage = estimate_memory(card).stages[1]
    assert stage.num_layers == 24 and stage.inflight_microbatches == pytest.approx(49 / 12)
    assert stage.items["other"]["cuda_graph_static_inputs"] == pytest.approx(98 * 4 * GIB + 64 * MIB)
    # without the mask: create_attention_mask_in_dataloader false on megatron-core dev (PR #5131, June 2026)
    off = estimate_memory(_card("0.19.0+dev", create_attention_mask_in_dataloader=False)).stages[1]
    assert off.items["other"]["cuda_graph_static_inputs"] == pytest.approx(64 * MIB)
    # a release (or an unstated version) builds the mask whatever the flag says
    for version in ("0.19.0", None):
        kept = estimate_memory(_card(version, create_attention_mask_in_dataloader=False)).stages[1]
        assert kept.items["other"]["cuda_graph_static_inputs"] == pytest.approx(98 * 4 * GIB + 64 * MIB)


def test_the_mask_flag_on_a_release_is_flagged_as_not_reaching_the_graphs():
    from moeplan import validate

    ids = {
        f.rule_id: f
        for f in validate(_card("0.19.0", create_attention_mask_in_dataloader=False)).findings
        if f.rule_id == "graphs.static_attention_masks"
    }
    assert "PR #5131" in ids["graphs.static_attention_masks"].message
    dev = validate(_card("0.19.0+dev", create_attention_mask_in_dataloader=False)).findings
    assert not [f for f in dev if f.rule_id == "graphs.static_attention_masks"]


def test_expert_optimizer_state_is_whole_at_edp_1(card):
    # EDP = 128 / (EP 32 · ETP 1 · PP 4) = 1: the distributed optimizer cannot shard expert state.
    # stage 1: 24 layers × 4 local experts × 3 · 4096 · 1536 = 1,811,939,328 params × 12 B (fp32
    # master, exp_avg, exp_avg_sq) = 21,743,271,936 B = 20.25 GiB
    stage = estimate_memory(card).stages[1]
    assert stage.items["optimizer"]["expert_state"] == pytest.approx(24 * 4 * 3 * 4096 * 1536 * 12)
    # dense: attention (4096·8192 + 2·4096·512 + 8192·4096) / TP 4 = 17,825,792, router 128·4096 =
    # 524,288, norms 2·4096 + 2·128 = 8,448 → 18,358,528 a layer × 24 × 12 B over DP·CP = 8
    assert stage.items["optimizer"]["dense_state"] == pytest.approx(18_358_528 * 24 * 12 / 8, rel=1e-3)


def test_hybridep_buffer_at_8192_tokens_per_rank():
    # one NVLink domain of 32 ranks (GB200 NVL72), 4 local experts: M = 8192 · 32 tokens ×
    # (h·2 + E_l·R_n·4 + (h/128)·4) = 262,144 · (8192 + 512 + 128) = 2,315,255,808 B
    buf = hybridep_buffers(4096, 8192, 4, 32, 72)
    assert buf.total_bytes == 2_315_255_808 and buf.rdma_bytes == 0


def test_layernorm_note_says_what_stays(card):
    # both norm outputs stay: the fused attention norm, and the pre-MLP norm held by the router graph
    # (flex dispatcher): 2 · 67,108,864 B = 0.125 GiB per layer and microbatch
    notes = [a for a in estimate_memory(card).assumptions if str(a).startswith("layernorm recompute keeps")]
    assert len(notes) == 1
    assert "0.125 GiB" in notes[0] and "linear_qkv" in notes[0] and "flex dispatcher" in notes[0]
    # alltoall with moe_preprocess captured: Megatron recomputes the pre-MLP norm; only the fused one stays
    a2a = _card(moe_token_dispatcher_type="alltoall", moe_flex_dispatcher_backend=None)
    notes = [a for a in estimate_memory(a2a).assumptions if str(a).startswith("layernorm recompute keeps")]
    assert "0.062 GiB" in notes[0] and "pre-MLP" not in notes[0]
