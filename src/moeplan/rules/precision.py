"""FP8 / MXFP8 / NVFP4 rules (``megatron_facts.md`` §3.10, §4.8, vendored in
``tests/data/reference``; Transformer Engine alignment)."""

from __future__ import annotations

import math

from packaging.version import Version

from moeplan.i18n.messages import Message, msg
from moeplan.rules.base import rule, why_precision_support

#: Tokens per rank must be a multiple of this for the recipe's GEMMs (TE asserts the leading
#: dimension of FP8 GEMM inputs is a multiple of 16; MXFP8 and NVFP4 scale blocks of 32 / 16
#: elements along it need 32). Bridge pads packed sequences to 32 under FP8.
FP8_TOKEN_ALIGNMENT = {"fp8-tensorwise": 16, "fp8-delayed": 16, "fp8-blockwise": 16, "mxfp8": 32, "nvfp4": 32}


@rule(
    "precision.recipe_vs_gpu",
    "Transformer Engine support matrix; [B-CFG] mixed_precision.py",
    "FP8 needs Hopper or newer (TE, NVIDIA only); MXFP8 and NVFP4 need Blackwell",
    kind="unsupported",
)
def _gpu(s, e):
    p = s.training.precision
    if p == "bf16":
        return None
    if s.gpu is None:
        return [e.missing("system.gpu", why_precision_support())]
    g = s.gpu
    if p in ("mxfp8", "nvfp4") and not (g.supports_mxfp8 if p == "mxfp8" else g.supports_nvfp4):
        return [
            e.error(
                msg("precision.needs_blackwell", precision=p, gpu=g.id),
                msg("precision.needs_blackwell.fix"),
                "training.precision",
            )
        ]
    if p.startswith("fp8") and not g.supports_te_fp8:
        return [
            e.error(
                msg("precision.te_fp8_unsupported", precision=p, gpu=g.id, vendor=g.vendor, arch=g.arch),
                msg("precision.te_fp8_unsupported.fix"),
                "training.precision",
            )
        ]


def _rank_split(s, div: int) -> Message:
    """How a sequence is split over the ranks, as a message: ``÷ CP n``, and ``÷ TP m with SP`` when
    ``div`` (the per-rank divisor) also counts the sequence-parallel TP split."""
    if div != s.cp:
        return msg("precision.rank_split_sp", cp=s.cp, tp=s.tp)
    return msg("precision.rank_split", cp=s.cp)


@rule(
    "precision.fp8_token_alignment",
    "Transformer Engine FP8 GEMM alignment; Bridge packed-sequence padding",
    "tokens per rank (seq/CP, /TP with SP) must be a multiple of 16 for FP8 (32 for MXFP8/NVFP4)",
)
def _align(s, e):
    p = s.training.precision
    if p not in FP8_TOKEN_ALIGNMENT:
        return None
    unit = FP8_TOKEN_ALIGNMENT[p]
    t = s.training
    lengths = [("seq_length", t.seq_length)] if t.seq_length else []
    lengths += [("microbatch_seq_lengths", n) for n in (t.microbatch_seq_lengths or [])]
    if not lengths:
        return [e.missing("training.seq_length")]
    div = s.cp * (s.tp if s.sp and s.tp > 1 else 1)
    out = []
    for key, n in lengths:
        per_rank = n / div
        if n % div or int(per_rank) % unit:
            need = div * unit
            padded = math.ceil(n / need) * need
            out.append(
                e.error(
                    msg(
                        "precision.tokens_per_rank_unaligned",
                        key=key,
                        length=n,
                        per_rank=per_rank,
                        split=_rank_split(s, div),
                        unit=unit,
                        precision=p,
                    ),
                    msg("precision.tokens_per_rank_unaligned.fix_packed", padded=padded, need=need)
                    if t.packed_sequences
                    else msg("precision.tokens_per_rank_unaligned.fix", padded=padded, need=need),
                    f"training.{key}",
                    "training.precision",
                )
            )
    return out


@rule(
    "precision.fp8_flags",
    "[TC]; [ARGS]; [DDPC]",
    "fp8_param_gather needs an FP8 recipe and the distributed optimizer or FSDP; first/last BF16 layers "
    "≤ L/PP and not with delayed scaling",
)
def _flags(s, e):
    lay = s.layout
    p = s.training.precision
    out = []
    if lay.fp8_param_gather:
        if p == "bf16" or p == "nvfp4":
            out.append(
                e.error(
                    msg("precision.param_gather_needs_fp8", precision=p),
                    msg("precision.param_gather_needs_fp8.fix"),
                    "fp8_param_gather",
                )
            )
        if not lay.use_distributed_optimizer and not lay.use_megatron_fsdp:
            out.append(
                e.error(
                    msg("precision.param_gather_needs_dist_opt"),
                    msg("precision.param_gather_needs_dist_opt.fix"),
                    "fp8_param_gather",
                )
            )
    if lay.first_last_layers_bf16:
        if p == "fp8-delayed":
            out.append(
                e.error(
                    msg("precision.delayed_scaling_bf16_layers"),
                    msg("precision.delayed_scaling_bf16_layers.fix"),
                    "first_last_layers_bf16",
                )
            )
        if s.model is not None and s.model.num_layers:
            lim = s.model.num_layers // s.pp
            for key in ("num_layers_at_start_in_bf16", "num_layers_at_end_in_bf16"):
                v = getattr(lay, key)
                if v is not None and v > lim:
                    out.append(
                        e.error(
                            msg("precision.bf16_layers_above_stage", key=key, value=v, limit=lim),
                            msg("precision.bf16_layers_above_stage.fix", limit=lim),
                            key,
                        )
                    )
    return out


@rule(
    "reported.throughput_exceeds_peak",
    "GPU vendor peak (catalog)",
    "a reported model TFLOP/s per GPU above the GPU's dense peak is impossible",
)
def _reported(s, e):
    r = s.input.reported
    if r.model_tflops_per_gpu is None:
        return None
    if s.gpu is None:
        return [e.missing("system.gpu", msg("reported.why_peak_tflops"))]
    peak = s.gpu.peak_tflops(s.training.precision)
    if peak is None:
        return [e.missing(msg("reported.peak_of_gpu", precision=s.training.precision, gpu=s.gpu.id))]
    if r.model_tflops_per_gpu > peak:
        return [
            e.error(
                msg(
                    "reported.throughput_exceeds_peak",
                    reported=r.model_tflops_per_gpu,
                    gpu=s.gpu.id,
                    precision=s.training.precision,
                    peak=peak,
                ),
                msg("reported.throughput_exceeds_peak.fix"),
                "reported.model_tflops_per_gpu",
            )
        ]


#: FP8 blockwise (Float8BlockScaling) scales blocks of 128 elements; a tensor whose rows do not fill whole
#: blocks cannot be all-gathered in FP8 and is gathered in BF16 then quantized (Transformer Engine
#: ``tensor/float8_blockwise_tensor.py`` ``is_quantizable``, ``distributed.py`` ``_all_gather_fp8_blockwise``)
FP8_BLOCK_LEN = 128


def _packed_padding_need(s, unit: int) -> tuple[int, int]:
    """(multiple every packed microbatch must be, per-rank divisor): ``unit`` tokens per rank times
    CP (× TP with SP), and 2·CP when CP > 1 (THD load balancing splits each sequence into 2·CP chunks)."""
    div = s.cp * (s.tp if s.sp and s.tp > 1 else 1)
    need = unit * div
    if s.cp > 1:
        need = math.lcm(need, 2 * s.cp)
    return need, div


@rule(
    "precision.fp8_packed_padding",
    "Megatron Bridge data/packing/gpt_sft.py collate_fn and packing/config.py (pad_seq_to_mult, default 1); "
    "megatron-core fp8_utils.get_fp8_align_size; Transformer Engine utils.assert_dim_for_fp8_exec",
    "with FP8/FP4 and packed sequences not padded to max length, pad_seq_to_mult must make every packed "
    "microbatch a multiple of 16 (32 for MXFP8/NVFP4) tokens per rank; blockwise gathers in FP8 only "
    "at multiples of 128",
)
def _packed_padding(s, e):
    t = s.training
    p = t.precision
    if p not in FP8_TOKEN_ALIGNMENT or not t.packed_sequences or t.pad_to_max_length:
        return None
    unit = FP8_TOKEN_ALIGNMENT[p]
    need, div = _packed_padding_need(s, unit)
    m = t.pad_seq_to_mult or 1
    stated = "pad_seq_to_mult" in t.model_fields_set
    where = _rank_split(s, div)
    out = []
    if m % need:
        out.append(
            e.error(
                msg(
                    "precision.packed_padding_unaligned",
                    mult=m,
                    unset="" if stated else msg("precision.pad_seq_to_mult_unset"),
                    unit=unit,
                    split=where,
                    precision=p,
                ),
                msg("precision.packed_padding_unaligned.fix", mult=need),
                "training.pad_seq_to_mult",
                "training.precision",
            )
        )
    elif p == "fp8-blockwise" and s.sp and s.tp > 1 and m % (FP8_BLOCK_LEN * div):
        out.append(
            e.warning(
                msg("precision.blockwise_gather_in_bf16", mult=m, block=FP8_BLOCK_LEN, split=where),
                msg("precision.blockwise_gather_in_bf16.fix", mult=math.lcm(need, FP8_BLOCK_LEN * div)),
                "training.pad_seq_to_mult",
            )
        )
    return out


#: the first Megatron-LM whose ``validate_args`` refuses TE cross-entropy loss fusion (PR 5115)
TE_CE_FUSION_REFUSED_MCORE = Version("0.19.0")


@rule(
    "loss.te_cross_entropy_fusion",
    "[ARGS] arguments.py validate_args (Megatron-LM ≥ 0.19, PR 5115); [MPC] model_parallel_config.py "
    "__post_init__ (warning, ≥ 0.18)",
    "cross_entropy_loss_fusion with cross_entropy_fusion_impl 'te' is refused by Megatron-LM ≥ 0.19 and "
    "warned about (known stability issues) by megatron-core",
)
def _te_ce(s, e):
    lay = s.layout
    if lay.cross_entropy_loss_fusion is not True or lay.cross_entropy_fusion_impl != "te":
        return None
    ver = str(s.mcore_version)
    fix = msg("loss.te_cross_entropy_fusion.fix")
    if s.framework == "megatron-core" and s.mcore_version >= TE_CE_FUSION_REFUSED_MCORE:
        return [
            e.error(
                msg("loss.te_cross_entropy_fusion_refused", version=ver),
                fix,
                "cross_entropy_fusion_impl",
                "cross_entropy_loss_fusion",
                edits={"cross_entropy_fusion_impl": "native"},
            )
        ]
    return [
        e.warning(
            msg("loss.te_cross_entropy_fusion_unstable"),
            fix,
            "cross_entropy_fusion_impl",
        )
    ]
