"""MoE, EP/ETP and dispatcher rules (``megatron_facts.md`` §4.5, vendored in ``tests/data/reference``)."""

from __future__ import annotations

from packaging.version import Version

from moeplan.catalog.comm_libraries import hybridep_reach_gpus
from moeplan.i18n.messages import Items, Message, msg
from moeplan.rules.base import both, rule
from moeplan.structure.hybridep_env import env_int, hybridep_ranks_per_domain


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
        return [e.missing_model("num_moe_experts")]
    if not moe:
        return [
            e.error(
                msg("moe.ep_without_routed_experts", ep=s.ep, model=s.model.name),
                msg("moe.ep_without_routed_experts.fix"),
                "expert_model_parallel_size",
            )
        ]
    n = s.model.num_moe_experts
    if n % s.ep:
        ok = [x for x in (1, 2, 4, 8, 16, 32, 64, 128, 256) if n % x == 0]
        return [
            e.error(
                msg("moe.experts_not_divisible_by_ep", experts=n, ep=s.ep),
                msg("moe.experts_not_divisible_by_ep.fix", values=ok),
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
            msg("moe.biased_experts_need_etp_1", model=m.name, etp=s.etp),
            msg("moe.biased_experts_need_etp_1.fix"),
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
        return [e.missing("system.gpu", msg("moe.why_dispatcher_support"))]
    if b == "deepep" and not s.gpu.supports_deepep:
        alt = (
            "moe_flex_dispatcher_backend: hybridep"
            if s.gpu.supports_hybridep
            else "moe_token_dispatcher_type: alltoall"
        )
        fix = (
            msg("moe.deepep_unsupported.fix_with_domain", alt=alt, ranks=min(s.gpu.scaleup_domain_gpus, s.ep * s.etp))
            if s.gpu.is_nvl72
            else msg("moe.deepep_unsupported.fix", alt=alt)
        )
        return [
            e.error(
                msg("moe.deepep_unsupported", gpu=s.gpu.id, name=s.gpu.name),
                fix,
                "moe_flex_dispatcher_backend",
                "system.gpu",
            )
        ]
    if b == "hybridep" and not s.gpu.supports_hybridep:
        return [
            e.error(
                msg("moe.hybridep_unsupported", gpu=s.gpu.id),
                msg("moe.use_alltoall_dispatcher"),
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
                msg(
                    "moe.backend_ignored_without_flex",
                    backend=lay.moe_flex_dispatcher_backend,
                    dispatcher=lay.moe_token_dispatcher_type,
                ),
                msg("moe.backend_ignored_without_flex.fix"),
                "moe_token_dispatcher_type",
            )
        )
    if lay.moe_enable_deepep:
        out.append(
            e.info(
                msg("moe.enable_deepep_deprecated"),
                "moe_enable_deepep",
            )
        )
    if lay.moe_enable_deepep and lay.moe_flex_dispatcher_backend == "hybridep":
        out.append(
            e.error(
                msg("moe.enable_deepep_with_hybridep"),
                msg("moe.enable_deepep_with_hybridep.fix"),
                "moe_enable_deepep",
            )
        )
    return out


def _either(names: list[str]):
    """``names`` joined with " or " (English) / "或" (Chinese): a name alone, else a message."""
    if len(names) == 1:
        return names[0]
    return msg("moe.either_backend", first=names[0], rest=_either(names[1:]))


#: flex dispatcher backends newer than the oldest megatron-core moeplan knows → the first version
#: that has each (HybridEP arrived in 0.15, NCCL-EP in 0.19)
BACKEND_MIN_MCORE: dict[str, Version] = {"hybridep": Version("0.15.0"), "ncclep": Version("0.19.0")}


def _backend_needs(s, e, b: str | None) -> list:
    """What the flex backend ``b`` in force (None without flex) needs: an expert TP × EP group of more
    than one rank, a megatron-core that has it (:data:`BACKEND_MIN_MCORE`), and no pad-to-capacity
    with DeepEP."""
    out = []
    if b is not None and s.etp * s.ep <= 1:
        # MoEFlexTokenDispatcher asserts TP×EP > 1 (its expert TP × EP group) before choosing a backend
        out.append(
            e.error(
                msg("moe.flex_needs_expert_group", backend=b, etp=s.etp, ep=s.ep),
                msg("moe.flex_needs_expert_group.fix"),
                "expert_model_parallel_size",
            )
        )
    first = BACKEND_MIN_MCORE.get(b or "")
    if first is not None and s.mcore_version < first:
        others = [x for x, v in BACKEND_MIN_MCORE.items() if x != b and s.mcore_version >= v]
        if s.gpu is None or s.gpu.supports_deepep:
            others.insert(0, "deepep")
        need = f"{first.major}.{first.minor}"
        fix = (
            msg("moe.backend_needs_newer_mcore.fix", backends=_either(others), version=need)
            if others
            else msg("moe.backend_needs_newer_mcore.fix_alltoall", version=need)
        )
        out.append(
            e.error(
                msg("moe.backend_needs_newer_mcore", backend=b, version=need, scenario=str(s.mcore_version)),
                fix,
                "moe_flex_dispatcher_backend",
            )
        )
    if b == "deepep" and s.layout.moe_pad_expert_input_to_capacity:
        out.append(
            e.error(
                msg("moe.deepep_pad_to_capacity"),
                msg("moe.deepep_pad_to_capacity.fix"),
                "moe_pad_expert_input_to_capacity",
            )
        )
    return out


#: the first Megatron Bridge release whose training loop wraps the step in megatron-core's
#: ``PagedStashRunner`` whenever ``moe_expert_rank_capacity_factor`` is set (``training/train.py``; Megatron-LM's
#: ``training.py`` from core 0.18, the release that brought the factor): a step over budget on any rank is
#: run again without the budget (``docs/user-guide/features/paged_stash.md``) instead of dropping tokens
PAGED_STASH_RUNNER_BRIDGE = Version("0.5.0")


#: the frameworks whose own training loop wraps the step in ``PagedStashRunner`` (Megatron-LM's
#: ``megatron/training/training.py``; Megatron Bridge's ``training/train.py`` from
#: :data:`PAGED_STASH_RUNNER_BRIDGE`); any other loop over megatron-core is not known to
RERUNNING_LOOPS = ("megatron-lm", "megatron-bridge")


def rank_budget_drops(s) -> bool:
    """True when HybridEP's per-rank budget may drop the tokens beyond it: megatron-core's own behaviour
    (``TransformerConfig.moe_expert_rank_capacity_factor``: "with the 'hybridep' backend, tokens exceeding
    this budget are dropped") wherever no ``PagedStashRunner`` reruns the step: Megatron Bridge before
    :data:`PAGED_STASH_RUNNER_BRIDGE`, and every loop outside :data:`RERUNNING_LOOPS` (``framework:
    megatron-core``, the RL and fine-tuning drivers)."""
    if s.driver not in RERUNNING_LOOPS:
        return True
    return s.driver == "megatron-bridge" and s.bridge_version < PAGED_STASH_RUNNER_BRIDGE


def rank_budget_note(s) -> Message | None:
    """The one statement of what HybridEP's static per-rank budget costs (``moe_expert_rank_capacity_factor``,
    which NVIDIA's full-iteration recipes set to 1.5): a rerun of every over-budget step, or, without the
    runner (:func:`rank_budget_drops`), dropped tokens. None without a budget or with another backend (NCCL
    EP sizes a static buffer from it and drops nothing)."""
    cf = s.layout.moe_expert_rank_capacity_factor
    if cf is None or _backend(s) != "hybridep":
        return None
    if not rank_budget_drops(s):
        return msg("moe.rank_budget_reruns", cf=cf)
    if s.driver == "megatron-bridge":
        return msg("moe.rank_budget_drops", cf=cf, bridge=str(s.bridge_version))
    return msg("moe.rank_budget_drops_loop", cf=cf, framework=s.driver)


def _rank_budget(s, e, b: str | None) -> list:
    """The static per-rank expert budget (``moe_expert_rank_capacity_factor``) needs the hybridep or
    ncclep backend (``b``: the flex backend in force, None without flex), with hybridep the TE op fuser;
    ``moe_paged_stash`` needs the budget."""
    lay = s.layout
    out = []
    if lay.moe_expert_rank_capacity_factor is not None and b not in ("hybridep", "ncclep"):
        out.append(
            e.error(
                msg("moe.rank_capacity_needs_backend"),
                msg("moe.rank_capacity_needs_backend.fix"),
                "moe_expert_rank_capacity_factor",
            )
        )
    if lay.moe_expert_rank_capacity_factor is not None and b == "hybridep" and not lay.use_transformer_engine_op_fuser:
        out.append(
            e.error(
                msg("moe.rank_capacity_needs_op_fuser"),
                msg("moe.rank_capacity_needs_op_fuser.fix"),
                "use_transformer_engine_op_fuser",
            )
        )
    if lay.moe_paged_stash and lay.moe_expert_rank_capacity_factor is None:
        out.append(
            e.error(
                msg("moe.paged_stash_needs_rank_capacity"),
                msg("moe.paged_stash_needs_rank_capacity.fix"),
                "moe_paged_stash",
            )
        )
    note = rank_budget_note(s)
    if note is not None:  # the trade-off, said where the user reads the check
        key = "moe_expert_rank_capacity_factor"
        if not rank_budget_drops(s):
            out.append(e.info(note, msg("moe.rank_budget_reruns.fix"), key))
        elif s.driver == "megatron-bridge":
            out.append(e.warning(note, msg("moe.rank_budget_drops.fix"), key))
        else:
            out.append(e.warning(note, msg("moe.rank_budget_drops_loop.fix"), key))
    return out


@rule(
    "moe.flex_backend_settings",
    "[TC] transformer_config.py; [MOE] token_dispatcher.py",
    "flex backends need ETP·EP > 1; hybridep needs mcore ≥ 0.15, ncclep ≥ 0.19; moe_enable_deepep excludes "
    "hybridep; DeepEP does not support pad-to-capacity; a backend without flex is ignored; a rank capacity "
    "factor needs hybridep/ncclep (and the TE op fuser with hybridep); paged stash needs a rank capacity factor; "
    "with hybridep an over-budget step is rerun (dropped tokens before Megatron Bridge 0.5)",
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
                msg("moe.pad_to_capacity_needs_factor"),
                msg("moe.pad_to_capacity_needs_factor.fix"),
                "moe_pad_expert_input_to_capacity",
            )
        )
    lb = lay.moe_router_load_balancing_type
    if cf is not None and cf >= 0 and lb not in (None, "aux_loss", "seq_aux_loss", "global_aux_loss", "none"):
        out.append(
            e.error(
                msg("moe.capacity_factor_balancing", balancing=lb),
                msg("moe.capacity_factor_balancing.fix"),
                "moe_router_load_balancing_type",
            )
        )
    if lay.moe_token_dispatcher_type == "allgather" and s.training.variable_length:
        out.append(
            e.error(
                msg("moe.allgather_variable_length"),
                msg("moe.use_alltoall_dispatcher"),
                "moe_token_dispatcher_type",
            )
        )
    no_shared = (
        s.model is not None and s.model.num_layers is not None and not s.model.moe_shared_expert_intermediate_size
    )
    if lay.moe_shared_expert_overlap and not no_shared and lay.moe_token_dispatcher_type not in ("alltoall", "flex"):
        out.append(
            e.error(
                msg("moe.shared_expert_overlap_dispatcher"),
                msg("moe.use_alltoall_dispatcher"),
                "moe_shared_expert_overlap",
            )
        )
    return out


#: the first megatron-core whose ``TransformerConfig`` refuses 'moe' recompute with EP overlap (the
#: pinned 0.20, megatron_facts rule 36; 0.16.1's accepts it, oracle); Megatron Bridge's comm_overlap always does
MOE_RECOMPUTE_EP_OVERLAP_MCORE = Version("0.20.0")


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
                    msg("moe.delay_wgrad_needs_ep_overlap"),
                    msg("moe.delay_wgrad_needs_ep_overlap.fix"),
                    "delay_wgrad_compute",
                )
            ]
        return None
    problems = []
    if s.ep <= 1:
        problems.append(msg("moe.ep_overlap.needs_ep", ep=s.ep))
    if s.model is not None and s.model.num_layers is not None and not s.model.is_moe:
        problems.append(msg("moe.ep_overlap.needs_routed_experts"))
    if lay.moe_token_dispatcher_type not in ("alltoall", "flex"):
        problems.append(msg("moe.ep_overlap.needs_dispatcher", dispatcher=lay.moe_token_dispatcher_type))
    if s.pp > 1 and s.vpp <= 1:
        problems.append(msg("moe.ep_overlap.needs_vpp", pp=s.pp))
    if lay.recompute_granularity == "full" or lay.recompute_method or lay.recompute_num_layers:
        problems.append(msg("moe.ep_overlap.no_full_recompute"))
    # 'moe' recompute vs EP overlap: a Megatron Bridge comm_overlap check, in TransformerConfig at the
    # pinned 0.20 (megatron_facts rule 36); megatron-core 0.16.1's config accepts it (oracle).
    moe_rc_checked = s.framework == "megatron-bridge" or s.mcore_version >= MOE_RECOMPUTE_EP_OVERLAP_MCORE
    if moe_rc_checked and lay.recompute_granularity == "selective" and "moe" in (lay.recompute_modules or []):
        problems.append(msg("moe.ep_overlap.no_moe_recompute"))
    if lay.moe_shared_expert_overlap:
        problems.append(msg("moe.ep_overlap.no_shared_expert_overlap"))
    if s.mtp_num_layers > 1:
        problems.append(msg("moe.ep_overlap.mtp_layers", mtp=s.mtp_num_layers))
    if s.mtp_num_layers == 1 and s.pp == 1:
        problems.append(msg("moe.ep_overlap.mtp_needs_pp"))
    if lay.cuda_graph_impl == "transformer_engine" and {"moe", "mlp"} & set(s.graph_scopes()):
        problems.append(msg("moe.ep_overlap.no_moe_mlp_graphs"))
    if lay.cuda_graph_impl == "local" and s.graph_scopes() != ["full_iteration"]:
        problems.append(msg("moe.ep_overlap.te_graphs"))
    if not problems:
        return None
    return [
        e.error(
            msg("moe.ep_overlap_requirements", problems=Items(problems)),
            msg("moe.ep_overlap_requirements.fix"),
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
            msg("moe.etp_unset_follows_tp", framework=s.framework, tp=s.tp, ep=s.ep, grid=grid),
            msg("moe.etp_unset_follows_tp.fix", tp=s.tp),
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
    multiple of the combine chunk (``hybrid_ep_pad_num_of_tokens_per_rank``, which pads nothing for a
    chunk ≤ 0). Tokens, no units else."""
    aligned = max(-(-tokens // 16) * 16, 512)
    return aligned if chunk <= 0 else -(-aligned // chunk) * chunk  # (no padding with a chunk ≤ 0, as the source)


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
    group = s.etp * s.ep
    dom = hybridep_ranks_per_domain(s.environment, group, hybridep_reach_gpus(s))
    if dom is None:
        return [e.missing("system.gpu", msg("moe.why_hybridep_nvlink_domain"))]
    if group <= dom:
        return None
    n = _dispatch_tokens(s)
    if n is None:
        return [e.missing(both("training.seq_length", "micro_batch_size"), msg("moe.why_tokens_per_rank"))]
    chunk = env_int(s.environment, "NUM_OF_TOKENS_PER_CHUNK_COMBINE_API", HYBRIDEP_COMBINE_CHUNK_TOKENS)
    buf = hybridep_buffer_tokens(n, chunk)
    limit = HYBRIDEP_MAX_TOKENS_PER_RANK_MULTI_NODE
    if buf <= limit:
        return None
    best = (limit // chunk) * chunk if chunk > 0 else limit
    return [
        e.error(
            msg(
                "moe.hybridep_internode_tokens",
                domains=-(-group // dom),
                group=group,
                ranks=dom,
                tokens=n,
                buffer=buf,
                limit=limit,
                depth=HYBRIDEP_QP_MAX_TX_DEPTH,
            ),
            msg("moe.hybridep_internode_tokens.fix", divisor="CP·TP" if s.sp and s.tp > 1 else "CP", best=best),
            "moe_flex_dispatcher_backend",
            "training.micro_batch_size",
            "context_parallel_size",
        )
    ]


#: ``moe_deepep_num_sms``'s default in megatron-core ≤ 0.18 (``TransformerConfig``; None from 0.19)
DEEPEP_NUM_SMS_DEFAULT = 20
#: the first megatron-core where ``moe_deepep_num_sms`` is a deprecated alias of ``moe_flex_dispatcher_num_sms``
FLEX_NUM_SMS_MCORE = Version("0.19.0")


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
                msg("moe.deepep_num_sms_odd", sms=n),
                msg("moe.deepep_num_sms_odd.fix", sms=n + 1),
                "moe_deepep_num_sms",
            )
        )
    if s.mcore_version >= FLEX_NUM_SMS_MCORE:
        out.append(
            e.info(
                msg("moe.deepep_num_sms_deprecated"),
                "moe_deepep_num_sms",
            )
        )
    elif b != "deepep" and n != DEEPEP_NUM_SMS_DEFAULT:  # 20 is the default every ≤ 0.18 argument dump shows
        out.append(
            e.warning(
                msg("moe.deepep_num_sms_unread", backend=b or msg("moe.no_flex_dispatcher")),
                msg("moe.deepep_num_sms_unread.fix"),
                "moe_deepep_num_sms",
            )
        )
    return out
