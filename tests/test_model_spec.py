"""Complete and partial model specs: only the rules take a partial model; counting, memory and step
time need a complete one and name what is missing."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from moeplan import estimate_memory, load_scenario, validate
from moeplan.cli.app import app
from moeplan.errors import InputError
from moeplan.inputs.model_spec import ModelSpec, PartialModelSpec, partial_model

GPT = {"num_layers": 4, "hidden_size": 1024, "num_attention_heads": 16, "vocab_size": 32000, "ffn_hidden_size": 4096}


def test_partial_model_completes_with_megatron_defaults():
    m = partial_model(GPT)
    assert isinstance(m, ModelSpec)
    # MHA by default; head dim hidden / heads = 64; every layer dense and full attention
    assert (m.num_query_groups, m.kv_channels) == (16, 64)
    assert m.moe_layers == (False,) * 4 and m.attention_kinds == ("full",) * 4


def test_incomplete_model_is_partial_and_names_what_is_missing():
    m = partial_model({"num_layers": 4, "hidden_size": 1024})
    assert isinstance(m, PartialModelSpec) and not isinstance(m, ModelSpec)
    assert m.missing_fields() == ["num_attention_heads", "vocab_size", "ffn_hidden_size"]
    with pytest.raises(InputError) as exc:
        m.completed()
    assert "model_overrides.vocab_size" in str(exc.value)
    moe = partial_model({**GPT, "num_moe_experts": 8})
    assert moe.missing_fields() == ["moe_router_topk", "moe_ffn_hidden_size"]


def test_rules_take_a_partial_model_estimates_refuse_it():
    data = {
        "model_overrides": {"num_layers": 6},
        "system": {"gpu": "h100", "num_gpus": 8},
        "training": {"seq_length": 4096},
    }
    s = load_scenario(data)
    validate(s)  # the rules run (skipping what needs the missing fields)
    with pytest.raises(InputError) as exc:
        estimate_memory(s)
    assert "hidden_size" in str(exc.value)


def test_cli_estimate_of_partial_model_exit_2(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text(
        json.dumps(
            {
                "model_overrides": {"num_layers": 6},
                "system": {"gpu": "h100", "num_gpus": 8},
                "training": {"seq_length": 4096},
            }
        )
    )
    r = CliRunner().invoke(app, ["estimate", str(p)])
    assert r.exit_code == 2 and "model_overrides.hidden_size" in r.output and "Traceback" not in r.output


def test_complete_model_stays_complete_under_overrides():
    m = partial_model(GPT)
    with pytest.raises(InputError):
        m.with_overrides({"moe_layers": [False] * 3})  # one entry per layer
    assert isinstance(m.with_overrides({"num_layers": 8}), ModelSpec)
