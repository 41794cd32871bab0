"""Deployment facts of the communication libraries (DeepEP, HybridEP, NCCL): each fact fires on a
scenario that breaks it and stays quiet on its near miss, in `check` from the scenario and in `doctor`
from the machine; and the one line on versions not stated, in check / estimate / plan."""

from __future__ import annotations

import copy
import json
from types import SimpleNamespace

import pytest
import yaml
from typer.testing import CliRunner

from moeplan import load_scenario
from moeplan.catalog.comm_libraries import CommTableError, comm_facts, parse_facts
from moeplan.cli.app import app
from moeplan.diagnose import doctor
from moeplan.rules import validate

runner = CliRunner()

#: Qwen3-30B-A3B (128 routed experts) on two 8-GPU H100 nodes, the flex dispatcher on DeepEP
BASE = {
    "model": "Qwen/Qwen3-30B-A3B",
    "system": {"gpu": "h100", "num_gpus": 16},
    "training": {"seq_length": 4096, "micro_batch_size": 1, "global_batch_size": 64, "precision": "bf16"},
    "layout": {"expert_model_parallel_size": 16, "moe_token_dispatcher_type": "flex"},
}


def _scenario(system=None, layout=None, environment=None) -> dict:
    d = copy.deepcopy(BASE)
    d["system"].update(system or {})
    d["layout"].update(layout or {})
    if environment:
        d["environment"] = environment
    return d


def _deployment(d: dict) -> dict:
    """Rule id → the deployment findings of the scenario."""
    out: dict = {}
    for f in validate(load_scenario(d)).findings:
        if f.rule_id.startswith("deployment."):
            out.setdefault(f.rule_id, []).append(f)
    return out


def test_every_fact_has_a_source_and_the_table_refuses_unknown_keys():
    assert set(comm_facts()) == {
        "deepep_internode_nvshmem",
        "deepep_rank_count",
        "deepep_config_ranks",
        "deepep_nvlink_peers",
        "deepep_num_sms_even",
        "hybridep_multinode_build",
        "hybridep_ranks_per_domain",
        "hybridep_mnnvl_off",
        "nccl_ib_disabled",
    }
    assert all(f.source and f.statement for f in comm_facts().values())
    with pytest.raises(CommTableError):
        parse_facts({"schema": 1, "facts": {"x": {"library": "DeepEP", "severity": "error"}}})
    row = {"library": "HybridEP", "severity": "warning", "kind": "warn", "statement": "s", "source": "src"}
    with pytest.raises(CommTableError, match="value names must be strings"):
        # YAML reads the bare name `off` as the boolean False
        parse_facts({"schema": 1, "facts": {"x": {**row, "values": yaml.safe_load("{off: ['0']}")}}})


def test_deepep_internode_on_a_build_without_nvshmem_is_an_error():
    # EP 16 > DeepEP's 8 NVLink peers: 16 / 8 = 2 RDMA ranks, which need NVSHMEM
    f = _deployment(_scenario(system={"ep_library_build": []}))["deployment.deepep_internode_nvshmem"][0]
    assert f.severity == "error" and f.kind == "unsupported"
    assert "EP·ETP = 16 ranks is 2 RDMA ranks of 8 NVLink peers" in f.message
    assert "system.ep_library_build: []" in f.message
    assert "rebuild DeepEP with NVSHMEM" in f.fix and "EP·ETP ≤ 8" in f.fix
    assert "DeepEP v1.2.1" in f.source and "deep_ep.cpp" in f.source


def test_deepep_internode_near_misses_are_quiet():
    # the build has NVSHMEM; the build is not stated; EP 8 stays on NVLink (intranode kernels)
    assert not _deployment(_scenario(system={"ep_library_build": ["deepep-nvshmem"]}))
    assert not _deployment(_scenario())
    assert not _deployment(_scenario(system={"ep_library_build": []}, layout={"expert_model_parallel_size": 8}))


def test_deepep_group_above_8_and_not_a_multiple_of_8_is_an_error():
    f = _deployment(_scenario(system={"num_gpus": 24}, layout={"expert_model_parallel_size": 12}))
    (one,) = f["deployment.deepep_rank_count"]
    assert "EP·ETP = 12 (EP 12 × ETP 1) is above 8 but not a multiple of 8" in one.message
    assert one.fix == "use EP·ETP = 8 or 16 (multiples of 8), or fewer than 8"
    assert "deployment.deepep_rank_count" not in _deployment(_scenario())  # 16: a multiple of 8
    assert not _deployment(_scenario(system={"num_gpus": 8}, layout={"expert_model_parallel_size": 4}))


def test_deepep_needs_min_ep_8_nvlink_peers_per_node():
    # 4 GPUs per node are NVLink peers, EP 8 needs 8 consecutive ranks on NVLink
    f = _deployment(_scenario(system={"gpus_per_node": 4}, layout={"expert_model_parallel_size": 8}))
    (one,) = f["deployment.deepep_nvlink_peers"]
    assert "min(EP·ETP, 8) = 8 consecutive ranks" in one.message and "only 4 GPUs" in one.message
    assert "system.gpus_per_node = 4" in one.message
    # near misses: 8 GPUs per node; EP 4 within 4 NVLink peers
    assert not _deployment(_scenario(layout={"expert_model_parallel_size": 8}))
    assert not _deployment(_scenario(system={"gpus_per_node": 4}, layout={"expert_model_parallel_size": 4}))


def test_odd_deepep_sms_is_an_error_and_even_passes():
    f = _deployment(_scenario(layout={"expert_model_parallel_size": 8, "moe_deepep_num_sms": 21}))
    (one,) = f["deployment.deepep_num_sms_even"]
    assert (
        one.message == "moe_deepep_num_sms = 21 is odd: DeepEP's Buffer.set_num_sms asserts 'The SM count must be even'"
    )
    assert one.fix == "set moe_deepep_num_sms: 22"
    assert not _deployment(_scenario(layout={"expert_model_parallel_size": 8, "moe_deepep_num_sms": 20}))


def test_hybridep_beyond_one_nvlink_domain_needs_the_multinode_build():
    gb200 = {"gpu": "gb200", "num_gpus": 256, "ep_library_build": ["deepep-nvshmem"]}
    hybrid = {"moe_flex_dispatcher_backend": "hybridep"}
    f = _deployment(_scenario(system=gb200, layout={**hybrid, "expert_model_parallel_size": 128}))
    (one,) = f["deployment.hybridep_multinode_build"]
    assert "EP·ETP = 128 ranks spans more than one NVLink domain (72 GPUs)" in one.message
    assert "HYBRID_EP_MULTINODE=1" in one.fix and "EP·ETP ≤ 72" in one.fix
    # near misses: EP 64 inside the 72-GPU domain; the multinode build stated
    assert not _deployment(_scenario(system=gb200, layout={**hybrid, "expert_model_parallel_size": 64}))
    built = {**gb200, "ep_library_build": ["hybridep-multinode"]}
    assert not _deployment(_scenario(system=built, layout={**hybrid, "expert_model_parallel_size": 128}))


HYBRID = {"moe_flex_dispatcher_backend": "hybridep"}


def test_hybridep_ranks_per_domain_must_divide_the_group():
    env = {"NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN": "12"}
    f = _deployment(_scenario(layout=HYBRID, environment=env))
    (one,) = f["deployment.hybridep_ranks_per_domain"]  # 16 % 12 = 4
    assert "= 12 (the scenario's environment) does not divide HybridEP's group EP·ETP = 16" in one.message
    assert "a divisor of 16" in one.fix
    # near misses: 8 divides 16, and so does " 08 " as Python's int() reads it; the same value with DeepEP in force
    for ok in ("8", " 08 ", "+8"):
        assert not _deployment(_scenario(layout=HYBRID, environment={"NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN": ok}))
    assert "deployment.hybridep_ranks_per_domain" not in _deployment(_scenario(environment=env))


@pytest.mark.parametrize("value", ["x", "", "8.0", "0", "-8"])
def test_hybridep_ranks_per_domain_that_hybridep_cannot_use_is_an_error(value):
    """HybridEPBuffer reads the variable with int(): "x", "" and "8.0" raise ValueError at buffer creation,
    "0" raises ZeroDivisionError in its divisibility assertion, and "-8" passes it (16 % -8 == 0) but gives
    negative rank indices; each is an error naming the variable and the value as written."""
    env = {"NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN": value}
    (one,) = _deployment(_scenario(layout=HYBRID, environment=env))["deployment.hybridep_ranks_per_domain"]
    assert one.severity == "error"
    assert f"NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN = {value!r} (the scenario's environment)" in one.message
    assert "is not a positive integer" in one.message
    assert "a divisor of 16" in one.fix


DEEPEP = {"moe_token_dispatcher_type": "flex", "moe_flex_dispatcher_backend": "deepep"}


@pytest.mark.parametrize(
    ("ep", "version", "error"),
    [
        (256, None, True),  # a multiple of 8 the tables do not list: Buffer.get_dispatch_config asserts
        (6, None, True),  # under 8 but not 2 or 4
        (64, None, False),
        (48, None, False),  # listed since c939644: not judged without versions.deepep
        (48, "1.2.1", True),  # v1.2.1's tables have no 48
        (48, "1.2.2", False),
        (12, None, False),  # deployment.deepep_rank_count reports it (above 8, not a multiple of 8)
    ],
)
def test_deepep_group_size_must_be_in_its_config_tables(ep, version, error):
    data = _scenario(system={"num_gpus": 768}, layout={**DEEPEP, "expert_model_parallel_size": ep})
    data["model"] = "MiniMaxAI/MiniMax-M2.5"  # 256 routed experts: every EP here divides them or is refused apart
    if version:
        data["versions"] = {"deepep": version}
    found = _deployment(data).get("deployment.deepep_config_ranks", [])
    assert [f.severity for f in found] == (["error"] if error else [])
    if error and ep == 6:
        assert "EP·ETP = 4 / 8 (the nearest sizes listed)" in found[0].fix
    if error and ep == 256:
        assert "(2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 144, 160)" in found[0].message
        assert "EP·ETP = 160 (the nearest sizes listed)" in found[0].fix


def test_deepep_config_ranks_match_the_buffer_tables():
    """The sizes the rule accepts (with the later ones) are the keys of the config tables the memory model
    sizes DeepEP's buffers from: one list of DeepEP's sizes, read two ways."""
    from moeplan.catalog.comm_libraries import comm_fact
    from moeplan.model.memory.dispatcher_buffers import DEEPEP_COMBINE, DEEPEP_DISPATCH

    f = comm_fact("deepep_config_ranks")
    sizes = set(f.value("ranks")) | set(f.value("ranks_after_release"))
    assert sizes == set(DEEPEP_DISPATCH) == set(DEEPEP_COMBINE)


def test_hybridep_ranks_per_domain_beyond_nvlink_is_an_error_and_not_costed():
    """16 on two 8-GPU H100 nodes divides EP 16, but HybridEP would share its buffers among 16 ranks that do
    not all reach each other over NVLink (8 do): an error with the value that works (8), and the time and
    memory models keep the 8 HybridEP detects."""
    from moeplan.model.memory.dispatcher_buffers import hybridep_nvlink_ranks

    env = {"NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN": "16"}
    d = _scenario(layout=HYBRID, environment=env)
    (one,) = _deployment(d)["deployment.hybridep_ranks_per_domain"]
    assert "is more ranks than reach each other over NVLink (8 GPUs)" in one.message
    assert "set it to 8" in one.fix
    assert hybridep_nvlink_ranks(load_scenario(d)) == 8


def test_mnnvl_off_limits_hybridep_to_the_node_in_the_models_and_the_export():
    """USE_MNNVL=0 on GB200 (4 GPUs per tray, a 72-GPU NVLink domain): HybridEP's CUDA IPC reaches the tray's
    4 GPUs, so EP 32 runs in 32 / 4 = 8 domains: the time and memory models use 4, the export writes 4 (not 32),
    and a stated 32 is refused as beyond NVLink."""
    from moeplan.io.export import layout_environment
    from moeplan.model.memory.dispatcher_buffers import hybridep_nvlink_ranks

    gb200 = {"gpu": "gb200", "num_gpus": 64}
    layout = {**HYBRID, "expert_model_parallel_size": 32}
    off = load_scenario(_scenario(system=gb200, layout=layout, environment={"USE_MNNVL": "0"}))
    on = load_scenario(_scenario(system=gb200, layout=layout))
    assert hybridep_nvlink_ranks(off) == 4 and hybridep_nvlink_ranks(on) == 32
    assert layout_environment(off, include_user=False)["NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN"] == "4"
    assert layout_environment(on)["NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN"] == "32"
    both = {"USE_MNNVL": "0", "NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN": "32"}
    (one,) = _deployment(_scenario(system=gb200, layout=layout, environment=both))[
        "deployment.hybridep_ranks_per_domain"
    ]
    assert "(4 GPUs)" in one.message and "set it to 4" in one.fix


def test_multinode_build_is_judged_on_the_domain_hybridep_runs_with():
    """NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN=8 splits EP 16 on GB200 into two domains joined over RDMA:
    a build without HYBRID_EP_MULTINODE cannot run it, though NVL72 could hold all 16 ranks."""
    gb200 = {"gpu": "gb200", "num_gpus": 16, "ep_library_build": []}
    layout = {**HYBRID, "expert_model_parallel_size": 16}
    env = {"NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN": "8"}
    assert "deployment.hybridep_multinode_build" in _deployment(_scenario(system=gb200, layout=layout, environment=env))
    assert "deployment.hybridep_multinode_build" not in _deployment(_scenario(system=gb200, layout=layout))


@pytest.mark.parametrize("value", ["³", "abc", "0"])
def test_hybridep_chunk_variable_is_read_as_c_atoi_without_a_crash(value):
    """HybridEP reads NUM_OF_TOKENS_PER_CHUNK_COMBINE_API with C's atoi: "³" and "abc" read as 0, which pads
    nothing (hybrid_ep_pad_num_of_tokens_per_rank); the token-limit rule judges the unpadded buffer (65,536
    tokens per rank at EP 128 across two NVL72 domains: over 21,844) instead of failing on int("³")."""
    data = _scenario(
        system={"gpu": "gb200", "num_gpus": 128},
        layout={**HYBRID, "expert_model_parallel_size": 128},
        environment={"NUM_OF_TOKENS_PER_CHUNK_COMBINE_API": value},
    )
    data["training"]["seq_length"] = 65536
    found = [f for f in validate(load_scenario(data)).findings if f.rule_id == "moe.hybridep_internode_token_limit"]
    assert [f.severity for f in found] == ["error"] and "buffer 65,536" in found[0].message


def test_mnnvl_off_on_an_nvl72_group_wider_than_a_node_warns():
    # GB200: 4 GPUs per node in a 72-GPU NVLink domain; EP 8 spans two nodes of the domain
    gb200 = {"gpu": "gb200", "num_gpus": 16}
    f = _deployment(
        _scenario(system=gb200, layout={**HYBRID, "expert_model_parallel_size": 8}, environment={"USE_MNNVL": "0"})
    )
    (one,) = f["deployment.hybridep_mnnvl_off"]
    assert one.severity == "warning"
    assert "only the 4 GPUs of one node, though the NVLink domain spans 72 GPUs" in one.message
    assert one.fix.startswith("unset USE_MNNVL")
    # near misses: EP 4 within a node; H100, whose NVLink domain is one node; USE_MNNVL=1
    within = _scenario(system=gb200, layout={**HYBRID, "expert_model_parallel_size": 4}, environment={"USE_MNNVL": "0"})
    assert not _deployment(within)
    assert not _deployment(
        _scenario(layout={**HYBRID, "expert_model_parallel_size": 16}, environment={"USE_MNNVL": "0"})
    )
    on = _scenario(system=gb200, layout={**HYBRID, "expert_model_parallel_size": 8}, environment={"USE_MNNVL": "1"})
    assert not _deployment(on)


def test_nccl_ib_disabled_on_two_nodes_warns_and_on_one_node_does_not():
    f = _deployment(_scenario(layout={"expert_model_parallel_size": 8}, environment={"NCCL_IB_DISABLE": "1"}))
    (one,) = f["deployment.nccl_ib_disabled"]
    assert one.severity == "warning" and "the job spans 2 nodes" in one.message
    assert one.fix == "unset NCCL_IB_DISABLE (or set it to 0) for multi-node runs"
    assert "NCCL_IB_DISABLE" in one.source
    one_node = _scenario(system={"num_gpus": 8}, layout={"expert_model_parallel_size": 8})
    assert not _deployment({**one_node, "environment": {"NCCL_IB_DISABLE": "1"}})
    assert not _deployment(_scenario(layout={"expert_model_parallel_size": 8}, environment={"NCCL_IB_DISABLE": "0"}))


# --- doctor: the same facts from the machine -------------------------------------------------------


def _no_gpu_no_deepep(monkeypatch):
    monkeypatch.setattr(doctor, "_gpus_nvml", lambda rep: False)
    monkeypatch.setattr(doctor, "_gpus_smi", lambda rep: setattr(rep, "gpu_error", "no nvidia-smi"))
    monkeypatch.setattr(doctor, "deepep_build", lambda: (None, None))


def test_doctor_without_gpu_or_deepep_names_what_it_could_not_check(monkeypatch):
    _no_gpu_no_deepep(monkeypatch)
    res = runner.invoke(app, ["doctor", "--json"])
    assert res.exit_code == 0, res.output
    (info,) = [f for f in json.loads(res.output)["findings"] if f["rule"] == "deployment.machine"]
    assert info["severity"] == "info"
    assert "the NVLink peers per node (no GPU visible" in info["message"]
    assert "the DeepEP build (no deep_ep_cpp extension found" in info["message"]


def test_doctor_reports_a_deepep_build_without_nvshmem_for_an_internode_scenario(monkeypatch, tmp_path):
    _no_gpu_no_deepep(monkeypatch)
    monkeypatch.setattr(doctor, "deepep_build", lambda: (frozenset(), "/opt/deep_ep_cpp.so"))
    path = tmp_path / "internode.yaml"
    path.write_text(yaml.safe_dump(_scenario()))
    res = runner.invoke(app, ["doctor", "--scenario", str(path), "--json"])
    (f,) = [f for f in json.loads(res.output)["findings"] if f["rule"] == "deployment.deepep_internode_nvshmem"]
    assert f["severity"] == "error" and "the installed build /opt/deep_ep_cpp.so" in f["message"]
    assert f["fix"].startswith("rebuild DeepEP with NVSHMEM") and "DeepEP v1.2.1" in f["source"]
    text = runner.invoke(app, ["doctor", "--scenario", str(path)]).output
    assert "deployment.deepep_internode_nvshmem" in " ".join(text.split())


def test_deepep_build_is_read_from_the_extension_file(monkeypatch, tmp_path):
    so = tmp_path / "deep_ep_cpp.so"
    monkeypatch.setattr(doctor.importlib.util, "find_spec", lambda name: SimpleNamespace(origin=str(so)))
    so.write_bytes(b"\x7fELF...NVSHMEM is disabled during compilation...")
    assert doctor.deepep_build() == (frozenset(), str(so))
    so.write_bytes(b"\x7fELF...libnvshmem_host.so.3...")
    assert doctor.deepep_build() == (frozenset({"deepep-nvshmem"}), str(so))
    monkeypatch.setattr(doctor.importlib.util, "find_spec", lambda name: None)
    assert doctor.deepep_build() == (None, None)


def test_the_no_nvshmem_mark_is_found_across_read_chunks(tmp_path):
    so = tmp_path / "deep_ep_cpp.so"
    so.write_bytes(b"x" * 13 + doctor.NO_NVSHMEM_MARK + b"y" * 13)
    # chunks of 5 bytes split the 38-byte mark across 8 reads
    assert doctor._scan(str(so), chunk=5) == (True, True)
    so.write_bytes(b"x" * 13 + b"y" * 13)
    assert doctor._scan(str(so), chunk=5) == (False, False)


def test_nvlink_peers_are_counted_from_the_topology_matrix():
    topo = (
        "\tGPU0\tGPU1\tGPU2\tGPU3\tNIC0\tCPU Affinity\n"
        "GPU0\t X \tNV18\tNV18\tNV18\tPXB\t0-55\n"
        "GPU1\tNV18\t X \tNV18\tNV18\tPXB\t0-55\n"
        "GPU2\tNV18\tNV18\t X \tNV18\tSYS\t56-111\n"
        "GPU3\tNV18\tNV18\tNV18\t X \tSYS\t56-111\n"
    )
    assert doctor.nvlink_peers(topo) == 4
    assert doctor.nvlink_peers(topo.replace("GPU3\tNV18\tNV18\tNV18", "GPU3\tSYS\tSYS\tSYS")) == 1
    assert doctor.nvlink_peers(None) is None and doctor.nvlink_peers("no matrix") is None


# --- versions not stated: one line, naming the container assumed -----------------------------------

GB300 = "examples/deepseek_v3_gb300.yaml"


def _lines(args: list[str]) -> list[str]:
    res = runner.invoke(app, args, env={"COLUMNS": "2000"}, terminal_width=2000)
    assert res.exit_code in (0, 1), res.output
    return [line for line in res.output.splitlines() if "versions not stated" in line]


@pytest.mark.parametrize("command", ["check", "estimate"])
def test_versions_not_stated_is_one_line_naming_the_assumed_container(command):
    (line,) = _lines([command, GB300])
    # 7 issues match the layout; at nemo:26.06 (megatron-core 0.18.0) only the EP-overlap event
    # deadlock (megatron-core >= 0.14, no fix) applies; the two NCCL issues need versions.nccl
    assert "7 known issue(s) may apply" in line
    assert "moeplan assumes the newest container it knows, nemo:26.06 (" in line and "megatron-core 0.18.0" in line
    assert "and 1 of the 7 apply there" in line
    assert "stating versions.container decides 5 of them, versions.nccl the other 2" in line


def test_plan_says_versions_not_stated_once():
    # every layout key held, so the search is short; the known issues still leave versions open
    args = ["plan", "--model", "Qwen/Qwen3-30B-A3B", "--gpu", "h100", "--num-gpus", "8", "--seq-length", "4096"]
    held = ["--tp", "1", "--pp", "1", "--cp", "1", "--ep", "8", "--etp", "1"]
    (line,) = _lines([*args, *held, "--gbs", "64", "--top", "1"])
    assert "nemo:26.06" in line


def test_stated_versions_leave_no_versions_line(tmp_path):
    with open(GB300, encoding="utf-8") as fh:
        data = yaml.safe_load(fh)
    data["versions"] = {"container": "26.06", "nccl": "2.27.7"}
    path = tmp_path / "stated.yaml"
    path.write_text(yaml.safe_dump(data))
    for command in ("check", "estimate"):
        assert _lines([command, str(path)]) == []


@pytest.mark.parametrize(
    ("text", "want"),
    [("64", 64), (" \t64abc", 64), ("+8", 8), ("-8", -8), ("000000000000128", 128), ("12.5", 12), ("³", 0), ("", 0)]
    + [("99999999999", 2**31 - 1), ("-99999999999", -(2**31))],
)
def test_c_atoi_reads_as_c_does(text, want):
    """C's atoi: leading white space, an optional sign, ASCII digits to the first other character (leading
    zeros add nothing), 0 without digits; an overflow (undefined in C) is clamped to int's range."""
    from moeplan.structure.hybridep_env import c_atoi

    assert c_atoi(text) == want
