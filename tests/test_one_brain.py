"""The commands do not ignore each other. ``compare`` says when ``check`` rejects
a changed key (DeepEP on GB200); ``check --from megatron-log`` / ``megatron-lm-args`` check the run's
own architecture from its arguments; a check that skipped the model rules is ``incomplete`` (exit 1),
not ``valid``; ``oom`` says when the run's configuration breaks a rule."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from moeplan.cli.app import app
from moeplan.diagnose.compare import rank_causes
from moeplan.io.imports import import_config
from tests.test_compare import make_log

runner = CliRunner()
DUMP = {
    "tensor_model_parallel_size": 2,
    "pipeline_model_parallel_size": 4,
    "expert_model_parallel_size": 32,
    "num_layers": 94,
    "hidden_size": 4096,
    "num_attention_heads": 64,
    "num_query_groups": 4,
    "group_query_attention": "True",
    "num_experts": 128,
    "moe_router_topk": 8,
    "moe_ffn_hidden_size": 1536,
    "seq_length": 4096,
    "micro_batch_size": 1,
    "global_batch_size": 1024,
    "world_size": 256,
}
GB200 = {
    "model": "Qwen/Qwen3-235B-A22B",
    "system": {"gpu": "gb200", "num_gpus": 256},
    "training": {"precision": "bf16"},
}


def test_check_from_a_log_checks_the_runs_own_architecture(tmp_path):
    log = tmp_path / "run.log"
    log.write_text(make_log(1, 0.0, dump=DUMP))
    r = runner.invoke(app, ["check", "--from", "megatron-log", str(log), "--json"])
    d = json.loads(r.stdout)
    assert r.exit_code == 1 and d["verdict"] == "invalid"
    ids = {f["rule_id"] for f in d["findings"]}
    assert "pipeline.num_layers_divisible_by_pp" in ids  # 94 layers on PP 4, read from the dump
    assert not any(f["message"].startswith("skipped: needs the model's") for f in d["findings"])
    assert any("the run's own architecture" in n for n in d["import_notes"])


def test_megatron_lm_args_carry_the_architecture_too():
    text = "--num-layers 94 --hidden-size 4096 --num-attention-heads 64 --group-query-attention --num-query-groups 4 "
    text += "--num-experts 128 --moe-router-topk 8 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 8"
    sc, _ = import_config(text, "megatron-lm-args")
    assert sc["model_overrides"]["num_layers"] == 94 and sc["model_overrides"]["num_moe_experts"] == 128


def test_a_check_that_skipped_the_model_rules_is_not_valid(tmp_path):
    dump = {
        k: v
        for k, v in DUMP.items()
        if k in ("tensor_model_parallel_size", "pipeline_model_parallel_size", "seq_length")
    }
    log = tmp_path / "run.log"
    log.write_text(make_log(1, 0.0, dump=dump))
    r = runner.invoke(app, ["check", "--from", "megatron-log", str(log)], env={"COLUMNS": "100"})
    assert r.exit_code == 1
    assert "verdict: incomplete" in r.output and "verdict: valid" not in r.output


def test_compare_says_when_check_rejects_a_changed_key():
    """A switch to DeepEP on GB200 is not a speed-up to try: DeepEP does not run there."""
    a = dict(DUMP, moe_token_dispatcher_type="alltoall", num_layers=94)
    b = dict(a, moe_token_dispatcher_type="flex", moe_flex_dispatcher_backend="deepep")
    ca = import_config(make_log(1, 0, dump=a), "megatron-log")[0]
    cb = import_config(make_log(2, 0, dump=b), "megatron-log")[0]
    _, causes, notes = rank_causes(ca, cb, GB200, direction=-1)
    by = {c["key"]: c for c in causes}
    assert any("moe.flex_dispatcher_backend_vs_gpu" in r for c in by.values() for r in c["rejected_by"])
    assert any(n.startswith("run B's configuration breaks") for n in notes)


def test_oom_names_the_rules_the_run_breaks(tmp_path):
    scn = tmp_path / "s.yaml"
    scn.write_text(
        json.dumps(
            {
                "model": "Qwen/Qwen3-30B-A3B",
                "system": {"gpu": "gb200", "num_gpus": 64},
                "training": {"seq_length": 4096, "micro_batch_size": 1, "global_batch_size": 512},
                "layout": {
                    "expert_model_parallel_size": 8,
                    "moe_token_dispatcher_type": "flex",
                    "moe_flex_dispatcher_backend": "deepep",
                },
            }
        )
    )
    msg = (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
        "184.00 GiB of which 1.00 GiB is free. Of the allocated memory 170.00 GiB is allocated by PyTorch, and "
        "2.00 GiB is reserved by PyTorch but unallocated."
    )
    r = runner.invoke(app, ["oom", msg, "--scenario", str(scn), "--json"])
    d = json.loads(r.stdout)
    assert any("moe.flex_dispatcher_backend_vs_gpu" in n for n in d["blame"]["notes"]), d["blame"]["notes"]
