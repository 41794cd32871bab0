"""The assumptions a step-time estimate states: what it filled in, which constants it used, and
where its figures need reading with care. Each function returns lines in the order they print."""

from __future__ import annotations

from packaging.version import Version

from moeplan.errors import short_repr
from moeplan.i18n.messages import Message, msg
from moeplan.inputs.msa_config import MINIMAX_M3_MODEL_TYPE
from moeplan.inputs.resolved import Scenario
from moeplan.inputs.system import GpuSpec
from moeplan.inputs.versions import release_version
from moeplan.model.constants import TimeConstants, release_key
from moeplan.model.dsv4_mhc import MHC_HBM_FRACTION, has_mhc, mhc_layer_bytes, mhc_layer_launches, mhc_layer_s
from moeplan.model.dsv4_notes import dsv4_notes
from moeplan.model.executed_flops import (
    ATTENTION_FWD_FRACTION,
    ATTENTION_FWD_FRACTION_DEFAULT,
    FA2_B200_FWD_TFLOPS,
    FA2_BLACKWELL_BWD_RELATIVE,
    SPARSE_MLA_BWD_FRACTION,
    SPARSE_MLA_FWD_FRACTION,
    arch_family,
    mla_shape_relative,
)
from moeplan.model.hardware import planning_notes
from moeplan.model.mamba_scan import CONV_HBM_FRACTION, ssd_bytes_per_s
from moeplan.model.model_notes import time_notes
from moeplan.model.msa_notes import msa_notes
from moeplan.model.time.compute import DSV4_FUSED_FAMILIES, gated_deltanet_notes, mhc_rates
from moeplan.model.time.context import StepContext
from moeplan.model.time.dsa_costs import dsa_path_notes, fused_dsa_runs
from moeplan.model.time.launch import MOE_LAYER_LAUNCHES
from moeplan.model.time.router_launches import router_fusion_notes
from moeplan.structure.attention_kernels import SPARSE_MLA_HEAD_STEPS, sparse_mla_padded_heads

#: the first megatron-core that dispatches HybridEP with the permutation fused into the kernel
#: (``dispatch_with_permute`` in ``transformer/moe/fused_a2a.py``, present at core_v0.16.0)
FUSED_HYBRIDEP_MCORE = Version("0.16.0")
#: HybridEP's component-set rate (``COMPONENT_SOURCES``): a profile with another one calibrated it
PACKAGED_HYBRIDEP_RATE = TimeConstants().a2a_efficiency["hybridep"]


def calibration_notes(c: TimeConstants, gpu: GpuSpec) -> list[str]:
    """A calibration profile written by ``moeplan calibrate``: its fit, and whether it was fitted on
    another GPU type."""
    prov = c.provenance or {}
    if "run_ids" not in prov:
        return []
    after = prov.get("median_abs_pct_error_after")
    fit_txt = f", median error {after:.1f} % after the fit" if isinstance(after, (int, float)) else ""
    out = [
        f"calibrated constants ({prov.get('mode', '?')} fit on {len(prov['run_ids'])} run(s){fit_txt}); "
        "the validity band is the packaged model's"
    ]
    gpus = prov.get("gpus")
    if isinstance(gpus, list) and gpus and gpu.id not in gpus:
        out.append(
            f"the calibration runs were on {', '.join(prov['gpus'])}, not {gpu.id}: its factors are applied "
            "to another GPU type"
        )
    return out


def hardware_notes(gpu: GpuSpec, uses_host_link: bool = True) -> list[str]:
    """Figures the GPU leaves out (planning values; the host link only when ``uses_host_link``) and an
    architecture without attention figures."""
    out = planning_notes(gpu, uses_host_link)
    if arch_family(gpu) not in ATTENTION_FWD_FRACTION:
        out.append(
            f"system.gpu.arch {gpu.arch!r} is none of {', '.join(ATTENTION_FWD_FRACTION)}: attention forward at "
            f"{ATTENTION_FWD_FRACTION_DEFAULT} of peak, no softmax-exponential term"
        )
    return out


def release_notes(c: TimeConstants, stated: str | None, given: str | None, used: str) -> list[str]:
    """Which release's software efficiency was used when the scenario's is not a fitted one."""
    if stated and stated != used:
        if release_key(stated) < release_key(used):
            why = "the oldest fitted release: it predates them all"
        else:
            why = "the newest fitted release" if used == c.newest_release else "the last fitted release before it"
        return [f"container {stated} not among the fitted releases: software efficiency of {used}, {why}"]
    if stated is None and given:
        return [
            f"container {short_repr(given)} not readable as one NN.NN[.NN] release: software efficiency of the newest "
            f"fitted release, {used}"
        ]
    if stated is None:
        return [msg("notes.no_container_release", release=used)]
    return []


def precision_notes(ctx: StepContext) -> list[str]:
    """A precision whose peak the GPU does not give, and HybridEP's weakly identified efficiency."""
    s, c = ctx.s, ctx.c
    gpu, precision = ctx.gpu, s.training.precision
    out = []
    peak_key = "bf16" if precision == "bf16" else ("fp4" if precision == "nvfp4" else "fp8")
    if not gpu.peak_dense_tflops.get(peak_key):
        out.append(
            f"{gpu.id} has no dense {peak_key} peak: its GEMMs are costed at the BF16 peak (give "
            f"system.gpu.peak_dense_tflops.{peak_key})"
        )
    if ctx.dispatcher == "hybridep" and ctx.model.is_moe and s.ep * s.etp > 1:
        out.append(_hybridep_note(s, c))
    return out


def _hybridep_note(s: Scenario, c: TimeConstants) -> Message:
    """Where HybridEP's exchange rate comes from: the packaged kernel-only figure (and whether the
    scenario's megatron-core has the fused dispatch it assumes), or the calibration profile."""
    rate, a2a = c.a2a_efficiency.get("hybridep", 0), c.a2a_efficiency.get("alltoall", 0)
    if rate != PACKAGED_HYBRIDEP_RATE:
        return msg("notes.hybridep_calibrated", rate=rate, a2a=a2a)
    mcore = s.versions.get("megatron_core")
    if mcore is not None and release_version(mcore, "0") < FUSED_HYBRIDEP_MCORE:
        return msg("notes.hybridep_kernel_only_unfused", rate=rate, a2a=a2a, version=mcore)
    return msg("notes.hybridep_kernel_only", rate=rate, a2a=a2a)


def model_family_notes(ctx: StepContext) -> list[str]:
    """What the estimate leaves out of a family's published architecture: MiniMax-M2's MTP modules that
    Megatron Bridge does not build (``ModelSpec.unbuilt_mtp_modules``), the two TP all-reduces per layer
    of its full-dimension QK norm (Bridge ``minimax_m2_provider._FullDimRMSNorm``, not timed), and a
    vision tower that runs whole on every TP rank (MoonViT) with its TP gradient all-reduce not timed."""
    m, tp = ctx.model, ctx.s.tp
    out: list[str] = []
    if m.unbuilt_mtp_modules and not m.mtp_num_layers and m.model_type == MINIMAX_M3_MODEL_TYPE:
        out.append(msg("minimax_m3.mtp_modules_not_built", modules=m.unbuilt_mtp_modules))
    elif m.unbuilt_mtp_modules and not m.mtp_num_layers:
        out.append(msg("model_catalog_2026.mtp_modules_not_built", modules=m.unbuilt_mtp_modules))
    if m.qk_layernorm and m.qk_layernorm_full_dim and tp > 1:
        out.append(msg("model_catalog_2026.full_dim_qk_norm_all_reduce", tp=tp))
    if m.vision is not None and not m.vision.tp_sharded and tp > 1:
        out.append(msg("model_catalog_2026.vision_tower_whole_per_tp_rank", tp=tp))
    return out


def dsa_notes(ctx: StepContext) -> list[str]:
    """How DeepSeek Sparse Attention is costed: megatron-core trains the sparse path (every step reads
    the indexer's top-k keys; no dense warm-up mode), timed with the fused sparse kernels at FlashMLA's
    published Hopper rate or, elsewhere, the dense attention model at the absorbed widths; the indexer's
    scores at the dense attention rate; whether its KL loss trains it (``dsa_indexer_loss_coeff``)."""
    m = ctx.model
    if not m.has_dsa:
        return []
    if not fused_dsa_runs(ctx.s):  # the PyTorch fallback: timed as it runs (dsa_costs)
        return dsa_path_notes(ctx)
    kernel = sparse_kernel_clause(arch_family(ctx.gpu), ctx.fp8_attention)
    trained = m.dsa_indexer_loss_coeff > 0
    loss = (
        msg("model_dsa.note_indexer_trained", coeff=m.dsa_indexer_loss_coeff)
        if trained
        else msg("model_dsa.note_indexer_frozen")
    )
    note = msg("model_dsa.note_sparse_path", topk=m.dsa_indexer_topk, kernel=kernel, loss=loss)
    return [note, *dsa_path_notes(ctx), *head_padding_notes(ctx)]


def sparse_kernel_clause(family: str, fp8: bool) -> Message:
    """Which published figures time a sparse attention core on an architecture ``family``
    (:func:`moeplan.model.executed_flops.sparse_mla_fraction`): forward and backward figures, a
    forward figure only, or none (FP8 attention included), where the dense attention model applies."""
    if fp8 or family not in SPARSE_MLA_FWD_FRACTION:
        return msg("model_dsa.note_kernel_dense_model", family=family)
    if family in SPARSE_MLA_BWD_FRACTION:
        fwd, bwd = SPARSE_MLA_FWD_FRACTION[family], SPARSE_MLA_BWD_FRACTION[family]
        return msg("model_sparse_time.kernel_blackwell", family=family, fwd=fwd, bwd=bwd)
    return msg("model_dsa.note_kernel_measured", family=family)


def head_padding_notes(ctx: StepContext) -> list[str]:
    """A note when FlashMLA's sparse kernel pads the rank's query heads (its time grows by padded /
    heads) or refuses their count (the dense attention rate applies), as
    :func:`moeplan.model.time.compute.sparse_core_rate` times it; empty otherwise and on
    architectures without the kernel."""
    family = arch_family(ctx.gpu)
    if family not in SPARSE_MLA_HEAD_STEPS:
        return []
    heads = ctx.model.num_attention_heads // ctx.s.tp
    padded = sparse_mla_padded_heads(heads, family)
    if padded is None:
        return [msg("model_sparse_time.head_count_refused", heads=heads, family=family)]
    if padded > heads:
        return [msg("model_sparse_time.head_padding", heads=heads, padded=padded, factor=padded / heads)]
    return []


def dsv4_kernel_notes(ctx: StepContext) -> list[str]:
    """DeepSeek-V4's costing note (:func:`moeplan.model.dsv4_notes.dsv4_notes`) with the kernel its
    attention core is timed with: the fused sparse kernels on :data:`DSV4_FUSED_FAMILIES` when they
    take the rank's head count (and the head-padding note), else the dense attention rate."""
    m, family = ctx.model, arch_family(ctx.gpu)
    heads = m.num_attention_heads // ctx.s.tp if m.is_dsv4 else 0
    if family not in DSV4_FUSED_FAMILIES or sparse_mla_padded_heads(heads, family) is None:
        return [*dsv4_notes(m, family, None), *mhc_notes(ctx)]
    kernel = sparse_kernel_clause(family, ctx.fp8_attention)
    return [*dsv4_notes(m, family, kernel), *head_padding_notes(ctx), *mhc_notes(ctx)]


def mhc_notes(ctx: StepContext) -> list[str]:
    """How DeepSeek-V4's hyper-connections are timed (:mod:`moeplan.model.dsv4_mhc`): the path (fused
    or native), kernels, HBM bytes and time per layer and microbatch, and the bandwidth fraction they
    rest on; empty without hyper-connections."""
    m = ctx.model
    if not has_mhc(m):
        return []
    r, tokens, act = mhc_rates(ctx), ctx.act.seq_tokens, ctx.act.act_bytes
    streams, iterations = m.num_residual_streams, m.mhc_sinkhorn_iterations
    launches, frac = mhc_layer_launches(m, r.fused), MHC_HBM_FRACTION
    gb, ms = mhc_layer_bytes(m, tokens, act, r.fused) / 1e9, mhc_layer_s(m, tokens, act, r) * 1e3
    if r.fused:
        note = msg(
            "dsv4_mhc.note_fused", streams=streams, iterations=iterations, launches=launches, gb=gb, ms=ms, frac=frac
        )
    else:
        note = msg(
            "dsv4_mhc.note_native", streams=streams, iterations=iterations, launches=launches, gb=gb, ms=ms, frac=frac
        )
    return [note]


def hybrid_mtp_notes(ctx: StepContext) -> list[str]:
    """How a hybrid model's MTP block is costed: its depths, its weight sets (one with
    ``mtp_use_repeated_layer``) and its layers timed as the decoder's of the same kind
    (``moeplan.model.time.stage.layer_groups``); empty without one."""
    m, depths = ctx.model, ctx.s.mtp_num_layers
    if m.mtp_layer_pattern is None or depths <= 0:
        return []
    sets = min(1, depths) if m.mtp_use_repeated_layer else depths
    return [msg("model_hybrid_mtp.assumption", pattern=m.mtp_layer_pattern, depths=depths, sets=sets)]


def mla_shape_notes(ctx: StepContext) -> list[Message]:
    """What the attention time of an MLA model at the measured training shape rests on
    (:data:`~moeplan.model.executed_flops.MLA_SHAPE_RELATIVE`): the shape ratios, and on Hopper that
    the backward figure is of cuDNN's deterministic algorithm. Empty for other heads, GPUs and FP8
    attention."""
    m = ctx.model
    if not m.qk_head_dim or m.dsa_indexer_topk:  # DSA times its sparse core at the sparse kernel's rate
        return []
    rel = mla_shape_relative(ctx.gpu, m.attention_head_dims, m.attention_v_head_dim, ctx.fp8_attention)
    if rel is None:
        return []
    family = arch_family(ctx.gpu)
    d_v = m.attention_v_head_dim
    out = [
        msg(
            "attention_kernels.mla_cudnn_shape",
            d_qk=m.attention_head_dims - d_v,
            d_v=d_v,
            family=family,
            fwd=rel[0],
            bwd=rel[1],
        )
    ]
    if family == "Hopper":
        out.append(msg("attention_kernels.mla_deterministic_backward", family=family))
    return out


def flash2_notes(ctx: StepContext) -> list[Message]:
    """Said when the model's attention heads run FlashAttention-2 on Blackwell
    (:func:`~moeplan.model.time.context.attention_kernel`): which Transformer Engine, and which published
    figures time them."""
    m = ctx.model
    if m.dsa_indexer_topk or ctx.attention_kernel != "flash2":
        return []  # DSA times its attention on its own paths (dsa_notes)
    d_v = m.attention_v_head_dim
    te = ctx.s.versions.get("transformer_engine")
    d_qk, gpu = m.attention_head_dims - d_v, ctx.gpu.id
    fwd, bwd = FA2_B200_FWD_TFLOPS, FA2_BLACKWELL_BWD_RELATIVE
    if te is None:
        return [
            msg("attention_kernels.flash2_fallback_te_unknown", d_qk=d_qk, d_v=d_v, gpu=gpu, fwd_tflops=fwd, bwd=bwd)
        ]
    return [msg("attention_kernels.flash2_fallback", d_qk=d_qk, d_v=d_v, gpu=gpu, fwd_tflops=fwd, bwd=bwd, te=str(te))]


def workload_notes(ctx: StepContext) -> list[str]:
    """Frozen parts, a workload measured at another length or for a model without a vision tower, and
    the planning mix of a VLM without a workload."""
    s, vc = ctx.s, ctx.vision
    t, m, w = s.training, ctx.model, s.input.workload
    out = []
    if t.freeze_language_model and ctx.lm_factor < 2 / 3:
        out.append("nothing is trainable (language model frozen and no trainable vision tower)")
    if t.freeze_vision_model or t.freeze_language_model:
        out.append(
            "MFU and model TFLOP/s count full training FLOPs (Megatron's convention); a frozen part does less work"
        )
    if s.peft is not None:
        out.append(
            f"LoRA dim {s.peft.dim}: the frozen base runs forward and input gradients only (no weight-gradient "
            "GEMMs), the adapters' GEMMs are added to the dense / expert GEMM time; MFU and model TFLOP/s count "
            "full training FLOPs of the base (Megatron's convention)"
        )
    if w is not None and w.seq_length and w.seq_length != t.seq_length:
        out.append(f"workload measured at seq {w.seq_length}: per-sequence image figures scaled to {t.seq_length}")
    if w is not None and m.vision is None and (w.image_patches_per_sequence or w.image_tokens_per_sequence):
        out.append("the model has no vision tower: the workload's image figures are ignored (its padding is not)")
    if vc is not None and vc.assumed:
        out.append(msg("notes.vision_planning_mix"))
    out.extend(time_notes(m))
    if m.has_mamba:
        out.append(msg("model_mamba_time.kernel_model", conv=CONV_HBM_FRACTION, ssd_tb_s=ssd_bytes_per_s() / 1e12))
    out.extend(gated_deltanet_notes(ctx))
    out.extend(hybrid_mtp_notes(ctx))
    out.extend(dsa_notes(ctx))
    out.extend(mla_shape_notes(ctx))
    out.extend(flash2_notes(ctx))
    out.extend(dsv4_kernel_notes(ctx))
    out.extend(msa_notes(m))
    out.extend(model_family_notes(ctx))
    out.extend(router_fusion_notes(ctx, MOE_LAYER_LAUNCHES))
    if s.layout.overlap_moe_expert_parallel_comm and not ctx.ep_overlap:
        out.append(
            "overlap_moe_expert_parallel_comm pairs one microbatch's forward with another's backward "
            "(combined 1F1B): with one microbatch per step it hides nothing"
        )
    return out


#: NVIDIA's measurements of EP A2A overlap run eagerly on Blackwell, where it lost: what the host
#: work of the split-layer schedule costs there is not modelled (no source measures it alone)
EP_OVERLAP_HOST_EVIDENCE = (
    "NVIDIA turned it off for Qwen3-235B-A22B on 64 B200 (PP8 VPP4 EP8) 'due to CPU overhead' "
    "(Megatron-Bridge PR #1760) and found it and VPP 'degraded perf' on B300 (Megatron-Bridge #3399)"
)


def ep_overlap_host_notes(ctx: StepContext, hidden_ep_s: float, step_s: float) -> list[str]:
    """EP A2A overlap run without a full-iteration CUDA graph on Blackwell: the estimate credits the
    exchange it hides (``hidden_ep_s``, s, after the release factor, against a ``step_s`` s step), but
    not the host work of the split-layer schedule, which NVIDIA measured as a net loss there
    (:data:`EP_OVERLAP_HOST_EVIDENCE`). Nothing when overlap is off, graphed whole, or on another
    architecture (on H100 the same schedule measured 0.76× the step, Megatron-Bridge PR #3862)."""
    if not ctx.ep_overlap or ctx.graphs == "full_iteration" or arch_family(ctx.gpu) != "Blackwell":
        return []
    share = hidden_ep_s / step_s if step_s > 0 else 0.0
    return [
        f"EP overlap hides {hidden_ep_s:.2f} s of exchange here ({share * 100:.0f} % of the step), but the host work "
        f"its split-layer schedule adds beyond the launch time, run without a full-iteration CUDA graph, is "
        f"not costed: "
        f"{EP_OVERLAP_HOST_EVIDENCE}; measure the step with overlap_moe_expert_parallel_comm on and off"
    ]


def outcome_notes(s: Scenario, split_as_given: bool, tflops: float, bf16: float, prec_peak: float) -> list[str]:
    """A split that was balanced for the estimate, and an MFU above 1 with why."""
    out = []
    if not split_as_given:
        out.append("layers do not split as given: estimated with a near-even split")
    if tflops > bf16:
        precision = s.training.precision
        why = (
            f"{precision} GEMMs run at a higher peak ({tflops / prec_peak:.2f} of it)"
            if precision != "bf16"
            else "Megatron's FLOP count credits sliding-window layers with full causal attention"
        )
        out.append(f"MFU above 1 against the dense BF16 peak (the default reference): {why}")
    return out
