"""CUDA graph rules (``megatron_facts.md`` §3.6, §4.7)."""

from __future__ import annotations

from moeplan.rules.base import rule
from moeplan.spec.allocator import expandable_segments
from moeplan.spec.numerics import drop_and_pad

SCOPES = ("attn", "mlp", "moe", "moe_router", "moe_preprocess", "mamba", "full_iteration")


def _version_spelling(s, e, impl: str) -> list:
    """The graph settings against the scenario's megatron-core version: ``full_iteration`` impl and
    ``cuda_graph_modules`` need ≥ 0.18, scope and modules not both set, and an info that
    ``cuda_graph_scope`` is migrated to ``cuda_graph_modules`` from 0.18. ``impl``: the graph impl
    (``none`` when unset)."""
    lay = s.layout
    out = []
    ver = ".".join(map(str, s.mcore_version))
    if impl == "full_iteration" and s.mcore_version < (0, 18, 0):
        out.append(
            e.error(
                f"cuda_graph_impl full_iteration needs megatron-core ≥ 0.18 (scenario: {ver})",
                "use cuda_graph_impl: local with cuda_graph_scope: full_iteration",
                "cuda_graph_impl",
            )
        )
    if lay.cuda_graph_scope is not None and lay.cuda_graph_modules is not None:
        out.append(
            e.error(
                "cuda_graph_scope and cuda_graph_modules cannot both be set",
                "keep cuda_graph_modules (cuda_graph_scope is its deprecated alias)",
                "cuda_graph_scope",
            )
        )
    if lay.cuda_graph_modules is not None and s.mcore_version < (0, 18, 0):
        out.append(
            e.error(
                f"cuda_graph_modules does not exist in megatron-core {ver} (added in 0.18)",
                "use cuda_graph_scope on megatron-core ≤ 0.17",
                "cuda_graph_modules",
            )
        )
    # said only of a stated key: a recipe fill's spelling is moeplan's, and exports write cuda_graph_modules
    if lay.cuda_graph_scope is not None and s.mcore_version >= (0, 18, 0) and "cuda_graph_scope" in s.stated:
        out.append(
            e.info(
                f"cuda_graph_scope is a deprecated alias of cuda_graph_modules since megatron-core 0.18 "
                f"(scenario: {ver}); it is migrated automatically",
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
        out.append(e.error(f"unknown CUDA graph scope {bad[0]!r}", f"use {', '.join(SCOPES)}", "cuda_graph_scope"))
    if impl == "full_iteration" and [x for x in scopes if x != "full_iteration"]:
        out.append(
            e.error(
                f"full_iteration graphs need an empty scope (got {scopes})",
                "set cuda_graph_scope: []",
                "cuda_graph_scope",
            )
        )
    if "full" in scopes and len(scopes) > 1:
        out.append(
            e.error(
                "the deprecated 'full' scope (whole layer) cannot be combined with other scopes",
                "use an empty scope for whole layers, or list the parts",
                "cuda_graph_scope",
            )
        )
    if "full_iteration" in scopes and len(scopes) > 1:
        out.append(
            e.error(
                "the full_iteration scope cannot be combined with other scopes",
                "keep only full_iteration",
                "cuda_graph_scope",
            )
        )
    if impl == "transformer_engine" and "full_iteration" in scopes:
        out.append(
            e.error(
                "the full_iteration scope cannot be captured by transformer_engine graphs",
                "use cuda_graph_impl: full_iteration",
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
                "Megatron Bridge accepts cuda_graph_impl local only for full-iteration capture",
                "use cuda_graph_impl: transformer_engine for scoped graphs",
                "cuda_graph_impl",
            )
        )
    if s.gpu is not None and s.gpu.vendor != "NVIDIA" and impl == "transformer_engine":
        out.append(
            e.error(
                f"Transformer Engine CUDA graphs are NVIDIA-only ({s.gpu.id})",
                "use cuda_graph_impl: none",
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


#: why a VLM's graph settings are checked against its language model: Bridge's VLM providers are the
#: language model's TransformerConfig (``finalize`` runs megatron-core's ``__post_init__`` checks on
#: ``cuda_graph_impl`` / ``cuda_graph_scope`` / ``recompute_granularity``), while the vision tower's
#: config is built with defaults and then assigned the recompute settings and
#: ``vision_cuda_graph_impl`` / ``vision_cuda_graph_scope`` (Megatron Bridge @067f987
#: ``models/qwen_vl/modelling_qwen3_vl/transformer_config.py`` ``get_vision_model_config``), so no check
#: runs on it. docs/decisions.md, "MoE-VLM graph scopes".
VLM_GRAPHS_WHY = (
    "; in a VLM, cuda_graph_impl / cuda_graph_scope and recompute_granularity configure the language "
    "model, whose TransformerConfig asserts this"
)
VLM_GRAPHS_FIX = (
    "graphs of the dense vision tower are set apart with vision_cuda_graph_impl: transformer_engine and "
    "vision_cuda_graph_scope: [mlp] (Megatron Bridge ≥ 0.5; its config is not checked against recompute), "
    "leaving the language model's cuda_graph_impl: none"
)


def _mlp_scope_all_moe(s, e):
    """The finding for an ``mlp`` graph scope on a model whose decoder layers are all MoE; for a VLM it
    says that the scope is the language model's, and where the dense vision tower's graphs go."""
    m = s.model
    if not m.is_vlm:
        return e.error(
            "the mlp graph scope is not allowed when every layer is MoE",
            "use moe_router (+ moe_preprocess) instead",
            "cuda_graph_scope",
        )
    return e.error(
        f"the mlp graph scope is not allowed when every layer is MoE: cuda_graph_scope configures {m.name}'s "
        f"language model ({m.num_layers} layers, all MoE), whose TransformerConfig asserts 'mlp cuda graph is "
        "only supported for dense layers'; the vision tower's dense layers are not in its scope",
        "use moe_router (+ moe_preprocess) for the language model; "
        + VLM_GRAPHS_FIX.replace(", leaving the language model's cuda_graph_impl: none", ""),
        "cuda_graph_scope",
    )


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
            e.error(f"vision CUDA graphs on {m.name}, which has no vision tower", "drop them", "vision_cuda_graph_impl")
        )
    if s.framework != "megatron-bridge":
        out.append(
            e.error(
                "vision_cuda_graph_impl / vision_cuda_graph_scope are Megatron Bridge VLM provider fields "
                "(no Megatron-LM flag)",
                "run with Megatron Bridge, or drop them",
                "vision_cuda_graph_impl",
                kind="unsupported",
            )
        )
    elif s.bridge_version < (0, 5, 0):
        out.append(
            e.error(
                f"vision CUDA graphs need Megatron Bridge ≥ 0.5 (scenario: {'.'.join(map(str, s.bridge_version))})",
                "use Megatron Bridge ≥ 0.5, or drop them",
                "vision_cuda_graph_impl",
            )
        )
    if scope and impl in (None, "none"):
        out.append(
            e.warning(
                "vision_cuda_graph_scope is ignored while vision_cuda_graph_impl is none",
                "set vision_cuda_graph_impl: transformer_engine",
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
            e.error("the moe and moe_router graph scopes cannot both be set", "keep moe_router", "cuda_graph_scope")
        )
    if "moe_preprocess" in sc and "moe_router" not in sc:
        out.append(
            e.error(
                "the moe_preprocess graph scope needs moe_router",
                "add moe_router to cuda_graph_scope",
                "cuda_graph_scope",
            )
        )
    m = s.model
    known = m is not None and m.num_layers is not None
    if known and not m.is_moe and sc & {"moe", "moe_router", "moe_preprocess"}:
        out.append(
            e.error("MoE graph scopes on a model without routed experts", "use attn / mlp scopes", "cuda_graph_scope")
        )
    if known and m.all_layers_moe and "mlp" in sc:
        out.append(_mlp_scope_all_moe(s, e))
    drop_pad = drop_and_pad(s)
    if "moe" in sc and not drop_pad:
        out.append(
            e.error(
                "the moe graph scope needs static shapes: drop-and-pad routing "
                "(moe_expert_capacity_factor set and moe_pad_expert_input_to_capacity: true); "
                "dropless routing gives variable per-expert token counts",
                "use moe_router + moe_preprocess scopes, or enable drop-and-pad",
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
                "moe_preprocess graphs with the alltoall dispatcher cannot use a capacity factor or "
                "router padding without drop-and-pad (device-to-host syncs)",
                "drop moe_preprocess or the capacity factor",
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
    if s.mcore_version >= (0, 18, 0):
        fix = (
            "give the dispatcher a static budget as NVIDIA's full-iteration recipes do: "
            "moe_token_dispatcher_type: flex, moe_flex_dispatcher_backend: hybridep, "
            "moe_expert_rank_capacity_factor: 1.5, use_transformer_engine_op_fuser: true, moe_paged_stash: true "
            "(an over-budget step reruns eagerly, so training stays dropless); or drop-and-pad; or "
            "cuda_graph_impl: transformer_engine with scopes attn, moe_router, moe_preprocess"
        )
    else:
        fix = (
            "drop-and-pad (moe_expert_capacity_factor with moe_pad_expert_input_to_capacity: true), or "
            "per-layer graphs of attn, moe_router, moe_preprocess; the dropless static-budget path "
            "(moe_expert_rank_capacity_factor) needs megatron-core ≥ 0.18"
        )
    return [
        e.error(
            "a full-iteration CUDA graph cannot capture dropless expert dispatch: per-expert token counts "
            "change every step (the dispatcher syncs with the host to size its buffers)",
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
        s.mcore_version < (0, 18, 0) and lay.cuda_graph_impl == "local" and s.graph_scopes() == ["full_iteration"]
    )
    if lay.recompute_granularity == "full" and lay.cuda_graph_impl != "full_iteration" and not legacy_full_iteration:
        vlm = s.model is not None and s.model.is_vlm
        out.append(
            e.error(
                f"full recompute is only allowed with full_iteration graphs (impl is {lay.cuda_graph_impl})"
                + (VLM_GRAPHS_WHY if vlm else ""),
                "use selective recompute with scoped graphs, or full_iteration graphs"
                + ("; " + VLM_GRAPHS_FIX if vlm else ""),
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
                "'moe' recompute cannot be combined with the moe_router TE graph scope",
                "recompute moe_act instead of moe, or drop moe_router",
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
                "CUDA graphs need the TE RNG tracker but use_te_rng_tracker is false",
                "set use_te_rng_tracker: true (rng.te_rng_tracker in Bridge)",
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
                "CUDA graphs with variable-length batches: a replay with another shape is silently wrong or fails",
                "pad microbatches to seq_length (pad_to_max_length: true) or run eager",
                "training.variable_length",
                "cuda_graph_impl",
            )
        )
    elif t.packed_sequences and t.pad_to_max_length is False:
        out.append(
            e.error(
                "packed sequences with CUDA graphs need pad_to_max_length",
                "set pad_to_max_length: true",
                "training.pad_to_max_length",
            )
        )
    if t.packed_sequences and "attn" in s.graph_scopes() and t.pad_cu_seqlens is False:
        out.append(
            e.error(
                "attention graphs over packed data need pad_cu_seqlens",
                "set pad_cu_seqlens: true",
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
    gain = "" if graph_gain_pct is None else f" (predicted -{abs(graph_gain_pct):.1f} %)"
    return (
        "NaN check off: the full-iteration CUDA graph needs check_for_nan_in_loss=false (rule "
        f"graphs.full_iteration_nan_check), so a diverging loss is not caught; without the graph{gain} the "
        "check stays on"
    )


@rule("graphs.full_iteration_nan_check", "[B-CFG]; [ARGS]", "full_iteration graphs need check_for_nan_in_loss off")
def _nan(s, e):
    """An error while the check is on under a full-iteration graph; a warning while it is off for one
    (the trade-off, :func:`nan_check_off_note`)."""
    if s.layout.cuda_graph_impl == "full_iteration" and s.layout.check_for_nan_in_loss:
        return [
            e.error("full_iteration graphs need check_for_nan_in_loss: false", "set it false", "check_for_nan_in_loss")
        ]
    note = nan_check_off_note(s)
    if note is not None:
        return [
            e.warning(
                note,
                "accept it for the graph's speed-up, or use cuda_graph_impl: transformer_engine (or none) with "
                "check_for_nan_in_loss: true",
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
                "TE CUDA graphs with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True need NCCL_GRAPH_REGISTER=0",
                "export NCCL_GRAPH_REGISTER=0",
                "environment",
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
    return [
        e.warning(
            f"generic memory advisory (not a release-bug check; known issues are known_issue.*): per-layer "
            f"CUDA graphs capture static input/output buffers for every in-flight microbatch "
            f"(up to {inflight} with PP = {s.pp}{', VPP = ' + str(s.vpp) if s.vpp > 1 else ''}): graph memory "
            "grows with PP; check the memory estimate",
            "narrow the graph scope or lower PP if memory is tight",
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
    if lay.create_attention_mask_in_dataloader is False or not s.graphs_on() or s.training.seq_length is None:
        return None
    seq, mbs = s.training.seq_length, s.training.micro_batch_size or 1
    scopes = s.graph_scopes()
    if lay.cuda_graph_impl == "full_iteration" or scopes == ["full_iteration"]:
        one, where = mbs * seq * seq, "the full-iteration graph copies every microbatch's [b, 1, s, s] dataloader mask"
    elif lay.cuda_graph_impl == "transformer_engine" and (not scopes or "attn" in scopes):
        one = mbs * seq // s.cp * seq
        where = "TE graphs capturing attention keep a [b, 1, s/CP, s] mask per layer and in-flight microbatch"
    else:
        return None
    if one < MASK_WARN_BYTES:
        return None
    return [
        e.warning(
            f"{where} ({one / 2**30:.2f} GiB each; the memory estimate counts them)",
            "set create_attention_mask_in_dataloader: false (--no-create-attention-mask-in-dataloader; TE "
            "per-layer graphs honour it in megatron-core dev since PR #5131) or use local graphs",
            "create_attention_mask_in_dataloader",
            "cuda_graph_scope",
        )
    ]
