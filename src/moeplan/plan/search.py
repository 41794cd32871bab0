"""Layout search: enumerate, reject cheaply, fit memory with the least costly recompute, time what
fits, refine the best, rank.

Order of work per parallel layout (cheap first): folding arithmetic → GBS divisibility → every
Megatron-Core rule (:func:`moeplan.validate`) → memory: the most memory-saving rung of the recompute
ladder first (does anything fit?), then a binary search for the cheapest rung that fits with the
requested headroom (memory computed only for the pipeline stages that can hold the peak,
:mod:`moeplan.model.memory.peak_stages`) → the step-time model. The best ``refine`` layouts are then
refined one knob family at a time (VPP, token dispatcher, CUDA graph scope, CP communication type),
each variant re-checked by the rules and re-fitted, its recompute search starting at the rung its
layout fitted at (``Evaluator.evaluate(hint=)``). Ties break on the layout tuple, so results are
identical across runs.

Recipe defaults (``recipe_defaults: mbridge-perf``) are resolved once for the request
(:func:`request_recipe`) and that record is applied to every candidate: no recipe row is matched
per candidate, and no fill sets a key the planner decides (:data:`~moeplan.plan.space.PLANNER_KEYS`),
so the recompute rung and knob labels say what was estimated; a candidate's sizes and family (its
label) are read from the scenario its estimates were computed for.
"""

from __future__ import annotations

from collections.abc import Callable

from moeplan.plan.candidates import (
    DEFAULT_HEADROOM_FRACTION,
    DOMINATED_FRACTION,
    OBJECTIVES,
    PROBE_FACTOR,
    REJECTION_TAGS,
    TIE_FRACTION,
    WEAK_DISPATCHER_TIE,
    Candidate,
    Rejections,
    SearchResult,
    fewest_warnings,
    rejection_meaning,
    simplest_leads,
    time_to_train_s,
    weak_dispatcher_tie,
)
from moeplan.plan.phases import phase_one, refine_phase
from moeplan.plan.search_setup import layout_combos, mbs_options, request_recipe, request_summary, setup_search
from moeplan.plan.space import with_sections

__all__ = [
    "DEFAULT_HEADROOM_FRACTION",
    "DOMINATED_FRACTION",
    "OBJECTIVES",
    "PROBE_FACTOR",
    "REJECTION_TAGS",
    "TIE_FRACTION",
    "WEAK_DISPATCHER_TIE",
    "Candidate",
    "Rejections",
    "SearchResult",
    "fewest_warnings",
    "mbs_options",
    "rejection_meaning",
    "request_recipe",
    "search",
    "simplest_leads",
    "time_to_train_s",
    "weak_dispatcher_tie",
]


def search(
    base: dict,
    *,
    min_dp: int = 1,
    headroom_gib: float | None = None,
    refine: int = 16,
    constants=None,
    progress: Callable[[int, int], None] | None = None,
    recipe_from: dict | None = None,
    exact: bool = False,
) -> SearchResult:
    """Search the layout space of a request.

    Args:
        base: scenario mapping with ``model``, ``system.gpu``, ``system.num_gpus``,
            ``training.seq_length`` (and optionally ``global_batch_size``, ``micro_batch_size``,
            ``precision``); every ``layout`` key given is held fixed.
        min_dp: smallest data-parallel size accepted.
        headroom_gib: GiB kept free per GPU (default 5 % of usable HBM).
        refine: without ``exact``, how many of the best layouts by un-refined throughput are refined
            over VPP, dispatcher, graphs and CP comm; with it, how many of the ranking's first places
            are exact (every layout that can still enter them is refined).
        progress: called with (done, total) over the enumeration.
        recipe_from: the request whose recipe fills the candidates get (default ``base``): a
            baseline's search holds more sizes than the request it serves, and with every core size
            held its own request would match a recipe row the main search's candidates never got
            (the same layout then predicted two ways, e.g. with and without a row's FP8 attention).
        exact: refine every layout whose throughput bound can still enter the ``refine`` best
            (:func:`moeplan.plan.phases.refine_within_bound`) instead of a fixed number of the best by
            un-refined throughput. Default False, as ``plan`` (``plan(exact=True)`` turns it on): on the
            published Megatron Bridge runs (``docs/plan_quality.md``) the exact search lowers the agreement
            with the published layouts from 99 to 79 of 113 (also when only the first place is made exact).
            18 of the 20 runs it loses move the first places to an expert group that crosses the NVLink
            domain (gpt-oss-120b on 64 H100 at 4K: TP1 PP1 EP32, where the publisher runs TP1 PP4 EP8). The
            model is not known to over-value such groups: where the publisher itself moved an expert
            group across the domain or back, it predicts the measured direction each time
            (``docs/accuracy.md``, layout changes), and on the published runs whose expert group crosses
            the domain it under-predicts (median −7 % against −1 % for the others).

    Returns:
        :class:`SearchResult`, candidates sorted by tokens/s/GPU (best first).

    Raises:
        InputError: incomplete or malformed request (field named).
    """
    base = with_sections(base)
    st = setup_search(base, headroom_gib, constants, with_sections(recipe_from) if recipe_from is not None else None)
    ph = phase_one(st, layout_combos(st, min_dp), progress)
    ph.found.sort(key=Candidate.key)
    out, refined_variants = refine_phase(st, ph.found, refine, exact)
    tie_note = simplest_leads(out)
    return SearchResult(
        out,
        st.rej,
        st.ev.evaluated,
        st.assumptions,
        request_summary(st, base, min_dp, headroom_gib),
        [n for n, _ in st.ladder],
        st.ev,
        tie_note,
        ph.considered,
        len(ph.found),
        refined_variants,
        st.ev.recipe,
    )
