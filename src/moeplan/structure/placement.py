"""Per-rank parameter placement for a resolved scenario: which layers, embedding, output layer and
MTP blocks each pipeline stage holds, and the parameters on one rank of that stage."""

from __future__ import annotations

from dataclasses import dataclass

from moeplan.errors import InputError
from moeplan.inputs.resolved import Scenario
from moeplan.structure.params import RankParams, padded_vocab_size, rank_params
from moeplan.structure.stages import StagePlan, balanced_stages, plan_stages


@dataclass(frozen=True)
class StageParams:
    """Parameters on one rank of PP stage ``stage`` (all its virtual chunks)."""

    stage: int
    layers: list[int]
    embedding: bool
    output_layer: bool
    mtp_layers: int
    params: RankParams

    def to_dict(self) -> dict:
        return {
            "stage": self.stage,
            "num_layers": len(self.layers),
            "first_layer": self.layers[0] if self.layers else None,
            "last_layer": self.layers[-1] if self.layers else None,
            "embedding": self.embedding,
            "output_layer": self.output_layer,
            "mtp_layers": self.mtp_layers,
            **self.params.to_dict(),
        }


def stage_plan(s: Scenario, allow_balanced: bool = False) -> StagePlan | None:
    """The scenario's :class:`StagePlan` (``None`` when its split is illegal), or with
    ``allow_balanced`` a near-even split for layers that do not divide (see ``balanced_stages``).

    Raises:
        InputError: no model, or one without num_layers.
    """
    m = s.model
    if m is None or m.num_layers is None:
        raise InputError("model", None, "a model with num_layers to place layers")
    lay = s.layout
    key = (
        m.num_layers,
        s.pp,
        lay.virtual_pipeline_model_parallel_size,
        lay.num_layers_in_first_pipeline_stage,
        lay.num_layers_in_last_pipeline_stage,
        lay.account_for_embedding_in_pipeline_split,
        lay.account_for_loss_in_pipeline_split,
        repr(lay.pipeline_model_parallel_layout),
        s.mtp_num_layers,
        allow_balanced,
    )
    if key in _PLAN_CACHE:  # a pure function of the key: a plan call asks for each split many times
        return _PLAN_CACHE[key]
    if len(_PLAN_CACHE) > 5000:
        _PLAN_CACHE.clear()
    _PLAN_CACHE[key] = plan = _stage_plan(s, m.num_layers, allow_balanced)
    return plan


def _stage_plan(s: Scenario, num_layers: int, allow_balanced: bool) -> StagePlan | None:
    """:func:`stage_plan` computed (no cache) for the model's ``num_layers`` decoder layers."""
    lay = s.layout
    plan = plan_stages(
        num_layers,
        s.pp,
        lay.virtual_pipeline_model_parallel_size,
        first=lay.num_layers_in_first_pipeline_stage,
        last=lay.num_layers_in_last_pipeline_stage,
        account_for_embedding=lay.account_for_embedding_in_pipeline_split,
        account_for_loss=lay.account_for_loss_in_pipeline_split,
        layout=lay.pipeline_model_parallel_layout,
        mtp_num_layers=s.mtp_num_layers,
    )
    if plan is None and allow_balanced and lay.pipeline_model_parallel_layout is None:
        plan = balanced_stages(num_layers, s.pp, lay.virtual_pipeline_model_parallel_size, s.mtp_num_layers)
    return plan


def stage_params(
    s: Scenario, make_vocab_size_divisible_by: int = 128, allow_balanced: bool = False
) -> list[StageParams]:
    """Parameters per rank for every PP stage of the scenario's layout (TP/EP/ETP sharding; a VLM's
    vision tower on the stage holding the embedding, as Megatron Bridge places it; vocabulary padded
    to a multiple of ``make_vocab_size_divisible_by``·TP as Megatron-LM pads it). ``allow_balanced``
    estimates a split that is not legal as given with a near-even one.

    Raises:
        InputError: no model, or a split that is not legal (run ``validate`` for the reason).
    """
    m = s.model
    if m is None or m.num_layers is None:
        raise InputError("model", None, "a model with num_layers to place parameters")
    lay = s.layout
    key = (
        id(m),
        s.tp,
        s.ep,
        s.etp,
        s.pp,
        lay.virtual_pipeline_model_parallel_size,
        lay.num_layers_in_first_pipeline_stage,
        lay.num_layers_in_last_pipeline_stage,
        lay.account_for_embedding_in_pipeline_split,
        lay.account_for_loss_in_pipeline_split,
        str(lay.pipeline_model_parallel_layout),
        s.mtp_num_layers,
        make_vocab_size_divisible_by,
        allow_balanced,
    )
    hit = _CACHE.get(key)
    if hit is not None and hit[0] is m:
        return list(hit[1])
    out = _stage_params(s, make_vocab_size_divisible_by, allow_balanced)
    if len(_CACHE) > 5000:
        _CACHE.clear()
    _CACHE[key] = (m, out)
    return list(out)


_CACHE: dict[tuple, tuple] = {}
#: :func:`stage_plan`'s answers by the layout keys they read (the plans are frozen and never changed)
_PLAN_CACHE: dict[tuple, StagePlan | None] = {}


def _stage_params(s: Scenario, make_vocab_size_divisible_by: int, allow_balanced: bool) -> list[StageParams]:
    m = s.complete_model  # rank_params needs a complete model anyway
    plan = stage_plan(s, allow_balanced)
    if plan is None:
        lay = s.layout
        what = f"{m.num_layers} layers over PP {s.pp}" + (f" × VPP {s.vpp}" if s.vpp > 1 else "")
        raise InputError(
            "pipeline_model_parallel_size",
            s.pp,
            f"a split Megatron accepts ({what} does not split"
            + (" as the layout string says" if lay.pipeline_model_parallel_layout is not None else " evenly")
            + "); set num_layers_in_first/last_pipeline_stage or pipeline_model_parallel_layout — "
            "`moeplan check` proposes one",
        )
    vpad = padded_vocab_size(m.vocab_size, s.tp, make_vocab_size_divisible_by)
    out = []
    for r in range(s.pp):
        layers = plan.rank_layers(r)
        emb = plan.embedding[0] == r
        outl = plan.loss[0] == r
        mtp = s.mtp_num_layers if any(h[0] == r for h in plan.mtp) else 0
        rp = rank_params(
            m,
            layers,
            tp=s.tp,
            ep=s.ep,
            etp=s.etp,
            embedding=emb,
            output_layer=outl,
            mtp_layers=mtp,
            padded_vocab=vpad,
            vision=emb,
        )
        out.append(StageParams(r, layers, emb, outl, mtp, rp))
    return out
