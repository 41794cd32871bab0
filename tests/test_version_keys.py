"""Version-true keys. Every key and value with a megatron-core version boundary is
refused by ``check`` below its first version and accepted from it, and ``export`` never writes it for a
version that lacks it; fine-tuning exports write the dataset field Bridge's fine-tuning datasets read."""

from __future__ import annotations

import pytest
from packaging.version import Version

from moeplan import load_scenario
from moeplan.api import export_report
from moeplan.inputs.overrides import ScenarioFlags
from moeplan.io.export import export
from moeplan.rules import validate
from moeplan.rules.moe import BACKEND_MIN_MCORE
from moeplan.rules.world import KEY_MIN_MCORE

BASE = {
    "model": "deepseek-ai/DeepSeek-V3",
    "system": {"gpu": "gb200", "num_gpus": 256},
    "training": {"seq_length": 4096, "micro_batch_size": 1, "global_batch_size": 512, "precision": "mxfp8"},
    "layout": {
        "pipeline_model_parallel_size": 4,
        "expert_model_parallel_size": 64,
        "pipeline_model_parallel_layout": "Et*4|(t*4|)*14tmL",
        "virtual_pipeline_model_parallel_size": 4,
        "moe_token_dispatcher_type": "flex",
        "moe_flex_dispatcher_backend": "hybridep",
    },
}
#: a legal value for each versioned key, and the keys it needs along
KEY_VALUES = {
    "moe_expert_rank_capacity_factor": {
        "moe_expert_rank_capacity_factor": 1.5,
        "use_transformer_engine_op_fuser": True,
    },
    "moe_paged_stash": {
        "moe_paged_stash": True,
        "moe_expert_rank_capacity_factor": 1.5,
        "use_transformer_engine_op_fuser": True,
    },
    "use_transformer_engine_op_fuser": {"use_transformer_engine_op_fuser": True},
    "cuda_graph_modules": {"cuda_graph_impl": "transformer_engine", "cuda_graph_modules": ["attn"]},
    "cp_partition_mode": {"cp_partition_mode": "zigzag"},
}


def _version(v: Version) -> str:
    return str(v)


def _below(v: Version) -> str:
    return f"{v.major}.{v.minor - 1}.0"


def _scenario(layout: dict, version: str):
    return load_scenario({**BASE, "layout": {**BASE["layout"], **layout}, "versions": {"megatron_core": version}})


def test_the_table_covers_every_versioned_key():
    assert set(KEY_VALUES) == set(KEY_MIN_MCORE)
    assert {k: str(v) for k, v in BACKEND_MIN_MCORE.items()} == {"hybridep": "0.15.0", "ncclep": "0.19.0"}


@pytest.mark.parametrize("key", sorted(KEY_MIN_MCORE))
def test_a_versioned_key_is_refused_below_its_version_and_never_exported_there(key):
    first = KEY_MIN_MCORE[key]
    old, new = _scenario(KEY_VALUES[key], _below(first)), _scenario(KEY_VALUES[key], _version(first))
    assert any(key in f.message for f in validate(old).errors), key
    assert not any(key in f.message and "megatron-core" in f.message for f in validate(new).errors), key
    text, _ = export(old, "mbridge-overrides")
    spelled = {"cuda_graph_modules": "cuda_graph_modules="}.get(key, f".{key}=")
    assert spelled not in text, key


@pytest.mark.parametrize("backend", sorted(BACKEND_MIN_MCORE))
def test_a_flex_backend_is_refused_before_its_version(backend):
    first = BACKEND_MIN_MCORE[backend]
    layout = {"moe_flex_dispatcher_backend": backend}
    old = validate(_scenario(layout, _below(first)))
    assert any(f.rule_id == "moe.flex_backend_settings" and backend in f.message for f in old.errors)
    new = validate(_scenario(layout, _version(first)))
    assert not any(f.rule_id == "moe.flex_backend_settings" and backend in f.message for f in new.errors)


@pytest.mark.parametrize("version", ["0.13.0", "0.14.0"])
def test_hybridep_is_not_exported_for_0_13_or_0_14(version):
    flags = ScenarioFlags(sets=(f"versions.megatron_core={version}",))
    import tempfile
    from pathlib import Path

    import yaml

    with tempfile.TemporaryDirectory() as tmp:
        p = Path(tmp) / "s.yaml"
        p.write_text(yaml.safe_dump(BASE))
        res = export_report(p, flags)
    assert res.refused and "moe.flex_backend_settings" in res.broken_rules


#: Qwen3-30B-A3B at 4K on 8 H100, EP 8: the export tests' base scenario
QWEN30_8_H100 = {
    "model": "Qwen/Qwen3-30B-A3B",
    "system": {"gpu": "h100", "num_gpus": 8},
    "training": {"seq_length": 4096, "micro_batch_size": 1, "global_batch_size": 64},
    "layout": {"expert_model_parallel_size": 8},
}


def test_fine_tuning_exports_write_the_fine_tuning_dataset_key():
    base = QWEN30_8_H100
    ft = load_scenario({**base, "training": {**base["training"], "task": "finetune"}})
    pt = load_scenario(base)
    for fmt in ("mbridge-overrides", "mbridge-yaml", "mbridge-python"):
        t_ft, t_pt = export(ft, fmt)[0], export(pt, fmt)[0]
        assert "sequence_length" not in t_ft and "seq_length" in t_ft.split("dataset")[-1], fmt
        # Megatron Bridge 0.6.0 (the newest, not stated): pretraining's GPTDatasetConfig.seq_length too
        assert "sequence_length" not in t_pt and "seq_length" in t_pt.split("dataset")[-1], fmt
    # the round trip reads it back
    from moeplan.io.imports import import_config

    back, _ = import_config(export(ft, "mbridge-overrides")[0], "mbridge-overrides")
    assert back["training"]["seq_length"] == 4096 and back["training"]["task"] == "finetune"


def test_pretraining_exports_spell_the_dataset_sequence_length_for_their_bridge():
    # GPTDatasetConfig.seq_length is a field from Megatron Bridge 0.6.0 (finalize() copies it over
    # sequence_length); up to 0.5.1 it is a property and sequence_length the field an override sets
    base = QWEN30_8_H100
    from moeplan.io.imports import import_config

    for versions, field in (
        ({"megatron_bridge": "0.6.0"}, "dataset.seq_length=4096"),
        ({"megatron_bridge": "0.5.1"}, "dataset.sequence_length=4096"),
        ({"container": "26.06"}, "dataset.sequence_length=4096"),  # nemo:26.06 ships Megatron Bridge 0.5.0
    ):
        text = export(load_scenario({**base, "versions": versions}), "mbridge-overrides")[0]
        assert field in text.splitlines(), (versions, field)
        back, _ = import_config(text, "mbridge-overrides")
        assert back["training"]["seq_length"] == 4096


def test_a_vlm_dataset_takes_seq_length_in_every_bridge_release():
    # Bridge's VLM dataset providers (v0.5.1 data/vlm_datasets/mock_provider.py) have seq_length only
    data = {
        "model": "Qwen/Qwen3-VL-30B-A3B-Instruct",
        "system": {"gpu": "h100", "num_gpus": 8},
        "training": {"seq_length": 4096, "micro_batch_size": 1, "global_batch_size": 64},
        "layout": {"expert_model_parallel_size": 8},
        "versions": {"megatron_bridge": "0.5.1"},
    }
    text = export(load_scenario(data), "mbridge-overrides")[0]
    assert "dataset.seq_length=4096" in text.splitlines() and "sequence_length" not in text
