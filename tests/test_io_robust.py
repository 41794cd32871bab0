"""Import/export robustness against hostile and messy input: real log dumps, real command lines, Hydra
values, output files, shell safety."""

from __future__ import annotations

import os
import stat

import pytest
from typer.testing import CliRunner

from moeplan import InputError, load_scenario
from moeplan.cli.app import app
from moeplan.io.export import export
from moeplan.io.imports import hydra_value, import_config

runner = CliRunner()

LOG = """\x1b[32m[rank0]:\x1b[0m ------------------------ arguments ------------------------
[rank0]:   tensor_model_parallel_size ...................... 4
[rank0]:   pipeline_model_parallel_size .................... 2
[rank0]:   virtual_pipeline_model_parallel_size ............ None
[rank0]:   expert_model_parallel_size ...................... 8
[rank0]:   main_grads_dtype ................................ torch.float32
[rank0]:   attention_backend ............................... AttnBackend.auto
[rank0]:   cp_comm_type .................................... ['p2p']
[rank0]:   sequence_parallel ............................... True
[rank0]:   world_size ...................................... 64
[rank0]:   fp4 ............................................. e2m1
[rank0]:   fp4_recipe ...................................... nvfp4
[rank0]:   seq_length ...................................... \x1b[0m4096\x1b[0m
[rank0]: -------------------- end of arguments ---------------------
"""


def test_real_log_dump_reads_python_reprs():
    sc, notes = import_config(LOG, "megatron-log")
    s = load_scenario({**sc, "model": "qwen3-30b-a3b"})
    assert (s.tp, s.pp, s.ep, s.num_gpus) == (4, 2, 8, 64)
    assert s.layout.virtual_pipeline_model_parallel_size is None
    assert s.layout.main_grads_dtype == "fp32" and s.layout.attention_backend == "auto"
    assert s.layout.cp_comm_type == "p2p" and s.training.precision == "nvfp4"
    assert s.training.seq_length == 4096 and s.framework == "megatron-core"


def test_truncated_log_is_noted():
    _, notes = import_config(LOG.split("[rank0]:   world_size")[0], "megatron-log")
    assert any("cut off" in n for n in notes)


def test_megatron_lm_command_lines():
    text = """torchrun --nproc-per-node 8 pretrain_gpt.py \\
      --tensor-model-parallel-size=4 \\
      --pipeline-model-parallel-size 2   # PP
      --sequence-parallel \\
      --recompute-granularity selective --recompute-modules \\
      --moe-expert-capacity-factor 1e-1 --fp8-format hybrid --fp8-recipe tensorwise \\
      --no-check-for-nan-in-loss-and-grad --num-layers-per-virtual-pipeline-stage 2
    """
    sc, notes = import_config(text, "megatron-lm-args")
    lay = sc["layout"]
    assert lay["tensor_model_parallel_size"] == 4 and lay["pipeline_model_parallel_size"] == 2
    assert lay["sequence_parallel"] is True and lay["recompute_modules"] == []
    assert lay["moe_expert_capacity_factor"] == 0.1 and lay["check_for_nan_in_loss"] is False
    assert sc["training"]["precision"] == "fp8-tensorwise"
    assert any("num-layers-per-virtual-pipeline-stage" in n for n in notes)
    with pytest.raises(InputError):
        import_config("--tensor-model-parallel-size '2", "megatron-lm-args")


def test_hydra_values():
    assert hydra_value("[moe_act, layernorm]") == ["moe_act", "layernorm"]
    assert hydra_value("'*tt|'") == "*tt|" and hydra_value("010") == 10 and hydra_value("1e0") == 1.0
    assert hydra_value("'false'") == "false" and hydra_value("none") == "none" and hydra_value("null") is None
    sc, _ = import_config(
        "+model.tensor_model_parallel_size=2\nmixed_precision=bf16_with_mxfp8_mixed\n", "mbridge-overrides"
    )
    assert sc["layout"]["tensor_model_parallel_size"] == 2 and sc["training"]["precision"] == "mxfp8"


def test_bad_header_is_a_note_not_a_crash():
    sc, notes = import_config("# moeplan: {not json\nmodel:\n  tensor_model_parallel_size: 2\n", "mbridge-yaml")
    assert sc["layout"]["tensor_model_parallel_size"] == 2 and any("header" in n for n in notes)


def test_environment_names_are_checked_and_slurm_counts_ranks():
    with pytest.raises(InputError):
        load_scenario({"environment": {"X;rm -rf ~": "3"}})
    s = load_scenario(
        {
            "model": "qwen3-30b-a3b",
            "system": {"gpu": "h100", "num_gpus": 12, "gpus_per_node": 8},
            "training": {"seq_length": 4096},
            "layout": {"expert_model_parallel_size": 4},
        }
    )
    text, _ = export(s, "slurm")
    assert "#SBATCH --ntasks=12" in text and "--ntasks-per-node" not in text


def test_output_file_handling(tmp_path):
    args = ["export", "examples/deepseek_v3_gb300.yaml", "-f", "mbridge-yaml"]
    assert runner.invoke(app, [*args, "-o", str(tmp_path)]).exit_code == 2
    assert runner.invoke(app, [*args, "-o", ""]).exit_code == 2
    assert not list(tmp_path.glob(".*"))  # nothing half-written left behind
    existing = tmp_path / "cfg.yaml"
    existing.write_text("old")
    existing.chmod(0o640)
    link = tmp_path / "link.yaml"
    link.symlink_to(existing)
    assert runner.invoke(app, [*args, "-o", str(link)]).exit_code == 0
    assert not link.is_symlink() and "model:" in link.read_text()  # the link is replaced, not followed
    assert existing.read_text() == "old" and stat.S_IMODE(existing.stat().st_mode) == 0o640
    new = tmp_path / "new.yaml"
    assert runner.invoke(app, [*args, "-o", str(new)]).exit_code == 0
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(new.stat().st_mode) == 0o666 & ~umask
    out = runner.invoke(app, [*args, "-o", "-"])
    assert out.exit_code == 0 and "model:" in out.output


def test_legacy_full_iteration_scope_exported_as_impl_on_new_versions():
    s = load_scenario(
        {"model": "qwen3-30b-a3b", "layout": {"cuda_graph_impl": "local", "cuda_graph_scope": "full_iteration"}}
    )
    text, _ = export(s, "mbridge-yaml")
    assert "cuda_graph_impl: full_iteration" in text and "cuda_graph_modules: []" in text


def test_keys_newer_than_the_version_are_errors():
    from moeplan import validate

    r = validate(load_scenario({"layout": {"moe_paged_stash": True}, "versions": {"megatron_core": "0.16.1"}}))
    assert "scenario.keys_vs_version" in r.rule_ids("error")


@pytest.mark.parametrize("value", ["two", "-2", "0", "[2]"])
def test_check_from_refuses_an_invalid_parallel_size(value, tmp_path):
    from typer.testing import CliRunner

    from moeplan.cli.app import app

    f = tmp_path / "o.txt"
    f.write_text(f"model.tensor_model_parallel_size={value}\n")
    r = CliRunner().invoke(app, ["check", "--from", "mbridge-overrides", str(f), "--model", "qwen3-30b-a3b"])
    assert r.exit_code == 2 and "tensor_model_parallel_size" in r.stderr
    f.write_text("")
    r = CliRunner().invoke(app, ["check", "--from", "mbridge-overrides", str(f)])
    assert r.exit_code == 2 and "at least one key" in r.stderr


@pytest.mark.parametrize("layout", ["Et*99999999999|L", "(t|)*99999999", "((t|)*1000)*1000"])
def test_layout_repeats_that_expand_without_bound_are_rejected(layout):
    from moeplan.structure.stages import LayoutSyntaxError, parse_layout

    with pytest.raises(LayoutSyntaxError, match="expands past"):
        parse_layout(layout)
