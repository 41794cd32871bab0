"""Training specification: sequence, batch, precision and data packing.

Units: ``seq_length`` and ``microbatch_seq_lengths`` in tokens; batch sizes in sequences.
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveInt

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


def default_global_batch(seq: int) -> tuple[int, str]:
    """The global batch a command assumes when none is given: about :data:`DEFAULT_TOKENS_PER_STEP`
    tokens of ``seq``-token sequences, and the sentence that says so."""
    gbs = max(1, DEFAULT_TOKENS_PER_STEP // seq)
    return gbs, (
        f"global_batch_size {gbs} (≈ {DEFAULT_TOKENS_PER_STEP / 2**20:.0f} Mi tokens per step; set --gbs or "
        "--tokens-per-step)"
    )


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
    seq_length: int | None = Field(default=None, ge=1, le=2**24)
    micro_batch_size: int | None = Field(default=None, ge=1, le=2**24)
    global_batch_size: int | None = Field(default=None, ge=1, le=2**24)
    precision: Precision = "bf16"
    task: Literal["pretrain", "finetune"] = "pretrain"
    packed_sequences: bool = False
    variable_length: bool = False
    pad_to_max_length: bool | None = None
    pad_cu_seqlens: bool | None = None
    pad_seq_to_mult: int | None = Field(default=None, ge=1, le=2**20)
    microbatch_seq_lengths: list[PositiveInt] | None = None
    freeze_vision_model: bool = False
    freeze_language_model: bool = False

    @property
    def is_fp8(self) -> bool:
        """True for any FP8 recipe (tensorwise, delayed, blockwise, MXFP8)."""
        return self.precision.startswith("fp8") or self.precision == "mxfp8"
