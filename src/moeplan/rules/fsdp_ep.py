"""Megatron-FSDP with expert parallelism: the group layout megatron-core builds for it (core_v0.19.0).

- ``parallel_state.initialize_model_parallel`` splits the expert data-parallel group into
  ``num_distributed_optimizer_instances`` partial groups and asserts that they divide EDP;
- Megatron-FSDP shards the optimizer state over the outer (inter-instance) group only on top of full
  sharding within an instance: ``outer_dp_sharding_strategy: optim`` with any other
  ``data_parallel_sharding_strategy`` raises ``NotImplementedError`` (``distributed/fsdp/src/
  megatron_fsdp/param_and_grad_buffer.py``).
"""

from __future__ import annotations

from moeplan.i18n.messages import msg
from moeplan.rules.base import rule, set_key
from moeplan.structure.numerics import fsdp_strategy


@rule(
    "fsdp.optimizer_instances_divide_edp",
    "[PS] parallel_state.initialize_model_parallel (core_v0.19.0)",
    "EDP must be divisible by num_distributed_optimizer_instances",
)
def _instances_edp(s, e):
    n = s.layout.num_distributed_optimizer_instances
    if n == 1 or s.ep == 1:
        return None
    if s.edp is None:
        return [e.missing_integer_dp_world()]
    if s.edp % n:
        return [
            e.error(
                msg("fsdp_ep.edp_not_divisible_by_instances", edp=s.edp, n=n),
                msg("fsdp_ep.edp_not_divisible_by_instances.fix"),
                "num_distributed_optimizer_instances",
                "expert_model_parallel_size",
            )
        ]


@rule(
    "fsdp.outer_optimizer_sharding_needs_full_sharding",
    "[FSDP] megatron_fsdp/param_and_grad_buffer.py (core_v0.19.0)",
    "outer_dp_sharding_strategy optim (HFSDP) needs data_parallel_sharding_strategy optim_grads_params",
)
def _outer_optim(s, e):
    lay = s.layout
    if not lay.use_megatron_fsdp or lay.num_distributed_optimizer_instances == 1:
        return None
    strategy = fsdp_strategy(s)
    if lay.outer_dp_sharding_strategy == "optim" and strategy != "optim_grads_params":
        return [
            e.error(
                msg("fsdp_ep.outer_optim_needs_full_sharding", strategy=strategy),
                set_key("data_parallel_sharding_strategy", "optim_grads_params"),
                "outer_dp_sharding_strategy",
                "data_parallel_sharding_strategy",
            )
        ]
