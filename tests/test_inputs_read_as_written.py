"""Inputs are read as they say: a null is an unset key, PYTORCH_CUDA_ALLOC_CONF is read as PyTorch
reads it, a VLM is never costed with images nobody stated without saying so, and a recipe fill
never makes a scenario invalid."""

from __future__ import annotations

import pytest
import yaml
from typer.testing import CliRunner

from moeplan import estimate_memory, load_scenario
from moeplan.api import estimate_report
from moeplan.cli.app import app
from moeplan.errors import InputError
from moeplan.inputs.allocator import alloc_options, expandable_segments
from moeplan.io.imports import import_config
from moeplan.resolve.assumptions import verdict_assumptions
from moeplan.rules import validate

runner = CliRunner()

QWEN = "Qwen/Qwen3-30B-A3B"
VL30 = "Qwen/Qwen3-VL-30B-A3B-Instruct"


def _moe(layout: dict | None = None, **extra) -> dict:
    d = {
        "model": QWEN,
        "system": {"gpu": "h100", "num_gpus": 64},
        "training": {"seq_length": 4096, "global_batch_size": 512},
        "layout": {"tensor_model_parallel_size": 2, "expert_model_parallel_size": 8, **(layout or {})},
        "framework": "megatron-core",
    }
    d.update(extra)
    return d


def _ids(s) -> set[str]:
    return {f.rule_id for f in validate(s).findings}


# --- null reads as not stated ---------------------------------------------------------------


def test_null_etp_reads_as_unset_and_warns_like_a_missing_key():
    missing = load_scenario(_moe())
    null = load_scenario(_moe({"expert_tensor_parallel_size": None}))
    assert "expert_tensor_parallel_size" not in null.stated
    # megatron-core sets an unstated ETP to TP = 2: the silent expert split is a warning
    assert null.etp == missing.etp == 2
    assert "moe.etp_unset_follows_tp" in _ids(null)
    assert [r.key for r in null.resolutions] == [r.key for r in missing.resolutions]


def test_null_in_every_section_reads_as_unset():
    s = load_scenario(
        _moe(
            {"virtual_pipeline_model_parallel_size": None, "recompute_granularity": None},
            environment={"NCCL_GRAPH_REGISTER": None},
            versions={"megatron_core": None},
        )
        | {"training": {"seq_length": 4096, "global_batch_size": None, "precision": None}}
    )
    assert not {"virtual_pipeline_model_parallel_size", "recompute_granularity"} & s.stated
    assert s.training.global_batch_size is None and s.training.precision == "bf16"
    assert "NCCL_GRAPH_REGISTER" not in s.environment  # not the string 'None'


def test_set_null_unsets_a_key_of_the_file(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text(
        "model: Qwen/Qwen3-30B-A3B\nframework: megatron-core\nsystem: {gpu: h100, num_gpus: 64}\n"
        "training: {seq_length: 4096, global_batch_size: 512}\n"
        "layout: {tensor_model_parallel_size: 2, expert_model_parallel_size: 8, expert_tensor_parallel_size: 1}\n"
    )
    r = runner.invoke(app, ["check", str(f), "--set", "layout.expert_tensor_parallel_size=null"])
    assert "moe.etp_unset_follows_tp" in r.output, r.output
    assert "Traceback" not in r.output


def test_imported_bridge_dump_reads_null_as_unset():
    dump = (
        "model:\n  tensor_model_parallel_size: 2\n  expert_model_parallel_size: 8\n"
        "  expert_tensor_parallel_size: null\n  virtual_pipeline_model_parallel_size: null\n"
        "  context_parallel_size: null\n"
    )
    data, notes = import_config(dump, "mbridge-yaml")
    assert "expert_tensor_parallel_size" not in data["layout"]
    assert "context_parallel_size" not in data["layout"]  # no longer an error, no 'dropped' note
    assert not any("dropped" in n for n in notes)
    s = load_scenario(
        {
            **data,
            "model": QWEN,
            "framework": "megatron-core",
            "system": {"gpu": "h100", "num_gpus": 64},
            "training": {"seq_length": 4096, "global_batch_size": 512},
        }
    )
    assert "moe.etp_unset_follows_tp" in _ids(s)


# --- PYTORCH_CUDA_ALLOC_CONF as PyTorch reads it ----------------------------------------------


@pytest.mark.parametrize(
    "text, want",
    [
        ("expandable_segments:True", True),
        ("expandable_segments: True", True),  # PyTorch's lexer drops every space
        (" expandable_segments : True , max_split_size_mb : 512 ", True),
        ("max_split_size_mb:512,expandable_segments:True", True),
        ("roundup_power2_divisions:[256:1,512:2,>:4],expandable_segments:True", True),
        ("expandable_segments:False", False),
        ("max_split_size_mb:512", False),
        ("", False),
    ],
)
def test_allocator_conf_is_read_as_pytorch_reads_it(text, want):
    assert expandable_segments({"PYTORCH_CUDA_ALLOC_CONF": text}) is want


@pytest.mark.parametrize(
    "text, allowed",
    [
        ("expandable_segments:true", "expandable_segments:True or expandable_segments:False"),
        ("expandable_segments:1", "expandable_segments:True or expandable_segments:False"),
        ("garbage", "comma-separated key:value options"),
        ("expandable_segments:", "comma-separated key:value options"),
        ("expandable_segments:True,expandable_segments:False", "each option once"),
    ],
)
def test_allocator_conf_pytorch_refuses_is_an_input_error(text, allowed):
    with pytest.raises(InputError) as exc:
        alloc_options(text)
    assert exc.value.field == "environment.PYTORCH_CUDA_ALLOC_CONF" and allowed in exc.value.allowed


def test_expandable_segments_with_a_space_lowers_fragmentation_and_fires_the_graph_rule():
    graphs = {"cuda_graph_impl": "transformer_engine", "cuda_graph_scope": ["attn"]}

    def scn(conf: str | None):
        env = {} if conf is None else {"environment": {"PYTORCH_CUDA_ALLOC_CONF": conf}}
        return load_scenario(_moe(graphs, **env))

    off, tight, spaced = scn(None), scn("expandable_segments:True"), scn("expandable_segments: True")
    # the caching allocator's fragmentation share: 10 % of the dynamic memory, half with expandable segments
    assert estimate_memory(off).overheads.fragmentation_fraction == pytest.approx(0.10)
    assert estimate_memory(tight).overheads.fragmentation_fraction == pytest.approx(0.05)
    assert estimate_memory(spaced).overheads.fragmentation_fraction == pytest.approx(0.05)
    assert "graphs.expandable_segments" in _ids(spaced) and "graphs.expandable_segments" in _ids(tight)
    assert "graphs.expandable_segments" not in _ids(off)


def test_allocator_conf_pytorch_refuses_exits_2_naming_the_field(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text(
        "model: Qwen/Qwen3-30B-A3B\nsystem: {gpu: h100, num_gpus: 64}\ntraining: {seq_length: 4096}\n"
        "layout: {expert_model_parallel_size: 8}\nenvironment: {PYTORCH_CUDA_ALLOC_CONF: 'expandable_segments:true'}\n"
    )
    r = runner.invoke(app, ["check", str(f)])
    assert r.exit_code == 2 and "environment.PYTORCH_CUDA_ALLOC_CONF" in r.output
    assert "Traceback" not in r.output


# --- a VLM without a workload -----------------------------------------------------------------


def _vlm(workload: dict | None = None) -> dict:
    d = {
        "model": VL30,
        "system": {"gpu": "h100", "num_gpus": 16},
        "training": {"seq_length": 8192, "micro_batch_size": 1, "global_batch_size": 64},
        "layout": {"expert_model_parallel_size": 8, "pipeline_model_parallel_size": 2},
    }
    if workload is not None:
        d["workload"] = workload
    return d


def test_vlm_without_workload_states_its_image_share_in_the_header():
    doc = estimate_report(_vlm()).document
    wl = [a for a in doc["assumes"] if a["what"] == "workload"]
    assert wl == [
        {
            "what": "workload",
            "text": "no workload stated: half of each sequence costed as image tokens",
            "source": "default",
            "hint": "workload: from moeplan vlm-stats -o for your data, or workload: {text_only: true} for a run "
            "without images",
        }
    ]
    # the same sentence in the text header
    r = runner.invoke(
        app,
        ["estimate", "--model", VL30, "--gpu", "h100", "-n", "16", "-s", "8192", "--gbs", "64", "--ep", "8"],
        env={"COLUMNS": "300"},
    )
    header = r.output.splitlines()[1]
    assert (
        header.startswith("assumes:") and "no workload stated: half of each sequence costed as image tokens" in header
    )


def test_vlm_text_only_workload_costs_no_vision_activations():
    planned, text = load_scenario(_vlm()), load_scenario(_vlm({"text_only": True}))
    st_p, st_t = estimate_memory(planned).stages[0], estimate_memory(text).stages[0]
    v = planned.model.vision
    # half of 8,192 tokens are image tokens, each 2×2 merged patches: 16,384 patches per sequence, and
    # 2·(9h + 2f) bytes saved per patch and ViT layer, per in-flight microbatch (PP 2, stage 0: 2)
    per_mb = 2 * (9 * v.hidden_size + 2 * v.intermediate_size) * v.depth * 0.5 * 8192 * v.spatial_merge_size**2
    assert st_p.items["activations"]["vision_tower"] == pytest.approx(per_mb * st_p.inflight_microbatches)
    assert st_t.items["activations"].get("vision_tower", 0) == 0
    assert [a.text for a in verdict_assumptions(text) if a.what == "workload"] == ["text-only workload: no images"]


def test_vlm_text_only_with_images_is_an_input_error():
    with pytest.raises(InputError) as exc:
        load_scenario(_vlm({"text_only": True, "image_tokens_per_sequence": 1024}))
    assert exc.value.field.startswith("workload")


# --- recipe fills never make a scenario invalid ----------------------------------------------


def _kimi(**layout) -> dict:
    return {
        "model": "moonshotai/Kimi-K2-Instruct",
        "system": {"gpu": "h100", "num_gpus": 512},
        "training": {"seq_length": 4096, "global_batch_size": 1024},
        "layout": {
            "tensor_model_parallel_size": 1,
            "pipeline_model_parallel_size": 8,
            "virtual_pipeline_model_parallel_size": 2,
            "expert_model_parallel_size": 64,
            **layout,
        },
        "recipe_defaults": "mbridge-perf",
    }


def test_recipe_pipeline_layout_with_an_mtp_stage_is_left_out_for_a_model_without_mtp():
    # DeepSeek-V3's layout map for PP·VPP = 16 ends in 'tmL' (one MTP layer); Kimi-K2 builds none
    s = load_scenario(_kimi())
    assert s.layout.pipeline_model_parallel_layout is None
    assert "pipeline.layout_valid" not in _ids(s)
    assert s.recipe.left_out == (
        "pipeline_model_parallel_layout=Et*4|(t*4|)*14tmL (it holds 1 MTP layer ('m'), the model builds 0)",
    )
    recipe = next(a for a in verdict_assumptions(s) if a.what == "recipe")
    assert "not filled, it would break a rule for this model: pipeline_model_parallel_layout" in recipe.text
    r = runner.invoke(
        app,
        [
            "check",
            "--model",
            "moonshotai/Kimi-K2-Instruct",
            "--gpu",
            "h100",
            "-n",
            "512",
            "-s",
            "4096",
            "--gbs",
            "1024",
            "--pp",
            "8",
            "--vpp",
            "2",
            "--ep",
            "64",
            "--set",
            "recipe_defaults=mbridge-perf",
        ],
        env={"COLUMNS": "300"},
    )
    assert "recipe fills left out (they would break a rule for this model): pipeline_model_parallel_layout" in r.output
    assert "pipeline.layout_valid" not in r.output


def test_recipe_pipeline_layout_still_fills_a_model_with_its_mtp_layer():
    d = _kimi() | {"model": "deepseek-ai/DeepSeek-V3"}
    s = load_scenario(d)
    assert s.layout.pipeline_model_parallel_layout == "Et*4|(t*4|)*14tmL" and s.recipe.left_out == ()
    assert "pipeline.layout_valid" not in _ids(s)
    # the same model with its MTP layer turned off: the map's 'm' would break the rule, so it is left out
    off = load_scenario(_kimi(mtp_num_layers=0) | {"model": "deepseek-ai/DeepSeek-V3"})
    assert off.layout.pipeline_model_parallel_layout is None and len(off.recipe.left_out) == 1
    assert "pipeline.layout_valid" not in _ids(off)


def test_an_exported_config_carries_the_environment_the_estimate_assumes(tmp_path):
    """A Bridge overrides file cannot hold ``PYTORCH_CUDA_ALLOC_CONF``; the export dropped it, so
    ``check --from`` of the export estimated more fragmentation than ``check`` of the scenario. The
    export names it in a comment and its ``# moeplan:`` header carries it back."""
    from moeplan.api import export_report

    sc = {
        "model": "Qwen/Qwen3-30B-A3B",
        "system": {"gpu": "h100", "num_gpus": 16},
        "training": {"seq_length": 8192, "global_batch_size": 64, "micro_batch_size": 1},
        "layout": {"tensor_model_parallel_size": 2, "expert_model_parallel_size": 8},
        "environment": {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"},
    }
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(sc))
    text = export_report(path, fmt="mbridge-overrides").text
    assert "# environment the estimate assumes" in text and "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" in text
    back, _ = import_config(text, "mbridge-overrides")
    assert back["environment"] == sc["environment"]
    assert estimate_memory(load_scenario(back)).peak_bytes == estimate_memory(load_scenario(sc)).peak_bytes


@pytest.mark.parametrize("value", [[8], {"a": 1}])
def test_an_environment_value_is_one_value(value):
    """A variable holds one text: a list or mapping is refused by name (a number or boolean is kept as its text)."""
    data = {"model": "Qwen/Qwen3-30B-A3B", "system": {"gpu": "h100", "num_gpus": 8}, "training": {"seq_length": 4096}}
    with pytest.raises(InputError) as exc:
        load_scenario({**data, "environment": {"USE_MNNVL": value}})
    assert exc.value.field == "environment.USE_MNNVL" and "one value" in exc.value.allowed
    assert load_scenario({**data, "environment": {"USE_MNNVL": False}}).environment["USE_MNNVL"] == "False"
