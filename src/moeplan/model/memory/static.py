"""Static memory of one rank of a pipeline stage (bytes): weights, gradients and optimizer state,
and the optimizer state and gradients an offloading optimizer keeps in host memory.

Bytes per element and shard degrees come from :mod:`moeplan.structure.numerics` (Megatron-Core
``docs/.../dist_optimizer.md``, ``megatron_facts.md`` §5.3, vendored in ``tests/data/reference``):

- weights: bf16 parameters, 2 B each (FP8 parameter gather: 1 B for GEMM weights), plus Transformer
  Engine's cached FP8 weight copies under FP8 recipes; the vision tower's weights listed apart; LoRA
  adapters (``peft``) in bf16 beside the frozen base, whose weights are all that is left of it;
- gradients: the DDP main-grad buffer (``grad_bytes`` per trained parameter);
- optimizer: master copy and both moments, sharded by the distributed optimizer over DP·CP (dense) and
  EDP (routed experts); ``optimizer_offload_fraction`` of it lives in host memory (below);
  Megatron-FSDP ``optim_grads_params`` also shards weights (in their compute dtype: the FP8 GEMM
  weights with ``fp8_param_gather``) and gradients over its DP-shard groups (dense over DP·CP, routed
  experts over EDP, within one optimizer instance: experts stay whole where that group is one rank),
  keeps the embedding and output layer whole once gathered, and holds the gathered units its prefetch
  has in flight and the unsharded gradients of the units queued for reduce-scatter
  (:func:`moeplan.model.fsdp_units.units_in_flight`); ``optim_grads`` shards gradients.

Host memory of the CPU optimizer, as megatron-core's ``HybridDeviceOptimizer``
(``megatron/core/optimizer/cpu_offloading/hybrid_optimizer.py``, built by
``megatron/core/optimizer/__init__.py`` with ``param_update_in_fp32=True``) allocates it for the
``optimizer_offload_fraction`` of the rank's shard it moves to the CPU:

- an fp32 master copy per offloaded parameter (``param.detach().clone().float()``): 4 B, pageable
  up to megatron-core 0.20 (``core_r0.19.0`` pins only the transient bf16 copy; the 0.20.0 release
  branch likewise), pinned unless ``pin_cpu_params: false`` after it (Megatron-LM PR #4547,
  "Preserve pinned host memory for CPU-offloaded FP32 params", merged 2026-08-21);
- an fp32 gradient copy the D2H stream fills every step (``torch.empty(..., dtype=fp32,
  pin_memory=pin_cpu_grads)``), pinned unless ``pin_cpu_grads: false``: 4 B;
- torch ``AdamW``'s ``exp_avg`` and ``exp_avg_sq`` (``zeros_like`` the fp32 master: pageable fp32,
  whatever ``exp_avg_dtype`` says, which only TE's FusedAdam reads): 8 B;
- the pinned-memory allocator's rounding: torch's caching host allocator rounds every pinned
  allocation up to a power of two (``ATen/core/CachingHostAllocator.h``: ``roundSize =
  c10::llvm::PowerOf2Ceil(size)``) and keeps the blocks. The allocations are the rank's per-parameter
  shard pieces, cut at the distributed optimizer's bucket boundaries, so where a size falls within its
  octave is taken as uniform in log2: pinned / requested bytes = E[2^ceil(u)] / E[2^u] over u uniform
  in [0, 1) = 2 / (1 / ln 2) = 2 ln 2 ≈ 1.386 (:data:`PINNED_ROUNDUP_FACTOR`).

The transient bf16 pinned staging copy made while the optimizer is built is freed at once and its
block reused by the next parameter of its size class (not counted).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from packaging.version import Version

from moeplan.i18n.messages import Message, msg
from moeplan.inputs.resolved import Scenario
from moeplan.model.fsdp_units import MIN_COMMUNICATION_UNIT, fsdp_params, units_in_flight
from moeplan.model.lora import LORA_BYTES, adapter_rank_params
from moeplan.structure.numerics import (
    BF16_BYTES,
    OptimizerNumerics,
    fp8_weight_cache_bytes,
    fsdp_grads_ignore_fp32_flag,
    weight_bytes_gemm,
)
from moeplan.structure.placement import StageParams

#: parameter kinds whose weights feed GEMMs (FP8 casts and caches apply to them); the output layer
#: stays bf16
GEMM_KINDS = ("attention", "dense_mlp", "shared_experts", "routed_experts", "moe_latent_proj", "mtp")
#: bytes per offloaded parameter of HybridDeviceOptimizer's host tensors (module docstring): fp32
#: master, fp32 gradient copy, AdamW's two fp32 moments
HOST_MASTER_BYTES = 4.0
HOST_GRAD_BYTES = 4.0
HOST_MOMENTS_BYTES = 8.0
#: pinned bytes allocated per pinned byte requested: power-of-two rounding of torch's caching host
#: allocator for sizes uniform in log2 within an octave, 2 ln 2 (module docstring)
PINNED_ROUNDUP_FACTOR = 2 * math.log(2)
#: the last megatron-core release whose CPU fp32 master copies are pageable (PR #4547 pins them later)
PINNED_MASTER_AFTER_MCORE = Version("0.20.0")


@dataclass(frozen=True)
class StaticMemory:
    """Per-rank static memory (bytes, named parts) and host memory (bytes, named parts)."""

    weights: dict[str, float]
    grads: dict[str, float]
    optimizer: dict[str, float]
    host: dict[str, float]
    trained: tuple[float, float] = (0.0, 0.0)  # (dense, routed-expert) parameters with gradients

    @property
    def host_bytes(self) -> float:
        """Host memory of the rank's CPU optimizer, bytes (0 without optimizer offload)."""
        return sum(self.host.values())


def trained_params(s: Scenario, sp: StageParams) -> tuple[float, float]:
    """(dense, expert) parameters of the stage that train: Bridge's ``freeze_vision_model`` /
    ``freeze_language_model`` parts keep no gradients or optimizer state; with LoRA (``peft``) only
    the adapters train (:func:`moeplan.model.lora.adapter_rank_params`)."""
    if s.peft is not None:
        a = adapter_rank_params(s, sp)
        return float(a.dense), float(a.expert)
    p, t = sp.params, s.training
    vis = p.by_kind.get("vision", 0)
    dense, expert = p.dense, p.expert
    if t.freeze_vision_model:
        dense -= vis
    if t.freeze_language_model:
        dense, expert = (vis if not t.freeze_vision_model else 0), 0
    return dense, expert


def _fsdp_gathered(sp: StageParams, num: OptimizerNumerics) -> tuple[int, float, float]:
    """Megatron-FSDP units a rank holds gathered at once (:func:`units_in_flight`), and one gathered
    unit's GEMM weights and BF16 parameters (counts; a group of one rank gathers nothing)."""
    fp, units = fsdp_params(sp.params), max(1, len(sp.layers))
    dense = num.param_dense_shard > 1
    gemm = ((fp.dense_gemm if dense else 0.0) + (fp.expert if num.param_expert_shard > 1 else 0.0)) / units
    bf16 = (fp.dense_other if dense else 0.0) / units
    return units_in_flight(gemm + bf16, units)[0], gemm, bf16


def _fsdp_weights(s: Scenario, sp: StageParams, num: OptimizerNumerics) -> dict[str, float]:
    """Megatron-FSDP ``optim_grads_params`` weights of one rank (bytes, named; module docstring):
    ``params_sharded`` (unit and non-unit dense parameters over the dense shard group, routed experts
    over the expert one, GEMM weights in :func:`weight_bytes_gemm`, the rest BF16),
    ``fsdp_whole_non_unit_params`` (the embedding and output layer, kept whole once gathered) and
    ``fsdp_gathered_layers`` (the units the prefetch holds gathered)."""
    fp = fsdp_params(sp.params)
    wb = weight_bytes_gemm(bool(s.layout.fp8_param_gather))
    pd, pe = num.param_dense_shard, num.param_expert_shard
    dense_b = fp.dense_gemm * wb + (fp.dense_other + fp.non_unit) * BF16_BYTES
    n_ag, unit_gemm, unit_bf16 = _fsdp_gathered(sp, num)
    out = {
        "params_sharded": dense_b / pd + fp.expert * wb / pe,
        "fsdp_gathered_layers": n_ag * (unit_gemm * wb + unit_bf16 * BF16_BYTES),
    }
    if pd > 1 and fp.non_unit:
        out["fsdp_whole_non_unit_params"] = fp.non_unit * BF16_BYTES
    return out


def fsdp_memory_notes(s: Scenario, num: OptimizerNumerics, stages: list[StageParams]) -> list[Message]:
    """What the Megatron-FSDP memory rests on (module docstring): its own gradient dtype (megatron-core
    0.19 on), the units held gathered and the unsharded gradients in flight (the most over ``stages``),
    and routed experts left whole where the optimizer instances leave their shard group one rank.
    Empty without Megatron-FSDP."""
    notes: list[Message] = []
    if fsdp_grads_ignore_fp32_flag(s):
        notes.append(msg("fsdp_ep.grads_own_dtype", version=str(s.mcore_version)))
    if not num.shard_params or not stages:
        return notes
    worst = max(stages, key=lambda sp: sum(_fsdp_gathered(sp, num)[1:]))
    n_ag, gemm, bf16 = _fsdp_gathered(worst, num)
    if n_ag:
        units = max(1, len(worst.layers))
        grads = units_in_flight(gemm + bf16, units)[1]
        unit = max(MIN_COMMUNICATION_UNIT, 2 * (gemm + bf16))
        notes.append(msg("fsdp_ep.memory_in_flight", gathered=n_ag, grads=grads, unit=unit))
    edp = s.edp or 1
    if num.param_expert_shard == 1 and edp > 1:
        inst = s.layout.num_distributed_optimizer_instances
        notes.append(msg("fsdp_ep.experts_whole", instances=inst, edp=edp))
    return notes


def _weights(s: Scenario, sp: StageParams, num: OptimizerNumerics) -> dict[str, float]:
    p = sp.params
    gemm = sum(p.by_kind.get(k, 0) for k in GEMM_KINDS)
    vis = p.by_kind.get("vision", 0)
    fp8_pg = bool(s.layout.fp8_param_gather)
    w_total = gemm * weight_bytes_gemm(fp8_pg) + (p.total - gemm) * BF16_BYTES
    out: dict[str, float] = {}
    if num.shard_params:
        out.update(_fsdp_weights(s, sp, num))
    else:
        out["params"] = w_total - BF16_BYTES * vis
        if vis:
            out["vision_tower_params"] = BF16_BYTES * vis
    if s.peft is not None:  # adapters in the parameter dtype, next to the frozen base
        out["lora_adapters"] = adapter_rank_params(s, sp).total * LORA_BYTES
    cache_b = fp8_weight_cache_bytes(s.training.precision, fp8_pg)
    if cache_b:
        if num.shard_params:
            # Megatron-FSDP shards the FP8 weights too; full copies exist only for the gathered units
            n_ag, unit_gemm, _ = _fsdp_gathered(sp, num)
            fp = fsdp_params(p)
            sharded = fp.dense_gemm / num.param_dense_shard + fp.expert / num.param_expert_shard
            out["fp8_weight_copies"] = (sharded + n_ag * unit_gemm) * cache_b
        else:
            out["fp8_weight_copies"] = gemm * cache_b
    return out


def _grads(dense: float, expert: float, sp: StageParams, num: OptimizerNumerics) -> dict[str, float]:
    """Gradient buffers of one rank (bytes, named): the main grads, or under Megatron-FSDP their
    shards over the DP-shard groups plus the unsharded gradients in flight: one layer's with
    ``optim_grads``, the units queued for reduce-scatter with ``optim_grads_params``
    (:func:`units_in_flight`; module docstring)."""
    g = num.grad_bytes
    if not num.shard_grads:
        return {"main_grads": (dense + expert) * g}
    pd, pe = num.param_dense_shard, num.param_expert_shard
    in_flight = (dense + expert) / max(1, len(sp.layers))
    if num.shard_params:
        in_flight = _fsdp_grads_in_flight(dense, expert, sp, num)
    return {"main_grads_sharded": dense * g / pd + expert * g / pe, "fsdp_reduce_buffer": in_flight * g}


def _fsdp_grads_in_flight(dense: float, expert: float, sp: StageParams, num: OptimizerNumerics) -> float:
    """Unsharded gradients (elements) Megatron-FSDP ``optim_grads_params`` holds at once: the units
    its reduce-scatter queue keeps (:func:`units_in_flight`), each the mean unit's trained dense
    (at most its unit parameters) and routed-expert parameters whose shard group has more than one rank."""
    units = max(1, len(sp.layers))
    dense_unit = min(dense, fsdp_params(sp.params).dense_unit) if num.param_dense_shard > 1 else 0.0
    unit = (dense_unit + (expert if num.param_expert_shard > 1 else 0.0)) / units
    return units_in_flight(unit, units)[1] * unit


def cpu_optimizer_host(s: Scenario, offloaded_params: float) -> dict[str, float]:
    """Host memory (bytes, named parts) of HybridDeviceOptimizer for ``offloaded_params`` parameters
    of one rank moved to the CPU: fp32 master and gradient copies (the pinned ones rounded up by the
    pinned allocator: gradients unless ``pin_cpu_grads: false``, masters after megatron-core 0.20
    unless ``pin_cpu_params: false``) and AdamW's pageable fp32 moments. Sources in the module
    docstring. Empty when nothing is offloaded."""
    if offloaded_params <= 0:
        return {}
    lay = s.layout
    pin_params = lay.pin_cpu_params is not False and s.mcore_version > PINNED_MASTER_AFTER_MCORE
    pin_grads = lay.pin_cpu_grads is not False
    master = offloaded_params * HOST_MASTER_BYTES
    grads = offloaded_params * HOST_GRAD_BYTES
    out = {
        "cpu_master_params_fp32": master,
        "cpu_grads_fp32": grads,
        "cpu_adam_moments_fp32": offloaded_params * HOST_MOMENTS_BYTES,
    }
    pinned = (master if pin_params else 0.0) + (grads if pin_grads else 0.0)
    if pinned:
        out["pinned_allocator_rounding"] = pinned * (PINNED_ROUNDUP_FACTOR - 1)
    return out


def static_memory(s: Scenario, sp: StageParams, num: OptimizerNumerics) -> StaticMemory:
    """Weights, gradients and optimizer state of one rank of stage ``sp``, and what an offloading
    optimizer keeps in host memory (:func:`cpu_optimizer_host`)."""
    dense, expert = trained_params(s, sp)
    opt_dense = dense * num.state_bytes / num.dense_shard
    opt_exp = expert * num.state_bytes / num.expert_shard
    keep, off = 1.0 - num.offload_fraction, num.offload_fraction
    offloaded = (dense / num.dense_shard + expert / num.expert_shard) * off
    return StaticMemory(
        weights=_weights(s, sp, num),
        grads=_grads(dense, expert, sp, num),
        optimizer={"dense_state": opt_dense * keep, "expert_state": opt_exp * keep},
        host=cpu_optimizer_host(s, offloaded),
        trained=(dense, expert),
    )
