"""Export → import round trip for every scenario of tests/data/reference (published runs, skill
recipes, cases): lossless for the Bridge formats; for Megatron-LM flags, equal on the keys the format
can carry, with a note for each key it cannot."""

from __future__ import annotations

import shutil
import subprocess

import pytest
import yaml

from moeplan import load_scenario
from moeplan.errors import InputError
from moeplan.io.export import export, training_guards
from moeplan.io.imports import import_config
from moeplan.io.keys import MLM_UNSUPPORTED
from moeplan.structure.hybridep_env import hybridep_domain
from tests.conftest import REF, REQUIRE_TOOLS, load_cases, missing_tool


def _reference_scenarios():
    out = []
    for r in yaml.safe_load((REF / "published_runs.yaml").read_text())["runs"]:
        out.append((r["id"], r["scenario"]))
    for r in yaml.safe_load((REF / "skill_recipes.yaml").read_text())["recipes"]:
        out.append((r["id"], r["scenario"]))
    for c in load_cases():
        for i, e in enumerate([c] + list(c.get("more_checks") or [])):
            if e.get("scenario"):
                out.append((f"{c['id']}-{i}", e["scenario"]))
    return out


def _effective(s):
    lay = s.layout.model_dump()
    scopes = s.graph_scopes()
    lay.pop("cuda_graph_scope")
    lay.pop("cuda_graph_modules")
    lay["graph_scopes"] = scopes
    # a Bridge export writes the training values of unset benchmark-only keys (the NaN check on: its
    # Bridge default), so that no launched recipe's benchmark settings leak in; unset reads back as them
    for key, value in training_guards(s).items():
        if lay.get(key) is None:
            lay[key] = value
    return {
        "model": s.model.name if s.model else None,
        "gpu": s.gpu.id if s.gpu else None,
        "num_gpus": s.num_gpus,
        "framework": s.framework,
        "training": s.training.model_dump(),
        "layout": lay,
    }


SCENARIOS = _reference_scenarios()


@pytest.mark.parametrize("fmt", ["mbridge-yaml", "mbridge-overrides"])
def test_bridge_round_trip_is_lossless(fmt):
    assert len(SCENARIOS) >= 150
    for sid, sc in SCENARIOS:
        s = load_scenario(sc)
        text, _ = export(s, fmt)
        back, _notes = import_config(text, fmt)
        assert _effective(load_scenario(back)) == _effective(s), sid


def test_megatron_lm_round_trip_on_carried_keys():
    for sid, sc in SCENARIOS:
        s = load_scenario(sc)
        text, notes = export(s, "megatron-lm-args")
        back = load_scenario(import_config(text, "megatron-lm-args")[0])
        a, b = _effective(s), _effective(back)
        assert a["training"] == b["training"], sid
        for key, val in a["layout"].items():
            if key in MLM_UNSUPPORTED or key == "graph_scopes":
                continue
            if val != b["layout"][key]:
                assert any(note.startswith(key) for note in notes), (sid, key, val, b["layout"][key])


def _slurm_script(gpu: str = "gb200", pp: int = 4, ep: int = 64) -> str:
    """The Slurm export of DeepSeek-V3 on 256 GPUs with HybridEP and an explicit pipeline layout (16 virtual
    stages: PP × VPP = 16)."""
    s = load_scenario(
        {
            "model": "deepseek-ai/DeepSeek-V3",
            "system": {"gpu": gpu, "num_gpus": 256},
            "training": {"seq_length": 4096, "micro_batch_size": 1, "global_batch_size": 512},
            "layout": {
                "pipeline_model_parallel_size": pp,
                "expert_model_parallel_size": ep,
                "moe_token_dispatcher_type": "flex",
                "moe_flex_dispatcher_backend": "hybridep",
                "pipeline_model_parallel_layout": "Et*4|(t*4|)*14tmL",
                "virtual_pipeline_model_parallel_size": 16 // pp,
            },
        }
    )
    return export(s, "slurm")[0]


def test_slurm_script_is_valid_bash(tmp_path):
    text = _slurm_script()
    path = tmp_path / "run.sh"
    path.write_text(text)
    res = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert "NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN=64" in text
    assert "#SBATCH --nodes=64" in text  # 256 GPUs / 4 per GB200 tray


@pytest.mark.parametrize(("group", "want"), [(64, 64), (72, 72), (128, 64), (96, 48), (144, 72), (80, 40), (7, 7)])
def test_exported_hybridep_domain_divides_the_ep_group(group, want):
    """HybridEPBuffer asserts that NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN divides EP·ETP: on NVL72 the export
    takes the largest divisor within the 72-GPU domain (by hand), never 72 for a group it does not divide."""
    got = hybridep_domain(group, 72)
    assert got == want and group % got == 0


def test_slurm_script_for_ep_128_on_gb300_passes_its_own_hybridep_check():
    """The slurm script for EP 128 over two NVL72 domains exports 64 ranks per domain (a divisor of 128, as
    HybridEPBuffer asserts), not the domain's 72, which the deployment rule that mirrors the assertion
    rejects."""
    text = _slurm_script("gb300", pp=2, ep=128)
    assert "NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN=64" in text


NO_SHELLCHECK = "shellcheck is not installed (.ci/run installs it: apt-get install shellcheck)"


def test_slurm_script_passes_shellcheck(tmp_path):
    """Skips without shellcheck on a developer's machine; fails without it under MOEPLAN_REQUIRE_TOOLS (CI)."""
    shellcheck = shutil.which("shellcheck") or missing_tool(NO_SHELLCHECK)
    path = tmp_path / "run.sh"
    path.write_text(_slurm_script())
    res = subprocess.run([shellcheck, "-S", "warning", str(path)], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout


def test_missing_shellcheck_fails_the_slurm_check_when_tools_are_required(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "no-tools"))
    monkeypatch.setenv(REQUIRE_TOOLS, "1")
    with pytest.raises(pytest.fail.Exception, match=r"shellcheck is not installed.*MOEPLAN_REQUIRE_TOOLS is set"):
        test_slurm_script_passes_shellcheck(tmp_path)


@pytest.mark.parametrize("unset", ["", "0", None])
def test_missing_shellcheck_skips_the_slurm_check_when_tools_are_not_required(tmp_path, monkeypatch, unset):
    monkeypatch.setenv("PATH", str(tmp_path / "no-tools"))
    if unset is None:
        monkeypatch.delenv(REQUIRE_TOOLS, raising=False)
    else:
        monkeypatch.setenv(REQUIRE_TOOLS, unset)
    with pytest.raises(pytest.skip.Exception, match=r"apt-get install shellcheck\)$"):
        test_slurm_script_passes_shellcheck(tmp_path)


def test_log_argument_dump_import():
    log = """\
[rank0]: ------------------------ arguments ------------------------
[rank0]:   tensor_model_parallel_size ...................... 4
[rank0]:   pipeline_model_parallel_size .................... 2
[rank0]:   expert_model_parallel_size ...................... 8
[rank0]:   sequence_parallel ............................... True
[rank0]:   recompute_granularity ........................... selective
[rank0]:   recompute_modules ............................... ['moe_act', 'layernorm']
[rank0]:   seq_length ...................................... 4096
[rank0]:   micro_batch_size ................................ 1
[rank0]:   global_batch_size ............................... 512
[rank0]:   fp8 ............................................. None
[rank0]: -------------------- end of arguments ---------------------
iteration 1/ 100 | elapsed time per iteration (ms): 1234.5
"""
    sc, _ = import_config(log, "megatron-log")
    s = load_scenario(sc)
    assert (s.tp, s.pp, s.ep, s.sp) == (4, 2, 8, True)
    assert s.layout.recompute_modules == ["moe_act", "layernorm"]
    assert s.training.seq_length == 4096 and s.training.precision == "bf16"


def test_recipe_quirk_moe_a2a_overlap_is_reported():
    text = "model:\n  tensor_model_parallel_size: 2\n  moe_a2a_overlap: true\n"
    sc, notes = import_config(text, "mbridge-yaml")
    assert any("moe_a2a_overlap" in n and "overlap_moe_expert_parallel_comm" in n for n in notes)
    assert "overlap_moe_expert_parallel_comm" not in sc["layout"]


def test_version_aware_spellings():
    base = {"model": "qwen3-30b-a3b", "layout": {"cuda_graph_impl": "full_iteration", "cuda_graph_scope": []}}
    new = export(load_scenario(base), "mbridge-yaml")[0]
    assert "cuda_graph_impl: full_iteration" in new and "cuda_graph_modules: []" in new
    old = export(load_scenario({**base, "versions": {"megatron_core": "0.16.1"}}), "mbridge-yaml")[0]
    assert "cuda_graph_impl: local" in old and "cuda_graph_scope: [full_iteration]" in old
    paged = {"model": "qwen3-30b-a3b", "layout": {"moe_paged_stash": True}, "versions": {"megatron_core": "0.16.1"}}
    body = [line for line in export(load_scenario(paged), "mbridge-yaml")[0].splitlines() if not line.startswith("#")]
    assert not any("moe_paged_stash" in line for line in body)


# --- Megatron keys moeplan does not model (unmodelled_keys) through export and import -------------------

#: carried keys of four kinds: a count above any parallel size, a float, a store_false switch at its
#: Megatron-LM default (no flag is written: the header keeps it), a store_true switch, a text and an
#: nargs list of integers (``--mrope-section``, list[int] from megatron-core 0.16)
CARRIED = {
    "train_samples": 585937500,
    "lr": 0.00012,
    "overlap_p2p_comm": True,
    "log_throughput": True,
    "tokenizer_model": "unsloth/DeepSeek-V3",
    "mrope_section": [16, 24, 24],
}


@pytest.mark.parametrize("fmt", ["megatron-lm-args", "mbridge-yaml", "mbridge-overrides"])
def test_unmodelled_keys_survive_export_and_import(fmt):
    s = load_scenario({"model": "Qwen/Qwen3-8B", "layout": {"tensor_model_parallel_size": 2, **CARRIED}})
    assert s.input.unmodelled_keys == CARRIED
    text, _ = export(s, fmt)
    back, _ = import_config(text, fmt)
    assert load_scenario(back).input.unmodelled_keys == CARRIED


def test_megatron_lm_flags_of_unmodelled_keys_read_back_typed_by_the_key_table():
    text = (
        "--tensor-model-parallel-size 2 --train-samples 585937500 --lr 1.2e-4 "
        "--no-overlap-p2p-communication --log-throughput --tokenizer-model unsloth/DeepSeek-V3 "
        "--mrope-section 16 24 24 --data-path 0.3 /d/a 0.7 /d/b"
    )
    sc, notes = import_config(text, "megatron-lm-args")
    assert sc["layout"] == {
        "tensor_model_parallel_size": 2,
        "train_samples": 585937500,  # int
        "lr": 0.00012,  # float
        "overlap_p2p_comm": False,  # store_false: dest overlap_p2p_comm
        "log_throughput": True,  # store_true
        "tokenizer_model": "unsloth/DeepSeek-V3",
        "mrope_section": [16, 24, 24],  # nargs '+', list[int]
        "data_path": ["0.3", "/d/a", "0.7", "/d/b"],  # nargs '*', no type: text
    }
    assert not [n for n in notes if "not modelled" in n]


def test_bridge_yaml_fields_of_unmodelled_keys_read_back_from_their_sections():
    text = (
        "model: {tensor_model_parallel_size: 2, num_layers: 4, moe_aux_loss_coeff: 0.001}\n"
        "optimizer: {lr: 0.00012, adam_beta1: 0.9}\n"
        "comm_overlap: {overlap_p2p_comm: true}\n"
        "mixed_precision: {bf16: true, grad_reduce_in_fp32: false}\n"
    )
    sc, notes = import_config(text, "mbridge-yaml")
    lay = sc["layout"]
    assert (lay["lr"], lay["adam_beta1"], lay["overlap_p2p_comm"], lay["moe_aux_loss_coeff"]) == (
        0.00012,
        0.9,
        True,
        0.001,
    )
    assert "num_layers" not in lay and any("model.num_layers" in n for n in notes)  # a model field
    assert "bf16" not in lay and sc["training"]["precision"] == "bf16"


def test_log_argument_dump_carries_arguments_set_away_from_their_defaults():
    log = """\
------------------------ arguments ------------------------
  tensor_model_parallel_size ...................... 2
  train_samples ................................... 585937500
  lr .............................................. 0.00012
  log_interval .................................... 1
  log_throughput .................................. False
  overlap_p2p_comm ................................ True
  norm_epsilon .................................... 1e-05
  swiglu .......................................... True
  num_layers ...................................... 4
  rank ............................................ 0
-------------------- end of arguments ---------------------
"""
    sc, _ = import_config(log, "megatron-log")
    # log_throughput False, overlap_p2p_comm True, norm_epsilon 1e-05: Megatron-LM's defaults;
    # swiglu and num_layers: the model; rank: no argument
    assert load_scenario(sc).input.unmodelled_keys == {"train_samples": 585937500, "lr": 0.00012, "log_interval": 1}


def test_unmodelled_key_of_the_wrong_type_names_key_value_and_type():
    with pytest.raises(InputError) as exc:
        load_scenario({"layout": {"train_samples": "many"}})
    assert exc.value.field == "layout.train_samples" and exc.value.value == "many"
    assert "a value of type int" in exc.value.allowed and "str" in exc.value.allowed
    with pytest.raises(InputError) as exc:
        load_scenario({"layout": {"log_throughput": 3}})
    assert "a value of type bool" in exc.value.allowed


def test_size_cap_applies_to_parallel_sizes_not_to_megatron_counts():
    assert load_scenario({"layout": {"lr_warmup_samples": 2**30}}).input.unmodelled_keys == {"lr_warmup_samples": 2**30}
    with pytest.raises(InputError) as exc:
        load_scenario({"layout": {"tensor_model_parallel_size": 2**21}})
    assert exc.value.field == "layout.tensor_model_parallel_size"
