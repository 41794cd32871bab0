"""Reading scenarios: strict YAML (YAML 1.2 numbers, duplicate keys and aliases refused, nesting
bounded), scenario files, ``--set`` values, and the section-by-section merge of CLI overrides.

Everything here works on plain mappings; validation is :mod:`moeplan.spec.inputs`, resolution
:mod:`moeplan.spec.defaults`.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path

import yaml

from moeplan.errors import InputError, missing_file


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate mapping keys (YAML would silently keep the last one) and
    aliases (``*name``: a few lines of aliases can expand to gigabytes)."""

    def compose_node(self, parent, index):
        """A node of the document; an alias raises ``yaml.composer.ComposerError``."""
        if self.check_event(yaml.AliasEvent):
            mark = self.peek_event().start_mark
            raise yaml.composer.ComposerError(None, None, "aliases (*name) are not accepted", mark)
        return super().compose_node(parent, index)


def _construct_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
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
_UniqueKeyLoader.add_constructor(_INT, lambda loader, node: int(loader.construct_scalar(node)))


def parse_yaml_value(raw: str) -> object:
    """One ``--set`` value, read as the scenario files are (YAML 1.2 numbers, no aliases); the text
    itself when it is not YAML. Never raises."""
    try:
        return yaml.load(raw, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError:
        return raw


def load_yaml_text(text: str, field: str, where: str) -> object:
    """Parse YAML strictly: duplicate keys and aliases refused, nesting bounded.

    Raises:
        InputError: named by ``field`` with ``where`` (a path) as the value.
    """
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = str(getattr(exc, "problem", None) or "")
        detail = f": {problem}" if ("duplicate" in problem or "aliases" in problem) else ""
        raise InputError(field, where, f"valid YAML (parse error{at}{detail})") from None
    except RecursionError:
        raise InputError(field, where, "YAML nested less deeply") from None


def load_scenario_file(path: str | Path) -> dict:
    """Read a scenario YAML file into a mapping.

    Raises:
        InputError: missing file, malformed YAML, or a document that is not a mapping.
    """
    p = Path(path)
    if not p.is_file():
        raise missing_file("scenario", path, "YAML file")
    try:
        text = p.read_text(encoding="utf-8")
    except (UnicodeDecodeError, OSError) as exc:
        raise InputError("scenario", str(path), f"a readable UTF-8 YAML file ({type(exc).__name__})") from None
    data = load_yaml_text(text, "scenario", str(path))
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise InputError("scenario", str(path), "a YAML mapping with model, system, training, layout")
    return data


def _deep_merge(base: dict, top: dict) -> dict:
    """A new mapping: ``top`` laid over ``base`` section by section; neither argument is changed (a
    shared base, e.g. calibration defaults, must not carry one run's settings into the next)."""
    out = copy.deepcopy(base)
    for k, v in top.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _deep_merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def merge_overrides(data: dict, overrides: dict[str, dict]) -> dict:
    """Overlay CLI values (section → key → value; ``model``, ``framework``, ``name`` and
    ``recipe_defaults`` → value) on a scenario mapping; CLI wins, nested sections merge key by key
    (:func:`_deep_merge`). Returns a new mapping; ``data`` is not changed. Never raises."""
    out = dict(data)
    for sec, vals in overrides.items():
        if sec in ("model", "framework", "name", "recipe_defaults"):
            out[sec] = vals
            continue
        if not vals:
            continue
        out[sec] = _deep_merge(dict(out.get(sec) or {}), vals) if isinstance(vals, dict) else vals
    return out
