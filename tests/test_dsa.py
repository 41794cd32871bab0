"""DeepSeek Sparse Attention (DeepSeek-V3.2, GLM-5 / 5.1 / 5.2): the indexer on the model spec, its
parameters, model FLOPs, executed work, saved activations, kernel rate and megatron-core's rules.
Expected values are derived by hand below from the configs under ``tests/data/hf_configs``."""

from __future__ import annotations

import copy
import pathlib

import pytest

from moeplan import count_params, get_model, load_scenario, validate
from moeplan.catalog.gpus import get_gpu
from moeplan.catalog.models import load_config_file
from moeplan.errors import InputError
from moeplan.inputs.model_spec import model_from_hf_config
from moeplan.model.activations import ActContext, dsa_indexer_saved, layer_activations
from moeplan.model.executed_flops import SPARSE_MLA_FWD_FRACTION, dsa_layer_flops, sparse_mla_fraction
from moeplan.structure.flops import dsa_causal_context, dsa_flops_per_token, model_flops

HF = pathlib.Path(__file__).resolve().parent / "data" / "hf_configs"

#: one DeepSeek-V3.2 indexer: wq_b 1536 → 64·128, wk 7168 → 128, k_norm LayerNorm(128) weight + bias,
#: weights_proj 7168 → 64
V32_INDEXER = 1536 * 64 * 128 + 7168 * 128 + 2 * 128 + 7168 * 64
#: one GLM-5 indexer: wq_b 2048 → 32·128, wk 6144 → 128, k_norm 2·128, weights_proj 6144 → 32
GLM5_INDEXER = 2048 * 32 * 128 + 6144 * 128 + 2 * 128 + 6144 * 32


def _hf(name: str):
    return model_from_hf_config(load_config_file(HF / f"{name}.json"), name)


def test_dsa_configs_map_the_indexer_onto_megatron_fields():
    v32, glm52 = _hf("deepseek-ai--DeepSeek-V3.2"), _hf("zai-org--GLM-5.2")
    assert (v32.dsa_indexer_n_heads, v32.dsa_indexer_head_dim, v32.dsa_indexer_topk) == (64, 128, 2048)
    assert (v32.dsa_indexer_topk_freq, v32.dsa_indexer_loss_coeff) == (1, 0.0)  # megatron-core defaults
    assert (glm52.dsa_indexer_n_heads, glm52.dsa_indexer_topk_freq, glm52.dsa_indexer_skip_topk_offset) == (32, 4, 3)
    assert glm52.dsa_indexer_loss_coeff == 0.001 and glm52.dsa_indexer_use_sparse_loss  # GLM5Bridge


def test_shared_indexers_follow_megatron_cadence():
    """GLM-5.2: layers 1-3 compute, then every 4th from layer 7 (megatron: max(n - 3, 0) % 4 == 0):
    1, 2, 3, 7, 11, ..., 75 = 3 + 18 = 21 indexers, as its indexer_types list says."""
    cfg = load_config_file(HF / "zai-org--GLM-5.2.json")
    m = model_from_hf_config(cfg, "glm")
    assert ["full" if m.layer_has_indexer(i) else "shared" for i in range(78)] == cfg["indexer_types"]
    assert sum(m.layer_has_indexer(i) for i in range(78)) == 3 + (75 - 7) // 4 + 1 == 21


def test_an_indexer_pattern_megatron_cannot_build_is_refused():
    cfg = copy.deepcopy(load_config_file(HF / "zai-org--GLM-5.2.json"))
    cfg["indexer_types"][4] = "full"
    with pytest.raises(InputError) as err:
        model_from_hf_config(cfg, "glm")
    assert err.value.field == "config.json:indexer_types"
    assert "not modelled" in str(err.value)


def test_indexer_fields_stay_refused_outside_the_dsa_families():
    cfg = copy.deepcopy(load_config_file(HF / "deepseek-ai--DeepSeek-V3.2.json"))
    cfg["model_type"] = "deepseek_v3"
    with pytest.raises(InputError) as err:
        model_from_hf_config(cfg, "v3")
    assert err.value.field == "config.json:index_topk"


def test_deepseek_v32_is_deepseek_v3_plus_one_indexer_per_layer():
    """13,959,424 per indexer; 61 decoder layers and the MTP layer (its own numbering: it computes)."""
    assert V32_INDEXER == 13_959_424
    v3, v32 = count_params(get_model("deepseek-ai/DeepSeek-V3")), count_params(get_model("DeepSeek-V3.2"))
    assert v32.by_kind["dsa_indexer"] == 61 * V32_INDEXER
    assert v32.total == v3.total + 61 * V32_INDEXER
    assert v32.mtp == v3.mtp + V32_INDEXER


def test_deepseek_v32_total_matches_its_685b_checkpoint():
    """DeepSeek-V3 main model 671,026,419,200 (test_params' MLA layer by hand, 3 dense + 58 MoE layers)
    + 61 indexers 851,524,864 = 671,877,944,064; + the MTP layer 11,624,027,648 (eh_proj 2·7168²,
    enorm/hnorm/final norm 3·7168 + 2·7168 block norms, one MoE layer, one indexer); the checkpoint also
    stores the MTP layer's own embedding and head, 2 · 129,280 · 7168 = 1,853,358,080: 685,355,329,792
    against the Hugging Face page's 685B (0.05 %)."""
    c = count_params(get_model("deepseek-ai/DeepSeek-V3.2"))
    assert c.total == 671_026_419_200 + 851_524_864 == 671_877_944_064
    assert c.total_with(mtp=True) == 683_501_971_712
    checkpoint = c.total_with(mtp=True) + 2 * 129_280 * 7168
    assert checkpoint == 685_355_329_792
    assert abs(checkpoint - 685e9) / 685e9 < 0.005


def test_glm5_total_by_hand_matches_744b():
    """GLM-5 (h 6144, 64 heads, q LoRA 2048, kv LoRA 512, qk 192 + rope 64, v 256; 3 dense layers of
    12288, 75 MoE layers of 256 × 2048 + 1 shared, vocab 154,880, untied), MTP left out as the report's
    744B leaves it."""
    h, v = 6144, 154_880
    mla = h * 2048 + 2048 + 2048 * 64 * 256 + h * (512 + 64) + 512 + 512 * 64 * (192 + 256) + 64 * 256 * h
    assert mla == 165_022_208
    dense_layer = mla + 2 * h + 3 * h * 12288 + GLM5_INDEXER
    moe_layer = mla + 2 * h + (h * 256 + 256) + 256 * 3 * h * 2048 + 3 * h * 2048 + GLM5_INDEXER
    total = 2 * v * h + h + 3 * dense_layer + 75 * moe_layer
    assert GLM5_INDEXER == 9_371_904
    assert count_params(get_model("zai-org/GLM-5")).total == total == 743_911_218_432
    assert abs(total - 744e9) / 744e9 < 0.005


def test_glm52_shares_indexers_so_counts_fewer():
    """57 of 78 layers reuse an earlier top-k and build no indexer: 57 × 9,371,904 fewer parameters."""
    glm5, glm52 = count_params(_hf("zai-org--GLM-5")), count_params(_hf("zai-org--GLM-5.2"))
    assert glm5.total - glm52.total == 57 * GLM5_INDEXER


def test_sparse_context_is_the_mean_of_min_i_topk():
    """Query i (1-based) reads min(i, k) keys: for s = 8, k = 3: (1 + 2 + 3·6)/8 = 21/8 = 2.625 =
    3 − 3·2/16; for s ≤ k every causal key: (s + 1)/2."""
    assert dsa_causal_context(8, 3) == (4.5, 2.625)
    assert dsa_causal_context(2048, 2048) == (1024.5, 1024.5)


def test_dsa_model_flops_follow_bridge_formula_by_hand():
    """DeepSeek-V3.2 at 64K (Megatron Bridge dev flop_utils.py DSA branch; exact): sparse context
    2048 − 2048·2047/131072 = 2016.015625; core 6·61·2016.015625·128·(2·512 + 64) per token; the
    indexer without its loss: 2·(1536·64·128 + 7168·(128 + 64)) + 2·32768.5·64·129 per indexer layer."""
    m = get_model("deepseek-ai/DeepSeek-V3.2")
    parts = dsa_flops_per_token(m, 65536, 61, 0)
    sparse = 2048 - 2048 * 2047 / 131072
    assert sparse == 2016.015625
    assert parts["attention_quadratic"] == pytest.approx(6 * 61 * sparse * 128 * 1088, rel=1e-12)
    indexer = 2 * (1536 * 64 * 128 + 7168 * 192) + 2 * 32768.5 * 64 * 129
    assert parts["dsa_indexer"] == pytest.approx(61 * indexer, rel=1e-12)
    total = model_flops(m, 65536, 1, 0)
    assert total.parts["dsa_indexer"] / 65536 == pytest.approx(61 * indexer, rel=1e-12)


def test_trained_indexer_adds_gradients_and_teacher_by_hand():
    """GLM-5 (loss 0.001, sparse loss) at 4K: sparse context 2048 − 2048·2047/8192 = 1536.25 against
    dense 2048.5; per indexer layer 4·(2048·32·128 + 6144·160) + 2·2048.5·32·129 +
    4·1536.25·32·129 + 2·1536.25·64·(512 + 64)."""
    m = get_model("zai-org/GLM-5")
    sparse = 2048 - 2048 * 2047 / 8192
    per_layer = (
        4 * (2048 * 32 * 128 + 6144 * 160) + 2 * 2048.5 * 32 * 129 + 4 * sparse * 32 * 129 + 2 * sparse * 64 * 576
    )
    assert dsa_flops_per_token(m, 4096, 78, 0)["dsa_indexer"] == pytest.approx(78 * per_layer, rel=1e-12)


def test_executed_indexer_is_not_split_by_tp_and_skipped_on_sharing_layers():
    """TP 8, 4096 tokens: the sparse core divides by TP, the duplicated indexer does not; GLM-5.2's
    layer 4 (index 3) reuses layer 3's top-k and runs no indexer."""
    glm52 = _hf("zai-org--GLM-5.2")
    gemm1, score1, core1 = dsa_layer_flops(glm52, 0, 4096, 4096, 1)
    gemm8, score8, core8 = dsa_layer_flops(glm52, 0, 4096, 4096, 8)
    assert (gemm8, score8) == (gemm1, score1) and core8 == pytest.approx(core1 / 8)
    assert dsa_layer_flops(glm52, 3, 4096, 4096, 8)[:2] == (0.0, 0.0)


def test_sparse_kernel_rate_reproduces_flashmla_figure():
    """FlashMLA's sparse prefill kernel: up to 640 TFLOP/s forward on H800 (BF16 peak 989 TFLOP/s,
    FlashMLA README 2025-09-29). Our forward fraction on Hopper times the H100's BF16 peak gives it back
    within 1 % (the same FLOP convention: 2·(576 + 512) per selected key and head)."""
    h100 = get_gpu("h100")
    fwd = SPARSE_MLA_FWD_FRACTION["Hopper"] * h100.peak_dense_tflops["bf16"]
    assert fwd == pytest.approx(640, rel=0.01)
    # fwd + bwd: the flash backward's rate ratio (0.866) on 2.5 × the forward's FLOPs
    f = 640 / 989
    assert sparse_mla_fraction(h100, 4096, 1088) == pytest.approx(3 / (1 / f + 2.5 / (0.866 * f)), rel=1e-9)


def _act(tokens: float, tp: int = 1) -> ActContext:
    return ActContext(tokens=tokens, seq_local=tokens, micro_batch_size=1, tp=tp, sp=tp > 1, etp=1)


def test_saved_topk_indices_and_trained_indexer_tensors_by_hand():
    """4096 tokens: int64 top-k indices 4096·2048·8 = 64 MiB; GLM-5's loss keeps the indexer's q
    (32·128), k (128) and weights (32) in bf16: 4096·(4096 + 160)·2 bytes; DeepSeek-V3.2 (no loss)
    keeps none of them. With core_attn recomputed they are dropped."""
    c = _act(4096)
    assert dsa_indexer_saved(get_model("deepseek-ai/DeepSeek-V3.2"), c) == {"dsa_topk_indices": 4096 * 2048 * 8}
    glm = dsa_indexer_saved(get_model("zai-org/GLM-5"), c)
    assert glm["dsa_indexer_qkw"] == 4096 * (32 * 128 + 128 + 32) * 2
    kept, rec = layer_activations(get_model("zai-org/GLM-5"), 0, c, frozenset({"core_attn"}))
    assert "dsa_topk_indices" in rec and "dsa_topk_indices" not in kept


def test_absorbed_queries_replace_mla_qkv_by_hand():
    """DeepSeek-V3.2, 4096 tokens, TP 1: absorbed queries 128 heads × 576 plus the shared latent row
    576, bf16: 4096·129·576·2; the core's latent output 4096·128·512·2."""
    kept, rec = layer_activations(get_model("deepseek-ai/DeepSeek-V3.2"), 0, _act(4096), frozenset({"mla_up_proj"}))
    assert rec["mla_qkv"] == 4096 * 129 * 576 * 2
    assert kept["dsa_latent_out"] == 4096 * 128 * 512 * 2


def _check(model: str, mcore: str, layout: dict, overrides: dict | None = None):
    sc = load_scenario(
        {
            "model": model,
            "model_overrides": overrides or {},
            "versions": {"megatron_core": mcore},
            "system": {"gpu": "h100", "num_gpus": 16},
            "training": {"seq_length": 4096, "micro_batch_size": 1, "global_batch_size": 64},
            "layout": layout,
        }
    )
    return {f.rule_id: f for f in validate(sc).findings}


def test_release_without_dsa_is_an_error_naming_it():
    found = _check("deepseek-ai/DeepSeek-V3.2", "0.15.0", {})
    f = found["attention.dsa_needs_mcore"]
    assert f.severity == "error" and "megatron-core 0.15.0" in f.message and "0.16.0" in f.message
    assert "attention.dsa_dense_fallback" not in found  # one error, not a cascade


def test_context_parallel_rules_per_release():
    old = _check("deepseek-ai/DeepSeek-V3.2", "0.18.0", {"context_parallel_size": 2})
    assert "asserts CP = 1" in old["attention.dsa_context_parallel"].message
    new = _check("deepseek-ai/DeepSeek-V3.2", "0.19.0", {"context_parallel_size": 2, "cp_comm_type": "p2p"})
    assert new["attention.dsa_context_parallel"].fix == "set cp_comm_type: allgather"
    ok = _check("deepseek-ai/DeepSeek-V3.2", "0.19.0", {"context_parallel_size": 2, "cp_comm_type": "all_gather"})
    assert "attention.dsa_context_parallel" not in ok


def test_rope_fusion_and_sharing_split_rules():
    share = {"dsa_indexer_topk_freq": 4, "dsa_indexer_skip_topk_offset": 3}
    found = _check("zai-org/GLM-5", "0.19.0", {"pipeline_model_parallel_size": 2, "apply_rope_fusion": True}, share)
    assert found["attention.dsa_rope_fusion"].fix == "set apply_rope_fusion: false"
    # 39 layers per stage: layer 40 would reuse layer 39's top-k across the stage boundary
    assert "layer 40 reuses the DSA top-k of layer 39" in found["attention.dsa_index_share_pipeline_split"].message
    # stages of 38 + 40: layer 39 (= 3 + 4·9) computes, so the second stage starts on a computing layer
    fine = _check(
        "zai-org/GLM-5", "0.19.0", {"pipeline_model_parallel_size": 2, "num_layers_in_first_pipeline_stage": 38}, share
    )
    assert "attention.dsa_index_share_pipeline_split" not in fine
    older = _check("zai-org/GLM-5", "0.18.0", {}, share)
    assert "dsa_indexer_topk_freq = 4" in older["attention.dsa_needs_mcore"].message


def test_dense_fallback_warns_with_its_score_memory_by_hand():
    """No dsa_kernel_backend: FP32 scores of 128 heads + the indexer's over 4096 × 4096 keys:
    129·4096·4096·4 bytes = 8.06 GiB per layer and microbatch; tilelang on 0.19 is silent."""
    f = _check("deepseek-ai/DeepSeek-V3.2", "0.18.0", {})["attention.dsa_dense_fallback"]
    assert f.severity == "warning" and f"{129 * 4096 * 4096 * 4 / 2**30:.1f} GiB" in f.message
    assert "attention.dsa_dense_fallback" not in _check(
        "deepseek-ai/DeepSeek-V3.2", "0.19.0", {"dsa_kernel_backend": "tilelang"}
    )


def test_allgather_cp_moves_the_latent_key_row_and_indexer_key():
    """DSAttention's allgather CP gathers, per token, the latent key row 512 + 64 and the indexer key 128,
    whole on each TP rank: at TP 2 the width the exchange divides by TP is (576 + 128)·2 = 1408
    (against MLA's keys and values, 128·(192 + 128) = 40,960 for DeepSeek-V3)."""
    from moeplan.model.time.context import cp_widths

    def widths(model: str):
        return cp_widths(
            load_scenario(
                {
                    "model": model,
                    "system": {"gpu": "h100", "num_gpus": 16},
                    "training": {"seq_length": 65536, "micro_batch_size": 1, "global_batch_size": 16},
                    "layout": {"tensor_model_parallel_size": 2, "context_parallel_size": 8},
                }
            )
        )

    assert widths("deepseek-ai/DeepSeek-V3.2").kv == (512 + 64 + 128) * 2 == 1408
    assert widths("deepseek-ai/DeepSeek-V3").kv == 128 * (192 + 128) == 40_960
