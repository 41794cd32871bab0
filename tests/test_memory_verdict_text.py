"""Memory verdicts near capacity and the reason of a does-not-fit, where the number is printed.

- ``tight`` (the peak plus the memory model's error band reaches the usable HBM) exits 1 and says
  "may not fit: the peak X GiB ±band reaches the usable Y GiB"; ``fits`` with a clear margin exits 0;
- ``check`` gives the memory verdict when it has model, system and layout, and its verdict does not
  read "valid" / "warn" alone for a layout that does not fit;
- ``check``'s header states the megatron-core version the layout rules compared and, beside it, the
  one a container ships;
- every does-not-fit number carries the parts that push the peak over
  (:func:`moeplan.model.memory.dominant_items`): ``estimate``, ``check``, ``recipes``, plan's
  guidance family line, the export warning.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from moeplan.api.estimate import export_report
from moeplan.cli import render
from moeplan.cli.app import app
from moeplan.cli.render import plan_view as plan_tables
from moeplan.inputs.versions import ResolvedVersions, parse_version, rules_version_basis
from moeplan.model.memory import MemoryEstimate, StageMemory, dominant_items, estimate_memory
from moeplan.model.overheads import resolve_overheads
from moeplan.plan.starting_points import list_recipes, skill_recipes
from moeplan.resolve.load import load_scenario
from moeplan.units import GIB_BYTES

runner = CliRunner()
OOM = "examples/qwen3_30b_64k_oom.yaml"
#: the OOM example at CP 4 on 64 GPUs and 48K tokens: 73.67 GiB of 79.65 usable (7.5 % headroom),
#: 73.67 × 1.11 = 81.8 GiB with the ±11 % band, over the 79.65 GiB
TIGHT = ["estimate", OOM, "--cp", "4", "--num-gpus", "64", "--seq-length", "49152"]
QWEN_128K_BF16 = "lc-family-qwen3-235b-gb200-128k-bf16"


def _invoke(args):
    return runner.invoke(app, args, env={"COLUMNS": "200", "LC_ALL": None, "LC_MESSAGES": None, "LANG": None})


def _estimate(gib: float, cap_gib: float) -> MemoryEstimate:
    """One stage of ``gib`` GiB of activations against ``cap_gib`` GiB usable."""
    stage = StageMemory(0, 1, 1.0, {"activations": {"decoder_layers": gib * GIB_BYTES}})
    return MemoryEstimate([stage], int(cap_gib * GIB_BYTES), 8, None, resolve_overheads({}, False))


def test_a_peak_whose_error_band_reaches_capacity_is_tight_and_one_with_a_clear_margin_fits():
    band = _estimate(70, 80).error_band_pct
    assert band == 11  # docs/memory_accuracy.md: worst |error| 10.1 % → ±11 %
    # a peak P may measure 0.9060·P to 1.1118·P (the readings' range, docs/memory_accuracy.md);
    # 75 GiB of 80: 6.25 % headroom, but 75 × 1.1118 = 83.4 GiB passes 80
    assert _estimate(75, 80).verdict == "tight"
    # 70 GiB of 80: 70 × 1.1118 = 77.8 GiB stays under 80 (12.5 % headroom)
    assert _estimate(70, 80).verdict == "fits"
    # 81 GiB of 80: over by the estimate, but 81 × 0.9060 = 73.4 GiB is under 80: may fit
    assert _estimate(81, 80).verdict == "tight"
    # 90 GiB of 80: even 90 × 0.9060 = 81.5 GiB is over 80
    assert _estimate(90, 80).verdict == "does-not-fit"


def test_dominant_items_are_the_largest_parts_that_cover_the_excess():
    gib = GIB_BYTES
    items = {
        "activations": {"decoder_layers": 155 * gib},
        "other": {"cuda_graph_static_inputs": 392 * gib, "cuda_graph_pool": 8 * gib},
        "optimizer": {"expert_state": 20 * gib},
    }
    names = lambda excess: [it["item"] for it in dominant_items(items, excess * gib)]  # noqa: E731
    assert names(432) == ["cuda_graph_static_inputs", "decoder_layers"]  # 392 < 432 ≤ 392 + 155
    assert names(100) == ["cuda_graph_static_inputs"]  # 392 ≥ 100
    assert names(1000) == ["cuda_graph_static_inputs", "decoder_layers", "expert_state"]  # at most 3
    assert dominant_items(items, 0)[0] == {"category": "other", "item": "cuda_graph_static_inputs", "bytes": 392 * gib}


def test_tight_estimate_exits_one_and_says_it_may_not_fit():
    res = _invoke(TIGHT)
    assert res.exit_code == 1, res.output
    mem = json.loads(_invoke([*TIGHT, "--json"]).stdout)["memory"]
    assert mem["verdict"] == "tight"
    peak, cap = mem["peak_bytes"] / GIB_BYTES, mem["capacity_bytes"] / GIB_BYTES
    low, high = mem["verdict_band"]["low_bytes"] / GIB_BYTES, mem["verdict_band"]["high_bytes"] / GIB_BYTES
    assert peak < cap < high and high == pytest.approx(peak * 13.41 / 12.062, rel=1e-6)
    line = (
        f"may not fit: the peak {peak:.1f} GiB may measure {low:.1f}–{high:.1f} GiB (the memory model's "
        f"−9.4 / +11.2 %), across the usable {cap:.1f} GiB"
    )
    assert line in " ".join(res.stdout.split())
    assert "(largest: " in res.stdout


def test_a_clear_fit_exits_zero():
    res = _invoke(["estimate", "examples/deepseek_v3_gb300.yaml"])
    assert res.exit_code == 0
    assert "→ fits" in res.stdout


def test_estimate_names_what_pushes_a_does_not_fit_over_in_the_verdict_line():
    res = _invoke(["estimate", OOM])
    assert res.exit_code == 1
    mem = json.loads(_invoke(["estimate", OOM, "--json"]).stdout)["memory"]
    # 148.6 GiB of 79.6: 68.9 GiB over; the decoder activations alone (94.4 GiB) cover it
    assert [it["item"] for it in mem["dominant_items"]] == ["decoder_layers"]
    act = mem["dominant_items"][0]["bytes"] / GIB_BYTES
    verdict_line = next(line for line in res.stdout.splitlines() if line.startswith("peak device use"))
    assert verdict_line.endswith(f"→ does-not-fit: {act:.1f} GiB activations")


def test_check_gives_the_memory_verdict_and_does_not_read_pass_alone_when_it_does_not_fit():
    res = _invoke(["check", OOM])
    assert res.exit_code == 1
    doc = json.loads(_invoke(["check", OOM, "--json"]).stdout)
    mem = doc["memory"]
    assert doc["verdict"] == "warn" and mem["verdict"] == "does-not-fit"
    peak, cap = mem["peak_bytes"] / GIB_BYTES, mem["capacity_bytes"] / GIB_BYTES
    assert peak > 2 * 70 and round(cap, 1) == 79.6  # far over an H100's usable 79.65 GiB
    act = mem["dominant_items"][0]["bytes"] / GIB_BYTES
    assert (
        f"memory: {peak:.1f} GiB per GPU (stage 0) of {cap:.1f} GiB usable → does-not-fit: {act:.1f} GiB activations"
        in res.stdout
    )
    assert "verdict: rules pass; does not fit in memory (errors: 0, warnings: 1, info: 1)" in res.stdout


def test_check_of_a_far_oversized_layout_exits_one_and_a_fitting_one_stays_warn():
    big = _invoke(["check", OOM, "--seq-length", "131072"])  # twice the tokens of the OOM example
    assert big.exit_code == 1 and "→ does-not-fit: " in big.stdout and "rules pass; does not fit" in big.stdout
    ok = _invoke(["check", "examples/deepseek_v3_gb300.yaml"])
    assert ok.exit_code == 0
    assert "→ fits; moeplan estimate itemises it" in ok.stdout and "verdict: warn" in ok.stdout


def test_check_of_a_tight_layout_says_it_may_not_fit():
    res = _invoke(["check", *TIGHT[1:]])
    assert res.exit_code == 1
    assert "→ tight: may not fit: the peak" in res.stdout
    assert "verdict: rules pass; may not fit in memory" in res.stdout


def test_check_without_a_gpu_has_no_memory_verdict():
    doc = json.loads(_invoke(["check", "--model", "Qwen/Qwen3-30B-A3B", "--json"]).stdout)
    assert "memory" not in doc


def test_rules_version_basis_says_which_version_the_rules_compared():
    stated = ResolvedVersions({"megatron_core": parse_version("0.17.0")}, {"megatron_core": "versions.megatron_core"})
    assert rules_version_basis(stated, parse_version("0.17.0")) == {
        "rules": "0.17.0",
        "basis": "stated",
        "container": None,
        "container_megatron_core": None,
    }
    shipped = ResolvedVersions(
        {"megatron_core": parse_version("0.17.0")}, {"megatron_core": "container 26.04: table"}, container="26.04"
    )
    assert rules_version_basis(shipped, parse_version("0.17.0")) == {
        "rules": "0.17.0",
        "basis": "container",
        "container": "26.04",
        "container_megatron_core": "0.17.0",
    }
    newest = ResolvedVersions({}, {})
    assert rules_version_basis(newest, parse_version("0.20.0"))["basis"] == "newest known"


def test_check_header_states_the_rules_version_beside_the_containers():
    res = _invoke(["check", OOM, "--set", "versions.container=26.04"])
    head = " ".join(res.stdout.split("\n  TP")[0].split())
    # the NeMo 26.04 container ships megatron-core 0.17.0 (catalog/data/containers.yaml): the layout rules
    # compare that version, as the export spells its keys for it, since no megatron_core is stated
    assert (
        "megatron-core 0.17.0 for the layout rules and the known issues, the version container 26.04 ships "
        "(state versions.megatron_core if yours runs another)" in head
    )
    unknown = " ".join(_invoke(["check", OOM, "--set", "versions.container=24.01"]).stdout.split())
    assert (
        "megatron-core 0.20.0 for the layout rules: none stated and container 24.01 not in moeplan's table" in unknown
    )
    stated = _invoke(["check", OOM, "--set", "versions.megatron_core=0.17.0"])
    assert "(megatron-bridge, megatron-core 0.17.0)" in stated.stdout
    none = _invoke(["check", OOM])
    assert (
        "megatron-core 0.20.0 for the layout rules: none stated, so the newest release moeplan knows (the known "
        in (" ".join(none.stdout.split()))
    )


def _guidance_row_memory():
    r = next(r for r in skill_recipes() if r["id"] == QWEN_128K_BF16)
    return estimate_memory(load_scenario(r["scenario"]))


def test_published_does_not_fit_names_the_cuda_graph_masks_and_activations():
    mem = _guidance_row_memory()
    over = (mem.peak_bytes - (mem.capacity_bytes or 0)) / GIB_BYTES
    items = mem.dominant_items()
    gib = [it["bytes"] / GIB_BYTES for it in items]
    # 624.4 GiB of 184.3 usable: 440.1 GiB over; the graphs' static inputs (392.1 GiB, the TE
    # attention masks) alone do not cover it, with the decoder activations (161.5 GiB) they do
    assert [it["item"] for it in items] == ["cuda_graph_static_inputs", "decoder_layers"]
    assert gib[0] < over <= gib[0] + gib[1]
    reason = (
        f"(does-not-fit: {gib[0]:.1f} GiB attention masks and inputs held by CUDA graphs, {gib[1]:.1f} GiB activations)"
    )
    res = _invoke(["recipes", "--model", "Qwen/Qwen3-235B-A22B", "--kind", "guidance"])
    flat = " ".join(res.stdout.split())
    assert f"{mem.peak_bytes / GIB_BYTES:.1f} GiB {reason}" in flat
    row = next(r for r in list_recipes("guidance", "Qwen/Qwen3-235B-A22B") if r["id"] == QWEN_128K_BF16)
    assert row["memory"]["dominant_items"] == items


def test_plans_guidance_family_line_gives_the_reason_beside_the_number(capsys):
    mem = _guidance_row_memory()
    fam = {
        "recipe": QWEN_128K_BF16,
        "check": {"errors": []},
        "memory": {
            "peak_gib": mem.peak_bytes / GIB_BYTES,
            "verdict": mem.verdict,
            "dominant_items": mem.dominant_items(),
        },
    }
    render.set_lang("en")
    plan_tables._family(Console(width=400, color_system=None), fam, False)
    out = capsys.readouterr().out
    # 624.4 GiB: HybridEP's buffers as HybridEPBuffer sizes them (2.16 GiB) in the peak, and the fused
    # attention norm's output LayerNormLinear keeps under layernorm recompute (98 layer-microbatches ×
    # 64 MiB = 6.1 GiB of activations, 7.0 GiB with the graph pool and fragmentation shares)
    assert re.search(
        r"624\.4 GiB \(does-not-fit: 392\.1 GiB attention masks and inputs held by CUDA graphs, 161\.5 GiB", out
    )


def test_export_warning_names_what_pushes_the_peak_over():
    out = export_report(Path(OOM))
    warn = next(w for w in out.warnings if "run out of memory" in w)
    assert re.search(r"peak at 148\.6 GiB per GPU \(\d+\.\d GiB activations\), over the 79\.6 GiB usable", warn)


def test_fit_names_what_pushes_the_current_layout_over_its_limit():
    res = _invoke(["fit", OOM, "--gbs", "64"])
    doc = json.loads(_invoke(["fit", OOM, "--gbs", "64", "--json"]).stdout)
    # 148.6 GiB against a limit of 71.6 (79.65 / 1.1118: the largest peak whose band stays under
    # the usable HBM): 77.0 GiB over, the decoder activations (94.4 GiB) alone cover it
    assert [it["item"] for it in doc["dominant_items"]] == ["decoder_layers"]
    act = doc["dominant_items"][0]["bytes"] / GIB_BYTES
    # the layout's own verdict, as check and estimate give it (148.6 × 0.9060 = 134.6 > 79.65)
    assert doc["memory"]["verdict"] == "does-not-fit"
    assert f"(limit 71.6 with headroom) → does-not-fit: {act:.1f} GiB activations" in res.stdout
    assert res.exit_code == 0 and doc["fixes"]  # the fixes found fit: fit's own job is done


def test_a_does_not_fit_names_only_what_covers_its_own_excess():
    # 90 GiB of 80: 10 GiB over, which the largest part (12 GiB) covers alone; with the ±11 % band
    # added (99.9 − 80 = 19.9 GiB) two parts would be named, but the band is no part of a
    # does-not-fit's excess
    gib = GIB_BYTES
    items = {"activations": {f"part_{i}": 12 * gib for i in range(7)}, "other": {"rest": 6 * gib}}
    mem = MemoryEstimate([StageMemory(0, 1, 1.0, items)], 80 * gib, 8, None, resolve_overheads({}, False))
    assert mem.verdict == "does-not-fit" and mem.peak_bytes == 90 * gib
    assert [it["item"] for it in mem.dominant_items()] == ["part_0"]
    # tight, 75 GiB of 80: the band's top edge over it, 75 × 1.1118 − 80 = 3.4 GiB, is covered by one part too
    tight = {"activations": {f"part_{i}": 12 * gib for i in range(6)}, "other": {"rest": 3 * gib}}
    mem = MemoryEstimate([StageMemory(0, 1, 1.0, tight)], 80 * gib, 8, None, resolve_overheads({}, False))
    assert mem.verdict == "tight" and [it["item"] for it in mem.dominant_items()] == ["part_0"]


def test_the_memory_verdict_lines_read_in_chinese():
    env = {"COLUMNS": "200", "LC_ALL": None, "LC_MESSAGES": None, "LANG": None}
    zh = runner.invoke(app, ["check", OOM, "--lang", "zh"], env=env)
    assert zh.exit_code == 1
    mem = json.loads(_invoke(["check", OOM, "--json"]).stdout)["memory"]
    peak, cap = mem["peak_bytes"] / GIB_BYTES, mem["capacity_bytes"] / GIB_BYTES
    act = mem["dominant_items"][0]["bytes"] / GIB_BYTES
    assert f"显存：每 GPU {peak:.1f} GiB（stage 0），可用 {cap:.1f} GiB → 放不下：{act:.1f} GiB 激活" in zh.stdout
    assert "结论：规则通过；显存放不下（错误 0，警告 1，信息 1）" in zh.stdout
    assert (
        "megatron-core 0.20.0（配置规则所用；未指定版本：取 moeplan 已知的最新发布版本；已知问题则按最新容器自带的版本检查）"
        in zh.stdout
    )
    tight = runner.invoke(app, [*TIGHT, "--lang", "zh"], env=env)
    assert tight.exit_code == 1
    assert "→ 偏紧：可能放不下：峰值 " in tight.stdout and "（显存模型的 −9.4 / +11.2 %），跨过可用的" in tight.stdout


def test_a_host_memory_overflow_names_no_device_part():
    # 40 GiB on the GPU of 80 (fits), but 8 ranks × 100 GiB of offloaded state against 512 GiB of
    # host memory per node: does-not-fit, and no device part is over
    gib = GIB_BYTES
    stage = StageMemory(0, 1, 1.0, {"optimizer": {"expert_state": 40 * gib}}, host_bytes=100 * gib)
    mem = MemoryEstimate([stage], 80 * gib, 8, 512 * gib, resolve_overheads({}, False))
    assert mem.host_fits is False and mem.verdict == "does-not-fit"
    assert mem.dominant_items() == []


def test_plan_says_when_its_first_layout_is_tight():
    """The planner keeps layouts within 5 % of the usable HBM (published runs near capacity do run),
    but ``estimate`` calls one whose peak plus the ±band reaches the limit ``tight`` and exits 1: the
    plan says so where #1 is. 170 GiB × 1.11 = 188.7 GiB > 184.3; 150 × 1.11 = 166.5 does not reach it."""
    gib = GIB_BYTES
    mem = {"verdict": "tight", "peak_bytes": 170 * gib, "capacity_bytes": int(184.3 * gib), "error_band_pct": 11.0}
    render.set_lang("en")
    con = Console(width=200, record=True)
    plan_tables._tight_note(con, {"memory": mem})
    text = con.export_text()
    assert "#1 is tight: may not fit: the peak 170.0 GiB ±11 % reaches the usable 184.3 GiB" in text
    assert "--headroom-gib" in text
    con = Console(width=200, record=True)
    plan_tables._tight_note(con, {"memory": {**mem, "verdict": "fits", "peak_bytes": 150 * gib}})
    assert con.export_text() == ""


def test_a_saved_fit_is_what_estimate_calls_fits():
    """``fit``'s default limit is the ``fits`` verdict of ``estimate`` (the peak's band, up to
    peak × 1.1118, within the usable HBM), so that ``estimate`` of a saved fix exits 0, not 1 as ``tight``."""
    from moeplan.plan.fit import default_fit_limit

    s = load_scenario(OOM)
    mem = estimate_memory(s)
    cap, band = mem.capacity_bytes, mem.error_band_pct
    assert cap is not None and band is not None
    high = 13.41 / 12.062  # the largest measured / predicted of docs/memory_accuracy.md
    assert default_fit_limit(mem) == pytest.approx(cap / high)
    doc = json.loads(runner.invoke(app, ["fit", OOM, "--json"]).output)
    for fix in doc["fixes"]:
        assert fix["peak_gib"] * GIB_BYTES * high <= cap * (1 + 1e-9), fix["change"]
        assert fix["verdict"] == "fits", fix["change"]
