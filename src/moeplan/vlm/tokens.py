"""Image tokens of Qwen-VL dynamic resolution.

``smart_resize`` follows the Qwen2-VL / Qwen3-VL image processors (transformers
``image_processing_qwen2_vl.smart_resize``): each side is rounded to a multiple of
``factor = patch_size · merge_size``; if the area exceeds ``max_pixels`` both sides shrink by
``sqrt(h·w / max_pixels)`` (floored to the factor), if it is below ``min_pixels`` they grow by
``sqrt(min_pixels / (h·w))`` (ceiled). The ViT then sees ``(h/patch)·(w/patch)`` patches per frame
(a still image is one temporal patch) and the language model ``patches / merge²`` image tokens.

Defaults are Qwen3-VL's released ``preprocessor_config.json``: patch 16, merge 2, temporal patch 2,
``shortest_edge`` (min_pixels) 65 536, ``longest_edge`` (max_pixels) 16 777 216.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from moeplan.errors import InputError

QWEN3_VL_MIN_PIXELS = 65536
QWEN3_VL_MAX_PIXELS = 16777216
MAX_ASPECT_RATIO = 200  # the processors reject more extreme images


@dataclass(frozen=True)
class ImageGrid:
    """Resized height/width (pixels), ViT patches and language-model image tokens of one image."""

    height: int
    width: int
    patches: int
    tokens: int


def smart_resize(height: int, width: int, factor: int, min_pixels: int, max_pixels: int) -> tuple[int, int]:
    """Resized (height, width) in pixels, multiples of ``factor``.

    Raises:
        InputError: non-positive sizes, an aspect ratio over 200, or min_pixels > max_pixels.
    """
    if height <= 0 or width <= 0:
        raise InputError("image size", f"{width}x{height}", "positive width and height")
    if max(height, width) / min(height, width) > MAX_ASPECT_RATIO:
        raise InputError("image size", f"{width}x{height}", f"an aspect ratio ≤ {MAX_ASPECT_RATIO}")
    if min_pixels > max_pixels:
        raise InputError("--min-pixels", min_pixels, f"at most --max-pixels ({max_pixels})")
    h_bar = max(factor, round(height / factor) * factor)
    w_bar = max(factor, round(width / factor) * factor)
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt(height * width / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def image_grid(
    height: int,
    width: int,
    patch_size: int = 16,
    merge_size: int = 2,
    min_pixels: int = QWEN3_VL_MIN_PIXELS,
    max_pixels: int = QWEN3_VL_MAX_PIXELS,
) -> ImageGrid:
    """Patches and image tokens of one still image (see the module docstring)."""
    h, w = smart_resize(height, width, patch_size * merge_size, min_pixels, max_pixels)
    patches = (h // patch_size) * (w // patch_size)
    return ImageGrid(h, w, patches, patches // (merge_size * merge_size))
