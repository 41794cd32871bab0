"""Step time, tokens/s/GPU, model TFLOP/s/GPU and MFU of a layout, with a breakdown that sums to
the step time.

Per pipeline stage and microbatch: compute (dense GEMMs, grouped expert GEMMs, attention), element-
wise memory traffic, kernel-launch overhead (reduced by CUDA graphs), recompute, exposed TP / CP / EP
communication. The pipeline runs ``m`` microbatches on the slowest stage plus the bubble
``(p − 1)/v`` stage-times (Narayanan et al. 2021, interleaved schedule); then exposed data-parallel
communication and the optimizer step. Model TFLOP/s uses :mod:`moeplan.structure.flops` (Megatron
Bridge's count); MFU divides it by the dense BF16 peak (say so in reports).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import cast

from moeplan.catalog.gpus import measured_gemm_fractions
from moeplan.inputs.model_spec import ModelSpec
from moeplan.inputs.resolved import Scenario
from moeplan.inputs.system import GpuSpec
from moeplan.model.constants import TimeConstants, load_constants, release_of
from moeplan.model.lora import adapter_rank_params
from moeplan.model.time import notes
from moeplan.model.time.context import StepContext, require_step_inputs, step_context
from moeplan.model.time.cpu_offload import cpu_offload_notes
from moeplan.model.time.data_parallel import data_parallel_time, fsdp_time_notes
from moeplan.model.time.optimizer_step import optimizer_step_s
from moeplan.model.time.pipeline_bubble import pipeline_bubble_s, pipeline_comm_s
from moeplan.model.time.stage import StageTime, stage_time
from moeplan.model.validity import assess
from moeplan.structure.flops import model_flops
from moeplan.structure.numerics import optimizer_offload_fraction
from moeplan.structure.placement import stage_params, stage_plan


@dataclass(frozen=True)
class ThroughputEstimate:
    """Predicted performance of one training step.

    Attributes:
        step_time_s: seconds per optimizer step.
        tokens_per_s_per_gpu: GBS·seq / (step · W).
        model_tflops_per_gpu: Megatron Bridge model FLOPs per token × tokens/s/GPU / 1e12.
        mfu: model TFLOP/s / dense BF16 peak (fraction); ``mfu_precision_peak`` against the
            training precision's peak.
        breakdown_s: named parts that add up to ``step_time_s``.
        validity: :meth:`moeplan.model.validity.Validity.to_dict` — whether the case lies inside
            the measured runs the constants were fitted on, and its error band.
        useful_tokens_per_s_per_gpu: tokens/s/GPU × the workload's non-padding fraction (text +
            image tokens that carry data).
        stage_microbatch_s: forward + backward time of one microbatch on each pipeline stage (the
            slowest sets the pace; a VLM's first stage also runs the vision tower).
        release / release_factor: the container release whose software efficiency was used and its
            fitted factor (every part of the step is divided by it; the newest release is 1).
        hidden_s: what overlap and CUDA graphs take off the step (s per step, not part of
            ``breakdown_s``): ``ep_comm`` / ``cp_comm`` / ``tp_comm`` / ``dp_comm`` / ``fsdp_comm``
            the communication time hidden behind compute, ``cuda_graphs`` the launch overhead and
            MoE host syncs an eager step would pay on top.
        critical_stage: the pipeline stage (0-based) whose parts ``breakdown_s`` itemises: the
            slowest, which sets the pace of every stage.
    """

    step_time_s: float
    tokens_per_s_per_gpu: float
    model_tflops_per_gpu: float
    mfu: float
    mfu_precision_peak: float
    breakdown_s: dict[str, float]
    num_microbatches: int
    release: str
    #: what the estimate assumed (:attr:`assumptions` reads it, unless ``notes_source`` makes it)
    notes: list[str] = field(default_factory=list)
    validity: dict = field(default_factory=dict)
    useful_tokens_per_s_per_gpu: float | None = None
    stage_microbatch_s: list[float] = field(default_factory=list)
    release_factor: float = 1.0
    hidden_s: dict[str, float] = field(default_factory=dict)
    critical_stage: int = 0
    #: makes the assumptions on first read (:func:`estimate_step` with ``notes_on_read``); None: ``notes``
    notes_source: Callable[[], list[str]] | None = field(default=None, repr=False, compare=False)

    @functools.cached_property
    def assumptions(self) -> list[str]:
        """What the estimate assumed (messages and texts, in the order said): ``notes``, or made by
        ``notes_source`` on first read."""
        return self.notes_source() if self.notes_source is not None else self.notes

    def to_dict(self) -> dict:
        return {
            "step_time_s": self.step_time_s,
            "tokens_per_s_per_gpu": self.tokens_per_s_per_gpu,
            "model_tflops_per_gpu": self.model_tflops_per_gpu,
            "mfu": self.mfu,
            "mfu_peak": "dense BF16",
            "mfu_precision_peak": self.mfu_precision_peak,
            "breakdown_s": dict(self.breakdown_s),
            "num_microbatches": self.num_microbatches,
            "release": self.release,
            "release_factor": self.release_factor,
            "assumptions": list(self.assumptions),
            "validity": dict(self.validity),
            "useful_tokens_per_s_per_gpu": self.useful_tokens_per_s_per_gpu,
            "stage_microbatch_s": list(self.stage_microbatch_s),
            "hidden_s": dict(self.hidden_s),
            "critical_stage": self.critical_stage,
        }


def _notes_before(ctx: StepContext, stated_release: str | None, release_used: str) -> list[str]:
    s, c = ctx.s, ctx.c
    return [
        *notes.calibration_notes(c, ctx.gpu),
        *notes.hardware_notes(ctx.gpu, bool(ctx.offload_items) or optimizer_offload_fraction(s) > 0),
        *notes.release_notes(c, stated_release, s.input.versions.container, release_used),
        *notes.precision_notes(ctx),
        *notes.workload_notes(ctx),
        *fsdp_time_notes(ctx),
        *cpu_offload_notes(ctx),
    ]


def _step_parts(ctx: StepContext, stages: list, crit: int, per_stage: list[StageTime]) -> tuple[dict, dict]:
    """Breakdown and hidden time of one step (s, before the release factor): the critical stage's
    microbatches, the pipeline, DP traffic and the optimizer."""
    n_mb, cs = ctx.num_microbatches, per_stage[crit]
    breakdown = {k: v * n_mb for k, v in cs.parts.items()}
    hidden = {k: v * n_mb for k, v in cs.hidden.items()}
    breakdown["pipeline_bubble"] = pipeline_bubble_s(ctx, cs.total_s)
    breakdown["pp_comm"] = pipeline_comm_s(ctx)
    trained = adapter_rank_params(ctx.s, stages[crit]) if ctx.s.peft is not None else stages[crit].params
    dpt = data_parallel_time(ctx, trained, cs)
    breakdown["dp_comm_exposed"] = dpt.dp_exposed_s
    hidden["dp_comm"] = dpt.dp_hidden_s
    if dpt.fsdp_exposed_s is not None and dpt.fsdp_hidden_s is not None:  # (set together)
        breakdown["fsdp_comm_exposed"] = dpt.fsdp_exposed_s
        hidden["fsdp_comm"] = dpt.fsdp_hidden_s
    breakdown["optimizer"] = optimizer_step_s(ctx, trained)
    return breakdown, hidden


def estimate_step(
    s: Scenario, c: TimeConstants | None = None, vision_patches: float | None = None, *, notes_on_read: bool = False
) -> ThroughputEstimate:
    """Predict step time and throughput of a resolved scenario (the terms: :mod:`moeplan.model.time`).

    ``vision_patches`` overrides the ViT patches per sequence of a VLM (0 = mock, image-free data).
    ``notes_on_read``: the estimate's assumptions (:attr:`ThroughputEstimate.assumptions`) are made
    when first read rather than now, the same list (the planner times thousands of layouts and shows
    a few); default False.
    The container release's software efficiency (fitted across all models and GPUs of a release,
    ``benchmarks/calibrate_time.py``) divides every part of the step: newer releases speed up
    kernels, communication and overlap alike.

    Raises:
        InputError: missing model, GPU, world size, sequence length or global batch size, a GPU
            without a bf16 dense peak, or a world size that does not divide (run ``moeplan check``).
    """
    c = c or load_constants()
    require_step_inputs(s)
    m, t, gpu = cast(ModelSpec, s.model), s.training, cast(GpuSpec, s.gpu)  # require_step_inputs() checked them
    ctx = step_context(s, c, measured_gemm_fractions(gpu.id), vision_patches)
    stated_release = release_of(s)
    rel_name, rel = c.release(stated_release)
    stages = stage_params(s, allow_balanced=True)
    chunk_plan = stage_plan(s, allow_balanced=True)
    per_stage = [stage_time(ctx, st, chunk_plan) for st in stages]
    totals = [p.total_s for p in per_stage]
    crit = max(range(len(totals)), key=lambda i: totals[i])
    breakdown, hidden = _step_parts(ctx, stages, crit, per_stage)
    breakdown = {k: v / rel for k, v in breakdown.items()}
    hidden = {k: v / rel for k, v in hidden.items()}
    step = sum(breakdown.values())
    tps = ctx.global_batch_size * ctx.seq_length / (step * ctx.num_gpus)
    tflops = model_flops(m, ctx.seq_length, s.tp, s.mtp_num_layers).per_token * tps / 1e12
    bf16 = gpu.peak_dense_tflops.get("bf16") or 1.0
    prec_peak = gpu.peak_tflops(t.precision) or bf16
    said = functools.partial(
        _step_notes, ctx, stated_release, rel_name, (hidden.get("ep_comm", 0.0), step), (tflops, bf16, prec_peak)
    )
    return ThroughputEstimate(
        step,
        tps,
        tflops,
        tflops / bf16,
        tflops / prec_peak,
        breakdown,
        ctx.num_microbatches,
        rel_name,
        [] if notes_on_read else said(),
        assess(s, c).to_dict(),
        tps * (s.input.workload.useful_fraction if s.input.workload is not None else 1.0),
        [x / rel for x in totals],
        rel,
        hidden,
        crit,
        notes_source=said if notes_on_read else None,
    )


def _step_notes(
    ctx: StepContext,
    stated_release: str | None,
    release_used: str,
    ep: tuple[float, float],
    outcome: tuple[float, float, float],
) -> list[str]:
    """What :func:`estimate_step` assumes, in the order it says it: the notes before the terms, the EP
    overlap's host work (``ep``: hidden EP seconds, step seconds) and the outcome's (``outcome``: model
    TFLOP/s, the dense BF16 and the precision's peak)."""
    out = _notes_before(ctx, stated_release, release_used)
    out += notes.ep_overlap_host_notes(ctx, *ep)
    out += notes.outcome_notes(ctx.s, stage_plan(ctx.s) is not None, *outcome)
    return out
