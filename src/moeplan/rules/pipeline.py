"""Pipeline split and layout rules (``megatron_facts.md`` §4.4, vendored in ``tests/data/reference``)."""

from __future__ import annotations

from packaging.version import Version

from moeplan.i18n.messages import Message, msg
from moeplan.rules.base import rule
from moeplan.structure.stages import (
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


def _even_options(n_layers: int, pp: int, vpp: int) -> Message:
    pps = [p for p in (1, 2, 4, 8, 16, 32) if n_layers % p == 0 and (n_layers // p) % vpp == 0]
    return msg("pipeline.even_pp_options", values=pps) if pps else msg("pipeline.no_even_pp")


def _any_of(texts: list[str]) -> str:
    """``texts`` (fix texts, best first) as one text of alternatives: joined with ", or " in English and
    "；或 " in Chinese (each text translated); a single text as it is."""
    if len(texts) == 1:
        return texts[0]
    return msg("pipeline.or", first=texts[0], rest=_any_of(texts[1:]))


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


def _uneven_hint(n_layers: int, pp: int) -> Message | None:
    """The uneven first/last split of :func:`uneven_split` as a fix text, when it leaves the ends no
    more loaded than a middle stage (they also hold the embedding and the output layer); else None."""
    split = uneven_split(n_layers, pp)
    if pp < 2 or split is None:
        return None
    first, last, k = split
    if max(first, last) > k:
        return None
    if pp == 2:
        return msg("pipeline.uneven_split", first=first, last=last)
    if pp == 3:
        return msg("pipeline.uneven_split_one_middle", first=first, last=last, middle=k)
    return msg("pipeline.uneven_split_middles", first=first, last=last, middle=k, stages=pp - 2)


def _account_for_text(keys: list[str], n: int, stages: int) -> Message:
    """The fix that sets the ``account_for_*_in_pipeline_split`` ``keys`` (one or two) to true, with
    the sum it makes: ``n`` decoder layers + one per key = ``stages`` × the layers per stage."""
    extra = len(keys)
    total, per = n + extra, (n + extra) // stages
    if extra == 1:
        return msg("pipeline.account_for_one", key=keys[0], layers=n, extra=extra, total=total, stages=stages, per=per)
    return msg(
        "pipeline.account_for_two",
        key=keys[0],
        other=keys[1],
        layers=n,
        extra=extra,
        total=total,
        stages=stages,
        per=per,
    )


def split_fix(s) -> tuple[list[str], dict | None]:
    """Ways to make the scenario's layers split over its pipeline, as fix texts (best first), and the
    first as layout edits: ``account_for_*_in_pipeline_split`` where counting the embedding and/or the
    loss as a layer makes it divide (Megatron Bridge's Qwen3-235B recipes on PP 8: 94 + 2 = 96), the
    uneven first/last split (no VPP, when it does not load the ends most), and the planner's balanced
    ``pipeline_model_parallel_layout``, ready to paste."""
    m = s.model
    n, pp, vpp = m.num_layers, s.pp, s.vpp
    tail = output_stage_layers(m, s.training.seq_length or 4096, 1, s.mtp_num_layers)
    texts: list[str] = []
    edits = None
    for opt in split_options(n, pp, vpp, s.mtp_num_layers, tail):
        if "pipeline_model_parallel_layout" in opt:
            uneven = _uneven_hint(n, pp) if vpp <= 1 else None
            if uneven:
                texts.append(uneven)
                split = uneven_split(n, pp)
                if edits is None and split is not None:
                    first, last, _ = split
                    edits = {"num_layers_in_first_pipeline_stage": first, "num_layers_in_last_pipeline_stage": last}
            texts.append(msg("pipeline.balanced_layout", layout=repr(opt["pipeline_model_parallel_layout"])))
        else:
            texts.append(_account_for_text(list(opt), n, pp * vpp))
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
        return [e.missing_model("num_layers")]
    extra = int(s.layout.account_for_embedding_in_pipeline_split) + int(s.layout.account_for_loss_in_pipeline_split)
    n = m.num_layers + extra
    if n % s.pp:
        counted = (
            msg("pipeline.counted_layers_not_divisible_by_pp", layers=m.num_layers, extra=extra, total=n, pp=s.pp)
            if extra
            else msg("pipeline.num_layers_not_divisible_by_pp", layers=m.num_layers, pp=s.pp)
        )
        texts, edits = split_fix(s) if not extra else ([], None)
        if extra:
            bal = balanced_layout(m.num_layers, s.pp, s.vpp, s.mtp_num_layers)
            if bal:
                texts = [msg("pipeline.balanced_layout_without_account_for", layout=repr(bal))]
                edits = {
                    "pipeline_model_parallel_layout": bal,
                    "account_for_embedding_in_pipeline_split": None,
                    "account_for_loss_in_pipeline_split": None,
                }
        if m.num_layers < s.pp * s.vpp:
            texts.append(msg("pipeline.pp_at_most_layers", pp=m.num_layers // s.vpp))
        texts.append(_even_options(m.num_layers, s.pp, 1))
        return [
            e.error(
                counted,
                _any_of(texts),
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
        return [e.missing_model("num_layers")]
    extra = int(s.layout.account_for_embedding_in_pipeline_split) + int(s.layout.account_for_loss_in_pipeline_split)
    n = m.num_layers + extra
    if n % s.pp:
        return None  # reported by num_layers_divisible_by_pp
    per = n // s.pp
    if per % s.vpp:
        vpps = [v for v in range(2, per + 1) if per % v == 0]
        return [
            e.error(
                msg("pipeline.stage_layers_not_divisible_by_vpp", per=per, layers=n, pp=s.pp, vpp=s.vpp),
                msg("pipeline.stage_layers_not_divisible_by_vpp.fix", values=vpps or [1]),
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
                msg("pipeline.uneven_no_middle", given=given, covered=num_layers - rest, layers=num_layers, pp=s.pp),
                msg("pipeline.uneven_no_middle.fix", layers=num_layers),
                "num_layers_in_first_pipeline_stage",
                "num_layers_in_last_pipeline_stage",
            )
        )
    elif middle > 0 and (rest <= 0 or rest % middle):
        others = msg("pipeline.the_other_stage") if middle == 1 else msg("pipeline.the_other_stages", n=middle)
        text = (
            msg("pipeline.uneven_leaves_no_layers", others=others, layers=num_layers, given=given, rest=rest)
            if rest <= 0
            else msg("pipeline.uneven_rest_not_even", others=others, layers=num_layers, given=given, rest=rest)
        )
        out.append(
            e.error(
                text,
                msg("pipeline.uneven_rest.fix"),
                "num_layers_in_first_pipeline_stage",
                "num_layers_in_last_pipeline_stage",
            )
        )
    elif middle > 0 and s.vpp > 1 and (rest // middle) % s.vpp:
        out.append(
            e.error(
                msg("pipeline.middle_stage_not_divisible_by_vpp", per=rest // middle, vpp=s.vpp),
                msg("pipeline.middle_stage_not_divisible_by_vpp.fix", vpp=s.vpp),
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
            out.append(
                e.error(
                    msg("pipeline.stage_count_not_positive", key=key, value=v),
                    msg("pipeline.stage_count_not_positive.fix"),
                    key,
                )
            )
        if v is not None and s.vpp > 1 and v % s.vpp:
            out.append(
                e.error(
                    msg("pipeline.stage_count_not_divisible_by_vpp", key=key, value=v, vpp=s.vpp),
                    msg("pipeline.stage_count_not_divisible_by_vpp.fix", vpp=s.vpp),
                    key,
                )
            )
    if lay.account_for_embedding_in_pipeline_split or lay.account_for_loss_in_pipeline_split:
        out.append(
            e.error(
                msg("pipeline.uneven_with_account_for"),
                msg("pipeline.uneven_with_account_for.fix"),
                "account_for_embedding_in_pipeline_split",
            )
        )
    if s.pp == 1:
        out.append(
            e.error(
                msg("pipeline.uneven_needs_pp"),
                msg("pipeline.uneven_needs_pp.fix"),
                "num_layers_in_first_pipeline_stage",
            )
        )
        return out
    m = s.model
    if m is None or m.num_layers is None:
        out.append(e.missing_model("num_layers"))
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
                msg("pipeline.layout_not_exclusive"),
                msg("pipeline.layout_not_exclusive.fix"),
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
                msg("pipeline.layout_stages_not_divisible_by_pp", stages=n, pp=s.pp),
                msg("pipeline.layout_stages_not_divisible_by_pp.fix", stages=s.pp * s.vpp),
                "pipeline_model_parallel_layout",
            )
        ]
    v = n // s.pp
    explicit = s.layout.virtual_pipeline_model_parallel_size
    if explicit is not None and explicit != v and not (explicit == 1 and v == 1):
        return [
            e.error(
                msg("pipeline.layout_vpp_mismatch", stages=n, pp=s.pp, vpp=v, explicit=explicit),
                msg("pipeline.layout_vpp_mismatch.fix", vpp=v),
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
                msg("pipeline.layout_first_e"),
                msg("pipeline.layout_first_e.fix"),
                "pipeline_model_parallel_layout",
            )
        )
    if flat.count("L") != 1 or not flat or flat[-1] != "L":
        out.append(
            e.error(
                msg("pipeline.layout_last_l"),
                msg("pipeline.layout_last_l.fix"),
                "pipeline_model_parallel_layout",
            )
        )
    return out


def _layout_decoder_count(s, e, flat: list[str]) -> list:
    """The decoder layers the flattened layout places (its ``t`` symbols) against the model's
    ``num_layers``; an info finding when the model does not give that number."""
    m = s.model
    if m is None or m.num_layers is None:
        return [e.missing_model("num_layers", msg("pipeline.why_count_t"))]
    t = flat.count("t")
    if t != m.num_layers:
        return [
            e.error(
                msg("pipeline.layout_decoder_count", count=t, layers=m.num_layers),
                msg("pipeline.layout_decoder_count.fix", layers=m.num_layers),
                "pipeline_model_parallel_layout",
            )
        ]
    return []


def _layout_mtp(s, e, stages: list, flat: list[str]) -> list:
    """The MTP layers of the layout (its ``m`` symbols): as many as ``mtp_num_layers``, in one virtual
    stage where megatron-core builds them (:func:`_layout_mtp_stage`), after every decoder layer. ``stages``: the parsed layout, one
    symbol list per virtual stage; ``flat``: those symbols in stage order."""
    out = []
    mtp = s.mtp_num_layers
    mc = flat.count("m")
    if mc != mtp:
        out.append(
            e.error(
                msg("pipeline.layout_mtp_count", count=mc, mtp=mtp),
                msg("pipeline.layout_mtp_count.fix", mtp=mtp) if mtp else msg("pipeline.layout_mtp_count.fix_remove"),
                "pipeline_model_parallel_layout",
                "mtp_num_layers",
            )
        )
    if not mc:
        return out
    out += _layout_mtp_stage(s, e, stages)
    last_t = max((i for i, sym in enumerate(flat) if sym == "t"), default=-1)
    first_m = flat.index("m")
    if first_m < last_t:
        out.append(
            e.error(
                msg("pipeline.layout_mtp_order"),
                msg("pipeline.layout_mtp_order.fix"),
                "pipeline_model_parallel_layout",
            )
        )
    return out


#: the first megatron-core that builds MTP layers in the last virtual stage of any PP rank (a standalone
#: MTP stage, ``mtp_standalone``): ``validate_layer_layout`` of pipeline_parallel_layer_layout.py at
#: core_v0.16.0 (commit 5247a1f, "Support placing MTP layers into standalone stages"); before it
#: (core_v0.15.0) they must share the last stage of the last rank with the loss
MTP_STANDALONE_MCORE = Version("0.16.0")


def _layout_mtp_stage(s, e, stages: list) -> list:
    """Where the layout's MTP layers may sit, as megatron-core's ``validate_layer_layout`` checks it: all
    in one virtual stage, and that stage the last virtual stage of its PP rank (stage ``i`` of the
    layout is PP rank ``i mod PP``, virtual stage ``i div PP``) from :data:`MTP_STANDALONE_MCORE` on,
    the final stage (with L) before it."""
    m_stages = sorted(i for i, st in enumerate(stages) if "m" in st)
    if s.mcore_version < MTP_STANDALONE_MCORE:
        if m_stages == [len(stages) - 1]:
            return []
        return [
            e.error(
                msg("pipeline.layout_mtp_stage", version=str(s.mcore_version)),
                msg("pipeline.layout_mtp_stage.fix"),
                "pipeline_model_parallel_layout",
            )
        ]
    pp = max(s.pp, 1)
    first, last = (len(stages) // pp - 1) * pp, len(stages) - 1  # the layout stages that end a rank
    if len(m_stages) == 1 and m_stages[0] >= first:
        return []
    return [
        e.error(
            msg("recipes_2026.layout_mtp_stage_of_rank", stages=m_stages, first=first, last=last),
            msg("recipes_2026.layout_mtp_stage_of_rank.fix", first=first, last=last),
            "pipeline_model_parallel_layout",
        )
    ]


def _layout_empty_stages(e, stages: list) -> list:
    """A warning naming the virtual stages of the parsed layout that hold no symbol at all."""
    empty = [i for i, st in enumerate(stages) if not st]
    if not empty:
        return []
    return [
        e.warning(
            msg("pipeline.layout_empty_stages", stages=empty),
            msg("pipeline.layout_empty_stages.fix"),
            "pipeline_model_parallel_layout",
        )
    ]


@rule(
    "pipeline.layout_valid",
    "[PPL] pipeline_parallel_layer_layout.py; [TC]",
    "pipeline_model_parallel_layout: parses, stages = PP·VPP, one E first and one L last, "
    "t count = num_layers, m count = mtp_num_layers in one stage (the last rank's last stage; from mcore "
    "0.16 the last virtual stage of any rank), exclusive with uneven/account_for",
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
                msg("pipeline.layout_syntax", error=str(exc)),
                msg("pipeline.layout_syntax.fix"),
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
