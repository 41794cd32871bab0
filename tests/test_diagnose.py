"""Log and OOM diagnosis: exact statistics on synthetic Megatron-format logs, both PyTorch OOM message
formats, fuzzing (never a traceback), and the `log` / `oom` CLI commands in-process."""

from __future__ import annotations

import contextlib
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from moeplan.cli.app import app
from moeplan.diagnose.oom import parse_oom
from moeplan.errors import InputError
from moeplan.io.run_logs import parse_log
from tests.conftest import ROOT

runner = CliRunner()

# Megatron training.py training_log line; rank 0 prints it, interleaved copies come from other ranks.
_LINE = (
    "[2026-11-30 05:00:{it:02d}] iteration {it:>8d}/     100 | consumed samples: {cs:>10d} | "
    "elapsed time per iteration (ms): {ms:.1f} | throughput per GPU (TFLOP/s/GPU): {tf:.1f} | "
    "learning rate: 1.000000E-04 | global batch size:    64 | lm loss: {loss:.6E} | loss scale: 1.0 | "
    "grad norm: {gn:.3f} | number of skipped iterations:   0 | number of nan iterations:   0 |"
)
TIMES_MS = [5000.0, 3000.0, 1000.0, 1010.0, 990.0, 1000.0, 1020.0, 980.0, 1000.0, 1005.0]


def _log_text() -> str:
    lines = ["using world size: 8, data-parallel size: 8", "iteration | this line is garbage"]
    for i, ms in enumerate(TIMES_MS, start=1):
        line = _LINE.format(it=i, cs=64 * i, ms=ms, tf=400.0 * 1000.0 / ms, loss=10.0 - i * 0.5, gn=1.0 / i)
        if i == 4:
            line = "\x1b[32m" + line + "\x1b[0m"  # ANSI colour
        lines.append(line)
        if i == 5:  # another rank reports iteration 5 later with a different time: first report wins
            lines.append("[rank7]: " + _LINE.format(it=5, cs=320, ms=9999.0, tf=1.0, loss=1.0, gn=1.0))
        if i == 3:
            lines.append(
                "[Rank 0] (after 3 iterations) memory (MB) | allocated: 1000.0 | max allocated: 5000.0 "
                "| reserved: 6000.0 | max reserved: 6000.0"
            )
            lines.append(
                "[Rank 4] (after 3 iterations) memory (MB) | allocated: 900.0 | max allocated: 5500.0 "
                "| reserved: 5800.0 | max reserved: 7000.0"
            )
    lines.append("\x00\xff binary junk")
    return "\n".join(lines) + "\n"


def test_log_statistics_exact():
    s = parse_log(_log_text()).summary()
    # 10 distinct iterations; second-half median 1000 ms: 5000 and 3000 exceed 1.1 x 1000 -> 2 skipped
    assert s["iterations"] == 10 and s["warmup_skipped"] == 2
    t = s["iteration_time_ms"]
    # steady times (iters 3..10) sorted: 980 990 1000 1000 1000 1005 1010 1020 -> median 1000;
    # the rank-7 copy of iteration 5 (9999 ms) is ignored.
    assert t["n"] == 8 and t["median"] == 1000.0 and t["min"] == 980.0 and t["max"] == 1020.0
    # exclusive quartiles over 8 points at positions 9/4 and 27/4: 990 + 0.25*10 = 992.5 and
    # 1005 + 0.75*5 = 1008.75 -> IQR 16.25
    assert t["iqr"] == pytest.approx(16.25)
    # loss at iteration i is 10 - i/2; steady iterations 3..10 -> median of 8.5..5.0 = 6.75
    assert s["loss"]["median"] == pytest.approx(6.75)
    assert s["skipped_iterations"] == 0 and s["nan_iterations"] == 0
    # memory: maximum over ranks of each figure
    assert s["memory_mb"] == {"allocated": 1000.0, "max_allocated": 5500.0, "reserved": 6000.0, "max_reserved": 7000.0}
    assert s["unreadable_lines"] == 1
    assert s["lines"] == len(_log_text().splitlines())


def test_short_log_has_no_warmup_and_empty_log_is_empty():
    text = "\n".join(_LINE.format(it=i, cs=i, ms=100.0 * i, tf=1.0, loss=1.0, gn=1.0) for i in (1, 2, 3))
    s = parse_log(text).summary()
    assert s["warmup_skipped"] == 0 and s["iteration_time_ms"]["median"] == 200.0
    e = parse_log("").summary()
    assert e["iterations"] == 0 and "iteration_time_ms" not in e


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("iteration |:0123456789.eE-+/()\n\x1bmMB[]alocdx")), max_size=400))
def test_parse_log_never_raises(text):
    s = parse_log(text).summary()
    # a count is never negative, so `iterations >= 0` could not fail: each parsed iteration needs its own
    # "iteration N/" record, so there are at most as many as the text has "iteration" words
    assert s["iterations"] <= text.count("iteration") and s["unreadable_lines"] <= s["lines"]


NEW_FRAG = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has a total capacity of "
    "139.81 GiB of which 1.50 GiB is free. Including non-PyTorch memory, this process has 138.30 GiB memory in "
    "use. Of the allocated memory 120.00 GiB is allocated by PyTorch, and 16.00 GiB is reserved by PyTorch but "
    "unallocated. If reserved but unallocated memory is large try setting "
    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation."
)
NEW_REAL = NEW_FRAG.replace("16.00 GiB is reserved", "512.00 MiB is reserved").replace("GPU 3", "GPU 0")
OLD_FRAG = (
    "RuntimeError: CUDA out of memory. Tried to allocate 1.50 GiB (GPU 0; 79.35 GiB total capacity; "
    "70.00 GiB already allocated; 1.20 GiB free; 76.00 GiB reserved in total by PyTorch)"
)


def test_oom_new_format_fragmentation():
    r = parse_oom(NEW_FRAG)
    assert r.requested_bytes == 2 * 2**30 and r.gpu_index == 3
    assert r.total_bytes == int(139.81 * 2**30) and r.free_bytes == int(1.5 * 2**30)
    assert r.allocated_bytes == 120 * 2**30 and r.reserved_unallocated_bytes == 16 * 2**30
    assert r.process_in_use_bytes == int(138.30 * 2**30)
    assert r.fragmentation and "expandable_segments:True" in r.fixes[0]


def test_oom_new_format_real_demand():
    # 0.5 GiB idle reserve < 2 GiB request and < 10 % of 139.81 GiB -> real demand
    r = parse_oom(NEW_REAL)
    assert r.reserved_unallocated_bytes == 512 * 2**20 and not r.fragmentation and r.gpu_index == 0
    assert "real demand" in r.diagnosis


def test_oom_old_format_and_last_message_wins():
    r = parse_oom(OLD_FRAG)
    # reserved in total 76 - already allocated 70 = 6 GiB idle >= 1.5 GiB request
    assert r.reserved_unallocated_bytes == 6 * 2**30 and r.fragmentation
    assert r.process_in_use_bytes is None and r.total_bytes == int(79.35 * 2**30)
    both = "[rank0]: " + OLD_FRAG + "\n[rank3]: " + NEW_REAL
    assert parse_oom(both).requested_bytes == 2 * 2**30 and not parse_oom(both).fragmentation


def test_oom_without_message_is_input_error():
    with pytest.raises(InputError, match="oom"):
        parse_oom("Segmentation fault (core dumped)")


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300))
def test_parse_oom_only_raises_input_error(text):
    for t in (text, "Tried to allocate " + text):
        with contextlib.suppress(InputError):
            parse_oom(t)


def test_cli_log_json(tmp_path):
    p = tmp_path / "train.log"
    p.write_text(_log_text())
    res = runner.invoke(app, ["log", str(p), "--json"])
    assert res.exit_code == 0, res.output
    (data,) = json.loads(res.stdout)  # always a list, one entry per log
    assert data["iteration_time_ms"]["median"] == 1000.0 and data["log"] == str(p)
    res = runner.invoke(app, ["log", str(p)])
    assert res.exit_code == 0 and "1.000" in res.stdout and "400" in res.stdout


def test_cli_log_missing_file_exit_2(tmp_path):
    res = runner.invoke(app, ["log", str(tmp_path / "nope.log")])
    assert res.exit_code == 2 and "nope.log" in res.stderr and "Traceback" not in res.output


def test_cli_oom_message_file_and_scenario(tmp_path):
    res = runner.invoke(app, ["oom", NEW_FRAG, "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["fragmentation"] is True
    f = tmp_path / "crash.log"
    f.write_text("step 1\n" + NEW_REAL + "\n")
    res = runner.invoke(app, ["oom", str(f), "--scenario", "examples/deepseek_v3_gb300.yaml", "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["fragmentation"] is False and data["blame"]["predicted_peak_bytes"] > 0
    assert len(data["blame"]["largest_terms"]) == 3
    res = runner.invoke(app, ["oom", str(f)])
    assert res.exit_code == 0 and "real demand" in res.stdout


def test_cli_oom_bad_input_exit_2():
    res = runner.invoke(app, ["oom", "x" * 5000])
    assert res.exit_code == 2 and "Traceback" not in res.output
    res = runner.invoke(app, ["oom", "a\x00b"])
    assert res.exit_code == 2


QWEN_TIGHT = {
    "model": "Qwen/Qwen3-30B-A3B",
    "system": {"gpu": "h100", "num_gpus": 8},
    "training": {"seq_length": 16384, "micro_batch_size": 1, "global_batch_size": 64, "precision": "bf16"},
    "layout": {"expert_model_parallel_size": 8, "recompute_granularity": "selective", "recompute_modules": ["moe_act"]},
}


def test_memory_fixes_are_legal_sorted_and_exact():
    from moeplan import estimate_memory, load_scenario, validate
    from moeplan.diagnose.fixes import rank_memory_fixes

    fixes, rejected = rank_memory_fixes(QWEN_TIGHT)
    assert fixes, rejected
    savings = [f["saving_bytes"] for f in fixes]
    assert savings == sorted(savings, reverse=True) and min(savings) > 0
    peak0 = estimate_memory(load_scenario(QWEN_TIGHT)).peak_stage.total_bytes
    by = {f["change"]: f for f in fixes}
    # the recompute candidate is exactly the scenario with layernorm added, re-estimated
    sel = {**QWEN_TIGHT, "layout": {**QWEN_TIGHT["layout"], "recompute_modules": ["moe_act", "layernorm"]}}
    peak_sel = estimate_memory(load_scenario(sel)).peak_stage.total_bytes
    assert not validate(load_scenario(sel)).errors
    assert by["recompute selective moe_act,layernorm"]["saving_bytes"] == int(peak0 - peak_sel)
    # CP 1 -> 2 halves the sequence per rank: it must save memory (more CP never raises activations)
    assert by["CP 1 → 2"]["saving_bytes"] > 0
    for r in rejected:
        assert r["message"]
        if r["rule"] is None:  # rejected for its memory: it saves nothing, so the peak change reads as a rise
            assert r["message"].startswith("does not lower the peak (peak +"), r


def test_fit_and_oom_try_the_same_changes():
    """One generator of memory-saving changes: every change oom lists (fixed or rejected) is one fit
    lists too (fits, not enough, or rejected), with the same label."""
    from moeplan.diagnose.fixes import rank_memory_fixes
    from moeplan.plan.fit import fit_layout

    fixes, rejected = rank_memory_fixes(QWEN_TIGHT)
    oom_labels = {f["change"] for f in fixes} | {r["change"] for r in rejected}
    out = fit_layout(QWEN_TIGHT)
    fit_labels = {
        r["change"] for key in ("fixes", "not_enough", "rejected") for r in out[key] if " + " not in r["change"]
    }
    assert oom_labels == fit_labels
    assert {"recompute full", "CP 1 → 2", "EP 8 → 16", "optimizer offload 1"} <= oom_labels


def test_cli_oom_lists_fixes(tmp_path):
    sc = tmp_path / "s.yaml"
    sc.write_text(json.dumps(QWEN_TIGHT))
    res = runner.invoke(app, ["oom", NEW_REAL, "--scenario", str(sc), "--json"])
    assert res.exit_code == 0, res.output
    blame = json.loads(res.stdout)["blame"]
    assert blame["fixes"] and blame["fixes"][0]["saving_bytes"] >= blame["fixes"][-1]["saving_bytes"]
    # fragmentation by the message, and a layout the model puts under the GPU's memory: the allocator fix,
    # not the layout (the same message on QWEN_TIGHT, 165 GiB on H100, is real demand: see below)
    light = {
        **QWEN_TIGHT,
        "system": {"gpu": "h200", "num_gpus": 8},
        "training": {**QWEN_TIGHT["training"], "seq_length": 4096},
    }
    sc.write_text(json.dumps(light))
    res = runner.invoke(app, ["oom", NEW_FRAG, "--scenario", str(sc), "--json"])
    out = json.loads(res.stdout)
    assert out["fragmentation"] is True and "fixes" not in out["blame"]


def test_environment_banner_and_rank_params():
    text = (
        "== PyTorch ==\nNVIDIA Release 25.09 (build 201234567)\nPyTorch Version 2.9.0a0+50eac811a6\n"
        "using world size: 16, data-parallel size: 2, context-parallel size: 2, hierarchical context-parallel "
        "sizes: None, tensor-model-parallel size: 2, encoder-tensor-model-parallel size: 0, "
        "pipeline-model-parallel size: 2, encoder-pipeline-model-parallel size: 0\n"
        " > number of parameters on (tensor, pipeline) model parallel rank (1, 0): 1234567\n"
        " > number of parameters on (tensor, pipeline) model parallel rank (0, 1): 7654321\n"
        " > number of parameters on (tensor, pipeline) model parallel rank (1, 0): 999\n"
    )
    s = parse_log(text).summary()
    assert s["environment"] == {
        "container_release": "25.09",
        "torch": "2.9.0a0+50eac811a6",
        "world_size": 16,
        "data_parallel_size": 2,
        "context_parallel_size": 2,
        "tensor_model_parallel_size": 2,
        "pipeline_model_parallel_size": 2,
    }
    assert s["rank_params"] == {"1,0": 1234567, "0,1": 7654321}  # the first report of a rank wins


FULL_GPU = (
    "CUDA out of memory. Tried to allocate 512.00 KiB. GPU 0 has a total capacity of 79.10 GiB of which "
    "0 bytes is free. Of the allocated memory 78.00 GiB is allocated by PyTorch, and 1.00 MiB is reserved "
    "by PyTorch but unallocated."
)


def test_oom_edge_cases():
    r = parse_oom(FULL_GPU)
    assert r.free_bytes == 0  # "0 bytes is free" is a value, not a missing figure
    # 1 MiB idle >= 512 KiB request, but below 0.5 % of 79.10 GiB: a crumb, not fragmentation
    assert r.fragmentation is False
    r = parse_oom("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.10 GiB")
    assert r.fragmentation is None and "cannot tell" in r.diagnosis
    for bad in ("Tried to allocate lots of memory", "Tried to allocate 1.2.3 GiB.", "Tried to allocate . GiB"):
        with pytest.raises(InputError, match="requested size"):
            parse_oom(bad)


def test_log_counters_truncation_bad_values_and_encodings(tmp_path):
    lines = [
        _LINE.format(it=i, cs=i, ms=1000.0, tf=1.0, loss=1.0, gn=1.0).replace(
            "skipped iterations:   0", f"skipped iterations:   {1 if i in (3, 7) else 0}"
        )
        for i in range(1, 11)
    ]
    text = "\n".join(lines) + "\n[Rank 0] (after 5 iterations) memory (MB) | allocated: 1.2.3 | max allocated: 1 "
    text += "| reserved: 1 | max reserved: 1\n" + lines[0].replace("iteration        1/", "iteration       11/")[:120]
    st = parse_log(text)
    s = st.summary()
    assert s["skipped_iterations"] == 2  # summed over iterations: Megatron resets it every interval
    assert st.truncated and 11 not in st.iterations  # the cut-off last record is dropped
    assert s["unreadable_lines"] == 2 and "memory_mb" not in s  # the "1.2.3" memory line and the cut line
    p = tmp_path / "u16.log"
    p.write_text("\n".join(lines) + "\n", encoding="utf-16")
    res = runner.invoke(app, ["log", str(p), "--json"])
    assert res.exit_code == 0 and json.loads(res.stdout)[0]["iterations"] == 10
    e = tmp_path / "empty.log"
    e.write_text("")
    res = runner.invoke(app, ["log", str(e)])
    assert res.exit_code == 0 and "no Megatron iteration lines" in res.stdout


def test_oom_cli_unreadable_path_and_no_size(tmp_path):
    d = tmp_path / "adir"
    d.mkdir()
    res = runner.invoke(app, ["oom", str(d)])
    assert res.exit_code == 2 and "adir" in res.stderr
    res = runner.invoke(app, ["oom", "Tried to allocate lots"])
    assert res.exit_code == 2 and "requested size" in res.stderr


def test_cli_oom_says_when_the_model_underestimates(tmp_path):
    sc = tmp_path / "s.yaml"
    sc.write_text(json.dumps(QWEN_TIGHT))
    from moeplan import estimate_memory, load_scenario

    peak = estimate_memory(load_scenario(QWEN_TIGHT)).peak_stage.total_bytes
    held_gib = peak / 2**30 + 10  # the process held 10 GiB more than the model's whole peak
    msg = (
        f"CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 500.00 GiB of which "
        f"1.00 GiB is free. Including non-PyTorch memory, this process has {held_gib:.2f} GiB memory in use. "
        "Of the allocated memory 1.00 GiB is allocated by PyTorch, and 0 bytes is reserved by PyTorch but unallocated."
    )
    data = json.loads(runner.invoke(app, ["oom", msg, "--scenario", str(sc), "--json"]).stdout)
    import re

    gaps = [float(m.group(1)) for n in data["blame"]["notes"] if (m := re.search(r"at least ([0-9.]+) GiB", n))]
    assert gaps and gaps[0] == pytest.approx(12.0, abs=0.01)  # 10 GiB over the peak + the 2 GiB request


def test_reconcile_with_model_real_demand_beats_the_idle_reserve():
    from moeplan.diagnose.oom import reconcile_with_model

    rep = parse_oom(OLD_FRAG)  # 6 GiB idle reserve >= 1.5 GiB request: fragmentation by the message alone
    assert rep.fragmentation is True
    cap = int(79.35 * 2**30)
    same, notes = reconcile_with_model(rep, int(70 * 2**30), cap)  # model peak below capacity: unchanged
    assert same is rep and notes == []
    over, notes = reconcile_with_model(rep, int(140 * 2**30), cap)
    assert over.fragmentation is False and over.diagnosis.startswith("real demand") and notes == []
    assert "fragmentation" in over.diagnosis  # says what the message alone suggested
    # a message from an 80 GB GPU read against a 178 GiB scenario GPU: warned (|79.35/178 - 1| > 10 %)
    _, notes = reconcile_with_model(rep, int(70 * 2**30), int(178 * 2**30))
    assert len(notes) == 1 and notes[0].startswith("WARNING") and "79.35 GiB" in notes[0]


def test_cli_oom_fragmentation_message_on_a_layout_far_over_capacity_gets_fixes():
    res = runner.invoke(app, ["oom", OLD_FRAG, "--scenario", "examples/qwen3_30b_64k_oom.yaml", "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["fragmentation"] is False and data["diagnosis"].startswith("real demand")
    assert data["blame"]["fixes"] and any(f["fits"] for f in data["blame"]["fixes"])


def test_log_derives_tokens_per_s_from_the_argument_dump():
    from moeplan.io.run_logs import derive_tokens_per_s

    summ = {"iteration_time_ms": {"median": 30675.0, "iqr": 50.0, "min": 30600.0, "max": 30700.0, "n": 4}}
    cfg = {"system": {"num_gpus": 256}, "training": {"global_batch_size": 64, "seq_length": 131072}}
    out = derive_tokens_per_s(summ, cfg)["tokens_per_s_per_gpu"]
    # 64 · 131072 / 30.675 s / 256 = 1068.67 tokens/s/GPU; the slowest iteration gives the minimum
    assert out["median"] == pytest.approx(64 * 131072 / 30.675 / 256) and out["derived"] is True
    assert out["min"] == pytest.approx(64 * 131072 / 30.700 / 256) and out["n"] == 4
    assert derive_tokens_per_s(summ, None) == summ  # no dump: nothing derived
    printed = {**summ, "tokens_per_s_per_gpu": {"median": 1.0}}
    assert derive_tokens_per_s(printed, cfg) == printed  # the log's own figure wins


@pytest.mark.parametrize("ms", ["0.0", "-5.0", "1e308", "nan", "5e-324", "1e-310", "1e10"])
def test_log_ignores_impossible_iteration_times(ms, tmp_path):
    from moeplan.io.run_logs import parse_log

    lines = [
        f" iteration {i:8d}/      30 | consumed samples: {i * 8} | elapsed time per iteration (ms): {ms} | "
        "global batch size:     8 | lm loss: 1.0E+00 |"
        for i in range(1, 31)
    ]
    st = parse_log("\n".join(lines))
    summ = st.summary()
    assert "iteration_time_ms" not in summ  # none is a real measurement
    if ms != "nan":  # NaN is not a value at all; the others are counted as left out
        assert summ["impossible_values_left_out"]["iteration_time_ms"] == 30 - st.warmup_skipped
    f = tmp_path / "x.log"
    f.write_text("\n".join(lines))
    r = runner.invoke(app, ["log", str(f), "--json"])
    assert r.exit_code == 0 and "Infinity" not in r.stdout and "NaN" not in r.stdout
    json.loads(r.stdout)


def test_a_change_that_raises_the_peak_says_by_how_much_with_its_sign():
    import re

    import yaml

    from moeplan import estimate_memory, load_scenario
    from moeplan.diagnose.fixes import rank_memory_fixes

    data = yaml.safe_load((ROOT / "examples" / "qwen3_30b_64k_oom.yaml").read_text())
    _, rejected = rank_memory_fixes(data)
    etp = next(r for r in rejected if r["change"] == "ETP 1 → 2")
    got = re.fullmatch(r"does not lower the peak \(peak \+(\d+\.\d\d) GiB\)", etp["message"])
    assert got, etp
    # the rise is the re-estimated peak with ETP 2 against the scenario's own
    peak0 = estimate_memory(load_scenario(data)).peak_stage.total_bytes
    etp2 = {**data, "layout": {**data["layout"], "expert_tensor_parallel_size": 2}}
    peak2 = estimate_memory(load_scenario(etp2)).peak_stage.total_bytes
    assert float(got.group(1)) == round((peak2 - peak0) / 2**30, 2) > 0
