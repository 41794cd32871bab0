"""Read back Megatron Bridge and Megatron-LM configurations into a moeplan scenario.

Sources: a partial Bridge ``ConfigContainer`` YAML (``mbridge-yaml``), Hydra override lines
(``mbridge-overrides``), ``pretrain_gpt.py`` flags (``megatron-lm-args``) and the argument dump at the
top of a Megatron-LM training log (``------------------------ arguments ------------------------``
followed by ``  name ........ value`` lines). A ``# moeplan:`` header written by
:mod:`moeplan.io.export` restores the model, system, framework and versions; without it those come
from the caller (CLI flags). Recipe quirks are reported: ``model.moe_a2a_overlap`` is read by neither
Bridge nor megatron-core (the switch is ``comm_overlap.overlap_moe_expert_parallel_comm``).
"""

from __future__ import annotations

import json
import re
import shlex
from typing import Any

import yaml

from moeplan.errors import InputError
from moeplan.io.export import HEADER
from moeplan.io.keys import BRIDGE_PATHS, MLM_FLAG_EXCEPTIONS, PRECISION_FIELDS, TRAINING_PATHS
from moeplan.spec.layout import LayoutSpec

SOURCES = ("mbridge-yaml", "mbridge-overrides", "megatron-lm-args", "megatron-log")

_PATH_TO_KEY = {path: key for key, paths in BRIDGE_PATHS.items() for path in paths}
_PATH_TO_KEY["model.cuda_graph_modules"] = "cuda_graph_modules"
_TRAIN_PATH_TO_KEY = {path: key for key, paths in TRAINING_PATHS.items() for path in paths}
_FLAG_TO_KEY = {v: k for k, v in MLM_FLAG_EXCEPTIONS.items()}


def _precision_from(mp: dict) -> str | None:
    for name, fields in PRECISION_FIELDS.items():
        if name != "bf16" and all(mp.get(k) == v for k, v in fields.items() if k != "bf16"):
            return name
    if mp.get("bf16") or mp:
        return "bf16"
    return None


def _header(text: str) -> dict:
    for line in text.splitlines():
        if line.startswith(HEADER):
            return json.loads(line[len(HEADER) :])
    return {}


def _scenario(meta: dict, layout: dict, training: dict, notes: list[str]) -> dict:
    stated = set(meta.get("stated") or [])
    # version-aware spellings written by the export: give the user's own spelling back
    for new, old in (("cuda_graph_modules", "cuda_graph_scope"),):
        if new in layout and old in stated and new not in stated:
            layout[old] = layout.pop(new)
    sc: dict[str, Any] = {}
    for key in ("model", "model_overrides", "system", "framework", "versions"):
        if meta.get(key) is not None:
            sc[key] = meta[key]
    tr = dict(meta.get("training") or {})
    tr.update(training)
    if meta.get("precision") and "precision" not in tr:
        tr["precision"] = meta["precision"]
    sc["training"] = tr
    sc["layout"] = layout
    return sc


def from_sections(sections: dict, notes: list[str]) -> tuple[dict, dict]:
    """Bridge ``{section: {field: value}}`` → (layout, training); unknown fields are noted, not lost."""
    layout: dict[str, Any] = {}
    training: dict[str, Any] = {}
    for sec, fields in sections.items():
        if sec == "mixed_precision":
            if isinstance(fields, dict):
                prec = _precision_from(fields)
                if prec:
                    training["precision"] = prec
                for k, v in fields.items():
                    key = _PATH_TO_KEY.get(f"mixed_precision.{k}")
                    if key:
                        layout[key] = v
            continue
        if not isinstance(fields, dict):
            notes.append(f"{sec}: not a mapping, ignored")
            continue
        for field, v in fields.items():
            path = f"{sec}.{field}"
            if field == "moe_a2a_overlap":
                notes.append(
                    f"{path}={v!r} is read by neither Bridge nor megatron-core (ignored); the EP-overlap "
                    "switch is comm_overlap.overlap_moe_expert_parallel_comm"
                )
                continue
            if path in _TRAIN_PATH_TO_KEY:
                training[_TRAIN_PATH_TO_KEY[path]] = v
            elif path in _PATH_TO_KEY:
                key = _PATH_TO_KEY[path]
                if key in layout and layout[key] != v:
                    notes.append(
                        f"{path}={v!r} disagrees with {key}={layout[key]!r} from another section; kept the first"
                    )
                    continue
                layout[key] = v
            else:
                notes.append(f"{path} is not modelled by moeplan (ignored)")
    return layout, training


def parse_overrides(text: str) -> dict:
    sections: dict[str, dict] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        for tok in shlex.split(line):
            key, sep, val = tok.partition("=")
            if not sep or "." not in key:
                raise InputError("override", tok, "section.key=value")
            sec, field = key.split(".", 1)
            sections.setdefault(sec, {})[field] = yaml.safe_load(val) if val else None
    return sections


def _mlm_tokens(text: str) -> dict[str, Any]:
    toks = shlex.split("\n".join(line for line in text.splitlines() if not line.strip().startswith("#")))
    out: dict[str, Any] = {}
    i = 0
    while i < len(toks):
        tok = toks[i]
        if not tok.startswith("--"):
            raise InputError("megatron-lm-args", tok, "--flag [value ...] tokens")
        vals = []
        i += 1
        while i < len(toks) and not toks[i].startswith("--"):
            vals.append(toks[i])
            i += 1
        out[tok] = vals
    return out


def _scalar(v: str) -> Any:
    if v == "None":
        return None
    if re.fullmatch(r"-?\d+", v):
        return int(v)
    if re.fullmatch(r"-?\d*\.\d+(e-?\d+)?", v):
        return float(v)
    if v in ("True", "true", "False", "false"):
        return v in ("True", "true")
    return v


def _accepts(key: str, value: Any) -> bool:
    from pydantic import ValidationError

    try:
        LayoutSpec.model_validate({key: value})
        return True
    except ValidationError:
        return False


def _typed(key: str, vals: list[str]) -> Any:
    """A flag's values typed as the LayoutSpec field takes them (scalar if it accepts one, else a list)."""
    if not vals:
        return True
    if len(vals) == 1:
        v = _scalar(vals[0])
        if _accepts(key, v):
            return v
        if isinstance(v, str) and _accepts(key, vals[0]):
            return vals[0]
    return [_scalar(x) for x in vals]


def from_megatron_lm(text: str, notes: list[str]) -> tuple[dict, dict]:
    flags = _mlm_tokens(text)
    layout: dict[str, Any] = {}
    training: dict[str, Any] = {}
    fp8 = None
    for flag, vals in flags.items():
        key = _FLAG_TO_KEY.get(flag) or flag[2:].replace("-", "_")
        if key in ("seq_length", "micro_batch_size", "global_batch_size"):
            training[key] = int(vals[0])
        elif key == "fp8_recipe":
            fp8 = vals[0]
        elif key == "fp4_recipe":
            training["precision"] = "nvfp4"
        elif key in ("bf16", "fp8_format", "fp4_format"):
            continue
        elif key in LayoutSpec.model_fields:
            layout[key] = _typed(key, vals)
        else:
            notes.append(f"{flag} is not modelled by moeplan (ignored)")
    if fp8:
        training["precision"] = {
            "tensorwise": "fp8-tensorwise",
            "delayed": "fp8-delayed",
            "blockwise": "fp8-blockwise",
            "mxfp8": "mxfp8",
        }.get(fp8, "bf16")
    elif "precision" not in training:
        training["precision"] = "bf16"
    return layout, training


_ARG_LINE = re.compile(r"^\s*\[?.*?\]?\s*([a-z_][a-z0-9_]*)\s*\.{2,}\s*(.*?)\s*$")


def from_log(text: str, notes: list[str]) -> tuple[dict, dict]:
    """The argument dump of a Megatron-LM log (``name ....... value`` lines between the banners)."""
    args: dict[str, str] = {}
    inside = False
    for line in text.splitlines():
        if "arguments" in line and "---" in line:
            inside = "end of arguments" not in line
            continue
        if inside:
            mt = _ARG_LINE.match(line)
            if mt:
                args[mt.group(1)] = mt.group(2)
    if not args:
        raise InputError("log", "(no argument dump)", "a Megatron-LM log with its '-- arguments --' block")
    layout: dict[str, Any] = {}
    training: dict[str, Any] = {}
    for name, raw in args.items():
        if name in ("seq_length", "micro_batch_size", "global_batch_size") and raw.isdigit():
            training[name] = int(raw)
        elif name == "fp8_recipe" and args.get("fp8") not in (None, "None"):
            training["precision"] = {
                "tensorwise": "fp8-tensorwise",
                "delayed": "fp8-delayed",
                "blockwise": "fp8-blockwise",
                "mxfp8": "mxfp8",
            }.get(raw, "bf16")
        elif name in LayoutSpec.model_fields:
            try:
                val = yaml.safe_load(raw)
            except yaml.YAMLError:
                val = raw
            layout[name] = val
    training.setdefault("precision", "bf16")
    return layout, training


def import_config(text: str, source: str) -> tuple[dict, list[str]]:
    """Turn a configuration text into a scenario mapping (plus notes on what was ignored or fixed).

    Raises:
        InputError: unknown source or unreadable text.
    """
    notes: list[str] = []
    meta = _header(text)
    if source == "mbridge-yaml":
        try:
            data = yaml.safe_load(text) or {}
        except yaml.YAMLError as exc:
            raise InputError("mbridge-yaml", "(file)", f"valid YAML ({exc.__class__.__name__})") from None
        if not isinstance(data, dict):
            raise InputError("mbridge-yaml", "(file)", "a mapping of ConfigContainer sections")
        layout, training = from_sections(data, notes)
    elif source == "mbridge-overrides":
        layout, training = from_sections(parse_overrides(text), notes)
    elif source == "megatron-lm-args":
        layout, training = from_megatron_lm(text, notes)
    elif source == "megatron-log":
        layout, training = from_log(text, notes)
    else:
        raise InputError("--from", source, ", ".join(SOURCES))
    return _scenario(meta, layout, training, notes), notes
