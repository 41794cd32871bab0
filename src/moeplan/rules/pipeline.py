"""Pipeline split and layout rules (``megatron_facts.md`` §4.4)."""

from __future__ import annotations

from moeplan.rules.base import rule
from moeplan.spec.pipeline import (
    LayoutSyntaxError,
    balanced_layout,
    output_stage_layers,
    parse_layout,
    split_options,
)


def _uses_layout(s) -> bool:
    return s.layout.pipeline_model_parallel_layout is not None


def _uses_uneven(s) -> bool:
    lay = s.layout
    return lay.num_layers_in_first_pipeline_stage is not None or lay.num_layers_in_last_pipeline_stage is not None


def _even_options(n_layers: int, pp: int, vpp: int) -> str:
    pps = [p for p in (1, 2, 4, 8, 16, 32) if n_layers % p == 0 and (n_layers // p) % vpp == 0]
    return f"PP in {pps}" if pps else "no even PP; use uneven first/last stages or a layout"


def uneven_split(n_layers: int, pp: int) -> tuple[int, int, int] | None:
    """A legal uneven split for ``n_layers`` over ``pp`` ≥ 2 stages: ``(first, last, k)`` with k = ⌈L/PP⌉
    layers on each middle stage (lowered until the ends keep one layer each) and the rest shared by the
    first and last stages, which also hold the embedding and the loss and so should get fewer; when
    the middle count has to drop, the ends can get more (callers check ``max(first, last) > k``).
    None when no split leaves every stage a layer."""
    if pp < 2 or n_layers < pp:
        return None
    k = -(-n_layers // pp)
    while k > 0 and n_layers - (pp - 2) * k < 2:
        k -= 1
    if k == 0:
        return None
    ends = n_layers - (pp - 2) * k
    return ends // 2, ends - ends // 2, k


def _uneven_hint(n_layers: int, pp: int) -> str | None:
    """The uneven first/last split of :func:`uneven_split` as a fix text, when it leaves the ends no
    more loaded than a middle stage (they also hold the embedding and the output layer); else None."""
    split = uneven_split(n_layers, pp)
    if pp < 2 or split is None:
        return None
    first, last, k = split
    if max(first, last) > k:
        return None
    text = f"num_layers_in_first_pipeline_stage: {first} and num_layers_in_last_pipeline_stage: {last}"
    if pp > 2:
        text += f" ({k} on {'the middle stage' if pp == 3 else f'each of the {pp - 2} middle stages'})"
    return text


def split_fix(s) -> tuple[list[str], dict | None]:
    """Ways to make the scenario's layers split over its pipeline, as fix texts (best first), and the
    first as layout edits: ``account_for_*_in_pipeline_split`` where counting the embedding and/or the
    loss as a layer makes it divide (Megatron Bridge's Qwen3-235B recipes on PP 8: 94 + 2 = 96), the
    uneven first/last split (no VPP, when it does not load the ends most), and the planner's balanced
    ``pipeline_model_parallel_layout``, ready to paste."""
    m = s.model
    n, pp, vpp = m.num_layers, s.pp, s.vpp
    tail = output_stage_layers(m, s.training.seq_length or 4096, 1, s.mtp_num_layers)
    texts, edits = [], None
    for opt in split_options(n, pp, vpp, s.mtp_num_layers, tail):
        if "pipeline_model_parallel_layout" in opt:
            uneven = _uneven_hint(n, pp) if vpp <= 1 else None
            if uneven:
                texts.append(uneven)
                split = uneven_split(n, pp)
                if edits is None and split is not None:
                    first, last, _ = split
                    edits = {"num_layers_in_first_pipeline_stage": first, "num_layers_in_last_pipeline_stage": last}
            texts.append(f"pipeline_model_parallel_layout: {opt['pipeline_model_parallel_layout']!r} (balanced)")
        else:
            extra = len(opt)
            what = " and ".join(f"{k}: true" for k in opt)
            texts.append(f"{what} ({n} + {extra} = {n + extra} = {pp * vpp} × {(n + extra) // (pp * vpp)})")
        if edits is None:
            edits = dict(opt)
    return texts, edits


@rule(
    "pipeline.num_layers_divisible_by_pp",
    "[TB] transformer_block.get_num_layers_to_build; [TC]",
    "without a layout or uneven stages, num_layers (+1 per account_for_*) must be divisible by PP",
)
def _even_pp(s, e):
    if s.pp == 1 or _uses_layout(s) or _uses_uneven(s):
        return None
    m = s.model
    if m is None or m.num_layers is None:
        return [e.missing("the model's num_layers")]
    extra = int(s.layout.account_for_embedding_in_pipeline_split) + int(s.layout.account_for_loss_in_pipeline_split)
    n = m.num_layers + extra
    if n % s.pp:
        counted = f"num_layers ({m.num_layers}" + (f" + {extra} for embedding/loss = {n})" if extra else ")")
        texts, edits = split_fix(s) if not extra else ([], None)
        if extra:
            bal = balanced_layout(m.num_layers, s.pp, s.vpp, s.mtp_num_layers)
            if bal:
                texts = [f"pipeline_model_parallel_layout: {bal!r} (balanced; without account_for_*)"]
                edits = {
                    "pipeline_model_parallel_layout": bal,
                    "account_for_embedding_in_pipeline_split": None,
                    "account_for_loss_in_pipeline_split": None,
                }
        if m.num_layers < s.pp * s.vpp:
            texts.append(f"PP ≤ {m.num_layers // s.vpp} (every stage needs at least one layer)")
        texts.append(_even_options(m.num_layers, s.pp, 1))
        return [
            e.error(
                f"{counted} is not divisible by PP ({s.pp})",
                ", or ".join(texts),
                "pipeline_model_parallel_size",
                edits=edits,
            )
        ]


@rule(
    "pipeline.layers_per_stage_divisible_by_vpp",
    "[TB]; [TC]",
    "with VPP the layers per PP rank must be divisible by VPP",
)
def _even_vpp(s, e):
    if s.vpp <= 1 or s.pp == 1 or _uses_layout(s) or _uses_uneven(s):
        return None
    m = s.model
    if m is None or m.num_layers is None:
        return [e.missing("the model's num_layers")]
    extra = int(s.layout.account_for_embedding_in_pipeline_split) + int(s.layout.account_for_loss_in_pipeline_split)
    n = m.num_layers + extra
    if n % s.pp:
        return None  # reported by num_layers_divisible_by_pp
    per = n // s.pp
    if per % s.vpp:
        vpps = [v for v in range(2, per + 1) if per % v == 0]
        return [
            e.error(
                f"{per} layers per PP rank ({n}/{s.pp}) are not divisible by VPP ({s.vpp})",
                f"use VPP in {vpps or [1]}, or a pipeline_model_parallel_layout",
                "virtual_pipeline_model_parallel_size",
            )
        ]


def _uneven_middle_stages(s, e, num_layers: int) -> list:
    """The layers uneven first/last stage counts leave for the other ``PP − given`` stages of a
    ``num_layers``-layer model: all of them when no middle stage is left, else a positive number that
    splits evenly over the middle stages and, with VPP, into whole virtual stages."""
    lay = s.layout
    f, la = lay.num_layers_in_first_pipeline_stage, lay.num_layers_in_last_pipeline_stage
    out = []
    middle = s.pp - (f is not None) - (la is not None)
    rest = num_layers - (f or 0) - (la or 0)
    given = " + ".join(str(v) for v in (f, la) if v is not None)
    if middle == 0 and rest != 0:
        out.append(
            e.error(
                f"first/last stage counts ({given}) cover {num_layers - rest} layers but the model "
                f"has {num_layers} and PP = {s.pp} leaves no middle stage",
                f"make them add up to {num_layers} or raise PP",
                "num_layers_in_first_pipeline_stage",
                "num_layers_in_last_pipeline_stage",
            )
        )
    elif middle > 0 and (rest <= 0 or rest % middle):
        others = "the other stage" if middle == 1 else f"the other {middle} stages"
        what = (
            f"leave no layers for {others} ({num_layers} − {given} = {rest})"
            if rest <= 0
            else f"leave {rest} layers for {others} ({num_layers} − {given}), which does not split evenly"
        )
        out.append(
            e.error(
                f"the first/last stage counts {what}",
                "choose first/last counts leaving a positive multiple of the number of other stages",
                "num_layers_in_first_pipeline_stage",
                "num_layers_in_last_pipeline_stage",
            )
        )
    elif middle > 0 and s.vpp > 1 and (rest // middle) % s.vpp:
        out.append(
            e.error(
                f"each middle stage gets {rest // middle} layers, not divisible by VPP ({s.vpp})",
                f"adjust first/last so the middle count is a multiple of {s.vpp}",
                "virtual_pipeline_model_parallel_size",
            )
        )
    return out


@rule(
    "pipeline.uneven_stages_cover_layers",
    "[TC] transformer_config.py; [TB]",
    "uneven first/last stage counts must be > 0, divisible by VPP, leave a middle divisible by the "
    "middle stages, and not be combined with account_for_*",
)
def _uneven(s, e):
    if not _uses_uneven(s):
        return None
    lay = s.layout
    f, la = lay.num_layers_in_first_pipeline_stage, lay.num_layers_in_last_pipeline_stage
    out = []
    for key, v in (("num_layers_in_first_pipeline_stage", f), ("num_layers_in_last_pipeline_stage", la)):
        if v is not None and v <= 0:
            out.append(e.error(f"{key} ({v}) must be > 0", "use a positive count or a layout with an empty stage", key))
        if v is not None and s.vpp > 1 and v % s.vpp:
            out.append(e.error(f"{key} ({v}) is not divisible by VPP ({s.vpp})", f"use a multiple of {s.vpp}", key))
    if lay.account_for_embedding_in_pipeline_split or lay.account_for_loss_in_pipeline_split:
        out.append(
            e.error(
                "uneven stage counts cannot be combined with account_for_*_in_pipeline_split",
                "use one of the two mechanisms",
                "account_for_embedding_in_pipeline_split",
            )
        )
    if s.pp == 1:
        out.append(e.error("uneven stage counts need PP > 1", "unset them", "num_layers_in_first_pipeline_stage"))
        return out
    m = s.model
    if m is None or m.num_layers is None:
        out.append(e.missing("the model's num_layers"))
        return out
    out.extend(_uneven_middle_stages(s, e, m.num_layers))
    return out


def _layout_exclusive(s, e) -> list:
    """The layout is one of three ways to split layers over stages: an error when uneven stage counts or
    ``account_for_*_in_pipeline_split`` are set with it."""
    lay = s.layout
    if _uses_uneven(s) or lay.account_for_embedding_in_pipeline_split or lay.account_for_loss_in_pipeline_split:
        return [
            e.error(
                "pipeline_model_parallel_layout cannot be combined with uneven stage counts or "
                "account_for_*_in_pipeline_split",
                "keep only the layout",
                "pipeline_model_parallel_layout",
            )
        ]
    return []


def _layout_stage_count(s, e, n: int) -> list:
    """The layout's ``n`` virtual stages against the layout sizes: a multiple of PP, and PP × the
    ``virtual_pipeline_model_parallel_size`` when that is set explicitly (it is inferred otherwise)."""
    if n % s.pp:
        return [
            e.error(
                f"the layout has {n} stages, not divisible by PP ({s.pp})",
                f"give PP·VPP stages (e.g. {s.pp * s.vpp})",
                "pipeline_model_parallel_layout",
            )
        ]
    v = n // s.pp
    explicit = s.layout.virtual_pipeline_model_parallel_size
    if explicit is not None and explicit != v and not (explicit == 1 and v == 1):
        return [
            e.error(
                f"the layout has {n} stages = PP {s.pp} × {v}, but virtual_pipeline_model_parallel_size is {explicit}",
                f"set VPP to {v} or unset it (it is inferred from the layout)",
                "virtual_pipeline_model_parallel_size",
            )
        ]
    return []


def _layout_ends(e, flat: list[str]) -> list:
    """The flattened layout ``flat`` (its symbols in stage order) holds exactly one E, first, and one L,
    last, as megatron-core checks it (empty stages are allowed)."""
    out = []
    if flat.count("E") != 1 or not flat or flat[0] != "E":
        out.append(
            e.error(
                "the layout must hold exactly one E, before every other symbol",
                "start the layout with E",
                "pipeline_model_parallel_layout",
            )
        )
    if flat.count("L") != 1 or not flat or flat[-1] != "L":
        out.append(
            e.error(
                "the layout must hold exactly one L, after every other symbol",
                "end the layout with L",
                "pipeline_model_parallel_layout",
            )
        )
    return out


def _layout_decoder_count(s, e, flat: list[str]) -> list:
    """The decoder layers the flattened layout places (its ``t`` symbols) against the model's
    ``num_layers``; an info finding when the model does not give that number."""
    m = s.model
    if m is None or m.num_layers is None:
        return [e.missing("the model's num_layers (to count 't')")]
    t = flat.count("t")
    if t != m.num_layers:
        return [
            e.error(
                f"the layout holds {t} decoder layers ('t') but the model has {m.num_layers}",
                f"give exactly {m.num_layers} 't' symbols",
                "pipeline_model_parallel_layout",
            )
        ]
    return []


def _layout_mtp(s, e, stages: list, flat: list[str]) -> list:
    """The MTP layers of the layout (its ``m`` symbols): as many as ``mtp_num_layers``, all in the last
    virtual stage of the last PP rank, after every decoder layer. ``stages``: the parsed layout, one
    symbol list per virtual stage; ``flat``: those symbols in stage order."""
    out = []
    mtp = s.mtp_num_layers
    mc = flat.count("m")
    if mc != mtp:
        out.append(
            e.error(
                f"the layout holds {mc} MTP layers ('m') but mtp_num_layers is {mtp}",
                f"give {mtp} 'm' symbols before L" if mtp else "remove the 'm' symbols",
                "pipeline_model_parallel_layout",
                "mtp_num_layers",
            )
        )
    if not mc:
        return out
    m_stages = {i for i, st in enumerate(stages) if "m" in st}
    last_rank_last_stage = len(stages) - 1
    if len(m_stages) > 1 or last_rank_last_stage not in m_stages:
        out.append(
            e.error(
                "MTP layers must all sit in the last virtual stage of the last PP rank "
                "(elsewhere Megatron builds them as a standalone stage)",
                "move every 'm' into the final stage, before L",
                "pipeline_model_parallel_layout",
            )
        )
    last_t = max((i for i, sym in enumerate(flat) if sym == "t"), default=-1)
    first_m = flat.index("m")
    if first_m < last_t:
        out.append(
            e.error(
                "MTP layers must come after all decoder layers",
                "move 'm' after the last 't'",
                "pipeline_model_parallel_layout",
            )
        )
    return out


def _layout_empty_stages(e, stages: list) -> list:
    """A warning naming the virtual stages of the parsed layout that hold no symbol at all."""
    empty = [i for i, st in enumerate(stages) if not st]
    if not empty:
        return []
    return [
        e.warning(
            f"virtual stage(s) {empty} are empty (no E, t, m or L): empty stages are reported to hang the pipeline",
            "give every stage at least one symbol",
            "pipeline_model_parallel_layout",
        )
    ]


@rule(
    "pipeline.layout_valid",
    "[PPL] pipeline_parallel_layer_layout.py; [TC]",
    "pipeline_model_parallel_layout: parses, stages = PP·VPP, one E first and one L last, "
    "t count = num_layers, m count = mtp_num_layers in the last rank's last stage, exclusive with "
    "uneven/account_for",
)
def _layout(s, e):
    lay = s.layout
    if lay.pipeline_model_parallel_layout is None:
        return None
    try:
        stages = parse_layout(lay.pipeline_model_parallel_layout)
    except LayoutSyntaxError as exc:
        return [
            e.error(
                f"pipeline_model_parallel_layout does not parse: {exc}",
                "use E, t, m, L, | with x*n or (...)*n repeats",
                "pipeline_model_parallel_layout",
            )
        ]
    flat = [sym for st in stages for sym in st]
    return [
        *_layout_exclusive(s, e),
        *_layout_stage_count(s, e, len(stages)),
        *_layout_ends(e, flat),
        *_layout_decoder_count(s, e, flat),
        *_layout_mtp(s, e, stages, flat),
        *_layout_empty_stages(e, stages),
    ]
