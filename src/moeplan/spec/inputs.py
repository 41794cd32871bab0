"""The scenario input schema: what the user writes (``model``, ``system``, ``training``, ``layout``,
``framework``, ``recipe_defaults``, ``versions``, ``environment``, ``reported``, ``overheads``,
``assumptions``, ``workload``) as frozen pydantic models, and :func:`scenario_from_dict`, which
validates a mapping into a :class:`ScenarioInput` with every mistake turned into an
:class:`~moeplan.errors.InputError` naming the field, the value and what is allowed.

Schema documented in the README, section "Scenario files"; resolution (framework defaults, recipe
fills) is :mod:`moeplan.spec.defaults`.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from moeplan.errors import InputError, UnknownNameError
from moeplan.spec.layout import LayoutSpec
from moeplan.spec.system import GpuSpec
from moeplan.spec.training import TrainingSpec

FRAMEWORKS = ("megatron-bridge", "megatron-core")


class SystemInput(BaseModel):
    """``system:`` section. ``gpu`` is a catalog id or a full custom GPU mapping (GpuSpec keys);
    ``num_gpus`` the world size and ``gpus_per_node`` the GPUs per node (default 4 on GB200/GB300,
    else 8); ``gpu_overrides`` GpuSpec fields laid over the catalog GPU (e.g. ``usable_hbm_gib``)."""

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
    recipe_defaults: Literal["none", "mbridge-perf", "mbridge-perf-benchmark"] = "none"
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
