"""Environment doctor: what this machine has (GPUs, driver, CUDA, NCCL, packages, topology, environment
variables) and whether it can run a scenario.

Collection (:func:`collect_environment`) and judgement (:func:`check_environment`) are separate so the
checks are testable with a hand-made :class:`EnvironmentReport`. GPU facts come from NVML
(``nvidia-ml-py``, optional extra ``gpu``), else ``nvidia-smi --query-gpu``; versions from package
metadata (no heavy import) except torch's CUDA/NCCL build, which needs ``import torch``.

Rules (id → severity):

- ``doctor.gpu_present``: no visible GPU — error with a scenario, info without;
- ``doctor.gpu_model``: the visible GPU is not the scenario's (warning: planning for another cluster is
  legitimate, but the estimates are for the scenario's GPU);
- ``doctor.precision_arch``: MXFP8/NVFP4 need compute capability ≥ 10.0 (Blackwell); FP8 needs ≥ 8.9
  (Transformer Engine requirements) — error;
- ``doctor.package``: torch, Transformer Engine, megatron-core (and megatron-bridge for a Bridge
  scenario) must be installed — error; a flex dispatcher backend (DeepEP / HybridEP, both in the
  ``deep_ep`` package) must be importable, since a missing backend fails at model construction — error;
- ``doctor.version``: installed megatron-core / bridge / TE / torch differ from the scenario's
  ``versions:`` — warning; known issues of the installed versions (NCCL from torch's build, DeepEP from
  ``deep_ep``) are reported as ``known_issue.*`` with their own severity (:func:`known_issue_findings`);
- ``doctor.environment``: each variable the layout needs (:func:`moeplan.io.export.layout_environment`)
  unset or different — warning, except ``NCCL_GRAPH_REGISTER`` (TE CUDA graphs with expandable
  segments) and ``NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN`` (HybridEP on NVL72), which are errors.
"""

from __future__ import annotations

import importlib.metadata as md
import importlib.util
import os
import re
import shutil
import subprocess
from dataclasses import asdict, dataclass, field

from moeplan.errors import InputError, MoeplanError, short_repr
from moeplan.i18n.messages import Items, Message, msg
from moeplan.inputs.allocator import ALLOC_CONF, alloc_options
from moeplan.inputs.policy import MAX_INT_DIGITS
from moeplan.inputs.versions import COMPONENTS, parse_version
from moeplan.io.export import layout_environment
from moeplan.resolve.load import load_scenario
from moeplan.rules import validate
from moeplan.rules.deployment import Deployment, deployment_findings, flex_backend

#: doctor's key of a tracked package: its import name with ``_`` for ``.`` (``megatron_core``, ``deep_ep``)
_DOCTOR_KEY = {c.key: c.module.replace(".", "_") for c in COMPONENTS if c.module is not None}
#: doctor's package key → the distribution names its version is read from (the tracked packages of
#: :data:`~moeplan.inputs.versions.COMPONENTS`, and nvidia-ml-py, which reads the GPUs)
PACKAGES: dict[str, tuple[str, ...]] = {
    **{_DOCTOR_KEY[c.key]: c.distributions for c in COMPONENTS if c.key in _DOCTOR_KEY},
    "nvidia_ml_py": ("nvidia-ml-py",),
}
#: doctor's package keys → the scenario's versions.* keys (the NCCL version comes from torch's build)
_VERSION_KEYS = {doctor: key for key, doctor in _DOCTOR_KEY.items()}
#: doctor's package key → the module imported to see whether it is usable
MODULES = {_DOCTOR_KEY[c.key]: c.module for c in COMPONENTS if c.module is not None}
ENV_PREFIXES = ("NCCL_", "NVTE_", "CUDA_", "PYTORCH_", "TORCH_NCCL_", "NUM_OF_HYBRID_EP", "NVSHMEM_", "UB_")


@dataclass
class EnvironmentReport:
    """Facts of one machine. ``gpus``: one dict per GPU (``name``, ``memory_bytes``,
    ``compute_capability``); versions as strings or None when absent."""

    gpus: list[dict] = field(default_factory=list)
    gpu_source: str = "none"
    gpu_error: str | None = None
    driver: str | None = None
    cuda_driver: str | None = None
    torch_cuda: str | None = None
    nccl: str | None = None
    packages: dict[str, str | None] = field(default_factory=dict)
    modules: dict[str, bool] = field(default_factory=dict)
    topology: str | None = None
    environment: dict[str, str] = field(default_factory=dict)
    ep_build: list[str] | None = None
    ep_build_file: str | None = None
    nvlink_peers: int | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def _version(dists: tuple[str, ...]) -> str | None:
    for d in dists:
        try:
            return md.version(d)
        except md.PackageNotFoundError:
            continue
    return None


def _has_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _gpus_nvml(rep: EnvironmentReport) -> bool:
    try:
        import pynvml
    except ImportError:
        return False
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # noqa: BLE001 - NVML raises its own error classes; any failure = no GPU
        rep.gpu_error = f"NVML: {exc}"
        return False
    try:
        rep.driver = pynvml.nvmlSystemGetDriverVersion()
        cv = pynvml.nvmlSystemGetCudaDriverVersion()
        rep.cuda_driver = f"{cv // 1000}.{cv % 1000 // 10}"
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(h)
            name = pynvml.nvmlDeviceGetName(h)
            rep.gpus.append(
                {
                    "name": name.decode() if isinstance(name, bytes) else name,
                    "memory_bytes": int(pynvml.nvmlDeviceGetMemoryInfo(h).total),
                    "compute_capability": major + minor / 10,
                }
            )
        rep.gpu_source = "nvml"
        return True
    finally:
        pynvml.nvmlShutdown()


def _gpus_smi(rep: EnvironmentReport) -> None:
    exe = shutil.which("nvidia-smi")
    if not exe:
        rep.gpu_error = rep.gpu_error or "no NVML (pip install 'moeplan[gpu]') and no nvidia-smi on PATH"
        return
    try:
        out = subprocess.run(
            [exe, "--query-gpu=name,memory.total,driver_version,compute_cap", "--format=csv,noheader,nounits"],
            capture_output=True,
            encoding="utf-8",
            errors="replace",
            timeout=20,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        rep.gpu_error = f"nvidia-smi: {exc}"
        return
    if out.returncode != 0:
        rep.gpu_error = f"nvidia-smi: {out.stderr.strip() or out.stdout.strip()}"
        return
    for line in out.stdout.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 4:
            try:
                rep.gpus.append(
                    {
                        "name": parts[0],
                        "memory_bytes": int(float(parts[1]) * 2**20),
                        "compute_capability": float(parts[3]),
                    }
                )
                rep.driver = parts[2]
            except ValueError:
                continue
    rep.gpu_source = "nvidia-smi" if rep.gpus else "none"


def collect_environment(with_torch: bool = True, with_topology: bool = True) -> EnvironmentReport:
    """Collect this machine's facts. Never raises: what cannot be read is None / empty with a reason."""
    rep = EnvironmentReport()
    rep.packages = {k: _version(v) for k, v in PACKAGES.items()}
    rep.modules = {k: _has_module(m) for k, m in MODULES.items()}
    if not _gpus_nvml(rep):
        _gpus_smi(rep)
    if with_torch and rep.modules.get("torch"):
        try:
            import torch

            rep.torch_cuda = torch.version.cuda
            if torch.cuda.is_available() and hasattr(torch.cuda, "nccl"):
                rep.nccl = ".".join(map(str, torch.cuda.nccl.version()))
        except Exception as exc:  # noqa: BLE001 - a broken torch install is a finding, not a crash
            rep.torch_cuda = f"import failed: {type(exc).__name__}"
    if with_topology and rep.gpus and shutil.which("nvidia-smi"):
        try:
            out = subprocess.run(
                ["nvidia-smi", "topo", "-m"], capture_output=True, encoding="utf-8", errors="replace", timeout=20
            )
            rep.topology = out.stdout.strip() or None
        except (OSError, subprocess.TimeoutExpired):
            rep.topology = None
    rep.environment = {k: v for k, v in os.environ.items() if k.startswith(ENV_PREFIXES)}
    build, rep.ep_build_file = deepep_build()
    rep.ep_build = None if build is None else sorted(build)
    rep.nvlink_peers = nvlink_peers(rep.topology)
    return rep


#: text compiled into a DeepEP extension built without NVSHMEM only (DeepEP v1.2.1 csrc/deep_ep.cpp
#: L39, L127, L929: assertions under ``#ifdef DISABLE_NVSHMEM`` / its ``#else`` branches)
NO_NVSHMEM_MARK = b"NVSHMEM is disabled during compilation"


def deepep_build(module: str = "deep_ep_cpp") -> tuple[frozenset[str] | None, str | None]:
    """The build options of the installed DeepEP extension (``module``, DeepEP v1.x's ``deep_ep_cpp``),
    read from its file without importing it: ``{"deepep-nvshmem"}`` when it links NVSHMEM, an empty
    set when it carries :data:`NO_NVSHMEM_MARK` (built with ``-DDISABLE_NVSHMEM``: DeepEP v1.2.1
    setup.py L19-29), and its path; ``(None, None)`` when no such extension is found or readable."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None, None
    origin = spec.origin if spec is not None else None
    if not origin or not os.path.isfile(origin):
        return None, None
    try:
        no_nvshmem, nvshmem = _scan(origin)
    except OSError:
        return None, None
    if no_nvshmem:
        return frozenset(), origin
    return (frozenset({"deepep-nvshmem"}) if nvshmem else None), origin


def _scan(path: str, chunk: int = 1 << 22) -> tuple[bool, bool]:
    """Whether the file holds :data:`NO_NVSHMEM_MARK`, and whether it names NVSHMEM at all (any case),
    read in chunks of ``chunk`` bytes (overlapping by the mark's length, so none is split unseen).

    Raises:
        OSError: the file cannot be read.
    """
    keep = len(NO_NVSHMEM_MARK)
    mark = named = False
    tail = b""
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            data = tail + block
            mark = mark or NO_NVSHMEM_MARK in data
            named = named or b"nvshmem" in data.lower()
            tail = data[-keep:]
    return mark, named


def nvlink_peers(topology: str | None) -> int | None:
    """GPUs of this node that reach each other over NVLink, from ``nvidia-smi topo -m``: one plus the
    fewest ``NV<n>`` entries of a GPU row among the GPU columns; None without a matrix."""
    if not topology:
        return None
    rows = [line.split() for line in topology.splitlines() if re.match(r"GPU\d+\s", line)]
    if not rows:
        return None
    n = len(rows)
    counts = [sum(1 for cell in row[1 : n + 1] if re.fullmatch(r"NV\d+", cell)) for row in rows]
    return 1 + min(counts)


def _finding(rule: str, severity: str, message: str, fix: str = "") -> dict:
    return {"rule": rule, "severity": severity, "message": message, "fix": fix}


def _norm(v: str | None) -> tuple[int, ...] | None:
    if not v:
        return None
    nums = re.findall(r"[0-9]+", v.split("+")[0])[:3]
    if not nums or any(len(x) > MAX_INT_DIGITS for x in nums):  # no version number is that long
        return None
    return tuple(int(x) for x in nums)


def _gpu_presence(rep: EnvironmentReport, s) -> list[dict]:
    """``doctor.gpu_present``: the GPUs seen (info), or none seen — an error when a scenario ``s`` is
    to run here, an info without one."""
    if not rep.gpus:
        return [
            _finding(
                "doctor.gpu_present",
                "error" if s is not None else "info",
                f"no GPU visible ({rep.gpu_error or 'none found'}); software versions are still reported",
                "run `moeplan doctor` on a training node (inside the container)" if s is not None else "",
            )
        ]
    names = sorted({g["name"] for g in rep.gpus})
    return [_finding("doctor.gpu_present", "info", f"{len(rep.gpus)} × {', '.join(names)} ({rep.gpu_source})")]


def _gpu_fit(rep: EnvironmentReport, s) -> list[dict]:
    """The GPUs seen against scenario ``s``: another model than the scenario's GPU (``doctor.gpu_model``,
    warning) and a compute capability below what the precision needs (``doctor.precision_arch``,
    error: MXFP8/NVFP4 ≥ 10.0, FP8 ≥ 8.9). Nothing when no GPU is seen or the scenario names none."""
    gpu = s.gpu
    if not rep.gpus or gpu is None:
        return []
    out = []
    tag = gpu.id.lower().replace("-", "")
    seen = rep.gpus[0]["name"].lower().replace("-", "").replace(" ", "")
    if tag not in seen:
        out.append(
            _finding(
                "doctor.gpu_model",
                "warning",
                f"the scenario is for {gpu.id} but this machine has {rep.gpus[0]['name']}",
                "estimates hold for the scenario's GPU; set system.gpu to this machine's to plan here",
            )
        )
    cc = min(g["compute_capability"] for g in rep.gpus)
    prec = s.training.precision
    need = 10.0 if prec in ("mxfp8", "nvfp4") else 8.9 if prec.startswith("fp8") else None
    if need is not None and cc < need:
        out.append(
            _finding(
                "doctor.precision_arch",
                "error",
                f"precision {prec} needs compute capability ≥ {need} but the GPU has {cc}",
                "use bf16 or an FP8 recipe this GPU supports (fp8 on Hopper: fp8-tensorwise / fp8-blockwise)",
            )
        )
    return out


def _packages(rep: EnvironmentReport, s) -> list[dict]:
    """``doctor.package`` errors: torch, Transformer Engine and megatron-core (megatron-bridge for a
    Bridge scenario ``s``) neither installed nor importable, and no ``deep_ep`` module for a DeepEP /
    HybridEP flex dispatcher."""
    out = []
    required = ["torch", "transformer_engine", "megatron_core"]
    if s.framework == "megatron-bridge":
        required.append("megatron_bridge")
    for pkg in required:
        if not rep.packages.get(pkg) and not rep.modules.get(pkg):
            out.append(
                _finding(
                    "doctor.package", "error", f"{pkg} is not installed", "use the NeMo / Megatron Bridge container"
                )
            )
    lay = s.layout
    flex = lay.moe_token_dispatcher_type == "flex" and lay.moe_flex_dispatcher_backend in ("deepep", "hybridep")
    if flex and not rep.modules.get("deep_ep"):
        out.append(
            _finding(
                "doctor.package",
                "error",
                f"moe_flex_dispatcher_backend={lay.moe_flex_dispatcher_backend} needs the deep_ep package "
                "(DeepEP / HybridEP); without it model construction fails",
                "install DeepEP (hybrid-ep branch for HybridEP) or use moe_token_dispatcher_type=alltoall",
            )
        )
    return out


def _versions(rep: EnvironmentReport, s) -> list[dict]:
    """``doctor.version`` warnings: an installed megatron-core / bridge / TE / torch / DeepEP / NCCL whose version (its
    leading numbers, as far as the scenario gives them) differs from the scenario's ``versions:``."""
    out = []
    installed = {**{key: rep.packages.get(pkg) for pkg, key in _VERSION_KEYS.items()}, "nccl": rep.nccl}
    for key, have_text in installed.items():
        want, have = _norm(getattr(s.input.versions, key)), _norm(have_text)
        if want and have and want != have[: len(want)]:
            out.append(
                _finding(
                    "doctor.version",
                    "warning",
                    f"versions.{key} is {getattr(s.input.versions, key)} but {have_text} is installed",
                    f"set versions.{key}: '{have_text}' so the rules check the installed version",
                )
            )
    return out


def _has_alloc_options(have: str, need: str) -> bool:
    """True when the ``PYTORCH_CUDA_ALLOC_CONF`` value ``have`` sets every option of ``need`` as
    PyTorch reads them (:func:`moeplan.inputs.allocator.alloc_options`: spaces ignored, values
    case-sensitive); False when PyTorch would refuse ``have``."""
    try:
        got = alloc_options(have)
    except InputError:
        return False
    return alloc_options(need).items() <= got.items()


def _environment_variables(rep: EnvironmentReport, s) -> list[dict]:
    """``doctor.environment``: each variable the layout of scenario ``s`` needs
    (:func:`moeplan.io.export.layout_environment`) that is unset or set otherwise — an error for
    ``NCCL_GRAPH_REGISTER`` and ``NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN``, else a warning.
    ``PYTORCH_CUDA_ALLOC_CONF`` is an option list: it passes when it holds every needed option.
    Nothing when the scenario names no GPU."""
    if s.gpu is None:
        return []
    out = []
    strict = {"NCCL_GRAPH_REGISTER", "NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN"}
    for name, value in layout_environment(s).items():
        have = rep.environment.get(name)
        # PYTORCH_CUDA_ALLOC_CONF is a comma-separated option list: the needed ones must be among them
        if name == ALLOC_CONF and have is not None and _has_alloc_options(have, value):
            continue
        if have != value:
            out.append(
                _finding(
                    "doctor.environment",
                    "error" if name in strict else "warning",
                    f"{name} is {'unset' if have is None else repr(have)}; the layout needs {value!r}",
                    f"export {name}={value}",
                )
            )
    return out


def check_environment(rep: EnvironmentReport, scenario=None) -> list[dict]:
    """Judge an :class:`EnvironmentReport`, against a resolved scenario when given.

    Returns:
        findings: dicts with ``rule``, ``severity`` (error / warning / info), ``message``, ``fix``.
    """
    s = scenario
    out = _gpu_presence(rep, s)
    if s is None:
        return out
    return [*out, *_gpu_fit(rep, s), *_packages(rep, s), *_versions(rep, s), *_environment_variables(rep, s)]


def machine_deployment(rep: EnvironmentReport) -> Deployment:
    """The deployment this machine shows (:class:`moeplan.rules.deployment.Deployment`): the DeepEP
    build read from its extension, the environment, the NVLink peers of ``nvidia-smi topo -m``."""
    return Deployment(
        build=None if rep.ep_build is None else frozenset(rep.ep_build),
        build_said=msg("deployment.said.build_installed", path=rep.ep_build_file or "?"),
        environment=dict(rep.environment),
        environment_said=msg("deployment.said.environment_machine"),
        nvlink_peers=rep.nvlink_peers,
        nvlink_said=msg("deployment.said.nvlink_machine"),
    )


def _unseen(rep: EnvironmentReport, s) -> list[Message]:
    """What the deployment checks need that this machine does not show, as messages: every such fact
    without a scenario ``s``, with one those its dispatcher backend needs."""
    out: list[Message] = []
    deepep = s is None or flex_backend(s) == "deepep"
    if deepep and rep.nvlink_peers is None:
        out.append(msg("deployment.doctor.no_topology"))
    if deepep and rep.ep_build is None:
        out.append(msg("deployment.doctor.no_deepep_build"))
    if s is not None and flex_backend(s) == "hybridep":
        out.append(msg("deployment.doctor.no_hybridep_build"))
    return out


def deployment_check(rep: EnvironmentReport, s=None) -> list[dict]:
    """The deployment checks (:mod:`moeplan.rules.deployment`: DeepEP / HybridEP builds, NVLink peers,
    NCCL settings) of scenario ``s`` on this machine, each finding with its fix and source; an info
    naming what was seen and one naming what could not be checked (no GPU, no topology, no DeepEP
    extension). Without a scenario only those two infos."""
    out = []
    seen = []
    if rep.ep_build is not None:
        seen.append(msg("deployment.doctor.seen_build", build=", ".join(rep.ep_build) or "[]", path=rep.ep_build_file))
    if rep.nvlink_peers is not None:
        seen.append(msg("deployment.doctor.seen_peers", peers=rep.nvlink_peers))
    if seen:
        out.append(_finding("deployment.machine", "info", msg("deployment.doctor.seen", what=Items(seen))))
    unseen = _unseen(rep, s)
    if unseen:
        out.append(_finding("deployment.machine", "info", msg("deployment.doctor.not_checked", what=Items(unseen))))
    if s is None:
        return out
    found = deployment_findings(s, machine_deployment(rep))
    return [{**_finding(f.rule_id, f.severity, f.message, f.fix or ""), "source": f.source} for f in found] + out


def installed_versions(rep: EnvironmentReport) -> tuple[dict[str, str], list[str]]:
    """The installed versions as a scenario's ``versions:`` mapping (PEP 440 strings), and the
    packages whose version string is not PEP 440 (left out, so that they read as unknown)."""
    found = {key: rep.packages.get(pkg) for pkg, key in _VERSION_KEYS.items()}
    found["nccl"] = rep.nccl
    out, skipped = {}, []
    for key, text in found.items():
        if not text:
            continue
        try:
            parse_version(text, f"versions.{key}")
        except MoeplanError:
            skipped.append(f"{key} {short_repr(text)}")
            continue
        out[key] = text
    return out, skipped


def known_issue_findings(rep: EnvironmentReport, data: dict) -> list[dict]:
    """Known issues of the *installed* megatron-core / Bridge / TE / torch / NCCL / DeepEP versions for a
    scenario mapping (as read from YAML): the installed versions replace its ``versions:`` and every
    ``known_issue.*`` finding of ``check`` is returned with its severity (``known_issue.<id>`` for an issue
    the installed versions have, ``known_issue.versions_unknown`` for one a missing package leaves open).
    A version string that is not PEP 440 is reported (``doctor.version``, info) and treated as unknown."""
    versions, skipped = installed_versions(rep)
    out = [
        _finding("doctor.version", "info", f"installed {w} is not a PEP 440 version: known issues treat it as unknown")
        for w in skipped
    ]
    if not versions:
        return out
    data = {**data, "versions": {**(data.get("versions") or {}), **versions}}
    try:
        res = validate(load_scenario(data))
    except MoeplanError:  # a scenario the rules cannot read: no known-issue lookup
        return out
    return out + [
        _finding(f.rule_id, f.severity, f.message, f.fix or "")
        for f in res.findings
        if f.rule_id.startswith("known_issue")
    ]
