"""Recipe provenance as data: which Megatron Bridge performance recipe (and which of the helpers
every perf recipe calls) set each key a scenario left out.

The record is built once by :func:`moeplan.resolve.recipe_fills.recipe_provenance` (``recipe_defaults:
mbridge-perf``), applied by :func:`moeplan.resolve.recipe_fills.apply_recipe` and carried by the resolved
scenario (:attr:`moeplan.resolve.load.Scenario.recipe`); output code (``summary()``, exports) reads
the record, never the prose of a :class:`~moeplan.inputs.resolved.Resolution`.

Sources (``megatron_recipes.md``, vendored in ``tests/data/reference``): Table A, flat perf recipes at Megatron Bridge
``067f987`` (``src/megatron/bridge/perf_recipes/<family>/<gpu>/<model>.py``); Table B, legacy workload
base configs at tag ``v0.5.1`` (``scripts/performance/configs/<family>/*_workload_base_configs.py``);
"H", the same workload configs at the tag of each container release a scenario names
(``catalog/data/mbridge_perf_recipes_by_release.yaml``, ``scripts/import_recipe_history.py``);
the shared helpers of §1.2 and the base recipes of §1.3.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

#: Megatron Bridge revision each recipe table was transcribed at
TABLE_REFS = {"A": "067f987", "B": "v0.5.1"}
#: Megatron Bridge source folder of each table's rows
TABLE_SOURCES = {
    "A": "src/megatron/bridge/perf_recipes/",
    "B": "scripts/performance/configs/<family>/*_workload_base_configs.py",
}

#: where a filled value comes from (``RecipeFill.source``):
#: ``row`` the matched recipe row itself; ``_benchmark_common`` and ``_perf_precision`` the helpers
#: every flat recipe calls (§1.2); ``run_script`` the perf launcher ``scripts/performance/run_script.py``;
#: ``base_recipe`` the library recipe a perf recipe builds on (``src/megatron/bridge/recipes/``, §1.3);
#: ``model_common`` a model family's shared helper (``_deepseek_v3_common``, the DeepSeek-V3 layout map);
#: ``model_recipe`` what every flat recipe of a model sets for a pipeline size (Qwen3-Next-80B PP2×VPP4
#: layout, Qwen3-VL-235B uneven PP 8); ``perf_rows`` a setting every published row shares (forced load
#: balancing, §1.4)
FILL_SOURCES = (
    "row",
    "_benchmark_common",
    "_perf_precision",
    "run_script",
    "base_recipe",
    "model_common",
    "model_recipe",
    "perf_rows",
    "companion",
    "training",
)

#: the two ``recipe_defaults`` fills: ``mbridge-perf`` the recipe's training settings,
#: ``mbridge-perf-benchmark`` the recipe as benchmarked (with :data:`BENCHMARK_ONLY`)
TRAINING_FILL, BENCHMARK_FILL = "mbridge-perf", "mbridge-perf-benchmark"

#: settings the perf recipes use to benchmark and that a training run must not inherit, with why:
#: forced load balancing replaces the router's choice by a round-robin assignment (the model's
#: routing is not trained and the memory of an unbalanced batch is hidden); the NaN check off lets a
#: diverging run go on silently (full-iteration CUDA graphs need it off: then it is their companion)
BENCHMARK_ONLY: dict[str, tuple[Any, str]] = {
    "moe_router_force_load_balancing": (
        True,
        "forced load balancing overrides the router (routing is not learned; memory of real, unbalanced "
        "routing is hidden)",
    ),
    "check_for_nan_in_loss": (False, "the NaN check off lets a diverging loss go on unnoticed"),
}


def is_benchmark_only(key: str, value: Any) -> bool:
    """True when ``key: value`` is a benchmark-only setting (:data:`BENCHMARK_ONLY`)."""
    hit = BENCHMARK_ONLY.get(key)
    return hit is not None and value == hit[0]


@dataclass(frozen=True)
class RecipeRow:
    """The packaged recipe row a scenario's fills came from.

    Attributes:
        id: row id, ``<section>/<suffix>`` for Table A (e.g. ``deepseek_v3/256gpu_gb300_fp8mx``), the
            workload config name for Table B.
        table: ``"A"`` or ``"B"``, or ``"H"`` for a container release's own workload config
            (``catalog.perf_recipes.perf_recipe_history``; ``tag`` then names its Bridge tag).
        file: the row's Bridge source file relative to its table's folder (Table A:
            ``deepseek/gb300/deepseek_v3.py``; a release row: its path in the repository), None when
            the digest names none.
        num_gpus: GPU count the row was published for.
        precisions: the row's precisions (moeplan names, e.g. ``("mxfp8",)``).
        precision: the scenario's precision the row was matched for.
        borrowed: True when no row has ``precision`` and this row of the precision it derives from
            lends its precision-neutral keys (``catalog.perf_recipes.PRECISION_FALLBACK``).
    """

    id: str
    table: str
    file: str | None
    num_gpus: int | None
    precisions: tuple[str, ...]
    precision: str
    borrowed: bool
    tag: str | None = None
    #: the container release the scenario names when no workload config of that release matched (the
    #: current tables were used instead), else None
    release_unmatched: str | None = None
    #: (the row's global batch size, the scenario's) when they differ: which of a layout's variants
    #: (Bridge's ``_V1``/``_V2``/``_LARGE_SCALE``, set apart by GBS) stood in, else None
    gbs_unmatched: tuple[int, int] | None = None
    #: the row's own sizes (``TP1 PP4 VPP4 EP64``) when it is the container release's config of another
    #: layout, whose settings stood in (``catalog.perf_recipes.match_perf_recipe``), else None
    layout_unmatched: str | None = None
    #: the settings of such a row that this layout cannot run, each with why (``EP overlap (PP 2 without
    #: VPP)``): left at the framework's defaults
    settings_left_out: tuple[str, ...] = ()

    @property
    def ref(self) -> str:
        """Megatron Bridge commit or tag of the row's table (``067f987`` / ``v0.5.1``; a release row's
        own tag, e.g. ``v0.3.0``)."""
        return self.tag if self.tag else TABLE_REFS.get(self.table, "?")

    @property
    def table_label(self) -> str:
        """``Table A @067f987`` or ``Table B @v0.5.1``, or ``workload config @v0.3.0`` for a row of a
        container release's own recipes (as printed in the fill reasons)."""
        if self.table == "H":
            return f"workload config @{self.ref}"
        return f"Table {self.table} @{self.ref}"

    @property
    def function(self) -> str | None:
        """``module:function`` of a Table A flat recipe (e.g.
        ``megatron.bridge.perf_recipes.deepseek.gb300.deepseek_v3:deepseek_v3_pretrain_256gpu_gb300_fp8mx_config``,
        the naming of megatron_recipes.md §1.1); None for Table B or a row without a file."""
        if self.table != "A" or not self.file or "/" not in self.id:
            return None
        module = "megatron.bridge.perf_recipes." + self.file.removesuffix(".py").replace("/", ".")
        section, suffix = self.id.split("/", 1)
        return f"{module}:{section}_pretrain_{suffix}_config"

    @property
    def reason(self) -> str:
        """The reason text of the row's fills: ``recipe <id> (Table A @067f987)``, with a note when the
        row is borrowed from another precision, one when the scenario's container release has no
        workload config for this layout (the current tables stood in, or the release's config of
        another layout lent its settings, with what this layout cannot run left out), and one when the
        row was published at another global batch size than the scenario's."""
        note = (
            f"; no {self.precision} row for this layout, {'/'.join(self.precisions)} row's knobs"
            if self.borrowed
            else ""
        )
        if self.release_unmatched:
            note += f"; no {self.release_unmatched} workload config for this layout"
        if self.layout_unmatched:
            note += f"; settings only: the release's config is for {self.layout_unmatched}, none for this layout"
            note += "".join(f"; {s} left out" for s in self.settings_left_out)
        if self.gbs_unmatched:
            note += f"; its GBS {self.gbs_unmatched[0]:,}, not this run's {self.gbs_unmatched[1]:,}"
        return f"recipe {self.id} ({self.table_label}{note})"


@dataclass(frozen=True)
class RecipeFill:
    """One layout key a recipe sets.

    Attributes:
        key: a LayoutSpec key (e.g. ``grad_reduce_in_fp32``).
        value: the value the recipe sets (the LayoutSpec type: bool, int, str, list or None).
        source: which part of the recipe sets it, one of :data:`FILL_SOURCES`.
        reason: the text printed after ``recipe fill: `` in ``resolved_defaults`` (unchanged wording,
            e.g. ``Megatron Bridge perf recipes: _benchmark_common``).
        requires: ``(key, value)`` the filled layout must hold for this fill to apply (a companion's
            anchor), None for an unconditional fill.
    """

    key: str
    value: Any
    source: str
    reason: str
    requires: tuple[str, Any] | None = None

    @property
    def benchmark_only(self) -> bool:
        """True for a benchmark-only setting (:data:`BENCHMARK_ONLY`) that is not a companion."""
        return self.source != "companion" and is_benchmark_only(self.key, self.value)


@dataclass(frozen=True)
class RecipeProvenance:
    """Recipe defaults of one scenario or one planner request.

    Attributes:
        name: the ``recipe_defaults`` value (``"mbridge-perf"``: training settings;
            ``"mbridge-perf-benchmark"``: as benchmarked).
        row: the matched recipe row, None when no row matches (or the planner chose the layout).
        fills: in order, earlier fills win; on a resolved scenario only the fills applied.
        left_out: on a resolved scenario, the fills left out because they would break a layout rule
            for this model that the scenario without them passes, each ``key=value (why)``
            (:func:`moeplan.resolve.recipe_fills.apply_recipe`); () when none.
    """

    name: str
    row: RecipeRow | None
    fills: tuple[RecipeFill, ...]
    left_out: tuple[str, ...] = ()

    def filled_keys(self) -> frozenset[str]:
        """Every key the record fills."""
        return frozenset(f.key for f in self.fills)

    def without(self, keys: Iterable[str]) -> RecipeProvenance:
        """The record less the fills of ``keys`` (the matched row is kept: :attr:`row_filled` says
        whether any of its own fills remain)."""
        drop = frozenset(keys)
        return replace(self, fills=tuple(f for f in self.fills if f.key not in drop))

    @property
    def benchmark(self) -> bool:
        """True for the as-benchmarked fill (``mbridge-perf-benchmark``)."""
        return self.name == BENCHMARK_FILL

    @property
    def row_filled(self) -> bool:
        """True when at least one fill comes from the matched row itself."""
        return self.row is not None and any(f.source == "row" for f in self.fills)

    def to_dict(self) -> dict[str, Any]:
        """Plain mapping (JSON-ready): name, row (id, table, ref, file, function, precisions,
        borrowed), each fill (key, value, source, reason), and ``left_out`` (only when a fill was left
        out, :attr:`left_out`)."""
        r = self.row
        return {
            "name": self.name,
            "row": None
            if r is None
            else {
                "id": r.id,
                "table": r.table,
                "ref": r.ref,
                "file": r.file,
                "function": r.function,
                "precisions": list(r.precisions),
                "borrowed": r.borrowed,
            },
            "fills": [
                {
                    "key": f.key,
                    "value": f.value,
                    "source": f.source,
                    "reason": f.reason,
                    "benchmark_only": f.benchmark_only,
                }
                for f in self.fills
            ],
            **({"left_out": list(self.left_out)} if self.left_out else {}),
        }
