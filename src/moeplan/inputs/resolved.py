"""The resolved scenario: a frozen :class:`Scenario` (inputs plus Megatron's effective defaults, each
fill recorded as a :class:`Resolution`, the recipe fills also as a
:class:`~moeplan.inputs.provenance.RecipeProvenance` record), and the newest versions moeplan knows.

Built by :func:`moeplan.resolve.defaults.resolve`; read by the rules and the estimators.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from packaging.version import Version

from moeplan.errors import InputError
from moeplan.inputs.layout import LayoutSpec
from moeplan.inputs.megatron_keys import describe_unmodelled
from moeplan.inputs.model_spec import ModelSpec, PartialModelSpec
from moeplan.inputs.peft import PeftInput
from moeplan.inputs.system import GpuSpec
from moeplan.inputs.training import TrainingSpec
from moeplan.inputs.versions import ResolvedVersions
from moeplan.units import GIB_BYTES

if TYPE_CHECKING:
    from moeplan.inputs.provenance import RecipeProvenance
    from moeplan.inputs.schema import ScenarioInput

#: the newest megatron-core release moeplan knows, assumed when the scenario names none
NEWEST_MCORE = "0.20.0"
#: the newest Megatron Bridge release (v0.6.0, 2026-08-19, on its release branch; ``megatron_facts.md``, vendored in
#: ``tests/data/reference``, reads main @067f987 of 2026-08-22), assumed when the scenario names none
NEWEST_BRIDGE = "0.6.0"


@dataclass(frozen=True)
class Resolution:
    """One effective value filled in because the user did not state it.

    Attributes:
        key: a LayoutSpec key, or ``system.gpus_per_node``.
        value: the value filled (the key's type).
        reason: why, as printed in ``resolved_defaults`` (e.g. ``unset: megatron-core resolves ETP
            to TP``; ``recipe fill: ...`` for a recipe fill, whose structured record is
            :attr:`Scenario.recipe`).
    """

    key: str
    value: Any
    reason: str


@dataclass(frozen=True)
class Scenario:
    """A resolved scenario (immutable): the inputs plus Megatron's effective defaults, ready for the
    rules and estimators. ``layout`` holds effective values; ``stated`` the keys the user gave.

    Attributes:
        input: the validated input it was resolved from.
        model: None when the scenario names no model (rules needing it are skipped).
        gpu: None when no GPU is named.
        num_gpus / gpus_per_node: world size and GPUs per node (None when unknown).
        mcore_version / bridge_version: the release of megatron-core / Megatron Bridge the layout rules
            compare (:func:`~moeplan.inputs.versions.release_version`: major.minor.micro, a release
            candidate read as its release): the stated one, else the one a stated ``versions.container``
            ships, else the newest moeplan knows.
        versions: every package's full PEP 440 version (None when unknown) and its source (the user
            or the container table): what the known-issue ranges compare.
        resolutions: every default filled, in order (framework defaults and recipe fills).
        recipe: the recipe fills applied (``recipe_defaults: mbridge-perf``): matched row and, per
            key, its value and the helper that set it; None with ``recipe_defaults: none``.
        dp / edp: derived data-parallel and expert-data-parallel sizes, None when W is unknown or
            the division is not exact (the world-size rules report that).
    """

    input: ScenarioInput
    model: PartialModelSpec | None
    gpu: GpuSpec | None
    num_gpus: int | None
    gpus_per_node: int | None
    training: TrainingSpec
    layout: LayoutSpec
    stated: frozenset[str]
    framework: str
    mcore_version: Version
    bridge_version: Version
    environment: dict[str, str]
    resolutions: list[Resolution] = field(default_factory=list)
    recipe: RecipeProvenance | None = None
    versions: ResolvedVersions = field(default_factory=ResolvedVersions)
    #: the ``framework:`` named (a driver such as verl or slime); ``framework`` is its base resolution
    driver: str = ""

    # shorthand for the parallel sizes
    @property
    def tp(self) -> int:
        """Tensor-parallel size (GPUs per TP group)."""
        return self.layout.tensor_model_parallel_size

    @property
    def pp(self) -> int:
        """Pipeline-parallel size (stages)."""
        return self.layout.pipeline_model_parallel_size

    @property
    def vpp(self) -> int:
        """Virtual stages per PP rank (1 when not interleaved; VPP 1 means no interleaving)."""
        return self.layout.virtual_pipeline_model_parallel_size or 1

    @property
    def cp(self) -> int:
        """Context-parallel size (GPUs a sequence is split over)."""
        return self.layout.context_parallel_size

    @property
    def ep(self) -> int:
        """Expert-parallel size (GPUs the routed experts are spread over)."""
        return self.layout.expert_model_parallel_size

    @property
    def etp(self) -> int:
        """Expert tensor-parallel size (1 when unset after resolution)."""
        return self.layout.expert_tensor_parallel_size or 1

    @property
    def sp(self) -> bool:
        """True when sequence parallelism is on."""
        return bool(self.layout.sequence_parallel)

    @property
    def dp(self) -> int | None:
        """Data-parallel size W / (TP·PP·CP); None when W is unknown or not divisible."""
        w, d = self.num_gpus, self.tp * self.pp * self.cp
        return w // d if w and w % d == 0 else None

    @property
    def edp(self) -> int | None:
        """Expert data-parallel size W / (ETP·EP·PP); None when W is unknown or not divisible."""
        w, d = self.num_gpus, self.etp * self.ep * self.pp
        return w // d if w and w % d == 0 else None

    @property
    def complete_model(self) -> ModelSpec:
        """The model as a complete :class:`ModelSpec`, for the estimators (parameters, memory, time).

        Raises:
            InputError: no model, or a partial one (naming the fields it lacks).
        """
        if self.model is None:
            raise InputError("model", None, "a value: the estimate needs a model")
        return self.model.completed()

    @property
    def mtp_num_layers(self) -> int:
        """MTP blocks: the layout's ``mtp_num_layers``, else the model config's, else 0."""
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

    @property
    def peft(self) -> PeftInput | None:
        """The LoRA adapters (``peft:``), None when the whole model trains."""
        return self.input.peft

    @property
    def reserved_bytes(self) -> int:
        """Device memory per GPU held by a colocated engine (``system.reserved_gib`` · 2**30; 0 when
        not stated)."""
        return int((self.input.system.reserved_gib or 0.0) * GIB_BYTES)

    @property
    def capacity_bytes(self) -> int | None:
        """The device memory the training step may use, bytes: the GPU's usable HBM
        (:attr:`GpuSpec.usable_hbm_bytes`) minus :attr:`reserved_bytes`; None without a GPU. Every
        fit verdict (estimate, plan, fit, oom) is judged against this one figure."""
        return None if self.gpu is None else self.gpu.usable_hbm_bytes - self.reserved_bytes

    @property
    def host_capacity_bytes_per_node(self) -> int | None:
        """Host RAM of one node, bytes: ``system.host_memory_gib`` · 2**30 when stated, else the
        catalog's ``host_mem_per_gpu_gb`` (decimal GB) × GPUs per node; None when unknown."""
        stated = self.input.system.host_memory_gib
        if stated is not None:
            return int(stated * GIB_BYTES)
        if self.gpu is not None and self.gpu.host_mem_per_gpu_gb and self.gpus_per_node:
            return int(self.gpu.host_mem_per_gpu_gb * 1e9 * self.gpus_per_node)
        return None

    def megatron_core_dev_build(self) -> bool:
        """True when ``versions.megatron_core`` states a dev build: a dev release (``0.20.0.dev0``) or a
        local label naming it (``0.19.0+dev``), the way a dev-branch checkout is written down."""
        v = self.versions.get("megatron_core")
        return v is not None and (v.is_devrelease or "dev" in str(v.local or ""))

    def skips_graph_attention_mask(self) -> bool:
        """True when Transformer Engine's per-layer graphs are built without the dummy attention mask:
        ``create_attention_mask_in_dataloader: false`` on a megatron-core dev build. The flag reaches
        ``get_layer_static_inputs`` only since PR #5131 (commit cefc252015, June 2026, on the dev branch;
        in no core_v* tag up to core_v0.19.0), so every release builds the mask regardless of it."""
        return self.layout.create_attention_mask_in_dataloader is False and self.megatron_core_dev_build()

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
        """Plain mapping for JSON output: model, GPU, GPU count, framework, megatron-core version,
        sizes with derived DP/EDP, and each resolution as ``{key, value, reason}`` (the recipe fills'
        reasons are the record's text, ``recipe fill: <reason>``), ``unmodelled_keys`` — only when the
        layout states Megatron keys moeplan does not model — each with its Bridge path, Megatron-LM
        tokens and whether it may move memory or time (:func:`~moeplan.inputs.megatron_keys.describe_unmodelled`),
        and ``recipe_left_out`` — only when
        a recipe fill was left out because it would break a rule for this model — each
        ``key=value (why)``."""
        return {
            "model": self.model.name if self.model else None,
            "gpu": self.gpu.id if self.gpu else None,
            "num_gpus": self.num_gpus,
            "framework": self.framework,
            **({"driver": self.driver} if self.driver and self.driver != self.framework else {}),
            "megatron_core_version": str(self.mcore_version),
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
            **(
                {"unmodelled_keys": describe_unmodelled(self.input.unmodelled_keys, self.bridge_version)}
                if self.input.unmodelled_keys
                else {}
            ),
            **(
                {"recipe_left_out": list(self.recipe.left_out)}
                if self.recipe is not None and self.recipe.left_out
                else {}
            ),
        }
