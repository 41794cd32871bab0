"""Version strings as PEP 440 (rc, dev, post, local; free text is an input error naming the field) and
the container release → package versions table (NeMo Framework containers, Megatron Bridge's
docs/releases/software-versions.md)."""

from __future__ import annotations

import pytest
from packaging.version import Version

from moeplan.catalog.containers import ContainerTableError, container_table, lookup_container, parse_table
from moeplan.errors import InputError
from moeplan.inputs.resolved import NEWEST_BRIDGE, NEWEST_MCORE
from moeplan.inputs.versions import PACKAGES, container_release, release_version
from moeplan.inputs.versions import parse_version as parse_pep440
from moeplan.resolve.load import load_scenario


@pytest.mark.parametrize(
    "text,expected",
    [
        ("0.16.1", "0.16.1"),
        ("0.19.0rc1", "0.19.0rc1"),
        ("0.20.0.dev3", "0.20.0.dev3"),
        ("2.8.0.post1", "2.8.0.post1"),
        ("2.14+71bbefb", "2.14+71bbefb"),
        ("2.12.0a0+0291f960b6", "2.12.0a0+0291f960b6"),
        ("core_v0.16.0", "0.16.0"),
        ("core_r0.16.0", "0.16.0"),
        ("v0.16", "0.16"),
        ("r0.16.0", "0.16.0"),
        (" 0.15.0 ", "0.15.0"),
    ],
)
def test_pep440_versions_parse(text, expected):
    assert parse_pep440(text) == Version(expected)


def test_pre_dev_post_and_local_order_as_pep440():
    assert parse_pep440("0.19.0rc1") < parse_pep440("0.19.0")
    assert parse_pep440("0.19.0.dev0") < parse_pep440("0.19.0rc1")
    assert parse_pep440("0.19.0.post1") > parse_pep440("0.19.0")
    assert parse_pep440("2.14+71bbefb") > parse_pep440("2.14")


def test_rc_is_no_longer_read_as_a_patch_release():
    # the old parser read "0.19.0rc1" as 0.19.1 (digits of every dot part)
    assert str(release_version(parse_pep440("0.19.0rc1"), "0.20.0")) == "0.19.0"
    s = load_scenario({"versions": {"megatron_core": "0.19.0rc1"}})
    assert s.mcore_version == Version("0.19.0")
    assert s.versions.get("megatron_core") == Version("0.19.0rc1")


@pytest.mark.parametrize(
    "text", ["before PR 5401", "r2d2", "０.１６.１", "latest", "", "0.16.1 (patched)", "dev:0.15.0"]
)
def test_free_text_is_an_input_error_naming_the_field(text):
    with pytest.raises(InputError) as exc:
        load_scenario({"versions": {"megatron_core": text}})
    assert exc.value.field == "versions.megatron_core"
    assert "PEP 440" in exc.value.allowed


@pytest.mark.parametrize("key", PACKAGES)
def test_every_package_version_is_validated(key):
    with pytest.raises(InputError) as exc:
        load_scenario({"versions": {key: "before PR 5401"}})
    assert exc.value.field == f"versions.{key}"
    s = load_scenario({"versions": {key: "1.2.3rc1"}})
    assert s.versions.get(key) == Version("1.2.3rc1")
    assert s.versions.sources[key] == f"versions.{key}"


def test_old_parser_behaviour_kept_for_valid_inputs():
    assert str(release_version(parse_pep440("0.16.1"), "0.20.0")) == "0.16.1"
    assert str(release_version(parse_pep440("core_r0.16.0"), "0.20.0")) == "0.16.0"
    assert str(release_version(parse_pep440("v0.16"), "0.20.0")) == "0.16.0"
    assert str(release_version(None, "0.20.0")) == "0.20.0"
    assert str(load_scenario({}).mcore_version) == "0.20.0"
    assert load_scenario({}).versions.unknown() == list(PACKAGES)


def test_container_release_is_read_from_a_tag():
    assert container_release("nvcr.io/nvidia/nemo:26.04.01") == ("nemo", "26.04.01")
    assert container_release("26.04") == ("nemo", "26.04")
    assert container_release("nvcr.io/nvidia/pytorch:26.04-py3") == ("pytorch", "26.04")
    assert container_release("latest") is None
    assert container_release("25.09 or 25.11") is None


def test_container_map_rows_follow_the_bridge_release_notes():
    table = container_table()
    row = table[("nemo", "26.04")]
    assert row.packages == {
        "torch": "2.11.0a0+eb65b36914.nv26.02",
        "megatron_core": "0.17.0",
        "transformer_engine": "2.14+71bbefb",
        "megatron_bridge": "0.4.0",
    }
    assert "software-versions.md" in row.source
    assert table[("nemo", "25.09")].packages["megatron_bridge"] == "0.1.0rc3"
    assert table[("nemo", "26.06")].packages["megatron_core"] == "0.18.0"
    # 26.02.01 is 26.02 with Megatron Bridge r0.3.1 (known-issues.md: "Fixed in 26.02.01 (r0.3.1)")
    patch = table[("nemo", "26.02.01")].packages
    assert patch["megatron_bridge"] == "0.3.1" and patch["megatron_core"] == "0.16.0"
    for r in table.values():
        for text in r.packages.values():
            Version(text)


def test_container_fills_only_unstated_versions_and_records_each_fill():
    s = load_scenario({"versions": {"container": "nvcr.io/nvidia/nemo:26.04", "megatron_core": "0.17.1"}})
    assert s.versions.get("megatron_core") == Version("0.17.1")
    assert s.versions.get("transformer_engine") == Version("2.14+71bbefb")
    assert s.versions.get("megatron_bridge") == Version("0.4.0")
    assert s.versions.get("nccl") is None  # not in the release notes
    fills = {r.key: r for r in s.resolutions if r.key.startswith("versions.")}
    assert set(fills) == {"versions.torch", "versions.transformer_engine", "versions.megatron_bridge"}
    assert "nemo:26.04" in fills["versions.torch"].reason and "software-versions.md" in fills["versions.torch"].reason
    # the layout rules compare the stated release, else the container's: Bridge 0.4.0 from nemo:26.04's row
    assert s.mcore_version == Version("0.17.1") and s.bridge_version == Version("0.4.0")


def test_a_stated_container_sets_the_versions_the_layout_rules_compare():
    s = load_scenario({"versions": {"container": "nvcr.io/nvidia/nemo:25.11"}})
    assert s.versions.get("megatron_core") == Version("0.15.0")
    assert s.versions.sources["megatron_core"].startswith("container 25.11")
    # the rules, the planner and the export all take the container's releases (nemo:25.11: megatron-core
    # 0.15.0, Megatron Bridge 0.2.0), so that a plan never relies on a key the export would leave out
    assert s.mcore_version == Version("0.15.0") and s.bridge_version == Version("0.2.0")
    stated = load_scenario({"versions": {"container": "25.11", "megatron_core": "0.15.1"}})
    assert stated.mcore_version == Version("0.15.1")
    none = load_scenario({})
    assert none.mcore_version == Version(NEWEST_MCORE) and none.bridge_version == Version(NEWEST_BRIDGE)


def test_patch_release_not_in_the_table_uses_its_base_release_and_says_so():
    row, note = lookup_container("nemo", "26.04.07")
    assert row is not None and row.release == "26.04" and "not in the table" in note
    row, note = lookup_container("nemo", "24.03")
    assert row is None and "not in moeplan's container table" in note
    s = load_scenario({"versions": {"container": "24.03"}})
    assert s.versions.known() == {} and "24.03" in s.versions.container_note


@pytest.mark.parametrize(
    "bad",
    [
        {"schema": 1, "families": {"nemo": {"26.04": {"source": "x", "packages": {"cuda": "13.1"}}}}},
        {"schema": 1, "families": {"nemo": {"26.04": {"source": "x", "packages": {"torch": "two point eleven"}}}}},
        {"schema": 1, "families": {"nemo": {"26.04": {"packages": {"torch": "2.11"}}}}},
        {"schema": 1, "families": {"nemo": {"26.04": {"source": "x", "colour": "green"}}}},
        {"schema": 1, "families": {"nemo": {"26.04.01": {"source": "x", "inherits": "26.03"}}}},
        {"schema": 2, "families": {}},
    ],
)
def test_container_table_is_validated_on_load(bad):
    with pytest.raises(ContainerTableError):
        parse_table(bad)


def test_a_layout_key_is_checked_at_the_release_the_container_ships():
    # activation_offload_fraction is a megatron-core 0.19+ key; nemo:25.11 ships 0.15.0, as a stated 0.15.0 would
    data = {"model": "Qwen/Qwen3-30B-A3B", "layout": {"activation_offload_fraction": 0.5}}
    for versions in ({"container": "25.11"}, {"megatron_core": "0.15.0"}):
        with pytest.raises(InputError) as got:
            load_scenario({**data, "versions": versions})
        assert got.value.field == "layout.activation_offload_fraction" and "0.19.0" in str(got.value)
    # the newest release, and a container whose megatron-core is stated newer, have it
    assert load_scenario(data).input.unmodelled_keys == {"activation_offload_fraction": 0.5}
    load_scenario({**data, "versions": {"container": "25.11", "megatron_core": "0.19.0"}})
