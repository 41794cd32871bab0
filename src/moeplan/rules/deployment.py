"""Deployment: the builds and settings of the communication libraries under the MoE dispatchers and
the collectives (DeepEP, HybridEP, NCCL), from the facts of ``catalog/data/comm_libraries.yaml``
(:mod:`moeplan.catalog.comm_libraries`, each with its public source).

Each check takes the scenario and a :class:`Deployment` — what is known of where it runs. ``check``
builds it from the scenario (:func:`scenario_deployment`: ``system.ep_library_build``,
``system.gpus_per_node``, ``environment:``); ``moeplan doctor`` from the machine (the installed
``deep_ep`` build, ``nvidia-smi topo -m``, the environment) and runs the same checks
(:func:`deployment_findings`). A fact whose input is not known is not judged (never guessed).

Rules (``deployment.<fact id>``):

- ``deepep_internode_nvshmem``: DeepEP with EP·ETP > 8 on a build without NVSHMEM (error);
- ``deepep_rank_count``: DeepEP with EP·ETP > 8 and not a multiple of 8 (error);
- ``deepep_config_ranks``: DeepEP with an EP·ETP its config tables do not list (error; 48 and 96 only
  with ``versions.deepep`` stated at or below the release without them);
- ``deepep_nvlink_peers``: fewer NVLink peers per node than min(EP·ETP, 8) for DeepEP (error);
- ``deepep_num_sms_even``: an odd ``moe_deepep_num_sms`` (error);
- ``hybridep_multinode_build``: HybridEP with EP·ETP beyond one NVLink domain on a build without
  ``HYBRID_EP_MULTINODE`` (error);
- ``hybridep_ranks_per_domain``: ``NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN`` that is no integer,
  not positive, does not divide EP·ETP or exceeds the GPUs that reach each other over NVLink (error);
- ``hybridep_mnnvl_off``: ``USE_MNNVL=0`` with HybridEP across the nodes of an NVL72 domain (warning);
- ``nccl_ib_disabled``: ``NCCL_IB_DISABLE=1`` on a job that spans nodes (warning).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import cast

from packaging.version import Version

from moeplan.catalog.comm_libraries import comm_fact, hybridep_reach_gpus
from moeplan.i18n.messages import Message, msg
from moeplan.inputs.resolved import Scenario
from moeplan.rules.base import Finding, Severity, rule, set_key
from moeplan.structure.hybridep_env import (
    DOMAIN_VARIABLE,
    MNNVL_VARIABLE,
    hybridep_domain,
    stated_ranks_per_domain,
    usable_stated_ranks,
)
from moeplan.structure.hybridep_env import hybridep_ranks_per_domain as domain_ranks

#: the table the facts come from, named in each rule's source
TABLE = "catalog/data/comm_libraries.yaml"


@dataclass(frozen=True)
class Deployment:
    """What is known of where a scenario runs; None where it is not known (the check that needs it
    says nothing).

    Attributes:
        build: the ``deep_ep`` build options (``deepep-nvshmem``, ``hybridep-multinode``), None unknown.
        build_said: where :attr:`build` comes from, as a message (the scenario's key or the installed file).
        environment: the run's environment variables (name → value).
        environment_said: where :attr:`environment` comes from, as a message.
        nvlink_peers: GPUs of one node that reach each other over NVLink (count), None unknown.
        nvlink_said: where :attr:`nvlink_peers` comes from, as a message.
    """

    build: frozenset[str] | None = None
    build_said: str = ""
    environment: Mapping[str, str] = field(default_factory=dict)
    environment_said: str = ""
    nvlink_peers: int | None = None
    nvlink_said: str = ""


#: the last scenario asked and its deployment: each deployment rule asks for the same scenario's
_LAST: list = [None, None]


def scenario_deployment(s: Scenario) -> Deployment:
    """The deployment a scenario states: ``system.ep_library_build``, ``environment:`` and, as NVLink
    peers per node, min(``system.gpus_per_node``, the GPU's NVLink domain). Built once per scenario
    (every deployment rule of one check asks for the same scenario's)."""
    if _LAST[0] is s:
        return _LAST[1]
    stated = s.input.system.ep_library_build
    key = (
        None if stated is None else tuple(stated),
        tuple(s.environment.items()),
        s.gpus_per_node,
        None if s.gpu is None else s.gpu.scaleup_domain_gpus,
    )
    got = _BY_FACTS.get(key)  # a plan's candidates share their deployment: built once
    if got is None:
        if len(_BY_FACTS) > 256:
            _BY_FACTS.clear()
        got = _BY_FACTS[key] = _scenario_deployment(s)
    _LAST[1] = got
    _LAST[0] = s
    return got


#: deployments by what they are built from (the stated build, the environment, the GPUs per node and
#: the GPU's NVLink domain): :class:`Deployment` is frozen and its messages are plain values
_BY_FACTS: dict[tuple, Deployment] = {}


def _scenario_deployment(s: Scenario) -> Deployment:
    stated = s.input.system.ep_library_build
    peers = None
    if s.gpu is not None and s.gpus_per_node is not None:
        peers = min(s.gpus_per_node, s.gpu.scaleup_domain_gpus)
    return Deployment(
        build=None if stated is None else frozenset(stated),
        build_said=msg("deployment.said.build_stated", build=", ".join(stated or [])),
        environment=dict(s.environment),
        environment_said=msg("deployment.said.environment_stated"),
        nvlink_peers=peers,
        nvlink_said=msg("deployment.said.nvlink_stated", gpn=s.gpus_per_node),
    )


def flex_backend(s: Scenario) -> str | None:
    """The flex dispatcher backend in force (as :mod:`moeplan.rules.moe` reads it): ``deepep`` with the
    deprecated ``moe_enable_deepep``, else ``moe_flex_dispatcher_backend`` (DeepEP by default) with the
    flex dispatcher; None without flex."""
    lay = s.layout
    if lay.moe_enable_deepep:
        return "deepep"
    if lay.moe_token_dispatcher_type != "flex":
        return None
    return lay.moe_flex_dispatcher_backend or "deepep"


def _finding(fact_id: str, message: Message, fix: Message, *keys: str) -> Finding:
    """A finding of fact ``fact_id`` with the fact's severity, kind and source."""
    f = comm_fact(fact_id)
    severity = cast(Severity, f.severity)
    return Finding(f"deployment.{fact_id}", severity, message, fix, f.kind, f"{f.source} ({TABLE})", keys)


def _ep_group(s: Scenario) -> int:
    """Ranks of the dispatcher's group: EP·ETP (Megatron's flex dispatcher runs on the tp_ep group)."""
    return s.ep * s.etp


def deepep_internode_nvshmem(s: Scenario, d: Deployment) -> list[Finding]:
    """DeepEP with EP·ETP above its NVLink peers (8) on a build known to lack NVSHMEM."""
    peers = comm_fact("deepep_internode_nvshmem").value("max_nvl_peers")
    g = _ep_group(s)
    if flex_backend(s) != "deepep" or g <= peers or d.build is None or "deepep-nvshmem" in d.build:
        return []
    m = msg("deployment.deepep_internode_nvshmem", group=g, peers=peers, rdma=g // peers, said=d.build_said)
    fix = msg("deployment.deepep_internode_nvshmem.fix", peers=peers)
    return [_finding("deepep_internode_nvshmem", m, fix, "expert_model_parallel_size", "system.ep_library_build")]


def deepep_rank_count(s: Scenario, d: Deployment) -> list[Finding]:
    """DeepEP with EP·ETP above 8 and not a multiple of 8."""
    peers = comm_fact("deepep_rank_count").value("max_nvl_peers")
    g = _ep_group(s)
    if flex_backend(s) != "deepep" or g < peers or g % peers == 0:
        return []
    m = msg("deployment.deepep_rank_count", group=g, ep=s.ep, etp=s.etp, peers=peers)
    fix = msg("deployment.deepep_rank_count.fix", peers=peers, down=g // peers * peers, up=-(-g // peers) * peers)
    return [_finding("deepep_rank_count", m, fix, "expert_model_parallel_size", "expert_tensor_parallel_size")]


def deepep_config_ranks(s: Scenario, d: Deployment) -> list[Finding]:
    """DeepEP with a group size (EP·ETP ≥ 2) its config tables do not list; 48 and 96 are listed after
    the fact's release, so they are judged only with ``versions.deepep`` stated at or below it. A size
    ``deepep_rank_count`` refuses (above 8, not a multiple of 8) is left to that rule."""
    f = comm_fact("deepep_config_ranks")
    g, peers = _ep_group(s), comm_fact("deepep_rank_count").value("max_nvl_peers")
    if flex_backend(s) != "deepep" or g < 2 or g in f.value("ranks") or (g > peers and g % peers):
        return []
    if s.gpu is not None and not s.gpu.supports_deepep:  # moe.flex_dispatcher_backend_vs_gpu says that
        return []
    version = s.versions.get("deepep")
    old = version is not None and version <= Version(f.value("release"))
    newer = [] if old else f.value("ranks_after_release")
    if g in newer:
        return []
    listed = sorted(f.value("ranks") + newer)
    down = max((r for r in listed if r < g), default=listed[0])
    up = min((r for r in listed if r > g), default=listed[-1])
    m = msg("deployment.deepep_config_ranks", group=g, ep=s.ep, etp=s.etp, listed=", ".join(map(str, listed)))
    fix = msg("deployment.deepep_config_ranks.fix", sizes=" / ".join(map(str, sorted({down, up}))))
    return [_finding("deepep_config_ranks", m, fix, "expert_model_parallel_size", "expert_tensor_parallel_size")]


def deepep_nvlink_peers(s: Scenario, d: Deployment) -> list[Finding]:
    """DeepEP whose NVLink half (min(EP·ETP, 8) consecutive ranks) does not fit the node's NVLink peers;
    not on a GPU DeepEP does not support at all (``moe.flex_dispatcher_backend_vs_gpu`` says that)."""
    peers = comm_fact("deepep_nvlink_peers").value("max_nvl_peers")
    need = min(_ep_group(s), peers)
    if flex_backend(s) != "deepep" or d.nvlink_peers is None or d.nvlink_peers >= need:
        return []
    if s.gpu is not None and not s.gpu.supports_deepep:
        return []
    m = msg("deployment.deepep_nvlink_peers", need=need, group=_ep_group(s), have=d.nvlink_peers, said=d.nvlink_said)
    fix = msg("deployment.deepep_nvlink_peers.fix", need=need)
    return [_finding("deepep_nvlink_peers", m, fix, "expert_model_parallel_size", "system.gpus_per_node")]


def deepep_num_sms_even(s: Scenario, d: Deployment) -> list[Finding]:
    """An odd ``moe_deepep_num_sms`` with DeepEP in force."""
    n = s.layout.moe_deepep_num_sms
    multiple = comm_fact("deepep_num_sms_even").value("multiple")
    if flex_backend(s) != "deepep" or n is None or n % multiple == 0:
        return []
    m = msg("deployment.deepep_num_sms_even", n=n)
    return [_finding("deepep_num_sms_even", m, set_key("moe_deepep_num_sms", n + 1), "moe_deepep_num_sms")]


def hybridep_multinode_build(s: Scenario, d: Deployment) -> list[Finding]:
    """HybridEP with EP·ETP beyond one NVLink domain (the one it runs with:
    :func:`moeplan.structure.hybridep_env.hybridep_ranks_per_domain` of the environment and the NVLink
    reach) on a build known to lack ``HYBRID_EP_MULTINODE``."""
    g = _ep_group(s)
    if flex_backend(s) != "hybridep" or s.gpu is None or d.build is None or "hybridep-multinode" in d.build:
        return []
    # the domain HybridEP runs with: the stated variable when it can, else the NVLink reach (USE_MNNVL)
    reach = cast(int, hybridep_reach_gpus(s, d.environment))
    if g <= cast(int, domain_ranks(d.environment, g, reach)):
        return []
    domain = usable_stated_ranks(d.environment, g, reach) or reach
    m = msg("deployment.hybridep_multinode_build", group=g, domain=domain, said=d.build_said)
    fix = msg("deployment.hybridep_multinode_build.fix", domain=domain)
    return [_finding("hybridep_multinode_build", m, fix, "expert_model_parallel_size", "system.ep_library_build")]


def nccl_ib_disabled(s: Scenario, d: Deployment) -> list[Finding]:
    """``NCCL_IB_DISABLE=1`` on a job whose world spans more than one node."""
    off = comm_fact("nccl_ib_disabled").value("disabled")
    if d.environment.get("NCCL_IB_DISABLE", "").strip() != off or s.num_gpus is None or s.gpus_per_node is None:
        return []
    if s.num_gpus <= s.gpus_per_node:
        return []
    nodes = -(-s.num_gpus // s.gpus_per_node)
    m = msg("deployment.nccl_ib_disabled", nodes=nodes, said=d.environment_said)
    return [_finding("nccl_ib_disabled", m, msg("deployment.nccl_ib_disabled.fix"), "environment.NCCL_IB_DISABLE")]


def hybridep_ranks_per_domain(s: Scenario, d: Deployment) -> list[Finding]:
    """``NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN`` set, with HybridEP in force, to a value HybridEPBuffer
    stops on at start-up (:mod:`moeplan.structure.hybridep_env`): text Python's ``int()`` refuses
    (``ValueError``), 0 or less (``ZeroDivisionError``, or a negative domain), a number that does
    not divide EP·ETP (its assertion), or more ranks than reach each other over NVLink
    (:func:`moeplan.catalog.comm_libraries.hybridep_reach_gpus`: HybridEP shares its buffers among that
    many ranks, through fabric handles or CUDA IPC, which do not reach beyond the NVLink domain)."""
    if flex_backend(s) != "hybridep":
        return []
    g = _ep_group(s)
    try:
        n = stated_ranks_per_domain(d.environment)
    except ValueError:
        n = 0
    reach = hybridep_reach_gpus(s, d.environment)
    if n is None or (n > 0 and g % n == 0 and (reach is None or n <= reach)):
        return []
    if n > 0 and g % n == 0:
        m = msg("deployment.hybridep_ranks_per_domain_beyond_nvlink", n=n, reach=reach, said=d.environment_said)
        fix = msg("deployment.hybridep_ranks_per_domain_beyond_nvlink.fix", best=hybridep_domain(g, cast(int, reach)))
        return [_finding("hybridep_ranks_per_domain", m, fix, "environment." + DOMAIN_VARIABLE)]
    if n > 0:
        m = msg("deployment.hybridep_ranks_per_domain", n=n, group=g, said=d.environment_said)
    else:
        text = d.environment.get(DOMAIN_VARIABLE, "")
        m = msg("deployment.hybridep_ranks_per_domain_not_positive", value=repr(text[:40]), said=d.environment_said)
    fix = msg("deployment.hybridep_ranks_per_domain.fix", group=g)
    return [_finding("hybridep_ranks_per_domain", m, fix, "environment." + DOMAIN_VARIABLE)]


def hybridep_mnnvl_off(s: Scenario, d: Deployment) -> list[Finding]:
    """``USE_MNNVL`` off with HybridEP on an NVLink domain wider than a node (NVL72) and an EP·ETP group
    wider than a node: the ranks of the domain's other nodes are reached over RDMA, not NVLink."""
    reach = hybridep_reach_gpus(s, d.environment)  # the node's GPUs exactly when USE_MNNVL is off across nodes
    if flex_backend(s) != "hybridep" or s.gpu is None or reach is None or reach >= s.gpu.scaleup_domain_gpus:
        return []
    gpn, domain, g = reach, s.gpu.scaleup_domain_gpus, _ep_group(s)
    if g <= gpn:
        return []
    value = d.environment.get(MNNVL_VARIABLE, "").strip()
    m = msg("deployment.hybridep_mnnvl_off", value=value, said=d.environment_said, gpn=gpn, domain=domain, group=g)
    return [_finding("hybridep_mnnvl_off", m, msg("deployment.hybridep_mnnvl_off.fix"), "environment.USE_MNNVL")]


def deployment_findings(s: Scenario, d: Deployment) -> list[Finding]:
    """Every deployment check of scenario ``s`` against deployment ``d`` (the machine's, for ``doctor``)."""
    return [f for check in CHECKS for f in check(s, d)]


_DEEPEP = "DeepEP v1.2.1 (deepseek-ai/DeepEP; " + TABLE + ")"
_HYBRIDEP = "DeepEP hybrid-ep branch (deepseek-ai/DeepEP; " + TABLE + ")"

#: every deployment check in report order, each also a rule of ``moeplan check`` (id ``deployment.<check
#: name>``, judged on the scenario's own deployment, :func:`scenario_deployment`): (check, source, statement, kind)
_RULES: tuple[tuple[Callable[[Scenario, Deployment], list[Finding]], str, str, str], ...] = (
    (
        deepep_internode_nvshmem,
        _DEEPEP,
        "DeepEP with EP·ETP > 8 runs its internode kernels over NVSHMEM (IBGDA): a build without NVSHMEM asserts",
        "unsupported",
    ),
    (deepep_rank_count, _DEEPEP, "DeepEP's group (EP·ETP) holds fewer than 8 ranks or a multiple of 8", "invalid"),
    (
        deepep_config_ranks,
        _DEEPEP,
        "DeepEP's group (EP·ETP) is a size its config tables list (2, 4, 8, 16, 24, 32, 64, 128, 144, 160; 48 "
        "and 96 after v1.2.1)",
        "invalid",
    ),
    (
        deepep_nvlink_peers,
        _DEEPEP,
        "DeepEP's normal kernels need min(EP·ETP, 8) NVLink peers per node (CUDA IPC between consecutive ranks)",
        "unsupported",
    ),
    (deepep_num_sms_even, _DEEPEP, "moe_deepep_num_sms is even (DeepEP's Buffer.set_num_sms asserts it)", "invalid"),
    (
        hybridep_multinode_build,
        "DeepEP hybrid-ep branch setup.py (" + TABLE + ")",
        "HybridEP with EP·ETP beyond one NVLink domain needs a HYBRID_EP_MULTINODE=1 build (RDMA)",
        "unsupported",
    ),
    (
        hybridep_ranks_per_domain,
        _HYBRIDEP,
        "NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN, when set, is a positive integer dividing EP·ETP (HybridEPBuffer "
        "reads it with int() and asserts the division)",
        "invalid",
    ),
    (
        hybridep_mnnvl_off,
        _HYBRIDEP,
        "USE_MNNVL=0 keeps HybridEP on CUDA IPC within a node: a multi-node NVLink domain is reached over RDMA",
        "invalid",
    ),
    (
        nccl_ib_disabled,
        "NCCL User Guide, NCCL_IB_DISABLE (" + TABLE + ")",
        "NCCL_IB_DISABLE=1 on a job that spans nodes sends the groups that cross nodes over IP sockets",
        "invalid",
    ),
)


#: every deployment check, in report order
CHECKS: tuple[Callable[[Scenario, Deployment], list[Finding]], ...] = tuple(entry[0] for entry in _RULES)


def _register(check: Callable[[Scenario, Deployment], list[Finding]], source: str, summary: str, kind: str) -> None:
    """Register ``check`` as the rule ``deployment.<its name>`` on the scenario's own deployment."""
    rule(f"deployment.{check.__name__}", source, summary, kind=kind)(lambda s, e: check(s, scenario_deployment(s)))


for _entry in _RULES:
    _register(*_entry)


__all__ = [
    "CHECKS",
    "TABLE",
    "Deployment",
    "deepep_config_ranks",
    "deepep_internode_nvshmem",
    "deepep_nvlink_peers",
    "deepep_num_sms_even",
    "deepep_rank_count",
    "deployment_findings",
    "flex_backend",
    "hybridep_mnnvl_off",
    "hybridep_multinode_build",
    "hybridep_ranks_per_domain",
    "nccl_ib_disabled",
    "scenario_deployment",
]
