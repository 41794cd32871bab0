"""Where each moeplan layout / training key lives in Megatron Bridge's ``ConfigContainer`` and in
Megatron-LM's ``pretrain_gpt.py`` arguments.

Sources: ``megatron_facts.md`` §3.1–3.13 (vendored in ``tests/data/reference``; Bridge ``training/config.py`` @067f987, mcore
``TransformerConfig`` / ``OptimizerConfig`` / ``DistributedDataParallelConfig`` @2a75ac1) and
Megatron-LM ``megatron/training/arguments.py`` flag spellings. A key listed under several Bridge
sections is written to each (Bridge keeps e.g. ``ddp`` and ``optimizer`` in sync).
"""

from __future__ import annotations

from packaging.version import Version

from moeplan.inputs.layout import PARALLEL_DIMS
from moeplan.inputs.versions import CUDA_GRAPH_MODULES_MCORE
from moeplan.rules.world import KEY_MIN_MCORE  # noqa: F401 - defined with the rule that checks it; read by the export

#: layout key → Bridge ConfigContainer paths (``section.field``); first is the canonical one
BRIDGE_PATHS: dict[str, tuple[str, ...]] = {
    # model (GPTModelProvider / TransformerConfig)
    **{
        k: (f"model.{k}",)
        for k in (
            *PARALLEL_DIMS.values(),
            "sequence_parallel",
            "pipeline_model_parallel_layout",
            "num_layers_in_first_pipeline_stage",
            "num_layers_in_last_pipeline_stage",
            "account_for_embedding_in_pipeline_split",
            "account_for_loss_in_pipeline_split",
            "microbatch_group_size_per_vp_stage",
            "cp_comm_type",
            "hierarchical_context_parallel_sizes",
            "hybrid_context_parallel",
            "cp_partition_mode",
            "recompute_granularity",
            "recompute_method",
            "recompute_num_layers",
            "recompute_modules",
            "distribute_saved_activations",
            "moe_token_dispatcher_type",
            "moe_flex_dispatcher_backend",
            "moe_enable_deepep",
            "moe_shared_expert_overlap",
            "moe_grouped_gemm",
            "moe_permute_fusion",
            "moe_router_fusion",
            "moe_expert_capacity_factor",
            "moe_pad_expert_input_to_capacity",
            "moe_expert_rank_capacity_factor",
            "moe_router_load_balancing_type",
            "moe_router_force_load_balancing",
            "moe_router_padding_for_fp8",
            "moe_paged_stash",
            "moe_deepep_num_sms",
            "moe_z_loss_coeff",
            "use_transformer_engine_op_fuser",
            "mtp_num_layers",
            "cuda_graph_impl",
            "cuda_graph_scope",
            "cuda_graph_modules",
            "cuda_graph_warmup_steps",
            "vision_cuda_graph_impl",
            "vision_cuda_graph_scope",
            "cpu_offloading",
            "cpu_offloading_num_layers",
            "fine_grained_activation_offloading",
            "offload_modules",
            "calculate_per_token_loss",
            "cross_entropy_loss_fusion",
            "cross_entropy_fusion_impl",
            "apply_rope_fusion",
            "attention_backend",
            "attention_dropout",
            "hidden_dropout",
        )
    },
    "use_te_rng_tracker": ("model.use_te_rng_tracker", "rng.te_rng_tracker"),
    # communication overlap
    "tp_comm_overlap": ("comm_overlap.tp_comm_overlap",),
    "overlap_moe_expert_parallel_comm": ("comm_overlap.overlap_moe_expert_parallel_comm",),
    "delay_wgrad_compute": ("comm_overlap.delay_wgrad_compute",),
    "overlap_grad_reduce": ("ddp.overlap_grad_reduce",),
    "overlap_param_gather": ("ddp.overlap_param_gather", "optimizer.overlap_param_gather"),
    "overlap_param_gather_with_optimizer_step": ("optimizer.overlap_param_gather_with_optimizer_step",),
    # optimizer
    "use_distributed_optimizer": ("optimizer.use_distributed_optimizer", "ddp.use_distributed_optimizer"),
    "use_precision_aware_optimizer": ("optimizer.use_precision_aware_optimizer",),
    "optimizer_cpu_offload": ("optimizer.optimizer_cpu_offload",),
    "optimizer_offload_fraction": ("optimizer.optimizer_offload_fraction",),
    "pin_cpu_grads": ("optimizer.pin_cpu_grads",),
    "pin_cpu_params": ("optimizer.pin_cpu_params",),
    "main_grads_dtype": ("optimizer.main_grads_dtype",),
    "main_params_dtype": ("optimizer.main_params_dtype",),
    "exp_avg_dtype": ("optimizer.exp_avg_dtype",),
    "exp_avg_sq_dtype": ("optimizer.exp_avg_sq_dtype",),
    "store_param_remainders": ("optimizer.store_param_remainders",),
    # DDP / FSDP
    "use_megatron_fsdp": ("ddp.use_megatron_fsdp", "dist.use_megatron_fsdp"),
    "data_parallel_sharding_strategy": ("ddp.data_parallel_sharding_strategy",),
    "outer_dp_sharding_strategy": ("ddp.outer_dp_sharding_strategy",),
    "num_distributed_optimizer_instances": ("ddp.num_distributed_optimizer_instances",),
    "grad_reduce_in_fp32": ("ddp.grad_reduce_in_fp32", "mixed_precision.grad_reduce_in_fp32"),
    "use_torch_fsdp2": ("dist.use_torch_fsdp2",),
    # precision
    "fp8_param_gather": ("mixed_precision.fp8_param_gather",),
    "fp8_dot_product_attention": ("mixed_precision.fp8_dot_product_attention",),
    "first_last_layers_bf16": ("mixed_precision.first_last_layers_bf16",),
    "num_layers_at_start_in_bf16": ("mixed_precision.num_layers_at_start_in_bf16",),
    "num_layers_at_end_in_bf16": ("mixed_precision.num_layers_at_end_in_bf16",),
    "check_for_nan_in_loss": ("rerun_state_machine.check_for_nan_in_loss",),
    # mcore GPTDatasetConfig.create_attention_mask (Bridge perf_recipes/gpt_oss/common.py sets it)
    "create_attention_mask_in_dataloader": ("dataset.create_attention_mask",),
}

#: training key → Bridge paths
TRAINING_PATHS: dict[str, tuple[str, ...]] = {
    "seq_length": ("model.seq_length", "dataset.seq_length"),
    "micro_batch_size": ("train.micro_batch_size",),
    "global_batch_size": ("train.global_batch_size",),
}
#: the first Megatron Bridge release whose pretraining ``GPTDatasetConfig`` has ``seq_length`` as its field:
#: ``finalize()`` copies it over megatron-core's ``sequence_length`` and ``ConfigContainer.validate`` asserts
#: ``model.seq_length == dataset.seq_length`` (``training/config.py`` at v0.6.0), so an override of
#: ``dataset.sequence_length`` is overwritten; up to v0.5.1 ``seq_length`` is a property over
#: ``sequence_length``, which is the field an override sets
DATASET_SEQ_LENGTH_FIELD_BRIDGE = Version("0.6.0")


def dataset_seq_path(task: str, bridge: Version, vlm: bool = False) -> str:
    """The Bridge path of the dataset's sequence length: fine-tuning's ``FinetuningDatasetConfig.seq_length``
    (Megatron Bridge ``data/builders``) and a VLM's dataset providers' ``seq_length`` (their only length field,
    e.g. v0.5.1 ``data/vlm_datasets/mock_provider.py``); a language model's pretraining
    ``GPTDatasetConfig.seq_length`` from :data:`DATASET_SEQ_LENGTH_FIELD_BRIDGE`, ``sequence_length`` before it."""
    if task == "finetune" or vlm or bridge >= DATASET_SEQ_LENGTH_FIELD_BRIDGE:
        return "dataset.seq_length"
    return "dataset.sequence_length"


def training_paths(task: str, bridge: Version, vlm: bool = False) -> dict[str, tuple[str, ...]]:
    """:data:`TRAINING_PATHS` with the dataset's sequence-length field of ``task`` at Megatron Bridge
    ``bridge`` for a VLM or not (:func:`dataset_seq_path`)."""
    path = dataset_seq_path(task, bridge, vlm)
    seq = tuple(path if p.startswith("dataset.") else p for p in TRAINING_PATHS["seq_length"])
    return {**TRAINING_PATHS, "seq_length": seq}


#: moeplan precision → the ``MixedPrecisionConfig`` fields of Bridge's matching recipe
#: (``training/mixed_precision.py``: bf16_mixed, bf16_with_fp8_current_scaling_mixed,
#: bf16_with_fp8_delayed_scaling_mixed, bf16_with_fp8_subchannel_scaling_mixed, bf16_with_mxfp8_mixed,
#: bf16_with_nvfp4_mixed)
PRECISION_FIELDS: dict[str, dict] = {
    "bf16": {"bf16": True},
    "fp8-tensorwise": {"bf16": True, "fp8": "hybrid", "fp8_recipe": "tensorwise"},
    "fp8-delayed": {"bf16": True, "fp8": "hybrid", "fp8_recipe": "delayed"},
    "fp8-blockwise": {"bf16": True, "fp8": "e4m3", "fp8_recipe": "blockwise"},
    "mxfp8": {"bf16": True, "fp8": "e4m3", "fp8_recipe": "mxfp8"},
    "nvfp4": {"bf16": True, "fp4": "e2m1", "fp4_recipe": "nvfp4"},
}

#: moeplan precision → Bridge mixed-precision recipe name (``training/mixed_precision.py``)
MIXED_PRECISION = {
    "bf16": "bf16_mixed",
    "fp8-tensorwise": "bf16_with_fp8_current_scaling_mixed",
    "fp8-delayed": "bf16_with_fp8_delayed_scaling_mixed",
    "fp8-blockwise": "bf16_with_fp8_subchannel_scaling_mixed",
    "mxfp8": "bf16_with_mxfp8_mixed",
    "nvfp4": "bf16_with_nvfp4_mixed",
}

#: Megatron-LM flags whose spelling is not ``--`` + key with ``_`` → ``-``
MLM_FLAG_EXCEPTIONS: dict[str, str] = {
    "virtual_pipeline_model_parallel_size": "--num-virtual-stages-per-pipeline-rank",
    # arguments.py dests decoder_{first,last}_pipeline_num_layers (every release 0.14–0.19)
    "num_layers_in_first_pipeline_stage": "--decoder-first-pipeline-num-layers",
    "num_layers_in_last_pipeline_stage": "--decoder-last-pipeline-num-layers",
    "microbatch_group_size_per_vp_stage": "--microbatch-group-size-per-virtual-pipeline-stage",
    "moe_token_dispatcher_type": "--moe-token-dispatcher-type",
    "use_te_rng_tracker": "--te-rng-tracker",
    "optimizer_cpu_offload": "--optimizer-cpu-offload",
    "check_for_nan_in_loss": "--no-check-for-nan-in-loss-and-grad",  # store_false; default True
    "create_attention_mask_in_dataloader": "--no-create-attention-mask-in-dataloader",  # store_false
    "use_precision_aware_optimizer": "--use-precision-aware-optimizer",
    "grad_reduce_in_fp32": "--accumulate-allreduce-grads-in-fp32",
    # store_false flags (megatron/training/arguments.py): written only to turn the default off;
    # apply_rope_fusion: Megatron-LM fuses RoPE unless told not to
    "apply_rope_fusion": "--no-rope-fusion",
    "pin_cpu_grads": "--no-pin-cpu-grads",
    "pin_cpu_params": "--no-pin-cpu-params",
}
#: keys whose Megatron-LM flag is a store_false switch: written when the value is false
MLM_NEGATED = frozenset(
    {
        "check_for_nan_in_loss",
        "apply_rope_fusion",
        "pin_cpu_grads",
        "pin_cpu_params",
        "create_attention_mask_in_dataloader",
    }
)

#: fields of Megatron Bridge's model providers (Qwen3-VL / Qwen3.5-VL, Bridge PR 2334), not of
#: megatron-core's TransformerConfig: no Megatron-LM flag either
BRIDGE_PROVIDER_FIELDS = frozenset({"vision_cuda_graph_impl", "vision_cuda_graph_scope"})
#: keys with no Megatron-LM flag (Bridge-only or config-file-only); the export notes them.
#: ``moe_paged_stash`` has one: Megatron-LM generates ``--moe-paged-stash`` from the TransformerConfig
#: field (``ArgumentGroupFactory(TransformerConfig)``, megatron/training/arguments.py; field and flag
#: since f007db77, core_v0.18.0) and the Megatron-LM MoE recipes set it
#: ``store_param_remainders``, ``fp8_dot_product_attention``, ``cpu_offloading``: in no arguments.py
#: of 0.14–0.19 nor dev (Megatron-LM leaves them out of its generated flags; inputs/data/megatron_keys.json)
MLM_UNSUPPORTED = frozenset(
    {*BRIDGE_PROVIDER_FIELDS, "store_param_remainders", "fp8_dot_product_attention", "cpu_offloading"}
)  # --cuda-graph-modules exists from 0.18 (CUDA Graphs guide)

#: optimizer dtype fields: Bridge reads torch dtype names (``getattr(torch, name)``)
TORCH_DTYPE = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16", "fp8": "float8_e4m3fn"}
DTYPE_KEYS = frozenset({"main_grads_dtype", "main_params_dtype", "exp_avg_dtype", "exp_avg_sq_dtype"})


def mlm_flag(key: str) -> str:
    """The Megatron-LM argparse flag of a layout key."""
    return MLM_FLAG_EXCEPTIONS.get(key, "--" + key.replace("_", "-"))


def bridge_key_for_version(key: str, mcore_version: Version) -> str:
    """Version-aware spelling: megatron-core ≥ 0.18 reads ``cuda_graph_modules`` (``cuda_graph_scope``
    is its deprecated alias); earlier versions only know ``cuda_graph_scope`` (§3.13)."""
    if key == "cuda_graph_scope" and mcore_version >= CUDA_GRAPH_MODULES_MCORE:
        return "cuda_graph_modules"
    if key == "cuda_graph_modules" and mcore_version < CUDA_GRAPH_MODULES_MCORE:
        return "cuda_graph_scope"
    return key
