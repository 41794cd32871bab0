"""Activation recompute and activation offload rules (``megatron_facts.md`` §3.4, §4.6)."""

from __future__ import annotations

from moeplan.rules.base import rule

MODULES_0_16 = ("core_attn", "moe_act", "layernorm", "mla_up_proj", "mlp", "moe", "shared_experts")
MODULES_0_19 = MODULES_0_16 + ("gdn_norm_out",)
#: Shorthand labels used in prose guidance → the real Megatron-Core labels.
SHORTHAND = {
    "up_proj": "mla_up_proj",
    "norm": "layernorm",
    "attn": "core_attn",
    "act": "moe_act",
    "shared_expert": "shared_experts",
    "gdn": "gdn_norm_out",
}


def allowed_modules(version: tuple[int, ...]) -> tuple[str, ...]:
    """Allowed ``recompute_modules`` for a megatron-core version (0.16–0.18: seven labels;
    0.19+: adds ``gdn_norm_out``)."""
    return MODULES_0_19 if version >= (0, 19, 0) else MODULES_0_16


def _full_fields(s, e) -> list:
    """Full recompute's fields: ``recompute_method`` set, ``recompute_num_layers`` set and ≥ 1, and 1
    with uniform recompute when the model has MTP layers (MultiTokenPredictionLayer asserts it)."""
    lay = s.layout
    out = []
    if lay.recompute_method is None:
        out.append(
            e.error(
                "recompute_granularity full needs recompute_method (uniform or block)",
                "set recompute_method: uniform",
                "recompute_method",
            )
        )
    if lay.recompute_num_layers is None:
        out.append(
            e.error(
                "recompute_granularity full needs recompute_num_layers",
                "set recompute_num_layers: 1 (uniform: layers per checkpoint chunk)",
                "recompute_num_layers",
            )
        )
    elif lay.recompute_num_layers < 1:
        out.append(
            e.error(
                f"recompute_num_layers ({lay.recompute_num_layers}) must be ≥ 1",
                "use 1 (uniform: layers per checkpoint chunk)",
                "recompute_num_layers",
            )
        )
    elif lay.recompute_method == "uniform" and lay.recompute_num_layers != 1 and s.mtp_num_layers:
        out.append(
            e.error(
                f"recompute_num_layers ({lay.recompute_num_layers}) must be 1 with uniform recompute and MTP "
                "layers (MultiTokenPredictionLayer asserts it)",
                "set recompute_num_layers: 1, or recompute_method: block (MTP blocks then run without recompute)",
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
                    "recompute_num_layers must be unset for selective recompute",
                    "unset recompute_num_layers",
                    "recompute_num_layers",
                )
            )
        if lay.recompute_method is not None:
            out.append(
                e.error(
                    "recompute_method must be unset for selective recompute (Megatron-LM asserts it)",
                    "unset recompute_method",
                    "recompute_method",
                )
            )
    elif lay.recompute_method is not None or lay.recompute_num_layers:
        out.append(
            e.warning(
                "recompute_method / recompute_num_layers are set but recompute_granularity is not: "
                "nothing is recomputed",
                "set recompute_granularity: full",
                "recompute_granularity",
            )
        )
    if lay.distribute_saved_activations and (s.sp or s.tp == 1 or g != "full"):
        out.append(
            e.error(
                "distribute_saved_activations needs full recompute, TP > 1 and no sequence parallel",
                "turn distribute_saved_activations off",
                "distribute_saved_activations",
            )
        )
    return out


def _shorthand_fix(mod: str, real: str, m) -> str:
    """The fix for a shorthand label ``mod`` meaning the Megatron-Core label ``real``: use the real
    label, or drop it when model ``m`` (if known) has nothing it would recompute."""
    fix = f"use {real!r}"
    if m is not None and m.num_layers is not None:
        if real == "mla_up_proj" and not m.multi_latent_attention:
            fix = f"drop {mod!r}: {m.name} has no MLA up-projections (for GQA use 'core_attn' or 'layernorm')"
        elif real == "gdn_norm_out" and not m.has_linear_attention:
            fix = f"drop {mod!r}: {m.name} has no Gated DeltaNet layers"
    return fix


def _label_names(s, e, mods: list[str]) -> list:
    """Each of ``mods`` must be a label of the scenario's megatron-core version: a shorthand from prose
    guidance, a label of a later version and an unknown label are errors, in the order given."""
    allowed = allowed_modules(s.mcore_version)
    ver = ".".join(map(str, s.mcore_version))
    out = []
    for mod in mods:
        if mod in allowed:
            continue
        if mod in SHORTHAND:
            real = SHORTHAND[mod]
            out.append(
                e.error(
                    f"recompute module {mod!r} is shorthand, not a Megatron-Core label (it means {real!r})",
                    _shorthand_fix(mod, real, s.model),
                    "recompute_modules",
                )
            )
        elif mod in MODULES_0_19:
            out.append(
                e.error(
                    f"recompute module {mod!r} needs megatron-core ≥ 0.19 (scenario: {ver})",
                    "upgrade megatron-core or drop it",
                    "recompute_modules",
                )
            )
        else:
            out.append(
                e.error(
                    f"unknown recompute module {mod!r}", f"use labels from {', '.join(allowed)}", "recompute_modules"
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
                "mla_up_proj recompute needs multi-latent attention; the model uses GQA",
                "drop mla_up_proj",
                "recompute_modules",
            )
        )
    if "gdn_norm_out" in mods and not m.has_linear_attention:
        out.append(
            e.error("gdn_norm_out recompute needs Gated DeltaNet layers", "drop gdn_norm_out", "recompute_modules")
        )
    if ({"moe", "moe_act"} & set(mods)) and not m.is_moe:
        out.append(
            e.warning(
                "moe / moe_act recompute on a model without routed experts has no effect",
                "drop them",
                "recompute_modules",
            )
        )
    if "shared_experts" in mods and not m.moe_shared_expert_intermediate_size:
        out.append(
            e.warning(
                "shared_experts recompute on a model without shared experts has no effect",
                "drop it",
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
                "moe_act recompute needs moe_grouped_gemm",
                "set moe_grouped_gemm: true",
                "recompute_modules",
                "moe_grouped_gemm",
            )
        )
    if "shared_experts" in mods and lay.moe_shared_expert_overlap:
        out.append(
            e.error(
                "shared_experts recompute cannot be combined with moe_shared_expert_overlap",
                "drop one of them",
                "recompute_modules",
            )
        )
    if {"moe_act", "layernorm"} & set(mods) and s.training.precision == "fp8-delayed":
        out.append(
            e.error(
                "moe_act / layernorm recompute are not allowed with the FP8 delayed-scaling recipe",
                "use fp8-tensorwise or drop them",
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
    how = "" if lay.recompute_modules is not None else " (recompute_modules unset: Megatron recomputes core_attn)"
    return [
        e.warning(
            f"recomputing core attention at {seq:,} tokens{how} repeats the attention forward, the largest cost "
            "of a long-context step, while flash attention keeps little to save (its output and log-sum-exp)",
            "recompute other modules (layernorm, moe_act, mla_up_proj, mlp/moe), offload the optimizer, or raise CP",
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
                f"recompute_modules {mods} are ignored unless recompute_granularity is selective",
                "set recompute_granularity: selective",
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
                f"cpu_offloading (layer-level activation offload) needs PP = 1 (is {s.pp})",
                "use fine_grained_activation_offloading, or PP = 1",
                "cpu_offloading",
                "pipeline_model_parallel_size",
            )
        )
    if lay.recompute_granularity is not None:
        out.append(
            e.error(
                "cpu_offloading cannot be combined with activation recompute",
                "drop recompute or offloading",
                "cpu_offloading",
                "recompute_granularity",
            )
        )
    if s.graphs_on() and lay.cuda_graph_impl != "full_iteration":
        out.append(
            e.error(
                "cpu_offloading allows CUDA graphs only with cuda_graph_impl full_iteration",
                "use full_iteration graphs or none",
                "cpu_offloading",
                "cuda_graph_impl",
            )
        )
    n = lay.cpu_offloading_num_layers
    if n is not None and s.model is not None and s.model.num_layers and n >= s.model.num_layers:
        out.append(
            e.error(
                f"cpu_offloading_num_layers ({n}) must be < num_layers ({s.model.num_layers})",
                f"use at most {s.model.num_layers - 1}",
                "cpu_offloading_num_layers",
            )
        )
    if lay.fine_grained_activation_offloading:
        out.append(
            e.error(
                "cpu_offloading and fine_grained_activation_offloading are mutually exclusive",
                "keep one",
                "cpu_offloading",
            )
        )
    return out
