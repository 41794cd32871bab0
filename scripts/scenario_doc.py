"""Render docs/scenario.md: the narrative of docs/scenario.md.in, then a reference table per scenario
section built from the field declarations of the input models (``moeplan.inputs``): each field's
type, default, constraint and description (its Megatron meaning, unit, what moeplan does when it is
unset, and its source), as pydantic's ``model_fields`` hold them.

``python scripts/scenario_doc.py`` writes the page; ``--check`` exits 1 with a one-line summary when
the page differs from what it would write. Either way it exits 1 naming every field without a
description (:func:`undocumented`). The test suite runs the same functions."""

from __future__ import annotations

import difflib
import sys
import types
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import annotated_types as at
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from moeplan.inputs.layout import LayoutSpec
from moeplan.inputs.peft import PeftInput
from moeplan.inputs.schema import (
    LABEL_LISTS,
    LAYER_COUNT_KEYS,
    MAX_LAYOUT_FLOAT,
    MAX_LAYOUT_INT,
    MAX_STAGES,
    AssumptionsInput,
    OverheadsInput,
    ReportedInput,
    ScenarioInput,
    SystemInput,
    VersionsInput,
    WorkloadInput,
)
from moeplan.inputs.training import TrainingSpec

ROOT = Path(__file__).resolve().parents[1]
TEMPLATE = ROOT / "docs" / "scenario.md.in"
PAGE = ROOT / "docs" / "scenario.md"
#: the shortest description a field may have (characters)
MIN_DESCRIPTION = 20

#: (heading, model, the sentence under the heading), in page order
SECTIONS: tuple[tuple[str, type[BaseModel], str], ...] = (
    ("Top level", ScenarioInput, "The keys of a scenario file; each section below is one of them."),
    ("`system:`", SystemInput, "The machine the run uses."),
    ("`training:`", TrainingSpec, "What is trained and how the data arrives."),
    (
        "`layout:`",
        LayoutSpec,
        "Megatron-Core / Megatron Bridge keys under their Megatron names. A key left out is not stated: "
        "where a rule needs it, moeplan uses the framework default named here and lists it under "
        f'"defaults used". Every number is at most {MAX_LAYOUT_INT:,} (integers) or {MAX_LAYOUT_FLOAT:,.0f} '
        "(floats) in magnitude.",
    ),
    ("`peft:`", PeftInput, "LoRA adapters as Megatron Bridge builds them; absent: full training."),
    ("`versions:`", VersionsInput, "Software versions, each a quoted PEP 440 string, and the container."),
    ("`workload:`", WorkloadInput, "What a VLM's data looks like per packed sequence (`moeplan vlm-stats -o`)."),
    ("`reported:`", ReportedInput, "Figures a run measured, checked for plausibility."),
    ("`overheads:`", OverheadsInput, "Memory outside PyTorch tensors; each value replaces moeplan's planning value."),
    ("`assumptions:`", AssumptionsInput, "Modelling inputs that are not Megatron keys."),
)
#: every input model whose fields the page documents
INPUT_MODELS: tuple[type[BaseModel], ...] = tuple(model for _, model, _ in SECTIONS)


def undocumented(models: tuple[type[BaseModel], ...] | list[type[BaseModel]]) -> list[str]:
    """``Model.field: what is wrong`` for every field of ``models`` without a usable description:
    none, shorter than :data:`MIN_DESCRIPTION` characters, or only the field's name. Empty when every
    field is documented."""
    out = []
    for model in models:
        for name, info in model.model_fields.items():
            text = (info.description or "").strip()
            words = text.rstrip(".").lower()
            if not text:
                why = "no description"
            elif words in (name.lower(), name.replace("_", " ").lower()):
                why = "the description only repeats the field name"
            elif len(text) < MIN_DESCRIPTION:
                why = f"a description shorter than {MIN_DESCRIPTION} characters"
            else:
                continue
            out.append(f"{model.__name__}.{name}: {why}")
    return out


def _number(v: float) -> str:
    """``1,048,576`` for whole numbers, ``0.5`` / ``1e-06`` otherwise."""
    if isinstance(v, bool):
        return str(v).lower()
    if float(v).is_integer() and abs(v) < 1e15:
        return f"{int(v):,}"
    return f"{v:g}"


def _bound(item: object) -> str | None:
    """``≥ 1`` for an ``annotated_types`` bound, None for other metadata."""
    for cls, attr, sign in ((at.Ge, "ge", "≥"), (at.Gt, "gt", ">"), (at.Le, "le", "≤"), (at.Lt, "lt", "<")):
        if isinstance(item, cls):
            return f"{sign} {_number(getattr(item, attr))}"
    return None


def _members(tp: Any) -> list[Any]:
    """The members of a union (``int | None`` → ``[int, None]``), else ``[tp]``."""
    if get_origin(tp) in (Union, types.UnionType):
        return list(get_args(tp))
    return [tp]


def _inner(tp: Any) -> str:
    """A type nested in a container: literal values joined by ``/``, unions by ``|``."""
    if get_origin(tp) is Literal:
        return "/".join(f"`{a}`" for a in get_args(tp))
    if get_origin(tp) in (Union, types.UnionType):
        return " | ".join(_inner(a) for a in get_args(tp))
    return type_text(tp)


def type_text(tp: Any) -> str:
    """A field annotation as the table shows it: ``int or null``, ```full`, `selective` or null``,
    ``list[positive int]``, ``mapping[str, any]``, ```GpuSpec` mapping``."""
    parts: list[str] = []
    nullable = False
    for m in _members(tp):
        origin, args = get_origin(m), get_args(m)
        if m is type(None):
            nullable = True
        elif origin is Literal:
            parts += [f"`{a}`" for a in args]
        elif origin is Annotated:
            pos = any(isinstance(x, at.Gt) and x.gt == 0 for x in args[1:])
            parts.append(("positive " if pos else "") + type_text(args[0]))
        elif origin is dict:
            parts.append(f"mapping[{', '.join(_inner(a) for a in args)}]")
        elif origin in (tuple, list):  # a tuple field is written as a YAML list
            parts.append(f"list[{_inner(args[0])}]")
        elif isinstance(m, type) and issubclass(m, BaseModel):
            parts.append(f"`{m.__name__}` mapping")
        else:
            parts.append("any" if m is Any else getattr(m, "__name__", str(m)))
    if nullable:
        parts.append("null")
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " or " + parts[-1]


def _value(v: object) -> str:
    """A default value in YAML spelling."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    return str(v)


def default_text(info: FieldInfo) -> str:
    """The default as the table shows it: ``unset`` for None, the section's own defaults for a
    section, ``{}`` for an empty mapping, else the value in code."""
    if info.default_factory is not None:
        factory: Any = info.default_factory
        if isinstance(factory, type) and issubclass(factory, BaseModel):
            return "its keys' defaults"
        return f"`{_value(factory())}`"
    if info.default is PydanticUndefined:
        return "required"
    if info.default is None:
        return "unset"
    return f"`{_value(info.default)}`"


def constraint_text(model: type[BaseModel], name: str, info: FieldInfo) -> str:
    """Bounds from the declaration (``≥ 1, ≤ 65,536``) and, for layout keys, the checks
    :func:`moeplan.inputs.schema.scenario_from_dict` adds (layer-count bound, labels once)."""
    parts = [b for b in (_bound(x) for x in info.metadata) if b]
    if model is LayoutSpec and name in LAYER_COUNT_KEYS:
        parts.append(f"≤ {MAX_STAGES:,}")
    if model is LayoutSpec and name in LABEL_LISTS:
        parts.append("each label once")
    return ", ".join(parts)


def _cell(text: str) -> str:
    """A table cell: pipes escaped, on one line."""
    return " ".join(text.split()).replace("|", "\\|")


def table(model: type[BaseModel]) -> str:
    """The reference table of one model, one row per field in declaration order."""
    rows = ["| field | type | default | constraint | meaning |", "|---|---|---|---|---|"]
    for name, info in model.model_fields.items():
        cells = (
            f"`{name}`",
            type_text(info.annotation),
            default_text(info),
            constraint_text(model, name, info),
            info.description or "",
        )
        rows.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(rows)


def reference() -> str:
    """The generated part of the page: a heading, a sentence and a table per section."""
    out = [
        "## Field reference",
        "",
        "Generated from the field declarations in `src/moeplan/inputs/` by `scripts/scenario_doc.py`: "
        "each meaning gives the Megatron-Core / Megatron Bridge source, the unit and what moeplan does "
        "when the key is unset. `unset` in the default column: not stated (`null` reads the same).",
    ]
    for heading, model, intro in SECTIONS:
        out += ["", f"### {heading}", "", intro, "", table(model)]
    return "\n".join(out) + "\n"


def render() -> str:
    """The page's text: the template's narrative, then :func:`reference`."""
    head = "<!-- Generated by scripts/scenario_doc.py from docs/scenario.md.in and the field declarations. -->\n"
    return head + TEMPLATE.read_text(encoding="utf-8").rstrip("\n") + "\n\n" + reference()


def difference(old: str, new: str) -> str | None:
    """None when ``old`` equals ``new``, else one line: how many lines differ and the first of them."""
    if old == new:
        return None
    a, b = old.splitlines(), new.splitlines()
    if a == b:
        return "only the line endings differ"
    changed = [d for d in difflib.unified_diff(a, b, lineterm="", n=0) if d[:1] in "+-" and d[:3] not in ("+++", "---")]
    first = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
    return f"{len(changed)} lines differ, first at line {first + 1}"


def main(argv: list[str]) -> int:
    """Write docs/scenario.md, or with ``--check`` compare it; 1 when a field is undocumented or the
    page is stale under ``--check``, else 0."""
    missing = undocumented(INPUT_MODELS)
    for line in missing:
        print(f"undocumented field {line}")
    if missing:
        return 1
    text = render()
    rel = PAGE.relative_to(ROOT)
    if "--check" in argv:
        diff = difference(PAGE.read_text(encoding="utf-8") if PAGE.exists() else "", text)
        print(
            f"{rel} is up to date" if diff is None else f"{rel} is stale ({diff}): run python scripts/scenario_doc.py"
        )
        return 0 if diff is None else 1
    PAGE.write_text(text, encoding="utf-8")
    print(f"wrote {rel}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
