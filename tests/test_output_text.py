"""Output an engineer can read.

- every assumption that moves a verdict (gradient-reduction dtype, optimizer dtypes,
  routing imbalance, recipe fills) is stated once in the header of ``estimate``, ``plan`` and ``fit``;
- at 80 columns every number stays visible (the snapshots in ``tests/golden/text`` are
  checked by ``test_golden_outputs``); here: the knob column moves under the table when it does not
  fit and comes back on wide terminals, on one line;
- ``fit`` climbs every ladder from where the scenario stands, accounts for every change
  it tried, marks numerics changes and ranks them apart, and ``--save`` writes its choice;
- ``plan`` shows model TFLOP/s/GPU and a one-line breakdown of #1's step;
- a short default output (legend for the knob codes, the error band once, rule messages
  beside rule ids, no Python reprs), ``--verbose`` for the rest.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from moeplan.cli.app import app
from moeplan.plan.changes import memory_changes
from moeplan.plan.fit import fit_layout
from moeplan.resolve.load import load_scenario

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()
PLAN = ["plan", "--model", "Qwen/Qwen3-30B-A3B", "--gpu", "h100", "--num-gpus", "16", "--seq-length", "32768"]
FIT_DATA = {
    "model": "Qwen/Qwen3-30B-A3B",
    "system": {"gpu": "h100", "num_gpus": 32},
    "training": {"seq_length": 65536, "global_batch_size": 64, "micro_batch_size": 1, "precision": "bf16"},
    "layout": {
        "tensor_model_parallel_size": 2,
        "context_parallel_size": 2,
        "expert_model_parallel_size": 8,
        "sequence_parallel": True,
        "recompute_granularity": "selective",
        "recompute_modules": ["moe_act", "layernorm"],
    },
}
REPRS = re.compile(r"=(None|True|False)\b|\b(VPP|EDP)=None")


def _run(args, width=120):
    return runner.invoke(app, args, env={"COLUMNS": str(width), "TERM": "dumb"})


@pytest.fixture(scope="module")
def plan_texts():
    """The same plan at 80 and 160 columns, its --verbose text and its JSON."""
    import os

    old = os.getcwd()
    os.chdir(ROOT)
    try:
        return {
            80: _run(PLAN, 80).output,
            160: _run(PLAN, 160).output,
            "verbose": _run([*PLAN, "--verbose"], 120).output,
            "json": json.loads(_run([*PLAN, "--json"]).output),
        }
    finally:
        os.chdir(old)


def test_plan_header_states_the_assumptions_once(plan_texts):
    text = plan_texts[80]
    assert text.count("assumes:") == 1
    head = " ".join(text.split("top ")[0].split())
    for phrase in ("grads reduced in FP32", "Adam state in FP32", "routing imbalance 1.2×", "no recipe fills"):
        assert phrase in head, phrase
    assert {a["what"] for a in plan_texts["json"]["assumes"]} >= {"grad_reduce", "optimizer", "routing", "recipe"}


def test_estimate_and_fit_headers_state_the_assumptions():
    est = _run(["estimate", "examples/deepseek_v3_gb300.yaml"], 80).output
    assert est.count("assumes:") == 1 and "grads reduced in BF16" in " ".join(est.split())
    fit = fit_layout(FIT_DATA)
    assert {a["what"] for a in fit["assumes"]} >= {"grad_reduce", "optimizer", "routing", "recipe"}


def test_plan_keeps_every_number_at_80_columns_and_moves_the_knobs(plan_texts):
    doc = plan_texts["json"]
    narrow, wide = plan_texts[80], plan_texts[160]
    assert all(len(line) <= 80 for line in narrow.splitlines())
    for cand in doc["candidates"]:
        th = cand["throughput"]
        for fig in (
            f"{th['tokens_per_s_per_gpu']:,.0f}",
            f"{th['model_tflops_per_gpu']:,.0f}",
            f"{100 * th['mfu']:.1f}%",
        ):
            assert fig in narrow and fig in wide, fig

    # the table's header row (no vertical rules: " #  layout ... MFU")
    def header(text: str) -> str:
        return next(ln for ln in text.splitlines() if re.match(r"\s*#\s+layout\s", ln))

    assert "knobs #1" in narrow and "knobs" not in header(narrow)
    # wide: a knob column, each row on one line (no row of the table wraps)
    assert "knobs" in header(wide)
    rows = [ln for ln in wide.splitlines() if re.match(r"\s*\d+\s+(FSDP )?TP\d", ln)]
    assert len(rows) == len(doc["candidates"])
    # narrow: each row on one line too (a layout label stays whole at 80 columns)
    rows = [ln for ln in narrow.splitlines() if re.match(r"\s*\d+\s+(FSDP )?TP\d", ln)]
    assert len(rows) == len(doc["candidates"])
    assert all(c["label"].replace(" ETP1", "") in narrow for c in doc["candidates"])


def test_plan_shows_model_tflops_and_where_the_step_goes(plan_texts):
    text = plan_texts[80]
    assert "TFLOP/s" in text
    line = next(ln for ln in text.splitlines() if ln.startswith("#1 step "))
    assert re.match(r"#1 step [\d.]+ s: [a-zA-Z -]+ \d+ %", line)


def test_plan_default_output_is_short_with_a_legend_and_one_error_band(plan_texts):
    text, verbose = plan_texts[80], plan_texts["verbose"]
    # one screen: 50 lines until this plan's #1 became a CP 8 layout with TE graphs (its CP-comm choice,
    # two check warnings named by id, and the note that the baselines' search found it: 56 lines)
    assert len(text.splitlines()) <= 60
    assert len(verbose.splitlines()) > len(plan_texts[160].splitlines())
    assert text.count("expected error") == 1 and "first-principles" not in text
    assert "first-principles" in verbose or "measured runs" in verbose
    assert "legend:" in text
    assert not REPRS.search(text), REPRS.search(text)
    # every rejection reason in the tally is said in words beside its id
    tally = " ".join(text.split())
    for r in plan_texts["json"]["rejected"][:2]:
        assert f"{r['meaning']} ({r['reason']})" in tally


def test_check_and_estimate_print_no_python_reprs():
    for args in (["check", "examples/long_context_broken.yaml"], ["estimate", "examples/deepseek_v3_gb300.yaml"]):
        out = _run(args, 80).output
        assert not REPRS.search(out), (args, REPRS.search(out))
        assert "VPP=None" not in out and "EDP=None" not in out and "SP=False" not in out


def test_fit_climbs_every_ladder_and_accounts_for_every_change():
    """Selective recompute already set: the next modules and full recompute are offered; every single
    change tried is in a list (fits, also fits, not enough, rejected); EP×2 is among them; the
    precision change is marked and ranked after every layout change."""
    out = fit_layout(FIT_DATA, top=3)
    listed = {r["change"] for k in ("fixes", "more_fixes", "not_enough", "rejected") for r in out[k]}
    singles = {c.label for c in memory_changes(load_scenario(FIT_DATA))}
    assert singles <= listed, singles - listed
    assert {"recompute selective moe_act,layernorm,moe", "recompute full", "EP 8 → 16"} <= listed
    assert out["tried"] >= len(singles)
    rows = out["fixes"] + out["more_fixes"]
    flags = [r["changes_numerics"] for r in rows]
    assert flags == sorted(flags)
    prec = [r for k in ("fixes", "more_fixes", "not_enough") for r in out[k] if r["change"].startswith("precision")]
    assert prec and all(r["changes_numerics"] for r in prec)


def test_fit_table_marks_numerics_and_lists_the_rest(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(FIT_DATA))
    out = _run(["fit", str(path), "--top", "3"], 80).output
    assert all(len(line) <= 80 for line in out.splitlines())
    assert "also fits:" in out and "not enough alone:" in out and "[numerics]" in out
    assert "changes tried" in out


def test_fit_save_writes_the_chosen_fix(tmp_path):
    src, dst = tmp_path / "s.yaml", tmp_path / "fix.yaml"
    src.write_text(yaml.safe_dump(FIT_DATA))
    res = _run(["fit", str(src), "--save", str(dst), "--pick", "2", "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert doc["saved"]["rank"] == 2 and doc["saved"]["change"] == doc["fixes"][1]["change"]
    saved = yaml.safe_load(dst.read_text())
    assert saved == doc["fixes"][1]["scenario"]
    chk = _run(["estimate", str(dst)])
    assert chk.exit_code == 0, chk.output
    bad = _run(["fit", str(src), "--save", str(dst), "--pick", "99"])
    assert bad.exit_code == 2 and "--pick" in bad.output


def test_the_html_report_has_legends_a_breakdown_and_caveats(tmp_path, monkeypatch):
    """Problem 8: model TFLOP/s/GPU in the report's table, a chart of where the step goes, a legend on
    every chart with more than one series, and a Caveats section that is never empty."""
    import re

    from moeplan.api.plan import plan_report
    from moeplan.inputs.overrides import ScenarioFlags
    from moeplan.plan import report

    figs = []
    real = report._png

    def keep(fig):
        figs.append(fig)
        return real(fig)

    monkeypatch.setattr(report, "_png", keep)
    flags = ScenarioFlags(model="Qwen/Qwen3-30B-A3B", gpu="h100", num_gpus=16, seq_length=32768, gbs=32)
    out = plan_report(None, flags, report=tmp_path / "r.html", top=3)
    text = (tmp_path / "r.html").read_text()
    assert "<th>model TFLOP/s/GPU</th>" in text
    titles = re.findall(r"<h3>(.*?)</h3>", text)
    assert "where the step goes" in titles and "memory per stage" in titles
    caveats = re.search(r"<h2>Caveats</h2><ul>(.*?)</ul>", text, re.S).group(1)
    assert caveats.count("<li>") >= 3 and "expected error" in caveats and "assumes:" in caveats
    for fig in figs:
        series = sum(len(ax.containers) + len(ax.lines) for ax in fig.axes)
        if series > 1 and len(fig.axes[0].containers) > 1:
            assert fig.legends or any(ax.get_legend() for ax in fig.axes), fig.axes[0].get_title()
    assert out["report"] == str(tmp_path / "r.html")


def test_the_brief_explanation_names_a_knob_family_whose_settings_all_tie():
    from types import SimpleNamespace

    from moeplan.plan.explain import within_tie

    def cand(tried: dict, chosen: str = "alltoall", **extra):
        return SimpleNamespace(
            tried={"dispatcher": tried, **extra},
            knobs={"dispatcher": chosen, "graphs": "none"},
            parallel=SimpleNamespace(vpp=1, ep=8),
            scenario=SimpleNamespace(gpu=SimpleNamespace(is_nvl72=False)),
        )

    # every setting within 2 % of the chosen one: named, not listed
    assert within_tie(cand({"alltoall": 100.0, "deepep": 101.5, "hybridep": 98.5}), "dispatcher")
    # one beyond 2 %, one rejected, or a weak-evidence tie to state: listed in full
    assert not within_tie(cand({"alltoall": 100.0, "deepep": 103.0}), "dispatcher")
    assert not within_tie(cand({"alltoall": 100.0, "deepep": None}), "dispatcher")
    weak = cand({"alltoall": 100.0, "hybridep": 99.0}, _weak_tie={"dispatcher": 1.0})
    assert not within_tie(weak, "dispatcher")
    # nothing tried but the chosen setting: nothing to name
    assert not within_tie(cand({"alltoall": 100.0}), "dispatcher")
