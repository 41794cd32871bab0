"""CUDA-graph memory as Megatron-Core / Transformer Engine allocate it (moeplan.model.memory.graph_memory).

Expected byte counts are derived by hand in the comments from the shapes Megatron builds (sources in
the module docstring): T = SP-local tokens per microbatch = seq / CP / TP (with SP), bf16 = 2 bytes.
"""

from __future__ import annotations

import pytest

from moeplan import estimate_memory, load_scenario
from moeplan.model.memory.graph_memory import captured_parts

GRAPH_ITEMS = ("cuda_graph_static_inputs", "cuda_graph_static_outputs", "cuda_graph_grad_buffers")


def _graphs(stage) -> dict[str, float]:
    return {k: v for k, v in stage.items["other"].items() if k in GRAPH_ITEMS}


def _llama(layout: dict, seq: int = 8192, gpus: int = 12, versions: dict | None = None) -> list:
    """Llama-3.1-8B (h 4096, 32 heads, kv_channels 128) cut to 12 layers: PP 3 → 4 layers a stage."""
    lay = {"tensor_model_parallel_size": 2, "context_parallel_size": 2, "pipeline_model_parallel_size": 3}
    lay.update(layout)
    s = load_scenario(
        {
            "model": "llama-3.1-8b",
            "model_overrides": {"num_layers": 12},
            "system": {"gpu": "h100", "num_gpus": gpus},
            "training": {"seq_length": seq, "micro_batch_size": 1, "global_batch_size": 8, "precision": "bf16"},
            "layout": lay,
            "versions": versions or {},
        }
    )
    return estimate_memory(s).stages


def test_attn_scope_tp2_sp_cp2_by_hand():
    # TE, attn scope, TP 2 + SP, CP 2, seq 8192, h 4096, bf16; stage 0: 4 layers, 3 in flight (PP 3).
    # mask per sample [1, 1, 8192/2, 8192] bool = 4096·8192 = 33,554,432 B; 4 layers × 3 samples = 12
    #   → 402,653,184; + one rotary table [8192, 1, 1, 128] fp32 = 4,194,304 → 406,847,488.
    # outputs: attention's output is the residual the eager MLP norm saves → no term.
    # grad surfaces: T = 8192/2/2 = 2048; T·h·2 = 16,777,216; one grad-output set (16,777,216)
    #   + two grad inputs (33,554,432) = 50,331,648.
    stages = _llama({"sequence_parallel": True, "cuda_graph_impl": "transformer_engine", "cuda_graph_scope": ["attn"]})
    assert stages[0].inflight_microbatches == 3 and stages[0].num_layers == 4
    assert _graphs(stages[0]) == {"cuda_graph_static_inputs": 406_847_488, "cuda_graph_grad_buffers": 50_331_648}
    # stage 2 (last): 1 in flight → 4 masks = 134,217,728 + 4,194,304 = 138,412,032
    assert _graphs(stages[2])["cuda_graph_static_inputs"] == 138_412_032


def test_attn_scope_without_dataloader_mask():
    # create_attention_mask_in_dataloader: false on megatron-core dev (PR #5131): only the shared rotary
    # table is left; a release builds the [1, 1, 4096, 8192] bool mask per captured sample regardless
    lay = {
        "sequence_parallel": True,
        "cuda_graph_impl": "transformer_engine",
        "cuda_graph_scope": ["attn"],
        "create_attention_mask_in_dataloader": False,
    }
    assert _graphs(_llama(lay, versions={"megatron_core": "0.19.0+dev"})[0])["cuda_graph_static_inputs"] == 4_194_304
    released = _graphs(_llama(lay, versions={"megatron_core": "0.19.0"})[0])["cuda_graph_static_inputs"]
    assert released > 4_194_304 and (released - 4_194_304) % (4096 * 8192) == 0


def test_local_full_layer_no_mask_no_output_copy():
    # local (CudaGraphManager): takes the real args (no dummy mask) and hands each graph's output to the
    # next graph as its input → only the grad surfaces: 16,777,216 + 2 × 16,777,216 = 50,331,648
    stages = _llama({"sequence_parallel": True, "cuda_graph_impl": "local"})
    assert _graphs(stages[0]) == {"cuda_graph_grad_buffers": 50_331_648}


def test_te_full_layer_keeps_layer_output_per_sample():
    # TE, whole layer: the layer output is copied into the next graph's static input, the pool keeps the
    # output per sample: T·h·2 = 16,777,216 × 4 layers × 3 samples = 201,326,592
    stages = _llama({"sequence_parallel": True, "cuda_graph_impl": "transformer_engine"})
    assert _graphs(stages[0])["cuda_graph_static_outputs"] == 201_326_592


def test_full_iteration_static_batches():
    # full_iteration, seq 4096, MBS 1, GBS 8 on DP 1 → 8 microbatches; first and last stages hold the
    # data batch of each: 4096 tokens × 28 B (tokens, labels, position_ids int64, loss_mask fp32)
    # = 114,688 + the dataloader mask 4096² = 16,777,216 → 16,891,904 × 8 = 135,135,232
    stages = _llama(
        {"tensor_model_parallel_size": 1, "context_parallel_size": 1, "cuda_graph_impl": "full_iteration"},
        seq=4096,
        gpus=3,
    )
    assert _graphs(stages[0]) == {"cuda_graph_static_inputs": 135_135_232}
    assert _graphs(stages[2]) == {"cuda_graph_static_inputs": 135_135_232}
    assert _graphs(stages[1]) == {}  # no data iterator on a middle stage
    assert "cuda_graph_pool" in stages[1].items["other"]


def test_no_graphs_no_terms():
    stages = _llama({"sequence_parallel": True})
    for st in stages:
        assert not [k for k in st.items["other"] if k.startswith("cuda_graph")]


def _qwen30b(scope: list[str], dispatcher: str, modules: list[str], backend: str | None = None):
    """Qwen3-30B-A3B (48 MoE layers, h 2048, 128 experts, top-8), TP 1, PP 1, EP 8, seq 4096."""
    lay = {
        "expert_model_parallel_size": 8,
        "moe_token_dispatcher_type": dispatcher,
        "recompute_granularity": "selective",
        "recompute_modules": modules,
        "cuda_graph_impl": "transformer_engine",
        "cuda_graph_scope": scope,
    }
    if backend:
        lay["moe_flex_dispatcher_backend"] = backend
    s = load_scenario(
        {
            "model": "qwen3-30b-a3b",
            "system": {"gpu": "h100", "num_gpus": 8},
            "training": {"seq_length": 4096, "micro_batch_size": 1, "global_batch_size": 8, "precision": "bf16"},
            "layout": lay,
        }
    )
    return estimate_memory(s).stages[0]


def test_moe_preprocess_alltoall_permuted_tokens():
    # alltoall + preprocess: the pre-MLP norm recompute stays on; the permuted tokens [T·k, h] bf16 and
    # probs [T·k] fp32 are static outputs: 4096·8·(2048·2 + 4) = 134,348,800 per layer; PP 1 → one
    # microbatch captured; 48 layers → 6,448,742,400
    # grad: widest graph 134,348,800 + 2·T·h·2 (norm-out slot + residual: 2 × 16,777,216) = 167,903,232,
    #   + two grad inputs 33,554,432 = 201,457,664
    st = _qwen30b(["moe_router", "moe_preprocess"], "alltoall", ["layernorm", "moe_act"])
    assert _graphs(st) == {"cuda_graph_static_outputs": 6_448_742_400, "cuda_graph_grad_buffers": 201_457_664}


def test_moe_preprocess_hybridep_holds_norm_output():
    # flex/HybridEP + preprocess: Megatron turns the pre-MLP norm recompute off, the norm output
    # [T, h] bf16 = 16,777,216 is held; routing map + probs expanded to [T, ETP·E] bool + fp32 =
    # 4096·128·5 = 2,621,440 → 19,398,656 per layer × 48 = 931,135,488
    st = _qwen30b(["moe_router", "moe_preprocess"], "flex", ["layernorm", "moe_act"], backend="hybridep")
    assert _graphs(st)["cuda_graph_static_outputs"] == 931_135_488


def test_moe_router_without_layernorm_recompute_adds_no_outputs():
    # router only, norm output already counted in the activations (no layernorm recompute): no output term;
    # grad surfaces: 2 × 16,777,216 + 2 × 16,777,216 = 67,108,864
    st = _qwen30b(["moe_router"], "alltoall", ["moe_act"])
    assert _graphs(st) == {"cuda_graph_grad_buffers": 67_108_864}


@pytest.mark.parametrize(
    ("scopes", "moe", "expected"),
    [
        ([], True, (True, True, False, False)),
        (["attn"], True, (True, False, False, False)),
        (["moe_router", "moe_preprocess"], True, (False, False, True, True)),
        (["moe_router"], False, (False, False, False, False)),  # a dense layer has no router graph
        (["attn", "mlp"], False, (True, True, False, False)),
        (["moe"], True, (False, True, False, False)),
    ],
)
def test_captured_parts(scopes, moe, expected):
    p = captured_parts(scopes, moe)
    assert (p.attn, p.mlp_whole, p.router, p.preprocess) == expected


def _mask_rule_ids(layout: dict, seq: int, megatron_core: str | None = None) -> tuple[list[str], dict]:
    from moeplan import validate

    s = load_scenario(
        {
            "model": "llama-3.1-8b",
            "system": {"gpu": "h100", "num_gpus": 8},
            "training": {"seq_length": seq, "micro_batch_size": 1, "global_batch_size": 8},
            "layout": {"tensor_model_parallel_size": 2, "context_parallel_size": 2, **layout},
            "versions": {"megatron_core": megatron_core} if megatron_core else {},
        }
    )
    res = {r.key: r.value for r in s.resolutions}
    return validate(s).rule_ids("warning"), res


def test_mask_rule_and_resolution():
    # TE attn at 32K, CP 2: one mask 16384·32768 B = 0.5 GiB ≥ 64 MiB → warning; unset key resolved true
    ids, res = _mask_rule_ids({"cuda_graph_impl": "transformer_engine", "cuda_graph_scope": ["attn"]}, 32768)
    assert "graphs.static_attention_masks" in ids
    assert res["create_attention_mask_in_dataloader"] is True
    # stated false on megatron-core dev (PR #5131): no warning, nothing resolved; on a release the graphs
    # still build the mask, so the warning stays
    off = {
        "cuda_graph_impl": "transformer_engine",
        "cuda_graph_scope": ["attn"],
        "create_attention_mask_in_dataloader": False,
    }
    ids, res = _mask_rule_ids(off, 32768, "0.19.0+dev")
    assert "graphs.static_attention_masks" not in ids and "create_attention_mask_in_dataloader" not in res
    assert "graphs.static_attention_masks" in _mask_rule_ids(off, 32768, "0.19.0")[0]
    # 4K: one mask 2048·4096 B = 8 MiB < 64 MiB → no warning; router-only scope keeps no mask at all
    assert "graphs.static_attention_masks" not in _mask_rule_ids({"cuda_graph_impl": "transformer_engine"}, 4096)[0]
    ids, res = _mask_rule_ids({"cuda_graph_impl": "local"}, 32768)
    assert "graphs.static_attention_masks" not in ids and "create_attention_mask_in_dataloader" not in res
