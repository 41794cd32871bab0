"""MiniMax-M3 and its MiniMax Sparse Attention (MSA, arXiv 2606.13392): the config read into a model,
the exact parameter count against the published total, the keys a query reads, the FLOPs and the
activations of one MSA layer by hand, and check / estimate: Megatron has no MSA (Megatron Bridge v0.6.0
trains MiniMax-M3 with full causal attention), so check refuses it while estimate gives the model's
figures and says they are not a Megatron run."""

from __future__ import annotations

import json
import pathlib

import pytest
from typer.testing import CliRunner

from moeplan import count_params, get_model, load_scenario
from moeplan.cli.app import app
from moeplan.errors import InputError
from moeplan.inputs.model_spec import model_from_hf_config
from moeplan.model.activations import ActContext, layer_activations
from moeplan.model.executed_flops import layer_flops
from moeplan.rules import validate
from moeplan.structure.flops import model_flops
from moeplan.structure.msa_shapes import msa_causal_context, msa_indexer_params
from moeplan.structure.params import layer_shard

runner = CliRunner()
CONFIG = pathlib.Path(__file__).resolve().parent / "data" / "hf_configs" / "MiniMaxAI--MiniMax-M3.json"
#: a working layout on H100 (the shape of Megatron Bridge's 256-GPU MiniMax-M3 pretraining recipe)
LAYOUT = ["--gpu", "h100", "--num-gpus", "256", "--tp", "2", "--pp", "4", "--ep", "32", "--gbs", "512"]


def _config() -> dict:
    return json.loads(CONFIG.read_text())


def _model():
    return model_from_hf_config(_config(), "MiniMax-M3")


# ----- the config -----------------------------------------------------------------------------


def test_config_reads_the_sparse_layers_and_the_index_branch():
    m = _model()
    assert m.has_msa
    assert [i for i in range(60) if m.layer_is_msa(i)] == list(range(3, 60))  # sparse_attention_freq
    assert (m.msa_block_size, m.msa_topk_blocks, m.msa_init_blocks, m.msa_local_blocks) == (128, 16, 0, 1)
    assert (m.msa_index_n_heads, m.msa_index_head_dim) == (4, 128)
    # the GQA core every layer keeps: 64 heads of 128 over 4 groups, per-head QK norm
    assert (m.num_attention_heads, m.num_query_groups, m.kv_channels, m.qk_layernorm) == (64, 4, 128, True)
    assert not m.qk_layernorm_full_dim
    # Bridge: dense_intermediate_size for the 3 dense layers, intermediate_size for the experts
    assert (m.ffn_hidden_size, m.moe_ffn_hidden_size, m.moe_shared_expert_intermediate_size) == (12288, 3072, 3072)
    assert (m.num_moe_experts, m.moe_router_topk, m.moe_router_expert_bias) == (128, 4, True)
    assert m.moe_layers == (False,) * 3 + (True,) * 57
    assert m.gated_linear_unit and m.clamped_glu  # swigluoai: gate, up and down, the gate clamped
    assert (m.mtp_num_layers, m.unbuilt_mtp_modules) == (0, 7)


def test_config_without_sparse_attention_is_plain_gqa():
    cfg = _config()
    cfg["sparse_attention_config"] = dict(cfg["sparse_attention_config"], use_sparse_attention=False)
    m = model_from_hf_config(cfg, "m")
    assert not m.has_msa and count_params(m).by_kind.get("msa_indexer", 0) == 0


@pytest.mark.parametrize(
    "change,field",
    [
        ({"sparse_score_type": "mean"}, "sparse_score_type"),
        ({"sparse_disable_index_value": [0] * 60}, "sparse_disable_index_value"),
        ({"sparse_window": 4096}, "sparse_window"),
        ({"sparse_attention_freq": [1] * 59}, "sparse_attention_freq"),
        ({"sparse_init_block": 10, "sparse_local_block": 7}, "sparse_local_block"),
    ],
)
def test_msa_variant_moeplan_does_not_model_is_refused_by_name(change, field):
    cfg = _config()
    cfg["sparse_attention_config"] = dict(cfg["sparse_attention_config"], **change)
    with pytest.raises(InputError) as err:
        model_from_hf_config(cfg, "m")
    assert err.value.field == f"config.json:sparse_attention_config.{field}"


def test_catalog_entry_is_the_vendored_config():
    cat = get_model("MiniMax-M3")
    assert cat.name == "MiniMaxAI/MiniMax-M3"
    assert count_params(cat).total == count_params(_model()).total


# ----- parameters -----------------------------------------------------------------------------

#: one attention layer: q 6144·8192 + k, v 2·6144·512 + o 8192·6144, per-head QK norm 2·128
ATTENTION = 6144 * 8192 + 2 * 6144 * 512 + 8192 * 6144 + 2 * 128
#: one index branch: index_q_proj 6144·(4·128), index_k_proj 6144·128, index_q_norm / index_k_norm 128 each
INDEX_BRANCH = 6144 * 4 * 128 + 6144 * 128 + 2 * 128


def test_parameters_by_hand_within_half_a_percent_of_the_published_total():
    """Dense layer: attention 106,955,008 + norms 2·6144 + MLP 3·6144·12288 = 333,459,712.
    MSA MoE layer: attention + norms + index branch 3,932,416 + router 128·6144 + bias 128 + routed
    128·3·6144·3072 = 7,247,757,312 + shared 3·6144·3072 = 56,623,104 → 7,416,066,688.
    Total: 3 dense + 57 MSA MoE layers + embedding and output 2·200064·6144 + final norm 6144
    = 426,174,572,928, within 0.5 % of the published 428B (MiniMax's '~428B'; Megatron Bridge v0.6.0
    docs/models/minimax/minimax-m3.md '428B total'), which is the vision-language checkpoint: its
    854,172,958,720 tensor bytes (Bridge's MiniMax-M3 examples README; BF16, FP32 routers) hold about
    427.04B parameters, the vision tower and projectors the difference."""
    assert ATTENTION == 106_955_008 and INDEX_BRANCH == 3_932_416
    dense = ATTENTION + 2 * 6144 + 3 * 6144 * 12288
    sparse_moe = ATTENTION + 2 * 6144 + INDEX_BRANCH + 128 * 6144 + 128 + 128 * 3 * 6144 * 3072 + 3 * 6144 * 3072
    assert (dense, sparse_moe) == (333_459_712, 7_416_066_688)
    c = count_params(_model())
    assert c.by_kind["msa_indexer"] == 57 * INDEX_BRANCH == 224_147_712
    assert c.total == 3 * dense + 57 * sparse_moe + 2 * 200064 * 6144 + 6144 == 426_174_572_928
    assert abs(c.total - 428e9) <= 0.005 * 428e9
    assert c.mtp == 0  # the 7 MTP modules are not built (no mtp.* weights in the checkpoint)


def test_index_branch_is_whole_on_every_tp_rank():
    m = _model()
    assert msa_indexer_params(m) == INDEX_BRANCH
    assert layer_shard(m, 3, tp=2)["msa_indexer"].rep == INDEX_BRANCH
    assert "msa_indexer" not in layer_shard(m, 2, tp=2)  # a dense-attention layer


# ----- keys per query, FLOPs, activations -----------------------------------------------------


def test_sparse_context_counts_the_selected_blocks_by_hand():
    """B = 4, k = 2, s = 16 by enumeration: queries 0-7 read 1..8 keys (36); queries 8-15 read their own
    block's i mod 4 + 1 keys and one full block of 4: 5, 6, 7, 8, 5, 6, 7, 8 (52) → 88 / 16 = 5.5.
    M3 (B 128, k 16) at 4096: the first 2048 queries 2048·2049/2 = 2,098,176, the other 2048 each
    15·128 + 64.5 = 1984.5 → (2,098,176 + 4,064,256) / 4096 = 1504.5; up to 2048 tokens MSA reads
    every causal key."""
    brute = sum(i + 1 if i < 8 else 4 + i % 4 + 1 for i in range(16))
    assert brute == 88
    assert msa_causal_context(16, 4, 2) == (8.5, 5.5)
    assert msa_causal_context(4096, 128, 16) == (2048.5, 1504.5)
    assert msa_causal_context(2048, 128, 16) == (1024.5, 1024.5)
    # 2^20 tokens: 1984.5 − 2048·(1984.5 − 1024.5)/2^20 = 1984.5 − 1.875 = 1982.625
    assert msa_causal_context(2**20, 128, 16)[1] == 1982.625


def test_attention_compute_reduction_at_a_million_tokens_matches_the_paper():
    """Validation only (nothing here is fitted): MSA's paper reports 28.4× less per-token attention
    compute than GQA at 1M context (arXiv 2606.13392, abstract). Forward per query at 2^20 tokens with
    M3's shapes: GQA 4·8192·524,288.5; MSA the core 4·8192·1982.625 plus the index scores
    2·524,288.5·4·128 → 17,179,885,568 / (64,966,656 + 536,871,424) = 28.55, within 1 %."""
    dense, sparse = msa_causal_context(2**20, 128, 16)
    gqa = 4 * 8192 * dense
    msa = 4 * 8192 * sparse + 2 * dense * 4 * 128
    assert (gqa, msa) == (17_179_885_568, 64_966_656 + 536_871_424)
    assert gqa / msa == pytest.approx(28.4, rel=0.01)


def test_model_flops_of_the_sparse_layers_by_hand():
    """Per token at 4096, one MSA layer: core 3·4·8192·1504.5 = 147,898,368; index projections
    4·6144·640 = 15,728,640 (forward and weight gradient, inputs detached); index scores
    2·2048.5·512 + 4·1504.5·512 = 5,178,880 (forward over every causal key, the KL gradient over the
    selected ones). The 3 dense-attention layers keep Bridge's 6·s²·q."""
    f = model_flops(_model(), 4096)
    assert f.parts["msa_indexer"] == 57 * 4096 * (15_728_640 + 5_178_880)
    assert f.parts["attention_quadratic"] == 3 * 6 * 4096**2 * 8192 + 57 * 4096 * 147_898_368


def test_executed_flops_of_an_msa_layer_by_hand():
    """Layer 3 on one TP-2 rank, 4096 tokens of a 4096-token sequence, against the same layer with
    full attention: the index projections add 4096·15,728,640/3 = 21,474,836,480 to the GEMMs (whole
    on every rank); the core reads 1504.5 keys per query instead of 2048: 2·4096·1504.5·2·8192/2
    = 100,965,285,888, plus the index scores 4096·5,178,880/3."""
    m = _model()
    full = m.with_overrides({"msa_layers": None})
    sparse = layer_flops(m, 3, 4096, 4096, 4096, tp=2, cp=1, ep=32, routing_factor=1.0)
    dense = layer_flops(full, 3, 4096, 4096, 4096, tp=2, cp=1, ep=32, routing_factor=1.0)
    assert sparse.dense_gemm - dense.dense_gemm == pytest.approx(21_474_836_480)
    assert dense.attention_core == 2 * 4096 * 2048 * 2 * 8192 / 2
    assert sparse.attention_core == pytest.approx(100_965_285_888 + 4096 * 5_178_880 / 3)


def test_msa_layer_keeps_its_block_ids_and_index_query_key():
    """4096 tokens, BF16: block ids 4096·4·16·4 = 1,048,576 bytes (int32 per query and index head) and
    the index query and key 4096·(4·128 + 128)·2 = 5,242,880 bytes; both go with core_attn recompute."""
    m = _model()
    ctx = ActContext(tokens=4096, seq_local=4096, micro_batch_size=1, tp=2, sp=True, etp=1)
    kept, _ = layer_activations(m, 3, ctx, frozenset())
    assert (kept["msa_block_ids"], kept["msa_index_qk"]) == (1_048_576, 5_242_880)
    kept, rec = layer_activations(m, 3, ctx, frozenset({"core_attn"}))
    assert "msa_block_ids" not in kept and rec["msa_index_qk"] == 5_242_880
    dense_kept, _ = layer_activations(m, 2, ctx, frozenset())
    assert "msa_block_ids" not in dense_kept


# ----- check and estimate ---------------------------------------------------------------------


def _scenario(seq: int, **overrides):
    return load_scenario(
        {
            "model": "MiniMaxAI/MiniMax-M3",
            "system": {"gpu": "h100", "num_gpus": 256},
            "training": {"seq_length": seq, "micro_batch_size": 1, "global_batch_size": 512, "precision": "bf16"},
            "layout": {"tensor_model_parallel_size": 2, "pipeline_model_parallel_size": 4},
            "model_overrides": overrides,
        }
    )


def test_check_refuses_msa_for_want_of_a_megatron_implementation():
    result = validate(_scenario(4096))
    hit = [f for f in result.errors if f.rule_id == "msa.no_megatron_implementation"]
    assert len(hit) == 1 and result.verdict == "unsupported"
    assert hit[0].message == (
        "MiniMax Sparse Attention on 57 layers (each query reads its top-16 blocks of 128 tokens, at most 2048 "
        "keys): no Megatron release or branch implements it, so Megatron cannot train this model as designed; "
        "Megatron Bridge trains MiniMax-M3 with full causal attention on every layer and leaves the index branch "
        "unused"
    )
    assert "at seq_length 4096 above 2048 tokens that is an approximation of MSA" in hit[0].fix
    short = [f for f in validate(_scenario(2048)).errors if f.rule_id == "msa.no_megatron_implementation"]
    assert "the same attention as MSA's up to 2048 tokens" in short[0].fix


def test_the_model_bridge_trains_passes_the_rule():
    result = validate(_scenario(4096, msa_layers=None))
    assert "msa.no_megatron_implementation" not in {f.rule_id for f in result.findings}


def test_check_names_the_refusal_and_exits_1():
    r = runner.invoke(app, ["check", "--model", "MiniMax-M3", "--seq-length", "4096", *LAYOUT])
    assert r.exit_code == 1
    assert "msa.no_megatron_implementation" in r.output


def test_estimate_gives_the_msa_figures_and_says_megatron_cannot_run_them():
    r = runner.invoke(
        app, ["estimate", "--model", "MiniMax-M3", "--seq-length", "4096", "--precision", "bf16", *LAYOUT]
    )
    text = " ".join(r.output.split())
    assert r.exit_code in (0, 1), r.output
    assert "step time" in text and "not estimated" not in text
    assert "no Megatron implementation exists (check refuses it)" in text
    assert "run at the dense attention kernel's rate (no training kernel figure for block-sparse attention" in text
    assert "7 MiniMax MTP modules are not built: Megatron Bridge's MiniMax-M3 bridge maps none" in text


def test_estimate_in_chinese_translates_the_msa_notes():
    r = runner.invoke(
        app,
        ["estimate", "--model", "MiniMax-M3", "--seq-length", "4096", "--precision", "bf16", *LAYOUT, "--lang", "zh"],
    )
    assert "MiniMax 稀疏注意力按其机制计算成本" in " ".join(r.output.split())
