"""Report of ``vlm-stats``: image and text tokens per sample of a real dataset and the workload that
``estimate`` / ``plan`` take to report useful tokens/s."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from moeplan.catalog import get_model
from moeplan.errors import InputError
from moeplan.inputs.loading import dump_yaml
from moeplan.io.write import check_writable, write_atomically
from moeplan.vlm.stats import scan, summarize

#: processor defaults when neither the flags nor a model give them (Qwen-VL)
DEFAULT_PATCH_SIZE, DEFAULT_MERGE_SIZE = 16, 2


def vision_processor(model: str | None, patch_size: int | None, merge_size: int | None) -> tuple[int, int]:
    """(patch size, spatial merge size): as given, else the model's ViT, else the Qwen-VL defaults.

    Raises:
        InputError: an unknown model or one without a vision tower.
    """
    p, mg = patch_size, merge_size
    if model is not None:
        v = get_model(model).vision
        if v is None:
            raise InputError("--model", model, "a vision-language model (see `moeplan models`)")
        p = p or v.patch_size
        mg = mg or max(1, v.spatial_merge_size)
    return p or DEFAULT_PATCH_SIZE, mg or DEFAULT_MERGE_SIZE


def vlm_stats_report(
    data: Path,
    seq_length: int,
    model: str | None = None,
    packing: str = "none",
    text_tokens: int = 0,
    patch_size: int | None = None,
    merge_size: int | None = None,
    min_pixels: int = 65536,
    max_pixels: int = 16777216,
    output: Path | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> dict:
    """Image tokens per sample (Qwen-VL dynamic resolution from the image headers), text and total
    tokens, padding waste for a sequence length and packing, and the workload per sequence.

    Args:
        data: a folder of images, or a JSONL / Parquet manifest.
        seq_length: training sequence length (tokens); packing: ``none`` or ``greedy``.
        model: take patch / merge size from this VLM's ViT; text_tokens: text tokens per sample when
            the data does not say; min_pixels / max_pixels: the processor's bounds (pixels).
        output: also write ``{"workload": ...}`` as YAML here (for a scenario's ``workload:``).
        progress: ``progress(done, total)`` while reading image headers.

    Returns:
        :func:`moeplan.vlm.stats.summarize`'s document (samples, images, unreadable, bad_files,
        processor, per-sample distributions mean / p50 / p90 / max, sequences, padding_fraction,
        truncated_tokens, workload) plus ``written`` (the path) with ``output``.

    Raises:
        InputError: min_pixels > max_pixels, a model without vision, a missing path or an unreadable
            manifest, an unknown packing, an unwritable output. Bad image files are reported, not raised.
    """

    if min_pixels > max_pixels:
        raise InputError("--min-pixels", min_pixels, f"at most --max-pixels ({max_pixels})")
    if output is not None:  # before the scan: never onto the manifest, nor onto a file of the folder scanned
        target = check_writable(output, inputs=(data,))
        if data.is_dir() and target.exists() and target.is_relative_to(data.resolve()):
            raise InputError(
                "--output", str(output), f"a path other than the files of {data} (it would be overwritten)"
            )
    p, mg = vision_processor(model, patch_size, merge_size)
    sc = scan(data, text_tokens, progress=progress)
    out = summarize(sc, seq_length, packing, p, mg, min_pixels, max_pixels)
    if output is not None:
        write_atomically(output, dump_yaml({"workload": out["workload"]}), inputs=(data,))
        out["written"] = str(output)
    return out


__all__ = ["vlm_stats_report"]
