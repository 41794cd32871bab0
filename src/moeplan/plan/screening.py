"""The rule screen of the layout search: which rule, if any, rejects a candidate layout.

The search needs two things of a candidate's check (:func:`moeplan.rules.validate`): the first error
(sorted by rule id), and otherwise the first known issue a planner must avoid
(:func:`moeplan.rules.known_issue_checks.blocking_finding`). It reads no message, no warning and no
info finding, and every candidate of one request has the request's package versions.

:class:`RuleScreen` answers exactly what ``validate`` followed by ``blocking_finding`` answers, with
less work per candidate:

- the harvested known-issue families (``known_issue.harvested``) are not run: they only warn;
- the known-issue database rule (``known_issue.database``) is not run either. Of its findings only
  the *affected* entries (every package version known and in range) can reject a layout, as an error
  (a guaranteed failure) or as an issue to avoid (:attr:`KnownIssue.avoid`); the *possible* ones give
  one info finding. Whether an entry is affected depends on the versions alone, so the entries that
  could reject anything are found once per distinct versions, and only their triggers are evaluated
  per candidate. With no version stated (the usual request) no entry is affected and no trigger is
  evaluated at all.
"""

from __future__ import annotations

from collections.abc import Hashable

from moeplan.catalog.known_issue_table import KnownIssue, get_known_issue, known_issues
from moeplan.inputs.resolved import Scenario
from moeplan.inputs.versions import ResolvedVersions
from moeplan.plan.rule_memo import RuleMemo
from moeplan.rules import RULES, validate
from moeplan.rules.known_issue_checks import finding

#: the harvested known-issue families: warnings only, one trigger per harvested entry
HARVESTED_RULE = "known_issue.harvested"
#: the hand-entered known-issue database, evaluated here from the versions-affected entries only
DATABASE_RULE = "known_issue.database"
#: rules :meth:`RuleScreen.why_rejected` does not run through :func:`validate`
SCREEN_SKIPPED_RULES = frozenset({HARVESTED_RULE, DATABASE_RULE})


def _versions_key(v: ResolvedVersions) -> Hashable:
    """The package versions as a hashable value (the only input of an entry's version status)."""
    return tuple(sorted(v.values.items()))


def _avoided(k: KnownIssue) -> bool:
    """True when the planner drops layouts hitting ``k`` at affected versions (looked up by rule id,
    as :func:`~moeplan.rules.known_issue_checks.blocking_finding` does)."""
    entry = get_known_issue(k.rule_id)
    return entry is not None and entry.avoid


class RuleScreen:
    """Rejects candidate layouts as ``validate`` + ``blocking_finding`` would, for one plan call.

    Attributes:
        affected: versions key → the database entries whose every package version is known and in
            range and that can reject a layout (an error, or an issue to avoid), in database order;
            filled once per distinct versions.
        all_affected: versions key → every database entry whose every package version is known and in
            range, in database order (:meth:`affected_entries`).
    """

    def __init__(self) -> None:
        self.affected: dict[Hashable, tuple[KnownIssue, ...]] = {}
        self.all_affected: dict[Hashable, tuple[KnownIssue, ...]] = {}

    def affected_entries(self, versions: ResolvedVersions) -> tuple[KnownIssue, ...]:
        """The database entries whose every package version is known and in range at ``versions``
        (computed once per versions)."""
        key = _versions_key(versions)
        got = self.all_affected.get(key)
        if got is None:
            got = self.all_affected[key] = tuple(
                k for k in known_issues() if k.version_status(versions)[0] == "affected"
            )
        return got

    def rejecting_entries(self, versions: ResolvedVersions) -> tuple[KnownIssue, ...]:
        """Of :meth:`affected_entries`, those that can reject a layout: an error, or an issue to avoid
        (computed once per versions)."""
        key = _versions_key(versions)
        got = self.affected.get(key)
        if got is None:
            got = self.affected[key] = tuple(
                k for k in self.affected_entries(versions) if k.severity == "error" or _avoided(k)
            )
        return got

    def why_rejected(self, s: Scenario, memo: RuleMemo | None = None) -> str | None:
        """The rule id that rejects ``s``: the first error by rule id (the known-issue database's
        guaranteed failures included), else the first known issue to avoid by rule id; None when
        nothing rejects it. ``memo``: the rules' errors remembered for ``s``'s request
        (:class:`~moeplan.plan.rule_memo.RuleMemo`); None: every rule run."""
        if memo is not None:
            errors = memo.errors(s, SCREEN_SKIPPED_RULES)
        else:
            errors = [f.rule_id for f in validate(s, skip=SCREEN_SKIPPED_RULES).errors]
        hits = [k for k in self.rejecting_entries(s.versions) if k.triggered(s)]
        errors += [k.rule_id for k in hits if k.severity == "error"]
        if errors:
            return min(errors)
        avoid = [k.rule_id for k in hits if _avoided(k)]
        return min(avoid) if avoid else None

    def skipped_warning_ids(self, s: Scenario) -> tuple[str, ...]:
        """The rule ids of the warning findings the rules :meth:`why_rejected` does not run give ``s``
        (:data:`SCREEN_SKIPPED_RULES`): the harvested families', run here, and the database's, from its
        entries affected at ``s``'s versions (found once per versions) whose trigger ``s`` meets (an
        entry's finding is a warning by its severity, or at a dev checkout that may carry the fix,
        :func:`~moeplan.rules.known_issue_checks.finding`; the possible entries give only an info)."""
        out = [f.rule_id for f in RULES[HARVESTED_RULE].check(s) if f.severity == "warning"]
        found = (finding(k, s.versions) for k in self.affected_entries(s.versions) if k.triggered(s))
        return (*out, *(f.rule_id for f in found if f.severity == "warning"))


__all__ = ["DATABASE_RULE", "HARVESTED_RULE", "SCREEN_SKIPPED_RULES", "RuleScreen"]
