"""Static memory of one rank of a pipeline stage (bytes): weights, gradients and optimizer state,
and the optimizer state and gradients an offloading optimizer keeps in host memory.

Bytes per element and shard degrees come from :mod:`moeplan.spec.numerics` (Megatron-Core
``docs/.../dist_optimizer.md``, ``megatron_facts.md`` §5.3):

- weights: bf16 parameters, 2 B each (FP8 parameter gather: 1 B for GEMM weights), plus Transformer
  Engine's cached FP8 weight copies under FP8 recipes; the vision tower's weights listed apart;
- gradients: the DDP main-grad buffer (``grad_bytes`` per trained parameter);
- optimizer: master copy and both moments, sharded by the distributed optimizer over DP·CP (dense) and
  EDP (routed experts); ``optimizer_offload_fraction`` of it lives in host memory, with the fp32
  gradients of its shard; Megatron-FSDP ``optim_grads_params`` also shards weights and gradients and
  gathers two layers at a time (double-buffered), ``optim_grads`` shards gradients.
"""

from __future__ import annotations

from dataclasses import dataclass

from moeplan.spec.numerics import BF16_BYTES, OptimizerNumerics, fp8_weight_cache_bytes, weight_bytes_gemm
from moeplan.spec.placement import StageParams
from moeplan.spec.scenario import Scenario

#: parameter kinds whose weights feed GEMMs (FP8 casts and caches apply to them); the output layer
#: stays bf16
GEMM_KINDS = ("attention", "dense_mlp", "shared_experts", "routed_experts", "mtp")
#: bytes per parameter of the fp32 gradients a CPU optimizer holds for its shard
HOST_GRAD_BYTES = 4.0


@dataclass(frozen=True)
class StaticMemory:
    """Per-rank static memory (bytes, named parts) and host memory (bytes)."""

    weights: dict[str, float]
    grads: dict[str, float]
    optimizer: dict[str, float]
    host_bytes: float


def trained_params(s: Scenario, sp: StageParams) -> tuple[float, float]:
    """(dense, expert) parameters of the stage that train: Bridge's ``freeze_vision_model`` /
    ``freeze_language_model`` parts keep no gradients or optimizer state."""
    p, t = sp.params, s.training
    vis = p.by_kind.get("vision", 0)
    dense, expert = p.dense, p.expert
    if t.freeze_vision_model:
        dense -= vis
    if t.freeze_language_model:
        dense, expert = (vis if not t.freeze_vision_model else 0), 0
    return dense, expert


def _weights(s: Scenario, sp: StageParams, num: OptimizerNumerics) -> dict[str, float]:
    p = sp.params
    gemm = sum(p.by_kind.get(k, 0) for k in GEMM_KINDS)
    vis = p.by_kind.get("vision", 0)
    fp8_pg = bool(s.layout.fp8_param_gather)
    w_total = gemm * weight_bytes_gemm(fp8_pg) + (p.total - gemm) * BF16_BYTES
    per_layer = w_total / max(1, len(sp.layers))
    out: dict[str, float] = {}
    if num.shard_params:
        out["params_sharded"] = p.dense * BF16_BYTES / num.dense_shard + p.expert * BF16_BYTES / num.expert_shard
        out["fsdp_gathered_layers"] = 2 * per_layer  # double-buffered all-gather of the next layer
    else:
        out["params"] = w_total - BF16_BYTES * vis
        if vis:
            out["vision_tower_params"] = BF16_BYTES * vis
    cache_b = fp8_weight_cache_bytes(s.training.precision, fp8_pg)
    if cache_b:
        if num.shard_params:
            # Megatron-FSDP shards the FP8 weights too; full copies exist only for the gathered layers
            out["fp8_weight_copies"] = gemm * cache_b / num.dense_shard + 2 * gemm / max(1, len(sp.layers)) * cache_b
        else:
            out["fp8_weight_copies"] = gemm * cache_b
    return out


def _grads(dense: float, expert: float, sp: StageParams, num: OptimizerNumerics) -> dict[str, float]:
    g = num.grad_bytes
    if num.shard_grads:
        return {
            "main_grads_sharded": dense * g / num.dense_shard + expert * g / num.expert_shard,
            "fsdp_reduce_buffer": (dense + expert) * g / max(1, len(sp.layers)),
        }
    return {"main_grads": (dense + expert) * g}


def static_memory(s: Scenario, sp: StageParams, num: OptimizerNumerics) -> StaticMemory:
    """Weights, gradients and optimizer state of one rank of stage ``sp``, and what an offloading
    optimizer keeps in host memory."""
    dense, expert = trained_params(s, sp)
    opt_dense = dense * num.state_bytes / num.dense_shard
    opt_exp = expert * num.state_bytes / num.expert_shard
    keep, off = 1.0 - num.offload_fraction, num.offload_fraction
    host = (opt_dense + opt_exp) * off
    if off:
        host += (dense / num.dense_shard + expert / num.expert_shard) * HOST_GRAD_BYTES * off
    return StaticMemory(
        weights=_weights(s, sp, num),
        grads=_grads(dense, expert, sp, num),
        optimizer={"dense_state": opt_dense * keep, "expert_state": opt_exp * keep},
        host_bytes=host,
    )
