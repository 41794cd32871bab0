"""Software versions of a scenario: parsing (PEP 440), the release the layout rules compare
(:func:`release_version`), the packages moeplan tracks (:data:`COMPONENTS`), container release names
(:func:`find_release`), and filling the versions a user did not state from a named container release.

Every version string is read as PEP 440 (``packaging.version.Version``): pre-releases, dev and post
releases and local labels are kept (``0.19.0rc1`` sorts before ``0.19.0``; ``2.14+71bbefb`` is 2.14 with
a local label), and Megatron's tag spellings ``core_v0.16.0`` / ``core_r0.16.0`` / ``v0.16`` are
accepted. Anything else (``before PR 5401``, ``r2d2``, full-width digits) is an
:class:`~moeplan.errors.InputError` naming the field.

:class:`ResolvedVersions` is what the rules read: one ``Version`` (or None when unknown) per package,
and where each came from (the user, or a container release's table row).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from packaging.version import InvalidVersion, Version

from moeplan.errors import InputError
from moeplan.inputs.policy import MAX_INT_DIGITS


@dataclass(frozen=True)
class Component:
    """One software package whose version moeplan tracks.

    Attributes:
        key: the scenario's ``versions.<key>``, the known-issue and container tables' package key.
        name: how the package is usually spelled in messages (``Transformer Engine``).
        distributions: the installed distribution names its version is read from, first found first
            (``doctor``); empty for NCCL, whose version comes from PyTorch's build.
        module: the import name (``doctor``: whether it imports); None for NCCL.
        spellings: other names accepted for it (``known-issues --package``), lower case.
    """

    key: str
    name: str
    distributions: tuple[str, ...] = ()
    module: str | None = None
    spellings: tuple[str, ...] = ()


#: every tracked package, in display order: the one list the schema, the container and known-issue
#: tables, ``known-issues --package`` and ``doctor`` read
COMPONENTS: tuple[Component, ...] = (
    Component(
        "megatron_core",
        "megatron-core",
        ("megatron-core", "megatron_core"),
        "megatron.core",
        ("megatron-core", "mcore"),
    ),
    Component(
        "megatron_bridge",
        "Megatron Bridge",
        ("megatron-bridge", "megatron_bridge"),
        "megatron.bridge",
        ("megatron-bridge", "bridge"),
    ),
    Component(
        "transformer_engine",
        "Transformer Engine",
        ("transformer_engine", "transformer-engine", "transformer_engine_torch"),
        "transformer_engine",
        ("transformer-engine", "te"),
    ),
    Component("torch", "PyTorch", ("torch",), "torch", ("pytorch",)),
    Component("nccl", "NCCL"),
    Component("deepep", "DeepEP", ("deep_ep", "deep-ep"), "deep_ep", ("deep_ep", "deep-ep", "hybridep")),
)

#: packages whose versions a scenario may state (``versions.<key>``), in display order
PACKAGES: tuple[str, ...] = tuple(c.key for c in COMPONENTS)

#: how each package is usually spelled (messages)
PACKAGE_NAMES: dict[str, str] = {c.key: c.name for c in COMPONENTS}

#: other spellings of a package → its key (``known-issues --package te``)
PACKAGE_SPELLINGS: dict[str, str] = {s: c.key for c in COMPONENTS for s in c.spellings}

_PREFIXES = ("core_v", "core_r", "v", "r")
_ALLOWED = "a PEP 440 version such as 0.16.1, 0.19.0rc1, 2.14+71bbefb or 2.9.0a0 (core_v0.16.0 and r0.16.0 also read)"


#: a run of digits longer than any version number (:data:`~moeplan.inputs.policy.MAX_INT_DIGITS`)
_LONG_NUMBER = re.compile(rf"[0-9]{{{MAX_INT_DIGITS + 1}}}")


def parse_version(text: str, field_name: str = "versions") -> Version:
    """``"0.16.1"`` → ``Version("0.16.1")``; ``core_v0.16.0``, ``core_r0.16.0`` and ``v0.16`` also read.

    Raises:
        InputError: not a PEP 440 version (free text, non-ASCII digits, empty, a number of more than
            :data:`~moeplan.inputs.policy.MAX_INT_DIGITS` digits), naming ``field_name``.
    """
    if not isinstance(text, str):
        raise InputError(field_name, text, _ALLOWED)
    s = text.strip()
    if not s or not s.isascii():
        raise InputError(field_name, text, _ALLOWED)
    if _LONG_NUMBER.search(s):  # int() of it would raise (over 4300 digits) or take long
        raise InputError(field_name, text, f"{_ALLOWED}, each number at most {MAX_INT_DIGITS} digits")
    low = s.lower()
    for p in _PREFIXES:
        if low.startswith(p) and len(low) > len(p) and low[len(p)].isdigit():
            s = s[len(p) :]
            break
    try:
        return Version(s)
    except (InvalidVersion, ValueError):
        raise InputError(field_name, text, _ALLOWED) from None


def release_version(v: Version | None, default: str) -> Version:
    """The release the layout rules, the memory and time models and the exports compare: ``v``'s
    major.minor.micro as a ``Version`` (``default``'s when ``v`` is None), without its epoch,
    pre-, post- or dev-release or local label, and without a fourth number: ``0.19.0rc1`` →
    ``0.19.0``, ``2.14+71bbefb`` → ``2.14.0``, ``0.16`` → ``0.16.0``, ``0.16.1.2`` → ``0.16.1``,
    ``1!0.1`` → ``0.1.0``.

    A release candidate is checked as its release (it has that release's keys and features); the
    pre-release tag, epoch and the rest of the full version matter only to the known-issue ranges,
    which compare :attr:`ResolvedVersions.values` with PEP 440 ordering (``0.17.0rc0 < 0.17.0``).
    Written with three numbers, ``str()`` of the result is ``major.minor.micro``.

    Raises:
        packaging.version.InvalidVersion: ``default`` is not PEP 440 (a moeplan constant).
    """
    return _release_of(v if v is not None else default)


@functools.lru_cache(maxsize=256)
def _release_of(v: Version | str) -> Version:
    """:func:`release_version` of one version (or version text), computed once per version."""
    if isinstance(v, str):
        v = Version(v)
    major, minor, micro = (*v.release, 0, 0)[:3]
    return Version(f"{major}.{minor}.{micro}")


#: megatron-core 0.18 reworked CUDA graph settings: ``cuda_graph_modules`` (``cuda_graph_scope`` is its
#: deprecated alias) and ``cuda_graph_impl: full_iteration`` (before it: impl ``local`` with scope
#: ``full_iteration``), ``megatron_facts.md`` §3.13 (vendored in
#: ``tests/data/reference``); the rules, the exports and ``plan --save`` spell graph
#: settings by it
CUDA_GRAPH_MODULES_MCORE = Version("0.18.0")


def version_text(v: Version | None) -> str | None:
    """The version as written back (``str(Version)``), None when unknown."""
    return None if v is None else str(v)


@dataclass(frozen=True)
class ResolvedVersions:
    """Per package: the version (None when neither the user nor a known container states it) and its
    source (``"versions.<key>"`` or ``"container <release>: <table source>"``).

    Attributes:
        values: package key (see :data:`PACKAGES`) → ``Version`` or None.
        sources: package key → where the value came from (absent when unknown).
        container: the container release named in ``versions.container`` (``26.04``), or None.
        container_note: why the container's versions were or were not used (None without a container).
    """

    values: dict[str, Version | None] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)
    container: str | None = None
    container_note: str | None = None

    def get(self, package: str) -> Version | None:
        """The package's version, None when unknown."""
        return self.values.get(package)

    def known(self) -> dict[str, str]:
        """Package key → version text, for the packages whose version is known."""
        return {k: str(v) for k, v in self.values.items() if v is not None}

    def unknown(self) -> list[str]:
        """Package keys whose version is not known."""
        return [k for k in PACKAGES if self.values.get(k) is None]


#: a container release as NVIDIA names it: ``YY.MM`` or ``YY.MM.PP``, two ASCII digits each (a regular
#: expression, for the readers of text that holds one: :func:`find_release`, the log banner)
RELEASE_FORM = r"[0-9]{2}\.[0-9]{2}(?:\.[0-9]{2})?"
_RELEASE = re.compile(rf"(?<![0-9.])({RELEASE_FORM})(?![0-9.])")


def find_release(text: str | None) -> str | None:
    """The container release written in ``text``, the one reading of a release name: ``"25.09"`` →
    ``"25.09"``; ``"nvcr.io/nvidia/nemo:25.11.01"`` → ``"25.11.01"``; ``"26.02-alpha"`` → ``"26.02"``;
    ``"nvcr.io/nvidia/pytorch:26.04-py3"`` → ``"26.04"``.

    Returns:
        ``YY.MM`` or ``YY.MM.PP`` as written (ASCII digits, two each), or None when ``text`` is None or
        empty, holds a line break (no container tag does), or names no such release or more than one
        (``"latest"``, ``"25.9"``, ``"125.09"``, ``"25.09 or 25.11"``). Never raises.
    """
    if not text or "\n" in text:
        return None
    found = _RELEASE.findall(text)
    return found[0] if len(found) == 1 else None


def container_release(text: str | None) -> tuple[str, str] | None:
    """(family, release) of a container tag: ``nvcr.io/nvidia/nemo:26.04.01`` → ``("nemo", "26.04.01")``;
    a bare ``26.04`` is a NeMo release; ``nvcr.io/nvidia/pytorch:26.04-py3`` → ``("pytorch", "26.04")``.
    None when :func:`find_release` reads no release in the text."""
    release = find_release(text)
    if text is None or release is None:
        return None
    low = text.lower()
    family = "pytorch" if "pytorch" in low else "nemo"
    return family, release


def resolve_versions(
    stated: dict[str, str | None], container: str | None, lookup: Callable[[str, str], tuple[Any, str]]
) -> tuple[ResolvedVersions, list[tuple]]:
    """Parse the stated versions and fill the others from the container release's table.

    Args:
        stated: ``versions.<key>`` → text (None when not given), for every key of :data:`PACKAGES`.
        container: ``versions.container`` as written.
        lookup: ``(family, release) → (row or None, note)``, the container table
            (:func:`moeplan.catalog.containers.lookup_container`); a row has ``packages`` and ``source``.

    Returns:
        (versions, fills): ``fills`` is one ``(key, value, reason)`` per version taken from the
        container table (recorded by the resolver as a Resolution).

    Raises:
        InputError: a stated version that is not PEP 440.
    """
    values: dict[str, Version | None] = {}
    sources: dict[str, str] = {}
    for key in PACKAGES:
        text = stated.get(key)
        if text is None:
            values[key] = None
            continue
        values[key] = parse_version(text, f"versions.{key}")
        sources[key] = f"versions.{key}"
    fills: list[tuple] = []
    rel = container_release(container)
    note = None
    if container is not None and rel is None:
        note = f"versions.container {container!r}: no NN.NN release found; package versions not filled"
    elif rel is not None:
        row, note = lookup(*rel)
        if row is not None:
            for key, text in row.packages.items():
                if values.get(key) is None:
                    values[key] = parse_version(text, f"container {rel[1]} table ({key})")
                    sources[key] = f"container {rel[1]}: {row.source}"
                    why = f"container {rel[0]}:{rel[1]}: {row.source}"
                    if key in ("megatron_core", "megatron_bridge"):
                        why += " (the layout rules and the known-issue ranges)"
                    fills.append((f"versions.{key}", text, why))
    return (
        ResolvedVersions(values, sources, rel[1] if rel else None, note),
        fills,
    )


def rules_version_basis(versions: ResolvedVersions, rules_version: Version) -> dict[str, str | None]:
    """Which megatron-core version the layout rules compared, and why: the stated version, else the one
    the stated container ships (its table row, :func:`resolve_versions`; the export spells its keys for
    the same version), else the newest moeplan knows.

    Args:
        versions: the scenario's resolved versions.
        rules_version: ``Scenario.mcore_version``, the release the rules compared (:func:`release_version`).

    Returns:
        ``{"rules": "0.18.0", "basis": "stated" | "container" | "newest known", "container": release or
        None, "container_megatron_core": the container's megatron-core when it was filled from the
        container's row, else None}``.
    """
    source = versions.sources.get("megatron_core")
    stated = source == "versions.megatron_core"
    shipped = versions.get("megatron_core")
    basis = "stated" if stated else ("newest known" if source is None else "container")
    return {
        "rules": str(rules_version),
        "basis": basis,
        "container": versions.container,
        "container_megatron_core": None if stated or shipped is None else str(shipped),
    }


__all__ = [
    "COMPONENTS",
    "CUDA_GRAPH_MODULES_MCORE",
    "PACKAGES",
    "PACKAGE_NAMES",
    "PACKAGE_SPELLINGS",
    "RELEASE_FORM",
    "Component",
    "ResolvedVersions",
    "container_release",
    "find_release",
    "parse_version",
    "release_version",
    "resolve_versions",
    "rules_version_basis",
    "version_text",
]
