"""Oracle harness: use the REAL megatron-core (0.16.1) as an independent reference.

Runs on CPU only, without Transformer Engine / Apex, and never initialises CUDA.
Needs the oracle venv (see tests/oracle/README.md); it is NOT imported by moeplan.

API
---
mcore_config_check(**kwargs) -> (accepted, message)
    Builds ``TransformerConfig(**kwargs)`` (or ``MLATransformerConfig`` when
    ``multi_latent_attention=True``), i.e. runs ModelParallelConfig +
    TransformerConfig ``__post_init__`` validation.  No torch.distributed needed.
mcore_param_counts(arch, tp=1, pp=1, ep=1, etp=None, **overrides) -> dict
    Builds megatron-core's own GPTModel (local spec, meta device, no init) on
    every rank of a CPU/gloo world of size W = lcm(tp, etp*ep) * pp spawned with
    torch.multiprocessing, and returns per-rank parameter counts by category.
arch_from_hf(hf: dict, num_layers=None) -> dict
    Convenience: HF config.json -> ``arch`` dict (Qwen3 / Qwen3-MoE / Mixtral /
    DeepSeek-V2 style).  Vocab is NOT padded; use ``pad_vocab``.
"""

from __future__ import annotations

import math
import os
import socket
import warnings
from typing import Any

import torch

# Categories are additive: their sum == "total".
CATEGORIES = (
    "embedding",  # embedding.word_embeddings (+ position_embeddings if learned_absolute)
    "output_layer",  # output_layer.weight (absent on non-last PP stages / when tied on stage 0)
    "attention",  # self_attention linear weights/biases (QKV/proj, or MLA projections)
    "attn_norms",  # q_layernorm / k_layernorm / MLA kv_layernorm (inside self_attention)
    "norms",  # input_layernorm, pre_mlp_layernorm, final_layernorm
    "router",  # mlp.router.* (weight; expert_bias is a buffer, not counted)
    "routed_experts",  # mlp.experts.* (this rank's local experts only)
    "shared_experts",  # mlp.shared_experts.* (incl. gate_weight if moe_shared_expert_gate)
    "mlp",  # dense-layer MLP (mlp.linear_fc1/fc2 of non-MoE layers)
    "other",  # anything unclassified (should be 0; non-zero = harness needs updating)
)

# Keys of `arch` consumed by the harness itself (everything else goes to TransformerConfig).
_NON_CONFIG_KEYS = ("vocab_size", "untie_embeddings_and_output_weights")


def _quiet() -> None:
    """Silence the 'Apex/TE not installed' UserWarnings megatron emits on import."""
    warnings.filterwarnings("ignore", category=UserWarning)
    warnings.filterwarnings("ignore", category=FutureWarning)


def pad_vocab(vocab_size: int, tp: int, divisible_by: int = 128) -> int:
    """Megatron-LM's ``_vocab_size_with_padding``: round up to divisible_by * tp."""
    multiple = divisible_by * tp
    return int(math.ceil(vocab_size / multiple) * multiple)


def _config_class(kwargs: dict[str, Any]) -> type:
    from megatron.core.transformer.transformer_config import (
        MLATransformerConfig,
        TransformerConfig,
    )

    return MLATransformerConfig if kwargs.get("multi_latent_attention") else TransformerConfig


def mcore_config_check(assume_te_version: str | None = "2.10.0", **kwargs: Any) -> tuple[bool, str]:
    """Construct TransformerConfig(**kwargs); return (accepted, "ExcType: message" or "").

    Minimal valid kwargs: num_layers, hidden_size, num_attention_heads (ffn_hidden_size
    defaults to 4*hidden, kv_channels to hidden/heads, num_query_groups to heads).
    PP>1 additionally needs pipeline_dtype (e.g. torch.bfloat16), else ValueError.
    Without TE installed, megatron's ``is_te_min_version`` would crash with TypeError
    (None >= Version) in TE-gated checks (fp8, cuda graphs, moe_grouped_gemm, ...), so
    we pretend TE == ``assume_te_version`` (set None to disable the pretence).
    """
    _quiet()
    import megatron.core.utils as mcu
    from packaging.version import Version

    saved = mcu._te_version
    if assume_te_version is not None and saved is None:
        mcu._te_version = Version(assume_te_version)
    try:
        _config_class(kwargs)(**kwargs)
        return True, ""
    except Exception as e:  # AssertionError, ValueError, NotImplementedError, ...
        return False, f"{type(e).__name__}: {e}"
    finally:
        mcu._te_version = saved


def arch_to_config_kwargs(arch: dict[str, Any]) -> dict[str, Any]:
    """`arch` -> TransformerConfig kwargs (SwiGLU -> silu + gated_linear_unit)."""
    kw = {k: v for k, v in arch.items() if k not in _NON_CONFIG_KEYS}
    if kw.get("gated_linear_unit") and "activation_func" not in kw:
        kw["activation_func"] = torch.nn.functional.silu
    kw.setdefault("normalization", "RMSNorm")
    if kw.get("num_moe_experts"):
        # SequentialMLP (local spec, no grouped GEMM): same param count as TEGroupedMLP.
        kw.setdefault("moe_grouped_gemm", False)
        # Dispatcher has no params; "alltoall" creates a torch.cuda.Stream in __init__
        # (token_dispatcher.py:445) and "flex" needs DeepEP/GPU, so force "allgather".
        kw["moe_token_dispatcher_type"] = "allgather"
        kw["moe_shared_expert_overlap"] = False
    return kw


def _classify(name: str) -> str:
    if name.startswith("embedding."):
        return "embedding"
    if name.startswith("output_layer."):
        return "output_layer"
    if ".self_attention." in name:
        return "attn_norms" if "layernorm" in name else "attention"
    if "layernorm" in name:  # input_/pre_mlp_/final_layernorm
        return "norms"
    if ".mlp.router." in name:
        return "router"
    if ".mlp.experts." in name:
        return "routed_experts"
    if ".mlp.shared_experts." in name:
        return "shared_experts"
    if ".mlp." in name:
        return "mlp"
    return "other"


def _patch_rotary_cpu() -> None:
    """Stand-in: MLASelfAttention builds RotaryEmbedding without use_cpu_initialization,
    which calls torch.cuda.current_device().  Force CPU; inv_freq is a plain tensor
    attribute (not a parameter/buffer), so parameter counts are unaffected."""
    from megatron.core.models.common.embeddings.rotary_pos_embedding import RotaryEmbedding

    if getattr(RotaryEmbedding.__init__, "_cpu_patched", False):
        return
    orig = RotaryEmbedding.__init__

    def init(self, *a: Any, **k: Any) -> None:
        k["use_cpu_initialization"] = True
        orig(self, *a, **k)

    init._cpu_patched = True  # type: ignore[attr-defined]
    RotaryEmbedding.__init__ = init  # type: ignore[method-assign]


class _ParamFreeCoreAttention(torch.nn.Module):
    """Stand-in for MLA core attention.  In 0.16.1 the local DotProductAttention does not
    accept MLA's ``k_channels``/``v_channels`` kwargs (TypeError), i.e. MLA only builds with
    TEDotProductAttention.  Both have zero parameters, so counts are unaffected."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__()


def _swap_mla_core_attention(block_spec: Any) -> None:
    import megatron.core.transformer.multi_latent_attention as mla

    # Without TE, megatron.core.extensions.transformer_engine exports MagicMock stubs, so
    # mla.HAVE_TE is wrongly True and `isinstance(linear_proj, TELinear)` raises TypeError.
    mla.HAVE_TE = False
    for layer_spec in block_spec.layer_specs:
        layer_spec.submodules.self_attention.submodules.core_attention = _ParamFreeCoreAttention


def _worker(rank: int, world: int, port: int, arch: dict, par: dict, overrides: dict, q) -> None:
    """One spawned rank: gloo init -> initialize_model_parallel -> GPTModel on meta."""
    _quiet()
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    try:
        dist.init_process_group("gloo", rank=rank, world_size=world)
        from megatron.core import parallel_state as ps
        from megatron.core.models.gpt import GPTModel
        from megatron.core.models.gpt.gpt_layer_specs import get_gpt_decoder_block_spec

        # Works with gloo: create_group() uses the default (gloo) backend and the NCCL
        # options are None unless a nccl config file is given; no CUDA call on this path.
        ps.initialize_model_parallel(
            tensor_model_parallel_size=par["tp"],
            pipeline_model_parallel_size=par["pp"],
            expert_model_parallel_size=par["ep"],
            expert_tensor_parallel_size=par["etp"],
            create_gloo_process_groups=False,
        )
        kw = arch_to_config_kwargs(arch)
        kw.update(
            tensor_model_parallel_size=par["tp"],
            pipeline_model_parallel_size=par["pp"],
            expert_model_parallel_size=par["ep"],
            expert_tensor_parallel_size=par["etp"],
            sequence_parallel=False,  # WrappedTorchNorm asserts not SP; counts unaffected
            use_cpu_initialization=True,
            perform_initialization=False,
        )
        if par["pp"] > 1:
            kw.setdefault("pipeline_dtype", torch.bfloat16)
        kw.update(overrides)
        config = _config_class(kw)(**kw)
        _patch_rotary_cpu()
        # Stand-in: with tied embeddings and PP>1, LanguageModule syncs the last stage's
        # copy of word_embeddings via `.cuda()` + all_reduce.  Skip (values only).
        from megatron.core.models.common.language_module.language_module import LanguageModule

        LanguageModule._is_in_embd_group = lambda self: False  # type: ignore[method-assign]
        pp_rank = ps.get_pipeline_model_parallel_rank()
        spec = get_gpt_decoder_block_spec(config, use_transformer_engine=False, normalization=config.normalization)
        if config.multi_latent_attention:
            _swap_mla_core_attention(spec)
        with torch.device("meta"):
            model = GPTModel(
                config,
                spec,
                vocab_size=arch["vocab_size"],
                max_sequence_length=4096,
                pre_process=ps.is_pipeline_first_stage(),
                post_process=ps.is_pipeline_last_stage(),
                share_embeddings_and_output_weights=not arch.get("untie_embeddings_and_output_weights", True),
                position_embedding_type="rope",
            )
        counts = {c: 0 for c in CATEGORIES}
        for name, p in model.named_parameters():
            counts[_classify(name)] += p.numel()
        counts["total"] = sum(p.numel() for p in model.parameters())
        if par["with_shapes"]:
            counts["shapes"] = {n: tuple(p.shape) for n, p in model.named_parameters()}
        layers = [l.layer_number for l in model.decoder.layers]  # 1-based global numbers
        counts.update(
            tp_rank=ps.get_tensor_model_parallel_rank(),
            pp_rank=pp_rank,
            ep_rank=ps.get_expert_model_parallel_rank(),
            etp_rank=ps.get_expert_tensor_parallel_rank(),
            layers=layers,
            num_local_experts=getattr(
                next((l.mlp for l in model.decoder.layers if hasattr(l.mlp, "router")), None),
                "num_local_experts",
                0,
            ),
        )
        q.put((rank, counts))
    except Exception as e:  # report instead of hanging the parent
        q.put((rank, {"error": f"{type(e).__name__}: {e}"}))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def mcore_param_counts(
    arch: dict[str, Any],
    tp: int = 1,
    pp: int = 1,
    ep: int = 1,
    etp: int | None = None,
    timeout_s: float = 300.0,
    with_shapes: bool = False,
    **overrides: Any,
) -> dict[str, Any]:
    """Per-rank parameter counts of megatron-core's GPTModel for a (tp, pp, ep, etp) layout.

    Returns rank 0's counts at top level (see CATEGORIES + "total"), plus
    ``per_rank`` {global_rank: counts} for every rank, ``last_stage`` (= the last
    global rank, which is on the last PP stage in the default tp-cp-ep-dp-pp order)
    and ``world_size``.  ``with_shapes`` adds {param_name: shape} per rank.  ``etp`` defaults to tp (megatron's default).  ``overrides``
    go to TransformerConfig (e.g. num_layers_in_first_pipeline_stage=...).
    Raises RuntimeError with megatron's message if any rank fails.
    """
    import torch.multiprocessing as mp

    etp = tp if etp is None else etp
    world = math.lcm(tp, etp * ep) * pp  # smallest world where dp and edp are integers
    par = dict(tp=tp, pp=pp, ep=ep, etp=etp, with_shapes=with_shapes)
    ctx = mp.get_context("spawn")
    q = ctx.SimpleQueue()
    port = _free_port()
    procs = [ctx.Process(target=_worker, args=(r, world, port, arch, par, overrides, q)) for r in range(world)]
    for p in procs:
        p.start()
    results: dict[int, dict] = {}
    for _ in range(world):
        r, c = q.get()
        results[r] = c
    for p in procs:
        p.join(timeout_s)
        if p.is_alive():
            p.kill()
    errors = {r: c["error"] for r, c in results.items() if "error" in c}
    if errors:
        raise RuntimeError(f"megatron build failed: {errors}")
    out: dict[str, Any] = dict(results[0])
    out.update(per_rank=results, last_stage=results[world - 1], world_size=world)
    return out


def arch_from_hf(hf: dict[str, Any], num_layers: int | None = None) -> dict[str, Any]:
    """HF config.json -> arch dict (unpadded vocab).  MLA for DeepSeek-V2/V3 configs."""
    n = num_layers or hf["num_hidden_layers"]
    heads = hf["num_attention_heads"]
    arch: dict[str, Any] = dict(
        num_layers=n,
        hidden_size=hf["hidden_size"],
        ffn_hidden_size=hf["intermediate_size"],
        num_attention_heads=heads,
        num_query_groups=hf.get("num_key_value_heads", heads),
        kv_channels=hf.get("head_dim") or hf["hidden_size"] // heads,
        vocab_size=hf["vocab_size"],
        untie_embeddings_and_output_weights=not hf.get("tie_word_embeddings", False),
        gated_linear_unit=True,
        normalization="RMSNorm",
        add_bias_linear=False,
        add_qkv_bias=bool(hf.get("attention_bias", False)),
        qk_layernorm=hf.get("model_type", "").startswith("qwen3"),
    )
    n_exp = hf.get("num_experts") or hf.get("num_local_experts") or hf.get("n_routed_experts")
    if n_exp:
        moe_ffn = hf.get("moe_intermediate_size") or hf["intermediate_size"]
        arch.update(
            num_moe_experts=n_exp,
            moe_ffn_hidden_size=moe_ffn,
            moe_router_topk=hf["num_experts_per_tok"],
        )
        if hf.get("n_shared_experts"):
            arch["moe_shared_expert_intermediate_size"] = hf["n_shared_experts"] * moe_ffn
        k_dense = hf.get("first_k_dense_replace", 0)
        arch["moe_layer_freq"] = [0 if i < k_dense else 1 for i in range(n)]
    if "kv_lora_rank" in hf:  # DeepSeek MLA
        arch.update(
            multi_latent_attention=True,
            q_lora_rank=hf.get("q_lora_rank"),
            kv_lora_rank=hf["kv_lora_rank"],
            qk_head_dim=hf["qk_nope_head_dim"],
            qk_pos_emb_head_dim=hf["qk_rope_head_dim"],
            v_head_dim=hf["v_head_dim"],
            num_query_groups=heads,
            qk_layernorm=True,  # q/kv_layernorm over q_lora_rank/kv_lora_rank (HF *_a_layernorm)
            rope_type="rope",  # yarn only changes buffers, not parameters
        )
        arch.pop("kv_channels")
    return arch
