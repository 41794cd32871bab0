"""Activation oracle, second half: name megatron-core's kept storages and compare with moeplan.

``classify(row, arch)`` gives each storage from ``act_harness.measure_layer`` a role. Roles are in
three groups:

* ``MODELLED``: the tensors that moeplan's ``layer_activations`` lists one to one (``ROLE_TO_MOEPLAN``
  maps role -> moeplan name); compared per kind x setting within 5 %.
* ``CORE``: the attention core. The oracle runs the local unfused attention (no flash on CPU):
  ``q``/``k``/``v`` as the ``baddbmm``/``bmm`` keep them (GQA: K and V expanded to all heads by
  ``repeat_interleave``), the s x s softmax output. On GPU, fused attention keeps Q, K, V (K/V at the
  group count), O and the fp32 softmax statistics instead, so these are reported, not asserted
  (except MLA's q/k/v, which have no GQA expansion and are compared with ``mla_qkv``).
* everything else is a difference: kept by megatron-core, absent from moeplan (qk-norm inputs,
  rsigma, RoPE cos/sin, the dispatcher's per-expert probabilities, ...), listed in the doc.

``moeplan_layer(kind, arch, tp, setting)`` builds the same layer as a moeplan ``ModelSpec`` and
evaluates ``layer_activations`` for the same microbatch on the same rank.
"""

from __future__ import annotations

import dataclasses
from typing import Any

SEQ = 256
MBS = 2

#: oracle role -> moeplan activation name
ROLE_TO_MOEPLAN = {
    "attn_norm_input": "attn_norm_input",
    "attn_norm_output": "attn_norm_output",
    "attn_out": "attn_out",
    "mlp_norm_input": "mlp_norm_input",
    "mlp_norm_output": "mlp_norm_output",
    "fc1_out": "fc1_out",
    "fc2_in": "fc2_in",
    "shared_fc1_out": "shared_fc1_out",
    "shared_fc2_in": "shared_fc2_in",
    "expert_fc1_in": "expert_fc1_in",
    "expert_fc1_out": "expert_fc1_out",
    "expert_fc2_in": "expert_fc2_in",
    "routed_probs": "routed_probs",
    "permute_indices": "permute_indices",
    "router_topk": "router",
    "router_dispatch_map": "router",
    "mla_kv_combined": "mla_latents",
    "mla_kv_norm_out": "mla_latents",
    "mla_q_compressed": "mla_latents",
    "mla_q_norm_out": "mla_latents",
    "attn_gate": "attn_output_gate",
    "attn_gate_core_out": "attn_gate_core_out",
    "qk_norm_input": "qk_norm_input",
    "norm_rsigma": "norm_rsigma",
}
MODELLED = set(ROLE_TO_MOEPLAN)
#: moeplan names of the attention core (reported separately; MLA's mla_qkv is compared)
MOEPLAN_CORE = {"qkv", "mla_qkv", "softmax_lse", "attention_scores"}
CORE = {"core_qkv", "core_scores"}


def _norm_module(name: str) -> bool:
    return name.split(".")[-1] in ("input_layernorm", "pre_mlp_layernorm", "q_layernorm", "k_layernorm", "kv_layernorm")


def classify(r: dict[str, Any], arch: dict[str, Any]) -> str:
    """Role of one kept storage (see the module docstring)."""
    h = arch["hidden_size"]
    si, pb, site, dt, shape = r["saved_in"], r["produced_by"], r["site"], r["dtype"], r["shape"]
    if r["shared"]:
        return "shared_rope_or_mask"
    if r["layer_input"]:
        return "attn_norm_input"
    if _norm_module(si) and dt == "float32" and shape[-1] == 1:
        if si in ("self_attention.q_layernorm", "self_attention.k_layernorm") and not arch.get(
            "multi_latent_attention"
        ):
            return "qk_norm_input"  # the q/k norms' 1/rms per head, kept with their inputs
        if si in ("self_attention.q_layernorm", "self_attention.kv_layernorm"):
            return "mla_q_compressed"  # the latent norms' 1/rms, counted with the latents
        return "norm_rsigma"
    if pb.endswith("pre_cross_attn_layernorm") or (si == "pre_mlp_layernorm"):
        return "mlp_norm_input"  # the residual after attention (IdentityOp pre-cross-attn norm)
    if pb == "input_layernorm":
        return "attn_norm_output"
    if pb == "pre_mlp_layernorm":
        return "mlp_norm_output"
    if "rope_utils" in site:
        return "rope_cos_sin"
    if si.startswith("self_attention.core_attention"):
        # the softmax keeps its s x s output; baddbmm / bmm keep q, k, v (and the same probs)
        return "core_scores" if si.endswith("scale_mask_softmax") else "core_qkv"
    if si == "self_attention.linear_proj":
        return "attn_out"
    if si == "self_attention.q_layernorm" and arch.get("multi_latent_attention"):
        return "mla_q_compressed"
    if si in ("self_attention.q_layernorm", "self_attention.k_layernorm"):
        return "qk_norm_input"
    if si == "self_attention.kv_layernorm":
        return "mla_kv_combined"  # kv_down output: kv_layernorm input is a view of [kv_lora | rope]
    if si == "self_attention.linear_kv_up_proj":
        return "mla_kv_norm_out"
    if si == "self_attention.linear_q_up_proj":
        return "mla_q_norm_out"
    if si == "self_attention" and "attention.py" in site and "multi_latent" not in site:
        # torch.compile'd _apply_output_gate keeps the ungated core output and the gate
        return "attn_gate_core_out" if pb.endswith("core_attention") else "attn_gate"
    if si == "self_attention" and "random.py" in site:
        # inputs kept by a checkpoint inside the attention (core_attn / mla_up_proj recompute)
        if r["numel"] <= 1:
            return "misc_scalar"
        if arch.get("multi_latent_attention") and len(shape) == 3:
            # mla_up_proj's checkpoint keeps the latents [s, b, r] (q/k/v are [s, b, heads, d])
            if shape[-1] == arch.get("q_lora_rank"):
                return "mla_q_norm_out"
            return "mla_kv_norm_out" if shape[-1] == arch["kv_lora_rank"] else "mla_kv_combined"
        return "core_qkv"
    if si == "mlp" and "fused_bias_swiglu" in site:
        return "fc1_out"
    if si == "mlp.linear_fc2":
        return "fc2_in"
    if si == "mlp.shared_experts" and "fused_bias_swiglu" in site:
        return "shared_fc1_out"
    if si == "mlp.shared_experts.linear_fc2":
        return "shared_fc2_in"
    if si == "mlp.experts":
        if dt.startswith("int"):
            return "tokens_per_expert"
        if "fused_bias_swiglu" in site or "random.py" in site:  # the activation, or moe_act's checkpoint
            return "routed_probs" if shape[-1] == 1 else "expert_fc1_out"
        return "expert_fc1_in" if shape[-1] == h else "expert_fc2_in"
    if si == "mlp.router":
        return "router_topk"
    if si == "mlp" and "token_dispatcher" in site:
        return "router_dispatch_map"
    if si == "mlp" and "moe_utils" in site:
        return "permute_indices"
    return f"other:{si}@{site}"


def roles(rows: list[dict], arch: dict) -> dict[str, float]:
    out: dict[str, float] = {}
    for r in rows:
        k = classify(r, arch)
        out[k] = out.get(k, 0.0) + r["nbytes"]
    return out


# --------------------------------------------------------------------------------------------------
# moeplan side
# --------------------------------------------------------------------------------------------------


def moeplan_model(arch: dict):
    from moeplan.inputs.model_spec import ModelSpec, partial_model

    fields = dict(arch)
    fields.pop("rope_type", None)
    moe = bool(fields.get("num_moe_experts"))
    fields.update(num_layers=1, vocab_size=1024)
    if moe:
        fields["moe_layers"] = (True,)
    if not fields.get("multi_latent_attention"):
        fields.pop("multi_latent_attention", None)
    # moeplan's with_overrides takes every "qk_*" key for a boolean (qk_layernorm), so qk_head_dim and
    # qk_pos_emb_head_dim cannot go through it (reported); set them with dataclasses.replace.
    qk = {k: fields.pop(k) for k in ("qk_head_dim", "qk_pos_emb_head_dim") if k in fields}
    m = partial_model(fields, name="oracle")
    if qk:
        m = dataclasses.replace(m, **qk)
        if hasattr(m, "completed") and not isinstance(m, ModelSpec):
            m = m.completed()
    return m


def moeplan_layer(arch: dict, tp: int, modules: frozenset[str]) -> tuple[dict, dict]:
    """moeplan's (kept, recomputed) for the oracle's layer, microbatch and rank."""
    from moeplan.model.activations import ActContext, layer_activations

    m = moeplan_model(arch)
    c = ActContext(
        tokens=SEQ * MBS,
        seq_local=SEQ,
        micro_batch_size=MBS,
        tp=tp,
        sp=tp > 1,
        etp=tp,
        act_bytes=2,
        lin_in_bytes=2,
        unfused_attention=True,
        routing_factor=1.0,
        fused_input_norm=False,  # the local spec's norms are modules of their own
    )
    return layer_activations(m, 0, c, frozenset(modules))


def compare(arch: dict, tp: int, setting: str, rows: list[dict]) -> dict[str, Any]:
    """Per-token comparison of one kind x setting (bytes per token of the microbatch, SEQ*MBS)."""
    tokens = SEQ * MBS
    mods = frozenset() if setting == "none" else frozenset([setting])
    kept, rec = moeplan_layer(arch, tp, mods)
    orole = roles(rows, arch)
    mc_model: dict[str, float] = {}
    for role, b in orole.items():
        if role in MODELLED:
            name = ROLE_TO_MOEPLAN[role]
            mc_model[name] = mc_model.get(name, 0.0) + b
    mp_model = {k: v for k, v in kept.items() if k not in MOEPLAN_CORE}
    names = sorted(set(mc_model) | set(mp_model))
    per_name = {n: (mc_model.get(n, 0.0) / tokens, mp_model.get(n, 0.0) / tokens) for n in names}
    mc = sum(mc_model.values()) / tokens
    mp = sum(mp_model.values()) / tokens
    core_mc = sum(orole.get(k, 0.0) for k in CORE) / tokens
    core_mp = sum(v for k, v in kept.items() if k in MOEPLAN_CORE) / tokens
    extra = {k: v / tokens for k, v in orole.items() if k not in MODELLED and k not in CORE}
    return dict(
        mcore=mc,
        moeplan=mp,
        ratio=(mp / mc if mc else float("nan")),
        per_name=per_name,
        core_mcore=core_mc,
        core_moeplan=core_mp,
        core_roles={k: orole.get(k, 0.0) / tokens for k in CORE},
        core_moeplan_names={k: v / tokens for k, v in kept.items() if k in MOEPLAN_CORE},
        unmodelled=extra,
        total_mcore=sum(orole.values()) / tokens,
        total_moeplan=sum(kept.values()) / tokens,
        recomputed_moeplan=sum(rec.values()) / tokens,
    )
