"""Every output fits an 80-column terminal with every number and name whole: no line wider than 80
cells, and no text cut with "…" (rich's default for a table cell that does not fit)."""

from __future__ import annotations

import json
import os

import pytest
from rich.cells import cell_len
from typer.testing import CliRunner

from moeplan.cli.app import COMMANDS, app

runner = CliRunner()


def _at_80(args: list[str]):
    return runner.invoke(app, args, env={"COLUMNS": "80", "TERM": "dumb"}, terminal_width=80)


def _assert_fits_80(output: str) -> None:
    wide = [line for line in output.splitlines() if cell_len(line) > 80]
    assert not wide, "lines wider than 80 columns:\n" + "\n".join(wide)
    cut = [line for line in output.splitlines() if "…" in line]
    assert not cut, "text cut with '…':\n" + "\n".join(cut)


@pytest.mark.parametrize(
    "args",
    [
        ["gpus"],
        ["gpus", "h100"],
        ["vlm-stats", "examples/vlm_manifest.jsonl", "-s", "8192"],
        # 8 stages, 11.5 in-flight microbatches on stage 0 and 3-digit GiB: the widest stage table
        ["estimate", "examples/deepseek_v3_gb300.yaml", "--pp", "8", "--vpp", "2"],
        ["--help"],
    ],
    ids=lambda a: " ".join(a),
)
def test_output_fits_80_columns(args):
    res = _at_80(args)
    assert res.exit_code in (0, 1), res.output
    _assert_fits_80(res.output)


def test_gpus_at_80_columns_shows_every_figure():
    out = _at_80(["gpus"]).output
    for row in json.loads(runner.invoke(app, ["gpus", "--json"]).output):
        assert f"{row['usable_hbm_gib']:.2f}" in out and row["name"] in out and row["usable_hbm_source"] in out
    assert "15000" in out  # GB300's dense FP4 TFLOP/s, the widest peak


def test_estimate_with_8_stages_at_80_columns_keeps_the_device_column():
    out = _at_80(["estimate", "examples/deepseek_v3_gb300.yaml", "--pp", "8", "--vpp", "2"]).output
    header = next(line for line in out.splitlines() if line.lstrip().startswith("stage"))
    assert header.split()[-1] == "device"


@pytest.mark.parametrize("name", [n for n, _ in COMMANDS])
def test_help_of_every_command_fits_80_columns(name):
    res = _at_80([name, "--help"])
    assert res.exit_code == 0, res.output
    _assert_fits_80(res.output)


def test_help_folds_long_key_names_instead_of_cutting_them():
    out = _at_80(["plan", "--help"]).output
    flat = "".join(line.strip("│ ") for line in out.splitlines())
    for key in ("tensor_model_parallel_size", "expert_tensor_parallel_size", "--global-batch-size"):
        assert key in flat.replace(" ", "")


def test_sweep_collect_at_80_columns(tmp_path):
    req = {
        "model": "Qwen/Qwen3-30B-A3B",
        "system": {"gpu": "h100", "num_gpus": 32},
        "training": {"seq_length": 16384, "global_batch_size": 64, "micro_batch_size": 1},
        "layout": {"tensor_model_parallel_size": 2, "expert_model_parallel_size": 8},
    }
    entry = "01-tp2-pp1-cp1-ep8-etp1-mbs1-selective-recompute-alltoall"
    (tmp_path / entry).mkdir()
    (tmp_path / "manifest.json").write_text(
        json.dumps({"entries": [{"id": entry, "scenario": req, "predicted": {"tokens_per_s_per_gpu": 3500.0}}]})
    )
    log = "".join(
        f" iteration {i:>8d}/     100 | elapsed time per iteration (ms): 10000.0 | lm loss: 5.0E+00 |\n"
        for i in range(1, 30)
    )
    (tmp_path / entry / "run-1.log").write_text(log)
    res = _at_80(["sweep", "collect", str(tmp_path)])
    assert res.exit_code == 0, res.output
    _assert_fits_80(res.output)
    # 64 · 16384 tokens / 10 s / 32 GPUs = 3,277 measured; 3,500 predicted: +6.8 %
    assert "3,277" in res.output and "3,500" in res.output and "+6.8%" in res.output
    assert entry in "".join(line.strip("│ ") for line in res.output.splitlines()).replace(" ", "")


def test_vlm_stats_at_80_columns_shows_every_column():
    args = ["vlm-stats", "examples/vlm_manifest.jsonl", "-s", "8192"]
    doc = json.loads(runner.invoke(app, [*args, "--json"]).output)
    out = _at_80(args).output
    for key, name in (("image_tokens_per_sample", "image tokens"), ("vit_patches_per_sample", "ViT patches")):
        row = next(line for line in out.splitlines() if name in line and "│" in line)
        for stat in ("mean", "p50", "p90", "max"):
            assert f"{doc[key][stat]:,.0f}" in row, (stat, row)


def test_the_suite_ignores_the_width_of_the_callers_terminal():
    # `COLUMNS=80 pytest` wrapped the plan header of a test that reads it at moeplan's pipe width
    assert "COLUMNS" not in os.environ and "TERMINAL_WIDTH" not in os.environ
