"""Megatron's key tables (``inputs/data/megatron_keys.json``, generated from the sources by
``scripts/gen_megatron_keys.py``) and what the scenario does with a key moeplan does not model:
accepted at a release that has it, carried to the exports, named once as not modelled; refused with
the nearest names and the releases that have it otherwise. Also: a null layout key is not stated,
and ``sequence_parallel: true`` with TP = 1 is turned off as the frameworks do."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from moeplan import load_scenario, validate
from moeplan.catalog.models import get_model
from moeplan.cli.app import app
from moeplan.errors import InputError
from moeplan.inputs import megatron_keys as mk
from moeplan.inputs.layout import LayoutSpec
from moeplan.inputs.resolved import NEWEST_MCORE
from moeplan.inputs.schema import ScenarioInput
from moeplan.io.export import export
from moeplan.resolve.defaults import framework_defaults, resolve

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()

#: real Megatron keys users' configs set that moeplan does not model, with a value each, and the
#: megatron-core release each first appears in (read from the tags: core_v0.16.1 has
#: moe_hybridep_num_sms, core_v0.17.1 moe_permute_fusion_into_hybridep and
#: megatron_fsdp_main_grads_dtype, core_v0.19.0 moe_flex_dispatcher_num_sms, the dev branch
#: chunked_optimizer_state_offload; the rest are in every release from 0.14)
LISTED = {
    "fp8_recipe": ("blockwise", "0.14.0"),
    "moe_hybridep_num_sms": (32, "0.16.1"),
    "moe_permute_fusion_into_hybridep": (True, "0.17.1"),
    "moe_flex_dispatcher_num_sms": (24, "0.19.0"),
    "chunked_optimizer_state_offload": (True, "0.20.0.dev0"),
    "megatron_fsdp_main_grads_dtype": ("bf16", "0.17.1"),
    "activation_func_fp8_input_store": (True, "0.14.0"),
    "bias_activation_fusion": (True, "0.14.0"),
    "overlap_p2p_comm": (True, "0.14.0"),
    "num_layers_per_virtual_pipeline_stage": (4, "0.14.0"),
    "variable_seq_lengths": (True, "0.14.0"),
    "batch_p2p_comm": (False, "0.14.0"),
}

BASE = {
    "model": "Mixtral-8x7B",
    "system": {"gpu": "h100", "num_gpus": 64},
    "training": {"seq_length": 4096, "micro_batch_size": 1, "global_batch_size": 256},
}


def _layout(**extra) -> dict:
    lay = {"tensor_model_parallel_size": 2, "expert_model_parallel_size": 8, "expert_tensor_parallel_size": 1}
    return {**BASE, "layout": {**lay, **extra}}


def test_tables_cover_four_core_releases_and_two_bridge_releases_with_their_commits():
    doc = mk.table()
    core, bridge = mk.releases("megatron-core"), mk.releases("megatron-bridge")
    assert len([r for r in core if "dev" not in r]) >= 4 and len(bridge) >= 2
    assert set(doc["header"]["megatron_core_sources"]) == set(core)
    assert all(re.fullmatch(r"[0-9a-f]{40}", s["commit"]) for s in doc["header"]["megatron_core_sources"].values())
    assert set(doc["header"]["megatron_bridge_sources"]) == set(bridge)
    for fw in mk.TABLES:
        order = mk.releases(fw)
        keys = mk.table_keys(fw)
        for key in keys[:: max(1, len(keys) // 50)]:
            for p in mk.lookup(key):
                if p.table != fw:
                    continue
                present = mk.present_in(p)
                assert present, key
                assert all(r in order for r, _ in p.defaults), key
                assert p.defaults[0][0] == present[0], key  # the first default is the first release's


def test_every_listed_key_is_accepted_at_the_release_that_first_has_it_and_refused_before():
    for key, (_value, first) in LISTED.items():
        assert mk.key_status(key) == "accepted", key
        assert mk.key_status(key, mcore=first) == "accepted", key
        have = mk.releases_having(key)["megatron-core"]
        assert have[0] == first, key
        earlier = [r for r in mk.releases("megatron-core") if r < first and "dev" not in r]
        for rel in earlier:
            assert mk.key_status(key, mcore=rel) == "unknown", (key, rel)


def test_key_only_in_unmerged_changes_is_in_no_table():
    # gated_delta_rule_backend appears only on unmerged pull-request branches of Megatron-LM, in no
    # release tag nor the dev branch: no table has it, so it is an input error naming its neighbours
    assert mk.releases_having("gated_delta_rule_backend") == {}
    with pytest.raises(InputError) as exc:
        load_scenario(_layout(gated_delta_rule_backend="flashqla"))
    assert exc.value.field == "layout.gated_delta_rule_backend"


def test_typo_names_the_nearest_keys():
    with pytest.raises(InputError) as exc:
        load_scenario(_layout(moe_flex_dispatchr_num_sms=24))
    text = str(exc.value)
    assert exc.value.field == "layout.moe_flex_dispatchr_num_sms"
    assert "did you mean 'moe_flex_dispatcher_num_sms'" in text


def test_key_of_a_later_release_stated_at_an_earlier_one_names_the_releases_that_have_it():
    data = {**_layout(moe_flex_dispatcher_num_sms=24), "versions": {"megatron_core": "0.16.0"}}
    with pytest.raises(InputError) as exc:
        load_scenario(data)
    text = str(exc.value)
    assert exc.value.field == "layout.moe_flex_dispatcher_num_sms"
    assert "megatron-core 0.16.0" in text and "megatron-core 0.19.0–" in text
    # at the release that has it, accepted
    ok = load_scenario({**data, "versions": {"megatron_core": "0.19.0"}})
    assert ok.input.unmodelled_keys == {"moe_flex_dispatcher_num_sms": 24}


def test_modelled_keys_stay_in_the_layout_and_unmodelled_ones_move_aside():
    s = load_scenario(_layout(overlap_p2p_comm=True, sequence_parallel=True))
    assert s.input.unmodelled_keys == {"overlap_p2p_comm": True}
    assert "overlap_p2p_comm" not in s.input.layout.model_fields_set
    assert mk.key_status("sequence_parallel", LayoutSpec.model_fields) == "modelled"


def _write(tmp_path: Path, data: dict) -> Path:
    import yaml

    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump(data), encoding="utf-8")
    return p


def test_scenario_with_every_listed_key_checks_and_names_them_once_as_not_modelled(tmp_path):
    path = _write(tmp_path, _layout(sequence_parallel=True, **{k: v for k, (v, _) in LISTED.items()}))
    for cmd in ("check", "estimate"):
        res = runner.invoke(app, [cmd, str(path)])
        assert res.exit_code in (0, 1), res.output
        flat = " ".join(res.output.split())  # lines wrap at the terminal width
        assert flat.count("not modelled (") == 1, res.output
        named = flat.split("not modelled (", 1)[1].split("warning: ", 1)
        for key, (value, _) in LISTED.items():
            # fp8_recipe is read as training.precision, the VPP key into VPP (here PP 1: no VPP)
            if key in ("fp8_recipe", *mk.DERIVED_KEYS):
                assert f"{key}=" not in named[0], key
            else:
                assert f"{key}={value}" in named[0], key
        assert flat.count("may move memory or step time") == 1, res.output
        assert "chunked_optimizer_state_offload" in named[1].split("may move memory")[0]


def test_export_writes_unmodelled_keys_to_bridge_yaml_and_megatron_lm_flags():
    s = load_scenario(_layout(sequence_parallel=True, **{k: v for k, (v, _) in LISTED.items()}))
    yaml_text, _ = export(s, "mbridge-yaml")
    assert "moe_flex_dispatcher_num_sms: 24" in yaml_text
    assert "chunked_optimizer_state_offload: true" in yaml_text
    assert re.search(r"comm_overlap: \{[^}]*overlap_p2p_comm: true", yaml_text)
    assert re.search(r"comm_overlap: \{[^}]*batch_p2p_comm: false", yaml_text)
    assert re.search(r"mixed_precision: \{[^}]*fp8_recipe: blockwise", yaml_text)
    args, notes = export(s, "megatron-lm-args")
    lines = args.splitlines()
    for line in (
        "--moe-flex-dispatcher-num-sms 24",
        "--moe-permute-fusion-into-hybridep",
        "--chunked-optimizer-state-offload",
        "--num-layers-per-virtual-pipeline-stage 4",
        "--megatron-fsdp-main-grads-dtype bf16",
        "--fp8-recipe blockwise",
    ):
        assert line in lines, line
    # overlap_p2p_comm is a store_false switch (--no-overlap-p2p-communication): true is its default
    assert any(n.startswith("overlap_p2p_comm=True is the Megatron-LM default") for n in notes)
    # variable_seq_lengths: Megatron-LM derives it, no flag
    assert any(n.startswith("variable_seq_lengths=True has no Megatron-LM flag") for n in notes)


def test_null_etp_in_a_layout_built_in_python_is_unset_and_warned_about():
    # Bridge's config dump writes an unset ETP as null; built as keyword arguments it was counted as
    # stated, so the warning that ETP silently follows TP (2 here, EP 8) stayed silent
    lay = LayoutSpec(
        tensor_model_parallel_size=2,
        expert_model_parallel_size=8,
        expert_tensor_parallel_size=None,
        sequence_parallel=True,
    )
    inp = ScenarioInput(model="Mixtral-8x7B", framework="megatron-core", layout=lay)
    s = resolve(inp)
    assert "expert_tensor_parallel_size" not in s.stated
    assert s.etp == 2
    assert "moe.etp_unset_follows_tp" in validate(s).rule_ids("warning")


@pytest.mark.parametrize(
    "framework,says",
    [("megatron-core", "Megatron-LM turns it off with a warning"), ("megatron-bridge", "finalize turns it off")],
)
def test_sequence_parallel_with_tp1_is_turned_off_with_a_warning(framework, says):
    data = {**BASE, "model": "meta-llama/Llama-3.1-8B", "framework": framework}
    data["layout"] = {"tensor_model_parallel_size": 1, "sequence_parallel": True}
    s = load_scenario(data)
    assert s.sp is False
    res = validate(s)
    assert "sequence.sp_requires_tp" not in res.rule_ids("error")
    (f,) = [f for f in res.findings if f.rule_id == "sequence.sp_requires_tp"]
    assert f.severity == "warning" and says in f.message
    assert any(r.key == "sequence_parallel" and r.value is False for r in s.resolutions)


# ------------------------------------------------------------------------------------------------
# hand-written defaults against the tables
# ------------------------------------------------------------------------------------------------

#: ``Source: `Class.field` ... unset: VALUE, Megatron's default`` in a LayoutSpec description
_CLAIM = re.compile(
    r"Source: `(\w+)\.(\w+)`.*?unset: ([^;.]*?),? (?:Megatron's|megatron-core's|megatron-core|Megatron-LM) default",
    re.S,
)
#: claims of a value megatron-core's ``__post_init__`` derives from a dataclass default of None
#: (model_parallel_config.py: microbatch_group_size_per_vp_stage None → PP; transformer_config.py:
#: recompute_modules None → ["core_attn"])
_POST_INIT = {"microbatch_group_size_per_vp_stage": "PP", "recompute_modules": "`[core_attn]`"}


def _norm(text: str | None) -> str:
    t = (text or "None").strip("`").lower()
    t = {"list()": "[]", "none": "none", "attnbackend.auto": "auto"}.get(t, t)
    return t.replace("'", "").replace('"', "")


def test_layout_descriptions_name_megatron_core_defaults_the_table_has():
    rel = mk.release_for("megatron-core", NEWEST_MCORE)
    claims = [(k, *m.groups()) for k, f in LayoutSpec.model_fields.items() if (m := _CLAIM.search(f.description or ""))]
    assert len(claims) >= 30
    for key, cls, field, claim in claims:
        (place,) = [p for p in mk.lookup(field) if p.table == "megatron-core" and p.at == cls] or [None]
        assert place is not None, (key, cls, field)
        got = mk.default_at(place, str(rel))
        if key in _POST_INIT:
            assert claim == _POST_INIT[key] and got == "None", (key, got)
            continue
        want = _norm(claim)
        assert _norm(got) == want or (want == "none" and _norm(got) == "[]"), (key, claim, got)


def test_parenthesised_megatron_defaults_in_layout_descriptions_equal_the_table():
    rel = str(mk.release_for("megatron-core", NEWEST_MCORE))
    pat = re.compile(r"\((megatron-core) default `?([^`)]+)`?\)|\((Megatron-LM) `--[\w-]+`, default `([^`]+)`\)")
    seen = 0
    for key, f in LayoutSpec.model_fields.items():
        for m in pat.finditer(f.description or ""):
            table, claim = (m.group(1), m.group(2)) if m.group(1) else (m.group(3), m.group(4))
            (place,) = [p for p in mk.lookup(key) if p.table == table.lower()]
            got = _norm(mk.default_at(place, rel)).strip("[]")  # nargs="+" defaults are lists
            assert got == _norm(claim), (key, table, claim, got)
            seen += 1
    assert seen >= 4


def test_resolved_megatron_core_defaults_equal_the_table():
    rel = str(mk.release_for("megatron-core", NEWEST_MCORE))
    moe = get_model("Mixtral-8x7B")
    for lay in (LayoutSpec(), LayoutSpec(moe_token_dispatcher_type="flex")):
        for r in framework_defaults(lay, moe, "megatron-core"):
            if "megatron-core default" not in r.reason:
                continue
            (place,) = [p for p in mk.lookup(r.key) if p.table == "megatron-core"]
            assert _norm(mk.default_at(place, rel)) == _norm(str(r.value)), (r.key, r.value)


@pytest.mark.skipif(
    not (mk_gen := ROOT / "scripts/gen_megatron_keys.py").exists()
    or not Path("/work/.mirror/NVIDIA+Megatron-LM/repo/HEAD").exists(),
    reason="no Megatron-LM git mirror here: the generator skips",
)
def test_generator_check_is_clean():
    proc = subprocess.run([sys.executable, str(mk_gen), "--check"], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr


def test_every_modelled_layout_key_exports_a_megatron_lm_flag_some_release_has():
    from moeplan.io.keys import MLM_UNSUPPORTED, mlm_flag

    flags = {p.flag for k in mk.table_keys("megatron-lm") for p in mk.lookup(k) if p.table == "megatron-lm"}
    missing = [k for k in LayoutSpec.model_fields if k not in MLM_UNSUPPORTED and mlm_flag(k) not in flags]
    assert missing == []
    # the uneven first / last stage counts: Megatron-LM spells them --decoder-{first,last}-pipeline-num-layers
    assert mlm_flag("num_layers_in_first_pipeline_stage") == "--decoder-first-pipeline-num-layers"


def test_generator_skips_with_a_message_without_the_mirrors(monkeypatch, capsys, tmp_path):
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import gen_megatron_keys as gen
    finally:
        sys.path.pop(0)
    monkeypatch.setattr(gen, "MLM_REPO", tmp_path / "none")
    monkeypatch.setattr(gen, "OUT", tmp_path / "out.json")
    assert gen.main(["--check"]) == 0
    assert "skipped: no Megatron-LM / Megatron Bridge git mirror" in capsys.readouterr().err
    assert not (tmp_path / "out.json").exists()


def test_a_megatron_lm_flag_reads_back_as_its_key():
    dest, arg = mk.argument_for_flag("--moe-flex-dispatcher-num-sms")
    assert dest == "moe_flex_dispatcher_num_sms" and arg.action is None
    dest, arg = mk.argument_for_flag("--no-overlap-p2p-communication")
    assert dest == "overlap_p2p_comm" and arg.action == "store_false"
    assert mk.argument_for_flag("--no-such-flag") is None


def _vpp_scenario(**layout):
    return {
        "model": "Qwen/Qwen3-30B-A3B",  # 48 layers
        "system": {"gpu": "h100", "num_gpus": 64},
        "training": {"seq_length": 4096, "micro_batch_size": 1, "global_batch_size": 256},
        "layout": {"pipeline_model_parallel_size": 4, "expert_model_parallel_size": 8, **layout},
    }


def test_layers_per_virtual_stage_sets_vpp_as_megatron_lm_derives_it():
    # 48 layers / PP 4 = 12 per stage; 12 / 6 = VPP 2 (Megatron-LM validate_args)
    s = load_scenario(_vpp_scenario(num_layers_per_virtual_pipeline_stage=6))
    assert s.layout.virtual_pipeline_model_parallel_size == 2
    assert any(r.key == "virtual_pipeline_model_parallel_size" and r.value == 2 for r in s.resolutions)
    # 12 per stage / 12 = 1: no interleaving (Megatron-LM sets VPP to None)
    assert (
        load_scenario(
            _vpp_scenario(num_layers_per_virtual_pipeline_stage=12)
        ).layout.virtual_pipeline_model_parallel_size
        is None
    )
    # a stated VPP wins; the number of virtual stages per rank is VPP itself
    stated = _vpp_scenario(num_layers_per_virtual_pipeline_stage=6, virtual_pipeline_model_parallel_size=3)
    assert load_scenario(stated).layout.virtual_pipeline_model_parallel_size == 3
    assert (
        load_scenario(_vpp_scenario(num_virtual_stages_per_pipeline_rank=4)).layout.virtual_pipeline_model_parallel_size
        == 4
    )


def test_layers_per_virtual_stage_that_does_not_divide_a_stage_is_an_input_error():
    with pytest.raises(InputError) as e:
        load_scenario(_vpp_scenario(num_layers_per_virtual_pipeline_stage=5))
    assert e.value.field == "layout.num_layers_per_virtual_pipeline_stage" and "12 layers per stage" in str(e.value)


def test_a_key_read_into_vpp_is_not_listed_as_not_modelled():
    out = CliRunner().invoke(
        app,
        [
            "check",
            "--model",
            "Qwen/Qwen3-30B-A3B",
            "--gpu",
            "h100",
            "--num-gpus",
            "64",
            "--seq-length",
            "4096",
            "--pp",
            "4",
            "--ep",
            "8",
            "--set",
            "layout.num_layers_per_virtual_pipeline_stage=6",
        ],
    )
    assert "VPP2" in out.output and "not modelled" not in out.output


def test_precision_keys_under_layout_set_the_training_precision():
    assert load_scenario(_layout(fp8_recipe="blockwise")).training.precision == "fp8-blockwise"
    assert (
        load_scenario(_layout(fp8="hybrid")).training.precision == "fp8-delayed"
    )  # TransformerConfig's default recipe
    assert load_scenario(_layout(fp4="e2m1", bf16=True)).training.precision == "nvfp4"
    same = _layout(fp8_recipe="mxfp8")
    same["training"] = {**same["training"], "precision": "mxfp8"}
    assert load_scenario(same).input.unmodelled_keys == {}
    other = _layout(fp8_recipe="blockwise")
    other["training"] = {**other["training"], "precision": "bf16"}
    with pytest.raises(InputError) as e:
        load_scenario(other)
    assert e.value.field == "layout.fp8_recipe" and "training.precision='bf16'" in str(e.value)
    with pytest.raises(InputError) as e:
        load_scenario(_layout(fp16=True))
    assert e.value.field == "layout.fp16"
