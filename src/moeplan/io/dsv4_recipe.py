"""DeepSeek-V4 recipes of Megatron-LM (``experimental_attention_variant: dsv4_hybrid``) read as a model.

A recipe states the model through Megatron-LM arguments (megatron-core dev @d48bd6b
``transformer_config.py``): ``csa_compress_ratios`` (a Python list expression of ``num_layers +
mtp_num_layers`` entries), ``csa_window_size``, ``dsa_indexer_*``, ``o_groups`` / ``o_lora_rank``,
``enable_hyper_connections`` with ``num_residual_streams`` / ``mhc_sinkhorn_iterations`` and
``moe_n_hash_layers``; megatron-core derives ``qk_head_dim = kv_lora_rank = v_head_dim -
qk_pos_emb_head_dim``. The ``pretrain_hybrid.py`` recipes give the layers as a ``hybrid_layer_pattern``
of DeepSeek-V4 symbols (``models/hybrid/hybrid_layer_allocation.py``: ``W`` window, ``C`` compressed
sparse, ``H`` heavily compressed attention, ``E`` MoE, ``-`` MLP; ``|`` pipeline stage boundaries,
``/`` the MTP depth's layers): the same attention and MoE layers as the GPT path, which moeplan reads
as such, its stage splits as a ``pipeline_model_parallel_layout``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from moeplan.errors import InputError, short_repr
from moeplan.i18n.messages import msg
from moeplan.inputs.dsv4_config import COMPRESS_RATIOS

VARIANT = "dsv4_hybrid"
#: Megatron-LM arguments of a DeepSeek-V4 recipe whose moeplan model field has the same name
MODEL_ARGS = (
    "csa_window_size",
    "dsa_indexer_n_heads",
    "dsa_indexer_head_dim",
    "dsa_indexer_topk",
    "dsa_indexer_loss_coeff",
    "dsa_indexer_use_sparse_loss",
    "o_groups",
    "o_lora_rank",
    "moe_n_hash_layers",
    "mhc_sinkhorn_iterations",
)
#: arguments read here without a model field of their own
CONSUMED = ("experimental_attention_variant", "enable_hyper_connections", "num_residual_streams")
#: DeepSeek-V4 settings moeplan does not model (kept in layout, named in a note)
NOT_MODELLED = (
    "csa_compress_rotary_base",
    "activation_func_clamp_value",
    "use_fused_mhc",
    "dsa_kernel_backend",
    "spec",
)
#: the hybrid pattern's attention symbols → compression ratio
_SYMBOL_RATIO = {"W": 0, "C": 4, "H": 128}
_TERM = re.compile(r"\[([0-9, ]{1,4000})\](?:\*([0-9]{1,6}))?", re.ASCII)


@dataclass
class Dsv4Read:
    """What a DeepSeek-V4 recipe gives: model fields, layout keys, the arguments it consumed."""

    model: dict[str, Any] = field(default_factory=dict)
    layout: dict[str, Any] = field(default_factory=dict)
    consumed: set[str] = field(default_factory=set)


def ratio_list(value: Any) -> list[int]:
    """``csa_compress_ratios`` as Megatron-LM evaluates it: a list, or ``([0,0,4]+[128,4]*20+[0])``.

    Raises:
        InputError: naming ``csa_compress_ratios`` for anything else or a ratio other than 0 / 4 / 128.
    """
    what = "a list of 0 / 4 / 128, or a sum of repeated lists such as ([0,0,4]+[128,4]*20+[0])"
    if isinstance(value, list):
        out = value
    elif isinstance(value, str):
        out = []
        for term in value.strip().strip("'\"").removeprefix("(").removesuffix(")").replace(" ", "").split("+"):
            m = _TERM.fullmatch(term)
            if m is None:
                raise InputError("csa_compress_ratios", short_repr(value), what)
            out += [int(x) for x in m.group(1).split(",") if x] * int(m.group(2) or 1)
            if len(out) > 100_000:
                raise InputError("csa_compress_ratios", short_repr(value), what)
    else:
        raise InputError("csa_compress_ratios", short_repr(value), what)
    if not out or any(isinstance(r, bool) or r not in COMPRESS_RATIOS for r in out):
        raise InputError("csa_compress_ratios", short_repr(value), what)
    return [int(r) for r in out]


def _pattern_layers(pattern: str) -> tuple[list[list[tuple[int, bool]]], str]:
    """(per stage: (ratio, MoE) of each layer, the MTP part) of a DeepSeek-V4 hybrid pattern.

    Raises:
        InputError: naming ``hybrid_layer_pattern`` for a symbol pair moeplan cannot read.
    """
    what = "a DeepSeek-V4 pattern: W / C / H attention each followed by E (MoE) or - (MLP), '|' stages, '/' MTP"
    main, _, mtp = pattern.partition("/")
    stages = []
    for seg in main.split("|"):
        if len(seg) % 2 or any(
            a not in _SYMBOL_RATIO or b not in "E-" for a, b in zip(seg[::2], seg[1::2], strict=True)
        ):
            raise InputError("hybrid_layer_pattern", short_repr(pattern), what)
        stages.append([(_SYMBOL_RATIO[a], b == "E") for a, b in zip(seg[::2], seg[1::2], strict=True)])
    return stages, mtp


def _stage_layout(stages: list[list[tuple[int, bool]]], mtp: int) -> str:
    """Megatron's layout string of the pattern's stages: embedding first, MTP and loss last."""
    parts = [f"t*{len(st)}" if st else "" for st in stages]
    parts[0] = "E" + parts[0]
    parts[-1] += "m" * mtp + "L"
    return "|".join(parts)


def _from_pattern(args: dict[str, Any], ratios: list[int], out: Dsv4Read, notes: list[str]) -> int:
    """Layers, MoE flags and stage layout of a hybrid-pattern recipe; returns the decoder layers.

    Raises:
        InputError: naming ``hybrid_layer_pattern`` when its ratios disagree with ``csa_compress_ratios``.
    """
    pattern = str(args["hybrid_layer_pattern"])
    stages, _mtp_part = _pattern_layers(pattern)
    layers = [x for st in stages for x in st]
    if [r for r, _ in layers] != ratios[: len(layers)]:
        raise InputError(
            "hybrid_layer_pattern",
            short_repr(pattern),
            "W / C / H symbols that match csa_compress_ratios layer by layer",
        )
    out.model["num_layers"] = len(layers)
    out.model["moe_layers"] = [moe for _, moe in layers]
    out.consumed.add("hybrid_layer_pattern")
    if len(stages) > 1:
        layout = _stage_layout(stages, int(args.get("mtp_num_layers") or 0))
        out.layout["pipeline_model_parallel_layout"] = layout
        notes.append(msg("dsv4.recipe_pattern", pattern=short_repr(pattern), layout=layout))
    return len(layers)


def read_dsv4(args: dict[str, Any], notes: list[str]) -> Dsv4Read:
    """The model fields of a DeepSeek-V4 recipe (empty unless ``experimental_attention_variant`` is
    ``dsv4_hybrid``), with a note of what was read and one per setting left unmodelled.

    Raises:
        InputError: naming ``csa_compress_ratios`` / ``hybrid_layer_pattern`` when they do not describe
            the layers (too few ratios, a pattern of other symbols, ratios that disagree).
    """
    out = Dsv4Read()
    if args.get("experimental_attention_variant") != VARIANT:
        return out
    ratios = ratio_list(args.get("csa_compress_ratios"))
    out.consumed.update(CONSUMED + ("csa_compress_ratios",))
    if args.get("hybrid_layer_pattern"):
        layers = _from_pattern(args, ratios, out, notes)
    else:
        layers = int(args.get("num_layers") or 0)
    mtp = int(args.get("mtp_num_layers") or 0)
    tail = set(ratios[layers : layers + mtp]) or {0}
    if len(ratios) < layers + mtp or len(tail) > 1:
        raise InputError(
            "csa_compress_ratios",
            short_repr(args.get("csa_compress_ratios")),
            f"num_layers + mtp_num_layers = {layers} + {mtp} ratios",
        )
    _model_fields(args, ratios[:layers], tail.pop(), out)
    m = out.model
    notes.append(
        msg(
            "dsv4.recipe_read",
            layers=layers,
            ratios=short_repr(m["csa_compress_ratios"]),
            mtp=mtp,
            mtp_ratio=m["csa_mtp_compress_ratio"],
            hash=m.get("moe_n_hash_layers", 0),
            streams=m["num_residual_streams"],
        )
    )
    for key in NOT_MODELLED:
        if args.get(key) not in (None, False, ""):
            notes.append(msg("dsv4.recipe_not_modelled", key=key, value=short_repr(args[key])))
    return out


def _model_fields(args: dict[str, Any], ratios: list[int], mtp_ratio: int, out: Dsv4Read) -> None:
    """The model fields of the DeepSeek-V4 arguments, with megatron-core's derived MLA widths."""
    m = out.model
    m["csa_compress_ratios"] = ratios
    m["csa_mtp_compress_ratio"] = mtp_ratio
    for key in MODEL_ARGS:
        if args.get(key) is not None:
            m[key] = args[key]
            out.consumed.add(key)
    m["num_residual_streams"] = (
        int(args.get("num_residual_streams") or 1) if args.get("enable_hyper_connections") else 1
    )
    v, rope = args.get("v_head_dim"), args.get("qk_pos_emb_head_dim")
    if isinstance(v, int) and isinstance(rope, int) and 0 < rope < v:
        m["qk_head_dim"] = m["kv_lora_rank"] = v - rope
