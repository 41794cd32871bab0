"""Optimizer, optimizer offload, DDP and FSDP rules (``megatron_facts.md`` §3.8, §4.8;
vendored in ``tests/data/reference``)."""

from __future__ import annotations

from moeplan.i18n.messages import msg
from moeplan.rules.base import rule
from moeplan.structure.numerics import FP8_RECIPE_OF, grad_bytes, optimizer_fp8_recipe, te_managed_master


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
                msg("offload.optimizer_offload_needs_distributed_optimizer"),
                msg("optimizer.set_distributed_optimizer"),
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
        text = (
            msg("offload.optimizer_offload_needs_precision_aware")
            if "use_precision_aware_optimizer" in s.stated
            else msg("offload.optimizer_offload_needs_precision_aware_unset")
        )
        return [
            e.error(
                text,
                msg("offload.optimizer_offload_needs_precision_aware.fix"),
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
                msg("offload.offload_fraction_zero", fraction=lay.optimizer_offload_fraction or 0.0),
                msg("offload.offload_fraction_zero.fix"),
                "optimizer_offload_fraction",
            )
        ]
    if not lay.optimizer_cpu_offload and lay.optimizer_offload_fraction:
        return [
            e.warning(
                msg("offload.offload_fraction_without_offload", fraction=lay.optimizer_offload_fraction),
                msg("offload.offload_fraction_without_offload.fix"),
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
                msg("offload.fp8_param_gather_with_optimizer_offload"),
                msg("offload.fp8_param_gather_with_optimizer_offload.fix"),
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
                msg("optimizer.precision_aware_needs_distributed_optimizer"),
                msg("optimizer.set_distributed_optimizer"),
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
                msg("optimizer.overlap_param_gather_needs_distributed_optimizer"),
                msg("optimizer.set_distributed_optimizer"),
                "overlap_param_gather",
            )
        )
    if lay.overlap_grad_reduce is False:
        out.append(
            e.error(
                msg("optimizer.overlap_param_gather_needs_overlap_grad_reduce"),
                msg("optimizer.overlap_param_gather_needs_overlap_grad_reduce.fix"),
                "overlap_grad_reduce",
            )
        )
    return out


@rule(
    "fsdp.exclusions",
    "[B-CFG]; [ARGS]",
    "Megatron-FSDP and Torch-FSDP2 are exclusive; Torch-FSDP2 needs PP = 1 and EP = 1; an FSDP sharding "
    "strategy without use_megatron_fsdp has no effect",
)
def _fsdp(s, e):
    lay = s.layout
    out = []
    if lay.use_megatron_fsdp and lay.use_torch_fsdp2:
        out.append(
            e.error(
                msg("fsdp.megatron_fsdp_and_torch_fsdp2"),
                msg("fsdp.megatron_fsdp_and_torch_fsdp2.fix"),
                "use_megatron_fsdp",
                "use_torch_fsdp2",
            )
        )
    if lay.use_torch_fsdp2 and (s.pp > 1 or s.ep > 1):
        out.append(
            e.error(
                msg("fsdp.torch_fsdp2_needs_pp_1_ep_1", pp=s.pp, ep=s.ep),
                msg("fsdp.torch_fsdp2_needs_pp_1_ep_1.fix"),
                "use_torch_fsdp2",
            )
        )
    if lay.data_parallel_sharding_strategy not in (None, "no_shard") and not lay.use_megatron_fsdp:
        out.append(  # a no-op, not a hazard: Megatron's DDP takes the field and ignores it
            e.info(
                msg("fsdp.sharding_strategy_without_megatron_fsdp", strategy=lay.data_parallel_sharding_strategy),
                msg("fsdp.sharding_strategy_without_megatron_fsdp.fix"),
                "data_parallel_sharding_strategy",
            )
        )
    if lay.use_megatron_fsdp and s.environment.get("CUDA_DEVICE_MAX_CONNECTIONS") == "1":
        out.append(
            e.error(
                msg("fsdp.megatron_fsdp_one_device_connection"),
                msg("fsdp.megatron_fsdp_one_device_connection.fix"),
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
            msg("fsdp.megatron_fsdp_with_pp_on_vlm", pp=s.pp, model=m.name),
            msg("fsdp.megatron_fsdp_with_pp_on_vlm.fix"),
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
    grads = msg("optimizer.precision_aware_fp32_master_under_bridge.grads") if grad_bytes(s) < 4 else ""
    return [
        e.info(
            msg("optimizer.precision_aware_fp32_master_under_bridge", recipe=optimizer_fp8_recipe(s), grads=grads),
            "use_precision_aware_optimizer",
            "main_params_dtype",
        )
    ]
