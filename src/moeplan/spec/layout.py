"""Layout specification: every Megatron-Core / Megatron Bridge knob the rules read, under its
Megatron spelling (``tensor_model_parallel_size``, ``expert_tensor_parallel_size``,
``recompute_modules``, ``moe_flex_dispatcher_backend``, ``cuda_graph_scope``, ``optimizer_cpu_offload``...).

A key the user did not state keeps its default *and* is absent from ``model_fields_set`` (a key
given as ``null`` is one not stated: :func:`moeplan.spec.loading.without_nulls`); the
scenario resolver fills framework defaults for such keys and records each fill
(``megatron_facts.md`` §3: defaults per mcore ``TransformerConfig``/``OptimizerConfig``/
``DistributedDataParallelConfig`` and Bridge's ``finalize``).
DP and EDP are derived (``DP = W/(TP·PP·CP)``, ``EDP = W/(ETP·EP·PP)``), never typed in.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveInt

#: Parallel dimension names, defined once.
PARALLEL_DIMS = {
    "TP": "tensor_model_parallel_size",
    "PP": "pipeline_model_parallel_size",
    "VPP": "virtual_pipeline_model_parallel_size",
    "CP": "context_parallel_size",
    "EP": "expert_model_parallel_size",
    "ETP": "expert_tensor_parallel_size",
}

CP_COMM_TYPES = ("p2p", "all_gather", "a2a", "a2a+p2p")


class LayoutSpec(BaseModel):
    """A training layout with Megatron key names. See module docstring for defaults."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, allow_inf_nan=False)

    # parallel sizes
    tensor_model_parallel_size: int = Field(default=1, ge=1)
    pipeline_model_parallel_size: int = Field(default=1, ge=1)
    virtual_pipeline_model_parallel_size: int | None = Field(default=None, ge=1)
    context_parallel_size: int = Field(default=1, ge=1)
    expert_model_parallel_size: int = Field(default=1, ge=1)
    expert_tensor_parallel_size: int | None = Field(default=None, ge=1)
    sequence_parallel: bool | None = None
    # pipeline split
    pipeline_model_parallel_layout: str | list[list[str]] | None = None
    num_layers_in_first_pipeline_stage: int | None = None
    num_layers_in_last_pipeline_stage: int | None = None
    account_for_embedding_in_pipeline_split: bool = False
    account_for_loss_in_pipeline_split: bool = False
    microbatch_group_size_per_vp_stage: int | None = Field(default=None, ge=1)
    # context parallel
    cp_comm_type: str | list[str] | None = None
    hierarchical_context_parallel_sizes: list[PositiveInt] | None = None
    hybrid_context_parallel: bool = False
    # THD rows over CP ranks (TransformerConfig field on megatron-core's dev branch only, @d48bd6b)
    cp_partition_mode: Literal["zigzag", "contiguous"] | None = None
    # recompute
    recompute_granularity: Literal["full", "selective"] | None = None
    recompute_method: Literal["uniform", "block"] | None = None
    recompute_num_layers: int | None = Field(default=None, ge=0)
    recompute_modules: list[str] | None = None
    distribute_saved_activations: bool = False
    # MoE
    moe_token_dispatcher_type: Literal["allgather", "alltoall", "flex"] | None = None
    moe_flex_dispatcher_backend: Literal["deepep", "hybridep", "ncclep"] | None = None
    moe_enable_deepep: bool = False
    overlap_moe_expert_parallel_comm: bool = False
    delay_wgrad_compute: bool = False
    moe_shared_expert_overlap: bool = False
    moe_grouped_gemm: bool | None = None
    moe_permute_fusion: bool = False
    moe_expert_capacity_factor: float | None = None
    moe_pad_expert_input_to_capacity: bool = False
    moe_expert_rank_capacity_factor: float | None = Field(default=None, gt=0)
    moe_router_load_balancing_type: str | None = None
    moe_router_force_load_balancing: bool = False
    moe_router_padding_for_fp8: bool = False
    moe_paged_stash: bool = False
    # DeepEP SM count (deprecated alias of moe_flex_dispatcher_num_sms from megatron-core 0.19; DeepEP's
    # Buffer.set_num_sms asserts an even count)
    moe_deepep_num_sms: int | None = Field(default=None, ge=1, le=1024)
    # router z-loss coefficient (TransformerConfig.moe_z_loss_coeff; None = off)
    moe_z_loss_coeff: float | None = Field(default=None, ge=0.0)
    use_transformer_engine_op_fuser: bool = False
    mtp_num_layers: int | None = Field(default=None, ge=0)
    # CUDA graphs
    cuda_graph_impl: Literal["none", "local", "transformer_engine", "full_iteration"] | None = None
    cuda_graph_scope: list[str] | str | None = None
    cuda_graph_modules: list[str] | None = None
    cuda_graph_warmup_steps: int | None = Field(default=None, ge=0)
    # the vision encoder's own TE graphs (Megatron Bridge Qwen3-VL / Qwen3.5-VL providers, PR 2334): the
    # vision TransformerConfig takes these, never cuda_graph_impl / cuda_graph_scope
    vision_cuda_graph_impl: Literal["none", "transformer_engine"] | None = None
    vision_cuda_graph_scope: list[Literal["attn", "mlp"]] | None = None
    create_attention_mask_in_dataloader: bool | None = None
    use_te_rng_tracker: bool | None = None
    check_for_nan_in_loss: bool | None = None
    # optimizer / DDP / FSDP
    use_distributed_optimizer: bool | None = None
    use_precision_aware_optimizer: bool | None = None
    grad_reduce_in_fp32: bool | None = None
    main_grads_dtype: Literal["fp32", "bf16"] | None = None
    main_params_dtype: Literal["fp32", "fp16"] | None = None
    exp_avg_dtype: Literal["fp32", "bf16", "fp16", "fp8"] | None = None
    exp_avg_sq_dtype: Literal["fp32", "bf16", "fp16", "fp8"] | None = None
    store_param_remainders: bool | None = None
    optimizer_cpu_offload: bool = False
    optimizer_offload_fraction: float | None = Field(default=None, ge=0.0, le=1.0)
    pin_cpu_grads: bool | None = None
    pin_cpu_params: bool | None = None
    overlap_grad_reduce: bool | None = None
    overlap_param_gather: bool | None = None
    num_distributed_optimizer_instances: int = Field(default=1, ge=1)
    overlap_param_gather_with_optimizer_step: bool | None = None
    use_megatron_fsdp: bool = False
    outer_dp_sharding_strategy: Literal["no_shard", "optim"] | None = None
    data_parallel_sharding_strategy: Literal["no_shard", "optim", "optim_grads", "optim_grads_params"] | None = None
    use_torch_fsdp2: bool = False
    # precision details
    fp8_param_gather: bool = False
    fp8_dot_product_attention: bool = False
    first_last_layers_bf16: bool = False
    num_layers_at_start_in_bf16: int | None = Field(default=None, ge=0)
    num_layers_at_end_in_bf16: int | None = Field(default=None, ge=0)
    # activation offload
    cpu_offloading: bool = False
    cpu_offloading_num_layers: int | None = Field(default=None, ge=0)
    fine_grained_activation_offloading: bool = False
    offload_modules: list[str] | None = None
    # comm overlap and loss
    tp_comm_overlap: bool = False
    calculate_per_token_loss: bool | None = None
    cross_entropy_loss_fusion: bool | None = None
    cross_entropy_fusion_impl: Literal["native", "te"] | None = None
    apply_rope_fusion: bool | None = None
    attention_backend: Literal["auto", "flash", "fused", "unfused", "local"] | None = None
    attention_dropout: float | None = Field(default=None, ge=0.0, le=1.0)
    hidden_dropout: float | None = Field(default=None, ge=0.0, le=1.0)

    def stated(self, key: str) -> bool:
        """True when the user gave ``key`` explicitly (even as null)."""
        return key in self.model_fields_set
