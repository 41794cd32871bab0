"""DeepSeek-V4's manifold hyper-connections timed kernel by kernel, as megatron-core runs them.

Sources: megatron-core dev @d48bd6b ``transformer/hyper_connection.py`` (``HyperConnectionModule``,
``BroadcastTensorFused``, the torch.compile ``native_*`` functions) and ``fusions/fused_mhc_kernels.py``
(Triton / cuTile kernels under ``use_fused_mhc``); Megatron Bridge v0.6.0 ``deepseek_v4_bridge.py``
(``use_fused_mhc`` from compute capability 10) and the 26.08 DeepSeek-V4-Flash perf recipes
(``perf_recipes/deepseek/gb200/deepseek_v4.py``: full-iteration CUDA graph, recompute ``mla_up_proj``).

DeepSeek-V4-Flash: hidden h = 4096, n = 4 streams, so one stream row N = n·h = 16384 elements (bf16: 32768
bytes), c = n² + 2n = 24 mapping outputs, 20 Sinkhorn iterations.
"""

from __future__ import annotations

import json
import pathlib

import pytest

from moeplan.catalog.gpus import measured_gemm_fractions
from moeplan.inputs.model_spec import model_from_hf_config
from moeplan.model.activations import layer_activations
from moeplan.model.constants import load_constants
from moeplan.model.dsv4_mhc import (
    MHC_HBM_FRACTION,
    MhcRates,
    mhc_kernels,
    mhc_layer_bytes,
    mhc_layer_launches,
    mhc_layer_s,
    mhc_recompute_s,
)
from moeplan.model.step import estimate_step
from moeplan.model.time import launch
from moeplan.model.time.compute import element_wise_bytes_per_activation_byte, layer_compute
from moeplan.model.time.context import step_context
from moeplan.model.time.launch import MOE_LAYER_LAUNCHES, launch_overhead
from moeplan.model.time.recompute_cost import selective_recompute_s
from moeplan.resolve.load import load_scenario
from moeplan.structure import dsv4_shapes

HF = pathlib.Path(__file__).resolve().parents[1] / "tests" / "data" / "hf_configs"
FLASH = model_from_hf_config(
    json.loads((HF / "deepseek-ai--DeepSeek-V4-Flash.json").read_text(encoding="utf-8")),
    "deepseek-ai/DeepSeek-V4-Flash",
)
TOKENS = 4096.0
#: one fused module, bytes per token, hand-summed from the kernels (x: the 32768-byte bf16 stream row):
#: forward: projection + RMS x + 25 fp32 partials (32868), mappings 25·4 read + 24·4 written (196),
#: Sinkhorn 16 fp32 in and out (128), three casts 24·(4+2) (144), aggregation (16384 + 4096 + 4)·2 (40968),
#: h_post_bda (2·16384 + 4096 + 16 + 4)·2 (73768): 148072;
#: backward: mapping gradients 3·100 (300), stream + weight gradients 2·32768 + 100 (65636), gate / bias
#: reductions 200, h_post_bda's two kernels 73768 each, aggregation (2·16384 + 4096 + 8)·2 (73744), casts
#: 144, Sinkhorn 3·64 (192), the three-way gradient add 4·32768 (131072): 418824
FUSED_MODULE_BYTES = 148072 + 418824
#: the native path's projection: fp32 copy 16384·(2+4) (98304), fp32 matmul 16384·4 + 100 (65636), RMS
#: 16384·4 + 4 (65540), mappings 196; backward mappings 300, dgrad + wgrad 16384·8 + 200 (131272), RMS
#: 16384·12 (196608), cast back 16384·6 (98304): 656160; the mixing as fused but for h_post_bda, which
#: natively is a bmm (2·16384 + 16)·2 (65568) and an add 73768: 418824 + 148072 − 32868 − 196 − 300
#: − 65636 − 200 − 73768 + 65568 + 73768 = 533264
NATIVE_MODULE_BYTES = 656160 + 533264


def _ctx(gpu: str, **layout):
    sc = {
        "model": "deepseek-ai/DeepSeek-V4-Flash",
        "system": {"gpu": gpu, "num_gpus": 128},
        "training": {"seq_length": 4096, "micro_batch_size": 1, "global_batch_size": 2048, "precision": "mxfp8"},
        "layout": {"tensor_model_parallel_size": 1, "expert_model_parallel_size": 64, **layout},
    }
    s = load_scenario(sc)
    return s, step_context(s, load_constants(), measured_gemm_fractions(s.gpu.id), None)


def test_fused_module_moves_the_stream_seventeen_times_per_token():
    assert sum(k.bytes for k in mhc_kernels(FLASH, 2.0, fused=True)) == FUSED_MODULE_BYTES == 566896
    # two modules a layer: 1 133 792 bytes a token, 4.644 GB over 4096 tokens
    assert mhc_layer_bytes(FLASH, TOKENS, 2.0, True) == pytest.approx(4096 * 1133792, rel=1e-12)


def test_native_path_adds_the_fp32_copy_of_the_stream_for_the_projection():
    assert sum(k.bytes for k in mhc_kernels(FLASH, 2.0, fused=False)) == NATIVE_MODULE_BYTES == 1189424


def test_projection_flops_are_the_mapping_gemm_forward_and_its_two_gradients():
    fused = {k.name: k for k in mhc_kernels(FLASH, 2.0, True)}
    # [T, 16384] × [16384, 24]: 2·16384·24 = 786432 per token, plus the sum of squares 2·16384
    assert fused["fwd.proj_rms"].flops == 786432 + 32768
    assert fused["bwd.grad_x_weight"].flops == 2 * 786432 + 4 * 16384
    # Sinkhorn: 20 iterations of a row and a column sum and divide on 4×4 = 1280
    assert fused["fwd.sinkhorn"].flops == 20 * 4 * 16


def test_fused_layer_time_is_its_bytes_at_the_streaming_fraction_of_hbm():
    # GB300: 8 TB/s, 0.835 of it; the projection's 25 FLOPs a byte stay under TF32's ridge, so bytes decide
    r = MhcRates(8e12, 2.5e15, fused=True)
    expected = 4096 * 1133792 / (8e12 * 0.835)  # 0.695 ms
    assert MHC_HBM_FRACTION == 0.835
    assert mhc_layer_s(FLASH, TOKENS, 2.0, r) == pytest.approx(expected, rel=1e-12)
    assert expected == pytest.approx(0.695e-3, rel=1e-3)


def test_native_projection_is_still_memory_bound_at_the_fp32_rate():
    # H100: 3.35 TB/s, FP32 67 TFLOP/s; the fp32 matmul: 786432 FLOPs on 65636 bytes a token, 12 FLOPs a
    # byte, under FP32's ridge of 67e12 / (3.35e12·0.835) = 24
    r = MhcRates(3.35e12, 989.4e12, fused=False)
    expected = 4096 * 2 * NATIVE_MODULE_BYTES / (3.35e12 * 0.835)
    assert mhc_layer_s(FLASH, TOKENS, 2.0, r) == pytest.approx(expected, rel=1e-12)


def test_launches_per_layer():
    # fused, per module: projection 2 + its backward 4, Sinkhorn 2, casts 3 + 3, aggregation 2,
    # h_post_bda 1 + 2, the gradient add 1 = 20; native: the fp32 cast, matmul, RMS, mappings and their
    # backward (1+1+1+1 + 1+2+1+1 = 9), the same mixing with h_post_bda's bmm and add (15) = 24
    assert mhc_layer_launches(FLASH, fused=True) == 40
    assert mhc_layer_launches(FLASH, fused=False) == 48


def test_hyper_connection_streams_leave_the_fitted_rate_for_their_kernels():
    s, ctx = _ctx("gb300")
    kept, rec = layer_activations(FLASH, 3, ctx.act, ctx.recompute_modules)
    rest = sum(v for d in (kept, rec) for k, v in d.items() if k not in ("hc_streams", "hc_coefficients"))
    rate = element_wise_bytes_per_activation_byte(ctx, 3)
    expected = rate * rest / 8e12 + 4096 * 1133792 / (8e12 * 0.835)
    assert layer_compute(ctx, 3).memory_bound_s == pytest.approx(expected, rel=1e-9)


def test_mhc_recompute_reruns_aggregation_h_post_bda_and_norms():
    # per module and token: aggregation 40968 + h_post_bda 73768 + a norm (2·4096·2 + 4 = 16388) = 131124
    r = MhcRates(8e12, 2.5e15, fused=True)
    expected = 4096 * 2 * 131124 / (8e12 * 0.835)
    assert mhc_recompute_s(FLASH, TOKENS, 2.0, r) == pytest.approx(expected, rel=1e-12)
    _, base = _ctx("gb300", recompute_granularity="selective", recompute_modules=["moe_act"])
    _, with_mhc = _ctx("gb300", recompute_granularity="selective", recompute_modules=["moe_act", "mhc"])
    extra = [
        selective_recompute_s(c, True, layer_compute(c, 3), 0.0) for c in (base, with_mhc)
    ]  # hc tensors are outside the element-wise share, so the layer's memory-bound time is the same
    assert layer_compute(base, 3).memory_bound_s == pytest.approx(layer_compute(with_mhc, 3).memory_bound_s)
    assert extra[1] - extra[0] == pytest.approx(expected, rel=1e-9)


def test_eager_launches_add_the_hyper_connection_kernels_and_graphs_hide_them(monkeypatch):
    _, eager = _ctx("gb300", cuda_graph_impl="none")
    _, graphed = _ctx("gb300", cuda_graph_impl="full_iteration")
    with_mhc = [launch_overhead(eager, True), launch_overhead(graphed, True)]
    monkeypatch.setattr(launch, "mhc_launch_share", lambda ctx: 0.0)
    without = [launch_overhead(eager, True), launch_overhead(graphed, True)]
    # 40 more launches on a MoE layer's 150: exposed when eager, all hidden by a full-iteration graph
    added = eager.c.launch_overhead_s_per_layer * 40 / MOE_LAYER_LAUNCHES
    assert with_mhc[0].exposed_s - without[0].exposed_s == pytest.approx(added, rel=1e-12)
    assert with_mhc[1].exposed_s == without[1].exposed_s == 0.0
    assert with_mhc[1].hidden_s - without[1].hidden_s == pytest.approx(added, rel=1e-12)


def test_estimate_states_how_hyper_connections_are_timed():
    s, _ = _ctx("gb300")
    notes = " ".join(estimate_step(s).assumptions)
    assert "fused Triton / cuTile path" in notes
    assert "40 kernels and 4.64 GB of HBM traffic per layer and microbatch" in notes
    s, _ = _ctx("h100")
    assert "native torch.compile path" in " ".join(estimate_step(s).assumptions)


def test_no_hyper_connection_kernels_without_streams():
    one = FLASH.with_overrides({"num_residual_streams": 1})
    assert mhc_kernels(one, 2.0, True) == []
    assert mhc_layer_launches(one, True) == 0


def test_window_layer_gemm_flops_leave_the_mixing_to_the_mhc_kernels():
    # h·ql 4096·1024 + ql·nh·v 1024·64·512 + h·v 4096·512 + o·nh·v 1024·64·512 + g·o·h 8·1024·4096
    # = 4 194 304 + 33 554 432 + 2 097 152 + 33 554 432 + 33 554 432 = 106 954 752 multiply-adds
    gemm, _ = dsv4_shapes.layer_forward_flops(FLASH, 0, 4096)
    assert gemm == 2 * 106954752
