"""Container release → package versions, read lazily from ``catalog/data/containers.yaml`` (NeMo
Framework containers, from Megatron Bridge's ``docs/releases/software-versions.md``).

:func:`lookup_container` answers one release; the table is validated on load (every package key known,
every version PEP 440, ``inherits`` naming a row of the same family).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from importlib import resources

import yaml
from packaging.version import InvalidVersion, Version

from moeplan.inputs.versions import PACKAGES


class ContainerTableError(ValueError):
    """The packaged container table is malformed (a moeplan bug, caught by the tests)."""


@dataclass(frozen=True)
class ContainerRow:
    """One container release: its packages (``versions.<key>`` → PEP 440 text) and where they come from."""

    family: str
    release: str
    packages: dict[str, str]
    source: str
    note: str | None = None


def parse_table(data: dict) -> dict[tuple[str, str], ContainerRow]:
    """Validate a container table mapping (the YAML's content) into rows keyed by (family, release).

    Raises:
        ContainerTableError: unknown keys or packages, a version that is not PEP 440, a bad ``inherits``.
    """
    if not isinstance(data, dict) or data.get("schema") != 1 or not isinstance(data.get("families"), dict):
        raise ContainerTableError("container table: expected {schema: 1, families: {...}}")
    raw: dict[tuple[str, str], dict] = {}
    for family, rows in data["families"].items():
        if not isinstance(rows, dict):
            raise ContainerTableError(f"container table: family {family!r} must map releases to rows")
        for release, row in rows.items():
            where = f"container table {family}:{release}"
            if not isinstance(row, dict):
                raise ContainerTableError(f"{where}: a mapping expected")
            unknown = set(row) - {"source", "note", "packages", "inherits"}
            if unknown:
                raise ContainerTableError(f"{where}: unknown keys {sorted(unknown)}")
            if not row.get("source"):
                raise ContainerTableError(f"{where}: no source")
            for key, text in (row.get("packages") or {}).items():
                if key not in PACKAGES:
                    raise ContainerTableError(f"{where}: unknown package {key!r} (one of {', '.join(PACKAGES)})")
                try:
                    Version(str(text))
                except InvalidVersion:
                    raise ContainerTableError(f"{where}: {key} {text!r} is not a PEP 440 version") from None
            raw[(family, str(release))] = row
    out: dict[tuple[str, str], ContainerRow] = {}
    for (family, release), row in raw.items():
        packages = dict(row.get("packages") or {})
        parent = row.get("inherits")
        if parent is not None:
            base = raw.get((family, str(parent)))
            if base is None or base.get("inherits"):
                raise ContainerTableError(f"container table {family}:{release}: inherits unknown row {parent!r}")
            packages = {**(base.get("packages") or {}), **packages}
        out[(family, release)] = ContainerRow(
            family, release, {k: str(v) for k, v in packages.items()}, str(row["source"]), row.get("note")
        )
    return out


@functools.cache
def container_table() -> dict[tuple[str, str], ContainerRow]:
    """The packaged table, validated (cached)."""
    text = resources.files("moeplan.catalog").joinpath("data").joinpath("containers.yaml").read_text(encoding="utf-8")
    return parse_table(yaml.safe_load(text))


def lookup_container(family: str, release: str) -> tuple[ContainerRow | None, str]:
    """The row for ``family:release`` and a note on how it was found: an exact row; for a patch
    release not in the table (``26.04.01``), its base release's row (said so in the note); None when
    the release is unknown."""
    table = container_table()
    row = table.get((family, release))
    if row is not None:
        return row, f"{family}:{release} versions from {row.source}"
    base = ".".join(release.split(".")[:2])
    row = table.get((family, base))
    if row is not None and base != release:
        return row, f"{family}:{release} is not in the table: the versions of {family}:{base} are used ({row.source})"
    known = sorted(r for f, r in table if f == family)
    return None, (
        f"{family}:{release} is not in moeplan's container table (known: {', '.join(known) or 'none'}); "
        "state the versions.* you run"
    )


def list_containers() -> list[dict]:
    """Every row as a plain mapping (family, release, packages, source, note)."""
    return [
        {"family": r.family, "release": r.release, "packages": dict(r.packages), "source": r.source, "note": r.note}
        for r in container_table().values()
    ]


__all__ = [
    "ContainerRow",
    "ContainerTableError",
    "container_table",
    "list_containers",
    "lookup_container",
    "parse_table",
]
