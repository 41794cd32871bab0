"""Framework context (issue #21, parts 4 and 5a): the China-market GPUs in the catalog, memory held
by a colocated engine (``system.reserved_gib``), host memory of a CPU optimizer, LoRA / PEFT.

Expected values are derived by hand in the comments from the cited sources."""

from __future__ import annotations

import pytest

from moeplan.catalog.gpus import get_gpu, list_gpus, measured_gemm_fractions
from moeplan.model.compute import arch_family

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
    # H20: 96 GB HBM3 (nominal, 96e9 / 2**30 = 89.41 GiB), 4.0 TB/s, 148 dense BF16, 296 FP8,
    # NVLink 900 GB/s aggregate = 450 per direction (tweaktown_h20, willitrun_h20, zangshuxian_h20)
    h20 = get_gpu("h20")
    assert h20.usable_hbm_gib == pytest.approx(96e9 / 2**30)
    assert h20.usable_hbm_source == "nominal (vendor GB)"
    assert h20.hbm_bandwidth_gb_per_s == 4000
    assert h20.peak_dense_tflops == {"bf16": 148.0, "fp8": 296.0}
    assert h20.scaleup_unidir_gb_per_s == 450
    assert arch_family(h20) == "Hopper" and h20.supports_te_fp8
    assert len(h20.sources) == 3


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
    from moeplan import load_scenario
    from moeplan.model.validity import assess

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
    from moeplan import load_scenario

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
    from moeplan import estimate_memory

    plain, held = estimate_memory(_qwen()), estimate_memory(_qwen({"reserved_gib": 20}))
    # the training step's own memory does not change; the capacity drops by exactly 20 GiB
    assert held.peak_bytes == plain.peak_bytes
    assert plain.capacity_bytes - held.capacity_bytes == 20 * 2**30
    d = held.to_dict()
    assert d["reserved_bytes"] == 20 * 2**30
    assert d["usable_hbm_bytes"] == plain.capacity_bytes == get_gpu("h100").usable_hbm_bytes
    assert d["margin_bytes"] == plain.to_dict()["margin_bytes"] - 20 * 2**30


def test_reserved_gib_turns_a_fit_into_does_not_fit():
    from moeplan import estimate_memory

    # full recompute on 8 H200s fits with room; reserving all but (peak - 1 GiB) leaves 1 GiB too little
    base = dict(
        gpu="h200", layout={"recompute_granularity": "full", "recompute_method": "uniform", "recompute_num_layers": 1}
    )
    fits = estimate_memory(_qwen(**base))
    assert fits.verdict == "fits"
    peak_gib = fits.peak_bytes / 2**30
    reserve = get_gpu("h200").usable_hbm_gib - peak_gib + 1.0  # 1 GiB short
    assert estimate_memory(_qwen({"reserved_gib": reserve}, **base)).verdict == "does-not-fit"


@pytest.mark.parametrize("bad", [-1, 79.65, 200, "x", True])
def test_reserved_gib_out_of_range_is_an_input_error(bad):
    from moeplan.errors import InputError

    with pytest.raises(InputError) as e:
        _qwen({"reserved_gib": bad})
    assert e.value.field == "system.reserved_gib"


def test_reserved_gib_cli_exit_2_and_shown(tmp_path):
    import yaml
    from typer.testing import CliRunner

    from moeplan.cli.app import app

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
