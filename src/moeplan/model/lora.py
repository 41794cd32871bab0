"""LoRA adapters on one rank of a pipeline stage: their parameters, the activations their paths save,
and their GEMM time (:mod:`moeplan.inputs.peft` counts each layer's adapters, with Bridge's sources).

Activations per adapted linear and microbatch (Bridge ``ParallelLinearAdapter``, bf16): the
bottleneck ``tokens · dim`` that ``linear_out`` saves as its input; ``linear_in``'s input is the
base linear's own (saved once, shared storage) — except with sequence parallelism on a fused
LayerNorm linear (``linear_qkv``, a dense layer's ``linear_fc1``): Bridge sets
``return_layernorm_output_gathered`` and the adapter saves the gathered LayerNorm output,
``tokens · hidden`` on every TP rank, while Transformer Engine keeps only its local shard
(``peft/utils.py:get_adapter_attributes_from_linear``). Full recompute keeps none of them.

Time per adapted linear and microbatch: forward ``2 · tokens · dim · (in + out) / split`` FLOPs, or the
HBM traffic when that is longer (reading the input, writing and reading the bottleneck, writing the
adapter output and adding it to the base output: ``2 B · tokens · (in + 2·dim + 4·out) / split``);
backward twice the forward (input and weight gradients of A and B). Routed-expert adapters see the
rank's routed tokens (``tokens · top-k · routing factor``).
"""

from __future__ import annotations

from moeplan.inputs.peft import LayerAdapters, layer_adapters
from moeplan.inputs.resolved import Scenario
from moeplan.model.activations import ActContext
from moeplan.structure.params import RankParams
from moeplan.structure.placement import StageParams

#: bytes per element of adapter weights and activations (bf16: ``lora_dtype`` None → params dtype)
LORA_BYTES = 2.0


def stage_layer_adapters(s: Scenario, sp: StageParams) -> list[LayerAdapters]:
    """The adapters of every decoder layer and MTP block on one rank of stage ``sp`` (empty
    without ``peft``)."""
    p = s.peft
    if p is None:
        return []
    m = s.complete_model
    out = [layer_adapters(m, p, li, s.tp, s.ep, s.etp) for li in sp.layers]
    out += [layer_adapters(m, p, None, s.tp, s.ep, s.etp)] * sp.mtp_layers
    return out


def adapter_rank_params(s: Scenario, sp: StageParams) -> RankParams:
    """Adapter parameters on one rank of stage ``sp`` as :class:`RankParams` (dense / expert split
    for the optimizer's shard degrees): what trains under LoRA."""
    layers = stage_layer_adapters(s, sp)
    dense = int(round(sum(la.dense for la in layers)))
    expert = int(round(sum(la.expert for la in layers)))
    return RankParams(by_kind={"lora_adapters": dense + expert}, dense=dense, expert=expert)


def _tokens(s: Scenario, tokens: float, routing_factor: float, kind: str) -> float:
    if kind == "routed":
        return tokens * (s.complete_model.moe_router_topk or 1) * routing_factor
    return tokens


def lora_activation_bytes(s: Scenario, la: LayerAdapters, ctx: ActContext) -> float:
    """Bytes one layer's adapters save for backward per microbatch (module docstring)."""
    out = 0.0
    h = s.complete_model.hidden_size
    for target, kind, _i, _o, dim, _split in la.shapes:
        out += _tokens(s, ctx.tokens, ctx.routing_factor, kind) * dim * LORA_BYTES
        # a fused LayerNorm linear (attention's qkv, a dense layer's fc1) hands the adapter its gathered output
        if ctx.sp and ctx.tp > 1 and kind == "dense" and target in ("linear_qkv", "linear_fc1"):
            out += ctx.tokens * h * LORA_BYTES
    return out


def lora_time_s(
    s: Scenario,
    la: LayerAdapters,
    tokens: float,
    routing_factor: float,
    gemm_flops_per_s: float,
    hbm_bytes_per_s: float,
) -> tuple[float, float]:
    """(dense, routed) seconds of one layer's adapter GEMMs, forward and backward, per microbatch
    (module docstring)."""
    dense = routed = 0.0
    for _t, kind, i, o, dim, split in la.shapes:
        tok = _tokens(s, tokens, routing_factor, kind)
        flops = 2 * tok * dim * (i + o) / split
        traffic = LORA_BYTES * tok * (i + 2 * dim + 4 * o) / split
        t = 3 * max(flops / gemm_flops_per_s, traffic / hbm_bytes_per_s)
        if kind == "routed":
            routed += t
        else:
            dense += t
    return dense, routed


__all__ = ["LORA_BYTES", "adapter_rank_params", "lora_activation_bytes", "lora_time_s", "stage_layer_adapters"]
