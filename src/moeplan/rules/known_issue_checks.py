"""Known issues: release-specific bugs from the known-issue database
(:mod:`moeplan.catalog.known_issue_table`, ``catalog/data/known_issues.yaml``), reported only when the
scenario meets an entry's trigger.

- Every package version the entry names is known and in its affected range: one finding with rule id
  ``known_issue.<id>`` — an error for a guaranteed failure (an assertion every run hits), else a
  warning — naming the symptom, the versions matched and the source; the fix is the workaround and
  the upgrade.
- Some of those versions are not stated (and no ``versions.container`` fills them): one info finding,
  ``known_issue.versions_unknown`` (:func:`versions_unknown_message`, also the line ``estimate`` and
  ``plan`` print), naming the issues that could apply, the container moeplan assumes
  (:func:`assumed_container`) with how many of them apply at its versions, and how many stating
  ``versions.container`` (and the keys no container gives) would decide.
- A stated version outside the range: nothing.

Generic warnings of the other rule families never stand in for these findings.

The findings' texts are messages (``i18n/*/rules_known_issues.yaml``); an issue's own title, workaround
and size are data of the database, passed to them as :class:`IssueText` parameters.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from moeplan.catalog.containers import ContainerRow, container_table, lookup_container
from moeplan.catalog.known_issue_table import (
    KnownIssue,
    PackageRange,
    fix_by_ancestry,
    get_known_issue,
    is_dev_checkout,
    known_issues,
)
from moeplan.catalog.perf_recipes import release_bridge_tag
from moeplan.errors import short_repr
from moeplan.i18n import known_issue_text
from moeplan.i18n.messages import Items, Message, msg
from moeplan.inputs.resolved import Scenario
from moeplan.inputs.versions import PACKAGE_NAMES, PACKAGES, ResolvedVersions, container_release, resolve_versions
from moeplan.rules.base import Finding, rule

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


@dataclass(frozen=True)
class IssueText:
    """One free-text field of a known issue (its ``title``, ``workaround`` or ``size``) as a message
    parameter.

    These texts are data, not catalogue entries: the English one is the database's
    (``catalog/data/known_issues.yaml``), the Chinese one is in ``i18n/zh.yaml`` under
    ``known_issues: {<issue id>: {title, workaround, size}}`` (:func:`moeplan.i18n.known_issue_text`),
    both keyed by the issue's id. A template names the field ``{title}`` in English (the text itself)
    and ``{title.zh}`` in Chinese (:attr:`zh`, looked up when the message is printed; the English
    text where zh.yaml has none). One message per issue would copy the database into the catalogues.

    Attributes:
        issue_id: the known issue's id.
        field: ``title``, ``workaround`` or ``size``.
        english: the text as the database writes it.
    """

    issue_id: str
    field: str
    english: str

    def __format__(self, spec: str) -> str:
        return format(self.english, spec)

    def __str__(self) -> str:
        return self.english

    @property
    def zh(self) -> str:
        """The Chinese text (``i18n/zh.yaml`` ``known_issues``), or the English one where there is none."""
        return known_issue_text(self.issue_id, self.field, "zh") or self.english


#: a symptom class (:data:`~moeplan.catalog.known_issue_table.SYMPTOMS`) → its message in words
#: (``NaN loss / gradients``), as the finding of an affected issue names it
SYMPTOM_MESSAGES = {
    "hang": lambda: msg("known_issue.symptom.hang"),
    "nan": lambda: msg("known_issue.symptom.nan"),
    "wrong_result": lambda: msg("known_issue.symptom.wrong_result"),
    "oom": lambda: msg("known_issue.symptom.oom"),
    "slowdown": lambda: msg("known_issue.symptom.slowdown"),
    "crash": lambda: msg("known_issue.symptom.crash"),
    "assertion": lambda: msg("known_issue.symptom.assertion"),
    "unspecified": lambda: msg("known_issue.symptom.unspecified"),
}
#: a symptom class → its message as the key itself (``nan``), as the unknown-versions finding names it
SYMPTOM_KEY_MESSAGES = {
    "hang": lambda: msg("known_issue.symptom_key.hang"),
    "nan": lambda: msg("known_issue.symptom_key.nan"),
    "wrong_result": lambda: msg("known_issue.symptom_key.wrong_result"),
    "oom": lambda: msg("known_issue.symptom_key.oom"),
    "slowdown": lambda: msg("known_issue.symptom_key.slowdown"),
    "crash": lambda: msg("known_issue.symptom_key.crash"),
    "assertion": lambda: msg("known_issue.symptom_key.assertion"),
    "unspecified": lambda: msg("known_issue.symptom_key.unspecified"),
}


def symptom_message(k: KnownIssue) -> Message:
    """The issue's symptom in words, with its size when it has one (:meth:`KnownIssue.symptom_text`)."""
    words = SYMPTOM_MESSAGES[k.symptom]()
    return (
        msg("known_issue.symptom_with_size", symptom=words, size=IssueText(k.id, "size", k.size)) if k.size else words
    )


def _range(p: PackageRange) -> str:
    return p.text or str(p.affected)


def fix_message(k: KnownIssue) -> Message:
    """The issue's workaround, and the releases that fix it (:meth:`KnownIssue.upgrade_text`)."""
    ups = [
        msg("known_issue.at_least", package=PACKAGE_NAMES[p.package], version=str(p.fixed))
        for p in k.packages
        if p.fixed is not None
    ]
    if not ups:
        return msg("known_issue.workaround", workaround=IssueText(k.id, "workaround", k.workaround))
    upgrades = functools.reduce(lambda a, b: msg("known_issue.upgrade_and", a=a, b=b), ups)
    return msg(
        "known_issue.workaround_and_upgrade", workaround=IssueText(k.id, "workaround", k.workaround), upgrades=upgrades
    )


def may_carry_fix(k: KnownIssue, versions: ResolvedVersions) -> bool:
    """True when megatron-core is a dev checkout that may already carry the issue's megatron-core fix:
    its number is in range, but moeplan has no ancestry fact for it
    (:func:`~moeplan.catalog.known_issue_table.fix_by_ancestry` is None)."""
    v = versions.get("megatron_core")
    fixed = any(p.package == "megatron_core" and p.fixed is not None for p in k.packages)
    return fixed and is_dev_checkout(v) and fix_by_ancestry(k, v) is None


def finding(k: KnownIssue, versions: ResolvedVersions) -> Finding:
    """The finding of an issue whose versions (``versions``, the scenario's) are all in range: the
    title, the symptom, each package's version and affected range, the source; the fix is the
    workaround and the upgrade. At a megatron-core dev checkout that may already carry the fix
    (:func:`may_carry_fix`) it says so and is a warning, whatever the issue's certainty."""
    details = Items(
        msg(
            "known_issue.version_in_range",
            package=PACKAGE_NAMES[p.package],
            version=str(versions.get(p.package)),
            range=_range(p),
        )
        for p in k.packages
    )
    text = msg(
        "known_issue.affected",
        id=k.id,
        title=IssueText(k.id, "title", k.title),
        symptom=symptom_message(k),
        details=details,
        source=k.source,
    )
    severity = k.severity
    if may_carry_fix(k, versions):  # unknown whether the bug is there: never an error
        text = msg("dev_checkouts.issue_may_carry_fix", finding=text, version=str(versions.get("megatron_core")))
        severity = "warning"
    return Finding(
        k.rule_id,
        severity,
        text,
        fix_message(k),
        "unsupported" if severity == "error" else "warn",
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
    return msg("known_issue.state_container_and", keys=", ".join(rest)) if rest else "versions.container"


@functools.lru_cache(maxsize=16)
def _versions_at_assumed(stated: tuple[tuple[str, Any], ...]) -> ResolvedVersions:
    """The stated versions (``(package, version or None)`` pairs) completed from the assumed
    container's row (:func:`assumed_container`), once per distinct stated versions (a plan checks
    thousands of layouts at the same ones)."""
    at_row, _ = resolve_versions(dict(stated), assumed_container().release, lookup_container)
    return at_row


@functools.cache
def _container_packages() -> frozenset[str]:
    """Every package some container row gives a version of."""
    return frozenset(p for row in container_table().values() for p in row.packages)


def assumed_container() -> ContainerRow:
    """The container release moeplan assumes when ``versions.container`` is not stated: the newest NeMo
    release of the container table (``catalog/data/containers.yaml``), the release whose software
    efficiency the step-time model also takes (``moeplan.model.constants`` ``newest_release``)."""
    rows = [r for (family, _), r in container_table().items() if family == "nemo"]
    return max(rows, key=lambda r: _release_order(r.release))


def _issue_ids(issues: list[KnownIssue]) -> Items:
    """``<id> [<symptom>]`` per issue, comma-separated."""
    return Items(
        (msg("deployment.issue_with_symptom", id=k.id, symptom=SYMPTOM_KEY_MESSAGES[k.symptom]()) for k in issues), ", "
    )


def _decides(s: Scenario, issues: list[KnownIssue]) -> Message:
    """What stating versions buys: how many of ``issues`` ``versions.container`` would decide (every
    package it leaves unknown is one a container row gives) and which keys decide the rest."""
    keys = versions_to_state(s, issues)
    if s.input.versions.container:
        return msg("deployment.decide_all", keys=keys, n=len(issues))
    covered = _container_packages()
    decided = sum(all(p.package in covered for p in k.packages if s.versions.get(p.package) is None) for k in issues)
    if decided == len(issues):
        return msg("deployment.decide_all", keys=keys, n=len(issues))
    rest = sorted(
        {f"versions.{p.package}" for k in issues for p in k.packages if s.versions.get(p.package) is None}
        - {f"versions.{p}" for p in covered}
    )
    return msg("deployment.decide_some", decided=decided, keys=", ".join(rest), rest=len(issues) - decided)


def versions_unknown_message(s: Scenario, issues: list[KnownIssue]) -> Message:
    """The one line on versions not stated: the known issues (``issues``) that apply unless a version
    not stated rules them out, the container moeplan assumes (:func:`assumed_container`) with how many
    of them apply at its versions, and how many stating ``versions.container`` (and the keys no
    container gives, such as ``versions.nccl``) would decide. With ``versions.container`` stated, no
    container is assumed: the keys still unknown are named."""
    ids = _issue_ids(issues)
    if s.input.versions.container:
        return msg("deployment.versions_unknown_partial", n=len(issues), ids=ids, decides=_decides(s, issues))
    row = assumed_container()
    at_row = _versions_at_assumed(tuple((k, getattr(s.input.versions, k)) for k in PACKAGES))
    applies = sum(k.version_status(at_row)[0] == "affected" for k in issues)
    packages = ", ".join(f"{PACKAGE_NAMES[p]} {v}" for p, v in row.packages.items())
    return msg(
        "deployment.versions_unknown",
        n=len(issues),
        ids=ids,
        container=f"{row.family}:{row.release}",
        packages=packages,
        applies=applies,
        decides=_decides(s, issues),
    )


def affected_at_assumed(s: Scenario, issue: KnownIssue) -> str | None:
    """The container moeplan assumes (``family:release``, :func:`assumed_container`) when ``issue`` affects
    its versions completed with the scenario's stated ones; None when a container is stated or it does not."""
    if s.input.versions.container:
        return None
    at_row = _versions_at_assumed(tuple((k, getattr(s.input.versions, k)) for k in PACKAGES))
    if issue.version_status(at_row)[0] != "affected":
        return None
    row = assumed_container()
    return f"{row.family}:{row.release}"


def versions_unknown_short(s: Scenario, issues: list[KnownIssue]) -> Message:
    """The plan's one-line form of :func:`versions_unknown_message` (a plan's default output stays one
    screen): how many known issues may apply and, with no container stated, how many apply at the
    container moeplan assumes; ``moeplan check`` gives the full line."""
    if s.input.versions.container:
        return msg("deployment.versions_unknown_partial_short", n=len(issues))
    row = assumed_container()
    at_row = _versions_at_assumed(tuple((k, getattr(s.input.versions, k)) for k in PACKAGES))
    applies = sum(k.version_status(at_row)[0] == "affected" for k in issues)
    return msg(
        "deployment.versions_unknown_short", n=len(issues), applies=applies, container=f"{row.family}:{row.release}"
    )


def unknown_versions_finding(possible: list[tuple[KnownIssue, str, list[str]]], s: Scenario) -> Finding:
    """One info finding for the issues that apply unless a version not stated rules them out
    (:func:`versions_unknown_message`)."""
    issues = [k for k, _, _ in possible]
    keys = sorted({f"versions.{p.package}" for k in issues for p in k.packages})
    return Finding(
        UNKNOWN_RULE,
        "info",
        versions_unknown_message(s, issues),
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
    out = [finding(k, s.versions) for k, status, _ in found if status == "affected"]
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
    if rel is None:
        said = msg("versions.container_unknown.no_release", text=short_repr(text))
    else:
        known = sorted((r for f, r in container_table() if f == rel[0]), key=_release_order)
        said = msg(
            "versions.container_unknown.not_in_table",
            text=short_repr(text),
            family=rel[0],
            release=rel[1],
            known=", ".join(known),
        )
    if s.input.recipe_defaults != "none":
        said = _recipe_clause(said, rel)
    return [e.warning(said, msg("versions.container_unknown.fix"), "versions.container")]


def _recipe_clause(said: Message, rel: tuple[str, str] | None) -> Message:
    """``said`` with where the recipe fills of an unknown container come from: its NeMo release's own
    workload configs where ``catalog/data/mbridge_perf_recipes_by_release.yaml`` has them (26.08: Megatron
    Bridge v0.6.0, whose package versions the release notes do not list yet), else the current tables."""
    tag = release_bridge_tag(rel[1]) if rel is not None and rel[0] == "nemo" else None
    if rel is None or tag is None:
        return msg("versions.container_unknown.recipe_from_current_tables", message=said)
    return msg("versions.container_unknown.recipe_from_release_configs", message=said, release=rel[1], tag=tag)


def _release_order(release: str) -> tuple[int, ...]:
    return tuple(int(x) for x in release.split(".") if x.isdigit())


__all__ = [
    "SOURCE",
    "SYMPTOM_KEY_MESSAGES",
    "SYMPTOM_MESSAGES",
    "UNKNOWN_RULE",
    "IssueText",
    "assumed_container",
    "blocking_finding",
    "blocking_issue",
    "finding",
    "fix_message",
    "matches",
    "summary",
    "symptom_message",
    "unknown_versions_finding",
    "versions_to_state",
    "versions_unknown_message",
]
