"""``moeplan vlm-stats``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from moeplan.api.vlm import vlm_stats_report
from moeplan.cli import render
from moeplan.cli.options import JsonOpt, ModelOpt, exit_with, input_errors
from moeplan.cli.render import vlm_view as tables


def vlm_stats_cmd(
    data: Annotated[Path, typer.Argument(help="A folder of images, or a JSONL / Parquet manifest.")],
    seq_length: Annotated[int, typer.Option("--seq-length", "-s", min=1, help="Training sequence length (tokens).")],
    model: ModelOpt = None,
    packing: Annotated[str, typer.Option("--packing", help="none (one sample per sequence) or greedy.")] = "none",
    text_tokens: Annotated[
        int, typer.Option("--text-tokens", min=0, help="Text tokens per sample when the data does not say.")
    ] = 0,
    patch_size: Annotated[Optional[int], typer.Option("--patch-size", min=1, help="Default: the model's ViT.")] = None,
    merge_size: Annotated[Optional[int], typer.Option("--merge-size", min=1, help="Default: the model's ViT.")] = None,
    min_pixels: Annotated[int, typer.Option("--min-pixels", min=1, help="Processor shortest_edge.")] = 65536,
    max_pixels: Annotated[int, typer.Option("--max-pixels", min=1, help="Processor longest_edge.")] = 16777216,
    output: Annotated[
        Optional[Path], typer.Option("--output", "-o", help="Write the workload YAML (for a scenario's workload:).")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Image tokens per sample of a real dataset (Qwen-VL dynamic resolution from image headers),
    text and total tokens, padding waste for a sequence length and packing, and the workload that
    `estimate` / `plan` take to report useful tokens/s. Bad files are reported and skipped."""
    with input_errors(), render.progress_bar("reading image headers") as tick:
        out = vlm_stats_report(
            data,
            seq_length,
            model,
            packing,
            text_tokens,
            patch_size,
            merge_size,
            min_pixels,
            max_pixels,
            output,
            progress=tick,
        )
    if as_json:
        render.print_json(out)
    else:
        tables.render_vlm_stats(out)
    exit_with(True)


__all__ = ["vlm_stats_cmd"]
