"""Recipe defaults: values Megatron Bridge's performance recipes set for keys a scenario leaves out,
computed as a :class:`~moeplan.inputs.provenance.RecipeProvenance` record and applied once.

Published throughput tables (``docs/performance-summary.md``) list only TP/PP/VPP/CP/EP/FSDP; the
runs behind them come from the perf launcher (``scripts/performance``), whose helpers set more
(Megatron Bridge @ 067f987, as transcribed in ``megatron_recipes.md`` §1.2–1.3 and Table A):

- ``_benchmark_common``: ``grad_reduce_in_fp32=False``, TE fused cross entropy,
  ``check_for_nan_in_loss=False``;
- ``_perf_precision``: ``fp8_param_gather=True`` for FP8 current scaling and MXFP8;
- ``run_script.py``: the precision-aware optimizer for BF16 + Adam;
- ``_deepseek_v3_common``: selective recompute, forced load balancing; the DeepSeek-V3 base recipe's
  precision-aware optimizer with bf16 main grads and moments; its layout map for PP·VPP = 16 / 32;
- Qwen3-235B-A22B recipes: ``account_for_embedding/loss_in_pipeline_split``; Qwen3-Next-80B: its
  PP2×VPP4 layout; Qwen3-VL-235B: uneven 10/12 first/last stages.

A scenario that names its container release (``versions.container``) is filled from the workload
configs that release shipped (``catalog.perf_recipes.perf_recipe_history``: Bridge's
``scripts/performance/configs`` at the release's tag), not from HEAD's tables: 26.02's Qwen3-235B on
B300 ran EP A2A overlap with NCCL all-to-all, HEAD's recipe runs HybridEP without it.

Two fills, two purposes (``docs/model/recipe_fills.md``): ``recipe_defaults: mbridge-perf`` fills
the recipe's **training** settings; ``mbridge-perf-benchmark`` reproduces the published benchmark and
also fills the benchmark-only settings (:data:`~moeplan.inputs.provenance.BENCHMARK_ONLY`: forced load
balancing, the NaN check off). Under the training fill the NaN check is only turned off as the
companion of a full-iteration CUDA graph, which cannot run with it.

Only keys the user did not state are filled, and every fill is recorded (as a
:class:`~moeplan.inputs.resolved.Resolution` whose reason text is unchanged, and in the scenario's
``recipe`` record, which is what other code reads).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any, cast

from moeplan.catalog.gpus import get_gpu
from moeplan.catalog.perf_recipes import PRECISION_KEYS, match_perf_recipe
from moeplan.errors import InputError
from moeplan.i18n.messages import Message, msg
from moeplan.inputs.provenance import BENCHMARK_FILL, TRAINING_FILL, RecipeFill, RecipeProvenance, RecipeRow
from moeplan.inputs.resolved import Resolution
from moeplan.inputs.versions import container_release
from moeplan.structure.stages import LayoutSyntaxError, parse_layout, plan_stages

if TYPE_CHECKING:
    from moeplan.inputs.layout import LayoutSpec
    from moeplan.inputs.model_spec import PartialModelSpec
    from moeplan.inputs.schema import ScenarioInput

RECIPE_DEFAULTS = ("none", TRAINING_FILL, BENCHMARK_FILL)
#: what a full-iteration CUDA graph needs that the training fill would otherwise leave at Megatron's default
_FULL_ITERATION_COMPANION = RecipeFill(
    "check_for_nan_in_loss",
    False,
    "companion",
    "Megatron Bridge perf recipes: full_iteration CUDA graphs need the NaN check off",
    requires=("cuda_graph_impl", "full_iteration"),
)

_DSV3_LAYOUTS = {16: "Et*4|(t*4|)*14tmL", 32: "Et|(tt|)*30mL"}
_SRC = "Megatron Bridge perf recipes"

#: layout keys a recipe row sets as one choice (graphs, dispatcher, recompute); the static-budget
#: expert path belongs to both the full-iteration graph and the HybridEP dispatcher
_STATIC_BUDGET = ("moe_expert_rank_capacity_factor", "moe_paged_stash", "use_transformer_engine_op_fuser")
_GRAPH_KEYS = ("cuda_graph_impl", "cuda_graph_scope", "cuda_graph_modules", *_STATIC_BUDGET)
_DISPATCHER_KEYS = ("moe_token_dispatcher_type", "moe_flex_dispatcher_backend", *_STATIC_BUDGET)
_EP_OVERLAP_KEYS = ("overlap_moe_expert_parallel_comm", "delay_wgrad_compute")
_RECIPE_KEY_GROUPS = (
    _GRAPH_KEYS,
    _DISPATCHER_KEYS,
    ("recompute_granularity", "recompute_modules", "recompute_method", "recompute_num_layers"),
    _EP_OVERLAP_KEYS,
)
#: the sizes a recipe row is matched on (``catalog.perf_recipes.match_perf_recipe``)
CORE_SIZES = (
    "tensor_model_parallel_size",
    "pipeline_model_parallel_size",
    "context_parallel_size",
    "expert_model_parallel_size",
)


#: layout keys that describe a row's own layout rather than its settings: a release's config of another
#: layout lends none of them (its sizes, SP with its TP, its pipeline split and per-layer counts)
_LAYOUT_SHAPED = frozenset(
    {
        *CORE_SIZES,
        "virtual_pipeline_model_parallel_size",
        "expert_tensor_parallel_size",
        "sequence_parallel",
        "pipeline_model_parallel_layout",
        "num_layers_in_first_pipeline_stage",
        "num_layers_in_last_pipeline_stage",
        "cpu_offloading_num_layers",
        "recompute_num_layers",
    }
)


def _size(layout: dict, key: str) -> int:
    return int(layout.get(key) or 1)


def _sizes_text(layout: dict) -> str:
    """``TP1 PP4 VPP4 EP64`` (CP, ETP and VPP only when > 1) of a layout mapping."""
    parts = [("TP", "tensor_model_parallel_size"), ("PP", "pipeline_model_parallel_size")]
    parts += [("VPP", "virtual_pipeline_model_parallel_size"), ("CP", "context_parallel_size")]
    parts += [("EP", "expert_model_parallel_size"), ("ETP", "expert_tensor_parallel_size")]
    return " ".join(f"{n}{_size(layout, k)}" for n, k in parts if n in ("TP", "PP", "EP") or _size(layout, k) > 1)


def _flex_blocker(row_layout: dict, layout: dict, gpu_id: str | None) -> str | None:
    """Why ``layout`` cannot run the flex dispatcher of a config of another layout, or None: flex needs
    ETP·EP > 1 (megatron-core ``TransformerConfig``); HybridEP across NVLink domains is another regime
    (RDMA, a per-rank token limit: rule ``moe.hybridep_internode_token_limit``) than within one."""
    group = _size(layout, "expert_tensor_parallel_size") * _size(layout, "expert_model_parallel_size")
    if group <= 1:
        return "ETP·EP = 1"
    if row_layout.get("moe_flex_dispatcher_backend") != "hybridep" or gpu_id is None:
        return None
    try:
        domain = get_gpu(gpu_id).scaleup_domain_gpus
    except InputError:
        return None
    row_group = _size(row_layout, "expert_tensor_parallel_size") * _size(row_layout, "expert_model_parallel_size")
    if group > domain >= row_group:
        return f"ETP·EP {group} spans NVLink domains of {domain} GPUs, the config's {row_group} did not"
    return None


def _other_vpp(row_layout: dict, layout: dict) -> bool:
    """Whether ``layout`` states a VPP other than the row's (an unstated VPP, None, takes the row's)."""
    vpp = layout.get("virtual_pipeline_model_parallel_size")
    return vpp is not None and _size(layout, "virtual_pipeline_model_parallel_size") != _size(
        row_layout, "virtual_pipeline_model_parallel_size"
    )


def _ep_overlap_blocker(layout: dict, mtp_layers: int) -> str | None:
    """Why ``layout`` cannot run EP A2A overlap, or None (rule ``moe.ep_overlap_requirements``: EP > 1,
    VPP when PP > 1, PP > 1 when an MTP layer is built)."""
    pp, vpp = _size(layout, "pipeline_model_parallel_size"), _size(layout, "virtual_pipeline_model_parallel_size")
    if _size(layout, "expert_model_parallel_size") <= 1:
        return "EP 1"
    if pp > 1 and vpp <= 1:
        return f"PP {pp} without VPP"
    if mtp_layers and pp == 1:
        return "an MTP layer with PP 1"
    return None


def _settings_of(row_layout: dict, layout: dict, gpu_id: str | None, mtp_layers: int) -> tuple[dict, tuple[str, ...]]:
    """The settings a release's config of another layout lends ``layout``: its keys but the layout-shaped
    ones (:data:`_LAYOUT_SHAPED`), without the flex dispatcher (and its static budget) or EP overlap where
    ``layout`` cannot run them; and what was left out, each with why."""
    lent = {k: v for k, v in row_layout.items() if k not in _LAYOUT_SHAPED}
    left_out: list[str] = []
    flex = _flex_blocker(row_layout, layout, gpu_id) if lent.get("moe_token_dispatcher_type") == "flex" else None
    if flex:
        for k in _DISPATCHER_KEYS:
            lent.pop(k, None)
        left_out.append(f"the flex dispatcher ({flex})")
        if lent.get("cuda_graph_impl") == "full_iteration":  # rule graphs.full_iteration_moe_static_shapes
            for k in _GRAPH_KEYS:
                lent.pop(k, None)
            left_out.append("the full-iteration CUDA graph (its static expert budget is the HybridEP one)")
    overlap = _ep_overlap_blocker(layout, mtp_layers) if lent.get("overlap_moe_expert_parallel_comm") else None
    if overlap:
        for k in _EP_OVERLAP_KEYS:
            lent.pop(k, None)
        left_out.append(f"EP overlap ({overlap})")
    return lent, tuple(left_out)


def _row_fills(
    model_id: str,
    gpu_id: str | None,
    precision: str,
    layout: dict,
    micro_batch_size: int | None,
    num_gpus: int | None,
    release: str | None = None,
    global_batch_size: int | None = None,
    mtp_layers: int = 0,
) -> tuple[RecipeRow | None, list[RecipeFill]]:
    """The matching row of the packaged tables (``catalog.perf_recipes.match_perf_recipe``; the container
    ``release``'s own workload configs first) and its layout keys as fills; a row borrowed from another
    precision lends no precision key; the release's config of another layout lends only its settings
    (:func:`_settings_of`; ``mtp_layers``: the MTP layers the scenario builds)."""

    found = match_perf_recipe(
        model_id,
        gpu_id,
        precision,
        layout,
        micro_batch_size,
        num_gpus,
        release=release,
        global_batch_size=global_batch_size,
    )
    if found is None:
        return None, []
    other = bool(found.get("layout_unmatched"))
    row_layout: dict = found["layout"]
    left_out: tuple[str, ...] = ()
    if other:
        row_layout, left_out = _settings_of(found["layout"], layout, gpu_id, mtp_layers)
    elif _other_vpp(found["layout"], layout):
        # a pipeline layout string names PP·VPP stages: the row's is wrong for a stated VPP of its own
        row_layout = {k: v for k, v in row_layout.items() if k != "pipeline_model_parallel_layout"}
    row = RecipeRow(
        id=found["id"],
        table=found["table"],
        file=(found.get("extra") or {}).get("file"),
        num_gpus=found.get("num_gpus"),
        precisions=tuple(found["precisions"]),
        precision=precision,
        borrowed=precision not in found["precisions"],
        tag=(found.get("extra") or {}).get("tag") if found["table"] == "H" else None,
        release_unmatched=release if release is not None and found["table"] != "H" else None,
        gbs_unmatched=None if other else _gbs_unmatched(found, global_batch_size),
        layout_unmatched=_sizes_text(found["layout"]) if other else None,
        settings_left_out=left_out,
    )
    fills = [
        RecipeFill(key, value, "row", row.reason)
        for key, value in row_layout.items()
        if not (row.borrowed and key in PRECISION_KEYS)
    ]
    return row, fills


def _gbs_unmatched(row: dict, global_batch_size: int | None) -> tuple[int, int] | None:
    """(the row's GBS, the scenario's) when both are known and differ, else None."""
    row_gbs = (row.get("training") or {}).get("global_batch_size")
    if global_batch_size is None or not isinstance(row_gbs, int) or row_gbs == global_batch_size:
        return None
    return row_gbs, global_batch_size


def _shared_fills(precision: str, model: PartialModelSpec | None) -> list[RecipeFill]:
    """What every perf recipe sets whatever the layout: ``_benchmark_common``, the library recipes'
    distributed optimizer, ``_perf_precision``, ``run_script.py``, forced load balancing."""
    out = [
        RecipeFill("grad_reduce_in_fp32", False, "_benchmark_common", f"{_SRC}: _benchmark_common"),
        RecipeFill("cross_entropy_loss_fusion", True, "_benchmark_common", f"{_SRC}: TE fused cross entropy"),
        RecipeFill("check_for_nan_in_loss", False, "_benchmark_common", f"{_SRC}: _benchmark_common"),
        RecipeFill("use_distributed_optimizer", True, "base_recipe", f"{_SRC}"),
    ]
    if precision in ("fp8-tensorwise", "mxfp8"):
        out.append(RecipeFill("fp8_param_gather", True, "_perf_precision", f"{_SRC}: _perf_precision({precision})"))
    if precision == "bf16":
        out.append(
            RecipeFill(
                "use_precision_aware_optimizer", True, "run_script", f"{_SRC}: run_script.py forces it for BF16 + Adam"
            )
        )
    if model is not None and model.is_moe:
        out.append(
            RecipeFill(
                "moe_router_force_load_balancing", True, "perf_rows", f"{_SRC}: benchmarks force-balance routing"
            )
        )
    return out


def _model_fills(model: PartialModelSpec, pp: int, vpp: int | None) -> list[RecipeFill]:
    """Model-family settings: ``_deepseek_v3_common`` and the DeepSeek-V3 base recipe (also Kimi-K2),
    the DeepSeek-V3 layout map (PP·VPP = 16 / 32), Qwen3-235B-A22B's split accounting (PP > 1),
    Qwen3-Next-80B's PP2×VPP4 layout and Qwen3-VL-235B's uneven PP 8 stages."""
    out: list[RecipeFill] = []
    mt = (model.model_type or "").lower()
    nm = model.name.lower()
    if mt in ("deepseek_v3", "kimi_k2"):
        out.append(RecipeFill("recompute_granularity", "selective", "model_common", f"{_SRC}: _deepseek_v3_common"))
        for key, value in (
            ("use_precision_aware_optimizer", True),
            ("main_grads_dtype", "bf16"),
            ("exp_avg_dtype", "bf16"),
            ("exp_avg_sq_dtype", "bf16"),
        ):
            out.append(RecipeFill(key, value, "base_recipe", f"{_SRC}: DeepSeek-V3 base recipe"))
        stages = pp * (vpp or 1)
        if model.num_layers == 61 and pp > 1 and stages in _DSV3_LAYOUTS:
            why = f"{_SRC}: set_deepseek_v3_pipeline_model_parallel_layout for PP·VPP = {stages}"
            out.append(RecipeFill("pipeline_model_parallel_layout", _DSV3_LAYOUTS[stages], "model_common", why))
    if "qwen3-235b-a22b" in nm and pp > 1:
        for key in ("account_for_embedding_in_pipeline_split", "account_for_loss_in_pipeline_split"):
            out.append(RecipeFill(key, True, "base_recipe", f"{_SRC}: Qwen3-235B-A22B"))
    if "qwen3-next-80b" in nm and pp == 2 and vpp == 4:
        out.append(
            RecipeFill(
                "pipeline_model_parallel_layout",
                "Et*4|(t*7|)*5t*8|tmL",
                "model_recipe",
                f"{_SRC}: Qwen3-Next-80B PP2×VPP4",
            )
        )
    if "qwen3-vl-235b" in nm and pp == 8:
        for key, n in (("num_layers_in_first_pipeline_stage", 10), ("num_layers_in_last_pipeline_stage", 12)):
            out.append(RecipeFill(key, n, "model_recipe", f"{_SRC}: Qwen3-VL-235B uneven PP"))
    return out


def recipe_provenance(
    name: str,
    model: PartialModelSpec | None,
    precision: str,
    pp: int,
    vpp: int | None,
    gpu_id: str | None = None,
    layout: dict | None = None,
    micro_batch_size: int | None = None,
    num_gpus: int | None = None,
    *,
    match_row: bool = True,
    release: str | None = None,
    vpp_stated: bool = True,
    global_batch_size: int | None = None,
) -> RecipeProvenance | None:
    """The fills of recipe defaults ``name`` for this model and layout, as a record: first the
    matching row of the packaged tables (same model, GPU, precision, TP/PP/CP/EP; then VPP, MBS, GPU
    count, GBS, Table A first; ``match_row=False`` skips it), then the helpers every perf recipe shares,
    then the model family's. Earlier fills win when applied.

    Args:
        name: ``"none"``, ``"mbridge-perf"`` (training settings) or ``"mbridge-perf-benchmark"``
            (as benchmarked).
        model: the resolved model (None: no row, no model-family fills).
        precision: the training precision (``bf16``, ``mxfp8``, ...).
        pp / vpp: pipeline sizes (layout-dependent model fills).
        gpu_id: lower-case catalog GPU id (a custom GPU matches no row).
        layout: LayoutSpec keys of the scenario (missing sizes count as 1).
        micro_batch_size / num_gpus / global_batch_size: tie-breaks between rows.
        release: the scenario's container release (``versions.container``): the workload configs that
            release shipped are matched first (``catalog.perf_recipes.perf_recipe_history``).
        vpp_stated: False when the user left VPP out: the model family's layout map then reads the
            VPP the matched row fills.

    Returns:
        None for ``recipe_defaults: none``; else the record (its ``row`` None when none matched).
        The training fill (``mbridge-perf``) leaves the benchmark-only fills out and turns the NaN
        check off only as the companion of a full-iteration graph.

    Source: Megatron Bridge @067f987 perf recipes and helpers, Table B @v0.5.1
    (``megatron_recipes.md`` §1.2–1.5).
    """
    if name not in (TRAINING_FILL, BENCHMARK_FILL):
        return None
    row: RecipeRow | None = None
    fills: list[RecipeFill] = []
    if match_row and model is not None and layout is not None:
        row, fills = _row_fills(
            model.name,
            gpu_id,
            precision,
            layout,
            micro_batch_size,
            num_gpus,
            release=release,
            global_batch_size=global_batch_size,
            mtp_layers=_mtp_layers(model, layout),
        )
    fills += _shared_fills(precision, model)
    if model is not None:
        # the model recipe's layout map reads the VPP the run ends with: the row's when the user left it out
        row_vpp = next((f.value for f in fills if f.key == "virtual_pipeline_model_parallel_size"), None)
        fills += _model_fills(model, pp, vpp if vpp_stated else row_vpp)
    if name == TRAINING_FILL:
        fills = _training(fills)
    return RecipeProvenance(name, row, tuple(fills))


def _mtp_layers(model: PartialModelSpec, layout: dict) -> int:
    """The MTP layers a scenario builds: the layout's ``mtp_num_layers`` when stated, else the model's."""
    stated = layout.get("mtp_num_layers")
    return int(stated) if stated is not None else int(getattr(model, "mtp_num_layers", 0) or 0)


def _training(fills: list[RecipeFill]) -> list[RecipeFill]:
    """The training fill: each benchmark-only fill replaced by the setting's training value (the
    NaN check stays off only as the companion of a full-iteration graph, which comes first and so
    wins where it applies)."""
    out = [f for f in fills if not f.benchmark_only]
    dropped = [f for f in fills if f.benchmark_only]
    if any(f.key == "check_for_nan_in_loss" for f in dropped):
        out.append(_FULL_ITERATION_COMPANION)
    for f in dropped:
        if f.key not in {g.key for g in out if g.source == "training"}:
            why = f"{_SRC}: training setting (the benchmark sets {f.key}={str(f.value).lower()})"
            out.append(RecipeFill(f.key, not f.value, "training", why))
    return out


def recipe_fills(
    name: str,
    model,
    precision: str,
    pp: int,
    vpp: int | None,
    gpu_id: str | None = None,
    layout: dict | None = None,
    micro_batch_size: int | None = None,
    num_gpus: int | None = None,
) -> list[tuple[str, Any, str]]:
    """(layout key, value, reason) of :func:`recipe_provenance`'s fills, in order (earlier fills win);
    [] for ``recipe_defaults: none``. Arguments as :func:`recipe_provenance`."""
    rec = recipe_provenance(name, model, precision, pp, vpp, gpu_id, layout, micro_batch_size, num_gpus)
    return [] if rec is None else [(f.key, f.value, f.reason) for f in rec.fills]


def recipe_for_input(
    inp: ScenarioInput, model: PartialModelSpec | None, *, match_row: bool = True
) -> RecipeProvenance | None:
    """:func:`recipe_provenance` of a validated scenario input: its ``recipe_defaults``, precision,
    stated layout (unstated sizes at their defaults), micro-batch and global batch size, GPU id and
    count. None for ``recipe_defaults: none`` (the layout not read)."""
    if inp.recipe_defaults not in (TRAINING_FILL, BENCHMARK_FILL):
        return None
    lay = inp.layout
    gpu_id = inp.system.gpu if isinstance(inp.system.gpu, str) else None
    return recipe_provenance(
        inp.recipe_defaults,
        model,
        inp.training.precision,
        lay.pipeline_model_parallel_size,
        lay.virtual_pipeline_model_parallel_size,
        gpu_id=gpu_id.lower() if gpu_id else None,
        layout=lay.model_dump(),
        micro_batch_size=inp.training.micro_batch_size,
        num_gpus=inp.system.num_gpus,
        match_row=match_row,
        release=nemo_release(inp.versions.container),
        vpp_stated="virtual_pipeline_model_parallel_size" in lay.model_fields_set,
        global_batch_size=inp.training.global_batch_size,
    )


def nemo_release(container: str | None) -> str | None:
    """The NeMo Framework release of ``versions.container`` (``nvcr.io/nvidia/nemo:26.02`` or
    ``26.02`` → ``26.02``); None for none, another family (``pytorch:…``) or an unreadable tag."""
    found = container_release(container)
    return found[1] if found is not None and found[0] == "nemo" else None


def _ep_overlap_ruled_out(lay: LayoutSpec) -> bool:
    """Whether a layout's other settings rule EP A2A overlap out (megatron-core ``TransformerConfig``,
    Bridge ``comm_overlap``; rule ``moe.ep_overlap_requirements``): a dispatcher other than alltoall or
    flex, full recompute (or a recompute method / layer count), 'moe' recompute, shared-expert overlap, TE
    graphs of 'moe' or 'mlp'. A recipe's EP overlap is not filled into such a layout: the user's stated
    setting wins, and the fill must not make a valid layout invalid."""
    scopes = {lay.cuda_graph_scope} if isinstance(lay.cuda_graph_scope, str) else set(lay.cuda_graph_scope or [])
    scopes |= set(lay.cuda_graph_modules or [])
    return bool(
        lay.moe_token_dispatcher_type not in (None, "alltoall", "flex")
        or lay.recompute_granularity == "full"
        or lay.recompute_method
        or lay.recompute_num_layers
        or (lay.recompute_granularity == "selective" and "moe" in (lay.recompute_modules or []))
        or lay.moe_shared_expert_overlap
        or (lay.cuda_graph_impl == "transformer_engine" and {"moe", "mlp"} & scopes)
    )


def apply_recipe(
    lay: LayoutSpec, stated: frozenset[str], record: RecipeProvenance, model: PartialModelSpec | None = None
) -> tuple[LayoutSpec, list[Resolution], RecipeProvenance]:
    """Fill ``record``'s keys into ``lay`` where the user did not state them.

    Keys that only make sense together come from one source (:data:`_RECIPE_KEY_GROUPS`): when a
    stated key of a group differs from what the recipe sets, the rest of the group is not filled (a
    stated full-iteration graph takes no TE-graph scope from a row; a stated all-to-all takes no
    HybridEP budget). The first fill of a key wins. A fill with ``requires`` (a companion) applies
    only when the filled layout holds its anchor. A recipe's EP overlap is left out of a layout whose
    other settings rule it out (:func:`_ep_overlap_ruled_out`), and a pipeline split that would not
    hold ``model`` (the scenario's model; None skips that guard) is left out and named in the
    record's ``left_out`` (:func:`_without_breaking_fills`).

    Returns:
        (the filled layout, one ``Resolution`` per fill with reason ``recipe fill: <reason>``, the
        record of the fills applied and of those left out).
    """
    offered: dict[str, Any] = {}
    for f in record.fills:
        offered.setdefault(f.key, f.value)
    stated_values = lay.model_dump(include=set(stated))
    clashing = [
        g for g in _RECIPE_KEY_GROUPS if any(k in stated and k in offered and stated_values[k] != offered[k] for k in g)
    ]
    upd: dict[str, Any] = {}
    applied: list[RecipeFill] = []
    for f in record.fills:
        if f.key not in stated and f.key not in upd and not any(f.key in g for g in clashing):
            if f.requires is not None:
                anchor, want = f.requires
                if upd.get(anchor, getattr(lay, anchor, None)) != want:
                    continue
            upd[f.key] = f.value
            applied.append(f)
    if upd.get("overlap_moe_expert_parallel_comm") and _ep_overlap_ruled_out(lay.model_copy(update=upd)):
        applied = [f for f in applied if f.key not in _EP_OVERLAP_KEYS]
        upd = {k: v for k, v in upd.items() if k not in _EP_OVERLAP_KEYS}
    upd, left_out = _without_breaking_fills(lay, upd, model)
    applied = [f for f in applied if f.key in upd]
    res = [Resolution(f.key, f.value, f"recipe fill: {f.reason}") for f in applied]
    filled = lay.model_copy(update=upd) if upd else lay
    return filled, res, replace(record, fills=tuple(applied), left_out=left_out)


#: the keys of a pipeline split a recipe fills: one choice, left out together
_SPLIT_KEYS = (
    "pipeline_model_parallel_layout",
    "num_layers_in_first_pipeline_stage",
    "num_layers_in_last_pipeline_stage",
    "account_for_embedding_in_pipeline_split",
    "account_for_loss_in_pipeline_split",
)


def _without_breaking_fills(
    lay: LayoutSpec, upd: dict[str, Any], model: PartialModelSpec | None
) -> tuple[dict[str, Any], tuple[str, ...]]:
    """``upd`` less the fills that would break a layout rule for ``model`` that ``lay`` without them
    passes, and each one left out as ``key=value (why)``. A fill never makes a scenario invalid: a
    recipe written for one model (DeepSeek-V3's layout map, with its MTP stage) can be matched by
    another of the same family (Kimi-K2, no MTP), or by the same model with ``mtp_num_layers: 0``.

    Checked (the rules' conditions, spec-side): the pipeline split (rule ``pipeline.layout_valid``:
    the layout string's stages, decoder layers ``t`` and MTP layers ``m`` against PP·VPP, the model's
    ``num_layers`` and the MTP layers it builds; rules ``pipeline.uneven_*``: uneven first / last
    stage counts Megatron can split, :func:`moeplan.structure.stages.plan_stages`)."""
    split = {k: v for k, v in upd.items() if k in _SPLIT_KEYS}
    if not split or model is None or model.num_layers is None:
        return upd, ()
    why = _split_conflict(lay.model_copy(update=upd), model)
    if why is None or _split_conflict(lay, model) is not None:
        return upd, ()
    kept = {k: v for k, v in upd.items() if k not in split}
    return kept, tuple(msg("recipe_fills.setting_breaks_split", setting=f"{k}={v}", why=why) for k, v in split.items())


def _layers(k: int, kind: str) -> Message:
    """``1 MTP layer`` / ``2 MTP layers`` (``kind``: ``mtp``), ``1 decoder layer`` / ... (``decoder``)."""
    if kind == "mtp":
        return msg("recipe_fills.mtp_layer", n=k) if k == 1 else msg("recipe_fills.mtp_layers", n=k)
    return msg("recipe_fills.decoder_layer", n=k) if k == 1 else msg("recipe_fills.decoder_layers", n=k)


def _split_conflict(lay: LayoutSpec, model: PartialModelSpec) -> Message | None:
    """Why ``lay``'s pipeline split cannot hold ``model`` (``model.num_layers`` known), or None."""
    n = cast(int, model.num_layers)
    mtp = lay.mtp_num_layers if lay.mtp_num_layers is not None else (model.mtp_num_layers or 0)
    pp, vpp = lay.pipeline_model_parallel_size, lay.virtual_pipeline_model_parallel_size
    text = lay.pipeline_model_parallel_layout
    if text is not None:
        try:
            stages = parse_layout(text)
        except LayoutSyntaxError:
            return msg("recipe_fills.layout_does_not_parse")
        flat = [sym for st in stages for sym in st]
        if flat.count("m") != mtp:
            return msg("recipe_fills.holds_mtp_layers", layers=_layers(flat.count("m"), "mtp"), built=mtp)
        if flat.count("t") != n:
            return msg("recipe_fills.holds_decoder_layers", layers=_layers(flat.count("t"), "decoder"), built=n)
        if len(stages) % pp or (vpp is not None and len(stages) != pp * vpp):
            return msg("recipe_fills.stages_not_pp_vpp", n=len(stages), pp=pp, vpp=vpp or len(stages) // pp)
        return None
    first, last = lay.num_layers_in_first_pipeline_stage, lay.num_layers_in_last_pipeline_stage
    if (first is not None or last is not None) and plan_stages(n, pp, vpp, first=first, last=last) is None:
        return msg("recipe_fills.layers_do_not_split", n=n, pp=pp)
    return None
