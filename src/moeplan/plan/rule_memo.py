"""Each rule's errors and warnings on a request's candidate layouts, remembered by what the rule read
(:class:`RuleMemo`).

A rule is a pure function of the scenario. The candidates of one request share every part of their
scenario but the layout, the training section (the micro-batch size), the keys stated and what was
derived from those (the input as written, the defaults filled). A rule run on a candidate is watched:
every layout and training field it reads is recorded with its value, and every test of whether a key
was stated with its answer; reading anything else that differs between candidates (the input as
written, the defaults filled, a layout method) makes the run unwatchable and the rule is run on every
candidate. A later candidate that gives the same answers to every read of an earlier run takes the
same path through the rule, so it gets the same errors and warnings without running it (the reads of a run are
kept in the order made; a rule that reads differently on different paths keeps one table per set of
reads). Scenarios with recipe fills applied are not remembered (their record differs per candidate).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Hashable

from moeplan.inputs.resolved import Scenario
from moeplan.rules import RULES
from moeplan.rules.base import Rule

#: a read of a run: (section, field) with section ``layout``, ``training``, ``input.layout``,
#: ``input.training`` or ``stated``
Read = tuple[str, str]
#: what one rule gives a scenario: (the rule ids of its error findings, of its warning findings)
Outcome = tuple[tuple[str, ...], tuple[str, ...]]


#: value types that are their own key (with the type's name): the common case, checked first
_PLAIN_TYPES = frozenset({int, float, str, bool, type(None)})


def _frozen(v: object) -> Hashable:
    """A value read, as a key that tells apart what the rule could (type and value; lists as tuples)."""
    t = type(v)
    if t in _PLAIN_TYPES:
        return (t.__name__, v)
    if isinstance(v, (list, tuple)):
        return (type(v).__name__, tuple(_frozen(x) for x in v))
    if isinstance(v, dict):
        return ("dict", tuple(sorted((str(k), _frozen(x)) for k, x in v.items())))
    if isinstance(v, (set, frozenset)):
        return (type(v).__name__, tuple(sorted(map(str, v))))
    return (type(v).__name__, v if isinstance(v, Hashable) else repr(v))


class _Watch:
    """What one rule run read: the reads in order with their values, and whether it read something not
    watched (then it cannot be remembered)."""

    def __init__(self) -> None:
        self.reads: dict[Read, Hashable] = {}
        self.unwatched = False

    def record(self, read: Read, value: object) -> None:
        self.reads.setdefault(read, _frozen(value))


class _Section:
    """Stands in for a candidate's layout or training section: each field read is recorded; a method,
    a private or pydantic attribute makes the run unwatched."""

    __slots__ = ("_obj", "_name", "_watch")

    def __init__(self, obj: object, name: str, watch: _Watch) -> None:
        object.__setattr__(self, "_obj", obj)
        object.__setattr__(self, "_name", name)
        object.__setattr__(self, "_watch", watch)

    def __getattr__(self, name: str):
        v = getattr(self._obj, name)
        if callable(v) or name not in _watched_of(type(self._obj)):
            self._watch.unwatched = True
        else:
            self._watch.record((self._name, name), v)
        return v

    @property  # type: ignore[misc]
    def __class__(self):  # isinstance() sees the section's own class
        return type(self._obj)


class _Keys:
    """Stands in for the stated keys: a membership test is recorded with its answer; anything else
    makes the run unwatched."""

    def __init__(self, keys: frozenset[str], watch: _Watch) -> None:
        self._keys, self._watch = keys, watch

    def __contains__(self, key: object) -> bool:
        got = key in self._keys
        self._watch.record(("stated", str(key)), got)
        return got

    def _all(self) -> frozenset[str]:
        self._watch.unwatched = True
        return self._keys

    def __iter__(self):
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._all())

    def __getattr__(self, name: str):
        return getattr(self._all(), name)


class _Unwatched:
    """Stands in for a part of the scenario that differs between candidates and is not watched (the
    input as written, the defaults filled): touching it makes the run unwatched."""

    def __init__(self, obj: object, watch: _Watch) -> None:
        self._obj, self._watch = obj, watch

    def _touch(self) -> object:
        self._watch.unwatched = True
        return self._obj

    def __getattr__(self, name: str):
        return getattr(self._touch(), name)

    def __iter__(self):
        return iter(self._touch())  # type: ignore[call-overload]

    def __len__(self) -> int:
        return len(self._touch())  # type: ignore[arg-type]

    def __bool__(self) -> bool:
        return bool(self._touch())

    def __getitem__(self, i):
        return self._touch()[i]  # type: ignore[index]


class _Input:
    """Stands in for the input as written: its layout and training sections are watched as the
    resolved ones are (``input.layout``, ``input.training``); its other sections are the request's,
    the same for every candidate; a method or a private or pydantic attribute makes the run unwatched."""

    __slots__ = ("_obj", "_watch")

    def __init__(self, obj: object, watch: _Watch) -> None:
        object.__setattr__(self, "_obj", obj)
        object.__setattr__(self, "_watch", watch)

    def __getattr__(self, name: str):
        v = getattr(self._obj, name)
        if name in ("layout", "training"):
            return _Section(v, f"input.{name}", self._watch)
        if callable(v) or name.startswith(("_", "model_")):
            self._watch.unwatched = True
        return v


def _watched(s: Scenario, watch: _Watch) -> Scenario:
    """``s`` with its per-candidate parts standing in for themselves under ``watch``."""
    return dataclasses.replace(
        s,
        layout=_Section(s.layout, "layout", watch),  # type: ignore[arg-type]
        training=_Section(s.training, "training", watch),  # type: ignore[arg-type]
        stated=_Keys(s.stated, watch),  # type: ignore[arg-type]
        input=_Input(s.input, watch),  # type: ignore[arg-type]
        resolutions=_Unwatched(s.resolutions, watch),  # type: ignore[arg-type]
    )


def _watched_names(cls: type) -> tuple[str, ...]:
    """The attributes of a section class a run may read and be remembered by: its fields and its
    properties (not pydantic's own)."""
    props = [n for n in dir(cls) if isinstance(getattr(cls, n, None), property) and not n.startswith(("_", "model_"))]
    return tuple(getattr(cls, "model_fields", ())) + tuple(props)


def _watched_of(cls: type) -> tuple[str, ...]:
    """:func:`_watched_names` of ``cls``, computed once."""
    got = _WATCHED.get(cls)
    if got is None:
        got = _WATCHED[cls] = _watched_names(cls)
    return got


def _section_values(s: Scenario) -> dict[str, dict[str, object]]:
    """Every watched attribute of ``s``'s layout and training sections, by section."""
    out: dict[str, dict[str, object]] = {}
    parts = (("layout", s.layout), ("training", s.training), ("input.layout", s.input.layout))
    for name, sec in (*parts, ("input.training", s.input.training)):
        values = dict(sec.__dict__)
        for attr in _watched_of(type(sec))[len(type(sec).model_fields) :]:  # the properties (after the fields)
            values[attr] = getattr(sec, attr)
        out[name] = values
    return out


def _changed(new: dict[str, dict[str, object]], old: dict[str, dict[str, object]]) -> set[Read]:
    """The reads whose answer differs between two scenarios' :func:`_section_values`."""
    out: set[Read] = set()
    for name, values in new.items():
        before = old[name]
        if tuple(values) == tuple(before):  # the same keys in the same order (one class, one order): side by side
            pairs = zip(values, values.values(), before.values(), strict=True)
        else:
            pairs = ((k, v, before.get(k, _MISSING)) for k, v in values.items())  # type: ignore[assignment]
        for k, v, w in pairs:
            if w is not v and (type(w) is not type(v) or w != v):
                out.add((name, k))
    return out


_MISSING = object()
#: section class → :func:`_watched_names`
_WATCHED: dict[type, tuple[str, ...]] = {}


@dataclasses.dataclass
class _Seen:
    """A scenario the memo answered: its section values, stated keys, and per rule the outcome (errors,
    warnings) and the reads of the path the rule took (None: not remembered)."""

    values: dict[str, dict[str, object]]
    stated: frozenset[str]
    rules: dict[str, tuple[Outcome, frozenset[Read] | None]]
    #: the answers given so far (:func:`_answer`), by read
    answers: dict[Read, Hashable] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class _RuleTables:
    """One rule's remembered outcomes: per set of reads (in order), the answers → (error rule ids,
    warning rule ids)."""

    tables: dict[tuple[Read, ...], dict[tuple[Hashable, ...], Outcome]] = dataclasses.field(default_factory=dict)
    unwatchable: bool = False


class RuleMemo:
    """The error (and warning) rule ids each rule gives the candidates of one request (see the module's docstring).
    Use one per request: every scenario passed must come from the same request with only its layout
    and training sections changed.

    Each scenario is compared with the one answered before it: a rule whose last path read nothing that
    differs between the two keeps its answer (found through an index of the rules by what their last
    path read); any other looks its reads up in its tables, else runs."""

    def __init__(self) -> None:
        self._rules: dict[str, _RuleTables] = {}
        #: the scenario answered last: its values and stated keys, per rule (errors, reads of its path)
        self._last: _Seen | None = None
        #: a read → the rules whose last path made it; the rules whose last run was not watched
        self._by_read: dict[Read, set[str]] = {}
        self._always: set[str] = set()
        self._skip: frozenset[str] | None = None
        #: each path's reads as a set (:meth:`_read_set`)
        self._read_sets: dict[tuple[Read, ...], frozenset[Read]] = {}
        #: the outcomes of every rule run for the scenario answered last (:meth:`last_warnings`)
        self._last_outcomes: dict[str, tuple[Outcome, frozenset[Read] | None]] | tuple[str, ...] = ()
        self.runs = 0
        self.hits = 0

    def errors(self, s: Scenario, skip: frozenset[str]) -> list[str]:
        """The rule ids of the error findings every rule not in ``skip`` gives ``s`` (what
        ``validate(s, skip).errors`` lists, as ids; not in its order)."""
        if s.recipe is not None:
            outcomes = [_run(r, s) for r in RULES.values() if r.rule_id not in skip]
            self._last_outcomes = tuple(w for o in outcomes for w in o[1])
            return [e for o in outcomes for e in o[0]]
        last = self._last
        seen = _Seen(_section_values(s), s.stated, {})
        if last is None or skip != self._skip:
            self._skip, self._by_read, self._always = skip, {}, set()
            todo = [r.rule_id for r in RULES.values() if r.rule_id not in skip]
        else:
            seen.rules = dict(last.rules)
            changed = _changed(seen.values, last.values) | {("stated", k) for k in seen.stated ^ last.stated}
            affected = set(self._always)
            for x in changed:
                affected |= self._by_read.get(x, set())
            todo = sorted(affected)
            self.hits += len(seen.rules) - len(todo)
        for rid in todo:
            self._remember(rid, seen, self._rule_errors(RULES[rid], s, seen))
        self._last = seen
        self._last_outcomes = seen.rules
        return [e for got in seen.rules.values() for e in got[0][0]]

    def last_warnings(self) -> Callable[[], tuple[str, ...]]:
        """For the scenario :meth:`errors` answered last: a function giving the rule ids of the warning
        findings of the rules it ran (``validate(s, skip).warnings`` as ids, unordered), made when called."""
        got = self._last_outcomes
        if isinstance(got, tuple):
            return lambda: got
        return lambda: tuple(w for o in got.values() for w in o[0][1])

    def _remember(self, rid: str, seen: _Seen, got: tuple[Outcome, frozenset[Read] | None]) -> None:
        """Record rule ``rid``'s outcome for ``seen`` and index it by the reads of its path."""
        old = seen.rules.get(rid)
        if old is not None and old[1] is got[1]:  # the same path (or unwatched again): the index stands
            seen.rules[rid] = got
            return
        if old is not None:
            for x in old[1] if old[1] is not None else ():
                self._by_read[x].discard(rid)
            self._always.discard(rid)
        seen.rules[rid] = got
        if got[1] is None:
            self._always.add(rid)
        else:
            for x in got[1]:
                self._by_read.setdefault(x, set()).add(rid)

    def _rule_errors(self, r: Rule, s: Scenario, seen: _Seen) -> tuple[Outcome, frozenset[Read] | None]:
        """(the outcome rule ``r`` gives ``s``, the reads of the path it took; None: not watched)."""
        memo = self._rules.get(r.rule_id)
        if memo is None:
            memo = self._rules[r.rule_id] = _RuleTables()
        if memo.unwatchable:
            return _run(r, s), None
        for reads, table in memo.tables.items():
            got = table.get(tuple([_answer(seen, x) for x in reads]))
            if got is not None:
                self.hits += 1
                return got, self._read_set(reads)
        self.runs += 1
        watch = _Watch()
        try:
            got = _run(r, _watched(s, watch))
        except Exception:  # a stand-in the rule cannot use: run it on the scenario itself, every time
            watch.unwatched, got = True, ((), ())
        if watch.unwatched:  # from now on run on the scenario itself (this once too)
            memo.unwatchable = True
            return _run(r, s), None
        memo.tables.setdefault(tuple(watch.reads), {})[tuple(watch.reads.values())] = got
        return got, self._read_set(tuple(watch.reads))

    def _read_set(self, reads: tuple[Read, ...]) -> frozenset[Read]:
        """The reads of a path as a set, one object per path (so that an unchanged path is seen by identity)."""
        got = self._read_sets.get(reads)
        if got is None:
            got = self._read_sets[reads] = frozenset(reads)
        return got


def _answer(seen: _Seen, read: Read) -> Hashable:
    """The answer the scenario ``seen`` records gives to one read (made once per read, then kept)."""
    got = seen.answers.get(read)
    if got is None:
        value = read[1] in seen.stated if read[0] == "stated" else seen.values[read[0]][read[1]]
        got = seen.answers[read] = _frozen(value)
    return got


def _run(r: Rule, s: Scenario) -> Outcome:
    """The rule ids of the error findings and of the warning findings rule ``r`` gives ``s``."""
    found = r.check(s)
    if not found:
        return _NOTHING
    return (
        tuple(f.rule_id for f in found if f.severity == "error"),
        tuple(f.rule_id for f in found if f.severity == "warning"),
    )


_NOTHING: Outcome = ((), ())


__all__ = ["RuleMemo"]
