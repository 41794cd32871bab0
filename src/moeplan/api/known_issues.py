"""Report of ``moeplan known-issues``: the known-issue database (:mod:`moeplan.catalog.known_issue_table`),
filtered by package or symptom, and the container release → package versions table."""

from __future__ import annotations

from moeplan.catalog.containers import list_containers
from moeplan.catalog.known_issue_table import SYMPTOMS, known_issues
from moeplan.errors import UnknownNameError
from moeplan.inputs.versions import PACKAGE_SPELLINGS, PACKAGES


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
        symptom: only issues with this symptom (hang, nan, wrong_result, oom, slowdown, crash, assertion).
        containers: also list the container table (``containers``: family, release, packages, source).

    Returns:
        ``{"count", "filters": {package, symptom}, "issues": [...], "symptoms": {name: text}}`` and, with
        ``containers``, ``"containers": [...]``.

    Raises:
        InputError: an unknown package or symptom (with did-you-mean).
    """
    pkg = _package_key(package) if package is not None else None
    if symptom is not None and symptom not in SYMPTOMS:
        raise UnknownNameError("--symptom", symptom, SYMPTOMS, "one of")
    rows = [
        k.to_dict()
        for k in known_issues()
        if (pkg is None or any(p.package == pkg for p in k.packages)) and (symptom is None or k.symptom == symptom)
    ]
    doc = {
        "count": len(rows),
        "filters": {"package": pkg, "symptom": symptom},
        "issues": rows,
        "symptoms": dict(SYMPTOMS),
    }
    if containers:
        doc["containers"] = list_containers()
    return doc


__all__ = ["known_issues_report"]
