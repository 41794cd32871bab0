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

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from moeplan.errors import InputError, UnknownNameError
from moeplan.spec.allocator import ALLOC_CONF, alloc_options
from moeplan.spec.layout import LayoutSpec
from moeplan.spec.loading import without_nulls
from moeplan.spec.peft import PeftInput
from moeplan.spec.policy import check_plain
from moeplan.spec.system import GpuSpec
from moeplan.spec.training import TrainingSpec
from moeplan.spec.versions import parse_version

FRAMEWORKS = ("megatron-bridge", "megatron-core")
#: the largest world size a scenario may state (GPUs); beyond it no cluster exists
MAX_GPUS = 2**20
#: the most GPUs per node
MAX_GPUS_PER_NODE = 1024
#: the largest integer a layout key may take (parallel sizes, layer counts, warm-up steps): a world size
MAX_LAYOUT_INT = MAX_GPUS
#: the largest float a layout key may take (capacity factors, fractions, dropout)
MAX_LAYOUT_FLOAT = 1e6
#: layout keys that count pipeline stages or layers: at most the largest layer count a model may
#: have (a pipeline never has more virtual stages than layers); the product PP · VPP too
LAYER_COUNT_KEYS = (
    "pipeline_model_parallel_size",
    "virtual_pipeline_model_parallel_size",
    "num_layers_in_first_pipeline_stage",
    "num_layers_in_last_pipeline_stage",
    "microbatch_group_size_per_vp_stage",
    "recompute_num_layers",
    "cpu_offloading_num_layers",
    "num_layers_at_start_in_bf16",
    "num_layers_at_end_in_bf16",
    "mtp_num_layers",
)
MAX_STAGES = 10_000
#: layout keys that list labels, each label at most once
LABEL_LISTS = ("recompute_modules", "offload_modules", "cuda_graph_scope", "cuda_graph_modules")
#: a software version as moeplan reads it: ASCII digits, dots, a pre-release / dev / post suffix and a
#: local part (``0.16.1``, ``core_r0.16.0``, ``2.8.0a0+5228986c39.nv25.09``); not ``r2d2``, not ``８``
VERSION_PATTERN = re.compile(
    r"(core_r|core_v|v|r)?[0-9]{1,9}(\.[0-9]{1,9}){0,3}"
    r"((rc|a|b|alpha|beta|dev|post|pre|\.dev|\.post|\.rc)[0-9]{0,9})*(\+[A-Za-z0-9._-]{1,64})?",
    re.ASCII | re.IGNORECASE,
)


class SystemInput(BaseModel):
    """``system:`` section. ``gpu`` is a catalog id or a full custom GPU mapping (GpuSpec keys);
    ``num_gpus`` the world size and ``gpus_per_node`` the GPUs per node (default 4 on GB200/GB300,
    else 8); ``gpu_overrides`` GpuSpec fields laid over the catalog GPU (e.g. ``usable_hbm_gib``).

    Framework context (RL frameworks such as verl, slime, NeMo-RL that colocate a rollout engine with
    Megatron training): ``reserved_gib`` GiB (2**30 B) of each GPU held by something other than the
    training step (a vLLM / SGLang engine's weights and KV cache that stay resident while training
    runs), subtracted from the usable HBM the verdict is judged on (at least 0, less than the GPU's
    usable HBM, checked when the scenario is resolved); ``host_memory_gib`` the host RAM of one node
    (GiB) that CPU-offloaded optimizer state must fit in (default: the catalog's host memory per GPU
    × GPUs per node, when known)."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, allow_inf_nan=False)
    gpu: str | GpuSpec | None = None
    num_gpus: int | None = Field(default=None, ge=1, le=MAX_GPUS)
    gpus_per_node: int | None = Field(default=None, ge=1, le=MAX_GPUS_PER_NODE)
    gpu_overrides: dict[str, Any] = Field(default_factory=dict)
    reserved_gib: float | None = Field(default=None, ge=0, le=1e5)
    host_memory_gib: float | None = Field(default=None, gt=0, le=1e7)

    @field_validator("reserved_gib", "host_memory_gib", mode="before")
    @classmethod
    def _number(cls, v):
        # strict mode refuses an int for a float field: 20 and 20.0 both mean 20 GiB
        return float(v) if isinstance(v, int) and not isinstance(v, bool) else v


class ReportedInput(BaseModel):
    """``reported:`` measured figures of a run, checked for plausibility."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, allow_inf_nan=False)
    model_tflops_per_gpu: float | None = Field(default=None, gt=0)
    tokens_per_s_per_gpu: float | None = Field(default=None, gt=0)


class VersionsInput(BaseModel):
    """``versions:`` software versions, each a PEP 440 string (``"0.16.1"``, ``"0.19.0rc1"``,
    ``"2.14+71bbefb"``), and ``container``: the container release the run uses
    (``nvcr.io/nvidia/nemo:26.04``), whose known package versions fill the ones not stated
    (:mod:`moeplan.spec.versions`)."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, allow_inf_nan=False)
    megatron_core: str | None = None
    megatron_bridge: str | None = None
    transformer_engine: str | None = None
    torch: str | None = None
    nccl: str | None = None
    deepep: str | None = None
    container: str | None = None

    @field_validator(
        "megatron_core", "megatron_bridge", "transformer_engine", "torch", "nccl", "deepep", "container", mode="before"
    )
    @classmethod
    def _quoted(cls, v):
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            raise ValueError("a quoted string, e.g. '26.10': unquoted, YAML reads 26.10 as the number 26.1")
        return v

    @field_validator("megatron_core", "megatron_bridge", "transformer_engine", "torch", "nccl", "deepep")
    @classmethod
    def _pep440(cls, v):
        if v is None:
            return v
        try:
            parse_version(v)
        except InputError as exc:
            raise ValueError(exc.allowed) from None
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
    writes it). Absent for a VLM, half of each sequence is assumed to be image tokens (a planning
    mix, :data:`moeplan.model.vision.DEFAULT_IMAGE_TOKEN_SHARE`), and the header of ``estimate``,
    ``plan`` and ``fit`` says so; ``text_only: true`` states a run without images (the tower's
    weights and optimizer state stay, it computes nothing).

    Attributes:
        text_only: no images at all (e.g. text RL or SFT on a VLM checkpoint); default False. Raises
            an input error together with non-zero image figures.
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
    text_only: bool = False

    @model_validator(mode="after")
    def _text_only_has_no_images(self) -> WorkloadInput:
        """``text_only`` with image figures contradicts itself."""
        images = {
            k: getattr(self, k)
            for k in ("image_patches_per_sequence", "image_tokens_per_sequence", "images_per_sequence")
            if getattr(self, k)
        }
        if self.text_only and images:
            k, v = next(iter(images.items()))
            raise ValueError(f"0 with text_only: true ({k} is {v:g})")
        return self


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
    peft: PeftInput | None = None


_SECTIONS: dict[str, type[BaseModel]] = {
    "system": SystemInput,
    "training": TrainingSpec,
    "layout": LayoutSpec,
    "versions": VersionsInput,
    "reported": ReportedInput,
    "overheads": OverheadsInput,
    "assumptions": AssumptionsInput,
    "workload": WorkloadInput,
    "peft": PeftInput,
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


def _check_layout_values(data: dict) -> None:
    """Layout values within plausible bounds (integers up to :data:`MAX_LAYOUT_INT`, floats up to
    :data:`MAX_LAYOUT_FLOAT`, list items too) and label lists without repeats (a repeated unknown
    label would be reported once per repeat).

    Raises:
        InputError: naming ``layout.KEY``.
    """
    layout = data.get("layout")
    if not isinstance(layout, dict):
        return
    for key, v in layout.items():
        for x in v if isinstance(v, list) else [v]:
            if isinstance(x, bool) or not isinstance(x, (int, float)):
                continue
            top = MAX_LAYOUT_INT if isinstance(x, int) else MAX_LAYOUT_FLOAT
            if abs(x) > top:
                raise InputError(f"layout.{key}", v, f"a value of magnitude at most {top:g}")
        if key in LABEL_LISTS and isinstance(v, list) and len({str(x) for x in v}) != len(v):
            raise InputError(f"layout.{key}", v, "a list naming each label once")
        if key in LAYER_COUNT_KEYS and isinstance(v, int) and v > MAX_STAGES:
            raise InputError(f"layout.{key}", v, f"at most {MAX_STAGES:,} (a model's largest layer count)")
    pp, vpp = layout.get("pipeline_model_parallel_size"), layout.get("virtual_pipeline_model_parallel_size")
    if isinstance(pp, int) and isinstance(vpp, int) and pp * vpp > MAX_STAGES:
        raise InputError(
            "layout.virtual_pipeline_model_parallel_size", vpp, f"PP · VPP at most {MAX_STAGES:,} virtual stages"
        )


def scenario_from_dict(data: dict | None) -> ScenarioInput:
    """Validate a scenario mapping under the input policy (:func:`moeplan.spec.policy.check_plain`:
    plain text without control characters, bounded numbers, bounded nesting).

    Raises:
        InputError: unknown keys (with did-you-mean), wrong types, out-of-range values, control
            characters; the message names the field, the value and what is allowed.
    """
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise InputError("scenario", data, "a YAML mapping with model, system, training, layout")
    check_plain(data, "")
    _check_unknown_keys(data)
    _check_layout_values(data)
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
    clean = {k: v for k, v in without_nulls(data).items() if not (k in _SECTIONS and v is None)}
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
        alloc_options(clean["environment"].get(ALLOC_CONF))  # PyTorch would refuse a malformed one at start-up
    try:
        return ScenarioInput.model_validate(clean)
    except ValidationError as exc:
        raise _pydantic_to_input_error(exc) from None
