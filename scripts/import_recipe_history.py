"""Import Megatron Bridge's perf workload base configs as each published container release shipped them.

The published throughput tables list only TP/PP/VPP/CP/EP/FSDP; the other settings a run used (CUDA
graphs, dispatcher backend, EP A2A overlap, recompute, the CuTe DSL fused grouped MLP) come from
``scripts/performance/configs/<family>/*workload_base_configs.py`` of the Bridge release inside that
container. Those files changed between releases (e.g. Qwen3-30B-A3B MXFP8 on B300: TE graphs scoped to
the router in 26.02–26.04.01, a full-iteration graph with EP A2A overlap and the fused grouped MLP in
26.06). This script evaluates the files at each release tag and writes one row per workload config,
in the schema of ``mbridge_perf_recipes.yaml`` plus the ``release`` it belongs to.

How a field becomes a layout key follows ``set_workload_base_configs`` (``utils/overrides.py``; in
v0.2.0 ``utils/helpers.py``) of the same tag:

- parallel sizes as given; ``sequence_parallel = TP > 1`` (``WorkloadBaseConfig.sequence_parallel``);
- ``cuda_graph_impl`` / ``cuda_graph_scope`` as given (``none`` clears the scope);
- ``moe_a2a_overlap=True``: EP comm overlap, delayed wgrad, no shared-expert overlap;
- ``cutedsl_fused_grouped_mlp=True``: the TE op fuser; ``fp8_dot_product_attention`` as given;
- ``recompute_modules``: selective recompute of those modules; ``recompute_num_layers``: full, block;
- ``moe_flex_dispatcher_backend`` set: ``flex`` with that backend, else ``alltoall``;
- ``pp_layout``: ``pipeline_model_parallel_layout``; ``use_megatron_fsdp`` as given;
- a full-iteration graph: what the family's ``set_full_iter_cg_configs`` (``*_llm_pretrain.py``, v0.5.0
  on) sets on the model for it, where moeplan has the key (the paged stash and the expert-rank
  capacity factor: the static-shape expert path dropless MoE needs under the graph).

Usage (needs a Megatron Bridge git clone; the ``fetch`` tool's mirror works)::

    python scripts/import_recipe_history.py --repo /path/to/Megatron-Bridge.git \
        > src/moeplan/catalog/data/mbridge_perf_recipes_by_release.yaml
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import subprocess
import sys
import types
from typing import Any

import yaml

#: container release -> the Megatron Bridge tag inside it (docs/releases/software-versions.md; 26.04.01
#: is "0.4.2 · 26.04.01" in docs/versions1.json)
RELEASE_TAGS = {
    "25.11": "v0.2.0",
    "26.02": "v0.3.0",
    "26.02.01": "v0.3.1",
    "26.04": "v0.4.0",
    "26.04.01": "v0.4.2",
    "26.06": "v0.5.0",
}
#: config-name prefix -> HF model id (the models the published runs cover)
MODELS = {
    "DEEPSEEK_V3": "deepseek-ai/DeepSeek-V3",
    "QWEN3_30B_A3B": "Qwen/Qwen3-30B-A3B",
    "QWEN3_235B_A22B": "Qwen/Qwen3-235B-A22B",
    "GPT_OSS_120B": "openai/gpt-oss-120b",
}
PRECISIONS = {
    "BF16": "bf16",
    "FP8_CS": "fp8-tensorwise",
    "FP8_MX": "mxfp8",
    "FP8_SC": "fp8-blockwise",
    "NVFP4": "nvfp4",
}
GPUS = ("GB300", "GB200", "B300", "B200", "H100")
FAMILY_DIRS = ("deepseek", "gpt_oss", "qwen", "qwen3")


def git(repo: str, *args: str) -> str:
    return subprocess.run(["git", "--git-dir", repo, *args], check=True, capture_output=True, text=True).stdout


def base_config_class(repo: str, tag: str) -> type:
    """The tag's own ``WorkloadBaseConfig`` dataclass (only its class body is executed)."""
    src = git(repo, "show", f"{tag}:scripts/performance/utils/utils.py")
    node = next(n for n in ast.parse(src).body if isinstance(n, ast.ClassDef) and n.name == "WorkloadBaseConfig")
    ns: dict[str, Any] = {}
    exec("from dataclasses import dataclass, field\nfrom typing import Dict, List, Optional, Any", ns)
    exec(compile(ast.Module(body=[node], type_ignores=[]), "WorkloadBaseConfig", "exec"), ns)
    return ns["WorkloadBaseConfig"]


def workload_files(repo: str, tag: str) -> list[str]:
    names = git(repo, "ls-tree", "-r", "--name-only", tag, "--", "scripts/performance/configs").split()
    return [n for n in names if n.endswith("workload_base_configs.py") and n.split("/")[-2] in FAMILY_DIRS]


def configs_of(repo: str, tag: str, path: str, cls: type) -> dict[str, Any]:
    """Module-level WorkloadBaseConfig instances of one file, by name."""
    utils = types.ModuleType("utils")
    utils_utils = types.ModuleType("utils.utils")
    utils_utils.WorkloadBaseConfig = cls  # type: ignore[attr-defined]
    saved = {k: sys.modules.get(k) for k in ("utils", "utils.utils")}
    sys.modules.update({"utils": utils, "utils.utils": utils_utils})
    try:
        ns: dict[str, Any] = {"__name__": "workload"}
        exec(compile(git(repo, "show", f"{tag}:{path}"), path, "exec"), ns)
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v
    return {k: v for k, v in ns.items() if isinstance(v, cls)}


def full_iteration_settings(repo: str, tag: str, path: str) -> dict[str, Any]:
    """``cfg.model.<key> = <constant>`` of ``set_full_iter_cg_configs`` in the family's
    ``*_llm_pretrain.py`` next to ``path`` at ``tag``, kept where LayoutSpec has the key ({} when the
    tag has no such function)."""
    from moeplan.inputs.layout import LayoutSpec

    folder = path.rsplit("/", 1)[0]
    names = git(repo, "ls-tree", "--name-only", tag, folder + "/").split()
    out: dict[str, Any] = {}
    for name in (n for n in names if n.endswith("_llm_pretrain.py")):
        tree = ast.parse(git(repo, "show", f"{tag}:{name}"))
        for fn in (n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "set_full_iter_cg_configs"):
            # every assignment, also under ``if cfg.model.<key> is None:`` (a default the model leaves unset)
            for st in (n for n in ast.walk(fn) if isinstance(n, ast.Assign)):
                tgt = st.targets[0]
                known = isinstance(tgt, ast.Attribute) and tgt.attr in LayoutSpec.model_fields
                if known and isinstance(st.value, ast.Constant):
                    out[tgt.attr] = st.value.value
    return out


def parse_name(name: str) -> tuple[str, str, str, str] | None:
    """(model id, gpu, precision, variant) of ``<MODEL>_PRETRAIN_CONFIG_<GPU>_<PREC>_<VARIANT>`` (v0.3.0 on)
    or ``<MODEL>_<GPU>_<PREC>_BASE_CONFIG`` (v0.2.0, one variant)."""
    model_key, sep, rest = name.partition("_PRETRAIN_CONFIG_")
    if not sep and name.endswith("_BASE_CONFIG"):
        model_key = next((m for m in MODELS if name.startswith(m + "_")), "")
        rest = name[len(model_key) + 1 : -len("_BASE_CONFIG")] + "_V1"
    elif not sep:
        return None
    if model_key not in MODELS:
        return None
    gpu = next((g for g in GPUS if rest.startswith(g + "_")), None)
    if gpu is None:
        return None
    rest = rest[len(gpu) + 1 :]
    prec = next((p for p in PRECISIONS if rest.startswith(p + "_") or rest == p), None)
    if prec is None:
        return None
    variant = rest[len(prec) :].lstrip("_") or "V1"
    return MODELS[model_key], gpu.lower(), PRECISIONS[prec], variant


def layout_of(cfg: Any) -> tuple[dict, dict, dict]:
    """(layout keys, training keys, extra notes) as set_workload_base_configs applies ``cfg``."""
    g = dataclasses.asdict(cfg)
    lay: dict[str, Any] = {
        "tensor_model_parallel_size": g["tensor_model_parallel_size"],
        "pipeline_model_parallel_size": g["pipeline_model_parallel_size"],
        "virtual_pipeline_model_parallel_size": g["virtual_pipeline_model_parallel_size"],
        "context_parallel_size": g["context_parallel_size"],
        "expert_model_parallel_size": g["expert_model_parallel_size"],
        "expert_tensor_parallel_size": g["expert_tensor_parallel_size"],
        "sequence_parallel": g["tensor_model_parallel_size"] > 1,
    }
    extra: dict[str, str] = {}
    if g.get("use_megatron_fsdp"):
        lay["use_megatron_fsdp"] = True
    impl, scope = g.get("cuda_graph_impl"), g.get("cuda_graph_scope")
    if impl is not None:
        lay["cuda_graph_impl"] = impl
    if scope is not None or impl == "none":
        lay["cuda_graph_scope"] = [] if impl == "none" else ([scope] if isinstance(scope, str) else list(scope))
    if g.get("moe_a2a_overlap"):
        lay.update(overlap_moe_expert_parallel_comm=True, delay_wgrad_compute=True, moe_shared_expert_overlap=False)
    if g.get("cutedsl_fused_grouped_mlp"):
        lay["use_transformer_engine_op_fuser"] = True
    if g.get("fp8_dot_product_attention") is not None:
        lay["fp8_dot_product_attention"] = bool(g["fp8_dot_product_attention"])
    if g.get("recompute_num_layers") is not None:
        lay.update(
            recompute_granularity="full", recompute_method="block", recompute_num_layers=g["recompute_num_layers"]
        )
    if g.get("recompute_modules") is not None:
        lay.update(recompute_granularity="selective", recompute_modules=list(g["recompute_modules"]))
    if g.get("cpu_offloading_num_layers"):
        lay["cpu_offloading_num_layers"] = g["cpu_offloading_num_layers"]
    backend = g.get("moe_flex_dispatcher_backend")
    if backend is None:
        lay["moe_token_dispatcher_type"] = "alltoall"
    else:
        lay.update(moe_token_dispatcher_type="flex", moe_flex_dispatcher_backend=backend)
    if g.get("pp_layout") is not None:
        lay["pipeline_model_parallel_layout"] = g["pp_layout"]
    training = {"micro_batch_size": g["micro_batch_size"], "global_batch_size": g["global_batch_size"]}
    return lay, training, extra


def rows_of_release(repo: str, release: str, tag: str) -> list[dict]:
    cls = base_config_class(repo, tag)
    commit = git(repo, "rev-list", "-n", "1", tag).strip()
    rows = []
    for path in workload_files(repo, tag):
        full_iter = full_iteration_settings(repo, tag, path)
        for name, cfg in sorted(configs_of(repo, tag, path, cls).items()):
            parsed = parse_name(name)
            if parsed is None:
                continue
            model, gpu, prec, variant = parsed
            lay, training, extra = layout_of(cfg)
            if lay.get("cuda_graph_impl") == "full_iteration":
                lay.update(full_iter)
            rows.append(
                {
                    "id": f"{release}/{name}",
                    "release": release,
                    "table": "H",
                    "model": model,
                    "gpu": gpu,
                    "num_gpus": cfg.num_gpus,
                    "precisions": [prec],
                    "variant": variant,
                    "training": training,
                    "layout": lay,
                    "extra": {"file": path, "tag": tag, "commit": commit, **extra},
                }
            )
    return rows


HEADER = """\
# Megatron Bridge perf workload base configs as each container release shipped them (one row per
# <MODEL>_PRETRAIN_CONFIG_<GPU>_<PREC>_<VARIANT>, evaluated at the release's Bridge tag).
# Source: NVIDIA-NeMo/Megatron-Bridge scripts/performance/configs/*/*workload_base_configs.py at the
# tags below; fields mapped as set_workload_base_configs applies them (scripts/import_recipe_history.py).
# Read by moeplan.catalog.perf_recipes.match_perf_recipe when a scenario names its container release.
# generated by scripts/import_recipe_history.py; do not edit by hand
"""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repo", required=True, help="a Megatron Bridge git directory (bare or .git)")
    args = ap.parse_args(argv)
    rows = [row for rel, tag in RELEASE_TAGS.items() for row in rows_of_release(args.repo, rel, tag)]
    data = {"schema_version": 1, "release_tags": RELEASE_TAGS, "recipes": rows}
    sys.stdout.write(HEADER + yaml.safe_dump(data, sort_keys=False, width=120))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
