"""`calibrate`: exact recovery of a planted factor, over-fit refusal, the leave-one-release-out
acceptance on the published Megatron Bridge runs, profiles, and the CLI in-process."""

from __future__ import annotations

import dataclasses
import json

import pytest
import yaml
from typer.testing import CliRunner

from moeplan import load_scenario
from moeplan.cli.app import app
from moeplan.errors import InputError
from moeplan.model.constants import TimeConstants, load_constants
from moeplan.model.constants_fit import Run, fit, holdout, load_profile, load_runs_yaml, predict, profile_json
from tests.conftest import REF

pytest.importorskip("scipy")
runner = CliRunner()
PUBLISHED = REF / "published_runs.yaml"


def _scenario(gbs: int, ep: int, release: str) -> dict:
    return {
        "model": "Qwen/Qwen3-30B-A3B",
        "system": {"gpu": "h100", "num_gpus": 16},
        "training": {"seq_length": 4096, "micro_batch_size": 1, "global_batch_size": gbs, "precision": "bf16"},
        "layout": {"expert_model_parallel_size": ep},
        "versions": {"container": release},
    }


def _planted_runs(factor: float, base: TimeConstants | None = None) -> list[Run]:
    """Runs whose 'measurement' is the model under a known release factor."""
    truth = dataclasses.replace(base or TimeConstants(), release_factor={"26.02": factor}, newest_release="26.02")
    runs = []
    for i, (gbs, ep) in enumerate([(256, 8), (512, 8), (256, 16), (1024, 16)]):
        s = load_scenario(_scenario(gbs, ep, "26.02"))
        (meas,) = predict([Run("x", s, 1.0, "26.02")], truth)
        runs.append(Run(f"r{i}", s, meas, "26.02"))
    return runs


def test_scale_fit_recovers_a_planted_factor():
    # the release factor divides the whole step: the fit must find the planted 0.8 from the runs
    c, info = fit(_planted_runs(0.8), TimeConstants(), "scale")
    assert c.release_factor == {"26.02": pytest.approx(0.8, rel=1e-4)}
    assert info["free_constants"] == 1 and info["median_abs_pct_error_after"] < 1e-3
    assert info["median_abs_pct_error_before"] > 1.0  # the starting factor 1.0 was wrong
    assert c.release("99.99") == ("26.02", pytest.approx(0.8, rel=1e-4))  # unseen release -> newest calibrated
    assert c.release("25.04") == ("26.02", pytest.approx(0.8, rel=1e-4))  # older than all -> the oldest


def test_unfitted_release_takes_the_last_fitted_one_before_it():
    c = TimeConstants(release_factor={"25.09": 0.75, "26.02.01": 0.7, "26.04.01": 0.76, "26.06": 1.0})
    assert c.release(None) == ("26.06", 1.0)  # no release: the newest (issue rule)
    assert c.release("26.04.01") == ("26.04.01", 0.76)
    assert c.release("26.03") == ("26.02.01", 0.7)  # between two fitted releases: the older one
    assert c.release("26.04") == ("26.02.01", 0.7)  # (26, 4) sorts before (26, 4, 1)
    assert c.release("26.05") == ("26.04.01", 0.76)
    assert c.release("24.03") == ("25.09", 0.75)  # predates them all: the oldest, not the newest
    assert c.release("27.01") == ("26.06", 1.0)
    assert c.release("latest") == ("26.06", 1.0)  # unreadable: the newest


def test_overfit_is_refused():
    runs = _planted_runs(0.9)
    from moeplan.model.constants_fit import SHARED

    with pytest.raises(InputError, match=f"more runs than the {len(SHARED)} free constants"):
        fit(runs, TimeConstants(), "all")
    with pytest.raises(InputError, match="scale or all"):
        fit(runs, TimeConstants(), "everything")


def test_profile_round_trip(tmp_path):
    c, _ = fit(_planted_runs(0.8), TimeConstants(), "scale")
    p = tmp_path / "prof.json"
    p.write_text(profile_json(c))
    back = load_profile(p)
    assert back.release_factor["26.02"] == pytest.approx(0.8, rel=1e-4)
    assert dataclasses.replace(back, provenance={}) == dataclasses.replace(load_profile(p), provenance={})
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"nvlink_efficiency": 0.5, "warp_speed": 9}))
    with pytest.raises(InputError, match="warp_speed"):
        load_profile(bad)


def test_leave_one_release_out_beats_uncalibrated():
    """Acceptance: fitted on all releases but one (per-release factors from the built-in defaults),
    the held-out release is predicted better than by the uncalibrated model, for every release."""
    data = yaml.safe_load(PUBLISHED.read_text())
    data["runs"] = [r for r in data["runs"] if "precision" in r["scenario"]["training"]]
    runs = load_runs_yaml(data, {"recipe_defaults": "mbridge-perf-benchmark"})
    folds = holdout(runs, TimeConstants(), "release", "scale", max_nfev=30)
    assert len(folds) == 6
    for release, f in folds.items():
        assert f["median_abs_pct_error_calibrated"] < f["median_abs_pct_error_uncalibrated"], release


def test_cli_calibrate(tmp_path):
    runs = {
        "runs": [
            {
                "id": r.id,
                "release": "26.02",
                "scenario": _scenario(g, e, "26.02"),
                "measured": {"tokens_per_s_per_gpu": r.measured_tokens_per_s_per_gpu},
            }
            for r, (g, e) in zip(
                _planted_runs(0.8, load_constants()), [(256, 8), (512, 8), (256, 16), (1024, 16)], strict=True
            )
        ]
    }
    f = tmp_path / "runs.yaml"
    f.write_text(yaml.safe_dump(runs))
    prof = tmp_path / "p.json"
    res = runner.invoke(app, ["calibrate", str(f), "-o", str(prof), "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["fit"]["median_abs_pct_error_after"] < 1e-3
    assert load_profile(prof).release_factor["26.02"] == pytest.approx(0.8, rel=1e-4)
    res = runner.invoke(app, ["calibrate", str(f), "--start", "defaults", "--json"])
    assert res.exit_code == 0 and json.loads(res.stdout)["fit"]["median_abs_pct_error_after"] > 1.0  # other shared
    res = runner.invoke(app, ["calibrate", str(f), "--constants", "all"])
    assert res.exit_code == 2 and "free constants" in res.stderr
    runs["runs"][0]["measured"]["tokens_per_s_per_gpu"] = -5
    f.write_text(yaml.safe_dump(runs))
    res = runner.invoke(app, ["calibrate", str(f), "-o", str(tmp_path / "q.json")])
    assert res.exit_code == 2 and "runs[0].measured.tokens_per_s_per_gpu" in res.stderr
    assert not (tmp_path / "q.json").exists()
    log = tmp_path / "a.log"
    log.write_text(" iteration 1/ 10 | elapsed time per iteration (ms): 1000.0 |\n")
    res = runner.invoke(app, ["calibrate", str(log)])
    assert res.exit_code == 2 and "--scenario" in res.stderr


def test_cli_calibration_profile_is_used_and_checked(tmp_path):
    """A profile with other shared constants changes the predicted effect of a change (the release
    factor alone would not: it divides the whole step), and a missing profile is exit 2."""
    from test_compare import BASE, DUMP_A, make_log

    a, b = tmp_path / "a.log", tmp_path / "b.log"
    a.write_text(make_log(1, 0.0, dump=DUMP_A))
    b.write_text(make_log(2, 0.05, dump=dict(DUMP_A, micro_batch_size=2)))
    base = tmp_path / "base.yaml"
    base.write_text(json.dumps(BASE))
    prof = tmp_path / "p.json"
    prof.write_text(
        profile_json(
            dataclasses.replace(load_constants(), release_factor={"26.06": 0.5}, grouped_gemm_half_tokens=64.0)
        )
    )
    args = ["compare", str(a), str(b), "--scenario", str(base), "--json"]
    plain = json.loads(runner.invoke(app, args).stdout)["causes"][0]["step_time_change_rel"]
    cal = json.loads(runner.invoke(app, [*args, "--calibration", str(prof)]).stdout)["causes"][0]
    assert cal["step_time_change_rel"] != plain  # the profile reached the step-time model
    res = runner.invoke(app, [*args, "--calibration", str(tmp_path / "none.json")])
    assert res.exit_code == 2 and "--calibration" in res.stderr


@pytest.mark.parametrize(
    "profile",
    [
        {"release_factor": {"26.06": -1}},
        {"release_factor": {"26.06": 0}},
        {"release_factor": 5},
        {"release_factor": {"26.06": 1.0}, "a2a_efficiency": 0.5},
        {},
        {"release_factor": {"26.06": 1.0}, "nvlink_efficiency": 1e308},
        {"release_factor": {"26.06": 1.0}, "newest_release": "99.99"},
        {"release_factor": {"26.06": 1.0}, "a2a_efficiency": {"alltoall": 0.5}},
        [],
    ],
)
def test_load_profile_rejects_implausible_values(tmp_path, profile):
    p = tmp_path / "p.json"
    p.write_text(json.dumps(profile))
    with pytest.raises(InputError, match="--calibration"):
        load_profile(p)


def _run(rid="a", release="26.04", num_gpus=16, model="Qwen/Qwen3-30B-A3B"):
    return {
        "id": rid,
        "release": release,
        "scenario": {
            "model": model,
            "system": {"gpu": "h100", "num_gpus": num_gpus},
            "training": {"seq_length": 4096, "global_batch_size": 512},
            "layout": {"expert_model_parallel_size": 16},
        },
        "measured": {"tokens_per_s_per_gpu": 8000},
    }


@pytest.mark.parametrize(
    "runs, field, words",
    [
        ([_run(release=26.1)], "runs[0].release", "quote it"),  # YAML's reading of an unquoted 26.10
        ([_run(release="latest")], "runs[0].release", "'26.04'"),
        ([_run(), _run()], "runs[1].id", "runs[0] has it too"),
        ([_run(model="Qwen/Qwen3-31B")], "runs[0] (a).model", "did you mean"),
        ([_run(num_gpus=24)], "runs[0] (a).system.num_gpus", "divisible"),
    ],
)
def test_runs_yaml_errors_name_the_run_and_field(runs, field, words):
    with pytest.raises(InputError) as exc:
        load_runs_yaml({"runs": runs})
    assert exc.value.field == field and words in str(exc.value)


def test_runs_do_not_leak_settings_into_each_other():
    """A run's own settings (here full recompute) must not reach the runs after it through the shared
    defaults: the runs come out the same in either order."""
    a = _run("a")
    a["scenario"] = {**a["scenario"], "layout": {"expert_model_parallel_size": 16, "recompute_granularity": "full"}}
    b = _run("b")
    data = {"defaults": {"training": {"precision": "bf16"}}, "runs": [a, b]}
    ab = load_runs_yaml(data)
    ba = load_runs_yaml({**data, "runs": [b, a]})
    assert ab[1].scenario.layout.recompute_granularity is None
    assert ba[0].scenario.layout.recompute_granularity is None
    assert data["defaults"] == {"training": {"precision": "bf16"}}  # the caller's mapping is unchanged


def test_run_release_defaults_to_the_scenarios_container():
    r = _run("a", release=None)
    r.pop("release")
    r["scenario"] = {**r["scenario"], "versions": {"container": "nvcr.io/nvidia/nemo:25.11"}}
    (run,) = load_runs_yaml({"runs": [r]})
    assert run.release == "25.11"


@pytest.mark.parametrize(
    "mutate, field",
    [
        (lambda r: r.update(relase="26.04"), "runs[0].relase"),  # a typo is not ignored
        (lambda r: r.update(id=["a", "b"]), "runs[0].id"),
        (lambda r: r.update(release="26.04\n"), "runs[0].release"),
        (lambda r: r.update(release="２６.０４"), "runs[0].release"),  # full-width digits
        (lambda r: r["measured"].update(tokens_per_s_per_gpu=10**400), "runs[0].measured.tokens_per_s_per_gpu"),
    ],
)
def test_runs_yaml_rejects_hostile_entries(mutate, field):
    r = _run("a")
    mutate(r)
    with pytest.raises(InputError) as exc:
        load_runs_yaml({"runs": [r]})
    assert exc.value.field == field


def test_runs_yaml_defaults_must_be_a_mapping():
    with pytest.raises(InputError) as exc:
        load_runs_yaml({"defaults": [1, 2], "runs": [_run()]})
    assert exc.value.field == "defaults"


def test_yaml_aliases_and_duplicate_keys_are_refused(tmp_path):
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text("a: &a [x, x, x]\nb: &b [*a, *a, *a]\nruns: [*b]\n")
    dup = tmp_path / "dup.yaml"
    dup.write_text("runs:\n  - id: a\n    release: '26.04'\n    release: '25.11'\n")
    for f, words in ((bomb, "aliases"), (dup, "duplicate")):
        res = runner.invoke(app, ["calibrate", str(f), "-o", str(tmp_path / "p.json")])
        assert res.exit_code == 2 and words in res.stderr, res.output
        assert not (tmp_path / "p.json").exists()


@pytest.mark.parametrize(
    "edit",
    [
        lambda d: d.pop("newest_release"),
        lambda d: d.update(newest_release=["26.06"]),
        lambda d: d.pop("nvlink_efficiency"),  # partial: would silently take the priors
        lambda d: d.update(overlap_hidden_fraction=9.0),  # a share above 1
        lambda d: d.update(release_factor={"26.06": 20.0}),
    ],
)
def test_hand_edited_profiles_are_refused(tmp_path, edit):
    d = json.loads(profile_json(load_constants()))
    edit(d)
    p = tmp_path / "p.json"
    p.write_text(json.dumps(d))
    with pytest.raises(InputError, match="--calibration"):
        load_profile(p)


def test_a_profile_from_before_the_dp_contention_factor_was_retired_says_so(tmp_path):
    # a profile that carries dp_contention_factor (a key of the older profile format, RETIRED_KEYS) was fitted
    # with it, so the profile is refused with the reason and what to do, not read without it
    d = json.loads(profile_json(load_constants()))
    d["dp_contention_factor"] = 19.8
    p = tmp_path / "old.json"
    p.write_text(json.dumps(d))
    with pytest.raises(InputError, match="re-run moeplan calibrate") as exc:
        load_profile(p)
    assert "dp_contention_factor" in str(exc.value) and "OVERLAP_COMPUTE_SLOWDOWN" in str(exc.value)


def test_profile_with_duplicate_json_keys_is_refused(tmp_path):
    p = tmp_path / "p.json"
    text = profile_json(load_constants())
    p.write_text(text.replace('"nvlink_efficiency"', '"nic_efficiency": 0.9,\n  "nvlink_efficiency"', 1))
    with pytest.raises(InputError, match="duplicate"):
        load_profile(p)


def test_log_with_zero_iteration_time_is_a_user_error(tmp_path):
    from test_compare import BASE, DUMP_A, make_log

    log = tmp_path / "zero.log"
    log.write_text(make_log(1, -1.0, noise=0.0, dump=DUMP_A))  # slowdown −100 %: 0.00 ms per iteration
    base = tmp_path / "base.yaml"
    base.write_text(json.dumps(BASE))
    res = runner.invoke(app, ["calibrate", str(log), "--scenario", str(base), "-o", str(tmp_path / "p.json")])
    assert res.exit_code == 2 and "iteration times > 0" in res.stderr, res.output
    assert not (tmp_path / "p.json").exists()


def test_a_profile_from_another_gpu_type_is_named():
    from moeplan import load_scenario
    from moeplan.model.step import estimate_step

    c = dataclasses.replace(load_constants(), provenance={"run_ids": ["x"], "mode": "scale", "gpus": ["h100"]})
    scn = {
        "model": "Qwen/Qwen3-30B-A3B",
        "system": {"gpu": "b200", "num_gpus": 8},
        "training": {"seq_length": 4096, "global_batch_size": 64, "precision": "bf16"},
        "layout": {"expert_model_parallel_size": 8},
    }
    notes = estimate_step(load_scenario(scn), c).assumptions
    assert "the calibration runs were on h100, not b200: its factors are applied to another GPU type" in notes
    scn["system"]["gpu"] = "h100"
    assert not any("not h100" in a for a in estimate_step(load_scenario(scn), c).assumptions)


@pytest.mark.parametrize("gpus", [5, [1, 2], "gb200"])
def test_load_profile_rejects_malformed_provenance_gpus(tmp_path, gpus):
    data = json.loads(profile_json(load_constants()))
    data["provenance"] = {**data.get("provenance", {}), "gpus": gpus}
    p = tmp_path / "p.json"
    p.write_text(json.dumps(data))
    with pytest.raises(InputError, match="gpus"):
        load_profile(p)
