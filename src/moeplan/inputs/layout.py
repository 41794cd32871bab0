"""Layout specification: every Megatron-Core / Megatron Bridge knob the rules read, under its
Megatron spelling (``tensor_model_parallel_size``, ``expert_tensor_parallel_size``,
``recompute_modules``, ``moe_flex_dispatcher_backend``, ``cuda_graph_scope``, ``optimizer_cpu_offload``...).

A key the user did not state keeps its default *and* is absent from ``model_fields_set`` (a key
given as ``null`` is one not stated: :func:`moeplan.inputs.loading.without_nulls`); the
scenario resolver fills framework defaults for such keys and records each fill
(``megatron_facts.md`` §3, vendored in ``tests/data/reference``: defaults per mcore ``TransformerConfig``/``OptimizerConfig``/
``DistributedDataParallelConfig`` and Bridge's ``finalize``).
DP and EDP are derived (``DP = W/(TP·PP·CP)``, ``EDP = W/(ETP·EP·PP)``), never typed in.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, model_validator

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
    tensor_model_parallel_size: int = Field(
        default=1,
        ge=1,
        description="Tensor-parallel size TP (GPUs): splits each layer's weight matrices and their GEMMs across ranks. Source: `ModelParallelConfig.tensor_model_parallel_size`; unset: 1, Megatron's default.",
    )
    pipeline_model_parallel_size: int = Field(
        default=1,
        ge=1,
        description="Pipeline-parallel size PP (stages): splits the decoder layers into consecutive stages, one per rank. Source: `ModelParallelConfig.pipeline_model_parallel_size`; unset: 1, Megatron's default.",
    )
    virtual_pipeline_model_parallel_size: int | None = Field(
        default=None,
        ge=1,
        description="Virtual pipeline stages per pipeline rank VPP (count): the interleaved 1F1B schedule, which shrinks the pipeline bubble for more point-to-point traffic. Source: `ModelParallelConfig.virtual_pipeline_model_parallel_size`; unset or 1: no interleaving.",
    )
    context_parallel_size: int = Field(
        default=1,
        ge=1,
        description="Context-parallel size CP (GPUs): splits each sequence's tokens across ranks, attention exchanging keys and values as `cp_comm_type` says. Source: `ModelParallelConfig.context_parallel_size`; unset: 1, Megatron's default.",
    )
    expert_model_parallel_size: int = Field(
        default=1,
        ge=1,
        description="Expert-parallel size EP (GPUs): distributes the routed experts of every MoE layer across ranks, the token dispatcher moving tokens to them. Source: `ModelParallelConfig.expert_model_parallel_size`; unset: 1, Megatron's default.",
    )
    expert_tensor_parallel_size: int | None = Field(
        default=None,
        ge=1,
        description="Tensor-parallel size of the expert layers ETP (GPUs). Source: `ModelParallelConfig.expert_tensor_parallel_size`; unset: TP under `framework: megatron-core` (megatron-core sets None to TP), 1 under Megatron Bridge when EP > 1 (`finalize`), else TP; listed under defaults used.",
    )
    sequence_parallel: bool | None = Field(
        default=None,
        description="Sequence parallelism: with TP > 1, norms, dropout and the residual stream are split along the sequence over the TP group (all-gather / reduce-scatter in place of all-reduce). Source: `ModelParallelConfig.sequence_parallel`; unset: on when TP > 1 (as Bridge recipes set it; MoE with TP > 1 requires it), off otherwise.",
    )
    # pipeline split
    pipeline_model_parallel_layout: str | list[list[str]] | None = Field(
        default=None,
        description="Explicit placement of layers on pipeline (and virtual) stages: a string such as `Et*3|(tt|)*29,m|L` (E embedding, t decoder layer, m MTP layer, L loss, `|` between stages) or a list of lists of layer names. Source: `TransformerConfig.pipeline_model_parallel_layout`; unset: the layers are split evenly, or by the first / last stage counts.",
    )
    num_layers_in_first_pipeline_stage: int | None = Field(
        default=None,
        description="Decoder layers on the first pipeline stage (count); the other stages split the rest evenly. Source: `TransformerConfig.num_layers_in_first_pipeline_stage` (Megatron-LM `--decoder-first-pipeline-num-layers`); unset: an even split.",
    )
    num_layers_in_last_pipeline_stage: int | None = Field(
        default=None,
        description="Decoder layers on the last pipeline stage (count); the other stages split the rest evenly. Source: `TransformerConfig.num_layers_in_last_pipeline_stage` (Megatron-LM `--decoder-last-pipeline-num-layers`); unset: an even split.",
    )
    account_for_embedding_in_pipeline_split: bool = Field(
        default=False,
        description="Counts the input embedding as one layer when the layers are divided over pipeline stages, so the first stage holds one decoder layer fewer. Source: `TransformerConfig.account_for_embedding_in_pipeline_split`; unset: false, Megatron's default.",
    )
    account_for_loss_in_pipeline_split: bool = Field(
        default=False,
        description="Counts the output layer and loss as one layer when the layers are divided over pipeline stages, so the last stage holds one decoder layer fewer. Source: `TransformerConfig.account_for_loss_in_pipeline_split`; unset: false, Megatron's default.",
    )
    microbatch_group_size_per_vp_stage: int | None = Field(
        default=None,
        ge=1,
        description="Microbatches run back to back on one virtual stage before the interleaved schedule moves to the next (count). Source: `ModelParallelConfig.microbatch_group_size_per_vp_stage` (Megatron-LM `--microbatch-group-size-per-virtual-pipeline-stage`); unset: PP, Megatron's default (a depth-first schedule).",
    )
    # context parallel
    cp_comm_type: str | list[str] | None = Field(
        default=None,
        description="How context-parallel attention exchanges keys and values: `p2p` (a ring, overlapped with attention), `all_gather`, `a2a` (Ulysses-style head scatter) or `a2a+p2p` (hierarchical); one string for every layer or a list with one per layer. Source: `TransformerConfig.cp_comm_type` (Megatron-LM `--cp-comm-type`, default `p2p`); unset: `p2p`.",
    )
    hierarchical_context_parallel_sizes: list[PositiveInt] | None = Field(
        default=None,
        description="Group sizes of the levels of hierarchical context parallelism (GPUs per level, their product CP), e.g. `[a2a size, p2p size]` with `cp_comm_type: a2a+p2p`. Source: `ModelParallelConfig.hierarchical_context_parallel_sizes`; unset: none.",
    )
    hybrid_context_parallel: bool = Field(
        default=False,
        description="Balances the work of context-parallel ranks over packed samples of varying length. Source: `ModelParallelConfig.hybrid_context_parallel`; unset: false, Megatron's default.",
    )
    # THD rows over CP ranks (TransformerConfig field on megatron-core's dev branch only, @d48bd6b)
    cp_partition_mode: Literal["zigzag", "contiguous"] | None = Field(
        default=None,
        description="How packed (THD) rows are split over CP ranks: `zigzag` or `contiguous` (the latter needs THD packing and Gated DeltaNet attention). Source: `TransformerConfig.cp_partition_mode` of megatron-core's dev branch only (@d48bd6b; no release up to 0.20 has it, so a stated value is warned about); unset: not passed.",
    )
    # recompute
    recompute_granularity: Literal["full", "selective"] | None = Field(
        default=None,
        description="Activation recomputation: `selective` re-runs the submodules in `recompute_modules` in backward, `full` the whole layer (per `recompute_method` and `recompute_num_layers`). Source: `TransformerConfig.recompute_granularity`; unset: no recomputation.",
    )
    recompute_method: Literal["uniform", "block"] | None = Field(
        default=None,
        description="Which layers full recomputation covers: `uniform` (every layer, in units of `recompute_num_layers`) or `block` (the first `recompute_num_layers` layers of each pipeline stage); only with `recompute_granularity: full`. Source: `TransformerConfig.recompute_method`; unset: none.",
    )
    recompute_num_layers: int | None = Field(
        default=None,
        ge=0,
        description="Layers per recompute unit under `uniform`, or recomputed layers per pipeline stage under `block` (count); only with full recomputation. Source: `TransformerConfig.recompute_num_layers`; unset: none.",
    )
    recompute_modules: list[str] | None = Field(
        default=None,
        description="Submodules that selective recomputation re-runs in backward (`core_attn`, `moe_act`, `layernorm`, `mla_up_proj`, `mlp`, `moe`, `shared_experts`, ...). Source: `TransformerConfig.recompute_modules`; unset: `[core_attn]`, Megatron's default.",
    )
    distribute_saved_activations: bool = Field(
        default=False,
        description="Splits the saved input of each fully recomputed layer over the tensor-parallel group (not with sequence parallelism). Source: `TransformerConfig.distribute_saved_activations`; unset: false, Megatron's default.",
    )
    # MoE
    moe_token_dispatcher_type: Literal["allgather", "alltoall", "flex"] | None = Field(
        default=None,
        description="How routed tokens reach their experts: `allgather`, `alltoall` or `flex` (DeepEP, HybridEP or NCCL EP kernels, per `moe_flex_dispatcher_backend`). Source: `TransformerConfig.moe_token_dispatcher_type`; unset on an MoE model: `alltoall` under Megatron Bridge (its HF providers), `allgather` under megatron-core (its default).",
    )
    moe_flex_dispatcher_backend: Literal["deepep", "hybridep", "ncclep"] | None = Field(
        default=None,
        description="Kernel library of the `flex` dispatcher: `deepep` (DeepEP), `hybridep` (HybridEP, the one for multi-node NVLink) or `ncclep` (NCCL EP through Transformer Engine). Source: `TransformerConfig.moe_flex_dispatcher_backend`; unset with `flex`: `deepep`, megatron-core's default.",
    )
    moe_enable_deepep: bool = Field(
        default=False,
        description="Deprecated spelling of the flex dispatcher with the DeepEP backend, read as such. Source: `TransformerConfig.moe_enable_deepep`; unset: false, Megatron's default.",
    )
    overlap_moe_expert_parallel_comm: bool = Field(
        default=False,
        description="Overlaps the expert-parallel all-to-all of one microbatch with the computation of another (needs EP > 1, and interleaving when PP > 1). Source: `ModelParallelConfig.overlap_moe_expert_parallel_comm`; unset: false, Megatron's default.",
    )
    delay_wgrad_compute: bool = Field(
        default=False,
        description="Defers the weight-gradient GEMMs of backward so that they overlap the expert-parallel communication (used with `overlap_moe_expert_parallel_comm`). Source: `ModelParallelConfig.delay_wgrad_compute`; unset: false, Megatron's default.",
    )
    moe_shared_expert_overlap: bool = Field(
        default=False,
        description="Runs the shared experts concurrently with the dispatcher's communication instead of before the router; only with shared experts. Source: `TransformerConfig.moe_shared_expert_overlap`; unset: false, Megatron's default.",
    )
    moe_grouped_gemm: bool | None = Field(
        default=None,
        description="Computes a rank's local experts in grouped GEMMs (Transformer Engine) instead of one GEMM per expert. Source: `TransformerConfig.moe_grouped_gemm`; unset on an MoE model: true under Megatron Bridge (its MoE providers), false under megatron-core.",
    )
    moe_permute_fusion: bool = Field(
        default=False,
        description="Fuses the token permutation and unpermutation around the dispatcher into fused kernels. Source: `TransformerConfig.moe_permute_fusion`; unset: false, Megatron's default.",
    )
    moe_router_fusion: bool = Field(
        default=False,
        description="Runs the router's score function, top-k and normalisation as Transformer Engine's fused kernel (`fused_topk_with_score_function`, TE ≥ 2.7 per its docstring) instead of megatron-core's chain of PyTorch ops: the step time counts the launches it removes from each MoE layer. Source: `TransformerConfig.moe_router_fusion`; unset: false, Megatron's default.",
    )
    moe_expert_capacity_factor: float | None = Field(
        default=None,
        description="Token capacity of each expert as a multiple of the mean tokens per expert (a factor); tokens beyond it are dropped. Source: `TransformerConfig.moe_expert_capacity_factor`; unset: dropless routing, costed with `assumptions.routing_imbalance_factor`.",
    )
    moe_pad_expert_input_to_capacity: bool = Field(
        default=False,
        description="Pads each expert's input to its full capacity (fixed shapes); needs `moe_expert_capacity_factor`. Source: `TransformerConfig.moe_pad_expert_input_to_capacity`; unset: false, Megatron's default.",
    )
    moe_expert_rank_capacity_factor: float | None = Field(
        default=None,
        gt=0,
        description="Token budget of each expert rank as a multiple of the mean tokens per rank (a factor > 0): HybridEP drops tokens beyond it, NCCL EP sizes a static receive buffer from it. Source: `TransformerConfig.moe_expert_rank_capacity_factor` (megatron-core ≥ 0.18); unset: no budget.",
    )
    moe_router_load_balancing_type: str | None = Field(
        default=None,
        description="Router load-balancing strategy (`aux_loss`, `seq_aux_loss`, `global_aux_loss`, `sinkhorn`, `none`, ...); a capacity factor works only with the aux-loss kinds and `none`. Source: `TransformerConfig.moe_router_load_balancing_type` (megatron-core default `aux_loss`); unset: not checked.",
    )
    moe_router_force_load_balancing: bool = Field(
        default=False,
        description="Routes with random logits so that every expert receives an equal share of tokens: a benchmark setting, never for training. Source: `TransformerConfig.moe_router_force_load_balancing`; unset: false (`recipe_defaults: mbridge-perf-benchmark` fills true).",
    )
    moe_router_padding_for_fp8: bool = Field(
        default=False,
        description="Pads each expert's routed token count to the FP8 GEMM alignment in the routing map (a compatibility alias of `moe_router_padding_for_quantization`). Source: `TransformerConfig.moe_router_padding_for_fp8`; unset: false, Megatron's default.",
    )
    moe_paged_stash: bool = Field(
        default=False,
        description="Keeps the routed-expert activations that backward needs in a paged stash. Source: `TransformerConfig.moe_paged_stash` (megatron-core ≥ 0.18); unset: false, Megatron's default.",
    )
    # DeepEP SM count (deprecated alias of moe_flex_dispatcher_num_sms from megatron-core 0.19; DeepEP's
    # Buffer.set_num_sms asserts an even count)
    moe_deepep_num_sms: int | None = Field(
        default=None,
        ge=1,
        le=1024,
        description="SMs the DeepEP kernels use (count, even: DeepEP's `Buffer.set_num_sms` asserts it); a deprecated alias of `moe_flex_dispatcher_num_sms` from megatron-core 0.19. Source: `TransformerConfig.moe_deepep_num_sms`; unset: not passed, so the backend uses its own default (megatron-core's historical DeepEP default: 20).",
    )
    # router z-loss coefficient (TransformerConfig.moe_z_loss_coeff; None = off)
    moe_z_loss_coeff: float | None = Field(
        default=None,
        ge=0.0,
        description="Coefficient of the router z-loss (a scale ≥ 0; megatron-core suggests starting at 1e-3). Source: `TransformerConfig.moe_z_loss_coeff`; unset: no z-loss.",
    )
    use_transformer_engine_op_fuser: bool = Field(
        default=False,
        description="Lets submodules use Transformer Engine's operation-fuser API for further fusions. Source: `TransformerConfig.use_transformer_engine_op_fuser` (megatron-core ≥ 0.18); unset: false, Megatron's default.",
    )
    mtp_num_layers: int | None = Field(
        default=None,
        ge=0,
        description="Multi-token-prediction layers after the decoder (count), each predicting one more future token. Source: `TransformerConfig.mtp_num_layers`; unset: the model config's MTP layers (0 builds none).",
    )
    # CUDA graphs
    cuda_graph_impl: Literal["none", "local", "transformer_engine", "full_iteration"] | None = Field(
        default=None,
        description="CUDA-graph capture: `none`, `local` (megatron-core per-layer graphs), `transformer_engine` (TE `make_graphed_callables` per layer) or `full_iteration` (the whole forward-backward). Source: `TransformerConfig.cuda_graph_impl`; unset: none, or `transformer_engine` when a graph scope is given (`full_iteration` when that scope is `full_iteration`).",
    )
    cuda_graph_scope: list[str] | str | None = Field(
        default=None,
        description="Parts of each layer the per-layer graphs capture (`attn`, `mlp`, `moe`, `moe_router`, `moe_preprocess`, `mamba`; `full_iteration` before the per-layer modules refactor). Source: `TransformerConfig.cuda_graph_scope` (renamed `cuda_graph_modules` in newer megatron-core); unset: the whole layer.",
    )
    cuda_graph_modules: list[str] | None = Field(
        default=None,
        description="The newer name of `cuda_graph_scope`; read in its place when both are given. Source: `TransformerConfig.cuda_graph_modules` (megatron-core ≥ 0.18); unset: `cuda_graph_scope`.",
    )
    cuda_graph_warmup_steps: int | None = Field(
        default=None,
        ge=0,
        description="Eager training steps run before CUDA graphs are captured (count). Source: `TransformerConfig.cuda_graph_warmup_steps`; unset: Megatron's default (3); not costed.",
    )
    # the vision encoder's own TE graphs (Megatron Bridge Qwen3-VL / Qwen3.5-VL providers, PR 2334): the
    # vision TransformerConfig takes these, never cuda_graph_impl / cuda_graph_scope
    vision_cuda_graph_impl: Literal["none", "transformer_engine"] | None = Field(
        default=None,
        description="CUDA graphs of a Qwen3-VL / Qwen3.5-VL vision encoder (`none` or `transformer_engine`), which its own TransformerConfig takes instead of `cuda_graph_impl`. Source: Megatron Bridge Qwen3-VL / Qwen3.5-VL provider field `vision_cuda_graph_impl` (no Megatron-LM flag); unset: none, Bridge's default.",
    )
    vision_cuda_graph_scope: list[Literal["attn", "mlp"]] | None = Field(
        default=None,
        description="Parts of each vision-encoder layer those graphs capture (a subset of `attn`, `mlp`). Source: Megatron Bridge Qwen3-VL / Qwen3.5-VL provider field `vision_cuda_graph_scope`; unset: Bridge's default (an empty list).",
    )
    create_attention_mask_in_dataloader: bool | None = Field(
        default=None,
        description="Whether the data loader builds the attention-mask tensor, which CUDA graphs then keep as a static input. Source: Megatron-LM `--no-create-attention-mask-in-dataloader` (megatron-core `GPTDatasetConfig.create_attention_mask`); unset: true, Megatron's default, recorded where graphs would keep masks.",
    )
    use_te_rng_tracker: bool | None = Field(
        default=None,
        description="Uses Transformer Engine's CUDA RNG state tracker instead of megatron-core's; CUDA graphs need it. Source: `ModelParallelConfig.use_te_rng_tracker` (Megatron-LM `--te-rng-tracker`); unset: on when CUDA graphs are on (Megatron-LM and Bridge enable it), off otherwise.",
    )
    check_for_nan_in_loss: bool | None = Field(
        default=None,
        description="Checks the loss for NaN (the rerun state machine); a full-iteration CUDA graph needs it off. Source: Megatron Bridge `RerunStateMachineConfig.check_for_nan_in_loss` (Megatron-LM `--no-check-for-nan-in-loss-and-grad`); unset: on, Megatron's default (the benchmark recipe fill turns it off, and the training fill with a full-iteration graph).",
    )
    # optimizer / DDP / FSDP
    use_distributed_optimizer: bool | None = Field(
        default=None,
        description="Shards the optimizer state and fp32 master weights over data-parallel ranks: gradients are reduce-scattered and parameters all-gathered. Source: `OptimizerConfig` / `DistributedDataParallelConfig.use_distributed_optimizer`; unset: true under Megatron Bridge (its recipes) or with Megatron-FSDP, false under megatron-core.",
    )
    use_precision_aware_optimizer: bool | None = Field(
        default=None,
        description="Lets the optimizer (TE FusedAdam) keep master weights, main gradients and Adam moments in the dtypes of `main_params_dtype`, `main_grads_dtype`, `exp_avg_dtype` and `exp_avg_sq_dtype`. Source: `OptimizerConfig.use_precision_aware_optimizer`; unset: false, the `OptimizerConfig` default.",
    )
    grad_reduce_in_fp32: bool | None = Field(
        default=None,
        description="Accumulates and reduces gradients in fp32 main-grad buffers (4 bytes per parameter; false: bf16, 2 bytes). Source: `DistributedDataParallelConfig.grad_reduce_in_fp32` (Megatron-LM `--accumulate-allreduce-grads-in-fp32`); unset: true, as Bridge's `bf16_mixed` and Megatron-LM's `--bf16` set it, shown as an assumption.",
    )
    main_grads_dtype: Literal["fp32", "bf16"] | None = Field(
        default=None,
        description="Dtype of the main gradients under the precision-aware optimizer (`fp32` or `bf16`: 4 or 2 bytes per parameter). Source: `OptimizerConfig.main_grads_dtype`; unset: fp32, the `OptimizerConfig` default.",
    )
    main_params_dtype: Literal["fp32", "fp16"] | None = Field(
        default=None,
        description="Dtype of the master weights under the precision-aware optimizer (`fp32` or `fp16`). Source: `OptimizerConfig.main_params_dtype`; unset: fp32, the `OptimizerConfig` default.",
    )
    exp_avg_dtype: Literal["fp32", "bf16", "fp16", "fp8"] | None = Field(
        default=None,
        description="Dtype of Adam's first moment under the precision-aware optimizer (`fp32`, `bf16`, `fp16` or `fp8`). Source: `OptimizerConfig.exp_avg_dtype`; unset: fp32, the `OptimizerConfig` default.",
    )
    exp_avg_sq_dtype: Literal["fp32", "bf16", "fp16", "fp8"] | None = Field(
        default=None,
        description="Dtype of Adam's second moment under the precision-aware optimizer (`fp32`, `bf16`, `fp16` or `fp8`). Source: `OptimizerConfig.exp_avg_sq_dtype`; unset: fp32, the `OptimizerConfig` default.",
    )
    store_param_remainders: bool | None = Field(
        default=None,
        description="With an fp32 master kept by TE's FusedAdam, stores only the 16 bits each master weight adds to its bf16 parameter (2 bytes per parameter instead of 4). Source: `OptimizerConfig.store_param_remainders`; unset: true, the `OptimizerConfig` default.",
    )
    optimizer_cpu_offload: bool = Field(
        default=False,
        description="Moves optimizer state and the optimizer step to the host (HybridDeviceOptimizer), the share set by `optimizer_offload_fraction`. Source: `OptimizerConfig.optimizer_cpu_offload`; unset: false, Megatron's default.",
    )
    optimizer_offload_fraction: float | None = Field(
        default=None,
        ge=0.0,
        le=1.0,
        description="Fraction (0–1) of the optimizer state moved to the host under `optimizer_cpu_offload`. Source: `OptimizerConfig.optimizer_offload_fraction` (default 0; Megatron-LM's `--optimizer-offload-fraction` defaults to 1); unset: 1.0 under `framework: megatron-core` (Megatron-LM's argument default), 0 under megatron-bridge (nothing offloaded; the check warns).",
    )
    pin_cpu_grads: bool | None = Field(
        default=None,
        description="Pins the host gradient copies of an offloaded optimizer (page-locked memory, rounded up by the pinned allocator). Source: `OptimizerConfig.pin_cpu_grads`; unset: true, Megatron's default.",
    )
    pin_cpu_params: bool | None = Field(
        default=None,
        description="Pins the host fp32 master copies of an offloaded optimizer. Source: `OptimizerConfig.pin_cpu_params`; unset: true, Megatron's default (counted as pinned for megatron-core newer than 0.20.0).",
    )
    overlap_grad_reduce: bool | None = Field(
        default=None,
        description="Overlaps the gradient all-reduce or reduce-scatter with backward, bucket by bucket. Source: `DistributedDataParallelConfig.overlap_grad_reduce`; unset without Megatron-FSDP: true under Megatron Bridge (its recipes), false under megatron-core.",
    )
    overlap_param_gather: bool | None = Field(
        default=None,
        description="Overlaps the distributed optimizer's parameter all-gather with the next forward. Source: `DistributedDataParallelConfig.overlap_param_gather`; unset with the distributed optimizer and without Megatron-FSDP: true under Megatron Bridge unless `overlap_grad_reduce` is false, false under megatron-core.",
    )
    num_distributed_optimizer_instances: int = Field(
        default=1,
        ge=1,
        description="Distributed-optimizer instances over the data-parallel domain (count): the state is sharded within DP / n ranks and replicated n times. Source: `DistributedDataParallelConfig.num_distributed_optimizer_instances`; unset: 1, sharded over the whole DP domain.",
    )
    overlap_param_gather_with_optimizer_step: bool | None = Field(
        default=None,
        description="Overlaps the all-gather of the first parameter bucket with the optimizer step. Source: `OptimizerConfig.overlap_param_gather_with_optimizer_step`; unset: false, Megatron's default; carried to exports, not costed.",
    )
    use_megatron_fsdp: bool = Field(
        default=False,
        description="Uses Megatron-FSDP instead of DDP, sharding as `data_parallel_sharding_strategy` says. Source: `DistributedDataParallelConfig.use_megatron_fsdp`; unset: false, Megatron's default.",
    )
    outer_dp_sharding_strategy: Literal["no_shard", "optim"] | None = Field(
        default=None,
        description="Sharding over the outer data-parallel group of hybrid-sharded (HSDP) Megatron-FSDP: `no_shard` or `optim`. Source: `DistributedDataParallelConfig.outer_dp_sharding_strategy`; unset: `no_shard`, Megatron's default.",
    )
    data_parallel_sharding_strategy: Literal["no_shard", "optim", "optim_grads", "optim_grads_params"] | None = Field(
        default=None,
        description="What Megatron-FSDP shards over data-parallel ranks: `no_shard`, `optim` (optimizer state), `optim_grads` (and gradients) or `optim_grads_params` (and parameters). Source: `DistributedDataParallelConfig.data_parallel_sharding_strategy`; unset with Megatron-FSDP: `optim_grads_params` (what Bridge's `--use_megatron_fsdp` sets), shown as an assumption.",
    )
    use_torch_fsdp2: bool = Field(
        default=False,
        description="Wraps the model in PyTorch FSDP2 instead of megatron-core DDP (Megatron-LM refuses it with PP, EP or the distributed optimizer). Source: Megatron-LM `--use-torch-fsdp2`, Megatron Bridge `DistributedInitConfig.use_torch_fsdp2`; unset: false.",
    )
    # precision details
    fp8_param_gather: bool = Field(
        default=False,
        description="Keeps the compute copy of the weights in FP8 and all-gathers parameters in FP8. Source: `DistributedDataParallelConfig.fp8_param_gather`; unset: false, Megatron's default (the perf-recipe fills set it for fp8-tensorwise and mxfp8).",
    )
    fp8_dot_product_attention: bool = Field(
        default=False,
        description="Runs attention's dot products (Transformer Engine `DotProductAttention`) in FP8. Source: `TransformerConfig.fp8_dot_product_attention`; unset: false, Megatron's default.",
    )
    first_last_layers_bf16: bool = Field(
        default=False,
        description="Keeps the first and last transformer layers in BF16 under an FP8 / FP4 recipe (counts in `num_layers_at_start_in_bf16` / `num_layers_at_end_in_bf16`). Source: `TransformerConfig.first_last_layers_bf16`; unset: false, Megatron's default.",
    )
    num_layers_at_start_in_bf16: int | None = Field(
        default=None,
        ge=0,
        description="Layers at the start of the model kept in BF16 with `first_last_layers_bf16` (count, at most L / PP). Source: `TransformerConfig.num_layers_at_start_in_bf16`; unset: 1, Megatron's default.",
    )
    num_layers_at_end_in_bf16: int | None = Field(
        default=None,
        ge=0,
        description="Layers at the end of the model kept in BF16 with `first_last_layers_bf16` (count, at most L / PP). Source: `TransformerConfig.num_layers_at_end_in_bf16`; unset: 1, Megatron's default.",
    )
    # activation offload
    cpu_offloading: bool = Field(
        default=False,
        description="Offloads the activations of `cpu_offloading_num_layers` transformer layers to host memory asynchronously (layer-level offloading). Source: `ModelParallelConfig.cpu_offloading`; unset: false, Megatron's default.",
    )
    cpu_offloading_num_layers: int | None = Field(
        default=None,
        ge=0,
        description="Transformer layers whose activations `cpu_offloading` moves to the host (count). Source: `ModelParallelConfig.cpu_offloading_num_layers`; unset: 0, Megatron's default.",
    )
    fine_grained_activation_offloading: bool = Field(
        default=False,
        description="Offloads the inputs of the submodules in `offload_modules` to the host (module-level, unlike the layer-level `cpu_offloading`). Source: `TransformerConfig.fine_grained_activation_offloading`; unset: false, Megatron's default.",
    )
    offload_modules: list[str] | None = Field(
        default=None,
        description="Submodules whose inputs fine-grained offloading moves to the host (`attn_norm`, `qkv_linear`, `core_attn`, `attn_proj`, `mlp_norm`, `expert_fc1`, `moe_act`, ...). Source: `TransformerConfig.offload_modules`; unset: none, Megatron's default (an empty list).",
    )
    # comm overlap and loss
    tp_comm_overlap: bool = Field(
        default=False,
        description="Overlaps the tensor-parallel all-gather / reduce-scatter with the GEMMs of the linear layers (Transformer Engine userbuffers). Source: `ModelParallelConfig.tp_comm_overlap` (Megatron Bridge `CommOverlapConfig.tp_comm_overlap`); unset: false, Megatron's default.",
    )
    calculate_per_token_loss: bool | None = Field(
        default=None,
        description="Normalises the cross-entropy loss by the non-padded tokens of the global batch instead of per microbatch; Bridge requires it for fine-tuning with CP > 1. Source: `TransformerConfig.calculate_per_token_loss`; unset: not checked (only an explicit false breaks that rule).",
    )
    cross_entropy_loss_fusion: bool | None = Field(
        default=None,
        description="Computes the output layer's cross entropy in a fused kernel (the one `cross_entropy_fusion_impl` names). Source: `ModelParallelConfig.cross_entropy_loss_fusion`; unset: true under Megatron Bridge, false under megatron-core, shown as an assumption.",
    )
    cross_entropy_fusion_impl: Literal["native", "te"] | None = Field(
        default=None,
        description="Implementation of the fused cross entropy: `native` (megatron-core) or `te` (Transformer Engine's parallel cross entropy). Source: `ModelParallelConfig.cross_entropy_fusion_impl`; unset: `native`, Megatron's default.",
    )
    apply_rope_fusion: bool | None = Field(
        default=None,
        description="Applies rotary position embeddings with the fused RoPE kernel (Megatron-LM `--no-rope-fusion` turns it off). Source: `TransformerConfig.apply_rope_fusion`; unset: not checked.",
    )
    attention_backend: Literal["auto", "flash", "fused", "unfused", "local"] | None = Field(
        default=None,
        description="Attention kernel: `auto` (Transformer Engine picks), `flash`, `fused` (cuDNN), `unfused` or `local` (megatron-core's PyTorch code). Source: `TransformerConfig.attention_backend`; unset: `auto`, Megatron's default (only `unfused` changes the memory estimate).",
    )
    attention_dropout: float | None = Field(
        default=None,
        ge=0.0,
        le=1.0,
        description="Dropout probability after the attention softmax (a fraction 0–1). Source: `TransformerConfig.attention_dropout` (megatron-core default 0.1); unset: 0, as the HF configs and Bridge providers set it, shown as an assumption.",
    )
    hidden_dropout: float | None = Field(
        default=None,
        ge=0.0,
        le=1.0,
        description="Dropout probability of the transformer hidden state (a fraction 0–1). Source: `TransformerConfig.hidden_dropout` (megatron-core default 0.1); unset: 0, as the HF configs and Bridge providers set it, shown as an assumption.",
    )

    @model_validator(mode="before")
    @classmethod
    def _null_is_unset(cls, data: Any) -> Any:
        """A key given as null is not stated, however the layout is built (a mapping, keyword
        arguments): it keeps its default and stays out of ``model_fields_set``, so the resolver fills
        it and the unset-key warnings name it, as a Megatron Bridge config dump writes "unset"
        (``expert_tensor_parallel_size: null``)."""
        if isinstance(data, dict) and None in data.values():
            return {k: v for k, v in data.items() if v is not None}
        return data

    def stated(self, key: str) -> bool:
        """True when the user gave ``key`` explicitly with a value (a null is not stated)."""
        return key in self.model_fields_set
