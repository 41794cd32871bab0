"""Known issues at a megatron-core dev checkout (``0.18.0+dev.<sha>``, the version a published
Megatron-LM recipe's checkout reports): its number does not say which fixes it has, so the harvested
entries are decided by git ancestry for the recipes' checkouts (precomputed by the harvester into the
packaged file) and every other dev checkout's warning says it may already carry the fix."""

from __future__ import annotations

import copy
import importlib.util
import sys
from pathlib import Path

import yaml
from packaging.version import Version

from moeplan.catalog.known_issue_table import dev_checkout, fix_by_ancestry, get_known_issue
from moeplan.resolve.load import load_scenario
from moeplan.rules import RULES, validate
from tests.git_history import run_git

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("harvest_known_issues", ROOT / "scripts" / "harvest_known_issues.py")
harvest = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("harvest_known_issues", harvest)
_spec.loader.exec_module(harvest)

#: the checkout of the published Megatron-LM recipe qwen3_235b/gb200/..._partial_cg_overlap.yaml
#: (Megatron-LM 256f606507, 2026-06-07, dev line; package_info.py there says 0.18.0)
RECIPE_CHECKOUT = "0.18.0+dev.256f606507"
#: a dev checkout no published recipe uses: nothing is known of its history
OTHER_CHECKOUT = "0.18.0+dev.abcdef0123"
#: EP communication overlap on Qwen3-30B-A3B: meets mcore_pr_4909's trigger
#: (layout.overlap_moe_expert_parallel_comm: true; affected <0.19.0, fixed 0.19.0)
EP_OVERLAP = {
    "model": "Qwen/Qwen3-30B-A3B",
    "system": {"gpu": "h100", "num_gpus": 64},
    "training": {"seq_length": 4096, "micro_batch_size": 1, "global_batch_size": 256},
    "layout": {"expert_model_parallel_size": 8, "overlap_moe_expert_parallel_comm": True},
}


def _at(scenario: dict, version: str):
    return load_scenario({**copy.deepcopy(scenario), "versions": {"megatron_core": version}})


def _status(issue_id: str, version: str) -> str:
    return get_known_issue(issue_id).version_status(_at(EP_OVERLAP, version).versions)[0]


def _family(scenario: dict, version: str, family: str):
    found = [f for f in RULES["known_issue.harvested"].check(_at(scenario, version)) if f.rule_id.endswith(family)]
    return found[0] if found else None


def test_a_recipe_checkout_that_carries_a_cherry_picked_fix_is_not_warned_of_it():
    # PR 4909 (main 5da641c, 2026-06-08) is not an ancestor of 256f606507, but the dev line's
    # 3e8ce1f "[Dev] fix(combined-1f1b): release loss-node input storage after combined backward (#4908)"
    # (2026-05-28) is, with the same subject: the checkout carries the fix though 0.18.0 < 0.19.0
    assert _status("mcore_pr_4909", "0.18.0") == "affected"
    assert _status("mcore_pr_4909", RECIPE_CHECKOUT) == "not_affected"
    assert _family(EP_OVERLAP, "0.18.0", "mcore_moe_overlap") is not None
    assert _family(EP_OVERLAP, RECIPE_CHECKOUT, "mcore_moe_overlap") is None


def test_a_recipe_checkout_lacking_a_fix_its_number_passes_is_warned_by_ancestry():
    # PR 4664 (main 74687fe, "fix(fsdp): recognize legacy GDN TP metadata", fixed 0.18.0, affected <0.18.0):
    # 0.18.0+dev is outside <0.18.0, yet neither that commit nor one of its subject is in 256f606507
    k = get_known_issue("mcore_pr_4664")
    scenario = copy.deepcopy(k.example)
    assert k.version_status(_at(scenario, "0.18.0").versions)[0] == "not_affected"
    assert k.version_status(_at(scenario, RECIPE_CHECKOUT).versions)[0] == "affected"
    found = _family(scenario, RECIPE_CHECKOUT, "mcore_fsdp")
    assert found is not None and found.severity == "warning"
    assert "decided by git ancestry for the dev checkout 256f606507" in found.message
    assert "may already carry" not in found.message


def test_another_dev_checkout_is_warned_but_told_it_may_already_carry_the_fix():
    # nothing is known of abcdef0123: its number (0.18.0 < 0.19.0) keeps PR 4909 in range, the only
    # entry of the EP-overlap family after 0.18.0, and the warning says the checkout may carry its fix
    assert _status("mcore_pr_4909", OTHER_CHECKOUT) == "affected"
    found = _family(EP_OVERLAP, OTHER_CHECKOUT, "mcore_moe_overlap")
    assert found is not None and "1 bug(s) fixed after megatron-core 0.18.0+dev.abcdef0123" in found.message
    assert "it may already carry the fix of 1 of these" in found.message
    release = _family(EP_OVERLAP, "0.18.0", "mcore_moe_overlap")
    assert "may already carry" not in release.message


def test_a_hand_entered_issue_at_a_dev_checkout_says_the_checkout_may_carry_its_fix():
    # gdn_context_parallel_assert: megatron-core >=0.16.0,<0.18.0, fixed 0.18.0; no fix commit recorded
    k = get_known_issue("gdn_context_parallel_assert")
    dev = [f for f in validate(_at(k.example, "0.17.0+dev.abcdef0123")).findings if f.rule_id == k.rule_id]
    release = [f for f in validate(_at(k.example, "0.17.0")).findings if f.rule_id == k.rule_id]
    assert len(dev) == 1 and dev[0].message.endswith(
        "is a dev checkout whose number does not say which fixes it has: it may already carry this fix"
    )
    assert len(release) == 1 and "dev checkout" not in release[0].message
    # a guaranteed assertion at a release; at a checkout that may carry the fix it is unknown: a warning
    assert (release[0].severity, dev[0].severity) == ("error", "warning")


def test_ancestry_is_undecided_for_releases_other_checkouts_and_hand_entries():
    k = get_known_issue("mcore_pr_4909")
    assert dev_checkout(Version(RECIPE_CHECKOUT)) == "256f606507"
    assert dev_checkout(Version("0.19.0+dev")) is None and dev_checkout(Version("0.18.0")) is None
    assert fix_by_ancestry(k, Version(RECIPE_CHECKOUT)) is True
    assert fix_by_ancestry(k, Version("0.18.0")) is None
    assert fix_by_ancestry(k, Version(OTHER_CHECKOUT)) is None
    assert fix_by_ancestry(get_known_issue("gdn_context_parallel_assert"), Version(RECIPE_CHECKOUT)) is None


def _git(repo: Path, *args: str) -> str:
    return run_git(repo, *args, date="2026-06-01T00:00:00")


def _commit(repo: Path, subject: str) -> str:
    f = repo / "megatron/core/utils.py"
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_text((f.read_text() if f.exists() else "") + subject + "\n")
    _git(repo, "add", "megatron/core/utils.py")
    _git(repo, "commit", "-q", "-m", subject)
    return _git(repo, "rev-parse", "HEAD")


def test_the_harvester_decides_a_checkout_by_sha_and_by_cherry_picked_subject(tmp_path):
    """main: base, fix A (#21), fix B (#22), fix C (#23); dev from base: A cherry-picked as
    "[dev] <A's subject> (#24)". The dev checkout (numbered 0.2.0): A <0.3.0 is in range by number
    but carried by subject → carries; B <0.2.0 is out of range by number but absent → lacks;
    C <0.3.0 is in range and absent → neither (its range already says so)."""
    repo = tmp_path / "r"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    base = _commit(repo, "base")
    subjects = {i: f"Fix hang in the p2p send of stage {i} (#2{n})" for n, i in enumerate("abc", start=1)}
    shas = {i: _commit(repo, s) for i, s in subjects.items()}
    _git(repo, "checkout", "-q", "-b", "dev", base)
    head = _commit(repo, "[dev] Fix hang in the p2p send of stage a (#24)")
    ranges = {"a": "<0.3.0", "b": "<0.2.0", "c": "<0.3.0"}
    entries = [{"id": i, "packages": {"megatron_core": {"affected": r}}} for i, r in ranges.items()]
    fixes = {i: (shas[i], subjects[i]) for i in ranges}
    version = f"0.2.0+dev.{head[:10]}"
    table = harvest.checkout_ancestry(repo / ".git", entries, fixes, {head[:10]: (head, version)})
    assert table == {head[:10]: {"commit": head, "megatron_core": version, "carries": ["a"], "lacks": ["b"]}}


def test_feature_trigger_curation_adds_its_condition_to_every_entry_of_the_feature(tmp_path):
    over = tmp_path / "o.yaml"
    cond = {"model.kimi_delta_attention": False}
    over.write_text(yaml.safe_dump({"feature_trigger": {"megatron_core": {"linear_attention": cond}}}))
    entries = [
        {
            "id": "gdn",
            "_subject": "Fix gdn",
            "symptom": "crash",
            "source": "u/1",
            "family": "mcore_pp",
            "features": ["pp", "linear_attention"],
            "packages": {"megatron_core": {}},
            "trigger": {"pp": {"gt": 1}, "model.has_linear_attention": True},
        },
        {
            "id": "pp",
            "_subject": "Fix pp",
            "symptom": "crash",
            "source": "u/2",
            "family": "mcore_pp",
            "features": ["pp"],
            "packages": {"megatron_core": {}},
            "trigger": {"pp": {"gt": 1}},
        },
    ]
    gdn, pp = harvest.curate(entries, harvest.load_overrides(over))
    assert gdn["trigger"] == {"pp": {"gt": 1}, "model.has_linear_attention": True, "model.kimi_delta_attention": False}
    assert pp["trigger"] == {"pp": {"gt": 1}}
