"""Which pipeline stages can hold a layout's memory peak, so that a search that only asks "does it fit"
computes those stages and no other (:func:`peak_holders`).

Two stages of one layout whose ranks build the same layers in the same order (per virtual chunk: each
layer's saved-tensor key, attention kind, MoE flag and whether layer-level CPU offload takes it), with
the same parameters by kind, embedding, output layer and MTP depths, differ in one input of the memory
model only: the microbatches in flight on them (:func:`moeplan.model.schedule.inflight_microbatches`).
Every term of a stage's memory is non-decreasing in it: the activations are a per-microbatch record
times it, the CUDA-graph samples and pool, the allocator fragmentation and the host copies of
offloaded activations grow with the activations, and the optimizer step's excess (its temporaries less
what the step frees, at least zero) falls by no more than the activations rise
(:func:`moeplan.model.memory.step_phase.step_excess`). So of such a group the stage with the most
microbatches in flight is at least as high as the others in the total, the allocated and the reserved
figure and the host memory, and the peaks over those stages are the peaks over all of them.
``tests/test_memory_peak_stages.py`` checks this against the full stage list over the catalogue.
"""

from __future__ import annotations

from moeplan.inputs.resolved import Scenario
from moeplan.model.activations import layer_saved_keys
from moeplan.structure.placement import StageParams
from moeplan.structure.stages import StagePlan

#: (id of the stage, id of the plan, layers offloaded) → (the stage, the plan, its kind); the objects are
#: held so that their ids keep naming them
_KINDS: dict[tuple[int, int, int], tuple[StageParams, StagePlan, tuple]] = {}
#: entries :data:`_KINDS` holds before it is emptied
KINDS_LIMIT = 20000


def stage_kind(s: Scenario, sp: StageParams, plan: StagePlan) -> tuple:
    """Everything a stage's memory reads besides its microbatches in flight (the module's docstring):
    per virtual chunk the ordered layers' (saved-tensor key, attention kind, MoE flag, taken by
    layer-level offload), the parameters by kind, and the embedding, output layer and MTP depths.
    Made once per stage and plan object (both come from caches the search shares)."""
    lay = s.layout
    n_off = (lay.cpu_offloading_num_layers or 0) if (lay.cpu_offloading and s.pp == 1) else 0
    key = (id(sp), id(plan), n_off)
    hit = _KINDS.get(key)
    if hit is not None and hit[0] is sp and hit[1] is plan:
        return hit[2]
    m = s.complete_model
    keys = layer_saved_keys(m)
    kinds = m.attention_kinds or ("full",) * m.num_layers
    moe = m.moe_layers or (m.is_moe,) * m.num_layers
    chunks = tuple(tuple((keys[li], kinds[li], bool(moe[li]), li < n_off) for li in c) for c in plan.layers[sp.stage])
    p = sp.params
    params = (tuple(sorted(p.by_kind.items())), p.dense, p.expert)
    kind = (chunks, params, len(sp.layers), sp.embedding, sp.output_layer, sp.mtp_layers)
    if len(_KINDS) >= KINDS_LIMIT:
        _KINDS.clear()
    _KINDS[key] = (sp, plan, kind)
    return kind


def peak_holders(kinds: list[tuple], inflight: list[float]) -> list[int]:
    """The stages (indices, ascending) that can hold a peak: of each group of equal ``kinds``
    (:func:`stage_kind`), the first with the most microbatches ``inflight``.

    Raises:
        ValueError: when the two lists differ in length.
    """
    if len(kinds) != len(inflight):
        raise ValueError(f"{len(kinds)} stage kinds for {len(inflight)} in-flight counts")
    best: dict[tuple, int] = {}
    for i, k in enumerate(kinds):
        j = best.get(k)
        if j is None or inflight[i] > inflight[j]:
            best[k] = i
    return sorted(best.values())


__all__ = ["peak_holders", "stage_kind"]
