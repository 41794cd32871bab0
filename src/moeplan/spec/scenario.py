"""Scenario: model + system + training + layout (+ framework, versions, environment), loaded from
YAML or a mapping, validated, then *resolved*: Megatron's effective defaults are filled for keys the
user did not state, each fill recorded with its reason, and DP / EDP derived.

Schema (documented in the README, section "Scenario files"):

```yaml
model: deepseek-ai/DeepSeek-V3   # HF id, short name, path to config.json, or null
model_overrides: {num_layers: 16}
system: {gpu: h100, num_gpus: 256, gpus_per_node: 8, gpu_overrides: {usable_hbm_gib: 75}}
training: {seq_length: 131072, micro_batch_size: 1, global_batch_size: 512, precision: bf16}
layout: {tensor_model_parallel_size: 2, context_parallel_size: 16, ...}
framework: megatron-bridge        # or megatron-core (resolves ETP/dispatcher defaults differently)
versions: {megatron_core: "0.20.0", megatron_bridge: "0.3.0"}
environment: {PYTORCH_CUDA_ALLOC_CONF: "expandable_segments:True"}
reported: {model_tflops_per_gpu: 1937}
```
"""

from __future__ import annotations

import copy
import functools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from moeplan.errors import InputError, UnknownNameError
from moeplan.spec.layout import LayoutSpec
from moeplan.spec.model import ModelSpec, partial_model
from moeplan.spec.system import GpuSpec
from moeplan.spec.training import TrainingSpec

NEWEST_MCORE = "0.20.0"
NEWEST_BRIDGE = "0.3.0"
FRAMEWORKS = ("megatron-bridge", "megatron-core")


class SystemInput(BaseModel):
    """``system:`` section. ``gpu`` is a catalog id or a full custom GPU mapping (GpuSpec keys)."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, allow_inf_nan=False)
    gpu: str | GpuSpec | None = None
    num_gpus: int | None = Field(default=None, ge=1)
    gpus_per_node: int | None = Field(default=None, ge=1)
    gpu_overrides: dict[str, Any] = Field(default_factory=dict)


class ReportedInput(BaseModel):
    """``reported:`` measured figures of a run, checked for plausibility."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, allow_inf_nan=False)
    model_tflops_per_gpu: float | None = Field(default=None, gt=0)
    tokens_per_s_per_gpu: float | None = Field(default=None, gt=0)


class VersionsInput(BaseModel):
    """``versions:`` software versions (strings such as ``"0.16.1"``)."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, allow_inf_nan=False)
    megatron_core: str | None = None
    megatron_bridge: str | None = None
    transformer_engine: str | None = None
    torch: str | None = None
    container: str | None = None

    @field_validator("megatron_core", "megatron_bridge", "transformer_engine", "torch", "container", mode="before")
    @classmethod
    def _quoted(cls, v):
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            raise ValueError("a quoted string, e.g. '26.10': unquoted, YAML reads 26.10 as the number 26.1")
        return v


class OverheadsInput(BaseModel):
    """``overheads:`` memory outside PyTorch tensors, in GiB per GPU; each replaces moeplan's default
    (see ``moeplan.model.overheads`` for the defaults and their sources)."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, allow_inf_nan=False)
    cuda_context_gib: float | None = Field(default=None, ge=0)
    nccl_buffers_gib: float | None = Field(default=None, ge=0)
    deepep_buffers_gib: float | None = Field(default=None, ge=0)
    hybridep_buffers_gib: float | None = Field(default=None, ge=0)
    workspaces_gib: float | None = Field(default=None, ge=0)
    cuda_graph_pool_fraction: float | None = Field(default=None, ge=0, le=1)
    fragmentation_fraction: float | None = Field(default=None, ge=0, le=1)


class AssumptionsInput(BaseModel):
    """``assumptions:`` modelling inputs that are not Megatron keys."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, allow_inf_nan=False)
    routing_imbalance_factor: float | None = Field(default=None, ge=1.0)


class WorkloadInput(BaseModel):
    """``workload:`` what a VLM's real data looks like per packed sequence (``moeplan vlm-stats``
    writes it). Absent for a VLM means mock (image-free) data.

    Attributes:
        image_patches_per_sequence: ViT patches per sequence (before the spatial merge).
        image_tokens_per_sequence: image tokens the language model sees per sequence.
        images_per_sequence: images per sequence.
        useful_fraction: non-padding tokens / sequence tokens (0–1].
        mean_patches_per_image: ViT attention runs within each image over this many patches.
        seq_length: the sequence length the workload was measured for (per-sequence figures are
            scaled to the scenario's when they differ).
    """

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, allow_inf_nan=False)
    image_patches_per_sequence: float = Field(default=0.0, ge=0.0)
    image_tokens_per_sequence: float = Field(default=0.0, ge=0.0)
    images_per_sequence: float = Field(default=0.0, ge=0.0)
    useful_fraction: float = Field(default=1.0, gt=0.0, le=1.0)
    mean_patches_per_image: float = Field(default=0.0, ge=0.0)
    seq_length: int | None = Field(default=None, ge=1)
    source: str = "user"


class ScenarioInput(BaseModel):
    """A whole scenario as written by the user (before resolution)."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, allow_inf_nan=False)
    name: str | None = None
    model: str | None = None
    model_overrides: dict[str, Any] = Field(default_factory=dict)
    system: SystemInput = Field(default_factory=SystemInput)
    training: TrainingSpec = Field(default_factory=TrainingSpec)
    layout: LayoutSpec = Field(default_factory=LayoutSpec)
    framework: Literal["megatron-bridge", "megatron-core"] = "megatron-bridge"
    recipe_defaults: Literal["none", "mbridge-perf"] = "none"
    versions: VersionsInput = Field(default_factory=VersionsInput)
    environment: dict[str, str] = Field(default_factory=dict)
    reported: ReportedInput = Field(default_factory=ReportedInput)
    overheads: OverheadsInput = Field(default_factory=OverheadsInput)
    assumptions: AssumptionsInput = Field(default_factory=AssumptionsInput)
    workload: WorkloadInput | None = None


_SECTIONS: dict[str, type[BaseModel]] = {
    "system": SystemInput,
    "training": TrainingSpec,
    "layout": LayoutSpec,
    "versions": VersionsInput,
    "reported": ReportedInput,
    "overheads": OverheadsInput,
    "assumptions": AssumptionsInput,
    "workload": WorkloadInput,
}


def _check_unknown_keys(data: dict) -> None:
    top = set(ScenarioInput.model_fields)
    for key in data:
        if key not in top:
            raise UnknownNameError(str(key), str(key), top, "a top-level scenario key:")
    for sec, cls in _SECTIONS.items():
        val = data.get(sec)
        if val is None:
            continue
        if not isinstance(val, dict):
            raise InputError(sec, val, "a mapping of keys to values")
        for key in val:
            if key not in cls.model_fields:
                raise UnknownNameError(f"{sec}.{key}", str(key), cls.model_fields, f"one of the {sec} keys:")


def _pydantic_to_input_error(exc: ValidationError) -> InputError:
    err = exc.errors()[0]
    loc = ".".join(str(p) for p in err["loc"] if not str(p).startswith(("function-", "constrained")))
    # pydantic reports union branches as extra path parts; keep the field path readable
    loc = loc.replace(".str", "").replace(".GpuSpec", "").replace(".int", "")
    value = err.get("input")
    msg = err.get("msg", "invalid value")
    if err.get("type") == "literal_error":
        allowed = msg.replace("Input should be ", "")
    else:
        msg = msg.removeprefix("Value error, ")
        allowed = msg[0].lower() + msg[1:] if msg else "a valid value"
    return InputError(loc, value, allowed)


def scenario_from_dict(data: dict | None) -> ScenarioInput:
    """Validate a scenario mapping.

    Raises:
        InputError: unknown keys (with did-you-mean), wrong types, out-of-range values; the message
            names the field, the value and what is allowed.
    """
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise InputError("scenario", data, "a YAML mapping with model, system, training, layout")
    _check_unknown_keys(data)
    gpu = (data.get("system") or {}).get("gpu") if isinstance(data.get("system"), dict) else None
    if isinstance(gpu, dict):
        unknown = [k for k in gpu if k not in GpuSpec.model_fields]
        if unknown:
            raise UnknownNameError(f"system.gpu.{unknown[0]}", unknown[0], GpuSpec.model_fields, "a GPU field:")
        try:
            GpuSpec.model_validate(gpu)
        except ValidationError as exc:
            err = _pydantic_to_input_error(exc)
            raise InputError("system.gpu." + err.field, err.value, err.allowed) from None
    clean = {k: v for k, v in data.items() if not (k in _SECTIONS and v is None)}
    if clean.get("model_overrides") is None:
        clean.pop("model_overrides", None)
    if clean.get("environment") is not None:
        if not isinstance(clean["environment"], dict):
            raise InputError("environment", clean["environment"], "a mapping of variable names to values")
        for k in clean["environment"]:
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", str(k)):
                raise InputError(
                    f"environment.{k}", k, "a variable name of letters, digits and _ (not starting with a digit)"
                )
        clean["environment"] = {str(k): str(v) for k, v in dict(clean["environment"]).items()}
    try:
        return ScenarioInput.model_validate(clean)
    except ValidationError as exc:
        raise _pydantic_to_input_error(exc) from None


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate mapping keys (YAML would silently keep the last one) and
    aliases (``*name``: a few lines of aliases can expand to gigabytes)."""

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            mark = self.peek_event().start_mark
            raise yaml.composer.ComposerError(None, None, "aliases (*name) are not accepted", mark)
        return super().compose_node(parent, index)


def _construct_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
        seen.add(key)
    return yaml.SafeLoader.construct_mapping(loader, node, deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)

# numbers as YAML 1.2 reads them: 1e-3 is a float (YAML 1.1 reads it as text), 1:00 is text (not the
# sexagesimal 60), 2_0 is text (not 20), 010 is ten (not octal)
_INT, _FLOAT = "tag:yaml.org,2002:int", "tag:yaml.org,2002:float"
_UniqueKeyLoader.yaml_implicit_resolvers = {
    ch: [(tag, rx) for tag, rx in rs if tag not in (_INT, _FLOAT)]
    for ch, rs in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_UniqueKeyLoader.add_implicit_resolver(_INT, re.compile(r"^[-+]?[0-9]+$"), list("-+0123456789"))
_UniqueKeyLoader.add_implicit_resolver(
    _FLOAT,
    re.compile(r"^[-+]?([0-9]+\.[0-9]*|\.[0-9]+|[0-9]+)([eE][-+]?[0-9]+)?$|^[-+]?\.(inf|Inf|INF)$|^\.(nan|NaN|NAN)$"),
    list("-+0123456789."),
)
_UniqueKeyLoader.add_constructor(_INT, lambda loader, node: int(loader.construct_scalar(node)))


def parse_yaml_value(raw: str) -> object:
    """One ``--set`` value, read as the scenario files are (YAML 1.2 numbers, no aliases); the text
    itself when it is not YAML."""
    try:
        return yaml.load(raw, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError:
        return raw


def load_yaml_text(text: str, field: str, where: str) -> object:
    """Parse YAML strictly: duplicate keys and aliases refused, nesting bounded.

    Raises:
        InputError: named by ``field`` with ``where`` (a path) as the value.
    """
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = str(getattr(exc, "problem", None) or "")
        detail = f": {problem}" if ("duplicate" in problem or "aliases" in problem) else ""
        raise InputError(field, where, f"valid YAML (parse error{at}{detail})") from None
    except RecursionError:
        raise InputError(field, where, "YAML nested less deeply") from None


def load_scenario_file(path: str | Path) -> dict:
    """Read a scenario YAML file into a mapping.

    Raises:
        InputError: missing file, malformed YAML, or a document that is not a mapping.
    """
    p = Path(path)
    if not p.is_file():
        raise InputError("scenario", str(path), "an existing YAML file")
    try:
        text = p.read_text(encoding="utf-8")
    except (UnicodeDecodeError, OSError) as exc:
        raise InputError("scenario", str(path), f"a readable UTF-8 YAML file ({type(exc).__name__})") from None
    data = load_yaml_text(text, "scenario", str(path))
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise InputError("scenario", str(path), "a YAML mapping with model, system, training, layout")
    return data


#: layout keys a recipe row sets as one choice (graphs, dispatcher, recompute); the static-budget
#: expert path belongs to both the full-iteration graph and the HybridEP dispatcher
_STATIC_BUDGET = ("moe_expert_rank_capacity_factor", "moe_paged_stash", "use_transformer_engine_op_fuser")
_RECIPE_KEY_GROUPS = (
    ("cuda_graph_impl", "cuda_graph_scope", "cuda_graph_modules", *_STATIC_BUDGET),
    ("moe_token_dispatcher_type", "moe_flex_dispatcher_backend", *_STATIC_BUDGET),
    ("recompute_granularity", "recompute_modules", "recompute_method", "recompute_num_layers"),
)


def _deep_merge(base: dict, top: dict) -> dict:
    """A new mapping: ``top`` laid over ``base`` section by section; neither argument is changed (a
    shared base, e.g. calibration defaults, must not carry one run's settings into the next)."""
    out = copy.deepcopy(base)
    for k, v in top.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _deep_merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def merge_overrides(data: dict, overrides: dict[str, dict]) -> dict:
    """Overlay CLI values (section → key → value) on a scenario mapping; CLI wins."""
    out = dict(data)
    for sec, vals in overrides.items():
        if sec in ("model", "framework", "name", "recipe_defaults"):
            out[sec] = vals
            continue
        if not vals:
            continue
        out[sec] = _deep_merge(dict(out.get(sec) or {}), vals) if isinstance(vals, dict) else vals
    return out


@functools.lru_cache(maxsize=128)
def parse_version(text: str | None, default: str) -> tuple[int, ...]:
    """``"0.16.1"`` → ``(0, 16, 1)``; ``"core_r0.16.0"`` and ``"v0.16"`` also parse.

    Raises:
        InputError: when no version numbers are found.
    """
    s = (text or default).strip().lower()
    for prefix in ("core_r", "core_v", "v", "r"):
        if s.startswith(prefix):
            s = s[len(prefix) :]
    parts = []
    for p in s.split("."):
        digits = "".join(ch for ch in p if ch.isdigit())
        if not digits:
            break
        parts.append(int(digits))
    if not parts:
        raise InputError("versions", text, "a version such as 0.16.1")
    while len(parts) < 3:
        parts.append(0)
    return tuple(parts[:3])


@dataclass(frozen=True)
class Resolution:
    """One effective value filled in because the user did not state it."""

    key: str
    value: Any
    reason: str


@dataclass
class Scenario:
    """A resolved scenario: the inputs plus Megatron's effective defaults, ready for the rules and
    estimators. ``layout`` holds effective values; ``stated`` the keys the user gave.

    Attributes:
        model: None when the scenario names no model (rules needing it are skipped).
        gpu: None when no GPU is named.
        dp / edp: derived data-parallel and expert-data-parallel sizes, None when W is unknown or
            the division is not exact (the world-size rules report that).
    """

    input: ScenarioInput
    model: ModelSpec | None
    gpu: GpuSpec | None
    num_gpus: int | None
    gpus_per_node: int | None
    training: TrainingSpec
    layout: LayoutSpec
    stated: frozenset[str]
    framework: str
    mcore_version: tuple[int, ...]
    bridge_version: tuple[int, ...]
    environment: dict[str, str]
    resolutions: list[Resolution] = field(default_factory=list)

    # shorthand for the parallel sizes
    @property
    def tp(self) -> int:
        return self.layout.tensor_model_parallel_size

    @property
    def pp(self) -> int:
        return self.layout.pipeline_model_parallel_size

    @property
    def vpp(self) -> int:
        """Virtual stages per PP rank (1 when not interleaved; VPP 1 means no interleaving)."""
        return self.layout.virtual_pipeline_model_parallel_size or 1

    @property
    def cp(self) -> int:
        return self.layout.context_parallel_size

    @property
    def ep(self) -> int:
        return self.layout.expert_model_parallel_size

    @property
    def etp(self) -> int:
        return self.layout.expert_tensor_parallel_size or 1

    @property
    def sp(self) -> bool:
        return bool(self.layout.sequence_parallel)

    @property
    def dp(self) -> int | None:
        w, d = self.num_gpus, self.tp * self.pp * self.cp
        return w // d if w and w % d == 0 else None

    @property
    def edp(self) -> int | None:
        w, d = self.num_gpus, self.etp * self.ep * self.pp
        return w // d if w and w % d == 0 else None

    @property
    def mtp_num_layers(self) -> int:
        if self.layout.mtp_num_layers is not None:
            return self.layout.mtp_num_layers
        return self.model.mtp_num_layers if self.model else 0

    @property
    def is_moe_sharded(self) -> bool:
        """True when routed experts exist and are sharded over an expert grid (EDP matters)."""
        return self.model is not None and self.model.is_moe

    @property
    def folds(self) -> bool:
        """True when the world size divides by TP·PP·CP and, with routed experts, by ETP·EP·PP."""
        return self.dp is not None and (not self.is_moe_sharded or self.edp is not None)

    def graphs_on(self) -> bool:
        """True when any CUDA graph capture is configured."""
        return (self.layout.cuda_graph_impl or "none") != "none"

    def graph_scopes(self) -> list[str]:
        """Effective per-layer graph scopes (``cuda_graph_modules`` or the older ``cuda_graph_scope``)."""
        lay = self.layout
        src = lay.cuda_graph_modules if lay.cuda_graph_modules is not None else lay.cuda_graph_scope
        if src is None:
            return []
        return [src] if isinstance(src, str) else list(src)

    def summary(self) -> dict[str, Any]:
        """Plain mapping for JSON output: sizes, derived DP/EDP and each resolution."""
        return {
            "model": self.model.name if self.model else None,
            "gpu": self.gpu.id if self.gpu else None,
            "num_gpus": self.num_gpus,
            "framework": self.framework,
            "megatron_core_version": ".".join(map(str, self.mcore_version)),
            "parallel": {
                "TP": self.tp,
                "PP": self.pp,
                "VPP": self.layout.virtual_pipeline_model_parallel_size,
                "CP": self.cp,
                "EP": self.ep,
                "ETP": self.etp,
                "DP": self.dp,
                "EDP": self.edp,
                "SP": self.sp,
            },
            "resolved_defaults": [{"key": r.key, "value": r.value, "reason": r.reason} for r in self.resolutions],
        }


def _resolve_gpu(system: SystemInput) -> GpuSpec | None:
    from moeplan.catalog.gpus import get_gpu

    if system.gpu is None:
        if system.gpu_overrides:
            raise InputError("system.gpu_overrides", system.gpu_overrides, "a system.gpu to override")
        return None
    gpu = system.gpu if isinstance(system.gpu, GpuSpec) else get_gpu(system.gpu)
    if system.gpu_overrides:
        unknown = [k for k in system.gpu_overrides if k not in GpuSpec.model_fields]
        if unknown:
            raise UnknownNameError(
                f"system.gpu_overrides.{unknown[0]}", unknown[0], GpuSpec.model_fields, "a GPU field:"
            )
        try:
            gpu = GpuSpec.model_validate({**gpu.model_dump(), **system.gpu_overrides})
        except ValidationError as exc:
            e = _pydantic_to_input_error(exc)
            raise InputError("system.gpu_overrides." + e.field, e.value, e.allowed) from None
    return gpu


def resolve(inp: ScenarioInput) -> Scenario:
    """Resolve a validated scenario: load the model and GPU, fill Megatron defaults, derive sizes.

    Defaults filled (each recorded as a :class:`Resolution`):
    - ``expert_tensor_parallel_size`` unset: TP in megatron-core (``ModelParallelConfig``), 1 in
      Megatron Bridge when EP > 1 (``models/transformer_config.py::finalize``), else TP.
    - ``sequence_parallel`` unset: on when TP > 1 (what Bridge recipes set; SP is required for MoE
      with TP > 1), off otherwise.
    - ``moe_token_dispatcher_type`` unset (MoE models): ``alltoall`` (Bridge HF providers) or
      ``allgather`` (megatron-core default).
    - ``moe_grouped_gemm`` unset: True in Bridge MoE providers, False in megatron-core.
    - ``use_distributed_optimizer`` unset: True in Bridge recipes, False in megatron-core.
    - ``use_precision_aware_optimizer`` unset: False (``OptimizerConfig``).
    - ``cuda_graph_impl`` unset but a graph scope given: ``transformer_engine`` (scoped capture).
    - ``use_te_rng_tracker`` unset: True when graphs are on (Megatron-LM and Bridge enable it).
    - ``mtp_num_layers`` unset: the model config's MTP layers.

    Raises:
        InputError / UnknownNameError: unknown model or GPU, bad overrides.
    """
    from moeplan.catalog.models import get_model

    res: list[Resolution] = []
    model: ModelSpec | None
    if inp.model is not None and not inp.model.strip():
        raise InputError("model", inp.model, "a built-in model name, a config.json path, or null")
    if inp.model:
        model = get_model(inp.model).with_overrides(inp.model_overrides)
    elif inp.model_overrides:
        model = partial_model(inp.model_overrides)
    else:
        model = None
    gpu = _resolve_gpu(inp.system)
    gpn = inp.system.gpus_per_node
    if gpn is None and gpu is not None:
        gpn = 4 if gpu.is_nvl72 else 8
        res.append(
            Resolution(
                "system.gpus_per_node",
                gpn,
                "GB200/GB300 compute trays hold 4 GPUs" if gpu.is_nvl72 else "HGX/DGX nodes hold 8 GPUs",
            )
        )
    lay = inp.layout
    stated = frozenset(lay.model_fields_set)
    bridge = inp.framework == "megatron-bridge"
    upd: dict[str, Any] = {}
    from moeplan.spec.recipes import recipe_fills

    gpu_id = inp.system.gpu if isinstance(inp.system.gpu, str) else None
    fills = recipe_fills(
        inp.recipe_defaults,
        model,
        inp.training.precision,
        lay.pipeline_model_parallel_size,
        lay.virtual_pipeline_model_parallel_size,
        gpu_id=gpu_id.lower() if gpu_id else None,
        layout=lay.model_dump(),
        micro_batch_size=inp.training.micro_batch_size,
        num_gpus=inp.system.num_gpus,
    )
    # keys that only make sense together come from one source: when a stated key of a group differs
    # from what the recipe sets, the rest of the group is not filled (a stated full-iteration graph
    # takes no TE-graph scope from a row; a stated all-to-all takes no HybridEP budget)
    offered: dict[str, Any] = {}
    for key, value, _ in fills:
        offered.setdefault(key, value)
    stated_values = lay.model_dump(include=set(stated))
    clashing = [
        g for g in _RECIPE_KEY_GROUPS if any(k in stated and k in offered and stated_values[k] != offered[k] for k in g)
    ]
    for key, value, why in fills:
        if key not in stated and key not in upd and not any(key in g for g in clashing):
            upd[key] = value
            res.append(Resolution(key, value, f"recipe fill: {why}"))
    if upd:
        lay = lay.model_copy(update=upd)
        upd = {}
    tp, ep = lay.tensor_model_parallel_size, lay.expert_model_parallel_size

    if lay.expert_tensor_parallel_size is None:
        if bridge and ep > 1:
            upd["expert_tensor_parallel_size"] = 1
            why = "unset: Megatron Bridge resolves ETP to 1 when EP > 1"
        else:
            upd["expert_tensor_parallel_size"] = tp
            why = (
                "unset: megatron-core resolves ETP to TP"
                if not bridge
                else "unset: Megatron Bridge keeps ETP = TP when EP = 1"
            )
        res.append(Resolution("expert_tensor_parallel_size", upd["expert_tensor_parallel_size"], why))
    if lay.sequence_parallel is None:
        upd["sequence_parallel"] = tp > 1
        res.append(
            Resolution(
                "sequence_parallel",
                tp > 1,
                "unset: on with TP > 1 as Bridge recipes set it" if tp > 1 else "unset: off with TP = 1",
            )
        )
    moe = model is not None and model.is_moe
    if moe and lay.moe_token_dispatcher_type is None:
        upd["moe_token_dispatcher_type"] = "alltoall" if bridge else "allgather"
        res.append(
            Resolution(
                "moe_token_dispatcher_type",
                upd["moe_token_dispatcher_type"],
                "unset: Bridge HF providers use alltoall" if bridge else "unset: megatron-core default",
            )
        )
    if moe and lay.moe_token_dispatcher_type == "flex" and lay.moe_flex_dispatcher_backend is None:
        upd["moe_flex_dispatcher_backend"] = "deepep"
        res.append(Resolution("moe_flex_dispatcher_backend", "deepep", "unset: megatron-core default for flex"))
    if lay.moe_token_dispatcher_type is None and lay.moe_flex_dispatcher_backend is not None and not moe:
        upd["moe_token_dispatcher_type"] = "flex"
        res.append(Resolution("moe_token_dispatcher_type", "flex", "unset: a flex backend was given"))
    if lay.moe_grouped_gemm is None and moe:
        upd["moe_grouped_gemm"] = bridge
        res.append(
            Resolution(
                "moe_grouped_gemm",
                bridge,
                "unset: Bridge MoE providers enable grouped GEMM" if bridge else "unset: megatron-core default",
            )
        )
    if lay.use_distributed_optimizer is None:
        val = bridge or lay.use_megatron_fsdp
        upd["use_distributed_optimizer"] = val
        res.append(
            Resolution(
                "use_distributed_optimizer",
                val,
                "unset: Bridge recipes use the distributed optimizer"
                if bridge
                else "unset: megatron-core OptimizerConfig default",
            )
        )
    dist_opt = upd.get("use_distributed_optimizer", lay.use_distributed_optimizer)
    if lay.overlap_grad_reduce is None and not lay.use_megatron_fsdp:
        upd["overlap_grad_reduce"] = bridge
        res.append(
            Resolution(
                "overlap_grad_reduce",
                bridge,
                "unset: Bridge recipes overlap the gradient reduce-scatter with backward"
                if bridge
                else "unset: megatron-core DistributedDataParallelConfig default",
            )
        )
    if lay.overlap_param_gather is None and dist_opt and not lay.use_megatron_fsdp:
        val = bridge and upd.get("overlap_grad_reduce", lay.overlap_grad_reduce) is not False
        upd["overlap_param_gather"] = val
        res.append(
            Resolution(
                "overlap_param_gather",
                val,
                "unset: Bridge recipes overlap the parameter all-gather with forward"
                if bridge
                else "unset: megatron-core DistributedDataParallelConfig default",
            )
        )
    if lay.use_precision_aware_optimizer is None:
        upd["use_precision_aware_optimizer"] = False
        res.append(Resolution("use_precision_aware_optimizer", False, "unset: OptimizerConfig default"))
    has_scope = bool(lay.cuda_graph_scope or lay.cuda_graph_modules)
    if lay.cuda_graph_impl is None and has_scope:
        scopes = lay.cuda_graph_scope if lay.cuda_graph_modules is None else lay.cuda_graph_modules
        full_it = scopes == "full_iteration" or scopes == ["full_iteration"]
        upd["cuda_graph_impl"] = "full_iteration" if full_it else "transformer_engine"
        res.append(
            Resolution(
                "cuda_graph_impl",
                upd["cuda_graph_impl"],
                "unset but a graph scope was given: scoped capture uses transformer_engine",
            )
        )
    graphs = (upd.get("cuda_graph_impl") or lay.cuda_graph_impl or "none") != "none"
    if lay.use_te_rng_tracker is None and graphs:
        upd["use_te_rng_tracker"] = True
        res.append(Resolution("use_te_rng_tracker", True, "unset: enabled automatically with CUDA graphs"))
    if lay.mtp_num_layers is None and model is not None and model.mtp_num_layers:
        upd["mtp_num_layers"] = model.mtp_num_layers
        res.append(Resolution("mtp_num_layers", model.mtp_num_layers, "unset: from the model config"))
    layout = lay.model_copy(update=upd) if upd else lay
    if inp.training.freeze_vision_model and inp.training.freeze_language_model:
        raise InputError(
            "training.freeze_language_model", True, "not together with freeze_vision_model (nothing would train)"
        )
    return Scenario(
        input=inp,
        model=model,
        gpu=gpu,
        num_gpus=inp.system.num_gpus,
        gpus_per_node=gpn,
        training=inp.training,
        layout=layout,
        stated=stated,
        framework=inp.framework,
        mcore_version=parse_version(inp.versions.megatron_core, NEWEST_MCORE),
        bridge_version=parse_version(inp.versions.megatron_bridge, NEWEST_BRIDGE),
        environment=dict(inp.environment),
        resolutions=res,
    )


def load_scenario(source: str | Path | dict | None = None, overrides: dict[str, dict] | None = None) -> Scenario:
    """Load (file path or mapping), merge CLI overrides, validate and resolve a scenario.

    Raises:
        InputError: anything wrong with the input, naming the field, value and what is allowed.
    """
    if source is None:
        data: dict = {}
    elif isinstance(source, dict):
        data = dict(source)
    else:
        data = load_scenario_file(source)
    if overrides:
        data = merge_overrides(data, overrides)
    return resolve(scenario_from_dict(data))
