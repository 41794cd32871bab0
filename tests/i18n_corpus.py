"""A broad set of scenarios run through ``validate()``, so that the Chinese-translation test sees every
rule message and fix that the rules can produce: the goldens' scenarios, the examples, the bug-log
cases (tests/data/reference/cases), each known issue's example and near miss (pinned and unpinned),
the published runs, and layouts generated from several models by breaking one rule family at a time.
"""

from __future__ import annotations

import functools
import itertools
import pathlib

from moeplan import load_scenario, validate
from moeplan.catalog.known_issue_table import known_issues
from moeplan.errors import InputError
from moeplan.rules import Finding

ROOT = pathlib.Path(__file__).resolve().parents[1]

#: models × GPUs the generated layouts start from (MLA + MTP, GQA, sinks + sliding window, linear attention, VLM)
MODELS = (
    "deepseek-ai/DeepSeek-V3",
    "Qwen/Qwen3-30B-A3B",
    "Qwen/Qwen3-235B-A22B",
    "openai/gpt-oss-120b",
    "Qwen/Qwen3-Next-80B-A3B-Instruct",
    "Qwen/Qwen3-VL-235B-A22B-Instruct",
)
#: one layout change at a time, each meant to break (or warn about) one family of rules
VARIANTS: tuple[dict, ...] = (
    {},
    {"tensor_model_parallel_size": 3},
    {"tensor_model_parallel_size": 8, "sequence_parallel": False},
    {"tensor_model_parallel_size": 1, "sequence_parallel": True},
    {"pipeline_model_parallel_size": 7},
    {"pipeline_model_parallel_size": 4, "virtual_pipeline_model_parallel_size": 5},
    {"pipeline_model_parallel_size": 2, "decoder_first_pipeline_num_layers": 1, "decoder_last_pipeline_num_layers": 1},
    {"pipeline_model_parallel_size": 4, "pipeline_model_parallel_layout": "Et*3|t*3|t*3|tL"},
    {"context_parallel_size": 3},
    {"context_parallel_size": 4, "cp_comm_type": "a2a+p2p"},
    {"context_parallel_size": 4, "cp_comm_type": "a2a+p2p", "hierarchical_context_parallel_sizes": [2, 4]},
    {"context_parallel_size": 16, "cp_comm_type": "a2a+p2p", "hierarchical_context_parallel_sizes": [8, 2]},
    {
        "moe_token_dispatcher_type": "flex",
        "moe_flex_dispatcher_backend": "hybridep",
        "moe_expert_rank_capacity_factor": 1.5,
        "use_transformer_engine_op_fuser": True,
    },
    {"context_parallel_size": 16, "cp_comm_type": "a2a"},
    {"context_parallel_size": 8, "cp_comm_type": "all_gather"},
    {"expert_model_parallel_size": 7},
    {"expert_model_parallel_size": 64, "expert_tensor_parallel_size": 4},
    {"expert_model_parallel_size": 8, "moe_token_dispatcher_type": "flex", "moe_flex_dispatcher_backend": "deepep"},
    {"expert_model_parallel_size": 1, "moe_token_dispatcher_type": "flex", "moe_flex_dispatcher_backend": "hybridep"},
    {"expert_model_parallel_size": 8, "overlap_moe_expert_parallel_comm": True},
    {"expert_model_parallel_size": 8, "moe_shared_expert_overlap": True},
    {"recompute_granularity": "full", "recompute_method": "uniform", "recompute_num_layers": 5},
    {"recompute_granularity": "full"},
    {"recompute_granularity": "selective", "recompute_modules": ["up_proj", "moe_act", "mla_up_proj"]},
    {"recompute_granularity": "selective", "recompute_modules": ["moe"], "fine_grained_activation_offloading": True},
    {"cpu_offloading": True, "cpu_offloading_num_layers": 2},
    {"cuda_graph_impl": "transformer_engine", "cuda_graph_scope": ["moe"]},
    {"cuda_graph_impl": "transformer_engine", "cuda_graph_scope": ["moe_preprocess"]},
    {"cuda_graph_impl": "transformer_engine", "cuda_graph_scope": ["mlp"], "recompute_granularity": "full"},
    {"cuda_graph_impl": "local", "cuda_graph_scope": ["full_iteration"]},
    {"optimizer_cpu_offload": True, "use_distributed_optimizer": False},
    {"optimizer_cpu_offload": True, "use_precision_aware_optimizer": False},
    {"use_megatron_fsdp": True, "data_parallel_sharding_strategy": "optim_grads_params"},
    {"use_megatron_fsdp": True, "pipeline_model_parallel_size": 2},
)
#: rules the grid above does not reach: one scenario each (model Qwen3-30B-A3B on 16 H100 unless stated)
TARGETED: tuple[dict, ...] = (
    {"environment": {"CUDA_DEVICE_MAX_CONNECTIONS": "8"}, "layout": {"tensor_model_parallel_size": 2}},
    {
        "environment": {"CUDA_DEVICE_MAX_CONNECTIONS": "8"},
        "framework": "megatron-core",
        "layout": {"tensor_model_parallel_size": 2},
    },
    {"layout": {"use_megatron_fsdp": True, "use_torch_fsdp2": True}},
    # the precision-aware optimizer's master kept by megatron-core (Bridge's 'tensorwise' fp8_recipe),
    # with bf16 grads (copied at the step) and with fp32 grads
    {"layout": {"use_precision_aware_optimizer": True, "main_grads_dtype": "bf16", "grad_reduce_in_fp32": False}},
    {"layout": {"use_precision_aware_optimizer": True}},
    {"layout": {"use_torch_fsdp2": True, "pipeline_model_parallel_size": 2}},
    {"layout": {"data_parallel_sharding_strategy": "optim_grads_params"}},
    # Megatron-FSDP with EP: optimizer instances that do not divide EDP; HFSDP without full sharding
    {"layout": {"expert_model_parallel_size": 4, "num_distributed_optimizer_instances": 8}},
    {
        "layout": {
            "expert_model_parallel_size": 4,
            "use_megatron_fsdp": True,
            "data_parallel_sharding_strategy": "optim_grads",
            "num_distributed_optimizer_instances": 2,
            "outer_dp_sharding_strategy": "optim",
        }
    },
    {"environment": {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}, "layout": {"use_megatron_fsdp": True}},
    {
        "environment": {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"},
        "layout": {"cuda_graph_impl": "transformer_engine"},
    },
    {"layout": {"cuda_graph_impl": "full_iteration", "check_for_nan_in_loss": True}},
    {"layout": {"cuda_graph_impl": "full_iteration", "check_for_nan_in_loss": False}},
    {"layout": {"moe_pad_expert_input_to_capacity": True}},
    {"layout": {"moe_expert_capacity_factor": 1.0, "moe_router_load_balancing_type": "sinkhorn"}},
    {"layout": {"moe_token_dispatcher_type": "allgather"}, "training": {"variable_length": True}},
    {"layout": {"overlap_param_gather": True, "use_distributed_optimizer": False}},
    {"layout": {"overlap_param_gather": True, "overlap_grad_reduce": False}},
    {"layout": {"virtual_pipeline_model_parallel_size": 2}},
    {
        "layout": {"pipeline_model_parallel_size": 2, "virtual_pipeline_model_parallel_size": 2},
        "framework": "megatron-core",
    },
    {"versions": {"megatron_core": "0.99.0"}},
    # versions.container_unknown: a release the container table does not hold, and no release at all
    {"versions": {"container": "27.01"}, "recipe_defaults": "mbridge-perf"},
    {"versions": {"container": "nemo-latest"}},
    # a stated package version that differs from what the stated container ships
    {"versions": {"container": "26.06", "transformer_engine": "2.18"}},
    {"versions": {"megatron_core": "0.12.0"}, "layout": {"moe_flex_dispatcher_backend": "hybridep"}},
    {"versions": {"megatron_core": "0.16.0"}, "layout": {"moe_paged_stash": True}},
    {"layout": {"cp_comm_type": "ring", "context_parallel_size": 2}},
    {"layout": {"cp_comm_type": ["p2p", "a2a"], "context_parallel_size": 2}},
    {"training": {"task": "finetune"}, "layout": {"context_parallel_size": 2, "calculate_per_token_loss": False}},
    {
        "layout": {
            "hybrid_context_parallel": True,
            "pipeline_model_parallel_size": 2,
            "cuda_graph_impl": "transformer_engine",
        }
    },
    {"layout": {"num_distributed_optimizer_instances": 3}},
    {"layout": {"tensor_model_parallel_size": 16}},
    {"layout": {"cuda_graph_impl": "transformer_engine", "cuda_graph_scope": ["attn"], "cuda_graph_modules": ["attn"]}},
    {
        "versions": {"megatron_core": "0.16.1"},
        "layout": {"cuda_graph_impl": "transformer_engine", "cuda_graph_modules": ["attn"]},
    },
    {"layout": {"cuda_graph_impl": "transformer_engine", "cuda_graph_scope": ["bogus"]}},
    {"layout": {"cuda_graph_impl": "full_iteration", "cuda_graph_scope": ["attn"]}},
    {"layout": {"cuda_graph_impl": "transformer_engine", "cuda_graph_scope": ["full", "attn"]}},
    {"layout": {"cuda_graph_impl": "transformer_engine", "cuda_graph_scope": ["full_iteration", "attn"]}},
    {"layout": {"cuda_graph_impl": "transformer_engine", "cuda_graph_scope": ["full_iteration"]}},
    {"layout": {"cuda_graph_impl": "local", "cuda_graph_scope": ["attn"]}},
    {"layout": {"cuda_graph_impl": "transformer_engine", "cuda_graph_scope": ["moe", "moe_router"]}},
    {
        "layout": {
            "cuda_graph_impl": "transformer_engine",
            "cuda_graph_scope": ["moe_router", "moe_preprocess"],
            "moe_expert_capacity_factor": 1.0,
        }
    },
    {
        "layout": {
            "cuda_graph_impl": "transformer_engine",
            "cuda_graph_scope": ["moe_router"],
            "recompute_granularity": "selective",
            "recompute_modules": ["moe"],
        }
    },
    {
        "layout": {"cuda_graph_impl": "transformer_engine", "cuda_graph_scope": ["attn"]},
        "training": {"packed_sequences": True, "pad_to_max_length": False, "pad_cu_seqlens": False},
    },
    {"layout": {"moe_enable_deepep": True, "moe_flex_dispatcher_backend": "hybridep", "expert_model_parallel_size": 8}},
    {
        "layout": {
            "moe_token_dispatcher_type": "flex",
            "moe_flex_dispatcher_backend": "deepep",
            "moe_pad_expert_input_to_capacity": True,
            "moe_expert_capacity_factor": 1.0,
            "expert_model_parallel_size": 8,
        }
    },
    {"layout": {"moe_expert_rank_capacity_factor": 1.5}},
    {
        "layout": {
            "moe_token_dispatcher_type": "flex",
            "moe_flex_dispatcher_backend": "hybridep",
            "moe_expert_rank_capacity_factor": 1.5,
            "expert_model_parallel_size": 8,
        }
    },
    {"layout": {"moe_paged_stash": True}},
    {"layout": {"moe_shared_expert_overlap": True, "moe_token_dispatcher_type": "allgather"}},
    {"layout": {"delay_wgrad_compute": True}},
    {
        "layout": {
            "overlap_moe_expert_parallel_comm": True,
            "expert_model_parallel_size": 8,
            "pipeline_model_parallel_size": 2,
            "moe_token_dispatcher_type": "allgather",
            "recompute_granularity": "full",
            "moe_shared_expert_overlap": True,
            "cuda_graph_impl": "transformer_engine",
            "cuda_graph_scope": ["mlp"],
        }
    },
    {"layout": {"optimizer_offload_fraction": 0.5}},
    {
        "layout": {
            "pipeline_model_parallel_size": 2,
            "num_layers_in_first_pipeline_stage": 0,
            "account_for_embedding_in_pipeline_split": True,
        }
    },
    {
        "layout": {
            "pipeline_model_parallel_size": 4,
            "virtual_pipeline_model_parallel_size": 2,
            "num_layers_in_first_pipeline_stage": 3,
            "num_layers_in_last_pipeline_stage": 13,
        }
    },
    {
        "layout": {
            "pipeline_model_parallel_size": 4,
            "num_layers_in_first_pipeline_stage": 30,
            "num_layers_in_last_pipeline_stage": 30,
        }
    },
    {
        "layout": {
            "pipeline_model_parallel_size": 3,
            "num_layers_in_first_pipeline_stage": 10,
            "num_layers_in_last_pipeline_stage": 10,
        }
    },
    {
        "layout": {
            "pipeline_model_parallel_size": 4,
            "virtual_pipeline_model_parallel_size": 2,
            "num_layers_in_first_pipeline_stage": 8,
            "num_layers_in_last_pipeline_stage": 10,
        }
    },
    {"layout": {"num_layers_in_first_pipeline_stage": 4}},
    {
        "layout": {
            "pipeline_model_parallel_size": 2,
            "pipeline_model_parallel_layout": "Et*24|t*24L",
            "num_layers_in_first_pipeline_stage": 24,
        }
    },
    {"layout": {"pipeline_model_parallel_size": 4, "pipeline_model_parallel_layout": "Et*24|t*23|tL"}},
    {
        "layout": {
            "pipeline_model_parallel_size": 2,
            "virtual_pipeline_model_parallel_size": 3,
            "pipeline_model_parallel_layout": "Et*24|t*24L",
        }
    },
    {"layout": {"pipeline_model_parallel_size": 2, "pipeline_model_parallel_layout": "t*24|t*24"}},
    {"layout": {"pipeline_model_parallel_size": 2, "pipeline_model_parallel_layout": "Et*24m|t*24L"}},
    {"layout": {"pipeline_model_parallel_size": 2, "pipeline_model_parallel_layout": "E(t*24|t*24L"}},
    {"system": {"gpu": "a100", "num_gpus": 16}, "training": {"precision": "fp8-tensorwise"}},
    {
        "training": {"precision": "fp8-tensorwise"},
        "layout": {"fp8_param_gather": True, "use_distributed_optimizer": False},
    },
    {
        "training": {"precision": "fp8-delayed"},
        "layout": {"first_last_layers_bf16": True, "num_layers_at_start_in_bf16": 60},
    },
    {"layout": {"recompute_granularity": "selective", "recompute_num_layers": 2, "recompute_method": "uniform"}},
    {"layout": {"recompute_method": "uniform"}},
    {"layout": {"distribute_saved_activations": True}},
    {"layout": {"recompute_granularity": "full", "recompute_method": "uniform", "recompute_num_layers": 0}},
    {"layout": {"recompute_modules": ["moe_act"]}},
    {
        "versions": {"megatron_core": "0.16.1"},
        "layout": {"recompute_granularity": "selective", "recompute_modules": ["shared_experts", "bogus"]},
    },
    {
        "layout": {
            "recompute_granularity": "selective",
            "recompute_modules": ["gdn_norm_out", "shared_experts", "moe_act", "layernorm"],
            "moe_grouped_gemm": False,
            "moe_shared_expert_overlap": True,
        },
        "training": {"precision": "fp8-delayed"},
    },
    {
        "model": "meta-llama/Llama-3.1-8B",
        "layout": {
            "recompute_granularity": "selective",
            "recompute_modules": ["moe"],
            "cuda_graph_impl": "transformer_engine",
            "cuda_graph_scope": ["moe_router"],
            "expert_model_parallel_size": 2,
        },
    },
    {
        "layout": {
            "cpu_offloading": True,
            "recompute_granularity": "full",
            "cuda_graph_impl": "transformer_engine",
            "cpu_offloading_num_layers": 99,
            "fine_grained_activation_offloading": True,
        }
    },
    {
        "model": "deepseek-ai/DeepSeek-V3",
        "layout": {"context_parallel_size": 2, "fp8_dot_product_attention": True},
        "training": {"precision": "fp8-blockwise"},
    },
    {
        "layout": {"pipeline_model_parallel_size": 4, "virtual_pipeline_model_parallel_size": 2},
        "training": {"global_batch_size": 2},
    },
    {
        "layout": {
            "pipeline_model_parallel_size": 4,
            "virtual_pipeline_model_parallel_size": 2,
            "microbatch_group_size_per_vp_stage": 2,
        }
    },
    {"system": {"gpu": "h100", "num_gpus": 7}, "layout": {"num_distributed_optimizer_instances": 2}},
    {
        "model": "Qwen/Qwen3-Next-80B-A3B-Instruct",
        "versions": {"megatron_core": "0.16.1"},
        "layout": {"context_parallel_size": 2},
    },
    {"model": "Qwen/Qwen3-Next-80B-A3B-Instruct", "model_overrides": {"linear_num_value_heads": 24}},
    # Kimi-K3: CP over its KDA layers, VPP, Megatron Bridge 0.6.0 (no Kimi-K3), Megatron-LM alone
    {
        "model": "moonshotai/Kimi-K3",
        "layout": {"context_parallel_size": 2, "virtual_pipeline_model_parallel_size": 2},
    },
    {"model": "moonshotai/Kimi-K3", "framework": "megatron-lm"},
    # Gemma-4 26B-A4B: CP with its 512-wide global heads, CUDA graphs Bridge refuses, TP 4 over its 2 global
    # KV heads (replicated from core 0.16, an error before)
    {
        "model": "google/gemma-4-26B-A4B",
        "layout": {"context_parallel_size": 2, "cp_comm_type": "a2a", "cuda_graph_impl": "transformer_engine"},
    },
    {
        "model": "google/gemma-4-26B-A4B",
        "versions": {"megatron_core": "0.15.0"},
        "layout": {"tensor_model_parallel_size": 4, "sequence_parallel": True},
    },
    # MiniMax-M3: MiniMax Sparse Attention, which no Megatron implements (past and within its 2048 keys)
    {"model": "MiniMaxAI/MiniMax-M3"},
    {"model": "MiniMaxAI/MiniMax-M3", "training": {"seq_length": 2048}},
    # DeepSeek-V4: a release that cannot build it; TP > 1; hash layers off the embedding stage; MTP with
    # hyper-connections on main; 'mhc' recompute with 'mlp'
    {"model": "deepseek-ai/DeepSeek-V4-Flash", "versions": {"megatron_core": "0.19.0"}},
    {
        "model": "deepseek-ai/DeepSeek-V4-Flash",
        "versions": {"megatron_core": "0.19.0+dev"},
        "layout": {"tensor_model_parallel_size": 2, "pipeline_model_parallel_size": 2},
    },
    {
        "model": "deepseek-ai/DeepSeek-V4-Flash",
        "versions": {"megatron_core": "0.20.0"},
        "layout": {
            "pipeline_model_parallel_size": 2,
            "pipeline_model_parallel_layout": "Et*2|t*41mL",
            "recompute_granularity": "selective",
            "recompute_modules": ["mhc", "mlp"],
        },
    },
    # Mamba-2 hybrid: groups not divisible by TP; heads per TP rank and groups vs CP; heads vs groups
    {"model": "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", "layout": {"tensor_model_parallel_size": 16}},
    {
        "model": "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16",
        "layout": {"tensor_model_parallel_size": 4, "context_parallel_size": 3},
        "system": {"gpu": "h100", "num_gpus": 12},
    },
    {"model": "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", "model_overrides": {"mamba_num_groups": 6}},
    # latent MoE: before megatron-core 0.16; with shared-expert overlap; with 0.16's legacy grouped GEMM
    {
        "model": "nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-FP8",
        "versions": {"megatron_core": "0.15.3"},
        "layout": {"expert_model_parallel_size": 16},
    },
    {
        "model": "nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-FP8",
        "versions": {"megatron_core": "0.16.1"},
        "layout": {
            "expert_model_parallel_size": 16,
            "moe_shared_expert_overlap": True,
            "moe_use_legacy_grouped_gemm": True,
        },
    },
    # hybrid MTP block: a release without it; the block placed off the last pipeline stage
    {"model": "nvidia/NVIDIA-Nemotron-3.5-Lightning-30B-A3B-NVFP4", "versions": {"megatron_core": "0.16.1"}},
    {
        "model": "nvidia/NVIDIA-Nemotron-3.5-Lightning-30B-A3B-NVFP4",
        "layout": {"pipeline_model_parallel_size": 2, "pipeline_model_parallel_layout": "Et*26m|t*26L"},
        "system": {"gpu": "h100", "num_gpus": 16},
    },
    {
        "model": "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16",
        "layout": {"pipeline_model_parallel_size": 3, "virtual_pipeline_model_parallel_size": 2},
        "system": {"gpu": "h100", "num_gpus": 24},
    },
    {
        "system": {"gpu": "mi300x", "num_gpus": 16},
        "layout": {
            "cuda_graph_impl": "transformer_engine",
            "expert_model_parallel_size": 8,
            "moe_token_dispatcher_type": "flex",
            "moe_flex_dispatcher_backend": "hybridep",
        },
    },
    {
        "versions": {"megatron_core": "0.14.0"},
        "layout": {
            "expert_model_parallel_size": 8,
            "moe_token_dispatcher_type": "flex",
            "moe_flex_dispatcher_backend": "hybridep",
        },
    },
    {
        "model": "deepseek-ai/DeepSeek-V3",
        "layout": {"moe_shared_expert_overlap": True, "moe_token_dispatcher_type": "allgather"},
    },
    {
        "versions": {"megatron_core": "0.17.0"},
        "layout": {"recompute_granularity": "selective", "recompute_modules": ["gdn_norm_out"]},
    },
    {
        "layout": {"pipeline_model_parallel_size": 4, "virtual_pipeline_model_parallel_size": 2},
        "training": {"global_batch_size": 8},
    },
    {
        "system": {"gpu": "h100", "num_gpus": 7},
        "layout": {"tensor_model_parallel_size": 2, "num_distributed_optimizer_instances": 2},
    },
    {"versions": {"megatron_core": "0.16.1"}, "layout": {"cuda_graph_impl": "full_iteration"}},
    {"layout": {"vision_cuda_graph_impl": "transformer_engine"}},
    {"framework": "megatron-core", "layout": {"vision_cuda_graph_impl": "transformer_engine"}},
    {
        "model": "Qwen/Qwen3-VL-235B-A22B-Instruct",
        "versions": {"megatron_bridge": "0.4.0"},
        "layout": {"vision_cuda_graph_scope": ["mlp"], "expert_model_parallel_size": 8},
    },
    {"layout": {"cross_entropy_loss_fusion": True, "cross_entropy_fusion_impl": "te"}},
    {"framework": "megatron-core", "layout": {"cross_entropy_loss_fusion": True, "cross_entropy_fusion_impl": "te"}},
    {
        "layout": {
            "moe_deepep_num_sms": 21,
            "moe_token_dispatcher_type": "flex",
            "moe_flex_dispatcher_backend": "deepep",
            "expert_model_parallel_size": 8,
        }
    },
    {"versions": {"megatron_core": "0.18.0"}, "layout": {"moe_deepep_num_sms": 24, "expert_model_parallel_size": 8}},
    {"framework": "megatron-core", "layout": {"tensor_model_parallel_size": 2, "expert_model_parallel_size": 8}},
    {
        "system": {"gpu": "gb200", "num_gpus": 128},
        "training": {"seq_length": 32768},
        "layout": {
            "expert_model_parallel_size": 128,
            "moe_token_dispatcher_type": "flex",
            "moe_flex_dispatcher_backend": "hybridep",
        },
    },
    {"layout": {"cp_partition_mode": "contiguous", "context_parallel_size": 2}},
    {
        "training": {"seq_length": 65536},
        "layout": {"cuda_graph_impl": "transformer_engine", "cuda_graph_scope": ["attn"]},
    },
    {"training": {"seq_length": 32768}, "layout": {"cuda_graph_impl": "full_iteration"}},
    {"model": None, "layout": {"pipeline_model_parallel_size": 2, "pipeline_model_parallel_layout": "Et|tL"}},
    {"model": None, "reported": {"model_tflops_per_gpu": 500}, "system": {"num_gpus": 8}},
    {
        "model": None,
        "layout": {
            "expert_model_parallel_size": 2,
            "moe_token_dispatcher_type": "flex",
            "moe_flex_dispatcher_backend": "deepep",
        },
        "system": {"num_gpus": 8},
    },
    # deployment.*: DeepEP / HybridEP builds, NVLink peers, SMs, NCCL settings
    {
        "layout": {"expert_model_parallel_size": 16, "moe_token_dispatcher_type": "flex"},
        "system": {"gpu": "h100", "num_gpus": 16, "ep_library_build": []},
    },
    {
        "layout": {"expert_model_parallel_size": 12, "moe_token_dispatcher_type": "flex"},
        "system": {"gpu": "h100", "num_gpus": 24},
    },
    {
        "layout": {"expert_model_parallel_size": 8, "moe_token_dispatcher_type": "flex"},
        "system": {"gpu": "h100", "num_gpus": 16, "gpus_per_node": 4},
    },
    {"layout": {"expert_model_parallel_size": 8, "moe_token_dispatcher_type": "flex", "moe_deepep_num_sms": 21}},
    {
        "layout": {"expert_model_parallel_size": 40, "moe_token_dispatcher_type": "flex"},
        "system": {"gpu": "h100", "num_gpus": 40},
    },
    *(  # beyond the two nodes' NVLink reach; not an integer
        {
            "layout": {"expert_model_parallel_size": 16, "moe_token_dispatcher_type": "flex"}
            | {"moe_flex_dispatcher_backend": "hybridep"},
            "system": {"gpu": "h100", "num_gpus": 16},
            "environment": {"NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN": value},
        }
        for value in ("16", "abc")
    ),
    {
        "layout": {
            "expert_model_parallel_size": 128,
            "moe_token_dispatcher_type": "flex",
            "moe_flex_dispatcher_backend": "hybridep",
        },
        "system": {"gpu": "gb200", "num_gpus": 256, "ep_library_build": ["deepep-nvshmem"]},
    },
    # DeepSeek Sparse Attention: a release without it, top-k sharing before 0.19, CP per release,
    # RoPE fusion, a pipeline split across a sharing group, the PyTorch fallback
    {"model": "deepseek-ai/DeepSeek-V3.2", "versions": {"megatron_core": "0.15.0"}},
    {
        "model": "zai-org/GLM-5",
        "model_overrides": {"dsa_indexer_topk_freq": 4, "dsa_indexer_skip_topk_offset": 3},
        "versions": {"megatron_core": "0.18.0"},
    },
    {
        "model": "zai-org/GLM-5",
        "model_overrides": {"dsa_indexer_topk_freq": 4, "dsa_indexer_skip_topk_offset": 3},
        "versions": {"megatron_core": "0.19.0"},
        "layout": {"pipeline_model_parallel_size": 2, "apply_rope_fusion": True},
    },
    {
        "model": "deepseek-ai/DeepSeek-V3.2",
        "versions": {"megatron_core": "0.18.0"},
        "layout": {"context_parallel_size": 2},
    },
    {
        "model": "deepseek-ai/DeepSeek-V3.2",
        "versions": {"megatron_core": "0.19.0"},
        "layout": {"context_parallel_size": 2, "cp_comm_type": "p2p"},
    },
    {"environment": {"NCCL_IB_DISABLE": "1"}, "layout": {"expert_model_parallel_size": 16}},
    {
        "environment": {"NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN": "12"},
        "layout": {
            "expert_model_parallel_size": 16,
            "moe_token_dispatcher_type": "flex",
            "moe_flex_dispatcher_backend": "hybridep",
        },
    },
    {
        "environment": {"USE_MNNVL": "0"},
        "layout": {
            "expert_model_parallel_size": 8,
            "moe_token_dispatcher_type": "flex",
            "moe_flex_dispatcher_backend": "hybridep",
        },
        "system": {"gpu": "gb200", "num_gpus": 16},
    },
)
GPUS = (("h100", 64, 4096), ("gb200", 256, 131072), ("a100", 16, 8192))
PRECISIONS = ("bf16", "fp8-blockwise", "mxfp8", "nvfp4")


def _scenario_files() -> list[pathlib.Path]:
    return sorted((ROOT / "tests/golden/scenarios").glob("*.yaml")) + sorted((ROOT / "examples").glob("*.yaml"))


def _cases() -> list[dict]:
    from tests.test_cases import HARD, case_to_scenario

    return [case_to_scenario(p.values[0], p.values[1]) for p in HARD]


def _known_issue_examples() -> list[dict]:
    out = []
    for k in known_issues():
        for sc in (k.example, k.near_miss):
            if sc:
                out.append(sc)
                out.append({**sc, "versions": {}})
    return out


def _generated() -> list[dict]:
    out = []
    for (model, (gpu, n, seq)), var in itertools.product(itertools.product(MODELS, GPUS), VARIANTS):
        out.append(
            {
                "model": model,
                "system": {"gpu": gpu, "num_gpus": n},
                "training": {"seq_length": seq, "micro_batch_size": 1, "global_batch_size": 96},
                "layout": {"sequence_parallel": True, **var},
            }
        )
    for prec, model in itertools.product(PRECISIONS, MODELS[:3]):
        out.append(
            {
                "model": model,
                "system": {"gpu": "h100", "num_gpus": 8},
                "training": {"seq_length": 4000, "micro_batch_size": 1, "global_batch_size": 7, "precision": prec},
                "layout": {"expert_model_parallel_size": 8, "fp8_param_gather": True, "optimizer_cpu_offload": True},
            }
        )
    for t in TARGETED:
        out.append(
            {
                "model": MODELS[1],
                "training": {
                    "seq_length": 4096,
                    "micro_batch_size": 1,
                    "global_batch_size": 64,
                    **t.get("training", {}),
                },
                **{k: v for k, v in t.items() if k not in ("training", "system")},
                "system": t.get("system", {"gpu": "h100", "num_gpus": 16}),
            }
        )
    out += [{}, {"model": MODELS[0]}, {"system": {"gpu": "h100"}}, {"training": {"global_batch_size": 8}}]
    return out


@functools.lru_cache(maxsize=1)
def corpus_findings() -> tuple[Finding, ...]:
    """Every distinct finding (by rule id, message and fix) of every scenario above."""
    seen: dict[tuple, Finding] = {}
    sources: list = [*_scenario_files(), *_cases(), *_known_issue_examples(), *_generated()]
    for src in sources:
        try:
            res = validate(load_scenario(src))
        except InputError:
            continue
        for f in res.findings:
            seen.setdefault((f.rule_id, f.message, f.fix), f)
    return tuple(seen.values())
