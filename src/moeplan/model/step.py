"""Step time, tokens/s/GPU, model TFLOP/s/GPU and MFU of a layout, with a breakdown that sums to
the step time.

Per pipeline stage and microbatch: compute (dense GEMMs, grouped expert GEMMs, attention), element-
wise memory traffic, kernel-launch overhead (reduced by CUDA graphs), recompute, exposed TP / CP / EP
communication. The pipeline runs ``m`` microbatches on the slowest stage plus the bubble
``(p − 1)/v`` stage-times (Narayanan et al. 2021, interleaved schedule); then exposed data-parallel
communication and the optimizer step. Model TFLOP/s uses :mod:`moeplan.model.flops` (Megatron
Bridge's count); MFU divides it by the dense BF16 peak (say so in reports).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from moeplan.errors import InputError
from moeplan.model.activations import ActContext, layer_activations
from moeplan.model.comm import cp_time, dp_time, ep_time, pp_time, tp_time
from moeplan.model.compute import (
    ATTENTION_FWD_FRACTION,
    ATTENTION_FWD_FRACTION_DEFAULT,
    ATTENTION_FWD_SHARE,
    arch_family,
    attention_fraction,
    grouped_efficiency,
    layer_flops,
    speeds,
)
from moeplan.model.constants import TimeConstants, load_constants, release_key
from moeplan.model.flops import model_flops
from moeplan.model.memory import DEFAULT_ROUTING_IMBALANCE
from moeplan.spec.params import padded_vocab_size
from moeplan.spec.placement import stage_params, stage_plan
from moeplan.spec.scenario import Scenario

#: graph scopes and the share of a layer's launch overhead they remove (attention and router/
#: preprocess are the launch-heavy parts of an MoE layer; ``full_iteration`` removes all)
_GRAPH_SHARE = {"attn": 0.4, "moe_router": 0.2, "moe_preprocess": 0.15, "mlp": 0.3, "moe": 0.3}
#: CPU Adam throughput for offloaded optimizer state, parameters per second per GPU's share of host
#: cores (HybridDeviceOptimizer; a planning value)
CPU_ADAM_PARAMS_PER_S = 1.0e9


@dataclass(frozen=True)
class ThroughputEstimate:
    """Predicted performance of one training step.

    Attributes:
        step_time_s: seconds per optimizer step.
        tokens_per_s_per_gpu: GBS·seq / (step · W).
        model_tflops_per_gpu: Megatron Bridge model FLOPs per token × tokens/s/GPU / 1e12.
        mfu: model TFLOP/s / dense BF16 peak (fraction); ``mfu_precision_peak`` against the
            training precision's peak.
        breakdown_s: named parts that add up to ``step_time_s``.
        validity: :meth:`moeplan.model.validity.Validity.to_dict` — whether the case lies inside
            the measured runs the constants were fitted on, and its error band.
        useful_tokens_per_s_per_gpu: tokens/s/GPU × the workload's non-padding fraction (text +
            image tokens that carry data).
        stage_microbatch_s: forward + backward time of one microbatch on each pipeline stage (the
            slowest sets the pace; a VLM's first stage also runs the vision tower).
        release / release_factor: the container release whose software efficiency was used and its
            fitted factor (every part of the step is divided by it; the newest release is 1).
        hidden_s: what overlap and CUDA graphs take off the step (s per step, not part of
            ``breakdown_s``): ``ep_comm`` / ``cp_comm`` / ``tp_comm`` / ``dp_comm`` / ``fsdp_comm``
            the communication time hidden behind compute, ``cuda_graphs`` the launch overhead and
            MoE host syncs an eager step would pay on top.
        critical_stage: the pipeline stage (0-based) whose parts ``breakdown_s`` itemises: the
            slowest, which sets the pace of every stage.
    """

    step_time_s: float
    tokens_per_s_per_gpu: float
    model_tflops_per_gpu: float
    mfu: float
    mfu_precision_peak: float
    breakdown_s: dict[str, float]
    num_microbatches: int
    release: str
    assumptions: list[str] = field(default_factory=list)
    validity: dict = field(default_factory=dict)
    useful_tokens_per_s_per_gpu: float | None = None
    stage_microbatch_s: list[float] = field(default_factory=list)
    release_factor: float = 1.0
    hidden_s: dict[str, float] = field(default_factory=dict)
    critical_stage: int = 0

    def to_dict(self) -> dict:
        return {
            "step_time_s": self.step_time_s,
            "tokens_per_s_per_gpu": self.tokens_per_s_per_gpu,
            "model_tflops_per_gpu": self.model_tflops_per_gpu,
            "mfu": self.mfu,
            "mfu_peak": "dense BF16",
            "mfu_precision_peak": self.mfu_precision_peak,
            "breakdown_s": dict(self.breakdown_s),
            "num_microbatches": self.num_microbatches,
            "release": self.release,
            "release_factor": self.release_factor,
            "assumptions": list(self.assumptions),
            "validity": dict(self.validity),
            "useful_tokens_per_s_per_gpu": self.useful_tokens_per_s_per_gpu,
            "stage_microbatch_s": list(self.stage_microbatch_s),
            "hidden_s": dict(self.hidden_s),
            "critical_stage": self.critical_stage,
        }


_RELEASE_IN_TEXT = re.compile(r"(?<![\d.])(\d\d\.\d\d(?:\.\d\d)?)(?![\d.])")


def release_of(s: Scenario) -> str | None:
    """The container release (``26.04.01``) named in ``versions.container`` (``nvcr.io/nvidia/nemo:26.04.01``
    works too); None when not given or not readable as exactly one ``NN.NN[.NN]``."""
    text = s.input.versions.container or ""
    found = _RELEASE_IN_TEXT.findall(text)
    return found[0] if len(found) == 1 and "\n" not in text else None


def estimate_step(
    s: Scenario, c: TimeConstants | None = None, vision_patches: float | None = None
) -> ThroughputEstimate:
    """Predict step time and throughput of a resolved scenario.

    ``vision_patches`` overrides the ViT patches per sequence of a VLM (0 = mock, image-free data).

    Raises:
        InputError: missing model, GPU, world size, sequence length or global batch size, a GPU
            without a bf16 dense peak, or a world size that does not divide (run ``moeplan check``).
    """
    c = c or load_constants()
    m, lay, t, gpu = s.model, s.layout, s.training, s.gpu
    missing = [
        n
        for n, v in (
            ("model", m),
            ("system.gpu", gpu),
            ("system.num_gpus", s.num_gpus),
            ("training.seq_length", t.seq_length),
            ("training.global_batch_size", t.global_batch_size),
        )
        if v is None
    ]
    if missing:
        raise InputError(missing[0], None, "a value: the step-time estimate needs " + ", ".join(missing))
    if not gpu.peak_dense_tflops.get("bf16"):
        raise InputError(
            "system.gpu.peak_dense_tflops",
            dict(gpu.peak_dense_tflops),
            "a bf16 dense peak in TFLOP/s (and fp8/fp4 for those precisions): the step-time estimate needs it",
        )
    if not s.folds:
        raise InputError("system.num_gpus", s.num_gpus, "a world size divisible by TP·PP·CP and ETP·EP·PP")
    assumptions: list[str] = []
    mbs = t.micro_batch_size or 1
    n_mb = max(1, t.global_batch_size // (mbs * s.dp))
    stated_release = release_of(s)
    rel_name, rel = c.release(stated_release)
    prov = c.provenance or {}
    if "run_ids" in prov:  # a calibration profile written by `moeplan calibrate`
        after = prov.get("median_abs_pct_error_after")
        fit_txt = f", median error {after:.1f} % after the fit" if isinstance(after, (int, float)) else ""
        assumptions.append(
            f"calibrated constants ({prov.get('mode', '?')} fit on {len(prov['run_ids'])} run(s){fit_txt}); "
            "the validity band is the packaged model's"
        )
        gpus = prov.get("gpus")
        if isinstance(gpus, list) and gpus and gpu.id not in gpus:
            assumptions.append(
                f"the calibration runs were on {', '.join(prov['gpus'])}, not {gpu.id}: its factors are applied "
                "to another GPU type"
            )
    for key, default, unit in (
        ("hbm_bandwidth_gb_per_s", 3000, "GB/s"),
        ("scaleup_unidir_gb_per_s", 100, "GB/s"),
        ("nic_gbit_per_s_per_gpu", 200, "Gb/s"),
        ("host_link_unidir_gb_per_s", 25, "GB/s"),
    ):
        if getattr(gpu, key) is None:
            assumptions.append(f"system.gpu.{key} not given: {default} {unit} assumed")
    if arch_family(gpu) not in ATTENTION_FWD_FRACTION:
        assumptions.append(
            f"system.gpu.arch {gpu.arch!r} is none of {', '.join(ATTENTION_FWD_FRACTION)}: attention forward at "
            f"{ATTENTION_FWD_FRACTION_DEFAULT} of peak, no softmax-exponential term"
        )
    given = s.input.versions.container
    if stated_release and stated_release != rel_name:
        why = (
            "the oldest fitted release: it predates them all"
            if release_key(stated_release) < release_key(rel_name)
            else ("the newest fitted release" if rel_name == c.newest_release else "the last fitted release before it")
        )
        assumptions.append(
            f"container {stated_release} not among the fitted releases: software efficiency of {rel_name}, {why}"
        )
    elif stated_release is None and given:
        assumptions.append(
            f"container {given!r} not readable as one NN.NN[.NN] release: software efficiency of the newest "
            f"fitted release, {rel_name}"
        )
    elif stated_release is None:
        assumptions.append(f"no container release given (versions.container): software efficiency of {rel_name}")
    from moeplan.catalog.gpus import measured_gemm_fractions

    sp = speeds(
        gpu,
        t.precision,
        lay.fp8_dot_product_attention and t.precision != "bf16",
        c,
        measured_gemm_fractions(gpu.id),
    )
    peak_key = "bf16" if t.precision == "bf16" else ("fp4" if t.precision == "nvfp4" else "fp8")
    if not gpu.peak_dense_tflops.get(peak_key):
        assumptions.append(
            f"{gpu.id} has no dense {peak_key} peak: its GEMMs are costed at the BF16 peak (give "
            f"system.gpu.peak_dense_tflops.{peak_key})"
        )
    if lay.moe_router_force_load_balancing or not m.is_moe:
        route = 1.0
    else:
        route = s.input.assumptions.routing_imbalance_factor or DEFAULT_ROUTING_IMBALANCE
    seq_local = t.seq_length / s.cp
    tokens = mbs * seq_local
    fp8_attn = bool(lay.fp8_dot_product_attention) and t.precision != "bf16"
    attn_rate = sp.attention_flops_per_s * attention_fraction(gpu, seq_local, m.attention_head_dims, fp8_attn)
    ctx = ActContext(
        tokens=tokens,
        seq_local=seq_local,
        micro_batch_size=mbs,
        tp=s.tp,
        sp=s.sp,
        etp=s.etp,
        lin_in_bytes=1.0 if t.precision != "bf16" else 2.0,
        routing_factor=route,
    )
    stages = stage_params(s, allow_balanced=True)
    gran = lay.recompute_granularity
    modules = (
        set(lay.recompute_modules if lay.recompute_modules is not None else ["core_attn"])
        if gran == "selective"
        else set()
    )
    graphs = lay.cuda_graph_impl or "none"
    if graphs == "full_iteration":
        graph_share = 1.0
    elif graphs in ("transformer_engine", "local"):
        graph_share = min(1.0, sum(_GRAPH_SHARE.get(x, 0.0) for x in s.graph_scopes()) or 1.0)
    else:
        graph_share = 0.0
    dispatcher = lay.moe_flex_dispatcher_backend if lay.moe_token_dispatcher_type == "flex" else "alltoall"
    if dispatcher == "hybridep" and m.is_moe and s.ep * s.etp > 1:
        assumptions.append(
            f"HybridEP's exchange runs at {c.a2a_efficiency.get('hybridep', 0):.2f} of the link rate against "
            f"{c.a2a_efficiency.get('alltoall', 0):.2f} for all-to-all: the least identified fitted constant (every "
            "HybridEP run measured is also an MXFP8 run with CUDA graphs), so its EP time leans pessimistic "
            "(docs/decisions.md)"
        )
    # widths (per token, all heads) of the tensors context parallelism moves: K and V blocks for the
    # ring; Q, K, V and the attention output for the all-to-all
    if m.multi_latent_attention:
        nh = m.num_attention_heads
        q_width = nh * (m.qk_head_dim + m.qk_pos_emb_head_dim)
        kv_total = q_width + nh * m.v_head_dim
        o_width = nh * m.v_head_dim
    else:
        q_width = o_width = (m.kv_channels or 128) * m.num_attention_heads
        kv_total = 2 * (m.kv_channels or 128) * (m.num_query_groups or m.num_attention_heads)
    cp_type = lay.cp_comm_type if isinstance(lay.cp_comm_type, str) else "p2p"
    vpad = padded_vocab_size(m.vocab_size, s.tp)

    per_stage: list[dict[str, float]] = []
    hidden_stage: list[dict[str, float]] = []  # what overlap / graphs removed, per stage and microbatch
    from moeplan.model.activations import OFFLOAD_ITEMS

    off_items: set[str] = set()
    if lay.fine_grained_activation_offloading:
        for mod in lay.offload_modules or []:
            off_items.update(OFFLOAD_ITEMS.get(mod, ()))
    host_bw = (gpu.host_link_unidir_gb_per_s or 25) * 1e9
    from moeplan.model.vision import vision_cost

    vc = vision_cost(s, vision_patches) if m.vision is not None else None
    lm_factor = 1.0
    if t.freeze_language_model:
        lm_factor = 2 / 3 if (vc is not None and vc.trainable) else 1 / 3
        if lm_factor < 2 / 3:
            assumptions.append("nothing is trainable (language model frozen and no trainable vision tower)")
    if t.freeze_vision_model or t.freeze_language_model:
        assumptions.append(
            "MFU and model TFLOP/s count full training FLOPs (Megatron's convention); a frozen part does less work"
        )
    w = s.input.workload
    if w is not None and w.seq_length and w.seq_length != t.seq_length:
        assumptions.append(
            f"workload measured at seq {w.seq_length}: per-sequence image figures scaled to {t.seq_length}"
        )
    if w is not None and m.vision is None and (w.image_patches_per_sequence or w.image_tokens_per_sequence):
        assumptions.append(
            "the model has no vision tower: the workload's image figures are ignored (its padding is not)"
        )
    if vc is not None and vc.assumed:
        assumptions.append(
            "no workload: vision tower costed for a planning mix (half the sequence image tokens); "
            "give workload: (moeplan vlm-stats) for your data"
        )
    n_rc = lay.recompute_num_layers or 1
    chunk_plan = stage_plan(s, allow_balanced=True)
    ep_overlap = bool(lay.overlap_moe_expert_parallel_comm) and n_mb >= 2
    if lay.overlap_moe_expert_parallel_comm and not ep_overlap:
        assumptions.append(
            "overlap_moe_expert_parallel_comm pairs one microbatch's forward with another's backward "
            "(combined 1F1B): with one microbatch per step it hides nothing"
        )
    kinds_all = m.attention_kinds or ("full",) * m.num_layers
    moe_all = m.moe_layers or (False,) * m.num_layers
    for st in stages:
        parts = dict.fromkeys(
            (
                "dense_gemm",
                "expert_gemm",
                "attention",
                "memory_bound",
                "launch_overhead",
                "recompute",
                "tp_comm",
                "cp_comm_exposed",
                "ep_comm_exposed",
                "activation_offload",
            ),
            0.0,
        )
        hid = dict.fromkeys(("ep_comm", "cp_comm", "tp_comm", "cuda_graphs"), 0.0)
        # full recompute: every layer (uniform) or the first recompute_num_layers of each virtual chunk
        # (block), as Megatron's TransformerBlock checkpoints them
        if gran == "full" and lay.recompute_method == "block":
            chunks = chunk_plan.layers[st.stage] if chunk_plan is not None else [st.layers]
            recomputed = {li for chunk in chunks for pos, li in enumerate(chunk) if pos < n_rc}
        else:
            recomputed = set(st.layers) if gran == "full" else set()
        groups: dict[tuple, list[bool]] = {}  # layer kind → whether each such layer is recomputed
        firsts: dict[tuple, int] = {}  # layer kind → the layer that stands for it
        for li in st.layers:
            key = (kinds_all[li], bool(moe_all[li]))
            groups.setdefault(key, []).append(li in recomputed)
            firsts.setdefault(key, li)
        if st.mtp_layers:
            # an MTP block runs one decoder layer built from the decoder's last layer spec
            # (megatron/core/transformer/multi_token_prediction.py), plus its 2h → h projection
            last = m.num_layers - 1
            key = (kinds_all[last], bool(moe_all[last]))
            firsts.setdefault(key, last)
            groups.setdefault(key, []).extend([gran == "full" and lay.recompute_method != "block"] * st.mtp_layers)
            parts["dense_gemm"] += (
                st.mtp_layers * 3 * 2 * tokens * 2 * m.hidden_size * m.hidden_size / s.tp / (sp.gemm_flops_per_s)
            )
        for key, flags in groups.items():
            # layers of one kind cost the same: evaluate the first, count it len(flags) times
            li = firsts[key]
            one = dict.fromkeys(parts, 0.0)
            one_hid = dict.fromkeys(hid, 0.0)
            f = layer_flops(m, li, tokens, seq_local, t.seq_length, s.tp, s.cp, s.ep, route)
            t_dense = 3 * f.dense_gemm / sp.gemm_flops_per_s
            eff = grouped_efficiency(f.tokens_per_local_expert, c)
            t_exp = 3 * f.expert_gemm / (sp.gemm_flops_per_s * eff) if f.expert_gemm else 0.0
            t_core = 3 * f.attention_core / attn_rate
            kept, rec = layer_activations(m, li, ctx, frozenset(modules))
            act = sum(kept.values()) + sum(rec.values())
            t_mem = c.memory_bound_bytes_per_activation_byte * act / sp.hbm_bytes_per_s
            if off_items:
                # fine-grained activation offload: the chosen tensors go to the host after forward and
                # come back for backward, on the host link, behind the layer's compute where possible
                moved = sum(v for k, v in kept.items() if k in off_items)
                t_link = 2 * moved / host_bw
                one["activation_offload"] = max(0.0, t_link - c.overlap_hidden_fraction * (t_dense + t_mem))
            one["dense_gemm"] = t_dense
            one["expert_gemm"] = t_exp
            one["attention"] = t_core
            one["memory_bound"] = t_mem
            one["launch_overhead"] = c.launch_overhead_s_per_layer * (1 - graph_share)
            one_hid["cuda_graphs"] = c.launch_overhead_s_per_layer * graph_share
            moe_layer = bool(moe_all[li])
            t_ep = 0.0
            if moe_layer:
                routed = tokens / s.tp * m.moe_router_topk * route
                fp8_disp = t.precision != "bf16" and dispatcher in ("deepep", "hybridep")
                t_ep = ep_time(routed, m.hidden_size, s.ep, s.etp, dispatcher, gpu, c, fp8_disp, m.moe_router_topk or 0)
                raw = t_ep
                if lay.moe_shared_expert_overlap and m.moe_shared_expert_intermediate_size:
                    # the shared experts run while the tokens are dispatched (MoELayer, shared_expert_overlap)
                    g = 3 if m.gated_linear_unit else 2
                    shared = 3 * 2 * tokens * m.hidden_size * m.moe_shared_expert_intermediate_size * g / s.tp
                    t_ep = max(0.0, t_ep - shared / sp.gemm_flops_per_s)
                if ep_overlap:
                    # combined 1F1B: the paired microbatch's compute of this layer hides the exchange
                    t_ep = max(0.0, t_ep - c.overlap_hidden_fraction * (t_dense + t_exp + t_core))
                one_hid["ep_comm"] = raw - t_ep
            one["ep_comm_exposed"] = t_ep
            if moe_layer and graphs != "full_iteration" and not lay.moe_pad_expert_input_to_capacity:
                one["launch_overhead"] += c.moe_sync_s_per_layer
            elif moe_layer and graphs == "full_iteration" and not lay.moe_pad_expert_input_to_capacity:
                one_hid["cuda_graphs"] += c.moe_sync_s_per_layer  # the static-budget path has no host sync
            if s.tp > 1:
                # SP gathers and scatters around the attention block, and around the MLP unless it is a
                # MoE block whose experts are not TP-split (tokens go to the dispatcher as they are);
                # shared experts are TP-split. Without SP the same volume moves as all-reduces.
                mlp_tp = not moe_layer or bool(m.moe_shared_expert_intermediate_size)
                n_coll = 4 + (4 if mlp_tp else 0)
                t_tp = tp_time(tokens, m.hidden_size, s.tp, gpu, c, lay.tp_comm_overlap, n_coll, t_dense)
                one["tp_comm"] = t_tp
                one_hid["tp_comm"] = tp_time(tokens, m.hidden_size, s.tp, gpu, c, False, n_coll) - t_tp
            if kinds_all[li] != "linear":
                t_cp = cp_time(tokens, q_width, kv_total, o_width, s.cp, s.tp, cp_type, gpu, c)
                cp_exposed = max(0.0, t_cp - (t_core if cp_type != "a2a" else 0.0))
                one["cp_comm_exposed"] = cp_exposed
                one_hid["cp_comm"] = t_cp - cp_exposed
            # recompute: one more forward of what was dropped
            rc_full = (t_dense + t_exp + t_core + t_mem) / 3 + t_ep / 2
            if modules:
                extra = 0.0
                if "core_attn" in modules:
                    extra += t_core * ATTENTION_FWD_SHARE
                if "mlp" in modules and not moe_layer:
                    extra += t_dense / 3 * 0.6
                if "moe" in modules and moe_layer:
                    extra += t_exp / 3 + t_ep / 2
                if "mla_up_proj" in modules and m.multi_latent_attention:
                    extra += t_dense / 3 * 0.3
                if "shared_experts" in modules and moe_layer:
                    extra += t_dense / 3 * 0.3
                extra += t_mem / 3 * len(modules & {"layernorm", "moe_act", "gdn_norm_out"}) * 0.2
                one["recompute"] = extra
            for k, v in one.items():
                parts[k] += v * len(flags)
            parts["recompute"] += rc_full * sum(flags)
            for k, v in one_hid.items():
                hid[k] += v * len(flags)
        if st.output_layer:
            logits = 2 * tokens * m.hidden_size * vpad / s.tp * (1 + st.mtp_layers)
            parts["dense_gemm"] += 3 * logits / sp.gemm_flops_per_s
        if lm_factor != 1.0:
            # frozen language model: no weight-gradient GEMMs (forward + input gradient only)
            parts["dense_gemm"] *= lm_factor
            parts["expert_gemm"] *= lm_factor
        if st.embedding and vc is not None:
            passes = 3 if vc.trainable else 1  # a frozen tower runs forward only
            v_rate = sp.attention_flops_per_s * attention_fraction(gpu, vc.patches / max(1, t.micro_batch_size or 1))
            parts["vision_encoder"] = passes * (
                vc.gemm_flops_fwd / sp.gemm_flops_per_s + vc.attention_flops_fwd / v_rate
            )
            parts["vision_projector"] = passes * vc.merger_flops_fwd / sp.gemm_flops_per_s
        per_stage.append(parts)
        hidden_stage.append(hid)

    totals = [sum(p.values()) for p in per_stage]
    crit = max(range(len(totals)), key=lambda i: totals[i])
    t_mb = totals[crit]
    v = s.vpp
    breakdown = {k: val * n_mb for k, val in per_stage[crit].items()}
    breakdown["pipeline_bubble"] = (s.pp - 1) / v * t_mb if s.pp > 1 else 0.0
    if s.pp > 1:
        # each microbatch crosses every stage boundary forward and backward: the critical stage sends
        # and receives once per microbatch (per virtual chunk with VPP). Plain 1F1B waits for these
        # transfers; the interleaved schedule overlaps them with the next chunk's compute
        # (overlap_p2p_comm, on by default with VPP): only the non-hidden share remains.
        per_mb = pp_time(tokens, m.hidden_size, s.tp, s.sp, gpu, c, s.num_gpus)
        exposed = (1 - c.overlap_hidden_fraction) * v if v > 1 else 1.0
        breakdown["pp_comm"] = per_mb * (n_mb * exposed + 2 * (s.pp - 1) / v)
    else:
        breakdown["pp_comm"] = 0.0
    # data parallel gradient / parameter traffic (largest stage), mostly overlapped
    stp = stages[crit].params
    # unset: FP32, as Bridge's bf16_mixed and Megatron-LM's --bf16 (arguments.py) both set it
    grad_b = 2.0 if lay.grad_reduce_in_fp32 is False else 4.0
    dense_span = s.tp * s.cp * s.dp
    exp_span = s.etp * s.ep * (s.edp or 1)
    tr_dense, tr_expert = stp.dense, stp.expert
    vis = stp.by_kind.get("vision", 0)
    if t.freeze_vision_model:
        tr_dense -= vis
    if t.freeze_language_model:
        tr_dense, tr_expert = vis, 0  # only the tower's gradients are reduced
    dp_args = (s.dp * s.cp, s.edp or 1, dense_span, exp_span, gpu, c)
    if lay.use_distributed_optimizer:
        t_rs = dp_time(tr_dense, tr_expert, grad_b, *dp_args, param_bytes=0.0)
        # fp8_param_gather all-gathers the FP8 weights (1 byte, plus MXFP8's 1/32 scales) instead of BF16
        fp8_pg = lay.fp8_param_gather and t.precision != "bf16"
        ag_b = (1 + 1 / 32 if t.precision == "mxfp8" else 1.0) if fp8_pg else 2.0
        t_ag = dp_time(tr_dense, tr_expert, 0.0, *dp_args, param_bytes=ag_b)
    else:  # plain DDP all-reduces the gradients (twice a reduce-scatter's volume), no parameter gather
        t_rs, t_ag = dp_time(tr_dense, tr_expert, 2 * grad_b, *dp_args, param_bytes=0.0), 0.0
    # Megatron DDP (overlap_grad_reduce) reduces gradients bucket by bucket during the backward pass of
    # the step's last microbatch only (earlier ones accumulate locally), and the distributed optimizer
    # (overlap_param_gather) all-gathers parameters during the forward pass of the next step's first
    # microbatch: each hides behind that one pass of the critical stage; the fitted share stays exposed
    # even so (the last bucket, kernels contending for SMs and HBM)
    compute_mb = t_mb - sum(per_stage[crit].get(k, 0.0) for k in ("ep_comm_exposed", "cp_comm_exposed", "tp_comm"))
    # the last gradient bucket (first parameter bucket) cannot overlap: Megatron's default bucket holds
    # max(40M, 1M·DP) parameters (megatron/core/distributed/distributed_data_parallel_config.py)
    n_params = max(1.0, tr_dense + tr_expert)
    tail = min(1.0, max(40e6, 1e6 * s.dp * s.cp) / n_params)
    floor = max(tail, c.dp_exposed_fraction)
    rs_exposed = t_rs if lay.overlap_grad_reduce is False else max(floor * t_rs, t_rs - 2 / 3 * compute_mb)
    ag_exposed = t_ag if lay.overlap_param_gather is False else max(floor * t_ag, t_ag - 1 / 3 * compute_mb)
    strategy = lay.data_parallel_sharding_strategy or "optim_grads_params"
    fsdp_sharded = lay.use_megatron_fsdp and strategy == "optim_grads_params"
    # with sharded parameters the per-microbatch gathers and scatters below replace the step's DP traffic
    breakdown["dp_comm_exposed"] = 0.0 if fsdp_sharded else rs_exposed + ag_exposed
    hidden = {k: val * n_mb for k, val in hidden_stage[crit].items()}
    hidden["dp_comm"] = 0.0 if fsdp_sharded else (t_rs - rs_exposed) + (t_ag - ag_exposed)
    if fsdp_sharded and (s.dp * s.cp > 1 or (s.edp or 1) > 1):
        # Megatron-FSDP with sharded parameters: every microbatch all-gathers the stage's parameters for
        # forward and again for backward, and reduce-scatters its gradients (bf16); prefetching hides it
        # behind the layer compute up to the overlap share
        ag = dp_time(stp.dense, stp.expert, 0.0, s.dp * s.cp, s.edp or 1, dense_span, exp_span, gpu, c)
        per_mb = 3 * ag
        compute_mb = t_mb - per_stage[crit].get("ep_comm_exposed", 0.0)
        breakdown["fsdp_comm_exposed"] = n_mb * max(per_mb - c.overlap_hidden_fraction * compute_mb, 0.0)
        hidden["fsdp_comm"] = n_mb * per_mb - breakdown["fsdp_comm_exposed"]
    # optimizer: read/write master, moments, grads and params of the local shard
    d_dense = s.dp * s.cp if lay.use_distributed_optimizer else 1
    d_exp = (s.edp or 1) if lay.use_distributed_optimizer else 1
    shard = stp.dense / d_dense + stp.expert / d_exp
    frac = (lay.optimizer_offload_fraction or 0.0) if lay.optimizer_cpu_offload else 0.0
    t_opt = (1 - frac) * shard * 32 / sp.hbm_bytes_per_s
    if frac:
        host = (gpu.host_link_unidir_gb_per_s or 25) * 1e9
        t_opt += frac * shard * (4 + 2) / host + frac * shard / CPU_ADAM_PARAMS_PER_S
    breakdown["optimizer"] = t_opt
    # software efficiency of the container release: newer releases speed up kernels, communication and
    # overlap alike (fused kernels, HybridEP, graph capture), so the factor scales every part of the step
    # (fitted across all models and GPUs of a release, benchmarks/calibrate_time.py)
    breakdown = {k: v / rel for k, v in breakdown.items()}
    hidden = {k: v / rel for k, v in hidden.items()}
    step = sum(breakdown.values())
    tokens_step = t.global_batch_size * t.seq_length
    tps = tokens_step / (step * s.num_gpus)
    fl = model_flops(m, t.seq_length, s.tp, s.mtp_num_layers).per_token
    tflops = fl * tps / 1e12
    bf16 = gpu.peak_dense_tflops.get("bf16") or 1.0
    prec_peak = gpu.peak_tflops(t.precision) or bf16
    if stage_plan(s) is None:
        assumptions.append("layers do not split as given: estimated with a near-even split")
    if tflops > bf16:
        why = (
            f"{t.precision} GEMMs run at a higher peak ({tflops / prec_peak:.2f} of it)"
            if t.precision != "bf16"
            else "Megatron's FLOP count credits sliding-window layers with full causal attention"
        )
        assumptions.append(f"MFU above 1 against the dense BF16 peak (the default reference): {why}")
    from moeplan.model.validity import assess

    return ThroughputEstimate(
        step,
        tps,
        tflops,
        tflops / bf16,
        tflops / prec_peak,
        breakdown,
        n_mb,
        rel_name,
        assumptions,
        assess(s, c).to_dict(),
        tps * (s.input.workload.useful_fraction if s.input.workload is not None else 1.0),
        [x / rel for x in totals],
        rel,
        hidden,
        crit,
    )
