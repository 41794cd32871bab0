"""One memory verdict (fits / tight / does-not-fit) from the peak estimate and the memory model's
measured band, the same in check, estimate, fit, plan and oom, and the exit codes it gives.

The band is the range of measured / predicted over the memory readings (docs/memory_accuracy.md):
13.41 / 12.062 = 1.1118 at most, 7.96 / 8.786 = 0.9060 at least; a peak P may measure 0.9060·P to 1.1118·P."""

from __future__ import annotations

import copy

import pytest
import yaml
from typer.testing import CliRunner

from moeplan.api import check_report, estimate_report, fit_report, oom_report, plan_report
from moeplan.cli.app import app
from moeplan.model.memory import band_edges, band_factors, judge_memory
from moeplan.model.validity import memory_validity

GIB = 2**30

#: Qwen3-30B-A3B on 16 H100 (79.65 GiB usable), TP1 PP1 CP1 EP16, no recompute, all-to-all, no
#: graphs: every key plan would search is stated, so plan holds this very layout. The peak grows by
#: about 6.95 GiB per 1K tokens of sequence (activations): 2K → 56.0 GiB, 4.5K → 73.3, 6K → 83.8, 12K → 125.5.
SCENARIO = {
    "model": "qwen3-30b-a3b",
    "system": {"gpu": "h100", "num_gpus": 16},
    "training": {"seq_length": 2048, "micro_batch_size": 1, "global_batch_size": 64, "precision": "bf16"},
    "layout": {
        "tensor_model_parallel_size": 1,
        "pipeline_model_parallel_size": 1,
        "context_parallel_size": 1,
        "expert_model_parallel_size": 16,
        "expert_tensor_parallel_size": 1,
        "use_distributed_optimizer": True,
        "recompute_granularity": None,
        "moe_token_dispatcher_type": "alltoall",
        "cuda_graph_impl": "none",
        "overlap_moe_expert_parallel_comm": False,
        "optimizer_cpu_offload": False,
    },
}
#: sequence lengths chosen by size against 79.65 GiB and the band 0.9060–1.1118: well under (56.0 × 1.1118
#: = 62.3 ≤ 79.65), in the band below capacity (73.35: 66.5 ≤ 79.65 < 81.5), in the band above capacity
#: (83.8: 75.9 ≤ 79.65 < 93.1), over (125.5 × 0.9060 = 113.7 > 79.65)
UNDER, IN_BAND, IN_BAND_OVER, OVER = 2048, 4608, 6144, 12288

OOM_MESSAGE = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has a total capacity of "
    "79.65 GiB of which 0.50 GiB is free. Including non-PyTorch memory, this process has 79.10 GiB memory in "
    "use. Of the allocated memory 70.00 GiB is allocated by PyTorch, and 6.00 GiB is reserved by PyTorch but "
    "unallocated."
)


def _scenario(tmp_path, seq: int):
    data = copy.deepcopy(SCENARIO)
    data["training"]["seq_length"] = seq
    path = tmp_path / f"s{seq}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_band_is_the_range_of_the_measured_readings():
    readings = {r["id"]: r for r in memory_validity()["readings"]}
    low, high, source = band_factors()
    # the model's worst under-prediction (−10.05 %) and worst over-prediction (+10.38 %)
    assert high == pytest.approx(13.41 / 12.062) == pytest.approx(1.111756, rel=1e-6)
    assert low == pytest.approx(7.96 / 8.786) == pytest.approx(0.905987, rel=1e-6)
    assert readings["mixtral-8x2b-4layer-tp1-mbs1"]["error_pct"] == -10.05
    assert readings["mixtral-8x2b-4layer-tp2-mbs2"]["error_pct"] == 10.38
    assert "docs/memory_accuracy.md" in source


def test_band_edges_scale_the_peak():
    assert band_edges(100.0, (0.9, 1.1)) == pytest.approx((90.0, 110.0))


@pytest.mark.parametrize(
    ("peak_gib", "expected"),
    [
        (72.0, "fits"),  # 72 × 1.1 = 79.2 ≤ 80
        (73.0, "tight"),  # 73 × 1.1 = 80.3 > 80, 73 × 0.9 = 65.7 ≤ 80
        (85.0, "tight"),  # over the capacity by the estimate, but 85 × 0.9 = 76.5 ≤ 80: may fit
        (88.0, "tight"),  # 88 × 0.9 = 79.2 ≤ 80
        (89.0, "does-not-fit"),  # 89 × 0.9 = 80.1 > 80
    ],
)
def test_verdict_is_tight_where_the_band_crosses_capacity(peak_gib, expected):
    assert judge_memory(peak_gib * GIB, 80 * GIB, factors=(0.9, 1.1)).verdict == expected


def test_host_overflow_and_missing_gpu():
    assert judge_memory(10 * GIB, 80 * GIB, host_fits=False, factors=(0.9, 1.1)).verdict == "does-not-fit"
    assert judge_memory(10 * GIB, None, factors=(0.9, 1.1)).verdict == "unknown"


def test_tight_text_states_the_band_and_the_capacity():
    v = judge_memory(75 * GIB, 80 * GIB, factors=(0.9, 1.12))
    assert v.text() == (
        "may not fit: the peak 75.0 GiB may measure 67.5–84.0 GiB (the memory model's −10.0 / +12.0 %), "
        "across the usable 80.0 GiB"
    )


def _verdicts(tmp_path, seq: int) -> dict[str, str | None]:
    path = _scenario(tmp_path, seq)
    plan = plan_report(path, top=1)
    planned = plan["candidates"][0]["memory"]["verdict"] if plan["candidates"] else None
    return {
        "check": check_report(path)["memory"]["verdict"],
        "estimate": estimate_report(path).document["memory"]["verdict"],
        "fit": fit_report(path)["memory"]["verdict"],
        "plan": planned or plan["rejected"][0]["reason"],
        "oom": oom_report(OOM_MESSAGE, scenario=path)["blame"]["verdict"],
    }


@pytest.mark.parametrize(
    ("seq", "expected"),
    [(UNDER, "fits"), (IN_BAND, "tight"), (IN_BAND_OVER, "tight"), (OVER, "does-not-fit")],
)
def test_every_command_gives_the_same_verdict(tmp_path, seq, expected):
    assert _verdicts(tmp_path, seq) == dict.fromkeys(("check", "estimate", "fit", "plan", "oom"), expected)


def test_plan_says_when_first_is_tight(tmp_path):
    res = CliRunner().invoke(app, ["plan", str(_scenario(tmp_path, IN_BAND)), "--top", "1", "--lang", "en"])
    assert res.exit_code == 0, res.output
    flat = " ".join(res.output.split())
    assert (
        "#1 is tight: may not fit: the peak 73.3 GiB may measure 66.5–81.5 GiB (the memory model's −9.4 / +11.2 %)"
        in flat
    )


def test_oom_within_the_band_keeps_the_message_reading(tmp_path):
    # 83.8 GiB estimated on 79.65 usable is tight, not proven real demand: the allocator's 6 GiB
    # reserved-but-unallocated reading (fragmentation) stands
    out = oom_report(OOM_MESSAGE, scenario=_scenario(tmp_path, IN_BAND_OVER))
    assert out["fragmentation"] is True
    out = oom_report(OOM_MESSAGE, scenario=_scenario(tmp_path, OVER))
    assert out["fragmentation"] is False


runner = CliRunner()


@pytest.mark.parametrize("seq", [UNDER, IN_BAND, OVER])
def test_fit_exits_zero_when_a_fix_fits_and_states_the_layouts_own_verdict(tmp_path, seq):
    # fit's job is a layout that fits: exit 0 when the layout or a fix does (its header still gives the
    # layout's own verdict, the one check and estimate give), so `fit --save F && moeplan export F` runs on
    res = runner.invoke(app, ["fit", str(_scenario(tmp_path, seq)), "--lang", "en"])
    assert res.exit_code == 0, res.output
    flat = " ".join(res.output.split())
    if seq == IN_BAND:
        assert "tight: may not fit: the peak 73.3 GiB" in flat
    if seq == OVER:
        assert "does-not-fit" in flat


@pytest.mark.parametrize("command", ["check", "estimate"])
@pytest.mark.parametrize(("seq", "code"), [(UNDER, 0), (IN_BAND, 1), (OVER, 1)])
def test_exit_code_is_one_unless_it_fits(tmp_path, command, seq, code):
    res = runner.invoke(app, [command, str(_scenario(tmp_path, seq)), "--lang", "en"])
    assert res.exit_code == code, res.output
    if seq == IN_BAND:
        flat = " ".join(res.output.split())
        assert (
            "tight: may not fit: the peak 73.3 GiB may measure 66.5–81.5 GiB (the memory model's −9.4 / +11.2 %)"
            in flat
        )
