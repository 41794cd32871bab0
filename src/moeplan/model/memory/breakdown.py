"""Per-GPU memory: weights, gradients, optimizer state, activations and non-tensor memory, for every
pipeline stage, and the verdict against the GPU's usable HBM.

The terms, one module each: :mod:`.static` (weights, gradients, optimizer state, host memory of an
offloading optimizer), :mod:`.stage_activations` (saved tensors of every in-flight microbatch),
:mod:`.other` (backward working set, CP buffers, CUDA context, NCCL / dispatcher buffers, CUDA graph
buffers, allocator fragmentation). Bytes per element, the routed-token factor and shard degrees come
from :mod:`moeplan.structure.numerics`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import cast

from moeplan.errors import InputError
from moeplan.i18n.messages import msg
from moeplan.inputs.allocator import expandable_segments
from moeplan.inputs.model_spec import ModelSpec
from moeplan.inputs.peft import total_adapter_params
from moeplan.inputs.resolved import Scenario
from moeplan.model.activations import ActContext
from moeplan.model.lora import adapter_rank_params, lora_activation_bytes, stage_layer_adapters
from moeplan.model.memory.memory_band import MemoryVerdict, judge_memory
from moeplan.model.memory.norm_recompute import layernorm_recompute_note
from moeplan.model.memory.other import (
    backward_working_set,
    cp_kv_buffers,
    figure_of,
    fixed_buffers,
    fragmentation,
    graph_buffers,
)
from moeplan.model.memory.peak_stages import peak_holders, stage_kind
from moeplan.model.memory.stage_activations import DecoderActivations, decoder_activations, tail_activations
from moeplan.model.memory.static import fsdp_memory_notes, static_memory
from moeplan.model.memory.step_phase import optimizer_step_transients, step_excess
from moeplan.model.model_notes import memory_notes
from moeplan.model.overheads import Overheads, resolve_overheads
from moeplan.model.schedule import inflight_per_rank
from moeplan.model.validity import memory_validity
from moeplan.model.vision import vision_cost
from moeplan.structure.numerics import (
    OptimizerNumerics,
    fsdp_grads_ignore_fp32_flag,
    linear_input_bytes,
    optimizer_numerics,
    routing,
)
from moeplan.structure.params import padded_vocab_size
from moeplan.structure.placement import StageParams, stage_params, stage_plan
from moeplan.structure.stages import StagePlan
from moeplan.units import GIB_BYTES

#: Default headroom (fraction of usable HBM) the planner keeps free; the verdict itself comes from the
#: memory model's measured band (:mod:`moeplan.model.memory.memory_band`).
TIGHT_HEADROOM = 0.05


@dataclass(frozen=True)
class StageMemory:
    """Peak memory of one GPU of pipeline stage ``stage`` (bytes), itemised.

    ``items`` maps each category (weights, grads, optimizer, activations, other) to named parts;
    the category totals are the sums of their parts and ``total_bytes`` the sum of the categories.
    Three figures name what each measures (:data:`moeplan.model.memory.other.FIGURE_OF_OTHER`):
    ``peak_allocated_bytes`` (torch ``max_memory_allocated``, Megatron's "max allocated"),
    ``peak_reserved_bytes`` (the caching allocator's reserve: plus fragmentation and CUDA graph
    pools) and ``device_used_bytes`` (what ``nvidia-smi`` shows: plus the CUDA context, NCCL and
    dispatcher buffers outside torch; equal to ``total_bytes``, the figure the verdict is judged on).
    ``step_transients``: the optimizer step's temporaries (:mod:`moeplan.model.memory.step_phase`);
    where they outgrow what the step frees, ``other`` carries the difference as
    ``optimizer_step_excess``, so every figure is the peak over the whole iteration.
    """

    stage: int
    num_layers: int
    inflight_microbatches: float
    items: dict[str, dict[str, float]]
    host_bytes: float = 0.0
    chunks: tuple[tuple[int, int, float], ...] = ()
    host: dict[str, float] = field(default_factory=dict)
    step_transients: dict[str, float] = field(default_factory=dict)

    def category(self, name: str) -> int:
        return int(round(sum(self.items.get(name, {}).values())))

    @property
    def weights_bytes(self) -> int:
        return self.category("weights")

    @property
    def grads_bytes(self) -> int:
        return self.category("grads")

    @property
    def optimizer_bytes(self) -> int:
        return self.category("optimizer")

    @property
    def activations_bytes(self) -> int:
        return self.category("activations")

    @property
    def other_bytes(self) -> int:
        return self.category("other")

    @functools.cached_property
    def total_bytes(self) -> int:
        return self.weights_bytes + self.grads_bytes + self.optimizer_bytes + self.activations_bytes + self.other_bytes

    def _other_in(self, figures: tuple[str, ...]) -> float:
        return sum(v for k, v in self.items.get("other", {}).items() if figure_of(k) in figures)

    @property
    def peak_allocated_bytes(self) -> int:
        """Tensors in PyTorch's caching allocator at the stage's peak (torch ``max_memory_allocated``)."""
        tensors = sum(sum(self.items.get(c, {}).values()) for c in ("weights", "grads", "optimizer", "activations"))
        return int(round(tensors + self._other_in(("allocated",))))

    @property
    def peak_reserved_bytes(self) -> int:
        """The caching allocator's reserve at the peak (torch ``max_memory_reserved``)."""
        return self.peak_allocated_bytes + int(round(self._other_in(("reserved",))))

    @property
    def device_used_bytes(self) -> int:
        """Device memory in use at the peak as ``nvidia-smi`` shows it (the verdict's figure)."""
        return self.total_bytes

    def to_dict(self) -> dict:
        return {
            "stage": self.stage,
            "num_layers": self.num_layers,
            "inflight_microbatches": self.inflight_microbatches,
            "total_bytes": self.total_bytes,
            "peak_allocated_bytes": self.peak_allocated_bytes,
            "peak_reserved_bytes": self.peak_reserved_bytes,
            "device_used_bytes": self.device_used_bytes,
            "weights_bytes": self.weights_bytes,
            "grads_bytes": self.grads_bytes,
            "optimizer_bytes": self.optimizer_bytes,
            "activations_bytes": self.activations_bytes,
            "other_bytes": self.other_bytes,
            "host_bytes": int(self.host_bytes),
            "host_items": {n: int(round(v)) for n, v in self.host.items()},
            "virtual_chunks": [
                {"vp_stage": v, "num_layers": n, "activations_per_microbatch_bytes": int(round(b))}
                for v, n, b in self.chunks
            ],
            "items": {k: {n: int(round(v)) for n, v in d.items()} for k, d in self.items.items()},
            "optimizer_step_transients": {n: int(round(v)) for n, v in self.step_transients.items()},
        }


@dataclass(frozen=True)
class MemoryEstimate:
    """Per-stage memory and the verdict.

    ``verdict`` (:attr:`memory_verdict`, :func:`moeplan.model.memory.memory_band.judge_memory`, the one
    verdict every command gives): ``fits`` (the band around the peak stays under the capacity),
    ``tight`` (the band crosses it: the layout may or may not fit), ``does-not-fit`` (the whole band
    is over it, or offloaded state overflows host memory), or ``unknown`` when the scenario names no
    GPU. The band (:attr:`error_band_pct`, ±11 % today) is the worst |error| of the
    allocated-vs-measured validation (``benchmarks/memory_accuracy.py``,
    ``docs/memory_accuracy.md``). ``capacity_bytes`` is the usable HBM less ``reserved_bytes``
    (``system.reserved_gib``: a colocated engine's memory; :attr:`Scenario.capacity_bytes`).
    ``host_bytes_per_node`` is set when optimizer state is offloaded.
    """

    #: the stages computed: every stage, or with ``stages_source`` only those that can hold a peak
    #: (:func:`moeplan.model.memory.peak_stages.peak_holders`); the peaks and the verdict read these
    computed: list[StageMemory]
    capacity_bytes: int | None
    gpus_per_node: int | None
    host_capacity_bytes_per_node: int | None
    overheads: Overheads
    notes: list[str] = field(default_factory=list)
    reserved_bytes: int = 0
    peft: dict | None = None
    #: makes the assumptions on first read (:func:`estimate_memory` with ``notes_on_read``); None: ``notes``
    notes_source: Callable[[], list[str]] | None = field(default=None, repr=False, compare=False)
    #: makes every stage on first read of :attr:`stages` (:func:`estimate_memory` with ``stages_on_read``)
    stages_source: Callable[[], list[StageMemory]] | None = field(default=None, repr=False, compare=False)

    @functools.cached_property
    def stages(self) -> list[StageMemory]:
        """Every pipeline stage's memory, first stage first: ``computed``, or made by ``stages_source``
        on first read."""
        return self.stages_source() if self.stages_source is not None else self.computed

    @functools.cached_property
    def assumptions(self) -> list[str]:
        """What the estimate assumed (messages and texts, in the order said): ``notes``, or made by
        ``notes_source`` on first read."""
        return self.notes_source() if self.notes_source is not None else self.notes

    @functools.cached_property
    def peak_stage(self) -> StageMemory:
        return max(self.computed, key=lambda st: st.total_bytes)

    @property
    def peak_bytes(self) -> int:
        """Device memory in use on the peak stage (``nvidia-smi``'s figure; the verdict's)."""
        return self.peak_stage.total_bytes

    @property
    def peak_allocated_bytes(self) -> int:
        """The largest torch ``max_memory_allocated`` over the stages."""
        return max(st.peak_allocated_bytes for st in self.computed)

    @property
    def peak_reserved_bytes(self) -> int:
        """The largest torch ``max_memory_reserved`` over the stages."""
        return max(st.peak_reserved_bytes for st in self.computed)

    @property
    def headroom_fraction(self) -> float | None:
        if not self.capacity_bytes:
            return None
        return (self.capacity_bytes - self.peak_bytes) / self.capacity_bytes

    @property
    def memory_verdict(self) -> MemoryVerdict:
        """The one memory verdict (:func:`moeplan.model.memory.memory_band.judge_memory`): the peak
        device use against the capacity with the memory model's measured band (docs/memory_accuracy.md)."""
        return judge_memory(self.peak_bytes, self.capacity_bytes, self.host_fits)

    @property
    def verdict(self) -> str:
        """``fits`` | ``tight`` | ``does-not-fit`` | ``unknown`` (:attr:`memory_verdict`); ``does-not-fit``
        also when offloaded optimizer state overflows the node's host memory."""
        return self.memory_verdict.verdict

    @property
    def error_band_pct(self) -> float | None:
        """The memory model's error band as ``estimate`` summarises it (%, ±): the worst |error| of its
        allocated-vs-measured validation rounded up (``band_pct``, ``benchmarks/memory_accuracy.py``,
        docs/memory_accuracy.md); the verdict uses the readings' own range (:attr:`memory_verdict`)."""
        band = memory_validity().get("band_pct")
        return float(band) if isinstance(band, (int, float)) else None

    def dominant_items(self, most: int = 3) -> list[dict]:
        """The parts of the peak stage that push it over (:func:`dominant_items`): over the usable
        HBM when it does not fit, over it at the band's top edge when it is ``tight``; empty when
        it fits, no GPU is named, or only the host memory overflows."""
        v = self.memory_verdict
        if v.verdict not in ("does-not-fit", "tight") or not self.capacity_bytes:
            return []
        excess = (v.high_bytes if v.verdict == "tight" else self.peak_bytes) - self.capacity_bytes
        if excess <= 0:
            return []  # a does-not-fit of the host memory alone: no device part is over
        return dominant_items(self.peak_stage.items, excess, most)

    @property
    def margin_bytes(self) -> int | None:
        """Usable HBM minus the peak device use (negative when it does not fit)."""
        return None if self.capacity_bytes is None else self.capacity_bytes - self.peak_bytes

    @property
    def fits(self) -> bool | None:
        if self.host_fits is False:
            return False
        h = self.headroom_fraction
        return None if h is None else h >= 0

    @property
    def host_bytes_per_rank(self) -> int | None:
        """Host memory of the rank that needs the most (bytes): CPU-optimizer state with its pinned
        buffers and offloaded activations; None when nothing lives on the host."""
        per_gpu = max((st.host_bytes for st in self.computed), default=0.0)
        return int(per_gpu) if per_gpu > 0 else None

    @property
    def host_bytes_per_node(self) -> int | None:
        """:attr:`host_bytes_per_rank` × GPUs per node (every rank of a node taken as the worst)."""
        per_rank = self.host_bytes_per_rank
        return None if per_rank is None else per_rank * (self.gpus_per_node or 1)

    @property
    def host_fits(self) -> bool | None:
        """Offloaded optimizer state vs the node's host memory (None when unknown or not offloading)."""
        if self.host_bytes_per_node is None or self.host_capacity_bytes_per_node is None:
            return None
        return self.host_bytes_per_node <= self.host_capacity_bytes_per_node

    def to_dict(self) -> dict:
        return {
            "peak_bytes": self.peak_bytes,
            "peak_allocated_bytes": self.peak_allocated_bytes,
            "peak_reserved_bytes": self.peak_reserved_bytes,
            "device_used_bytes": self.peak_bytes,
            "peak_stage": self.peak_stage.stage,
            "capacity_bytes": self.capacity_bytes,
            "usable_hbm_bytes": None if self.capacity_bytes is None else self.capacity_bytes + self.reserved_bytes,
            "reserved_bytes": self.reserved_bytes,
            "headroom_fraction": self.headroom_fraction,
            "margin_bytes": self.margin_bytes,
            "error_band_pct": self.error_band_pct,
            "verdict_basis": (
                "device use (nvidia-smi) of the peak stage against usable HBM less system.reserved_gib, with the "
                "memory model's band (the smallest and largest measured/predicted peak of docs/memory_accuracy.md): "
                "fits when peak x largest is under it, does-not-fit when peak x smallest is over it, tight between"
            ),
            "fits": self.fits,
            "verdict": self.verdict,
            "verdict_band": self.memory_verdict.to_dict(),
            "dominant_items": self.dominant_items(),
            "host_bytes_per_rank": self.host_bytes_per_rank,
            "host_bytes_per_node": self.host_bytes_per_node,
            "host_capacity_bytes_per_node": self.host_capacity_bytes_per_node,
            "host_fits": self.host_fits,
            "peft": self.peft,
            "stages": [st.to_dict() for st in self.stages],
            "overheads": self.overheads.to_dict(),
            "assumptions": list(self.assumptions),
        }


#: plain names of the memory parts a verdict names (a part not listed keeps its itemised-table name)
ITEM_LABELS = {
    "decoder_layers": "activations",
    "vision_tower": "vision-tower activations",
    "lora_adapters": "LoRA activations",
    "cuda_graph_static_inputs": "attention masks and inputs held by CUDA graphs",
    "cuda_graph_static_outputs": "outputs held by CUDA graphs",
    "cuda_graph_grad_buffers": "gradients held by CUDA graphs",
    "cuda_graph_pool": "CUDA graph pool",
    "params": "weights",
    "fp8_weight_copies": "FP8 weight copies",
    "main_grads": "gradients",
    "expert_state": "expert optimizer state",
    "dense_state": "dense optimizer state",
    "allocator_fragmentation": "allocator fragmentation",
    "backward_working_set": "backward working set",
    "optimizer_step_excess": "optimizer step temporaries",
    "allgather_dispatch_buffer": "tokens gathered by the all-gather dispatcher",
}


def dominant_items_text(items: list[dict]) -> str:
    """``392.1 GiB attention masks and inputs held by CUDA graphs, 155.3 GiB activations`` from
    :func:`dominant_items` (bytes shown in GiB to 0.1; a part without a plain name keeps its
    itemised-table name); empty for no items."""
    return ", ".join(f"{it['bytes'] / GIB_BYTES:.1f} GiB {ITEM_LABELS.get(it['item'], it['item'])}" for it in items)


def dominant_items(items: dict[str, dict[str, float]], excess_bytes: float, most: int = 3) -> list[dict]:
    """The largest parts of one stage's itemised memory that account for ``excess_bytes`` (bytes
    over the limit): parts taken largest first until their sum reaches the excess, at least one and
    at most ``most``.

    Args:
        items: category → part → bytes (:attr:`StageMemory.items`, or its ``to_dict`` form).
        excess_bytes: how far the peak passes the limit (bytes; ≤ 0 still names the largest part).
        most: the most parts named (default 3).

    Returns:
        ``[{"category", "item", "bytes"}]``, largest first (bytes as integers); empty when the stage
        has no part above zero.
    """
    parts = sorted(
        ((v, cat, name) for cat, d in items.items() for name, v in d.items() if v > 0),
        key=lambda p: -p[0],
    )
    out: list[dict] = []
    total = 0.0
    for v, cat, name in parts[:most]:
        out.append({"category": cat, "item": name, "bytes": int(round(v))})
        total += v
        if total >= excess_bytes:
            break
    return out


# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Common:
    """What every stage of one estimate shares."""

    plan: StagePlan
    ctx: ActContext
    modules: frozenset[str]
    fused_ce: bool
    vpad: int
    num_microbatches: int | None
    numerics: OptimizerNumerics
    overheads: Overheads


def _need(s: Scenario) -> None:
    missing = []
    if s.model is None:
        missing.append("model")
    elif not isinstance(s.model, ModelSpec):
        s.model.completed()  # raises, naming the fields the model lacks
    if s.training.seq_length is None:
        missing.append("training.seq_length")
    if not s.num_gpus:
        missing.append("system.num_gpus")
    if missing:
        raise InputError(missing[0], None, "a value: the memory estimate needs " + ", ".join(missing))
    if not s.folds:
        raise InputError(
            "system.num_gpus", s.num_gpus, "a world size divisible by TP·PP·CP and ETP·EP·PP (run `moeplan check`)"
        )


def _num_microbatches(s: Scenario) -> int | None:
    t = s.training
    if t.global_batch_size is None or s.dp is None:
        return None
    mbs = t.micro_batch_size or 1
    return max(1, t.global_batch_size // (mbs * s.dp))


def _pipeline(s: Scenario, assumptions: list[str] | None) -> StagePlan:
    """The stage plan as given, or a near-even split (said in ``assumptions`` unless None) when the
    layers do not divide; refuses a layout that does not parse or leaves ranks empty."""
    m, lay = s.complete_model, s.layout
    plan = stage_plan(s, allow_balanced=True)
    if plan is None:
        raise InputError(
            "pipeline_model_parallel_layout",
            lay.pipeline_model_parallel_layout,
            "a layout that parses and matches the model (run `moeplan check`)",
        )
    vpp_txt = f" × VPP {s.vpp}" if s.vpp > 1 else ""
    as_given = stage_plan(s) is not None
    if min(len(plan.rank_layers(r)) for r in range(s.pp)) == 0 and not as_given:
        raise InputError(
            "pipeline_model_parallel_size",
            s.pp,
            f"a pipeline that gives every rank layers: {m.num_layers} layers over PP {s.pp}{vpp_txt} leaves ranks empty",
        )
    if not as_given and assumptions is not None:
        assumptions.append(
            f"{m.num_layers} layers do not split as given over PP {s.pp}{vpp_txt}: estimated with a near-even "
            "split (set pipeline_model_parallel_layout or uneven stages to be exact)"
        )
    return plan


def _numerics_notes(s: Scenario, num: OptimizerNumerics, assumptions: list[str]) -> None:
    lay = s.layout
    if lay.grad_reduce_in_fp32 is None and not fsdp_grads_ignore_fp32_flag(s):
        why = "fp32 main grads, Bridge bf16_mixed / Megatron-LM bf16"
        assumptions.append(msg("memory.key_unset", key="grad_reduce_in_fp32", value="true", why=why))
    if num.fsdp_strategy is not None and lay.data_parallel_sharding_strategy is None:
        assumptions.append(msg("memory.fsdp_sharding_unset"))


def _activation_context(s: Scenario, assumptions: list[str] | None) -> ActContext:
    lay, t = s.layout, s.training
    is_fp8 = t.precision != "bf16"
    hd = lay.hidden_dropout if lay.hidden_dropout is not None else 0.0
    ad = lay.attention_dropout if lay.attention_dropout is not None else 0.0
    if lay.hidden_dropout is None and lay.attention_dropout is None and assumptions is not None:
        assumptions.append(msg("memory.dropout_unset"))
    r = routing(s)
    if r.source == "imbalance" and not r.imbalance_stated and assumptions is not None:
        assumptions.append(msg("memory.dropless_routing_imbalance", factor=r.factor))
    mbs = t.micro_batch_size or 1
    seq_local = cast(int, t.seq_length) / s.cp  # _need() checked it
    return ActContext(
        tokens=mbs * seq_local,
        seq_local=seq_local,
        micro_batch_size=mbs,
        tp=s.tp,
        sp=s.sp,
        etp=s.etp,
        act_bytes=2.0,
        lin_in_bytes=linear_input_bytes(t.precision),
        hidden_dropout=hd,
        attention_dropout=ad,
        unfused_attention=(lay.attention_backend or "auto") == "unfused",
        routing_factor=r.factor,
        fp8_attention=bool(lay.fp8_dot_product_attention) and is_fp8,
    )


def _common(s: Scenario, assumptions: list[str] | None) -> _Common:
    """What every stage of ``s`` shares; what it assumes appended to ``assumptions`` (None: not made)."""
    lay, t = s.layout, s.training
    n_mb = _num_microbatches(s)
    if assumptions is not None:
        if t.micro_batch_size is None:
            assumptions.append("micro_batch_size unset: 1")
        if n_mb is None:
            assumptions.append("global_batch_size unset: the pipeline is assumed full (enough microbatches)")
    plan = _pipeline(s, assumptions)
    num = optimizer_numerics(s)
    if assumptions is not None:
        _numerics_notes(s, num, assumptions)
    ctx = _activation_context(s, assumptions)
    gran = lay.recompute_granularity
    modules = lay.recompute_modules if lay.recompute_modules is not None else ["core_attn"]
    fused_ce = lay.cross_entropy_loss_fusion
    if fused_ce is None:
        fused_ce = s.framework == "megatron-bridge"
    ov = resolve_overheads(
        s.input.overheads.model_dump(),
        expandable_segments(s.environment),
    )
    selected = frozenset(modules) if gran == "selective" else frozenset()
    if assumptions is not None:
        _model_and_fusion_notes(s, ctx, selected, assumptions)
    return _Common(
        plan=plan,
        ctx=ctx,
        modules=selected,
        fused_ce=fused_ce,
        vpad=padded_vocab_size(s.complete_model.vocab_size, s.tp),
        num_microbatches=n_mb,
        numerics=num,
        overheads=ov,
    )


def _model_and_fusion_notes(s: Scenario, ctx: ActContext, selected: frozenset[str], assumptions: list[str]) -> None:
    """:func:`_common`'s last notes: the model's own (:func:`memory_notes`), the cross-entropy fusion
    when unset, the norm outputs a selective ``layernorm`` recompute keeps."""
    assumptions.extend(memory_notes(cast(ModelSpec, s.model)))
    if s.layout.cross_entropy_loss_fusion is None:
        fused_ce = s.framework == "megatron-bridge"
        value, why = str(fused_ce).lower(), f"{s.framework} default"
        assumptions.append(msg("memory.key_unset", key="cross_entropy_loss_fusion", value=value, why=why))
    norm_note = layernorm_recompute_note(s, ctx, selected)
    if norm_note is not None:
        assumptions.append(norm_note)


def _late_notes(s: Scenario, com: _Common) -> list[str]:
    """The notes made after the stages: Megatron-FSDP's, and a vision mix planned without a workload."""
    out: list[str] = list(fsdp_memory_notes(s, com.numerics, stage_params(s, allow_balanced=True)))
    vc = vision_cost(s) if s.complete_model.vision is not None else None
    if vc is not None and vc.assumed:
        out.append(msg("memory.vision_planning_mix"))
    return out


def _assumptions_of(s: Scenario) -> list[str]:
    """What :func:`estimate_memory` of ``s`` assumes, in the order it says it."""
    notes: list[str] = []
    com = _common(s, notes)
    return notes + _late_notes(s, com)


def estimate_memory(s: Scenario, *, notes_on_read: bool = False, stages_on_read: bool = False) -> MemoryEstimate:
    """Peak memory per GPU for every pipeline stage of a resolved scenario.

    ``notes_on_read``: the estimate's assumptions (:attr:`MemoryEstimate.assumptions`) are made when
    first read rather than now, the same list (the planner estimates thousands of layouts and shows a
    few); default False. ``stages_on_read``: only the stages that can hold a peak are computed now
    (:func:`moeplan.model.memory.peak_stages.peak_holders`; the peaks and the verdict are the same) and
    the others when :attr:`MemoryEstimate.stages` is first read; default False.

    Raises:
        InputError: when the model, sequence length or world size is missing, or DP/EDP is not an
            integer (``moeplan check`` names the broken rule).
    """
    _need(s)
    notes: list[str] | None = None if notes_on_read else []
    com = _common(s, notes)
    sps = stage_params(s, allow_balanced=True)
    stages_source = None
    if stages_on_read:
        kinds = [stage_kind(s, sp, com.plan) for sp in sps]
        done = {i: _stage(s, sps[i], com) for i in peak_holders(kinds, [_inflight(s, sp, com) for sp in sps])}
        stages = list(done.values())
        stages_source = functools.partial(_every_stage, s, sps, com, done)
    else:
        stages = [_stage(s, sp, com) for sp in sps]
    if notes is not None:
        notes += _late_notes(s, com)
    return MemoryEstimate(
        stages,
        s.capacity_bytes,
        s.gpus_per_node,
        s.host_capacity_bytes_per_node,
        com.overheads,
        notes if notes is not None else [],
        reserved_bytes=s.reserved_bytes,
        peft=_peft_summary(s),
        notes_source=(lambda: _assumptions_of(s)) if notes is None else None,
        stages_source=stages_source,
    )


def _every_stage(s: Scenario, sps: list[StageParams], com: _Common, done: dict[int, StageMemory]) -> list[StageMemory]:
    """Every stage of ``s`` in order: those in ``done`` (by index) as computed, the others computed now."""
    return [done[i] if i in done else _stage(s, sp, com) for i, sp in enumerate(sps)]


def _inflight(s: Scenario, sp: StageParams, com: _Common) -> float:
    """Microbatches in flight on stage ``sp`` in units of the rank's layers (:func:`inflight_per_rank`)."""
    lay = s.layout
    return inflight_per_rank(s.pp, s.vpp, com.num_microbatches, lay.microbatch_group_size_per_vp_stage)[sp.stage]


def _peft_summary(s: Scenario) -> dict | None:
    """LoRA's adapters: the config, unique adapter parameters of the model and the most on one rank."""
    p = s.peft
    if p is None:
        return None
    per_rank = max(adapter_rank_params(s, sp).total for sp in stage_params(s, allow_balanced=True))
    return {
        "scheme": p.scheme,
        "dim": p.dim,
        "alpha": p.alpha,
        "target_modules": list(p.target_modules),
        "share_expert_adapters": p.share_expert_adapters,
        "adapter_params": total_adapter_params(s.complete_model, p),
        "adapter_params_per_rank": per_rank,
        "base": "frozen: weights only, no gradients or optimizer state; backward computes input gradients only",
    }


def _activations(
    s: Scenario, sp: StageParams, com: _Common, other: dict[str, float]
) -> tuple[dict, float, DecoderActivations]:
    """A stage's activations (bytes, named), its in-flight microbatches and its decoder record; the
    ViT's working set goes to ``other``."""
    lay, ctx = s.layout, com.ctx
    dec = decoder_activations(s, sp, com.plan, ctx, com.modules)
    inflight = _inflight(s, sp, com)
    act = {"decoder_layers": dec.per_microbatch_bytes * inflight}
    v = s.complete_model.vision
    if sp.embedding and v is not None:
        vc = vision_cost(s)
        if vc is not None:
            # ViT activations of every in-flight microbatch on the first stage (none kept when frozen),
            # and one ViT layer's working set in backward
            act["vision_tower"] = vc.activation_bytes * inflight
            vtp = s.tp if v.tp_sharded else 1  # MoonViT runs whole on every TP rank
            other["vision_working_set"] = 2 * (9 * v.hidden_size + 2 * v.intermediate_size) * vc.patches / vtp
    if lay.overlap_moe_expert_parallel_comm and sp.layers:
        # combined 1F1B (pipeline_parallel/combined_1f1b.py) interleaves the forward of one microbatch
        # with the backward of another layer by layer: about one more layer is alive
        act["ep_overlap_extra_layer"] = dec.per_microbatch_bytes / len(sp.layers)
    if dec.offloaded_per_microbatch_bytes:
        # offloaded tensors live on the host; two layers' worth are in flight (being copied out or back)
        act["offload_staging"] = 2 * dec.worst_offloaded_bytes
    act.update(tail_activations(s, sp, ctx, com.modules, com.fused_ce, com.vpad))
    if s.peft is not None and lay.recompute_granularity != "full":
        # the adapters' saved tensors (moeplan.model.lora); full recompute keeps none of them
        act["lora_adapters"] = sum(lora_activation_bytes(s, la, ctx) for la in stage_layer_adapters(s, sp)) * inflight
    return act, inflight, dec


def _stage(s: Scenario, sp: StageParams, com: _Common) -> StageMemory:
    static = static_memory(s, sp, com.numerics)
    other: dict[str, float] = {}
    act, inflight, dec = _activations(s, sp, com, other)
    ctx, ov = com.ctx, com.overheads
    working = backward_working_set(s, sp, ctx, dec.worst_layer_full_bytes, com.fused_ce, com.vpad)
    other["backward_working_set"] = working
    if s.cp > 1:
        other["cp_kv_buffers"] = cp_kv_buffers(s, ctx)
    other.update(fixed_buffers(s, ctx, ov))
    other.update(graph_buffers(s, ctx, ov, sum(act.values()), sp, inflight, com.num_microbatches, com.modules))
    other["allocator_fragmentation"] = fragmentation(s, ov, sum(act.values()) + working)
    steps = optimizer_step_transients(s, sp, com.numerics, *static.trained)
    excess = step_excess(steps, act, other)
    if excess:
        other["optimizer_step_excess"] = excess
    items = {
        "weights": static.weights,
        "grads": static.grads,
        "optimizer": static.optimizer,
        "activations": act,
        "other": other,
    }
    host = dict(static.host)
    if dec.offloaded_per_microbatch_bytes:
        host["offloaded_activations"] = dec.offloaded_per_microbatch_bytes * inflight
    return StageMemory(
        sp.stage,
        len(sp.layers),
        inflight,
        items,
        host_bytes=sum(host.values()),
        chunks=tuple(dec.chunks),
        host=host,
        step_transients=steps,
    )


def headroom_gib(est: MemoryEstimate) -> float | None:
    """Usable HBM minus the peak, GiB (negative when it does not fit)."""
    if est.capacity_bytes is None:
        return None
    return (est.capacity_bytes - est.peak_bytes) / GIB_BYTES


__all__ = [
    "ITEM_LABELS",
    "TIGHT_HEADROOM",
    "MemoryEstimate",
    "StageMemory",
    "dominant_items",
    "dominant_items_text",
    "estimate_memory",
    "headroom_gib",
]
