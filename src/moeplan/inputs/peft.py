"""LoRA adapters as Megatron Bridge builds them (``peft:`` section of a scenario): the input schema,
and the adapter parameters of every layer, exactly.

Source: Megatron Bridge ``src/megatron/bridge/peft/lora.py`` and ``peft/utils.py`` (@067f987):

- ``LoRA(target_modules=["linear_qkv", "linear_proj", "linear_fc1", "linear_fc2"], dim=32, alpha=32,
  dropout=0.0, share_expert_adapters=True, normalize_moe_lora=False)`` are the defaults; a target
  name matches every module of that name: the attention projections, the dense MLP, the shared
  experts' linears and the routed experts' grouped linears (``mlp.experts.linear_fc1``).
- ``ParallelLinearAdapter(in_features, out_features, dim)``: ``linear_in`` (A, ``in × dim``) and
  ``linear_out`` (B, ``dim × out``), so ``dim · (in + out)`` parameters, where ``in`` / ``out`` are
  the base linear's full (unsharded) widths (``get_adapter_attributes_from_linear``: TE's column-
  parallel ``out_features · tp``, row-parallel ``in_features · tp``). Both are split over the base
  linear's TP group (expert linears: ETP): ``dim · (in + out) / tp`` per rank. A column-parallel A
  splits ``dim`` itself, so ``dim`` must divide by TP there.
- Routed experts with ``share_expert_adapters: true`` (the default): one adapter per grouped linear
  shared by all local experts of the EP rank (replicated over EP, an expert parameter); false: one
  per local expert. ``normalize_moe_lora`` uses ``dim // moe_router_topk`` on expert linears
  (``get_effective_lora_dim``), rounded up to a multiple of ETP for column-parallel ones
  (``align_expert_dim_for_tp``).
- Adapters are created in the parameter dtype (``lora_dtype`` None → bf16) and are the only
  parameters with ``requires_grad``: the frozen base keeps its weights, without gradients or
  optimizer state.

Not modelled (an input error, never a silent count): other target names (MLA's
``linear_q_proj`` / ``linear_kv_down_proj`` ..., the router, wildcards), DoRA and canonical LoRA,
VLMs (``VLMLoRA``). Layers without a matching module (Gated DeltaNet's ``in_proj`` / ``out_proj``)
get no adapter, as in Bridge.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from moeplan.errors import InputError
from moeplan.inputs.model_spec import ModelSpec

#: target module names moeplan counts (Bridge LoRA's defaults)
TARGETS = ("linear_qkv", "linear_proj", "linear_fc1", "linear_fc2")
#: attention kinds whose layers have linear_qkv / linear_proj (softmax attention, GQA or MLA)
SOFTMAX_KINDS = ("full", "sliding", "chunked")
#: targets whose base linear is column-parallel (A splits ``dim`` over TP)
COLUMN_TARGETS = ("linear_qkv", "linear_fc1")


class PeftInput(BaseModel):
    """``peft:`` Megatron Bridge's LoRA config (``cfg.peft = LoRA(...)``). ``dim`` the rank,
    ``alpha`` the scale numerator (``alpha / dim`` scales the adapter output; no effect on cost),
    ``target_modules`` the module names adapted, ``share_expert_adapters`` / ``normalize_moe_lora``
    as Bridge's fields."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, allow_inf_nan=False)
    scheme: Literal["lora"] = Field(
        default="lora",
        description="The PEFT method; only `lora` (Megatron Bridge `peft/lora.py` `LoRA`) is modelled: DoRA, canonical LoRA and VLM LoRA are input errors. Unset: lora.",
    )
    dim: int = Field(
        default=32,
        ge=1,
        le=65536,
        description="LoRA rank (count): each adapted linear gets A (in × dim) and B (dim × out), split over TP (ETP for experts); a column-parallel A needs dim divisible by TP. Source: Megatron Bridge `LoRA.dim`; unset: 32, Bridge's default.",
    )
    alpha: float = Field(
        default=32.0,
        gt=0,
        le=1e6,
        description="LoRA scale numerator: the adapter output is scaled by alpha / dim; no effect on memory or time. Source: Megatron Bridge `LoRA.alpha`; unset: 32, Bridge's default.",
    )
    dropout: float = Field(
        default=0.0,
        ge=0.0,
        lt=1.0,
        description="Dropout probability on the adapter input (a fraction in [0, 1)). Source: Megatron Bridge `LoRA.dropout`; unset: 0, Bridge's default.",
    )
    target_modules: tuple[str, ...] = Field(
        default=TARGETS,
        description="Module names that get adapters (`linear_qkv`, `linear_proj`, `linear_fc1`, `linear_fc2`); fc1 / fc2 also match shared and routed experts. Source: Megatron Bridge `LoRA.target_modules`; unset: all four, Bridge's default.",
    )
    share_expert_adapters: bool = Field(
        default=True,
        description="One adapter per grouped expert linear shared by all local experts of an EP rank (false: one per local expert). Source: Megatron Bridge `LoRA.share_expert_adapters`; unset: true, Bridge's default.",
    )
    normalize_moe_lora: bool = Field(
        default=False,
        description="Expert linears use rank dim // `moe_router_topk` (rounded up to a multiple of ETP for column-parallel ones). Source: Megatron Bridge `LoRA.normalize_moe_lora`; unset: false, Bridge's default.",
    )

    @field_validator("alpha", "dropout", mode="before")
    @classmethod
    def _number(cls, v):
        return float(v) if isinstance(v, int) and not isinstance(v, bool) else v

    @field_validator("target_modules", mode="before")
    @classmethod
    def _targets(cls, v):
        if isinstance(v, list):
            v = tuple(v)
        if not isinstance(v, tuple) or not v:
            raise ValueError(f"a non-empty list of {', '.join(TARGETS)}")
        for name in v:
            if name not in TARGETS:
                raise ValueError(
                    f"module names among {', '.join(TARGETS)} (not {name!r}: other targets, wildcards and MLA's "
                    "projections are not modelled)"
                )
        if len(set(v)) != len(v):
            raise ValueError("each target module once")
        return v


@dataclass(frozen=True)
class LayerAdapters:
    """Adapter parameters of one decoder layer on one rank (elements): ``dense`` (TP-split: attention,
    dense MLP, shared experts) and ``expert`` (routed experts, ETP-split); ``by_target`` the same per
    target name, summed over dense and expert; ``shapes`` (target, kind, in, out, dim, split) per
    adapter for activation and time costs, ``kind`` ``dense`` (attention, dense MLP), ``shared``
    (shared experts) or ``routed`` (routed experts, which see the routed tokens)."""

    dense: float
    expert: float
    by_target: dict[str, float]
    shapes: tuple[tuple[str, str, int, int, int, int], ...]


def _attention_widths(m: ModelSpec, kind: str) -> dict[str, tuple[int, int]]:
    """(in, out) of linear_qkv and linear_proj of a softmax-attention layer (``full``, ``sliding``,
    ``chunked``); none for other mixers (Gated DeltaNet's in_proj / out_proj match no target)."""
    if kind not in SOFTMAX_KINDS:
        return {}
    h = m.hidden_size
    if m.multi_latent_attention:
        nh, vd = m.num_attention_heads or 0, m.v_head_dim or 0
        return {"linear_proj": (nh * vd, h)}
    nh, ng, d = m.num_attention_heads or 0, m.num_query_groups or 0, m.kv_channels or 0
    qkv_out = nh * d * (2 if m.attention_output_gate else 1) + 2 * ng * d
    return {"linear_qkv": (h, qkv_out), "linear_proj": (nh * d, h)}


def _expert_dim(m: ModelSpec, p: PeftInput, etp: int, target: str) -> int:
    if not p.normalize_moe_lora:
        return p.dim
    topk = m.moe_router_topk or 1
    if p.dim % topk:
        raise InputError("peft.dim", p.dim, f"a multiple of moe_router_topk ({topk}) with normalize_moe_lora")
    d = p.dim // topk
    if target in COLUMN_TARGETS and etp > 1 and d % etp:
        d = (d + etp - 1) // etp * etp
    return d


def _mlp_shapes(m: ModelSpec, moe: bool, p: PeftInput, tp: int, ep: int, etp: int) -> list[tuple]:
    """(target, tokens kind, in, out, dim, split, copies) of the MLP adapters of one layer on a rank."""
    h, glu = m.hidden_size, 2 if m.gated_linear_unit else 1
    out: list[tuple] = []
    widths: list[tuple[str, str, int, int, int, int, int]] = []
    if not moe:
        f = m.ffn_hidden_size or 0
        widths += [("linear_fc1", "dense", h, glu * f, p.dim, tp, 1), ("linear_fc2", "dense", f, h, p.dim, tp, 1)]
    else:
        fs, fe = m.moe_shared_expert_intermediate_size, m.moe_ffn_hidden_size or 0
        if fs:
            widths += [
                ("linear_fc1", "shared", h, glu * fs, p.dim, tp, 1),
                ("linear_fc2", "shared", fs, h, p.dim, tp, 1),
            ]
        copies = 1 if p.share_expert_adapters else (m.num_moe_experts or 0) // ep
        width = m.moe_token_width  # a latent MoE's experts read and write its latent width (moe/experts.py)
        for t, i, o in (("linear_fc1", width, glu * fe), ("linear_fc2", fe, width)):
            widths.append((t, "routed", i, o, _expert_dim(m, p, etp, t), etp, copies))
    for w in widths:
        if w[0] in p.target_modules:
            out.append(w)
    return out


def layer_adapters(m: ModelSpec, p: PeftInput, layer: int | None, tp: int, ep: int, etp: int) -> LayerAdapters:
    """The adapters of decoder layer ``layer`` (``None``: an MTP block's decoder layer, MoE when the
    model's last layer is) on one rank (elements, exact).

    Raises:
        InputError: ``peft.dim`` that a column-parallel A cannot split over TP / ETP, or
            ``linear_qkv`` on an MLA model (its projections have other names).
    """
    n = m.num_layers
    kinds = m.attention_kinds or ("full",) * n
    moes = m.moe_layers or (False,) * n
    idx = n - 1 if layer is None else layer
    kind, moe = ("full" if layer is None else kinds[idx]), moes[idx]
    if m.multi_latent_attention and "linear_qkv" in p.target_modules:
        raise InputError(
            "peft.target_modules",
            list(p.target_modules),
            "targets an MLA model has: linear_qkv does not exist there and MLA's q/kv projections are not modelled",
        )
    shapes = [(t, "dense", i, o, p.dim, tp, 1) for t, (i, o) in _attention_widths(m, kind).items()]
    shapes = [w for w in shapes if w[0] in p.target_modules] + _mlp_shapes(m, moe, p, tp, ep, etp)
    dense = expert = 0.0
    by: dict[str, float] = {}
    for t, tok, i, o, d, split, copies in shapes:
        if t in COLUMN_TARGETS and d % split:
            where = "ETP" if tok == "routed" else "TP"
            raise InputError("peft.dim", d, f"a multiple of {where} ({split}): {t}'s LoRA A is split over its rank")
        count = copies * d * (i + o) / split
        by[t] = by.get(t, 0.0) + count
        if tok == "routed":
            expert += count
        else:
            dense += count
    return LayerAdapters(dense, expert, by, tuple((t, tok, i, o, d, split) for t, tok, i, o, d, split, _ in shapes))


def total_adapter_params(m: ModelSpec, p: PeftInput) -> int:
    """Unique adapter parameters of the whole model (elements): every decoder layer and MTP block,
    at TP = ETP = EP = 1 with experts' shared adapters counted once (one per local-expert group
    when not shared: ``num_moe_experts`` copies)."""
    total = sum(sum(layer_adapters(m, p, i, 1, 1, 1).by_target.values()) for i in range(m.num_layers))
    total += m.mtp_num_layers * sum(layer_adapters(m, p, None, 1, 1, 1).by_target.values())
    return int(round(total))


__all__ = ["COLUMN_TARGETS", "TARGETS", "LayerAdapters", "PeftInput", "layer_adapters", "total_adapter_params"]
