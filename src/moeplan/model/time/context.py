"""What every step-time term needs, derived once per scenario.

The numeric policy (routed-token factor, linear-input bytes) comes from :mod:`moeplan.structure.numerics`;
achieved GEMM / attention / HBM rates from :func:`moeplan.model.executed_flops.speeds`; link figures from
:mod:`moeplan.model.hardware`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

from moeplan.errors import InputError
from moeplan.inputs.model_spec import ModelSpec
from moeplan.inputs.resolved import Scenario
from moeplan.inputs.system import GpuSpec
from moeplan.model.activations import OFFLOAD_ITEMS, ActContext
from moeplan.model.constants import TimeConstants
from moeplan.model.executed_flops import Speeds, attention_fraction, speeds, te_attention_kernel
from moeplan.model.hardware import host_link_bytes_per_s
from moeplan.model.vision import VisionCost, vision_cost
from moeplan.structure.numerics import linear_input_bytes, routing
from moeplan.structure.params import padded_vocab_size

#: graph scopes and the share of a layer's launch overhead they remove (attention and router/
#: preprocess are the launch-heavy parts of an MoE layer; ``full_iteration`` removes all; ``mamba``, the
#: Mamba mixers of a hybrid, taken as attention's share: a planning assumption)
GRAPH_SHARE = {"attn": 0.4, "moe_router": 0.2, "moe_preprocess": 0.15, "mlp": 0.3, "moe": 0.3, "mamba": 0.4}


@dataclass(frozen=True)
class CpWidths:
    """Per-token widths (elements, all heads) of the tensors context parallelism moves: ``kv`` the K
    and V blocks of the ring; ``q`` / ``kv`` / ``o`` Q, K+V and the attention output of the
    all-to-all. MLA: Q and K are ``qk_head_dim + qk_pos_emb_head_dim`` wide per head, V and O
    ``v_head_dim``."""

    q: int
    kv: int
    o: int


@dataclass(frozen=True)
class StepContext:
    """Per-scenario quantities of the step-time model (one microbatch on one rank unless stated).

    Attributes:
        s / c: the resolved scenario and the time constants.
        mbs / num_microbatches: micro-batch size (sequences) and microbatches per step per pipeline.
        seq_local / tokens: sequence length per CP rank and tokens of one microbatch there.
        routing_factor: routed tokens on the busiest expert rank / the balanced share.
        speeds: achieved GEMM and attention-peak FLOP/s and HBM bytes/s.
        attention_rate_flops_per_s: achieved attention FLOP/s for the rank's S/CP queries (the p2p
            ring's kernel length; :func:`attention_rate` for the other CP exchanges).
        fp8_attention: attention runs in FP8 (``fp8_dot_product_attention`` under an FP8 recipe).
        attention_kernel: the kernel Transformer Engine trains the attention heads with (``cudnn`` or
            ``flash2``: :func:`attention_kernel`).
        act: the activation context (what a layer saves for backward).
        recompute_modules / recompute_granularity / recompute_num_layers: the recompute settings.
        graphs / graph_share: ``cuda_graph_impl`` (``none`` when unset) and the share of the launch
            overhead its scopes remove.
        dispatcher: the flex backend (``deepep``, ``hybridep``), ``allgather``, else ``alltoall``
            (:func:`_dispatcher`).
        cp_widths / cp_comm_type: what CP moves and how (``p2p`` when unset or a per-layer list).
        padded_vocab: the vocabulary padded for TP.
        offload_items: saved tensors moved to the host by fine-grained activation offload.
        host_link_bytes_per_s: the GPU ↔ host link.
        ep_overlap: EP A2A overlap is on and has a second microbatch to pair with.
        ep_paired_share: the share of the critical stage's microbatch chunks whose exchange runs
            paired with another's compute under EP A2A overlap (:func:`ep_paired_share`; 0 without it).
        lm_factor: the share of the language model's GEMM work done (2/3 or 1/3 when frozen).
        vision: the vision tower's work (None without one).
    """

    s: Scenario
    c: TimeConstants
    mbs: int
    num_microbatches: int
    seq_local: float
    tokens: float
    routing_factor: float
    speeds: Speeds
    attention_rate_flops_per_s: float
    fp8_attention: bool
    attention_kernel: str
    act: ActContext
    recompute_modules: frozenset[str]
    recompute_granularity: str | None
    recompute_num_layers: int
    graphs: str
    graph_share: float
    dispatcher: str
    cp_widths: CpWidths
    cp_comm_type: str
    padded_vocab: int
    offload_items: frozenset[str]
    host_link_bytes_per_s: float
    ep_overlap: bool
    ep_paired_share: float
    lm_factor: float
    vision: VisionCost | None

    # what require_step_inputs() checked, with the types it guarantees (the scenario's own are optional)
    @property
    def model(self) -> ModelSpec:
        """The scenario's model, complete."""
        return cast(ModelSpec, self.s.model)

    @property
    def gpu(self) -> GpuSpec:
        """The scenario's GPU."""
        return cast(GpuSpec, self.s.gpu)

    @property
    def num_gpus(self) -> int:
        """The world size."""
        return cast(int, self.s.num_gpus)

    @property
    def dp(self) -> int:
        """The data-parallel size (the world size folds)."""
        return cast(int, self.s.dp)

    @property
    def seq_length(self) -> int:
        """The training sequence length."""
        return cast(int, self.s.training.seq_length)

    @property
    def global_batch_size(self) -> int:
        """The global batch size (sequences)."""
        return cast(int, self.s.training.global_batch_size)


def require_step_inputs(s: Scenario) -> None:
    """Refuse a scenario the step-time model cannot estimate.

    Raises:
        InputError: missing model, GPU, world size, sequence length or global batch size, a GPU
            without a bf16 dense peak, or a world size that does not fold (``moeplan check`` says why).
    """
    t, gpu = s.training, s.gpu
    needs = (
        ("model", s.model),
        ("system.gpu", gpu),
        ("system.num_gpus", s.num_gpus),
        ("training.seq_length", t.seq_length),
        ("training.global_batch_size", t.global_batch_size),
    )
    missing = [name for name, value in needs if value is None]
    if missing or s.model is None or gpu is None:  # (both are in `missing` when None: this narrows them)
        raise InputError(missing[0], None, "a value: the step-time estimate needs " + ", ".join(missing))
    if not isinstance(s.model, ModelSpec):
        s.model.completed()  # raises, naming the fields the model lacks
    if not gpu.peak_dense_tflops.get("bf16"):
        raise InputError(
            "system.gpu.peak_dense_tflops",
            dict(gpu.peak_dense_tflops),
            "a bf16 dense peak in TFLOP/s (and fp8/fp4 for those precisions): the step-time estimate needs it",
        )
    if not s.folds:
        raise InputError("system.num_gpus", s.num_gpus, "a world size divisible by TP·PP·CP and ETP·EP·PP")


def cp_widths(s: Scenario) -> CpWidths:
    """The per-token widths context parallelism moves (see :class:`CpWidths`)."""
    m = s.complete_model
    if m.has_dsa:
        # DSAttention's allgather CP (megatron-core core_v0.19.0+ dsa.py): every rank gathers the absorbed
        # MLA's one latent key row (kv_lora + rope) and the indexer's key (head_dim), whole on each TP
        # rank (not split by heads): × TP against the exchange formulas' division by TP
        nh, kv = m.num_attention_heads, m.given("kv_lora_rank")
        row = kv + m.given("qk_pos_emb_head_dim")
        return CpWidths(q=nh * row, kv=(row + m.given("dsa_indexer_head_dim")) * s.tp, o=nh * kv)
    if m.is_dsv4:
        # DeepSeek-V4 (megatron-core dev csa.py): one joint KV head of v_head_dim per token, shared by every
        # query head (its compressed rows are a fraction more); queries and output nh · v
        nh, vd = m.num_attention_heads, m.given("v_head_dim")
        return CpWidths(q=nh * vd, kv=vd * s.tp, o=nh * vd)
    if m.multi_latent_attention:
        nh, vd = m.num_attention_heads, m.given("v_head_dim")
        q = nh * (m.given("qk_head_dim") + m.given("qk_pos_emb_head_dim"))
        return CpWidths(q=q, kv=q + nh * vd, o=nh * vd)
    d = m.kv_channels or 128
    return CpWidths(
        q=d * m.num_attention_heads,
        kv=2 * d * (m.num_query_groups or m.num_attention_heads),
        o=d * m.num_attention_heads,
    )


def layer_cp_comm_type(s: Scenario, layer: int) -> str:
    """The CP exchange of decoder layer ``layer``: ``cp_comm_type`` (one for all layers or one per
    layer), ``p2p`` when unset (Megatron's default)."""
    ct = s.layout.cp_comm_type
    if isinstance(ct, list):
        return ct[layer] if layer < len(ct) else "p2p"
    return ct or "p2p"


def hierarchical_a2a_size(s: Scenario) -> int:
    """The all-to-all (inner, first) group of ``hierarchical_context_parallel_sizes``; CP itself when
    unset (the rules refuse a2a+p2p without sizes)."""
    h = s.layout.hierarchical_context_parallel_sizes
    return h[0] if h else s.cp


def attention_query_tokens(s: Scenario, comm_type: str) -> float:
    """Queries per sequence of one attention kernel call under each CP exchange (what the kernel's
    length term sees): the ring's steps run the rank's S/CP queries; the all-to-all gives each rank
    the whole sequence (for 1/CP of the heads); a2a+p2p's ring steps run S·a/CP queries (inner group
    a); all_gather runs each of the rank's two S/(2·CP) chunks against its causal key prefix."""
    seq, cp = s.training.seq_length or 0, s.cp
    if cp == 1 or comm_type == "p2p":
        return seq / cp
    if comm_type == "a2a":
        return float(seq)
    if comm_type == "a2a+p2p":
        return seq * hierarchical_a2a_size(s) / cp
    return seq / (2 * cp)  # all_gather


def attention_kernel(s: Scenario, gpu: GpuSpec, fp8_attention: bool) -> str:
    """The kernel Transformer Engine trains the model's attention heads with on ``gpu`` at the scenario's
    Transformer Engine version (:func:`~moeplan.model.executed_flops.te_attention_kernel`)."""
    m = s.complete_model
    return te_attention_kernel(
        gpu, m.attention_head_dims, m.attention_v_head_dim, fp8_attention, s.versions.get("transformer_engine")
    )


def model_attention_fraction(s: Scenario, gpu: GpuSpec, query_tokens: float, fp8: bool, kernel: str) -> float:
    """:func:`~moeplan.model.executed_flops.attention_fraction` for the model's attention heads (its
    d_qk + d_v and d_v) over ``query_tokens`` queries, run by ``kernel``."""
    m = s.complete_model
    return attention_fraction(gpu, query_tokens, m.attention_head_dims, fp8, m.attention_v_head_dim, kernel)


def attention_rate(ctx: StepContext, comm_type: str) -> float:
    """Achieved attention FLOP/s of the kernels under CP exchange ``comm_type``
    (:func:`attention_query_tokens`); the ring's rate for p2p or without CP."""
    s = ctx.s
    if s.cp == 1 or comm_type == "p2p":
        return ctx.attention_rate_flops_per_s
    q = attention_query_tokens(s, comm_type)
    frac = model_attention_fraction(s, ctx.gpu, q, ctx.fp8_attention, ctx.attention_kernel)
    return ctx.speeds.attention_flops_per_s * frac


def graph_share(s: Scenario) -> float:
    """Share of a layer's launch overhead CUDA graphs remove: all with a full-iteration graph, the
    scopes' shares with per-layer graphs (all of it when the scope list is empty), none eager."""
    graphs = s.layout.cuda_graph_impl or "none"
    if graphs == "full_iteration":
        return 1.0
    if graphs in ("transformer_engine", "local"):
        return min(1.0, sum(GRAPH_SHARE.get(x, 0.0) for x in s.graph_scopes()) or 1.0)
    return 0.0


def _lm_factor(s: Scenario, vision: VisionCost | None) -> float:
    """Share of the language model's GEMM work with a frozen language model: forward + input
    gradient (2/3) when something behind it trains (a VLM's tower, LoRA adapters in every layer),
    forward only (1/3) when nothing does."""
    if s.peft is not None:  # LoRA: the frozen base computes input gradients for the adapters below it
        return 2 / 3
    if not s.training.freeze_language_model:
        return 1.0
    return 2 / 3 if (vision is not None and vision.trainable) else 1 / 3


def _activation_context(s: Scenario, tokens: float, seq_local: float, mbs: int, route: float) -> ActContext:
    return ActContext(
        tokens=tokens,
        seq_local=seq_local,
        micro_batch_size=mbs,
        tp=s.tp,
        sp=s.sp,
        etp=s.etp,
        lin_in_bytes=linear_input_bytes(s.training.precision),
        routing_factor=route,
    )


def ep_paired_share(pp: int, vpp: int | None, num_microbatches: int, group: int | None) -> float:
    """Share of the first pipeline stage's microbatch chunks whose forward runs paired with another
    chunk's backward under EP A2A overlap (combined 1F1B), 0–1.

    Megatron-Core (``pipeline_parallel/schedules.py``): without pipelining the first forward and the
    last backward run alone (``combined_1f1b_schedule_for_no_pipelining``); interleaved, the first
    stage runs ``2·(PP − 1) + (VPP − 1)·group + 1`` warm-up forward chunks (the ``+ 1``: "one extra
    micro-batch forward step" for EP overlap; ``get_pp_rank_microbatches``) and as many cool-down
    backward chunks alone, of ``num_microbatches · VPP`` chunks. EP overlap with PP > 1 requires VPP
    (``transformer_config.py``); a plain PP > 1 is taken as PP − 1 warm-up forwards + 1.
    """
    n = max(1, num_microbatches)
    if pp <= 1:
        warmup, total = 1, n
    elif not vpp or vpp <= 1:
        warmup, total = pp, n
    else:
        warmup, total = 2 * (pp - 1) + (vpp - 1) * (group or pp) + 1, n * vpp
    return (total - min(warmup, total)) / total


def _dispatcher(token_dispatcher: str | None, flex_backend: str | None) -> str:
    """How a MoE layer's tokens are exchanged (:func:`moeplan.model.comm.ep_time`): the flex dispatcher's
    backend (``deepep`` when unset), ``allgather`` for megatron-core's all-gather dispatcher, else
    ``alltoall`` (NCCL all-to-all, also for a dispatcher type not stated)."""
    if token_dispatcher == "flex":
        return flex_backend or "deepep"
    return "allgather" if token_dispatcher == "allgather" else "alltoall"


def step_context(
    s: Scenario, c: TimeConstants, measured_gemm: dict[str, float] | None, vision_patches: float | None
) -> StepContext:
    """Derive the :class:`StepContext` of a scenario that passed :func:`require_step_inputs`;
    ``measured_gemm`` the GPU's measured GEMM fractions (catalog), ``vision_patches`` overrides a
    VLM's ViT patches per sequence (0 = mock data)."""
    lay, t = s.layout, s.training
    # require_step_inputs() checked these and that the world size folds (so DP is known)
    m, gpu, dp = cast(ModelSpec, s.model), cast(GpuSpec, s.gpu), cast(int, s.dp)
    mbs = t.micro_batch_size or 1
    n_mb = max(1, cast(int, t.global_batch_size) // (mbs * dp))
    fp8_attn = bool(lay.fp8_dot_product_attention) and t.precision != "bf16"
    sp = speeds(gpu, t.precision, fp8_attn, c, measured_gemm)
    seq_local = cast(int, t.seq_length) / s.cp
    route = routing(s).factor
    gran = lay.recompute_granularity
    modules = lay.recompute_modules if lay.recompute_modules is not None else ["core_attn"]
    off_items: set[str] = set()
    if lay.fine_grained_activation_offloading:
        for mod in lay.offload_modules or []:
            off_items.update(OFFLOAD_ITEMS.get(mod, ()))
    vc = vision_cost(s, vision_patches) if m.vision is not None else None
    kernel = attention_kernel(s, gpu, fp8_attn)
    return StepContext(
        s=s,
        c=c,
        mbs=mbs,
        num_microbatches=n_mb,
        seq_local=seq_local,
        tokens=mbs * seq_local,
        routing_factor=route,
        speeds=sp,
        attention_rate_flops_per_s=sp.attention_flops_per_s
        * model_attention_fraction(s, gpu, seq_local, fp8_attn, kernel),
        fp8_attention=fp8_attn,
        attention_kernel=kernel,
        act=_activation_context(s, mbs * seq_local, seq_local, mbs, route),
        recompute_modules=frozenset(modules) if gran == "selective" else frozenset(),
        recompute_granularity=gran,
        recompute_num_layers=lay.recompute_num_layers or 1,
        graphs=lay.cuda_graph_impl or "none",
        graph_share=graph_share(s),
        dispatcher=_dispatcher(lay.moe_token_dispatcher_type, lay.moe_flex_dispatcher_backend),
        cp_widths=cp_widths(s),
        cp_comm_type=lay.cp_comm_type if isinstance(lay.cp_comm_type, str) else "p2p",
        padded_vocab=padded_vocab_size(m.vocab_size, s.tp),
        offload_items=frozenset(off_items),
        host_link_bytes_per_s=host_link_bytes_per_s(gpu),
        ep_overlap=bool(lay.overlap_moe_expert_parallel_comm) and n_mb >= 2,
        ep_paired_share=ep_paired_share(s.pp, s.vpp, n_mb, lay.microbatch_group_size_per_vp_stage)
        if lay.overlap_moe_expert_parallel_comm
        else 0.0,
        lm_factor=_lm_factor(s, vc),
        vision=vc,
    )
