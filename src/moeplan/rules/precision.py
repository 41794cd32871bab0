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
