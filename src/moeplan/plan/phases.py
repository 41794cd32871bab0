"""The search's two phases: every parallel layout once with the default knobs (:func:`phase_one`), then
the refinement of every layout that can still win (:func:`refine_phase`: by an upper bound on what any
knob can give it, :mod:`moeplan.plan.bounds`)."""

from __future__ import annotations

import dataclasses
import heapq
from dataclasses import dataclass, field
from typing import cast

from moeplan.plan.bounds import refined_bound
from moeplan.plan.candidates import DEFAULT_HEADROOM_FRACTION, DOMINATED_FRACTION, PROBE_FACTOR, TIE_FRACTION, Candidate
from moeplan.plan.evaluation import copy_mapping, knob_labels
from moeplan.plan.refinement import candidate_signature, knob_families, refine_candidate
from moeplan.plan.search_setup import SearchSetup
from moeplan.plan.space import (
    Parallel,
)
from moeplan.structure.params import count_params
from moeplan.structure.stages import output_stage_layers, pipeline_split
from moeplan.units import GIB_BYTES


@dataclass
class _PhaseOne:
    """Phase one's running state: the layouts found, the best throughput so far (the bound), the
    layouts considered, and what every candidate of a layout starts from."""

    defaults: dict
    default_cp: dict
    dense_params: float
    expert_params: float
    cap: float
    tail: float
    found: list[Candidate] = field(default_factory=list)
    best_tps: float = 0.0
    considered: int = 0


def _phase_one_state(st: SearchSetup) -> _PhaseOne:
    """Defaults of phase one: the all-to-all dispatcher for MoE (unless held), the a2a CP exchange for
    models with attention sinks or sliding windows (rule sequence.cp_attention_support: they run
    context parallelism only with it), the parameter counts for the weights floor, the capacity."""

    m, fixed_layout = st.model, st.fixed_layout
    default_disp = {}
    if m.is_moe and "moe_token_dispatcher_type" not in fixed_layout:
        default_disp = {"moe_token_dispatcher_type": "alltoall"}
    a2a_only = bool(m.attention_sinks) or "sliding" in set(m.attention_kinds or ())
    default_cp = {"cp_comm_type": "a2a"} if a2a_only and "cp_comm_type" not in fixed_layout else {}
    counts = count_params(m)
    expert_params = counts.by_kind.get("routed_experts", 0)
    dense_params = counts.total_with(mtp=True, vision=True) - expert_params
    margin = st.margin
    usable = cast(int, st.s0.capacity_bytes)  # the GPU's usable HBM less system.reserved_gib
    cap = usable - (margin if margin is not None else usable * DEFAULT_HEADROOM_FRACTION)
    tail = output_stage_layers(m, st.seq_length, 1, st.s0.mtp_num_layers)
    return _PhaseOne(default_disp, default_cp, dense_params, expert_params, cap, tail)


def _phase_one_layout(st: SearchSetup, ph: _PhaseOne, p: Parallel) -> None:
    """Evaluate one parallel layout at every micro-batch size: its pipeline split, the weights floor
    (bf16 weights + grads of a balanced stage must fit), GBS divisibility, then the ladder and the
    time model; what fits joins ``ph.found``."""
    fixed_layout, rej, world = st.fixed_layout, st.rej, st.world
    if p.vpp == 1 and "virtual_pipeline_model_parallel_size" in fixed_layout:
        p = Parallel(p.tp, p.pp, p.cp, p.ep, p.etp, fixed_layout["virtual_pipeline_model_parallel_size"] or 1, p.fsdp)
    ph.considered += len(st.mbss)
    split = (
        pipeline_split(st.model.num_layers, p.pp, p.vpp, st.s0.mtp_num_layers, ph.tail)
        if "pipeline_model_parallel_layout" not in fixed_layout
        else {}
    )
    if split is None:
        for _ in st.mbss:
            rej.add("pipeline.too_few_layers", p.label())
        return
    dp = p.dp(world)
    # lower bound before any model evaluation: bf16 weights + bf16 grads of a perfectly balanced
    # stage (optimizer fully offloaded, activations zero) must fit
    # (LoRA: the frozen base has no gradients, so its bf16 weights alone)
    per_param = 2.0 if st.s0.peft is not None else 4.0
    floor = per_param * (ph.dense_params / (p.tp * p.pp) + ph.expert_params / (p.ep * p.etp * p.pp))
    if floor > ph.cap and not p.fsdp:
        what = "frozen weights" if st.s0.peft is not None else "weights + grads"
        for _ in st.mbss:
            rej.add("does-not-fit", f"{p.label()}: {what} alone {floor / GIB_BYTES:.1f} GiB")
        return
    gbs = st.global_batch_size
    for mbs in st.mbss:
        if gbs % (mbs * dp):
            rej.add("gbs-divisibility", f"{p.label()}: GBS {gbs} % (MBS {mbs} · DP {dp}) ≠ 0")
            continue
        d = copy_mapping(st.data)
        d["training"]["micro_batch_size"] = mbs
        cp_keys = ph.default_cp if p.cp > 1 else {}
        d["layout"] = {**p.keys(), **split, **ph.defaults, **cp_keys, **fixed_layout}
        got = st.ev.evaluate(d, st.ladder, rej, f"{p.label()} MBS{mbs}", DOMINATED_FRACTION * ph.best_tps)
        if got is None:
            continue
        ph.found.append(st.ev.timed(got, knob_labels(got[2])))
        ph.best_tps = max(ph.best_tps, ph.found[-1].tokens_per_s_per_gpu)


def phase_one(st: SearchSetup, combos: list[Parallel], progress) -> _PhaseOne:
    """Every parallel layout once, with the default knobs: a spread-out sample first, so the bound
    is tight early (the order changes nothing but which dominated layouts get tallied); ETP > 1 only
    when no ETP = 1 layout fits (the guidance: expert tensor parallelism is a last resort) unless ETP
    is held. Returns the state with the fitting layouts (unsorted)."""
    ph = _phase_one_state(st)
    stride = 7
    combos = combos[::stride] + [c for i, c in enumerate(combos) if i % stride]
    deferred: list[Parallel] = []
    if "expert_tensor_parallel_size" not in st.fixed_layout:
        deferred = [p for p in combos if p.etp > 1]
        combos = [p for p in combos if p.etp == 1]
    todo = list(combos)
    i = -1
    while todo:
        i += 1
        p = todo.pop(0)
        if not todo and deferred and not ph.found:
            todo, deferred = deferred, []
        if progress:
            progress(i, len(combos))
        _phase_one_layout(st, ph, p)
    for p in deferred:
        ph.considered += 1
        st.rej.add("etp-not-needed", f"{p.label()}: EP alone places the experts (ETP 1 fits)")
    if progress:
        progress(len(combos), len(combos))
    return ph


def _probe_vpp(st: SearchSetup, found: list[Candidate], refine: int) -> tuple[list[Candidate], bool]:
    """The layouts to refine, chosen with a VPP-only probe of the ``PROBE_FACTOR × refine`` best by
    un-refined throughput. Interleaving is the knob that moves a
    pipelined layout most (it shrinks the bubble), and phase one ranks every layout at VPP 1: without
    the probe, more HBM could let layouts that gain little from refinement (less recompute, no PP)
    crowd out a pipelined one that refines to the fastest (DeepSeek-V3 at 32K on 256 H100: 1.5× HBM
    planned 768 tokens/s/GPU, 2× HBM 631). The set is the union of the ``refine`` best before and after
    the probe (at most twice ``refine``). Returns the probed candidates (VPP chosen as the full
    refinement would choose it: VPP is its first family), best first, and whether they were probed."""
    if "virtual_pipeline_model_parallel_size" in st.fixed_layout or "pipeline_model_parallel_layout" in st.fixed_layout:
        return list(found[:refine]), False
    probed = [
        c if c.parallel.pp == 1 else refine_candidate(c, st.ev, st.ladder, st.fixed_layout, st.rej, only=("vpp",))
        for c in found[: PROBE_FACTOR * refine]
    ]
    # the best by un-refined throughput stay (other knobs may lift them more than VPP lifts the rest),
    # joined by the best after the probe
    chosen = probed[:refine]
    ids = {id(c) for c in chosen}
    chosen += [c for c in sorted(probed, key=Candidate.key)[:refine] if id(c) not in ids]
    return sorted(chosen, key=Candidate.key), True


def refine_phase(
    st: SearchSetup, found: list[Candidate], refine: int, exact: bool = True
) -> tuple[list[Candidate], int]:
    """Refine the layouts phase one found over every knob family, and the best layout of every other
    CP size over the CP exchange only (what decides a CP size, so that "best of each CP" compares
    each CP at its best, not at the p2p default). With ``exact``, every layout that can still enter
    the ``refine`` best (:func:`refine_within_bound`); without, the ``refine`` best by un-refined
    throughput (VPP-probed, :func:`_probe_vpp`). Returns (every candidate, deduplicated and sorted;
    the number of variants refinement evaluated)."""
    ev, ladder, fixed_layout, rej = st.ev, st.ladder, st.fixed_layout, st.rej
    before = ev.evaluated
    if exact:
        refined = refine_within_bound(st, found, [], [], keep=refine)
        to_refine = refined
    else:
        to_refine, probed = _probe_vpp(st, found, refine)
        skip: tuple[str, ...] = ("vpp",) if probed else ()
        refined = [refine_candidate(c, ev, ladder, fixed_layout, rej, skip=skip) for c in to_refine]
    chosen = {dataclasses.replace(c.parallel, vpp=1) for c in to_refine}
    extra: list[Candidate] = []
    for c in found:
        if c.parallel not in chosen and all(x.parallel.cp != c.parallel.cp for x in to_refine + extra):
            extra.append(c)
    refined += [refine_candidate(c, ev, ladder, fixed_layout, rej, only=("cp_comm",)) for c in extra]
    everything = {(candidate_signature(c)): c for c in refined + found}
    return sorted(everything.values(), key=Candidate.key), ev.evaluated - before


def _layout_key(c: Candidate) -> tuple:
    """A phase-one layout as refinement keeps it: its sizes at VPP 1 and its micro-batch size."""
    return (dataclasses.replace(c.parallel, vpp=1), c.data["training"]["micro_batch_size"])


def _entry_threshold(best_of: dict[tuple, float], keep: int) -> float:
    """Tokens/s/GPU a layout must exceed to matter to the ranking: the ``keep``-th best throughput
    found so far (each layout at its best; 0 while fewer are found), and no more than the tie margin
    below the best (a layout within :data:`TIE_FRACTION` of the fastest may lead as the simpler one,
    :func:`moeplan.plan.candidates.simplest_leads`)."""
    top = heapq.nlargest(keep, best_of.values())
    if not top:
        return 0.0
    kth = top[-1] if len(top) >= keep else 0.0
    return min(kth, (1 - TIE_FRACTION) * top[0])


def refine_within_bound(
    st: SearchSetup, found: list[Candidate], done: list[Candidate], refined: list[Candidate], keep: int = 1
) -> list[Candidate]:
    """Refine, over every knob family, each layout of ``found`` not refined in full yet (``done``) whose
    throughput bounds exceed the entry threshold (:func:`_entry_threshold`: the ``keep``-th best found
    so far, at most the tie margin below the best): in order of the compute floor's bound
    (:func:`moeplan.plan.bounds.throughput_bound`), the first at or below the threshold ends the pass
    (no later layout can enter the ``keep`` best); a layout whose knob bound
    (:func:`moeplan.plan.bounds.refined_bound`, at its memory floor, :func:`memory_floor_rungs`) is at
    or below it is passed over, and a refinement stops once the bound of the families it has left falls
    there. The threshold only rises, so a layout passed over could not have entered later either; the
    ranking's ``keep`` best are therefore exact over the layouts phase one fitted: a layout that refines
    to the fastest is refined however low it ranked at the default knobs (Qwen3-30B-A3B at 128K on 32
    H100: TP8 CP2 EP16, 2,392 tokens/s/GPU with DeepEP and EP overlap, ranked 17th or lower at the
    default knobs). Returns the refined layouts, in the order refined."""
    seen = {_layout_key(c) for c in done}
    best_of: dict[tuple, float] = {}
    for c in refined + found:
        k = _layout_key(c)
        best_of[k] = max(best_of.get(k, 0.0), c.tokens_per_s_per_gpu)
    bounds = st.bounds
    pool = [c for c in found if _layout_key(c) not in seen]
    # the best at the default knobs first (the threshold rises sooner), then by bound
    ranked = pool[:keep] + sorted(pool[keep:], key=lambda c: (-bounds(c), Candidate.key(c)))
    out: list[Candidate] = []
    gpu = st.gpu
    for i, c in enumerate(ranked):
        need = _entry_threshold(best_of, keep)
        if bounds(c) <= need:
            if i >= keep:
                break
            continue
        families, rungs = knob_families(c, st.fixed_layout, gpu), memory_floor_rungs(st, c)
        if refined_bound(c.scenario, families, st.ev.constants, rungs) <= need:
            st.bounded_out += 1
            continue

        def lost(cur: Candidate, left: list, rungs: list[dict] = rungs, need: float = need) -> bool:
            # the variant so far and every one the families left can reach stay at or below the threshold
            bound = refined_bound(cur.scenario, left, st.ev.constants, rungs)
            return cur.tokens_per_s_per_gpu <= need and bound <= need

        r = refine_candidate(c, st.ev, st.ladder, st.fixed_layout, st.rej, stop=lost)
        out.append(r)
        best_of[_layout_key(c)] = max(best_of[_layout_key(c)], r.tokens_per_s_per_gpu)
    return out


def memory_floor_rungs(st: SearchSetup, c: Candidate) -> list[dict]:
    """The recompute settings no refinement of ``c`` fits with less of (:func:`moeplan.plan.bounds.knob_floor_s`):
    its own rung at the default knobs, and after full recompute also the off-ladder optimizer offload's
    selective rung (:meth:`moeplan.plan.evaluation.Evaluator.evaluate` compares it by time)."""
    lay = c.scenario.layout
    own = {
        "recompute_granularity": lay.recompute_granularity,
        "recompute_modules": lay.recompute_modules,
        "recompute_method": lay.recompute_method,
        "recompute_num_layers": lay.recompute_num_layers,
    }
    if lay.recompute_granularity != "full" or not st.ev.alternatives:
        return [own]
    return [own, *(keys for _, keys in st.ev.alternatives[:1])]
