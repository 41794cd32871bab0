"""Benchmark-only settings (forced load balancing, the NaN check off) never reach a
training config unless asked for. ``recipe_defaults: mbridge-perf`` fills the recipe's training
settings; ``mbridge-perf-benchmark`` reproduces the published benchmark, and every output that carries
a benchmark-only setting says so."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from moeplan import load_scenario
from moeplan.api import estimate_report, export_report
from moeplan.inputs.overrides import ScenarioFlags
from moeplan.io.export import FORMATS, export
from moeplan.plan import sweep
from moeplan.resolve.assumptions import benchmark_settings, verdict_assumptions

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "deepseek_v3_gb300.yaml"
BENCH = {"recipe_defaults": "mbridge-perf-benchmark"}
#: the long-context guidance's Qwen3-235B family at 128K on 128 GB200, as the source writes it
Q235 = {
    "model": "Qwen/Qwen3-235B-A22B",
    "system": {"gpu": "gb200", "num_gpus": 128},
    "training": {"seq_length": 131072, "precision": "bf16", "micro_batch_size": 1, "global_batch_size": 32},
    "layout": {
        "tensor_model_parallel_size": 4,
        "pipeline_model_parallel_size": 4,
        "virtual_pipeline_model_parallel_size": 12,
        "context_parallel_size": 4,
        "expert_model_parallel_size": 32,
        "recompute_granularity": "selective",
        "recompute_modules": ["moe_act", "layernorm"],
        "moe_token_dispatcher_type": "flex",
        "moe_flex_dispatcher_backend": "hybridep",
    },
}


def _forced(text: str) -> bool:
    low = text.lower().replace(" ", "")
    return any(
        s in low
        for s in (
            "moe_router_force_load_balancing=true",
            "moe_router_force_load_balancing:true",
            "moe_router_force_load_balancing=true",
            "--moe-router-force-load-balancing",
        )
    )


@pytest.mark.parametrize("fmt", FORMATS)
def test_the_training_fill_exports_no_benchmark_setting(fmt):
    s = load_scenario(EXAMPLE)
    assert s.input.recipe_defaults == "mbridge-perf"
    assert not s.layout.moe_router_force_load_balancing and not benchmark_settings(s)
    text, _ = export(s, fmt)
    assert not _forced(text) and "benchmark-only" not in text


def test_the_training_fill_overrides_what_the_perf_recipe_sets():
    """The training values are written, so a Bridge perf recipe's benchmark values do not carry over;
    the NaN check stays off only where the full-iteration graph needs it."""
    text, _ = export(load_scenario(EXAMPLE), "mbridge-overrides")
    assert "model.moe_router_force_load_balancing=false" in text
    assert "rerun_state_machine.check_for_nan_in_loss=false" in text  # full_iteration graphs need it off
    fills = {f.key: (f.value, f.source) for f in load_scenario(EXAMPLE).recipe.fills}
    assert fills["check_for_nan_in_loss"] == (False, "companion")
    q = load_scenario({**Q235, "recipe_defaults": "mbridge-perf"})
    assert q.layout.check_for_nan_in_loss is True and q.layout.moe_router_force_load_balancing is False
    assert "rerun_state_machine.check_for_nan_in_loss=true" in export(q, "mbridge-overrides")[0]


def test_the_benchmark_fill_is_explicit_and_says_so():
    s = load_scenario(EXAMPLE, BENCH)
    assert s.layout.moe_router_force_load_balancing
    assert [b["key"] for b in benchmark_settings(s)] == ["moe_router_force_load_balancing"]
    for fmt in FORMATS:
        text, _ = export(s, fmt)
        assert "# benchmark-only: moe_router_force_load_balancing=true" in text, fmt
    res = export_report(EXAMPLE, ScenarioFlags(sets=("recipe_defaults=mbridge-perf-benchmark",)))
    assert any(w.startswith("benchmark-only settings exported") for w in res.warnings)
    assert not export_report(EXAMPLE).warnings or not any(
        "benchmark-only" in w for w in export_report(EXAMPLE).warnings
    )
    # without full-iteration graphs the NaN check off is benchmark-only too
    q = load_scenario({**Q235, **BENCH})
    assert {b["key"] for b in benchmark_settings(q)} == {"moe_router_force_load_balancing", "check_for_nan_in_loss"}


def test_every_estimate_says_when_it_rests_on_a_benchmark_setting():
    doc = estimate_report(EXAMPLE, ScenarioFlags(sets=("recipe_defaults=mbridge-perf-benchmark",))).document
    whats = {a["what"]: a for a in doc["assumes"]}
    assert "benchmark" in whats and "not for a training run" in whats["benchmark"]["text"]
    assert whats["routing"]["text"].startswith("routing forced balanced")
    doc = estimate_report(EXAMPLE).document
    assert "benchmark" not in {a["what"] for a in doc["assumes"]}


def test_forced_balance_no_longer_hides_memory():
    """The guidance's Qwen3-235B 128K layout needs more memory with real (unbalanced) routing: the
    training fill shows it, the benchmark fill shows the published benchmark's figure."""
    train = load_scenario({**Q235, "recipe_defaults": "mbridge-perf"})
    bench = load_scenario({**Q235, **BENCH})
    from moeplan.model.memory import estimate_memory

    assert estimate_memory(train).peak_bytes > estimate_memory(bench).peak_bytes * 1.05
    routing = {a.what: a.text for a in verdict_assumptions(train)}["routing"]
    assert routing == "routing imbalance 1.2×"


def test_sweep_scripts_of_a_training_scenario_carry_no_benchmark_setting(tmp_path):
    req = {
        "model": "Qwen/Qwen3-30B-A3B",
        "system": {"gpu": "h100", "num_gpus": 16},
        "training": {"seq_length": 4096, "global_batch_size": 64, "micro_batch_size": 1},
        "layout": {"tensor_model_parallel_size": 1, "expert_model_parallel_size": 8},
        "recipe_defaults": "mbridge-perf",
    }
    out = tmp_path / "sw"
    sweep.write_sweep(req, out, top=1, mbs_variants=False)
    scripts = list(out.glob("*/launch.sh"))
    assert scripts
    for p in scripts:
        assert not _forced(p.read_text()), p
        sc = yaml.safe_load((p.parent / "scenario.yaml").read_text())
        assert not (sc.get("layout") or {}).get("moe_router_force_load_balancing")
