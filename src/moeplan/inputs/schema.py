"""The scenario input schema: what the user writes (``model``, ``system``, ``training``, ``layout``,
``framework``, ``recipe_defaults``, ``versions``, ``environment``, ``reported``, ``overheads``,
``assumptions``, ``workload``) as frozen pydantic models, and :func:`scenario_from_dict`, which
validates a mapping into a :class:`ScenarioInput` with every mistake turned into an
:class:`~moeplan.errors.InputError` naming the field, the value and what is allowed.

Schema documented in the README, section "Scenario files"; resolution (framework defaults, recipe
fills) is :mod:`moeplan.resolve.defaults`.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from moeplan.errors import InputError, UnknownNameError
from moeplan.inputs.allocator import ALLOC_CONF, alloc_options
from moeplan.inputs.layout import LayoutSpec
from moeplan.inputs.loading import without_nulls
from moeplan.inputs.megatron_keys import check_key, check_value_type
from moeplan.inputs.peft import PeftInput
from moeplan.inputs.policy import MAX_ITEMS, check_plain
from moeplan.inputs.system import GpuSpec
from moeplan.inputs.training import TrainingSpec
from moeplan.inputs.versions import PACKAGES, parse_version

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
    gpu: str | GpuSpec | None = Field(
        default=None,
        description="The GPU: a catalog id (`h100`, `b200`, `gb200`, ... `moeplan gpus` lists them) or a full custom GPU mapping of catalog GPU fields. moeplan's own input; unset: rules and costs that need a GPU are skipped and say so.",
    )
    num_gpus: int | None = Field(
        default=None,
        ge=1,
        le=MAX_GPUS,
        description="World size: the GPUs the job runs on (count); DP = W / (TP·PP·CP). Source: the launcher's world size (`torch.distributed` `WORLD_SIZE`); unset: rules that need it are skipped and say so.",
    )
    gpus_per_node: int | None = Field(
        default=None,
        ge=1,
        le=MAX_GPUS_PER_NODE,
        description="GPUs per node (count), which decides which groups cross nodes; fewer than the GPU's HGX NVLink domain (8) also cuts that domain to the node. Source: the launcher's `--nproc-per-node`; unset: 4 on GB200 / GB300 (NVL72 compute trays), else 8 (HGX / DGX), listed under defaults used.",
    )
    gpu_overrides: dict[str, Any] = Field(
        default_factory=dict,
        description="Catalog GPU fields replaced for this scenario (e.g. `usable_hbm_gib`), checked as GPU fields. moeplan's own input; unset: the catalog GPU as it is.",
    )
    reserved_gib: float | None = Field(
        default=None,
        ge=0,
        le=1e5,
        description="Memory each GPU gives to something other than the training step, such as a colocated rollout engine's weights and KV cache (verl, slime, NeMo-RL) (GiB, 2^30 bytes); subtracted from usable HBM for the verdict. moeplan's own input; unset: 0.",
    )
    host_memory_gib: float | None = Field(
        default=None,
        gt=0,
        le=1e7,
        description="Host RAM of one node for CPU-offloaded optimizer state (GiB). moeplan's own input; unset: the catalog's host memory per GPU × GPUs per node, when known.",
    )
    ep_library_build: list[Literal["deepep-nvshmem", "hybridep-multinode"]] | None = Field(
        default=None,
        description="The build options of the installed `deep_ep` package (DeepEP / HybridEP), as a list of those it has: `deepep-nvshmem` — DeepEP built with NVSHMEM (its setup.py found `NVSHMEM_DIR` or the `nvidia-nvshmem` module), which its internode kernels (EP·ETP > 8) need; `hybridep-multinode` — HybridEP built with `HYBRID_EP_MULTINODE=1` (RDMA between NVLink domains), which an EP·ETP group beyond one NVLink domain needs; `[]`: a build with neither. Source: DeepEP v1.2.1 `setup.py` and the hybrid-ep branch's `setup.py` (catalog/data/comm_libraries.yaml). moeplan's own input (`moeplan doctor` reads the DeepEP build on a node); unset: not known, so `check` does not judge the build.",
    )

    @field_validator("reserved_gib", "host_memory_gib", mode="before")
    @classmethod
    def _number(cls, v):
        # strict mode refuses an int for a float field: 20 and 20.0 both mean 20 GiB
        return float(v) if isinstance(v, int) and not isinstance(v, bool) else v


class ReportedInput(BaseModel):
    """``reported:`` measured figures of a run, checked for plausibility."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, allow_inf_nan=False)
    model_tflops_per_gpu: float | None = Field(
        default=None,
        gt=0,
        description="Model TFLOP/s per GPU a run measured (TFLOP/s), checked against the GPU's peak. Source: the `TFLOP/s/GPU` throughput Megatron-LM and Megatron Bridge log; unset: not checked.",
    )
    tokens_per_s_per_gpu: float | None = Field(
        default=None,
        gt=0,
        description="Training tokens per second per GPU a run measured (tokens/s). moeplan's own input, a figure from the run's logs; unset: not checked.",
    )


class VersionsInput(BaseModel):
    """``versions:`` software versions, each a PEP 440 string (``"0.16.1"``, ``"0.19.0rc1"``,
    ``"2.14+71bbefb"``), and ``container``: the container release the run uses
    (``nvcr.io/nvidia/nemo:26.04``), whose known package versions fill the ones not stated
    (:mod:`moeplan.inputs.versions`)."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, allow_inf_nan=False)
    megatron_core: str | None = Field(
        default=None,
        description='megatron-core version (PEP 440, quoted, e.g. "0.16.1"); selects the version-dependent rules and keys. Unset: the version `container` ships, when it names a known release, else the newest megatron-core moeplan knows (rules, planner, export key spellings and known-issue check alike).',
    )
    megatron_bridge: str | None = Field(
        default=None,
        description="Megatron Bridge version (PEP 440, quoted); selects the Bridge-version rules and the export's key spellings. Unset: the version `container` ships, when it names a known release, else the newest Megatron Bridge moeplan knows.",
    )
    transformer_engine: str | None = Field(
        default=None,
        description='Transformer Engine version (PEP 440, quoted, e.g. "2.14+71bbefb") for the known-issue ranges. Unset: the container\'s version when `container` names a known release, else unknown.',
    )
    torch: str | None = Field(
        default=None,
        description='PyTorch version (PEP 440, quoted, e.g. "2.8.0a0+5228986c39.nv25.09") for the known-issue ranges. Unset: the container\'s version when `container` names a known release, else unknown.',
    )
    nccl: str | None = Field(
        default=None,
        description='NCCL version (quoted, e.g. "2.27.7") for the known-issue ranges. Unset: the container\'s version when `container` names a known release, else unknown.',
    )
    deepep: str | None = Field(
        default=None,
        description="DeepEP version (quoted) for the known-issue ranges. Unset: the container's version when `container` names a known release, else unknown.",
    )
    container: str | None = Field(
        default=None,
        description="The container image the run uses (e.g. `nvcr.io/nvidia/nemo:26.04`): its package versions fill the unstated ones (for the layout rules, the planner, the export and the known-issue check), and with `recipe_defaults: mbridge-perf` its release's workload configs are the recipe. Unset: no container; an unknown release is a warning.",
    )

    @field_validator(*PACKAGES, "container", mode="before")
    @classmethod
    def _quoted(cls, v):
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            raise ValueError("a quoted string, e.g. '26.10': unquoted, YAML reads 26.10 as the number 26.1")
        return v

    @field_validator(*PACKAGES)
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
    cuda_context_gib: float | None = Field(
        default=None,
        ge=0,
        description="CUDA context, library handles and loaded kernels, outside PyTorch's allocator (GiB per GPU). moeplan's own planning input; unset: 0.75 GiB (`moeplan.model.overheads.CUDA_CONTEXT_GIB`).",
    )
    nccl_buffers_gib: float | None = Field(
        default=None,
        ge=0,
        description="NCCL communicator buffers of all process groups (GiB per GPU). moeplan's own planning input; unset: 1.0 GiB (`moeplan.model.overheads.NCCL_BUFFERS_GIB`).",
    )
    deepep_buffers_gib: float | None = Field(
        default=None,
        ge=0,
        description="DeepEP's NVLink and RDMA buffers with the flex dispatcher's `deepep` backend (GiB per GPU; also NCCL EP's with `ncclep`). Overrides the source's sizing; unset: sized as DeepEP's `Config` hints size them from the ETP×EP group, the hidden size and `moe_deepep_num_sms` (`moeplan.model.memory.dispatcher_buffers`; `ncclep`: 2.0 GiB, `moeplan.model.overheads.NCCLEP_BUFFERS_GIB`).",
    )
    hybridep_buffers_gib: float | None = Field(
        default=None,
        ge=0,
        description="HybridEP's registered NVLink and RDMA buffers with the flex dispatcher's `hybridep` backend (GiB per GPU). Overrides the source's sizing; unset: sized as `HybridEPBuffer` allocates them from the tokens per rank, hidden size, local experts and NVLink domain (`moeplan.model.memory.dispatcher_buffers`).",
    )
    workspaces_gib: float | None = Field(
        default=None,
        ge=0,
        description="cuBLASLt / Transformer Engine workspaces and TE's FP8 scaling state (GiB per GPU). moeplan's own planning input; unset: 0.25 GiB (`moeplan.model.overheads.WORKSPACES_GIB`).",
    )
    cuda_graph_pool_fraction: float | None = Field(
        default=None,
        ge=0,
        le=1,
        description="Extra memory of CUDA-graph pools beyond the tensors they hold, as a fraction (0–1) of activations. moeplan's own planning input; unset: 0.05 (`moeplan.model.overheads.CUDA_GRAPH_POOL_FRACTION`).",
    )
    fragmentation_fraction: float | None = Field(
        default=None,
        ge=0,
        le=1,
        description="Caching-allocator fragmentation (reserved minus allocated) as a fraction (0–1) of the dynamic memory. moeplan's own planning input; unset: 0.10 (`moeplan.model.overheads.FRAGMENTATION_FRACTION`), half that with `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`, none under a full-iteration CUDA graph.",
    )


class AssumptionsInput(BaseModel):
    """``assumptions:`` modelling inputs that are not Megatron keys."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, allow_inf_nan=False)
    routing_imbalance_factor: float | None = Field(
        default=None,
        ge=1.0,
        description="Tokens the busiest expert rank receives under dropless routing, as a multiple (≥ 1) of the mean. moeplan's own planning input; unset: 1.2 (`moeplan.structure.numerics.DEFAULT_ROUTING_IMBALANCE`), shown as an assumption; not used with forced balancing or a capacity factor.",
    )


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
    image_patches_per_sequence: float = Field(
        default=0.0,
        ge=0.0,
        description="ViT patches per sequence, before the spatial merge (patches). Measured by `moeplan vlm-stats`; unset: 0.",
    )
    image_tokens_per_sequence: float = Field(
        default=0.0,
        ge=0.0,
        description="Image tokens the language model sees per sequence, after the spatial merge (tokens). Measured by `moeplan vlm-stats`; unset: 0.",
    )
    images_per_sequence: float = Field(
        default=0.0, ge=0.0, description="Images per sequence (count). Measured by `moeplan vlm-stats`; unset: 0."
    )
    useful_fraction: float = Field(
        default=1.0,
        gt=0.0,
        le=1.0,
        description="Non-padding tokens over sequence tokens (a fraction in (0, 1]), for the useful-token throughput. Measured by `moeplan vlm-stats`; unset: 1.",
    )
    mean_patches_per_image: float = Field(
        default=0.0,
        ge=0.0,
        description="ViT patches per image (patches): vision attention runs within each image over this many. Measured by `moeplan vlm-stats`; unset: patches per sequence / images per sequence, or moeplan's planning value without images.",
    )
    seq_length: int | None = Field(
        default=None,
        ge=1,
        description="The sequence length the figures were measured at (tokens); per-sequence figures are scaled to the scenario's `training.seq_length` when they differ. Unset: taken as the scenario's.",
    )
    source: str = Field(
        default="user",
        description="Where the figures come from (free text; `moeplan vlm-stats` writes its sample count, sequence length and packing). Not read by any cost; unset: `user`.",
    )
    text_only: bool = Field(
        default=False,
        description="A run without images (e.g. text RL or SFT on a VLM checkpoint): the vision tower keeps its weights and optimizer state and computes nothing. An input error together with non-zero image figures; unset: false.",
    )

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
    name: str | None = Field(
        default=None, description="A label for the scenario (free text), not read by any rule or cost. Unset: none."
    )
    model: str | None = Field(
        default=None,
        description="The model: a built-in name or Hugging Face id (`DeepSeek-V3`, `deepseek-ai/DeepSeek-V3`), or a `config.json` path; `moeplan models` lists them. Unset: only `model_overrides` describe it, or rules that need a model are skipped and say so.",
    )
    model_overrides: dict[str, Any] = Field(
        default_factory=dict,
        description="Model fields (Megatron `TransformerConfig` names, e.g. `num_layers`) laid over the model, e.g. for a reduced-layer proxy; alone, a partial model. Unset: the model as published.",
    )
    system: SystemInput = Field(
        default_factory=SystemInput,
        description="The `system:` section: GPU, world size, GPUs per node, memory a colocated engine holds, host memory. Unset: no system (rules that need it are skipped).",
    )
    training: TrainingSpec = Field(
        default_factory=TrainingSpec,
        description="The `training:` section: sequence length, batch sizes, precision, task and data packing. Unset: every training field at its default.",
    )
    layout: LayoutSpec = Field(
        default_factory=LayoutSpec,
        description="The `layout:` section: Megatron-Core / Megatron Bridge parallelism, recompute, MoE, CUDA-graph, optimizer and overlap keys under their Megatron names. Unset: every key unstated (framework defaults fill them).",
    )
    framework: Literal[
        "megatron-bridge", "megatron-core", "megatron-lm", "verl", "slime", "nemo-rl", "ms-swift", "skyrl"
    ] = Field(
        default="megatron-bridge",
        description="Which framework drives Megatron and so resolves unstated keys: `megatron-bridge` (its recipes' and providers' defaults), `megatron-core` (the dataclass defaults), `megatron-lm` (megatron-core's plus Megatron-LM's argument fix-ups: SP off with TP 1, VPP from `pipeline_model_parallel_layout`, ...), or a driver of Megatron: `slime` and `ms-swift` (Megatron-LM arguments, as `megatron-lm`), `verl` (megatron-core), `nemo-rl` and `skyrl` (Megatron Bridge); a driver's own defaults fill first and each is listed with its source (`moeplan.resolve.frameworks`), and a driver that colocates a rollout engine says that its memory is `system.reserved_gib`. Unset: megatron-bridge.",
    )
    recipe_defaults: Literal["none", "mbridge-perf", "mbridge-perf-benchmark"] = Field(
        default="none",
        description="Fills unstated layout keys from Megatron Bridge's performance recipes: `mbridge-perf` (their training settings) or `mbridge-perf-benchmark` (as benchmarked, adding forced load balancing and the NaN check off). Unset: none, no fills.",
    )
    versions: VersionsInput = Field(
        default_factory=VersionsInput,
        description="The `versions:` section: software versions (megatron-core, Megatron Bridge, Transformer Engine, PyTorch, NCCL, DeepEP) and the container release. Unset: the newest known versions.",
    )
    environment: dict[str, str] = Field(
        default_factory=dict,
        description="Environment variables of the run (name → value), e.g. `PYTORCH_CUDA_ALLOC_CONF` (read as PyTorch reads it) and `NCCL_*` for the known issues. Unset: none.",
    )
    reported: ReportedInput = Field(
        default_factory=ReportedInput,
        description="The `reported:` section: throughput a run measured, checked for plausibility. Unset: nothing checked.",
    )
    overheads: OverheadsInput = Field(
        default_factory=OverheadsInput,
        description="The `overheads:` section: memory outside PyTorch tensors, each replacing moeplan's planning value. Unset: the planning values.",
    )
    assumptions: AssumptionsInput = Field(
        default_factory=AssumptionsInput,
        description="The `assumptions:` section: modelling inputs that are not Megatron keys. Unset: moeplan's planning values.",
    )
    workload: WorkloadInput | None = Field(
        default=None,
        description="The `workload:` section: what a VLM's data looks like per sequence (`moeplan vlm-stats -o` writes it). Unset for a VLM: half of each sequence is costed as image tokens, and the header says so.",
    )
    peft: PeftInput | None = Field(
        default=None,
        description="The `peft:` section: LoRA adapters as Megatron Bridge builds them (`cfg.peft = LoRA(...)`). Unset: full training of every weight.",
    )
    unmodelled_keys: dict[str, Any] = Field(
        default_factory=dict,
        description="Megatron keys of the `layout:` section that moeplan does not model but megatron-core, Megatron-LM or Megatron Bridge has at the stated release (`inputs/data/megatron_keys.json`): moved here from `layout:`, carried to the exports as written (Bridge YAML under their section, Megatron-LM flags) and named once in the text output as not modelled. Unset: none.",
    )


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


def pydantic_to_input_error(exc: ValidationError) -> InputError:
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


def _stated(versions: object, key: str) -> Any:
    v = versions.get(key) if isinstance(versions, dict) else None
    return parse_version(v, f"versions.{key}") if isinstance(v, str) else None


#: Megatron's precision keys: moeplan models them as ``training.precision`` (``fp8`` + ``fp8_recipe``
#: → fp8-tensorwise / -delayed / -blockwise / mxfp8, ``fp4`` → nvfp4); under ``layout:`` they set
#: (or must agree with) the precision, and exports write them from it (:func:`_layout_precision`)
PRECISION_KEYS = frozenset({"fp8", "fp8_recipe", "fp8_format", "fp4", "fp4_recipe", "fp4_format", "bf16", "fp16"})


_FP8_RECIPE_PRECISION = {
    "tensorwise": "fp8-tensorwise",
    "delayed": "fp8-delayed",
    "blockwise": "fp8-blockwise",
    "mxfp8": "mxfp8",
}


def _layout_precision(keys: dict) -> str | None:
    """The ``training.precision`` Megatron's precision keys under ``layout:`` name, as Megatron reads
    them: ``fp4`` / ``fp4_recipe`` → nvfp4; ``fp8`` (or ``fp8_format``) with ``fp8_recipe`` (default
    ``delayed``, ``TransformerConfig``) → that FP8 recipe; ``fp8_recipe`` alone → that recipe (a
    Bridge ``mixed_precision`` preset sets both); ``bf16`` alone → bf16; none → None.

    Raises:
        InputError: ``fp16`` (not modelled), or an ``fp8_recipe`` moeplan does not model.
    """
    if keys.get("fp16"):
        raise InputError(
            "layout.fp16", keys["fp16"], "bf16 or an FP8 / FP4 recipe: moeplan does not model FP16 training"
        )
    if keys.get("fp4") or keys.get("fp4_recipe") or keys.get("fp4_format"):
        return "nvfp4"
    recipe = keys.get("fp8_recipe")
    if recipe is not None and recipe not in _FP8_RECIPE_PRECISION:
        raise InputError("layout.fp8_recipe", recipe, f"one of {', '.join(_FP8_RECIPE_PRECISION)}")
    if keys.get("fp8") or keys.get("fp8_format") or recipe is not None:
        return _FP8_RECIPE_PRECISION[recipe or "delayed"]
    return "bf16" if keys.get("bf16") else None


def _training_with_precision(data: dict, layout: dict) -> Any:
    """``data['training']`` with the precision the layout's precision keys name (:func:`_layout_precision`)
    when none is stated; unchanged when they name none or the same one.

    Raises:
        InputError: they name another precision than ``training.precision`` states.
    """
    training = data.get("training")
    named = _layout_precision({k: v for k, v in layout.items() if k in PRECISION_KEYS})
    if named is None or (training is not None and not isinstance(training, dict)):
        return training
    stated = (training or {}).get("precision")
    if stated is not None and stated != named:
        key = next(k for k in layout if k in PRECISION_KEYS)
        raise InputError(
            f"layout.{key}", layout[key], f"a value that agrees with training.precision={stated!r} (it names {named})"
        )
    return {**(training or {}), "precision": named}


def split_unmodelled(data: dict) -> dict:
    """``data`` with the ``layout:`` keys moeplan does not model moved to ``unmodelled_keys`` (with
    those stated there), each checked against Megatron's key tables at the stated
    ``versions.megatron_core`` / ``versions.megatron_bridge`` (:func:`moeplan.inputs.megatron_keys.check_key`);
    a null one is left out (not stated). Returns ``data`` itself when there is nothing to move.

    Raises:
        InputError: a key in no table at the stated release, naming it, the nearest names and the
            releases that have it; a value of a kind its key table does not give
            (:func:`~moeplan.inputs.megatron_keys.check_value_type`); a ``training:`` key written under
            ``layout:``; a malformed stated version.
    """
    layout, given = data.get("layout", {}), data.get("unmodelled_keys")
    layout = {} if layout is None else layout
    if not isinstance(layout, dict) or (not isinstance(given, dict) and given is not None):
        return data
    merged = {**(given or {}), **layout}
    modelled = LayoutSpec.model_fields
    if all(k in modelled for k in merged) and not given:
        return data
    vers = data.get("versions")
    mcore, bridge = _stated(vers, "megatron_core"), _stated(vers, "megatron_bridge")
    carried = {}
    for k, v in merged.items():
        if k in TrainingSpec.model_fields:  # modelled, in another section
            raise InputError(f"layout.{k}", v, f"training.{k} (a training key, stated under training:)")
        if (
            k not in modelled
            and k not in PRECISION_KEYS
            and check_key(str(k), v, modelled, mcore, bridge) == "accepted"
            and v is not None
        ):
            check_value_type(str(k), v)
            carried[str(k)] = v
    kept = {k: v for k, v in merged.items() if k in modelled}
    out = {**data, "layout": kept, "unmodelled_keys": carried}
    training = _training_with_precision(data, merged)
    return out if training is None else {**out, "training": training}


def _check_layout_values(data: dict) -> None:
    """Layout values within plausible bounds (integers up to :data:`MAX_LAYOUT_INT`, floats up to
    :data:`MAX_LAYOUT_FLOAT`, list items too) and label lists without repeats (a repeated unknown
    label would be reported once per repeat). The bounds apply to the keys moeplan models; a Megatron
    key it does not model (``train_samples`` counts samples, far beyond any parallel size) is checked
    only for the kind of value its key table gives (:func:`moeplan.inputs.megatron_keys.check_value_type`).

    Raises:
        InputError: naming ``layout.KEY``, the value and what is allowed.
    """
    layout = data.get("layout")
    if not isinstance(layout, dict):
        return
    for key, v in layout.items():
        _check_layout_item(key, v)
    _check_virtual_stages(layout)


def _check_layout_item(key: str, v: object) -> None:
    """One layout value within the bounds :func:`_check_layout_values` states (a key moeplan does not
    model is skipped).

    Raises:
        InputError: naming ``layout.KEY``, the value and what is allowed.
    """
    if key not in LayoutSpec.model_fields:  # type-checked by split_unmodelled
        return
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


def _check_virtual_stages(layout: dict) -> None:
    """PP · VPP at most :data:`MAX_STAGES` virtual stages.

    Raises:
        InputError: naming ``layout.virtual_pipeline_model_parallel_size``.
    """
    pp, vpp = layout.get("pipeline_model_parallel_size"), layout.get("virtual_pipeline_model_parallel_size")
    if isinstance(pp, int) and isinstance(vpp, int) and pp * vpp > MAX_STAGES:
        raise InputError(
            "layout.virtual_pipeline_model_parallel_size", vpp, f"PP · VPP at most {MAX_STAGES:,} virtual stages"
        )


def scenario_from_dict(data: dict | None) -> ScenarioInput:
    """Validate a scenario mapping under the input policy (:func:`moeplan.inputs.policy.check_plain`:
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
    _check_layout_values(data)
    data = split_unmodelled(data)
    _check_unknown_keys(data)
    gpu = (data.get("system") or {}).get("gpu") if isinstance(data.get("system"), dict) else None
    if isinstance(gpu, dict):
        unknown = [k for k in gpu if k not in GpuSpec.model_fields]
        if unknown:
            raise UnknownNameError(f"system.gpu.{unknown[0]}", unknown[0], GpuSpec.model_fields, "a GPU field:")
        try:
            GpuSpec.model_validate(gpu)
        except ValidationError as exc:
            err = pydantic_to_input_error(exc)
            raise InputError("system.gpu." + err.field, err.value, err.allowed) from None
    clean = {k: v for k, v in without_nulls(data).items() if not (k in _SECTIONS and v is None)}
    if clean.get("model_overrides") is None:
        clean.pop("model_overrides", None)
    if clean.get("environment") is not None:
        if not isinstance(clean["environment"], dict):
            raise InputError("environment", clean["environment"], "a mapping of variable names to values")
        for k, v in clean["environment"].items():
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", str(k)):
                raise InputError(
                    f"environment.{k}", k, "a variable name of letters, digits and _ (not starting with a digit)"
                )
            if isinstance(
                v, (dict, list, tuple, set)
            ):  # a variable holds one text; a number or boolean is written as text
                raise InputError(f"environment.{k}", v, "one value: a string, number or boolean")
        clean["environment"] = {str(k): str(v) for k, v in dict(clean["environment"]).items()}
        alloc_options(clean["environment"].get(ALLOC_CONF))  # PyTorch would refuse a malformed one at start-up
    try:
        return ScenarioInput.model_validate(clean)
    except ValidationError as exc:
        raise pydantic_to_input_error(exc) from None


def layout_only_change(data: dict) -> bool:
    """True when :func:`scenario_input_with` can build ``data``'s input from a template: ``layout`` and
    ``training`` are mappings, every layout key is one moeplan models (nothing for
    :func:`split_unmodelled` to move) and no ``unmodelled_keys`` are given."""
    layout, training = data.get("layout"), data.get("training")
    return (
        isinstance(layout, dict)
        and isinstance(training, dict)
        and data.get("unmodelled_keys") is None
        and all(k in LayoutSpec.model_fields for k in layout)
    )


#: (section, key, type, value) of the ``training`` and ``layout`` items that passed every per-item check
#: of :func:`scenario_input_with` (plain value, layout bounds, known key): a pure function of the item
_CHECKED_ITEMS: set[tuple] = set()
#: at most this many items are remembered (then the memory starts again)
_CHECKED_ITEMS_MAX = 20000


def _checked_before(sec: str, key: object, v: object) -> bool:
    """Whether the item passed :func:`scenario_input_with`'s per-item checks before (an unhashable
    value, a list or a mapping, is never remembered)."""
    try:
        return (sec, key, type(v), v) in _CHECKED_ITEMS
    except TypeError:
        return False


def _unchecked_items(data: dict) -> dict[str, dict]:
    """The ``training`` and ``layout`` sections of ``data`` (in the mapping's order) without the items
    that passed the per-item checks before; a section over :data:`~moeplan.inputs.policy.MAX_ITEMS`
    items is kept whole, so that its size is refused as :func:`check_plain` refuses it."""
    out: dict[str, dict] = {}
    for sec in data:
        if sec in ("training", "layout"):
            items = data[sec]
            if len(items) > MAX_ITEMS:
                out[sec] = items
            else:
                out[sec] = {k: v for k, v in items.items() if not _checked_before(sec, k, v)}
    return out


def _remember_checked(fresh: dict[str, dict]) -> None:
    """Remember the items of ``fresh`` (all passed) for :func:`_checked_before`."""
    if len(_CHECKED_ITEMS) > _CHECKED_ITEMS_MAX:
        _CHECKED_ITEMS.clear()
    for sec, items in fresh.items():
        for k, v in items.items():
            try:
                _CHECKED_ITEMS.add((sec, k, type(v), v))
            except TypeError:
                continue


def scenario_input_with(template: ScenarioInput, data: dict) -> ScenarioInput:
    """The validated input of ``data`` built from ``template``, the input :func:`scenario_from_dict` gave
    for a mapping equal to ``data`` in every section but ``layout`` and ``training`` (the planner's
    candidates differ from their request only there): those two sections are checked and validated as
    :func:`scenario_from_dict` checks them (plain values, layout bounds, known keys, nulls read as
    unset) and laid over the template; the other sections are not validated again. Requires
    :func:`layout_only_change`.

    Raises:
        InputError: a plain-value or layout-bound violation, as :func:`scenario_from_dict` raises it.
        ValidationError: a value pydantic refuses (call :func:`scenario_from_dict` for the error it names).
    """
    fresh = _unchecked_items(data)
    for sec, items in fresh.items():  # in the mapping's order, as check_plain walks it
        check_plain(items, sec, 1)
    for key, v in fresh["layout"].items():
        _check_layout_item(key, v)
    _check_virtual_stages(data["layout"])
    _check_unknown_keys(fresh)
    _remember_checked(fresh)
    training = TrainingSpec.model_validate({k: v for k, v in data["training"].items() if v is not None})
    layout = LayoutSpec.model_validate({k: v for k, v in data["layout"].items() if v is not None})
    return template.model_copy(update={"training": training, "layout": layout})
