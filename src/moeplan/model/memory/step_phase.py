"""Memory of the optimizer step (bytes): the temporaries the step allocates on top of the static state,
after every activation of the iteration has been freed. torch's ``max_memory_allocated`` is the peak
over the whole iteration, so a stage's allocated peak is the larger of the forward/backward peak and
this step peak (:func:`step_excess`).

What the step allocates, read at NVIDIA/Megatron-LM d98e8a64 (megatron-core 0.20) and
NVIDIA/TransformerEngine d0067d0d:

- **fp32 copies of bf16 main grads.** ``DistributedOptimizer._copy_model_grads_to_main_grads``
  (megatron/core/optimizer/distrib_optimizer.py) sets ``shard_main_param.grad =
  shard_model_grad.float()`` — a new fp32 tensor per shard element when the DDP grad buffer is bf16
  (``grad_reduce_in_fp32: false``), a view when it is fp32 — unless the precision-aware optimizer
  takes the bf16 shard as ``decoupled_grad`` (``use_precision_aware_optimizer_no_fp8_or_ds_fp8``,
  :func:`moeplan.structure.numerics.te_managed_master`; note that Megatron Bridge's BF16 runs set the
  optimizer's ``fp8_recipe`` to ``"tensorwise"``, so their fp32-master precision-aware optimizer is
  megatron-core's, with these copies). Without the distributed optimizer,
  ``Float16OptimizerWithFloat16Params`` does the same per whole parameter (optimizer.py
  ``main_param.grad = model_param.main_grad.float()``). The dense and expert optimizers of a
  ``ChainedOptimizer`` prepare their grads before either steps, so both sets coexist; they are freed
  by ``zero_grad`` at the start of the next iteration, before its forward.
- **Unscaled Adam states.** TE ``FusedAdam.step`` (optimizers/fused_adam.py) collects, for every
  parameter of a param group, an fp32 ``get_unscaled_state`` copy of each state kept in fp16 or FP8
  (``uint8``), and of bf16 moments too unless both moments are bf16 and TE ≥ 2.14 (PR #2632 "Fuse
  scaling and unscaling of bf16 momentums into kernels", first in v2.14); an fp16 master is unscaled
  to fp32 as well. The lists live until the group's multi-tensor kernel has run, so the transient is
  one group's worth: the larger of the dense and the routed-expert shard (megatron-core groups
  parameters by ``is_expert_parallel``, ``_get_param_groups``).

Megatron-FSDP prepares no main-grad copies (``_copy_model_grads_to_main_grads`` returns early), and
the CPU-offloaded share of the state steps on the host (``HybridDeviceOptimizer``).
"""

from __future__ import annotations

from packaging.version import Version

from moeplan.inputs.resolved import Scenario
from moeplan.inputs.versions import release_version
from moeplan.structure.numerics import OptimizerNumerics, te_managed_master
from moeplan.structure.placement import StageParams

#: fp32 bytes of one unscaled state or gradient element
FP32_BYTES = 4.0
#: the first Transformer Engine release whose FusedAdam unscales bf16 moments inside its kernel
TE_FUSED_BF16_UNSCALE = Version("2.14.0")
#: the ``other`` items that are freed before the optimizer step (activations are freed too)
FREED_BEFORE_STEP = ("backward_working_set", "vision_working_set", "cp_kv_buffers")


def _unscaled_bytes_per_element(s: Scenario) -> float:
    """fp32 bytes TE FusedAdam's ``get_unscaled_state`` allocates per shard element (0 without the
    precision-aware optimizer, whose states are fp32 and read in place)."""
    lay = s.layout
    if not lay.use_precision_aware_optimizer:
        return 0.0
    moments = (lay.exp_avg_dtype or "fp32", lay.exp_avg_sq_dtype or "fp32")
    te = s.versions.get("transformer_engine")
    fused_bf16 = moments == ("bf16", "bf16") and (te is None or release_version(te, "0") >= TE_FUSED_BF16_UNSCALE)
    out = sum(FP32_BYTES for d in moments if d in ("fp16", "fp8") or (d == "bf16" and not fused_bf16))
    if (lay.main_params_dtype or "fp32") == "fp16":
        out += FP32_BYTES
    return out


def optimizer_step_transients(
    s: Scenario, sp: StageParams, num: OptimizerNumerics, dense: float, expert: float
) -> dict[str, float]:
    """The optimizer step's temporaries on one rank of stage ``sp`` (bytes, named; zero terms left out):
    ``fp32_main_grad_copies`` and ``adam_unscaled_states`` (module docstring). ``dense`` / ``expert``
    are the stage's trained dense and routed-expert parameters (counts)."""
    if num.fsdp_strategy is not None:
        return {}
    keep = 1.0 - num.offload_fraction
    shard_dense, shard_expert = dense / num.dense_shard * keep, expert / num.expert_shard * keep
    out: dict[str, float] = {}
    if num.grad_bytes < FP32_BYTES and not te_managed_master(s):
        out["fp32_main_grad_copies"] = FP32_BYTES * (shard_dense + shard_expert)
    per_elem = _unscaled_bytes_per_element(s)
    if per_elem:
        out["adam_unscaled_states"] = per_elem * max(shard_dense, shard_expert)
    return out


def step_excess(transients: dict[str, float], activations: dict[str, float], other: dict[str, float]) -> float:
    """How far the optimizer step's peak rises above the forward/backward peak (bytes, ≥ 0): the step's
    temporaries less what is freed before it (every activation, the backward working set, CP and ViT
    buffers)."""
    freed = sum(activations.values()) + sum(other.get(k, 0.0) for k in FREED_BEFORE_STEP)
    return max(0.0, sum(transients.values()) - freed)
