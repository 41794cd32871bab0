"""Concepts defined once and read by every caller: the Megatron Bridge perf-recipe file has one loader;
versions are one type (``packaging.version.Version``, compared by the layout rules as
:func:`~moeplan.inputs.versions.release_version`); a container release name has one parser
(:func:`~moeplan.inputs.versions.find_release`); the tracked packages are one list
(:data:`~moeplan.inputs.versions.COMPONENTS`); ``PYTORCH_CUDA_ALLOC_CONF`` has one reader
(:func:`~moeplan.inputs.allocator.expandable_segments`)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from packaging.version import Version

from moeplan.api.known_issues import known_issues_report
from moeplan.catalog.perf_recipes import perf_recipes
from moeplan.diagnose import doctor
from moeplan.errors import InputError, UnknownNameError
from moeplan.inputs.resolved import NEWEST_BRIDGE, NEWEST_MCORE
from moeplan.inputs.schema import VersionsInput
from moeplan.inputs.versions import (
    COMPONENTS,
    CUDA_GRAPH_MODULES_MCORE,
    PACKAGE_NAMES,
    PACKAGES,
    container_release,
    find_release,
    parse_version,
    release_version,
)
from moeplan.model.constants import release_of
from moeplan.model.constants_fit import load_runs_yaml
from moeplan.model.memory import estimate_memory, step_phase
from moeplan.model.memory import static as memory_static
from moeplan.model.time import notes
from moeplan.plan import starting_points
from moeplan.resolve.load import load_scenario
from moeplan.resolve.recipe_fills import nemo_release
from moeplan.rules import attention, graphs, moe, precision, recompute, validate, world

SRC = Path(__file__).resolve().parents[1] / "src" / "moeplan"


def _sources() -> dict[str, str]:
    return {str(p.relative_to(SRC)): p.read_text(encoding="utf-8") for p in sorted(SRC.rglob("*.py"))}


# --- the perf-recipe file: one loader ---------------------------------------------------------


@pytest.mark.parametrize("name", ["mbridge_perf_recipes.yaml", "mbridge_perf_recipes_by_release.yaml"])
def test_each_perf_recipe_file_is_read_by_the_catalog_loader_only(name):
    readers = [path for path, text in _sources().items() if f'"{name}"' in text]
    assert readers == ["catalog/perf_recipes.py"]


def test_the_starting_points_list_the_catalog_recipe_rows():
    assert starting_points.perf_recipes is perf_recipes
    assert not hasattr(starting_points, "published_recipes")


# --- versions: one type, the comparisons of the tuple form kept -------------------------------


def _old_release_tuple(v: Version) -> tuple[int, int, int]:
    """The (major, minor, micro) form the layout rules compared before: epoch, pre/post/dev
    release, local label and a fourth number dropped."""
    rel = (*v.release, 0, 0)[:3]
    return (int(rel[0]), int(rel[1]), int(rel[2]))


#: every release threshold the rules, the models and the exports compare, with the tuple it was
THRESHOLDS = {
    "CUDA_GRAPH_MODULES_MCORE": (CUDA_GRAPH_MODULES_MCORE, (0, 18, 0)),
    "KEY_MIN_MCORE moe_expert_rank_capacity_factor": (
        world.KEY_MIN_MCORE["moe_expert_rank_capacity_factor"],
        (0, 18, 0),
    ),
    "KEY_MIN_MCORE moe_paged_stash": (world.KEY_MIN_MCORE["moe_paged_stash"], (0, 18, 0)),
    "KEY_MIN_MCORE use_transformer_engine_op_fuser": (
        world.KEY_MIN_MCORE["use_transformer_engine_op_fuser"],
        (0, 18, 0),
    ),
    "KEY_MIN_MCORE cuda_graph_modules": (world.KEY_MIN_MCORE["cuda_graph_modules"], (0, 18, 0)),
    "KEY_MIN_MCORE cp_partition_mode": (world.KEY_MIN_MCORE["cp_partition_mode"], (0, 21, 0)),
    "BACKEND_MIN_MCORE hybridep": (moe.BACKEND_MIN_MCORE["hybridep"], (0, 15, 0)),
    "BACKEND_MIN_MCORE ncclep": (moe.BACKEND_MIN_MCORE["ncclep"], (0, 19, 0)),
    "MOE_RECOMPUTE_EP_OVERLAP_MCORE": (moe.MOE_RECOMPUTE_EP_OVERLAP_MCORE, (0, 20, 0)),
    "FLEX_NUM_SMS_MCORE": (moe.FLEX_NUM_SMS_MCORE, (0, 19, 0)),
    "TE_CE_FUSION_REFUSED_MCORE": (precision.TE_CE_FUSION_REFUSED_MCORE, (0, 19, 0)),
    "GDN_RECOMPUTE_MCORE": (recompute.GDN_RECOMPUTE_MCORE, (0, 19, 0)),
    "GQA_TP_RELAXED_MCORE": (attention.GQA_TP_RELAXED_MCORE, (0, 16, 0)),
    "GDN_CP_MIN_MCORE": (attention.GDN_CP_MIN_MCORE, (0, 18, 0)),
    "VISION_GRAPHS_BRIDGE": (graphs.VISION_GRAPHS_BRIDGE, (0, 5, 0)),
    "FUSED_HYBRIDEP_MCORE": (notes.FUSED_HYBRIDEP_MCORE, (0, 16, 0)),
    "PINNED_MASTER_AFTER_MCORE": (memory_static.PINNED_MASTER_AFTER_MCORE, (0, 20, 0)),
    "TE_FUSED_BF16_UNSCALE": (step_phase.TE_FUSED_BF16_UNSCALE, (2, 14, 0)),
    "NEWEST_MCORE": (release_version(None, NEWEST_MCORE), (0, 20, 0)),
}


def _sign(a, b) -> int:
    return (a > b) - (a < b)


def _same_comparisons(text: str) -> None:
    v = parse_version(text)
    new, old = release_version(v, "0"), _old_release_tuple(v)
    assert str(new) == ".".join(map(str, old)), text  # what the messages print
    for name, (const, old_const) in THRESHOLDS.items():
        assert _sign(new, const) == _sign(old, old_const), (text, name)


@pytest.mark.parametrize(
    "text",
    ["0.15.2", "0.16.0rc1", "0.16.1", "0.17.0", "0.17.0rc0", "1!0.1", "0.18.0.dev3", "0.20.0.post1", "2.14+71bbefb"],
)
def test_release_comparisons_are_those_of_the_tuple_form(text):
    _same_comparisons(text)


_pep440 = st.builds(
    lambda epoch, release, pre, post, dev, local: (
        (f"{epoch}!" if epoch else "")
        + ".".join(map(str, release))
        + (f"{pre[0]}{pre[1]}" if pre else "")
        + (f".post{post}" if post is not None else "")
        + (f".dev{dev}" if dev is not None else "")
        + (f"+{local}" if local else "")
    ),
    st.integers(0, 2),
    st.lists(st.integers(0, 25), min_size=1, max_size=4),
    st.none() | st.tuples(st.sampled_from(["a", "b", "rc"]), st.integers(0, 3)),
    st.none() | st.integers(0, 3),
    st.none() | st.integers(0, 3),
    st.none() | st.sampled_from(["71bbefb", "nv26.02"]),
)


@given(_pep440, _pep440)
def test_release_comparisons_match_the_tuple_form_for_any_pep440_versions(a, b):
    _same_comparisons(a)
    va, vb = parse_version(a), parse_version(b)
    assert _sign(release_version(va, "0"), release_version(vb, "0")) == _sign(
        _old_release_tuple(va), _old_release_tuple(vb)
    )


def test_a_release_candidate_is_checked_as_its_release_and_an_epoch_is_dropped():
    # PEP 440 orders 0.16.0rc1 before 0.16.0 (the known-issue ranges see that) ...
    assert parse_version("0.16.0rc1") < Version("0.16.0") and parse_version("0.17.0rc0") < Version("0.17.0")
    # ... the layout rules check a release candidate as the release it precedes, as the tuple form did
    assert release_version(parse_version("0.16.0rc1"), "0") == Version("0.16.0")
    assert release_version(parse_version("0.17.0rc0"), "0") >= Version("0.17.0")
    # an epoch sorts 1!0.1 after every 0.x in PEP 440; the rules read its release, 0.1.0
    assert parse_version("1!0.1") > Version("0.20.0")
    assert str(release_version(parse_version("1!0.1"), "0")) == "0.1.0"
    assert str(release_version(None, NEWEST_BRIDGE)) == NEWEST_BRIDGE


@pytest.mark.parametrize(
    "version, refused",
    [("0.17.1", True), ("0.18.0rc1", False), ("0.18.0", False), ("1!0.1", True)],
)
def test_cuda_graph_modules_is_refused_below_0_18_by_release(version, refused):
    s = load_scenario(
        {
            "layout": {"cuda_graph_impl": "transformer_engine", "cuda_graph_modules": ["attn"]},
            "versions": {"megatron_core": version},
        }
    )
    ids = {f.rule_id for f in validate(s).errors if "cuda_graph_modules does not exist" in f.message}
    assert bool(ids) is refused
    assert s.versions.get("megatron_core") == parse_version(version)  # the full version is kept too


def test_no_version_is_written_as_a_tuple():
    compared = re.compile(r"version\w*\s*[<>=]=?\s*\(\d")
    literal = re.compile(r"(?<![\w\]])\(0, ?\d+(?:, ?\d+)?\)")
    found = {
        path: [m.group(0) for m in (*compared.finditer(text), *literal.finditer(text))]
        for path, text in _sources().items()
    }
    allowed = {"structure/stages.py", "inputs/model_spec.py"}  # stage indices and a value range
    assert {p: hits for p, hits in found.items() if hits and p not in allowed} == {}
    assert not any("release_tuple" in text for text in _sources().values())


# --- a container release name: one parser -----------------------------------------------------


@pytest.mark.parametrize(
    "text, release",
    [
        ("25.09", "25.09"),
        ("nemo:25.11.01", "25.11.01"),
        ("nvcr.io/nvidia/nemo:26.04.01", "26.04.01"),
        ("26.02-alpha", "26.02"),
        ("nvcr.io/nvidia/pytorch:26.04-py3", "26.04"),
        (None, None),
        ("", None),
        ("latest", None),
        ("25.9", None),
        ("125.09", None),
        ("25.09.1", None),
        ("25.09.01.02", None),
        ("25.09 or 25.11", None),
        ("25.09\n", None),
        ("２５.０９", None),
    ],
)
def test_a_container_release_is_read_the_same_by_every_reader(text, release):
    assert find_release(text) == release
    got = container_release(text)
    assert (got[1] if got else None) == release
    if text is None or "pytorch" not in text:
        assert nemo_release(text) == release
    if text is None or text.isprintable():  # a scenario refuses control characters before this
        scn = load_scenario({} if text is None else {"versions": {"container": text}})
        assert release_of(scn) == release


def _run(release: str) -> dict:
    return {
        "id": "a",
        "release": release,
        "scenario": {
            "model": "Qwen/Qwen3-30B-A3B",
            "system": {"gpu": "h100", "num_gpus": 16},
            "training": {"seq_length": 4096, "global_batch_size": 512},
            "layout": {"expert_model_parallel_size": 16},
        },
        "measured": {"tokens_per_s_per_gpu": 8000},
    }


@pytest.mark.parametrize("text", ["26.04", "26.04.01"])
def test_a_run_release_is_a_whole_release_name(text):
    assert load_runs_yaml({"runs": [_run(text)]})[0].release == text


@pytest.mark.parametrize("text", ["26.02-alpha", "nemo:26.04", "26.4", "２６.０４"])
def test_a_run_release_that_is_not_a_whole_release_name_is_an_input_error(text):
    with pytest.raises(InputError) as exc:
        load_runs_yaml({"runs": [_run(text)]})
    assert exc.value.field == "runs[0].release"


def test_the_release_pattern_is_written_once():
    pattern = re.compile(r"\\d\\d\\\.|\[0-9\]\{2\}\\\.")
    writers = [path for path, text in _sources().items() if pattern.search(text)]
    assert writers == ["inputs/versions.py"]


# --- the tracked packages: one list -----------------------------------------------------------


def test_the_tracked_packages_are_one_list():
    assert PACKAGES == ("megatron_core", "megatron_bridge", "transformer_engine", "torch", "nccl", "deepep")
    assert set(VersionsInput.model_fields) - {"container"} == set(PACKAGES)
    assert PACKAGE_NAMES["transformer_engine"] == "Transformer Engine"
    # doctor reads the installed packages of the same list (by import name) and nvidia-ml-py
    assert doctor.PACKAGES == {
        "megatron_core": ("megatron-core", "megatron_core"),
        "megatron_bridge": ("megatron-bridge", "megatron_bridge"),
        "transformer_engine": ("transformer_engine", "transformer-engine", "transformer_engine_torch"),
        "torch": ("torch",),
        "deep_ep": ("deep_ep", "deep-ep"),
        "nvidia_ml_py": ("nvidia-ml-py",),
    }
    installed = {key: "1.2.3" for key in doctor.PACKAGES}
    report = doctor.EnvironmentReport(packages=installed, nccl="2.27.3")
    assert set(doctor.installed_versions(report)[0]) == set(PACKAGES)  # NCCL from torch's build
    assert doctor.MODULES["megatron_core"] == "megatron.core"
    assert [c.key for c in COMPONENTS if c.module is None] == ["nccl"]


@pytest.mark.parametrize(
    "spelling, key",
    [("te", "transformer_engine"), ("mcore", "megatron_core"), ("HybridEP", "deepep"), ("pytorch", "torch")],
)
def test_known_issues_take_every_spelling_of_a_package(spelling, key):
    assert known_issues_report(package=spelling) == known_issues_report(package=key)


def test_known_issues_name_the_packages_for_an_unknown_one():
    with pytest.raises(UnknownNameError) as exc:
        known_issues_report(package="apex")
    assert "megatron_core" in str(exc.value)


# --- PYTORCH_CUDA_ALLOC_CONF: the rule and the memory model read it alike ---------------------


@pytest.mark.parametrize(
    "conf, on",
    [
        ("expandable_segments:True", True),
        ("expandable_segments: True", True),
        (" expandable_segments:True ", True),
        ("expandable_segments:False", False),
    ],
)
def test_the_graph_rule_and_the_fragmentation_term_read_expandable_segments_alike(conf, on):
    s = load_scenario(
        {
            "model": "Qwen/Qwen3-30B-A3B",
            "system": {"gpu": "h100", "num_gpus": 64},
            "training": {"seq_length": 4096, "global_batch_size": 512},
            "layout": {
                "tensor_model_parallel_size": 2,
                "expert_model_parallel_size": 8,
                "cuda_graph_impl": "transformer_engine",
                "cuda_graph_scope": ["attn"],
            },
            "framework": "megatron-core",
            "environment": {"PYTORCH_CUDA_ALLOC_CONF": conf},
        }
    )
    fired = any(f.rule_id == "graphs.expandable_segments" for f in validate(s).findings)
    # the caching allocator's fragmentation: 10 % of the dynamic memory, half with expandable segments
    fraction = estimate_memory(s).overheads.fragmentation_fraction
    assert fired is on
    assert fraction == pytest.approx(0.05 if on else 0.10)


def test_the_expandable_segments_option_is_named_by_the_allocator_reader_only():
    readers = [path for path, text in _sources().items() if '"expandable_segments"' in text]
    assert readers == ["inputs/allocator.py"]
