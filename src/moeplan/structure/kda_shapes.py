"""Kimi Delta Attention's executed FLOPs: the mixer Megatron Bridge builds for Kimi-K3's KDA layers.

Source: Megatron Bridge main (067f987, after v0.6.0) ``models/kimi/kimi_k3_layers.py``
(``KimiK3Attention._init_kda`` / ``_forward_kda``) and its parameters in
:func:`moeplan.structure.params.kda_shard`. Per token, forward, 2 FLOPs per multiply-add; the chunked
delta rule itself is timed as a kernel (:func:`moeplan.model.gdn.kda_kernel_s`), not counted here.
"""

from __future__ import annotations

from moeplan.inputs.model_spec import ModelSpec


def kda_executed_flops(m: ModelSpec) -> tuple[float, float, float]:
    """(TP-split GEMM FLOPs, replicated GEMM FLOPs, TP-split convolution FLOPs) per token of one KDA
    layer's forward (FLOPs; divide the split parts by TP).

    With qk = nk·d_k and v = nv·d_v: split GEMMs ``2·(h·(2·qk + 2·v) + h·nv + d_k·qk + v·h)`` (q, k, v,
    output gate, beta, the forget gate's up-projection, o_proj); replicated ``2·h·d_k`` (``f_a_proj``,
    ``parallel_mode="duplicated"``: every TP rank runs it for every token); the three depthwise short
    convolutions ``2·d_conv·(2·qk + v)``.
    """
    h = m.hidden_size
    nk, nv = m.given("linear_num_key_heads"), m.given("linear_num_value_heads")
    dk, dv = m.given("linear_key_head_dim"), m.given("linear_value_head_dim")
    qk, v = nk * dk, nv * dv
    split = 2.0 * (h * (2 * qk + 2 * v) + h * nv + dk * qk + v * h)
    return split, 2.0 * h * dk, 2.0 * m.given("linear_conv_kernel_dim") * (2 * qk + v)
