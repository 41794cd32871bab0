"""Resolution: a validated :class:`~moeplan.inputs.schema.ScenarioInput` → a frozen
:class:`~moeplan.inputs.resolved.Scenario`. The model and GPU are loaded, recipe fills applied (from a
:class:`~moeplan.inputs.provenance.RecipeProvenance` record), then the framework's effective defaults
filled for keys still unset, one small function per concern, each fill recorded as a
:class:`~moeplan.inputs.resolved.Resolution` in the order below.

Sources: megatron-core ``ModelParallelConfig`` / ``TransformerConfig`` / ``OptimizerConfig`` /
``DistributedDataParallelConfig`` defaults and Megatron Bridge ``models/transformer_config.py::finalize``
and HF providers (``megatron_facts.md`` §3, vendored in ``tests/data/reference``; ``megatron_recipes.md`` §1.3).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from moeplan.catalog.containers import lookup_container
from moeplan.catalog.gpus import get_gpu
from moeplan.catalog.models import get_model
from moeplan.errors import InputError, UnknownNameError
from moeplan.i18n.messages import msg
from moeplan.inputs.layout import LayoutSpec
from moeplan.inputs.megatron_keys import check_key
from moeplan.inputs.model_spec import PartialModelSpec, partial_model
from moeplan.inputs.provenance import RecipeProvenance
from moeplan.inputs.resolved import NEWEST_BRIDGE, NEWEST_MCORE, Resolution, Scenario
from moeplan.inputs.schema import ScenarioInput, SystemInput, pydantic_to_input_error
from moeplan.inputs.system import GpuSpec
from moeplan.inputs.versions import PACKAGES, ResolvedVersions, release_version, resolve_versions
from moeplan.resolve.frameworks import (
    base_framework,
    driver_defaults,
    driver_fixups,
    rollout_statement,
    sequences_statement,
)
from moeplan.resolve.recipe_fills import apply_recipe, recipe_for_input


def resolve_model(inp: ScenarioInput) -> PartialModelSpec | None:
    """The scenario's model: a catalog model or config.json with ``model_overrides`` applied, a
    partial model from the overrides alone, or None.

    Raises:
        InputError / UnknownNameError: a blank or unknown model name, bad overrides.
    """

    if inp.model is not None and not inp.model.strip():
        raise InputError("model", inp.model, "a built-in model name, a config.json path, or null")
    if inp.model:
        return get_model(inp.model).with_overrides(inp.model_overrides)
    if inp.model_overrides:
        return partial_model(inp.model_overrides)
    return None


def _resolve_gpu(system: SystemInput) -> GpuSpec | None:
    """The catalog GPU (or the custom mapping) with ``gpu_overrides`` applied; None when no GPU.

    Raises:
        InputError / UnknownNameError: overrides without a GPU, unknown or invalid override fields.
    """

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
            e = pydantic_to_input_error(exc)
            raise InputError("system.gpu_overrides." + e.field, e.value, e.allowed) from None
    reserved = system.reserved_gib
    if reserved is not None and reserved >= gpu.usable_hbm_gib:
        raise InputError(
            "system.reserved_gib",
            reserved,
            f"at least 0 and less than {gpu.id}'s usable {gpu.usable_hbm_gib:.2f} GiB (memory a colocated "
            "engine holds on each GPU)",
        )
    return gpu


def _gpus_per_node(system: SystemInput, gpu: GpuSpec | None) -> tuple[int | None, list[Resolution]]:
    """GPUs per node: as stated, else 4 on GB200/GB300 (NVL72 compute trays) or 8 (HGX/DGX)."""
    if system.gpus_per_node is not None or gpu is None:
        return system.gpus_per_node, []
    gpn = 4 if gpu.is_nvl72 else 8
    why = "GB200/GB300 compute trays hold 4 GPUs" if gpu.is_nvl72 else "HGX/DGX nodes hold 8 GPUs"
    return gpn, [Resolution("system.gpus_per_node", gpn, why)]


def _parallel_defaults(lay: LayoutSpec, bridge: bool) -> list[Resolution]:
    """ETP (megatron-core ``ModelParallelConfig``: TP; Bridge ``finalize``: 1 when EP > 1) and SP (on
    with TP > 1, as Bridge recipes set it; required for MoE with TP > 1). SP stated true with TP = 1
    is turned off, as both frameworks do before megatron-core's config would raise: Megatron-LM's
    ``validate_args`` with a warning (``megatron/training/arguments.py``), Bridge's
    ``TransformerConfig.finalize`` silently (``models/transformer_config.py``, v0.5.1 and v0.6.0)."""
    out: list[Resolution] = []
    tp, ep = lay.tensor_model_parallel_size, lay.expert_model_parallel_size
    if lay.expert_tensor_parallel_size is None:
        if bridge and ep > 1:
            out.append(
                Resolution("expert_tensor_parallel_size", 1, "unset: Megatron Bridge resolves ETP to 1 when EP > 1")
            )
        else:
            why = (
                "unset: megatron-core resolves ETP to TP"
                if not bridge
                else "unset: Megatron Bridge keeps ETP = TP when EP = 1"
            )
            out.append(Resolution("expert_tensor_parallel_size", tp, why))
    if lay.sequence_parallel is None:
        why = "unset: on with TP > 1 as Bridge recipes set it" if tp > 1 else "unset: off with TP = 1"
        out.append(Resolution("sequence_parallel", tp > 1, why))
    elif lay.sequence_parallel and tp == 1:
        why = (
            "stated true with TP = 1: Megatron Bridge's finalize turns it off"
            if bridge
            else "stated true with TP = 1: Megatron-LM's argument check turns it off with a warning"
        )
        out.append(Resolution("sequence_parallel", False, why))
    return out


def _moe_defaults(lay: LayoutSpec, model: PartialModelSpec | None, bridge: bool) -> list[Resolution]:
    """Token dispatcher (``alltoall`` in Bridge HF providers, ``allgather`` in megatron-core), the
    flex backend (``deepep``, megatron-core's default), ``flex`` when only a backend is given, grouped
    GEMM (on in Bridge MoE providers, off in megatron-core)."""
    out: list[Resolution] = []
    moe = model is not None and model.is_moe
    if moe and lay.moe_token_dispatcher_type is None:
        why = "unset: Bridge HF providers use alltoall" if bridge else "unset: megatron-core default"
        out.append(Resolution("moe_token_dispatcher_type", "alltoall" if bridge else "allgather", why))
    if moe and lay.moe_token_dispatcher_type == "flex" and lay.moe_flex_dispatcher_backend is None:
        out.append(Resolution("moe_flex_dispatcher_backend", "deepep", "unset: megatron-core default for flex"))
    if lay.moe_token_dispatcher_type is None and lay.moe_flex_dispatcher_backend is not None and not moe:
        out.append(Resolution("moe_token_dispatcher_type", "flex", "unset: a flex backend was given"))
    if lay.moe_grouped_gemm is None and moe:
        why = "unset: Bridge MoE providers enable grouped GEMM" if bridge else "unset: megatron-core default"
        out.append(Resolution("moe_grouped_gemm", bridge, why))
    return out


def _optimizer_defaults(lay: LayoutSpec, bridge: bool) -> list[Resolution]:
    """Distributed optimizer (on in Bridge recipes and with Megatron-FSDP, off in megatron-core),
    gradient reduce-scatter and parameter all-gather overlap (on in Bridge recipes; not with
    Megatron-FSDP), precision-aware optimizer (off, ``OptimizerConfig``), and with optimizer CPU
    offload under megatron-core the offloaded share (1.0, Megatron-LM's ``--optimizer-offload-fraction``
    default in ``megatron/training/arguments.py``; Bridge passes ``OptimizerConfig``'s 0.0 through)."""
    out: list[Resolution] = []
    dist_opt = lay.use_distributed_optimizer
    if dist_opt is None:
        dist_opt = bridge or lay.use_megatron_fsdp
        why = (
            "unset: Bridge recipes use the distributed optimizer"
            if bridge
            else "unset: megatron-core OptimizerConfig default"
        )
        out.append(Resolution("use_distributed_optimizer", dist_opt, why))
    grad_overlap = lay.overlap_grad_reduce
    if grad_overlap is None and not lay.use_megatron_fsdp:
        grad_overlap = bridge
        why = (
            "unset: Bridge recipes overlap the gradient reduce-scatter with backward"
            if bridge
            else "unset: megatron-core DistributedDataParallelConfig default"
        )
        out.append(Resolution("overlap_grad_reduce", bridge, why))
    if lay.overlap_param_gather is None and dist_opt and not lay.use_megatron_fsdp:
        why = (
            "unset: Bridge recipes overlap the parameter all-gather with forward"
            if bridge
            else "unset: megatron-core DistributedDataParallelConfig default"
        )
        out.append(Resolution("overlap_param_gather", bridge and grad_overlap is not False, why))
    if lay.use_precision_aware_optimizer is None:
        out.append(Resolution("use_precision_aware_optimizer", False, "unset: OptimizerConfig default"))
    if lay.optimizer_cpu_offload and lay.optimizer_offload_fraction is None and not bridge:
        # Megatron-LM's training scripts default --optimizer-offload-fraction to 1.0 (training/arguments.py);
        # OptimizerConfig's own default, which Bridge passes through, is 0.0
        out.append(
            Resolution("optimizer_offload_fraction", 1.0, "unset: Megatron-LM's --optimizer-offload-fraction default")
        )
    return out


def _graph_defaults(lay: LayoutSpec) -> list[Resolution]:
    """CUDA graph impl when only a scope is given (``full_iteration`` for that scope, else
    ``transformer_engine``) and the TE RNG tracker with graphs on (Megatron-LM and Bridge enable it)."""
    out: list[Resolution] = []
    impl = lay.cuda_graph_impl
    if impl is None and (lay.cuda_graph_scope or lay.cuda_graph_modules):
        scopes = lay.cuda_graph_scope if lay.cuda_graph_modules is None else lay.cuda_graph_modules
        impl = "full_iteration" if scopes in ("full_iteration", ["full_iteration"]) else "transformer_engine"
        why = "unset but a graph scope was given: scoped capture uses transformer_engine"
        out.append(Resolution("cuda_graph_impl", impl, why))
    if lay.use_te_rng_tracker is None and (impl or "none") != "none":
        out.append(Resolution("use_te_rng_tracker", True, "unset: enabled automatically with CUDA graphs"))
    keeps = _graphs_keep_mask(lay, impl)
    if lay.create_attention_mask_in_dataloader is None and keeps is not None:
        full = keeps == "full_iteration"
        why = msg("release_truths.mask_default_full_iteration") if full else msg("release_truths.mask_default_te")
        out.append(Resolution("create_attention_mask_in_dataloader", True, why))
    return out


def _graphs_keep_mask(lay: LayoutSpec, impl: str | None) -> str | None:
    """Which graphs would hold attention masks: ``"full_iteration"`` (a full-iteration graph's static
    data batch, full_cuda_graph.py ``StaticBufferLoader``: it copies the batch as given, so a dataloader
    without masks leaves none), ``"te"`` (TE per-layer graphs with attention captured, megatron-core
    transformer_layer.py ``get_layer_static_inputs``: up to core_v0.19.0 it builds the [b, 1, s/CP, s]
    mask whatever the dataloader does; the dev branch skips it with
    ``create_attention_mask_in_dataloader`` false from PR #5131, commit cefc252015) or None (no mask)."""
    src = lay.cuda_graph_scope if lay.cuda_graph_modules is None else lay.cuda_graph_modules
    scopes = [src] if isinstance(src, str) else list(src or [])
    if impl == "full_iteration" or scopes == ["full_iteration"]:
        return "full_iteration"
    return "te" if impl == "transformer_engine" and (not scopes or "attn" in scopes) else None


def _mtp_default(lay: LayoutSpec, model: PartialModelSpec | None) -> list[Resolution]:
    """MTP layers from the model config when the layout does not set them."""
    if lay.mtp_num_layers is None and model is not None and model.mtp_num_layers:
        return [Resolution("mtp_num_layers", model.mtp_num_layers, "unset: from the model config")]
    return []


def _vpp_from_megatron_lm_keys(
    keys: Mapping[str, Any], lay: LayoutSpec, model: PartialModelSpec | None
) -> tuple[LayoutSpec, list[Resolution]]:
    """VPP from Megatron-LM's ``num_virtual_stages_per_pipeline_rank`` or
    ``num_layers_per_virtual_pipeline_stage`` (keys moeplan carries but does not model), as
    ``validate_args`` derives it (``megatron/training/arguments.py``): the former is VPP itself; the
    latter gives VPP = (num_layers [+1 with account_for_embedding] [+1 with account_for_loss]) / PP /
    it; a VPP of 1 means none. A stated VPP, PP = 1 or no model leaves the layout as it is (the key
    stays listed as not modelled).

    Raises:
        InputError: the layers do not divide by PP, or a stage's layers by the key (Megatron-LM asserts both).
    """
    stages, per = keys.get("num_virtual_stages_per_pipeline_rank"), keys.get("num_layers_per_virtual_pipeline_stage")
    pp = lay.pipeline_model_parallel_size
    if lay.virtual_pipeline_model_parallel_size is not None or pp <= 1 or (stages is None and per is None):
        return lay, []
    if isinstance(stages, int) and not isinstance(stages, bool):
        vpp, why = stages, "from num_virtual_stages_per_pipeline_rank (Megatron-LM's validate_args)"
    elif isinstance(per, int) and not isinstance(per, bool) and per > 0 and model is not None and model.num_layers:
        layers = model.num_layers + bool(lay.account_for_embedding_in_pipeline_split)
        layers += bool(lay.account_for_loss_in_pipeline_split)
        if layers % pp or (layers // pp) % per:
            allowed = f"a divisor of the {layers // pp if layers % pp == 0 else layers / pp:g} layers per stage ({layers} layers / PP {pp}; Megatron-LM asserts it)"
            raise InputError("layout.num_layers_per_virtual_pipeline_stage", per, allowed)
        vpp = layers // pp // per
        why = f"from num_layers_per_virtual_pipeline_stage={per}: {layers} layers / PP {pp} / {per} (Megatron-LM's validate_args)"
    else:
        return lay, []
    if vpp <= 1:
        return lay, []
    return lay.model_copy(update={"virtual_pipeline_model_parallel_size": vpp}), [
        Resolution("virtual_pipeline_model_parallel_size", vpp, why)
    ]


def framework_defaults(lay: LayoutSpec, model: PartialModelSpec | None, framework: str) -> list[Resolution]:
    """Every framework default for keys ``lay`` leaves unset, in resolution order: parallel sizes,
    MoE, optimizer, CUDA graphs, MTP (each reads ``lay`` as filled by the recipe, before these)."""
    bridge = framework == "megatron-bridge"
    return [
        *_parallel_defaults(lay, bridge),
        *_moe_defaults(lay, model, bridge),
        *_optimizer_defaults(lay, bridge),
        *_graph_defaults(lay),
        *_mtp_default(lay, model),
    ]


def _check_training(inp: ScenarioInput) -> None:
    if inp.peft is not None and (inp.training.freeze_vision_model or inp.training.freeze_language_model):
        raise InputError(
            "peft", inp.peft.scheme, "no freeze_vision_model / freeze_language_model with it (LoRA freezes the base)"
        )
    if inp.training.freeze_vision_model and inp.training.freeze_language_model:
        raise InputError(
            "training.freeze_language_model", True, "not together with freeze_vision_model (nothing would train)"
        )


@dataclass
class RequestParts:
    """What :func:`resolve` reads of a scenario input's sections other than ``layout`` and ``training``:
    the model, the GPU, GPUs per node (with its fill) and, once first asked, the versions (with their
    fills). Candidates that differ from one input only in those two sections share one record
    (:func:`request_parts` of any of them), so each is computed once per request."""

    model: PartialModelSpec | None
    gpu: GpuSpec | None
    gpus_per_node: int | None
    gpn_fills: tuple[Resolution, ...]
    versions: tuple[ResolvedVersions, tuple[Resolution, ...]] | None = None

    def versions_of(self, inp: ScenarioInput) -> tuple[ResolvedVersions, tuple[Resolution, ...]]:
        """The resolved versions of ``inp`` and their container fills (computed on first call, then kept).

        Raises:
            InputError: a stated version that is not PEP 440, or a layout key the container's releases lack
                (:func:`_check_keys_at_container`; not kept: asked again, raised again).
        """
        if self.versions is None:
            vers, vfills = resolve_versions(
                {k: getattr(inp.versions, k) for k in PACKAGES}, inp.versions.container, lookup_container
            )
            _check_keys_at_container(inp, vers)  # once per request: the unmodelled keys are part of it
            self.versions = vers, tuple(Resolution(key, value, reason) for key, value, reason in vfills)
        return self.versions


def request_parts(inp: ScenarioInput) -> RequestParts:
    """:class:`RequestParts` of ``inp`` (versions left for :meth:`RequestParts.versions_of`).

    Raises:
        InputError / UnknownNameError: unknown model or GPU, bad overrides, LoRA on a VLM.
    """
    model = resolve_model(inp)
    if inp.peft is not None and model is not None and model.vision is not None:
        raise InputError("peft", inp.peft.scheme, "a language model: LoRA on a VLM (Bridge's VLMLoRA) is not modelled")
    gpu = _resolve_gpu(inp.system)
    gpn, res = _gpus_per_node(inp.system, gpu)
    stated = not isinstance(inp.system.gpu, str) or "scaleup_domain_gpus" in inp.system.gpu_overrides
    return RequestParts(model, gpu if stated else _node_nvlink(gpu, gpn), gpn, tuple(res))


def _node_nvlink(gpu: GpuSpec | None, gpus_per_node: int | None) -> GpuSpec | None:
    """``gpu`` with its NVLink domain cut to the node's GPUs when fewer GPUs per node are stated than an
    HGX-style domain holds (a 4-GPU H100 node reaches 4 GPUs over NVLink, not 8: every group wider than
    the node crosses the NIC); an NVL72 domain spans nodes and is kept, and so is a domain the scenario
    states (a custom GPU, or ``gpu_overrides.scaleup_domain_gpus``: the caller does not cut it)."""
    if gpu is None or gpus_per_node is None or gpu.is_nvl72 or gpus_per_node >= gpu.scaleup_domain_gpus:
        return gpu
    return gpu.model_copy(update={"scaleup_domain_gpus": gpus_per_node})


def resolve(inp: ScenarioInput, recipe: RecipeProvenance | None = None, parts: RequestParts | None = None) -> Scenario:
    """Resolve a validated scenario: load the model and GPU, apply recipe fills, fill Megatron
    defaults, derive sizes.

    Args:
        inp: the validated input.
        recipe: recipe fills already computed elsewhere (the planner computes its request's once and
            passes them to every candidate): applied as given, no recipe row is matched. None: the
            fills of ``inp.recipe_defaults`` for this scenario's own layout
            (:func:`moeplan.resolve.recipe_fills.recipe_for_input`).

    Defaults filled (each recorded as a :class:`Resolution`, after the recipe fills):
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
    - ``create_attention_mask_in_dataloader`` unset: True (Megatron-LM's default, mcore
      ``GPTDatasetConfig.create_attention_mask``) where graphs would keep masks (TE graphs capturing
      attention, full-iteration graphs).
    - ``mtp_num_layers`` unset: the model config's MTP layers.
    - ``framework`` a driver (:mod:`moeplan.resolve.frameworks`): first Megatron-LM's argument fix-ups
      (megatron-lm, slime, ms-swift) and the driver's own defaults, then its base's defaults above.
    - ``versions.*`` unset with ``versions.container`` naming a release in the container table
      (:mod:`moeplan.catalog.containers`): that release's package versions (recorded last). They feed
      :attr:`Scenario.versions` (known issues, doctor, compare) and ``mcore_version`` / ``bridge_version``,
      which the layout rules, the planner and the export compare: the stated versions, else the
      container's, else the newest.

    ``parts``: :func:`request_parts` of ``inp`` or of an input that differs from it only in ``layout``
    and ``training`` (the planner's candidates of one request share one); None: computed here.

    Raises:
        InputError / UnknownNameError: unknown model or GPU, bad overrides, both freeze flags set.
    """
    parts = parts if parts is not None else request_parts(inp)
    model, gpu, gpn, res = parts.model, parts.gpu, parts.gpus_per_node, list(parts.gpn_fills)
    stated = frozenset(inp.layout.model_fields_set)
    lay, applied = inp.layout, None
    record = recipe if recipe is not None else recipe_for_input(inp, model)
    if record is not None:
        lay, fills, applied = apply_recipe(lay, stated, record, model)
        res += fills
    lay, driven, stated_only = _driver_fills(inp, lay, model is not None and model.is_moe)
    res += driven
    lay, vpp = _vpp_from_megatron_lm_keys(inp.unmodelled_keys, lay, model)
    res += vpp
    defaults = framework_defaults(lay, model, base_framework(inp.framework))
    res += defaults + stated_only
    layout = lay.model_copy(update=_updates(defaults)) if defaults else lay
    _check_training(inp)
    vers, vfills = parts.versions_of(inp)
    res += vfills
    return Scenario(
        input=inp,
        model=model,
        gpu=gpu,
        num_gpus=inp.system.num_gpus,
        gpus_per_node=gpn,
        training=inp.training,
        layout=layout,
        stated=stated,
        framework=base_framework(inp.framework),
        driver=inp.framework,
        # the layout rules read the versions stated, else the ones the stated container ships (what the
        # export spells its keys for, io.export.target_mcore), else the newest moeplan knows
        mcore_version=release_version(vers.get("megatron_core"), NEWEST_MCORE),
        bridge_version=release_version(vers.get("megatron_bridge"), NEWEST_BRIDGE),
        environment=dict(inp.environment),
        resolutions=res,
        recipe=applied,
        versions=vers,
    )


def _driver_fills(
    inp: ScenarioInput, lay: LayoutSpec, moe: bool
) -> tuple[LayoutSpec, list[Resolution], list[Resolution]]:
    """The layout after the named driver's own changes (:mod:`moeplan.resolve.frameworks`): its fix-ups
    (Megatron-LM's argument fix-ups for a driver that passes Megatron-LM arguments), then its defaults for
    keys still unset; the changes applied, and the statements recorded but not applied (a colocated
    rollout engine's memory, how sequences are fed)."""
    fixups = driver_fixups(_stated_layout(lay), inp.framework)
    lay = lay.model_copy(update=_updates(fixups)) if fixups else lay
    fills = driver_defaults(lay, inp.framework, moe)
    lay = lay.model_copy(update=_updates(fills)) if fills else lay
    notes = rollout_statement(inp.framework, inp.system.reserved_gib) + sequences_statement(inp.framework, inp.training)
    return lay, fixups + fills, notes


def _stated_layout(lay: LayoutSpec) -> dict[str, Any]:
    """The layout keys set (stated or filled by a recipe) with their values."""
    return {k: getattr(lay, k) for k in lay.model_fields_set}


def _check_keys_at_container(inp: ScenarioInput, vers: ResolvedVersions) -> None:
    """The layout keys moeplan does not model, checked again at the releases a stated container ships
    when it fills megatron-core or Megatron Bridge (input validation checked them at the stated releases
    only): a key that release lacks is refused as a stated release's would be.

    Raises:
        InputError: as :func:`moeplan.inputs.megatron_keys.check_key`, naming the key and the releases.
    """
    filled = [k for k in ("megatron_core", "megatron_bridge") if vers.sources.get(k, "").startswith("container")]
    if not inp.unmodelled_keys or not filled:
        return
    mcore, bridge = vers.get("megatron_core"), vers.get("megatron_bridge")
    for key, value in inp.unmodelled_keys.items():
        check_key(key, value, LayoutSpec.model_fields, mcore, bridge)


def _updates(resolutions: list[Resolution]) -> Mapping[str, Any]:
    return {r.key: r.value for r in resolutions}
