#!/usr/bin/env python3
"""Import the Megatron Bridge performance-recipe tables into ``mbridge_perf_recipes.yaml``.

Dev-time tool, never imported by the package. Reads ``tests/data/reference/megatron_recipes.md``
(the vendored transcription of the Megatron Bridge recipe tables; provenance in tests/data/README.md)
and writes ``src/moeplan/catalog/data/mbridge_perf_recipes.yaml`` (its header names that file):

* §1.4 Table A — flat perf recipes at Bridge HEAD ``067f987`` (one sub-table per model);
* §1.5 Table B — legacy workload base configs at Bridge tag ``v0.5.1`` (one sub-table per model).

Each row becomes one recipe: ``layout`` holds only ``LayoutSpec`` keys with their proper types,
``training`` the batch/sequence sizes, ``extra`` every other knob of the row (as strings), and
``inherited`` the layout/training keys whose cell carried the "†" mark. Every layout is validated
with ``LayoutSpec.model_validate``. Usage::

    python scripts/import_recipes.py            # write the YAML and print a summary
    python scripts/import_recipes.py --check    # exit 1 if the packaged YAML is out of date
"""

from __future__ import annotations

import argparse
import ast
import collections
import pathlib
import re
import sys
from typing import Any

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[1]
SOURCE = ROOT / "tests" / "data" / "reference" / "megatron_recipes.md"  # vendored: tests/data/README.md
OUTPUT = ROOT / "src" / "moeplan" / "catalog" / "data" / "mbridge_perf_recipes.yaml"

SCHEMA_VERSION = 1
TABLE_A_HEADING = "### 1.4 Table A"
TABLE_B_HEADING = "### 1.5 Table B"
END_HEADING = "### 1.6"
TABLE_A_COMMIT = "067f987"
TABLE_B_TAG = "v0.5.1"

MODELS = {
    "deepseek_v3": "deepseek-ai/DeepSeek-V3",
    "qwen3_235b_a22b": "Qwen/Qwen3-235B-A22B",
    "qwen3_30b_a3b": "Qwen/Qwen3-30B-A3B",
    "qwen3_next_80b_a3b": "Qwen/Qwen3-Next-80B-A3B-Instruct",
    "qwen3_vl_235b_a22b": "Qwen/Qwen3-VL-235B-A22B-Instruct",
    "qwen3_vl_30b_a3b": "Qwen/Qwen3-VL-30B-A3B-Instruct",
    "gpt_oss_120b": "openai/gpt-oss-120b",
    "gpt_oss_20b": "openai/gpt-oss-20b",
}

PRECISIONS = {
    "bf16": "bf16",
    "fp8_cs": "fp8-tensorwise",
    "fp8_mx": "mxfp8",
    "fp8_sc": "fp8-blockwise",
    "fp8_cs (fp8_recipe='blockwise')": "fp8-blockwise",
    "fp8_ds": "fp8-delayed",
    "nvfp4": "nvfp4",
}
# dtype token of the recipe function name (§1.1) -> moeplan precision, to cross-check the prec column
SUFFIX_DTYPES = {
    "bf16": "bf16",
    "fp8cs": "fp8-tensorwise",
    "fp8mx": "mxfp8",
    "fp8sc": "fp8-blockwise",
    "fp8ds": "fp8-delayed",
    "nvfp4": "nvfp4",
}
TORCH_DTYPES = {"torch.bfloat16": "bf16", "torch.float32": "fp32"}

DAGGER = "†"
UNSET = ("", "–")

# Table A: ``other knobs`` / ``offload`` short name -> (LayoutSpec key, value kind) (legend of §1.4)
KNOBS = {
    "megatron_fsdp": ("use_megatron_fsdp", "bool"),
    "dp_shard": ("data_parallel_sharding_strategy", "str"),
    "outer_dp_shard": ("outer_dp_sharding_strategy", "str"),
    "dist_opt_instances": ("num_distributed_optimizer_instances", "int"),
    "force_lb": ("moe_router_force_load_balancing", "bool"),
    "paged_stash": ("moe_paged_stash", "bool"),
    "expert_rank_cap_factor": ("moe_expert_rank_capacity_factor", "float"),
    "fp8_dpa": ("fp8_dot_product_attention", "bool"),
    "fp8_dot_product_attention": ("fp8_dot_product_attention", "bool"),
    "moe_ep_overlap": ("overlap_moe_expert_parallel_comm", "bool"),
    "delay_wgrad": ("delay_wgrad_compute", "bool"),
    "tp_comm_overlap": ("tp_comm_overlap", "bool"),
    "pg_with_opt_step": ("overlap_param_gather_with_optimizer_step", "bool"),
    "prec_aware_opt": ("use_precision_aware_optimizer", "bool"),
    "cg_warmup": ("cuda_graph_warmup_steps", "int"),
    "ddp.overlap_grad_reduce": ("overlap_grad_reduce", "bool"),
    "ddp.overlap_param_gather": ("overlap_param_gather", "bool"),
    "main_grads_dtype": ("main_grads_dtype", "dtype"),
    "exp_avg_dtype": ("exp_avg_dtype", "dtype"),
    "exp_avg_sq_dtype": ("exp_avg_sq_dtype", "dtype"),
    "fp8_param_gather": ("fp8_param_gather", "bool"),
    "first_stage_layers": ("num_layers_in_first_pipeline_stage", "int"),
    "last_stage_layers": ("num_layers_in_last_pipeline_stage", "int"),
    "fine_grained_activation_offloading": ("fine_grained_activation_offloading", "bool"),
    "offload_modules": ("offload_modules", "list"),
    "cpu_offloading_num_layers": ("cpu_offloading_num_layers", "int"),
    "moe_shared_expert_overlap": ("moe_shared_expert_overlap", "bool"),
    "te_op_fuser": ("use_transformer_engine_op_fuser", "bool"),
    # Table B: set_workload_base_configs maps cutedsl_fused_grouped_mlp=True onto the TE op fuser (§1.5)
    "cutedsl_fused_grouped_mlp": ("use_transformer_engine_op_fuser", "bool"),
}
# Kept in ``extra`` on purpose (not LayoutSpec keys, or not read by Bridge):
# hybridep_sms, deepep_sms, fp8_out_proj, router_dtype, external_cuda_graph,
# permute_fusion_into_hybridep, fine_grained_offloading_max_inflight_offloads,
# and, in Table A, moe_a2a_overlap (``model.moe_a2a_overlap`` is not an mcore field and Bridge does not
# read it, §1.2; the real switch is ``moe_ep_overlap``).

A_COLUMNS = [
    "recipe suffix (gpu_prec_variant)",
    "file",
    "GPUs",
    "prec",
    "seq",
    "TP",
    "PP",
    "VPP",
    "CP",
    "EP",
    "ETP",
    "SP",
    "MBS",
    "GBS",
    "recompute",
    "dispatcher type/backend",
    "CUDA graph impl + scope",
    "offload",
    "other knobs",
]
B_COLUMNS = [
    "GPU",
    "variant",
    "precisions",
    "GPUs",
    "TP",
    "PP",
    "VPP",
    "CP",
    "EP",
    "ETP",
    "MBS",
    "GBS",
    "recompute_modules",
    "flex backend",
    "cuda_graph_impl / scope",
    "moe_a2a_overlap",
    "pp_layout",
    "other",
]
PARALLEL_COLUMNS = {
    "TP": "tensor_model_parallel_size",
    "PP": "pipeline_model_parallel_size",
    "VPP": "virtual_pipeline_model_parallel_size",
    "CP": "context_parallel_size",
    "EP": "expert_model_parallel_size",
    "ETP": "expert_tensor_parallel_size",
}


# Knobs the library base recipe sets and no perf recipe of the model overrides, so every row of the
# model inherits them although no column of the transcription shows them (sources at Bridge HEAD 067f987,
# the same lines at tag v0.5.1):
# * gpt_oss_20b / gpt_oss_120b: ``cfg.model.cp_comm_type = "a2a"`` in the base recipe
#   (recipes/gpt_oss/h100/gpt_oss.py L70 and L195; v0.5.1 recipes/gpt_oss/gpt_oss.py L69 and L190);
# * qwen3_next_80b_a3b: ``cfg.model.mtp_num_layers = 1`` (recipes/qwen/h100/qwen3_next.py L63;
#   v0.5.1 recipes/qwen/qwen3_next.py L62).
BASE_KNOBS: dict[str, dict[str, Any]] = {
    "gpt_oss_20b": {"cp_comm_type": "a2a"},
    "gpt_oss_120b": {"cp_comm_type": "a2a"},
    "qwen3_next_80b_a3b": {"mtp_num_layers": 1},
}


# Table B: the family's ``*_llm_pretrain.py`` at v0.5.1 applies ``set_full_iter_cg_configs`` after the
# workload base config when the graph is full_iteration (deepseek_llm_pretrain.py L53-65 and L100,
# gpt_oss_llm_pretrain.py L39-56 and L422, qwen3_llm_pretrain.py L48-55 and L80, there only for fp8_mx):
# the static expert budget (``moe_expert_rank_capacity_factor=1.5``) with paged stashing.
FULL_ITER_CG_KNOBS: dict[str, Any] = {"moe_paged_stash": True, "moe_expert_rank_capacity_factor": 1.5}
#: model-key prefix -> the precision that gates ``set_full_iter_cg_configs`` (None: every precision)
FULL_ITER_CG_FAMILIES: dict[str, str | None] = {"deepseek_": None, "gpt_oss_": None, "qwen3_": "mxfp8"}


class ParseError(ValueError):
    """A cell the importer does not understand (fail loudly rather than guess)."""


# ----------------------------------------------------------------------------------------- cells


def split_row(line: str) -> list[str]:
    """Cells of a markdown table row; ``\\|`` inside a cell is an escaped pipe."""
    s = line.strip()
    if not (s.startswith("|") and s.endswith("|")):
        raise ParseError(f"not a table row: {line!r}")
    return [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", s[1:-1])]


def dagger(cell: str) -> tuple[str, bool]:
    """(value without a trailing †, whether it had one)."""
    cell = cell.strip()
    if cell.endswith(DAGGER):
        return cell[: -len(DAGGER)].strip(), True
    return cell, False


def to_int(v: str) -> int:
    if not re.fullmatch(r"\d+", v):
        raise ParseError(f"not an integer: {v!r}")
    return int(v)


def to_opt_int(v: str) -> int | None:
    return None if v == "None" else to_int(v)


def to_bool(v: str) -> bool:
    if v not in ("True", "False"):
        raise ParseError(f"not a bool: {v!r}")
    return v == "True"


def to_float(v: str) -> float:
    if not re.fullmatch(r"\d+(\.\d+)?", v):
        raise ParseError(f"not a number: {v!r}")
    return float(v)


def to_list(v: str) -> list[str]:
    val = ast.literal_eval(v)
    if not isinstance(val, list) or not all(isinstance(x, str) for x in val):
        raise ParseError(f"not a list of strings: {v!r}")
    return val


def unquote(v: str) -> str:
    """``'optim'`` -> ``optim``; unquoted tokens stay as they are."""
    if len(v) >= 2 and v[0] == v[-1] and v[0] in "'\"":
        return ast.literal_eval(v)
    return v


def convert(v: str, kind: str) -> Any:
    if kind == "bool":
        return to_bool(v)
    if kind == "int":
        return to_int(v)
    if kind == "float":
        return to_float(v)
    if kind == "list":
        return to_list(v)
    if kind == "dtype":
        if v not in TORCH_DTYPES:
            raise ParseError(f"unknown dtype: {v!r}")
        return TORCH_DTYPES[v]
    if kind == "str":
        return unquote(v)
    raise AssertionError(kind)


def split_knobs(cell: str) -> list[tuple[str, str]]:
    """``a=1, b=['x', 'y'], c='p|q'`` -> [(a, '1'), (b, "['x', 'y']"), (c, "'p|q'")]."""
    if cell in UNSET:
        return []
    out = []
    for part in re.split(r",\s*(?=[A-Za-z_][\w.]*=)", cell):
        key, sep, val = part.partition("=")
        if not sep or not key.strip():
            raise ParseError(f"not key=value: {part!r} in {cell!r}")
        out.append((key.strip(), val.strip()))
    return out


def precision(token: str) -> str:
    key = token.strip().lower()
    if key not in PRECISIONS:
        raise ParseError(f"unknown precision token: {token!r}")
    return PRECISIONS[key]


# ------------------------------------------------------------------------------------- recipes


class Recipe:
    """Accumulates one row's mapped values, refusing contradictory settings of the same key."""

    def __init__(self) -> None:
        self.layout: dict[str, Any] = {}
        self.training: dict[str, Any] = {}
        self.extra: dict[str, str] = {}
        self.inherited: list[str] = []

    def set(self, key: str, value: Any, inherited: bool = False) -> None:
        target = self.training if key in ("seq_length", "micro_batch_size", "global_batch_size") else self.layout
        if key in target and target[key] != value:
            raise ParseError(f"{key} set twice: {target[key]!r} and {value!r}")
        target[key] = value
        if inherited and key not in self.inherited:
            self.inherited.append(key)

    def note(self, key: str, value: str) -> None:
        if key in self.extra and self.extra[key] != value:
            raise ParseError(f"extra {key} set twice: {self.extra[key]!r} and {value!r}")
        self.extra[key] = str(value)

    def knob(self, key: str, raw: str) -> None:
        """One ``key=value`` of the ``other knobs`` / ``offload`` / ``other`` columns."""
        if key == "layout":
            if raw.startswith("auto→"):
                self.note("layout_raw", raw)
                picked = raw[len("auto→") :]
                self.set("pipeline_model_parallel_layout", None if picked == "None" else picked)
            else:
                self.set("pipeline_model_parallel_layout", unquote(raw))
        elif key in KNOBS:
            name, kind = KNOBS[key]
            self.set(name, convert(raw, kind))
        else:
            self.note(key, unquote(raw))


def parse_recompute(rec: Recipe, cell: str) -> None:
    val, inh = dagger(cell)
    if val == "gran=None":
        rec.set("recompute_granularity", None, inh)
        return
    m = re.fullmatch(r"gran=(selective|full)(?:; method=(\w+))?(?:; num_layers=(\d+))?(?:; mods=(\[.*\]))?", val)
    if not m:
        raise ParseError(f"recompute cell: {cell!r}")
    rec.set("recompute_granularity", m.group(1), inh)
    if m.group(2):
        rec.set("recompute_method", m.group(2), inh)
    if m.group(3):
        rec.set("recompute_num_layers", int(m.group(3)), inh)
    if m.group(4):
        rec.set("recompute_modules", to_list(m.group(4)), inh)


def parse_dispatcher(rec: Recipe, cell: str) -> None:
    """``type/backend`` with annotations; effective values go to layout, the raw cell to extra."""
    type_cell, sep, backend_cell = cell.rpartition("/")
    if not sep:
        raise ParseError(f"dispatcher cell: {cell!r}")
    tval, tinh = dagger(type_cell)
    bval, binh = dagger(backend_cell)
    annotated = False
    if tval in ("alltoall", "flex", "allgather"):
        dtype = tval
    elif tval == "alltoall→flex(apply_flex)":
        # the base sets alltoall + a backend and apply_flex_dispatcher_backend turns it into flex (§1.3)
        dtype, annotated = "flex", True
    elif tval in ("alltoall (flex if deepep usable)", "alltoall (provider default)"):
        dtype, annotated = "alltoall", True
    else:
        raise ParseError(f"dispatcher type: {cell!r}")
    rec.set("moe_token_dispatcher_type", dtype, tinh)
    if bval in ("hybridep", "deepep", "ncclep"):
        rec.set("moe_flex_dispatcher_backend", bval, binh)
    elif bval == "None":
        rec.set("moe_flex_dispatcher_backend", None, binh)
    elif bval == "unset":
        annotated = True  # not set anywhere: leave the key out
    else:
        raise ParseError(f"dispatcher backend: {cell!r}")
    if annotated:
        rec.note("dispatcher_raw", cell)


def parse_cuda_graph_a(rec: Recipe, cell: str) -> None:
    val, whole_inh = dagger(cell)  # a trailing † after the scope marks the whole cell
    m = re.fullmatch(r"(none|local|transformer_engine|full_iteration)(†?)(?:\s+(.*))?", val)
    if not m:
        raise ParseError(f"CUDA graph cell: {cell!r}")
    impl, impl_inh, rest = m.group(1), bool(m.group(2)) or whole_inh, (m.group(3) or "").strip()
    rec.set("cuda_graph_impl", impl, impl_inh)
    if not rest:
        return
    scope, _, modules = rest.partition(";")
    scope = scope.strip()
    if scope == "None":
        rec.set("cuda_graph_scope", None, whole_inh)
    elif scope.startswith("["):
        rec.set("cuda_graph_scope", to_list(scope), whole_inh)
    elif scope[:1] in "'\"":
        rec.set("cuda_graph_scope", unquote(scope), whole_inh)
    else:
        raise ParseError(f"CUDA graph scope: {cell!r}")
    if modules.strip():
        key, sep, mval = modules.strip().partition("=")
        if key != "modules" or not sep:
            raise ParseError(f"CUDA graph modules: {cell!r}")
        # cuda_graph_modules is list[str] in LayoutSpec; the recipe gives a bare string: keep it as-is
        rec.note("cuda_graph_modules", unquote(mval))


def gpus_cell(cell: str) -> tuple[int, str]:
    m = re.fullmatch(r"(\d+)×([A-Z0-9]+)", cell)
    if not m:
        raise ParseError(f"GPUs cell: {cell!r}")
    return int(m.group(1)), m.group(2).lower()


def row_a(model_key: str, cells: list[str], line: str) -> dict:
    c = dict(zip(A_COLUMNS, cells, strict=True))
    suffix = c["recipe suffix (gpu_prec_variant)"]
    num_gpus, gpu = gpus_cell(c["GPUs"])
    prec = precision(c["prec"])
    m = re.fullmatch(r"(\d+)gpu_([a-z0-9]+)_([a-z0-9]+?)(?:_(\w+))?", suffix)
    if not m or int(m.group(1)) != num_gpus or m.group(2) != gpu or SUFFIX_DTYPES.get(m.group(3)) != prec:
        raise ParseError(f"suffix {suffix!r} disagrees with GPUs {c['GPUs']!r} / prec {c['prec']!r}")
    rec = Recipe()
    rec.note("file", c["file"])
    seq, inh = dagger(c["seq"])
    rec.set("seq_length", to_int(seq), inh)
    for col, key in PARALLEL_COLUMNS.items():
        val, inh = dagger(c[col])
        rec.set(key, to_opt_int(val) if col == "VPP" else to_int(val), inh)
    val, inh = dagger(c["SP"])
    rec.set("sequence_parallel", to_bool(val), inh)
    val, inh = dagger(c["MBS"])
    rec.set("micro_batch_size", to_int(val), inh)
    val, inh = dagger(c["GBS"])
    rec.set("global_batch_size", to_int(val), inh)
    parse_recompute(rec, c["recompute"])
    parse_dispatcher(rec, c["dispatcher type/backend"])
    parse_cuda_graph_a(rec, c["CUDA graph impl + scope"])
    for key, raw in split_knobs(c["offload"]) + split_knobs(c["other knobs"]):
        if DAGGER in raw:
            raise ParseError(f"unexpected † in knob {key}={raw}")
        if key == "moe_a2a_overlap":
            rec.note(key, raw)  # not read by Bridge (§1.2); moe_ep_overlap is the real switch
        else:
            rec.knob(key, raw)
    return finish(f"{model_key}/{suffix}", "A", model_key, gpu, num_gpus, [prec], rec, line)


def row_b(model_key: str, cells: list[str], line: str) -> dict:
    c = dict(zip(B_COLUMNS, cells, strict=True))
    gpu = c["GPU"].lower()
    tokens = [t.strip() for t in c["precisions"].split(",")]
    precs = [precision(t) for t in tokens]
    rec = Recipe()
    for col, key in PARALLEL_COLUMNS.items():
        rec.set(key, to_opt_int(c[col]) if col == "VPP" else to_int(c[col]))
    # WorkloadBaseConfig's derived property (§1.1): sequence_parallel = (TP > 1)
    rec.set("sequence_parallel", rec.layout["tensor_model_parallel_size"] > 1)
    rec.set("micro_batch_size", to_int(c["MBS"]))
    rec.set("global_batch_size", to_int(c["GBS"]))
    if c["recompute_modules"] not in UNSET:
        # set_workload_base_configs: recompute_modules switches granularity to selective (§1.5)
        rec.set("recompute_granularity", "selective")
        rec.set("recompute_modules", to_list(c["recompute_modules"]))
    backend = c["flex backend"]
    if backend in UNSET:
        rec.set("moe_token_dispatcher_type", "alltoall")  # §1.5: no backend -> alltoall
    elif backend in ("hybridep", "deepep"):
        # §1.5: a backend goes through apply_flex_dispatcher_backend -> flex/<backend> (§1.3)
        rec.set("moe_token_dispatcher_type", "flex")
        rec.set("moe_flex_dispatcher_backend", backend)
    else:
        raise ParseError(f"flex backend: {backend!r}")
    impl, sep, scope = c["cuda_graph_impl / scope"].partition(" / ")
    if not sep:
        raise ParseError(f"cuda graph cell: {c['cuda_graph_impl / scope']!r}")
    if impl.strip() not in UNSET:
        rec.set("cuda_graph_impl", impl.strip())
    if scope.strip() not in UNSET:
        rec.set("cuda_graph_scope", to_list(scope.strip()))
    if rec.layout.get("cuda_graph_impl") == "full_iteration":
        full_iter_cg_configs(rec, model_key, precs)
    a2a = c["moe_a2a_overlap"]
    if a2a not in UNSET:
        if to_bool(a2a):
            # set_workload_base_configs: moe_a2a_overlap=True -> EP comm overlap + delayed wgrad,
            # no shared-expert overlap (§1.5)
            rec.set("overlap_moe_expert_parallel_comm", True)
            rec.set("delay_wgrad_compute", True)
            rec.set("moe_shared_expert_overlap", False)
        else:
            rec.note("moe_a2a_overlap", a2a)
    if c["pp_layout"] not in UNSET:
        rec.set("pipeline_model_parallel_layout", c["pp_layout"])
    for key, raw in split_knobs(c["other"]):
        rec.knob(key, raw)
    variant = c["variant"] if c["variant"] not in UNSET else "-"
    rid = f"{model_key.upper()}/{c['GPU']}/{variant}/{'+'.join(tokens)}"
    return finish(rid, "B", model_key, gpu, to_int(c["GPUs"]), precs, rec, line)


def full_iter_cg_configs(rec: Recipe, model_key: str, precs: list[str]) -> None:
    """Table B: what ``set_full_iter_cg_configs`` adds to a full_iteration row (``FULL_ITER_CG_KNOBS``)."""
    gates = [gate for prefix, gate in FULL_ITER_CG_FAMILIES.items() if model_key.startswith(prefix)]
    if not gates:
        return
    if gates[0] is not None and set(precs) != {gates[0]}:
        if gates[0] in precs:
            raise ParseError(f"full_iteration row mixes {gates[0]} with other precisions: {precs}")
        return
    for key, value in FULL_ITER_CG_KNOBS.items():
        rec.set(key, value)


def finish(rid, table, model_key, gpu, num_gpus, precs, rec: Recipe, line: str) -> dict:
    for key, value in BASE_KNOBS.get(model_key, {}).items():
        if key not in rec.layout:
            rec.set(key, value, inherited=table == "A")  # Table B has no † marks (§1.5)
    return {
        "id": rid,
        "table": table,
        "model": MODELS[model_key],
        "gpu": gpu,
        "num_gpus": num_gpus,
        "precisions": precs,
        "training": {
            k: rec.training[k] for k in ("seq_length", "micro_batch_size", "global_batch_size") if k in rec.training
        },
        "layout": rec.layout,
        "extra": rec.extra,
        "inherited": rec.inherited,
        "row": line.strip(),
    }


# ----------------------------------------------------------------------------------------- file


def parse(text: str) -> tuple[dict, dict]:
    """(data for the YAML, stats) from the markdown text."""
    lines = text.splitlines()
    table = None
    section = None
    header: list[str] | None = None
    recipes: list[dict] = []
    skipped: collections.Counter = collections.Counter()
    seen_a = seen_b = False
    for n, line in enumerate(lines, 1):
        if line.startswith("### "):
            section, header = None, None
            if line.startswith(TABLE_A_HEADING):
                if TABLE_A_COMMIT not in line:
                    raise ParseError(f"Table A heading does not name {TABLE_A_COMMIT}: {line!r}")
                table, seen_a = "A", True
            elif line.startswith(TABLE_B_HEADING):
                if TABLE_B_TAG not in line:
                    raise ParseError(f"Table B heading does not name {TABLE_B_TAG}: {line!r}")
                table, seen_b = "B", True
            else:
                table = None
            continue
        if table is None:
            continue
        if line.startswith("#### "):
            section, header = line[5:].strip(), None
            continue
        if section is None or not line.lstrip().startswith("|"):
            if line.strip() and section is not None and header is not None:
                header = None  # a table ended
            continue
        cells = split_row(line)
        if header is None:
            header = cells
            expected = A_COLUMNS if table == "A" else B_COLUMNS
            if header != expected:
                raise ParseError(f"line {n}: unexpected header {header}")
            continue
        if all(set(c) <= set("-:") for c in cells):
            continue
        if len(cells) != len(header):
            raise ParseError(f"line {n}: {len(cells)} cells, header has {len(header)}")
        key = section.lower()
        if key not in MODELS:
            skipped[(table, section)] += 1
            continue
        try:
            recipes.append(row_a(key, cells, line) if table == "A" else row_b(key, cells, line))
        except ParseError as e:
            raise ParseError(f"line {n} ({table}/{section}): {e}") from None
    if not (seen_a and seen_b):
        raise ParseError("Table A or Table B heading not found")
    ids = collections.Counter(r["id"] for r in recipes)
    dups = [i for i, k in ids.items() if k > 1]
    if dups:
        raise ParseError(f"duplicate recipe ids: {dups}")
    return {"schema_version": SCHEMA_VERSION, "recipes": recipes}, {"skipped": skipped}


def validate(data: dict) -> None:
    from moeplan.inputs.layout import LayoutSpec

    for r in data["recipes"]:
        LayoutSpec.model_validate(r["layout"])
        missing = [k for k in r["inherited"] if k not in r["layout"] and k not in r["training"]]
        if missing:
            raise ParseError(f"{r['id']}: inherited keys not present: {missing}")


def header_comment(source_name: str) -> str:
    return (
        "# Megatron Bridge performance recipes, machine-readable.\n"
        f"# Source: {source_name}\n"
        f"#   §1.4 Table A: flat perf recipes at Megatron Bridge HEAD commit {TABLE_A_COMMIT}"
        " (src/megatron/bridge/perf_recipes/...)\n"
        f"#   §1.5 Table B: legacy workload base configs at Megatron Bridge tag {TABLE_B_TAG}"
        " (scripts/performance/configs/<family>/*_workload_base_configs.py)\n"
        "# layout: LayoutSpec keys only; extra: every other knob of the row (strings);\n"
        "# inherited: layout/training keys whose cell carried the † mark (value from the base recipe).\n"
        "# generated by scripts/import_recipes.py; do not edit by hand\n"
    )


def render(data: dict, source_name: str = "tests/data/reference/megatron_recipes.md") -> str:
    body = yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=100_000, default_flow_style=None)
    return header_comment(source_name) + body


def summary(data: dict, stats: dict) -> str:
    out = []
    per = collections.Counter((r["table"], r["model"]) for r in data["recipes"])
    for t in ("A", "B"):
        total = sum(n for (tt, _), n in per.items() if tt == t)
        out.append(f"Table {t}: {total} rows")
        for (tt, m), n in per.items():
            if tt == t:
                out.append(f"  {m:40s} {n}")
        for (tt, sec), n in sorted(stats["skipped"].items()):
            if tt == t:
                out.append(f"  skipped (no model mapping) {sec:27s} {n}")
    extra = collections.Counter(k for r in data["recipes"] for k in r["extra"])
    out.append("keys in extra (rows):")
    for k, n in extra.most_common():
        out.append(f"  {k:45s} {n}")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source", type=pathlib.Path, default=SOURCE)
    ap.add_argument("--output", type=pathlib.Path, default=OUTPUT)
    ap.add_argument("--check", action="store_true", help="only compare with the existing output")
    args = ap.parse_args(argv)
    data, stats = parse(args.source.read_text(encoding="utf-8"))
    validate(data)
    text = render(data)
    if args.check:
        current = args.output.read_text(encoding="utf-8") if args.output.exists() else None
        if current != text:
            print(f"{args.output} is out of date; run scripts/import_recipes.py", file=sys.stderr)
            return 1
    else:
        args.output.write_text(text, encoding="utf-8")
        print(f"wrote {args.output.relative_to(ROOT) if args.output.is_relative_to(ROOT) else args.output}")
    print(summary(data, stats))
    return 0


if __name__ == "__main__":
    sys.exit(main())
