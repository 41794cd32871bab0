"""Findings and the rule registry.

A rule is a function ``(Scenario) -> Iterable[Finding]`` registered with a stable ``rule_id``, the
Megatron source it encodes and the verdict class of its errors: ``invalid`` (a value must change)
or ``unsupported`` (the combination cannot run on this software / hardware whatever the values).
A rule that lacks an input it needs yields an ``info`` finding naming what is missing and stops;
every other rule still runs.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from typing import Literal

from moeplan.i18n.messages import Message, msg
from moeplan.inputs.resolved import Scenario

Severity = Literal["error", "warning", "info"]
Verdict = Literal["invalid", "unsupported", "incomplete", "warn", "valid"]


@dataclass(frozen=True)
class Finding:
    """One result of one rule.

    Attributes:
        rule_id: stable id (``family.name``), see :data:`RULES`.
        severity: ``error`` (Megatron rejects or fails), ``warning`` (runs, but likely wrong or
            slow), ``info`` (skipped for missing input, or an assumption made).
        message: what is wrong, with the numbers.
        fix: a concrete change that satisfies the rule (None for info).
        kind: ``invalid`` or ``unsupported`` for errors; ``warn``/``info`` otherwise.
        source: the Megatron file (tag) that enforces the rule.
        keys: scenario keys involved.
        edits: the fix as layout keys → values, when it is one change a program can apply (``estimate``
            applies it to estimate the fixed layout, ``fit`` before looking for memory); a key
            ``environment.NAME`` sets that environment variable instead; None otherwise.
    """

    rule_id: str
    severity: Severity
    message: str
    fix: str | None = None
    kind: str = "invalid"
    source: str = ""
    keys: tuple[str, ...] = ()
    edits: dict | None = None

    def to_dict(self) -> dict:
        """Plain mapping (JSON-ready); ``edits`` only when the finding has them."""
        d = asdict(self)
        if d["edits"] is None:
            del d["edits"]
        return d


@dataclass(frozen=True)
class Rule:
    """A registered rule: id, family, source tag, error class and the check function."""

    rule_id: str
    family: str
    source: str
    kind: str
    summary: str
    check: Callable[[Scenario], Iterable[Finding]]


RULES: dict[str, Rule] = {}


class Emitter:
    """Helper handed to rule functions to build findings with the rule's id, source and kind."""

    def __init__(self, rule: Rule):
        self.rule = rule

    def error(
        self, message: str, fix: str | None, *keys: str, kind: str | None = None, edits: dict | None = None
    ) -> Finding:
        return Finding(self.rule.rule_id, "error", message, fix, kind or self.rule.kind, self.rule.source, keys, edits)

    def warning(self, message: str, fix: str | None = None, *keys: str) -> Finding:
        return Finding(self.rule.rule_id, "warning", message, fix, "warn", self.rule.source, keys)

    def info(self, message: str, *keys: str) -> Finding:
        return Finding(self.rule.rule_id, "info", message, None, "info", self.rule.source, keys)

    def missing(self, what: str, why: str | None = None) -> Finding:
        """The info finding of a rule skipped because an input is not known: ``skipped: needs <what>``,
        or ``skipped: needs <what> (<why>)``.

        Args:
            what: the missing input: a scenario key (``training.seq_length``; printed as it is in every
                language) or a message naming it (:func:`both` for two keys).
            why: what the rule needs it for, a message (e.g. :func:`why_for_dp`); None when the rule
                makes it plain.

        Raises:
            ValueError: ``what`` is free text, neither a key nor a message (it would have no Chinese
                text).
        """
        if not (isinstance(what, Message) or _KEY.fullmatch(what)):
            raise ValueError(f"Emitter.missing: {what!r} is neither a scenario key nor a message")
        if why is not None:
            return self.info(msg("rules_common.skipped_needs_why", what=what, why=why))
        return self.info(msg("rules_common.skipped_needs", what=what))

    def missing_model(self, field: str, why: str | None = None) -> Finding:
        """The info finding of a rule skipped because the model does not give ``field`` (a model
        config key, e.g. ``num_layers``): ``skipped: needs the model's <field>`` (`` (<why>)`` with a
        ``why`` message)."""
        if why is not None:
            return self.info(msg("rules_common.skipped_needs_model_field_why", field=field, why=why))
        return self.info(msg("rules_common.skipped_needs_model_field", field=field))

    def missing_integer_dp_world(self) -> Finding:
        """The info finding of a rule skipped because the world size gives no integer DP."""
        return self.info(msg("rules_common.skipped_needs_integer_dp_world"))


#: a scenario key, or keys, as :meth:`Emitter.missing` takes them (``system.num_gpus``)
_KEY = re.compile(r"[\w.]+")


def both(a: str, b: str) -> Message:
    """Two missing inputs for :meth:`Emitter.missing`: ``<a> and <b>`` (keys or messages)."""
    return msg("rules_common.both", a=a, b=b)


def why_for_dp() -> Message:
    """The reason ``for DP`` of :meth:`Emitter.missing` (the input is needed to derive DP)."""
    return msg("rules_common.why_for_dp")


def why_microbatch_count() -> Message:
    """The reason ``microbatch count`` of :meth:`Emitter.missing` (needed to count microbatches)."""
    return msg("rules_common.why_microbatch_count")


def why_precision_support() -> Message:
    """The reason ``precision support`` of :meth:`Emitter.missing` (needed to know what the GPU runs)."""
    return msg("rules_common.why_precision_support")


def set_key(key: str, value: object) -> Message:
    """The fix ``set <key>: <value>`` (a layout or training key and the value that satisfies the rule)."""
    return msg("rules_common.set_key", key=key, value=value)


def use_ep_in(values: list[int]) -> Message:
    """The fix ``use EP in [...]``: the expert-parallel sizes that satisfy the rule."""
    return msg("rules_common.use_ep_in", values=values)


def megatron_lm_asserts(message: str) -> Message:
    """``<message> (Megatron-LM asserts it)``: a rule's message (a message) for a check Megatron-LM
    enforces with an assertion."""
    return msg("rules_common.megatron_lm_asserts", message=message)


def rule(rule_id: str, source: str, summary: str, kind: str = "invalid"):
    """Register ``fn(scenario, emit)`` as a rule. ``summary`` is the one-line statement of the rule."""

    def deco(fn: Callable[[Scenario, Emitter], Iterable[Finding] | None]):
        family = rule_id.split(".", 1)[0]
        r: Rule

        def check(s: Scenario) -> Iterable[Finding]:
            return fn(s, Emitter(r)) or ()  # a plain call: a generator per rule and check costs more

        r = Rule(rule_id, family, source, kind, summary, check)
        if rule_id in RULES:
            raise RuntimeError(f"duplicate rule id {rule_id}")
        RULES[rule_id] = r
        return fn

    return deco


def overall_verdict(findings: Iterable[Finding]) -> Verdict:
    """``unsupported`` if any unsupported error, else ``invalid`` if any error, else ``warn`` if any
    warning, else ``valid``. Unsupported ranks first: no value change fixes it."""
    findings = list(findings)
    errs = [f for f in findings if f.severity == "error"]
    if any(f.kind == "unsupported" for f in errs):
        return "unsupported"
    if errs:
        return "invalid"
    if any(f.severity == "warning" for f in findings):
        return "warn"
    return "valid"


def is_dev_build(s) -> bool:
    """True when the scenario states a megatron-core dev build: a dev release (``0.20.0.dev0``) or a
    local label naming it (``0.19.0+dev``), the way a dev-branch checkout is written down."""
    return bool(s.megatron_core_dev_build())
