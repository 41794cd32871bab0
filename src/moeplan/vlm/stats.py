"""``moeplan vlm-stats``: image-token statistics of a real dataset, and the workload it implies.

Inputs: a folder of images (one image per sample; headers only are read, with Pillow), or a JSONL /
Parquet manifest, one sample per row with ``images`` (paths, relative to the manifest) or ``image``
(one path) or ``image_sizes`` ([[width, height], ...]) or ``width``/``height``, and optionally
``text_tokens`` (else ``--text-tokens``). Unreadable, truncated, zero-size or non-image files are
reported and skipped.

Outputs: per-sample image tokens, text tokens and total length (mean, percentiles, max), the ViT
patches, and for a sequence length and packing choice the padding waste and the useful fraction of
sequence tokens; the ``workload`` mapping a scenario takes (``image_patches_per_sequence``,
``image_tokens_per_sequence``, ``useful_fraction``, ...).
"""

from __future__ import annotations

import io
import statistics
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from moeplan.errors import InputError, missing_extra, short_repr
from moeplan.inputs.loading import load_json_text
from moeplan.inputs.policy import open_regular
from moeplan.vlm.tokens import image_grid

IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".webp", ".bmp", ".gif", ".tif", ".tiff"}
PACKING = ("none", "greedy")


@dataclass
class Sample:
    image_sizes: list[tuple[int, int]]  # (width, height)
    text_tokens: int


@dataclass
class Scan:
    samples: list[Sample] = field(default_factory=list)
    bad: list[dict] = field(default_factory=list)


class BadImage(ValueError):
    """A file that cannot be used as an image (the message says why)."""


def image_size(path: Path) -> tuple[int, int]:
    """(width, height) from the image header (Pillow; the pixels are not decoded). A JPEG must also
    end with its end-of-image marker (a cheap truncation check; other formats are checked by
    Pillow's ``verify``).

    Raises:
        InputError: Pillow is not installed.
        BadImage: a missing, empty, truncated or non-image file.
    """
    try:
        from PIL import Image
    except ImportError:
        raise missing_extra("vlm-stats", "Pillow (to read image headers)", "vlm") from None
    try:
        if path.stat().st_size == 0:
            raise BadImage("empty file (0 bytes)")
        Image.MAX_IMAGE_PIXELS = None  # headers only: no decompression bomb to guard against
        with Image.open(path) as im:
            w, h = im.size
            fmt = im.format
            im.verify()  # checks the structure without decoding pixels
        if fmt == "JPEG":
            with path.open("rb") as fh:
                fh.seek(max(0, path.stat().st_size - 64))
                if b"\xff\xd9" not in fh.read():
                    raise BadImage("truncated JPEG (no end-of-image marker)")
    except BadImage:
        raise
    except Exception as exc:  # noqa: BLE001 - any reader failure means the file is not a usable image
        raise BadImage(f"not readable as an image ({type(exc).__name__}: {exc})") from None
    if w <= 0 or h <= 0:
        raise BadImage(f"non-positive size {w}x{h}")
    return w, h


#: the largest image side a manifest may state (pixels): far beyond any training image
MAX_IMAGE_SIDE = 2**24


def _int_size(v) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or not 0 < v <= MAX_IMAGE_SIDE:
        raise BadImage(f"sizes must be positive integers up to {MAX_IMAGE_SIDE} (got {short_repr(v)})")
    return v


def _rows(path: Path) -> Iterator[tuple[int, dict | None, str | None]]:
    if path.suffix.lower() == ".parquet":
        try:
            import pyarrow.parquet as pq
        except ImportError:
            raise InputError(
                "DATA", str(path), "pyarrow installed to read Parquet (pip install pyarrow), or JSONL"
            ) from None
        try:
            table = pq.read_table(path)
        except Exception as exc:  # noqa: BLE001 - any reader failure is a bad input file
            raise InputError("DATA", str(path), f"a readable Parquet file ({type(exc).__name__})") from None
        for i, row in enumerate(table.to_pylist(), start=1):
            yield i, row, None
        return
    try:
        with open_regular(path, "DATA") as raw, io.TextIOWrapper(raw, encoding="utf-8-sig") as fh:
            yield from _jsonl_rows(fh, path)
    except UnicodeDecodeError:
        raise InputError("DATA", str(path), "a UTF-8 JSONL manifest (or .parquet, or a folder of images)") from None


#: the longest manifest row read (a longer one is reported as a bad row)
MAX_ROW_CHARS = 2**20


def _jsonl_rows(fh, path: Path) -> Iterator[tuple[int, dict | None, str | None]]:
    """(line number, row, why not) of each non-blank line of a JSONL manifest, each read as strict
    JSON under the input policy (bounded length and nesting, finite numbers, no duplicate keys)."""
    i = 0
    while True:
        line = fh.readline(MAX_ROW_CHARS)
        if not line:
            return
        i += 1
        if len(line) >= MAX_ROW_CHARS and not line.endswith("\n"):
            while line and not line.endswith("\n"):
                line = fh.readline(MAX_ROW_CHARS)
            yield i, None, f"a row longer than {MAX_ROW_CHARS} characters"
            continue
        if not line.strip():
            continue
        try:
            row = load_json_text(line, "DATA", f"{path}:{i}")
        except InputError as exc:
            yield i, None, f"not JSON ({exc.allowed})"
            continue
        yield i, row if isinstance(row, dict) else None, None if isinstance(row, dict) else "not an object"


def _scan_folder(folder: Path, text_tokens: int, progress: Callable[[int, int], None] | None) -> Scan:
    """One sample per image file of ``folder`` (searched recursively, in path order), each with
    ``text_tokens`` text tokens; files without an image extension and unreadable images are listed
    in ``bad``. ``progress(done, total)`` is called every 256 images and at the end.

    Raises:
        InputError: the folder holds no image file.
    """
    out = Scan()
    everything = sorted(p for p in folder.rglob("*") if p.is_file())
    files = [p for p in everything if p.suffix.lower() in IMAGE_SUFFIXES]
    if not files:
        raise InputError("DATA", str(folder), f"a folder with image files ({', '.join(sorted(IMAGE_SUFFIXES))})")
    for p in everything:
        if p.suffix.lower() not in IMAGE_SUFFIXES:
            out.bad.append({"file": str(p), "reason": "not an image file (by its extension): ignored"})
    for i, p in enumerate(files):
        if progress and i % 256 == 0:
            progress(i, len(files))
        try:
            out.samples.append(Sample([image_size(p)], text_tokens))
        except BadImage as exc:
            out.bad.append({"file": str(p), "reason": str(exc)})
    if progress:
        progress(len(files), len(files))
    return out


def _image_paths(row: dict) -> list[str]:
    """The image paths of a manifest row: ``images`` (a path or a list of paths) or ``image``.

    Raises:
        BadImage: not a path or a list of path strings.
    """
    paths = row["images"] if "images" in row else [row["image"]]
    if isinstance(paths, str):
        paths = [paths]
    if not isinstance(paths, list) or not all(isinstance(x, str) for x in paths):
        raise BadImage("images must be a path or a list of paths (strings)")
    return paths


def _row_sizes(row: dict, base: Path, bad: list[dict]) -> list[tuple[int, int]]:
    """The (width, height) in pixels of each image of one manifest row, from ``image_sizes``, else
    ``width``/``height``, else the files named by ``images``/``image`` (relative to ``base``, the
    manifest's folder; each unreadable one is appended to ``bad``). A text-only row (``text_tokens``,
    no image field) has none.

    Raises:
        BadImage: malformed size fields, no image field and no text_tokens, or an unreadable image
            (the whole sample is skipped).
    """
    if "image_sizes" in row:
        pairs = row["image_sizes"]
        if not isinstance(pairs, list) or not all(isinstance(x, list) and len(x) == 2 for x in pairs):
            raise BadImage("image_sizes must be a list of [width, height] pairs")
        return [(_int_size(w), _int_size(h)) for w, h in pairs]
    if "width" in row or "height" in row:
        if "width" not in row or "height" not in row:
            raise BadImage("width and height must be given together")
        return [(_int_size(row["width"]), _int_size(row["height"]))]
    if "images" in row or "image" in row:
        paths = _image_paths(row)
        sizes, unreadable = [], []
        for p in paths:
            try:
                sizes.append(image_size(base / p))
            except BadImage as exc:
                bad.append({"file": str(base / p), "reason": str(exc)})
                unreadable.append(p)
        if unreadable:
            # a sample missing one of its images is not the sample the data loader sees: drop it
            # whole rather than count it with fewer images (a data loader would fail or skip it)
            raise BadImage(f"sample skipped: {len(unreadable)} of its {len(paths)} image(s) unreadable")
        return sizes
    if "text_tokens" not in row:
        raise BadImage("no image fields (images, image, image_sizes, width/height) and no text_tokens")
    return []


def _scan_manifest(manifest: Path, text_tokens: int, progress: Callable[[int, int], None] | None) -> Scan:
    """One sample per row of a JSONL / Parquet manifest: its image sizes (:func:`_row_sizes`) and its
    ``text_tokens`` (default ``text_tokens``); rows that are not objects, have unusable image fields
    or a text_tokens outside 0–1e9 are listed in ``bad`` as ``manifest:line``. ``progress(done, total)``
    is called every 256 rows and at the end.

    Raises:
        InputError: an unreadable manifest (see :func:`_rows`).
    """
    out = Scan()
    base = manifest.parent
    rows = list(_rows(manifest))
    for n, (line, row, err) in enumerate(rows):
        if progress and n % 256 == 0:
            progress(n, len(rows))
        if row is None:
            out.bad.append({"file": f"{manifest}:{line}", "reason": err or "not an object"})
            continue
        try:
            sizes = _row_sizes(row, base, out.bad)
        except BadImage as exc:
            out.bad.append({"file": f"{manifest}:{line}", "reason": str(exc)})
            continue
        tt = row.get("text_tokens", text_tokens)
        if not isinstance(tt, int) or isinstance(tt, bool) or not 0 <= tt <= 10**9:
            out.bad.append({"file": f"{manifest}:{line}", "reason": "text_tokens must be an integer 0–1e9"})
            continue
        out.samples.append(Sample(sizes, tt))
    if progress:
        progress(len(rows), len(rows))
    return out


def scan(
    data: Path,
    text_tokens: int = 0,
    progress: Callable[[int, int], None] | None = None,
) -> Scan:
    """Read image sizes of every sample of a folder (:func:`_scan_folder`) or a JSONL / Parquet
    manifest (:func:`_scan_manifest`).

    Raises:
        InputError: a missing path or an unreadable manifest.
    """
    data = Path(data)
    if data.is_dir():
        return _scan_folder(data, text_tokens, progress)
    if not data.is_file():
        raise InputError("DATA", str(data), "an existing folder of images or a JSONL / Parquet manifest")
    return _scan_manifest(data, text_tokens, progress)


def _dist(vals: Sequence[float]) -> dict:
    if not vals:
        return {"mean": 0.0, "p50": 0.0, "p90": 0.0, "max": 0.0}
    qs = statistics.quantiles(vals, n=10, method="inclusive") if len(vals) > 1 else [vals[0]] * 9
    return {"mean": statistics.fmean(vals), "p50": statistics.median(vals), "p90": qs[8], "max": max(vals)}


@dataclass
class _Tokens:
    """Per-sample counts of the samples whose images resize, aligned by index: language-model image
    tokens, ViT patches, text tokens and their total (tokens); ``images``: images over all of them."""

    samples: list[Sample] = field(default_factory=list)
    image_tokens: list[int] = field(default_factory=list)
    patches: list[int] = field(default_factory=list)
    text: list[int] = field(default_factory=list)
    total: list[int] = field(default_factory=list)
    images: int = 0


def _count_tokens(sc: Scan, patch_size: int, merge_size: int, min_pixels: int, max_pixels: int) -> _Tokens:
    """Image tokens and patches of each sample of ``sc`` under the Qwen-VL processor settings
    (:func:`moeplan.vlm.tokens.image_grid`); a sample with an image the processor rejects is appended
    to ``sc.bad`` and left out."""
    tok = _Tokens()
    for s in sc.samples:
        try:
            grids = [image_grid(h, w, patch_size, merge_size, min_pixels, max_pixels) for w, h in s.image_sizes]
        except InputError as exc:
            sc.bad.append(
                {"file": f"sample with image sizes {s.image_sizes[:3]}", "reason": f"{exc.value}: {exc.allowed}"}
            )
            continue
        tok.samples.append(s)
        t = sum(g.tokens for g in grids)
        tok.image_tokens.append(t)
        tok.patches.append(sum(g.patches for g in grids))
        tok.text.append(s.text_tokens)
        tok.total.append(t + s.text_tokens)
        tok.images += len(grids)
    return tok


def _no_samples(sc: Scan) -> InputError:
    """The error for a scan without a usable sample, naming up to three unreadable ones."""
    if not sc.bad:
        return InputError("DATA", None, "at least one sample (the manifest or folder is empty)")
    why = "; ".join(f"{b['file']}: {b['reason']}" for b in sc.bad[:3])
    return InputError("DATA", None, f"at least one readable sample ({len(sc.bad)} unreadable: {why})")


def _sequences(kept: list[int], seq_length: int, packing: str) -> int:
    """Sequences of ``seq_length`` tokens that samples of ``kept`` tokens each (already cut to
    ``seq_length``) fill: one per sample with ``none``; with ``greedy``, in order, a sample that does
    not fit in the current sequence starting a new one."""
    if packing == "none":
        return len(kept)
    n_seq, fill = 0, seq_length
    for x in kept:
        if fill + x > seq_length:
            n_seq += 1
            fill = 0
        fill += x
    return n_seq


def _workload(tok: _Tokens, kept: list[int], n_seq: int, seq_length: int, packing: str) -> dict:
    """The ``workload`` mapping a scenario takes, per sequence of ``seq_length`` tokens: ViT patches
    (every patch of a truncated sample's images is still encoded), image tokens (only the kept share
    of a truncated sample), images, the useful (non-padding) fraction and the mean patches per image.
    ``kept``: each sample's tokens cut to ``seq_length``; ``n_seq``: the sequences they fill."""
    useful = sum(kept) / (n_seq * seq_length)
    kept_share = [k / t if t else 1.0 for k, t in zip(kept, tok.total, strict=True)]
    return {
        "image_patches_per_sequence": sum(tok.patches) / n_seq,
        "image_tokens_per_sequence": sum(i * f for i, f in zip(tok.image_tokens, kept_share, strict=True)) / n_seq,
        "images_per_sequence": tok.images / n_seq,
        "useful_fraction": useful,
        "mean_patches_per_image": sum(tok.patches) / max(1, tok.images),
        "seq_length": seq_length,
        "source": f"vlm-stats: {len(tok.samples)} samples, seq {seq_length}, packing {packing}",
    }


def summarize(
    sc: Scan,
    seq_length: int,
    packing: str = "none",
    patch_size: int = 16,
    merge_size: int = 2,
    min_pixels: int = 65536,
    max_pixels: int = 16777216,
) -> dict:
    """Token statistics and the workload for ``seq_length`` and ``packing``.

    ``none``: one sample per sequence, padded to ``seq_length``; longer samples are truncated (their
    excess counted as ``truncated_tokens``). ``greedy``: samples packed in order into sequences of
    ``seq_length`` (a sample that does not fit starts a new sequence; one longer than a sequence is
    truncated). Useful fraction = non-padding tokens / sequence tokens.

    Raises:
        InputError: unknown packing, a non-positive seq_length, or no readable sample.
    """
    if packing not in PACKING:
        raise InputError("--packing", packing, " or ".join(PACKING))
    if seq_length < 1:
        raise InputError("--seq-length", seq_length, "a positive integer")
    if not sc.samples:
        raise _no_samples(sc)
    tok = _count_tokens(sc, patch_size, merge_size, min_pixels, max_pixels)
    if not tok.samples:
        raise _no_samples(sc)
    kept = [min(x, seq_length) for x in tok.total]
    n_seq = _sequences(kept, seq_length, packing)
    workload = _workload(tok, kept, n_seq, seq_length, packing)
    return {
        "samples": len(tok.samples),
        "images": tok.images,
        "unreadable": len(sc.bad),
        "bad_files": sc.bad[:50],
        "image_tokens_per_sample": _dist(tok.image_tokens),
        "vit_patches_per_sample": _dist(tok.patches),
        "text_tokens_per_sample": _dist(tok.text),
        "tokens_per_sample": _dist(tok.total),
        "seq_length": seq_length,
        "packing": packing,
        "sequences": n_seq,
        "truncated_tokens": sum(max(0, x - seq_length) for x in tok.total),
        "padding_fraction": 1 - workload["useful_fraction"],
        "processor": {
            "patch_size": patch_size,
            "merge_size": merge_size,
            "min_pixels": min_pixels,
            "max_pixels": max_pixels,
        },
        "workload": workload,
    }
