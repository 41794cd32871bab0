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

import ast
import dataclasses
import math
import re
import shlex
from collections.abc import Sequence
from typing import Any, cast

from pydantic import ValidationError

from moeplan.errors import InputError, short_repr
from moeplan.inputs.layout import PARALLEL_DIMS, LayoutSpec
from moeplan.inputs.loading import load_json_text, load_yaml_text, parse_yaml_value
from moeplan.inputs.megatron_keys import (
    MCORE_CLASS_SECTION,
    Place,
    argument_for_flag,
    check_value_type,
    lookup,
    mlm_argument,
    value_kinds,
)
from moeplan.inputs.model_spec import PartialModelSpec
from moeplan.inputs.policy import MAX_DEPTH, MAX_TEXT_CHARS, ascii_int
from moeplan.io.export import HEADER
from moeplan.io.keys import BRIDGE_PATHS, MIXED_PRECISION, MLM_FLAG_EXCEPTIONS, PRECISION_FIELDS, TRAINING_PATHS

SOURCES = ("mbridge-yaml", "mbridge-overrides", "megatron-lm-args", "megatron-log")

_PATH_TO_KEY = {path: key for key, paths in BRIDGE_PATHS.items() for path in paths}
_PATH_TO_KEY["model.cuda_graph_modules"] = "cuda_graph_modules"
_TRAIN_PATH_TO_KEY = {path: key for key, paths in TRAINING_PATHS.items() for path in paths}
_TRAIN_PATH_TO_KEY["dataset.sequence_length"] = "seq_length"  # Megatron Bridge before 0.6.0 (io.keys.dataset_seq_path)
_PRESET_TO_PRECISION = {v: k for k, v in MIXED_PRECISION.items()}
#: Megatron-LM flags that take a list (argparse nargs='*' / '+'): a bare flag means an empty list
_LIST_FLAGS = {
    "recompute_modules",
    "hierarchical_context_parallel_sizes",
    "offload_modules",
    "cuda_graph_scope",
    "cuda_graph_modules",
}
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
#: Python / torch reprs of a Megatron argument dump → our values
_REPR = {
    "None": None,
    "True": True,
    "False": False,
    "torch.float32": "fp32",
    "torch.bfloat16": "bf16",
    "torch.float16": "fp16",
    "torch.float8_e4m3fn": "fp8",
    "float32": "fp32",
    "bfloat16": "bf16",
    "float16": "fp16",
}
_FLAG_TO_KEY = {v: k for k, v in MLM_FLAG_EXCEPTIONS.items()}


def _precision_from(mp: dict) -> str | None:
    for name, fields in PRECISION_FIELDS.items():
        if (
            name != "bf16"
            and all(mp.get(k) == v for k, v in fields.items() if k not in ("bf16", "fp8"))
            and (mp.get("fp8_recipe") or mp.get("fp4_recipe"))
        ):
            return name
    if mp.get("bf16") or mp:
        return "bf16"
    return None


#: the longest ``# moeplan:`` header read (the export writes a few hundred characters)
MAX_HEADER_CHARS = 2**20
#: what each key of the ``# moeplan:`` header must be (others are dropped with a note)
_HEADER_TYPES: dict[str, type | tuple[type, ...]] = {
    "model": str,
    "model_overrides": dict,
    "system": dict,
    "framework": str,
    "versions": dict,
    "precision": str,
    "training": dict,
    "environment": dict,
    "stated": list,
    "unmodelled_keys": dict,
}
#: the most import notes listed (identical notes are listed once; the rest are counted)
MAX_NOTES = 50


def _header(text: str, notes: list[str]) -> dict:
    """The ``# moeplan:`` header's mapping (strict JSON under the input policy), each key of the type
    the export writes; a header that cannot be read is ignored with a note."""
    for line in text.splitlines():
        if line.startswith(HEADER):
            try:
                meta = load_json_text(line[len(HEADER) :], "header", "# moeplan:", MAX_HEADER_CHARS)
            except InputError as exc:
                notes.append(f"the '# moeplan:' header is not valid JSON ({exc.allowed}): ignored")
                return {}
            if not isinstance(meta, dict):
                notes.append("the '# moeplan:' header is not a JSON object: ignored")
                return {}
            return _typed_header(meta, notes)
    return {}


def _typed_header(meta: dict, notes: list[str]) -> dict:
    out = {}
    for key, v in meta.items():
        want = _HEADER_TYPES.get(key)
        if want is None:
            notes.append(f"the '# moeplan:' header key {short_repr(key)} is not one moeplan writes: ignored")
        elif v is not None and not isinstance(v, want):
            notes.append(
                f"the '# moeplan:' header's {key}={short_repr(v)} is not a {getattr(want, '__name__', want)}: ignored"
            )
        elif key == "stated" and not all(isinstance(x, str) for x in cast(list, v)):
            notes.append("the '# moeplan:' header's stated is not a list of key names: ignored")
        else:
            out[key] = v
    return out


def _value(key: str, v: Any) -> Any:
    """Normalise a value read from Bridge / Megatron-LM (torch dtypes, enums, one-entry lists)."""
    if isinstance(v, str):
        v = _REPR.get(v, v)
        if (
            isinstance(v, str) and re.fullmatch(r"[A-Za-z]+\.[A-Za-z_0-9]+", v) and "." in v
        ):  # enum repr: AttnBackend.auto
            v = v.split(".", 1)[1]
    if key == "cp_comm_type" and isinstance(v, list) and len(set(v)) == 1:
        v = v[0]  # Megatron-LM stores one entry per layer or a single-entry list
    return v


def _keep_valid(layout: dict, notes: list[str]) -> dict:
    """Drop (with a note) values LayoutSpec rejects, so one odd value does not void the import; leave
    out null / ``None`` values (an unset field reads as not stated, so its default and the unset-key
    warnings apply)."""
    out = {}
    for key, v in layout.items():
        v = _value(key, v)
        if v is None:  # how a dump writes an unset field: not stated (inputs.loading.without_nulls)
            continue
        if key not in LayoutSpec.model_fields:  # a Megatron key moeplan carries: its table's type
            try:
                check_value_type(key, v)
            except InputError as exc:
                notes.append(f"{key}={short_repr(v)} dropped: {exc.allowed}")
                continue
            out[key] = v
            continue
        try:
            LayoutSpec.model_validate({key: v})
        except ValidationError as exc:
            if key in PARALLEL_DIMS.values():
                # a parallel size cannot be dropped: the layout checked would not be the one written
                raise InputError(key, v, f"a valid {key} ({exc.errors()[0]['msg'].lower()})") from None
            notes.append(f"{key}={short_repr(v)} dropped: {exc.errors()[0]['msg']}")
            continue
        out[key] = v
    return out


def _scenario(meta: dict, layout: dict, training: dict, notes: list[str]) -> dict:
    stated = set(meta.get("stated") or [])
    # version-aware spellings written by the export: give the user's own spelling back
    for new, old in (("cuda_graph_modules", "cuda_graph_scope"),):
        if new in layout and old in stated and new not in stated:
            layout[old] = layout.pop(new)
    sc: dict[str, Any] = {}
    for key in ("model", "model_overrides", "system", "framework", "versions", "environment"):
        if meta.get(key) is not None:
            sc[key] = meta[key]
    tr = dict(meta.get("training") or {})
    tr.update(training)
    if meta.get("precision") and "precision" not in tr:
        tr["precision"] = meta["precision"]
    world = tr.pop("world_size", None)
    if world and "system" not in sc:
        sc["system"] = {"num_gpus": world}
    sc["training"] = tr
    # the carried keys the export could not write as flags or fields; what the file sets wins
    carried = {str(k): v for k, v in (meta.get("unmodelled_keys") or {}).items() if k not in layout}
    sc["layout"] = _keep_valid({**carried, **layout}, notes)
    return sc


def from_sections(sections: dict, notes: list[str]) -> tuple[dict, dict]:
    """Bridge ``{section: {field: value}}`` → (layout, training); unknown fields are noted, not lost."""
    layout: dict[str, Any] = {}
    training: dict[str, Any] = {}
    for sec, fields in sections.items():
        if sec == "mixed_precision":
            if isinstance(fields, str):
                prec = _PRESET_TO_PRECISION.get(fields)
                if prec is None:
                    notes.append(
                        f"mixed_precision={short_repr(fields)} is not a preset moeplan knows: precision left bf16"
                    )
                else:
                    training["precision"] = prec
            elif isinstance(fields, dict):
                prec = _precision_from(fields)
                if prec:
                    training["precision"] = prec
                for k, v in fields.items():
                    key = _PATH_TO_KEY.get(f"mixed_precision.{k}")
                    if key:
                        layout[key] = v
                    elif k not in _PRECISION_NAMES and carried_in_section("mixed_precision", k):
                        layout[k] = v
            continue
        if not isinstance(fields, dict):
            notes.append(f"{short_repr(sec)}: not a mapping, ignored")
            continue
        for field, v in fields.items():
            path = f"{sec}.{field}"
            if field == "moe_a2a_overlap":
                notes.append(
                    f"{path}={short_repr(v)} is read by neither Bridge nor megatron-core (ignored); the EP-overlap "
                    "switch is comm_overlap.overlap_moe_expert_parallel_comm"
                )
                continue
            if path in _TRAIN_PATH_TO_KEY:
                training[_TRAIN_PATH_TO_KEY[path]] = v
            elif path in _PATH_TO_KEY:
                key = _PATH_TO_KEY[path]
                v = _value(key, v)
                if key in layout and layout[key] != v:
                    notes.append(
                        f"{path}={short_repr(v)} disagrees with {key}={short_repr(layout[key])} from another section; "
                        "kept the first"
                    )
                    continue
                layout[key] = v
            elif carried_in_section(sec, field):
                layout[field] = layout.get(field, v)
            else:
                notes.append(f"{short_repr(path)[1:-1]} is not modelled by moeplan (ignored)")
    return layout, training


#: the mixed-precision fields that spell the precision (read into ``training.precision``)
_PRECISION_NAMES = frozenset(k for fields in PRECISION_FIELDS.values() for k in fields)
#: the model's own fields (``model:`` / ``model_overrides:`` hold them, never ``layout:``)
_MODEL_FIELDS = frozenset(f.name for f in dataclasses.fields(PartialModelSpec))


def carried_in_section(section: str, field: str) -> bool:
    """Whether Bridge's ``section.field`` is a Megatron key moeplan carries (``unmodelled_keys``): a
    field the Bridge table declares in that section, or a megatron-core class field of the section
    that takes the class (:data:`~moeplan.inputs.megatron_keys.MCORE_CLASS_SECTION`); never a model
    field (:class:`~moeplan.inputs.model_spec.PartialModelSpec`)."""
    if field in _MODEL_FIELDS:
        return False
    return any(
        (p.table == "megatron-bridge" and p.at == section)
        or (p.table == "megatron-core" and MCORE_CLASS_SECTION.get(p.at) == section)
        for p in lookup(field)
    )


def _split_top(text: str) -> list[str]:
    """Split a Hydra list body on commas outside quotes and brackets."""
    parts, depth, quote, cur = [], 0, None, ""
    for ch in text:
        if quote:
            cur += ch
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
            cur += ch
        elif ch in "[{":
            depth += 1
            cur += ch
        elif ch in "]}":
            depth -= 1
            cur += ch
        elif ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    if cur.strip():
        parts.append(cur)
    return parts


def _hydra_unquote(body: str, quote: str) -> str:
    """The text of a Hydra quoted value's body: a run of backslashes before the quote or at the end
    stands for half as many (an odd one escapes the quote), ``\\${`` is a literal ``${``; other
    backslashes are literal (Hydra ≥ 1.1, as :func:`moeplan.io.export.hydra_quote` writes them)."""
    out: list[str] = []
    i, n = 0, len(body)
    while i < n:
        if body[i] != "\\":
            out.append(body[i])
            i += 1
            continue
        j = i
        while j < n and body[j] == "\\":
            j += 1
        run = j - i
        if j == n or body[j] == quote or body.startswith("${", j):
            out.append("\\" * (run // 2))
            if run % 2:  # the last backslash escapes what follows
                out.append(body[j] if body[j] == quote else "${")
                j += 1 if body[j] == quote else 2
        else:
            out.append("\\" * run)
        i = j
    return "".join(out)


def hydra_value(text: str, _depth: int = 0) -> Any:
    """A Hydra override value (its grammar, not YAML 1.1): quoted strings, lists, null/true/false,
    decimal ints (ASCII digits, no octal), finite floats; anything else is a plain string.

    Raises:
        InputError: lists nested deeper than :data:`~moeplan.inputs.policy.MAX_DEPTH` (64) levels
            (field ``override``; :func:`parse_overrides` names the key and line).
    """
    t = text.strip()
    if len(t) >= 2 and t[0] == t[-1] and t[0] in "'\"":
        return _hydra_unquote(t[1:-1], t[0])
    if t.startswith("[") and t.endswith("]"):
        if _depth >= MAX_DEPTH:
            raise InputError("override", t, f"a value nested at most {MAX_DEPTH} brackets deep")
        return [hydra_value(p, _depth + 1) for p in _split_top(t[1:-1])]
    low = t.lower()
    if low == "null":
        return None
    if low in ("true", "false"):
        return low == "true"
    return _number(t)


_INT_TEXT = re.compile(r"[+-]?[0-9]{1,4000}", re.ASCII)
_FLOAT_TEXT = re.compile(r"[+-]?([0-9]+\.[0-9]*|\.[0-9]+|[0-9]+)([eE][+-]?[0-9]+)?", re.ASCII)


def _number(t: str) -> Any:
    """``t`` as an int or a finite float when it spells one in ASCII digits (ints of at most 4000
    digits; a float beyond the double range stays text), else ``t`` itself."""
    if _INT_TEXT.fullmatch(t):
        return int(t)
    if len(t) <= 400 and _FLOAT_TEXT.fullmatch(t):
        v = float(t)
        return v if math.isfinite(v) else t
    return t


def parse_overrides(text: str) -> dict:
    """Hydra ``section.key=value`` override lines → ``{section: {key: value}}``.

    Raises:
        InputError: a token that is no ``section.key=value``, unbalanced quotes, or a value nested
            too deep (field ``override line N: section.key``).
    """
    sections: dict[str, Any] = {}
    for lineno, raw in enumerate(text.splitlines(), 1):
        try:
            _parse_override_line(raw, sections)
        except InputError as exc:
            raise exc.renamed(f"override line {lineno}" + exc.field[len("override") :]) from None
    return sections


#: a run of this many characters without a space is no key=value or flag a config holds; refused
#: before ``shlex`` splits it (its time grows with the square of a token's length: 2 MB took 51 s)
_LONG_TOKEN = re.compile(rf"\S{{{MAX_TEXT_CHARS + 1},}}")


def _refuse_long_tokens(text: str, field: str) -> None:
    """Refuse ``text`` holding a token longer than :data:`~moeplan.inputs.policy.MAX_TEXT_CHARS`.

    Raises:
        InputError: naming ``field``, the token's length and the limit.
    """
    m = _LONG_TOKEN.search(text)
    if m is not None:
        raise InputError(
            field, f"a token of {len(m.group()):,} characters", f"tokens of at most {MAX_TEXT_CHARS:,} characters"
        )


def _parse_override_line(raw: str, sections: dict[str, Any]) -> None:
    """One line of :func:`parse_overrides`, into ``sections``; an error in a value names its key
    (field ``override: section.key``)."""
    line = raw.strip()
    if not line or line.startswith("#"):
        return
    _refuse_long_tokens(line, "override")
    try:
        tokens = shlex.split(line, posix=False)
    except ValueError:
        raise InputError("override", line, "key=value tokens with balanced quotes") from None
    for tok in tokens:
        key, sep, val = tok.partition("=")
        key = key.lstrip("+~")
        if not sep:
            raise InputError("override", tok, "section.key=value")
        if key != "mixed_precision" and "." not in key:
            raise InputError("override", tok, "section.key=value")
        try:
            value = hydra_value(val)
        except InputError as exc:
            raise exc.renamed(f"override: {key}") from None
        if key == "mixed_precision":
            sections["mixed_precision"] = value
            continue
        sec, field = key.split(".", 1)
        node = sections.setdefault(sec, {})
        if isinstance(node, dict):
            node[field] = value


def _mlm_tokens(text: str, notes: list[str]) -> dict[str, list[str]]:
    lines = []
    for line in text.splitlines():
        if line.strip().startswith("#"):
            continue
        line = re.sub(r"\s#.*$", "", line)  # trailing comments
        lines.append(line[:-1] if line.rstrip().endswith("\\") else line)
    joined = " ".join(ln.rstrip().rstrip("\\") for ln in lines)
    _refuse_long_tokens(joined, "megatron-lm-args")
    try:
        toks = shlex.split(joined)
    except ValueError:
        raise InputError("megatron-lm-args", "(file)", "flags with balanced quotes") from None
    # drop a launcher prefix such as `torchrun ... pretrain_gpt.py`
    for i, tok in enumerate(toks):
        if tok.endswith(".py"):
            toks = toks[i + 1 :]
            break
    out: dict[str, list[str]] = {}
    i = 0
    while i < len(toks):
        tok = toks[i]
        if not tok.startswith("--"):
            notes.append(f"{short_repr(tok)} is not a flag (ignored)")
            i += 1
            continue
        flag, eq, inline = tok.partition("=")
        vals = [inline] if eq else []
        i += 1
        while not eq and i < len(toks) and not toks[i].startswith("--"):
            vals.append(toks[i])
            i += 1
        out[flag] = vals
    return out


def _scalar(v: str) -> Any:
    if v in _REPR:
        return _REPR[v]
    if v in ("true", "false"):
        return v == "true"
    return v if v.startswith("+") else _number(v)


def _accepts(key: str, value: Any) -> bool:
    try:
        LayoutSpec.model_validate({key: value})
        return True
    except ValidationError:
        return False


def _typed(key: str, vals: list[str]) -> Any:
    """A flag's values typed as the LayoutSpec field takes them (scalar if it accepts one, else a list)."""
    if not vals:
        return [] if key in _LIST_FLAGS else True
    if len(vals) == 1:
        v = _scalar(vals[0])
        if _accepts(key, v):
            return v
        if isinstance(v, str) and _accepts(key, vals[0]):
            return vals[0]
    return [_scalar(x) for x in vals]


def _as_kind(text: str, kinds: set[str] | None) -> Any:
    """One value's text as the kind its key table gives: kept as text when the key takes only text,
    else a number, boolean or ``None`` when it spells one (:func:`_scalar`)."""
    if kinds is not None and kinds <= {"str", "list"}:
        return text
    v = _scalar(text)
    if isinstance(v, bool) and kinds is not None and "bool" not in kinds:
        return text
    return v


def table_value(key: str, place: Place, vals: list[str]) -> Any:
    """A Megatron-LM argument moeplan does not model, read from its flag's values as ``arguments.py``
    declares it (:func:`moeplan.inputs.megatron_keys.argument_for_flag`): a ``store_true`` switch is
    true, a ``store_false`` one false, an argument with ``nargs`` a list (one item per value), else
    the one value typed by :func:`~moeplan.inputs.megatron_keys.value_kinds` (a bare flag: true)."""
    if place.action in ("store_true", "store_false"):
        return place.action == "store_true"
    kinds = cast("set[str] | None", value_kinds(key))
    if place.nargs:
        return [_as_kind(v, kinds) for v in vals]
    if not vals:
        return True
    return _as_kind(vals[0], kinds) if len(vals) == 1 else [_as_kind(v, kinds) for v in vals]


_FP8_RECIPES = {
    "tensorwise": "fp8-tensorwise",
    "delayed": "fp8-delayed",
    "blockwise": "fp8-blockwise",
    "mxfp8": "mxfp8",
}


def from_megatron_lm(text: str, notes: list[str]) -> tuple[dict, dict]:
    flags = _mlm_tokens(text, notes)
    layout: dict[str, Any] = {}
    training: dict[str, Any] = {}
    fp8 = None
    for flag, vals in flags.items():
        if flag == "--no-check-for-nan-in-loss-and-grad":
            layout["check_for_nan_in_loss"] = False
            continue
        if flag == "--no-rope-fusion":  # store_false, dest apply_rope_fusion (Megatron-LM arguments.py)
            layout["apply_rope_fusion"] = False
            continue
        if flag == "--no-create-attention-mask-in-dataloader":
            layout["create_attention_mask_in_dataloader"] = False
            continue
        if flag == "--grad-reduce-in-bf16":
            layout["grad_reduce_in_fp32"] = False
            continue
        key = _FLAG_TO_KEY.get(flag) or flag[2:].replace("-", "_")
        if key in ("seq_length", "micro_batch_size", "global_batch_size", "world_size"):
            v = ascii_int(vals[0]) if vals else None
            if v is None:
                notes.append(f"{flag} {short_repr(' '.join(vals))}: not an integer (ignored)")
            else:
                training[key] = v
        elif key == "fp8_recipe":
            fp8 = vals[0] if vals else None
        elif key == "fp4_recipe":
            training["precision"] = "nvfp4"
        elif key in ("bf16", "fp8_format", "fp4_format"):
            continue
        elif key == "num_layers_per_virtual_pipeline_stage":
            notes.append(
                f"{flag} {short_repr(' '.join(vals))}: VPP depends on the model's layers; give "
                "virtual_pipeline_model_parallel_size instead (ignored)"
            )
        elif key in LayoutSpec.model_fields:
            layout[key] = _typed(key, vals)
        elif (arg := argument_for_flag(flag)) is not None:
            layout[arg[0]] = table_value(arg[0], arg[1], vals)
        else:
            notes.append(f"{short_repr(flag)[1:-1]} is not modelled by moeplan (ignored)")
    if fp8:
        training["precision"] = _FP8_RECIPES.get(fp8, "bf16")
    training.setdefault("precision", "bf16")
    return layout, training


_ARG_NAME = re.compile(r"([a-z_][a-z0-9_]*)[ \t]*\.{2,}", re.ASCII)
_RANK_NUMBER = re.compile(r"[0-9]{1,9}:", re.ASCII)
#: the most arguments kept from one dump, and the longest value kept (a longer one is noted)
MAX_DUMP_ARGS = 10_000
MAX_DUMP_VALUE = 65536


def arg_line(line: str) -> tuple[str, str] | None:
    """``(name, value)`` of one ``  name ........ value`` line of an argument dump (after an optional
    rank prefix ``[rank3]:`` or ``3:``), None for any other line. Linear in the line's length (no
    backtracking regular expression over the value)."""
    t = line.lstrip()
    if not t:
        return None
    first = t.split(None, 1)[0]
    cut = first.rfind("]:")
    if cut >= 0:
        t = t[cut + 2 :].lstrip()
    elif m := _RANK_NUMBER.match(t):
        t = t[m.end() :].lstrip()
    m = _ARG_NAME.match(t)
    if m is None:
        return None
    return m.group(1), t[m.end() :].strip()


class DumpReader:
    """The last argument dump of a Megatron-LM log, fed one line at a time (ANSI colours removed):
    ``args`` (name → raw value text), ``ended`` (the dump's closing banner was seen), ``too_long``
    (names whose value was longer than :data:`MAX_DUMP_VALUE`, left out). Memory is bounded by the
    dump, never by the log (:data:`MAX_DUMP_ARGS` names at most)."""

    def __init__(self) -> None:
        self.args: dict[str, str] = {}
        self.ended = False
        self.too_long: list[str] = []
        self.header: str | None = None  # the first '# moeplan:' line, as an exported file has
        self._inside = False

    def feed(self, line: str) -> None:
        """Read one line (without its newline)."""
        if self.header is None and line.startswith(HEADER) and len(line) <= MAX_HEADER_CHARS:
            self.header = line
        if "---" in line and "arguments" in line:
            if "end of arguments" in line:
                self._inside, self.ended = False, True
            else:
                self._inside, self.ended = True, False
                self.args, self.too_long = {}, []  # the last dump wins
            return
        if not self._inside or ".." not in line:
            return
        kv = arg_line(line)
        if kv is None:
            return
        name, value = kv
        if len(value) > MAX_DUMP_VALUE:
            if len(self.too_long) < MAX_DUMP_ARGS:
                self.too_long.append(name)
        elif name in self.args or len(self.args) < MAX_DUMP_ARGS:
            self.args[name] = value


def dump_args(text: str) -> tuple[dict[str, str], bool]:
    """The last argument dump of a Megatron-LM log as raw strings, and whether it is complete."""
    reader = DumpReader()
    for raw in text.splitlines():
        reader.feed(_ANSI.sub("", raw) if "\x1b" in raw else raw)
    return reader.args, reader.ended


def from_dump(args: dict[str, str], ended: bool, notes: list[str], too_long: Sequence[str] = ()) -> tuple[dict, dict]:
    """(layout, training) of an argument dump's raw values (``name → text`` as :class:`DumpReader`
    keeps them): integers in ASCII digits, other values read as strict YAML (Python reprs such as
    ``None``, ``torch.bfloat16`` or ``['p2p']`` included).

    Raises:
        InputError: an empty dump.
    """
    if not args:
        raise InputError("log", "(no argument dump)", "a Megatron-LM log with its '-- arguments --' block")
    if not ended:
        notes.append("the argument dump is cut off (no 'end of arguments'): later arguments are missing")
    for name in too_long[:5]:
        notes.append(f"{name}: value longer than {MAX_DUMP_VALUE} characters (ignored)")
    layout: dict[str, Any] = {}
    training: dict[str, Any] = {}
    for name, raw in args.items():
        if name in ("seq_length", "micro_batch_size", "global_batch_size", "world_size"):
            v = ascii_int(raw, 0)
            if v is not None:
                training[name] = v
            elif raw != "None":
                notes.append(f"{name}={short_repr(raw)}: not an integer in ASCII digits (ignored)")
        elif name == "fp8_recipe" and args.get("fp8") not in (None, "None"):
            training["precision"] = _FP8_RECIPES.get(raw, "bf16")
        elif name == "fp4_recipe" and args.get("fp4") not in (None, "None"):
            training["precision"] = "nvfp4"
        elif name in LayoutSpec.model_fields:
            layout[name] = _REPR[raw] if raw in _REPR else parse_yaml_value(raw)
        elif (carried := dump_carried(name, raw)) is not None:
            layout[name] = carried
    training.setdefault("precision", "bf16")
    return layout, training


#: dump names moeplan reads elsewhere or that describe the model, never carried: the architecture
#: (:data:`ARCH_ARGS`, the model's fields and switches), the precision and the batch
_DUMP_NOT_CARRIED = frozenset(
    {"group_query_attention", "swiglu", "disable_bias_linear", "moe_layer_freq", "num_experts", "padded_vocab_size"}
    | {"bf16", "fp16", "fp8", "fp8_format", "fp8_recipe", "fp4", "fp4_format", "fp4_recipe"}
    | {"seq_length", "micro_batch_size", "global_batch_size", "world_size"}
)


def _literal(text: str) -> Any:
    """A default as ``arguments.py`` writes it (``None``, ``'text'``, ``1e-05``) read as a value."""
    if text in _REPR:
        return _REPR[text]
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return text


def dump_carried(name: str, raw: str) -> Any:
    """The value of a dump argument moeplan does not model but carries (``unmodelled_keys``), None
    when it is not carried: a Megatron-LM argument (:func:`moeplan.inputs.megatron_keys.mlm_argument`)
    outside :data:`_DUMP_NOT_CARRIED` and the model's fields, whose value differs from every default
    its table gives (a dump lists every argument; those at their default say nothing the run chose).
    Typed as :func:`table_value` types a flag's value."""
    place = mlm_argument(name)
    if place is None or name in _DUMP_NOT_CARRIED or name in _MODEL_FIELDS or name in ARCH_ARGS:
        return None
    v = _REPR[raw] if raw in _REPR else parse_yaml_value(raw)
    if isinstance(v, str):
        v = _as_kind(raw, cast("set[str] | None", value_kinds(name)))
    for _, text in place.defaults:
        d = raw if text is None else _literal(text)
        if v == d and isinstance(v, bool) == isinstance(d, bool):
            return None
    return v


def from_log(text: str, notes: list[str]) -> tuple[dict, dict]:
    """The argument dump of a Megatron-LM log (``name ....... value`` lines between the banners)."""
    reader = DumpReader()
    for raw in text.splitlines():
        reader.feed(_ANSI.sub("", raw) if "\x1b" in raw else raw)
    return from_dump(reader.args, reader.ended, notes, reader.too_long)


def import_dump(reader: DumpReader) -> tuple[dict, list[str]]:
    """The scenario mapping of a log's argument dump kept by a :class:`DumpReader` (a streaming log
    parse), as :func:`import_config` reads it from the log's text with ``megatron-log``.

    Raises:
        InputError: the log has no argument dump.
    """
    notes: list[str] = []
    meta = _header(reader.header or "", notes)
    layout, training = from_dump(reader.args, reader.ended, notes, reader.too_long)
    _model_from(architecture(reader.args), meta, notes)
    meta.setdefault("framework", "megatron-core")
    return _scenario(meta, layout, training, notes), bounded_notes(notes)


def _model_from(arch: dict, meta: dict, notes: list[str]) -> None:
    """The run's architecture as the scenario's model when the import names none (a partial model:
    the rules on heads, layers and experts run; ``--model`` gives the rest)."""
    if arch and not meta.get("model") and not meta.get("model_overrides"):
        meta["model_overrides"] = arch
        notes.append(
            "model: none named; the run's own architecture is checked ("
            + ", ".join(f"{k} {v}" for k, v in arch.items())
            + "); --model M adds what a config dump lacks"
        )


#: Megatron-LM arguments (dump names, or flags with dashes as underscores) → model fields: a run's
#: own architecture, which the model rules need when the import names no model
ARCH_ARGS = {
    "num_layers": "num_layers",
    "hidden_size": "hidden_size",
    "ffn_hidden_size": "ffn_hidden_size",
    "num_attention_heads": "num_attention_heads",
    "num_query_groups": "num_query_groups",
    "kv_channels": "kv_channels",
    "padded_vocab_size": "vocab_size",
    "vocab_size": "vocab_size",
    "max_position_embeddings": "max_position_embeddings",
    "num_experts": "num_moe_experts",
    "moe_router_topk": "moe_router_topk",
    "moe_ffn_hidden_size": "moe_ffn_hidden_size",
    "moe_shared_expert_intermediate_size": "moe_shared_expert_intermediate_size",
    "q_lora_rank": "q_lora_rank",
    "kv_lora_rank": "kv_lora_rank",
    "qk_head_dim": "qk_head_dim",
    "qk_pos_emb_head_dim": "qk_pos_emb_head_dim",
    "v_head_dim": "v_head_dim",
}


def architecture(args: dict[str, Any]) -> dict[str, Any]:
    """The model fields of a Megatron-LM argument dump or flag set (raw strings, or lists of them for
    flags): every positive integer of :data:`ARCH_ARGS`, ``multi_latent_attention``, and the query
    groups as the heads when the run does not use grouped-query attention."""
    out: dict[str, Any] = {}
    for name, field in ARCH_ARGS.items():
        raw = args.get(name)
        raw = raw[0] if isinstance(raw, list) and raw else raw
        if (
            isinstance(raw, str)
            and raw.isascii()
            and raw.isdigit()
            and len(raw) <= 12
            and int(raw) > 0
            and field not in out
        ):
            out[field] = int(raw)
    gqa = args.get("group_query_attention")
    if gqa in ("False", []) or (gqa is None and "num_query_groups" not in args):
        out.pop("num_query_groups", None)
        if "num_attention_heads" in out and gqa is not None:
            out["num_query_groups"] = out["num_attention_heads"]
    if args.get("multi_latent_attention") in ("True", []):
        out["multi_latent_attention"] = True
    return out


def import_config(text: str, source: str) -> tuple[dict, list[str]]:
    """Turn a configuration text into a scenario mapping (plus notes on what was ignored or fixed).

    Raises:
        InputError: unknown source or unreadable text.
    """
    notes: list[str] = []
    meta = _header(text, notes)
    if source == "mbridge-yaml":
        data = load_yaml_text(text, "mbridge-yaml", "(file)") or {}
        if not isinstance(data, dict):
            raise InputError("mbridge-yaml", "(file)", "a mapping of ConfigContainer sections")
        layout, training = from_sections(data, notes)
    elif source == "mbridge-overrides":
        layout, training = from_sections(parse_overrides(text), notes)
    elif source == "megatron-lm-args":
        layout, training = from_megatron_lm(text, notes)
        meta.setdefault("framework", "megatron-core")
        _model_from(architecture({k[2:].replace("-", "_"): v for k, v in _mlm_tokens(text, []).items()}), meta, notes)
    elif source == "megatron-log":
        layout, training = from_log(text, notes)
        meta.setdefault("framework", "megatron-core")
        _model_from(architecture(dump_args(text)[0]), meta, notes)
    else:
        raise InputError("--from", source, ", ".join(SOURCES))
    if not layout and not training and not meta:
        raise InputError(source, "(file)", f"a {source} configuration with at least one key moeplan reads")
    sc = _scenario(meta, layout, training, notes)
    return sc, bounded_notes(notes)


def bounded_notes(notes: list[str]) -> list[str]:
    """``notes`` with repeats listed once and at most :data:`MAX_NOTES` of them (the rest counted in
    a last note): a file of 10^5 unknown keys gives a readable answer, not 10^5 lines."""
    unique = list(dict.fromkeys(notes))
    if len(unique) <= MAX_NOTES:
        return unique
    return [*unique[:MAX_NOTES], f"... and {len(unique) - MAX_NOTES} more notes like these"]
