"""Deployment facts of the communication libraries (DeepEP, HybridEP, NCCL), read lazily from
``catalog/data/comm_libraries.yaml``: what a build or a setting must be for a layout to run, each with
the public source (file, line and release) it comes from and the constants it compares with.

:func:`comm_fact` answers one fact by id; the table is validated on load (every key known, severity
and kind from their sets, a source and a statement for each).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources

import yaml

from moeplan.inputs.resolved import Scenario
from moeplan.structure.hybridep_env import nvlink_reach_gpus

#: severities a fact may carry: ``error`` (the library asserts or fails at start-up), ``warning`` (it
#: runs, slower)
SEVERITIES = ("error", "warning")
#: verdict classes of a fact's finding (:class:`moeplan.rules.base.Finding` ``kind``)
KINDS = ("unsupported", "invalid", "warn")
_KEYS = {"library", "severity", "kind", "statement", "source", "values"}


class CommTableError(ValueError):
    """The packaged table of communication-library facts is malformed (a moeplan bug, caught by the tests)."""


@dataclass(frozen=True)
class CommFact:
    """One deployment fact.

    Attributes:
        id: the fact's id; its rule is ``deployment.<id>``.
        library: ``DeepEP``, ``HybridEP`` or ``NCCL``.
        severity: ``error`` or ``warning`` (:data:`SEVERITIES`).
        kind: ``unsupported``, ``invalid`` or ``warn`` (:data:`KINDS`).
        statement: the fact in one English line.
        source: the public source: file, line and release.
        values: the named constants the check compares with (``max_nvl_peers: 8``).
    """

    id: str
    library: str
    severity: str
    kind: str
    statement: str
    source: str
    values: dict

    def value(self, name: str):
        """The constant ``name`` of :attr:`values`.

        Raises:
            CommTableError: the fact has no such constant.
        """
        if name not in self.values:
            raise CommTableError(f"comm_libraries.yaml {self.id}: no value {name!r}")
        return self.values[name]


def parse_facts(data: dict) -> dict[str, CommFact]:
    """Validate the table mapping (the YAML's content) into facts keyed by id.

    Raises:
        CommTableError: a missing schema, unknown or missing keys, a severity or kind not allowed.
    """
    if not isinstance(data, dict) or data.get("schema") != 1 or not isinstance(data.get("facts"), dict):
        raise CommTableError("comm_libraries.yaml: expected {schema: 1, facts: {...}}")
    out = {}
    for fid, row in data["facts"].items():
        if not isinstance(row, dict) or set(row) != _KEYS:
            raise CommTableError(f"comm_libraries.yaml {fid}: keys must be {sorted(_KEYS)}")
        if row["severity"] not in SEVERITIES or row["kind"] not in KINDS:
            raise CommTableError(f"comm_libraries.yaml {fid}: severity in {SEVERITIES}, kind in {KINDS}")
        if not row["statement"] or not row["source"] or not isinstance(row["values"], dict):
            raise CommTableError(f"comm_libraries.yaml {fid}: a statement, a source and a values mapping")
        if not all(isinstance(k, str) for k in row["values"]):  # YAML reads a bare off / no / yes as a bool
            raise CommTableError(f"comm_libraries.yaml {fid}: value names must be strings")
        out[str(fid)] = CommFact(str(fid), **{k: row[k] for k in sorted(_KEYS)})
    return out


@functools.cache
def comm_facts() -> dict[str, CommFact]:
    """Every fact of the packaged table, validated (cached)."""
    text = resources.files("moeplan.catalog").joinpath("data").joinpath("comm_libraries.yaml").read_text("utf-8")
    return parse_facts(yaml.safe_load(text))


def comm_fact(fact_id: str) -> CommFact:
    """The fact ``fact_id``.

    Raises:
        CommTableError: no such fact (a moeplan bug: rules name their facts literally).
    """
    try:
        return comm_facts()[fact_id]
    except KeyError:
        raise CommTableError(f"comm_libraries.yaml: no fact {fact_id!r}") from None


def hybridep_reach_gpus(s: Scenario, environment: Mapping[str, str] | None = None) -> int | None:
    """The GPUs a HybridEP rank of ``s`` shares memory with over NVLink
    (:func:`moeplan.structure.hybridep_env.nvlink_reach_gpus`: the GPU's NVLink domain, or the node's GPUs
    with ``USE_MNNVL`` set to a value of the ``hybridep_mnnvl_off`` fact) under ``environment`` (default:
    the scenario's); None without a GPU."""
    if s.gpu is None:
        return None
    env = s.environment if environment is None else environment
    return nvlink_reach_gpus(s.gpu.scaleup_domain_gpus, s.gpus_per_node, env, _mnnvl_off_values())


@functools.cache
def _mnnvl_off_values() -> frozenset[str]:
    """The ``USE_MNNVL`` values that turn HybridEP's fabric handles off (``hybridep_mnnvl_off``), lower case."""
    return frozenset(str(v).lower() for v in comm_fact("hybridep_mnnvl_off").value("disabled_values"))


__all__ = [
    "KINDS",
    "SEVERITIES",
    "CommFact",
    "CommTableError",
    "comm_fact",
    "comm_facts",
    "hybridep_reach_gpus",
    "parse_facts",
]
