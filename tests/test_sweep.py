"""``moeplan sweep``: the directory it writes (scripts, smoke proxies, baseline, manifest), ``collect``
on synthetic logs with hand-computed throughput, and ``submit`` refusing without --yes / sbatch."""

from __future__ import annotations

import json

import pytest
import yaml
from typer.testing import CliRunner

from moeplan import load_scenario, validate
from moeplan.cli.app import app
from moeplan.errors import InputError
from moeplan.plan import sweep

runner = CliRunner()
REQ = {
    "model": "Qwen/Qwen3-30B-A3B",
    "system": {"gpu": "h100", "num_gpus": 32},
    "training": {"seq_length": 16384, "global_batch_size": 64, "micro_batch_size": 1},
    "layout": {"tensor_model_parallel_size": 2, "expert_model_parallel_size": 8},
}


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("sw") / "sweep"
    man = sweep.write_sweep(REQ, out, top=2)
    return out, man


def test_sweep_directory(sweep_dir):
    out, man = sweep_dir
    ids = [e["id"] for e in man["entries"]]
    assert ids[0] == "baseline" and ids[1].startswith("01-") and any(i.startswith("02-") for i in ids)
    assert (out / "README.md").exists() and (out / "manifest.json").exists()
    assert sum(e["predicted"] is not None for e in man["entries"]) >= 2  # the loop below checks them
    for e in man["entries"]:
        d = out / e["id"]
        assert (d / "scenario.yaml").exists()
        if e["predicted"] is None:
            continue
        launch, smoke = (d / "launch.sh").read_text(), (d / "smoke.sh").read_text()
        assert launch.startswith("#!/bin/bash") and "train.train_iters" not in launch
        assert "train.train_iters=20" in smoke
        # the candidate scenario is legal and what the manifest predicts for
        s = load_scenario(yaml.safe_load((d / "scenario.yaml").read_text()))
        assert not validate(s).errors
    cand = man["entries"][1]
    # TP2 folds with EP·ETP: the smoke proxy runs at PP · lcm(TP·CP, EP·ETP) GPUs with 2 layers per stage
    s = load_scenario(cand["scenario"])
    world = s.pp * __import__("math").lcm(s.tp * s.cp, s.ep * s.etp)
    assert f"on {world} GPUs" in cand["smoke"]


def test_sweep_refuses_existing_dir(sweep_dir):
    out, _ = sweep_dir
    with pytest.raises(InputError, match="empty directory"):
        sweep.write_sweep(REQ, out, top=1)


def _log(ms: float, n: int = 30) -> str:
    return "".join(
        f" iteration {i:>8d}/     100 | consumed samples: {i * 64:>10d} | elapsed time per iteration (ms): "
        f"{ms * (3 if i <= 2 else 1):.2f} | lm loss: 5.0E+00 |\n"
        for i in range(1, n + 1)
    )


def test_collect_measured_vs_predicted(sweep_dir):
    out, man = sweep_dir
    cands = [e for e in man["entries"] if e["predicted"]][:3]
    # iteration times 10 s, 20 s, 40 s → tokens/s/GPU = 64 · 16384 / t / 32
    for e, ms in zip(cands, (10000.0, 20000.0, 40000.0), strict=True):
        (out / e["id"] / "run-1.log").write_text(_log(ms))
    (out / cands[0]["id"] / "smoke-2.log").write_text(_log(1.0))  # ignored by default
    res = sweep.collect(out)
    got = {r["id"]: r for r in res["entries"]}
    for e, ms in zip(cands, (10000.0, 20000.0, 40000.0), strict=True):
        assert got[e["id"]]["measured_tokens_per_s_per_gpu"] == pytest.approx(64 * 16384 / (ms / 1000) / 32)
    assert res["measured_ranking"] == [e["id"] for e in cands]
    runs = yaml.safe_load((out / "runs.yaml").read_text())["runs"]
    assert len(runs) == 3 and runs[0]["measured"]["tokens_per_s_per_gpu"] == pytest.approx(3276.8)


def test_submit_needs_yes_and_sbatch(sweep_dir, monkeypatch):
    out, _ = sweep_dir
    with pytest.raises(InputError, match="--yes"):
        sweep.submit(out, smoke=True, yes=False)
    monkeypatch.setattr(sweep.shutil, "which", lambda name: None)
    with pytest.raises(InputError, match="sbatch"):
        sweep.submit(out, smoke=True, yes=True)


def test_cli_sweep(tmp_path):
    scn = tmp_path / "s.yaml"
    scn.write_text(yaml.safe_dump(REQ))
    r = runner.invoke(app, ["sweep", str(scn), "-o", str(tmp_path / "d"), "--top", "1", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["entries"][0]["id"] == "baseline"
    r = runner.invoke(app, ["sweep", "collect", str(tmp_path / "d")])
    assert r.exit_code == 0
    r = runner.invoke(app, ["sweep", "collect", str(tmp_path / "nope")])
    assert r.exit_code == 2 and "manifest" in r.output
    r = runner.invoke(app, ["sweep", str(scn)])
    assert r.exit_code == 2 and "--output" in r.output


@pytest.mark.parametrize(
    "manifest",
    ["[]", "{}", '{"entries": "x"}', '{"entries": [{"id": "../../etc", "scenario": {}}]}', '{"entries": [1, 2]}'],
)
def test_collect_rejects_corrupt_manifests(tmp_path, manifest):
    (tmp_path / "manifest.json").write_text(manifest)
    with pytest.raises(InputError, match="sweep directory"):
        sweep.collect(tmp_path)


def test_collect_uses_the_logged_batch_size(tmp_path):
    # a one-entry sweep directory written by hand (so no other log of the entry enters the median): the
    # entry plans GBS 64, the log ran GBS 8 at 100 ms per iteration on the entry's 32 GPUs, seq 16384
    (tmp_path / "manifest.json").write_text(json.dumps({"entries": [{"id": "only", "scenario": REQ}]}))
    (tmp_path / "only").mkdir()
    log = "".join(
        f" iteration {i:>8d}/     100 | consumed samples: {i * 8:>10d} | elapsed time per iteration (ms): 100.0 | "
        f"global batch size:     8 | lm loss: 5.0E+00 |\n"
        for i in range(1, 30)
    )
    (tmp_path / "only" / "run-9.log").write_text(log)
    (got,) = sweep.collect(tmp_path)["entries"]
    # 8 sequences · 16384 tokens / 0.1 s / 32 GPUs = 40 960 tokens/s/GPU (the planned GBS 64 would give 327 680)
    assert got["measured_tokens_per_s_per_gpu"] == pytest.approx(8 * 16384 / 0.1 / 32)
    assert any("global batch size 8" in n and "64" in n for n in got["notes"]), got["notes"]


def test_collect_skips_zero_time_logs_and_sweeps_never_repeat_a_run(tmp_path):
    llama = {
        "model": "meta-llama/Llama-3.1-8B",
        "system": {"gpu": "h100", "num_gpus": 1},
        "training": {"seq_length": 4096, "global_batch_size": 8},
    }
    out = tmp_path / "sw"
    man = sweep.write_sweep(llama, out, top=2)
    sigs = [
        (json.dumps(e["scenario"]["layout"], sort_keys=True), e["scenario"]["training"]["micro_batch_size"])
        for e in man["entries"]
    ]
    assert len(sigs) == len(set(sigs))  # an MBS×2 variant equal to another pick is not written twice
    e = man["entries"][0]
    (out / e["id"] / "run-1.log").write_text(_log(0.0))  # a corrupt log: zero iteration times
    res = sweep.collect(out)  # no ZeroDivisionError
    row = next(r for r in res["entries"] if r["id"] == e["id"])
    assert row["measured_tokens_per_s_per_gpu"] is None and any("no usable" in n for n in row["notes"])


def test_collect_replaces_a_runs_yaml_symlink_and_leaves_its_target_alone(tmp_path):
    # a runs.yaml link planted in the sweep folder, pointing at a file outside it: collect writes a
    # regular runs.yaml in the folder; the outside file keeps its bytes
    out = tmp_path / "sw"
    out.mkdir()
    (out / "manifest.json").write_text(json.dumps({"entries": [{"id": "only", "scenario": REQ}]}))
    (out / "only").mkdir()
    (out / "only" / "run-1.log").write_text(_log(10000.0))
    outside = tmp_path / "precious.txt"
    outside.write_text("keep me\n")
    (out / "runs.yaml").symlink_to(outside)
    r = runner.invoke(app, ["sweep", "collect", str(out)])
    assert r.exit_code == 0, r.output
    assert outside.read_text() == "keep me\n"
    assert not (out / "runs.yaml").is_symlink()
    (run,) = yaml.safe_load((out / "runs.yaml").read_text())["runs"]
    # 64 sequences · 16384 tokens / 10 s / 32 GPUs = 3276.8 tokens/s/GPU
    assert run["measured"]["tokens_per_s_per_gpu"] == pytest.approx(3276.8)


def test_sweep_refuses_a_symlink_as_its_new_folder(tmp_path):
    real = tmp_path / "elsewhere"
    real.mkdir()
    (tmp_path / "sw").symlink_to(real)
    with pytest.raises(InputError, match="symbolic link"):
        sweep.write_sweep(REQ, tmp_path / "sw", top=1)
    assert list(real.iterdir()) == []


def _dump(**args) -> str:
    """A Megatron-LM argument dump (``name ..... value`` lines between its banners)."""
    lines = ["------------------------ arguments ------------------------"]
    lines += [f"  {k} {'.' * (48 - len(k))} {v}" for k, v in sorted(args.items())]
    return "\n".join([*lines, "-------------------- end of arguments ---------------------", ""])


#: the dump of a run at REQ's layout (TP2 EP8, ETP 1 as Bridge resolves it, no VPP), batch and sequence
REQ_DUMP = {
    "tensor_model_parallel_size": 2,
    "pipeline_model_parallel_size": 1,
    "virtual_pipeline_model_parallel_size": None,
    "context_parallel_size": 1,
    "expert_model_parallel_size": 8,
    "expert_tensor_parallel_size": 1,
    "micro_batch_size": 1,
    "global_batch_size": 64,
    "seq_length": 16384,
    "world_size": 32,
}


def _one_entry_sweep(tmp_path, dump: dict):
    out = tmp_path / "sw"
    (out / "only").mkdir(parents=True)
    (out / "manifest.json").write_text(json.dumps({"entries": [{"id": "only", "scenario": REQ}]}))
    (out / "only" / "run-1.log").write_text(_dump(**dump) + _log(10000.0))
    return out


def test_collect_refuses_a_log_whose_argument_dump_ran_another_layout(tmp_path):
    # the log ran TP4 EP16 CP2 in the folder of the TP2 EP8 CP1 entry: refused, exit 2, nothing written
    out = _one_entry_sweep(
        tmp_path,
        REQ_DUMP | {"tensor_model_parallel_size": 4, "expert_model_parallel_size": 16, "context_parallel_size": 2},
    )
    r = runner.invoke(app, ["sweep", "collect", str(out)], env={"COLUMNS": "400"})
    assert r.exit_code == 2, r.output
    assert "run-1.log" in r.output and "Traceback" not in r.output
    for key, logged, entry in (
        ("tensor_model_parallel_size", 4, 2),
        ("context_parallel_size", 2, 1),
        ("expert_model_parallel_size", 16, 8),
    ):
        assert f"{key} {logged} in the log, {entry} in the entry" in r.output
    assert "pipeline_model_parallel_size" not in r.output  # PP 1 in both
    assert "--accept-mismatch" in r.output
    assert not (out / "runs.yaml").exists()


def test_collect_accepts_a_mismatched_log_only_when_told_and_says_so(tmp_path):
    out = _one_entry_sweep(tmp_path, REQ_DUMP | {"global_batch_size": 128})
    r = runner.invoke(app, ["sweep", "collect", str(out), "--accept-mismatch"], env={"COLUMNS": "400"})
    assert r.exit_code == 0, r.output
    assert "global_batch_size 128 in the log, 64 in the entry" in r.output
    assert "1 log(s) ran another layout than their entry" in r.output  # the trade-off, in the text output
    res = sweep.collect(out, accept_mismatch=True)
    assert res["entries"][0]["mismatched_logs"] == ["run-1.log"]
    (run,) = yaml.safe_load((out / "runs.yaml").read_text())["runs"]
    assert run["logs"] == ["only/run-1.log"]


def test_collect_takes_a_log_whose_argument_dump_matches_its_entry(tmp_path):
    out = _one_entry_sweep(tmp_path, REQ_DUMP)
    res = sweep.collect(out)
    assert res["entries"][0]["mismatched_logs"] == [] and res["entries"][0]["notes"] == []
    # 64 sequences · 16384 tokens / 10 s / 32 GPUs
    assert res["entries"][0]["measured_tokens_per_s_per_gpu"] == pytest.approx(3276.8)


def test_calibrate_refuses_a_runs_file_whose_logs_ran_another_layout(tmp_path):
    # runs.yaml written with --accept-mismatch names its log: calibrate holds the log to the run again
    out = _one_entry_sweep(tmp_path, REQ_DUMP | {"pipeline_model_parallel_size": 2, "seq_length": 8192})
    sweep.collect(out, accept_mismatch=True)
    profile = tmp_path / "cluster.json"
    r = runner.invoke(app, ["calibrate", str(out / "runs.yaml"), "-o", str(profile)], env={"COLUMNS": "400"})
    assert r.exit_code == 2, r.output
    assert "run-1.log" in r.output and "runs[0] (only)" in r.output
    assert "pipeline_model_parallel_size 2 in the log, 1 in the run" in r.output
    assert "seq_length 8192 in the log, 16384 in the run" in r.output
    assert not profile.exists()
    r = runner.invoke(app, ["calibrate", str(out / "runs.yaml"), "--accept-mismatch"], env={"COLUMNS": "400"})
    assert r.exit_code == 0, r.output
    assert "fitted to 1 log(s) of another layout than their run" in r.output


def test_a_sweep_of_a_fully_held_scenario_says_it_holds_only_the_baseline(tmp_path):
    """A file ``plan --save`` wrote states every layout key, all held as in ``plan``: the sweep wrote
    only ``baseline/`` without a word; it says so and names ``--free``. A scenario with free keys
    gets no such note."""
    src, scn = tmp_path / "req.yaml", tmp_path / "s.yaml"
    src.write_text(yaml.safe_dump(REQ))
    assert runner.invoke(app, ["plan", str(src), "--top", "1", "--save", str(scn)]).exit_code == 0
    r = runner.invoke(app, ["sweep", str(scn), "-o", str(tmp_path / "d"), "--top", "1", "--no-mbs-variants", "--json"])
    doc = json.loads(r.output)
    assert [e["id"] for e in doc["entries"]] == ["baseline"] and "--free KEY" in doc["note"]
    r = runner.invoke(app, ["sweep", str(scn), "-o", str(tmp_path / "e"), "--top", "1", "--free", "all", "--json"])
    doc = json.loads(r.output)
    assert any(e["id"] != "baseline" for e in doc["entries"]) and doc["note"] is None
