"""Framework context: the China-market GPUs in the catalog, memory held
by a colocated engine (``system.reserved_gib``), host memory of a CPU optimizer, LoRA / PEFT.

Expected values are derived by hand in the comments from the cited sources."""

from __future__ import annotations

import math

import pytest
import yaml
from typer.testing import CliRunner

from moeplan import estimate_memory, estimate_step, load_scenario
from moeplan.catalog.gpus import get_gpu, list_gpus, measured_gemm_fractions
from moeplan.cli.app import app
from moeplan.diagnose.oom import parse_oom, reconcile_with_model
from moeplan.errors import InputError
from moeplan.inputs.peft import PeftInput, layer_adapters, total_adapter_params
from moeplan.io.export import export
from moeplan.model.constants import load_constants
from moeplan.model.executed_flops import arch_family, speeds
from moeplan.model.lora import lora_time_s, stage_layer_adapters
from moeplan.model.memory.static import cpu_optimizer_host
from moeplan.model.validity import assess
from moeplan.plan.search import search
from moeplan.structure.numerics import optimizer_numerics
from moeplan.structure.placement import stage_params

# --- GPUs: H800, H20, A800 ------------------------------------------------------------------


def test_h800_is_h100_with_400_gb_per_s_nvlink():
    # H800: H100 SXM's die (989 dense BF16, 1979 FP8, 3.35 TB/s, 80 GB) with NVLink cut to 400 GB/s
    # aggregate = 200 GB/s per direction (aiwiki_h800, philisun_h800)
    h800, h100 = get_gpu("h800"), get_gpu("h100")
    assert h800.peak_dense_tflops == h100.peak_dense_tflops == {"bf16": 989.0, "fp8": 1979.0}
    assert h800.hbm_bandwidth_gb_per_s == h100.hbm_bandwidth_gb_per_s == 3350
    assert h800.usable_hbm_gib == h100.usable_hbm_gib
    assert h800.scaleup_unidir_gb_per_s == 200 and h100.scaleup_unidir_gb_per_s == 450
    assert h800.compute_capability == 9.0 and arch_family(h800) == "Hopper"
    assert any("aiwiki_h800" in s for s in h800.sources)


def test_h20_figures():
    # H20: 96 GB HBM3, nvidia-smi 97871 MiB = 95.58 GiB (nvsmi_h20), 4.0 TB/s, 148 dense BF16, 296 FP8,
    # NVLink 900 GB/s aggregate = 450 per direction (tweaktown_h20, willitrun_h20, zangshuxian_h20)
    h20 = get_gpu("h20")
    assert h20.usable_hbm_gib == pytest.approx(95.58)
    assert h20.usable_hbm_source == "nvidia-smi total"
    assert h20.hbm_bandwidth_gb_per_s == 4000
    assert h20.peak_dense_tflops == {"bf16": 148.0, "fp8": 296.0}
    assert h20.scaleup_unidir_gb_per_s == 450
    assert arch_family(h20) == "Hopper" and h20.supports_te_fp8
    assert len(h20.sources) == 4


def test_a800_is_a100_with_400_gb_per_s_nvlink():
    a800, a100 = get_gpu("a800"), get_gpu("a100")
    assert a800.peak_dense_tflops == a100.peak_dense_tflops == {"bf16": 312.0}
    assert a800.scaleup_unidir_gb_per_s == 200 and a100.scaleup_unidir_gb_per_s == 300
    assert arch_family(a800) == "Ampere" and not a800.supports_te_fp8


def test_gemm_fractions_of_interconnect_cut_parts_are_their_siblings():
    # same die and clocks: H800 uses H100's measured MAMF fraction (794.5 / 989), A800 A100's
    # (271.2 / 312); H20 (a compute-throttled part) has none and uses the default
    assert measured_gemm_fractions("h800") == measured_gemm_fractions("h100")
    assert measured_gemm_fractions("h800")["bf16"] == pytest.approx(794.5 / 989)
    assert measured_gemm_fractions("a800")["bf16"] == pytest.approx(271.2 / 312)
    assert measured_gemm_fractions("h20") == {}


def test_new_gpus_listed():
    ids = [g.id for g in list_gpus()]
    assert {"h800", "h20", "a800"} <= set(ids)


@pytest.mark.parametrize("gpu", ["h800", "h20", "a800"])
def test_validity_says_new_gpus_were_never_measured(gpu):
    s = load_scenario(
        {
            "model": "Qwen/Qwen3-30B-A3B",
            "system": {"gpu": gpu, "num_gpus": 8},
            "training": {"seq_length": 4096, "global_batch_size": 64, "precision": "bf16"},
            "layout": {"expert_model_parallel_size": 8},
        }
    )
    v = assess(s)
    assert not v.validated
    assert any(line.startswith(f"GPU {gpu} was not measured") for line in v.outside)


# --- system.reserved_gib: memory held by a colocated engine -----------------------------------


def _qwen(system_extra=None, layout=None, gpu="h100", training=None):
    return load_scenario(
        {
            "model": "Qwen/Qwen3-30B-A3B",
            "system": {"gpu": gpu, "num_gpus": 8, **(system_extra or {})},
            "training": {
                "seq_length": 4096,
                "global_batch_size": 64,
                "micro_batch_size": 1,
                "precision": "bf16",
                **(training or {}),
            },
            "layout": {"expert_model_parallel_size": 8, **(layout or {})},
        }
    )


def test_reserved_gib_is_subtracted_from_the_capacity_only():
    plain, held = estimate_memory(_qwen()), estimate_memory(_qwen({"reserved_gib": 20}))
    # the training step's own memory does not change; the capacity drops by exactly 20 GiB
    assert held.peak_bytes == plain.peak_bytes
    assert plain.capacity_bytes - held.capacity_bytes == 20 * 2**30
    d = held.to_dict()
    assert d["reserved_bytes"] == 20 * 2**30
    assert d["usable_hbm_bytes"] == plain.capacity_bytes == get_gpu("h100").usable_hbm_bytes
    assert d["margin_bytes"] == plain.to_dict()["margin_bytes"] - 20 * 2**30


def test_reserved_gib_turns_a_fit_into_does_not_fit():
    # full recompute on 8 H200s fits with room; reserving all but (peak - 1 GiB) leaves 1 GiB too little
    base = dict(
        gpu="h200", layout={"recompute_granularity": "full", "recompute_method": "uniform", "recompute_num_layers": 1}
    )
    fits = estimate_memory(_qwen(**base))
    assert fits.verdict == "fits"
    peak_gib = fits.peak_bytes / 2**30
    # 1 GiB short of the peak: inside the memory model's band (0.9060 × peak fits), so tight
    reserve = get_gpu("h200").usable_hbm_gib - peak_gib + 1.0
    assert estimate_memory(_qwen({"reserved_gib": reserve}, **base)).verdict == "tight"
    # 1 GiB short of the band's low edge, 0.9060 × peak (7.96 / 8.786, docs/memory_accuracy.md): does not fit
    reserve = get_gpu("h200").usable_hbm_gib - peak_gib * 7.96 / 8.755 + 1.0
    assert estimate_memory(_qwen({"reserved_gib": reserve}, **base)).verdict == "does-not-fit"


@pytest.mark.parametrize("bad", [-1, 79.65, 200, "x", True])
def test_reserved_gib_out_of_range_is_an_input_error(bad):
    with pytest.raises(InputError) as e:
        _qwen({"reserved_gib": bad})
    assert e.value.field == "system.reserved_gib"


def test_reserved_gib_cli_exit_2_and_shown(tmp_path):
    f = tmp_path / "s.yaml"
    data = {
        "model": "Qwen/Qwen3-30B-A3B",
        "system": {"gpu": "h100", "num_gpus": 8, "reserved_gib": 20},
        "training": {"seq_length": 4096, "global_batch_size": 64},
        "layout": {"expert_model_parallel_size": 8},
    }
    f.write_text(yaml.safe_dump(data))
    out = CliRunner().invoke(app, ["estimate", str(f)])
    assert out.exit_code in (0, 1), out.output
    assert "20.00 reserved by a colocated" in " ".join(out.output.split())
    data["system"]["reserved_gib"] = 80
    f.write_text(yaml.safe_dump(data))
    out = CliRunner().invoke(app, ["estimate", str(f)])
    assert out.exit_code == 2 and "system.reserved_gib" in out.output


# --- host memory of the CPU optimizer (HybridDeviceOptimizer) ---------------------------------

OFFLOAD = {
    "optimizer_cpu_offload": True,
    "optimizer_offload_fraction": 1.0,
    "use_precision_aware_optimizer": True,
    "use_distributed_optimizer": True,
}


def _offloaded_params(s) -> float:
    """Parameters of the peak rank's optimizer shard: dense / (DP·CP) + experts / EDP."""

    num = optimizer_numerics(s)
    sp = stage_params(s, allow_balanced=True)[0]
    return (sp.params.dense / num.dense_shard + sp.params.expert / num.expert_shard) * num.offload_fraction


def test_cpu_optimizer_host_memory_per_offloaded_parameter():
    s = _qwen(layout=OFFLOAD)  # megatron-core 0.20 (the default)
    n = _offloaded_params(s)
    host = estimate_memory(s).stages[0].host
    # HybridDeviceOptimizer per offloaded parameter: fp32 master (4 B, pageable up to 0.20), fp32
    # grad copy (4 B, pinned), AdamW exp_avg + exp_avg_sq (8 B, pageable); the pinned 4 B rounded up
    # by torch's power-of-two host allocator, 2 ln 2 on average: 4 · (2 ln 2 − 1) = 1.545 B more
    assert host["cpu_master_params_fp32"] == pytest.approx(4 * n)
    assert host["cpu_grads_fp32"] == pytest.approx(4 * n)
    assert host["cpu_adam_moments_fp32"] == pytest.approx(8 * n)
    assert host["pinned_allocator_rounding"] == pytest.approx(4 * n * (2 * math.log(2) - 1))
    assert sum(host.values()) / n == pytest.approx(17.545, abs=0.001)


def test_pinned_fp32_masters_after_mcore_0_20():
    # Megatron-LM PR #4547 (after the 0.20.0 release branch) pins the fp32 masters too: 8 pinned
    # bytes rounded up, 16 + 8 · (2 ln 2 − 1) = 19.09 B per parameter, 59 % over the 12 B of
    # optimizer state alone (master + two moments)
    base = {
        "model": "Qwen/Qwen3-30B-A3B",
        "system": {"gpu": "h100", "num_gpus": 8},
        "layout": {"expert_model_parallel_size": 8, **OFFLOAD},
    }
    new = load_scenario({**base, "versions": {"megatron_core": "0.21.0"}})
    per_param = sum(cpu_optimizer_host(new, 1e9).values()) / 1e9
    assert per_param == pytest.approx(16 + 8 * (2 * math.log(2) - 1))
    assert per_param / 12 == pytest.approx(1.59, abs=0.01)
    old = load_scenario({**base, "versions": {"megatron_core": "0.19.0"}})
    assert sum(cpu_optimizer_host(old, 1e9).values()) / 1e9 == pytest.approx(16 + 4 * (2 * math.log(2) - 1))


def test_unpinned_buffers_are_not_rounded_and_fraction_scales():
    unpinned = _qwen(layout={**OFFLOAD, "pin_cpu_grads": False, "pin_cpu_params": False})
    host = estimate_memory(unpinned).stages[0].host
    assert "pinned_allocator_rounding" not in host
    assert sum(host.values()) == pytest.approx(16 * _offloaded_params(unpinned))
    half = estimate_memory(_qwen(layout={**OFFLOAD, "optimizer_offload_fraction": 0.5}))
    full = estimate_memory(_qwen(layout=OFFLOAD))
    assert half.host_bytes_per_rank == pytest.approx(full.host_bytes_per_rank / 2, rel=1e-6)


def test_host_memory_per_rank_and_node_against_the_stated_node_ram():
    est = estimate_memory(_qwen(layout=OFFLOAD))
    # 8 GPUs per node (HGX H100): per node = 8 × the worst rank
    assert est.host_bytes_per_node == 8 * est.host_bytes_per_rank
    # DGX H100: 2 TB / 8 GPUs = 256 GB per GPU (catalog) → 2048e9 B per node
    assert est.host_capacity_bytes_per_node == int(256 * 1e9 * 8)
    small_gib = est.host_bytes_per_node / 2**30 - 1  # 1 GiB short
    tight = estimate_memory(_qwen({"host_memory_gib": small_gib}, layout=OFFLOAD))
    assert tight.host_capacity_bytes_per_node == int(small_gib * 2**30)
    assert tight.host_fits is False and tight.verdict == "does-not-fit"
    d = tight.to_dict()
    assert d["host_bytes_per_rank"] == est.host_bytes_per_rank and d["host_fits"] is False
    roomy = estimate_memory(_qwen({"host_memory_gib": small_gib + 2}, layout=OFFLOAD))
    assert roomy.host_fits is True


def test_no_offload_no_host_memory():
    est = estimate_memory(_qwen())
    assert est.host_bytes_per_rank is None and est.stages[0].host == {}


# --- LoRA / PEFT -------------------------------------------------------------------------------


def _llama(peft=None, layout=None, num_gpus=8, training=None):
    return load_scenario(
        {
            "model": "meta-llama/Llama-3.1-8B",
            "system": {"gpu": "h100", "num_gpus": num_gpus},
            "training": {"seq_length": 4096, "global_batch_size": 64, "micro_batch_size": 1, **(training or {})},
            "layout": {**(layout or {})},
            **({"peft": peft} if peft is not None else {}),
        }
    )


# Llama-3.1-8B: h 4096, 32 heads of 128, 8 KV groups, FFN 14336 (SwiGLU), 32 layers.
# linear_qkv out = 32·128 + 2·8·128 = 6144; LoRA adds A (in × r) and B (r × out): r · (in + out).
QKV_R16 = 16 * (4096 + 6144)  # 163,840 per layer
PROJ_R16 = 16 * (4096 + 4096)  # 131,072
FC1_R16 = 16 * (4096 + 2 * 14336)  # 524,288
FC2_R16 = 16 * (14336 + 4096)  # 294,912


def test_lora_rank16_on_qkv_hand_count():
    m = _llama().complete_model
    p = PeftInput(dim=16, target_modules=("linear_qkv",))
    assert layer_adapters(m, p, 0, 1, 1, 1).dense == QKV_R16
    assert total_adapter_params(m, p) == 32 * QKV_R16 == 5_242_880
    # TP 2: A (4096 × 16) splits its 16 columns, B (16 × 6144) its 6144 rows: half each
    assert layer_adapters(m, p, 0, 2, 1, 1).dense == QKV_R16 / 2


def test_lora_default_targets_hand_count():
    m = _llama().complete_model
    assert total_adapter_params(m, PeftInput(dim=16)) == 32 * (QKV_R16 + PROJ_R16 + FC1_R16 + FC2_R16) == 35_651_584


def test_lora_memory_frozen_base():
    full = estimate_memory(_llama()).stages[0]
    lora = estimate_memory(_llama({"dim": 16})).stages[0]
    n = 32 * (QKV_R16 + PROJ_R16 + FC1_R16 + FC2_R16)
    # base weights unchanged (bf16, frozen), adapters 2 B each beside them
    assert lora.items["weights"]["params"] == full.items["weights"]["params"]
    assert lora.items["weights"]["lora_adapters"] == 2 * n
    # gradients only for the adapters: fp32 main grads, 4 B each
    assert lora.grads_bytes == pytest.approx(4 * n, abs=1)
    # Adam state (fp32 master + 2 moments = 12 B) of the adapters, sharded over DP 8
    assert lora.optimizer_bytes == pytest.approx(12 * n / 8, abs=2)
    assert lora.items["activations"]["lora_adapters"] > 0


def test_lora_activations_hand_count():
    # TP 1, one microbatch of 4096 tokens in flight on PP 1: each adapter saves its bottleneck
    # (4096 tokens × r 16 × 2 B) — 4 adapters × 32 layers
    est = estimate_memory(_llama({"dim": 16}, training={"global_batch_size": 8}))
    assert est.stages[0].items["activations"]["lora_adapters"] == 4 * 32 * 4096 * 16 * 2
    # TP 2 with SP: linear_qkv and linear_fc1 also keep the gathered LayerNorm output (4096 × 4096 × 2 B)
    sp = estimate_memory(
        _llama(
            {"dim": 16},
            layout={"tensor_model_parallel_size": 2, "sequence_parallel": True},
            training={"global_batch_size": 4},
        )
    )
    assert sp.stages[0].items["activations"]["lora_adapters"] == 32 * (4 * 4096 * 16 * 2 + 2 * 4096 * 4096 * 2)


def test_lora_moe_shared_and_per_expert_adapters():
    # Qwen3-30B-A3B: h 2048, 128 experts of FFN 768 (SwiGLU), top-8; EP 8 → 16 local experts
    m = _qwen().complete_model
    shared = layer_adapters(m, PeftInput(dim=16, target_modules=("linear_fc1", "linear_fc2")), 0, 1, 8, 1)
    # one adapter per grouped linear on the EP rank: 16·(2048 + 1536) + 16·(768 + 2048)
    assert shared.expert == 16 * (2048 + 1536) + 16 * (768 + 2048) == 102_400
    assert shared.dense == 0
    per = layer_adapters(
        m, PeftInput(dim=16, target_modules=("linear_fc1", "linear_fc2"), share_expert_adapters=False), 0, 1, 8, 1
    )
    assert per.expert == 16 * shared.expert
    # normalize_moe_lora: experts use dim // top-k = 16 // 8 = 2
    norm = layer_adapters(
        m, PeftInput(dim=16, target_modules=("linear_fc1", "linear_fc2"), normalize_moe_lora=True), 0, 1, 8, 1
    )
    assert norm.expert == shared.expert / 8


def test_lora_step_time_backward_without_base_weight_gradients():
    full, lora = _llama(), _llama({"dim": 16})
    t_full, t_lora = estimate_step(full), estimate_step(lora)
    # the base's GEMMs run forward + input gradient (2 of 3 passes); the adapters' GEMMs add on top
    st = stage_params(lora, allow_balanced=True)[0]

    sp = speeds(lora.gpu, "bf16", False, load_constants(), measured_gemm_fractions("h100"))
    adapters = sum(
        lora_time_s(lora, la, 4096, 1.0, sp.gemm_flops_per_s, sp.hbm_bytes_per_s)[0]
        for la in stage_layer_adapters(lora, st)
    )
    n_mb = 64 // 8  # GBS 64 / (MBS 1 · DP 8)
    f = t_full.release_factor
    assert t_lora.release_factor == f
    base = t_full.breakdown_s["dense_gemm"] * f * 2 / 3
    assert t_lora.breakdown_s["dense_gemm"] * f == pytest.approx(base + n_mb * adapters, rel=1e-6)
    dp = ("dp_comm_exposed",)
    assert sum(t_lora.breakdown_s[k] for k in dp) + t_lora.hidden_s.get("dp_comm", 0) < sum(
        t_full.breakdown_s[k] for k in dp
    ) + t_full.hidden_s.get("dp_comm", 0)
    assert t_lora.breakdown_s["optimizer"] < t_full.breakdown_s["optimizer"] / 100
    assert t_lora.step_time_s < t_full.step_time_s


@pytest.mark.parametrize(
    "peft,field",
    [
        ({"dim": 0}, "peft.dim"),
        ({"target_modules": ["q_proj"]}, "peft.target_modules"),
        ({"target_modules": []}, "peft.target_modules"),
        ({"scheme": "dora"}, "peft.scheme"),
        ({"rank": 8}, "peft.rank"),
    ],
)
def test_lora_bad_input_names_the_field(peft, field):
    with pytest.raises(InputError) as e:
        _llama(peft)
    assert e.value.field == field


def test_lora_dim_must_split_over_tp_for_column_adapters():
    with pytest.raises(InputError) as e:
        estimate_memory(_llama({"dim": 3}, layout={"tensor_model_parallel_size": 2}))
    assert e.value.field == "peft.dim"


def test_lora_on_mla_qkv_is_refused():
    s = load_scenario(
        {
            "model": "deepseek-ai/DeepSeek-V2-Lite",
            "system": {"gpu": "h100", "num_gpus": 8},
            "training": {"seq_length": 4096, "global_batch_size": 64},
            "layout": {"expert_model_parallel_size": 8},
            "peft": {"dim": 16, "target_modules": ["linear_qkv"]},
        }
    )
    with pytest.raises(InputError) as e:
        estimate_memory(s)
    assert e.value.field == "peft.target_modules"


def test_lora_exports_the_bridge_peft_section():
    s = _llama({"dim": 16, "alpha": 32, "target_modules": ["linear_qkv", "linear_proj"]})
    text, notes = export(s, "mbridge-overrides")
    assert "peft._target_=megatron.bridge.peft.lora.LoRA" in text
    assert "peft.dim=16" in text and "peft.alpha=32" in text
    assert "peft.target_modules=[linear_qkv,linear_proj]" in text
    assert any("--mode lora" in n for n in notes)
    py, _ = export(s, "mbridge-python")
    assert "cfg.peft = LoRA(target_modules=['linear_qkv', 'linear_proj'], dim=16, alpha=32" in py
    compile(py, "<export>", "exec")
    _, mlm_notes = export(s, "megatron-lm-args")
    assert any("peft (LoRA) has no Megatron-LM flag" in n for n in mlm_notes)


def test_pin_flags_export():
    s = _qwen(layout={**OFFLOAD, "pin_cpu_grads": False, "pin_cpu_params": True})
    text, _ = export(s, "megatron-lm-args")
    assert "--no-pin-cpu-grads" in text and "--no-pin-cpu-params" not in text
    over, _ = export(s, "mbridge-overrides")
    assert "optimizer.pin_cpu_grads=false" in over and "optimizer.pin_cpu_params=true" in over


def test_planner_judges_against_reserved_capacity_and_keeps_peft():
    base = {
        "model": "Qwen/Qwen3-30B-A3B",
        "system": {"gpu": "h100", "num_gpus": 8, "reserved_gib": 30},
        "training": {"seq_length": 4096, "global_batch_size": 64},
        "layout": {},
        "peft": {"dim": 16},
    }
    res = search(base, refine=2)
    assert res.candidates
    cap = get_gpu("h100").usable_hbm_bytes - 30 * 2**30
    for c in res.candidates:
        assert c.scenario.peft is not None and c.scenario.peft.dim == 16
        assert c.memory["capacity_bytes"] == cap
        assert c.memory["peak_bytes"] <= cap


def test_oom_compares_the_gpu_total_with_usable_plus_reserved():
    msg = (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
        "79.65 GiB of which 1.50 GiB is free. Including non-PyTorch memory, this process has 77.60 GiB memory in "
        "use. Of the allocated memory 70.10 GiB is allocated by PyTorch, and 5.00 GiB is reserved by PyTorch but "
        "unallocated."
    )
    rep = parse_oom(msg)
    gib = 2**30
    # 79.65 GiB GPU, 40 GiB held by the engine: the step has 39.65; the total matches 39.65 + 40
    _, notes = reconcile_with_model(rep, int(30 * gib), int(39.65 * gib), int(40 * gib))
    assert not any("message's GPU" in n for n in notes)
    assert any("held by a colocated engine" in n for n in notes)
    _, notes = reconcile_with_model(rep, int(30 * gib), int(39.65 * gib))
    assert any("message's GPU" in n for n in notes)  # without the reservation it looks like another GPU


def test_estimate_text_shows_host_overflow_and_lora(tmp_path):
    f = tmp_path / "s.yaml"
    data = {
        "model": "Qwen/Qwen3-30B-A3B",
        "system": {"gpu": "h100", "num_gpus": 8, "host_memory_gib": 100},
        "training": {"seq_length": 4096, "global_batch_size": 64},
        "layout": {"expert_model_parallel_size": 8, **OFFLOAD},
    }
    f.write_text(yaml.safe_dump(data))
    out = " ".join(CliRunner().invoke(app, ["estimate", str(f)], env={"COLUMNS": "200"}).output.split())
    # per rank about 62 GiB here, × 8 per node, far over 100 GiB
    assert "exceeds the node's host memory" in out and "host memory exceeded → does-not-fit" in out
    data = {**data, "system": {"gpu": "h100", "num_gpus": 8}, "layout": {"expert_model_parallel_size": 8}}
    data["peft"] = {"dim": 16}
    f.write_text(yaml.safe_dump(data))
    out = " ".join(CliRunner().invoke(app, ["estimate", str(f)], env={"COLUMNS": "200"}).output.split())
    # Qwen3-30B-A3B, r 16 on all four: per layer 16·(2048+5120) + 16·(4096+2048) + 16·(2048+1536)
    # + 16·(768+2048) = 315,392; × 48 layers = 15,138,816
    assert "15.14 M adapter parameters" in out


def test_lora_skips_gated_deltanet_layers():
    # Qwen3-Next: Gated DeltaNet layers have in_proj / out_proj, no linear_qkv / linear_proj
    s = load_scenario(
        {
            "model": "Qwen/Qwen3-Next-80B-A3B-Instruct",
            "system": {"gpu": "h100", "num_gpus": 8},
            "peft": {"dim": 16, "target_modules": ["linear_qkv", "linear_proj"]},
        }
    )
    m = s.complete_model
    kinds = m.attention_kinds
    lin = kinds.index("linear")
    full = kinds.index("full")
    p = s.peft
    assert layer_adapters(m, p, lin, 1, 1, 1).by_target == {}
    nh, ng, d, h = m.num_attention_heads, m.num_query_groups, m.kv_channels, m.hidden_size
    qkv_out = nh * d * (2 if m.attention_output_gate else 1) + 2 * ng * d
    assert layer_adapters(m, p, full, 1, 1, 1).dense == 16 * (h + qkv_out) + 16 * (nh * d + h)
    # h 2048, 16 heads of 256 with an output gate, 2 KV groups: qkv out 16·256·2 + 2·2·256 = 9216;
    # 16·(2048 + 9216) + 16·(4096 + 2048) = 278,528
    assert layer_adapters(m, p, full, 1, 1, 1).dense == 278_528


def test_validity_says_lora_was_never_measured():
    v = assess(_llama({"dim": 16}))
    assert "layout feature 'lora' never appears in the measured runs" in v.outside
