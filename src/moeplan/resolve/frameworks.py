"""The frameworks that drive Megatron, as data: for each name ``framework:`` takes, the base resolution
it uses (megatron-core's dataclass defaults or Megatron Bridge's recipe defaults), whether it passes
Megatron-LM's arguments (and so gets Megatron-LM's argument fix-ups), its own defaults that differ from
that base, whether it colocates a rollout engine with training, its router replay and how it feeds
sequences. Every fact names its source (repository, file, commit).

Resolution (:func:`moeplan.resolve.defaults.resolve`) reads this table: a driver's defaults fill the
layout keys the scenario leaves unset before the base framework's own defaults, and each fill is a
:class:`~moeplan.inputs.resolved.Resolution` whose reason names the driver and its source. The
importers (:mod:`moeplan.io.driver_configs`) read the same table.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from moeplan.i18n.messages import msg
from moeplan.inputs.layout import LayoutSpec
from moeplan.inputs.resolved import Resolution
from moeplan.inputs.training import TrainingSpec
from moeplan.structure.stages import LayoutSyntaxError, parse_layout

#: every name ``framework:`` takes, the two base resolutions first
FRAMEWORK_NAMES = ("megatron-bridge", "megatron-core", "megatron-lm", "verl", "slime", "nemo-rl", "ms-swift", "skyrl")


@dataclass(frozen=True)
class Driver:
    """One framework that drives Megatron.

    Attributes:
        name: the ``framework:`` value.
        base: ``megatron-core`` or ``megatron-bridge``: whose defaults fill what the driver leaves unset.
        megatron_lm_args: True when it passes Megatron-LM's arguments (``megatron/training/arguments.py``
            ``validate_args`` then rewrites some of them: :func:`megatron_lm_fixups`).
        rollout: the rollout engine it colocates with training on the same GPUs by default, "" when none
            (its memory is ``system.reserved_gib``).
        router_replay: how it replays the rollout's expert routing in training ("" when it has no switch).
        sequences: how it feeds sequences (packing, variable lengths).
        defaults: layout key → the driver's own default where it differs from the base.
        source: where the facts come from (repository, file, commit).
    """

    name: str
    base: str
    megatron_lm_args: bool
    rollout: str
    router_replay: str
    sequences: str
    defaults: Mapping[str, Any]
    source: str


_VERL = "volcengine/verl verl/trainer/config/engine/megatron.yaml, actor/megatron_actor.yaml @b178a3cd (2026-01-29)"
_SLIME = "THUDM/slime slime/backends/megatron_utils/arguments.py _set_default_megatron_args @624b824a (2026-08-21)"
_NEMO_RL = "NVIDIA-NeMo/RL examples/configs/grpo_math_1B_megatron.yaml policy.megatron_cfg @ab287f52 (2026-08-16)"
_SWIFT = "modelscope/ms-swift swift/megatron/arguments/megatron_args.py @552e00aa (2026-08-04)"
_SKYRL = "NovaSky-AI/SkyRL skyrl/train/config/config.py MegatronConfig @7bc25240 (2026-07-31)"

DRIVERS: dict[str, Driver] = {
    "megatron-bridge": Driver(
        "megatron-bridge", "megatron-bridge", False, "", "", "as the recipe sets", {}, "Megatron Bridge"
    ),
    "megatron-core": Driver("megatron-core", "megatron-core", False, "", "", "as the caller sets", {}, "megatron-core"),
    "megatron-lm": Driver(
        "megatron-lm",
        "megatron-core",
        True,
        "",
        "",
        "padded to seq_length unless --use-varlen-dataset (THD)",
        {},
        "NVIDIA/Megatron-LM megatron/training/arguments.py",
    ),
    "verl": Driver(
        "verl",
        "megatron-core",  # builds megatron-core's TransformerConfig itself (McoreEngineConfig)
        False,
        "vLLM or SGLang (hybrid engine: actor and rollout share the GPUs)",
        "actor.router_replay.mode (default disabled)",
        "remove padding on (use_remove_padding: THD, variable lengths)",
        {"sequence_parallel": True, "use_distributed_optimizer": True, "attention_backend": "flash"},
        _VERL,
    ),
    "slime": Driver(
        "slime",
        "megatron-core",  # parses Megatron-LM's arguments with its own added (slime/utils/arguments.py)
        True,
        "SGLang (with --colocate on the training GPUs, else on its own GPUs)",
        "--use-routing-replay / --use-rollout-routing-replay (default off)",
        "--use-dynamic-batch-size packs up to --max-tokens-per-gpu (variable lengths)",
        {"use_distributed_optimizer": True},  # "always use zero optimizer"
        _SLIME,
    ),
    "nemo-rl": Driver(
        "nemo-rl",
        "megatron-bridge",  # builds a Megatron Bridge ConfigContainer from policy.megatron_cfg
        False,
        "vLLM (colocated by default: policy.generation.colocated.enabled)",
        "policy.router_replay.enabled (default false)",
        "policy.sequence_packing.enabled (THD packing, default on in the Megatron configs)",
        {
            "sequence_parallel": False,
            "moe_token_dispatcher_type": "alltoall",
            "moe_permute_fusion": True,
            "moe_router_load_balancing_type": "none",
            "apply_rope_fusion": True,
            "use_distributed_optimizer": True,
            "use_precision_aware_optimizer": True,
            "grad_reduce_in_fp32": False,
            "overlap_grad_reduce": True,
            "overlap_param_gather": True,
        },
        _NEMO_RL,
    ),
    "ms-swift": Driver(
        "ms-swift",
        "megatron-core",  # `megatron sft/rlhf` passes Megatron-LM's arguments (MegatronArguments)
        True,
        "vLLM for `megatron rlhf` GRPO (colocate mode shares the GPUs); none for sft",
        "",
        "padding_free on (THD, variable lengths); --packing packs samples",
        {
            "recompute_granularity": "selective",
            "cross_entropy_loss_fusion": True,
            "attention_backend": "flash",
            "use_distributed_optimizer": True,
            "sequence_parallel": False,
            "overlap_grad_reduce": False,
            "overlap_param_gather": False,
            "expert_tensor_parallel_size": 1,
            "moe_token_dispatcher_type": "alltoall",
            "moe_grouped_gemm": True,
            "moe_permute_fusion": False,
        },
        _SWIFT,
    ),
    "skyrl": Driver(
        "skyrl",
        "megatron-bridge",  # MegatronConfig passes through to Megatron Bridge
        False,
        "vLLM or SGLang (trainer.placement.colocate_all shares the GPUs)",
        "moe_enable_routing_replay (default false)",
        "sample packing on by default (trainer.use_sample_packing)",
        {
            "moe_token_dispatcher_type": "alltoall",
            "moe_grouped_gemm": True,
            "moe_router_load_balancing_type": "none",
            "grad_reduce_in_fp32": True,
            "overlap_grad_reduce": False,
            "overlap_param_gather": False,
        },
        _SKYRL,
    ),
}


def driver(name: str) -> Driver:
    """The :class:`Driver` named by ``framework:`` (validated by the schema, so always known)."""
    return DRIVERS[name]


def base_framework(name: str) -> str:
    """``megatron-core`` or ``megatron-bridge``: the resolution ``framework: name`` uses."""
    return DRIVERS[name].base


def driver_defaults(lay: LayoutSpec, name: str, moe: bool = True) -> list[Resolution]:
    """The driver's own defaults for the layout keys ``lay`` leaves unset (``sequence_parallel`` only
    with TP > 1: megatron-core refuses SP without TP; ``moe_*`` keys only for a MoE model, ``moe``),
    each a :class:`Resolution` naming the driver and its source; none for the two base frameworks."""
    d = DRIVERS[name]
    out: list[Resolution] = []
    for key, value in d.defaults.items():
        field = LayoutSpec.model_fields.get(key)
        if field is None or key in lay.model_fields_set or (key.startswith("moe_") and not moe):
            continue
        current = getattr(lay, key)
        if current == value or (current is not None and field.default is None):
            continue  # already so, or filled by a recipe
        if key == "sequence_parallel" and value and lay.tensor_model_parallel_size == 1:
            continue
        out.append(Resolution(key, value, msg("drivers.default_filled", driver=name, source=d.source)))
    return out


def megatron_lm_fixups(layout: Mapping[str, Any]) -> list[Resolution]:
    """What Megatron-LM's ``validate_args`` (``megatron/training/arguments.py``) rewrites in a layout
    before training starts, each as a :class:`Resolution` saying so:

    - ``sequence_parallel`` true with TP = 1: turned off ("Disabling sequence parallelism because
      tensor model parallelism is disabled");
    - ``expert_tensor_parallel_size`` unset: TP;
    - ``pipeline_model_parallel_layout`` given: ``virtual_pipeline_model_parallel_size`` = its stages /
      PP (unset when 1);
    - ``cuda_graph_impl`` other than none with ``use_te_rng_tracker`` unset or false: turned on.

    ``layout`` is a mapping of layout keys (the stated ones); nothing is changed in place.
    """
    out: list[Resolution] = []
    tp = layout.get("tensor_model_parallel_size") or 1
    if layout.get("sequence_parallel") and tp == 1:
        out.append(Resolution("sequence_parallel", False, msg("drivers.fixup_sp_off")))
    if layout.get("expert_tensor_parallel_size") is None:
        out.append(Resolution("expert_tensor_parallel_size", tp, msg("drivers.fixup_etp_tp")))
    vpp = _layout_vpp(layout)
    if vpp is not None and layout.get("virtual_pipeline_model_parallel_size") != vpp:
        out.append(Resolution("virtual_pipeline_model_parallel_size", vpp, msg("drivers.fixup_vpp_layout", vpp=vpp)))
    if (layout.get("cuda_graph_impl") or "none") != "none" and not layout.get("use_te_rng_tracker"):
        out.append(Resolution("use_te_rng_tracker", True, msg("drivers.fixup_te_rng")))
    return out


def _layout_vpp(layout: Mapping[str, Any]) -> int | None:
    """Virtual stages per pipeline rank a ``pipeline_model_parallel_layout`` string implies (its
    stages // PP; None when 1, when there is no layout, or when it does not parse or divide)."""
    text = layout.get("pipeline_model_parallel_layout")
    pp = layout.get("pipeline_model_parallel_size") or 1
    if not isinstance(text, str) or not isinstance(pp, int):
        return None
    try:
        stages = len(parse_layout(text))
    except LayoutSyntaxError:
        return None
    if stages % pp or stages // pp <= 1:
        return None
    return stages // pp


def driver_fixups(layout: Mapping[str, Any], name: str) -> list[Resolution]:
    """What the driver itself rewrites in a stated layout before Megatron sees it: Megatron-LM's
    fix-ups (:func:`megatron_lm_fixups`) for a driver that passes Megatron-LM arguments; verl turns
    ``sequence_parallel`` off with TP = 1 (``McoreEngineConfig.__post_init__``, verl/workers/config/
    engine.py: "set sequence parallel to false as TP size is 1")."""
    if DRIVERS[name].megatron_lm_args:
        return megatron_lm_fixups(layout)
    if name == "verl" and layout.get("sequence_parallel") and (layout.get("tensor_model_parallel_size") or 1) == 1:
        return [Resolution("sequence_parallel", False, msg("drivers.fixup_sp_off_verl"))]
    return []


def rollout_statement(name: str, reserved_gib: float | None) -> list[Resolution]:
    """For a driver that colocates a rollout engine: a statement that its resident memory is
    ``system.reserved_gib`` (0 when unset, said so); none for the others."""
    d = DRIVERS[name]
    if not d.rollout or reserved_gib is not None:
        return []
    return [Resolution("system.reserved_gib", 0.0, msg("drivers.rollout_unreserved", driver=name, engine=d.rollout))]


def sequences_statement(name: str, training: TrainingSpec) -> list[Resolution]:
    """How the driver feeds sequences, stated when the scenario says nothing about packing."""
    d = DRIVERS[name]
    if (
        d.base == name
        or "packed_sequences" in training.model_fields_set
        or "variable_length" in training.model_fields_set
    ):
        return []
    return [Resolution("training.packed_sequences", False, msg("drivers.sequences", driver=name, how=d.sequences))]
