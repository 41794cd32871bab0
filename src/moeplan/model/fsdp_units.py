"""Megatron-FSDP's units, groups and bytes: what the memory and the step-time models share.

What megatron-core's Megatron-FSDP does (``megatron/core/distributed/fsdp/``; cited at core_v0.19.0,
the same mechanism in core_v0.17 and core_v0.18):

- units: with ``optim_grads_params`` the FSDP units are the ``TransformerLayer``, ``MoETransformerLayer``
  and ``MambaLayer`` modules (``mcore_fsdp_adapter.py``). Before a unit's forward and again before its
  backward its parameters are all-gathered, and released after each; after its backward its gradients
  are reduce-scattered, in every microbatch (``src/megatron_fsdp/megatron_fsdp.py``:
  ``grad_reduce_every_bprop`` for ``optim_grads`` and ``optim_grads_params``). Parameters outside a
  unit (the embedding and the output layer) are gathered once and stay whole;
- groups: dense parameters over DP·CP and routed experts over EDP, within one optimizer instance
  (:func:`~moeplan.structure.numerics.fsdp_param_shard_degrees`); a group of one rank moves nothing;
- bytes: the gathered buffer holds the compute weights: with ``fp8_param_gather`` the quantized GEMM
  weights (MXFP8 1 B + one E8M0 scale per 32; the row-wise data gathered for forward, the column-wise
  transpose buffer for backward, ``param_and_grad_buffer.py``), BF16 otherwise and for the other
  parameters (:func:`~moeplan.structure.numerics.param_gather_bytes`); gradients travel in the
  main-grad dtype (:func:`~moeplan.structure.numerics.grad_bytes`);
- hybrid sharding (``num_distributed_optimizer_instances`` > 1): once per step, during the first
  microbatch, the outer group all-gathers the inner shards (``outer_dp_sharding_strategy: optim``;
  row-wise in its forward, the MXFP8 column-wise copy in its backward), and during the last microbatch's
  backward it reduce-scatters (``optim``) or all-reduces (``no_shard``) the inner gradient shards;
- in flight (no ``fsdp_double_buffer``, Megatron's default): the communication unit is
  ``max(1e9, 2 × the mean unit)`` elements by default; a unit's all-gather prefetches the next units
  until half of it is in flight beyond the current one, and reduce-scattered gradient buckets are
  freed only once more than the whole communication unit is queued (``megatron_fsdp.py``
  ``_init_fsdp_param_and_grad_buffer``; ``param_and_grad_buffer.py`` ``AllGatherPipeline.all_gather_params``,
  ``GradReducePipeline.wait_for_previous_grad_reduce``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from moeplan.structure.params import RankParams

#: Megatron-FSDP's smallest default communication unit, elements (``max(1_000_000_000, 2 × mean unit)``)
MIN_COMMUNICATION_UNIT = 1e9
#: parameter kinds that sit outside every FSDP unit (gathered once, kept whole)
NON_UNIT_KINDS = ("embedding", "output_layer")
#: parameter kinds whose weights are BF16 whatever the recipe (not quantized GEMM weights); the output
#: layer stays BF16 under FP8 recipes
BF16_KINDS = ("embedding", "output_layer", "norms", "router", "vision")


@dataclass(frozen=True)
class FsdpParams:
    """A rank's parameters as Megatron-FSDP groups them (counts).

    Attributes:
        dense_gemm: dense parameters inside FSDP units that are GEMM weights (quantized with
            ``fp8_param_gather``).
        dense_other: dense parameters inside FSDP units kept BF16 (norms, router).
        non_unit: dense parameters outside every unit (embedding, output layer).
        expert: routed-expert parameters (all GEMM weights).
    """

    dense_gemm: float
    dense_other: float
    non_unit: float
    expert: float

    @property
    def dense_unit(self) -> float:
        """Dense parameters inside FSDP units."""
        return self.dense_gemm + self.dense_other


def fsdp_params(params: RankParams) -> FsdpParams:
    """Split ``params`` (one rank of a stage) into Megatron-FSDP's unit / non-unit, GEMM / BF16 and
    expert parts (module docstring)."""
    kinds = params.by_kind
    non_unit = float(sum(kinds.get(k, 0) for k in NON_UNIT_KINDS))
    other = float(sum(kinds.get(k, 0) for k in BF16_KINDS if k not in NON_UNIT_KINDS))
    gemm = max(0.0, float(params.dense) - non_unit - other)
    return FsdpParams(dense_gemm=gemm, dense_other=other, non_unit=non_unit, expert=float(params.expert))


def units_in_flight(unit_elements: float, units: int) -> tuple[int, int]:
    """(gathered, unsharded-gradient) FSDP units one rank holds at once without double buffering.

    ``unit_elements`` is the mean elements of one unit that its group gathers, ``units`` the units of
    the stage. The communication unit is ``C = max(1e9, 2 × unit_elements)``; the all-gather prefetches
    until at least ``C / 2`` elements beyond the current unit are requested, so ``1 + ceil(C / 2 /
    unit)`` units are gathered; the gradient queue waits only when more than ``C`` elements are queued,
    so ``1 + floor(C / unit)`` units' gradients are whole (sources in the module docstring). Both at
    most ``units``; zero and zero when no unit is gathered."""
    if unit_elements <= 0 or units <= 0:
        return 0, 0
    comm = max(MIN_COMMUNICATION_UNIT, 2.0 * unit_elements)
    gathered = 1 + math.ceil(comm / 2.0 / unit_elements)
    grads = 1 + math.floor(comm / unit_elements)
    return min(units, gathered), min(units, grads)
