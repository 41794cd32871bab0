"""Optimizer, optimizer offload, DDP and FSDP rules (``megatron_facts.md`` §3.8, §4.8)."""

from __future__ import annotations

from moeplan.rules.base import rule
from moeplan.spec.numerics import FP8_RECIPE_OF, grad_bytes, optimizer_fp8_recipe, te_managed_master


@rule(
    "offload.optimizer_requires_distributed_optimizer",
    "[OPT] optimizer_config.py (HybridDeviceOptimizer)",
    "optimizer_cpu_offload needs the distributed optimizer",
)
def _off_dist(s, e):
    lay = s.layout
    if lay.optimizer_cpu_offload and not lay.use_distributed_optimizer and not lay.use_megatron_fsdp:
        return [
            e.error(
                "optimizer_cpu_offload needs use_distributed_optimizer: true",
                "set use_distributed_optimizer: true",
                "optimizer_cpu_offload",
                "use_distributed_optimizer",
            )
        ]


@rule(
    "offload.optimizer_requires_precision_aware_optimizer",
    "[OPT] optimizer_config.py; Bridge cpu-offloading doc",
    "optimizer_cpu_offload needs use_precision_aware_optimizer",
)
def _off_pao(s, e):
    lay = s.layout
    if lay.optimizer_cpu_offload and not lay.use_precision_aware_optimizer:
        how = "" if "use_precision_aware_optimizer" in s.stated else " (unset; OptimizerConfig default false)"
        return [
            e.error(
                f"optimizer_cpu_offload needs use_precision_aware_optimizer: true{how}",
                "set use_precision_aware_optimizer: true",
                "optimizer_cpu_offload",
                "use_precision_aware_optimizer",
                edits={"use_precision_aware_optimizer": True},
            )
        ]


@rule(
    "offload.optimizer_fraction", "[OPT] optimizer_config.py", "optimizer offload fraction must be stated with offload"
)
def _fraction(s, e):
    lay = s.layout
    if lay.optimizer_cpu_offload and lay.optimizer_offload_fraction in (None, 0.0):
        return [
            e.warning(
                "optimizer_cpu_offload is on but optimizer_offload_fraction is "
                f"{lay.optimizer_offload_fraction or 0.0} (default 0.0): nothing is offloaded",
                "set optimizer_offload_fraction (0–1, e.g. 1.0)",
                "optimizer_offload_fraction",
            )
        ]
    if not lay.optimizer_cpu_offload and lay.optimizer_offload_fraction:
        return [
            e.warning(
                f"optimizer_offload_fraction {lay.optimizer_offload_fraction} has no effect without "
                "optimizer_cpu_offload",
                "set optimizer_cpu_offload: true",
                "optimizer_cpu_offload",
            )
        ]


@rule(
    "offload.fp8_param_gather_with_optimizer_offload",
    "[OPT] HybridDeviceOptimizer; Megatron-LM issue reports",
    "FP8 parameter gather cannot be combined with optimizer CPU offload",
    kind="unsupported",
)
def _fp8_pg(s, e):
    lay = s.layout
    if lay.optimizer_cpu_offload and lay.fp8_param_gather:
        return [
            e.error(
                "fp8_param_gather cannot be combined with optimizer_cpu_offload (the CPU optimizer "
                "updates high-precision params that the FP8 gather never sees)",
                "turn fp8_param_gather off when offloading the optimizer",
                "fp8_param_gather",
                "optimizer_cpu_offload",
            )
        ]


@rule(
    "optimizer.precision_aware_requires_distributed",
    "[OPT] optimizer_config.py",
    "use_precision_aware_optimizer needs the distributed optimizer (and Adam)",
)
def _pao_dist(s, e):
    lay = s.layout
    if lay.use_precision_aware_optimizer and not lay.use_distributed_optimizer and not lay.use_megatron_fsdp:
        return [
            e.error(
                "use_precision_aware_optimizer needs use_distributed_optimizer: true",
                "set use_distributed_optimizer: true",
                "use_precision_aware_optimizer",
            )
        ]


@rule(
    "optimizer.overlap_param_gather",
    "[ARGS]; [B-CFG]",
    "overlap_param_gather needs the distributed optimizer (or FSDP) and overlap_grad_reduce",
)
def _opg(s, e):
    lay = s.layout
    if not lay.overlap_param_gather:
        return None
    out = []
    if not lay.use_distributed_optimizer and not lay.use_megatron_fsdp:
        out.append(
            e.error(
                "overlap_param_gather needs the distributed optimizer",
                "set use_distributed_optimizer: true",
                "overlap_param_gather",
            )
        )
    if lay.overlap_grad_reduce is False:
        out.append(
            e.error(
                "overlap_param_gather needs overlap_grad_reduce", "set overlap_grad_reduce: true", "overlap_grad_reduce"
            )
        )
    return out


@rule(
    "fsdp.exclusions",
    "[B-CFG]; [ARGS]",
    "Megatron-FSDP and Torch-FSDP2 are exclusive; Torch-FSDP2 needs PP = 1 and EP = 1; FSDP sharding "
    "strategy needs use_megatron_fsdp",
)
def _fsdp(s, e):
    lay = s.layout
    out = []
    if lay.use_megatron_fsdp and lay.use_torch_fsdp2:
        out.append(
            e.error(
                "use_megatron_fsdp and use_torch_fsdp2 are mutually exclusive",
                "keep one",
                "use_megatron_fsdp",
                "use_torch_fsdp2",
            )
        )
    if lay.use_torch_fsdp2 and (s.pp > 1 or s.ep > 1):
        out.append(
            e.error(
                f"Torch-FSDP2 needs PP = 1 and EP = 1 (PP = {s.pp}, EP = {s.ep})",
                "use Megatron-FSDP for MoE, or PP = EP = 1",
                "use_torch_fsdp2",
            )
        )
    if lay.data_parallel_sharding_strategy not in (None, "no_shard") and not lay.use_megatron_fsdp:
        out.append(
            e.warning(
                "data_parallel_sharding_strategy has no effect without use_megatron_fsdp",
                "set use_megatron_fsdp: true",
                "data_parallel_sharding_strategy",
            )
        )
    if lay.use_megatron_fsdp and s.environment.get("CUDA_DEVICE_MAX_CONNECTIONS") == "1":
        out.append(
            e.error(
                "Megatron-FSDP requires CUDA_DEVICE_MAX_CONNECTIONS ≠ 1",
                "unset CUDA_DEVICE_MAX_CONNECTIONS or set it to 8",
                "environment",
            )
        )
    return out


@rule(
    "fsdp.pp_on_vlm",
    "Megatron Bridge issue 956 (FSDP + PP in VL: open); Megatron-LM PR 6081 examples/multimodal_dev "
    "run_qwen35_vl.sh ('FSDP and PP are mutually exclusive'); Bridge VLM providers build the vision tower "
    "on the first PP stage",
    "Megatron-FSDP with PP > 1 is not supported for a VLM (vision tower + language model)",
    kind="unsupported",
)
def _fsdp_pp_vlm(s, e):
    m = s.model
    if not s.layout.use_megatron_fsdp or s.pp <= 1 or m is None or not m.is_vlm:
        return None
    return [
        e.error(
            f"Megatron-FSDP with PP = {s.pp} on {m.name}: Megatron Bridge's VLM path does not combine FSDP with "
            "pipeline parallelism (the vision tower sits on the first stage; FSDP for the encoder with PP for "
            "the language model is an open feature request)",
            "use PP = 1 with Megatron-FSDP (the MoE-VLM guidance's FSDP path: TP1 PP1, EP for the experts), "
            "or drop use_megatron_fsdp and keep PP (3D parallel with the distributed optimizer)",
            "use_megatron_fsdp",
            "pipeline_model_parallel_size",
        )
    ]


@rule(
    "optimizer.precision_aware_master_kept_by_megatron_core",
    "[OPT] optimizer_config.py (use_precision_aware_optimizer_no_fp8_or_ds_fp8); Bridge mixed_precision.py",
    "under Megatron Bridge a BF16 run's precision-aware optimizer keeps megatron-core's fp32 master",
    kind="info",
)
def _pao_master(s, e):
    # not TE's master and not an FP8 recipe: an fp32 master under Bridge's 'tensorwise' default (a 16-bit
    # master, Megatron-LM's 'delayed' default and megatron-core < 0.13 all hand TE the master)
    if not s.layout.use_precision_aware_optimizer or te_managed_master(s) or s.training.precision in FP8_RECIPE_OF:
        return None
    grads = " and copies the bf16 gradient shard to fp32 at every step (4 B more per element while it steps)"
    return [
        e.info(
            f"use_precision_aware_optimizer with an fp32 master under Megatron Bridge: Bridge copies "
            f"mixed_precision.fp8_recipe ('{optimizer_fp8_recipe(s)}' by default, also when FP8 is off) into "
            "the optimizer config, so use_precision_aware_optimizer_no_fp8_or_ds_fp8 is false and megatron-core, "
            "not TE's FusedAdam, keeps the master: an fp32 shard (4 B per element, not the 2 B of "
            f"store_param_remainders){grads if grad_bytes(s) < 4 else ''}; moeplan counts it so. "
            "Megatron-LM's default fp8_recipe ('delayed') hands the master to TE",
            "use_precision_aware_optimizer",
            "main_params_dtype",
        )
    ]
