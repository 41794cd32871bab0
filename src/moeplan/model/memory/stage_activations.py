"""Activation memory of one rank of a pipeline stage (bytes): the saved tensors of every in-flight
microbatch, and what activation offload moves to the host.

Per layer and microbatch: :mod:`moeplan.model.activations`. Full recompute keeps only layer inputs
(``recompute_method`` uniform: one per ``recompute_num_layers`` chunk; block: the first
``recompute_num_layers`` layers of each virtual chunk). Fine-grained activation offload
(``offload_modules``) and layer-level CPU offload (``cpu_offloading`` without PP) move saved tensors to
the host. The stage holds :func:`moeplan.model.schedule.inflight_microbatches` microbatches at its peak;
the last stage adds the output layer / loss and MTP blocks; a VLM's first stage the ViT's activations.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from moeplan.inputs.resolved import Scenario
from moeplan.model.activations import (
    OFFLOAD_ITEMS,
    ActContext,
    layer_activations,
    layer_input_bytes,
    layer_saved_key,
    mtp_activations,
    output_layer_activations,
)
from moeplan.structure.placement import StageParams
from moeplan.structure.stages import StagePlan


@dataclass(frozen=True)
class LayerSaved:
    """What one layer of a kind saves per microbatch: ``kept`` name → bytes, their sum, and the sum
    with the tensors selective recompute drops (what re-materializes in backward)."""

    kept: dict[str, float]
    kept_bytes: float
    full_bytes: float


@dataclass
class DecoderActivations:
    """A stage's decoder layers per microbatch (bytes): kept on the GPU, moved to the host, the
    largest layer re-materialized in backward and the largest offloaded layer; per virtual chunk
    ``(vp_stage, layers, bytes)``."""

    per_microbatch_bytes: float = 0.0
    offloaded_per_microbatch_bytes: float = 0.0
    worst_layer_full_bytes: float = 0.0
    worst_offloaded_bytes: float = 0.0
    chunks: list[tuple[int, int, float]] = field(default_factory=list)


def offload_items(s: Scenario) -> frozenset[str]:
    """Saved tensors that fine-grained activation offload moves to the host."""
    lay = s.layout
    items: set[str] = set()
    if lay.fine_grained_activation_offloading:
        for mod in lay.offload_modules or []:
            items.update(OFFLOAD_ITEMS.get(mod, ()))
    return frozenset(items)


def _saved(s: Scenario, ctx: ActContext, modules: frozenset[str], cache: dict, key: tuple, li: int) -> LayerSaved:
    m = s.complete_model
    if key not in cache:
        kept, rec = layer_activations(m, li, ctx, modules)
        ks = sum(kept.values())
        cache[key] = LayerSaved(kept, ks, ks + sum(rec.values()))
    return cache[key]


def _full_recompute_kept(s: Scenario, input_bytes: float, pos: int) -> float | None:
    """What full recompute keeps of the layer at position ``pos`` of its chunk: its input
    (``input_bytes``, :func:`~moeplan.model.activations.layer_input_bytes`) at a checkpoint boundary,
    0 inside a recomputed chunk, None for a layer it does not recompute."""
    lay = s.layout
    n_rc = lay.recompute_num_layers or 1
    block = lay.recompute_method == "block"
    if block and pos >= n_rc:
        return None
    if block or pos % n_rc == 0:
        return input_bytes
    return 0.0


def decoder_activations(
    s: Scenario, sp: StageParams, plan: StagePlan, ctx: ActContext, modules: frozenset[str]
) -> DecoderActivations:
    """The stage's decoder layers per microbatch, chunk by chunk."""
    lay = s.layout
    items = offload_items(s)
    layer_offload = lay.cpu_offloading and s.pp == 1
    n_layer_off = lay.cpu_offloading_num_layers or 0
    out = DecoderActivations()
    cache: dict[tuple, LayerSaved] = {}
    full = lay.recompute_granularity == "full"
    input_bytes = layer_input_bytes(s.complete_model, ctx, lay.distribute_saved_activations) if full else 0.0
    for vp, chunk in enumerate(plan.layers[sp.stage]):
        before = out.per_microbatch_bytes
        for pos, li in enumerate(chunk):
            key = layer_saved_key(s.complete_model, li)
            saved = cache.get(key) or _saved(s, ctx, modules, cache, key, li)
            out.worst_layer_full_bytes = max(out.worst_layer_full_bytes, saved.full_bytes)
            if full:
                kept_full = _full_recompute_kept(s, input_bytes, pos)
                out.per_microbatch_bytes += saved.full_bytes if kept_full is None else kept_full
                continue
            moved = sum(v for k, v in saved.kept.items() if k in items) if items else 0.0
            if layer_offload and li < n_layer_off:
                moved = saved.kept_bytes
            out.per_microbatch_bytes += saved.kept_bytes - moved
            out.offloaded_per_microbatch_bytes += moved
            out.worst_offloaded_bytes = max(out.worst_offloaded_bytes, moved)
        out.chunks.append((vp, len(chunk), out.per_microbatch_bytes - before))
    return out


def tail_activations(
    s: Scenario, sp: StageParams, ctx: ActContext, modules: frozenset[str], fused_ce: bool, padded_vocab: int
) -> dict[str, float]:
    """The last stage's output layer / loss and MTP blocks of one microbatch (bytes, named)."""
    out: dict[str, float] = {}
    if sp.output_layer:
        out.update(output_layer_activations(s.complete_model, ctx, padded_vocab, fused_ce))
    if sp.mtp_layers:
        mtp = mtp_activations(s.complete_model, ctx, padded_vocab, fused_ce, modules)
        out["mtp"] = sum(mtp.values()) * sp.mtp_layers
    return out
