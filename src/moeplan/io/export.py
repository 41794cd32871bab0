"""Export a resolved scenario to what Megatron Bridge and Megatron-LM run.

Formats: ``mbridge-overrides`` (Hydra ``section.key=value`` lines for Bridge's training and perf
scripts), ``mbridge-yaml`` (a partial ``ConfigContainer``), ``mbridge-python`` (a recipe function
applying the layout), ``megatron-lm-args`` (``pretrain_gpt.py`` flags) and ``slurm`` (an sbatch script
with the environment the layout needs). Every export starts with a ``# moeplan:`` header line that
carries the model, system, framework and versions, so that :mod:`moeplan.io.imports` can read the
file back into the same scenario. Nothing is submitted or launched.

Which keys are written: every layout key the user stated or moeplan resolved (defaults it filled,
recipe fills), always both ``moe_token_dispatcher_type`` and ``moe_flex_dispatcher_backend`` for MoE
models (``megatron_facts.md`` §6.1, vendored in ``tests/data/reference``), with the spelling of the target megatron-core version (§3.13).

Benchmark-only settings (:data:`moeplan.inputs.provenance.BENCHMARK_ONLY`: forced load balancing, the
NaN check off) are only written when the scenario asks for them (``recipe_defaults:
mbridge-perf-benchmark`` or the key stated), with a ``# benchmark-only`` comment; the training fill
(``recipe_defaults: mbridge-perf``) writes their training values, since the Bridge perf recipe the
export is applied to sets the benchmark values itself.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, replace
from typing import Any, cast

from packaging.version import Version

from moeplan.catalog.comm_libraries import hybridep_reach_gpus
from moeplan.errors import InputError, short_repr
from moeplan.inputs.loading import dump_yaml
from moeplan.inputs.megatron_keys import bridge_path, mlm_tokens
from moeplan.inputs.policy import bad_char
from moeplan.inputs.resolved import Scenario
from moeplan.inputs.versions import CUDA_GRAPH_MODULES_MCORE, release_version
from moeplan.io.keys import (
    BRIDGE_PATHS,
    DTYPE_KEYS,
    KEY_MIN_MCORE,
    MIXED_PRECISION,
    MLM_NEGATED,
    MLM_UNSUPPORTED,
    PRECISION_FIELDS,
    TORCH_DTYPE,
    bridge_key_for_version,
    mlm_flag,
    training_paths,
)
from moeplan.resolve.assumptions import benchmark_settings
from moeplan.rules.graphs import nan_check_off_note
from moeplan.structure.hybridep_env import DOMAIN_VARIABLE, hybridep_domain

FORMATS = ("mbridge-overrides", "mbridge-yaml", "mbridge-python", "megatron-lm-args", "slurm")
HEADER = "# moeplan: "


def exported_layout(s: Scenario) -> dict[str, Any]:
    """Effective values of the layout keys to export (stated or resolved), in LayoutSpec order."""
    resolved = {r.key for r in s.resolutions}
    keep = set(s.stated) | resolved
    if s.model is not None and s.model.is_moe:
        keep |= {"moe_token_dispatcher_type", "moe_flex_dispatcher_backend"}
    values = s.layout.model_dump()
    return {k: values[k] for k in type(s.layout).model_fields if k in keep}


def training_guards(s: Scenario) -> dict[str, Any]:
    """The training values of the benchmark-only settings (:data:`~moeplan.inputs.provenance.BENCHMARK_ONLY`)
    that a Bridge export writes even when the scenario leaves them unstated: the export is laid over
    whatever recipe the user launches (``RECIPE``), and Megatron Bridge's perf configurations set
    ``moe_router_force_load_balancing=True`` and ``check_for_nan_in_loss=False``
    (``scripts/performance``: ``_benchmark_common``, the MoE perf configs), so leaving them out can
    train a MoE with the router overridden. Forced balancing off for a MoE; the NaN check on unless a
    full-iteration CUDA graph needs it off. A stated or filled value is never replaced."""
    out: dict[str, Any] = {}
    if s.model is not None and s.model.is_moe:
        out["moe_router_force_load_balancing"] = False
    scope = s.layout.cuda_graph_scope
    full_iter = s.layout.cuda_graph_impl == "full_iteration" or scope in ("full_iteration", ["full_iteration"])
    if not full_iter:
        out["check_for_nan_in_loss"] = True
    return out


def benchmark_keys_text(bench: list[dict], why: bool = False) -> str:
    """``key=value (how[: why])`` of each benchmark-only setting (:func:`benchmark_settings`), joined."""
    return ", ".join(
        f"{b['key']}={str(b['value']).lower()} ({b['how']}" + (f": {b['why']})" if why else ")") for b in bench
    )


def recipe_comment(s: Scenario) -> list[str]:
    """``# recipe fills: ...``: the recipe row some of the export's values came from, with its reason
    (a release's own workload config, HEAD's table standing in for it, or a release config of another
    layout whose settings only were lent and what was left out: :attr:`RecipeRow.reason`); none when no
    row filled a key. The launcher sees where a value it did not write came from."""
    rec = s.recipe
    if rec is None or rec.row is None or not rec.row_filled:
        return []
    return [f"# recipe fills: {rec.row.reason}"]


def provenance_comment(s: Scenario) -> list[str]:
    """The comment lines after the ``# moeplan:`` header: :func:`recipe_comment`, then
    :func:`benchmark_comment`, :func:`nan_check_comment` and :func:`environment_comment`."""
    return [*recipe_comment(s), *benchmark_comment(s), *nan_check_comment(s), *environment_comment(s)]


def environment_comment(s: Scenario) -> list[str]:
    """``# environment ...``: the scenario's own ``environment:`` entries, which a Bridge config or
    argument list cannot hold, named so that the launch sets them (the memory estimate assumes them:
    ``PYTORCH_CUDA_ALLOC_CONF`` moves the allocator's fragmentation); nothing without entries. The
    ``# moeplan:`` header carries them back into ``check --from``."""
    env = s.input.environment
    if not env:
        return []
    pairs = " ".join(f"{k}={short_repr(v) if len(str(v)) > 200 else v}" for k, v in env.items())
    return [f"# environment the estimate assumes (set it in the launch; this format cannot hold it): {pairs}"]


def nan_check_comment(s: Scenario) -> list[str]:
    """``# NaN check off ...``: a training export whose full-iteration CUDA graph needs
    ``check_for_nan_in_loss`` off (rule ``graphs.full_iteration_nan_check``) says so and what it costs;
    nothing when the check is on, or when :func:`benchmark_comment` already names it."""
    note = nan_check_off_note(s)
    if note is None or any(b["key"] == "check_for_nan_in_loss" for b in benchmark_settings(s)):
        return []
    return [f"# {note}"]


def benchmark_comment(s: Scenario) -> list[str]:
    """``# benchmark-only ...`` comment lines naming the benchmark-only settings the export carries
    (none for a training export)."""
    bench = benchmark_settings(s)
    if not bench:
        return []
    keys = benchmark_keys_text(bench)
    return [
        f"# benchmark-only: {keys} — reproduces a published benchmark; do not train with these "
        "(recipe_defaults: mbridge-perf gives the recipe's training settings)"
    ]


def unwritten_keys(s: Scenario) -> dict[str, Any]:
    """The carried Megatron keys (``unmodelled_keys``) that a Megatron-LM or a Bridge export cannot
    write as a flag or field: a switch at its Megatron-LM default (``--no-overlap-p2p-communication``
    absent reads true), a key with no Megatron-LM argument or no Bridge field. The ``# moeplan:``
    header keeps them, so an import of the export gives every key back."""
    return {
        k: v
        for k, v in s.input.unmodelled_keys.items()
        if not mlm_tokens(k, v) or bridge_path(k, s.bridge_version) is None
    }


def header(s: Scenario) -> str:
    """The ``# moeplan:`` line: what a ConfigContainer does not hold (the model, system, framework,
    versions, training extras, environment, the stated keys and :func:`unwritten_keys`)."""
    inp = s.input
    meta: dict[str, Any] = {
        "model": inp.model,
        "model_overrides": inp.model_overrides or None,
        "system": inp.system.model_dump(exclude_none=True, exclude_defaults=True) or None,
        "framework": inp.framework,
        "versions": inp.versions.model_dump(exclude_none=True) or None,
        "precision": s.training.precision,
        "training": {
            k: v
            for k, v in s.training.model_dump().items()
            if k not in ("seq_length", "micro_batch_size", "global_batch_size", "precision")
            and k in s.training.model_fields_set
        }
        or None,
        "environment": dict(inp.environment) or None,
        "stated": sorted(s.stated),
        "unmodelled_keys": unwritten_keys(s) or None,
    }
    if isinstance(inp.system.gpu, str) or inp.system.gpu is None:
        pass
    else:  # a custom GPU mapping
        meta["system"]["gpu"] = inp.system.gpu.model_dump()
    return HEADER + json.dumps({k: v for k, v in meta.items() if v is not None}, separators=(",", ":"))


def target_mcore(s: Scenario) -> Version:
    """The megatron-core version an export spells its keys for: the stated one, else the one the
    container release ships (``versions.container``; its recipe fills are that release's too), else the
    newest moeplan knows: the release ``s.mcore_version`` (what the rules compare) with its full local
    version where the container's table gives one."""
    known = s.versions.get("megatron_core")
    return s.mcore_version if known is None else release_version(known, "0")


def bridge_sections(s: Scenario, notes: list[str] | None = None) -> dict[str, dict[str, Any]]:
    """Nested ``{section: {field: value}}`` of the Bridge ConfigContainer for the scenario; keys the
    target megatron-core version (:func:`target_mcore`) does not have are left out (and noted)."""
    mcore = target_mcore(s)
    out: dict[str, dict[str, Any]] = {"mixed_precision": dict(PRECISION_FIELDS[s.training.precision])}
    lay = exported_layout(s)
    for key, value in training_guards(s).items():
        lay.setdefault(key, value)
    if lay.get("cuda_graph_impl") == "full_iteration" and mcore < CUDA_GRAPH_MODULES_MCORE:
        # megatron-core ≤ 0.17 has no full_iteration impl: the path is impl local + scope full_iteration
        lay["cuda_graph_impl"] = "local"
        lay["cuda_graph_scope"] = ["full_iteration"]
        lay.pop("cuda_graph_modules", None)
        if notes is not None:
            notes.append(
                "cuda_graph_impl full_iteration written as local + cuda_graph_scope [full_iteration] "
                "for megatron-core < 0.18"
            )
    legacy_scope = lay.get("cuda_graph_scope") in ("full_iteration", ["full_iteration"])
    if lay.get("cuda_graph_impl") == "local" and legacy_scope and mcore >= CUDA_GRAPH_MODULES_MCORE:
        lay["cuda_graph_impl"] = "full_iteration"  # 0.18+: the full-iteration impl with an empty scope
        lay["cuda_graph_scope"] = []
    for key, value in lay.items():
        if key in DTYPE_KEYS and value is not None:
            value = TORCH_DTYPE.get(value, value)
        for path in BRIDGE_PATHS[key]:
            sec, field = path.split(".", 1)
            field = bridge_key_for_version(field, mcore)
            if field in KEY_MIN_MCORE and mcore < KEY_MIN_MCORE[field]:
                if notes is not None:
                    notes.append(f"{field}={short_repr(value)} needs megatron-core ≥ {KEY_MIN_MCORE[field]}: left out")
                continue
            out.setdefault(sec, {})[field] = value
    t = s.training
    vlm = s.model is not None and s.model.vision is not None
    for key, paths in training_paths(t.task, s.bridge_version, vlm).items():
        v = getattr(t, key)
        if v is not None:
            for path in paths:
                sec, field = path.split(".", 1)
                out.setdefault(sec, {})[field] = v
    carry_bridge(s, out, notes)
    # VLM providers' freeze flags (Megatron Bridge Qwen3-VL / Llama-4 providers), only when set
    for key in ("freeze_vision_model", "freeze_language_model"):
        if getattr(t, key):
            out.setdefault("model", {})[key] = True
    if s.peft is not None:
        out["peft"] = peft_section(s)
        if notes is not None:
            notes.append(
                "peft: LoRA adapters on a frozen base; with scripts/training/run_recipe.py use --mode lora and "
                "checkpoint.pretrained_checkpoint=<the base checkpoint>"
            )
    return out


def carry_bridge(s: Scenario, out: dict[str, dict[str, Any]], notes: list[str] | None) -> None:
    """Write the Megatron keys moeplan does not model (``unmodelled_keys``) into ``out`` as written,
    under their ConfigContainer path (:func:`moeplan.inputs.megatron_keys.bridge_path` at the stated
    Bridge release). A key with no Bridge field, or whose field moeplan already wrote with another
    value, is left out and noted."""
    for key, value in s.input.unmodelled_keys.items():
        path = bridge_path(key, s.bridge_version)
        if path is None:
            if notes is not None:
                notes.append(f"{key}={short_repr(value)} has no Megatron Bridge field (Megatron-LM only): not written")
            continue
        sec, field = path.split(".", 1)
        have = out.setdefault(sec, {})
        if field in have and have[field] != value:
            if notes is not None:
                notes.append(f"{key}={short_repr(value)}: {path} is {short_repr(have[field])} from the scenario; kept")
            continue
        have[field] = value


def carry_megatron_lm(s: Scenario, args: list[str], notes: list[str]) -> None:
    """Append the Megatron-LM flags of the keys moeplan does not model (``unmodelled_keys``), spelt as
    ``arguments.py`` declares them (:func:`moeplan.inputs.megatron_keys.mlm_tokens`). A key with no
    argument, one already written, or a switch at its default is left out and noted."""
    for key, value in s.input.unmodelled_keys.items():
        tokens = mlm_tokens(key, value)
        if tokens is None:
            notes.append(f"{key}={short_repr(value)} has no Megatron-LM flag (Bridge or config only): not written")
        elif not tokens:
            notes.append(f"{key}={short_repr(value)} is the Megatron-LM default of its switch: not written")
        elif any(a == tokens[0] or a.startswith(tokens[0] + " ") for a in args):
            notes.append(f"{key}={short_repr(value)}: {tokens[0]} is already written from the scenario; kept")
        else:
            args.append(" ".join(shlex.quote(t) for t in tokens))


def peft_section(s: Scenario) -> dict[str, Any]:
    """Bridge's ``cfg.peft``: ``megatron.bridge.peft.lora.LoRA`` with the scenario's fields (Bridge
    ``peft/lora.py``; ``alpha`` is an int there, written as one when whole)."""
    p = s.peft
    assert p is not None
    alpha: float | int = int(p.alpha) if float(p.alpha).is_integer() else p.alpha
    return {
        "_target_": "megatron.bridge.peft.lora.LoRA",
        "target_modules": list(p.target_modules),
        "dim": p.dim,
        "alpha": alpha,
        "dropout": p.dropout,
        "share_expert_adapters": p.share_expert_adapters,
        "normalize_moe_lora": p.normalize_moe_lora,
    }


#: text Hydra reads back as the same string without quotes, unless it spells a number, bool or null
_HYDRA_PLAIN = re.compile(r"[A-Za-z0-9_./@%+-]+", re.ASCII)
_HYDRA_NUMBER = re.compile(r"[+-]?([0-9_]+\.?[0-9_]*|\.[0-9_]+)([eE][+-]?[0-9_]+)?", re.ASCII)


def hydra_quote(text: str) -> str:
    """``text`` as a single-quoted Hydra (≥ 1.1) value that reads back as exactly ``text``: a quote
    is ``\\'``, a run of backslashes before a quote, before ``${`` or at the end is doubled, and
    ``${`` is written ``\\${`` so that OmegaConf never resolves an interpolation from user text.

    Raises:
        InputError: a control character (refused at input; never written into a script).
    """
    if bad_char(text) is not None:
        raise InputError("export", text, "values without control characters")
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch == "\\":
            j = i
            while j < n and text[j] == "\\":
                j += 1
            special = j == n or text[j] == "'" or text.startswith("${", j)
            out.append("\\" * ((j - i) * (2 if special else 1)))
            i = j
        elif ch == "'":
            out.append("\\'")
            i += 1
        elif text.startswith("${", i):
            out.append("\\${")
            i += 2
        else:
            out.append(ch)
            i += 1
    return "'" + "".join(out) + "'"


def hydra_value(v: Any) -> str:
    """A value as Hydra override text: null, true / false, numbers, ``[a,b]`` lists, plain names
    unquoted, any other text quoted (:func:`hydra_quote`)."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, list):
        return "[" + ",".join(hydra_value(x) for x in v) + "]"
    text = str(v)
    plain = _HYDRA_PLAIN.fullmatch(text) and not _HYDRA_NUMBER.fullmatch(text)
    if plain and text.lower().lstrip("+-") not in ("null", "true", "false", "nan", "inf"):
        return text
    return hydra_quote(text)


_hydra_value = hydra_value  # the name this module used before


def bridge_overrides(s: Scenario, notes: list[str] | None = None) -> list[tuple[str, Any]]:
    """``(section.field, value)`` of every Bridge field of :func:`bridge_sections`, in order: the one
    structured list every overrides file and launch script is rendered from."""
    return [(f"{sec}.{field}", v) for sec, fields in bridge_sections(s, notes).items() for field, v in fields.items()]


def to_overrides(s: Scenario, notes: list[str] | None = None) -> str:
    """``mbridge-overrides``: the header, then one Hydra ``section.key=value`` line per Bridge field of
    :func:`bridge_sections` (keys a version lacks are left out and noted in ``notes``)."""
    lines = [
        header(s),
        *provenance_comment(s),
        f"# mixed precision: Bridge recipe {MIXED_PRECISION[s.training.precision]}",
    ]
    lines += [f"{key}={hydra_value(v)}" for key, v in bridge_overrides(s, notes)]
    return "\n".join(lines) + "\n"


def to_yaml(s: Scenario, notes: list[str] | None = None) -> str:
    """``mbridge-yaml``: the header, then :func:`bridge_sections` as a partial ConfigContainer."""
    body = bridge_sections(s, notes)
    head = "\n".join([header(s), *provenance_comment(s)])
    return head + "\n" + dump_yaml(body, default_flow_style=None, width=120)


def matched_recipe(s: Scenario) -> str | None:
    """``module:function`` of the Table A perf recipe whose row filled some of the scenario's keys
    (from the scenario's recipe record, :attr:`Scenario.recipe`), e.g.
    ``megatron.bridge.perf_recipes.deepseek.gb300.deepseek_v3:deepseek_v3_pretrain_256gpu_gb300_fp8mx_config``;
    None without recipe fills, when no row key was filled, for a Table B row (a legacy workload config,
    no recipe function) or a row without a source file. Source: the function naming of Megatron
    Bridge @067f987 ``perf_recipes`` (``megatron_recipes.md`` §1.1)."""
    rec = s.recipe
    if rec is None or rec.row is None or not rec.row_filled:
        return None
    return rec.row.function


def to_python(s: Scenario, notes: list[str] | None = None) -> str:
    """``mbridge-python``: a ``moeplan_config(cfg=None)`` function that builds the Table A recipe the
    scenario's recipe fills came from (:func:`matched_recipe`; else takes ``cfg``) and sets every
    field of :func:`bridge_sections` on it (dtypes as ``torch`` dtypes)."""
    recipe = matched_recipe(s)
    lines = [
        header(s),
        *provenance_comment(s),
        '"""Apply a moeplan layout to a Megatron Bridge recipe (generated by moeplan export)."""',
        "",
        "from importlib import import_module",
        "",
        "import torch",
        "",
        "#: the Megatron Bridge recipe to start from ('module:function'); None: pass your own ConfigContainer",
        f"RECIPE = {recipe!r}",
        "",
        "",
        "def moeplan_config(cfg=None):",
        '    """Build the recipe (or take ``cfg``), apply the layout, return the ConfigContainer."""',
        "    if cfg is None:",
        "        if RECIPE is None:",
        '            raise ValueError("pass a ConfigContainer from a Megatron Bridge recipe")',
        '        module, func = RECIPE.split(":")',
        "        cfg = getattr(import_module(module), func)()",
        f"    # mixed precision as Bridge's {MIXED_PRECISION[s.training.precision]} recipe sets it",
    ]
    for sec, fields in bridge_sections(s, notes).items():
        if sec == "peft":
            args = ", ".join(f"{k}={v!r}" for k, v in fields.items() if k != "_target_")
            lines += ["    from megatron.bridge.peft.lora import LoRA", "", f"    cfg.peft = LoRA({args})"]
            continue
        for field, v in fields.items():
            if field in DTYPE_KEYS and isinstance(v, str):
                lines.append(f"    cfg.{sec}.{field} = torch.{v}")
            else:
                lines.append(f"    cfg.{sec}.{field} = {v!r}")
    lines.append("    return cfg")
    return "\n".join(lines) + "\n"


def to_megatron_lm(s: Scenario) -> tuple[str, list[str]]:
    """``pretrain_gpt.py`` flags (one per line) and notes on what cannot be carried."""
    notes = []
    args: list[str] = []
    lay = exported_layout(s)
    for key, v in lay.items():
        if key in MLM_UNSUPPORTED:
            notes.append(f"{key}={short_repr(v)} has no Megatron-LM flag (Bridge only)")
            continue
        flag = mlm_flag(key)
        if key == "grad_reduce_in_fp32":
            # Megatron-LM accumulates and reduces bf16 gradients in fp32 unless --grad-reduce-in-bf16
            args.append(flag if v else "--grad-reduce-in-bf16")
            continue
        if key in MLM_NEGATED:
            if v is False:
                args.append(flag)
            continue
        if isinstance(v, bool):
            if v:
                args.append(flag)
            else:
                notes.append(f"{key}=false is the Megatron-LM default or has no --no- flag: not written")
        elif v is None:
            notes.append(f"{key} unset: not written (Megatron-LM cannot express 'unset' vs its default)")
        elif isinstance(v, list):
            args.append((flag + " " + " ".join(shlex.quote(str(x)) for x in v)).rstrip())
        else:
            args.append(f"{flag} {shlex.quote(str(v))}")
    if s.peft is not None:
        notes.append("peft (LoRA) has no Megatron-LM flag (Megatron Bridge only): the adapters are not written")
    t = s.training
    for key, flag in (
        ("seq_length", "--seq-length"),
        ("micro_batch_size", "--micro-batch-size"),
        ("global_batch_size", "--global-batch-size"),
    ):
        if getattr(t, key) is not None:
            args.append(f"{flag} {getattr(t, key)}")
    prec = t.precision
    args.append("--bf16")
    if prec != "bf16":
        recipe = {
            "fp8-tensorwise": "tensorwise",
            "fp8-delayed": "delayed",
            "fp8-blockwise": "blockwise",
            "mxfp8": "mxfp8",
            "nvfp4": None,
        }[prec]
        if recipe:
            fmt = "e4m3" if prec in ("mxfp8", "fp8-blockwise") else "hybrid"  # as Bridge's recipes set it
            args += [f"--fp8-format {fmt}", f"--fp8-recipe {recipe}"]
        else:
            args += ["--fp4-format e2m1", "--fp4-recipe nvfp4"]
    carry_megatron_lm(s, args, notes)
    return "\n".join([header(s), *provenance_comment(s), *args]) + "\n", notes


def layout_environment(s: Scenario, include_user: bool = True) -> dict[str, str]:
    """Environment variables the layout needs at launch (name → value).

    - ``CUDA_DEVICE_MAX_CONNECTIONS``: 1 before Blackwell for TP/SP comm-compute overlap ordering, 32 on
      Blackwell or with Megatron-FSDP (Megatron Bridge perf scripts);
    - ``NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN``: HybridEP on NVL72, the NVLink domain seen by EP
      (guidance, dispatcher section): the largest divisor of EP·ETP within the GPUs a rank reaches over
      NVLink (:func:`~moeplan.catalog.comm_libraries.hybridep_reach_gpus`: the node's with ``USE_MNNVL=0``)
      (:func:`~moeplan.structure.hybridep_env.hybridep_domain`; HybridEPBuffer asserts that the
      value divides the group, so NVL72's 72 is not exported for EP 128: 64 is, the value Megatron
      Bridge's recipe-usage example pairs with ``NVLINK_DOMAIN_SIZE`` 72);
    - ``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True``, plus ``NCCL_GRAPH_REGISTER=0`` with TE CUDA
      graphs (NCCL buffer registration is not compatible with expandable segments under capture);
    - the scenario's own ``environment:`` entries last (they win) when ``include_user``.

    Raises:
        InputError: no GPU in the scenario.
    """
    if s.gpu is None:
        raise InputError("system.gpu", None, "a GPU to derive the launch environment")
    env = {
        "CUDA_DEVICE_MAX_CONNECTIONS": "1"
        if (s.gpu.compute_capability or 0) < 10 and not s.layout.use_megatron_fsdp
        else "32"
    }
    lay = s.layout
    if lay.moe_token_dispatcher_type == "flex" and lay.moe_flex_dispatcher_backend == "hybridep" and s.gpu.is_nvl72:
        env[DOMAIN_VARIABLE] = str(hybridep_domain(s.ep * s.etp, cast(int, hybridep_reach_gpus(s))))
    if s.graphs_on() and lay.cuda_graph_impl == "transformer_engine":
        env["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
        env["NCCL_GRAPH_REGISTER"] = "0"
    else:
        env["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
    if include_user:
        env.update({k: v for k, v in s.environment.items()})
    return env


@dataclass(frozen=True)
class LaunchScript:
    """An sbatch launch script as data: every line is rendered from these fields, each value quoted
    for its context (shell words by :func:`shlex.quote`, Hydra values by :func:`hydra_value`), so no
    value can end a line, a comment or a word it sits in. Variants (a smoke run) are made by changing
    the data (:meth:`with_overrides`), never by editing the rendered text.

    Attributes:
        header: the ``# moeplan:`` line (JSON, one line: control characters are escaped).
        sbatch: ``#SBATCH`` options (``--nodes=64``), each a plain ``--name=value`` word.
        env: environment variables to export (name, value); names are shell identifiers.
        overrides: Hydra overrides (``section.field``, value) passed to ``run_recipe.py``.
        comments: ``# ...`` lines under the header (the benchmark-only settings the script carries).
    """

    header: str
    sbatch: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    overrides: tuple[tuple[str, Any], ...]
    comments: tuple[str, ...] = ()

    def with_overrides(self, extra: list[tuple[str, Any]]) -> LaunchScript:
        """The script with ``extra`` overrides first (one of the same key replaces the script's)."""
        keys = {k for k, _ in extra}
        return replace(self, overrides=(*extra, *((k, v) for k, v in self.overrides if k not in keys)))

    def render(self) -> str:
        """The script text.

        Raises:
            InputError: a value holding a control character, a key or name that is not plain (both
                refused at input: this is the last line of defence).
        """
        if "\n" in self.header or "\r" in self.header:
            raise InputError("export", self.header, "a one-line header")
        for opt in self.sbatch:
            if not _SBATCH_OPT.fullmatch(opt):
                raise InputError("export", opt, "an #SBATCH option --name=value")
        for line in self.comments:
            if not line.startswith("# ") or bad_char(line) is not None:
                raise InputError("export", line, "a one-line '# ' comment")
        lines = ["#!/bin/bash", self.header, *self.comments, *(f"#SBATCH {o}" for o in self.sbatch), *_PREAMBLE]
        for name, value in self.env:
            if not _ENV_NAME.fullmatch(name) or bad_char(value) is not None:
                raise InputError(f"environment.{name}", value, "a variable name and a value without control characters")
            lines.append(f"export {name}={shlex.quote(value)}")
        lines.append("OVERRIDES=(")
        for key, value in self.overrides:
            if not _OVERRIDE_KEY.fullmatch(key):
                raise InputError("export", key, "a Hydra key section.field")
            lines.append(f"  {shlex.quote(f'{key}={hydra_value(value)}')}")
        lines.append(")")
        lines.append('srun --container-image="$CONTAINER" --container-mounts="$MOUNTS" \\')
        lines.append('  python scripts/training/run_recipe.py --recipe "$RECIPE" "${OVERRIDES[@]}"')
        return "\n".join(lines) + "\n"


_SBATCH_OPT = re.compile(r"--[a-z-]+(=[0-9A-Za-z_-]+)?", re.ASCII)
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*", re.ASCII)
_OVERRIDE_KEY = re.compile(r"[+~]?[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*", re.ASCII)
_PREAMBLE = (
    "set -euo pipefail",
    'CONTAINER="${CONTAINER:?set CONTAINER to a NeMo / Megatron Bridge image}"',
    'MOUNTS="${MOUNTS:-}"',
    'RECIPE="${RECIPE:?set RECIPE to a megatron.bridge.recipes config function for this model (run_recipe.py --recipe)}"',
)


def launch_script(s: Scenario) -> LaunchScript:
    """The sbatch script of a scenario as data: nodes and tasks from the system spec, the environment
    the layout needs, and the Bridge overrides (:func:`bridge_overrides`).

    Raises:
        InputError: no GPU or no GPU count in the scenario.
    """
    if s.gpu is None or not s.num_gpus:
        raise InputError("system", None, "system.gpu and system.num_gpus to write a Slurm script")
    gpn = s.gpus_per_node or 8
    nodes = -(-s.num_gpus // gpn)
    if s.num_gpus % gpn:
        tasks = (f"--ntasks={s.num_gpus}", f"--gpus-per-node={gpn}")
    else:
        tasks = (f"--ntasks-per-node={gpn}", f"--gpus-per-node={gpn}")
    return LaunchScript(
        header=header(s),
        sbatch=(f"--nodes={nodes}", *tasks, "--exclusive", "--job-name=moeplan"),
        env=tuple(layout_environment(s).items()),
        overrides=tuple(bridge_overrides(s)),
        comments=tuple(c for c in provenance_comment(s) if c not in environment_comment(s)),  # it exports them
    )


def to_slurm(s: Scenario) -> str:
    """An sbatch script: nodes and tasks from the system spec, container and mounts as placeholders,
    the environment the layout needs, and the Bridge overrides (:func:`launch_script`, rendered).

    Raises:
        InputError: no GPU or no GPU count in the scenario.
    """
    return launch_script(s).render()


def export(s: Scenario, fmt: str) -> tuple[str, list[str]]:
    """Render ``s`` in ``fmt``; returns (text, notes).

    Raises:
        InputError: unknown format, or a format that needs a value the scenario lacks.
    """
    notes: list[str] = []
    if fmt == "mbridge-overrides":
        return to_overrides(s, notes), notes
    if fmt == "mbridge-yaml":
        return to_yaml(s, notes), notes
    if fmt == "mbridge-python":
        return to_python(s, notes), notes
    if fmt == "megatron-lm-args":
        return to_megatron_lm(s)
    if fmt == "slurm":
        return to_slurm(s), []
    raise InputError("--format", fmt, ", ".join(FORMATS))
