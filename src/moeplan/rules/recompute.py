"""Activation recompute and activation offload rules (``megatron_facts.md`` §3.4, §4.6;
vendored in ``tests/data/reference``)."""

from __future__ import annotations

from packaging.version import Version

from moeplan.i18n.messages import msg
from moeplan.rules.base import is_dev_build, rule
from moeplan.rules.dsv4 import HYPER_CONNECTIONS_MCORE

MODULES_0_16 = ("core_attn", "moe_act", "layernorm", "mla_up_proj", "mlp", "moe", "shared_experts")
MODULES_0_19 = MODULES_0_16 + ("gdn_norm_out",)
#: the first megatron-core with the ``gdn_norm_out`` recompute label
GDN_RECOMPUTE_MCORE = Version("0.19.0")
#: Shorthand labels used in prose guidance → the real Megatron-Core labels.
SHORTHAND = {
    "up_proj": "mla_up_proj",
    "norm": "layernorm",
    "attn": "core_attn",
    "act": "moe_act",
    "shared_expert": "shared_experts",
    "gdn": "gdn_norm_out",
}


def allowed_modules(version: Version) -> tuple[str, ...]:
    """Allowed ``recompute_modules`` for a megatron-core version (0.16–0.18: seven labels;
    0.19+: adds ``gdn_norm_out``)."""
    return MODULES_0_19 if version >= GDN_RECOMPUTE_MCORE else MODULES_0_16


def _full_fields(s, e) -> list:
    """Full recompute's fields: ``recompute_method`` set, ``recompute_num_layers`` set and ≥ 1, and 1
    with uniform recompute when the model has MTP layers (MultiTokenPredictionLayer asserts it)."""
    lay = s.layout
    out = []
    if lay.recompute_method is None:
        out.append(
            e.error(
                msg("recompute.full_needs_method"),
                msg("recompute.full_needs_method.fix"),
                "recompute_method",
            )
        )
    if lay.recompute_num_layers is None:
        out.append(
            e.error(
                msg("recompute.full_needs_num_layers"),
                msg("recompute.full_needs_num_layers.fix"),
                "recompute_num_layers",
            )
        )
    elif lay.recompute_num_layers < 1:
        out.append(
            e.error(
                msg("recompute.num_layers_below_one", n=lay.recompute_num_layers),
                msg("recompute.num_layers_below_one.fix"),
                "recompute_num_layers",
            )
        )
    elif lay.recompute_method == "uniform" and lay.recompute_num_layers != 1 and s.mtp_num_layers:
        out.append(
            e.error(
                msg("recompute.num_layers_not_one_with_mtp", n=lay.recompute_num_layers),
                msg("recompute.num_layers_not_one_with_mtp.fix"),
                "recompute_num_layers",
            )
        )
    return out


@rule(
    "recompute.granularity_fields",
    "[TC] transformer_config.py; [ARGS]",
    "full recompute needs recompute_method (uniform|block) and recompute_num_layers in 1..L/PP "
    "(1 with uniform and MTP layers: multi_token_prediction.py); selective must leave both unset",
)
def _fields(s, e):
    lay = s.layout
    g = lay.recompute_granularity
    out = []
    if g == "full":
        out.extend(_full_fields(s, e))
    elif g == "selective":
        if lay.recompute_num_layers is not None:
            out.append(
                e.error(
                    msg("recompute.selective_with_num_layers"),
                    msg("recompute.unset_key", key="recompute_num_layers"),
                    "recompute_num_layers",
                )
            )
        if lay.recompute_method is not None:
            out.append(
                e.error(
                    msg("recompute.selective_with_method"),
                    msg("recompute.unset_key", key="recompute_method"),
                    "recompute_method",
                )
            )
    elif lay.recompute_method is not None or lay.recompute_num_layers:
        out.append(
            e.warning(
                msg("recompute.fields_without_granularity"),
                msg("recompute.set_granularity", granularity="full"),
                "recompute_granularity",
            )
        )
    if lay.distribute_saved_activations and (s.sp or s.tp == 1 or g != "full"):
        out.append(
            e.error(
                msg("recompute.distribute_saved_activations_needs"),
                msg("recompute.distribute_saved_activations_needs.fix"),
                "distribute_saved_activations",
            )
        )
    return out


def _shorthand_fix(mod: str, real: str, m) -> str:
    """The fix for a shorthand label ``mod`` meaning the Megatron-Core label ``real``: use the real
    label, or drop it when model ``m`` (if known) has nothing it would recompute."""
    fix = msg("recompute.use_label", label=real)
    if m is not None and m.num_layers is not None:
        if real == "mla_up_proj" and not m.multi_latent_attention:
            fix = msg("recompute.drop_shorthand_no_mla", label=mod, model=m.name)
        elif real == "gdn_norm_out" and not m.has_linear_attention:
            fix = msg("recompute.drop_shorthand_no_gdn", label=mod, model=m.name)
    return fix


def _label_names(s, e, mods: list[str]) -> list:
    """Each of ``mods`` must be a label of the scenario's megatron-core version: a shorthand from prose
    guidance, a label of a later version and an unknown label are errors, in the order given."""
    allowed = allowed_modules(s.mcore_version)
    if "mhc" in mods and (s.mcore_version >= HYPER_CONNECTIONS_MCORE or is_dev_build(s)):
        allowed += ("mhc",)  # hyper-connections' label: main 0.20.0 and the dev branch (rules/dsv4.py)
    ver = str(s.mcore_version)
    out = []
    for mod in mods:
        if mod in allowed:
            continue
        if mod in SHORTHAND:
            real = SHORTHAND[mod]
            out.append(
                e.error(
                    msg("recompute.shorthand_label", label=mod, real=real),
                    _shorthand_fix(mod, real, s.model),
                    "recompute_modules",
                )
            )
        elif mod in MODULES_0_19:
            out.append(
                e.error(
                    msg("recompute.label_needs_0_19", label=mod, version=ver),
                    msg("recompute.label_needs_0_19.fix"),
                    "recompute_modules",
                )
            )
        else:
            out.append(
                e.error(
                    msg("recompute.unknown_label", label=mod),
                    msg("recompute.unknown_label.fix", labels=", ".join(allowed)),
                    "recompute_modules",
                )
            )
    return out


def _labels_vs_model(s, e, mods: list[str]) -> list:
    """Labels among ``mods`` that the model cannot use: MLA up-projections without MLA and Gated DeltaNet
    outputs without GDN layers (errors), MoE and shared-expert parts it lacks (warnings: no effect).
    Nothing when the model is not known."""
    m = s.model
    if m is None or m.num_layers is None:
        return []
    out = []
    if "mla_up_proj" in mods and not m.multi_latent_attention:
        out.append(
            e.error(
                msg("recompute.mla_up_proj_without_mla"),
                msg("recompute.drop_label", label="mla_up_proj"),
                "recompute_modules",
            )
        )
    if "gdn_norm_out" in mods and not m.has_linear_attention:
        out.append(
            e.error(
                msg("recompute.gdn_norm_out_without_gdn"),
                msg("recompute.drop_label", label="gdn_norm_out"),
                "recompute_modules",
            )
        )
    if ({"moe", "moe_act"} & set(mods)) and not m.is_moe:
        out.append(
            e.warning(
                msg("recompute.moe_without_routed_experts"),
                msg("recompute.drop_them"),
                "recompute_modules",
            )
        )
    if "shared_experts" in mods and not m.moe_shared_expert_intermediate_size:
        out.append(
            e.warning(
                msg("recompute.shared_experts_without_shared_experts"),
                msg("recompute.drop_it"),
                "recompute_modules",
            )
        )
    return out


def _labels_vs_settings(s, e, mods: list[str]) -> list:
    """Labels among ``mods`` that other settings exclude: ``moe_act`` without grouped GEMM,
    ``shared_experts`` with shared-expert overlap, ``moe_act`` / ``layernorm`` with FP8 delayed scaling."""
    lay = s.layout
    out = []
    if "moe_act" in mods and lay.moe_grouped_gemm is False:
        out.append(
            e.error(
                msg("recompute.moe_act_without_grouped_gemm"),
                msg("recompute.moe_act_without_grouped_gemm.fix"),
                "recompute_modules",
                "moe_grouped_gemm",
            )
        )
    if "shared_experts" in mods and lay.moe_shared_expert_overlap:
        out.append(
            e.error(
                msg("recompute.shared_experts_with_overlap"),
                msg("recompute.shared_experts_with_overlap.fix"),
                "recompute_modules",
            )
        )
    if {"moe_act", "layernorm"} & set(mods) and s.training.precision == "fp8-delayed":
        out.append(
            e.error(
                msg("recompute.fp8_delayed_excludes_labels"),
                msg("recompute.fp8_delayed_excludes_labels.fix"),
                "recompute_modules",
            )
        )
    return out


#: from this sequence length, recomputing core attention repeats the largest cost of the step
CORE_ATTN_LONG_SEQ = 32768


@rule(
    "recompute.core_attn_long_context",
    "long-context guidance (Megatron Bridge long-context skill); [TC] recompute_modules",
    "at long context, core_attn recompute repeats the step's largest cost (attention) for little memory",
)
def _core_attn_long(s, e):
    lay = s.layout
    seq = s.training.seq_length or 0
    if lay.recompute_granularity != "selective" or seq < CORE_ATTN_LONG_SEQ:
        return None
    mods = lay.recompute_modules if lay.recompute_modules is not None else ["core_attn"]  # Megatron's default
    if "core_attn" not in mods:
        return None
    text = (
        msg("recompute.core_attn_at_long_context", tokens=seq)
        if lay.recompute_modules is not None
        else msg("recompute.core_attn_by_default_at_long_context", tokens=seq)
    )
    return [
        e.warning(
            text,
            msg("recompute.core_attn_at_long_context.fix"),
            "recompute_modules",
        )
    ]


@rule(
    "recompute.module_labels",
    "[TC] transformer_config.py (allowed recompute_modules)",
    "recompute_modules must use Megatron-Core labels of this version and apply to the model",
)
def _labels(s, e):
    lay = s.layout
    mods = lay.recompute_modules
    if not mods:
        return None
    if lay.recompute_granularity != "selective":
        # megatron-core validates recompute_modules only for selective granularity (0.16.1, oracle)
        return [
            e.warning(
                msg("recompute.modules_ignored_unless_selective", modules=mods),
                msg("recompute.set_granularity", granularity="selective"),
                "recompute_modules",
            )
        ]
    return [*_label_names(s, e, mods), *_labels_vs_model(s, e, mods), *_labels_vs_settings(s, e, mods)]


@rule(
    "offload.activation_cpu_offloading",
    "[TC] transformer_config.py",
    "layer-level cpu_offloading needs PP = 1, no recompute, no graphs unless full_iteration, and "
    "0 ≤ cpu_offloading_num_layers < num_layers",
)
def _act_offload(s, e):
    lay = s.layout
    if not lay.cpu_offloading:
        return None
    out = []
    if s.pp > 1:
        out.append(
            e.error(
                msg("offload.cpu_offloading_needs_pp_1", pp=s.pp),
                msg("offload.cpu_offloading_needs_pp_1.fix"),
                "cpu_offloading",
                "pipeline_model_parallel_size",
            )
        )
    if lay.recompute_granularity is not None:
        out.append(
            e.error(
                msg("offload.cpu_offloading_with_recompute"),
                msg("offload.cpu_offloading_with_recompute.fix"),
                "cpu_offloading",
                "recompute_granularity",
            )
        )
    if s.graphs_on() and lay.cuda_graph_impl != "full_iteration":
        out.append(
            e.error(
                msg("offload.cpu_offloading_with_graphs"),
                msg("offload.cpu_offloading_with_graphs.fix"),
                "cpu_offloading",
                "cuda_graph_impl",
            )
        )
    n = lay.cpu_offloading_num_layers
    if n is not None and s.model is not None and s.model.num_layers and n >= s.model.num_layers:
        out.append(
            e.error(
                msg("offload.cpu_offloading_num_layers_too_many", n=n, layers=s.model.num_layers),
                msg("offload.cpu_offloading_num_layers_too_many.fix", most=s.model.num_layers - 1),
                "cpu_offloading_num_layers",
            )
        )
    if lay.fine_grained_activation_offloading:
        out.append(
            e.error(
                msg("offload.cpu_offloading_and_fine_grained"),
                msg("offload.cpu_offloading_and_fine_grained.fix"),
                "cpu_offloading",
            )
        )
    return out
