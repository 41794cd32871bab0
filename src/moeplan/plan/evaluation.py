"""Evaluating one layout: its recompute / offload rung (the cheapest that is legal and fits, found by a
binary search down the ladder), its memory and step-time estimates, and the knob labels it stands for
(:class:`Evaluator`). Every scenario, rule check, memory and step-time estimate of a mapping is kept for
the plan call that asks for it (:class:`EvaluationCache`): the baselines' searches re-evaluate many
layouts the main search has."""

from __future__ import annotations

import contextlib
import contextvars
import gc
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from pydantic import ValidationError

from moeplan.errors import InputError
from moeplan.inputs.provenance import RecipeProvenance
from moeplan.inputs.resolved import Scenario
from moeplan.inputs.schema import ScenarioInput, layout_only_change, scenario_from_dict, scenario_input_with
from moeplan.model.memory import MemoryEstimate, estimate_memory
from moeplan.model.step import ThroughputEstimate, estimate_step
from moeplan.plan.candidates import DEFAULT_HEADROOM_FRACTION, KNOB_KEYS, Candidate, Rejections
from moeplan.plan.rule_memo import RuleMemo
from moeplan.plan.screening import RuleScreen
from moeplan.plan.space import Parallel
from moeplan.resolve.defaults import RequestParts, request_parts, resolve
from moeplan.units import GIB_BYTES

#: what :meth:`Evaluator.evaluate` finds: (rung label, data, scenario, memory, peak GiB of each rung tried)
Found = tuple[str, dict, Scenario, MemoryEstimate, dict[str, float | None]]


@dataclass
class _Entry:
    """What one candidate mapping resolved to: its scenario (None: rejected, ``why`` says by what) and
    the estimates computed for it, per headroom margin (memory) and per time-constants object (step)."""

    scenario: Scenario | None
    why: str | None
    #: the rule ids of the check's warnings for the scenario, sorted, made when called (None: validate)
    warnings: Callable[[], tuple[str, ...]] | None = None
    fits: dict[int | None, tuple[bool, MemoryEstimate]] = field(default_factory=dict)
    steps: dict[int, ThroughputEstimate] = field(default_factory=dict)


class EvaluationCache:
    """The scenarios, rule checks and estimates of the candidate mappings one plan call evaluates, keyed
    by the mapping as written (key order included) and the recipe fills applied. The resolution,
    the rules and the cost models are pure functions of that pair, so a repeat answers what the first
    evaluation did: the plan's two baselines search layouts the main search has evaluated, and
    refinement re-tries each layout's own knob values. Lives for one :func:`evaluation_cache` block."""

    def __init__(self) -> None:
        self._by_key: dict[str, _Entry] = {}
        self._by_scenario: dict[int, _Entry] = {}
        self.hits = 0
        self.keep: list[object] = []
        #: the rule screen of every candidate (:class:`~moeplan.plan.screening.RuleScreen`)
        self.screen = RuleScreen()
        #: validated inputs by every section but ``layout`` and ``training.micro_batch_size``
        #: (:meth:`scenario_input`)
        self._templates: dict[str, ScenarioInput] = {}
        #: each request's rule memo (:meth:`rule_memo`)
        self._memos: dict[str, RuleMemo] = {}
        #: each request's model, GPU and versions (:meth:`request_parts`)
        self._parts: dict[str, RequestParts] = {}

    @staticmethod
    def request_key(data: dict) -> str | None:
        """What a candidate mapping shares with the other candidates of its request: every section but
        ``layout`` and ``training.micro_batch_size``, as text (:func:`_key_text`); None when its input cannot
        be built from another's (:func:`moeplan.inputs.schema.layout_only_change`)."""
        if not layout_only_change(data):
            return None
        rest = {k: v for k, v in data.items() if k != "layout"}
        rest["training"] = {k: v for k, v in data["training"].items() if k != "micro_batch_size"}
        return _key_text(rest)

    def scenario_input(self, data: dict, key: str | None) -> ScenarioInput:
        """The validated input of a candidate mapping (``key``: its :meth:`request_key`): built from the
        input of an earlier candidate of the same request (:func:`moeplan.inputs.schema.scenario_input_with`:
        only its layout and training sections validated), else validated in full
        (:func:`moeplan.inputs.schema.scenario_from_dict`).

        Raises:
            InputError: as :func:`moeplan.inputs.schema.scenario_from_dict`.
        """
        if key is None:
            return scenario_from_dict(data)
        template = self._templates.get(key)
        if template is None:
            template = self._templates[key] = scenario_from_dict(data)
            return template
        try:
            return scenario_input_with(template, data)
        except ValidationError:
            return scenario_from_dict(data)  # raises the error the whole mapping's validation names

    def request_parts(self, inp: ScenarioInput, key: str | None) -> RequestParts | None:
        """The :class:`~moeplan.resolve.defaults.RequestParts` of the request ``key`` names (computed from
        ``inp``, one of its candidates' inputs, on first use); None for a mapping without a request key.

        Raises:
            InputError / UnknownNameError: as :func:`moeplan.resolve.defaults.request_parts` (not kept).
        """
        if key is None:
            return None
        got = self._parts.get(key)
        if got is None:
            got = self._parts[key] = request_parts(inp)
        return got

    def rule_memo(self, key: str | None) -> RuleMemo | None:
        """The rule memo of the request ``key`` names (:class:`~moeplan.plan.rule_memo.RuleMemo`); None
        for a mapping without a request key."""
        if key is None:
            return None
        got = self._memos.get(key)
        if got is None:
            got = self._memos[key] = RuleMemo()
        return got

    def resolve(self, data: dict, recipe_key: str, make: Callable[[], _Entry]) -> _Entry:
        """The entry of ``data`` under the recipe ``recipe_key``; ``make()`` makes it on a miss."""
        key = recipe_key + _key_text(data)
        got = self._by_key.get(key)
        if got is not None:
            self.hits += 1
            return got
        entry = make()
        s = entry.scenario
        self._by_key[key] = entry
        if s is not None:
            self._by_scenario[id(s)] = entry  # the entry holds ``s``: its id stays unique
        return entry

    def entry_of(self, s: Scenario) -> _Entry | None:
        """The entry a scenario came from (None: not resolved through this cache)."""
        return self._by_scenario.get(id(s))


def _key_text(data: dict) -> str:
    """A mapping as cache-key text: its ``repr``, which tells apart everything its JSON text does (key
    order included) and more (1 from 1.0 from True, tuples from lists), and is made faster (3.8 against
    6.5 µs for a DeepSeek-V3 candidate's mapping)."""
    return repr(data)


_ACTIVE: contextvars.ContextVar[EvaluationCache | None] = contextvars.ContextVar("evaluation_cache", default=None)


@contextlib.contextmanager
def evaluation_cache() -> Iterator[EvaluationCache]:
    """Share one :class:`EvaluationCache` between every search started inside the block (the plan's
    own and its baselines'); an enclosing block's cache is reused."""
    current = _ACTIVE.get()
    if current is not None:
        yield current
        return
    cache = EvaluationCache()
    token = _ACTIVE.set(cache)
    try:
        yield cache
    finally:
        _ACTIVE.reset(token)


_PAUSE = threading.Lock()
#: [blocks inside :func:`collector_paused`, whether the collector was on when the first began]
_PAUSED: list = [0, False]


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector paused while the block runs, and restored after (nested and
    concurrent blocks are counted: the state the first found is restored when the last ends).

    A plan allocates a great many short-lived objects and creates no reference cycles (a collection
    after a DeepSeek-V3 plan at 128K on 1,024 H100 finds nothing to free); reference counting frees
    them all, while the collector's passes over every long-lived object (the catalogs, the caches)
    cost about a sixth of the plan's CPU time (0.35 of 2.07 s on that plan). When the last block ends,
    the objects it left alive are moved to the oldest generation without a pass
    (:func:`_promote_untraversed`)."""
    with _PAUSE:
        if _PAUSED[0] == 0:
            _PAUSED[1] = gc.isenabled()
            gc.disable()
        _PAUSED[0] += 1
    try:
        yield
    finally:
        with _PAUSE:
            _PAUSED[0] -= 1
            if _PAUSED[0] == 0 and _PAUSED[1]:
                _promote_untraversed()
                gc.enable()


def _promote_untraversed() -> None:
    """Every object the collector tracks moved to its oldest generation, and the young generation's
    allocation count reset, without a collection pass (``gc.freeze`` then ``gc.unfreeze``: both move whole
    generation lists, constant time). Otherwise the first allocation after a plan starts a young-generation
    pass over everything the plan left alive (its caches and results): about 0.08 s, 7 % of a DeepSeek-V3
    plan at 128K on 1,024 H100. Safe because a plan makes no reference cycles (a test collects after one
    and finds nothing): what it leaves is freed by reference counting, or by a full collection if ever
    cyclic. Skipped when the process already froze objects itself (``gc.get_freeze_count()`` > 0): its
    frozen set is left as it is."""
    if gc.get_freeze_count() == 0:
        gc.freeze()
        gc.unfreeze()


def active_cache() -> EvaluationCache:
    """The cache of the enclosing :func:`evaluation_cache` block, else a new one (one search's own)."""
    return _ACTIVE.get() or EvaluationCache()


class Evaluator:
    """Holds the request and evaluates layouts (rules → memory ladder → time)."""

    def __init__(
        self, base: dict, capacity_margin_bytes: int | None, constants=None, recipe: RecipeProvenance | None = None
    ):
        self.base = base
        #: the request's recipe fills, the same for every candidate (:func:`request_recipe`)
        self.recipe = recipe
        self.constants = constants
        self.margin = capacity_margin_bytes
        self.evaluated = 0
        #: off-ladder rungs compared by time when only full recompute fits (set by :func:`search`)
        self.alternatives: list[tuple[str, dict]] = []
        #: what this plan call has evaluated already (:func:`evaluation_cache`)
        self.cache = active_cache()
        self.cache.keep.append(constants)  # its id keys the step estimates: it must outlive the cache
        self._recipe_key = repr(recipe)

    def scenario(self, data: dict, key: str | None = None) -> Scenario:
        """A candidate mapping resolved with the request's recipe fills (no row matched for it), from
        its validated input (:meth:`EvaluationCache.scenario_input`; ``key``: its request key)."""
        inp = self.cache.scenario_input(data, key)
        return resolve(inp, self.recipe, self.cache.request_parts(inp, key))

    def fits(self, s: Scenario) -> tuple[bool, MemoryEstimate]:
        """(peak ≤ capacity − headroom and not does-not-fit, the memory estimate)."""
        entry = self.cache.entry_of(s)
        if entry is not None and self.margin in entry.fits:
            return entry.fits[self.margin]
        mem = estimate_memory(s, notes_on_read=True, stages_on_read=True)  # (notes and every stage: made if shown)
        cap = mem.capacity_bytes or 0
        margin = self.margin if self.margin is not None else int(cap * DEFAULT_HEADROOM_FRACTION)
        ok = mem.peak_bytes <= cap - margin and mem.verdict != "does-not-fit"
        if entry is not None:
            entry.fits[self.margin] = (ok, mem)
        return ok, mem

    def step(self, s: Scenario) -> ThroughputEstimate:
        """The step-time estimate of ``s`` with the search's time constants (computed once per plan call)."""
        entry = self.cache.entry_of(s)
        key = id(self.constants)  # (the constants object lives as long as the search that holds it)
        if entry is not None and key in entry.steps:
            return entry.steps[key]
        th = estimate_step(s, self.constants, notes_on_read=True)  # (its notes are made if it is shown)
        if entry is not None:
            entry.steps[key] = th
        return th

    def evaluate(
        self,
        data: dict,
        ladder: list[tuple[str, dict]],
        rej: Rejections,
        label: str,
        floor_tps: float = 0.0,
        hint: int | None = None,
    ) -> Found | None:
        """The cheapest ladder rung that is legal and fits: (rung label, data, scenario, memory, the
        peak GiB of each rung tried). The search assumes what the ladder is built for: memory falls
        along it, so every rung above a fitting one fits. ``hint``: the index of the rung a closely
        related layout fitted at (refinement: the layout the knob is applied to); when that rung fits
        and the one below it does not, it is the answer without a search (:meth:`_at_hint`)."""

        def rung(i: int) -> tuple[dict, Scenario | None, str | None]:
            return self._with(data, ladder[i][1])

        self.evaluated += 1
        if hint is not None and floor_tps <= 0 and 0 <= hint < len(ladder):
            got = self._at_hint(ladder, hint, rung)
            if got is not None:
                return self._off_ladder_if_faster(got, data)
        # does anything fit? (most memory-saving rung)
        last = len(ladder) - 1
        d, s, why = rung(last)
        while s is None and last > 0:
            # a rung may break a rule (e.g. offload without the precision-aware optimizer): step down
            last -= 1
            d, s, why = rung(last)
        if s is None:
            rej.add(why or "rules", label)
            return None
        ok, mem = self.fits(s)
        if not ok:
            # tagged by the memory verdict every command gives: over the headroom but only tight (the
            # band crosses the usable memory) or fitting is not called does-not-fit
            tag = {"does-not-fit": "does-not-fit", "tight": "tight"}.get(mem.verdict, "headroom")
            rej.add(tag, f"{label}: {mem.peak_bytes / GIB_BYTES:.1f} GiB with {ladder[last][0]}")
            return None
        seen: dict[str, float | None] = {ladder[last][0]: mem.peak_bytes / GIB_BYTES}
        if floor_tps > 0 and last > 0:
            # branch and bound: recompute and offload only add time, so the cheapest rung's
            # throughput bounds every rung's; far below the best so far → not worth fitting
            d0, s0, _ = rung(0)
            if s0 is not None:
                bound = self.step(s0).tokens_per_s_per_gpu
                if bound < floor_tps:
                    rej.add("dominated", f"{label}: ≤ {bound:,.0f} tok/s/GPU even without recompute")
                    return None
                ok0, mem0 = self.fits(s0)
                seen[ladder[0][0]] = mem0.peak_bytes / GIB_BYTES
                if ok0:  # the cheapest rung fits: nothing to search below it
                    return (ladder[0][0], d0, s0, mem0, seen)
        best: Found = (ladder[last][0], d, s, mem, seen)
        lo, hi = 0, last - 1
        # binary search for the cheapest fitting rung (memory falls along the ladder)
        while lo <= hi:
            mid = (lo + hi) // 2
            d2, s2, _ = rung(mid)
            ok2, mem2 = self.fits(s2) if s2 is not None else (False, None)
            seen[ladder[mid][0]] = mem2.peak_bytes / GIB_BYTES if mem2 is not None else None
            if ok2 and s2 is not None and mem2 is not None:  # (ok2 only with both)
                best = (ladder[mid][0], d2, s2, mem2, seen)
                hi = mid - 1
            else:
                lo = mid + 1
        return self._off_ladder_if_faster(best, data)

    def _off_ladder_if_faster(self, found: Found, data: dict) -> Found:
        """``found``, or when its rung is a full recompute the faster of it and the off-ladder rungs
        (:meth:`_faster_alternative`)."""
        return self._faster_alternative(found, data) if found[0].startswith("full") and self.alternatives else found

    def _at_hint(self, ladder: list[tuple[str, dict]], hint: int, rung: Callable) -> Found | None:
        """Rung ``hint`` when it is legal and fits and the rung below it is not or does not (or it is
        the first rung): the cheapest fitting rung, as the search would find it; else None (the search
        runs, and reuses the rungs tried here from the evaluation cache)."""
        d, s, _ = rung(hint)
        if s is None:
            return None
        ok, mem = self.fits(s)
        if not ok:
            return None
        seen: dict[str, float | None] = {ladder[hint][0]: mem.peak_bytes / GIB_BYTES}
        if hint > 0:
            _, s2, _ = rung(hint - 1)
            ok2, mem2 = self.fits(s2) if s2 is not None else (False, None)
            if ok2:
                return None
            seen[ladder[hint - 1][0]] = mem2.peak_bytes / GIB_BYTES if mem2 is not None else None
        return (ladder[hint][0], d, s, mem, seen)

    def _with(self, data: dict, keys: dict) -> tuple[dict, Scenario | None, str | None]:
        """``data`` with its recompute / offload keys replaced by ``keys`` (those the request holds
        fixed stay): (data, scenario or None, the first broken rule or input field)."""
        d = copy_mapping(data)
        fixed = self.base.get("layout", {})
        for k in KNOB_KEYS["recompute"]:
            if k not in fixed:
                d["layout"].pop(k, None)
        d["layout"].update({k: v for k, v in keys.items() if k not in fixed})
        if d["layout"].get("recompute_granularity") is None:
            d["layout"].pop("recompute_granularity", None)
        entry = self.cache.resolve(d, self._recipe_key, lambda: self._checked(d))
        return d, entry.scenario, entry.why

    def _checked(self, d: dict) -> _Entry:
        """``d`` resolved and checked: its scenario with the check's warnings (from the rule memo's
        outcomes and :meth:`~moeplan.plan.screening.RuleScreen.skipped_warning_ids`), or no scenario and
        the first broken rule or input field."""
        key = self.cache.request_key(d)
        try:
            s = self.scenario(d, key)
        except InputError as exc:
            return _Entry(None, f"input: {exc.field}")
        # the first broken rule, else a confirmed hang, crash or assertion at the stated versions
        memo, screen = self.cache.rule_memo(key), self.cache.screen
        why = screen.why_rejected(s, memo)
        if why:
            return _Entry(None, why)
        if memo is None:
            return _Entry(s, None)
        screened = memo.last_warnings()
        return _Entry(s, None, lambda: tuple(sorted({*screened(), *screen.skipped_warning_ids(s)})))

    def _faster_alternative(self, best: Found, data: dict) -> Found:
        """When only full recompute fits: the off-ladder rungs (every selective module with the
        optimizer state offloaded, :func:`offload_alternatives`) that fit too, and the fastest of them
        and the ladder's choice by predicted step time: offloading the optimizer can cost less than
        recomputing every layer, or more — the time model decides, not the ladder's order."""
        label, d, s, mem, seen = best
        top = (self.step(s).tokens_per_s_per_gpu, best)
        for alt_label, keys in self.alternatives:
            d2, s2, _ = self._with(data, keys)
            if s2 is None:
                seen[alt_label] = None
                continue
            ok, mem2 = self.fits(s2)
            seen[alt_label] = mem2.peak_bytes / GIB_BYTES
            if ok:
                tps = self.step(s2).tokens_per_s_per_gpu
                if tps > top[0]:
                    top = (tps, (alt_label, d2, s2, mem2, seen))
        return top[1]

    def timed(self, found, knobs: dict[str, str]) -> Candidate:
        """A candidate from what :meth:`evaluate` found, timed; its sizes and family (its label) are
        read from the same resolved scenario the memory and time estimates were computed for."""
        rung_label, d, s, mem, seen = found
        th = self.step(s)
        c = Candidate(Parallel.of(s), d, s, mem, th, rung_label, dict(knobs))
        entry = self.cache.entry_of(s)
        c.warnings_source = entry.warnings if entry is not None else None
        c.ladder_tried = sorted(seen.items(), key=lambda kv: kv[0])
        c.capacity_gib = (mem.capacity_bytes or 0) / GIB_BYTES
        return c


def copy_mapping(x):
    """A copy of a scenario mapping (nested dicts and lists of plain values): what copy.deepcopy does
    here, several times faster (the search copies one per candidate)."""
    if isinstance(x, dict):
        return {k: copy_mapping(v) for k, v in x.items()}
    if isinstance(x, list):
        return [copy_mapping(v) for v in x]
    return x


def apply_keys(data: dict, keys: dict, base_layout: dict) -> dict:
    d = copy_mapping(data)
    for k, v in keys.items():
        if k not in base_layout:
            if v is None:
                d["layout"].pop(k, None)
            else:
                d["layout"][k] = v
    return d


def _disp_label(s: Scenario) -> str:
    lay = s.layout
    if lay.moe_token_dispatcher_type == "flex":
        return lay.moe_flex_dispatcher_backend or "flex"
    return lay.moe_token_dispatcher_type or "alltoall"


def knob_labels(s: Scenario) -> dict[str, str]:
    """The knob labels of a layout as it stands (what the request holds fixed included), in the names
    the refinement uses."""
    lay = s.layout
    if lay.cuda_graph_impl == "full_iteration" or s.graph_scopes() == ["full_iteration"]:
        graphs = "full_iteration"
    elif s.graphs_on():
        graphs = "te:" + "+".join(s.graph_scopes()) if lay.cuda_graph_impl == "transformer_engine" else "local"
    else:
        graphs = "eager"
    cp_comm = lay.cp_comm_type if isinstance(lay.cp_comm_type, str) else "p2p"
    h = lay.hierarchical_context_parallel_sizes
    if cp_comm == "a2a+p2p" and h:
        cp_comm = f"a2a+p2p {'x'.join(map(str, h))}"
    return {
        "dispatcher": _disp_label(s),
        "ep_overlap": "on" if lay.overlap_moe_expert_parallel_comm else "off",
        "graphs": graphs,
        "cp_comm": cp_comm,
    }
