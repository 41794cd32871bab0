"""Import Megatron Bridge's perf workload base configs as each published container release shipped them.

The published throughput tables list only TP/PP/VPP/CP/EP/FSDP; the other settings a run used (CUDA
graphs, dispatcher backend, EP A2A overlap, recompute, the CuTe DSL fused grouped MLP) come from
``scripts/performance/configs/<family>/*workload_base_configs.py`` of the Bridge release inside that
container. Those files changed between releases (e.g. Qwen3-30B-A3B MXFP8 on B300: TE graphs scoped to
the router in 26.02–26.04.01, a full-iteration graph with EP A2A overlap and the fused grouped MLP in
26.06). This script evaluates the files at each release tag and writes one row per workload config,
in the schema of ``mbridge_perf_recipes.yaml`` plus the ``release`` it belongs to.

From v0.6.0 (26.08) the configs are the flat perf recipes ``src/megatron/bridge/perf_recipes/<family>/
<gpu>/*.py``: functions that take a model recipe's config and set its fields. They are run on a
recording config (:func:`perf_recipe_rows`); a row keeps the LayoutSpec keys they set.

Up to v0.5.0, how a field becomes a layout key follows ``set_workload_base_configs`` (``utils/overrides.py``; in
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
    python scripts/import_recipe_history.py --repo /path/to/Megatron-Bridge.git --check   # exit 1: stale
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import importlib
import importlib.abc
import importlib.util
import pathlib
import re
import subprocess
import sys
import types
from typing import Any

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[1]
#: the packaged table this script writes (relative to the repository root)
PACKAGED = "src/moeplan/catalog/data/mbridge_perf_recipes_by_release.yaml"
#: container release -> the Megatron Bridge tag inside it (docs/releases/software-versions.md; 26.04.01
#: is "0.4.2 · 26.04.01" in docs/versions1.json)
RELEASE_TAGS = {
    "25.11": "v0.2.0",
    "26.02": "v0.3.0",
    "26.02.01": "v0.3.1",
    "26.04": "v0.4.0",
    "26.04.01": "v0.4.2",
    "26.06": "v0.5.0",
    "26.08": "v0.6.0",
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
    """One row per workload config the release's tag shipped: the flat perf recipes from v0.6.0 on
    (:func:`perf_recipe_rows`), else the ``*workload_base_configs.py`` instances."""
    if not git(repo, "ls-tree", "--name-only", tag, "--", "scripts/performance/configs").strip():
        return perf_recipe_rows(repo, release, tag)
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
            where = {"file": path, "tag": tag, "commit": commit, **extra}
            rows.append(recipe_row(release, name, (model, gpu, cfg.num_gpus, prec, variant), training, lay, where))
    return rows


# --- v0.6.0 on: the flat perf recipes (src/megatron/bridge/perf_recipes/<family>/<gpu>/*.py) ---------------
#
# From v0.6.0 the workload configs are functions ``<model>_pretrain_<N>gpu_<gpu>_<prec>[_<variant>]_config()``
# that take a model recipe's ``ConfigContainer`` and set its fields. They are run here with the tag's own
# perf-recipe modules (``_common.py``, the family's ``common.py``, the GPU file) and stand-ins for what they
# import from the rest of Megatron Bridge: a model recipe returns an empty container that records what is
# set on it (so a field the perf recipe leaves to its model recipe stays unset here), the precision
# factories an empty section, ``set_cuda_graph_modules`` / ``set_full_iteration_cuda_graph``
# (``utils/cuda_graph.py``) write moeplan's ``cuda_graph_scope`` / ``cuda_graph_impl`` as megatron-core
# before ``cuda_graph_modules`` reads them, ``set_<model>_pipeline_model_parallel_layout(model, layout)``
# sets the layout string it is given (without one, the model recipe's map, which moeplan applies itself).

PERF_RECIPES = "src/megatron/bridge/perf_recipes"
#: function-name model prefix -> HF model id as moeplan's catalog names it (the models the published runs of
#: 25.09-26.08 cover; a row of a model the catalog does not hold yet is kept and never matched)
PERF_MODELS = {
    "deepseek_v3": "deepseek-ai/DeepSeek-V3",
    "deepseek_v4_flash": "deepseek-ai/DeepSeek-V4-Flash",
    "qwen3_30b_a3b": "Qwen/Qwen3-30B-A3B",
    "qwen3_235b_a22b": "Qwen/Qwen3-235B-A22B",
    "gpt_oss_120b": "openai/gpt-oss-120b",
    "nemotron_3_nano": "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16",
    "nemotron_3_super": "nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-FP8",
    "nemotron_3_ultra": "nvidia/NVIDIA-Nemotron-3-Ultra-550B-A55B-BF16",
    "nemotron_3_5_lightning": "nvidia/NVIDIA-Nemotron-3.5-Lightning-30B-A3B-NVFP4",
}
PERF_PRECISIONS = {
    "bf16": "bf16",
    "fp8cs": "fp8-tensorwise",
    "fp8mx": "mxfp8",
    "fp8sc": "fp8-blockwise",
    "nvfp4": "nvfp4",
}
PERF_FAMILIES = ("deepseek", "gpt_oss", "qwen", "nemotronh")
#: the sections of a ConfigContainer whose LayoutSpec keys a row keeps, in order (a later one wins)
PERF_SECTIONS = ("model", "ddp", "optimizer", "comm_overlap", "mixed_precision")
#: keys of the ddp / optimizer / comm-overlap / mixed-precision sections a row keeps
SECTION_KEYS = frozenset(
    {
        "use_megatron_fsdp",
        "data_parallel_sharding_strategy",
        "outer_dp_sharding_strategy",
        "num_distributed_optimizer_instances",
        "overlap_grad_reduce",
        "overlap_param_gather",
        "use_precision_aware_optimizer",
        "main_grads_dtype",
        "exp_avg_dtype",
        "exp_avg_sq_dtype",
        "overlap_moe_expert_parallel_comm",
        "delay_wgrad_compute",
        "tp_comm_overlap",
        "fp8_dot_product_attention",
    }
)
#: what a perf recipe must set itself for its row to be kept (the model recipes are not evaluated)
_SIZES_STATED = frozenset({"tensor_model_parallel_size", "pipeline_model_parallel_size", "expert_model_parallel_size"})
_PERF_NAME = re.compile(
    r"^(?P<model>[a-z0-9_]+?)_pretrain_(?P<n>\d+)gpu_(?P<gpu>[a-z0-9]+)_(?P<prec>[a-z0-9]+?)(?:_(?P<variant>[a-z0-9_]+))?_config$"
)


class _Section:
    """One section of a recorded config: what the recipe set on it; an unset field reads as None."""

    def __init__(self, **fields: Any) -> None:
        object.__setattr__(self, "_set", dict(fields))

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return self._set.get(name)

    def __setattr__(self, name: str, value: Any) -> None:
        self._set[name] = value


class _Container(_Section):
    """A recorded ConfigContainer: every section exists (as in a model recipe's container)."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return self._set.setdefault(name, _Section())


def _set_cuda_graph_modules(model: _Section, modules: Any) -> None:
    model.cuda_graph_scope = [modules] if isinstance(modules, str) else list(modules)


def _set_full_iteration_cuda_graph(model: _Section) -> None:
    model.cuda_graph_impl = "full_iteration"
    model.cuda_graph_scope = []


def _set_layout(model: _Section, layout: Any = None) -> None:
    if layout is not None:
        model.pipeline_model_parallel_layout = layout


def _stand_in(name: str) -> Any:
    """What a perf recipe gets for ``name`` imported from outside ``perf_recipes`` (AttributeError for a
    name with no stand-in, so a new import fails loudly rather than being guessed)."""
    fixed = {
        "ConfigContainer": _Container,
        "CommOverlapConfig": _Section,
        "MixedPrecisionConfig": _Section,
        "set_cuda_graph_modules": _set_cuda_graph_modules,
        "set_full_iteration_cuda_graph": _set_full_iteration_cuda_graph,
        "load_quantization_recipe": lambda path: None,
        "float32": "fp32",
        "bfloat16": "bf16",
        "float16": "fp16",
    }
    if name in fixed:
        return fixed[name]
    if name.endswith("_pipeline_model_parallel_layout") and name.startswith("set_"):
        return _set_layout
    if name.endswith("_config"):
        return lambda *a, **k: _Container()
    if name.endswith("_mixed"):
        return lambda *a, **k: _Section()
    raise AttributeError(name)


class _StandInModule(types.ModuleType):
    #: (repo, tag) the model recipes are read from (set by :class:`_TagFinder`)
    _source: tuple[str, str] | None = None

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        if name.endswith("_config") and self._source is not None and self.__name__.startswith(_RECIPES_PKG):
            return _model_recipe(*self._source, self.__name__, name)
        return _stand_in(name)


# --- what a perf recipe leaves to its model recipe ------------------------------------------------------
#
# A perf recipe starts from a model recipe (``deepseek_v3_pretrain_config()``, ``nemotron_3_super_pretrain_
# config()``) and sets only what it changes; several leave the sequence length to it. The model recipes
# build a real ConfigContainer (Hugging Face configs, tokenizers) and are not run here: their source at the
# tag is read instead (``ast``), following the re-export aliases of ``recipes/<family>/<model>.py`` and a
# ``cfg = other_config()`` it starts from, for a constant ``cfg.model.seq_length = N`` (or ``= name`` of a
# constant assigned before it in the same function). The recorded container starts with it, so a value the
# perf recipe sets itself still wins; a row records where its sequence length came from (``extra``).

_RECIPES_PKG = "megatron.bridge.recipes."


def _model_recipe(repo: str, tag: str, module: str, name: str) -> Any:
    """The stand-in of model recipe ``module.name``: an empty recorded container holding the recipe's own
    sequence length where its source sets a constant one (``None`` fields read as unset)."""
    found = model_recipe_seq_length(repo, tag, module, name)

    def build(*args: Any, **kwargs: Any) -> _Container:
        if found is None:
            return _Container()
        return _Container(model=_Section(seq_length=_Inherited(*found)))

    return build


class _Inherited(int):
    """A value the perf recipe took from its model recipe (``where``: ``module.function``); one the perf
    recipe sets itself is a plain ``int``."""

    where: str

    def __new__(cls, value: int, where: str) -> _Inherited:
        out = super().__new__(cls, value)
        out.where = where
        return out


def _module_tree(repo: str, tag: str, module: str) -> ast.Module | None:
    path = "src/" + module.replace(".", "/") + ".py"
    try:
        return ast.parse(git(repo, "show", f"{tag}:{path}"))
    except subprocess.CalledProcessError:
        return None


def model_recipe_seq_length(repo: str, tag: str, module: str, name: str, depth: int = 0) -> tuple[int, str] | None:
    """(sequence length, ``module.function`` that sets it) of model recipe ``name`` of ``module`` at ``tag``:
    the last constant ``cfg.model.seq_length`` its body assigns, else that of the recipe it starts from
    (``cfg = other()``); an alias (``from x import a as name``) is followed. None when neither sets a
    constant one (or after 6 hops)."""
    tree = _module_tree(repo, tag, module) if depth < 6 else None
    if tree is None:
        return None
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for alias in node.names:
                if (alias.asname or alias.name) == name:
                    return model_recipe_seq_length(repo, tag, node.module, alias.name, depth + 1)
        if isinstance(node, ast.FunctionDef) and node.name == name:
            seq, base = _function_seq_length(node)
            if seq is not None:
                return seq, f"{module}.{name}"
            return model_recipe_seq_length(repo, tag, module, base, depth + 1) if base else None
    return None


def _function_seq_length(fn: ast.FunctionDef) -> tuple[int | None, str | None]:
    """(the last constant ``cfg.model.seq_length`` assigned at the top of ``fn``'s body, the name of the
    recipe it starts from with ``cfg = other()``)."""
    consts: dict[str, int] = {}
    seq, base = None, None
    for stmt in fn.body:
        if not isinstance(stmt, ast.Assign) or len(stmt.targets) != 1:
            continue
        target, value = stmt.targets[0], stmt.value
        if isinstance(value, ast.Name) and value.id in consts:
            value = ast.Constant(consts[value.id])
        const = value.value if isinstance(value, ast.Constant) and isinstance(value.value, int) else None
        if isinstance(target, ast.Name) and const is not None:
            consts[target.id] = const
        elif isinstance(target, ast.Name) and target.id == "cfg" and isinstance(value, ast.Call):
            base = value.func.id if isinstance(value.func, ast.Name) else None
        elif ast.unparse(target) == "cfg.model.seq_length" and const is not None:
            seq = const
    return seq, base


class _TagFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports ``megatron.bridge.perf_recipes.*`` modules from ``tag`` and stand-ins for every other
    ``megatron`` / ``torch`` module (packages are empty: their ``__init__`` is not run)."""

    def __init__(self, repo: str, tag: str, files: set[str]) -> None:
        self.repo, self.tag, self.files = repo, tag, files

    def find_spec(self, fullname, path=None, target=None):  # noqa: ANN001 - the finder protocol
        if fullname.split(".")[0] not in ("megatron", "torch"):
            return None
        return importlib.util.spec_from_loader(fullname, self, is_package=self._path(fullname) is None)

    def _path(self, fullname: str) -> str | None:
        path = "src/" + fullname.replace(".", "/") + ".py"
        return path if path in self.files else None

    def create_module(self, spec):  # noqa: ANN001
        if self._path(spec.name):
            return types.ModuleType(spec.name)
        module = _StandInModule(spec.name)
        module._source = (self.repo, self.tag)
        return module

    def exec_module(self, module) -> None:  # noqa: ANN001
        path = self._path(module.__name__)
        if path is None:
            module.__path__ = []
            return
        module.__file__ = path
        exec(compile(git(self.repo, "show", f"{self.tag}:{path}"), path, "exec"), module.__dict__)


def perf_recipe_functions(repo: str, tag: str) -> list[tuple[str, str, Any]]:
    """(file, function name, function) of every perf recipe of :data:`PERF_FAMILIES` at ``tag``."""
    files = set(git(repo, "ls-tree", "-r", "--name-only", tag, "--", PERF_RECIPES).split())
    gpu_files = sorted(f for f in files if f.count("/") == 6 and f.split("/")[4] in PERF_FAMILIES)
    finder = _TagFinder(repo, tag, files)
    saved = {k: v for k, v in sys.modules.items() if k.split(".")[0] in ("megatron", "torch")}
    for k in saved:
        del sys.modules[k]
    sys.meta_path.insert(0, finder)
    out = []
    try:
        for path in (f for f in gpu_files if not f.endswith("__init__.py")):
            mod = importlib.import_module(path[len("src/") : -len(".py")].replace("/", "."))
            own = [(n, f) for n, f in sorted(vars(mod).items()) if getattr(f, "__module__", None) == mod.__name__]
            out += [(path, n, f) for n, f in own if _PERF_NAME.match(n)]
    finally:
        sys.meta_path.remove(finder)
        for k in [k for k in sys.modules if k.split(".")[0] in ("megatron", "torch")]:
            del sys.modules[k]
        sys.modules.update(saved)
    return out


def parse_perf_name(name: str) -> tuple[str, str, int, str, str] | None:
    """(model id, gpu, GPU count, precision, variant) of ``<model>_pretrain_<N>gpu_<gpu>_<prec>[_<variant>]
    _config``; None for a model or GPU outside :data:`PERF_MODELS` / :data:`GPUS` and for the ``_dev``
    variants (development recipes the release did not benchmark)."""
    m = _PERF_NAME.match(name)
    if m is None or m["model"] not in PERF_MODELS or m["prec"] not in PERF_PRECISIONS:
        return None
    variant = (m["variant"] or "").upper()
    if m["gpu"].upper() not in GPUS or variant.endswith("DEV"):
        return None
    return PERF_MODELS[m["model"]], m["gpu"], int(m["n"]), PERF_PRECISIONS[m["prec"]], variant or "V1"


def perf_layout_of(cfg: _Container) -> tuple[dict, dict]:
    """(layout keys, training keys) of a recorded perf-recipe config: the LayoutSpec keys set on its
    model section, then the :data:`SECTION_KEYS` of its ddp, optimizer, comm-overlap and mixed-precision
    sections. ``sequence_parallel`` unset: TP > 1; dispatcher unset: ``flex`` where a flex backend is set,
    else ``alltoall`` (as the workload configs before v0.6.0 were mapped)."""
    from moeplan.inputs.layout import LayoutSpec

    lay: dict[str, Any] = {}
    for section in PERF_SECTIONS:
        for key, value in getattr(cfg, section)._set.items():
            if key in LayoutSpec.model_fields and (section == "model" or key in SECTION_KEYS):
                lay[key] = list(value) if isinstance(value, tuple) else value
    lay.setdefault("sequence_parallel", (lay.get("tensor_model_parallel_size") or 1) > 1)
    if lay.get("moe_token_dispatcher_type") is None:
        lay["moe_token_dispatcher_type"] = "flex" if lay.get("moe_flex_dispatcher_backend") else "alltoall"
    if lay.get("cuda_graph_impl") == "none":
        lay["cuda_graph_scope"] = []
    lay = {k: v for k, v in lay.items() if v is not None or k == "virtual_pipeline_model_parallel_size"}
    training = {"micro_batch_size": cfg.train.micro_batch_size, "global_batch_size": cfg.train.global_batch_size}
    if cfg.model.seq_length is not None:
        training = {"seq_length": int(cfg.model.seq_length), **training}
    return lay, training


def inherited_from(cfg: _Container) -> dict:
    """What a recorded config took from its model recipe rather than setting itself, for a row's ``extra``:
    ``{"seq_length_from": "<module>.<function>"}`` (at the row's tag) or ``{}``."""
    seq = cfg.model.seq_length
    return {"seq_length_from": seq.where} if isinstance(seq, _Inherited) else {}


def recipe_row(release: str, name: str, what: tuple, training: dict, layout: dict, extra: dict) -> dict:
    """One row of the table: ``what`` = (model, gpu, num_gpus, precision, variant) parsed from the
    config's name; ``extra``: where it was read (file, tag, commit, and what the layout leaves out)."""
    model, gpu, num_gpus, prec, variant = what
    return {
        "id": f"{release}/{name}",
        "release": release,
        "table": "H",
        "model": model,
        "gpu": gpu,
        "num_gpus": num_gpus,
        "precisions": [prec],
        "variant": variant,
        "training": training,
        "layout": layout,
        "extra": extra,
    }


def perf_recipe_rows(repo: str, release: str, tag: str) -> list[dict]:
    """One row per perf recipe of a v0.6.0-layout tag (the schema of :func:`rows_of_release`)."""
    commit = git(repo, "rev-list", "-n", "1", tag).strip()
    rows = []
    for path, name, fn in perf_recipe_functions(repo, tag):
        parsed = parse_perf_name(name)
        if parsed is None:
            continue
        model, gpu, num_gpus, prec, variant = parsed
        cfg = fn()
        lay, training = perf_layout_of(cfg)
        if not _SIZES_STATED.issubset(lay) or None in training.values():
            continue  # sizes left to the model recipe (e.g. Qwen3-30B on 16 H100 in BF16): not read here
        where = {"file": path, "tag": tag, "commit": commit, **inherited_from(cfg)}
        rows.append(recipe_row(release, name, (model, gpu, num_gpus, prec, variant), training, lay, where))
    return rows


HEADER = """\
# Megatron Bridge perf workload base configs as each container release shipped them (one row per
# <MODEL>_PRETRAIN_CONFIG_<GPU>_<PREC>_<VARIANT>, evaluated at the release's Bridge tag).
# Source: NVIDIA-NeMo/Megatron-Bridge scripts/performance/configs/*/*workload_base_configs.py at the
# tags below; fields mapped as set_workload_base_configs applies them (scripts/import_recipe_history.py).
# From v0.6.0 (26.08): the flat perf recipes src/megatron/bridge/perf_recipes/<family>/<gpu>/*.py, one row
# per <model>_pretrain_<N>gpu_<gpu>_<prec>[_<variant>]_config, run on a recording config (what it sets).
# Read by moeplan.catalog.perf_recipes.match_perf_recipe when a scenario names its container release.
# generated by scripts/import_recipe_history.py; do not edit by hand
"""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repo", required=True, help="a Megatron Bridge git directory (bare or .git)")
    ap.add_argument("--check", action="store_true", help=f"exit 1 when {PACKAGED} is not what this writes")
    args = ap.parse_args(argv)
    rows = [row for rel, tag in RELEASE_TAGS.items() for row in rows_of_release(args.repo, rel, tag)]
    data = {"schema_version": 1, "release_tags": RELEASE_TAGS, "recipes": rows}
    text = HEADER + yaml.safe_dump(data, sort_keys=False, width=120)
    if args.check:
        stale = (ROOT / PACKAGED).read_text() != text
        print(f"out of date: python {' '.join(sys.argv)} > {PACKAGED}" if stale else f"{PACKAGED} is up to date")
        return int(stale)
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
