"""Per-GPU memory: weights, gradients, optimizer state, activations and non-tensor memory, for every
pipeline stage, and the verdict against the GPU's usable HBM.

Static memory per rank (``megatron_facts.md`` §5.3, Megatron-Core ``docs/.../dist_optimizer.md``):

- weights: bf16 parameters, 2 B each (FP8 parameter gather: 1 B for GEMM weights), plus Transformer
  Engine's cached FP8 weight copies under FP8 recipes (row-wise and transposed/column-wise copies);
- gradients: the DDP main-grad buffer, 4 B (fp32, ``grad_reduce_in_fp32``) or 2 B per parameter;
- optimizer: fp32 master copy (2 B with ``store_param_remainders`` under the precision-aware
  optimizer) and Adam's two moments (4 B, or 2 B in bf16), sharded by the distributed optimizer over
  DP·CP for dense parameters and over EDP for routed experts; ``optimizer_offload_fraction`` of it
  lives in host memory; Megatron-FSDP ``optim_grads_params`` also shards weights and gradients.

Activations: :mod:`moeplan.model.activations` per layer and microbatch, times the microbatches a
stage holds (:mod:`moeplan.model.schedule`), plus the output layer / loss and MTP on the last stage.
Full recompute keeps only layer inputs (``recompute_method`` uniform: one per ``recompute_num_layers``
chunk; block: the first ``recompute_num_layers`` layers of each chunk).

Transient and non-tensor memory (``other``): the backward working set (one layer's activations, or
one recompute chunk), CUDA context, NCCL and dispatcher buffers, workspaces, CUDA graph buffers and
allocator fragmentation (:mod:`moeplan.model.overheads`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

from moeplan.errors import InputError
from moeplan.model.activations import (
    OFFLOAD_ITEMS,
    ActContext,
    layer_activations,
    layer_input_bytes,
    mtp_activations,
    output_layer_activations,
)
from moeplan.model.overheads import Overheads, resolve_overheads
from moeplan.model.schedule import inflight_microbatches
from moeplan.spec.params import padded_vocab_size
from moeplan.spec.placement import StageParams, stage_params, stage_plan
from moeplan.spec.scenario import Scenario
from moeplan.units import GIB_BYTES

#: Headroom below which a fitting layout is called "tight" (fraction of usable HBM).
TIGHT_HEADROOM = 0.05
#: Routed tokens per expert rank relative to perfect balance when routing is not forced balanced
#: and dropless: a planning margin (aux-loss-balanced routers keep the busiest rank within a few
#: tens of percent of the mean); 1.0 with ``moe_router_force_load_balancing``.
DEFAULT_ROUTING_IMBALANCE = 1.2
_DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1}
#: parameter kinds whose weights feed GEMMs (FP8 casts and caches apply to them)
_GEMM_KINDS = ("attention", "dense_mlp", "shared_experts", "routed_experts", "mtp")  # output layer stays bf16


@dataclass(frozen=True)
class StageMemory:
    """Peak memory of one GPU of pipeline stage ``stage`` (bytes), itemised.

    ``items`` maps each category (weights, grads, optimizer, activations, other) to named parts;
    the category totals are the sums of their parts and ``total_bytes`` the sum of the categories.
    """

    stage: int
    num_layers: int
    inflight_microbatches: float
    items: dict[str, dict[str, float]]
    host_bytes: float = 0.0
    chunks: tuple[tuple[int, int, float], ...] = ()

    def category(self, name: str) -> int:
        return int(round(sum(self.items.get(name, {}).values())))

    @property
    def weights_bytes(self) -> int:
        return self.category("weights")

    @property
    def grads_bytes(self) -> int:
        return self.category("grads")

    @property
    def optimizer_bytes(self) -> int:
        return self.category("optimizer")

    @property
    def activations_bytes(self) -> int:
        return self.category("activations")

    @property
    def other_bytes(self) -> int:
        return self.category("other")

    @functools.cached_property
    def total_bytes(self) -> int:
        return self.weights_bytes + self.grads_bytes + self.optimizer_bytes + self.activations_bytes + self.other_bytes

    def to_dict(self) -> dict:
        return {
            "stage": self.stage,
            "num_layers": self.num_layers,
            "inflight_microbatches": self.inflight_microbatches,
            "total_bytes": self.total_bytes,
            "weights_bytes": self.weights_bytes,
            "grads_bytes": self.grads_bytes,
            "optimizer_bytes": self.optimizer_bytes,
            "activations_bytes": self.activations_bytes,
            "other_bytes": self.other_bytes,
            "host_bytes": int(self.host_bytes),
            "virtual_chunks": [
                {"vp_stage": v, "num_layers": n, "activations_per_microbatch_bytes": int(round(b))}
                for v, n, b in self.chunks
            ],
            "items": {k: {n: int(round(v)) for n, v in d.items()} for k, d in self.items.items()},
        }


@dataclass(frozen=True)
class MemoryEstimate:
    """Per-stage memory and the verdict.

    ``verdict``: ``fits`` (headroom ≥ 5 %), ``tight`` (0–5 %), ``does-not-fit``, or ``unknown``
    when the scenario names no GPU. ``host_bytes_per_node`` is set when optimizer state is offloaded.
    """

    stages: list[StageMemory]
    capacity_bytes: int | None
    gpus_per_node: int | None
    host_capacity_bytes_per_node: int | None
    overheads: Overheads
    assumptions: list[str] = field(default_factory=list)

    @functools.cached_property
    def peak_stage(self) -> StageMemory:
        return max(self.stages, key=lambda st: st.total_bytes)

    @property
    def peak_bytes(self) -> int:
        return self.peak_stage.total_bytes

    @property
    def headroom_fraction(self) -> float | None:
        if not self.capacity_bytes:
            return None
        return (self.capacity_bytes - self.peak_bytes) / self.capacity_bytes

    @property
    def verdict(self) -> str:
        """``does-not-fit`` also when offloaded optimizer state overflows the node's host memory."""
        h = self.headroom_fraction
        if self.host_fits is False:
            return "does-not-fit"
        if h is None:
            return "unknown"
        if h < 0:
            return "does-not-fit"
        return "tight" if h < TIGHT_HEADROOM else "fits"

    @property
    def fits(self) -> bool | None:
        if self.host_fits is False:
            return False
        h = self.headroom_fraction
        return None if h is None else h >= 0

    @property
    def host_bytes_per_node(self) -> int | None:
        per_gpu = max((st.host_bytes for st in self.stages), default=0.0)
        if per_gpu <= 0:
            return None
        return int(per_gpu * (self.gpus_per_node or 1))

    @property
    def host_fits(self) -> bool | None:
        """Offloaded optimizer state vs the node's host memory (None when unknown or not offloading)."""
        if self.host_bytes_per_node is None or self.host_capacity_bytes_per_node is None:
            return None
        return self.host_bytes_per_node <= self.host_capacity_bytes_per_node

    def to_dict(self) -> dict:
        return {
            "peak_bytes": self.peak_bytes,
            "peak_stage": self.peak_stage.stage,
            "capacity_bytes": self.capacity_bytes,
            "headroom_fraction": self.headroom_fraction,
            "fits": self.fits,
            "verdict": self.verdict,
            "host_bytes_per_node": self.host_bytes_per_node,
            "host_capacity_bytes_per_node": self.host_capacity_bytes_per_node,
            "host_fits": self.host_fits,
            "stages": [st.to_dict() for st in self.stages],
            "overheads": self.overheads.to_dict(),
            "assumptions": list(self.assumptions),
        }


# ---------------------------------------------------------------------------------------------


def _need(s: Scenario) -> None:
    missing = []
    if s.model is None or s.model.num_layers is None or s.model.hidden_size is None:
        missing.append("model")
    if s.training.seq_length is None:
        missing.append("training.seq_length")
    if not s.num_gpus:
        missing.append("system.num_gpus")
    if missing:
        raise InputError(missing[0], None, "a value: the memory estimate needs " + ", ".join(missing))


def _num_microbatches(s: Scenario) -> int | None:
    t = s.training
    if t.global_batch_size is None or s.dp is None:
        return None
    mbs = t.micro_batch_size or 1
    return max(1, t.global_batch_size // (mbs * s.dp))


def _fp8_cache_bytes_per_param(precision: str, fp8_param_gather: bool) -> float:
    """Bytes per GEMM weight that TE keeps as quantized copies during a step (row-wise for fprop,
    transposed / column-wise for dgrad): Hopper FP8 recipes 1 + 1 (the row-wise copy is the weight
    itself with FP8 parameter gather); MXFP8 (1 + 1/32) per copy; NVFP4 (0.5 + 1/16) per copy."""
    if precision in ("fp8-tensorwise", "fp8-delayed", "fp8-blockwise"):
        return 1.0 if fp8_param_gather else 2.0
    if precision == "mxfp8":
        return (1 + 1 / 32) * (1 if fp8_param_gather else 2)
    if precision == "nvfp4":
        return (0.5 + 1 / 16) * 2
    return 0.0


def estimate_memory(s: Scenario) -> MemoryEstimate:
    """Peak memory per GPU for every pipeline stage of a resolved scenario.

    Raises:
        InputError: when the model, sequence length or world size is missing, or DP/EDP is not an
            integer (``moeplan check`` names the broken rule).
    """
    _need(s)
    m, lay, t = s.model, s.layout, s.training
    assumptions: list[str] = []
    if not s.folds:
        raise InputError(
            "system.num_gpus", s.num_gpus, "a world size divisible by TP·PP·CP and ETP·EP·PP (run `moeplan check`)"
        )
    bridge = s.framework == "megatron-bridge"
    mbs = t.micro_batch_size or 1
    if t.micro_batch_size is None:
        assumptions.append("micro_batch_size unset: 1")
    n_mb = _num_microbatches(s)
    if n_mb is None:
        assumptions.append("global_batch_size unset: the pipeline is assumed full (enough microbatches)")

    # ---- pipeline split ---------------------------------------------------------------------
    plan = stage_plan(s, allow_balanced=True)
    if plan is None:
        raise InputError(
            "pipeline_model_parallel_layout",
            lay.pipeline_model_parallel_layout,
            "a layout that parses and matches the model (run `moeplan check`)",
        )
    if min(len(plan.rank_layers(r)) for r in range(s.pp)) == 0 and stage_plan(s) is None:
        raise InputError(
            "pipeline_model_parallel_size",
            s.pp,
            f"a pipeline that gives every rank layers: "
            f"{m.num_layers} layers over PP {s.pp}{' × VPP ' + str(s.vpp) if s.vpp > 1 else ''} "
            "leaves ranks empty",
        )
    if stage_plan(s) is None:
        assumptions.append(
            f"{m.num_layers} layers do not split as given over PP {s.pp}"
            f"{' × VPP ' + str(s.vpp) if s.vpp > 1 else ''}: estimated with a near-even split "
            "(set pipeline_model_parallel_layout or uneven stages to be exact)"
        )
    stages_p = stage_params(s, allow_balanced=True)

    # ---- bytes per parameter ----------------------------------------------------------------
    pao = bool(lay.use_precision_aware_optimizer)
    if lay.use_megatron_fsdp:
        strategy_ = lay.data_parallel_sharding_strategy or "optim_grads_params"
        dist = strategy_ != "no_shard"
    else:
        dist = bool(lay.use_distributed_optimizer)
    g32 = lay.grad_reduce_in_fp32 if lay.grad_reduce_in_fp32 is not None else True
    if lay.grad_reduce_in_fp32 is None:
        assumptions.append("grad_reduce_in_fp32 unset: true (fp32 main grads, Bridge bf16_mixed / Megatron-LM bf16)")
    grad_b = 4.0 if g32 else 2.0
    if pao and lay.main_grads_dtype == "bf16":
        grad_b = 2.0
    m_b = _DTYPE_BYTES[lay.exp_avg_dtype or "fp32"] if pao else 4
    v_b = _DTYPE_BYTES[lay.exp_avg_sq_dtype or "fp32"] if pao else 4
    remainders = (
        pao
        and (lay.store_param_remainders is not False)
        and (lay.main_params_dtype or "fp32") == "fp32"
        and not lay.optimizer_cpu_offload
    )
    master_b = 2.0 if remainders else 4.0
    opt_b = master_b + m_b + v_b
    off = lay.optimizer_offload_fraction or 0.0 if lay.optimizer_cpu_offload else 0.0
    inst = lay.num_distributed_optimizer_instances
    d_dense = (s.dp * s.cp) // inst if dist else 1
    d_exp = max(1, (s.edp or 1) // (inst if inst > 1 and (s.edp or 1) % inst == 0 else 1)) if dist else 1
    fsdp = lay.use_megatron_fsdp
    strategy = lay.data_parallel_sharding_strategy or ("optim_grads_params" if fsdp else None)
    if fsdp and lay.data_parallel_sharding_strategy is None:
        assumptions.append(
            "data_parallel_sharding_strategy unset with Megatron-FSDP: optim_grads_params "
            "(what Bridge's --use_megatron_fsdp sets)"
        )
    shard_params = fsdp and strategy == "optim_grads_params"
    shard_grads = fsdp and strategy in ("optim_grads", "optim_grads_params")
    fp8_pg = lay.fp8_param_gather
    cache_b = _fp8_cache_bytes_per_param(t.precision, fp8_pg)

    # ---- activation context -----------------------------------------------------------------
    is_fp8 = t.precision != "bf16"
    backend = lay.attention_backend or "auto"
    hd = lay.hidden_dropout if lay.hidden_dropout is not None else 0.0
    ad = lay.attention_dropout if lay.attention_dropout is not None else 0.0
    if lay.hidden_dropout is None and lay.attention_dropout is None:
        assumptions.append("hidden/attention dropout unset: 0 (as the HF configs and Bridge providers set)")
    if lay.moe_router_force_load_balancing or not m.is_moe:
        route = 1.0
    elif lay.moe_expert_capacity_factor is not None and lay.moe_expert_capacity_factor >= 0:
        route = (
            lay.moe_expert_capacity_factor
            if lay.moe_pad_expert_input_to_capacity
            else min(
                lay.moe_expert_capacity_factor,
                s.input.assumptions.routing_imbalance_factor or DEFAULT_ROUTING_IMBALANCE,
            )
        )
    else:
        route = s.input.assumptions.routing_imbalance_factor or DEFAULT_ROUTING_IMBALANCE
        if s.input.assumptions.routing_imbalance_factor is None:
            assumptions.append(
                f"dropless routing without forced balance: busiest expert rank gets {route}× the "
                "mean tokens (assumptions.routing_imbalance_factor)"
            )
    if lay.moe_expert_rank_capacity_factor is not None and m.is_moe:
        # HybridEP / NCCL-EP drop the tokens over the per-rank budget: the busiest rank holds at most this
        route = min(route, lay.moe_expert_rank_capacity_factor)
    seq_local = t.seq_length / s.cp
    ctx = ActContext(
        tokens=mbs * seq_local,
        seq_local=seq_local,
        micro_batch_size=mbs,
        tp=s.tp,
        sp=s.sp,
        etp=s.etp,
        act_bytes=2.0,
        lin_in_bytes=1.0 if is_fp8 else 2.0,
        hidden_dropout=hd,
        attention_dropout=ad,
        unfused_attention=backend == "unfused",
        routing_factor=route,
        fp8_attention=lay.fp8_dot_product_attention and is_fp8,
    )
    gran = lay.recompute_granularity
    modules = (
        frozenset(lay.recompute_modules if lay.recompute_modules is not None else ["core_attn"])
        if gran == "selective"
        else frozenset()
    )
    fused_ce = lay.cross_entropy_loss_fusion if lay.cross_entropy_loss_fusion is not None else bridge
    if lay.cross_entropy_loss_fusion is None:
        assumptions.append(f"cross_entropy_loss_fusion unset: {fused_ce} ({s.framework} default)")
    vpad = padded_vocab_size(m.vocab_size, s.tp)
    ep_overlap = lay.overlap_moe_expert_parallel_comm

    ov = resolve_overheads(
        s.input.overheads.model_dump(),
        "expandable_segments:true" in s.environment.get("PYTORCH_CUDA_ALLOC_CONF", "").lower(),
    )
    stages = []
    for sp_ in stages_p:
        stages.append(
            _stage(
                s,
                sp_,
                plan,
                ctx,
                modules,
                fused_ce,
                vpad,
                n_mb,
                ep_overlap,
                ov,
                dict(
                    grad_b=grad_b,
                    opt_b=opt_b,
                    off=off,
                    d_dense=d_dense,
                    d_exp=d_exp,
                    shard_params=shard_params,
                    shard_grads=shard_grads,
                    fp8_pg=fp8_pg,
                    cache_b=cache_b,
                    m_b=m_b,
                    v_b=v_b,
                ),
            )
        )
    cap = s.gpu.usable_hbm_bytes if s.gpu else None
    host_cap = None
    if s.gpu is not None and s.gpu.host_mem_per_gpu_gb and s.gpus_per_node:
        host_cap = int(s.gpu.host_mem_per_gpu_gb * 1e9 * s.gpus_per_node)
    if m.vision is not None:
        from moeplan.model.vision import vision_cost

        vc = vision_cost(s)
        if vc is not None and vc.assumed:
            assumptions.append(
                "no workload: the vision tower is costed for a planning mix (half the sequence image tokens); "
                "give workload: (moeplan vlm-stats) for your data"
            )
    return MemoryEstimate(stages, cap, s.gpus_per_node, host_cap, ov, assumptions)


def _stage(s, sp_: StageParams, plan, ctx, modules, fused_ce, vpad, n_mb, ep_overlap, ov: Overheads, b) -> StageMemory:
    m, lay = s.model, s.layout
    p = sp_.params
    kinds = p.by_kind
    gemm = sum(kinds.get(k, 0) for k in _GEMM_KINDS)
    dense, expert = p.dense, p.expert
    # frozen parts (Bridge freeze_vision_model / freeze_language_model) keep no grads or optimizer
    vis = kinds.get("vision", 0)
    t_dense, t_expert = dense, expert
    if s.training.freeze_vision_model:
        t_dense -= vis
    if s.training.freeze_language_model:
        t_dense, t_expert = (vis if not s.training.freeze_vision_model else 0), 0
    t_total = t_dense + t_expert
    items: dict[str, dict[str, float]] = {"weights": {}, "grads": {}, "optimizer": {}, "activations": {}, "other": {}}
    W, G, OPT, A, X = (items[k] for k in ("weights", "grads", "optimizer", "activations", "other"))

    # weights and grads
    wb_gemm = 1.0 if b["fp8_pg"] else 2.0
    w_total = gemm * wb_gemm + (p.total - gemm) * 2.0
    if b["shard_params"]:
        W["params_sharded"] = dense * 2.0 / b["d_dense"] + expert * 2.0 / b["d_exp"]
        per_layer = w_total / max(1, len(sp_.layers))
        W["fsdp_gathered_layers"] = 2 * per_layer  # double-buffered all-gather of the next layer
    else:
        # the vision tower's weights listed apart (bf16; first stage of a VLM)
        W["params"] = w_total - 2.0 * vis
        if vis:
            W["vision_tower_params"] = 2.0 * vis
    if b["cache_b"]:
        if b["shard_params"]:
            # Megatron-FSDP shards the FP8 weights too; full copies exist only for the gathered layers
            W["fp8_weight_copies"] = (
                gemm * b["cache_b"] / b["d_dense"] + 2 * gemm / max(1, len(sp_.layers)) * b["cache_b"]
            )
        else:
            W["fp8_weight_copies"] = gemm * b["cache_b"]
    if b["shard_grads"]:
        G["main_grads_sharded"] = t_dense * b["grad_b"] / b["d_dense"] + t_expert * b["grad_b"] / b["d_exp"]
        G["fsdp_reduce_buffer"] = t_total * b["grad_b"] / max(1, len(sp_.layers))
    else:
        G["main_grads"] = t_total * b["grad_b"]
    opt_dense = t_dense * b["opt_b"] / b["d_dense"]
    opt_exp = t_expert * b["opt_b"] / b["d_exp"]
    keep = 1.0 - b["off"]
    OPT["dense_state"] = opt_dense * keep
    OPT["expert_state"] = opt_exp * keep
    host = (opt_dense + opt_exp) * b["off"]
    if b["off"]:
        # the CPU optimizer also holds fp32 gradients of its shard
        host += (t_dense / b["d_dense"] + t_expert / b["d_exp"]) * 4.0 * b["off"]

    # activations
    layers = sp_.layers
    per_mb_layers = 0.0
    offloaded_per_mb = 0.0
    worst_offloaded = 0.0
    off_items: set[str] = set()
    if lay.fine_grained_activation_offloading:
        for mod in lay.offload_modules or []:
            off_items.update(OFFLOAD_ITEMS.get(mod, ()))
    layer_offload = lay.cpu_offloading and s.pp == 1
    n_layer_off = lay.cpu_offloading_num_layers or 0
    worst_layer_full = 0.0
    gran = lay.recompute_granularity
    n_rc = lay.recompute_num_layers or 1
    rank_chunks = plan.layers[sp_.stage]
    chunk_info = []
    kinds_all = m.attention_kinds or ("full",) * m.num_layers
    moe_all = m.moe_layers or (False,) * m.num_layers
    by_kind: dict[tuple, tuple[dict, float, float]] = {}
    for vp, chunk in enumerate(rank_chunks):
        before = per_mb_layers
        for pos, li in enumerate(chunk):
            lk = (kinds_all[li], bool(moe_all[li]))
            if lk not in by_kind:
                k_, r_ = layer_activations(m, li, ctx, modules)
                ks = sum(k_.values())
                by_kind[lk] = (k_, ks, ks + sum(r_.values()))
            kept, kept_sum, full = by_kind[lk]
            worst_layer_full = max(worst_layer_full, full)
            if gran == "full":
                recomputed = pos < n_rc if lay.recompute_method == "block" else True
                if recomputed:
                    if lay.recompute_method == "block" or pos % n_rc == 0:
                        per_mb_layers += layer_input_bytes(m, ctx, lay.distribute_saved_activations)
                    continue
                per_mb_layers += full
            else:
                moved = sum(v for k, v in kept.items() if k in off_items) if off_items else 0.0
                if layer_offload and li < n_layer_off:
                    moved = kept_sum
                per_mb_layers += kept_sum - moved
                offloaded_per_mb += moved
                worst_offloaded = max(worst_offloaded, moved)
        chunk_info.append((vp, len(chunk), per_mb_layers - before))
    inflight = inflight_microbatches(s.pp, sp_.stage, s.vpp, n_mb, lay.microbatch_group_size_per_vp_stage)
    A["decoder_layers"] = per_mb_layers * inflight
    if sp_.embedding and m.vision is not None:
        from moeplan.model.vision import vision_cost

        vc = vision_cost(s)
        if vc is not None:
            # ViT activations of every in-flight microbatch on the first stage (none kept when frozen),
            # and one ViT layer's working set in backward
            A["vision_tower"] = vc.activation_bytes * inflight
            per_layer = 2 * (9 * m.vision.hidden_size + 2 * m.vision.intermediate_size) * vc.patches / s.tp
            X["vision_working_set"] = per_layer
    if ep_overlap and layers:
        # combined 1F1B (megatron/core/pipeline_parallel/combined_1f1b.py) interleaves the forward of
        # one microbatch with the backward of another layer by layer: about one more layer is alive
        A["ep_overlap_extra_layer"] = per_mb_layers / len(layers)
    if offloaded_per_mb:
        # offloaded tensors live on the host; two layers' worth are in flight (being copied out or back)
        A["offload_staging"] = 2 * worst_offloaded
        host += offloaded_per_mb * inflight
    if sp_.output_layer:
        for k, v in output_layer_activations(m, ctx, vpad, fused_ce).items():
            A[k] = v
    if sp_.mtp_layers:
        mtp = mtp_activations(m, ctx, vpad, fused_ce, modules)
        A["mtp"] = sum(mtp.values()) * sp_.mtp_layers

    # transient working set: one layer (or one recompute chunk) re-materialized in backward, and
    # the logits gradient on the last stage
    chunk_layers = n_rc if (gran == "full" and lay.recompute_method != "block") else 1
    working = worst_layer_full * chunk_layers
    if sp_.output_layer:
        # fused cross entropy writes the gradient into the logits buffer; the unfused one makes a new
        # bf16 gradient from its fp32 softmax
        logits_grad = 0.0 if fused_ce else ctx.tokens * vpad / ctx.tp * ctx.act_bytes
        working = max(working, logits_grad)
    X["backward_working_set"] = working
    if s.cp > 1:
        # p2p ring: K/V blocks in flight (send + receive) per attention layer, bf16
        if m.multi_latent_attention:
            kv_width = m.num_attention_heads * (m.qk_head_dim + m.qk_pos_emb_head_dim + m.v_head_dim)
        else:
            kv_width = 2 * (m.num_query_groups or 0) * (m.kv_channels or 0)
        X["cp_kv_buffers"] = 2 * ctx.tokens * kv_width / s.tp * ctx.act_bytes
    # non-tensor memory
    X["cuda_context"] = ov.cuda_context_gib * GIB_BYTES
    X["nccl_buffers"] = ov.nccl_buffers_gib * GIB_BYTES
    X["workspaces"] = ov.workspaces_gib * GIB_BYTES
    if lay.moe_token_dispatcher_type == "flex" and s.ep * s.etp > 1:
        backend = lay.moe_flex_dispatcher_backend or "deepep"
        X[f"{backend}_buffers"] = (
            ov.hybridep_buffers_gib if backend == "hybridep" else ov.deepep_buffers_gib
        ) * GIB_BYTES
    if lay.tp_comm_overlap and s.tp > 1:
        X["tp_overlap_userbuffers"] = 2 * ctx.tokens * m.hidden_size * ctx.act_bytes
    if s.graphs_on():
        act = sum(A.values())
        X["cuda_graph_pool"] = ov.cuda_graph_pool_fraction * act
        if lay.cuda_graph_impl != "full_iteration":
            static = 2 * ctx.seq_tokens * m.hidden_size * ctx.act_bytes  # captured input + output per layer
            X["cuda_graph_static_buffers"] = static * len(layers) * max(1.0, inflight)
    dynamic = sum(A.values()) + working
    # a full-iteration CUDA graph allocates the whole step from its private pool, laid out once at
    # capture: its pool overhead stands in for fragmentation
    frag = 0.0 if lay.cuda_graph_impl == "full_iteration" else ov.fragmentation_fraction
    X["allocator_fragmentation"] = frag * dynamic
    return StageMemory(sp_.stage, len(layers), inflight, items, host_bytes=host, chunks=tuple(chunk_info))


def headroom_gib(est: MemoryEstimate) -> float | None:
    """Usable HBM minus the peak, GiB (negative when it does not fit)."""
    if est.capacity_bytes is None:
        return None
    return (est.capacity_bytes - est.peak_bytes) / GIB_BYTES


__all__ = ["MemoryEstimate", "StageMemory", "estimate_memory", "headroom_gib"]
