"""docs/scenario.md is generated (scripts/scenario_doc.py) from docs/scenario.md.in and the field
declarations of the scenario input models: every field carries its documentation where it is
declared, the page is what the generator makes of them, and a field without documentation is named."""

from __future__ import annotations

import importlib.util
import re
from typing import Literal

from pydantic import BaseModel, Field, PositiveInt

from moeplan.model import overheads
from moeplan.structure import numerics
from tests.conftest import ROOT

_spec = importlib.util.spec_from_file_location("scenario_doc", ROOT / "scripts" / "scenario_doc.py")
assert _spec is not None and _spec.loader is not None
scenario_doc = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(scenario_doc)


def _models_in(tp) -> set[type]:
    """Pydantic models named in an annotation (``WorkloadInput | None`` → {WorkloadInput})."""
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return {tp}
    return set().union(*(_models_in(a) for a in getattr(tp, "__args__", ())))


def test_every_field_of_every_input_model_has_a_description():
    assert scenario_doc.undocumented(scenario_doc.INPUT_MODELS) == []
    for model in scenario_doc.INPUT_MODELS:
        for name, info in model.model_fields.items():
            text = info.description or ""
            assert len(text) >= scenario_doc.MIN_DESCRIPTION and text.strip(" .") != name, f"{model.__name__}.{name}"


def test_every_scenario_section_is_documented():
    top = scenario_doc.ScenarioInput
    sections = set().union(*(_models_in(info.annotation) for info in top.model_fields.values()))
    assert sections | {top} <= set(scenario_doc.INPUT_MODELS)


def test_scenario_page_is_generated_from_the_declarations():
    want = scenario_doc.render()
    got = (ROOT / "docs" / "scenario.md").read_text(encoding="utf-8")
    assert got == want, "docs/scenario.md is stale: run python scripts/scenario_doc.py"


def test_page_keeps_the_narrative_and_has_a_row_per_field():
    text = scenario_doc.render()
    narrative = (ROOT / "docs" / "scenario.md.in").read_text(encoding="utf-8").rstrip("\n")
    assert narrative in text
    for model in scenario_doc.INPUT_MODELS:
        for name in model.model_fields:
            assert f"| `{name}` |" in text, f"{model.__name__}.{name}"
    # a stage separator inside a description is escaped, not a new table column
    assert "`Et*3\\|(tt\\|)*29,m\\|L`" in text
    assert "| `tensor_model_parallel_size` | int | `1` | ≥ 1 |" in text
    assert "| `pipeline_model_parallel_size` | int | `1` | ≥ 1, ≤ 10,000 |" in text
    assert "| `recompute_modules` | list[str] or null | unset | each label once |" in text


def test_undocumented_fields_are_named_with_what_is_wrong():
    class Undocumented(BaseModel):
        documented: int = Field(default=1, ge=1, description="A count of things, in things; unset: 1.")
        bare: int = 0
        short: int = Field(default=0, description="a count")
        echoed: bool = Field(default=False, description="echoed")

    assert scenario_doc.undocumented([Undocumented]) == [
        "Undocumented.bare: no description",
        "Undocumented.short: a description shorter than 20 characters",
        "Undocumented.echoed: the description only repeats the field name",
    ]


def test_generator_refuses_an_undocumented_field_and_a_stale_page(tmp_path, monkeypatch, capsys):
    class Partly(BaseModel):
        bare: int = 0

    monkeypatch.setattr(scenario_doc, "INPUT_MODELS", (*scenario_doc.INPUT_MODELS, Partly))
    assert scenario_doc.main(["--check"]) == 1
    assert "undocumented field Partly.bare: no description" in capsys.readouterr().out

    monkeypatch.undo()
    stale = tmp_path / "scenario.md"
    stale.write_text(scenario_doc.render().replace("unset: 1, Megatron's default.", "unset: 2.", 1), encoding="utf-8")
    monkeypatch.setattr(scenario_doc, "PAGE", stale)
    monkeypatch.setattr(scenario_doc, "ROOT", tmp_path)
    assert scenario_doc.main(["--check"]) == 1
    out = capsys.readouterr().out.strip()
    assert out.count("\n") == 0 and out.startswith("scenario.md is stale (2 lines differ, first at line ")


def test_difference_is_none_only_for_the_same_text():
    assert scenario_doc.difference("a\nb\n", "a\nb\n") is None
    assert scenario_doc.difference("a\nb\n", "a\nc\n") == "2 lines differ, first at line 2"
    assert scenario_doc.difference("a\n", "a\nb\n") == "1 lines differ, first at line 2"
    assert scenario_doc.difference("a\n", "a") == "only the line endings differ"


def test_types_read_as_a_scenario_writer_spells_them():
    assert scenario_doc.type_text(int | None) == "int or null"
    assert scenario_doc.type_text(Literal["full", "selective"] | None) == "`full`, `selective` or null"
    assert scenario_doc.type_text(list[PositiveInt] | None) == "list[positive int] or null"
    assert scenario_doc.type_text(list[Literal["attn", "mlp"]]) == "list[`attn`/`mlp`]"
    assert scenario_doc.type_text(dict[str, str]) == "mapping[str, str]"


def test_stated_planning_values_match_the_constants():
    """The unset value each overheads / assumptions description gives is the constant it names."""
    described = [
        *scenario_doc.OverheadsInput.model_fields.values(),
        *scenario_doc.AssumptionsInput.model_fields.values(),
    ]
    modules = {"moeplan.model.overheads": overheads, "moeplan.structure.numerics": numerics}
    for info in described:
        text = info.description or ""
        if "unset: sized" in text:  # sized by a source's formula, not a constant
            assert "`moeplan.model.memory.dispatcher_buffers`" in text, text
            continue
        value = float(re.search(r"unset: ([0-9.]+)", text).group(1))
        module, name = re.search(r"`(moeplan\.[a-z.]+)\.([A-Z_]+)`", text).groups()
        assert value == getattr(modules[module], name), text
