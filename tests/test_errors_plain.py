"""Errors read as plain sentences where the ``'X' is not valid; allowed: ...``
template reads badly — a missing file, a missing optional package, a text that is not an OOM message —
and an abbreviated key (``tp:``) gets the key it stands for."""

from __future__ import annotations

import sys

import pytest
from typer.testing import CliRunner

from moeplan.cli.app import app
from moeplan.errors import InputError, UnknownNameError

runner = CliRunner()


def _err(args) -> str:
    r = runner.invoke(app, args)
    assert r.exit_code == 2, r.output
    return r.output.strip()


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["estimate", "nothere.yaml"], "error: scenario: no such YAML file: nothere.yaml"),
        (["check", "--from", "megatron-log", "nothere.log"], "error: scenario: no such megatron-log file: nothere.log"),
        (["log", "nothere.log"], "error: log: no such file: nothere.log"),
        (
            ["oom", "hello world"],
            "error: oom: no CUDA out-of-memory message in 'hello world' (one reads 'CUDA out of memory. Tried to "
            "allocate ...')",
        ),
    ],
)
def test_plain_sentences(args, line):
    out = _err(args)
    assert out == line
    assert "is not valid; allowed" not in out


def test_a_missing_optional_package_says_what_to_install(monkeypatch):
    from moeplan.model import constants_fit as calibrate

    monkeypatch.setitem(sys.modules, "scipy", None)
    monkeypatch.setitem(sys.modules, "scipy.optimize", None)
    with pytest.raises(InputError) as exc:
        calibrate._require_numerics()
    assert (
        str(exc.value) == "calibrate: needs numpy and scipy, which are not installed: pip install 'moeplan[calibrate]'"
    )


def test_an_abbreviated_key_gets_its_megatron_name(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text("model: qwen3-30b-a3b\nlayout: {tp: 2}\n")
    out = _err(["check", str(p)])
    assert out == "error: layout.tp: 'tp' is not one of the layout keys; did you mean 'tensor_model_parallel_size'?"
    assert "mbs" in _err(["check", "--set", "training.mbs=2"]) and "'micro_batch_size'" in _err(
        ["check", "--set", "training.mbs=2"]
    )


def test_a_renamed_error_keeps_its_sentence():
    e = UnknownNameError("layout.tp", "tp", ["tensor_model_parallel_size"], "one of the layout keys:").renamed("x.tp")
    assert str(e) == "x.tp: 'tp' is not one of the layout keys; did you mean 'tensor_model_parallel_size'?"


def test_a_name_with_a_lookalike_letter_says_which_character_differs():
    # a Cyrillic "е" (U+0435) where "tensor_model_parallel_size" has a Latin "e"
    err = UnknownNameError("layout", "tensor_model_parallel_siz\u0435", ["tensor_model_parallel_size"])
    assert err.suggestions == ["tensor_model_parallel_size"]
    assert "U+0435 CYRILLIC SMALL LETTER IE at position 26" in str(err)
    plain = UnknownNameError("layout", "tensor_model_paralel_size", ["tensor_model_parallel_size"])
    assert "U+" not in str(plain)
