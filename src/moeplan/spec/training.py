"""Training specification: sequence, batch, precision and data packing.

Units: ``seq_length`` and ``microbatch_seq_lengths`` in tokens; batch sizes in sequences.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveInt

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
    microbatch_seq_lengths: list[PositiveInt] | None = None
    freeze_vision_model: bool = False
    freeze_language_model: bool = False

    @property
    def is_fp8(self) -> bool:
        """True for any FP8 recipe (tensorwise, delayed, blockwise, MXFP8)."""
        return self.precision.startswith("fp8") or self.precision == "mxfp8"
