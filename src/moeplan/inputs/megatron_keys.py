"""Megatron's configuration keys per release, from the generated table ``inputs/data/megatron_keys.json``
(``scripts/gen_megatron_keys.py`` reads megatron-core's config dataclasses, Megatron-LM's
``arguments.py`` and Megatron Bridge's ``ConfigContainer`` sections with ``ast``, at the release tags
its header names).

What a key of the ``layout:`` section is, at a stated megatron-core / Megatron Bridge release
(:func:`key_status`):

- ``modelled``: a field moeplan models (the caller passes those names);
- ``accepted``: a key of the tables at the stated release (at any tabled release when that
  framework's version is not stated): accepted as written, carried through to the exports and named
  once in the text output as not modelled;
- ``unknown``: in no table at the stated release: an :class:`~moeplan.errors.InputError` naming the
  field, the value, the nearest names and the releases that do have the key (:func:`check_key`).

A stated version is matched to the tabled release of the same major.minor (``0.16.0`` reads the
``0.16.1`` table); a version newer than every tabled one reads the newest, older than every one the
oldest.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any, Literal

from packaging.version import InvalidVersion, Version

from moeplan.errors import InputError, UnknownNameError, quote_value
from moeplan.i18n.messages import msg

#: the three tables of the data file, by the framework they describe
TABLES = {"megatron-core": "megatron_core", "megatron-lm": "megatron_lm", "megatron-bridge": "megatron_bridge"}
Status = Literal["modelled", "accepted", "unknown"]

#: Bridge sections that take megatron-core classes' keys: megatron-core class → section
MCORE_CLASS_SECTION = {
    "ModelParallelConfig": "model",
    "TransformerConfig": "model",
    "MLATransformerConfig": "model",
    "OptimizerConfig": "optimizer",
    "DistributedDataParallelConfig": "ddp",
}
#: where a key plausibly moves memory or step time (:func:`moves_cost`): megatron-core classes and
#: Bridge sections whose every field is a memory / communication / precision choice
COST_PLACES = frozenset(
    {"OptimizerConfig", "DistributedDataParallelConfig", "TorchFullyShardedDataParallelConfig", "CudaGraphConfig"}
    | {"optimizer", "ddp", "comm_overlap", "mixed_precision"}
)
#: name parts that mark a memory or time choice (offload, overlap, recompute, CUDA graphs, dispatcher
#: SMs, FP8 / FP4, FSDP, fusions, pipeline point-to-point, activation storage)
COST_WORDS = re.compile(
    r"offload|overlap|recompute|cuda_graph|num_sms|hybridep|deepep|dispatcher|fp8|fp4|fsdp|fusion|fused|p2p|"
    r"_store|bucket|grad_reduce|param_gather|dtype|virtual_pipeline|variable_seq"
)


@dataclass(frozen=True)
class Place:
    """Where a key lives in one table.

    Attributes:
        table: ``megatron-core`` | ``megatron-lm`` | ``megatron-bridge``.
        at: the megatron-core class, ``arguments`` (Megatron-LM) or the Bridge section.
        types: release → the annotation (or argparse ``type``) as written in the source from that
            release on (only where it changes; None when not given).
        defaults: release → default text from that release on (only where it changes).
        spans: runs of releases that have the key, each (first, last).
        flag: the Megatron-LM flag (``megatron-lm`` only); ``action``: its argparse action;
            ``nargs``: its argparse ``nargs`` (``'*'``, ``'+'``, a count; None for one value).
    """

    table: str
    at: str
    types: tuple[tuple[str, str | None], ...]
    defaults: tuple[tuple[str, str | None], ...]
    spans: tuple[tuple[str, str], ...]
    flag: str | None = None
    action: str | None = None
    nargs: str | None = None


@lru_cache(maxsize=1)
def table() -> dict[str, Any]:
    """The vendored document (header, ``megatron_core``, ``megatron_lm``, ``megatron_bridge``)."""
    text = resources.files("moeplan.inputs").joinpath("data").joinpath("megatron_keys.json").read_text("utf-8")
    doc: dict[str, Any] = json.loads(text)
    return doc


def releases(framework: str) -> tuple[str, ...]:
    """The tabled releases of ``framework`` (a :data:`TABLES` key), oldest first."""
    return tuple(table()[TABLES[framework]]["releases"])


def _rows(framework: str) -> dict[str, list[dict]]:
    t = table()[TABLES[framework]]
    rows: dict[str, list[dict]] = t.get("keys") or t.get("args") or {}
    return rows


def table_keys(framework: str) -> list[str]:
    """Every key name of ``framework``'s table (a :data:`TABLES` key), sorted."""
    return sorted(_rows(framework))


def _place(framework: str, row: dict) -> Place:
    return Place(
        table=framework,
        at=row["at"],
        types=tuple(row["type"].items()),
        defaults=tuple(row["default"].items()),
        spans=tuple((a, b) for a, b in row["in"]),
        flag=row.get("flag"),
        action=row.get("action"),
        nargs=row.get("nargs"),
    )


def lookup(key: str) -> list[Place]:
    """Every place ``key`` lives, in table order (megatron-core, Megatron-LM, Megatron Bridge); empty
    when no table has it."""
    return [_place(fw, row) for fw in TABLES for row in _rows(fw).get(key, [])]


def _in_spans(release: str, spans: Iterable[tuple[str, str]], order: tuple[str, ...]) -> bool:
    i = order.index(release)
    return any(order.index(a) <= i <= order.index(b) for a, b in spans)


def present_in(place: Place) -> list[str]:
    """The releases of ``place``'s table that have the key."""
    order = releases(place.table)
    return [r for r in order if _in_spans(r, place.spans, order)]


def _at(place: Place, changes: tuple[tuple[str, str | None], ...], release: str) -> str | None:
    order = releases(place.table)
    if release not in order or not _in_spans(release, place.spans, order):
        return None
    out = None
    for rel, text in changes:
        if order.index(rel) <= order.index(release):
            out = text
    return out


def default_at(place: Place, release: str) -> str | None:
    """The default text at tabled ``release`` (the last change at or before it); None when the key has
    no default there or the release does not have it."""
    return _at(place, place.defaults, release)


def type_at(place: Place, release: str) -> str | None:
    """The annotation (argparse ``type``) text at tabled ``release``; None when not given there or the
    release does not have the key."""
    return _at(place, place.types, release)


def release_for(framework: str, version: Version | str | None) -> str | None:
    """The tabled release a stated version reads (same major.minor; else the newest or the oldest);
    None when no version is stated."""
    if version is None:
        return None
    try:
        v = version if isinstance(version, Version) else Version(str(version).removeprefix("core_v").lstrip("v"))
    except InvalidVersion:
        return None
    order = releases(framework)
    same = [r for r in order if Version(r).release[:2] == v.release[:2]]
    if same:
        return same[-1]
    return order[-1] if v > Version(order[-1]) else order[0]


def known_keys() -> set[str]:
    """Every key name of every table."""
    return {k for fw in TABLES for k in _rows(fw)}


def nearest(key: str, extra: Iterable[str] = (), n: int = 3) -> list[str]:
    """The ``n`` names of the tables (and ``extra``) closest to ``key`` (difflib ratio ≥ 0.6), best first."""
    return difflib.get_close_matches(key, sorted(known_keys() | set(extra)), n=n, cutoff=0.6)


def _has_at(key: str, framework: str, release: str | None) -> bool:
    places = [_place(framework, r) for r in _rows(framework).get(key, [])]
    if release is None:
        return bool(places)
    return any(_in_spans(release, p.spans, releases(framework)) for p in places)


@lru_cache(maxsize=4096)
def _flag_at(key: str, release: str | None) -> bool:
    """True when ``--key-with-dashes`` is a Megatron-LM flag at ``release`` (any release when None),
    whatever its dest: a recipe's ``ARGS`` key becomes that flag in Megatron-LM's launcher, and a flag
    built from a config field with other ``arg_names`` sets that field (``--norm-epsilon`` →
    ``layernorm_epsilon`` from 0.16, megatron/training/argument_utils.py)."""
    flag = "--" + key.replace("_", "-")
    order = releases("megatron-lm")
    return any(
        r.get("flag") == flag and (release is None or _in_spans(release, _place("megatron-lm", r).spans, order))
        for rows in _rows("megatron-lm").values()
        for r in rows
    )


def key_status(
    key: str, modelled: Collection[str] = (), mcore: Version | str | None = None, bridge: Version | str | None = None
) -> Status:
    """``modelled`` (in ``modelled``), ``accepted`` (megatron-core / Megatron-LM at the release
    ``mcore`` reads, or Bridge at the release ``bridge`` reads; any release when not stated) or
    ``unknown``."""
    if key in modelled:
        return "modelled"
    brel = release_for("megatron-bridge", bridge)
    if _has_at(key, "megatron-bridge", brel):
        return "accepted"
    for mrel in checkout_releases(mcore):
        if _has_at(key, "megatron-core", mrel) or _has_at(key, "megatron-lm", mrel) or _flag_at(key, mrel):
            return "accepted"
    return "unknown"


def checkout_releases(mcore: Version | str | None) -> list[str | None]:
    """The tabled megatron-core releases whose keys a stated version may have: the one it reads
    (:func:`release_for`); for a build from a git checkout (a local label, ``0.18.0+256f606507``, as
    ``megatron/core/package_info.py`` reports ``__version__`` there) also every later one, because a
    development branch carries the number of its last release line while it already has keys that only
    later releases ship (Megatron-LM's ``examples/moe_recipes`` commits: package_info 0.18.0 with
    ``offload_optimizer_states``, a key of no release before the 0.20 development tree)."""
    rel = release_for("megatron-core", mcore)
    try:
        local = mcore is not None and Version(str(mcore).removeprefix("core_v").lstrip("v")).local is not None
    except InvalidVersion:
        local = False
    if rel is None or not local:
        return [rel]
    order = releases("megatron-core")
    return [r for r in order if Version(r) >= Version(rel)]


def releases_having(key: str) -> dict[str, list[str]]:
    """Framework → the tabled releases that have ``key`` (only frameworks with any)."""
    out: dict[str, list[str]] = {}
    for p in lookup(key):
        fw = "megatron-core" if p.table == "megatron-lm" else p.table
        have = out.setdefault(fw, [])
        have += [r for r in present_in(p) if r not in have]
    return {fw: sorted(v, key=Version) for fw, v in out.items()}


def _span_text(rels: list[str]) -> str:
    return rels[0] if len(rels) == 1 else f"{rels[0]}–{rels[-1]}"


def check_key(
    key: str, value: object, modelled: Collection[str], mcore: Version | str | None, bridge: Version | str | None
) -> Status:
    """:func:`key_status` of ``layout.KEY``, raising for an unknown one.

    Raises:
        UnknownNameError: a key of no release, with the nearest names (layout fields and table keys).
        InputError: a key the stated release lacks, naming ``layout.KEY``, the value, the releases that
            have it and the nearest names.
    """
    status = key_status(key, modelled, mcore, bridge)
    if status != "unknown":
        return status
    have = releases_having(key)
    if not have:  # in no release: a misspelling, answered with the nearest names (an alias first)
        raise UnknownNameError(f"layout.{key}", key, set(modelled) | known_keys(), "one of the layout keys:")
    close = nearest(key, modelled)
    near = ", ".join(repr(c) for c in close) if close else msg("inputs_keys.no_near_name")
    stated = ", ".join(
        f"{fw} {v}" for fw, v in (("megatron-core", mcore), ("megatron-bridge", bridge)) if v is not None
    )
    where = "; ".join(f"{fw} {_span_text(r)}" for fw, r in have.items())
    sentence = msg("inputs_keys.not_at_release", value=quote_value(value), key=key, stated=stated, where=where)
    raise InputError(f"layout.{key}", value, msg("inputs_keys.allowed", near=near), sentence=sentence)


#: Bridge sections a training layout's keys live in, searched first (a key some other section also
#: declares, as ``TokenizerConfig.tensor_model_parallel_size``, is written to these)
LAYOUT_SECTIONS = ("comm_overlap", "mixed_precision", "model", "optimizer", "ddp", "dist", "rng", "train")


def bridge_path(key: str, bridge: Version | str | None = None) -> str | None:
    """The key's Bridge ``ConfigContainer`` path (``section.key``): a section of :data:`LAYOUT_SECTIONS`
    that declares it (at the release ``bridge`` reads, else any), else the section that takes its
    megatron-core class (:data:`MCORE_CLASS_SECTION`), else any other section declaring it; None when
    none does."""
    rel = release_for("megatron-bridge", bridge)
    order = releases("megatron-bridge")
    declared = [
        p.at for p in lookup(key) if p.table == "megatron-bridge" and (rel is None or _in_spans(rel, p.spans, order))
    ]
    for sec in LAYOUT_SECTIONS:
        if sec in declared:
            return f"{sec}.{key}"
    for p in lookup(key):
        if p.table == "megatron-core" and p.at in MCORE_CLASS_SECTION:
            return f"{MCORE_CLASS_SECTION[p.at]}.{key}"
    return f"{declared[0]}.{key}" if declared else None


def mlm_argument(key: str) -> Place | None:
    """The Megatron-LM argument whose dest is ``key`` (flag, action), None when Megatron-LM has none."""
    return next((p for p in lookup(key) if p.table == "megatron-lm"), None)


@lru_cache(maxsize=1)
def _flag_index() -> dict[str, str]:
    return {r["flag"]: dest for dest, rows in _rows("megatron-lm").items() for r in rows if r.get("flag")}


def argument_for_flag(flag: str) -> tuple[str, Place] | None:
    """The Megatron-LM argument a flag sets, as (dest, place: its action and type), for reading a
    command line back into keys; None for a flag no tabled ``arguments.py`` declares."""
    dest = _flag_index().get(flag)
    arg = mlm_argument(dest) if dest is not None else None
    return (dest, arg) if dest is not None and arg is not None else None


def mlm_tokens(key: str, value: object) -> list[str] | None:
    """The Megatron-LM command-line tokens that set ``key`` to ``value``: a ``store_true`` flag when
    true, a ``store_false`` flag when false (nothing when the value is the flag's default), else the
    flag and the value (a list: one token per item). None when Megatron-LM has no argument for it."""
    arg = mlm_argument(key)
    if arg is None or arg.flag is None:
        return None
    if arg.action in ("store_true", "store_false"):
        on = arg.action == "store_true"
        return [arg.flag] if bool(value) == on else []
    items = value if isinstance(value, list) else [value]
    return [arg.flag, *(str(x).lower() if isinstance(x, bool) else str(x) for x in items)]


#: the kinds of value :func:`value_kinds` names: YAML's scalars and sequences
Kind = Literal["bool", "int", "float", "str", "list"]
_TYPE_NAMES: dict[str, Kind] = {"bool": "bool", "int": "int", "float": "float", "str": "str"}
_NAME = re.compile(r"[A-Za-z_][A-Za-z_0-9.]*")
#: a ``Literal[...]`` body (a table cuts a long one with ``…``, leaving it unclosed)
_LITERAL = re.compile(r"Literal\[([^\]]*)(?:\]|$)")


def _kinds_of(text: str) -> set[Kind] | None:
    """The kinds an annotation or argparse ``type`` text allows (``Optional`` / ``| None`` /
    ``Union`` read through, ``Literal`` by its values' kinds, a list / tuple / set as ``list`` and
    its items' kinds, so that ``list[int]`` reads ``--flag 1 2`` as integers); None when it names a
    type that is no plain value (a callable, an enum, a torch dtype): any value."""
    out: set[Kind] = set()
    for body in _LITERAL.findall(text):
        if "'" in body or '"' in body:
            out.add("str")
        if re.search(r"(?:^|,)\s*-?[0-9]+\s*(?=,|$)", body):
            out.add("int")
    for name in _NAME.findall(_LITERAL.sub(" ", text)):
        if name in ("Optional", "Union", "None"):
            continue
        if name in ("list", "List", "tuple", "Tuple", "set", "Set"):
            out.add("list")
            continue
        if name not in _TYPE_NAMES:
            return None
        out.add(_TYPE_NAMES[name])
    return out or None


def _place_kinds(place: Place) -> set[Kind] | None:
    if place.action in ("store_true", "store_false"):
        return {"bool"}
    out: set[Kind] = set()
    for _, text in place.types:
        if text is None:  # argparse without a type reads text; a dataclass field without one: any
            if place.table != "megatron-lm":
                return None
            out.add("str")
            continue
        kinds = _kinds_of(text)
        if kinds is None:
            return None
        out |= kinds
    if place.nargs:
        out.add("list")
    return out or None


def value_kinds(key: str) -> set[Kind] | None:
    """The kinds of value ``key`` takes, as its tables write its type at any tabled release (the
    union over megatron-core, Megatron-LM and Megatron Bridge: a Megatron-LM switch is ``bool``, an
    argument with ``nargs`` also ``list``, an argparse argument without a type ``str``); None when
    some place gives no plain type (a callable, an enum, a torch dtype) or no table has the key."""
    places = lookup(key)
    if not places:
        return None
    out: set[Kind] = set()
    for p in places:
        kinds = _place_kinds(p)
        if kinds is None:
            return None
        out |= kinds
    return out


def value_kind(value: object) -> Kind | None:
    """The kind of a YAML value (None for a mapping or null)."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "str"
    return "list" if isinstance(value, (list, tuple)) else None


def check_value_type(key: str, value: object) -> None:
    """Refuse a value of a kind the key's tables do not take (:func:`value_kinds`; an integer is a
    float too). No bound on magnitude: a Megatron count (``train_samples``) may be large.

    Raises:
        InputError: naming ``layout.KEY``, the value and the kinds the tables give.
    """
    kinds = value_kinds(key)
    got = value_kind(value)
    if kinds is None or value is None or got is None or got in kinds or (got == "int" and "float" in kinds):
        return
    want = " | ".join(k for k in ("bool", "int", "float", "str", "list") if k in kinds)
    raise InputError(f"layout.{key}", value, msg("io_roundtrip.value_type", key=key, kinds=want, got=got))


def moves_cost(key: str) -> bool:
    """Whether a key plausibly moves memory or step time. Derived from the table: the key lives in a
    megatron-core class or Bridge section of :data:`COST_PLACES` (optimizer, DDP / FSDP, CUDA graphs,
    communication overlap, mixed precision), or its name holds a part of :data:`COST_WORDS` (offload,
    overlap, recompute, CUDA graph, dispatcher SMs, FP8 / FP4, fusion, point-to-point, dtype, ...)."""
    return bool(COST_WORDS.search(key)) or any(p.at in COST_PLACES for p in lookup(key))


def describe_unmodelled(keys: dict[str, Any], bridge: Version | str | None = None) -> list[dict[str, Any]]:
    """Each carried key as ``{key, value, bridge, megatron_lm, moves_cost}``: its Bridge path
    (:func:`bridge_path`), its Megatron-LM tokens (:func:`mlm_tokens`; None when Megatron-LM has no
    argument for it) and :func:`moves_cost`; in the order given."""
    return [
        {
            "key": k,
            "value": v,
            "bridge": bridge_path(k, bridge),
            "megatron_lm": mlm_tokens(k, v),
            "moves_cost": moves_cost(k),
        }
        for k, v in keys.items()
    ]


#: carried keys the resolver reads into a modelled one (``moeplan.resolve.defaults``: VPP as
#: Megatron-LM's ``validate_args`` derives it), so they are not listed as "not modelled"
DERIVED_KEYS = {
    "num_layers_per_virtual_pipeline_stage": "virtual_pipeline_model_parallel_size",
    "num_virtual_stages_per_pipeline_rank": "virtual_pipeline_model_parallel_size",
}
#: carried keys the step-time model reads as they are (the module that costs each), so they are not
#: listed as "not modelled"; the estimate's assumptions name them
COSTED_KEYS = {
    "overlap_cpu_optimizer_d2h_h2d": "moeplan.model.time.cpu_offload",
    "dsa_kernel_backend": "moeplan.model.time.dsa_costs",
}


def unmodelled_lines(described: list[dict[str, Any]]) -> list[str]:
    """The text lines naming the carried keys once (:func:`describe_unmodelled`'s items): one line
    with every key, and a warning line with those that may move memory or step time; empty when none.
    Keys of :data:`DERIVED_KEYS` are left out (the resolver reads them; the defaults list says so), and
    those of :data:`COSTED_KEYS` (the step-time model reads them; its assumptions say so)."""
    described = [d for d in described if d["key"] not in DERIVED_KEYS and d["key"] not in COSTED_KEYS]
    if not described:
        return []
    lines: list[str] = [msg("inputs_keys.not_modelled", keys=", ".join(f"{d['key']}={d['value']}" for d in described))]
    cost = [d["key"] for d in described if d["moves_cost"]]
    if cost:
        lines.append(msg("inputs_keys.not_modelled_cost", keys=", ".join(cost)))
    return lines
