"""CUDA graph rules (``megatron_facts.md`` §3.6, §4.7, vendored in ``tests/data/reference``)."""

from __future__ import annotations

from packaging.version import Version

from moeplan.i18n.messages import Message, msg
from moeplan.inputs.allocator import expandable_segments
from moeplan.inputs.versions import CUDA_GRAPH_MODULES_MCORE
from moeplan.rules.base import rule, set_key
from moeplan.rules.world import KEY_MIN_MCORE
from moeplan.structure.numerics import drop_and_pad

SCOPES = ("attn", "mlp", "moe", "moe_router", "moe_preprocess", "mamba", "full_iteration")


def _version_spelling(s, e, impl: str) -> list:
    """The graph settings against the scenario's megatron-core version: ``full_iteration`` impl and
    ``cuda_graph_modules`` need ≥ 0.18, scope and modules not both set, and an info that
    ``cuda_graph_scope`` is migrated to ``cuda_graph_modules`` from 0.18. ``impl``: the graph impl
    (``none`` when unset)."""
    lay = s.layout
    out = []
    ver = str(s.mcore_version)
    if impl == "full_iteration" and s.mcore_version < CUDA_GRAPH_MODULES_MCORE:
        out.append(
            e.error(
                msg("graphs.full_iteration_impl_needs_018", version=ver),
                msg("graphs.full_iteration_impl_needs_018.fix"),
                "cuda_graph_impl",
            )
        )
    if lay.cuda_graph_scope is not None and lay.cuda_graph_modules is not None:
        out.append(
            e.error(
                msg("graphs.scope_and_modules_both_set"),
                msg("graphs.scope_and_modules_both_set.fix"),
                "cuda_graph_scope",
            )
        )
    if lay.cuda_graph_modules is not None and s.mcore_version < CUDA_GRAPH_MODULES_MCORE:
        out.append(
            e.error(
                msg("graphs.modules_before_018", version=ver),
                msg("graphs.modules_before_018.fix"),
                "cuda_graph_modules",
            )
        )
    # said only of a stated key: a recipe fill's spelling is moeplan's, and exports write cuda_graph_modules
    if (
        lay.cuda_graph_scope is not None
        and s.mcore_version >= CUDA_GRAPH_MODULES_MCORE
        and "cuda_graph_scope" in s.stated
    ):
        out.append(
            e.info(
                msg("graphs.scope_is_deprecated_alias", version=ver),
                "cuda_graph_scope",
            )
        )
    return out


def _scope_list(e, impl: str, scopes: list[str]) -> list:
    """The graph scopes themselves: known names, empty with ``full_iteration`` graphs, neither the
    deprecated ``full`` nor ``full_iteration`` combined with other scopes, and no ``full_iteration``
    scope captured by transformer_engine graphs. ``impl``: the graph impl (``none`` when unset)."""
    out = []
    bad = [x for x in scopes if x not in SCOPES and x != "full"]
    if bad:
        out.append(
            e.error(
                msg("graphs.unknown_scope", scope=bad[0]),
                msg("graphs.unknown_scope.fix", scopes=", ".join(SCOPES)),
                "cuda_graph_scope",
            )
        )
    if impl == "full_iteration" and [x for x in scopes if x != "full_iteration"]:
        out.append(
            e.error(
                msg("graphs.full_iteration_needs_empty_scope", scopes=scopes),
                set_key("cuda_graph_scope", "[]"),
                "cuda_graph_scope",
            )
        )
    if "full" in scopes and len(scopes) > 1:
        out.append(
            e.error(
                msg("graphs.full_scope_combined"),
                msg("graphs.full_scope_combined.fix"),
                "cuda_graph_scope",
            )
        )
    if "full_iteration" in scopes and len(scopes) > 1:
        out.append(
            e.error(
                msg("graphs.full_iteration_scope_combined"),
                msg("graphs.full_iteration_scope_combined.fix"),
                "cuda_graph_scope",
            )
        )
    if impl == "transformer_engine" and "full_iteration" in scopes:
        out.append(
            e.error(
                msg("graphs.full_iteration_scope_with_te"),
                msg("graphs.use_impl", impl="full_iteration"),
                "cuda_graph_impl",
            )
        )
    return out


def _impl_platform(s, e, impl: str, scopes: list[str]) -> list:
    """The graph impl against the framework and the GPU: Megatron Bridge takes ``local`` only for
    full-iteration capture; Transformer Engine graphs need an NVIDIA GPU."""
    out = []
    if s.framework == "megatron-bridge" and impl == "local" and scopes and scopes != ["full_iteration"]:
        out.append(
            e.error(
                msg("graphs.bridge_local_only_full_iteration"),
                msg("graphs.bridge_local_only_full_iteration.fix"),
                "cuda_graph_impl",
            )
        )
    if s.gpu is not None and s.gpu.vendor != "NVIDIA" and impl == "transformer_engine":
        out.append(
            e.error(
                msg("graphs.te_graphs_nvidia_only", gpu=s.gpu.id),
                msg("graphs.use_impl", impl="none"),
                "cuda_graph_impl",
                kind="unsupported",
            )
        )
    return out


@rule(
    "graphs.impl_and_scope_values",
    "[TC] transformer_config.py; [B-CG] utils/cuda_graph.py",
    "cuda_graph_impl valid for the version; scopes valid; full_iteration with an empty scope; scope and "
    "modules not both set; Bridge uses local only for full-iteration capture",
)
def _values(s, e):
    impl = s.layout.cuda_graph_impl or "none"
    scopes = s.graph_scopes()
    return [*_version_spelling(s, e, impl), *_scope_list(e, impl, scopes), *_impl_platform(s, e, impl, scopes)]


def _vision_graphs_apart() -> Message:
    """Where a VLM's dense vision tower gets its graphs: ``vision_cuda_graph_impl`` /
    ``vision_cuda_graph_scope`` (a part of the fixes of ``graphs.moe_scopes`` and
    ``graphs.recompute_compatibility``).

    Why a VLM's graph settings are checked against its language model: Bridge's VLM providers are the
    language model's TransformerConfig (``finalize`` runs megatron-core's ``__post_init__`` checks on
    ``cuda_graph_impl`` / ``cuda_graph_scope`` / ``recompute_granularity``), while the vision tower's
    config is built with defaults and then assigned the recompute settings and
    ``vision_cuda_graph_impl`` / ``vision_cuda_graph_scope`` (Megatron Bridge @067f987
    ``models/qwen_vl/modelling_qwen3_vl/transformer_config.py`` ``get_vision_model_config``), so no
    check runs on it. docs/model/rules.md, "MoE-VLM graph scopes".
    """
    return msg("graphs.vision_tower_graphs_apart")


def _mlp_scope_all_moe(s, e):
    """The finding for an ``mlp`` graph scope on a model whose decoder layers are all MoE; for a VLM it
    says that the scope is the language model's, and where the dense vision tower's graphs go."""
    m = s.model
    if not m.is_vlm:
        return e.error(
            msg("graphs.mlp_scope_all_moe"),
            msg("graphs.mlp_scope_all_moe.fix"),
            "cuda_graph_scope",
        )
    return e.error(
        msg("graphs.mlp_scope_all_moe_vlm", model=m.name, layers=m.num_layers),
        msg("graphs.mlp_scope_all_moe_vlm.fix", vision=_vision_graphs_apart()),
        "cuda_graph_scope",
    )


#: the first Megatron Bridge with vision CUDA graphs (``vision_cuda_graph_impl`` / ``_scope``, PR 2334)
VISION_GRAPHS_BRIDGE = Version("0.5.0")


@rule(
    "graphs.vision_graph_keys",
    "Megatron Bridge @067f987 models/qwen_vl/qwen3_vl_provider.py (vision_cuda_graph_impl / _scope, PR 2334, "
    "v0.5.0); modelling_qwen3_vl/transformer_config.py get_vision_model_config",
    "vision_cuda_graph_impl / vision_cuda_graph_scope need a VLM, Megatron Bridge ≥ 0.5, and the scope needs "
    "the transformer_engine impl",
)
def _vision_graphs(s, e):
    lay = s.layout
    impl, scope = lay.vision_cuda_graph_impl, lay.vision_cuda_graph_scope
    if impl in (None, "none") and not scope:
        return None
    out = []
    m = s.model
    if m is not None and m.num_layers is not None and not m.is_vlm:
        out.append(
            e.error(
                msg("graphs.vision_graphs_without_tower", model=m.name),
                msg("graphs.drop_them"),
                "vision_cuda_graph_impl",
            )
        )
    if s.framework != "megatron-bridge":
        out.append(
            e.error(
                msg("graphs.vision_graph_keys_bridge_only"),
                msg("graphs.vision_graph_keys_bridge_only.fix"),
                "vision_cuda_graph_impl",
                kind="unsupported",
            )
        )
    elif s.bridge_version < VISION_GRAPHS_BRIDGE:
        out.append(
            e.error(
                msg("graphs.vision_graphs_need_bridge_05", version=str(s.bridge_version)),
                msg("graphs.vision_graphs_need_bridge_05.fix"),
                "vision_cuda_graph_impl",
            )
        )
    if scope and impl in (None, "none"):
        out.append(
            e.warning(
                msg("graphs.vision_scope_ignored"),
                set_key("vision_cuda_graph_impl", "transformer_engine"),
                "vision_cuda_graph_scope",
            )
        )
    return out


@rule(
    "graphs.moe_scopes",
    "[TC] transformer_config.py",
    "moe and moe_router not both; moe_preprocess needs moe_router; moe scopes need MoE; mlp not when every "
    "layer is MoE; moe needs drop-and-pad; moe_preprocess with alltoall needs no capacity factor/padding syncs",
)
def _moe_scopes(s, e):
    if not s.graphs_on() or s.layout.cuda_graph_impl == "full_iteration":
        return None
    sc = set(s.graph_scopes())
    lay = s.layout
    out = []
    if lay.cuda_graph_impl == "local" and sc & {"moe_router", "moe_preprocess"}:
        # the local impl captures router and preprocess together (megatron-core adds the missing one)
        sc |= {"moe_router", "moe_preprocess"}
    if {"moe", "moe_router"} <= sc:
        out.append(
            e.error(msg("graphs.moe_and_router_scopes"), msg("graphs.moe_and_router_scopes.fix"), "cuda_graph_scope")
        )
    if "moe_preprocess" in sc and "moe_router" not in sc:
        out.append(
            e.error(
                msg("graphs.preprocess_needs_router"),
                msg("graphs.preprocess_needs_router.fix"),
                "cuda_graph_scope",
            )
        )
    m = s.model
    known = m is not None and m.num_layers is not None
    if known and not m.is_moe and sc & {"moe", "moe_router", "moe_preprocess"}:
        out.append(
            e.error(
                msg("graphs.moe_scopes_without_experts"),
                msg("graphs.moe_scopes_without_experts.fix"),
                "cuda_graph_scope",
            )
        )
    if known and m.all_layers_moe and "mlp" in sc:
        out.append(_mlp_scope_all_moe(s, e))
    drop_pad = drop_and_pad(s)
    if "moe" in sc and not drop_pad:
        out.append(
            e.error(
                msg("graphs.moe_scope_needs_drop_and_pad"),
                msg("graphs.moe_scope_needs_drop_and_pad.fix"),
                "cuda_graph_scope",
                "moe_expert_capacity_factor",
            )
        )
    syncs = (
        lay.moe_expert_capacity_factor is not None and lay.moe_expert_capacity_factor >= 0
    ) or lay.moe_router_padding_for_fp8
    if "moe_preprocess" in sc and not drop_pad and lay.moe_token_dispatcher_type == "alltoall" and syncs:
        out.append(
            e.error(
                msg("graphs.preprocess_alltoall_syncs"),
                msg("graphs.preprocess_alltoall_syncs.fix"),
                "cuda_graph_scope",
            )
        )
    return out


@rule(
    "graphs.full_iteration_moe_static_shapes",
    "Megatron-LM docs: CUDA Graphs guide, 'MoE Model Training'; paged_stash.md (sync-free experts)",
    "a full-iteration graph of a dropless MoE needs static expert shapes: a HybridEP / NCCL-EP rank budget "
    "(moe_expert_rank_capacity_factor) or drop-and-pad",
)
def _full_iteration_moe(s, e):
    lay = s.layout
    full_iter = lay.cuda_graph_impl == "full_iteration" or (
        lay.cuda_graph_impl == "local" and s.graph_scopes() == ["full_iteration"]
    )
    m = s.model
    if not full_iter or m is None or not m.is_moe:
        return None
    drop_pad = drop_and_pad(s)
    backend = lay.moe_flex_dispatcher_backend if lay.moe_token_dispatcher_type == "flex" else None
    rank_budget = lay.moe_expert_rank_capacity_factor is not None and backend in ("hybridep", "ncclep")
    if drop_pad or rank_budget:
        return None
    if s.mcore_version >= KEY_MIN_MCORE["moe_expert_rank_capacity_factor"]:  # the static dispatcher budget
        fix = msg("graphs.full_iteration_dropless.fix_static_budget")
    else:
        fix = msg("graphs.full_iteration_dropless.fix_drop_and_pad")
    return [
        e.error(
            msg("graphs.full_iteration_dropless"),
            fix,
            "cuda_graph_impl",
            "moe_expert_rank_capacity_factor",
        )
    ]


@rule(
    "graphs.recompute_compatibility",
    "[TC] transformer_config.py",
    "full recompute only with full_iteration graphs; 'moe' recompute not with the moe_router TE graph",
)
def _recompute(s, e):
    if not s.graphs_on():
        return None
    lay = s.layout
    out = []
    legacy_full_iteration = (
        s.mcore_version < CUDA_GRAPH_MODULES_MCORE
        and lay.cuda_graph_impl == "local"
        and s.graph_scopes() == ["full_iteration"]
    )
    if lay.recompute_granularity == "full" and lay.cuda_graph_impl != "full_iteration" and not legacy_full_iteration:
        vlm = s.model is not None and s.model.is_vlm
        out.append(
            e.error(
                msg("graphs.full_recompute_needs_full_iteration_vlm", impl=lay.cuda_graph_impl)
                if vlm
                else msg("graphs.full_recompute_needs_full_iteration", impl=lay.cuda_graph_impl),
                msg("graphs.full_recompute_needs_full_iteration.fix_vlm", vision=_vision_graphs_apart())
                if vlm
                else msg("graphs.full_recompute_needs_full_iteration.fix"),
                "recompute_granularity",
                "cuda_graph_impl",
            )
        )
    if (
        lay.cuda_graph_impl == "transformer_engine"
        and lay.recompute_granularity == "selective"
        and "moe" in (lay.recompute_modules or [])
        and "moe_router" in s.graph_scopes()
    ):
        out.append(
            e.error(
                msg("graphs.moe_recompute_with_router_graph"),
                msg("graphs.moe_recompute_with_router_graph.fix"),
                "recompute_modules",
                "cuda_graph_scope",
            )
        )
    return out


@rule(
    "graphs.requires_te_rng_tracker",
    "[ARGS]; [B-CFG] rng.te_rng_tracker",
    "CUDA graphs need the Transformer Engine RNG tracker",
)
def _rng(s, e):
    if s.graphs_on() and s.layout.use_te_rng_tracker is False:
        return [
            e.error(
                msg("graphs.needs_te_rng_tracker"),
                msg("graphs.needs_te_rng_tracker.fix"),
                "use_te_rng_tracker",
            )
        ]


@rule(
    "graphs.static_shapes_data",
    "[B-CFG] ConfigContainer.validate; graph replay semantics",
    "graph replay needs fixed shapes: packed data padded to max length (and pad_cu_seqlens with attn graphs)",
)
def _static(s, e):
    if not s.graphs_on():
        return None
    t = s.training
    out = []
    if t.variable_length and not t.pad_to_max_length:
        out.append(
            e.error(
                msg("graphs.variable_length_batches"),
                msg("graphs.variable_length_batches.fix"),
                "training.variable_length",
                "cuda_graph_impl",
            )
        )
    elif t.packed_sequences and t.pad_to_max_length is False:
        out.append(
            e.error(
                msg("graphs.packed_needs_pad_to_max_length"),
                set_key("pad_to_max_length", "true"),
                "training.pad_to_max_length",
            )
        )
    if t.packed_sequences and "attn" in s.graph_scopes() and t.pad_cu_seqlens is False:
        out.append(
            e.error(
                msg("graphs.packed_attn_needs_pad_cu_seqlens"),
                set_key("pad_cu_seqlens", "true"),
                "training.pad_cu_seqlens",
            )
        )
    return out


def nan_check_off_note(s, graph_gain_pct: float | None = None) -> str | None:
    """The one statement of what a full-iteration CUDA graph costs in numerics: it needs
    ``check_for_nan_in_loss: false`` (rule ``graphs.full_iteration_nan_check``), so a diverging loss is
    not caught. None when the scenario keeps the check on or runs no full-iteration graph.

    Args:
        s: the resolved scenario.
        graph_gain_pct: what the graph is credited with, in percent: eager execution of the same
            layout is predicted that much slower (9.1 → "predicted -9.1 %"); None leaves it out.
    """
    if s.layout.check_for_nan_in_loss is not False or s.layout.cuda_graph_impl != "full_iteration":
        return None
    if graph_gain_pct is None:
        return msg("graphs.nan_check_off")
    return msg("graphs.nan_check_off_with_gain", gain=abs(graph_gain_pct))


@rule("graphs.full_iteration_nan_check", "[B-CFG]; [ARGS]", "full_iteration graphs need check_for_nan_in_loss off")
def _nan(s, e):
    """An error while the check is on under a full-iteration graph; a warning while it is off for one
    (the trade-off, :func:`nan_check_off_note`)."""
    if s.layout.cuda_graph_impl == "full_iteration" and s.layout.check_for_nan_in_loss:
        return [
            e.error(
                msg("graphs.full_iteration_needs_nan_check_off"),
                msg("graphs.full_iteration_needs_nan_check_off.fix"),
                "check_for_nan_in_loss",
            )
        ]
    note = nan_check_off_note(s)
    if note is not None:
        return [
            e.warning(
                note,
                msg("graphs.nan_check_off.fix"),
                "check_for_nan_in_loss",
            )
        ]
    return None


@rule(
    "graphs.expandable_segments", "[ARGS] arguments.py", "TE graphs with expandable_segments need NCCL_GRAPH_REGISTER=0"
)
def _expandable(s, e):
    if s.layout.cuda_graph_impl != "transformer_engine":
        return None
    if expandable_segments(s.environment) and s.environment.get("NCCL_GRAPH_REGISTER") != "0":
        return [
            e.error(
                msg("graphs.expandable_segments_need_no_graph_register"),
                msg("graphs.expandable_segments_need_no_graph_register.fix"),
                "environment",
                edits={"environment.NCCL_GRAPH_REGISTER": "0"},
            )
        ]


@rule(
    "graphs.inflight_microbatch_memory",
    "[SCH] schedules.py; TE make_graphed_callables",
    "per-layer graphs keep static buffers per in-flight microbatch: memory grows with PP",
)
def _inflight(s, e):
    full_iter = s.layout.cuda_graph_impl == "full_iteration" or s.graph_scopes() == ["full_iteration"]
    if not s.graphs_on() or full_iter or s.pp <= 1:
        return None
    inflight = s.pp if s.vpp <= 1 else s.pp * s.vpp
    advisory = (
        msg("graphs.inflight_buffers_vpp", n=inflight, pp=s.pp, vpp=s.vpp)
        if s.vpp > 1
        else msg("graphs.inflight_buffers", n=inflight, pp=s.pp)
    )
    return [
        e.warning(
            advisory,
            msg("graphs.inflight_buffers.fix"),
            "cuda_graph_scope",
            "pipeline_model_parallel_size",
        )
    ]


#: one kept attention mask at least this large (bytes) is worth a warning (seq 8K without CP: 64 MiB)
MASK_WARN_BYTES = 64 * 2**20


@rule(
    "graphs.static_attention_masks",
    "megatron/core/transformer/transformer_layer.py get_layer_static_inputs; megatron/core/full_cuda_graph.py",
    "graphs keep attention masks as static inputs unless create_attention_mask_in_dataloader is false",
)
def _static_masks(s, e):
    lay = s.layout
    if not s.graphs_on() or s.training.seq_length is None:
        return None
    seq, mbs = s.training.seq_length, s.training.micro_batch_size or 1
    scopes = s.graph_scopes()
    if lay.cuda_graph_impl == "full_iteration" or scopes == ["full_iteration"]:
        if lay.create_attention_mask_in_dataloader is False:  # the dataloader takes the flag itself
            return None
        one, where = mbs * seq * seq, msg("graphs.static_mask_full_iteration")
    elif lay.cuda_graph_impl == "transformer_engine" and (not scopes or "attn" in scopes):
        if s.skips_graph_attention_mask():
            return None
        one = mbs * seq // s.cp * seq
        where = msg("graphs.static_mask_te")
        if lay.create_attention_mask_in_dataloader is False:  # set, but no release passes it to the graphs
            where = msg("graphs.static_mask_te_flag_ignored", where=where)
    else:
        return None
    if one < MASK_WARN_BYTES:
        return None
    return [
        e.warning(
            msg("graphs.static_masks_kept", where=where, gib=one / 2**30),
            msg("graphs.static_masks_kept.fix"),
            "create_attention_mask_in_dataloader",
            "cuda_graph_scope",
        )
    ]
