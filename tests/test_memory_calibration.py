"""`moeplan calibrate --memory`: the allocator reserve and the memory outside PyTorch learned from a
run's own memory reports (moeplan.model.memory.overheads_fit), hand-derived on one log: with what it
learns, moeplan's reserved and device figures for that log equal the measured ones."""

from __future__ import annotations

import json

import pytest
import yaml
from typer.testing import CliRunner

from moeplan.api.calibrate import calibrate_memory_report
from moeplan.cli.app import app
from moeplan.errors import InputError
from moeplan.io.run_logs import read_log
from moeplan.model.memory import estimate_memory
from moeplan.model.memory.overheads_fit import (
    predicted_dynamic_bytes,
    predicted_outside_torch_bytes,
)
from moeplan.resolve.load import load_scenario
from moeplan.units import GIB_BYTES

runner = CliRunner()
SCENARIO = {
    "model": "Qwen/Qwen3-30B-A3B",
    "system": {"gpu": "h100", "num_gpus": 8},
    "training": {"seq_length": 4096, "micro_batch_size": 1, "global_batch_size": 64, "precision": "bf16"},
    "layout": {"expert_model_parallel_size": 8},
}
MIB = 1024 * 1024


def _log(alloc_mib: float, reserved_mib: float, device_mib: float | None) -> str:
    dev = f" | total device memory used: {device_mib:.2f}" if device_mib is not None else ""
    lines = [
        f" iteration {i:>8d}/     100 | elapsed time per iteration (ms): 1000.0 | lm loss: 5.0E+00 |"
        for i in range(1, 21)
    ]
    lines.append(
        f"[Rank 0] (after 10 iterations) memory (MB) | allocated: 1000.00 | max allocated: {alloc_mib:.2f} "
        f"| reserved: 2000.00 | max reserved: {reserved_mib:.2f}{dev}"
    )
    return "\n".join(lines) + "\n"


@pytest.fixture()
def files(tmp_path):
    base = tmp_path / "base.yaml"
    base.write_text(yaml.safe_dump(SCENARIO))
    return tmp_path, base


def test_the_log_reader_keeps_device_memory_used(tmp_path):
    p = tmp_path / "a.log"
    p.write_text(_log(50000.0, 60000.0, 62000.5))
    assert read_log(p).memory_mb == {
        "allocated": 1000.0,
        "max_allocated": 50000.0,
        "reserved": 2000.0,
        "max_reserved": 60000.0,
        "device_used": 62000.5,
    }


def test_learned_values_reproduce_the_log(files):
    """Reserve: (R − A − graph pool) / dynamic; outside torch: D − R − NCCL (the only other device item
    here); the estimate with those values prints the measured reserved and device figures."""
    tmp, base = files
    st = max(estimate_memory(load_scenario(SCENARIO)).stages, key=lambda x: x.peak_allocated_bytes)
    dyn = predicted_dynamic_bytes(st)
    a, r, d = 60000.0, 60000.0 + 0.2 * dyn / MIB, 60000.0 + 0.2 * dyn / MIB + 3.0 * 1024
    log = tmp / "a.log"
    log.write_text(_log(a, r, d))
    out = calibrate_memory_report([log], base, tmp / "o.yaml")
    assert out["overheads"]["fragmentation_fraction"] == pytest.approx(0.2, abs=1e-4)
    nccl = predicted_outside_torch_bytes(st) / GIB_BYTES
    assert nccl == pytest.approx(1.0)  # NCCL buffers: the default planning value, no dispatcher buffers
    assert out["overheads"]["cuda_context_gib"] == pytest.approx(3.0 - nccl, abs=1e-3)
    after = out["after"][0]
    # allocated is moeplan's own: the reserve and device figures now sit on it, so compare the gaps
    pa, pr, pd = (after["predicted_gib"][k] for k in ("allocated", "reserved", "device"))
    assert pr - pa == pytest.approx((r - a) * MIB / GIB_BYTES, abs=2e-3)
    assert pd - pr == pytest.approx((d - r) * MIB / GIB_BYTES, abs=2e-3)
    written = yaml.safe_load((tmp / "o.yaml").read_text())
    assert written == {"overheads": out["overheads"]}
    assert load_scenario({**SCENARIO, **written}).input.overheads.fragmentation_fraction == pytest.approx(0.2, abs=1e-4)


def test_without_a_device_figure_only_the_reserve_is_learned(files):
    tmp, base = files
    log = tmp / "a.log"
    log.write_text(_log(60000.0, 59000.0, None))  # reserved below allocated: clipped to 0
    out = calibrate_memory_report([log], base)
    assert out["overheads"] == {"fragmentation_fraction": 0.0}
    assert out["votes"] == {"fragmentation_fraction": 1, "cuda_context_gib": 0}


def test_a_log_without_memory_report_is_an_input_error(files):
    tmp, base = files
    log = tmp / "a.log"
    log.write_text(" iteration 1/ 10 | elapsed time per iteration (ms): 1000.0 |\n")
    with pytest.raises(InputError, match="no memory report"):
        calibrate_memory_report([log], base)


def test_cli_memory_calibration(files):
    tmp, base = files
    log = tmp / "a.log"
    log.write_text(_log(60000.0, 65000.0, 67000.0))
    res = runner.invoke(app, ["calibrate", str(log), "--memory", "--scenario", str(base), "--json"])
    assert res.exit_code == 0, res.output
    assert set(json.loads(res.stdout)["overheads"]) == {"fragmentation_fraction", "cuda_context_gib"}
    res = runner.invoke(app, ["calibrate", str(log), "--memory", "--scenario", str(base)])
    assert res.exit_code == 0 and "learned fragmentation_fraction" in res.stdout
    res = runner.invoke(app, ["calibrate", str(log), "--memory"])
    assert res.exit_code == 2 and "--scenario" in res.stderr
