"""MoE, EP/ETP and dispatcher rules (``megatron_facts.md`` §4.5)."""

from __future__ import annotations

from moeplan.rules.base import rule


def _is_moe(s) -> bool | None:
    """True when the model has routed experts, False when it is known to have none, None when unknown.

    ``num_moe_experts`` decides on its own: a partial model that gives the experts without
    ``num_layers`` (a config fragment, a model override) is still checked against EP; only a model
    that names neither its experts nor its layers is unknown."""
    m = s.model
    if m is None:
        return None
    if m.num_moe_experts is not None:
        return m.is_moe
    if m.num_layers is None:
        return None
    return False


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


@rule(
    "moe.etp_unset_follows_tp",
    "[MPC] model_parallel_config.py __post_init__ (expert_tensor_parallel_size None → TP); [B-TC] finalize",
    "an unstated ETP becomes TP in megatron-core (and in Bridge when EP = 1): with TP > 1 and EP > 1 every "
    "expert is split TP ways and the expert grid is TP·EP, not EP",
)
def _etp_unset(s, e):
    if "expert_tensor_parallel_size" in s.stated or s.tp <= 1 or s.ep <= 1 or _is_moe(s) is False:
        return None
    if s.etp != s.tp:  # Bridge resolved it to 1 (EP > 1): nothing silent about TP
        return None
    grid = s.etp * s.ep
    return [
        e.warning(
            f"expert_tensor_parallel_size is unset, so {s.framework} sets it to TP = {s.tp}: each expert's "
            f"FC1/FC2 is split {s.tp} ways and one expert group spans ETP·EP = {s.tp}·{s.ep} = {grid} GPUs "
            f"(with ETP = 1 it would be {s.ep})",
            "state expert_tensor_parallel_size: 1 to fold experts across the TP ranks (the usual MoE layout), "
            f"or expert_tensor_parallel_size: {s.tp} to keep the split on purpose",
            "expert_tensor_parallel_size",
            "tensor_model_parallel_size",
        )
    ]


#: DeepEP hybrid-ep ``csrc/hybrid_ep/config.cuh`` (@94a9f8f, PR 638): across NVLink domains, dispatch
#: posts 3 work requests per token of ``max_num_of_tokens_per_rank`` (+1) on one IB queue pair, whose
#: depth must stay below 65,536
HYBRIDEP_QP_MAX_TX_DEPTH = 65536
HYBRIDEP_TX_PER_TOKEN = 3
#: the largest ``max_num_of_tokens_per_rank`` accepted across domains: (65,536 − 1 − 1) // 3 = 21,844
HYBRIDEP_MAX_TOKENS_PER_RANK_MULTI_NODE = (HYBRIDEP_QP_MAX_TX_DEPTH - 2) // HYBRIDEP_TX_PER_TOKEN
#: default ``NUM_OF_TOKENS_PER_CHUNK_COMBINE_API`` (config.cuh Configurer): the buffer's token count is
#: padded up to a multiple of it (and to at least 512) before the check
HYBRIDEP_COMBINE_CHUNK_TOKENS = 64


def hybridep_buffer_tokens(tokens: int, chunk: int = HYBRIDEP_COMBINE_CHUNK_TOKENS) -> int:
    """The ``max_num_of_tokens_per_rank`` HybridEP sizes its buffer for, from the tokens one rank
    dispatches per microbatch: aligned up to 16 (``hybrid_ep_buffer.py``), at least 512, then up to a
    multiple of the combine chunk (``hybrid_ep_pad_num_of_tokens_per_rank``). Tokens, no units else."""
    aligned = -(-tokens // 16) * 16
    return -(-max(aligned, 512) // chunk) * chunk


def _dispatch_tokens(s) -> int | None:
    """Tokens one rank hands the dispatcher per microbatch: MBS · seq / CP, / TP with SP (Megatron's
    ``fused_a2a.init_hybrid_ep_buffer`` takes ``x.shape[-2]``); None without seq or MBS."""
    t = s.training
    if not t.seq_length or not t.micro_batch_size:
        return None
    n = t.seq_length * t.micro_batch_size // s.cp
    return n // s.tp if s.sp and s.tp > 1 else n


@rule(
    "moe.hybridep_internode_token_limit",
    "DeepEP hybrid-ep csrc/hybrid_ep/config.cuh hybrid_ep_token_capacity_is_valid; [MOE] fused_a2a.py",
    "HybridEP across NVLink domains (ETP·EP > the domain) takes at most 21,844 tokens per rank per "
    "microbatch (3 IB work requests per token on one queue pair of depth < 65,536)",
    kind="unsupported",
)
def _hybridep_tokens(s, e):
    if _backend(s) != "hybridep":
        return None
    dom_env = s.environment.get("NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN")
    dom = int(dom_env) if dom_env and dom_env.isdigit() and int(dom_env) > 0 else None
    if dom is None and s.gpu is not None:
        dom = s.gpu.scaleup_domain_gpus
    if dom is None:
        return [e.missing("system.gpu (the NVLink domain HybridEP sees)")]
    group = s.etp * s.ep
    if group <= dom:
        return None
    n = _dispatch_tokens(s)
    if n is None:
        return [e.missing("training.seq_length and micro_batch_size (tokens per rank)")]
    chunk_env = s.environment.get("NUM_OF_TOKENS_PER_CHUNK_COMBINE_API", "")
    chunk = int(chunk_env) if chunk_env.isdigit() and int(chunk_env) > 0 else HYBRIDEP_COMBINE_CHUNK_TOKENS
    buf = hybridep_buffer_tokens(n, chunk)
    limit = HYBRIDEP_MAX_TOKENS_PER_RANK_MULTI_NODE
    if buf <= limit:
        return None
    best = (limit // chunk) * chunk
    return [
        e.error(
            f"HybridEP spans {-(-group // dom)} NVLink domains (ETP·EP = {group}, {dom} ranks per domain) and each rank "
            f"dispatches {n:,} tokens per microbatch (buffer {buf:,}); across domains HybridEP accepts at most "
            f"{limit:,} (its IB queue pair needs 3·tokens + 1 < {HYBRIDEP_QP_MAX_TX_DEPTH:,} work requests): "
            "buffer creation fails",
            f"keep MBS·seq/(CP{'·TP' if s.sp and s.tp > 1 else ''}) ≤ {best:,} per rank (lower the micro-batch, raise "
            "CP or TP with SP), keep ETP·EP within one NVLink domain, or use moe_flex_dispatcher_backend: deepep / "
            "moe_token_dispatcher_type: alltoall",
            "moe_flex_dispatcher_backend",
            "training.micro_batch_size",
            "context_parallel_size",
        )
    ]


#: ``moe_deepep_num_sms``'s default in megatron-core ≤ 0.18 (``TransformerConfig``; None from 0.19)
DEEPEP_NUM_SMS_DEFAULT = 20


@rule(
    "moe.deepep_num_sms_even",
    "DeepEP deep_ep/buffers/legacy.py Buffer.set_num_sms; [MOE] fused_a2a.py set_deepep_num_sms; [TC]",
    "moe_deepep_num_sms must be even with DeepEP (its Buffer asserts it); before megatron-core 0.19 only "
    "the DeepEP backend reads it",
)
def _deepep_sms(s, e):
    n = s.layout.moe_deepep_num_sms
    if n is None:
        return None
    out = []
    b = _backend(s)
    if n % 2 and b == "deepep":
        out.append(
            e.error(
                f"moe_deepep_num_sms = {n} is odd; DeepEP's Buffer.set_num_sms asserts 'The SM count must be even'",
                f"use moe_deepep_num_sms: {n + 1} (megatron-core's historical default is 20)",
                "moe_deepep_num_sms",
            )
        )
    if s.mcore_version >= (0, 19, 0):
        out.append(
            e.info(
                "moe_deepep_num_sms is a deprecated alias of moe_flex_dispatcher_num_sms from megatron-core 0.19 "
                "(routed into it in TransformerConfig.__post_init__, for every flex backend)",
                "moe_deepep_num_sms",
            )
        )
    elif b != "deepep" and n != DEEPEP_NUM_SMS_DEFAULT:  # 20 is the default every ≤ 0.18 argument dump shows
        out.append(
            e.warning(
                f"moe_deepep_num_sms is read only by the DeepEP flex backend (in force: {b or 'no flex dispatcher'})",
                "drop it (moe_hybridep_num_sms sets HybridEP's SMs before megatron-core 0.19)",
                "moe_deepep_num_sms",
            )
        )
    return out
