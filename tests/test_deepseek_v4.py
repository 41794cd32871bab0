"""DeepSeek-V4 (Flash, Pro): compressed sparse attention, manifold hyper-connections, grouped low-rank
output projection and hash-routed MoE layers, each checked against hand arithmetic from its source.

Sources: megatron-core dev @d48bd6b (``deepseek_v4_hybrid_attention.py``, ``csa.py``,
``hyper_connection.py``, ``moe/router.py``, ``transformer_config.py``), Megatron Bridge v0.6.0
(``deepseek_v4_bridge.py``, ``training/utils/flop_utils.py``, ``docs/performance-summary.md``), the
DeepSeek-V4 model cards (284B / 13B activated; 1.6T / 49B activated).
"""

from __future__ import annotations

import json
import pathlib

import pytest

from moeplan.errors import InputError
from moeplan.inputs.model_spec import ModelSpec, model_from_hf_config
from moeplan.io.driver_configs import import_any
from moeplan.io.dsv4_recipe import ratio_list
from moeplan.model.activations import ActContext, layer_activations
from moeplan.model.executed_flops import layer_flops
from moeplan.model.step import estimate_step
from moeplan.resolve.load import load_scenario
from moeplan.rules import RULES, validate
from moeplan.structure import dsv4_shapes
from moeplan.structure.flops import model_flops
from moeplan.structure.params import count_params

ROOT = pathlib.Path(__file__).resolve().parents[1]
HF = ROOT / "tests" / "data" / "hf_configs"
RECIPES = ROOT / "tests" / "data" / "recipes" / "megatron_lm"


def _model(name: str) -> ModelSpec:
    cfg = json.loads((HF / f"deepseek-ai--DeepSeek-V4-{name}.json").read_text(encoding="utf-8"))
    return model_from_hf_config(cfg, f"deepseek-ai/DeepSeek-V4-{name}")


FLASH, PRO = _model("Flash"), _model("Pro")


# ----- the config mapping ------------------------------------------------------------------------


def test_flash_config_maps_to_megatron_dsv4_fields():
    m = FLASH
    # Bridge provider_bridge: v_head_dim = head_dim; megatron-core derives qk_head_dim = kv_lora_rank = 512 - 64
    assert (m.v_head_dim, m.qk_pos_emb_head_dim, m.qk_head_dim, m.kv_lora_rank) == (512, 64, 448, 448)
    assert (m.o_groups, m.o_lora_rank, m.csa_window_size) == (8, 1024, 128)
    assert (m.dsa_indexer_n_heads, m.dsa_indexer_head_dim, m.dsa_indexer_topk) == (64, 128, 512)
    assert (m.num_residual_streams, m.moe_n_hash_layers, m.mtp_num_layers) == (4, 3, 1)
    # 44 ratios: 43 decoder layers + the MTP layer's 0
    assert m.csa_compress_ratios == (0, 0) + (4, 128) * 20 + (4,) and m.csa_mtp_compress_ratio == 0
    assert m.is_dsv4 and not m.has_dsa and not m.clamped_glu  # swiglu_limit clamps a SiLU SwiGLU


def test_config_with_too_few_ratios_names_the_field():
    cfg = json.loads((HF / "deepseek-ai--DeepSeek-V4-Flash.json").read_text(encoding="utf-8"))
    cfg["compress_ratios"] = [0, 4]
    with pytest.raises(InputError) as exc:
        model_from_hf_config(cfg, "x")
    assert exc.value.field == "config.json:compress_ratios"
    cfg["compress_ratios"] = [0] * 43 + [8]
    with pytest.raises(InputError) as exc:
        model_from_hf_config(cfg, "x")
    assert exc.value.field == "config.json:compress_ratios"


# ----- parameters ----------------------------------------------------------------------------------


def _attention(h, nh, v, ql, g, o):
    # q down + q norm + q up + kv proj + kv norm + group proj (g·o × nh·v/g) + output proj + sinks
    return h * ql + ql + ql * nh * v + h * v + v + o * nh * v + g * o * h + nh


def _compressor(h, ratio, width):
    coff = 2 if ratio == 4 else 1  # overlapping windows at ratio 4
    return 2 * h * coff * width + ratio * coff * width + width  # wkv + wgate + ape + norm


def _expected(h, nh, v, ql, g, o, experts, fe, layers, n4, n128, mtp_ratio=0):
    """Decoder total and MTP block of a DeepSeek-V4 config, by hand (no hash layer in the MTP)."""
    ni, di, n, vocab = 64, 128, 4, 129280
    indexer = ql * ni * di + h * ni + _compressor(h, 4, di)
    hc = 2 * (n * h * (n * n + 2 * n) + 3 + (n * n + 2 * n))  # two HyperConnectionModules per layer
    hc_head = n * n * h + n + 1
    moe = h * experts + experts + experts * 3 * h * fe + 3 * h * fe  # router, expert bias, experts, shared
    layer = _attention(h, nh, v, ql, g, o) + hc + moe + 2 * h
    total = layers * layer + n4 * (_compressor(h, 4, v) + indexer) + n128 * _compressor(h, 128, v)
    total += -3 * experts + 2 * vocab * h + h + hc_head  # 3 hash layers: no expert bias; embed, head, norm
    mtp = 2 * h * h + 3 * h + layer + hc_head  # e_proj, h_proj; enorm, hnorm, final norm; its own hc head
    return total, mtp


def test_flash_parameters_match_the_published_total():
    total, mtp = _expected(4096, 64, 512, 1024, 8, 1024, 256, 2048, 43, n4=21, n128=20)
    c = count_params(FLASH)
    assert c.total == total == 284_332_240_471
    assert c.mtp == mtp
    # model card: 284B total (the decoder, MTP excluded as DeepSeek counts V3's 671B); 13B activated
    assert abs(c.total / 284e9 - 1) < 0.005
    assert round(c.active(input_embedding=False) / 1e9) == 13


def test_pro_parameters_match_the_published_total():
    total, mtp = _expected(7168, 128, 512, 1536, 16, 1024, 384, 3072, 61, n4=30, n128=31)
    c = count_params(PRO)
    assert c.total == total and c.mtp == mtp
    # model card: "1.6T" (two significant figures); the checkpoint holds the MTP layer: 1.5988T with it,
    # 1.5730T without (which also rounds to 1.6T)
    assert abs(c.total_with(mtp=True) / 1.6e12 - 1) < 0.005
    assert round(c.total / 1e11) == 16
    assert abs(c.active(input_embedding=False) / 49e9 - 1) < 0.005  # 49B activated


def test_hash_layers_have_no_expert_bias():
    # moe/router.py: enable_expert_bias = moe_router_enable_expert_bias and not is_hash_layer
    from moeplan.structure.params import layer_shard

    assert layer_shard(FLASH, 2)["router"].total == 4096 * 256
    assert layer_shard(FLASH, 3)["router"].total == 4096 * 256 + 256


# ----- FLOPs -----------------------------------------------------------------------------------


def test_flash_model_flops_are_bridges_dsv4_count():
    """Bridge v0.6.0 flop_utils.py dsv4_hybrid branch, by hand, per token at s = 4096 (44 attention
    layers: 43 + MTP; ratios 0 ×3, 4 ×21, 128 ×20)."""
    h, nh, v, ql, g, o, w, s = 4096, 64, 512, 1024, 8, 1024, 128, 4096
    q = ql * (h + nh * (448 + 64) + 1)
    kv = h * v + v
    out = nh * v * o + g * o * h
    proj = 44 * (q + kv + out)
    k = min(512, s // 4)
    sparse = (
        3 * nh * w * v * 2 + 20 * nh * (w + (s // 128) / 2) * v * 2 + 21 * nh * (w + k * (1 - k * 4 / (2 * s))) * v * 2
    )
    compressors = 21 * h * 2 * v * 2 + 20 * h * v * 2
    indexers = 21 * (h * 2 * 128 * 2 + ql * 64 * 128 + h * 64 + 64 * 128 * (s // 4))
    mlp = h * (2048 * 3 * 6 * 44 + 2048 * 3 * 44)  # 6 of 256 routed + 1 shared, 43 + MTP MoE layers
    mtp_proj = 3 * h + 2 * h * h
    logits = h * 129280 * 2  # vocabulary 129280 is a multiple of 128: no padding
    per_token = 6 * (proj + sparse + compressors + indexers + mlp + mtp_proj + logits)
    f = model_flops(FLASH, s)
    assert f.per_token == pytest.approx(per_token, rel=1e-12)
    # Bridge 26.08 performance summary, DeepSeekV4 Flash: GB200 706 TFLOP/s at 7776 tokens/s, GB300 748 at
    # 8224 (rounded figures: ±0.1 % and more)
    assert f.per_token == pytest.approx(706e12 / 7776, rel=0.002)
    assert f.per_token == pytest.approx(748e12 / 8224, rel=0.005)


def test_executed_attention_reads_the_compressed_context():
    """Executed forward FLOPs of one layer (csa.py): the core attends the 128-token window plus the
    compressed keys, not the whole causal context (the sparse kernel's part plus the indexer's scores)."""
    s, nh, v = 65536, 64, 512
    tokens = float(s)
    f128 = layer_flops(FLASH, 3, tokens, s, s, 1, 1, 64, 1.0)  # ratio 128
    assert f128.attention_core + f128.sparse_core == pytest.approx(
        tokens * 2 * nh * (128 + s / 128 / 2) * v * 2, rel=1e-12
    )
    f4 = layer_flops(FLASH, 2, tokens, s, s, 1, 1, 64, 1.0)  # ratio 4: top-512 of s/4 entries + indexer scores
    k = 512 * (1 - 512 * 4 / (2 * s))
    core4 = nh * (128 + k) * v * 2 + 64 * 128 * s / 4 / 2
    assert f4.attention_core + f4.sparse_core == pytest.approx(tokens * 2 * core4, rel=1e-12)
    f0 = layer_flops(FLASH, 0, tokens, s, s, 1, 1, 64, 1.0)  # window only
    assert f0.attention_core + f0.sparse_core == pytest.approx(tokens * 2 * nh * 128 * v * 2, rel=1e-12)
    # full causal attention over 64K reads s/2 = 32768 keys per query: 85× the ratio-128 layer's 128 + 256
    assert (f128.attention_core + f128.sparse_core) * 85 == pytest.approx(tokens * 2 * nh * (s / 2) * v * 2, rel=0.01)


def test_hyper_connection_flops_and_params_per_module():
    # HyperConnectionModule: mapping_proj (n·h)·(n²+2n) + aggregate n·h + expand n·h + mix n²·h
    h, n = 4096, 4
    assert dsv4_shapes.hc_mix_macs(FLASH) == n * h * 24 + 2 * n * h + n * n * h
    assert dsv4_shapes.hc_module_params(FLASH) == n * h * 24 + 3 + 24
    assert dsv4_shapes.hc_head_params(FLASH) == n * n * h + n + 1


# ----- activations ---------------------------------------------------------------------------------


def test_activations_keep_the_streams_and_mhc_recompute_drops_the_intermediates():
    tokens, h, n = 4096.0, 4096, 4
    c = ActContext(tokens=tokens, seq_local=tokens, micro_batch_size=1, tp=1, sp=False, etp=1)
    kept, rec = layer_activations(FLASH, 3, c, frozenset())
    assert kept["hc_streams"] == 2 * tokens * n * h * 2  # two modules' n-stream inputs, bf16
    assert kept["hc_coefficients"] == 2 * tokens * (n * n + 2 * n + 1) * 4  # fp32 mixing + 1/rms
    assert "csa_topk_indices" not in kept  # ratio 128: no indexer
    kept2, rec2 = layer_activations(FLASH, 2, c, frozenset({"mhc"}))
    assert rec2["hc_coefficients"] == kept["hc_coefficients"]
    assert rec2["attn_norm_input"] == tokens * h * 2  # the aggregated stream
    assert kept2["csa_topk_indices"] == tokens * 512 * 4  # int32 top-k per query on ratio-4 layers
    assert rec == {}


# ----- rules ---------------------------------------------------------------------------------------


def _findings(extra: dict) -> dict[str, list]:
    sc = {
        "model": "deepseek-ai/DeepSeek-V4-Flash",
        "system": {"gpu": "gb300", "num_gpus": 128},
        "training": {"seq_length": 4096, "micro_batch_size": 1, "global_batch_size": 2048, "precision": "mxfp8"},
        "layout": {"expert_model_parallel_size": 64},
        **extra,
    }
    out: dict[str, list] = {}
    for f in validate(load_scenario(sc)).findings:
        if f.rule_id.startswith("dsv4."):
            out.setdefault(f.rule_id, []).append(f)
    return out


def test_a_release_cannot_build_deepseek_v4():
    bad = _findings({"versions": {"megatron_core": "0.19.0"}})["dsv4.needs_dev_branch"][0]
    assert bad.severity == "error" and "megatron-core 0.19.0" in bad.message
    unstated = _findings({})["dsv4.needs_dev_branch"][0]
    assert unstated.severity == "warning"
    assert "dsv4.needs_dev_branch" not in _findings({"versions": {"megatron_core": "0.19.0+dev"}})
    assert "enable_hyper_connections (num_residual_streams 4)" in bad.message  # main 0.20.0 has them
    assert (
        "enable_hyper_connections"
        not in _findings({"versions": {"megatron_core": "0.20.0"}})["dsv4.needs_dev_branch"][0].message
    )


def test_tensor_parallel_must_be_one():
    f = _findings({"versions": {"megatron_core": "0.19.0+dev"}, "layout": {"tensor_model_parallel_size": 2}})
    assert f["dsv4.tensor_parallel_one"][0].message.startswith("TP = 2")


def test_hash_layers_must_sit_on_the_embedding_stage():
    base = {"versions": {"megatron_core": "0.19.0+dev"}}
    no_layout = _findings({**base, "layout": {"pipeline_model_parallel_size": 2}})
    assert "pipeline_model_parallel_layout" in no_layout["dsv4.hash_layers_on_embedding_stage"][0].message
    short = _findings(
        {**base, "layout": {"pipeline_model_parallel_size": 2, "pipeline_model_parallel_layout": "Et*2|t*41mL"}}
    )
    assert "holds 2 decoder layers, fewer than the 3" in short["dsv4.hash_layers_on_embedding_stage"][0].message
    ok = _findings(
        {**base, "layout": {"pipeline_model_parallel_size": 2, "pipeline_model_parallel_layout": "Et*21|t*22mL"}}
    )
    assert "dsv4.hash_layers_on_embedding_stage" not in ok


def test_mtp_with_hyper_connections_needs_the_dev_branch():
    main = _findings({"versions": {"megatron_core": "0.20.0"}})
    assert main["dsv4.mtp_with_hyper_connections"][0].severity == "error"
    assert "dsv4.mtp_with_hyper_connections" not in _findings({"versions": {"megatron_core": "0.19.0+dev"}})
    assert "dsv4.mtp_with_hyper_connections" not in _findings(
        {"versions": {"megatron_core": "0.20.0"}, "layout": {"mtp_num_layers": 0}}
    )


def test_mhc_recompute_excludes_mlp():
    lay = {"recompute_granularity": "selective", "recompute_modules": ["mhc", "mlp"]}
    f = _findings({"versions": {"megatron_core": "0.19.0+dev"}, "layout": lay})
    assert "'mhc' and 'mlp'" in f["dsv4.mhc_recompute"][0].message
    ok = _findings({"versions": {"megatron_core": "0.19.0+dev"}, "layout": {**lay, "recompute_modules": ["mhc"]}})
    assert "dsv4.mhc_recompute" not in ok


# ----- Megatron-LM recipes -------------------------------------------------------------------------


def test_ratio_expression_is_read_as_megatron_evaluates_it():
    assert ratio_list("([0,0,4]+[128,4]*20+[0])") == [0, 0, 4] + [128, 4] * 20 + [0]
    with pytest.raises(InputError) as exc:
        ratio_list("([0,8])")
    assert exc.value.field == "csa_compress_ratios"


@pytest.mark.parametrize(
    "path",
    [
        "deepseek_v4_flash/gb300/mxfp8_SL4K_128GPU_TP1PP1EP64.yaml",
        "deepseek_v4_flash/gb200/mxfp8_THD4K_128GPU_TP1PP2EP64.yaml",
    ],
)
def test_flash_recipes_build_the_flash_model(path):
    sc, notes = import_any((RECIPES / path).read_text(encoding="utf-8"), "megatron-lm-yaml")
    # the recipe names a tokenizer (vocabulary 129280) and states MTP as the layout's mtp_num_layers
    more = {"vocab_size": 129280, "mtp_num_layers": sc["layout"]["mtp_num_layers"]}
    m = load_scenario(sc).model.with_overrides(more).completed()
    assert count_params(m).total == count_params(FLASH).total
    assert count_params(m).mtp == count_params(FLASH).mtp
    assert any("use_fused_mhc=True: a DeepSeek-V4 setting moeplan does not model" in n for n in notes)


def test_hybrid_pattern_stages_become_a_pipeline_layout():
    text = (RECIPES / "deepseek_v4_flash/gb200/mxfp8_THD4K_128GPU_TP1PP2EP64.yaml").read_text(encoding="utf-8")
    sc, _ = import_any(text, "megatron-lm-yaml")
    # WEWECEHE | CEHE×3 ×6 | CEHECE / WE: 4 + 6·6 + 3 = 43 layers, VPP 8 stages / PP 2 = 4
    assert sc["layout"]["pipeline_model_parallel_layout"] == "Et*4|" + "t*6|" * 6 + "t*3mL"
    assert sc["layout"]["virtual_pipeline_model_parallel_size"] == 4
    bad = text.replace("WEWECEHE|", "WEWEHECE|")
    with pytest.raises(InputError) as exc:
        import_any(bad, "megatron-lm-yaml")
    assert exc.value.field == "hybrid_layer_pattern"


def test_flash_gb300_layout_estimates():
    """Bridge 26.08 DeepSeekV4 Flash, GB300: 128 GPUs, MXFP8, GBS 2048, MBS 1, seq 4096, TP1 PP1 EP64:
    748 model TFLOP/s/GPU (validation only: the figure is reported, not fitted)."""
    sc = {
        "model": "deepseek-ai/DeepSeek-V4-Flash",
        "versions": {"megatron_core": "0.19.0+dev"},
        "system": {"gpu": "gb300", "num_gpus": 128},
        "training": {"seq_length": 4096, "micro_batch_size": 1, "global_batch_size": 2048, "precision": "mxfp8"},
        "layout": {
            "expert_model_parallel_size": 64,
            "recompute_granularity": "selective",
            "recompute_modules": ["mla_up_proj"],
            "moe_token_dispatcher_type": "flex",
            "moe_flex_dispatcher_backend": "hybridep",
        },
    }
    est = estimate_step(load_scenario(sc))
    per_token = model_flops(FLASH, 4096).per_token
    assert est.model_tflops_per_gpu == pytest.approx(est.tokens_per_s_per_gpu * per_token / 1e12, rel=1e-6)
    assert 300 < est.model_tflops_per_gpu < 1500
    # the estimate says what its DeepSeek-V4 terms rest on, where it is read
    assert any(
        n.startswith("DeepSeek-V4: each layer's attention core reads its 128-token window") for n in est.assumptions
    )


def test_contiguous_context_parallel_accepts_deepseek_v4_attention():
    """megatron-core dev transformer_config.py: cp_partition_mode 'contiguous' refuses MLA except
    DeepSeek-V4's hybrid attention, and needs THD packing."""
    sc = {
        "versions": {"megatron_core": "0.19.0+dev"},
        "layout": {"context_parallel_size": 2, "cp_partition_mode": "contiguous"},
    }
    for packed, expected in ((True, []), (False, ["THD inputs"])):
        found = [
            f.message
            for f in validate(
                load_scenario(
                    {**sc, "model": "deepseek-ai/DeepSeek-V4-Flash", "training": {"packed_sequences": packed}}
                )
            ).findings
            if f.rule_id == "sequence.cp_partition_mode" and f.severity == "error"
        ]
        assert all("multi-latent" not in t for t in found)
        assert [e for e in expected if not any(e in t for t in found)] == []
        assert bool(found) == bool(expected)


def test_overrides_keep_one_ratio_per_layer():
    short = FLASH.with_overrides({"num_layers": 4})
    assert short.csa_compress_ratios == (0, 0, 4, 128)
    window_only = FLASH.with_overrides({"csa_compress_ratios": [0] * 43})
    assert count_params(window_only).total < count_params(FLASH).total  # no compressors, no indexers
    for bad in (
        {"csa_compress_ratios": [0, 8] * 21 + [0]},
        {"csa_compress_ratios": [0] * 42},
        {"moe_n_hash_layers": 44},
    ):
        with pytest.raises(InputError) as exc:
            FLASH.with_overrides(bad)
        assert exc.value.field == f"model_overrides.{next(iter(bad))}"


def test_context_parallel_moves_the_one_joint_kv_head():
    """csa.py: one KV head of v_head_dim (512) per token serves all 64 query heads, so context
    parallelism moves 512 elements of K/V per token, not MLA's 64 · (448 + 64 + 512)."""
    from moeplan.model.time.context import cp_widths

    sc = {
        "model": "deepseek-ai/DeepSeek-V4-Flash",
        "versions": {"megatron_core": "0.19.0+dev"},
        "system": {"gpu": "gb200", "num_gpus": 128},
        "training": {"seq_length": 65536, "micro_batch_size": 1, "global_batch_size": 128, "packed_sequences": True},
        "layout": {"context_parallel_size": 16, "expert_model_parallel_size": 64},
    }
    w = cp_widths(load_scenario(sc))
    assert (w.q, w.kv, w.o) == (64 * 512, 512, 64 * 512)


def test_stage_memory_shares_saved_tensors_only_between_layers_that_save_the_same():
    # ratios 0 (window only), 4 (indexer) and 128 keep different tensors though every layer is the same
    # attention kind and MoE: a stage must count each layer's own, not the first layer's of its kind
    from moeplan.model.activations import layer_saved_key

    c = ActContext(tokens=4096, seq_local=4096, micro_batch_size=1, tp=1, sp=False, etp=1)
    ratios = {dsv4_shapes.layer_ratio(FLASH, li): li for li in range(FLASH.num_layers)}
    assert {0, 4, 128} <= set(ratios)
    keys = {r: layer_saved_key(FLASH, li) for r, li in ratios.items()}
    assert len(set(keys.values())) == len(keys)
    totals = {r: sum(layer_activations(FLASH, li, c, frozenset())[0].values()) for r, li in ratios.items()}
    assert totals[0] != totals[4] != totals[128]
    same = [li for li in range(FLASH.num_layers) if layer_saved_key(FLASH, li) == keys[4]]
    assert all(
        layer_activations(FLASH, li, c, frozenset())[0] == layer_activations(FLASH, same[0], c, frozenset())[0]
        for li in same
    )


def test_the_dev_branch_rule_says_which_branches_have_deepseek_v4():
    # Megatron-LM main up to d98e8a6 (2026-08-22) never had dsv4_hybrid (no commit of main adds it);
    # 234919d (2026-07-23) is pull request 5795's branch, one commit off main's bb5647a, and has it
    release = _findings({"versions": {"megatron_core": "0.19.0"}})["dsv4.needs_dev_branch"][0]
    assert release.severity == "error"
    assert "pull request 5795's branch at 234919d" in release.message
    assert "on no main commit up to d98e8a6 (2026-08-22)" in release.message
    assert "only on megatron-core's dev branch" not in release.message
    assert "main up to @d98e8a6" in RULES["dsv4.needs_dev_branch"].source


def test_a_checkout_named_by_its_commit_alone_is_undecided_for_deepseek_v4():
    # 0.19.0+234919d40f: the version package_info.py reports at 234919d (the git hash appended), which has
    # dsv4_hybrid; the number does not say whether a checkout is of such a branch: a warning, not an error
    (found,) = _findings({"versions": {"megatron_core": "0.19.0+234919d40f"}})["dsv4.needs_dev_branch"]
    assert found.severity == "warning"
    assert "megatron-core 0.19.0+234919d40f is a checkout of commit 234919d40f" in found.message
    assert "moeplan cannot tell which" in found.message
