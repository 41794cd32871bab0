#!/bin/bash
# moeplan: {"model":"deepseek-ai/DeepSeek-V3","system":{"gpu":"gb300","num_gpus":256},"framework":"megatron-bridge","precision":"mxfp8","stated":["context_parallel_size","expert_model_parallel_size","moe_flex_dispatcher_backend","moe_token_dispatcher_type","pipeline_model_parallel_layout","pipeline_model_parallel_size","recompute_granularity","recompute_modules","tensor_model_parallel_size","virtual_pipeline_model_parallel_size"]}
# recipe fills: recipe deepseek_v3/256gpu_gb300_fp8mx (Table A @067f987)
# NaN check off: the full-iteration CUDA graph needs check_for_nan_in_loss=false (rule graphs.full_iteration_nan_check), so a diverging loss is not caught; without the graph the check stays on
#SBATCH --nodes=64
#SBATCH --ntasks-per-node=4
#SBATCH --gpus-per-node=4
#SBATCH --exclusive
#SBATCH --job-name=moeplan
set -euo pipefail
CONTAINER="${CONTAINER:?set CONTAINER to a NeMo / Megatron Bridge image}"
MOUNTS="${MOUNTS:-}"
RECIPE="${RECIPE:?set RECIPE to a megatron.bridge.recipes config function for this model (run_recipe.py --recipe)}"
export CUDA_DEVICE_MAX_CONNECTIONS=32
export NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN=32
export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
OVERRIDES=(
  mixed_precision.bf16=true
  mixed_precision.fp8=e4m3
  mixed_precision.fp8_recipe=mxfp8
  mixed_precision.grad_reduce_in_fp32=false
  mixed_precision.fp8_param_gather=true
  mixed_precision.fp8_dot_product_attention=true
  model.tensor_model_parallel_size=1
  model.pipeline_model_parallel_size=2
  model.virtual_pipeline_model_parallel_size=8
  model.context_parallel_size=1
  model.expert_model_parallel_size=32
  model.expert_tensor_parallel_size=1
  model.sequence_parallel=false
  'model.pipeline_model_parallel_layout='"'"'Et*4|(t*4|)*14tmL'"'"''
  model.recompute_granularity=selective
  'model.recompute_modules=[]'
  model.moe_token_dispatcher_type=flex
  model.moe_flex_dispatcher_backend=hybridep
  model.moe_grouped_gemm=true
  model.moe_expert_rank_capacity_factor=1.5
  model.moe_router_force_load_balancing=false
  model.moe_paged_stash=true
  model.use_transformer_engine_op_fuser=true
  model.mtp_num_layers=1
  model.cuda_graph_impl=full_iteration
  'model.cuda_graph_modules=[]'
  model.use_te_rng_tracker=true
  model.cross_entropy_loss_fusion=true
  model.seq_length=4096
  comm_overlap.overlap_moe_expert_parallel_comm=true
  comm_overlap.delay_wgrad_compute=true
  dataset.create_attention_mask=true
  dataset.seq_length=4096
  rng.te_rng_tracker=true
  rerun_state_machine.check_for_nan_in_loss=false
  optimizer.use_distributed_optimizer=true
  optimizer.use_precision_aware_optimizer=true
  optimizer.main_grads_dtype=bfloat16
  optimizer.exp_avg_dtype=bfloat16
  optimizer.exp_avg_sq_dtype=bfloat16
  optimizer.overlap_param_gather=true
  ddp.use_distributed_optimizer=true
  ddp.grad_reduce_in_fp32=false
  ddp.overlap_grad_reduce=true
  ddp.overlap_param_gather=true
  train.micro_batch_size=1
  train.global_batch_size=4096
)
srun --container-image="$CONTAINER" --container-mounts="$MOUNTS" \
  python scripts/training/run_recipe.py --recipe "$RECIPE" "${OVERRIDES[@]}"
