"""What an estimate states about the model itself: parts of the config it does not count, and layers
whose kernels or counting convention differ from the rest (Gemma-4's wide global heads).

Each function returns messages in the order they print; a model without such parts gives none.
"""

from __future__ import annotations

from moeplan.i18n.messages import Message, msg
from moeplan.inputs.model_spec import ModelSpec
from moeplan.model.kimi_k3_activations import attn_res_rows
from moeplan.structure.attention_kernels import FUSED_ATTENTION_MAX_HEAD_DIM, attention_runs_unfused


def _unfused_layers(m: ModelSpec) -> tuple[int, int]:
    """(layers whose attention trains unfused, their head dim); both 0 when none."""
    kinds = m.attention_kinds or ("full",) * m.num_layers
    wide = [k for k in kinds if attention_runs_unfused(m, k)]
    if not wide:
        return 0, 0
    return len(wide), int(m.attention_widths(wide[0]).kv_channels or 0)


def param_notes(m: ModelSpec) -> list[Message]:
    """Notes for the parameter counts: a ``model_type`` outside the families moeplan maps (read from the
    fields every family shares, :data:`moeplan.inputs.hf_families.GENERIC_KEYS`), a vision tower accepted
    and not counted, and the value rows Megatron Bridge builds for K = V layers (counted; its HF checkpoint
    has none)."""
    out = []
    if m.unmapped_model_type:
        out.append(msg("model.unknown_family", model_type=m.unmapped_model_type))
    if m.vision_not_counted and m.kimi_delta_attention:
        out.append(msg("kimi_k3.vision_not_built"))
    elif m.vision_not_counted:
        out.append(msg("gemma4.vision_not_counted", tower=m.vision_not_counted))
    if m.attention_k_eq_v:
        kinds = m.attention_kinds or ()
        full = sum(1 for k in kinds if k == "full")
        g = m.attention_widths("full")
        rows = full * m.hidden_size * (g.num_query_groups or 0) * (g.kv_channels or 0)
        out.append(msg("gemma4.k_eq_v_value_rows", layers=full, params=rows))
    return out


def attn_res_notes(m: ModelSpec) -> list[Message]:
    """Kimi-K3's attention residuals: what their mixes keep and cost (none without them)."""
    if not m.attn_res_block_size:
        return []
    rows = max(max(attn_res_rows(m, li)) for li in range(m.num_layers))
    return [msg("kimi_k3.attn_res_cost", block=m.attn_res_block_size, rows=rows)]


def memory_notes(m: ModelSpec) -> list[Message]:
    """Notes for the memory estimate: :func:`param_notes`, and layers whose unfused attention keeps
    the s² scores."""
    out = param_notes(m) + attn_res_notes(m)
    n, d = _unfused_layers(m)
    if n:
        out.append(msg("gemma4.unfused_wide_heads", layers=n, head_dim=d, limit=FUSED_ATTENTION_MAX_HEAD_DIM))
    return out


def time_notes(m: ModelSpec) -> list[Message]:
    """Notes for the step time: unfused wide-head layers timed as batched GEMMs, and model FLOPs
    counted at each layer's own attention widths (Megatron Bridge's count has one width for all)."""
    out = []
    n, d = _unfused_layers(m)
    if n:
        out.append(msg("gemma4.unfused_wide_heads_time", layers=n, head_dim=d))
    if m.kimi_delta_attention:
        kda = sum(1 for k in m.attention_kinds if k == "linear")
        out.append(msg("kimi_k3.kda_kernel_time", layers=kda))
    out += attn_res_notes(m)
    if m.has_global_attention_widths:
        out.append(msg("gemma4.flops_per_layer_widths"))
    return out
