"""Gemma-4 MoE layouts as Megatron Bridge builds them (``models/gemma/gemma4_provider.py`` and
``modeling_gemma4.py``, v0.6.0) and Transformer Engine runs them.

- The full-attention layers build ``Gemma4SelfAttention`` with ``num_query_groups =
  num_global_key_value_heads``: the same TP rule as every GQA layer (megatron-core
  ``transformer_config.py``: groups a multiple of TP, or from core 0.16 a divisor of it), on those groups.
- Their heads are ``global_head_dim`` wide (512): wider than any fused kernel Transformer Engine trains
  with (FlashAttention ≤ 256, cuDNN ≤ 256), so they run ``UnfusedDotProductAttention``, which refuses
  context parallelism (``dot_product_attention/utils.py``: "Disabling UnfusedDotProductAttention as it
  does not support context parallelism"): with CP > 1 no backend is left.
- ``Gemma4ModelProvider.finalize`` (``_validate_gemma4_moe_orchestration``) raises for the modes its
  separately normalised router / shared-expert / routed-expert inputs bypass: CUDA graphs,
  ``moe_shared_expert_overlap``, selective ``layernorm`` recompute, ``mlp_norm`` activation offloading.
"""

from __future__ import annotations

from moeplan.i18n.messages import msg
from moeplan.rules.attention import GQA_TP_RELAXED_MCORE
from moeplan.rules.base import rule, set_key
from moeplan.structure.attention_kernels import FUSED_ATTENTION_MAX_HEAD_DIM, attention_runs_unfused


def _is_gemma4(m) -> bool:
    return m is not None and str(m.model_type or "").startswith("gemma4")


@rule(
    "gemma4.global_query_groups_vs_tp",
    "[Bridge] models/gemma/modeling_gemma4.py (Gemma4SelfAttention) + [TC] transformer_config.py",
    "the full-attention layers' KV heads (num_global_key_value_heads) must be a multiple of TP, or "
    "(mcore ≥ 0.16) a divisor of TP",
)
def _global_groups(s, e):
    m = s.model
    if m is None or not m.global_num_query_groups:
        return None
    g, tp = m.global_num_query_groups, s.tp
    if g % tp == 0:
        return None
    relaxed = s.mcore_version >= GQA_TP_RELAXED_MCORE
    if tp % g == 0 and relaxed:
        return [
            e.info(
                msg("gemma4.global_kv_groups_replicated", tp=tp, groups=g, ranks=tp // g), "tensor_model_parallel_size"
            )
        ]
    heads = m.num_attention_heads or g
    local = m.num_query_groups or heads
    allowed = [
        t
        for t in (1, 2, 4, 8, 16, 32, 64)
        if heads % t == 0 and all(x % t == 0 or (relaxed and t % x == 0) for x in (g, local))
    ]
    return [
        e.error(
            msg("gemma4.global_query_groups_vs_tp", groups=g, tp=tp, version=str(s.mcore_version)),
            msg("common.use_tp_in", values=allowed),
            "tensor_model_parallel_size",
        )
    ]


@rule(
    "gemma4.wide_heads_no_cp",
    "[TE] pytorch/attention/dot_product_attention/utils.py (get_attention_backend)",
    "attention heads wider than 256 train only with unfused attention, which does not take context "
    "parallelism: CP must be 1",
)
def _wide_heads_cp(s, e):
    m = s.model
    if m is None or s.cp == 1 or m.attention_kinds is None:
        return None
    wide = [k for k in m.attention_kinds if attention_runs_unfused(m, k)]
    if not wide:
        return None
    d = m.attention_widths(wide[0]).kv_channels
    return [
        e.error(
            msg(
                "gemma4.wide_heads_no_cp",
                layers=len(wide),
                head_dim=d,
                limit=FUSED_ATTENTION_MAX_HEAD_DIM,
                cp=s.cp,
            ),
            set_key("context_parallel_size", 1),
            "context_parallel_size",
        )
    ]


def _refused_modes(lay) -> list[tuple[str, str, object]]:
    """(key, the setting as written, the value that satisfies Bridge) of each refused mode."""
    out: list[tuple[str, str, object]] = []
    graphs = lay.cuda_graph_impl or "none"
    if graphs != "none":
        out.append(("cuda_graph_impl", f"cuda_graph_impl: {graphs}", "none"))
    if lay.moe_shared_expert_overlap:
        out.append(("moe_shared_expert_overlap", "moe_shared_expert_overlap: true", False))
    if lay.recompute_granularity == "selective" and "layernorm" in (lay.recompute_modules or []):
        kept = [x for x in lay.recompute_modules or [] if x != "layernorm"]
        out.append(("recompute_modules", "selective recompute of layernorm", kept))
    if lay.fine_grained_activation_offloading and "mlp_norm" in (lay.offload_modules or []):
        kept = [x for x in lay.offload_modules or [] if x != "mlp_norm"]
        out.append(("offload_modules", "activation offloading of mlp_norm", kept))
    return out


@rule(
    "gemma4.bridge_moe_modes",
    "[Bridge] models/gemma/gemma4_provider.py (_validate_gemma4_moe_orchestration)",
    "Gemma-4 MoE runs without CUDA graphs, shared-expert overlap, selective layernorm recompute and "
    "mlp_norm activation offloading (Megatron Bridge refuses them)",
    kind="unsupported",
)
def _bridge_modes(s, e):
    if not _is_gemma4(s.model):
        return None
    return [
        e.error(msg("gemma4.bridge_moe_modes", setting=text), set_key(key, value), key)
        for key, text, value in _refused_modes(s.layout)
    ]
