"""The known-issue database: release-specific bugs of Megatron-Core, Megatron Bridge, Transformer
Engine, DeepEP, NCCL and PyTorch, each from a public issue or pull request, read lazily from
``catalog/data/known_issues.yaml`` and validated on load.

An entry names its source, the affected and fixed versions of each package (PEP 440 specifiers), a
``trigger`` (when the scenario can hit it), the symptom and the workaround, plus an ``example``
scenario that must trigger it and a ``near_miss`` that must not (both tested).

A second file, ``catalog/data/known_issues_harvested.yaml`` (:func:`harvested_issues`), holds entries
proposed from merged upstream fixes by ``scripts/harvest_known_issues.py``: each also names its
``family`` (the feature its fix belongs to, e.g. ``mcore_pp``) and its ``features``, and is always
``certainty: reported``; checks fold the entries of a family into one finding
(:mod:`moeplan.rules.known_issue_families`).

Trigger language (data, never evaluated as code). A trigger is a mapping whose entries must all hold:

- ``<path>: <condition>`` — a scenario fact (see :data:`FACTS`; ``env.<NAME>`` reads an environment
  variable) against a condition: a plain value means equality; a mapping applies operators, all of
  which must hold: ``eq``, ``ne``, ``gt``, ``ge``, ``lt``, ``le`` (numbers), ``in``, ``not_in`` (a list of
  values), ``contains``, ``contains_any`` (a list-valued fact holding a value / one of several values),
  ``stated`` (true: the user wrote the layout key; false: it is a resolved default);
- ``all: [trigger, ...]``, ``any: [trigger, ...]``, ``not: trigger``.

A fact that cannot be known (no model, no GPU, no sequence length) compares false, except ``eq: null``.
Example: ``{layout.overlap_moe_expert_parallel_comm: true, pp: {gt: 1}, any: [{system.gpu: gb200},
{system.gpu: gb300}]}``.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import resources
from typing import TYPE_CHECKING, Any, Literal

import yaml
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from moeplan.inputs.layout import LayoutSpec
from moeplan.inputs.training import TrainingSpec
from moeplan.inputs.versions import PACKAGE_NAMES, PACKAGES, ResolvedVersions
from moeplan.structure.placement import stage_plan

if TYPE_CHECKING:
    from moeplan.inputs.resolved import Scenario

#: symptom classes; ``slowdown`` entries state their size; ``unspecified`` (a harvested entry only:
#: the fix's text names no failure mode) is not a claim about what the bug did
SYMPTOMS: dict[str, str] = {
    "hang": "hang",
    "nan": "NaN loss / gradients",
    "wrong_result": "silently wrong results",
    "oom": "out of memory",
    "slowdown": "slowdown",
    "crash": "crash",
    "assertion": "assertion at start-up",
    "unspecified": "the fix names no failure mode",
}
#: symptoms only a harvested entry (one with a family) may carry: a hand-entered entry names its failure
HARVESTED_ONLY_SYMPTOMS = frozenset({"unspecified"})
#: symptoms a planner must not recommend a layout for when the versions are affected and the bug is
#: confirmed (a guaranteed failure, or one with a fixed release); NaN, wrong results, slowdowns, OOMs and
#: open reports are flagged instead
AVOID_SYMPTOMS = frozenset({"hang", "crash", "assertion"})
CERTAINTIES = ("guaranteed", "reported")
#: the keys an entry may have, in the order the harvester writes them (scripts/harvest_known_issues.py)
ENTRY_KEYS = (
    "id",
    "title",
    "family",
    "features",
    "source",
    "related",
    "reported",
    "packages",
    "trigger",
    "symptom",
    "size",
    "certainty",
    "workaround",
    "notes",
    "example",
    "near_miss",
)
_ENTRY_KEYS = frozenset(ENTRY_KEYS)
_REQUIRED = {"id", "title", "source", "reported", "packages", "trigger", "symptom", "certainty", "workaround"}
_OPS = {"eq", "ne", "gt", "ge", "lt", "le", "in", "not_in", "contains", "contains_any", "stated"}
_ID = re.compile(r"[a-z][a-z0-9_]*\Z")
_ENV = re.compile(r"env\.([A-Za-z_][A-Za-z0-9_]*)\Z")
_SOURCE = re.compile(r"https://github\.com/[\w.-]+/[\w.-]+/(issues|pull|blob|commit)/\S+\Z")


class KnownIssueDataError(ValueError):
    """The known-issue data is malformed: an unknown key, path or operator, a bad specifier."""


# ----------------------------------------------------------------------------------------------------
# scenario facts


def _model_attr(name: str) -> Callable[[Scenario], Any]:
    return lambda s: getattr(s.model, name, None) if s.model is not None else None


def _dispatcher(s: Scenario) -> str | None:
    lay = s.layout
    if lay.moe_enable_deepep:
        return "deepep"
    if lay.moe_token_dispatcher_type == "flex":
        return lay.moe_flex_dispatcher_backend or "deepep"
    return lay.moe_token_dispatcher_type


def _tokens_per_rank(s: Scenario) -> int | None:
    """Tokens one rank routes per microbatch: seq · MBS / CP, split over TP with sequence parallelism."""
    t = s.training
    if not t.seq_length or not t.micro_batch_size:
        return None
    n = t.seq_length * t.micro_batch_size // s.cp
    return n // s.tp if s.sp and s.tp > 1 else n


def _permuted_elements(s: Scenario) -> int | None:
    """Elements of the permuted token buffer on one rank: tokens · top-k · hidden size (the index
    space of Transformer Engine's ``moe_permute`` kernels)."""
    m = s.model
    n = _tokens_per_rank(s)
    if m is None or n is None or not m.moe_router_topk or not m.hidden_size:
        return None
    return n * m.moe_router_topk * m.hidden_size


def _ep_spans_nodes(s: Scenario) -> bool | None:
    """True when one expert-parallel group (ETP·EP ranks, TP inner) spans more than one NVLink domain."""
    dom = s.gpu.scaleup_domain_gpus if s.gpu is not None else s.gpus_per_node
    if not dom:
        return None
    return s.etp * s.ep > dom


def _nodes(s: Scenario) -> int | None:
    if not s.num_gpus or not s.gpus_per_node:
        return None
    return -(-s.num_gpus // s.gpus_per_node)


def _stage_plan(s: Scenario):
    if s.model is None or not s.model.num_layers:
        return None
    try:
        return stage_plan(s)
    except (ValueError, TypeError):
        return None


def _pp_rank_without_moe(s: Scenario) -> bool | None:
    """True when some pipeline rank builds no MoE layer (dense-only stage) in a model that has MoE layers."""
    m = s.model
    if m is None or not m.is_moe or m.moe_layers is None or s.pp <= 1:
        return None if m is None else False
    plan = _stage_plan(s)
    if plan is None:
        return None
    return any(not any(m.moe_layers[i] for i in plan.rank_layers(r)) for r in range(s.pp))


def _mtp_stage_without_decoder(s: Scenario) -> bool | None:
    """True when an MTP block sits in a virtual stage that holds no decoder layer (a standalone MTP stage)."""
    if s.mtp_num_layers <= 0:
        return False
    plan = _stage_plan(s)
    if plan is None:
        return None
    return any(not plan.layers[r][v] for r, v in plan.mtp)


def _mtp_standalone_middle(s: Scenario) -> bool | None:
    """True when a standalone MTP stage (no decoder layers) is neither the loss stage nor the embedding
    stage: a middle stage, which Megatron Bridge's batch routing fed no tokens before 0.6."""
    if s.mtp_num_layers <= 0:
        return False
    plan = _stage_plan(s)
    if plan is None:
        return None
    return any(not plan.layers[r][v] and (r, v) not in (plan.loss, plan.embedding) for r, v in plan.mtp)


def _uniform_recompute_remainder(s: Scenario) -> int | None:
    """Layers per virtual stage modulo ``recompute_num_layers`` for uniform full recompute (None otherwise)."""
    lay = s.layout
    n = lay.recompute_num_layers
    if lay.recompute_method != "uniform" or not n or s.model is None:
        return None
    plan = _stage_plan(s)
    if plan is None:
        return None
    return max(len(chunk) % n for rank in plan.layers for chunk in rank)


def _num_local_experts(s: Scenario) -> int | None:
    m = s.model
    experts = m.num_moe_experts if m is not None and m.is_moe else None
    if not experts or experts % s.ep:
        return None
    return experts // s.ep


def _tp_exceeds_query_groups(s: Scenario) -> bool | None:
    m = s.model
    if m is None or not m.num_query_groups:
        return None
    return s.tp > m.num_query_groups


def _tokens_per_rank_odd(s: Scenario) -> bool | None:
    n = _tokens_per_rank(s)
    return None if n is None else n % 2 == 1


def _cp_comm_types(s: Scenario) -> list[str]:
    c = s.layout.cp_comm_type
    if c is None:
        return ["p2p"]
    return [c] if isinstance(c, str) else sorted(set(c))


def _full_iteration_graphs(s: Scenario) -> bool:
    return s.layout.cuda_graph_impl == "full_iteration" or s.graph_scopes() == ["full_iteration"]


FACTS: dict[str, Callable[[Scenario], Any]] = {
    "framework": lambda s: s.framework,
    "tp": lambda s: s.tp,
    "pp": lambda s: s.pp,
    "vpp": lambda s: s.vpp,
    "cp": lambda s: s.cp,
    "ep": lambda s: s.ep,
    "etp": lambda s: s.etp,
    "dp": lambda s: s.dp,
    "edp": lambda s: s.edp,
    "sp": lambda s: s.sp,
    "mtp_num_layers": lambda s: s.mtp_num_layers,
    "graphs_on": lambda s: s.graphs_on(),
    "graph_scopes": lambda s: s.graph_scopes(),
    "dispatcher": _dispatcher,
    "system.gpu": lambda s: s.gpu.id if s.gpu is not None else None,
    "system.num_gpus": lambda s: s.num_gpus,
    "system.gpus_per_node": lambda s: s.gpus_per_node,
    "system.nodes": _nodes,
    "system.compute_capability": lambda s: s.gpu.compute_capability if s.gpu is not None else None,
    "system.scaleup_domain_gpus": lambda s: s.gpu.scaleup_domain_gpus if s.gpu is not None else None,
    "system.reserved_gib": lambda s: s.input.system.reserved_gib,
    "model.name": _model_attr("name"),
    "model.model_type": _model_attr("model_type"),
    "model.is_moe": _model_attr("is_moe"),
    "model.all_layers_moe": _model_attr("all_layers_moe"),
    "model.has_linear_attention": _model_attr("has_linear_attention"),
    # Kimi Delta Attention (Kimi-K3): Megatron Bridge's own linear-attention module, not megatron-core's
    # Gated DeltaNet, so megatron-core's GDN issues do not reach it
    "model.kimi_delta_attention": _model_attr("kimi_delta_attention"),
    "model.multi_latent_attention": _model_attr("multi_latent_attention"),
    "model.attention_sinks": _model_attr("attention_sinks"),
    "model.attention_output_gate": _model_attr("attention_output_gate"),
    "model.moe_expert_bias": _model_attr("moe_expert_bias"),
    "model.add_bias_linear": _model_attr("add_bias_linear"),
    "model.num_layers": _model_attr("num_layers"),
    "model.hidden_size": _model_attr("hidden_size"),
    "model.num_query_groups": _model_attr("num_query_groups"),
    "model.num_moe_experts": _model_attr("num_moe_experts"),
    "model.moe_router_topk": _model_attr("moe_router_topk"),
    "model.is_vlm": _model_attr("is_vlm"),
    "model.vision_kind": lambda s: s.model.vision.kind if s.model is not None and s.model.vision else None,
    "derived.tokens_per_rank": _tokens_per_rank,
    "derived.tokens_per_rank_odd": _tokens_per_rank_odd,
    "derived.num_local_experts": _num_local_experts,
    "derived.tp_exceeds_query_groups": _tp_exceeds_query_groups,
    "derived.moe_permuted_elements": _permuted_elements,
    "derived.ep_spans_nodes": _ep_spans_nodes,
    "derived.pp_rank_without_moe_layer": _pp_rank_without_moe,
    "derived.mtp_stage_without_decoder_layers": _mtp_stage_without_decoder,
    "derived.mtp_standalone_middle_stage": _mtp_standalone_middle,
    "derived.uniform_recompute_remainder": _uniform_recompute_remainder,
    "derived.cp_comm_types": _cp_comm_types,
    "derived.full_iteration_graphs": _full_iteration_graphs,
}
for _name in LayoutSpec.model_fields:
    FACTS[f"layout.{_name}"] = (lambda n: lambda s: getattr(s.layout, n))(_name)
for _name in TrainingSpec.model_fields:
    FACTS[f"training.{_name}"] = (lambda n: lambda s: getattr(s.training, n))(_name)


def getter(path: str) -> Callable[[Scenario], Any]:
    """The reader of a trigger path, resolved once (``env.X``: the environment variable or None)."""
    m = _ENV.match(path)
    if m:
        name = m.group(1)
        return lambda s: s.environment.get(name)
    return FACTS[path]


def fact(s: Scenario, path: str) -> Any:
    """The value of a trigger path for scenario ``s`` (``env.X``: the environment variable or None)."""
    return getter(path)(s)


# ----------------------------------------------------------------------------------------------------
# trigger compilation and evaluation


Pred = Callable[["Scenario"], bool]


def _stated_is(key: str, want: bool, s: Scenario) -> bool:
    """Whether the layout key ``key`` was stated by the scenario, compared with ``want``."""
    return (key in s.stated) == want


def _negated(f: Pred, s: Scenario) -> bool:
    """The negation of the predicate ``f``."""
    return not f(s)


def _num(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _compile_condition(path: str, cond: Any, where: str) -> Pred:
    if not isinstance(cond, dict):
        if isinstance(cond, list):
            raise KnownIssueDataError(f"{where}: {path}: a list needs an operator (in / contains_any)")
        cond = {"eq": cond}
    checks: list[Pred] = []
    for op, arg in cond.items():
        if op not in _OPS:
            raise KnownIssueDataError(f"{where}: {path}: unknown operator {op!r} (one of {', '.join(sorted(_OPS))})")
        if op in ("gt", "ge", "lt", "le") and not _num(arg):
            raise KnownIssueDataError(f"{where}: {path}: {op} needs a number, got {arg!r}")
        if op in ("in", "not_in", "contains_any") and not isinstance(arg, list):
            raise KnownIssueDataError(f"{where}: {path}: {op} needs a list, got {arg!r}")
        if op == "stated":
            if not isinstance(arg, bool) or not path.startswith("layout."):
                raise KnownIssueDataError(f"{where}: {path}: stated takes true/false and only layout keys")
            key = path.split(".", 1)[1]
            checks.append(functools.partial(_stated_is, key, arg))
            continue
        checks.append(_op(path, op, arg))
    return lambda s: all(c(s) for c in checks)


def _op(path: str, op: str, arg: Any) -> Pred:
    get = getter(path)  # resolved when the trigger is compiled, not on every evaluation

    if op == "eq":
        return lambda s: get(s) == arg
    if op == "ne":
        return lambda s: (v := get(s)) is not None and v != arg
    if op in ("gt", "ge", "lt", "le"):
        cmp = {"gt": float.__gt__, "ge": float.__ge__, "lt": float.__lt__, "le": float.__le__}[op]
        return lambda s: _num(v := get(s)) and cmp(float(v), float(arg))
    if op == "in":
        return lambda s: (v := get(s)) is not None and v in arg
    if op == "not_in":
        return lambda s: (v := get(s)) is not None and v not in arg
    if op == "contains":
        return lambda s: isinstance(v := get(s), (list, tuple)) and arg in v
    return lambda s: isinstance(v := get(s), (list, tuple)) and any(a in v for a in arg)  # contains_any


def _combine(kind: str, fs: list[Pred]) -> Pred:
    if kind == "all":
        return lambda s: all(f(s) for f in fs)
    return lambda s: any(f(s) for f in fs)


def compile_trigger(trigger: Any, where: str = "trigger") -> tuple[Pred, list[str]]:
    """A predicate for a trigger mapping, and the paths it reads.

    Raises:
        KnownIssueDataError: not a mapping, an unknown path, operator or combinator.
    """
    if not isinstance(trigger, dict) or not trigger:
        raise KnownIssueDataError(f"{where}: a non-empty mapping expected, got {trigger!r}")
    preds: list[Pred] = []
    paths: list[str] = []
    for key, val in trigger.items():
        if key in ("all", "any"):
            if not isinstance(val, list) or not val:
                raise KnownIssueDataError(f"{where}: {key} needs a non-empty list of triggers")
            subs = [compile_trigger(t, f"{where}.{key}[{i}]") for i, t in enumerate(val)]
            for _, p in subs:
                paths += p
            preds.append(_combine(key, [f for f, _ in subs]))
        elif key == "not":
            f, p = compile_trigger(val, f"{where}.not")
            paths += p
            preds.append(functools.partial(_negated, f))
        else:
            if key not in FACTS and not _ENV.match(str(key)):
                raise KnownIssueDataError(f"{where}: unknown path {key!r}")
            preds.append(_compile_condition(key, val, where))
            paths.append(key)
    return (lambda s: all(p(s) for p in preds)), paths


# ----------------------------------------------------------------------------------------------------
# entries


@dataclass(frozen=True)
class PackageRange:
    """Affected versions of one package (a PEP 440 specifier) and the first fixed release (None: open)."""

    package: str
    affected: SpecifierSet
    fixed: Version | None
    text: str = ""

    def describe(self) -> str:
        fixed = f", fixed in {self.fixed}" if self.fixed is not None else ", no fixed release"
        return f"{PACKAGE_NAMES[self.package]} {self.text or self.affected}{fixed}"


@dataclass(frozen=True)
class KnownIssue:
    """One known issue (see the module docstring and the data file's header)."""

    id: str
    title: str
    source: str
    related: tuple[str, ...]
    reported: str
    packages: tuple[PackageRange, ...]
    trigger_data: dict
    symptom: str
    size: str | None
    certainty: str
    workaround: str
    notes: str | None
    example: dict | None
    near_miss: dict | None
    _pred: Pred = field(repr=False, compare=False)
    paths: tuple[str, ...] = ()
    family: str | None = None
    features: tuple[str, ...] = ()

    @property
    def rule_id(self) -> str:
        return f"known_issue.{self.id}"

    @property
    def severity(self) -> Literal["error", "warning"]:
        """``error`` for a guaranteed failure (an assertion or crash every run hits), else ``warning``."""
        return "error" if self.certainty == "guaranteed" else "warning"

    def triggered(self, s: Scenario) -> bool:
        """True when the scenario's layout, model, GPU, scale and environment meet the trigger."""
        return bool(self._pred(s))

    def version_status(self, versions: ResolvedVersions) -> tuple[str, list[str]]:
        """``affected`` (every package's version known and in range), ``not_affected`` (one known and
        out of range) or ``possible`` (the rest in range or unknown), with the packages still to check
        (``possible``) or the matching versions (``affected``). A megatron-core dev checkout the
        harvested table decided (:func:`fix_by_ancestry`) is in range when it lacks the fix and out of
        range when it carries it, whatever its number; an undecided one is judged by its number."""
        unknown, matched = [], []
        for pr in self.packages:
            v = versions.get(pr.package)
            carries = fix_by_ancestry(self, v) if pr.package == "megatron_core" and v is not None else None
            if v is None:
                unknown.append(pr.describe())
            elif carries is False:
                matched.append(f"{PACKAGE_NAMES[pr.package]} {v} without the fix (git ancestry)")
            elif carries is None and pr.affected.contains(v, prereleases=True):
                matched.append(f"{PACKAGE_NAMES[pr.package]} {v} in {pr.text or pr.affected}")
            else:
                return "not_affected", []
        return ("possible", unknown) if unknown else ("affected", matched)

    @property
    def avoid(self) -> bool:
        """True when a planner must drop layouts that hit it at affected versions: a hand-entered hang,
        crash or assertion that is guaranteed or confirmed by a fix (open reports are only flagged, and
        so are harvested entries, whose triggers come from the files a fix touched, not a report)."""
        confirmed = self.certainty == "guaranteed" or any(p.fixed is not None for p in self.packages)
        return self.symptom in AVOID_SYMPTOMS and confirmed and self.family is None

    def symptom_text(self) -> str:
        text = SYMPTOMS[self.symptom]
        return f"{text} ({self.size})" if self.size else text

    def upgrade_text(self) -> str | None:
        ups = [f"{PACKAGE_NAMES[p.package]} ≥ {p.fixed}" for p in self.packages if p.fixed is not None]
        return "upgrade to " + " and ".join(ups) if ups else None

    def to_dict(self) -> dict:
        return {
            "id": self.id,
            "rule_id": self.rule_id,
            "title": self.title,
            "source": self.source,
            "related": list(self.related),
            "reported": self.reported,
            "packages": {
                p.package: {"affected": p.text or str(p.affected), "fixed": str(p.fixed) if p.fixed else None}
                for p in self.packages
            },
            "trigger": self.trigger_data,
            "symptom": self.symptom,
            "size": self.size,
            "certainty": self.certainty,
            "severity": self.severity,
            "workaround": self.workaround,
            "notes": self.notes,
            "family": self.family,
        }


def _parse_entry(raw: Any, index: int) -> KnownIssue:
    where = f"known_issues[{index}]"
    if not isinstance(raw, dict):
        raise KnownIssueDataError(f"{where}: a mapping expected")
    where = f"known issue {raw.get('id', index)!r}"
    unknown = set(raw) - _ENTRY_KEYS
    if unknown:
        raise KnownIssueDataError(
            f"{where}: unknown keys {sorted(unknown)} (allowed: {', '.join(sorted(_ENTRY_KEYS))})"
        )
    missing = _REQUIRED - set(raw)
    if missing:
        raise KnownIssueDataError(f"{where}: missing keys {sorted(missing)}")
    iid = raw["id"]
    if not isinstance(iid, str) or not _ID.match(iid):
        raise KnownIssueDataError(f"{where}: id must be snake_case letters, digits and _")
    for key in ("title", "workaround", "reported"):
        if not isinstance(raw[key], str) or not raw[key].strip():
            raise KnownIssueDataError(f"{where}: {key} must be non-empty text")
    if not re.fullmatch(r"20(25|26)-\d\d-\d\d", raw["reported"]):
        raise KnownIssueDataError(f"{where}: reported must be a 2025-2026 date (YYYY-MM-DD)")
    sources = [raw["source"], *(raw.get("related") or [])]
    for src in sources:
        if not isinstance(src, str) or not _SOURCE.match(src):
            raise KnownIssueDataError(f"{where}: source {src!r} is not a GitHub issue / pull / blob / commit URL")
    if raw["symptom"] not in SYMPTOMS:
        raise KnownIssueDataError(f"{where}: symptom {raw['symptom']!r} not one of {', '.join(SYMPTOMS)}")
    if raw["symptom"] == "slowdown" and not raw.get("size"):
        raise KnownIssueDataError(f"{where}: a slowdown states its size (size: ...)")
    if raw["certainty"] not in CERTAINTIES:
        raise KnownIssueDataError(f"{where}: certainty must be one of {', '.join(CERTAINTIES)}")
    pkgs = raw["packages"]
    if not isinstance(pkgs, dict) or not pkgs:
        raise KnownIssueDataError(f"{where}: packages must map at least one package to {{affected, fixed}}")
    ranges = []
    for pkg, rng in pkgs.items():
        if pkg not in PACKAGES:
            raise KnownIssueDataError(f"{where}: unknown package {pkg!r} (one of {', '.join(PACKAGES)})")
        if not isinstance(rng, dict) or set(rng) - {"affected", "fixed"} or "affected" not in rng:
            raise KnownIssueDataError(f"{where}: {pkg} needs {{affected: <specifier>, fixed: <version or null>}}")
        try:
            spec = SpecifierSet(str(rng["affected"]))
        except InvalidSpecifier:
            raise KnownIssueDataError(
                f"{where}: {pkg} affected {rng['affected']!r} is not a PEP 440 specifier"
            ) from None
        if not str(spec):
            raise KnownIssueDataError(f"{where}: {pkg} affected must not be empty")
        fixed = None
        if rng.get("fixed") is not None:
            try:
                fixed = Version(str(rng["fixed"]))
            except InvalidVersion:
                raise KnownIssueDataError(f"{where}: {pkg} fixed {rng['fixed']!r} is not a PEP 440 version") from None
            if spec.contains(fixed, prereleases=True):
                raise KnownIssueDataError(f"{where}: {pkg} fixed {fixed} lies inside affected {spec}")
        ranges.append(PackageRange(pkg, spec, fixed, str(rng["affected"]).replace(" ", "")))
    pred, paths = compile_trigger(raw["trigger"], f"{where}: trigger")
    for key in ("example", "near_miss"):
        if raw.get(key) is not None and not isinstance(raw[key], dict):
            raise KnownIssueDataError(f"{where}: {key} must be a scenario mapping")
    return KnownIssue(
        id=iid,
        title=raw["title"].strip(),
        source=raw["source"],
        related=tuple(raw.get("related") or ()),
        reported=raw["reported"],
        packages=tuple(ranges),
        trigger_data=raw["trigger"],
        symptom=raw["symptom"],
        size=raw.get("size"),
        certainty=raw["certainty"],
        workaround=raw["workaround"].strip(),
        notes=raw.get("notes"),
        example=raw.get("example"),
        near_miss=raw.get("near_miss"),
        _pred=pred,
        paths=tuple(dict.fromkeys(paths)),
        **_harvest_fields(raw, where),
    )


def _harvest_fields(raw: dict, where: str) -> dict[str, Any]:
    """``family`` and ``features`` of a harvested entry (None and () for a hand-entered one), checked."""
    fam = _family(raw, where)
    _check_symptom_owner(raw, fam, where)
    return {"family": fam, "features": tuple(raw["features"]) if fam is not None else ()}


def _family(raw: dict, where: str) -> str | None:
    """The entry's family (a harvested entry's; None for a hand-entered one), checked with its features."""
    fam, feats = raw.get("family"), raw.get("features")
    if fam is None and feats is None:
        return None
    if not isinstance(fam, str) or not _ID.match(fam):
        raise KnownIssueDataError(f"{where}: family must be snake_case letters, digits and _, got {fam!r}")
    if not isinstance(feats, list) or not feats or not all(isinstance(f, str) and f for f in feats):
        raise KnownIssueDataError(f"{where}: features must be a non-empty list of feature keys")
    if raw["certainty"] != "reported":
        raise KnownIssueDataError(f"{where}: a harvested entry (with a family) is certainty: reported")
    return fam


def _check_symptom_owner(raw: dict, fam: str | None, where: str) -> None:
    """A hand-entered entry (no family) names its failure: :data:`HARVESTED_ONLY_SYMPTOMS` are refused.

    Raises:
        KnownIssueDataError: a hand-entered entry with such a symptom.
    """
    if fam is None and raw["symptom"] in HARVESTED_ONLY_SYMPTOMS:
        allowed = ", ".join(s for s in SYMPTOMS if s not in HARVESTED_ONLY_SYMPTOMS)
        raise KnownIssueDataError(
            f"{where}: symptom {raw['symptom']!r} is for harvested entries (with a family); a hand-entered "
            f"entry names its failure: one of {allowed}"
        )


def parse_known_issues(data: Any) -> tuple[KnownIssue, ...]:
    """Validate the database mapping (the YAML's content) into entries.

    Raises:
        KnownIssueDataError: anything malformed, naming the entry and the field.
    """
    if not isinstance(data, dict) or data.get("schema") != 1 or not isinstance(data.get("issues"), list):
        raise KnownIssueDataError("known issues: expected {schema: 1, issues: [...]}")
    out = tuple(_parse_entry(raw, i) for i, raw in enumerate(data["issues"]))
    seen: set[str] = set()
    for k in out:
        if k.id in seen:
            raise KnownIssueDataError(f"known issue {k.id!r}: duplicate id")
        seen.add(k.id)
    return out


@functools.cache
def known_issues() -> tuple[KnownIssue, ...]:
    """The packaged database, validated (cached)."""
    text = resources.files("moeplan.catalog").joinpath("data").joinpath("known_issues.yaml").read_text(encoding="utf-8")
    return parse_known_issues(_load_packaged_yaml(text))


def _load_packaged_yaml(text: str) -> Any:
    """Parse a packaged (trusted) YAML file with libyaml's C loader where PyYAML was built with it:
    the harvested database takes about 1 s to parse with the pure-Python loader and 0.15 s with the C
    one. Both are safe loaders (no arbitrary Python objects)."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return yaml.load(text, Loader=loader)  # noqa: S506 - a safe loader, chosen above


@functools.cache
def harvested_issues() -> tuple[KnownIssue, ...]:
    """The harvested database (``known_issues_harvested.yaml``, written by
    ``scripts/harvest_known_issues.py`` from merged upstream fixes), validated (cached); every entry
    has a family and is ``certainty: reported``.

    Raises:
        KnownIssueDataError: an entry is malformed, has no family, or reuses a hand-entered id.
    """
    out = parse_known_issues(_harvested_data())
    hand = {k.id for k in known_issues()}
    for k in out:
        if k.family is None or k.id in hand:
            raise KnownIssueDataError(f"harvested known issue {k.id!r}: needs a family and an id of its own")
    return out


@functools.cache
def _harvested_data() -> Any:
    """The harvested file's mapping (``known_issues_harvested.yaml``), parsed once."""
    text = (
        resources.files("moeplan.catalog")
        .joinpath("data")
        .joinpath("known_issues_harvested.yaml")
        .read_text(encoding="utf-8")
    )
    return _load_packaged_yaml(text)


def dev_checkout(version: Version | None) -> str | None:
    """The commit a megatron-core dev checkout's version names: the hex after ``dev.`` in its local
    label (``0.18.0+dev.256f606507`` → ``256f606507``, the way ``scripts/import_moe_recipe_releases.py``
    writes a recipe's checkout); None for any other version."""
    local = (version.local or "") if version is not None else ""
    hit = re.fullmatch(r"dev\.([0-9a-f]{7,40})", local)
    return hit.group(1) if hit else None


def is_dev_checkout(version: Version | None) -> bool:
    """True for a megatron-core dev build: a dev release (``0.20.0.dev0``) or a local label naming
    ``dev`` (``0.19.0+dev``, ``0.18.0+dev.<sha>``), whose number does not say which fixes it carries."""
    return version is not None and (version.is_devrelease or "dev" in str(version.local or ""))


@functools.cache
def _checkout_table() -> dict[str, tuple[frozenset[str], frozenset[str], frozenset[str]]]:
    """The harvested file's ``dev_checkouts``: short sha → (entries whose fix it carries, entries whose
    fix it lacks, every megatron-core entry it was decided against)."""
    data = _harvested_data()
    decided = frozenset(str(raw["id"]) for raw in data["issues"] if "megatron_core" in (raw.get("packages") or {}))
    table = data.get("dev_checkouts") or {}
    return {
        str(sha): (frozenset(row.get("carries") or ()), frozenset(row.get("lacks") or ()), decided)
        for sha, row in table.items()
    }


def fix_by_ancestry(issue: KnownIssue, version: Version | None) -> bool | None:
    """Whether the megatron-core dev checkout ``version`` names (:func:`dev_checkout`) carries the fix
    of ``issue``, decided by git ancestry when the harvester read it
    (``scripts/harvest_known_issues.py``: the fix commit, or one of its subject, reachable from the
    checkout): True carries it, False lacks it, None undecided (not a checkout the table holds, a
    short sha that matches none or several, or an entry it was not decided against). A decided
    entry the table lists under neither is as its range says."""
    sha = dev_checkout(version)
    if sha is None or version is None:
        return None
    rows = [row for key, row in _checkout_table().items() if key.startswith(sha) or sha.startswith(key)]
    if len(rows) != 1 or issue.id not in rows[0][2]:
        return None
    carries, lacks, _ = rows[0]
    if issue.id in carries:
        return True
    if issue.id in lacks:
        return False
    return not any(
        p.affected.contains(version, prereleases=True) for p in issue.packages if p.package == "megatron_core"
    )


def all_known_issues() -> tuple[KnownIssue, ...]:
    """The hand-entered entries, then the harvested ones."""
    return known_issues() + harvested_issues()


def get_known_issue(issue_id: str) -> KnownIssue | None:
    """The entry with this id, hand-entered or harvested (``known_issue.`` prefix allowed), None when unknown."""
    iid = issue_id.removeprefix("known_issue.")
    return next((k for k in all_known_issues() if k.id == iid), None)


__all__ = [
    "AVOID_SYMPTOMS",
    "HARVESTED_ONLY_SYMPTOMS",
    "FACTS",
    "SYMPTOMS",
    "KnownIssue",
    "KnownIssueDataError",
    "PackageRange",
    "all_known_issues",
    "compile_trigger",
    "dev_checkout",
    "fact",
    "fix_by_ancestry",
    "get_known_issue",
    "harvested_issues",
    "is_dev_checkout",
    "known_issues",
    "parse_known_issues",
]
