"""Training specification: sequence, batch, precision and data packing.

Units: ``seq_length`` and ``microbatch_seq_lengths`` in tokens; batch sizes in sequences.
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveInt

from moeplan.i18n.messages import Items, msg

#: tokens per optimizer step when neither a global batch size nor a token budget is given (4 Mi
#: tokens: the order of the published MoE pretraining batches); every command uses it
DEFAULT_TOKENS_PER_STEP = 4 * 1024 * 1024
#: how far (relative) a global batch may be from tokens-per-step / seq-length
BATCH_TOLERANCE = 0.1


def batch_for_tokens(tokens_per_step: int, seq: int) -> int:
    """Global batch size (sequences) for ``tokens_per_step`` tokens of ``seq``-token sequences: the
    exact quotient when it divides; otherwise, among batches within 10 % of the quotient, the one
    with the most factors of two (GBS must divide by MBS·DP, and DP sizes are powers of two in
    practice), closest on ties; the quotient rounded down (at least 1) when none is that close.
    E.g. 1,000,000 tokens at 131,072 → 8 rather than the prime 7. Raises nothing (positive ints)."""
    if tokens_per_step % seq == 0:
        return tokens_per_step // seq
    exact = tokens_per_step / seq
    lo, hi = max(1, math.floor(exact * (1 - BATCH_TOLERANCE))), math.ceil(exact * (1 + BATCH_TOLERANCE))
    near = [g for g in range(lo, hi + 1) if abs(g / exact - 1) <= BATCH_TOLERANCE]
    if not near:
        return max(1, tokens_per_step // seq)

    def twos(g: int) -> int:
        return (g & -g).bit_length()

    return max(near, key=lambda g: (twos(g), -abs(g - exact)))


def default_global_batch(seq: int, multiple: int = 1, num_gpus: int | None = None) -> tuple[int, str]:
    """The global batch (sequences) a command assumes when none is given, and the sentence that says so.

    About :data:`DEFAULT_TOKENS_PER_STEP` (4 Mi) tokens of ``seq``-token sequences, chosen so that it
    never breaks Megatron's rule that the global batch divides by micro-batch size × DP
    (``megatron/core/num_microbatches_calculator.py``): among the multiples of ``multiple`` (the
    layout's MBS·DP, 1 when no layout is known) within 10 % of the quotient, the one sharing the
    most factors with ``num_gpus`` (every DP size divides the GPU count, so other layouts divide it
    too), then with the most factors of two (micro-batch sizes), then the closest. When no multiple is
    that close: the nearest multiple, at least one. E.g. seq 12,288 on 64 GPUs → 320 (= 64·5, not
    the quotient 341); seq 4,096 on 64 GPUs → 1,024.

    Args:
        seq: tokens per sequence (positive).
        multiple: micro-batch size × data-parallel size of the layout; 1 when unknown (default).
        num_gpus: the GPU count; None when unknown (default).

    Returns:
        (global batch size, the sentence that names it as a default and how it was chosen).
    """
    exact = DEFAULT_TOKENS_PER_STEP / seq
    m = max(1, multiple)
    lo, hi = math.ceil(exact * (1 - BATCH_TOLERANCE) / m), math.floor(exact * (1 + BATCH_TOLERANCE) / m)
    near = [k * m for k in range(max(1, lo), hi + 1)]
    if near:
        gbs = max(near, key=lambda g: (math.gcd(g, num_gpus or 1), (g & -g).bit_length(), -abs(g - exact)))
    else:
        gbs = max(1, round(exact / m)) * m
    how = [msg("training.mi_tokens_per_step", mi=gbs * seq / 2**20)]
    if m > 1:
        how.append(msg("training.multiple_of_mbs_dp", m=m))
    if near and num_gpus and num_gpus % m == 0 and gbs % num_gpus == 0:
        how.append(msg("training.divisible_by_every_dp", gpus=num_gpus))
    return gbs, msg("training.default_gbs", gbs=gbs, how=Items(how, ", "))


def says_default_batch(notes: list[str]) -> bool:
    """True when one of a request's notes is :func:`default_global_batch`'s sentence (the global batch
    was chosen by the command, not given)."""
    return any(n.startswith("global_batch_size ") and " by default (" in n for n in notes)


Precision = Literal["bf16", "fp8-tensorwise", "fp8-delayed", "fp8-blockwise", "mxfp8", "nvfp4"]
PRECISIONS: tuple[str, ...] = ("bf16", "fp8-tensorwise", "fp8-delayed", "fp8-blockwise", "mxfp8", "nvfp4")


class TrainingSpec(BaseModel):
    """What is trained and how the data arrives.

    Attributes:
        seq_length: tokens per sequence (``model.seq_length`` = ``dataset.seq_length`` in Bridge).
        micro_batch_size / global_batch_size: sequences (``train.micro_batch_size`` / ``train.global_batch_size``).
        precision: ``bf16`` or an FP8/FP4 recipe (Bridge ``mixed_precision``: fp8-tensorwise = FP8-CS,
            fp8-delayed, fp8-blockwise = FP8 subchannel, mxfp8, nvfp4).
        task: ``pretrain`` or ``finetune`` (SFT/VLM datasets: Bridge pads and needs per-token loss with CP).
        packed_sequences: THD packing (several documents per microbatch, ``cu_seqlens``).
        variable_length: microbatch lengths vary from step to step (no padding to ``seq_length``).
        pad_to_max_length / pad_cu_seqlens: Bridge packed-data padding flags (needed by CUDA graphs).
        pad_seq_to_mult: Bridge ``dataset.offline_packing_specs.pad_seq_to_mult``: each packed sequence,
            and an unpadded packed microbatch, is padded to a multiple of it (Bridge default 1: no padding;
            ``data/packing/config.py``, ``data/packing/gpt_sft.py`` collate_fn).
        microbatch_seq_lengths: actual tokens of microbatches when they differ from ``seq_length``
            (e.g. an unpadded SFT sample, a packed length); each is checked by the alignment rules.
        freeze_vision_model / freeze_language_model: Megatron Bridge's VLM provider flags: a frozen
            part keeps no gradients or optimizer state and computes no weight gradients.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, allow_inf_nan=False)

    # 16 Mi tokens and 16 Mi sequences: far past any training run, and short of float overflow
    seq_length: int | None = Field(
        default=None,
        ge=1,
        le=2**24,
        description="Tokens per sequence (tokens). Source: Megatron-LM `--seq-length`, Megatron Bridge `model.seq_length` (= `dataset.seq_length`); unset: rules that need it report it missing; the other rules still run.",
    )
    micro_batch_size: int | None = Field(
        default=None,
        ge=1,
        le=2**24,
        description="Sequences per microbatch on one data-parallel rank (sequences). Source: Megatron-LM `--micro-batch-size`, Megatron Bridge `train.micro_batch_size`; unset: 1 for costing.",
    )
    global_batch_size: int | None = Field(
        default=None,
        ge=1,
        le=2**24,
        description="Sequences per optimizer step over all data-parallel ranks (sequences), a multiple of micro-batch size × DP. Source: Megatron-LM `--global-batch-size`, Megatron Bridge `train.global_batch_size`; unset: `estimate`, `plan` and `fit` choose about 4 Mi tokens per step and say so.",
    )
    precision: Precision = Field(
        default="bf16",
        description="Training precision: `bf16`, or an FP8 / FP4 recipe (`fp8-tensorwise` current scaling, `fp8-delayed`, `fp8-blockwise` subchannel scaling, `mxfp8`, `nvfp4`). Source: Megatron Bridge `mixed_precision` recipes (`bf16_mixed`, `bf16_with_fp8_current_scaling_mixed`, ...), megatron-core `TransformerConfig.fp8_recipe` / `fp4_recipe`; unset: bf16.",
    )
    task: Literal["pretrain", "finetune"] = Field(
        default="pretrain",
        description="`pretrain`, or `finetune` (SFT / VLM datasets, which Bridge pads and which need per-token loss with CP > 1). Source: Megatron Bridge's pretrain and finetune entry points; unset: pretrain.",
    )
    packed_sequences: bool = Field(
        default=False,
        description="THD packing: several documents per microbatch, delimited by `cu_seqlens` (megatron-core `PackedSeqParams`, `qkv_format` `thd`). Source: Megatron Bridge packed-sequence datasets (`PackedSequenceSpecs`); unset: false, one padded sequence per row (BSHD).",
    )
    variable_length: bool = Field(
        default=False,
        description="Microbatch lengths vary from step to step (not padded to `seq_length`), which CUDA graphs and some dispatchers cannot take. moeplan's own input (no Megatron key); unset: false.",
    )
    pad_to_max_length: bool | None = Field(
        default=None,
        description="Pads every microbatch of an SFT / packed dataset to `seq_length` (fixed shapes, as CUDA graphs need). Source: Megatron Bridge `GPTSFTDataset` `pad_to_max_length`; unset: false, Bridge's default.",
    )
    pad_cu_seqlens: bool | None = Field(
        default=None,
        description="Pads the `cu_seqlens` of packed data to a fixed length (attention CUDA graphs over packed data need it). Source: Megatron Bridge `PackedSequenceSpecs.pad_cu_seqlens` (`data/packing/config.py`); unset: not checked (only an explicit false breaks that rule).",
    )
    pad_seq_to_mult: int | None = Field(
        default=None,
        ge=1,
        le=2**20,
        description="Multiple (tokens) each packed sequence, and an unpadded packed microbatch, is padded to. Source: Megatron Bridge `PackedSequenceSpecs.pad_seq_to_mult` (`dataset.offline_packing_specs`); unset: 1, Bridge's default (no padding).",
    )
    microbatch_seq_lengths: list[PositiveInt] | None = Field(
        default=None,
        description="Actual tokens of microbatches when they differ from `seq_length` (an unpadded SFT sample, a packed length), each checked by the alignment rules (tokens). moeplan's own input (no Megatron key); unset: only `seq_length` is checked.",
    )
    freeze_vision_model: bool = Field(
        default=False,
        description="Freezes a VLM's vision encoder: it keeps no gradients or optimizer state and computes no weight gradients. Source: Megatron Bridge VLM provider field `freeze_vision_model`; unset: false, Bridge's default.",
    )
    freeze_language_model: bool = Field(
        default=False,
        description="Freezes a VLM's language model: it keeps no gradients or optimizer state and computes no weight gradients. Source: Megatron Bridge VLM provider field `freeze_language_model`; unset: false, Bridge's default.",
    )

    @property
    def is_fp8(self) -> bool:
        """True for any FP8 recipe (tensorwise, delayed, blockwise, MXFP8)."""
        return self.precision.startswith("fp8") or self.precision == "mxfp8"
