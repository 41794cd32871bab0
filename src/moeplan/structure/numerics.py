"""Numeric policy of a resolved scenario, decided in one place: bytes per element by dtype and role,
the routed-token factor of MoE layers (imbalance, capacity factors, forced balance) and the shard
degrees of the distributed optimizer and Megatron-FSDP. The memory model, the step-time model and
the rules all read these; none of them re-derives a byte count or a shard degree.

Sources (Megatron-Core 0.16–0.18):

- gradients: the DDP main-grad buffer is fp32 unless ``grad_reduce_in_fp32`` is false (Bridge's
  ``bf16_mixed`` and Megatron-LM's ``--bf16`` set it true); the precision-aware optimizer with
  ``main_grads_dtype: bf16`` keeps bf16 main grads (``megatron/core/optimizer/optimizer_config.py``).
  Gradients are reduced in the buffer's dtype (``distributed/param_and_grad_buffer.py``);
- optimizer state: a master copy and Adam's two moments in ``exp_avg_dtype`` / ``exp_avg_sq_dtype``
  (fp32 unless the precision-aware optimizer says otherwise). The master is megatron-core's fp32 shard
  unless TE's FusedAdam keeps it (:func:`te_managed_master`): then it is ``main_params_dtype``, or
  2 B with ``store_param_remainders`` (the bf16 parameter plus a 16-bit remainder)
  (``optimizer/optimizer_config.py``, ``optimizer/__init__.py``, ``docs/.../dist_optimizer.md``);
- shards: the distributed optimizer shards dense state over DP·CP / ``num_distributed_optimizer_instances``
  and routed-expert state over EDP (``distributed/distributed_data_parallel.py``); Megatron-FSDP
  ``optim_grads_params`` also shards weights and gradients, ``optim_grads`` gradients, ``no_shard``
  nothing (``distributed/fsdp``); with ``num_distributed_optimizer_instances`` > 1 (HSDP) it shards
  them within one instance and, with ``outer_dp_sharding_strategy: optim`` (HFSDP), the optimizer
  state over the whole DP·CP / EDP group (``distributed/fsdp/mcore_fsdp_adapter.py`` @ core_v0.19.0);
- routed tokens: dropless routing sends the busiest expert rank ``routing_imbalance_factor`` × the
  mean (a planning margin, default 1.2); a capacity factor caps it (drop) or fixes it (drop-and-pad,
  ``moe_pad_expert_input_to_capacity``); HybridEP / NCCL-EP's ``moe_expert_rank_capacity_factor``
  caps a rank's budget; ``moe_router_force_load_balancing`` makes it exactly 1
  (``transformer/moe/moe_utils.py``, ``token_dispatcher.py``);
- FP8 weights: Transformer Engine keeps quantized copies of each GEMM weight for the step (row-wise for
  fprop, transposed/column-wise for dgrad); with ``fp8_param_gather`` the row-wise copy is the weight
  itself; MXFP8 adds one E8M0 scale per 32 elements, NVFP4 one E4M3 scale per 16 (TE
  ``tensor/float8_tensor.py``, ``mxfp8_tensor.py``, ``nvfp4_tensor.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

from packaging.version import Version

from moeplan.inputs.resolved import Scenario

#: bytes per element of each dtype name used by the layout keys
DTYPE_BYTES: dict[str, float] = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0}
#: bytes per activation element (bf16) and per BF16 parameter
BF16_BYTES = 2.0
#: routed tokens per expert rank relative to perfect balance when routing is dropless and not forced
#: balanced: a planning margin (aux-loss-balanced routers keep the busiest rank within a few tens of
#: percent of the mean); override with ``assumptions.routing_imbalance_factor``
DEFAULT_ROUTING_IMBALANCE = 1.2
#: Hopper FP8 recipes (current scaling, delayed scaling, blockwise)
HOPPER_FP8 = ("fp8-tensorwise", "fp8-delayed", "fp8-blockwise")


def dtype_bytes(name: str) -> float:
    """Bytes per element of a dtype name (``fp32`` 4, ``bf16``/``fp16`` 2, ``fp8`` 1).

    Raises:
        KeyError: an unknown dtype name (the layout schema only admits these).
    """
    return DTYPE_BYTES[name]


def linear_input_bytes(precision: str) -> float:
    """Bytes per element of a linear layer's saved input: 1 under FP8/FP4 recipes (Transformer
    Engine keeps the quantized input for the weight-gradient GEMM), 2 (bf16) otherwise."""
    return 1.0 if precision != "bf16" else BF16_BYTES


def fp8_weight_cache_bytes(precision: str, fp8_param_gather: bool) -> float:
    """Bytes per GEMM weight of the quantized copies Transformer Engine keeps during a step: Hopper
    FP8 recipes 1 + 1 (the row-wise copy is the weight itself with FP8 parameter gather); MXFP8
    (1 + 1/32) per copy; NVFP4 (0.5 + 1/16) per copy, two copies; 0 for BF16."""
    if precision in HOPPER_FP8:
        return 1.0 if fp8_param_gather else 2.0
    if precision == "mxfp8":
        return (1 + 1 / 32) * (1 if fp8_param_gather else 2)
    if precision == "nvfp4":
        return (0.5 + 1 / 16) * 2
    return 0.0


def param_gather_bytes(precision: str, fp8_param_gather: bool) -> float:
    """Bytes per parameter the distributed optimizer all-gathers: BF16 (2), or with
    ``fp8_param_gather`` under an FP8 recipe the FP8 weight (1, plus MXFP8's 1/32 scale)."""
    if not fp8_param_gather or precision == "bf16":
        return BF16_BYTES
    return 1 + 1 / 32 if precision == "mxfp8" else 1.0


def weight_bytes_gemm(fp8_param_gather: bool) -> float:
    """Bytes per GEMM weight held as the parameter: 1 with FP8 parameter gather (the FP8 weight is
    the parameter), else 2 (bf16)."""
    return 1.0 if fp8_param_gather else BF16_BYTES


@dataclass(frozen=True)
class OptimizerNumerics:
    """Bytes per parameter of gradients and optimizer state, and the shard degrees.

    Attributes:
        grad_bytes: main-grad bytes per parameter (also the dtype gradients are reduced in).
        grad_reduce_in_fp32_stated: whether the layout stated ``grad_reduce_in_fp32``.
        master_bytes / exp_avg_bytes / exp_avg_sq_bytes: optimizer state per parameter, bytes.
        offload_fraction: share of the optimizer state in host memory (0 without CPU offload).
        distributed: whether optimizer state is sharded (distributed optimizer, or Megatron-FSDP
            with a strategy other than ``no_shard``).
        dense_shard / expert_shard: ranks dense (DP·CP / instances) and routed-expert (EDP) state is
            sharded over (1 when not distributed).
        fsdp_strategy: Megatron-FSDP's ``data_parallel_sharding_strategy`` (None without FSDP).
        shard_params / shard_grads: Megatron-FSDP shards weights / gradients too.
        param_dense_shard / param_expert_shard: ranks Megatron-FSDP shards weights and gradients
            over (:func:`fsdp_param_shard_degrees`; 1 when it does not shard them).
    """

    grad_bytes: float
    grad_reduce_in_fp32_stated: bool
    master_bytes: float
    exp_avg_bytes: float
    exp_avg_sq_bytes: float
    offload_fraction: float
    distributed: bool
    dense_shard: int
    expert_shard: int
    fsdp_strategy: str | None
    shard_params: bool
    shard_grads: bool
    param_dense_shard: int = 1
    param_expert_shard: int = 1

    @property
    def state_bytes(self) -> float:
        """Optimizer state per parameter (master + both moments), bytes."""
        return self.master_bytes + self.exp_avg_bytes + self.exp_avg_sq_bytes


#: the first megatron-core release whose Megatron-FSDP takes its main-grad dtype from
#: ``megatron_fsdp_main_grads_dtype`` alone (``auto``: the parameters' dtype, BF16 for BF16 and FP8
#: parameters), no longer from ``grad_reduce_in_fp32`` (``distributed/fsdp/mcore_fsdp_adapter.py``:
#: core_v0.18.0 maps ``grad_reduce_in_fp32`` to FP32 main grads, core_v0.19.0 does not)
FSDP_OWN_GRAD_DTYPE_MCORE = Version("0.19.0")


def fsdp_grads_ignore_fp32_flag(s: Scenario) -> bool:
    """Whether Megatron-FSDP keeps and reduces its gradients in its own ``auto`` dtype (BF16) whatever
    ``grad_reduce_in_fp32`` says: megatron-core from :data:`FSDP_OWN_GRAD_DTYPE_MCORE` on."""
    return fsdp_strategy(s) is not None and s.mcore_version >= FSDP_OWN_GRAD_DTYPE_MCORE


def grad_bytes(s: Scenario) -> float:
    """Main-grad bytes per parameter: 4 (fp32) unless ``grad_reduce_in_fp32: false``, 2 with the
    precision-aware optimizer's ``main_grads_dtype: bf16``. Unset means fp32, as Bridge's
    ``bf16_mixed`` and Megatron-LM's ``--bf16`` (``arguments.py``) set it. Megatron-FSDP from
    megatron-core 0.19 on: 2 (BF16, :func:`fsdp_grads_ignore_fp32_flag`)."""
    lay = s.layout
    if fsdp_grads_ignore_fp32_flag(s):
        return BF16_BYTES
    b = DTYPE_BYTES["fp32"] if lay.grad_reduce_in_fp32 is not False else BF16_BYTES
    if lay.use_precision_aware_optimizer and lay.main_grads_dtype == "bf16":
        b = BF16_BYTES
    return b


def fsdp_strategy(s: Scenario) -> str | None:
    """Megatron-FSDP's sharding strategy (``optim_grads_params`` when unset, what Bridge's
    ``--use_megatron_fsdp`` sets); None without Megatron-FSDP."""
    if not s.layout.use_megatron_fsdp:
        return None
    return s.layout.data_parallel_sharding_strategy or "optim_grads_params"


def _inner_degrees(s: Scenario) -> tuple[int, int]:
    """(dense, expert) sizes of the partial (intra-instance) data-parallel groups: DP·CP and EDP, each
    divided by ``num_distributed_optimizer_instances`` (the expert size only where the instances
    divide EDP; megatron-core asserts they do, ``parallel_state.py``)."""
    inst = s.layout.num_distributed_optimizer_instances
    edp = s.edp or 1
    dense = max(1, ((s.dp or 1) * s.cp) // inst)
    expert = max(1, edp // (inst if inst > 1 and edp % inst == 0 else 1))
    return dense, expert


def hfsdp_outer_shards_optimizer(s: Scenario) -> bool:
    """Whether hybrid-sharded Megatron-FSDP also shards the optimizer state over its outer group:
    ``num_distributed_optimizer_instances`` > 1 with ``outer_dp_sharding_strategy: optim`` (HFSDP;
    the state is then sharded over the whole DP·CP / EDP group, ``hybrid_fsdp_group`` /
    ``hybrid_fsdp_expt_group`` of ``distributed/fsdp/mcore_fsdp_adapter.py`` @ core_v0.19.0)."""
    lay = s.layout
    return (
        fsdp_strategy(s) is not None
        and lay.num_distributed_optimizer_instances > 1
        and lay.outer_dp_sharding_strategy == "optim"
    )


def shard_degrees(s: Scenario) -> tuple[int, int]:
    """(dense, expert) ranks the optimizer state is sharded over: DP·CP and EDP, each divided by
    ``num_distributed_optimizer_instances`` (the expert degree only where the instances divide EDP),
    undivided under HFSDP (:func:`hfsdp_outer_shards_optimizer`); (1, 1) without a distributed
    optimizer or FSDP sharding. Needs a folding world (``s.dp`` set)."""
    strategy = fsdp_strategy(s)
    dist = strategy != "no_shard" if strategy is not None else bool(s.layout.use_distributed_optimizer)
    if not dist:
        return 1, 1
    if hfsdp_outer_shards_optimizer(s):
        return max(1, (s.dp or 1) * s.cp), max(1, s.edp or 1)
    return _inner_degrees(s)


def fsdp_param_shard_degrees(s: Scenario) -> tuple[int, int]:
    """(dense, expert) ranks Megatron-FSDP shards weights (``optim_grads_params``) and gradients
    (``optim_grads`` too) over, and all-gathers / reduce-scatters them in every microbatch: its
    DP-shard groups, DP·CP and EDP within one optimizer instance (``dp_cp_group`` /
    ``expt_dp_group`` of ``distributed/fsdp/mcore_fsdp_adapter.py`` @ core_v0.19.0: the
    intra-instance groups when ``num_distributed_optimizer_instances`` > 1). An expert degree of 1
    (EDP equal to the instances) leaves the routed experts whole on every rank. (1, 1) without
    Megatron-FSDP gradient sharding."""
    if fsdp_strategy(s) not in ("optim_grads", "optim_grads_params"):
        return 1, 1
    return _inner_degrees(s)


#: FP8 recipe of each FP8 training precision, as megatron-core's ``fp8_recipe`` names it
FP8_RECIPE_OF: dict[str, str] = {
    "fp8-tensorwise": "tensorwise",
    "fp8-delayed": "delayed",
    "fp8-blockwise": "blockwise",
    "mxfp8": "mxfp8",
}
#: Megatron Bridge releases whose ``MixedPrecisionConfig.fp8_recipe`` still defaults to ``"delayed"``
#: (half-open version ranges): before 0.1.0rc3, and 0.2.0rc0–rc1. Main switched to ``"tensorwise"`` in
#: commit 15bf28de (2025-09-05, first tagged 0.2.0rc2); cherry-pick d8bb57e3 put it into 0.1.0rc3/rc4
#: the first megatron-core release with ``use_precision_aware_optimizer_no_fp8_or_ds_fp8`` (before it,
#: core_v0.12 ``optimizer/__init__.py`` passes ``master_weights=True`` whenever the precision-aware
#: optimizer is on)
MCORE_NO_FP8_OR_DS_FP8 = Version("0.13.0rc0")
BRIDGE_DELAYED_DEFAULT = (
    (Version("0"), Version("0.1.0rc3")),
    (Version("0.2.0.dev0"), Version("0.2.0rc2")),
)


def optimizer_fp8_recipe(s: Scenario) -> str:
    """The ``fp8_recipe`` megatron-core's ``OptimizerConfig`` ends up with (``"tensorwise"``,
    ``"delayed"``, ``"blockwise"`` or ``"mxfp8"``): the FP8 precision's recipe; otherwise (BF16, FP16,
    NVFP4) the framework's default, which is set even when FP8 is off. Megatron Bridge copies every
    ``MixedPrecisionConfig`` field the optimizer config also has (``mixed_precision.py::
    update_config_with_precision_overrides``, before ``OptimizerConfig.finalize``), and that field
    defaults to ``"tensorwise"`` (``"delayed"`` in the releases of :data:`BRIDGE_DELAYED_DEFAULT`; an
    unstated release is taken as current); Megatron-LM builds the optimizer
    config from its arguments, whose ``--fp8-recipe`` defaults to ``"delayed"``
    (``TransformerConfig.fp8_recipe``, ``training.py::get_megatron_optimizer_config``)."""
    if s.training.precision in FP8_RECIPE_OF:
        return FP8_RECIPE_OF[s.training.precision]
    if s.framework != "megatron-bridge":
        return "delayed"
    bridge = s.versions.get("megatron_bridge")
    delayed = bridge is not None and any(lo <= bridge < hi for lo, hi in BRIDGE_DELAYED_DEFAULT)
    return "delayed" if delayed else "tensorwise"


def te_managed_master(s: Scenario) -> bool:
    """megatron-core's ``use_precision_aware_optimizer_no_fp8_or_ds_fp8`` (``optimizer_config.py``):
    the precision-aware optimizer with ``main_params_dtype`` ≠ fp32, or with an optimizer
    ``fp8_recipe`` of ``"delayed"`` (:func:`optimizer_fp8_recipe`), or with CPU offload. Then TE's
    FusedAdam keeps the master weights (``master_weights=True``, 16-bit remainders with
    ``store_param_remainders``) and reads the grad shard in place (``decoupled_grad``), as it always
    does before megatron-core 0.13 (:data:`MCORE_NO_FP8_OR_DS_FP8`); otherwise
    megatron-core keeps an fp32 main-parameter shard (``shard_model_param.clone().float()``) and
    hands the optimizer ``shard_model_grad.float()`` (``distrib_optimizer.py``)."""
    lay = s.layout
    if not lay.use_precision_aware_optimizer:
        return False
    core = s.versions.get("megatron_core")
    if core is not None and core < MCORE_NO_FP8_OR_DS_FP8:
        return True  # before 0.13 the precision-aware optimizer always handed TE the master
    return (
        (lay.main_params_dtype or "fp32") != "fp32"
        or optimizer_fp8_recipe(s) == "delayed"
        or bool(lay.optimizer_cpu_offload)
    )


def stores_param_remainders(s: Scenario) -> bool:
    """TE's FusedAdam keeps the fp32 master as the bf16 parameter plus a 16-bit remainder: it keeps the
    master (:func:`te_managed_master`), the master is fp32, ``store_param_remainders`` is not off, and
    the state is not offloaded (the host keeps a full fp32 master)."""
    lay = s.layout
    return (
        lay.store_param_remainders is not False
        and (lay.main_params_dtype or "fp32") == "fp32"
        and not lay.optimizer_cpu_offload
        and te_managed_master(s)
    )


def _master_bytes(s: Scenario) -> float:
    """Master-weight bytes per parameter: 2 with remainders, ``main_params_dtype`` where TE's FusedAdam
    keeps the master (:func:`te_managed_master`), else megatron-core's fp32 shard."""
    if not te_managed_master(s):
        return DTYPE_BYTES["fp32"]
    return 2.0 if stores_param_remainders(s) else DTYPE_BYTES[s.layout.main_params_dtype or "fp32"]


def optimizer_offload_fraction(s: Scenario) -> float:
    """Share of the optimizer state in host memory: ``optimizer_offload_fraction`` under
    ``optimizer_cpu_offload``, else 0 (Megatron-Core ``OptimizerConfig``)."""
    lay = s.layout
    return (lay.optimizer_offload_fraction or 0.0) if lay.optimizer_cpu_offload else 0.0


def optimizer_numerics(s: Scenario) -> OptimizerNumerics:
    """Gradient and optimizer-state bytes and shard degrees of a resolved scenario (see the module
    docstring for the sources)."""
    lay = s.layout
    pao = bool(lay.use_precision_aware_optimizer)
    m_b = DTYPE_BYTES[lay.exp_avg_dtype or "fp32"] if pao else 4.0
    v_b = DTYPE_BYTES[lay.exp_avg_sq_dtype or "fp32"] if pao else 4.0
    strategy = fsdp_strategy(s)
    dense, expert = shard_degrees(s)
    return OptimizerNumerics(
        grad_bytes=grad_bytes(s),
        grad_reduce_in_fp32_stated=lay.grad_reduce_in_fp32 is not None,
        master_bytes=_master_bytes(s),
        exp_avg_bytes=m_b,
        exp_avg_sq_bytes=v_b,
        offload_fraction=optimizer_offload_fraction(s),
        distributed=(strategy != "no_shard") if strategy is not None else bool(lay.use_distributed_optimizer),
        dense_shard=dense,
        expert_shard=expert,
        fsdp_strategy=strategy,
        shard_params=strategy == "optim_grads_params",
        shard_grads=strategy in ("optim_grads", "optim_grads_params"),
        param_dense_shard=fsdp_param_shard_degrees(s)[0],
        param_expert_shard=fsdp_param_shard_degrees(s)[1],
    )


@dataclass(frozen=True)
class Routing:
    """How many tokens the busiest expert rank processes, relative to perfect balance.

    Attributes:
        factor: routed tokens on the busiest expert rank / the balanced share (1.0 for dense models
            and forced balance).
        source: what set it: ``dense``, ``forced_balance``, ``imbalance`` (the planning margin or
            ``assumptions.routing_imbalance_factor``), ``capacity`` (a capacity factor caps it),
            ``drop_and_pad`` (padded to the capacity) or ``rank_budget`` (HybridEP / NCCL-EP rank
            capacity factor caps it).
        imbalance_stated: whether ``assumptions.routing_imbalance_factor`` was given.
        static_shapes: expert inputs have a fixed size every step (drop-and-pad), so expert GEMMs
            need no host sync and CUDA graphs can capture them.
    """

    factor: float
    source: str
    imbalance_stated: bool
    static_shapes: bool


def drop_and_pad(s: Scenario) -> bool:
    """A capacity factor with ``moe_pad_expert_input_to_capacity``: every expert gets exactly its
    capacity (static shapes)."""
    lay = s.layout
    cf = lay.moe_expert_capacity_factor
    return cf is not None and cf >= 0 and bool(lay.moe_pad_expert_input_to_capacity)


def routing(s: Scenario) -> Routing:
    """The routed-token factor of a resolved scenario's MoE layers (see the module docstring)."""
    lay, m = s.layout, s.model
    stated = s.input.assumptions.routing_imbalance_factor
    imbalance = stated or DEFAULT_ROUTING_IMBALANCE
    pad = drop_and_pad(s)
    if m is None or not m.is_moe:
        return Routing(1.0, "dense", stated is not None, False)
    cf = lay.moe_expert_capacity_factor
    if lay.moe_router_force_load_balancing:
        factor, source = 1.0, "forced_balance"
    elif cf is not None and cf >= 0:
        factor, source = (cf, "drop_and_pad") if pad else (min(cf, imbalance), "capacity")
    else:
        factor, source = imbalance, "imbalance"
    budget = lay.moe_expert_rank_capacity_factor
    if budget is not None and budget < factor:
        factor, source = budget, "rank_budget"
    return Routing(factor, source, stated is not None, pad)


__all__ = [
    "BF16_BYTES",
    "DEFAULT_ROUTING_IMBALANCE",
    "DTYPE_BYTES",
    "OptimizerNumerics",
    "Routing",
    "drop_and_pad",
    "dtype_bytes",
    "fp8_weight_cache_bytes",
    "FSDP_OWN_GRAD_DTYPE_MCORE",
    "fsdp_grads_ignore_fp32_flag",
    "fsdp_param_shard_degrees",
    "fsdp_strategy",
    "grad_bytes",
    "hfsdp_outer_shards_optimizer",
    "linear_input_bytes",
    "optimizer_numerics",
    "param_gather_bytes",
    "routing",
    "shard_degrees",
    "weight_bytes_gemm",
]
