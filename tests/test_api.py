"""The library functions behind the commands (moeplan.api, moeplan.inputs.overrides, moeplan.io.write),
in-process, with expected values worked out by hand; and the CLI's one declaration of the scenario flags."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
import typer
import yaml
from typer.testing import CliRunner

from moeplan import RULES, estimate_memory, estimate_step, list_models, load_scenario
from moeplan.api import (
    EstimateReport,
    check_report,
    compare_report,
    doctor_report,
    estimate_report,
    export_report,
    gpus_report,
    load_workload,
    log_report,
    models_report,
    oom_report,
    params_report,
    plan_report,
    plan_request,
    recipes_report,
    rules_report,
    runs_from_logs,
    sweep_report,
    vlm_stats_report,
)
from moeplan.api.plan import batch_for_tokens, hold_keys
from moeplan.api.vlm import vision_processor
from moeplan.cli.options import SCENARIO_OPTIONS, scenario_options
from moeplan.errors import InputError, UnknownNameError
from moeplan.inputs.overrides import FLAG_NAMES, ScenarioFlags, parse_set, scenario_overrides
from moeplan.io.write import check_writable, write_atomically

ROOT = Path(__file__).resolve().parents[1]
DSV3 = ROOT / "examples" / "deepseek_v3_gb300.yaml"
BROKEN = ROOT / "examples" / "long_context_broken.yaml"
QWEN = {
    "model": "Qwen/Qwen3-30B-A3B",
    "system": {"gpu": "h100", "num_gpus": 8},
    "training": {"seq_length": 4096, "micro_batch_size": 1, "global_batch_size": 128, "precision": "bf16"},
    "layout": {"expert_model_parallel_size": 8},
}
OOM_MSG = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
    "139.81 GiB of which 1.50 GiB is free. Including non-PyTorch memory, this process has 138.30 GiB memory in "
    "use. Of the allocated memory 120.00 GiB is allocated by PyTorch, and 512.00 MiB is reserved by PyTorch but "
    "unallocated."
)


def _scenario_file(tmp_path: Path, data: dict, name: str = "s.yaml") -> Path:
    p = tmp_path / name
    p.write_text(yaml.safe_dump(data, sort_keys=False))
    return p


def _log(ms: float = 1000.0, n: int = 20) -> str:
    return "".join(
        f" iteration {i:>8d}/     100 | consumed samples: {128 * i:>10d} | "
        f"elapsed time per iteration (ms): {ms:.1f} | lm loss: 5.0E+00 |\n"
        for i in range(1, n + 1)
    )


# --- flags -> overrides ------------------------------------------------------------------------------


def test_parse_set_sections_nesting_and_text_values():
    got = parse_set(
        [
            "layout.recompute_granularity=selective",
            "system.gpu_overrides.usable_hbm_gib=75",
            "versions.container=26.10",
            "recipe_defaults=mbridge-perf",
            "layout.recompute_modules=[moe_act, layernorm]",
        ]
    )
    assert got == {
        "layout": {"recompute_granularity": "selective", "recompute_modules": ["moe_act", "layernorm"]},
        "system": {"gpu_overrides": {"usable_hbm_gib": 75}},
        "versions": {"container": "26.10"},  # text: YAML would read 26.1
        "recipe_defaults": "mbridge-perf",
    }
    # text values may carry YAML quotes, as every other --set value may
    quoted = parse_set(
        ['versions.megatron_bridge="0.1.0rc2"', "framework='megatron-core'", 'versions.container="26.10"']
    )
    assert quoted == {"versions": {"megatron_bridge": "0.1.0rc2", "container": "26.10"}, "framework": "megatron-core"}


@pytest.mark.parametrize(
    "items", [["foo"], ["layout=3"], ["layout.a.b=1", "layout.a.b.c=2"], ["recipe_defaults=x", "recipe_defaults.y=1"]]
)
def test_parse_set_refuses_malformed_items(items):
    with pytest.raises(InputError, match="--set"):
        parse_set(items)


def test_scenario_overrides_flags_win_over_set():
    flags = ScenarioFlags(
        model="qwen3-30b-a3b",
        gpu="h100",
        num_gpus=16,
        seq_length=4096,
        tp=2,
        ep=8,
        sets=("layout.tensor_model_parallel_size=4", "training.seq_length=1024", "name=run1"),
    )
    assert scenario_overrides(flags) == {
        "model": "qwen3-30b-a3b",
        "layout": {"tensor_model_parallel_size": 2, "expert_model_parallel_size": 8},
        "training": {"seq_length": 4096},
        "name": "run1",
        "system": {"gpu": "h100", "num_gpus": 16},
    }
    assert scenario_overrides(None) == {"system": {}, "training": {}, "layout": {}}
    with pytest.raises(InputError, match="model_overrides"):
        scenario_overrides(ScenarioFlags(sets=("model.num_layers=4",)))


# --- plan request ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tokens", "seq", "gbs"),
    [
        (4 * 8192, 8192, 4),  # divides: the quotient
        (1_000_000, 131_072, 8),  # 7.63: 7 is prime, 8 = 2^3 is within 10 %
        (1000, 3, 320),  # 333.3: 300..366 allowed, 320 = 2^6·5 has the most twos
        (10_000, 4096, 2),  # 2.44: neither 2 nor 3 within 10 %, rounded down
        (100, 200, 1),  # less than one sequence: at least 1
    ],
)
def test_batch_for_tokens(tokens, seq, gbs):
    assert batch_for_tokens(tokens, seq) == gbs


def test_plan_request_tokens_per_step(tmp_path):
    sc = _scenario_file(tmp_path, {k: v for k, v in QWEN.items() if k != "layout"})
    data, note = plan_request(sc, ScenarioFlags(tp=2), tokens_per_step=6 * 4096)
    assert data["training"]["global_batch_size"] == 6 and note is None
    assert data["layout"] == {"tensor_model_parallel_size": 2} and data["model"] == "Qwen/Qwen3-30B-A3B"
    data, note = plan_request(sc, None, tokens_per_step=10_000)
    assert data["training"]["global_batch_size"] == 2
    assert "global batch 2 (8,192 tokens per step" in note
    with pytest.raises(InputError, match="either --gbs or --tokens-per-step"):
        plan_request(sc, ScenarioFlags(gbs=8), tokens_per_step=10_000)
    with pytest.raises(InputError, match="at least one sequence"):
        plan_request(sc, None, tokens_per_step=100)
    with pytest.raises(InputError, match="a --seq-length to divide it by"):
        plan_request(None, ScenarioFlags(model="qwen3-30b-a3b"), tokens_per_step=100)


def test_plan_report_refuses_bad_options_before_searching(tmp_path):
    with pytest.raises(InputError, match="--objective"):
        plan_report(None, ScenarioFlags(model="qwen3-30b-a3b"), objective="cheapest")
    with pytest.raises(InputError, match="--train-tokens"):
        plan_report(None, None, objective="time-to-train")
    same = tmp_path / "x.yaml"
    with pytest.raises(InputError, match="--save"):
        plan_report(None, None, save=same, report=same)
    with pytest.raises(InputError, match="--report"):
        plan_report(None, None, report=tmp_path / "nodir" / "r.html")


def test_hold_keys():
    layout = {"tensor_model_parallel_size": 2}
    assert hold_keys(["layout.tensor_model_parallel_size"], layout) == ("tensor_model_parallel_size",)
    with pytest.raises(UnknownNameError, match="is not a layout key"):
        hold_keys(["nonsense"], layout)
    with pytest.raises(UnknownNameError, match="the scenario sets"):
        hold_keys(["context_parallel_size"], layout)


def test_sweep_and_recipes_refuse_bad_arguments(tmp_path):
    with pytest.raises(InputError, match="DIR"):
        sweep_report("collect")
    with pytest.raises(InputError, match="--output"):
        sweep_report(str(DSV3))
    with pytest.raises(InputError, match="SCENARIO"):
        sweep_report(str(tmp_path / "missing.yaml"), output=tmp_path / "sw")
    with pytest.raises(InputError, match="--kind"):
        recipes_report("favourites")


# --- writing -----------------------------------------------------------------------------------------


def test_write_atomically_modes_symlinks_and_refusals(tmp_path):
    umask = os.umask(0)
    os.umask(umask)
    f = tmp_path / "a.txt"
    write_atomically(f, "one")
    assert f.read_text() == "one" and stat.S_IMODE(f.stat().st_mode) == 0o666 & ~umask
    f.chmod(0o600)
    write_atomically(f, "two")  # an existing file keeps its permissions
    assert f.read_text() == "two" and stat.S_IMODE(f.stat().st_mode) == 0o600
    sh = tmp_path / "run.sh"
    write_atomically(sh, "#!/bin/sh\n", executable=True)
    assert stat.S_IMODE(sh.stat().st_mode) == 0o777 & ~umask
    link = tmp_path / "link.txt"
    link.symlink_to(f)
    write_atomically(link, "three")  # the link itself is replaced, the file it named is left alone
    assert not link.is_symlink() and link.read_text() == "three" and f.read_text() == "two"
    assert stat.S_IMODE(link.stat().st_mode) == 0o666 & ~umask  # not the mode of the file it named
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temporary left
    link.unlink()
    link.symlink_to(f)
    assert check_writable(link) == f.resolve()
    for bad, why in ((tmp_path, "directory"), (tmp_path / "no" / "x", "existing directory"), (" ", "file path")):
        with pytest.raises(InputError, match=why):
            write_atomically(bad, "x", field="--save")


def test_load_workload(tmp_path):
    good = _scenario_file(tmp_path, {"workload": {"images_per_sequence": 2.0}}, "w.yaml")
    assert load_workload(good) == {"images_per_sequence": 2.0}
    bad = _scenario_file(tmp_path, {"model": "x"}, "b.yaml")
    with pytest.raises(InputError, match="--workload"):
        load_workload(bad)
    with pytest.raises(InputError, match="--workload"):
        load_workload(tmp_path / "missing.yaml")


# --- check, params, catalogue ------------------------------------------------------------------------


def test_check_report(tmp_path):
    doc = check_report(BROKEN)
    assert doc["verdict"] in ("invalid", "unsupported") and "import_notes" not in doc
    assert doc["counts"]["error"] == sum(f["severity"] == "error" for f in doc["findings"]) > 0
    assert check_report(DSV3, ScenarioFlags(pp=16))["scenario"]["parallel"]["PP"] == 16
    with pytest.raises(InputError, match="no such mbridge-yaml file"):
        check_report(tmp_path / "missing.yaml", from_format="mbridge-yaml")


def test_params_report_per_rank_adds_up():
    doc = params_report(None, ScenarioFlags(model="qwen3-30b-a3b", pp=2, ep=8))
    assert doc["model"] == "Qwen/Qwen3-30B-A3B" and doc["split_errors"] == []
    assert [st["stage"] for st in doc["per_rank"]] == [0, 1]
    assert sum(st["num_layers"] for st in doc["per_rank"]) == 48
    with pytest.raises(InputError, match="a model"):
        params_report(None, ScenarioFlags(tp=2))


def test_catalogue_reports():
    rows = models_report()
    assert [r["id"] for r in rows] == list_models()
    dense = next(r for r in rows if r["id"] == "meta-llama/Llama-3.1-8B")
    assert dense["kind"] == "dense" and dense["experts"] is None
    assert dense["total_params"] == dense["active_params"]  # dense: every parameter is active
    assert gpus_report("h100")["id"] == "h100" and len(gpus_report()) >= 7
    with pytest.raises(UnknownNameError):
        gpus_report("h999")
    assert [r["rule_id"] for r in rules_report()] == list(RULES)


def test_catalogue_kind_names_each_layer_family():
    kinds = {r["id"]: r["kind"] for r in models_report()}
    assert kinds["nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16"] == "MoE hybrid-Mamba"
    assert kinds["deepseek-ai/DeepSeek-V4-Flash"] == "MoE MLA+CSA"
    assert kinds["deepseek-ai/DeepSeek-V3.2"] == "MoE MLA+DSA"
    assert kinds["Qwen/Qwen3-Next-80B-A3B-Instruct"] == "MoE hybrid-GDN"
    assert kinds["deepseek-ai/DeepSeek-V3"] == "MoE MLA"


# --- estimate, export --------------------------------------------------------------------------------


def test_estimate_report_fits_and_throughput():
    rep = estimate_report(DSV3)
    doc = rep.document
    assert list(doc) == ["scenario", "assumes", "check", "memory", "throughput"]
    assert rep.fits == (doc["memory"]["verdict"] != "does-not-fit")
    assert rep.check["verdict"] == doc["check"]["verdict"]
    s = load_scenario(DSV3)
    assert doc["memory"]["peak_bytes"] == estimate_memory(s).to_dict()["peak_bytes"]
    assert doc["throughput"]["tokens_per_s_per_gpu"] == estimate_step(s).tokens_per_s_per_gpu


def test_estimate_report_layout_that_does_not_fold():
    rep = estimate_report(DSV3, ScenarioFlags(pp=64))
    assert isinstance(rep, EstimateReport) and rep.broken and not rep.fits
    assert rep.document["memory"] is None and rep.document["throughput"] is None
    assert set(rep.document["check"]) == {"verdict", "errors"}  # as before: no warnings key
    assert len(rep.check["findings"]) >= len(rep.document["check"]["errors"]) > 0


def test_estimate_report_vlm_mock_data_figure():
    flags = ScenarioFlags(
        model="Qwen/Qwen3-VL-30B-A3B-Instruct", gpu="h100", num_gpus=16, seq_length=8192, gbs=128, ep=8
    )
    th = estimate_report(None, flags).document["throughput"]
    s = load_scenario(None, scenario_overrides(flags))
    assert th["mock_data_tokens_per_s_per_gpu"] == estimate_step(s, vision_patches=0.0).tokens_per_s_per_gpu
    assert th["real_data_workload"] == "planning default"


def test_export_report_refuses_a_broken_layout_unless_forced():
    res = export_report(BROKEN)
    assert res.refused and res.broken_rules and res.warnings == []
    forced = export_report(BROKEN, force=True)
    assert not forced.refused and forced.text and forced.broken_rules == res.broken_rules
    ok = export_report(DSV3, fmt="megatron-lm-args")
    assert not ok.refused and ok.broken_rules == [] and "--tensor-model-parallel-size" in ok.text
    with pytest.raises(InputError, match="a path other than the input"):
        export_report(DSV3, output=DSV3)


# --- diagnose ----------------------------------------------------------------------------------------


def test_log_report(tmp_path):
    p = tmp_path / "a.log"
    p.write_text(_log(1000.0))
    (entry,) = log_report([p])
    assert entry["log"] == str(p) and entry["iteration_time_ms"]["median"] == 1000.0 and entry["config"] is None
    with pytest.raises(InputError):
        log_report([p, tmp_path / "missing.log"])


def test_runs_from_logs_measures_tokens_per_second(tmp_path):
    sc = _scenario_file(tmp_path, QWEN)
    p = tmp_path / "a.log"
    p.write_text(_log(1000.0))
    (run,) = runs_from_logs([p], sc)
    # 128 sequences x 4096 tokens per 1.0 s step over 8 GPUs
    assert run.measured_tokens_per_s_per_gpu == pytest.approx(128 * 4096 / 1.0 / 8)
    with pytest.raises(InputError, match="--scenario"):
        runs_from_logs([p], None)
    empty = tmp_path / "empty.log"
    empty.write_text("nothing here\n")
    with pytest.raises(InputError, match="iteration times"):
        runs_from_logs([empty], sc)


def test_oom_report_with_and_without_a_scenario(tmp_path):
    doc = oom_report(OOM_MSG)
    assert doc["blame"] is None and doc["requested_bytes"] == 2 * 2**30
    with pytest.raises(InputError, match="oom"):
        oom_report("nonsense")
    sc = _scenario_file(tmp_path, QWEN)
    blame = oom_report(OOM_MSG, sc)["blame"]
    peak = estimate_memory(load_scenario(QWEN)).peak_stage
    everything = sorted((int(v) for items in peak.items.values() for v in items.values()), reverse=True)
    assert [t["bytes"] for t in blame["largest_terms"]] == everything[:3]
    assert blame["predicted_peak_bytes"] == peak.total_bytes and blame["stage"] == peak.stage


def test_compare_and_doctor_refuse_bad_paths(tmp_path):
    a = tmp_path / "a.log"
    with pytest.raises(InputError, match="--plot"):
        compare_report(a, a, plot=tmp_path / "plot.txt")
    with pytest.raises(InputError, match="a path other than the input"):
        compare_report(tmp_path / "a.png", tmp_path / "b.log", plot=tmp_path / "a.png")
    with pytest.raises(InputError):
        doctor_report(tmp_path / "missing.yaml")


def test_vlm_processor_and_pixel_bounds():
    assert vision_processor(None, None, None) == (16, 2)
    assert vision_processor(None, 14, None) == (14, 2)
    with pytest.raises(InputError, match="vision-language"):
        vision_processor("qwen3-30b-a3b", None, None)
    with pytest.raises(InputError, match="--min-pixels"):
        vlm_stats_report(ROOT / "examples" / "vlm_manifest.jsonl", 8192, min_pixels=100, max_pixels=10)


# --- the CLI's scenario flags ------------------------------------------------------------------------


def test_scenario_options_cover_every_flag_in_order():
    assert tuple(SCENARIO_OPTIONS) == FLAG_NAMES


def test_scenario_options_pack_the_flags_and_place_own_parameters():
    seen = []
    app = typer.Typer()

    @app.command()
    @scenario_options("model", "extra", "tp", "sets")
    def cmd(name: str = "x", flags: ScenarioFlags = ScenarioFlags(), extra: int = 0) -> None:
        seen.append((name, flags, extra))

    res = CliRunner().invoke(app, ["--model", "m", "--tp", "2", "--extra", "3", "--set", "a.b=1", "--name", "y"])
    assert res.exit_code == 0, res.output
    assert seen == [("y", ScenarioFlags(model="m", tp=2, sets=("a.b=1",)), 3)]
    res = CliRunner().invoke(app, ["--help"], terminal_width=200)
    order = [res.output.index(o) for o in ("--name", "--model", "--extra", "--tp", "--set")]
    assert order == sorted(order) and "--gpu" not in res.output
    res = CliRunner().invoke(app, [])
    assert seen[-1] == ("x", ScenarioFlags(), 0)


def test_documents_are_plain_json():
    """What --json prints is the document itself: it serialises without help (no paths, no objects)."""
    for doc in (check_report(DSV3), estimate_report(DSV3).document, params_report(DSV3), models_report()):
        json.dumps(doc)


def test_set_null_unsets_a_version_as_a_scenario_file_does():
    from moeplan.inputs.overrides import parse_set

    assert parse_set(["versions.transformer_engine=null", "versions.nccl=~"]) == {
        "versions": {"transformer_engine": None, "nccl": None}
    }
    # quoted, it is the text "null" (and an invalid version, refused where versions are read)
    assert parse_set(['versions.megatron_core="null"']) == {"versions": {"megatron_core": "null"}}
    assert parse_set(["versions.container=26.10"]) == {"versions": {"container": "26.10"}}


def test_a_stated_version_that_differs_from_its_containers_is_said():
    from moeplan import load_scenario, validate

    def ids(versions: dict) -> list:
        s = load_scenario(
            {
                "model": "Qwen/Qwen3-30B-A3B",
                "system": {"gpu": "h100", "num_gpus": 8},
                "training": {"seq_length": 4096, "global_batch_size": 64},
                "versions": versions,
            }
        )
        return [f for f in validate(s).findings if f.rule_id == "scenario.versions_differ_from_container"]

    # nemo 26.06 ships Transformer Engine 2.16 (catalog/data/containers.yaml)
    found = ids({"container": "26.06", "transformer_engine": "2.18"})
    assert len(found) == 1 and "2.18" in found[0].message and "2.16" in found[0].message
    assert ids({"container": "26.06", "transformer_engine": "2.16"}) == []  # the same version
    assert ids({"container": "26.06"}) == [] and ids({"transformer_engine": "2.18"}) == []
