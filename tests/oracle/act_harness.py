"""Activation oracle: what megatron-core 0.16.1 keeps for backward in ONE forward of ONE layer.

Runs the real megatron-core ``TransformerLayer`` (local spec, no Transformer Engine) forward on CPU in
bf16, inside a spawned gloo world of ``tp`` ranks, under ``torch.autograd.graph.saved_tensors_hooks``,
and lists every storage kept for backward at the end of the forward:

* one entry per storage (keyed by the storage object, i.e. its ``data_ptr`` at the time it was saved
  and its identity, so that a storage freed later and a new one at the same address are not merged);
* its size is read at the END of the forward, so the outputs that megatron-core's
  ``CheckpointWithoutOutput`` (``layernorm``, ``moe_act``, ``mla_up_proj`` recompute) frees with
  ``untyped_storage().resize_(0)`` count 0;
* parameters and views of parameters are excluded; so are the tensors created outside the layer and
  shared by all layers (the RoPE frequencies); the layer input is kept and marked ``layer_input``.

Each entry carries: ``nbytes``, ``shape``/``dtype``/``numel`` of the largest saved view, the module that
saved it (``saved_in``: innermost module running at pack time), the module whose output it is
(``produced_by``: innermost module returning it, or ``""``) and ``site`` (the first megatron-core /
harness source line on the Python stack at pack time, e.g. ``dot_product_attention.py:194``).

Stand-ins (CPU has no Transformer Engine, no grouped_gemm, no fused kernels):

* ``jit_fuser`` is disabled (``torch.compile`` on 2 CPU cores is too slow); the fused SwiGLU and
  weighted-SwiGLU are megatron-core's own ``autograd.Function``s, which save the same tensors compiled
  or not. ``bias_activation_fusion=True`` (Megatron-LM's default ``--bias-swiglu-fusion``).
* Routed experts: the legacy ``GroupedMLP`` (``moe_grouped_gemm`` - the only local expert module that
  supports ``moe_act`` recompute) with ``grouped_gemm.ops.gmm`` replaced by a Python
  ``autograd.Function`` that saves what grouped_gemm's ``GroupedGemm`` saves: ``(a, b, batch_sizes)``.
  Its activation is megatron-core's ``weighted_bias_swiglu_impl`` (what ``TEGroupedMLP`` runs with
  ``bias_activation_fusion``) instead of GroupedMLP's eager ``silu(x1) * x2 * probs``.
* Norms: the local spec's ``WrappedTorchNorm`` (torch.nn.RMSNorm, a CPU composite that keeps fp32
  copies of its input) is replaced by an ``autograd.Function`` RMSNorm that keeps what Transformer
  Engine's and Apex's fused RMSNorm keep: the input (bf16) and rsigma (fp32, one per token). It
  also lifts WrappedTorchNorm's ``not sequence_parallel`` assertion (about the weight's gradient
  reduction, not the forward).
* MLA core attention: the local ``DotProductAttention`` does not take MLA's ``k_channels`` /
  ``v_channels`` in 0.16.1; a subclass accepts them and sizes its output with ``v_channels``.
* Gated attention output: ``Attention._apply_output_gate`` is compiled with ``torch.compile``
  (inductor on CPU), as ``jit_fuser`` does on GPU.
* Attention is the unfused local one (``baddbmm`` -> softmax -> ``bmm``), with
  ``attention_softmax_in_fp32=False`` (the bf16 fused upper-triangular softmax keeps a bf16 output)
  and dropout 0.
"""

from __future__ import annotations

import os
import socket
import sys
import traceback
import warnings
from typing import Any

import torch

HERE = os.path.dirname(os.path.abspath(__file__))


def _quiet() -> None:
    warnings.filterwarnings("ignore")
    import logging

    logging.disable(logging.WARNING)


# --------------------------------------------------------------------------------------------------
# stand-ins
# --------------------------------------------------------------------------------------------------


class _GroupedGemm(torch.autograd.Function):
    """grouped_gemm.ops.gmm stand-in: same saved tensors as grouped_gemm's GroupedGemm
    (``ctx.save_for_backward(a, b, batch_sizes)``)."""

    @staticmethod
    def forward(ctx, a, b, batch_sizes, trans_b):  # type: ignore[override]
        ctx.save_for_backward(a, b, batch_sizes)
        ctx.trans_b = trans_b
        outs = []
        start = 0
        for i, n in enumerate(batch_sizes.tolist()):
            w = b[i].t() if trans_b else b[i]
            outs.append(a[start : start + n] @ w)
            start += n
        return torch.cat(outs) if outs else a.new_empty(0, b.shape[-1])

    @staticmethod
    def backward(ctx, g):  # type: ignore[override]
        raise NotImplementedError("forward-only oracle")


class _RMSNormFn(torch.autograd.Function):
    """RMSNorm that saves what Transformer Engine's RMSNorm saves: the input and rsigma (fp32).

    ``contiguous=True`` is TE's ``RMSNorm`` op (``ops/basic/rmsnorm.py``: ``x = input_.contiguous()``,
    ``ctx.save_for_backward(x, rstdevs)``), used for TENorm (input / pre-MLP / q / k layernorm): a
    non-contiguous input (the K slice of the fused QKV output) is kept as a compact copy.
    ``contiguous=False`` is TE's ``LayerNormLinear`` (``inputmat = inp.view(-1, in_features)``, saved),
    which the TE spec uses for MLA's q/kv up-projections: the kept input is a view, and so the whole
    ``linear_kv_down_proj`` output ([kv_lora_rank | rope dims]) stays alive.
    """

    @staticmethod
    def forward(ctx, x, weight, eps, contiguous):  # type: ignore[override]
        if contiguous:
            x = x.contiguous()
        xf = x.float()
        rsigma = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
        ctx.save_for_backward(x, weight, rsigma)
        return (xf * rsigma).to(x.dtype) * weight

    @staticmethod
    def backward(ctx, g):  # type: ignore[override]
        raise NotImplementedError("forward-only oracle")


class _TELikeRMSNorm(torch.nn.Module):
    def __init__(self, hidden_size: int, eps: float, dtype) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(hidden_size, dtype=dtype))
        self.eps = eps
        self.contiguous = True

    def forward(self, x):
        return _RMSNormFn.apply(x, self.weight, self.eps, self.contiguous)


def _gmm(a, b, batch_sizes, trans_b=False):
    return _GroupedGemm.apply(a, b, batch_sizes.cpu(), trans_b)


def _install_stand_ins() -> None:
    import types

    import megatron.core.jit as mjit

    mjit.disable_jit_fuser()  # before the fusions are imported (they bind jit_fuser at import)

    # CPU only: megatron-core asks torch.cuda.current_device() for the device of a few small
    # tensors (RoPE inv_freq, MoE helpers); answer "cpu". The CUDA RNG tracker's fork (dropout
    # is 0 here) becomes a no-op.
    import contextlib

    torch.cuda.current_device = lambda: "cpu"  # type: ignore[assignment]
    from megatron.core.tensor_parallel import random as mrandom

    mrandom.CudaRNGStatesTracker.fork = lambda self, name=None: contextlib.nullcontext()  # type: ignore[method-assign]
    mrandom._get_cuda_rng_state = lambda *a, **k: torch.get_rng_state()  # checkpoint()'s RNG bookkeeping
    mrandom._set_cuda_rng_state = lambda *a, **k: None
    # CheckpointWithoutOutput (0.16.1: ``self.fp8 = fp8 is not None`` is True even for fp8=False)
    # always asks TE about FP8 and enters TE's activation_recompute_forward; without TE, no-ops.
    if not hasattr(mrandom, "FP8GlobalStateManager"):
        mrandom.FP8GlobalStateManager = types.SimpleNamespace(  # type: ignore[attr-defined]
            is_fp8_enabled=lambda: False, get_fp8_recipe=lambda: None
        )
        mrandom.activation_recompute_forward = lambda **k: contextlib.nullcontext()  # type: ignore[attr-defined]

    from megatron.core.transformer.moe import grouped_gemm_util as gg
    from megatron.core.transformer.moe import moe_utils

    if not hasattr(moe_utils, "te_general_gemm"):  # the router GEMM falls back to torch.mm
        moe_utils.te_general_gemm = None  # type: ignore[attr-defined]

    gg.grouped_gemm = types.SimpleNamespace(ops=types.SimpleNamespace(gmm=_gmm))
    gg.ops = gg.grouped_gemm.ops

    # Norms: Transformer Engine's (and Apex's) RMSNorm keep the input (bf16) and 1/rms (fp32, one per
    # token) for backward. torch.nn.RMSNorm on CPU is a composite that keeps fp32 copies instead, so
    # the local spec's WrappedTorchNorm is swapped for an autograd.Function that keeps what TE keeps.
    # (It also drops WrappedTorchNorm's "not sequence_parallel" assertion, which is about the weight's
    # gradient reduction, not the forward.)
    from megatron.core.transformer import torch_norm

    if not getattr(torch_norm.WrappedTorchNorm.__new__, "_te_like", False):

        def new(cls, config, hidden_size, eps=1e-5, **k):
            assert config.normalization == "RMSNorm", "the activation oracle builds RMSNorm models"
            return _TELikeRMSNorm(hidden_size, eps, config.params_dtype)

        new._te_like = True  # type: ignore[attr-defined]
        torch_norm.WrappedTorchNorm.__new__ = new  # type: ignore[method-assign]

    from megatron.core.models.common.embeddings.rotary_pos_embedding import RotaryEmbedding

    if not getattr(RotaryEmbedding.__init__, "_cpu_patched", False):
        orig = RotaryEmbedding.__init__

        def init(self, *a: Any, **k: Any) -> None:
            k["use_cpu_initialization"] = True
            orig(self, *a, **k)

        init._cpu_patched = True  # type: ignore[attr-defined]
        RotaryEmbedding.__init__ = init  # type: ignore[method-assign]


def _mla_core_attention_cls():
    from megatron.core.transformer.dot_product_attention import DotProductAttention

    class MLADotProductAttention(DotProductAttention):
        """Local unfused attention that accepts MLA's k_channels / v_channels."""

        def __init__(self, config, *a, k_channels=None, v_channels=None, **k):
            super().__init__(config, *a, **k)
            if v_channels is not None:
                self.hidden_size_per_partition = self.num_attention_heads_per_partition * v_channels

    return MLADotProductAttention


def _weighted_swiglu_experts(experts) -> None:
    """GroupedMLP's eager activation -> megatron-core's fused weighted SwiGLU (as TEGroupedMLP)."""
    from megatron.core.fusions.fused_bias_swiglu import weighted_bias_swiglu_impl

    experts.activation_func_with_probs = lambda x, probs: weighted_bias_swiglu_impl(x, None, probs, False)


# --------------------------------------------------------------------------------------------------
# the measurement
# --------------------------------------------------------------------------------------------------

_SKIP_FILES = ("torch/", "/torch\\", "contextlib.py", "functools.py")


def _site() -> str:
    f = sys._getframe(2)
    while f is not None:
        fn = f.f_code.co_filename.replace("\\", "/")
        if "megatron/core/" in fn:
            return fn.split("megatron/core/")[1] + ":" + str(f.f_lineno)
        if fn.endswith("act_harness.py"):
            return "act_harness.py:" + str(f.f_lineno)
        f = f.f_back
    return "?"


def _tensors(x):
    if isinstance(x, torch.Tensor):
        yield x
    elif isinstance(x, (tuple, list)):
        for y in x:
            yield from _tensors(y)
    elif isinstance(x, dict):
        for y in x.values():
            yield from _tensors(y)


def measure_layer(layer, hidden, rotary_pos_emb, attention_mask=None) -> list[dict]:
    """One forward of ``layer`` under saved_tensors_hooks; returns the kept storages."""
    param_keys = {p.untyped_storage()._cdata for p in layer.parameters()}
    shared_keys = set()
    for t in (rotary_pos_emb, attention_mask):
        if t is not None:
            shared_keys.add(t.untyped_storage()._cdata)
    input_key = hidden.untyped_storage()._cdata

    stack: list[str] = [""]
    producer: dict[int, str] = {}
    outputs_alive: list = []  # keep module outputs alive so that storage keys are not reused
    handles = []
    for name, mod in layer.named_modules():
        if not name:
            continue

        def pre(m, args, _n=name):
            stack.append(_n)

        def post(m, args, out, _n=name):
            if stack and stack[-1] == _n:
                stack.pop()
            for t in _tensors(out):
                producer.setdefault(t.untyped_storage()._cdata, _n)
                outputs_alive.append(t)

        handles.append(mod.register_forward_pre_hook(pre))
        handles.append(mod.register_forward_hook(post))

    saved: dict[int, dict] = {}
    keep_alive: list = []

    def pack(t: torch.Tensor):
        try:
            st = t.untyped_storage()
        except Exception:  # noqa: BLE001 - e.g. sparse / wrapper tensors
            return t
        key = st._cdata
        rec = saved.get(key)
        view = dict(shape=list(t.shape), dtype=str(t.dtype).replace("torch.", ""), numel=t.numel())
        if rec is None:
            saved[key] = rec = dict(
                key=key,
                data_ptr=st.data_ptr(),
                bytes_at_save=st.nbytes(),
                saved_in=stack[-1],
                site=_site(),
                views=[view],
                is_param=key in param_keys,
                shared=key in shared_keys,
                layer_input=key == input_key,
                requires_grad=bool(t.requires_grad),
            )
            keep_alive.append((key, st, t))
        elif view not in rec["views"]:
            rec["views"].append(view)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = layer(hidden, attention_mask=attention_mask, rotary_pos_emb=rotary_pos_emb)
    for h in handles:
        h.remove()
    sizes = {key: st.nbytes() for key, st, _ in keep_alive}
    rows = []
    for key, rec in saved.items():
        if rec["is_param"]:
            continue
        big = max(rec["views"], key=lambda v: v["numel"])
        rows.append(
            dict(
                nbytes=sizes[key],
                bytes_at_save=rec["bytes_at_save"],
                shape=big["shape"],
                dtype=big["dtype"],
                numel=big["numel"],
                n_views=len(rec["views"]),
                saved_in=rec["saved_in"],
                produced_by=producer.get(key, ""),
                site=rec["site"],
                shared=rec["shared"],
                layer_input=rec["layer_input"],
            )
        )
    del out
    keep_alive.clear()
    outputs_alive.clear()
    return rows


# --------------------------------------------------------------------------------------------------
# building one layer
# --------------------------------------------------------------------------------------------------


def _config(arch: dict, tp: int, sp: bool, recompute: list[str] | None):
    from megatron.core.transformer.transformer_config import MLATransformerConfig, TransformerConfig

    kw = dict(arch)
    kw.setdefault("normalization", "RMSNorm")
    if kw.pop("swiglu", True):
        kw.update(gated_linear_unit=True, activation_func=torch.nn.functional.silu)
    kw.update(
        num_layers=1,
        tensor_model_parallel_size=tp,
        sequence_parallel=sp,
        bf16=True,
        params_dtype=torch.bfloat16,
        attention_dropout=0.0,
        hidden_dropout=0.0,
        add_bias_linear=False,
        bias_activation_fusion=True,
        bias_dropout_fusion=False,
        masked_softmax_fusion=False,
        attention_softmax_in_fp32=False,
        apply_rope_fusion=False,
        gradient_accumulation_fusion=False,
        use_cpu_initialization=True,
        perform_initialization=True,
    )
    if kw.get("num_moe_experts"):
        kw.update(
            moe_grouped_gemm=True,
            moe_token_dispatcher_type="allgather",
            moe_router_force_load_balancing=True,
            moe_shared_expert_overlap=False,
            moe_aux_loss_coeff=0.0,
            expert_tensor_parallel_size=tp,
        )
    if recompute is not None:
        kw.update(recompute_granularity="selective", recompute_modules=list(recompute))
    cls = MLATransformerConfig if kw.get("multi_latent_attention") else TransformerConfig
    return cls(**kw)


def _build_layer(config):
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.transformer.spec_utils import build_module

    spec = get_gpt_layer_local_spec(
        num_experts=config.num_moe_experts,
        moe_grouped_gemm=bool(config.num_moe_experts),
        qk_layernorm=config.qk_layernorm,
        multi_latent_attention=config.multi_latent_attention,
        normalization=config.normalization,
        moe_use_legacy_grouped_gemm=True,
    )
    if config.multi_latent_attention:
        import megatron.core.transformer.multi_latent_attention as mla

        mla.HAVE_TE = False
        spec.submodules.self_attention.submodules.core_attention = _mla_core_attention_cls()
    layer = build_module(spec, config=config, layer_number=1)
    if config.multi_latent_attention:  # TE spec: norms fused into the up-projections (keep a view)
        for name in ("q_layernorm", "kv_layernorm"):
            norm = getattr(layer.self_attention, name, None)
            if isinstance(norm, _TELikeRMSNorm):
                norm.contiguous = False
    if config.attention_output_gate:
        # megatron-core decorates Attention._apply_output_gate with jit_fuser (torch.compile on GPU);
        # compile it here too (inductor on CPU; what the compiled graph keeps for backward is what
        # the GPU run keeps), instead of the eager fp32 sigmoid that disable_jit_fuser leaves.
        from megatron.core.transformer.attention import Attention

        if not getattr(Attention._apply_output_gate, "_oracle_compiled", False):
            fn = torch.compile(Attention._apply_output_gate)
            fn._oracle_compiled = True  # type: ignore[attr-defined]
            Attention._apply_output_gate = fn  # type: ignore[method-assign]
    experts = getattr(getattr(layer, "mlp", None), "experts", None)
    if experts is not None and hasattr(experts, "activation_func_with_probs"):
        _weighted_swiglu_experts(experts)
    layer.train()
    return layer


def _rotary(config, seq: int):
    if config.multi_latent_attention:
        return None  # MLA builds its own per call
    from megatron.core.models.common.embeddings.rotary_pos_embedding import RotaryEmbedding

    rope = RotaryEmbedding(kv_channels=config.kv_channels, rotary_percent=1.0, rotary_base=10000)
    return rope(seq)


def _worker(rank, world, port, arch, settings, seq, mbs, q) -> None:
    _quiet()
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(max(1, (os.cpu_count() or 2) // world))
    try:
        dist.init_process_group("gloo", rank=rank, world_size=world)
        _install_stand_ins()
        from megatron.core import parallel_state as ps

        ps.initialize_model_parallel(tensor_model_parallel_size=world, create_gloo_process_groups=False)
        results = {}
        for name, (sp, recompute) in settings.items():
            try:
                torch.manual_seed(0)
                config = _config(arch, world, sp, recompute)
                layer = _build_layer(config)
                s_local = seq // world if sp and world > 1 else seq
                hidden = torch.randn(s_local, mbs, config.hidden_size, dtype=torch.bfloat16, requires_grad=True)
                # the causal mask megatron-core would build (and cache, shared by all layers)
                mask = torch.triu(torch.ones(seq, seq), diagonal=1).bool()[None, None]
                rows = measure_layer(layer, hidden, _rotary(config, seq), mask)
                results[name] = dict(rows=rows)
                del layer
            except Exception as e:  # noqa: BLE001 - report per setting
                results[name] = dict(error=f"{type(e).__name__}: {e}", tb=traceback.format_exc()[-3000:])
        q.put((rank, results))
    except Exception as e:  # noqa: BLE001
        q.put((rank, {"__error__": f"{type(e).__name__}: {e}\n{traceback.format_exc()[-3000:]}"}))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def mcore_saved_tensors(
    arch: dict,
    settings: dict[str, tuple[bool, list[str] | None]],
    tp: int = 1,
    seq: int = 256,
    mbs: int = 2,
    timeout_s: float = 600.0,
) -> dict[str, dict]:
    """Run one forward of one layer per setting in a ``tp``-rank gloo world; rank 0's kept storages.

    ``settings``: name -> (sequence_parallel, recompute_modules or None for no recompute).
    Returns name -> {"rows": [...]} or {"error": ...}.
    """
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    q = ctx.SimpleQueue()
    port = _free_port()
    procs = [ctx.Process(target=_worker, args=(r, tp, port, arch, settings, seq, mbs, q)) for r in range(tp)]
    for p in procs:
        p.start()
    results = {}
    for _ in range(tp):
        r, c = q.get()
        results[r] = c
    for p in procs:
        p.join(timeout_s)
        if p.is_alive():
            p.kill()
    if "__error__" in results[0]:
        raise RuntimeError(results[0]["__error__"])
    return results[0]


def table(rows: list[dict]) -> str:
    """Human-readable listing of ``measure_layer`` rows."""
    out = []
    for r in sorted(rows, key=lambda r: -r["nbytes"]):
        flag = "input " if r["layer_input"] else ("shared" if r["shared"] else "")
        out.append(
            f"{r['nbytes']:>10} {r['dtype']:>8} {str(r['shape']):<22} {flag:6} saved_in={r['saved_in']:<38} "
            f"produced_by={r['produced_by']:<30} {r['site']}"
        )
    return "\n".join(out)


KINDS: dict[str, dict] = {
    # Qwen3-8B / 4: h 4096 -> 1024, 32 -> 8 heads, 8 -> 2 KV groups, head_dim 128, ffn 3h
    "gqa_dense": dict(
        hidden_size=1024,
        num_attention_heads=8,
        num_query_groups=2,
        kv_channels=128,
        ffn_hidden_size=3072,
        qk_layernorm=True,
    ),
    # Qwen3-30B-A3B / 2: h 2048 -> 1024, 32 -> 16 heads (nh*d = 2h), 4 -> 2 groups, 128 -> 64 experts,
    # top-8, expert ffn 768 -> 384, no shared expert
    "gqa_moe": dict(
        hidden_size=1024,
        num_attention_heads=16,
        num_query_groups=2,
        kv_channels=128,
        ffn_hidden_size=3072,
        qk_layernorm=True,
        num_moe_experts=64,
        moe_router_topk=8,
        moe_ffn_hidden_size=384,
    ),
    # DeepSeek-V2-Lite / 2: h 2048 -> 1024, 16 -> 8 heads, kv_lora 512 -> 256, head dims kept
    # (nope 128, rope 64, v 128), 64 -> 32 experts, top-6, expert ffn 1408 -> 704, 2 shared experts
    "mla_moe_shared": dict(
        hidden_size=1024,
        num_attention_heads=8,
        multi_latent_attention=True,
        q_lora_rank=None,
        kv_lora_rank=256,
        qk_head_dim=128,
        qk_pos_emb_head_dim=64,
        v_head_dim=128,
        qk_layernorm=True,
        rope_type="rope",
        ffn_hidden_size=5472,
        num_moe_experts=32,
        moe_router_topk=6,
        moe_ffn_hidden_size=704,
        moe_shared_expert_intermediate_size=1408,
    ),
    # DeepSeek-V3 / 8: h 7168 -> 896, 128 -> 16 heads, q_lora 1536 -> 192, kv_lora 512 -> 64, head dims
    # kept, 256 -> 32 experts, top-8, expert ffn 2048 -> 256, 1 shared expert
    "mla_q_lora_moe_shared": dict(
        hidden_size=896,
        num_attention_heads=16,
        multi_latent_attention=True,
        q_lora_rank=192,
        kv_lora_rank=64,
        qk_head_dim=128,
        qk_pos_emb_head_dim=64,
        v_head_dim=128,
        qk_layernorm=True,
        rope_type="rope",
        ffn_hidden_size=2304,
        num_moe_experts=32,
        moe_router_topk=8,
        moe_ffn_hidden_size=256,
        moe_shared_expert_intermediate_size=256,
    ),
    # Qwen3-Next-80B-A3B full-attention layer / 2: gated attention output, 16 heads x 256, 2 groups
    "gated_attn_dense": dict(
        hidden_size=1024,
        num_attention_heads=8,
        num_query_groups=2,
        kv_channels=256,
        ffn_hidden_size=3072,
        qk_layernorm=True,
        attention_output_gate=True,
    ),
}


def settings_for(arch: dict, tp: int) -> dict[str, tuple[bool, list[str] | None]]:
    """No recompute, then every selective recompute module megatron-core 0.16.1 accepts for this
    layer, alone. SP whenever TP > 1."""
    sp = tp > 1
    mods = ["core_attn", "layernorm"]
    if arch.get("multi_latent_attention"):
        mods.append("mla_up_proj")
    if arch.get("num_moe_experts"):
        mods += ["moe", "moe_act"]
        if arch.get("moe_shared_expert_intermediate_size"):
            mods.append("shared_experts")
    else:
        mods.append("mlp")
    out: dict[str, tuple[bool, list[str] | None]] = {"none": (sp, None)}
    for m in mods:
        out[m] = (sp, [m])
    return out


if __name__ == "__main__":
    kind = sys.argv[1] if len(sys.argv) > 1 else "gqa_dense"
    tp = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    out = mcore_saved_tensors(KINDS[kind], settings_for(KINDS[kind], tp), tp=tp)
    for k, v in out.items():
        print("==", k, sum(r["nbytes"] for r in v.get("rows", [])))
        print(table(v["rows"]) if "rows" in v else v["tb"])
