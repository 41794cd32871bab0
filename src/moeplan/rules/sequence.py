"""Sequence length, CP and SP rules (``megatron_facts.md`` §4.3, vendored in ``tests/data/reference``)."""

from __future__ import annotations

import math

from packaging.version import Version

from moeplan.i18n.messages import Items, Message, msg
from moeplan.inputs.layout import CP_COMM_TYPES
from moeplan.rules.base import rule
from moeplan.structure.attention_kernels import heads_per_tp_rank


def alignment_unit(cp: int, tp: int, sp: bool) -> int:
    """Tokens a sequence must be a multiple of: 2·CP for CP load balancing (CP > 1) and CP·TP for
    the SP scatter of the CP-local sequence; combined CP·lcm(2, TP) (NeMo-RL PR 3563; Bridge pads
    SFT data to exactly this)."""
    two = 2 if cp > 1 else 1
    tpf = tp if (sp and tp > 1) else 1
    return cp * math.lcm(two, tpf)


def _alignment_needed(cp: int, tp: int, sp: bool) -> Message:
    """What makes up the alignment unit of :func:`alignment_unit` with CP > 1 or SP (2·CP, CP·TP or
    both), as shown in the message of ``sequence.cp_sp_alignment``; called only when the unit is > 1."""
    parts = []
    if cp > 1:
        parts.append(msg("sequence.alignment_two_cp", n=2 * cp))
    if sp and tp > 1:
        parts.append(msg("sequence.alignment_cp_tp", n=cp * tp))
    if len(parts) == 2:
        return msg("sequence.alignment_both", two_cp=parts[0], cp_tp=parts[1])
    return parts[0]


def _alignment_fix(key: str, unit: int, up: int) -> Message:
    """The fix for a length of ``key`` not a multiple of ``unit`` tokens; ``up`` is the next multiple."""
    if key != "training.seq_length":
        return msg("sequence.pad_microbatches", unit=unit, up=up)
    if up - unit > 0:
        return msg("sequence.use_seq_length_or", up=up, down=up - unit)
    return msg("sequence.use_seq_length", up=up)


@rule(
    "sequence.cp_sp_alignment",
    "[B-CFG]; [ARGS]; tensor_parallel/mappings.py (SP scatter)",
    "sequence (and each microbatch) length must be a multiple of CP·lcm(2, TP) with SP, 2·CP without",
)
def _align(s, e):
    unit = alignment_unit(s.cp, s.tp, s.sp)
    if unit == 1:
        return None
    t = s.training
    lengths = []
    if t.seq_length is not None:
        lengths.append(("training.seq_length", t.seq_length))
    for n in t.microbatch_seq_lengths or []:
        lengths.append(("training.microbatch_seq_lengths", n))
    if not lengths:
        return [e.missing("training.seq_length")]
    needed = _alignment_needed(s.cp, s.tp, s.sp)
    out = []
    for key, n in lengths:
        if n % unit:
            up = math.ceil(n / unit) * unit
            out.append(
                e.error(
                    msg("sequence.length_not_aligned", key=key.split(".")[-1], n=n, unit=unit, needed=needed),
                    _alignment_fix(key, unit, up),
                    key,
                    "context_parallel_size",
                    "tensor_model_parallel_size",
                )
            )
    return out


@rule(
    "sequence.sp_requires_tp",
    "[MPC] model_parallel_config.py; Megatron-LM arguments.py validate_args; [B-TC] finalize",
    "sequence_parallel needs TP > 1: stated with TP = 1 it is turned off (Megatron-LM warns, Bridge's finalize "
    "says nothing) before megatron-core's config would raise",
)
def _sp_tp(s, e):
    if s.input.layout.sequence_parallel and s.tp == 1:
        bridge = s.framework == "megatron-bridge"
        return [
            e.warning(
                msg("inputs_keys.sp_off_tp1_bridge") if bridge else msg("inputs_keys.sp_off_tp1_mcore"),
                msg("inputs_keys.sp_off_tp1.fix"),
                "sequence_parallel",
            )
        ]


@rule(
    "sequence.moe_tp_requires_sp",
    "[MPC] warning; [MOE] moe_layer.py raises at forward",
    "MoE with TP > 1 needs sequence_parallel during training",
)
def _moe_sp(s, e):
    if s.tp <= 1 or s.sp:
        return None
    if s.model is not None and s.model.num_layers is not None:
        is_moe = s.model.is_moe
    else:  # no model: judge by the MoE knobs the layout states
        is_moe = s.ep > 1 or "moe_token_dispatcher_type" in s.stated
    if is_moe:
        return [
            e.error(
                msg("sequence.moe_tp_without_sp", tp=s.tp),
                msg("sequence.moe_tp_without_sp.fix"),
                "sequence_parallel",
                "tensor_model_parallel_size",
                edits={"sequence_parallel": True},
            )
        ]


@rule(
    "sequence.cp_comm_type",
    "[TC] transformer_config.py; [B-CFG]",
    "cp_comm_type ∈ {p2p, all_gather, a2a, a2a+p2p}, a string or one per layer",
)
def _cp_comm(s, e):
    ct = s.layout.cp_comm_type
    if ct is None:
        return None
    items = [ct] if isinstance(ct, str) else list(ct)
    bad = [c for c in items if c not in CP_COMM_TYPES]
    out = []
    if bad:
        out.append(
            e.error(
                msg("sequence.cp_comm_type_unknown", value=bad[0], allowed=", ".join(CP_COMM_TYPES)),
                msg("sequence.cp_comm_type_unknown.fix"),
                "cp_comm_type",
            )
        )
    if isinstance(ct, list) and s.model is not None and s.model.num_layers and len(ct) != s.model.num_layers:
        out.append(
            e.error(
                msg("sequence.cp_comm_type_entries", entries=len(ct), layers=s.model.num_layers),
                msg("sequence.cp_comm_type_entries.fix"),
                "cp_comm_type",
            )
        )
    return out


@rule(
    "sequence.a2a_p2p_requires_hierarchical_sizes",
    "[ARGS]; [B-CFG] (Megatron-Bridge PR 2665)",
    "cp_comm_type a2a+p2p needs hierarchical_context_parallel_sizes",
)
def _hcp_needed(s, e):
    ct = s.layout.cp_comm_type
    uses = ct == "a2a+p2p" or (isinstance(ct, list) and "a2a+p2p" in ct)
    if uses and not s.layout.hierarchical_context_parallel_sizes:
        domain = s.gpu.scaleup_domain_gpus if s.gpu is not None else (s.gpus_per_node or 8)
        room = max(1, domain // s.tp)
        inner = max(d for d in range(1, s.cp + 1) if s.cp % d == 0 and d <= room)
        if inner == s.cp and s.cp > 1:
            inner = max(d for d in range(1, s.cp) if s.cp % d == 0)
        return [
            e.error(
                msg("sequence.a2a_p2p_without_hierarchical_sizes", cp=s.cp),
                msg("sequence.a2a_p2p_without_hierarchical_sizes.fix", inner=inner, outer=s.cp // inner),
                "hierarchical_context_parallel_sizes",
                "cp_comm_type",
            )
        ]


@rule(
    "sequence.hierarchical_cp_product",
    "[ARGS]; [B-CFG]",
    "the product of hierarchical_context_parallel_sizes must equal CP",
)
def _hcp_product(s, e):
    h = s.layout.hierarchical_context_parallel_sizes
    if not h:
        return None
    prod = math.prod(h)
    if prod != s.cp:
        return [
            e.error(
                msg("sequence.hierarchical_cp_product", factors="·".join(map(str, h)), product=prod, cp=s.cp),
                msg("sequence.hierarchical_cp_product.fix", cp=s.cp),
                "hierarchical_context_parallel_sizes",
                "context_parallel_size",
            )
        ]


@rule(
    "sequence.finetune_cp_per_token_loss",
    "[B-CFG] ConfigContainer.validate",
    "fine-tuning with CP > 1 needs calculate_per_token_loss",
)
def _ft_cp(s, e):
    if s.training.task != "finetune" or s.cp <= 1:
        return None
    if s.layout.calculate_per_token_loss is False:
        return [
            e.error(
                msg("sequence.finetune_cp_per_token_loss"),
                msg("sequence.finetune_cp_per_token_loss.fix"),
                "calculate_per_token_loss",
            )
        ]


@rule(
    "sequence.max_position_embeddings",
    "[ARGS] (Megatron-LM); RoPE scaling range",
    "seq_length should not exceed the model's max_position_embeddings",
)
def _max_pos(s, e):
    m, t = s.model, s.training
    if m is None or t.seq_length is None or not m.max_position_embeddings:
        return None
    if t.seq_length > m.max_position_embeddings:
        seq, max_pos = t.seq_length, m.max_position_embeddings
        fix = msg("sequence.seq_length_over_max_position.fix")
        if s.framework == "megatron-core":
            text = msg("sequence.seq_length_over_max_position_asserted", seq=seq, max_pos=max_pos)
            return [e.error(text, fix, "training.seq_length")]
        text = msg("sequence.seq_length_over_max_position", seq=seq, max_pos=max_pos)
        return [e.warning(text, fix, "training.seq_length")]


def _comma_list(items: list[str]) -> str:
    """``items`` joined with ", " in English ("、" in Chinese), each item translated; ``items`` is not empty."""
    if len(items) == 1:
        return items[0]
    return msg("sequence.hybrid_cp_conflicts.list", first=items[0], rest=_comma_list(items[1:]))


@rule("sequence.hybrid_cp_restrictions", "[ARGS] arguments.py", "hybrid (dynamic) CP excludes PP > 1, graphs and FSDP")
def _hybrid_cp(s, e):
    if not s.layout.hybrid_context_parallel:
        return None
    bad: list[str] = []
    if s.pp > 1:
        bad.append(f"PP = {s.pp}")
    if s.graphs_on():
        bad.append(msg("sequence.hybrid_cp_conflicts.cuda_graphs"))
    if s.layout.use_megatron_fsdp:
        bad.append("Megatron-FSDP")
    if bad:
        conflicts = _comma_list(bad)
        return [
            e.error(
                msg("sequence.hybrid_cp_conflicts", conflicts=conflicts),
                msg("sequence.hybrid_cp_conflicts.fix", conflicts=conflicts),
                "hybrid_context_parallel",
            )
        ]


#: first Transformer Engine release whose CP tests run MLA (head_dim_qk != head_dim_v) with every
#: cp_comm_type under FusedAttention (``tests/pytorch/attention/test_attention_with_cp.py``, 8e73f54)
MLA_ANY_CP_COMM_TE = Version("2.15")


def _mla_cp_tested(s, comm_type: str) -> bool:
    """Whether Transformer Engine's CP tests run MLA with ``comm_type``: the ring types (``p2p``,
    ``a2a+p2p``) in every release (the tests skip MLA when ``"p2p" not in cp_comm_type``, v2.6–v2.14,
    FlashAttention and FusedAttention); ``a2a`` and ``all_gather`` from TE 2.15 under FusedAttention,
    which TE prefers on Hopper and newer (compute capability 9.0+). An unknown TE version or GPU
    counts as untested."""
    if "p2p" in comm_type:
        return True
    te = s.versions.get("transformer_engine")
    cc = s.gpu.compute_capability if s.gpu is not None else None
    return te is not None and te >= MLA_ANY_CP_COMM_TE and cc is not None and cc >= 9.0


@rule(
    "sequence.cp_attention_support",
    "Transformer Engine context-parallel attention (tests/pytorch/attention/test_attention_with_cp.py)",
    "CP communication type vs attention variant: attention sinks need a2a; sliding windows do not run with "
    "p2p / a2a+p2p; MLA needs a p2p type; a2a needs the per-rank heads divisible by CP, a2a+p2p by the size "
    "of its all-to-all level (hierarchical_context_parallel_sizes[0])",
    kind="unsupported",
)
def _cp_attention(s, e):
    m = s.model
    if s.cp <= 1 or m is None or m.num_layers is None:
        return None
    ct = s.layout.cp_comm_type
    ctype = ct if isinstance(ct, str) else ("p2p" if ct is None else None)
    types = set(ct) if ctype is None else {ctype}  # a per-layer list: every distinct type
    out = []
    kinds = set(m.attention_kinds or ("full",))
    for typ in sorted(types):
        if m.attention_sinks and typ != "a2a":
            out.append(
                e.error(
                    msg("sequence.cp_sinks_need_a2a", model=m.name, cp=s.cp, comm=typ),
                    msg("sequence.cp_sinks_need_a2a.fix"),
                    "cp_comm_type",
                )
            )
        if "sliding" in kinds and typ in ("p2p", "a2a+p2p"):
            out.append(
                e.error(
                    msg("sequence.cp_sliding_window_exchange", cp=s.cp, comm=typ),
                    msg("sequence.cp_sliding_window_exchange.fix"),
                    "cp_comm_type",
                )
            )
        if m.multi_latent_attention and not _mla_cp_tested(s, typ):
            out.append(
                e.warning(
                    msg("sequence.cp_mla_needs_p2p", cp=s.cp, comm=typ),
                    msg("sequence.cp_mla_needs_p2p.fix"),
                    "cp_comm_type",
                )
            )
        out += _a2a_head_split(s, e, typ)
    if m.multi_latent_attention and s.layout.fp8_dot_product_attention and s.training.precision != "bf16":
        out.append(
            e.warning(
                msg("sequence.cp_fp8_mla_untested"),
                msg("sequence.cp_fp8_mla_untested.fix"),
                "fp8_dot_product_attention",
            )
        )
    return out


def _a2a_head_split(s, e, typ: str) -> list:
    """The error when the all-to-all of ``typ`` cannot split the per-rank heads
    (:func:`moeplan.structure.attention_kernels.heads_per_tp_rank`): over CP ranks for ``a2a`` (Transformer
    Engine asserts ``num_heads % cp_size == 0`` for Q, K and V), over the first level of
    ``hierarchical_context_parallel_sizes`` for ``a2a+p2p`` (``flash_attn_a2a_communicate`` views them as
    ``[..., cp, heads // cp, ...]`` over that group)."""
    hier = s.layout.hierarchical_context_parallel_sizes
    size = s.cp if typ == "a2a" else (hier[0] if typ == "a2a+p2p" and hier else 1)
    split = heads_per_tp_rank(s.model, s.tp)
    if size <= 1 or split is None:
        return []
    heads, kv = split
    if not (heads % size or kv % size):
        return []
    if typ == "a2a":
        text = msg("sequence.cp_a2a_heads_not_divisible", heads=heads, groups=kv, cp=size)
        fix = msg("sequence.cp_a2a_heads_not_divisible.fix")
    else:
        text = msg("sequence.cp_a2a_p2p_heads_not_divisible", heads=heads, groups=kv, a2a=size, sizes=list(hier))
        fix = msg("sequence.cp_a2a_p2p_heads_not_divisible.fix")
    return [e.error(text, fix, "cp_comm_type", "context_parallel_size")]


def _contiguous_problems(s) -> list[Message]:
    """What megatron-core's dev-branch ``TransformerConfig.__post_init__`` (@d48bd6b L1563-1616) refuses
    for ``cp_partition_mode: contiguous`` with CP > 1 (a DeepSeek-V4 model's hybrid attention is the
    MLA-based one it allows)."""
    m = s.model
    out = []
    if not s.training.packed_sequences:
        out.append(msg("sequence.contiguous_cp_requires.thd"))
    if s.mtp_num_layers > 0 and s.tp > 1 and s.sp:
        out.append(msg("sequence.contiguous_cp_requires.no_mtp"))
    if m is not None and m.is_dsv4:
        return out
    if m is not None and m.multi_latent_attention:
        out.append(msg("sequence.contiguous_cp_requires.no_mla"))
    elif m is not None and m.num_layers is not None and not m.has_linear_attention:
        out.append(msg("sequence.contiguous_cp_requires.gdn"))
    return out


@rule(
    "sequence.cp_partition_mode",
    "megatron-core dev branch @d48bd6b transformer_config.py (cp_partition_mode, L312 and L1563-1616); "
    "Bridge models/deepseek/deepseek_v4_step.py",
    "cp_partition_mode exists only on megatron-core's dev branch; 'contiguous' with CP > 1 needs THD packing, "
    "Gated DeltaNet (or DSv4 hybrid) attention, no MLA, and no MTP with TP > 1 and SP",
)
def _cp_partition(s, e):
    mode = s.layout.cp_partition_mode
    if mode is None:
        return None
    out = [
        e.warning(
            msg("sequence.cp_partition_mode_dev_only", version=str(s.mcore_version)),
            msg("sequence.cp_partition_mode_dev_only.fix"),
            "cp_partition_mode",
        )
    ]
    problems = _contiguous_problems(s) if mode == "contiguous" and s.cp > 1 else []
    if problems:
        out.append(
            e.error(
                msg("sequence.contiguous_cp_requires", cp=s.cp, problems=Items(problems)),
                msg("sequence.contiguous_cp_requires.fix"),
                "cp_partition_mode",
            )
        )
    return out
