"""Real Hugging Face ``config.json`` files: each is modelled or refused with the field named, and no
config, nor any hypothesis mutation of one (keys dropped, nulls, wrong types, huge numbers), ends
``moeplan check`` / ``moeplan params`` in exit 3 (an internal error).

The configs: the packaged catalog and ``tests/data/hf_configs`` (sources in its README).
"""

from __future__ import annotations

import json
import os
import pathlib
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from moeplan.catalog.models import load_config_file
from moeplan.cli.app import app
from moeplan.errors import InputError
from moeplan.inputs.model_spec import model_from_hf_config

ROOT = pathlib.Path(__file__).resolve().parents[1]
HF = ROOT / "tests" / "data" / "hf_configs"
CATALOG = ROOT / "src" / "moeplan" / "catalog" / "data" / "models"
CONFIGS = sorted(HF.glob("*.json")) + sorted(CATALOG.glob("*.json"))
runner = CliRunner()

#: what moeplan makes of each vendored config: "model" (built), or the config field its refusal names
EXPECTED = {
    "MiniMaxAI--MiniMax-M2.5": "model",
    "MiniMaxAI--MiniMax-M3": "model",
    "Qwen--Qwen3-0.6B": "model",
    "Qwen--Qwen3-32B": "model",
    "Qwen--Qwen3-Coder-480B-A35B-Instruct": "model",
    "Qwen--Qwen3-VL-2B-Instruct": "model",
    "Qwen--Qwen3.5-27B": "model",
    "XiaomiMiMo--MiMo-7B-Base": "model",
    "XiaomiMiMo--MiMo-V2-Flash": "hybrid_layer_pattern",
    "ai21labs--AI21-Jamba-1.5-Mini": "mamba_d_state",
    "baidu--ERNIE-4.5-21B-A3B": "moe_num_experts",
    "deepseek-ai--DeepSeek-V3.2": "model",
    "deepseek-ai--DeepSeek-V4-Flash": "model",
    "deepseek-ai--DeepSeek-V4-Pro": "model",
    "google--gemma-4-26B-A4B": "model",
    "meta-llama--Meta-Llama-3.1-70B": "model",
    "moonshotai--Kimi-K2.5": "model",
    "moonshotai--Kimi-K3": "model",
    "nvidia--Gemma-4-31B-IT-NVFP4": "enable_moe_block",
    "nvidia--Llama-3_3-Nemotron-Super-49B-v1": "block_configs",
    "nvidia--NVIDIA-Nemotron-3-Nano-30B-A3B-BF16": "model",
    "nvidia--NVIDIA-Nemotron-3-Super-120B-A12B-FP8": "model",
    "nvidia--NVIDIA-Nemotron-3-Ultra-550B-A55B-BF16": "model",
    "nvidia--NVIDIA-Nemotron-3.5-Lightning-30B-A3B-NVFP4": "model",
    "nvidia--Nemotron-H-56B-Base-8K": "model",
    "nvidia--Qwen3.6-35B-A3B-NVFP4": "model",
    "stepfun-ai--Step-3.7-Flash": "moe_router_scaling_factor",
    "tencent--Hunyuan-A13B": "use_mixed_mlp_moe",
    "toy--GraniteMoeHybrid": "mamba_n_heads",
    "toy--OlmoHybrid": "linear_allow_neg_eigval",
    "zai-org--GLM-5": "model",
    "zai-org--GLM-5.1": "model",
    "zai-org--GLM-5.2": "model",
}


def exit_code(args: list[str]) -> tuple[int, str]:
    """The exit code ``moeplan`` (``cli.app.main``) gives: an exception that escapes the command is
    exit 3 there."""
    r = runner.invoke(app, args)
    if r.exception is not None and not isinstance(r.exception, SystemExit):
        return 3, f"{type(r.exception).__name__}: {r.exception}"
    return r.exit_code, r.output


def test_every_vendored_config_has_an_expectation():
    assert {p.stem for p in HF.glob("*.json")} == set(EXPECTED)


@pytest.mark.parametrize("path", sorted(HF.glob("*.json")), ids=lambda p: p.stem)
def test_vendored_config_is_modelled_or_refused_by_name(path):
    cfg = load_config_file(path)
    want = EXPECTED[path.stem]
    if want == "model":
        model_from_hf_config(cfg, path.stem)
        return
    with pytest.raises(InputError) as err:
        model_from_hf_config(cfg, path.stem)
    assert err.value.field == f"config.json:{want}"
    assert "not modelled" in str(err.value) or "cannot tell" in str(err.value)


@pytest.mark.parametrize("command", ["check", "params"])
@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_real_config_never_exit_3(path, command):
    code, out = exit_code([command, "--model", str(path)])
    assert code in (0, 1, 2), out
    want = EXPECTED.get(path.stem, "model")
    if want != "model":
        assert code == 2 and want in out


# ----- hypothesis mutations -----------------------------------------------------------------

#: values a mutated field takes: nulls, wrong types, zero, negative and huge numbers
BAD_VALUES = st.sampled_from(
    [None, "", "abc", "64", True, False, 0, -1, 1, 3, 2.5, float("inf"), 10**18, 2**31, 2**31 - 1, [], [1, 2], {}]
)


def _mutate(cfg: dict, ops: list[tuple[str, int, object]]) -> dict:
    """Apply (op, key index, value) mutations to the language model's part of ``cfg`` (or the top)."""
    out = json.loads(json.dumps(cfg))
    for op, idx, value in ops:
        part = out["text_config"] if isinstance(out.get("text_config"), dict) and idx % 3 else out
        keys = sorted(part)
        if not keys:
            continue
        key = keys[idx % len(keys)]
        if op == "drop":
            part.pop(key)
        elif op == "set":
            part[key] = value
        elif op == "scale" and isinstance(part[key], int) and not isinstance(part[key], bool):
            part[key] = part[key] * 10**9
    return out


MUTATIONS = st.lists(
    st.tuples(st.sampled_from(["drop", "set", "scale"]), st.integers(0, 200), BAD_VALUES), min_size=1, max_size=4
)


def _fuzz(path_idx: int, ops: list) -> None:
    path = CONFIGS[path_idx % len(CONFIGS)]
    cfg = _mutate(json.loads(path.read_text()), ops)
    with tempfile.TemporaryDirectory() as tmp:
        f = pathlib.Path(tmp) / "config.json"
        f.write_text(json.dumps(cfg))
        for command in ("check", "params"):
            code, out = exit_code([command, "--model", str(f)])
            assert code in (0, 1, 2), f"{path.stem} {ops}: {out}"


@settings(max_examples=120, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 10_000), MUTATIONS)
def test_mutated_configs_never_exit_3(path_idx, ops):
    _fuzz(path_idx, ops)


@pytest.mark.slow
@pytest.mark.skipif(
    os.environ.get("MOEPLAN_FUZZ") != "long",
    reason="the long config fuzz (2,000 mutations, ~2 min) runs with MOEPLAN_FUZZ=long; CI runs the bounded one",
)
@settings(max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 10_000), MUTATIONS)
def test_mutated_configs_never_exit_3_long(path_idx, ops):
    _fuzz(path_idx, ops)


def _qwen3_moe_config(**changes) -> dict:
    from tests.conftest import ROOT

    cfg = json.loads((ROOT / "src/moeplan/catalog/data/models/Qwen__Qwen3-30B-A3B.json").read_text())
    return {**{k: v for k, v in cfg.items() if not k.startswith("_")}, **changes}


@pytest.mark.parametrize("key", ["head_dim", "num_key_value_heads", "num_experts_per_tok", "moe_intermediate_size"])
def test_a_size_of_zero_is_an_error_naming_the_field(key):
    with pytest.raises(InputError) as got:
        model_from_hf_config(_qwen3_moe_config(**{key: 0}), "zero")
    assert got.value.field == f"config.json:{key}" and got.value.value == 0 and "positive" in str(got.value)


def test_an_unknown_family_is_read_from_the_shared_fields_and_said():
    from moeplan.model.model_notes import param_notes

    m = model_from_hf_config(_qwen3_moe_config(model_type="totally_new_moe"), "new")
    assert [n for n in param_notes(m) if "'totally_new_moe' is not a family moeplan maps" in n]
    known = model_from_hf_config(_qwen3_moe_config(), "qwen")
    assert not [n for n in param_notes(known) if "not a family" in n]
    # a wrapper whose language model is a mapped family (Kimi-K2.5: kimi_k25 around deepseek_v3) is mapped
    from moeplan import get_model, list_models

    assert get_model("moonshotai/Kimi-K2.5").unmapped_model_type is None
    assert [m for m in list_models() if get_model(m).unmapped_model_type] == []
