"""Built-in model catalog: every Hugging Face ``config.json`` shipped in ``catalog/data/models``.

Models are addressed by HF id (``deepseek-ai/DeepSeek-V3``), by the file stem
(``deepseek-ai__DeepSeek-V3``), by the part after the slash (``DeepSeek-V3``) or by a unique
case-insensitive prefix of it (``qwen3-vl-30b``); a path to any ``config.json`` also works.
Files are read lazily on first use and cached.
"""

from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from moeplan.errors import InputError, UnknownNameError
from moeplan.inputs.loading import load_json_file
from moeplan.inputs.model_spec import ModelSpec, check_model_consistency, check_model_ranges, model_from_hf_config


@dataclass(frozen=True)
class CountingConvention:
    """How a publisher counts its headline figures, so ours can be compared like for like.

    ``active_includes_input_embedding``: DeepSeek (README_WEIGHTS: 36.6B activated incl. the 0.9B
    output head, without the embedding) and OpenAI (gpt-oss model card) leave the input embedding
    out of "active"; Qwen, Mistral and Meta count every parameter a token touches.
    ``active_includes_output_layer``: False where "active" leaves out both vocabulary tables.
    ``total_includes_vision``: whether the published total counts the vision tower.
    ``measured_includes_mtp_layers``: MTP layers present in a measured checkpoint sum but not
    declared in config.json (Qwen3-Next).
    ``total_includes_mtp``: the published total counts the MTP layers (a checkpoint's size, as the
    Hugging Face page of DeepSeek-V3.2 gives it).
    """

    active_includes_input_embedding: bool = True
    total_includes_vision: bool = True
    active_includes_output_layer: bool = True
    measured_includes_mtp_layers: int | None = None
    total_includes_mtp: bool = False
    note: str = ""


COUNTING_CONVENTIONS: dict[str, CountingConvention] = {
    "deepseek-ai/DeepSeek-V3": CountingConvention(False, note="671B/37B exclude the MTP module (+11.5B)"),
    "deepseek-ai/DeepSeek-R1": CountingConvention(False, note="same as DeepSeek-V3"),
    "deepseek-ai/DeepSeek-V3.2": CountingConvention(
        False,
        total_includes_mtp=True,
        note="685B is the checkpoint: the MTP layer with its own copies of the embedding and output head "
        "(2 x 0.93B, not counted here)",
    ),
    "deepseek-ai/DeepSeek-V2-Lite": CountingConvention(False),
    "deepseek-ai/DeepSeek-V4-Flash": CountingConvention(
        False, note="284B / 13B exclude the MTP layer (+6.61B), as DeepSeek-V3's figures do"
    ),
    "deepseek-ai/DeepSeek-V4-Pro": CountingConvention(
        False,
        note="1.6T has two significant figures: 1.573T without the MTP layer (counted here, as for DeepSeek-V3), "
        "1.599T with it (+25.84B); 49B activated leaves out the input embedding",
    ),
    "nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-FP8": CountingConvention(
        False,
        total_includes_mtp=True,
        note="the total is the checkpoint's element count, with the MTP block (+2.94B; the headline 120B "
        "leaves it out); 12B active leaves out the input embedding",
    ),
    "nvidia/NVIDIA-Nemotron-3-Ultra-550B-A55B-BF16": CountingConvention(
        False, note="550B / 55B exclude the MTP block (+11.2B); 55B active leaves out the input embedding"
    ),
    "nvidia/NVIDIA-Nemotron-3.5-Lightning-30B-A3B-NVFP4": CountingConvention(
        note="31.6B / 3.6B (Nemotron 3 Nano's decoder, NVIDIA's Lightning pages round to 30B / 3B) exclude the "
        "hybrid MTP block (+1.34B, one attention + one MoE layer reused at every depth)"
    ),
    "moonshotai/Kimi-K2-Instruct": CountingConvention(False, note="DeepSeek-V3 architecture"),
    "google/gemma-4-26B-A4B": CountingConvention(
        total_includes_vision=False,
        note="25.2B / 3.8B are the language model (the ~550M vision tower is listed apart and not counted "
        "here); ours adds the 14.4M value rows Megatron Bridge builds for the K = V layers",
    ),
    "openai/gpt-oss-120b": CountingConvention(False, note="active counts the unembedding, not the embedding"),
    "openai/gpt-oss-20b": CountingConvention(False, note="active counts the unembedding, not the embedding"),
    "Qwen/Qwen3-Next-80B-A3B-Instruct": CountingConvention(
        False,
        active_includes_output_layer=False,
        measured_includes_mtp_layers=1,
        note="'3B active' (about 3.7 % of 80B per the Qwen3-Next blog) is the non-embedding active count; "
        "the checkpoint carries 1 MTP layer not declared in config.json",
    ),
    "Qwen/Qwen3.5-397B-A17B": CountingConvention(note="total includes the vision tower, excludes MTP"),
    "Qwen/Qwen3.5-122B-A10B": CountingConvention(note="total includes the vision tower, excludes MTP"),
    "Qwen/Qwen3.5-35B-A3B": CountingConvention(note="total includes the vision tower, excludes MTP"),
    "Qwen/Qwen3.6-35B-A3B": CountingConvention(note="total includes the vision tower, excludes MTP"),
    "MiniMaxAI/MiniMax-M2.5": CountingConvention(
        False,
        active_includes_output_layer=False,
        note="229B is the checkpoint (no MTP weights); '10B active' (9.8B in MiniMax's report) leaves out both "
        "vocabulary tables",
    ),
    "MiniMaxAI/MiniMax-M3": CountingConvention(
        note="428B is the vision-language checkpoint: this language model (no MTP weights) plus a vision tower "
        "and projectors its config does not describe (about 0.87B by the checkpoint's bytes)"
    ),
    "moonshotai/Kimi-K2.5": CountingConvention(
        note="32.86B active counts the input embedding and not the MoonViT tower (NVIDIA's table)"
    ),
    "moonshotai/Kimi-K3": CountingConvention(
        False,
        note="2.78T / 104B are the language model (the MoonViT tower Megatron Bridge does not build is not counted "
        "here); 104B active leaves out the input embedding; the checkpoint's 32 zero pads per KDA A_log are not counted",
    ),
    "moonshotai/Moonlight-16B-A3B": CountingConvention(
        note="15.96B: the checkpoint's BF16 bytes / 2 (163,842 embedding rows, 8,192 parameters above config.json)"
    ),
    "meta-llama/Llama-4-Scout-17B-16E-Instruct": CountingConvention(note="109B total includes vision"),
    "meta-llama/Llama-4-Maverick-17B-128E-Instruct": CountingConvention(note="400B total includes vision"),
}


def _data_dir():
    return resources.files("moeplan.catalog") / "data" / "models"


@functools.lru_cache(maxsize=1)
def _index() -> dict[str, str]:
    """HF id → file name, from the packaged files (``org__name.json``)."""
    out = {}
    for entry in _data_dir().iterdir():
        name = entry.name
        if name.endswith(".json"):
            out[name[:-5].replace("__", "/", 1)] = name
    return dict(sorted(out.items()))


def list_models() -> list[str]:
    """HF ids of every built-in model, sorted."""
    return list(_index())


def resolve_model_name(name: str) -> str:
    """Resolve an HF id, file stem, short name or unique prefix to the catalog's HF id.

    Raises:
        UnknownNameError: no match (lists the known ids, with close matches).
        InputError: an ambiguous short name (lists the candidates).
    """
    ids = _index()
    key = name.strip().lower().replace("__", "/")
    for hf_id in ids:
        if hf_id.lower() == key or hf_id.split("/", 1)[1].lower() == key:
            return hf_id
    short = [
        i
        for i in ids
        if i.split("/", 1)[1].lower().startswith(key.split("/")[-1]) and (("/" not in key) or i.lower().startswith(key))
    ]
    if len(short) == 1:
        return short[0]
    if len(short) > 1:
        raise InputError("model", name, "a unique name; it matches " + ", ".join(short))
    raise UnknownNameError(
        "model", name, list(ids), "a built-in model (HF id or short name) or a path to a config.json:"
    )


@functools.lru_cache(maxsize=64)
def load_raw(hf_id: str) -> dict:
    return json.loads(_data_dir().joinpath(_index()[hf_id]).read_text())


def load_config_file(path: str | Path) -> dict:
    """Read a user ``config.json`` (strict JSON under the input policy: bounded size and nesting, no
    duplicate keys; ``Infinity`` and ``NaN`` read as floats, as Hugging Face writes them).

    Raises:
        InputError: missing file or invalid JSON.
    """
    p = Path(path)
    if not p.is_file():
        raise InputError("model", str(path), "a built-in model name or an existing config.json path")
    data = load_json_file(p, "model", constants=True)
    if not isinstance(data, dict):
        raise InputError("model", str(path), "a JSON object (a Hugging Face config.json)")
    return data


def _model_from_file(path: str) -> ModelSpec:
    """The model of a user's ``config.json``, every field within the plausible ranges and consistent
    (:func:`~moeplan.inputs.model_spec.check_model_consistency`, as ``model_overrides`` are held to).

    The file is read and parsed once per version: the result is cached by the file's identity and
    modification (path, device, inode, mtime in ns, size), so the planner's thousands of candidates
    of one request share one read, and an edited file is read again.

    Raises:
        InputError: unreadable, or a value of the wrong type, out of range or inconsistent.
    """
    try:
        st = os.stat(path)
    except OSError:
        return _read_model_file(path)  # the reader names the missing or unreadable file
    return _cached_model_file(os.path.abspath(path), path, (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size))


@functools.lru_cache(maxsize=8)
def _cached_model_file(_abspath: str, path: str, _version: tuple[int, int, int, int]) -> ModelSpec:
    """:func:`_read_model_file` memoised on (absolute path, shown path, file version); errors are not
    cached."""
    return _read_model_file(path)


def _read_model_file(path: str) -> ModelSpec:
    """Read, parse and check a user's ``config.json`` (see :func:`_model_from_file`)."""
    try:
        m = model_from_hf_config(load_config_file(path), path, source="file")
    except (TypeError, ValueError, KeyError, OverflowError, ZeroDivisionError) as exc:
        if isinstance(exc, InputError):
            raise
        raise InputError("model", path, f"a Hugging Face config.json moeplan can read ({type(exc).__name__})") from None
    check_model_ranges(m, "config.json:")
    check_model_consistency(m, "config.json:")
    return m


@functools.lru_cache(maxsize=64)
def _get_catalog_model(hf_id: str) -> ModelSpec:
    return model_from_hf_config(load_raw(hf_id), hf_id, source="catalog")


def get_model(name_or_path: str) -> ModelSpec:
    """Return the :class:`ModelSpec` of a built-in model or of a ``config.json`` path.

    Raises:
        UnknownNameError / InputError: unknown name, ambiguous prefix, unreadable file.
    """
    looks_like_path = name_or_path.endswith(".json") or "/" in name_or_path and Path(name_or_path).exists()
    if looks_like_path:
        return _model_from_file(str(name_or_path))
    return _get_catalog_model(resolve_model_name(name_or_path))
