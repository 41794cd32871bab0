"""The layout search space of the planner: parallel sizes, pipeline splits, recompute ladder and the
per-candidate knobs (dispatcher, CUDA graph scope, CP communication type).

Everything here is cheap integer arithmetic; legality beyond divisibility is left to the rules
(:func:`moeplan.validate`), so the planner and ``moeplan check`` can never disagree.
Sources: world-size folding ``PP·max(TP·CP, EP·ETP)`` and the pipeline split options follow
``megatron_facts.md`` §4.3–4.4 (vendored in ``tests/data/reference``; Megatron-Core ``parallel_state.initialize_model_parallel``,
``transformer_block.get_num_layers_to_build``, ``PipelineParallelLayerLayout``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from moeplan.i18n.messages import Message, msg
from moeplan.inputs.layout import PARALLEL_DIMS
from moeplan.inputs.model_spec import ModelSpec
from moeplan.inputs.system import GpuSpec
from moeplan.model.executed_flops import arch_family

if TYPE_CHECKING:
    from moeplan.inputs.resolved import Scenario

POW2 = (1, 2, 4, 8, 16, 32, 64, 128, 256)
#: the layout keys a recompute-ladder rung sets
RECOMPUTE_KEYS = ("recompute_granularity", "recompute_modules", "recompute_method", "recompute_num_layers")
OPTIMIZER_OFFLOAD_KEYS = ("optimizer_cpu_offload", "optimizer_offload_fraction")
#: layout-defining keys: the parallel sizes, the layout family (3D or Megatron-FSDP, with its sharding)
#: and the pipeline split. The planner chooses them for every candidate (or holds what the request
#: states), so a recipe fill (``recipe_defaults: mbridge-perf``) never sets them in a candidate: a
#: 64-GPU Megatron-FSDP recipe row must not turn a 3D candidate of the same sizes into FSDP
#: (docs/model/recipe_fills.md, "In the planner").
LAYOUT_KEYS = frozenset(
    {
        *PARALLEL_DIMS.values(),
        "sequence_parallel",
        "use_megatron_fsdp",
        "use_torch_fsdp2",
        "data_parallel_sharding_strategy",
        "outer_dp_sharding_strategy",
        "num_distributed_optimizer_instances",
        "pipeline_model_parallel_layout",
        "account_for_embedding_in_pipeline_split",
        "account_for_loss_in_pipeline_split",
        "num_layers_in_first_pipeline_stage",
        "num_layers_in_last_pipeline_stage",
    }
)
#: the knobs the planner searches per candidate: the recompute / optimizer offload rung, the token
#: dispatcher, the CUDA graphs (with the full-iteration graph's static-budget expert path), the CP
#: exchange and the EP overlap; each candidate's ``recompute`` and ``knobs`` labels name them
KNOB_KEYS = frozenset(
    {
        *RECOMPUTE_KEYS,
        *OPTIMIZER_OFFLOAD_KEYS,
        "moe_token_dispatcher_type",
        "moe_flex_dispatcher_backend",
        "cuda_graph_impl",
        "cuda_graph_scope",
        "cuda_graph_modules",
        "moe_expert_rank_capacity_factor",
        "moe_paged_stash",
        "use_transformer_engine_op_fuser",
        "cp_comm_type",
        "overlap_moe_expert_parallel_comm",
        # needs the EP overlap (rule moe.ep_overlap_requirements): a recipe row sets both, so the fill
        # is dropped with the overlap it belongs to, or a candidate without the overlap breaks the rule
        "delay_wgrad_compute",
    }
)
#: every key the planner decides per candidate: a recipe fill never sets one in a candidate (the
#: candidate's labels would no longer say what was estimated: a ``recompute none`` rung estimated
#: with ``_deepseek_v3_common``'s selective recompute, a 3D label estimated as FSDP)
PLANNER_KEYS = LAYOUT_KEYS | KNOB_KEYS


def with_sections(data: dict) -> dict:
    """A copy of a scenario mapping whose ``layout`` / ``training`` / ``system`` are mappings (a
    section written as ``null`` counts as empty)."""
    out = dict(data)
    for sec in ("layout", "training", "system"):
        if out.get(sec) is None:
            out[sec] = {}
    return out


#: tokens per CP rank below which more CP is not searched (attention kernels fall far below peak and
#: the ring exchange cannot hide behind them; the guidance's floor is ~4K tokens per CP rank, we go
#: one power of two lower so the search can show why)
MIN_TOKENS_PER_CP_RANK = 2048
#: longest pipeline searched: deeper pipelines only add bubble once memory fits
MAX_PP = 32


@dataclass(frozen=True, order=True)
class Parallel:
    """One parallel layout (sizes only)."""

    tp: int
    pp: int
    cp: int
    ep: int
    etp: int
    vpp: int = 1
    fsdp: bool = False

    @classmethod
    def of(cls, s: Scenario) -> Parallel:
        """The sizes and family a resolved scenario runs (what its estimates were computed for)."""
        return cls(s.tp, s.pp, s.cp, s.ep, s.etp, s.vpp, bool(s.layout.use_megatron_fsdp))

    def dp(self, world: int) -> int:
        """Data-parallel size at ``world`` GPUs: W / (TP·PP·CP)."""
        return world // (self.tp * self.pp * self.cp)

    def edp(self, world: int) -> int:
        """Expert data-parallel size at ``world`` GPUs: W / (EP·ETP·PP)."""
        return world // (self.ep * self.etp * self.pp)

    def keys(self) -> dict:
        """Megatron key names of these sizes (VPP omitted when 1, SP on with TP > 1)."""
        d: dict[str, int | bool | str] = {
            "tensor_model_parallel_size": self.tp,
            "pipeline_model_parallel_size": self.pp,
            "context_parallel_size": self.cp,
            "expert_model_parallel_size": self.ep,
            "expert_tensor_parallel_size": self.etp,
            "sequence_parallel": self.tp > 1,
        }
        if self.vpp > 1:
            d["virtual_pipeline_model_parallel_size"] = self.vpp
        if self.fsdp:
            d["use_megatron_fsdp"] = True
            d["data_parallel_sharding_strategy"] = "optim_grads_params"
        return d

    def label(self) -> str:
        """``[FSDP ]TP<t> PP<p>[ VPP<v>] CP<c> EP<e> ETP<x>``."""
        v = f" VPP{self.vpp}" if self.vpp > 1 else ""
        f = "FSDP " if self.fsdp else ""
        return f"{f}TP{self.tp} PP{self.pp}{v} CP{self.cp} EP{self.ep} ETP{self.etp}"


def _divisors_pow2(n: int, limit: int) -> list[int]:
    return [p for p in POW2 if p <= limit and n % p == 0]


def parallel_candidates(
    m: ModelSpec,
    gpu: GpuSpec,
    world: int,
    seq_length: int,
    fixed: dict[str, int],
    min_dp: int = 1,
    families: tuple[str, ...] = ("3d",),
) -> Iterator[Parallel]:
    """Every (TP, PP, CP, EP, ETP) whose sizes fold into ``world`` (VPP = 1; the refinement step adds
    VPP), honouring ``fixed`` Megatron keys. Deterministic order.

    TP: powers of two within the NVLink domain (≤ 8: TP crosses every layer's GEMMs twice). CP: powers
    of two down to :data:`MIN_TOKENS_PER_CP_RANK` tokens per rank. PP: 1..32 and ≤ layers. EP: powers of
    two dividing the expert count. ETP: 1, or TP when TP > 1 (Megatron Bridge's two usual choices).
    Folding: TP·CP·PP and EP·ETP·PP both divide the world. ``families``: ``3d`` and/or ``fsdp``
    (Megatron-FSDP with EP inside, TP = PP = 1), searched for VLMs as the guidance contrasts them.
    """
    tp_max = min(8, gpu.scaleup_domain_gpus)
    tps = [fixed["tensor_model_parallel_size"]] if "tensor_model_parallel_size" in fixed else POW2_upto(tp_max)
    cps = (
        [fixed["context_parallel_size"]]
        if "context_parallel_size" in fixed
        else [c for c in POW2 if c == 1 or seq_length / c >= MIN_TOKENS_PER_CP_RANK]
    )
    layers = m.num_layers or 1
    pps = (
        [fixed["pipeline_model_parallel_size"]]
        if "pipeline_model_parallel_size" in fixed
        else [p for p in range(1, min(MAX_PP, layers) + 1) if world % p == 0]
    )
    experts = m.num_moe_experts or 0
    if "expert_model_parallel_size" in fixed:
        eps = [fixed["expert_model_parallel_size"]]
    elif experts:
        eps = _divisors_pow2(experts, experts)
    else:
        eps = [1]
    # Megatron-FSDP (optim_grads_params) with EP inside: TP 1, PP 1, the data-parallel group shards
    # parameters, gradients and optimizer state
    fsdp_ok = (tps == [1] or "tensor_model_parallel_size" not in fixed) and (
        pps == [1] or "pipeline_model_parallel_size" not in fixed
    )
    if "fsdp" in families and fsdp_ok:
        etp_f = fixed.get("expert_tensor_parallel_size", 1)
        for cp in cps:
            for ep in eps:
                if world % cp or world % (ep * etp_f) or world // cp < min_dp:
                    continue
                yield Parallel(1, 1, cp, ep, etp_f, 1, True)
    if "3d" not in families:
        return
    for tp in tps:
        etps = (
            [fixed["expert_tensor_parallel_size"]]
            if "expert_tensor_parallel_size" in fixed
            else ([1, tp] if tp > 1 and experts else [1])
        )
        for pp in pps:
            for cp in cps:
                if world % (tp * cp * pp) or world // (tp * cp * pp) < min_dp:
                    continue
                for ep in eps:
                    for etp in etps:
                        if world % (ep * etp * pp):
                            continue
                        yield Parallel(tp, pp, cp, ep, etp)


def POW2_upto(n: int) -> list[int]:  # noqa: N802 - reads as a constant
    """Powers of two from 1 up to ``n``."""
    return [p for p in POW2 if p <= n]


#: the ladder's rungs without modules as messages: (``recompute full``, ``full``)
_RUNGS = {
    "none": (lambda: msg("plan.recompute_none"), lambda: msg("plan.rung_none")),
    "full": (lambda: msg("plan.recompute_full"), lambda: msg("plan.rung_full")),
    "selective": (lambda: msg("plan.recompute_selective"), lambda: msg("plan.rung_selective")),
}


def rung_text(rung: str, prefix: bool = True) -> Message:
    """A recompute rung as the ladder names it (``none``, ``full``, ``selective moe_act``, each maybe
    ``+ optimizer offload 0.5``), as a message: ``recompute full`` with ``prefix``, ``full`` without."""
    base, sep, fraction = rung.partition(" + optimizer offload ")
    inner, given, _ = base.partition(" (given)")
    kind, _, modules = inner.partition(" ")
    out: Message
    if kind == "selective" and modules:
        out = (
            msg("plan.recompute_selective_modules", modules=modules)
            if prefix
            else msg("plan.rung_selective_modules", modules=modules)
        )
    elif kind in _RUNGS and not modules:
        out = _RUNGS[kind][0 if prefix else 1]()
    else:  # a granularity the ladder does not name: kept as written
        out = msg("plan.recompute_other", rung=inner) if prefix else msg("plan.rung_other", rung=inner)
    out = msg("plan.rung_given", rung=out) if given else out
    return msg("plan.with_optimizer_offload", rung=out, fraction=fraction) if sep else out


def recompute_ladder(m: ModelSpec) -> list[tuple[str, dict]]:
    """Memory-saving steps in order of increasing time cost, each a full set of layout keys.

    Selective modules first, cheapest recompute per GiB saved first (``moe_act`` and ``layernorm``
    recompute element-wise work only; ``mla_up_proj`` one small GEMM on MLA models; whole ``moe`` the
    expert GEMMs and exchange), then full recompute of every layer, then full recompute with the
    optimizer state offloaded to host (half, then all). Attention core recompute is not offered:
    flash attention keeps no score matrix, so it saves little at much cost (guidance: long context).
    """
    out: list[tuple[str, dict]] = [("none", {"recompute_granularity": None})]
    mods: list[str] = []
    steps = ["moe_act", "layernorm"] if m.is_moe else ["layernorm"]
    if m.multi_latent_attention:
        steps.append("mla_up_proj")
    steps.append("moe" if m.is_moe else "mlp")
    for mod in steps:
        mods = mods + [mod]
        out.append(
            (
                "selective " + ",".join(mods),
                {"recompute_granularity": "selective", "recompute_modules": list(mods)},
            )
        )
    full = {"recompute_granularity": "full", "recompute_method": "uniform", "recompute_num_layers": 1}
    out.append(("full", full))
    for frac in (0.5, 1.0):
        out.append(
            (
                f"full + optimizer offload {frac:g}",
                {
                    **full,
                    "optimizer_cpu_offload": True,
                    "optimizer_offload_fraction": frac,
                    "use_precision_aware_optimizer": True,
                },
            )
        )
    return out


def offload_alternatives(m: ModelSpec) -> list[tuple[str, dict]]:
    """Off-ladder rungs for when only full recompute fits: every selective module of the ladder with
    half, then all, of the optimizer state offloaded to the host. Their time cost is not ordered
    against full recompute (it depends on the optimizer-state size against the compute), so the
    search compares them by predicted step time instead of placing them on the ladder."""
    sel = [keys for name, keys in recompute_ladder(m) if name.startswith("selective")][-1]
    return [
        (
            f"selective {','.join(sel['recompute_modules'])} + optimizer offload {frac:g}",
            {
                **sel,
                "optimizer_cpu_offload": True,
                "optimizer_offload_fraction": frac,
                "use_precision_aware_optimizer": True,
            },
        )
        for frac in (0.5, 1.0)
    ]


def dispatcher_options(m: ModelSpec, gpu: GpuSpec, ep: int) -> list[tuple[str, dict]]:
    """Token dispatchers to try for EP > 1: all-to-all always; DeepEP and HybridEP where the GPU
    supports them (flex dispatcher)."""
    if not m.is_moe or ep == 1:
        return [("alltoall", {"moe_token_dispatcher_type": "alltoall"})]
    out = [("alltoall", {"moe_token_dispatcher_type": "alltoall"})]
    if gpu.supports_deepep:
        out.append(("deepep", {"moe_token_dispatcher_type": "flex", "moe_flex_dispatcher_backend": "deepep"}))
    if gpu.supports_hybridep:
        out.append(("hybridep", {"moe_token_dispatcher_type": "flex", "moe_flex_dispatcher_backend": "hybridep"}))
    return out


#: what Megatron needs to capture a dropless MoE step as one graph (Megatron-LM CUDA Graphs guide, "MoE
#: Model Training"): the sync-free expert path (HybridEP with a static per-rank budget and the TE op fuser's
#: fused grouped MLP) and paged stash for the budgeted activations; 1.5 is the budget of NVIDIA's
#: full-iteration recipes (megatron_recipes.md §1.2). An over-budget step reruns eagerly (still dropless).
#: No dataloader attention mask: the static loader would keep a [b, 1, s, s] bool mask per microbatch
#: (megatron/core/full_cuda_graph.py ``StaticBufferLoader``) that causal fused attention never reads.
FULL_ITERATION_MOE = {
    "cuda_graph_impl": "full_iteration",
    "moe_token_dispatcher_type": "flex",
    "moe_flex_dispatcher_backend": "hybridep",
    "moe_expert_rank_capacity_factor": 1.5,
    "use_transformer_engine_op_fuser": True,
    "moe_paged_stash": True,
    "check_for_nan_in_loss": False,
    "create_attention_mask_in_dataloader": False,
}


def graph_options(m: ModelSpec, gpu: GpuSpec | None = None) -> list[tuple[str, dict]]:
    """CUDA graph choices: eager, or Transformer Engine graphs of attention and the MoE router /
    preprocess (the perf recipes' scope), or attention alone (what whole-``moe`` recompute allows);
    for MoE on Blackwell with HybridEP, a full-iteration graph with the static-budget expert path it
    needs (:data:`FULL_ITERATION_MOE`, as NVIDIA's full-iteration recipes run it; the fused grouped
    MLP it relies on is a Blackwell kernel, so Hopper is not offered it; nor are vision-language models,
    whose images change shape from step to step). The rules drop the ones a layout cannot use."""
    out: list[tuple[str, dict]] = [("eager", {"cuda_graph_impl": "none"})]
    scopes = [["attn", "moe_router", "moe_preprocess"], ["attn"]] if m.is_moe else [["attn"]]
    if m.has_mamba:  # a hybrid's Mamba mixers graph with attention (Bridge's Nemotron-3 recipes: attn + mamba)
        scopes = [sc + ["mamba"] for sc in scopes]
    for scope in scopes:
        out.append(("te:" + "+".join(scope), {"cuda_graph_impl": "transformer_engine", "cuda_graph_scope": scope}))
    blackwell_hybridep = gpu is not None and gpu.supports_hybridep and arch_family(gpu) == "Blackwell"
    if m.is_moe and m.vision is None and blackwell_hybridep:
        out.append(("full_iteration", dict(FULL_ITERATION_MOE)))
    return out


def vpp_options(num_layers: int, pp: int) -> list[int]:
    """Virtual stages per PP rank to try: 1, and powers of two leaving ≥ 2 layers per virtual stage."""
    if pp == 1:
        return [1]
    return [v for v in (1, 2, 4, 8) if num_layers / (pp * v) >= 2]


def cp_comm_options(
    cp: int, tp: int = 1, scaleup_domain_gpus: int = 8, head_split: int | None = None
) -> list[tuple[str, dict]]:
    """CP exchange types to try, as (label, layout keys): ``p2p`` (ring, overlapped with attention),
    ``a2a`` (Ulysses, exposed, needs heads per TP rank divisible by CP — the rules say when), and the
    hierarchical ``a2a+p2p`` with the all-to-all inside the NVLink domain: inner group ``a`` the
    largest power of two with ``a·TP`` within the domain, ``a < CP`` and ``a`` dividing ``head_split``
    (the query and KV heads per TP rank's greatest common divisor: Transformer Engine splits both over the
    all-to-all level, rule ``sequence.cp_attention_support``; None: not limited), the ring over ``CP / a``
    (Megatron-Core's ``hierarchical_context_parallel_sizes``, inner group first)."""
    none: dict[str, Any] = {"hierarchical_context_parallel_sizes": None}
    if cp == 1:
        return [("p2p", {"cp_comm_type": "p2p", **none})]
    out: list[tuple[str, dict[str, Any]]] = [
        ("p2p", {"cp_comm_type": "p2p", **none}),
        ("a2a", {"cp_comm_type": "a2a", **none}),
    ]
    inner = 1
    while (
        inner * 2 < cp
        and inner * 2 * tp <= scaleup_domain_gpus
        and cp % (inner * 2) == 0
        and (head_split is None or head_split % (inner * 2) == 0)
    ):
        inner *= 2
    if inner > 1:
        out.append(
            (
                f"a2a+p2p {inner}x{cp // inner}",
                {"cp_comm_type": "a2a+p2p", "hierarchical_context_parallel_sizes": [inner, cp // inner]},
            )
        )
    return out


def ep_overlap_options(m: ModelSpec, ep: int) -> list[tuple[str, dict]]:
    """EP communication overlap (``overlap_moe_expert_parallel_comm``: the combined 1F1B schedule hides
    one microbatch's dispatch/combine behind another's compute, as the published MoE recipes run),
    off or on; the rules reject it where Megatron does (full recompute, whole-``moe`` recompute, PP
    without VPP, ...)."""
    if not m.is_moe or ep == 1:
        return [("off", {"overlap_moe_expert_parallel_comm": None})]
    return [("off", {"overlap_moe_expert_parallel_comm": None}), ("on", {"overlap_moe_expert_parallel_comm": True})]
