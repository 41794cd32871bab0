"""Known issues harvested from merged upstream fixes: every entry's example fires and its near miss
does not; a scenario gets one finding per family, not one per entry; a release at or after every fix
of a family is info only; the harvester's path → feature map and version ranges on a synthetic git
history; the vendored file is reproduced from the mirrors; published configs at their own releases
draw no error and a bounded number of warnings."""

from __future__ import annotations

import copy
import importlib.util
import json
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from moeplan.catalog import known_issue_table as table
from moeplan.catalog.known_issue_table import harvested_issues, known_issues, parse_known_issues
from moeplan.catalog.perf_recipes import published_runs
from moeplan.cli.app import app
from moeplan.i18n.messages import catalogue
from moeplan.resolve.load import load_scenario
from moeplan.rules import RULES
from moeplan.rules import known_issue_families as fam
from tests.git_history import run_git
from tests.thresholds import threshold

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("harvest_known_issues", ROOT / "scripts" / "harvest_known_issues.py")
harvest = importlib.util.module_from_spec(_spec)
sys.modules["harvest_known_issues"] = harvest
_spec.loader.exec_module(harvest)

HARVESTED = harvested_issues()
BASE = {
    "model": "Qwen/Qwen3-30B-A3B",
    "system": {"gpu": "h100", "num_gpus": 64},
    "training": {"seq_length": 4096, "micro_batch_size": 1, "global_batch_size": 256},
}


def _harvested_findings(data: dict):
    return list(RULES["known_issue.harvested"].check(load_scenario(copy.deepcopy(data))))


# ---------------------------------------------------------------------------------------------------
# the vendored entries


def test_harvested_database_breadth_by_family():
    assert len(HARVESTED) >= 300
    families = {k.family for k in HARVESTED}
    for f in (
        "mcore_moe_dispatch",
        "mcore_cp",
        "mcore_pp",
        "mcore_cuda_graphs",
        "mcore_fsdp",
        "mcore_vlm",
        "mcore_packing",
        "mbridge_peft",
        "mcore_rl",
        "mbridge_conversion",
        "te_cp",
        "te_tp_overlap",
        "te_moe_permute",
        "te_fp8",
        "deepep_internode",
    ):
        assert f in families, f
    hand = {k.id for k in known_issues()}
    for k in HARVESTED:
        assert k.certainty == "reported" and k.severity == "warning", k.id
        assert not k.avoid, k.id
        assert k.family and k.features and k.id not in hand, k.id
        assert k.example is not None and k.near_miss is not None, k.id


def test_every_harvested_example_fires_and_its_near_miss_does_not():
    bad = []
    for k in HARVESTED:
        ex, nm = load_scenario(copy.deepcopy(k.example)), load_scenario(copy.deepcopy(k.near_miss))
        if not (k.triggered(ex) and k.version_status(ex.versions)[0] == "affected"):
            bad.append(f"{k.id}: example does not fire")
        if k.version_status(nm.versions)[0] != "not_affected":
            bad.append(f"{k.id}: near miss fires")
    assert not bad, bad


def test_example_of_each_family_reports_the_family_once():
    first = {}
    for k in HARVESTED:
        first.setdefault(k.family, k)
    for family, k in first.items():
        found = [f for f in _harvested_findings(k.example) if f.rule_id == f"known_issue.family.{family}"]
        assert len(found) == 1, family
        assert found[0].severity == ("info" if fam.is_broad(family) else "warning"), family
        near = _harvested_findings(k.near_miss)
        assert not any(f.rule_id == f"known_issue.family.{family}" and k.source in f.message for f in near)


def test_titles_are_composed_from_the_facts_in_both_languages():
    for k in HARVESTED:
        title = fam.title_message(k)
        assert str(title) == k.title, k.id
        p = k.packages[0]
        assert f"< {p.fixed}" in title.text("zh"), k.id
        assert title.text("zh") != str(title), k.id
    k = next(k for k in HARVESTED if k.id == "mcore_commit_e675940967")  # MoE + dense hybrid hang, in 0.13.0
    assert k.title == (
        "hang with MoE token dispatch (EP > 1), distributed optimizer in megatron-core < 0.13.0 "
        "(fixed by commit e675940967)"
    )
    assert fam.title_message(k).text("zh") == (
        "megatron-core < 0.13.0 中使用MoE token 分发（EP > 1），分布式优化器时卡死（修复：提交 e675940967）"
    )


def test_a_harvested_entry_with_a_guaranteed_certainty_is_refused():
    raw = yaml.safe_load(yaml.safe_dump(HARVESTED[0].to_dict()))
    entry = {key: raw[key] for key in ("id", "title", "source", "reported", "trigger", "symptom", "workaround")}
    entry |= {"packages": {"megatron_core": {"affected": "<0.15.0", "fixed": "0.15.0"}}, "certainty": "guaranteed"}
    entry |= {"family": "mcore_pp", "features": ["pp"]}
    with pytest.raises(table.KnownIssueDataError, match="certainty: reported"):
        parse_known_issues({"schema": 1, "issues": [entry]})


# ---------------------------------------------------------------------------------------------------
# folding by family


def _synthetic(fixes: list[str], family: str = "mcore_pp") -> tuple:
    """Entries of one family on pp > 1, fixed in ``fixes`` (megatron-core)."""
    entries = []
    for i, fixed in enumerate(fixes):
        entries.append(
            {
                "id": f"synthetic_{i}",
                "title": f"hang {i}",
                "family": family,
                "features": [family.partition("_")[2]],
                "source": f"https://github.com/NVIDIA/Megatron-LM/pull/{100 + i}",
                "reported": "2025-06-01",
                "packages": {"megatron_core": {"affected": f"<{fixed}", "fixed": fixed}},
                "trigger": {"pp": {"gt": 1}},
                "symptom": "hang",
                "certainty": "reported",
                "workaround": "upgrade",
            }
        )
    return parse_known_issues({"schema": 1, "issues": entries})


@pytest.fixture
def three_pp_fixes(monkeypatch):
    monkeypatch.setattr(fam, "harvested_issues", lambda: _synthetic(["0.14.0", "0.15.0", "0.16.0"]))


def _pp(version: str, pp: int = 2) -> dict:
    return {**BASE, "layout": {"pipeline_model_parallel_size": pp}, "versions": {"megatron_core": version}}


def test_three_entries_of_one_family_fold_into_one_finding(three_pp_fixes):
    found = _harvested_findings(_pp("0.13.0"))
    assert [f.rule_id for f in found] == ["known_issue.family.mcore_pp"]
    f = found[0]
    assert f.severity == "warning"
    assert "3 bug(s) fixed after megatron-core 0.13.0, the newest in 0.16.0" in f.message
    assert "https://github.com/NVIDIA/Megatron-LM/pull/102" in f.message  # the newest fix first
    assert f.fix.startswith("upgrade to megatron-core ≥ 0.16.0")


def test_family_count_is_the_fixes_after_the_stated_release(three_pp_fixes):
    (f,) = _harvested_findings(_pp("0.15.0"))
    assert "1 bug(s) fixed after megatron-core 0.15.0, the newest in 0.16.0" in f.message


def test_release_at_or_after_every_fix_of_a_family_is_info_only(three_pp_fixes):
    (f,) = _harvested_findings(_pp("0.17.0"))
    assert (f.rule_id, f.severity) == ("known_issue.family_watch", "info")
    assert "info only" in f.message
    assert (
        "megatron-core pipeline parallelism (PP > 1): 3 fixes up to 0.16.0, megatron-core 0.17.0 has them all"
        in f.message
    )


def test_family_without_its_feature_or_version_says_nothing(three_pp_fixes):
    assert _harvested_findings(_pp("0.13.0", pp=1)) == []
    assert _harvested_findings({**BASE, "layout": {"pipeline_model_parallel_size": 2}}) == []


def test_family_of_a_broad_feature_is_info_and_says_why(monkeypatch):
    monkeypatch.setattr(fam, "harvested_issues", lambda: _synthetic(["0.14.0", "0.15.0"], "mcore_moe_experts"))
    (f,) = _harvested_findings(_pp("0.13.0"))
    assert (f.rule_id, f.severity) == ("known_issue.family.mcore_moe_experts", "info")
    assert "base rate" in f.message


# ---------------------------------------------------------------------------------------------------
# the command


def test_known_issues_json_lists_every_entry_with_its_family_and_text_counts_families():
    res = CliRunner().invoke(app, ["known-issues", "--json"])
    doc = json.loads(res.stdout)
    assert doc["count"] == len(known_issues()) + len(HARVESTED)
    by_id = {r["id"]: r for r in doc["issues"]}
    assert all(by_id[k.id]["family"] == k.family for k in HARVESTED)
    assert all(by_id[k.id]["family"] is None for k in known_issues())
    assert sum(f["count"] for f in doc["families"]) == len(HARVESTED)
    text = CliRunner().invoke(app, ["known-issues"], env={"COLUMNS": "200"}).stdout
    assert f"harvested fixes by family ({len(HARVESTED)})" in text
    assert "mcore_pp: megatron-core pipeline parallelism (PP > 1)" in text


# ---------------------------------------------------------------------------------------------------
# precision on published configs


def _published_at_release(r: dict) -> dict:
    layout = {k: v for k, v in r["layout"].items() if v is not None}
    return {
        "model": r["model"],
        "system": {"gpu": r["gpu"], "num_gpus": r["num_gpus"]},
        "training": dict(r["training"]),
        "layout": layout,
        "versions": {"container": f"nvcr.io/nvidia/nemo:{r['release']}"},
    }


def test_published_configs_at_their_releases_draw_no_error_and_bounded_warnings():
    runs = published_runs()
    assert len(runs) >= 50
    errors, warnings = [], 0
    for r in runs:
        s = load_scenario(_published_at_release(r))
        found = [*RULES["known_issue.database"].check(s), *RULES["known_issue.harvested"].check(s)]
        errors += [(r["id"], f.rule_id) for f in found if f.severity == "error"]
        warnings += sum(f.severity == "warning" for f in found)
    assert not errors
    assert warnings <= threshold("known_issues.published_configs.warnings")


# ---------------------------------------------------------------------------------------------------
# the harvester


def _commit(subject: str, files: list[str], body: str = "") -> object:
    return harvest.Commit("0" * 40, "2025-06-01", subject, body, files)


MCORE, BRIDGE, TE, DEEPEP = (
    next(m for m in harvest.MIRRORS if m.package == p)
    for p in ("megatron_core", "megatron_bridge", "transformer_engine", "deepep")
)


@pytest.mark.parametrize(
    ("mirror", "subject", "files", "keys"),
    [
        (
            MCORE,
            "Fix DeepEP combine with padded tokens",
            ["megatron/core/transformer/moe/fused_a2a.py"],
            ["flex_dispatcher"],
        ),
        (MCORE, "Fix permute padding", ["megatron/core/transformer/moe/token_dispatcher.py"], ["moe_dispatch"]),
        (
            MCORE,
            "Fix aux loss scale when CP is enabled",
            ["megatron/core/transformer/moe/router.py"],
            ["cp", "moe_routing"],
        ),
        (MCORE, "Fix hang with interleaved schedule", ["megatron/core/pipeline_parallel/schedules.py"], ["vpp"]),
        (MCORE, "Fix p2p shapes", ["megatron/core/pipeline_parallel/p2p_communication.py"], ["pp"]),
        (MCORE, "Fix replay", ["megatron/core/transformer/cuda_graphs.py"], ["cuda_graphs"]),
        (MCORE, "Fix unshard", ["megatron/core/distributed/fsdp/src/megatron_fsdp/fsdp.py"], ["fsdp"]),
        (MCORE, "Fix H2D sync", ["megatron/core/optimizer/cpu_offloading/hybrid_optimizer.py"], ["optimizer_offload"]),
        (MCORE, "Fix vision encoder", ["megatron/core/models/vision/clip_vit_model.py"], ["vlm"]),
        (BRIDGE, "Fix LoRA merge", ["src/megatron/bridge/peft/lora.py"], ["peft"]),
        (BRIDGE, "fix: qwen3 export", ["src/megatron/bridge/models/qwen/qwen3_bridge.py"], ["conversion:qwen"]),
        (
            TE,
            "Fix CP with THD inputs",
            ["transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py"],
            ["cp"],
        ),
        (
            TE,
            "Fix ub buffer registration",
            ["transformer_engine/common/comm_gemm_overlap/userbuffers/userbuffers.cu"],
            ["tp_overlap"],
        ),
        (TE, "Fix unpermute with padded tokens", ["transformer_engine/pytorch/permutation.py"], ["moe_permute"]),
        (TE, "Fix replay of graphed callables", ["transformer_engine/pytorch/graph.py"], ["cuda_graphs"]),
        (
            TE,
            "Fix topk score",
            ["transformer_engine/common/fused_router/fused_topk_with_score_function.cu"],
            ["moe_routing"],
        ),
        (TE, "Fix amax reduction", ["transformer_engine/pytorch/tensor/float8_tensor.py"], ["fp8"]),
        (TE, "Fix cuDNN backend selection", ["transformer_engine/common/fused_attn/fused_attn.cpp"], ["attention"]),
        (DEEPEP, "Fix combine tail", ["csrc/kernels/internode.cu"], ["internode"]),
        (DEEPEP, "Fix notify_dispatch", ["csrc/kernels/intranode.cu"], ["intranode"]),
        (DEEPEP, "Fix buffer sync", ["deep_ep/buffer.py"], ["buffer"]),
    ],
)
def test_path_to_feature_map(mirror, subject, files, keys):
    parts = harvest._parts(mirror, _commit(subject, files))
    assert parts is not None and parts[0] == keys


def test_a_fix_touching_no_feature_proposes_nothing():
    assert harvest._parts(MCORE, _commit("Fix rank env parsing", ["megatron/core/utils.py"])) is None


def test_symptom_comes_from_the_text_and_an_added_check_is_not_an_assertion():
    assert harvest.symptom_of(_commit("Fix hang in p2p", [])) == "hang"
    assert harvest.symptom_of(_commit("Fix nan loss caused by zero token", [])) == "nan"
    assert harvest.symptom_of(_commit("Add assertion for mxfp8 params", [])) == "unspecified"
    assert harvest.symptom_of(_commit("Fix the assertion of moe_ffn_hidden_size", [])) == "assertion"


@pytest.mark.parametrize(
    ("subject", "symptom"),
    [
        ("Fix TransformerConfig validation for mixed dense/MoE upcycling (#3647)", "unspecified"),
        ("[M-FSDP] Fix Tensor Parallel mode detection (#3191)", "unspecified"),
        ("Fix incorrect aux loss scale under CP", "wrong_result"),
        ("Fix grad norm mismatch with VPP", "wrong_result"),
        ("fix no_shard training convergency", "wrong_result"),
        ("Fix out of bounds access in the FP4 dequantize kernel (#2346)", "crash"),
    ],
)
def test_symptom_is_unspecified_unless_the_text_names_a_failure(subject, symptom):
    assert harvest.symptom_of(_commit(subject, [])) == symptom


def test_wrong_result_entries_name_a_wrong_result_and_unspecified_ones_say_so():
    wrong = [k for k in HARVESTED if k.symptom == "wrong_result"]
    unspecified = [k for k in HARVESTED if k.symptom == "unspecified"]
    assert wrong and unspecified and len(wrong) < len(unspecified)
    assert all(k.title.startswith("incorrect results with ") for k in wrong)
    assert all(k.title.startswith("bug (failure mode not named by the fix) with ") for k in unspecified)
    k = unspecified[0]
    assert fam.title_message(k).text("zh").count("存在缺陷（修复未说明故障表现）") == 1


def test_a_hand_entered_entry_with_an_unspecified_symptom_is_refused():
    hand = yaml.safe_load((ROOT / "src/moeplan/catalog/data/known_issues.yaml").read_text(encoding="utf-8"))
    entry = {**hand["issues"][0], "symptom": "unspecified"}
    parse_known_issues({"schema": 1, "issues": [hand["issues"][0]]})  # as written it loads
    with pytest.raises(table.KnownIssueDataError, match="symptom 'unspecified' is for harvested entries"):
        parse_known_issues({"schema": 1, "issues": [entry]})


def test_known_issues_filters_on_the_unspecified_symptom():
    doc = json.loads(CliRunner().invoke(app, ["known-issues", "--json", "--symptom", "unspecified"]).stdout)
    expected = [k.id for k in HARVESTED if k.symptom == "unspecified"]
    assert [r["id"] for r in doc["issues"]] == expected
    assert doc["symptoms"]["unspecified"] == "the fix names no failure mode"
    wrong = json.loads(CliRunner().invoke(app, ["known-issues", "--json", "--symptom", "wrong_result"]).stdout)
    assert not {r["id"] for r in wrong["issues"]} & set(expected)


def _git(repo: Path, *args: str) -> str:
    return run_git(repo, *args, date="2025-06-01T00:00:00")


def _commit_file(repo: Path, path: str, subject: str) -> None:
    f = repo / path
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_text(f.read_text() + subject + "\n" if f.exists() else subject + "\n")
    _git(repo, "add", path)
    _git(repo, "commit", "-q", "-m", subject)


def test_version_range_from_a_synthetic_history(tmp_path):
    """main: base, tag core_v0.1.0, fix A (p2p hang), fix B (cuda graph), tag core_v0.2.0; a release branch
    from core_v0.1.0 carries a cherry-pick of B, tagged core_v0.1.1. A is first in 0.2.0 (affected <0.2.0,
    example at 0.1.1); B is first in 0.1.1 through its cherry-pick (affected <0.1.1, example at 0.1.0)."""
    repo = tmp_path / "r"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    _commit_file(repo, "megatron/core/utils.py", "base")
    _git(repo, "tag", "core_v0.1.0")
    _commit_file(repo, "megatron/core/pipeline_parallel/p2p_communication.py", "Fix hang in p2p send (#11)")
    _commit_file(repo, "megatron/core/transformer/cuda_graphs.py", "Fix cuda graph replay of the warmup step (#12)")
    _git(repo, "tag", "core_v0.2.0")
    _git(repo, "checkout", "-q", "-b", "core_r0.1.0", "core_v0.1.0")
    _commit_file(repo, "megatron/core/transformer/cuda_graphs.py", "Fix cuda graph replay of the warmup step (#13)")
    _git(repo, "tag", "core_v0.1.1")
    _git(repo, "checkout", "-q", "main")
    mirror = harvest.Mirror("megatron_core", "mcore", MCORE.url, repo / ".git", MCORE.tag, MCORE.scope)
    entries, head = harvest.harvest_mirror(mirror)
    assert head == _git(repo, "rev-parse", "HEAD")
    by_id = {e["id"]: e for e in entries}
    a, b = by_id["mcore_pr_11"], by_id["mcore_pr_12"]
    assert a["packages"] == {"megatron_core": {"affected": "<0.2.0", "fixed": "0.2.0"}}
    assert (a["example"]["versions"], a["near_miss"]["versions"]) == (
        {"megatron_core": "0.1.1"},
        {"megatron_core": "0.2.0"},
    )
    assert (a["symptom"], a["trigger"], a["family"]) == ("hang", {"pp": {"gt": 1}}, "mcore_pp")
    assert b["packages"] == {"megatron_core": {"affected": "<0.1.1", "fixed": "0.1.1"}}
    assert b["example"]["versions"] == {"megatron_core": "0.1.0"}
    assert b["trigger"] == {"graphs_on": True}


def _declare(repo: Path, version: str) -> None:
    (repo / "setup.py").write_text(f"setuptools.setup(name='deep_ep', version='{version}' + revision)\n")
    _git(repo, "add", "setup.py")
    _git(repo, "commit", "-q", "-m", f"Update version number to {version}")


def test_deepep_releases_are_the_versions_its_package_declares(tmp_path):
    """main: version 1.0.0; fix A (internode hang); version 1.1.0; fix B (intranode hang), fix C (a
    low-latency kernel hang); version 1.2.0. No tags: a build reports the declared version from its bump
    on, so A is first in every 1.1.0 build (affected <1.1.0, example at 1.0.0), B in 1.2.0 (example at
    1.1.0), and C, in the low-latency kernels Megatron's dispatcher does not call, proposes nothing."""
    repo = tmp_path / "r"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    _declare(repo, "1.0.0")
    _commit_file(repo, "csrc/kernels/internode.cu", "Fix hang in internode combine")
    _declare(repo, "1.1.0")
    _commit_file(repo, "csrc/kernels/intranode.cu", "Fix hang in intranode notify")
    _commit_file(repo, "csrc/kernels/internode_ll.cu", "Fix hang in the LL dispatch kernel")
    _declare(repo, "1.2.0")
    mirror = harvest.Mirror(
        "deepep", "deepep", DEEPEP.url, repo / ".git", DEEPEP.tag, DEEPEP.scope, DEEPEP.exts, DEEPEP.declared
    )
    assert [str(v) for v, _ in harvest.releases(mirror)] == ["1.0.0", "1.1.0", "1.2.0"]
    entries, _ = harvest.harvest_mirror(mirror)
    assert [(e["family"], e["packages"], e["example"]["versions"], e["symptom"]) for e in entries] == [
        ("deepep_internode", {"deepep": {"affected": "<1.1.0", "fixed": "1.1.0"}}, {"deepep": "1.0.0"}, "hang"),
        ("deepep_intranode", {"deepep": {"affected": "<1.2.0", "fixed": "1.2.0"}}, {"deepep": "1.1.0"}, "hang"),
    ]
    assert entries[0]["trigger"] == {"dispatcher": "deepep", "derived.ep_spans_nodes": True}
    assert entries[1]["trigger"] == {"dispatcher": "deepep", "derived.ep_spans_nodes": False}


def test_te_and_deepep_families_name_their_package():
    assert fam.family_message("te_cp") == "Transformer Engine context parallelism (CP > 1)"
    assert fam.family_message("deepep_internode") == "DeepEP internode dispatch (EP across nodes, NVSHMEM)"
    assert fam.is_broad("te_fp8") and fam.is_broad("te_attention") and not fam.is_broad("te_tp_overlap")


def test_harvester_skips_and_keeps_the_vendored_file_when_a_mirror_is_absent(tmp_path, monkeypatch, capsys):
    before = harvest.OUT.read_text(encoding="utf-8")
    absent = harvest.Mirror("deepep", "deepep", DEEPEP.url, tmp_path / "none", DEEPEP.tag, DEEPEP.scope)
    monkeypatch.setattr(harvest, "MIRRORS", (*harvest.MIRRORS[:-1], absent))
    assert harvest.main([]) == 0
    assert "skipped: mirrors absent" in capsys.readouterr().out
    assert harvest.OUT.read_text(encoding="utf-8") == before


def test_curation_rejects_by_id_and_subject_and_corrects_fields(tmp_path):
    entries = [
        {"id": i, "_subject": subj, "symptom": "crash", "trigger": {}, "family": "mcore_pp", "source": f"u/{i}"}
        for i, subj in (("a", "Fix hang"), ("b", "Revert fix"), ("c", "Fix slow path"), ("d", "Fix hang by hand"))
    ]
    over = tmp_path / "o.yaml"
    over.write_text(
        yaml.safe_dump({"reject_subject": {"^revert": "r"}, "reject": {"a": "x"}, "symptom": {"c": "slowdown"}})
    )
    (c,) = harvest.curate(entries, harvest.load_overrides(over), {"u/d"})
    assert (c["id"], c["symptom"], c["size"]) == ("c", "slowdown", "not measured by the fix")


@pytest.mark.skipif(not all(m.path.is_dir() for m in harvest.MIRRORS), reason="the git mirrors are absent (CI)")
def test_rerun_on_the_mirrors_reproduces_the_vendored_file():
    assert harvest.build() == harvest.OUT.read_text(encoding="utf-8")


def test_harvested_messages_are_in_both_catalogues():
    en, zh = catalogue("en"), catalogue("zh")
    for key in fam.FEATURE_MESSAGES:
        assert f"harvested.feature.{key}" in en and f"harvested.feature.{key}" in zh
