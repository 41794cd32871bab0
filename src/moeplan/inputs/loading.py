"""Reading scenarios: strict YAML (YAML 1.2 numbers, duplicate keys and aliases refused, nesting
and size bounded), strict JSON (the same rules), scenario files, ``--set`` values, and the
section-by-section merge of CLI overrides. Every YAML and JSON document moeplan reads from a user
goes through :func:`load_yaml_text` or :func:`load_json_text` (the input policy of
:mod:`moeplan.inputs.policy`).

Everything here works on plain mappings; validation is :mod:`moeplan.inputs.schema`, resolution
:mod:`moeplan.resolve.defaults`.
"""

from __future__ import annotations

import copy
import json
import math
import re
from pathlib import Path

import yaml

from moeplan.errors import InputError, missing_file, short_repr
from moeplan.inputs.policy import MAX_DEPTH, MAX_JSON_BYTES, MAX_YAML_BYTES, read_text

#: integers longer than this cannot be converted by Python at all (its limit is 4300 digits)
_PARSE_INT_DIGITS = 4000


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate mapping keys (YAML would silently keep the last one) and
    aliases (``*name``: a few lines of aliases can expand to gigabytes)."""

    def compose_node(self, parent, index):
        """A node of the document; an alias, or nesting deeper than :data:`MAX_DEPTH`, raises
        ``yaml.composer.ComposerError``."""
        if self.check_event(yaml.AliasEvent):
            mark = self.peek_event().start_mark
            raise yaml.composer.ComposerError(None, None, "aliases (*name) are not accepted", mark)
        depth = getattr(self, "_depth", 0)
        if depth >= MAX_DEPTH:
            mark = self.peek_event().start_mark
            raise yaml.composer.ComposerError(None, None, f"nesting deeper than {MAX_DEPTH} levels", mark)
        self._depth = depth + 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth = depth


def _construct_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if isinstance(key, (list, dict)):  # '{[a]: 1}' or '? {a: 1}': not a name (and unhashable)
            raise yaml.constructor.ConstructorError(
                None, None, "a mapping key must be a name, not a list or a mapping", key_node.start_mark
            )
        if key in seen:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {short_repr(key)}", key_node.start_mark)
        seen.add(key)
    return yaml.SafeLoader.construct_mapping(loader, node, deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)

# numbers as YAML 1.2 reads them: 1e-3 is a float (YAML 1.1 reads it as text), 1:00 is text (not the
# sexagesimal 60), 2_0 is text (not 20), 010 is ten (not octal)
_INT, _FLOAT = "tag:yaml.org,2002:int", "tag:yaml.org,2002:float"
_UniqueKeyLoader.yaml_implicit_resolvers = {
    ch: [(tag, rx) for tag, rx in rs if tag not in (_INT, _FLOAT)]
    for ch, rs in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_UniqueKeyLoader.add_implicit_resolver(_INT, re.compile(r"^[-+]?[0-9]+$"), list("-+0123456789"))
_UniqueKeyLoader.add_implicit_resolver(
    _FLOAT,
    re.compile(r"^[-+]?([0-9]+\.[0-9]*|\.[0-9]+|[0-9]+)([eE][-+]?[0-9]+)?$|^[-+]?\.(inf|Inf|INF)$|^\.(nan|NaN|NAN)$"),
    list("-+0123456789."),
)


def _construct_int(loader: _UniqueKeyLoader, node: yaml.ScalarNode) -> int:
    text = loader.construct_scalar(node)
    if len(text) > _PARSE_INT_DIGITS:
        raise yaml.constructor.ConstructorError(None, None, "an integer of thousands of digits", node.start_mark)
    return int(text)


_UniqueKeyLoader.add_constructor(_INT, _construct_int)


def parse_yaml_value(raw: str) -> object:
    """One ``--set`` value (or one value of a log's argument dump), read as the scenario files are
    (YAML 1.2 numbers, no aliases, bounded size and nesting); the text itself when it is not such
    YAML. Never raises."""
    if len(raw) > MAX_YAML_BYTES:
        return raw
    try:
        return yaml.load(raw, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except (yaml.YAMLError, RecursionError, ValueError):
        return raw


_SHOWN_PROBLEMS = ("duplicate", "aliases", "nesting", "digits")


def load_yaml_text(text: str, field: str, where: str) -> object:
    """Parse YAML strictly: duplicate keys, aliases and tags refused, nesting bounded
    (:data:`~moeplan.inputs.policy.MAX_DEPTH`), at most :data:`~moeplan.inputs.policy.MAX_YAML_BYTES`.

    Raises:
        InputError: named by ``field`` with ``where`` (a path) as the value.
    """
    if len(text) > MAX_YAML_BYTES:
        raise InputError(field, where, f"a YAML document of at most {MAX_YAML_BYTES // 2**20} MiB")
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = str(getattr(exc, "problem", None) or "")
        detail = f": {problem}" if any(w in problem for w in _SHOWN_PROBLEMS) else ""
        raise InputError(field, where, f"valid YAML (parse error{at}{detail})") from None
    except (RecursionError, ValueError):
        raise InputError(field, where, "YAML nested less deeply, with numbers Python can read") from None


def _json_pairs(pairs: list[tuple[str, object]]) -> dict:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        dup = None
        for k, _ in pairs:
            if k in seen:
                dup = k
                break
            seen.add(k)
        raise ValueError(f"duplicate key {short_repr(dup)}")
    return out


def _json_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number")


def _json_float(text: str) -> float:
    v = float(text)
    if not math.isfinite(v):
        raise ValueError(f"number {text[:20]}... is beyond a float")
    return v


def _json_int(text: str) -> int:
    if len(text) > _PARSE_INT_DIGITS:
        raise ValueError("an integer of thousands of digits")
    return int(text)


def load_json_text(text: str, field: str, where: str, limit: int | None = None, *, constants: bool = False) -> object:
    """Parse JSON strictly: duplicate keys, ``NaN`` / ``Infinity`` (unless ``constants``: Hugging Face
    writes ``Infinity`` into configs, e.g. Mamba's ``time_step_limit``) and numbers beyond a float
    refused, nesting bounded (:data:`~moeplan.inputs.policy.MAX_DEPTH`), at most ``limit`` characters
    (default :data:`~moeplan.inputs.policy.MAX_JSON_BYTES`). Linear in the size.

    Raises:
        InputError: named by ``field`` with ``where`` (a path) as the value.
    """
    limit = MAX_JSON_BYTES if limit is None else limit
    if len(text) > limit:
        raise InputError(field, where, f"a JSON document of at most {limit // 2**20 or 1} MiB")
    try:
        data = json.loads(
            text,
            object_pairs_hook=_json_pairs,
            parse_constant=float if constants else _json_constant,
            parse_float=_json_float,
            parse_int=_json_int,
        )
    except RecursionError:
        raise InputError(field, where, f"JSON nested at most {MAX_DEPTH} levels deep") from None
    except ValueError as exc:  # JSONDecodeError is a ValueError; so are the hooks' refusals
        raise InputError(field, where, f"valid JSON ({str(exc)[:120]})") from None
    _check_depth(data, field, where)
    return data


def _check_depth(data: object, field: str, where: str) -> None:
    """Refuse a document nested deeper than :data:`MAX_DEPTH` (iterative: no recursion limit)."""
    stack = [(data, 0)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise InputError(field, where, f"a document nested at most {MAX_DEPTH} levels deep")
        if isinstance(node, dict):
            stack.extend((v, depth + 1) for v in node.values() if isinstance(v, (dict, list)))
        elif isinstance(node, list):
            stack.extend((v, depth + 1) for v in node if isinstance(v, (dict, list)))


def load_yaml_file(path: str | Path, field: str) -> object:
    """Read a YAML (or JSON) document from a regular file under the input policy.

    Raises:
        InputError: missing or not a regular file, too long, not UTF-8, not strict YAML.
    """
    return load_yaml_text(read_text(path, field, MAX_YAML_BYTES), field, str(path))


def load_json_file(path: str | Path, field: str, *, constants: bool = False) -> object:
    """Read a JSON document from a regular file under the input policy (``constants``: see
    :func:`load_json_text`).

    Raises:
        InputError: missing or not a regular file, too long, not UTF-8, not strict JSON.
    """
    return load_json_text(read_text(path, field, MAX_JSON_BYTES), field, str(path), constants=constants)


def load_scenario_file(path: str | Path) -> dict:
    """Read a scenario YAML file into a mapping.

    Raises:
        InputError: missing file, malformed YAML, or a document that is not a mapping.
    """
    p = Path(path)
    if not p.exists() and not p.is_symlink():
        raise missing_file("scenario", path, "YAML file")
    data = load_yaml_file(p, "scenario")  # a FIFO, device or folder is refused there, never read
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise InputError("scenario", str(path), "a YAML mapping with model, system, training, layout")
    return data  # nulls kept: validation names a misspelt key given as null, then leaves nulls out


class _NoAliasDumper(yaml.SafeDumper):
    """SafeDumper that never writes an alias (``&id001`` / ``*id001``): what moeplan writes, its
    strict loader reads back."""

    def ignore_aliases(self, data) -> bool:
        return True


def dump_yaml(data: object, **kw) -> str:
    """YAML text of ``data`` as ``yaml.safe_dump(data, sort_keys=False, **kw)`` writes it, without
    aliases (a list shared by two keys is written twice), so that :func:`load_yaml_text` reads it back."""
    return yaml.dump(data, Dumper=_NoAliasDumper, sort_keys=False, **kw)


def deep_merge(base: dict, top: dict) -> dict:
    """A new mapping: ``top`` laid over ``base`` section by section; neither argument is changed (a
    shared base, e.g. calibration defaults, must not carry one run's settings into the next)."""
    out = copy.deepcopy(base)
    for k, v in top.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def without_nulls(data: dict) -> dict:
    """``data`` with every ``null`` value inside a section mapping (``layout``, ``training``,
    ``system``, ``environment``, ...) left out: a null reads as *not stated*, as a Megatron Bridge
    config dump writes an unset field (``expert_tensor_parallel_size: null``), so the key gets its
    default and the "defaults used" list and the unset-key warnings name it. A null laid over a
    stated value by ``--set section.key=null`` unsets it. Top-level values (``model: null``),
    ``model_overrides`` (a null there is an input error) and nested mappings (a custom
    ``system.gpu``) are kept as written. Returns a new mapping when
    anything is left out, else ``data``; never raises."""
    if not any(isinstance(v, dict) and k not in _TYPED_AS_WRITTEN and None in v.values() for k, v in data.items()):
        return data
    return {
        k: {kk: vv for kk, vv in v.items() if vv is not None}
        if isinstance(v, dict) and k not in _TYPED_AS_WRITTEN
        else v
        for k, v in data.items()
    }


#: mappings whose nulls stay as written: ``model_overrides`` replaces config fields, where a null is
#: an input error naming the field (not a key left at the config's value)
_TYPED_AS_WRITTEN = frozenset({"model_overrides"})


def merge_overrides(data: dict, overrides: dict[str, dict]) -> dict:
    """Overlay CLI values (section → key → value; ``model``, ``framework``, ``name`` and
    ``recipe_defaults`` → value) on a scenario mapping; CLI wins, nested sections merge key by key
    (:func:`deep_merge`); a null value unsets its key (validation leaves it out, :func:`without_nulls`,
    after naming a misspelt one). Returns a new mapping;
    ``data`` is not changed. Never raises."""
    out = dict(data)
    for sec, vals in overrides.items():
        if sec in ("model", "framework", "name", "recipe_defaults"):
            out[sec] = vals
            continue
        if not vals:
            continue
        out[sec] = deep_merge(dict(out.get(sec) or {}), vals) if isinstance(vals, dict) else vals
    return out
