"""Known issues: release-specific bugs from the known-issue database
(:mod:`moeplan.catalog.known_issues`, ``catalog/data/known_issues.yaml``), reported only when the
scenario meets an entry's trigger.

- Every package version the entry names is known and in its affected range: one finding with rule id
  ``known_issue.<id>`` — an error for a guaranteed failure (an assertion every run hits), else a
  warning — naming the symptom, the versions matched and the source; the fix is the workaround and
  the upgrade.
- Some of those versions are not stated (and no ``versions.container`` fills them): one info finding,
  ``known_issue.versions_unknown``, listing the issues that could apply and the versions to check.
- A stated version outside the range: nothing.

Generic warnings of the other rule families never stand in for these findings.
"""

from __future__ import annotations

from moeplan.catalog.containers import container_table, lookup_container
from moeplan.catalog.known_issues import KnownIssue, get_known_issue, known_issues
from moeplan.errors import short_repr
from moeplan.rules.base import Finding, rule
from moeplan.spec.scenario import Scenario
from moeplan.spec.versions import container_release

SOURCE = "moeplan known-issue database (catalog/data/known_issues.yaml)"
UNKNOWN_RULE = "known_issue.versions_unknown"


def matches(s: Scenario) -> list[tuple[KnownIssue, str, list[str]]]:
    """Every entry whose trigger the scenario meets and whose versions do not rule it out:
    ``(issue, "affected" | "possible", details)`` in database order."""
    out = []
    for k in known_issues():
        if not k.triggered(s):
            continue
        status, details = k.version_status(s.versions)
        if status != "not_affected":
            out.append((k, status, details))
    return out


def _keys(k: KnownIssue) -> tuple[str, ...]:
    keys = [f"versions.{p.package}" for p in k.packages]
    keys += [p.split(".", 1)[1] for p in k.paths if p.startswith("layout.")]
    return tuple(dict.fromkeys(keys))


def finding(k: KnownIssue, details: list[str]) -> Finding:
    """The finding of an issue whose versions are all in range."""
    fix = k.workaround
    up = k.upgrade_text()
    if up:
        fix = f"{fix}; fixed by: {up}"
    return Finding(
        k.rule_id,
        k.severity,
        f"known issue {k.id}: {k.title} — {k.symptom_text()} ({'; '.join(details)}; {k.source})",
        fix,
        "unsupported" if k.severity == "error" else "warn",
        SOURCE,
        _keys(k),
    )


def versions_to_state(s: Scenario, issues: list[KnownIssue]) -> str:
    """What the user should state to decide ``issues``: the ``versions.<package>`` keys they depend on
    that the scenario leaves unknown (neither stated nor given by its container); without a container,
    ``versions.container`` and the keys no container row gives (its table has no NCCL column, so
    NCCL's issues always need ``versions.nccl``)."""
    keys = sorted({f"versions.{p.package}" for k in issues for p in k.packages if s.versions.get(p.package) is None})
    if s.input.versions.container:
        return ", ".join(keys) if keys else "versions.*"
    covered = {p for row in container_table().values() for p in row.packages}
    rest = [k for k in keys if k.removeprefix("versions.") not in covered]
    return "versions.container" + (f" and {', '.join(rest)}" if rest else "")


def unknown_versions_finding(possible: list[tuple[KnownIssue, str, list[str]]], s: Scenario) -> Finding:
    """One info finding for the issues that apply unless a version not stated rules them out."""
    parts = [f"{k.id} [{k.symptom}] if {' and '.join(d)}" for k, _, d in possible]
    keys = sorted({f"versions.{p.package}" for k, _, _ in possible for p in k.packages})
    ask = versions_to_state(s, [k for k, _, _ in possible])
    return Finding(
        UNKNOWN_RULE,
        "info",
        f"{len(possible)} known issue(s) match this layout but the versions that decide them are not stated: "
        + "; ".join(parts)
        + f" — state {ask} (moeplan known-issues lists them)",
        None,
        "info",
        SOURCE,
        tuple(keys),
    )


def blocking_finding(findings) -> str | None:
    """Rule id of the first ``known_issue.<id>`` finding (of a check already run) whose issue a planner
    must avoid (:attr:`KnownIssue.avoid`: a confirmed hang, crash or assertion at the scenario's
    versions); None otherwise."""
    for f in findings:
        if f.rule_id.startswith("known_issue.") and f.severity != "info":
            k = get_known_issue(f.rule_id)
            if k is not None and k.avoid:
                return f.rule_id
    return None


def blocking_issue(s: Scenario) -> str | None:
    """Rule id of the first issue a planner must avoid for ``s``: its versions are all in range and it
    is a confirmed hang, crash or assertion (NaN, wrong results, slowdowns, OOMs and open reports are
    only flagged)."""
    for k, status, _ in matches(s):
        if status == "affected" and k.avoid:
            return k.rule_id
    return None


def summary(s: Scenario) -> list[dict]:
    """The issues a scenario may hit, as the planner's candidate JSON lists them: ``{id, status
    (affected | possible), symptom, severity, source}``."""
    return [
        {"id": k.id, "status": status, "symptom": k.symptom, "severity": k.severity, "source": k.source}
        for k, status, _ in matches(s)
    ]


@rule(
    "known_issue.database",
    SOURCE,
    "release-specific bugs (public issues / PRs) whose trigger the scenario meets and whose affected "
    "versions include the scenario's: known_issue.<id> per issue, known_issue.versions_unknown when "
    "versions are not stated",
)
def _known(s, e):
    found = matches(s)
    out = [finding(k, d) for k, status, d in found if status == "affected"]
    possible = [m for m in found if m[1] == "possible"]
    if possible:
        out.append(unknown_versions_finding(possible, s))
    return out


@rule(
    "versions.container_unknown",
    "catalog/data/containers.yaml (NeMo / PyTorch container release notes)",
    "a versions.container with no NN.NN release, or a release the container table does not hold, gives no "
    "package versions (known issues, key spellings) and no release recipe: said, not silently skipped",
)
def _container_unknown(s, e):
    text = s.input.versions.container
    if not text:
        return None
    rel = container_release(text)
    if rel is not None and lookup_container(*rel)[0] is not None:  # a patch release takes its base's row
        return None
    recipe = "; the recipe fills come from the current tables" if s.input.recipe_defaults != "none" else ""
    fix = "state a release moeplan knows (moeplan known-issues --containers lists them) or the versions.* you run"
    if rel is None:
        msg = f"versions.container {short_repr(text)} names no NN.NN release: no package versions come from it{recipe}"
        return [e.warning(msg, fix, "versions.container")]
    known = sorted((r for f, r in container_table() if f == rel[0]), key=_release_order)
    return [
        e.warning(
            f"versions.container {short_repr(text)}: {rel[0]} {rel[1]} is not in moeplan's container table (known: "
            f"{', '.join(known)}), so no package versions come from it{recipe}",
            fix,
            "versions.container",
        )
    ]


def _release_order(release: str) -> tuple[int, ...]:
    return tuple(int(x) for x in release.split(".") if x.isdigit())


__all__ = [
    "SOURCE",
    "UNKNOWN_RULE",
    "blocking_finding",
    "blocking_issue",
    "finding",
    "matches",
    "summary",
    "unknown_versions_finding",
    "versions_to_state",
]
