"""MoE, EP/ETP and dispatcher rules (``megatron_facts.md`` §4.5)."""

from __future__ import annotations

from moeplan.rules.base import rule


def _is_moe(s) -> bool | None:
    if s.model is None or s.model.num_layers is None:
        return None
    return s.model.is_moe


@rule(
    "moe.experts_divisible_by_ep",
    "[TC]; [MOE] moe_layer.py; [ARGS]",
    "EP > 1 needs routed experts, and num_moe_experts must be divisible by EP",
)
def _ep(s, e):
    if s.ep == 1:
        return None
    moe = _is_moe(s)
    if moe is None:
        return [e.missing("the model's num_moe_experts")]
    if not moe:
        return [
            e.error(
                f"expert_model_parallel_size = {s.ep} but {s.model.name} has no routed experts",
                "set expert_model_parallel_size: 1",
                "expert_model_parallel_size",
            )
        ]
    n = s.model.num_moe_experts
    if n % s.ep:
        ok = [x for x in (1, 2, 4, 8, 16, 32, 64, 128, 256) if n % x == 0]
        return [
            e.error(
                f"num_moe_experts ({n}) is not divisible by expert_model_parallel_size ({s.ep})",
                f"use EP in {ok}",
                "expert_model_parallel_size",
            )
        ]


@rule("moe.etp_with_bias", "[TC] transformer_config.py", "MoE with biased linear layers needs ETP = 1")
def _etp_bias(s, e):
    m = s.model
    if m is None or not m.is_moe or not m.moe_expert_bias or s.etp == 1:
        return None
    return [
        e.error(
            f"{m.name} has biased expert layers; expert_tensor_parallel_size must be 1 (is {s.etp})",
            "set expert_tensor_parallel_size: 1",
            "expert_tensor_parallel_size",
        )
    ]


def _backend(s) -> str | None:
    """The flex dispatcher backend in force: ``deepep`` with the deprecated ``moe_enable_deepep``, else
    ``moe_flex_dispatcher_backend`` (DeepEP by default) with the flex dispatcher; None without flex."""
    lay = s.layout
    if lay.moe_token_dispatcher_type != "flex" and not lay.moe_enable_deepep:
        return None
    if lay.moe_enable_deepep:
        return "deepep"
    return lay.moe_flex_dispatcher_backend or "deepep"


@rule(
    "moe.flex_dispatcher_backend_vs_gpu",
    "[B-FLEX] flex_dispatcher_backend.py",
    "DeepEP needs CC 8.x/9.x or B200/B300 (not GB200/GB300: use HybridEP); HybridEP needs CC 8.x–10.x; "
    "neither runs on non-NVIDIA GPUs",
    kind="unsupported",
)
def _backend_gpu(s, e):
    b = _backend(s)
    if b is None:
        return None
    if s.gpu is None:
        return [e.missing("system.gpu (dispatcher backend support)")]
    if b == "deepep" and not s.gpu.supports_deepep:
        alt = (
            "moe_flex_dispatcher_backend: hybridep"
            if s.gpu.supports_hybridep
            else "moe_token_dispatcher_type: alltoall"
        )
        return [
            e.error(
                f"DeepEP is not supported on {s.gpu.id} ({s.gpu.name})",
                f"use {alt}"
                + (
                    f" with NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN={min(s.gpu.scaleup_domain_gpus, s.ep * s.etp)}"
                    if s.gpu.is_nvl72
                    else ""
                ),
                "moe_flex_dispatcher_backend",
                "system.gpu",
            )
        ]
    if b == "hybridep" and not s.gpu.supports_hybridep:
        return [
            e.error(
                f"HybridEP is not supported on {s.gpu.id}",
                "use moe_token_dispatcher_type: alltoall",
                "moe_flex_dispatcher_backend",
            )
        ]


def _backend_spelling(s, e) -> list:
    """How the dispatcher backend is asked for: a backend without the flex dispatcher is ignored
    (warning), ``moe_enable_deepep`` is the deprecated spelling of flex + DeepEP (info) and cannot be
    combined with ``moe_flex_dispatcher_backend: hybridep`` (error)."""
    lay = s.layout
    out = []
    if (
        lay.moe_flex_dispatcher_backend
        and lay.moe_token_dispatcher_type not in (None, "flex")
        and not lay.moe_enable_deepep
    ):
        out.append(
            e.warning(
                f"moe_flex_dispatcher_backend={lay.moe_flex_dispatcher_backend} is ignored with "
                f"moe_token_dispatcher_type={lay.moe_token_dispatcher_type}",
                "set moe_token_dispatcher_type: flex to use it",
                "moe_token_dispatcher_type",
            )
        )
    if lay.moe_enable_deepep:
        out.append(
            e.info(
                "moe_enable_deepep is deprecated: it means moe_token_dispatcher_type=flex with "
                "moe_flex_dispatcher_backend=deepep",
                "moe_enable_deepep",
            )
        )
    if lay.moe_enable_deepep and lay.moe_flex_dispatcher_backend == "hybridep":
        out.append(
            e.error(
                "moe_enable_deepep cannot be combined with moe_flex_dispatcher_backend=hybridep",
                "drop the deprecated moe_enable_deepep",
                "moe_enable_deepep",
            )
        )
    return out


#: flex dispatcher backends newer than the oldest megatron-core moeplan knows → the first version
#: that has each (HybridEP arrived in 0.15, NCCL-EP in 0.19)
BACKEND_MIN_MCORE: dict[str, tuple[int, int, int]] = {"hybridep": (0, 15, 0), "ncclep": (0, 19, 0)}


def _backend_needs(s, e, b: str | None) -> list:
    """What the flex backend ``b`` in force (None without flex) needs: an expert TP × EP group of more
    than one rank, a megatron-core that has it (:data:`BACKEND_MIN_MCORE`), and no pad-to-capacity
    with DeepEP."""
    out = []
    if b is not None and s.etp * s.ep <= 1:
        # MoEFlexTokenDispatcher asserts TP×EP > 1 (its expert TP × EP group) before choosing a backend
        out.append(
            e.error(
                f"the flex dispatcher ({b}) needs ETP·EP > 1 (is {s.etp}·{s.ep})",
                "use EP > 1 or the alltoall dispatcher",
                "expert_model_parallel_size",
            )
        )
    first = BACKEND_MIN_MCORE.get(b or "")
    if first is not None and s.mcore_version < first:
        others = [x for x, v in BACKEND_MIN_MCORE.items() if x != b and s.mcore_version >= v]
        if s.gpu is None or s.gpu.supports_deepep:
            others.insert(0, "deepep")
        alt = f"moe_flex_dispatcher_backend: {' or '.join(others)}" if others else "the alltoall dispatcher"
        out.append(
            e.error(
                f"{b} needs megatron-core ≥ {'.'.join(map(str, first[:2]))} "
                f"(scenario: {'.'.join(map(str, s.mcore_version))})",
                f"use {alt}, or megatron-core ≥ {'.'.join(map(str, first[:2]))}",
                "moe_flex_dispatcher_backend",
            )
        )
    if b == "deepep" and s.layout.moe_pad_expert_input_to_capacity:
        out.append(
            e.error(
                "flex + DeepEP does not support moe_pad_expert_input_to_capacity",
                "use alltoall for drop-and-pad, or drop padding",
                "moe_pad_expert_input_to_capacity",
            )
        )
    return out


def _rank_budget(s, e, b: str | None) -> list:
    """The static per-rank expert budget (``moe_expert_rank_capacity_factor``) needs the hybridep or
    ncclep backend (``b``: the flex backend in force, None without flex), with hybridep the TE op fuser;
    ``moe_paged_stash`` needs the budget."""
    lay = s.layout
    out = []
    if lay.moe_expert_rank_capacity_factor is not None and b not in ("hybridep", "ncclep"):
        out.append(
            e.error(
                "moe_expert_rank_capacity_factor needs the hybridep or ncclep backend",
                "set moe_token_dispatcher_type: flex with moe_flex_dispatcher_backend: hybridep",
                "moe_expert_rank_capacity_factor",
            )
        )
    if lay.moe_expert_rank_capacity_factor is not None and b == "hybridep" and not lay.use_transformer_engine_op_fuser:
        out.append(
            e.error(
                "moe_expert_rank_capacity_factor with hybridep needs use_transformer_engine_op_fuser "
                "(the static-shape path runs the fused grouped MLP)",
                "set use_transformer_engine_op_fuser: true",
                "use_transformer_engine_op_fuser",
            )
        )
    if lay.moe_paged_stash and lay.moe_expert_rank_capacity_factor is None:
        out.append(
            e.error(
                "moe_paged_stash needs moe_expert_rank_capacity_factor (it pages the fixed-budget expert buffers)",
                "set moe_expert_rank_capacity_factor (NVIDIA's recipes use 1.5) or drop moe_paged_stash",
                "moe_paged_stash",
            )
        )
    return out


@rule(
    "moe.flex_backend_settings",
    "[TC] transformer_config.py; [MOE] token_dispatcher.py",
    "flex backends need ETP·EP > 1; hybridep needs mcore ≥ 0.15, ncclep ≥ 0.19; moe_enable_deepep excludes "
    "hybridep; DeepEP does not support pad-to-capacity; a backend without flex is ignored; a rank capacity "
    "factor needs hybridep/ncclep (and the TE op fuser with hybridep); paged stash needs a rank capacity factor",
)
def _flex(s, e):
    b = _backend(s)
    return [*_backend_spelling(s, e), *_backend_needs(s, e, b), *_rank_budget(s, e, b)]


@rule(
    "moe.capacity_settings",
    "[TC] transformer_config.py",
    "pad-to-capacity needs a capacity factor; a capacity factor needs aux_loss/seq_aux_loss/global_aux_loss/none "
    "balancing; allgather does not support variable sequence lengths",
)
def _capacity(s, e):
    lay = s.layout
    out = []
    cf = lay.moe_expert_capacity_factor
    if lay.moe_pad_expert_input_to_capacity and (cf is None or cf < 0):
        out.append(
            e.error(
                "moe_pad_expert_input_to_capacity needs moe_expert_capacity_factor",
                "set moe_expert_capacity_factor (e.g. 1.0)",
                "moe_pad_expert_input_to_capacity",
            )
        )
    lb = lay.moe_router_load_balancing_type
    if cf is not None and cf >= 0 and lb not in (None, "aux_loss", "seq_aux_loss", "global_aux_loss", "none"):
        out.append(
            e.error(
                f"moe_expert_capacity_factor works only with aux_loss, seq_aux_loss, global_aux_loss or "
                f"none balancing (is {lb})",
                "change the balancing type or drop the capacity factor",
                "moe_router_load_balancing_type",
            )
        )
    if lay.moe_token_dispatcher_type == "allgather" and s.training.variable_length:
        out.append(
            e.error(
                "the allgather dispatcher does not support variable sequence lengths",
                "use moe_token_dispatcher_type: alltoall",
                "moe_token_dispatcher_type",
            )
        )
    no_shared = (
        s.model is not None and s.model.num_layers is not None and not s.model.moe_shared_expert_intermediate_size
    )
    if lay.moe_shared_expert_overlap and not no_shared and lay.moe_token_dispatcher_type not in ("alltoall", "flex"):
        out.append(
            e.error(
                "moe_shared_expert_overlap needs the alltoall or flex dispatcher",
                "use moe_token_dispatcher_type: alltoall",
                "moe_shared_expert_overlap",
            )
        )
    return out


@rule(
    "moe.ep_overlap_requirements",
    "[TC] transformer_config.py; [B-CO] comm_overlap.py",
    "overlap_moe_expert_parallel_comm needs EP > 1, alltoall/flex, bf16/fp16, VPP when PP > 1, no full "
    "recompute and no 'moe' recompute, no shared-expert overlap, mtp_num_layers ≤ 1, no moe/mlp TE graphs",
)
def _ep_overlap(s, e):
    lay = s.layout
    if not lay.overlap_moe_expert_parallel_comm:
        if lay.delay_wgrad_compute:
            return [
                e.error(
                    "delay_wgrad_compute requires overlap_moe_expert_parallel_comm",
                    "enable EP overlap or drop delay_wgrad_compute",
                    "delay_wgrad_compute",
                )
            ]
        return None
    problems = []
    if s.ep <= 1:
        problems.append(f"EP > 1 (is {s.ep})")
    if s.model is not None and s.model.num_layers is not None and not s.model.is_moe:
        problems.append("a model with routed experts")
    if lay.moe_token_dispatcher_type not in ("alltoall", "flex"):
        problems.append(f"the alltoall or flex dispatcher (is {lay.moe_token_dispatcher_type})")
    if s.pp > 1 and s.vpp <= 1:
        problems.append(f"VPP when PP > 1 (PP = {s.pp}, no VPP)")
    if lay.recompute_granularity == "full" or lay.recompute_method or lay.recompute_num_layers:
        problems.append("no full recompute (recompute_method/num_layers unset)")
    # 'moe' recompute vs EP overlap: a Megatron Bridge comm_overlap check, in TransformerConfig at the
    # pinned 0.20 (megatron_facts rule 36); megatron-core 0.16.1's config accepts it (oracle).
    moe_rc_checked = s.framework == "megatron-bridge" or s.mcore_version >= (0, 20, 0)
    if moe_rc_checked and lay.recompute_granularity == "selective" and "moe" in (lay.recompute_modules or []):
        problems.append("no 'moe' in recompute_modules")
    if lay.moe_shared_expert_overlap:
        problems.append("moe_shared_expert_overlap off")
    if s.mtp_num_layers > 1:
        problems.append(f"mtp_num_layers ≤ 1 (is {s.mtp_num_layers})")
    if s.mtp_num_layers == 1 and s.pp == 1:
        problems.append("PP > 1 when an MTP layer is built")
    if lay.cuda_graph_impl == "transformer_engine" and {"moe", "mlp"} & set(s.graph_scopes()):
        problems.append("no 'moe' or 'mlp' TE graph scope")
    if lay.cuda_graph_impl == "local" and s.graph_scopes() != ["full_iteration"]:
        problems.append("transformer_engine (not local) for per-layer CUDA graphs")
    if not problems:
        return None
    return [
        e.error(
            "overlap_moe_expert_parallel_comm requires " + "; ".join(problems),
            "meet those requirements or turn EP overlap off",
            "overlap_moe_expert_parallel_comm",
        )
    ]
