"""Sequence length, CP and SP rules (``megatron_facts.md`` §4.3)."""

from __future__ import annotations

import math

from moeplan.rules.base import rule
from moeplan.spec.layout import CP_COMM_TYPES


def alignment_unit(cp: int, tp: int, sp: bool) -> int:
    """Tokens a sequence must be a multiple of: 2·CP for CP load balancing (CP > 1) and CP·TP for
    the SP scatter of the CP-local sequence; combined CP·lcm(2, TP) (NeMo-RL PR 3563; Bridge pads
    SFT data to exactly this)."""
    two = 2 if cp > 1 else 1
    tpf = tp if (sp and tp > 1) else 1
    return cp * math.lcm(two, tpf)


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
    parts = []
    if s.cp > 1:
        parts.append(f"2·CP = {2 * s.cp}")
    if s.sp and s.tp > 1:
        parts.append(f"CP·TP = {s.cp * s.tp}")
    out = []
    for key, n in lengths:
        if n % unit:
            up = math.ceil(n / unit) * unit
            out.append(
                e.error(
                    f"{key.split('.')[-1]} {n} is not a multiple of {unit} (needed: {' and '.join(parts)})",
                    (
                        f"use seq_length {up}" + (f" or {up - unit}" if up - unit > 0 else "")
                        if key == "training.seq_length"
                        else f"pad microbatches to a multiple of {unit} (e.g. {up} tokens, or to seq_length); "
                        "for packed data set pad_to_max_length / pad_cu_seqlens"
                    ),
                    key,
                    "context_parallel_size",
                    "tensor_model_parallel_size",
                )
            )
    return out


@rule("sequence.sp_requires_tp", "[MPC] model_parallel_config.py", "sequence_parallel needs TP > 1")
def _sp_tp(s, e):
    if s.layout.sequence_parallel and s.tp == 1:
        how = "; Bridge's finalize silently turns it off" if s.framework == "megatron-bridge" else ""
        return [
            e.error(
                f"sequence_parallel is on with TP = 1 (megatron-core raises{how})",
                "set sequence_parallel: false or TP ≥ 2",
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
                f"MoE with TP = {s.tp} and sequence_parallel off: the MoE layer raises a ValueError "
                "at the first training forward",
                "set sequence_parallel: true",
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
                f"cp_comm_type {bad[0]!r} is not one of {', '.join(CP_COMM_TYPES)}",
                "use p2p (ring), all_gather, a2a or a2a+p2p",
                "cp_comm_type",
            )
        )
    if isinstance(ct, list) and s.model is not None and s.model.num_layers and len(ct) != s.model.num_layers:
        out.append(
            e.error(
                f"cp_comm_type has {len(ct)} entries but the model has {s.model.num_layers} layers",
                "give one entry per layer or a single string",
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
                f"cp_comm_type 'a2a+p2p' with CP = {s.cp} but no hierarchical_context_parallel_sizes: "
                "without them each CP rank silently attends only to its own slice",
                f"set hierarchical_context_parallel_sizes: [{inner}, {s.cp // inner}] (a2a inside the "
                "NVLink domain, p2p across)",
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
                f"the product of hierarchical_context_parallel_sizes ({'·'.join(map(str, h))} = {prod}) "
                f"must equal CP ({s.cp})",
                f"use sizes whose product is {s.cp}",
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
                "fine-tuning with CP > 1 requires calculate_per_token_loss=True (and ddp.average_in_collective=False)",
                "set calculate_per_token_loss: true",
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
        msg = (
            f"seq_length ({t.seq_length}) exceeds max_position_embeddings ({m.max_position_embeddings}) "
            "of the model config"
        )
        fix = "extend RoPE (e.g. YaRN) and raise max_position_embeddings, or shorten seq_length"
        if s.framework == "megatron-core":
            return [e.error(msg + " (Megatron-LM asserts it)", fix, "training.seq_length")]
        return [e.warning(msg, fix, "training.seq_length")]


@rule("sequence.hybrid_cp_restrictions", "[ARGS] arguments.py", "hybrid (dynamic) CP excludes PP > 1, graphs and FSDP")
def _hybrid_cp(s, e):
    if not s.layout.hybrid_context_parallel:
        return None
    bad = []
    if s.pp > 1:
        bad.append(f"PP = {s.pp}")
    if s.graphs_on():
        bad.append("CUDA graphs")
    if s.layout.use_megatron_fsdp:
        bad.append("Megatron-FSDP")
    if bad:
        return [
            e.error(
                "hybrid_context_parallel cannot be combined with " + ", ".join(bad),
                "turn hybrid_context_parallel off or remove " + ", ".join(bad),
                "hybrid_context_parallel",
            )
        ]


@rule(
    "sequence.cp_attention_support",
    "Transformer Engine context-parallel attention (tests/pytorch/attention/test_attention_with_cp.py)",
    "CP communication type vs attention variant: attention sinks need a2a; sliding windows do not run with "
    "p2p / a2a+p2p; MLA needs a p2p type; a2a needs the per-rank heads divisible by CP",
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
                    f"attention sinks (softmax with learnable offsets, {m.name}) with CP = {s.cp} run only "
                    f"with cp_comm_type a2a in Transformer Engine (got {typ})",
                    "set cp_comm_type: a2a (or CP = 1)",
                    "cp_comm_type",
                )
            )
        if "sliding" in kinds and typ in ("p2p", "a2a+p2p"):
            out.append(
                e.error(
                    f"sliding-window attention with CP = {s.cp} is not supported by the {typ} exchange",
                    "use cp_comm_type: a2a or all_gather",
                    "cp_comm_type",
                )
            )
        if m.multi_latent_attention and "p2p" not in typ:
            out.append(
                e.warning(
                    f"MLA (different Q/K and V head dims) with CP = {s.cp} is tested only with p2p "
                    f"exchanges in Transformer Engine (got {typ})",
                    "use cp_comm_type: p2p",
                    "cp_comm_type",
                )
            )
        if typ == "a2a" and not m.multi_latent_attention and m.num_attention_heads and m.num_query_groups:
            heads = m.num_attention_heads // s.tp
            groups = max(1, m.num_query_groups // s.tp)
            if heads % s.cp or groups % s.cp:
                out.append(
                    e.error(
                        f"a2a context parallelism splits heads over CP: {heads} query heads and {groups} "
                        f"KV head(s) per TP rank are not divisible by CP ({s.cp})",
                        "use cp_comm_type: p2p (ring), or lower TP/CP so heads per rank divide by CP",
                        "cp_comm_type",
                        "context_parallel_size",
                    )
                )
    if m.multi_latent_attention and s.layout.fp8_dot_product_attention and s.training.precision != "bf16":
        out.append(
            e.warning(
                "FP8 attention with MLA and CP > 1 is not covered by Transformer Engine's CP tests",
                "turn fp8_dot_product_attention off with CP",
                "fp8_dot_product_attention",
            )
        )
    return out


def _contiguous_problems(s) -> list[str]:
    """What megatron-core's dev-branch ``TransformerConfig.__post_init__`` (@d48bd6b L1563-1616) refuses
    for ``cp_partition_mode: contiguous`` with CP > 1, on the models moeplan builds (no DSv4 hybrid)."""
    m = s.model
    out = []
    if not s.training.packed_sequences:
        out.append("THD inputs from a sequence-packing scheduler (BSHD context parallelism is zigzag only)")
    if s.mtp_num_layers > 0 and s.tp > 1 and s.sp:
        out.append("no MTP with TP > 1 and SP (a known padding-mask layout bug)")
    if m is not None and m.multi_latent_attention:
        out.append("no multi-latent attention (outside DeepSeek-V4's hybrid attention)")
    elif m is not None and m.num_layers is not None and not m.has_linear_attention:
        out.append("Gated DeltaNet (or DeepSeek-V4 hybrid) attention")
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
            f"cp_partition_mode is a TransformerConfig field of megatron-core's dev branch only (no release up to "
            f"{'.'.join(map(str, s.mcore_version))} has it; a released config refuses the unknown field)",
            "drop it unless you run megatron-core's dev branch",
            "cp_partition_mode",
        )
    ]
    problems = _contiguous_problems(s) if mode == "contiguous" and s.cp > 1 else []
    if problems:
        out.append(
            e.error(
                f"cp_partition_mode 'contiguous' with CP = {s.cp} requires " + "; ".join(problems),
                "use cp_partition_mode: zigzag (the default)",
                "cp_partition_mode",
            )
        )
    return out
