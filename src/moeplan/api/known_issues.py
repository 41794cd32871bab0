"""Report of ``moeplan known-issues``: the known-issue database (:mod:`moeplan.catalog.known_issue_table`:
the hand-entered entries and the harvested ones, with their families), filtered by package or symptom,
and the container release → package versions table."""

from __future__ import annotations

from collections import Counter

from packaging.version import Version

from moeplan.catalog.containers import list_containers
from moeplan.catalog.known_issue_table import SYMPTOMS, all_known_issues
from moeplan.errors import UnknownNameError
from moeplan.inputs.versions import PACKAGE_SPELLINGS, PACKAGES
from moeplan.rules.known_issue_families import family_message, is_broad


def _package_key(name: str) -> str:
    key = PACKAGE_SPELLINGS.get(name.strip().lower(), name.strip().lower())
    if key not in PACKAGES:
        raise UnknownNameError("--package", name, PACKAGES, "one of")
    return key


def known_issues_report(package: str | None = None, symptom: str | None = None, containers: bool = False) -> dict:
    """The known issues, each as :meth:`KnownIssue.to_dict` (id, rule_id, title, source, related,
    reported, packages {key: {affected, fixed}}, trigger, symptom, size, certainty, severity,
    workaround, notes), in database order.

    Args:
        package: only issues naming this package (``megatron_core``, ``megatron-core``, ``te``, ...).
        symptom: only issues with this symptom (hang, nan, wrong_result, oom, slowdown, crash, assertion;
            unspecified: a harvested fix whose text names no failure mode).
        containers: also list the container table (``containers``: family, release, packages, source).

    Returns:
        ``{"count", "filters": {package, symptom}, "issues": [...], "families": [...], "symptoms": {name:
        text}}`` and, with ``containers``, ``"containers": [...]``. ``issues`` holds the hand-entered
        entries (``family`` null) then the harvested ones (each with its ``family``); ``families``
        counts the harvested ones (:func:`families_summary`).

    Raises:
        InputError: an unknown package or symptom (with did-you-mean).
    """
    pkg = _package_key(package) if package is not None else None
    if symptom is not None and symptom not in SYMPTOMS:
        raise UnknownNameError("--symptom", symptom, SYMPTOMS, "one of")
    rows = [
        k.to_dict()
        for k in all_known_issues()
        if (pkg is None or any(p.package == pkg for p in k.packages)) and (symptom is None or k.symptom == symptom)
    ]
    doc = {
        "count": len(rows),
        "filters": {"package": pkg, "symptom": symptom},
        "issues": rows,
        "families": families_summary(rows),
        "symptoms": dict(SYMPTOMS),
    }
    if containers:
        doc["containers"] = list_containers()
    return doc


def families_summary(rows: list[dict]) -> list[dict]:
    """The harvested entries among ``rows`` (:meth:`KnownIssue.to_dict` mappings) by family: ``{family,
    name (words), count, newest_fixed, symptoms {symptom: count}, broad (reported as info)}``, largest
    family first."""
    by: dict[str, list[dict]] = {}
    for r in rows:
        if r.get("family"):
            by.setdefault(r["family"], []).append(r)
    out = []
    for fam, members in by.items():
        fixed = [f for r in members for p in r["packages"].values() if (f := p["fixed"])]
        out.append(
            {
                "family": fam,
                "name": family_message(fam),
                "count": len(members),
                "newest_fixed": max(fixed, key=Version) if fixed else None,
                "symptoms": dict(sorted(Counter(r["symptom"] for r in members).items())),
                "broad": is_broad(fam),
            }
        )
    return sorted(out, key=lambda f: (-f["count"], f["family"]))


__all__ = ["families_summary", "known_issues_report"]
