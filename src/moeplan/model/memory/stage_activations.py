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

from moeplan.inputs.model_spec import ModelSpec
from moeplan.inputs.resolved import Scenario
from moeplan.model.activations import (
    OFFLOAD_ITEMS,
    ActContext,
    layer_activations,
    layer_input_bytes,
    layer_saved_keys,
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


#: a stage's decoder record by what it is computed from (:func:`decoder_stage_key`): the model object is kept
#: beside the record so that a reused ``id`` never matches
_STAGE_CACHE: dict[tuple, tuple[ModelSpec, DecoderActivations]] = {}
#: per model object: (layer ids per chunk, layers taken by layer-level CPU offload) → chunk-key token
_CHUNK_KEYS: dict[tuple, tuple[ModelSpec, int]] = {}
#: chunk keys (:func:`_chunk_keys`) → a small integer standing for them in :data:`_STAGE_CACHE` keys
_CHUNK_TOKENS: dict[tuple, int] = {}


#: entries each of those caches holds before all three are emptied together
CACHE_LIMIT = 20000


def _make_room() -> None:
    """Empty the three caches together when one grows past :data:`CACHE_LIMIT` entries (a token must
    keep meaning the same chunk keys for as long as a stage record keyed by it lives)."""
    if len(_STAGE_CACHE) > CACHE_LIMIT or len(_CHUNK_KEYS) > CACHE_LIMIT:
        _STAGE_CACHE.clear()
        _CHUNK_KEYS.clear()
        _CHUNK_TOKENS.clear()


def _chunk_keys(m: ModelSpec, ids: tuple[tuple[int, ...], ...], n_off: int) -> tuple:
    """Per virtual chunk, the ordered layers' (:func:`~moeplan.model.activations.layer_saved_key`,
    whether layer-level CPU offload takes the layer: its id < ``n_off``)."""
    keys = layer_saved_keys(m)
    return tuple(tuple((keys[li], li < n_off) for li in chunk) for chunk in ids)


def _chunk_token(m: ModelSpec, ids: tuple[tuple[int, ...], ...], n_off: int) -> int:
    """The token of :func:`_chunk_keys` (equal tokens ⇔ equal chunk keys)."""
    cache_key = (id(m), ids, n_off)
    hit = _CHUNK_KEYS.get(cache_key)
    if hit is not None and hit[0] is m:
        return hit[1]
    token = _CHUNK_TOKENS.setdefault(_chunk_keys(m, ids, n_off), len(_CHUNK_TOKENS))
    _CHUNK_KEYS[cache_key] = (m, token)
    return token


def decoder_stage_key(s: Scenario, plan: StagePlan, stage: int, ctx: ActContext, modules: frozenset[str]) -> tuple:
    """Everything :func:`compute_decoder_activations` reads: the model's identity, the activation context,
    the recompute and offload settings, and the token of the stage's chunk keys (:func:`_chunk_keys`:
    per virtual chunk the ordered layers' :func:`~moeplan.model.activations.layer_saved_key` with whether
    layer-level CPU offload takes the layer; position in the chunk is the index in the tuple)."""
    lay, m = s.layout, s.complete_model
    layer_offload = bool(lay.cpu_offloading and s.pp == 1)
    n_off = (lay.cpu_offloading_num_layers or 0) if layer_offload else 0
    token = _chunk_token(m, tuple(map(tuple, plan.layers[stage])), n_off)
    settings = (
        lay.recompute_granularity,
        lay.recompute_num_layers,
        lay.recompute_method,
        lay.distribute_saved_activations,
        offload_items(s),
    )
    return (id(m), ctx, modules, settings, token)


def decoder_activations(
    s: Scenario, sp: StageParams, plan: StagePlan, ctx: ActContext, modules: frozenset[str]
) -> DecoderActivations:
    """The stage's decoder layers per microbatch, chunk by chunk. Stages built from the same ordered
    layer keys under the same settings (:func:`decoder_stage_key`) share one computation; each call returns
    its own record."""
    _make_room()  # before the key: its chunk token must stay valid until the record is stored
    key = decoder_stage_key(s, plan, sp.stage, ctx, modules)
    m = s.complete_model
    hit = _STAGE_CACHE.get(key)
    if hit is None or hit[0] is not m:
        hit = (m, compute_decoder_activations(s, sp, plan, ctx, modules))
        _STAGE_CACHE[key] = hit
    r = hit[1]
    return DecoderActivations(
        r.per_microbatch_bytes,
        r.offloaded_per_microbatch_bytes,
        r.worst_layer_full_bytes,
        r.worst_offloaded_bytes,
        list(r.chunks),
    )


def compute_decoder_activations(
    s: Scenario, sp: StageParams, plan: StagePlan, ctx: ActContext, modules: frozenset[str]
) -> DecoderActivations:
    """The stage's decoder layers per microbatch, chunk by chunk (computed)."""
    lay = s.layout
    m = s.complete_model
    keys = layer_saved_keys(m)
    items = offload_items(s)
    layer_offload = lay.cpu_offloading and s.pp == 1
    n_layer_off = lay.cpu_offloading_num_layers or 0
    out = DecoderActivations()
    cache: dict[tuple, LayerSaved] = {}
    full = lay.recompute_granularity == "full"
    input_bytes = layer_input_bytes(m, ctx, lay.distribute_saved_activations) if full else 0.0
    for vp, chunk in enumerate(plan.layers[sp.stage]):
        before = out.per_microbatch_bytes
        for pos, li in enumerate(chunk):
            key = keys[li]
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
        out["mtp"] = mtp_block_bytes(s.complete_model, ctx, padded_vocab, fused_ce, modules) * sp.mtp_layers
    return out


#: (model id, context, padded vocabulary, fused loss, recompute modules) → (model, bytes of one MTP block)
_MTP_BYTES: dict[tuple, tuple[ModelSpec, float]] = {}


def mtp_block_bytes(m: ModelSpec, ctx: ActContext, padded_vocab: int, fused_ce: bool, modules: frozenset[str]) -> float:
    """Saved bytes of one MTP block for one microbatch: the sum of :func:`mtp_activations`, computed
    once per model object and arguments (the model is held, so its id keeps naming it)."""
    key = (id(m), ctx, padded_vocab, fused_ce, modules)
    hit = _MTP_BYTES.get(key)
    if hit is None or hit[0] is not m:
        if len(_MTP_BYTES) > CACHE_LIMIT:
            _MTP_BYTES.clear()
        hit = _MTP_BYTES[key] = (m, sum(mtp_activations(m, ctx, padded_vocab, fused_ce, modules).values()))
    return hit[1]
