"""Flags agree across commands. The batch can be given in tokens or sequences
everywhere; a command without one assumes about 4 Mi tokens (as ``plan``) and says so; ``plan`` and
``sweep`` hold the same layout keys (all the scenario sets, ``--free`` to search one, ``--hold`` to
hold only some); ``compare --plot`` labels its curves with file names, not absolute paths."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from moeplan.api import estimate_report
from moeplan.api.diagnose import plot_labels
from moeplan.api.plan import held_keys
from moeplan.cli.app import app
from moeplan.errors import InputError
from moeplan.inputs.overrides import ScenarioFlags
from moeplan.inputs.training import DEFAULT_TOKENS_PER_STEP, default_global_batch

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()
SURFACE = json.loads((ROOT / "tests" / "golden" / "cli_surface.json").read_text())


@pytest.mark.parametrize("cmd", ["check", "estimate", "export", "plan", "fit", "sweep"])
def test_every_batch_taking_command_takes_tokens_or_sequences(cmd):
    params = " ".join(SURFACE[cmd]["params"])
    assert "--tokens-per-step" in params and "--gbs" in params, cmd


def test_tokens_per_step_becomes_the_same_batch_everywhere():
    flags = ScenarioFlags(
        model="Qwen/Qwen3-30B-A3B", gpu="h100", num_gpus=16, seq_length=65536, tokens_per_step=2**22, ep=8
    )
    doc = estimate_report(None, flags).document
    # the global batch is 4 Mi tokens / 64 Ki = 64 sequences: 4 microbatches of 1 on each of DP 16
    assert doc["throughput"]["num_microbatches"] == 4
    args = ["check", "--model", "Qwen/Qwen3-30B-A3B", "--gpu", "h100", "-n", "16", "-s", "65536"]
    r = runner.invoke(app, [*args, "--tokens-per-step", str(2**22), "--gbs", "64"])
    assert r.exit_code == 2 and "either --gbs or --tokens-per-step" in r.output


def test_estimate_without_a_batch_assumes_4_mi_tokens_and_says_so():
    flags = ScenarioFlags(model="Qwen/Qwen3-30B-A3B", gpu="h100", num_gpus=16, seq_length=65536, ep=8, tp=2, cp=2)
    th = estimate_report(None, flags).document["throughput"]
    assert th is not None
    gbs = DEFAULT_TOKENS_PER_STEP // 65536
    assert any(a.startswith(f"global_batch_size {gbs} by default (4 Mi tokens per step") for a in th["assumptions"])
    src = "\n".join(p.read_text() for p in (ROOT / "src").rglob("*.py"))
    assert "--gbs 1024" not in src


def test_default_batch_is_one_the_layout_divides():
    # 4 Mi tokens / 12,288 = 341.3 sequences, which no DP of 64 GPUs divides; within 10 % (308..375)
    # the multiples of MBS·DP = 1·16 are 320, 336, 352, 368, and 320 = 64·5 shares all 64 with the
    # GPU count, so every data-parallel size divides it
    flags = ScenarioFlags(model="Qwen/Qwen3-30B-A3B", gpu="h100", num_gpus=64, seq_length=12288, tp=2, pp=2, ep=8)
    doc = estimate_report(None, flags).document
    assert doc["check"]["errors"] == []
    assert doc["throughput"] is not None and doc["throughput"]["num_microbatches"] == 320 // 16
    assert doc["assumes"][0]["text"] == "GBS 320 by default (3.75 Mi tokens/step)"
    assert doc["assumes"][0]["source"] == "default"
    args = ["estimate", "--model", "Qwen/Qwen3-30B-A3B", "--gpu", "h100", "-n", "64", "-s", "12288"]
    r = runner.invoke(app, [*args, "--tp", "2", "--pp", "2", "--ep", "8"], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    assert "assumes: GBS 320 by default" in r.output and "global_batch_divisible" not in r.output


def test_default_batch_takes_the_layouts_multiple_and_the_gpu_count():
    # MBS·DP 48 on 96 GPUs at 12,288: multiples within 10 % of 341.3 are 336 only (288 and 384 are
    # 15.6 % and 12.5 % off)
    assert default_global_batch(12288, 48, 96)[0] == 336
    # 4 Mi / 4,096 = 1,024 exactly, but 96 GPUs have DP sizes of 3, 6, 12, ...: 960 = 96·10 (6.25 % off)
    assert default_global_batch(4096, 1, 96)[0] == 960
    assert default_global_batch(4096, 1, 64)[0] == 1024
    # a layout whose MBS·DP exceeds the quotient: one multiple (64 sequences of 128 Ki = 8 Mi tokens)
    gbs, why = default_global_batch(131072, 64, 256)
    assert gbs == 64 and "a multiple of micro_batch_size·DP = 64" in why


def test_plan_default_batch_rejects_no_layout_for_divisibility():
    args = ["plan", "--model", "Qwen/Qwen3-30B-A3B", "--gpu", "h100", "-n", "64", "-s", "12288", "--json"]
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert doc["request"]["global_batch_size"] == 320
    assert doc["assumes"][0]["text"] == "GBS 320 by default (3.75 Mi tokens/step)"
    # 320 = 2^6·5 divides by every MBS·DP up to 64: only MBS 2 at DP 64 (TP1 PP1 CP1) is left out
    # (the quotient 341 = 11·31 left out every layout with DP > 1)
    bad = [r for r in doc["rejected"] if r["reason"] == "gbs-divisibility"]
    assert all("(MBS 2 · DP 64)" in r["example"] for r in bad)


def test_plan_and_sweep_hold_the_same_keys():
    layout = {"tensor_model_parallel_size": 2, "expert_model_parallel_size": 8, "context_parallel_size": 2}
    assert held_keys(layout) == tuple(layout)
    assert held_keys(layout, free=["context_parallel_size"]) == (
        "tensor_model_parallel_size",
        "expert_model_parallel_size",
    )
    assert held_keys(layout, free=["all"]) == ()
    assert held_keys(layout, hold=["layout.tensor_model_parallel_size"]) == ("tensor_model_parallel_size",)
    with pytest.raises(InputError, match="either --hold"):
        held_keys(layout, hold=["tensor_model_parallel_size"], free=["context_parallel_size"])
    for cmd in ("plan", "sweep"):
        params = " ".join(SURFACE[cmd]["params"])
        assert "--hold" in params and "--free" in params, cmd


def test_plan_and_sweep_search_alike(tmp_path):
    scn = tmp_path / "s.yaml"
    scn.write_text(
        yaml.safe_dump(
            {
                "model": "Qwen/Qwen3-30B-A3B",
                "system": {"gpu": "h100", "num_gpus": 16},
                "training": {"seq_length": 4096, "global_batch_size": 64, "micro_batch_size": 1},
                "layout": {"tensor_model_parallel_size": 2, "expert_model_parallel_size": 8},
            }
        )
    )
    plan = json.loads(runner.invoke(app, ["plan", str(scn), "--json", "--top", "2"]).stdout)
    out = tmp_path / "sw"
    r = runner.invoke(app, ["sweep", str(scn), "-o", str(out), "--top", "1", "--no-mbs-variants", "--json"])
    assert r.exit_code == 0, r.output
    man = json.loads((out / "manifest.json").read_text())
    assert (
        plan["request"]["fixed"]
        == man["request"]["fixed"]
        == {
            "tensor_model_parallel_size": 2,
            "expert_model_parallel_size": 8,
        }
    )
    freed = json.loads(runner.invoke(app, ["plan", str(scn), "--json", "--top", "1", "--free", "all"]).stdout)
    assert freed["request"]["fixed"] == {}


def test_compare_plot_labels_are_file_names(tmp_path):
    assert plot_labels(Path("/abs/dir/run_a.log"), Path("/abs/dir/run_b.log")) == ("A: run_a.log", "B: run_b.log")
    assert plot_labels(Path("/x/a/train.log"), Path("/x/b/train.log")) == ("A: a/train.log", "B: b/train.log")
