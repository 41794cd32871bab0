"""The megatron-core release each published Megatron-LM MoE recipe (``examples/moe_recipes``) runs with,
read lazily from ``catalog/data/moe_recipe_releases.yaml``.

A recipe runs from the Megatron-LM checkout it lives in, so its release is what
``megatron/core/package_info.py`` states at the recipe's commit; ``scripts/import_moe_recipe_releases.py``
reads that file from a Megatron-LM mirror and keys each row by the SHA-256 of the recipe's text, the
way :func:`recipe_release` recognises a recipe handed to ``check --from megatron-lm-yaml``.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass
from importlib import resources

import yaml
from packaging.version import Version


class RecipeReleaseTableError(ValueError):
    """The packaged recipe-release table is malformed (a moeplan bug, caught by the tests)."""


@dataclass(frozen=True)
class RecipeRelease:
    """One published recipe: its path in Megatron-LM, the commit and date it was read at, the
    megatron-core release of that commit (PEP 440 text) and the file that states it."""

    recipe: str
    commit: str
    date: str
    megatron_core: str
    source: str


_FIELDS = ("recipe", "commit", "date", "megatron_core", "source")


def parse_table(data: object) -> dict[str, RecipeRelease]:
    """Validate the table's mapping (``{schema: 1, recipes: {sha256: row}}``) into rows by SHA-256.

    Raises:
        RecipeReleaseTableError: a wrong schema, a row missing a field or with an extra one, a
            release that is not PEP 440.
    """
    if not isinstance(data, dict) or data.get("schema") != 1 or not isinstance(data.get("recipes"), dict):
        raise RecipeReleaseTableError("recipe-release table: expected {schema: 1, recipes: {...}}")
    rows: dict[str, RecipeRelease] = {}
    for digest, row in data["recipes"].items():
        if not isinstance(row, dict) or set(row) != set(_FIELDS):
            raise RecipeReleaseTableError(f"recipe-release table {digest}: the fields are {', '.join(_FIELDS)}")
        Version(str(row["megatron_core"]))  # InvalidVersion is a ValueError too
        rows[str(digest)] = RecipeRelease(**{k: str(row[k]) for k in _FIELDS})
    return rows


@functools.cache
def _table() -> dict[str, RecipeRelease]:
    text = resources.files("moeplan.catalog").joinpath("data/moe_recipe_releases.yaml").read_text(encoding="utf-8")
    return parse_table(yaml.safe_load(text))


def recipe_release(text: str) -> RecipeRelease | None:
    """The published recipe whose text is exactly ``text`` (by SHA-256 of its UTF-8 bytes), or None
    for a text moeplan does not know (an edited recipe, one of another commit, a hand-written file)."""
    return _table().get(hashlib.sha256(text.encode("utf-8")).hexdigest())
