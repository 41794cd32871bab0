"""Scenario flags → scenario overrides: the 15 options that every scenario command takes
(``--model --gpu --num-gpus --seq-length --mbs --gbs --tokens-per-step --precision --tp --pp --vpp --cp
--ep --etp --set``)
as one object, and the override mapping they stand for, laid over a scenario file by
:func:`moeplan.resolve.load.merge_overrides` / :func:`moeplan.load_scenario`.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from moeplan.errors import InputError
from moeplan.inputs.layout import PARALLEL_DIMS
from moeplan.inputs.loading import parse_yaml_value

#: ``--set KEY=VALUE`` keys that are top-level scenario keys (their values are taken as text)
TOP_LEVEL_SET = ("framework", "recipe_defaults", "name")


@dataclass(frozen=True)
class ScenarioFlags:
    """What a request says about the scenario beyond its file; None (or no ``sets``) = not given.

    Attributes:
        model: HF id, short name or config.json path.
        gpu: GPU id (``h100``, ``gb300``, ...).
        num_gpus: world size (GPUs).
        seq_length: tokens per sequence.
        mbs: micro batch size (sequences).
        gbs: global batch size (sequences per step).
        tokens_per_step: the global batch in tokens instead (turned into sequences once the sequence
            length is known: :func:`moeplan.api.side_inputs.scenario_request`).
        precision: ``bf16``, ``fp8-blockwise``, ... (``training.precision``).
        tp, pp, vpp, cp, ep, etp: tensor / pipeline / virtual pipeline / context / expert /
            expert-tensor parallel sizes.
        sets: ``section.key=value`` items (values parsed as YAML), applied before the flags above.
    """

    model: str | None = None
    gpu: str | None = None
    num_gpus: int | None = None
    seq_length: int | None = None
    mbs: int | None = None
    gbs: int | None = None
    tokens_per_step: int | None = None
    precision: str | None = None
    tp: int | None = None
    pp: int | None = None
    vpp: int | None = None
    cp: int | None = None
    ep: int | None = None
    etp: int | None = None
    sets: tuple[str, ...] = ()


#: the field names of :class:`ScenarioFlags`, in the order the CLI lists them
FLAG_NAMES: tuple[str, ...] = tuple(f.name for f in fields(ScenarioFlags))


def _text(raw: str) -> str:
    """A text-valued ``--set`` value: one pair of matching YAML quotes around it is dropped
    (``versions.megatron_bridge="0.1.0rc2"`` is ``0.1.0rc2``, as YAML would read it)."""
    if len(raw) >= 2 and raw[0] == raw[-1] and raw[0] in "'\"":
        return raw[1:-1]
    return raw


def _versions_text(raw: str) -> str | None:
    """A ``versions.*`` ``--set`` value: text (:func:`_text`), or None for an unquoted YAML null
    (``null``, ``~`` or nothing), which unsets the version as ``null`` does in a scenario file."""
    return None if raw in ("null", "Null", "NULL", "~", "") else _text(raw)


def parse_set(items: list[str] | tuple[str, ...]) -> dict[str, Any]:
    """``section.key=value`` pairs (value parsed as YAML) → ``{section: {key: value}}`` (dots deeper
    in the key nest further); the top-level keys ``framework``, ``recipe_defaults`` and ``name``,
    and every ``versions.*`` value, are taken as text (YAML would read 26.10 as the float 26.1; one pair
    of surrounding quotes is dropped; an unquoted ``null`` unsets a version).

    Raises:
        InputError: an item without ``=`` or without a section, or keys that overlap
            (``a.b=1`` and ``a.b.c=2``).
    """
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if sep and key in TOP_LEVEL_SET:
            out[key] = _text(raw)
            continue
        if not sep or "." not in key or not all(key.split(".")):  # '.x=1', 'layout.=1': an empty name
            raise InputError(
                "--set",
                item,
                "section.key=value, e.g. layout.recompute_granularity=selective, or framework=..., recipe_defaults=...",
            )
        sec, *path = key.split(".")
        val = _versions_text(raw) if sec == "versions" else parse_yaml_value(raw)
        node = out.setdefault(sec, {})
        if not isinstance(node, dict):
            raise InputError("--set", item, f"a key under {sec!r}, which was already given a value")
        for part in path[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise InputError("--set", item, "keys that do not overlap")
        node[path[-1]] = val
    return out


def scenario_overrides(flags: ScenarioFlags | None) -> dict[str, Any]:
    """The override mapping of ``flags``: ``{"model": name, "system": {...}, "training": {...},
    "layout": {...}, <other --set sections>...}``. ``--set`` items are applied first and the
    dedicated flags on top (a flag wins over ``--set``, both over the scenario file). The
    ``system``, ``training`` and ``layout`` sections are always present (possibly empty).

    Raises:
        InputError: a malformed ``--set`` item (:func:`parse_set`), or ``--set model.…`` (the model
            is ``--model``; its fields are ``model_overrides.KEY``).
    """
    flags = flags or ScenarioFlags()
    ov: dict[str, Any] = {}
    if flags.model is not None:
        ov["model"] = flags.model
    system = {k: v for k, v in (("gpu", flags.gpu), ("num_gpus", flags.num_gpus)) if v is not None}
    training = {
        k: v
        for k, v in (
            ("seq_length", flags.seq_length),
            ("micro_batch_size", flags.mbs),
            ("global_batch_size", flags.gbs),
            ("precision", flags.precision),
        )
        if v is not None
    }
    dims = {"TP": flags.tp, "PP": flags.pp, "VPP": flags.vpp, "CP": flags.cp, "EP": flags.ep, "ETP": flags.etp}
    layout = {PARALLEL_DIMS[d]: v for d, v in dims.items() if v is not None}
    for sec, vals in parse_set(flags.sets or ()).items():
        if sec in TOP_LEVEL_SET:
            ov[sec] = vals
        elif sec == "model":
            raise InputError("--set", sec, "--model NAME for the model; model_overrides.KEY=VALUE for its fields")
        else:
            ov.setdefault(sec, {}).update(vals)
    for sec, vals in (("system", system), ("training", training), ("layout", layout)):
        ov.setdefault(sec, {}).update(vals)
    return ov


__all__ = ["FLAG_NAMES", "TOP_LEVEL_SET", "ScenarioFlags", "parse_set", "scenario_overrides"]
