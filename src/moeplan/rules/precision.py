"""FP8 / MXFP8 / NVFP4 rules (``megatron_facts.md`` §3.10, §4.8; Transformer Engine alignment)."""

from __future__ import annotations

import math

from moeplan.rules.base import rule

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
        return [e.missing("system.gpu (precision support)")]
    g = s.gpu
    if p in ("mxfp8", "nvfp4") and not (g.supports_mxfp8 if p == "mxfp8" else g.supports_nvfp4):
        return [
            e.error(
                f"{p} needs a Blackwell GPU (compute capability ≥ 10.0); {g.id} does not support it",
                "use fp8-blockwise or fp8-tensorwise on Hopper, or bf16",
                "training.precision",
            )
        ]
    if p.startswith("fp8") and not g.supports_te_fp8:
        return [
            e.error(
                f"Transformer Engine FP8 ({p}) is not supported on {g.id} ({g.vendor} {g.arch})",
                "use bf16",
                "training.precision",
            )
        ]


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
            out.append(
                e.error(
                    f"{key} {n} gives {per_rank:g} tokens per rank (÷ CP {s.cp}"
                    f"{f' ÷ TP {s.tp} with SP' if div != s.cp else ''}), not a multiple of {unit} required by {p}",
                    f"pad to {math.ceil(n / need) * need} tokens (a multiple of {need})"
                    + ("; for packed THD data pad each sequence to a multiple of 32" if t.packed_sequences else ""),
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
                    f"fp8_param_gather needs an FP8 recipe (precision is {p})",
                    "set an FP8 precision or turn fp8_param_gather off",
                    "fp8_param_gather",
                )
            )
        if not lay.use_distributed_optimizer and not lay.use_megatron_fsdp:
            out.append(
                e.error(
                    "fp8_param_gather needs the distributed optimizer or Megatron-FSDP",
                    "set use_distributed_optimizer: true",
                    "fp8_param_gather",
                )
            )
    if lay.first_last_layers_bf16:
        if p == "fp8-delayed":
            out.append(
                e.error(
                    "delayed scaling does not support BF16 first/last layers",
                    "use fp8-tensorwise",
                    "first_last_layers_bf16",
                )
            )
        if s.model is not None and s.model.num_layers:
            lim = s.model.num_layers // s.pp
            for key in ("num_layers_at_start_in_bf16", "num_layers_at_end_in_bf16"):
                v = getattr(lay, key)
                if v is not None and v > lim:
                    out.append(e.error(f"{key} ({v}) must be ≤ L/PP = {lim}", f"use at most {lim}", key))
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
        return [e.missing("system.gpu (peak TFLOP/s)")]
    peak = s.gpu.peak_tflops(s.training.precision)
    if peak is None:
        return [e.missing(f"the {s.training.precision} peak of {s.gpu.id}")]
    if r.model_tflops_per_gpu > peak:
        return [
            e.error(
                f"reported {r.model_tflops_per_gpu:g} TFLOP/s/GPU exceeds the {s.gpu.id} dense "
                f"{s.training.precision} peak of {peak:g} TFLOP/s: the run is not doing the modelled work "
                "(e.g. CP silently off, wrong FLOP count)",
                "check the run's config (cp_comm_type, hierarchical CP sizes) and the FLOP formula",
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
    where = f"÷ CP {s.cp}" + (f" ÷ TP {s.tp} with SP" if div != s.cp else "")
    out = []
    if m % need:
        out.append(
            e.error(
                f"packed microbatches are padded only to a multiple of {m} tokens (pad_seq_to_mult"
                f"{'' if stated else ' unset: Bridge default 1'}), so a packed microbatch need not give a multiple "
                f"of {unit} tokens per rank ({where}) as {p} GEMMs require: Transformer Engine raises 'FP8 execution "
                "requires the product of all dimensions except the last to be divisible by …' on an unlucky batch",
                f"set training.pad_seq_to_mult: {need} (dataset.offline_packing_specs.pad_seq_to_mult), or "
                "pad_to_max_length: true",
                "training.pad_seq_to_mult",
                "training.precision",
            )
        )
    elif p == "fp8-blockwise" and s.sp and s.tp > 1 and m % (FP8_BLOCK_LEN * div):
        out.append(
            e.warning(
                f"fp8-blockwise with SP: a packed microbatch padded to a multiple of {m} need not give whole "
                f"{FP8_BLOCK_LEN}-token blocks per rank ({where}); Transformer Engine then all-gathers the "
                "sequence-parallel input in BF16 and quantizes after ('Cannot quantize input tensor')",
                f"set training.pad_seq_to_mult: {math.lcm(need, FP8_BLOCK_LEN * div)} to gather in FP8",
                "training.pad_seq_to_mult",
            )
        )
    return out


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
    ver = ".".join(map(str, s.mcore_version))
    fix = "set cross_entropy_fusion_impl: native (or drop cross_entropy_loss_fusion)"
    if s.framework == "megatron-core" and s.mcore_version >= (0, 19, 0):
        return [
            e.error(
                f"Megatron-LM {ver} refuses --cross-entropy-loss-fusion with --cross-entropy-fusion-impl te "
                "('Transformer Engine cross entropy loss fusion is disabled due to stability issues')",
                fix,
                "cross_entropy_fusion_impl",
                "cross_entropy_loss_fusion",
            )
        ]
    return [
        e.warning(
            "Transformer Engine's fused cross entropy (cross_entropy_fusion_impl: te) has known stability issues; "
            "megatron-core warns and Megatron-LM ≥ 0.19 refuses it",
            fix,
            "cross_entropy_fusion_impl",
        )
    ]
