"""`plan` and `export` as a new user reads them: which published sizes and guidance families a plan
compares against, what a training export says about the NaN check, what the plan header holds, and
when the deprecated graph-scope alias is mentioned. Expected values are hand-checked."""

from __future__ import annotations

from types import SimpleNamespace

from moeplan import load_scenario
from moeplan.io.export import export
from moeplan.plan.baseline import differs, family_baseline

QWEN = {"model": "Qwen/Qwen3-30B-A3B", "system": {"gpu": "h100", "num_gpus": 16}}
#: the README's DeepSeek-V3 GB300 example (examples/deepseek_v3_gb300.yaml): its recipe fill runs a
#: full-iteration graph and writes cuda_graph_scope
DSV3_GB300 = {
    "model": "deepseek-ai/DeepSeek-V3",
    "system": {"gpu": "gb300", "num_gpus": 256},
    "training": {"seq_length": 4096, "micro_batch_size": 1, "global_batch_size": 4096, "precision": "mxfp8"},
    "recipe_defaults": "mbridge-perf",
    "layout": {
        "pipeline_model_parallel_size": 2,
        "virtual_pipeline_model_parallel_size": 8,
        "expert_model_parallel_size": 32,
        "pipeline_model_parallel_layout": "Et*4|(t*4|)*14tmL",
    },
}


def test_published_sizes_left_out_count_as_one_for_a_published_run_only():
    s = load_scenario(
        {
            **QWEN,
            "layout": {
                "pipeline_model_parallel_size": 2,
                "virtual_pipeline_model_parallel_size": 4,
                "expert_model_parallel_size": 8,
            },
        }
    )
    published = {"tensor_model_parallel_size": 1, "pipeline_model_parallel_size": 1, "expert_model_parallel_size": 8}
    assert differs(published, s, complete=True) == [
        "pipeline_model_parallel_size: 1 → 2",
        "virtual_pipeline_model_parallel_size: unset → 4",
    ]
    # a guidance family that leaves a size out does not say it is 1
    assert differs({"expert_model_parallel_size": 8}, s) == []


def test_a_guidance_family_an_octave_away_in_sequence_length_is_not_shown():
    def res(seq):
        req = {
            "model": "deepseek-ai/DeepSeek-V3",
            "gpu": "h100",
            "num_gpus": 256,
            "seq_length": seq,
            "global_batch_size": 64,
            "precision": "bf16",
        }
        return SimpleNamespace(request=req, candidates=[])

    # DeepSeek-V3 on H100 has families at 4K … 256K: 96K picks 128K (0.4 octave), 1M is 2 octaves past 256K
    assert family_baseline(res(98304))["recipe"] == "lc-cp-scaling-dsv3-h100-seq131072"
    assert family_baseline(res(1048576)) is None
    # Qwen3-235B on GB200 has only 128K families: a 4K request gets none
    q = SimpleNamespace(request={**res(4096).request, "model": "Qwen/Qwen3-235B-A22B", "gpu": "gb200"}, candidates=[])
    assert family_baseline(q) is None


def test_a_training_export_says_why_the_nan_check_is_off():
    base = DSV3_GB300
    text, _ = export(load_scenario(base), "mbridge-overrides")
    assert "rerun_state_machine.check_for_nan_in_loss=false" in text
    assert "# NaN check off: the full-iteration CUDA graph needs check_for_nan_in_loss=false" in text
    eager = {**base, "layout": {**base["layout"], "cuda_graph_impl": "none"}}
    text, _ = export(load_scenario(eager), "mbridge-overrides")
    assert "NaN check off" not in text and "check_for_nan_in_loss=false" not in text


def test_plan_header_holds_only_stated_keys_and_says_what_it_completed(tmp_path):
    from typer.testing import CliRunner

    from moeplan.cli.app import app

    f = tmp_path / "s.yaml"
    f.write_text(
        "model: Qwen/Qwen3-235B-A22B\nsystem: {gpu: gb200, num_gpus: 256}\n"
        "training: {seq_length: 4096, micro_batch_size: 1, global_batch_size: 1024, precision: mxfp8}\n"
        "layout: {pipeline_model_parallel_size: 8, expert_model_parallel_size: 8, cuda_graph_impl: full_iteration}\n"
    )
    r = CliRunner().invoke(app, ["plan", str(f), "--top", "2"])
    assert r.exit_code == 0, r.output
    head = r.output.split("completed for them: ")
    assert len(head) == 2
    assert "check_for_nan_in_loss" not in head[0]  # not "held fixed": the user did not state it
    done = " ".join(head[1].split("assumes")[0].split())  # the header, unwrapped
    assert "check_for_nan_in_loss=false" in done
    assert "(NaN check off: a diverging loss is not caught)" in done
    assert "candidates of" in r.output and "fitting layouts" in r.output


def test_the_deprecated_graph_scope_alias_is_said_only_of_a_stated_key():
    from moeplan.rules import validate

    # the DeepSeek-V3 GB300 recipe fill writes cuda_graph_scope: moeplan's spelling, not the user's
    base = {**DSV3_GB300, "versions": {"megatron_core": "0.20.0"}}

    def said(data):
        return [
            f for f in validate(load_scenario(data)).findings if "deprecated alias of cuda_graph_modules" in f.message
        ]

    assert said(base) == []
    stated = {
        **base,
        "layout": {**base["layout"], "cuda_graph_impl": "transformer_engine", "cuda_graph_scope": ["attn"]},
    }
    assert len(said(stated)) == 1
