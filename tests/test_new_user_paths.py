"""A new user's paths with only the README (docs/model/outputs.md): each test runs one command such a
user types and checks what it shows."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from moeplan.catalog.perf_recipes import published_runs
from moeplan.plan import plan
from moeplan.plan.baseline import differs

ROOT = Path(__file__).resolve().parents[1]


def test_plan_of_the_readme_example_finds_its_own_layout():
    """`moeplan plan examples/deepseek_v3_gb300.yaml` (and `sweep` on it) said "no layout fits" while
    `estimate` of the same file fits at 176 of 276 GiB: the recipe row fills delay_wgrad_compute with
    the EP overlap, the planner dropped only the overlap (a planner knob), and every candidate broke
    moe.ep_overlap_requirements ("delay_wgrad_compute requires overlap_moe_expert_parallel_comm").
    Every key of the example is held, so the published layout itself must be a candidate."""
    base = yaml.safe_load((ROOT / "examples/deepseek_v3_gb300.yaml").read_text())
    res = plan(base, top=3, refine=1)
    assert res.candidates, res.rejected.counts
    labels = {c.parallel.label() for c in res.candidates}
    assert "TP1 PP2 VPP8 CP1 EP32 ETP1" in labels
    # the example states recompute_modules: [] (nothing recomputed): the label must not read core_attn
    assert all(c.recompute.startswith("selective [] (given)") for c in res.candidates), [
        c.recompute for c in res.candidates
    ]
    # a candidate without the EP overlap carries no delay_wgrad_compute (it would break the rule)
    for c in res.candidates:
        assert not c.scenario.layout.delay_wgrad_compute or c.scenario.layout.overlap_moe_expert_parallel_comm


def test_what_plan_says_about_nvidia_layouts_describes_the_final_number_one():
    """The README's plan (DeepSeek-V3, 256 H100, 128K, fp8-blockwise, GBS 32): the baselines' own search
    promotes TP1 PP8 VPP4 CP32 EP32 to #1, but "#1 runs differently" still listed the old #1's sizes
    (tensor_model_parallel_size: 1 → 8, pipeline 8 → 4, CP 32 → 4, EP 32 → 64) against a family that
    states TP1 PP8 CP32 EP32. After the promotion the list must be the diff with the new #1."""
    base = {
        "model": "deepseek-ai/DeepSeek-V3",
        "system": {"gpu": "h100", "num_gpus": 256},
        "training": {"seq_length": 131072, "global_batch_size": 32, "precision": "fp8-blockwise"},
    }
    res = plan(base, top=5)
    win = res.candidates[0]
    fam = res.baseline["family"]
    assert fam["first_differs"] == differs(fam["layout"], win.scenario)
    # a size the family and #1 share is never listed as a difference
    own = {
        "tensor_model_parallel_size": win.parallel.tp,
        "pipeline_model_parallel_size": win.parallel.pp,
        "context_parallel_size": win.parallel.cp,
        "expert_model_parallel_size": win.parallel.ep,
    }
    same = [k for k, v in own.items() if fam["layout"].get(k) == v]
    assert not [x for x in fam["first_differs"] if x.split(":")[0] in same]
    pub = res.baseline.get("published")
    if pub and "first_differs" in pub:
        row = next(r for r in published_runs() if r["id"] == pub["id"])
        assert pub["first_differs"] == differs(row["layout"], win.scenario)


def test_compare_blames_a_change_only_for_the_rules_it_breaks():
    """compare of two logs of Qwen3-235B on GB200 (94 layers on PP 4 in both, B switching to DeepEP):
    "check rejects layout.moe_flex_dispatcher_backend = deepep: pipeline.num_layers_divisible_by_pp"
    blamed the change for a rule run A already breaks. A changed key is rejected only for the rules
    its change adds; what A breaks stays in the note on run A."""
    from moeplan.diagnose.compare import rank_causes
    from moeplan.io.imports import import_config
    from tests.test_compare import make_log
    from tests.test_one_brain import DUMP, GB200

    a = dict(DUMP, moe_token_dispatcher_type="alltoall")
    b = dict(a, moe_token_dispatcher_type="flex", moe_flex_dispatcher_backend="deepep")
    ca = import_config(make_log(1, 0, dump=a), "megatron-log")[0]
    cb = import_config(make_log(2, 0, dump=b), "megatron-log")[0]
    _, causes, notes = rank_causes(ca, cb, GB200, direction=-1)
    by = {c["key"]: c["rejected_by"] for c in causes}
    assert not any("num_layers_divisible_by_pp" in r for rs in by.values() for r in rs), by
    assert [r.split(":")[0] for r in by["layout.moe_token_dispatcher_type"]] == ["moe.flex_dispatcher_backend_vs_gpu"]
    assert by["layout.moe_flex_dispatcher_backend"] == []  # alone, the backend is not used by alltoall
    assert any(n.startswith("run A's configuration breaks 1 rule") for n in notes)


def test_sweep_with_nothing_that_fits_says_so_in_a_sentence(tmp_path):
    """`moeplan sweep` of a request where nothing fits printed the template "scenario: 'no layout fits'
    is not valid; allowed: a request for which some layout fits". Now one sentence with the reason
    (Qwen3-235B-A22B bf16 on 8 H100 at 4K: 235 B parameters' weights alone exceed 8 × 80 GB)."""
    import pytest

    from moeplan.errors import InputError
    from moeplan.plan.sweep import write_sweep

    data = {
        "model": "Qwen/Qwen3-235B-A22B",
        "system": {"gpu": "h100", "num_gpus": 8},
        "training": {"seq_length": 4096, "global_batch_size": 64, "precision": "bf16"},
    }
    with pytest.raises(InputError) as exc:
        write_sweep(data, tmp_path / "sw", top=1)
    msg = str(exc.value)
    assert msg.startswith("scenario: nothing to sweep: no layout fits")
    assert "is not valid" not in msg and "allowed:" not in msg
    assert not (tmp_path / "sw").exists() or not any((tmp_path / "sw").iterdir())


def test_an_unknown_name_without_a_close_match_is_one_sentence():
    """`moeplan export S.yaml --set training.mode=finetune` printed "training.mode: 'mode' is not valid;
    allowed: one of the training keys: ..."; now "'mode' is not one of the training keys (allowed:
    ...)", and "'h999' is not known (known: a100, ...)" for a GPU."""
    import pytest

    from moeplan.errors import InputError
    from moeplan.resolve.load import load_scenario

    with pytest.raises(InputError) as exc:
        load_scenario({"model": "Qwen/Qwen3-30B-A3B", "training": {"mode": "finetune"}})
    msg = str(exc.value)
    assert msg.startswith("training.mode: 'mode' is not one of the training keys (allowed: ")
    assert "task" in msg and "is not valid" not in msg
    with pytest.raises(InputError) as exc:
        load_scenario({"model": "Qwen/Qwen3-30B-A3B", "system": {"gpu": "h999", "num_gpus": 8}})
    assert str(exc.value).startswith("system.gpu: 'h999' is not known (known: a100, ")


def test_a_wrapped_line_never_leaves_a_figure_without_its_unit():
    """At 80 columns `moeplan fit examples/qwen3_30b_64k_oom.yaml --gbs 64` ended a line with
    "(143.2 GiB, +1.8" and began the next with "%)"; `recipes` split "783 / TFLOP/s/GPU". rich breaks
    at any space, so the console breaks lines itself and never between a figure and its unit."""
    import io

    from moeplan.cli.render import break_offsets, console

    # "+1.8 %" would straddle column 20 if wrapped at the space before "%"
    line = "offload 0.5 (143.2 GiB, +1.8 %), offload 0.25 (145.9 GiB, +0.9 %) and 1,066 tok/s/GPU, 783 TFLOP/s/GPU"
    for width in range(20, 81):
        cuts = break_offsets(line, width)
        pieces = [line[a:b] for a, b in zip([0, *cuts], [*cuts, len(line)], strict=True)]
        assert "".join(pieces) == line
        for p in pieces:
            assert len(p.rstrip()) <= width, (width, p)
            assert not p.startswith(("%", "GiB", "tok/s", "TFLOP/s")), (width, pieces)
    c = console()
    c.file = io.StringIO()
    c.width = 30
    c.print("[bold]fit[/]: " + line)
    out = c.file.getvalue().splitlines()
    assert all(len(x) <= 30 for x in out) and not any(x.lstrip().startswith(("%", "GiB", "TFLOP")) for x in out)
    assert " ".join(x.strip() for x in out) == "fit: " + line


def test_a_training_export_guards_against_the_launched_recipes_benchmark_settings():
    """`moeplan plan --model Qwen/Qwen3-30B-A3B --gpu h100 --num-gpus 16 --seq-length 65536 --save
    q30.yaml` then `moeplan export q30.yaml -f slurm`: the script asked for "RECIPE ... e.g. a perf
    recipe name" and wrote neither moe_router_force_load_balancing nor the NaN check, so a perf
    configuration as RECIPE (forced balancing on, NaN check off) trained the MoE with its router
    overridden. A Bridge export now writes their training values unless the scenario states or
    fills them (the benchmark fill keeps its values and its warning comment)."""
    from moeplan.io.export import export
    from moeplan.resolve.load import load_scenario

    data = {
        "model": "Qwen/Qwen3-30B-A3B",
        "system": {"gpu": "h100", "num_gpus": 16},
        "training": {"seq_length": 65536, "global_batch_size": 64, "micro_batch_size": 1},
        "layout": {
            "tensor_model_parallel_size": 4,
            "context_parallel_size": 4,
            "expert_model_parallel_size": 8,
            "sequence_parallel": True,
        },
    }
    for fmt in ("mbridge-overrides", "slurm"):
        text, _ = export(load_scenario(data), fmt)
        assert "model.moe_router_force_load_balancing=false" in text, fmt
        assert "rerun_state_machine.check_for_nan_in_loss=true" in text, fmt
        assert "perf recipe name" not in text
    yaml_text, _ = export(load_scenario(data), "mbridge-yaml")
    assert "moe_router_force_load_balancing: false" in yaml_text
    # a full-iteration graph needs the NaN check off: then it is not forced on
    graphs = {**data, "layout": {**data["layout"], "cuda_graph_impl": "full_iteration"}}
    text, _ = export(load_scenario(graphs), "mbridge-overrides")
    assert "check_for_nan_in_loss=true" not in text
    # the benchmark fill keeps what it reproduces
    bench = yaml.safe_load((ROOT / "examples/deepseek_v3_gb300.yaml").read_text())
    bench["recipe_defaults"] = "mbridge-perf-benchmark"
    text, _ = export(load_scenario(bench), "mbridge-overrides")
    assert "model.moe_router_force_load_balancing=true" in text and "# benchmark-only" in text


def test_oom_fixes_keep_their_figures_at_80_columns_and_mark_numerics(tmp_path):
    """`moeplan oom crash.log --scenario examples/qwen3_30b_64k_oom.yaml` at 80 columns folded "optimizer
    offload / 0.25" and "precision bf16 → / fp8-blockwise" inside the heavy table, and ranked the FP8
    change among the fixes without saying it changes the numerics (as fit does);
    a rejection that is no rule read "input: does not lower the peak"."""
    from typer.testing import CliRunner

    from moeplan.cli.app import app

    msg = (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.50 GiB. GPU 4 has a total capacity "
        "of 79.19 GiB of which 1.12 GiB is free. Of the allocated memory 61.30 GiB is allocated by PyTorch, "
        "and 14.91 GiB is reserved by PyTorch but unallocated."
    )
    args = ["oom", msg, "--scenario", str(ROOT / "examples/qwen3_30b_64k_oom.yaml")]
    r = CliRunner().invoke(app, args, env={"COLUMNS": "80", "TERM": "dumb"})
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert all(len(x) <= 80 for x in lines)
    row = next(x for x in lines if "optimizer offload 0.25" in x)
    assert re.search(r"\d+\.\d\d\s+\d+\.\d\d\s+(yes|no)\s+[+-]\d+\.\d %", row), row
    assert any("[numerics]" in x for x in lines) and any(x.startswith("[numerics]:") for x in lines)
    assert not any("input: does not lower" in x for x in lines)
