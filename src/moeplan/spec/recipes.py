"""Recipe defaults: values Megatron Bridge's performance recipes set for keys a scenario leaves out.

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

Only keys the user did not state are filled, and every fill is recorded.
"""

from __future__ import annotations

from typing import Any

RECIPE_DEFAULTS = ("none", "mbridge-perf")

_DSV3_LAYOUTS = {16: "Et*4|(t*4|)*14tmL", 32: "Et|(tt|)*30mL"}


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
    """(layout key, value, reason) fills of recipe defaults ``name`` for this model and layout: first
    the matching recipe row of the packaged tables (same model, GPU, precision, TP/PP/CP/EP), then the
    helpers every perf recipe shares. Earlier fills win."""
    if name != "mbridge-perf":
        return []
    src = "Megatron Bridge perf recipes"
    out: list[tuple[str, Any, str]] = []
    if model is not None and layout is not None:
        from moeplan.catalog.recipes import PRECISION_KEYS, match_perf_recipe

        row = match_perf_recipe(model.name, gpu_id, precision, layout, micro_batch_size, num_gpus)
        if row is not None:
            table = "Table A @067f987" if row["table"] == "A" else "Table B @v0.5.1"
            borrowed = precision not in row["precisions"]
            note = (
                f"; no {precision} row for this layout, {'/'.join(row['precisions'])} row's knobs" if borrowed else ""
            )
            for key, value in row["layout"].items():
                if borrowed and key in PRECISION_KEYS:
                    continue
                out.append((key, value, f"recipe {row['id']} ({table}{note})"))
    out += [
        ("grad_reduce_in_fp32", False, f"{src}: _benchmark_common"),
        ("cross_entropy_loss_fusion", True, f"{src}: TE fused cross entropy"),
        ("check_for_nan_in_loss", False, f"{src}: _benchmark_common"),
        ("use_distributed_optimizer", True, f"{src}"),
    ]
    if precision in ("fp8-tensorwise", "mxfp8"):
        out.append(("fp8_param_gather", True, f"{src}: _perf_precision({precision})"))
    if precision == "bf16":
        out.append(("use_precision_aware_optimizer", True, f"{src}: run_script.py forces it for BF16 + Adam"))
    if model is None:
        return out
    if model.is_moe:
        out.append(("moe_router_force_load_balancing", True, f"{src}: benchmarks force-balance routing"))
    mt = (model.model_type or "").lower()
    nm = model.name.lower()
    if mt in ("deepseek_v3", "kimi_k2"):
        out += [
            ("recompute_granularity", "selective", f"{src}: _deepseek_v3_common"),
            ("use_precision_aware_optimizer", True, f"{src}: DeepSeek-V3 base recipe"),
            ("main_grads_dtype", "bf16", f"{src}: DeepSeek-V3 base recipe"),
            ("exp_avg_dtype", "bf16", f"{src}: DeepSeek-V3 base recipe"),
            ("exp_avg_sq_dtype", "bf16", f"{src}: DeepSeek-V3 base recipe"),
        ]
        stages = pp * (vpp or 1)
        if model.num_layers == 61 and pp > 1 and stages in _DSV3_LAYOUTS:
            out.append(
                (
                    "pipeline_model_parallel_layout",
                    _DSV3_LAYOUTS[stages],
                    f"{src}: set_deepseek_v3_pipeline_model_parallel_layout for PP·VPP = {stages}",
                )
            )
    if "qwen3-235b-a22b" in nm and pp > 1:
        out += [
            ("account_for_embedding_in_pipeline_split", True, f"{src}: Qwen3-235B-A22B"),
            ("account_for_loss_in_pipeline_split", True, f"{src}: Qwen3-235B-A22B"),
        ]
    if "qwen3-next-80b" in nm and pp == 2 and vpp == 4:
        out.append(("pipeline_model_parallel_layout", "Et*4|(t*7|)*5t*8|tmL", f"{src}: Qwen3-Next-80B PP2×VPP4"))
    if "qwen3-vl-235b" in nm and pp == 8:
        out += [
            ("num_layers_in_first_pipeline_stage", 10, f"{src}: Qwen3-VL-235B uneven PP"),
            ("num_layers_in_last_pipeline_stage", 12, f"{src}: Qwen3-VL-235B uneven PP"),
        ]
    return out
