"""Harvested known issues, folded by family.

The harvested database (:func:`moeplan.catalog.known_issue_table.harvested_issues`, written by
``scripts/harvest_known_issues.py`` from merged upstream fixes) has hundreds of entries whose triggers
are the features a fix touched. One per entry would flood a check, so a scenario gets at most one
finding per family (the feature a fix belongs to, e.g. ``mcore_pp``: megatron-core pipeline
parallelism):

- ``known_issue.family.<family>`` (warning): entries of the family whose trigger the scenario meets
  and whose affected range holds its version: how many bugs of the family were fixed after the stated
  release, the newest fix release, their symptoms and sources, "upgrade to …"; info instead for a
  family of a feature nearly every run uses (:data:`BROAD_FEATURES`), which says so;
- ``known_issue.family_watch`` (info, one finding): families whose feature the scenario uses at a
  release at or after every harvested fix of the family (at least :data:`WATCH_MIN` fixes). Nothing is
  known to be wrong there, so it is only info: the family's history says its next bug is likely, not
  that the release has one;
- nothing while the version an entry names is not stated (nor given by ``versions.container``): the
  hand-entered database's ``known_issue.versions_unknown`` already asks for the versions, and a list
  of every family that might apply to an unversioned layout would say little.

Titles and workarounds of harvested entries are composed from their facts with the fragments of
``i18n/*/rules_harvested.yaml`` (:func:`compose_title`, :func:`compose_workaround`), so both languages
are built the same way and no source's prose is shipped.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable

from packaging.version import Version

from moeplan.catalog.known_issue_table import (
    KnownIssue,
    dev_checkout,
    fix_by_ancestry,
    harvested_issues,
    is_dev_checkout,
)
from moeplan.i18n.messages import Items, Message, msg
from moeplan.inputs.resolved import Scenario
from moeplan.inputs.versions import PACKAGE_NAMES, ResolvedVersions
from moeplan.rules.base import Finding, rule

SOURCE = "moeplan harvested known issues (catalog/data/known_issues_harvested.yaml)"
WATCH_RULE = "known_issue.family_watch"
#: a family is watched (info past its newest fix) once it holds this many fixed bugs
WATCH_MIN = 3
#: sources a family finding names (the newest fixes first); the rest are counted
SOURCES_SHOWN = 3
#: features on in nearly every run of a model that has them (MoE routing, experts and dispatch, the
#: distributed optimizer, overlapped gradient reduction, FP8 recipes, a model's checkpoint conversion,
#: Transformer Engine's attention kernels):
#: their families report fixes after the stated release as info, a base rate of the code every such
#: run executes, not a match on a layout choice (a warning for each would flag every published MoE
#: recipe several times; tests/test_known_issue_families.py counts the warnings on them)
BROAD_FEATURES = frozenset(
    {"moe_experts", "moe_routing", "moe_dispatch", "dist_optimizer", "grad_sync", "fp8", "conversion", "attention"}
)

#: a symptom class → its words in a harvested title or family finding; ``wrong_result`` is a fix whose
#: text says a result was wrong (it reads "incorrect results", not the hand-entered database's
#: "silently wrong results": the fix does not say whether it was silent); ``unspecified`` is a fix whose
#: text names no failure mode
SYMPTOM_MESSAGES: dict[str, Callable[[], Message]] = {
    "hang": lambda: msg("harvested.symptom.hang"),
    "nan": lambda: msg("harvested.symptom.nan"),
    "wrong_result": lambda: msg("harvested.symptom.wrong_result"),
    "oom": lambda: msg("harvested.symptom.oom"),
    "slowdown": lambda: msg("harvested.symptom.slowdown"),
    "crash": lambda: msg("harvested.symptom.crash"),
    "assertion": lambda: msg("harvested.symptom.assertion"),
    "unspecified": lambda: msg("harvested.symptom.unspecified"),
}
#: a family's prefix → the package (a ``versions:`` key) its fixes version
FAMILY_PACKAGES = {
    "mcore": "megatron_core",
    "mbridge": "megatron_bridge",
    "te": "transformer_engine",
    "deepep": "deepep",
}
#: a feature key of the harvester's path → feature map → its words
FEATURE_MESSAGES: dict[str, Callable[[], Message]] = {
    "flex_dispatcher": lambda: msg("harvested.feature.flex_dispatcher"),
    "mla": lambda: msg("harvested.feature.mla"),
    "mtp": lambda: msg("harvested.feature.mtp"),
    "vlm": lambda: msg("harvested.feature.vlm"),
    "peft": lambda: msg("harvested.feature.peft"),
    "packing": lambda: msg("harvested.feature.packing"),
    "fsdp": lambda: msg("harvested.feature.fsdp"),
    "optimizer_offload": lambda: msg("harvested.feature.optimizer_offload"),
    "activation_offload": lambda: msg("harvested.feature.activation_offload"),
    "cuda_graphs": lambda: msg("harvested.feature.cuda_graphs"),
    "cp": lambda: msg("harvested.feature.cp"),
    "moe_overlap": lambda: msg("harvested.feature.moe_overlap"),
    "vpp": lambda: msg("harvested.feature.vpp"),
    "pp": lambda: msg("harvested.feature.pp"),
    "fp8": lambda: msg("harvested.feature.fp8"),
    "tp_overlap": lambda: msg("harvested.feature.tp_overlap"),
    "linear_attention": lambda: msg("harvested.feature.linear_attention"),
    "rl": lambda: msg("harvested.feature.rl"),
    "moe_dispatch": lambda: msg("harvested.feature.moe_dispatch"),
    "moe_routing": lambda: msg("harvested.feature.moe_routing"),
    "moe_experts": lambda: msg("harvested.feature.moe_experts"),
    "dist_optimizer": lambda: msg("harvested.feature.dist_optimizer"),
    "grad_sync": lambda: msg("harvested.feature.grad_sync"),
    "recompute": lambda: msg("harvested.feature.recompute"),
    "conversion": lambda: msg("harvested.feature.conversion"),
    "moe_permute": lambda: msg("harvested.feature.moe_permute"),
    "attention": lambda: msg("harvested.feature.attention"),
    "internode": lambda: msg("harvested.feature.internode"),
    "intranode": lambda: msg("harvested.feature.intranode"),
    "buffer": lambda: msg("harvested.feature.buffer"),
}


def feature_message(key: str) -> Message:
    """A feature key in words; ``conversion:<models>`` names the Bridge model folder converted.

    Raises:
        KeyError: a key not in :data:`FEATURE_MESSAGES`.
    """
    base, _, model = key.partition(":")
    if base == "conversion" and model:
        return msg("harvested.feature.conversion_of", model=model)
    return FEATURE_MESSAGES[base]()


def _ref(source: str) -> Message:
    tail = source.rstrip("/").rsplit("/", 2)
    if tail[-2] == "pull":
        return msg("harvested.ref_pr", number=tail[-1])
    return msg("harvested.ref_commit", sha=tail[-1][:10])


def compose_title(
    symptom: str, features: list[str] | tuple[str, ...], package: str, fixed: str, source: str
) -> Message:
    """A harvested entry's title from its facts: ``<symptom> with <features> in <package> < <fixed>
    (fixed by PR #<n>)``."""
    return msg(
        "harvested.title",
        symptom=SYMPTOM_MESSAGES[symptom](),
        features=Items([feature_message(f) for f in features], sep=", "),
        package=PACKAGE_NAMES[package],
        fixed=fixed,
        ref=_ref(source),
    )


def compose_workaround(features: list[str] | tuple[str, ...], package: str, fixed: str) -> Message:
    """A harvested entry's workaround from its facts: upgrade, or run without the features until then."""
    return msg(
        "harvested.workaround",
        package=PACKAGE_NAMES[package],
        fixed=fixed,
        features=Items([feature_message(f) for f in features], sep=", "),
    )


def title_message(k: KnownIssue) -> Message:
    """The title of a harvested entry as a message (its English text is the entry's ``title``)."""
    p = k.packages[0]
    return compose_title(k.symptom, k.features, p.package, str(p.fixed), k.source)


def family_message(family: str) -> Message:
    """A family id (``mcore_pp``) in words: the package and the feature."""
    short, _, feature = family.partition("_")
    package = FAMILY_PACKAGES.get(short, short)
    return msg("harvested.family", package=PACKAGE_NAMES.get(package, package), feature=feature_message(feature))


def is_broad(family: str) -> bool:
    """True when the family's feature is one of :data:`BROAD_FEATURES` (its finding is info)."""
    return family.partition("_")[2] in BROAD_FEATURES


def _fixed(k: KnownIssue) -> Version:
    return max(p.fixed for p in k.packages if p.fixed is not None)


#: versions key → (the entries it was computed from, their statuses by family)
_STATUS_CACHE: dict[tuple, tuple[tuple[KnownIssue, ...], dict[str, dict[str, tuple[KnownIssue, ...]]]]] = {}


_PACKAGES: list = [None, ()]


def _packages(entries: tuple[KnownIssue, ...]) -> tuple[str, ...]:
    """The packages ``entries`` name, sorted (kept for the last entries asked)."""
    if _PACKAGES[0] is not entries:
        _PACKAGES[1] = tuple(sorted({p.package for k in entries for p in k.packages}))
        _PACKAGES[0] = entries
    return _PACKAGES[1]


def _statuses(
    entries: tuple[KnownIssue, ...], versions: ResolvedVersions
) -> dict[str, dict[str, tuple[KnownIssue, ...]]]:
    """The harvested ``entries`` by family and version status at ``versions``, computed once per
    distinct versions (a plan checks thousands of layouts at the same versions); the cache is keyed
    on the versions of the packages the entries name and kept only for the same entries."""
    key = tuple((p, str(versions.get(p))) for p in _packages(entries))
    hit = _STATUS_CACHE.get(key)
    if hit is not None and hit[0] is entries:
        return hit[1]
    out: dict[str, dict[str, list[KnownIssue]]] = defaultdict(lambda: defaultdict(list))
    for k in entries:
        if k.family is not None:
            out[k.family][k.version_status(versions)[0]].append(k)
    result = {f: {st: tuple(ks) for st, ks in by.items()} for f, by in out.items()}
    if len(_STATUS_CACHE) > 64:
        _STATUS_CACHE.clear()
    _STATUS_CACHE[key] = (entries, result)
    return result


def family_matches(s: Scenario) -> dict[str, dict[str, list[KnownIssue]]]:
    """The harvested entries whose trigger the scenario meets, by family and by version status
    (``affected``, ``possible``, ``not_affected``), in database order. A family none of whose entries
    is ``affected`` or ``not_affected`` at the scenario's versions (its package's version unstated)
    can give no finding (:func:`family_findings`), so its triggers are not evaluated: it is left out."""
    out: dict[str, dict[str, list[KnownIssue]]] = {}
    for family, by_status in _statuses(harvested_issues(), s.versions).items():
        if not by_status.get("affected") and not by_status.get("not_affected"):
            continue
        hit = {st: [k for k in ks if k.triggered(s)] for st, ks in by_status.items()}
        out[family] = {st: ks for st, ks in hit.items() if ks}
    return out


def checkout_note(text: Message, issues: list[KnownIssue], version: Version | None) -> Message:
    """The family finding ``text`` of megatron-core entries at ``version``, with what a dev checkout's
    number cannot say: unchanged for a release; for a dev checkout, how many of ``issues`` it may
    already carry the fix of (undecided: :func:`~moeplan.catalog.known_issue_table.fix_by_ancestry`
    is None), or, when git ancestry decided every one, that the checkout lacks each fix."""
    if not is_dev_checkout(version):
        return text
    undecided = [k for k in issues if fix_by_ancestry(k, version) is None]
    if undecided:
        return msg("dev_checkouts.family_may_carry_fix", finding=text, version=str(version), n=len(undecided))
    return msg("dev_checkouts.family_by_ancestry", finding=text, commit=dev_checkout(version) or "")


def family_finding(family: str, issues: list[KnownIssue], s: Scenario) -> Finding:
    """One warning for the entries of ``family`` the scenario hits at its versions: how many bugs were
    fixed after its release, the newest fix, the symptoms and sources, and the upgrade."""
    p = issues[0].packages[0]
    newest = max(_fixed(k) for k in issues)
    symptoms = sorted({k.symptom for k in issues})
    by_newest = sorted(issues, key=lambda k: (_fixed(k), k.id), reverse=True)
    sources = [k.source for k in by_newest[:SOURCES_SHOWN]]
    if len(issues) > SOURCES_SHOWN:
        sources.append(msg("harvested.more_sources", n=len(issues) - SOURCES_SHOWN))
    text = msg(
        "harvested.family_affected",
        family=family_message(family),
        n=len(issues),
        package=PACKAGE_NAMES[p.package],
        version=str(s.versions.get(p.package)),
        newest=str(newest),
        symptoms=Items([SYMPTOM_MESSAGES[x]() for x in symptoms], sep=", "),
        sources=Items(sources, sep=", "),
    )
    text = checkout_note(text, issues, s.versions.get(p.package)) if p.package == "megatron_core" else text
    fix = msg("harvested.family_fix", package=PACKAGE_NAMES[p.package], newest=str(newest))
    layout_keys = [x.split(".", 1)[1] for k in issues for x in k.paths if x.startswith("layout.")]
    keys = tuple(dict.fromkeys([f"versions.{p.package}", *layout_keys]))
    if is_broad(family):
        text = msg("harvested.family_broad", finding=text)
        return Finding(f"known_issue.family.{family}", "info", text, fix, "info", SOURCE, keys)
    return Finding(f"known_issue.family.{family}", "warning", text, fix, "warn", SOURCE, keys)


def watch_finding(watched: list[tuple[str, list[KnownIssue]]], s: Scenario) -> Finding:
    """One info finding for the families the scenario uses at a release at or after each one's newest fix."""
    parts = []
    for family, issues in watched:
        p = issues[0].packages[0]
        parts.append(
            msg(
                "harvested.watch_part",
                family=family_message(family),
                n=len(issues),
                newest=str(max(_fixed(k) for k in issues)),
                package=PACKAGE_NAMES[p.package],
                version=str(s.versions.get(p.package)),
            )
        )
    return Finding(WATCH_RULE, "info", msg("harvested.watch", parts=Items(parts)), None, "info", SOURCE, ())


def family_findings(s: Scenario) -> list[Finding]:
    """The folded findings of the harvested entries for ``s``: one warning (info for a broad feature)
    per family hit at its versions, then one info for the families whose every fix the stated
    release already has (at least :data:`WATCH_MIN` of them); nothing for a family whose version
    is not stated."""
    out, watched = [], []
    for family, by_status in sorted(family_matches(s).items()):
        if by_status.get("affected"):
            out.append(family_finding(family, by_status["affected"], s))
        elif not by_status.get("possible") and len(by_status.get("not_affected", [])) >= WATCH_MIN:
            watched.append((family, by_status["not_affected"]))
    if watched:
        out.append(watch_finding(watched, s))
    return out


@rule(
    "known_issue.harvested",
    SOURCE,
    "bugs fixed upstream (harvested from merged fixes) whose feature the scenario uses and whose affected "
    "releases include its stated versions: one known_issue.family.<family> warning per family (info for a "
    "feature nearly every run uses); families past their newest fix are one info (known_issue.family_watch)",
)
def _harvested(s, e):
    return family_findings(s)


__all__ = [
    "FAMILY_PACKAGES",
    "FEATURE_MESSAGES",
    "SYMPTOM_MESSAGES",
    "SOURCE",
    "WATCH_MIN",
    "WATCH_RULE",
    "compose_title",
    "compose_workaround",
    "BROAD_FEATURES",
    "family_findings",
    "is_broad",
    "family_matches",
    "family_message",
    "feature_message",
    "title_message",
]
