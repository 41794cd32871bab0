"""The attention kernel measurement script (benchmarks/device/attention_kernels.py) without a GPU: its
``--cpu-dry-run`` builds the shape list, the FLOP counts and the document a device run writes, with
torch made unimportable to show the dry run needs neither torch nor CUDA. FLOPs follow
``moeplan.model.executed_flops``: forward 2 · s_q · s_kv · heads · (d_qk + d_v), halved for a causal
square, backward 2.5 × the forward."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "device" / "attention_kernels.py"
BACKENDS = ("te-fused", "te-flash", "sdpa-cudnn", "sdpa-flash")


@pytest.fixture
def script(monkeypatch):
    """The script as a module, with ``torch`` unimportable for the test's duration."""
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` now raises ImportError
    spec = importlib.util.spec_from_file_location("device_attention_kernels", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "device_attention_kernels", mod)
    spec.loader.exec_module(mod)
    return mod


def _dry_run(script, tmp_path: Path) -> dict:
    assert script.main(["--cpu-dry-run", "--out", str(tmp_path)]) == 0
    return json.loads((tmp_path / "attention_kernels.json").read_text())


def test_dry_run_lists_every_shape_and_backend_without_torch(script, tmp_path):
    doc = _dry_run(script, tmp_path)
    assert doc["schema"] == "moeplan.attention_kernels/1" and doc["mode"] == "dry-run"
    # 3 head-dim pairs × 4 head counts × (7 causal lengths + 2 CP ring steps) = 108 shapes
    assert len(doc["shapes"]) == 3 * 4 * (7 + 2) == 108
    assert len({s["id"] for s in doc["shapes"]}) == 108
    assert {(s["d_qk"], s["d_v"]) for s in doc["shapes"]} == {(128, 128), (192, 128), (256, 256)}
    assert {s["sq"] for s in doc["shapes"] if s["causal"]} == {512, 1024, 2048, 4096, 8192, 16384, 32768}
    assert {(s["sq"], s["skv"]) for s in doc["shapes"] if not s["causal"]} == {(4096, 2048), (2048, 4096)}
    assert set(doc["backends"]) == set(BACKENDS)
    assert len(doc["results"]) == 4 * 108 * 3
    assert {r["status"] for r in doc["results"]} == {"not-run"}
    assert doc["budget_s"] == 420.0  # the default bound of a device run


def test_dry_run_counts_causal_and_ring_step_flops_as_the_step_time_model(script, tmp_path):
    doc = _dry_run(script, tmp_path)
    shapes = {s["id"]: s for s in doc["shapes"]}
    # Llama-2-7B-like: head dim 128, 32 heads, 4096 causal tokens:
    # 2 · 4096 · 4096 · 32 · (128 + 128) / 2 = 2^37 = 137,438,953,472; backward × 2.5 = 343,597,383,680
    causal = shapes["d128x128_h32_q4096_kv4096_causal"]
    assert causal["forward_flops"] == 137_438_953_472
    assert causal["backward_flops"] == 343_597_383_680
    # DeepSeek-V3 MLA, 128 heads, the ring's lower-triangle step (4096 queries over 2048 keys, no mask):
    # 2 · 4096 · 2048 · 128 · (192 + 128) = 2^31 · 320 = 687,194,767,360; backward × 2.5 = 1,717,986,918,400
    ring = shapes["d192x128_h128_q4096_kv2048_ring-lower"]
    assert ring["forward_flops"] == 687_194_767_360
    assert ring["backward_flops"] == 1_717_986_918_400
    rows = {(r["backend"], r["shape"], r["pass"]): r for r in doc["results"]}
    # forward + backward executes 3.5 × the forward: 137,438,953,472 · 3.5 = 481,036,337,152
    assert rows[("te-fused", causal["id"], "fwd_bwd")]["executed_flops"] == 481_036_337_152
    assert rows[("sdpa-cudnn", ring["id"], "bwd")]["executed_flops"] == 1_717_986_918_400


def test_bad_backend_name_is_refused_with_the_allowed_names(script, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        script.main(["--cpu-dry-run", "--out", str(tmp_path), "--backends", "te-fused,cudnn9"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "--backends 'te-fused,cudnn9': unknown ['cudnn9']" in err
    assert "te-fused, te-flash, sdpa-cudnn, sdpa-flash" in err


def test_dry_run_flops_equal_the_step_time_models_attention_core(script, tmp_path):
    """The script counts as ``layer_flops`` does: one layer of Llama-2-7B (32 heads of 128) and of
    DeepSeek-V3 (128 MLA heads, 192 / 128) over 4096 causal tokens on one rank."""
    from moeplan import get_model
    from moeplan.model.executed_flops import layer_flops

    shapes = {s["id"]: s for s in _dry_run(script, tmp_path)["shapes"]}
    llama = get_model(str(ROOT / "benchmarks" / "data" / "llama2_7b_config.json"))
    dsv3 = get_model("deepseek-ai/DeepSeek-V3")
    for model, shape in ((llama, "d128x128_h32_q4096_kv4096_causal"), (dsv3, "d192x128_h128_q4096_kv4096_causal")):
        core = layer_flops(model, 0, 4096, 4096, 4096, 1, 1, 1, 1.0).attention_core
        assert shapes[shape]["forward_flops"] == core
