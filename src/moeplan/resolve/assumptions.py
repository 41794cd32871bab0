"""The assumptions that move a verdict, stated once per output: the dtype gradients are reduced in,
the optimizer's dtypes, the routing imbalance of MoE layers, which recipe fill was applied, and any
benchmark-only setting in effect (forced load balancing, the NaN check off).

``estimate``, ``plan`` and ``fit`` carry :func:`verdict_assumptions` in their JSON (``assumes``) and
print it as one line of their header. Each item says where its value came from:
``stated`` (the scenario or a flag), ``recipe`` (a ``recipe_defaults`` fill), ``default`` (Megatron's
or Bridge's default, or moeplan's planning margin) — a NVIDIA recipe that reduces gradients in BF16
and a default that reduces them in FP32 differ by gigabytes per GPU, and the reader should see which
one a verdict used.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from moeplan.i18n.messages import Items, Message, msg
from moeplan.inputs.provenance import BENCHMARK_ONLY, is_benchmark_only
from moeplan.inputs.resolved import Scenario
from moeplan.structure.numerics import (
    DEFAULT_ROUTING_IMBALANCE,
    grad_bytes,
    routing,
    stores_param_remainders,
    te_managed_master,
)


@dataclass(frozen=True)
class Assumption:
    """One assumption that moves a verdict.

    Attributes:
        what: ``batch``, ``grad_reduce``, ``optimizer``, ``routing``, ``recipe``, ``benchmark`` or ``workload``.
        text: the short phrase printed, a message (e.g. ``grads reduced in FP32``, id
            ``assumptions.grads_reduced_in``) that the Chinese output translates by id.
        source: ``stated``, ``recipe`` or ``default``.
        hint: how to change it, or what NVIDIA's recipes use (None when nothing to add).
    """

    what: str
    text: str
    source: str
    hint: str | None = None

    def to_dict(self) -> dict:
        """Plain mapping (JSON-ready)."""
        return asdict(self)


def _source(s: Scenario, *keys: str) -> str:
    """``stated`` when the user gave any of ``keys``, ``recipe`` when a recipe filled one, else ``default``."""
    if any(k in s.stated for k in keys):
        return "stated"
    if s.recipe is not None and s.recipe.filled_keys() & set(keys):
        return "recipe"
    return "default"


def _grad(s: Scenario) -> Assumption:
    fp32 = grad_bytes(s) == 4.0
    src = _source(s, "grad_reduce_in_fp32", "main_grads_dtype")
    hint = (
        "NVIDIA's perf recipes reduce in BF16: --set layout.grad_reduce_in_fp32=false"
        if fp32 and src == "default"
        else None
    )
    return Assumption("grad_reduce", msg("assumptions.grads_reduced_in", dtype="FP32" if fp32 else "BF16"), src, hint)


def _optimizer(s: Scenario) -> Assumption:
    lay = s.layout
    src = _source(s, "use_precision_aware_optimizer", "exp_avg_dtype", "exp_avg_sq_dtype", "main_params_dtype")
    if not lay.use_precision_aware_optimizer:
        hint = (
            "--set layout.use_precision_aware_optimizer=true with exp_avg_dtype/exp_avg_sq_dtype=bf16 halves the moments"
            if src == "default"
            else None
        )
        return Assumption("optimizer", msg("assumptions.adam_state_in", dtype="FP32"), src, hint)
    moments = {lay.exp_avg_dtype or "fp32", lay.exp_avg_sq_dtype or "fp32"}
    m = "/".join(sorted(x.upper() for x in moments))
    return Assumption("optimizer", msg("assumptions.precision_aware_optimizer", master=_master(s), moments=m), src)


def _master(s: Scenario) -> Message:
    """Who keeps the precision-aware optimizer's master, and in what (:func:`te_managed_master`)."""
    if not te_managed_master(s):
        return msg("assumptions.master_in_megatron_core", dtype="FP32")
    if stores_param_remainders(s):
        return msg("assumptions.master_in_te_remainders")
    return msg("assumptions.master_in_te", dtype=(s.layout.main_params_dtype or "fp32").upper())


def _routing(s: Scenario) -> Assumption | None:
    if s.model is None or not s.model.is_moe:
        return None
    r = routing(s)
    if r.source == "forced_balance":
        return Assumption(
            "routing",
            msg("assumptions.routing_forced_balanced"),
            _source(s, "moe_router_force_load_balancing"),
        )
    if r.source == "imbalance":
        src = "stated" if r.imbalance_stated else "default"
        hint = (
            "a planning margin: assumptions.routing_imbalance_factor (1.0 = perfectly balanced)"
            if not r.imbalance_stated and r.factor == DEFAULT_ROUTING_IMBALANCE
            else None
        )
        return Assumption("routing", msg("assumptions.routing_imbalance", factor=r.factor), src, hint)
    names = {"capacity": "capacity factor", "drop_and_pad": "drop-and-pad capacity", "rank_budget": "rank budget"}
    how = names.get(r.source, r.source)
    return Assumption("routing", msg("assumptions.routed_tokens_capped", factor=r.factor, how=how), "stated")


def _recipe(s: Scenario) -> Assumption:
    name = s.input.recipe_defaults
    if name == "none" or s.recipe is None:
        return Assumption("recipe", "no recipe fills", "default")
    rec = s.recipe.row
    row: str = rec.id if rec is not None and s.recipe.row_filled else "no matching row, shared helpers"
    if rec is not None and s.recipe.row_filled and rec.layout_unmatched:
        row = msg("assumptions.recipe_settings_only", row=row, layout=rec.layout_unmatched)
        if rec.settings_left_out:
            left = ", ".join(x.split(" (")[0] for x in rec.settings_left_out)
            row = msg("assumptions.recipe_settings_left_out", row=row, left_out=left)
    if s.recipe.left_out:
        row = msg("assumptions.recipe_not_filled", row=row, not_filled=Items(s.recipe.left_out))
    if s.recipe.benchmark:
        return Assumption("recipe", msg("assumptions.recipe_fills_benchmarked", row=row), "stated")
    return Assumption("recipe", msg("assumptions.recipe_training_fills", row=row), "stated")


def benchmark_settings(s: Scenario) -> list[dict]:
    """Benchmark-only settings in effect (:data:`~moeplan.inputs.provenance.BENCHMARK_ONLY`), each
    ``{key, value, how (stated | recipe fill), why}``; the NaN check off is not counted where a
    full-iteration CUDA graph needs it."""
    out = []
    for key, (value, why) in BENCHMARK_ONLY.items():
        have = getattr(s.layout, key, None)
        if not is_benchmark_only(key, have):
            continue
        if key == "check_for_nan_in_loss" and s.layout.cuda_graph_impl == "full_iteration":
            continue
        how = "stated" if key in s.stated else "recipe fill"
        out.append({"key": key, "value": value, "how": how, "why": why})
    return out


def default_batch_assumption(gbs: int, seq: int) -> Assumption:
    """The global batch a command chose because none was given
    (:func:`moeplan.inputs.training.default_global_batch`): ``gbs`` sequences of ``seq`` tokens."""
    return Assumption(
        "batch",
        msg("assumptions.gbs_by_default", gbs=gbs, mi=gbs * seq / 2**20),
        "default",
        "set --gbs or --tokens-per-step",
    )


def _batch(s: Scenario) -> Assumption | None:
    gbs, seq = s.training.global_batch_size, s.training.seq_length
    return None if gbs is None or seq is None else default_batch_assumption(gbs, seq)


def _workload(s: Scenario) -> Assumption | None:
    """What a VLM's vision tower is costed for: the unstated planning mix, a text-only run, or the
    stated image tokens per sequence. None for a model without a vision tower."""
    if s.model is None or s.model.vision is None:
        return None
    w = s.input.workload
    if w is None:
        return Assumption(
            "workload",
            # the share of the sequence costed as image tokens is the value of
            # :data:`moeplan.model.vision.DEFAULT_IMAGE_TOKEN_SHARE`, which the vision cost reads
            msg("assumptions.no_workload_stated"),
            "default",
            "workload: from moeplan vlm-stats -o for your data, or workload: {text_only: true} for a run without images",
        )
    if w.text_only or not (w.image_patches_per_sequence or w.image_tokens_per_sequence):
        return Assumption("workload", msg("assumptions.text_only_workload"), "stated")
    if w.image_tokens_per_sequence:
        return Assumption("workload", msg("assumptions.workload_image_tokens", n=w.image_tokens_per_sequence), "stated")
    return Assumption("workload", msg("assumptions.workload_vit_patches", n=w.image_patches_per_sequence), "stated")


def verdict_assumptions(s: Scenario, batch_defaulted: bool = False) -> list[Assumption]:
    """The assumptions that move this scenario's memory and time verdicts (see the module docstring).

    Args:
        s: the resolved scenario.
        batch_defaulted: the command chose the global batch because none was given (default False):
            said first, since the step time and every divisibility verdict rest on it.
    """
    b = _batch(s) if batch_defaulted else None
    out = [b] if b is not None else []
    out += [_grad(s), _optimizer(s)]
    r = _routing(s)
    if r is not None:
        out.append(r)
    out.append(_recipe(s))
    wl = _workload(s)
    if wl is not None:
        out.append(wl)
    bench = benchmark_settings(s)
    if bench:
        keys = ", ".join(f"{b['key']}={str(b['value']).lower()}" for b in bench)
        out.append(
            Assumption(
                "benchmark",
                msg("assumptions.benchmark_only_in_effect", keys=keys),
                "stated" if all(b["how"] == "stated" for b in bench) else "recipe",
                "recipe_defaults: mbridge-perf fills the recipe's training settings without them",
            )
        )
    return out


__all__ = ["Assumption", "benchmark_settings", "default_batch_assumption", "verdict_assumptions"]
