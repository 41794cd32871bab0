"""`compare`: the Mann–Whitney shift test (hand-derived values, cross-check with scipy), the acceptance
figures (planted 5 % slowdown with 1 % noise found in >= 95 of 100 seeds, same distribution flagged in
<= 5 of 100), cause ranking with the models, and the CLI in-process."""

from __future__ import annotations

import json
import math
import random

import pytest
from typer.testing import CliRunner

from moeplan.cli.app import app
from moeplan.diagnose.compare import compare_runs, rank_causes, separable_size, shift_test
from moeplan.errors import InputError
from moeplan.io.run_logs import parse_log

runner = CliRunner()

BASE = {"model": "Qwen/Qwen3-30B-A3B", "system": {"gpu": "h100", "num_gpus": 8}, "training": {"precision": "bf16"}}
DUMP_A = {
    "tensor_model_parallel_size": 1,
    "pipeline_model_parallel_size": 1,
    "expert_model_parallel_size": 8,
    "seq_length": 4096,
    "micro_batch_size": 1,
    "global_batch_size": 128,
    "recompute_granularity": "selective",
    "recompute_modules": "['moe_act']",
}


def make_log(seed: int, slowdown: float, noise: float = 0.01, n: int = 50, dump: dict | None = None) -> str:
    rng = random.Random(seed)
    lines = []
    if dump:
        lines.append("[rank0]: ------------------------ arguments ------------------------")
        lines += [f"[rank0]:   {k} {'.' * (40 - len(k))} {v}" for k, v in dump.items()]
        lines.append("[rank0]: -------------------- end of arguments ---------------------")
    for i in range(1, n + 1):
        ms = 1000.0 * (1 + slowdown) * (1 + rng.gauss(0, noise)) * (3 if i <= 2 else 1)
        lines.append(
            f" iteration {i:>8d}/     100 | consumed samples: {i * 128:>10d} | "
            f"elapsed time per iteration (ms): {ms:.2f} | lm loss: 5.0E+00 |"
        )
        if i % 10 == 0:
            mem = 50000.0 + 100 * i + (4000 if slowdown else 0)
            lines.append(
                f"[Rank 0] (after {i} iterations) memory (MB) | allocated: 30000.0 | max allocated: {mem} "
                "| reserved: 60000.0 | max reserved: 60000.0"
            )
    return "\n".join(lines) + "\n"


def test_shift_test_by_hand():
    # ranks of B = 4, 5, 6 -> R_b = 15, U_b = 15 - 3*4/2 = 9; mean 3*3/2 = 4.5;
    # var = 9/12 * (7 - 0) = 5.25; z = (9 - 4.5 - 0.5) / sqrt(5.25); p = erfc(z / sqrt 2)
    t = shift_test([1.0, 2.0, 3.0], [4.0, 5.0, 6.0], alpha=0.1)
    z = 4.0 / math.sqrt(5.25)
    assert t.u_b == 9.0 and t.z == pytest.approx(z) and t.p_two_sided == pytest.approx(math.erfc(z / math.sqrt(2)))
    assert t.p_two_sided == pytest.approx(0.0809, abs=5e-4)
    # pairwise differences 3,2,1 / 4,3,2 / 5,4,3 -> median 3; relative to median(A) = 2
    assert t.shift == 3.0 and t.shift_rel == 1.5 and t.verdict == "higher"
    # at alpha 0.01, 3 vs 3 values can never be significant (complete separation gives p 0.081 above):
    got = shift_test([1.0, 2.0, 3.0], [4.0, 5.0, 6.0])
    assert got.verdict == "inconclusive" and got.needed_per_log == 6
    assert shift_test([1.0, 2.0, 3.0], [4.0, 5.0, 6.0], alpha=0.1).needed_per_log is None


def test_ties_below_alpha_with_a_tiny_effect_are_no_change_not_inconclusive():
    """3 iterations at 1000.0 ms against 3 at 1001.0: every value tied within its log, so the tie-corrected
    p (0.0369: z = 2.087 with the variance 9/12 · (7 − 48/30) = 4.05) is below 0.05 while complete separation
    without ties could not reach it; the shift is 0.1 %, under the 0.5 % effect floor: no change, not
    inconclusive. alpha must lie strictly between 0 and 1."""
    t = shift_test([1000.0] * 3, [1001.0] * 3, alpha=0.05)
    assert t.p_two_sided < 0.05 and t.verdict == "no change" and t.needed_per_log is None
    for alpha in (0.0, -1.0, 1.0):
        with pytest.raises(InputError):
            shift_test([1.0, 2.0, 3.0], [4.0, 5.0, 6.0], alpha=alpha)


def test_separable_size_by_hand():
    """Complete separation of m values per log: U = m², var = m²(2m + 1)/12, z = (m²/2 − 0.5)/√var.
    m = 5: z = 12/√22.92 = 2.507, p = 0.0122 ≥ 0.01; m = 6: z = 17.5/√39 = 2.802, p = 0.0051 < 0.01.
    At 0.05: m = 3: z = 4/√5.25 = 1.746, p = 0.081; m = 4: z = 7.5/√12 = 2.165, p = 0.030."""
    assert separable_size(0.01) == 6 and separable_size(0.05) == 4


def test_shift_test_ties_and_identical():
    # all values equal: tie term = n^3 - n makes the variance 0 -> z 0, p 1
    t = shift_test([5.0] * 10, [5.0] * 10)
    assert t.z == 0.0 and t.p_two_sided == 1.0 and t.verdict == "no change"
    # non-finite values are dropped before the test
    t = shift_test([5.0] * 10 + [float("nan"), float("inf")], [5.0] * 10)
    assert t.n_a == 10 and t.verdict == "no change"


@pytest.mark.parametrize("seed", range(20))
def test_shift_test_matches_scipy(seed):
    scipy_stats = pytest.importorskip("scipy.stats")
    rng = random.Random(seed)
    a = [round(rng.gauss(100, 3)) for _ in range(rng.randint(3, 40))]  # rounding makes ties
    b = [round(rng.gauss(101, 3)) for _ in range(rng.randint(3, 40))]
    ref = scipy_stats.mannwhitneyu(b, a, alternative="two-sided", method="asymptotic", use_continuity=True)
    t = shift_test(a, b)
    assert t.u_b == pytest.approx(ref.statistic) and t.p_two_sided == pytest.approx(ref.pvalue, rel=1e-9, abs=1e-12)


def test_shift_test_too_few_values():
    with pytest.raises(InputError, match="at least 3"):
        shift_test([1.0, 2.0], [1.0, 2.0, 3.0])


def test_acceptance_power_and_false_positives():
    found = sum(
        compare_runs(parse_log(make_log(2 * s, 0.0)), parse_log(make_log(2 * s + 1, 0.05))).time.verdict == "higher"
        for s in range(100)
    )
    false = sum(
        compare_runs(parse_log(make_log(1000 + 2 * s, 0.0)), parse_log(make_log(1001 + 2 * s, 0.0))).time.verdict
        != "no change"
        for s in range(100)
    )
    assert found >= 95 and false <= 5, (found, false)


def test_causes_ranked_in_observed_direction():
    b = dict(DUMP_A, recompute_modules="['moe_act', 'layernorm']", micro_batch_size=2)
    from moeplan.io.imports import import_config

    ca = import_config(make_log(1, 0, dump=DUMP_A), "megatron-log")[0]
    cb = import_config(make_log(2, 0, dump=b), "megatron-log")[0]
    diff, causes, notes = rank_causes(ca, cb, BASE, direction=1)
    assert [d["key"] for d in diff] == ["layout.recompute_modules", "training.micro_batch_size"]
    # the only notes: both runs break a rule as written (megatron-core leaves grouped GEMM off)
    assert all("breaks 1 rule(s)" in n and "recompute.module_labels" in n for n in notes)
    by_key = {c["key"]: c for c in causes}
    # more recompute costs time and saves memory; a larger micro-batch is faster and heavier
    assert by_key["layout.recompute_modules"]["step_time_change_rel"] > 0
    assert by_key["layout.recompute_modules"]["peak_memory_change_rel"] < 0
    assert by_key["training.micro_batch_size"]["step_time_change_rel"] < 0
    assert by_key["training.micro_batch_size"]["peak_memory_change_rel"] > 0
    assert causes[0]["key"] == "layout.recompute_modules"  # B slower: what slows the step comes first
    _, causes_f, _ = rank_causes(ca, cb, BASE, direction=-1)
    assert causes_f[0]["key"] == "training.micro_batch_size"
    _, none, notes = rank_causes(ca, cb, None)
    assert none == [] and "pass --scenario" in notes[0]


def test_cli_compare(tmp_path):
    a, b, same = tmp_path / "a.log", tmp_path / "b.log", tmp_path / "same.log"
    a.write_text(make_log(1, 0.0, dump=DUMP_A))
    b.write_text(make_log(2, 0.05, dump=dict(DUMP_A, recompute_modules="['moe_act', 'layernorm']")))
    same.write_text(make_log(3, 0.0, dump=DUMP_A))
    base = tmp_path / "base.yaml"
    base.write_text(json.dumps(BASE))
    res = runner.invoke(app, ["compare", str(a), str(b), "--scenario", str(base), "--json"])
    assert res.exit_code == 1, res.output  # B slower -> exit 1
    data = json.loads(res.stdout)
    assert data["iteration_time_ms"]["verdict"] == "slower"
    assert 0.04 < data["iteration_time_ms"]["shift_rel"] < 0.06
    assert data["memory_mb"]["max_allocated"]["b"] - data["memory_mb"]["max_allocated"]["a"] == 4000.0
    assert data["causes"][0]["key"] == "layout.recompute_modules"
    res = runner.invoke(app, ["compare", str(a), str(same)])
    assert res.exit_code == 0 and "no change beyond noise" in res.stdout
    png = tmp_path / "runs.png"
    res = runner.invoke(app, ["compare", str(a), str(b), "--plot", str(png)])
    # matplotlib is a core dependency (pyproject.toml): the plot is always written, and B is still slower
    assert res.exit_code == 1, res.output
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_compare_bad_inputs(tmp_path):
    a = tmp_path / "a.log"
    a.write_text(make_log(1, 0.0))
    short = tmp_path / "short.log"
    short.write_text(make_log(1, 0.0, n=2))
    for args, field in (
        ([str(a), str(tmp_path / "missing.log")], "missing.log"),
        ([str(a), str(a), "--plot", str(tmp_path / "x.gif")], "--plot"),
        ([str(a), str(short)], "at least 3"),
        ([str(a), str(a), "--scenario", str(tmp_path / "nope.yaml")], "nope.yaml"),
    ):
        res = runner.invoke(app, ["compare", *args])
        assert res.exit_code == 2 and field in res.stderr and "Traceback" not in res.output, res.output
    assert not (tmp_path / "x.gif").exists()


def test_each_cause_is_applied_alone():
    """Regression: trials once shared nested sections, so each carried the earlier changes."""
    from moeplan.diagnose.compare import predict_pair
    from moeplan.io.imports import import_config

    b = dict(DUMP_A, recompute_modules="['moe_act', 'layernorm']", micro_batch_size=2)
    ca = import_config(make_log(1, 0, dump=DUMP_A), "megatron-log")[0]
    cb = import_config(make_log(2, 0, dump=b), "megatron-log")[0]
    _, causes, _ = rank_causes(ca, cb, BASE)
    full_a = {**BASE, **{k: {**BASE.get(k, {}), **v} if isinstance(v, dict) else v for k, v in ca.items()}}
    t0, m0 = predict_pair(full_a)
    mbs_alone = {**full_a, "training": {**full_a["training"], "micro_batch_size": 2}}
    t1, m1 = predict_pair(mbs_alone)
    got = next(c for c in causes if c["key"] == "training.micro_batch_size")
    assert got["step_time_change_rel"] == pytest.approx((t1 - t0) / t0, rel=1e-12)
    assert got["peak_memory_change_rel"] == pytest.approx((m1 - m0) / m0, rel=1e-12)


def test_cli_compare_inconclusive_and_scenario_errors(tmp_path):
    a, b = tmp_path / "a.log", tmp_path / "b.log"
    a.write_text(make_log(1, 0.0, n=6))
    b.write_text(make_log(2, 1.0, n=6))  # twice as slow, but 4 steady iterations each
    res = runner.invoke(app, ["compare", str(a), str(b)])
    assert res.exit_code == 0 and "inconclusive" in res.stdout
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: no-such-model\n")
    res = runner.invoke(app, ["compare", str(a), str(b), "--scenario", str(bad)])
    assert res.exit_code == 2 and "no-such-model" in res.stderr
    # a plot beside the logs (a.png is not one of the inputs): written, and the verdict still inconclusive
    res = runner.invoke(app, ["compare", str(a), str(b), "--plot", str(a).replace(".log", ".png")])
    assert res.exit_code == 0 and "inconclusive" in res.stdout, res.output
    assert (tmp_path / "a.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    a_png = tmp_path / "a.png"
    a_png.write_text(make_log(1, 0.0))
    res = runner.invoke(app, ["compare", str(a_png), str(b), "--plot", str(a_png)])
    assert res.exit_code == 2 and "other than the input" in res.stderr and a_png.read_text().startswith(" iteration")


def test_cli_compare_warns_when_the_scenario_model_is_not_the_runs(tmp_path):
    a, b = tmp_path / "a.log", tmp_path / "b.log"
    dump = dict(DUMP_A, num_layers=48, hidden_size=2048)  # Qwen3-30B-A3B's shape
    a.write_text(make_log(1, 0.0, dump=dump))
    b.write_text(make_log(2, 0.05, dump=dump))
    ok = tmp_path / "ok.yaml"
    ok.write_text(json.dumps(BASE))
    res = runner.invoke(app, ["compare", str(a), str(b), "--scenario", str(ok), "--json"])
    assert not any("disagrees" in n for n in json.loads(res.stdout)["notes"])
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text(
        json.dumps({**BASE, "model": "deepseek-ai/DeepSeek-V3", "system": {"gpu": "h100", "num_gpus": 64}})
    )
    res = runner.invoke(app, ["compare", str(a), str(b), "--scenario", str(wrong), "--json"])
    notes = json.loads(res.stdout)["notes"]
    assert any("num_layers: log 48" in n and "61" in n and "hidden_size: log 2048" in n for n in notes), notes


def test_compare_says_how_much_of_the_shift_the_configuration_explains():
    from moeplan.diagnose.compare import modelled_change
    from moeplan.inputs.loading import deep_merge
    from moeplan.io.imports import import_config
    from moeplan.model.step import estimate_step
    from moeplan.resolve.load import load_scenario

    b = dict(DUMP_A, recompute_modules="['moe_act', 'layernorm']")
    ca = import_config(make_log(1, 0, dump=DUMP_A), "megatron-log")[0]
    cb = import_config(make_log(2, 0, dump=b), "megatron-log")[0]
    got = modelled_change(ca, cb, BASE)
    ta = estimate_step(load_scenario(deep_merge(BASE, ca))).step_time_s
    tb = estimate_step(load_scenario(deep_merge(BASE, cb))).step_time_s
    assert got == pytest.approx(tb / ta - 1) and got > 0
    cmp = compare_runs(parse_log(make_log(3, 0.0, dump=DUMP_A)), parse_log(make_log(4, 0.04, dump=b)), ca, cb, BASE)
    note = next(n for n in cmp.notes if n.startswith("all changed keys together"))
    assert f"{100 * got:+.1f} %" in note and "not explained" in note
    assert modelled_change(ca, cb, None) is None  # the logs alone lack model and GPU


def _with_banner(log: str, release: str) -> str:
    return f"NVIDIA Release {release} (build 1)\n" + log


def test_known_issue_offered_when_versions_cross_its_range():
    """Run B uses NeMo 26.06 (PyTorch 2.12, Megatron Bridge 0.5.0), run A 26.04: the 26.06 known issue
    'MoE slowdown with TP > 1' (Megatron Bridge release notes) is offered as a possible cause of B's
    regression; the same container on both sides offers nothing."""
    from moeplan.diagnose.compare import known_issue_causes, run_versions
    from moeplan.io.imports import import_config

    dump = dict(DUMP_A, tensor_model_parallel_size=2)
    log_a = _with_banner(make_log(1, 0.0, dump=dump), "26.04")
    log_b = _with_banner(make_log(2, 0.06, dump=dump), "26.06")
    a, b = parse_log(log_a), parse_log(log_b)
    ca, cb = import_config(log_a, "megatron-log")[0], import_config(log_b, "megatron-log")[0]
    assert run_versions(b, cb, BASE)["container"] == "26.06"
    cmp = compare_runs(a, b, ca, cb, BASE)
    assert cmp.time.verdict == "higher"
    ids = [c["id"] for c in cmp.known_issue_causes]
    assert ids[0] == "nemo_26_06_tp_slowdown_pytorch_base", cmp.known_issue_causes
    first = cmp.known_issue_causes[0]
    assert first["run"] == "B" and first["symptom"] == "slowdown"
    assert first["b_versions"]["megatron_bridge"] == "0.5.0" and first["a_versions"]["megatron_bridge"] == "0.4.0"
    assert "known_issue_causes" in cmp.to_dict() and any("known issues" in n for n in cmp.notes)
    same, notes = known_issue_causes(a, parse_log(_with_banner(make_log(3, 0.0, dump=dump), "26.04")), ca, ca, BASE)
    assert same == [] and notes == []
    # the versions may also come from the scenario: megatron-core 0.16.1 vs 0.17.0 crosses the MTP hang fix
    dsv3 = {
        "model": "deepseek-ai/DeepSeek-V3",
        "system": {"gpu": "h100", "num_gpus": 256},
        "layout": {
            "pipeline_model_parallel_size": 2,
            "expert_model_parallel_size": 64,
            "pipeline_model_parallel_layout": "Ettt|t*58mL",
        },
    }
    causes, _ = known_issue_causes(
        a, b, {"versions": {"megatron_core": "0.17.0"}}, {"versions": {"megatron_core": "0.16.1"}}, dsv3
    )
    assert "mtp_aux_loss_tracker_hang" in [c["id"] for c in causes if c["run"] == "B"]


def test_compare_says_which_log_had_nan_or_skipped_iterations(tmp_path):
    from moeplan.api.diagnose import health_notes

    a, b = tmp_path / "a.log", tmp_path / "b.log"
    a.write_text(make_log(1, 0.0))
    # B: Megatron skips 1 iteration for a NaN in one interval and 2 others in another (counters reset per
    # interval; a NaN iteration is also a skipped one, training.py's training_log)
    lines = make_log(2, 0.0).splitlines()
    lines[20] = (
        lines[20].rstrip("|").rstrip() + " | number of skipped iterations:   1 | number of nan iterations:   1 |"
    )
    lines[30] = (
        lines[30].rstrip("|").rstrip() + " | number of skipped iterations:   2 | number of nan iterations:   0 |"
    )
    b.write_text("\n".join(lines) + "\n")
    r = runner.invoke(app, ["compare", str(a), str(b), "--json"])
    notes = json.loads(r.stdout)["notes"]
    assert [n for n in notes if n.startswith(("A:", "B:"))] == [
        "B: Megatron reported 3 skipped iteration(s), 1 of them NaN (moeplan log lists them)"
    ]
    assert health_notes([{"grad_norm_nonfinite_iterations": 3}, {}]) == [
        "A: Megatron reported 3 non-finite grad norm(s) (moeplan log lists them)"
    ]
