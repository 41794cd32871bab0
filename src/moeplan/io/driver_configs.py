"""Read the configurations of the frameworks that drive Megatron into a moeplan scenario.

Formats (``check --from FORMAT``):

- ``megatron-lm-yaml``: a Megatron-LM MoE recipe (``examples/moe_recipes/**.yaml``: ``ARGS`` — Megatron-LM
  arguments under their ``dest`` names —, ``ENV_VARS``, ``DEPENDENCIES``, ``ENTRY``);
- ``verl-yaml``: verl's trainer config (``actor_rollout_ref.actor.megatron.*`` with
  ``override_transformer_config`` / ``override_ddp_config``), as YAML or Hydra override lines;
- ``slime-args``: slime's launch scripts (bash arrays of Megatron-LM flags and slime's own, the
  ``train.py`` command; the model script first when the run script sources it);
- ``nemo-rl-yaml``: a NeMo-RL config (``policy.megatron_cfg``, ``policy.*`` batch and sequence keys,
  ``cluster``);
- ``ms-swift-args``: an ms-swift ``megatron sft`` / ``rlhf`` command line;
- ``skyrl-overrides``: a SkyRL launch script's Hydra overrides (``trainer.policy.megatron_config.*``).

Each maps its key names to Megatron's; a Megatron key moeplan does not map to a field of its own is
kept in ``layout:`` under its exact Megatron name (the schema decides which it takes; one it refuses
is dropped with a note); the driver's own settings that are no Megatron key are listed. Megatron-LM's
argument fix-ups (:func:`moeplan.resolve.frameworks.megatron_lm_fixups`) are applied for the drivers
that pass Megatron-LM arguments and stated. A model feature moeplan does not model is an
:class:`~moeplan.errors.InputError` naming it, never a silently different model.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable
from typing import Any, cast

from moeplan.catalog.models import get_model, list_models, resolve_model_name
from moeplan.catalog.moe_recipe_releases import recipe_release
from moeplan.errors import InputError, short_repr
from moeplan.i18n.messages import msg
from moeplan.inputs.layout import PARALLEL_DIMS
from moeplan.inputs.loading import load_yaml_text
from moeplan.inputs.policy import MAX_TEXT_CHARS
from moeplan.inputs.resolved import NEWEST_MCORE
from moeplan.inputs.schema import scenario_from_dict
from moeplan.io.dsv4_recipe import read_dsv4
from moeplan.io.imports import ARCH_ARGS, SOURCES, bounded_notes, hydra_value, import_config
from moeplan.io.keys import MLM_FLAG_EXCEPTIONS, MLM_NEGATED
from moeplan.resolve.frameworks import driver_fixups

DRIVER_SOURCES = ("megatron-lm-yaml", "verl-yaml", "slime-args", "nemo-rl-yaml", "ms-swift-args", "skyrl-overrides")
#: every ``--from`` format (``mbridge-recipe`` names a catalog recipe by its id: ``moeplan.api.check``)
ALL_SOURCES = (*SOURCES, *DRIVER_SOURCES, "mbridge-recipe")

TRAINING_ARGS = ("seq_length", "micro_batch_size", "global_batch_size")
#: Megatron-LM argument (dest) → moeplan model field (``inputs/model_spec.py``)
MODEL_ARGS = {
    # the architecture arguments a Megatron-LM argument dump is read with (padded_vocab_size is a dump's
    # derived value, never a recipe's), plus the model switches a recipe states
    **{k: v for k, v in ARCH_ARGS.items() if k != "padded_vocab_size"},
    "multi_latent_attention": "multi_latent_attention",
    "qk_layernorm": "qk_layernorm",
    "normalization": "normalization",
    "untie_embeddings_and_output_weights": "untie_embeddings_and_output_weights",
    "add_qkv_bias": "add_qkv_bias",
    "moe_router_enable_expert_bias": "moe_router_expert_bias",
}
#: Megatron-LM model arguments moeplan does not model → the feature, named in the input error
NOT_MODELLED = {
    "hybrid_layer_pattern": "a hybrid layer pattern (hybrid_layer_pattern)",
    "experimental_attention_variant": "an experimental attention variant (experimental_attention_variant)",
    "enable_hyper_connections": "hyper-connections (enable_hyper_connections)",
    "moe_n_hash_layers": "hash-routed MoE layers (moe_n_hash_layers)",
    "o_lora_rank": "a low-rank grouped output projection (o_lora_rank)",
    "is_hybrid_model": "a hybrid Mamba model (is_hybrid_model)",
    "heterogeneous_layers_config_path": "heterogeneous layers (heterogeneous_layers_config_path)",
}
#: Megatron-LM argument dests whose moeplan key differs (megatron/training/arguments.py)
_RENAMED = {flag[2:].replace("-", "_"): key for key, flag in MLM_FLAG_EXCEPTIONS.items() if key not in MLM_NEGATED}
_NEGATED = {flag[2:].replace("-", "_"): key for key, flag in MLM_FLAG_EXCEPTIONS.items() if key in MLM_NEGATED}
#: recipe keys that spell a Megatron-LM flag whose ``dest`` differs (megatron/training/arguments.py:
#: ``--use-mcore-models`` → ``deprecated_use_mcore_models``, "Now ignored")
_FLAG_DESTS = {"use_mcore_models": "deprecated_use_mcore_models"}
_FP8_RECIPES = {
    "tensorwise": "fp8-tensorwise",
    "delayed": "fp8-delayed",
    "blockwise": "fp8-blockwise",
    "mxfp8": "mxfp8",
}
_PRECISION_ARGS = ("bf16", "fp16", "fp8_format", "fp8_recipe", "fp4", "fp4_format", "fp4_recipe", "fp8")
_CONSUMED = ("group_query_attention", "swiglu", "disable_bias_linear", "moe_layer_freq")
#: Megatron-LM arguments that take a list (argparse ``nargs``): a recipe's space-separated string is
#: the words yq passes on the command line
LIST_ARGS = (
    "recompute_modules",
    "offload_modules",
    "cuda_graph_scope",
    "cuda_graph_modules",
    "hierarchical_context_parallel_sizes",
)


class Imported:
    """What an importer gathers: Megatron arguments (dest names), training and system values, the
    model name, environment variables and the notes of the import report."""

    def __init__(self) -> None:
        self.args: dict[str, Any] = {}
        self.training: dict[str, Any] = {}
        self.system: dict[str, Any] = {}
        self.model: str | None = None
        self.environment: dict[str, str] = {}
        self.versions: dict[str, str] = {}
        self.notes: list[str] = []


def import_any(text: str, source: str) -> tuple[dict, list[str]]:
    """A configuration text of any ``--from`` format as a scenario mapping, with the import report.

    Raises:
        InputError: an unknown format, an unreadable text, a model feature moeplan does not model.
    """
    if source in SOURCES:
        return import_config(text, source)
    reader = _READERS.get(source)
    if reader is None:
        raise InputError("--from", source, ", ".join(ALL_SOURCES))
    imp = Imported()
    framework = reader(text, imp)
    return scenario_of(imp, framework), bounded_notes(imp.notes)


def scenario_of(imp: Imported, framework: str) -> dict:
    """The scenario mapping of what an importer gathered: model, layout and precision from the Megatron
    arguments (:func:`split_args`), the driver's fix-ups (:func:`~moeplan.resolve.frameworks.driver_fixups`:
    Megatron-LM's for the drivers that pass its arguments), each stated."""
    model, layout, training = split_args(imp.args, imp.notes)
    if model and not imp.model:
        _vocab_from_tokenizer(imp.args.get("tokenizer_model"), model, imp.notes)
    training = {**training, **imp.training}
    _packing_from_scheduler(imp.args, training, imp.notes)
    for r in driver_fixups(layout, framework):
        layout[r.key] = r.value
        imp.notes.append(msg("drivers.fixup_applied", key=r.key, value=short_repr(r.value), why=r.reason))
    sc: dict[str, Any] = {"framework": framework}
    if imp.model:
        sc["model"] = imp.model
    if model:
        sc["model_overrides"] = model
    if imp.system:
        sc["system"] = dict(imp.system)
    if imp.environment:
        sc["environment"] = dict(imp.environment)
    if imp.versions:
        sc["versions"] = dict(imp.versions)
    sc["training"] = training
    sc["layout"] = kept_layout(layout, imp.notes)
    return sc


def _packing_from_scheduler(args: dict[str, Any], training: dict[str, Any], notes: list[str]) -> None:
    """``training['packed_sequences'] = True`` when Megatron-LM's sequence-packing scheduler is on
    (``--sequence-packing-scheduler``, PR 6684: it packs samples into THD rows with ``cu_seqlens``),
    unless the configuration states packing itself; and its row padding
    (``--pad-packed-seq-alignment``: ``max`` → ``pad_to_max_length``, N → ``pad_seq_to_mult`` N,
    megatron-core ``ModelParallelConfig``); each stated in ``notes``."""
    scheduler = args.get("sequence_packing_scheduler")
    if scheduler in (None, False, "", "none") or "packed_sequences" in training:
        return
    training["packed_sequences"] = True
    notes.append(msg("drivers.packing_from_scheduler", scheduler=short_repr(scheduler)))
    align = args.get("pad_packed_seq_alignment")
    value: bool | int
    if align == "max":
        key, value = "pad_to_max_length", True
    elif isinstance(align, int) and not isinstance(align, bool) and align > 0:
        key, value = "pad_seq_to_mult", align
    else:
        return
    training.setdefault(key, value)
    notes.append(msg("drivers.packing_alignment", key=key, value=short_repr(value), alignment=short_repr(align)))


def tokenizer_model_id(name: Any) -> str | None:
    """The catalog model whose tokenizer ``tokenizer_model`` (Megatron-LM's ``--tokenizer-model``, an HF
    repository) names: the catalog id it resolves to, else the one whose repository name is the same
    (a re-upload such as ``unsloth/DeepSeek-V3``); None for any other value."""
    if not isinstance(name, str) or not name.strip():
        return None
    try:
        return resolve_model_name(name)
    except InputError:
        pass
    repo = name.strip().rsplit("/", 1)[-1].lower()
    same = [i for i in list_models() if i.rsplit("/", 1)[-1].lower() == repo]
    return same[0] if len(same) == 1 else None


def _vocab_from_tokenizer(tokenizer: Any, model: dict[str, Any], notes: list[str]) -> None:
    """``model['vocab_size']`` from the tokenizer a recipe names, when its arguments give the
    architecture but no vocabulary (Megatron-LM builds the vocabulary from the tokenizer, then pads
    it to ``make_vocab_size_divisible_by`` × TP); stated in ``notes``. Nothing when the tokenizer is
    none the catalog knows."""
    hf_id = tokenizer_model_id(tokenizer)
    if "vocab_size" in model or hf_id is None:
        return
    model["vocab_size"] = get_model(hf_id).vocab_size
    notes.append(msg("drivers.vocab_from_tokenizer", vocab=model["vocab_size"], tokenizer=tokenizer, model=hf_id))


def split_args(args: dict[str, Any], notes: list[str]) -> tuple[dict, dict, dict]:
    """Megatron-LM arguments (dest names, typed values) → (model fields, layout keys, training).

    Raises:
        InputError: an argument of :data:`NOT_MODELLED` set (named, with its value).
    """
    model: dict[str, Any] = {}
    layout: dict[str, Any] = {}
    training: dict[str, Any] = {}
    dsv4 = read_dsv4(args, notes)  # a DeepSeek-V4 recipe: its features become model fields
    for k, feature in NOT_MODELLED.items():
        if k not in dsv4.consumed and args.get(k) not in (None, False, 0, "", [], "none"):
            raise InputError(k, args[k], msg("drivers.not_modelled", feature=feature))
    for k, v in args.items():
        if v is None or k in dsv4.consumed:
            continue
        if k in LIST_ARGS and isinstance(v, str):
            v = [scalar(w) for w in v.split()]
        if k == "num_layers_per_virtual_pipeline_stage":
            _vpp_from_layers_per_stage(args, layout, notes)
        elif k in TRAINING_ARGS:
            training[k] = v
        elif k in _PRECISION_ARGS or k in _CONSUMED:
            continue
        elif k in _NEGATED:
            layout[_NEGATED[k]] = not v
        elif k in _RENAMED:
            layout[_RENAMED[k]] = v
        elif k in MODEL_ARGS:
            model[MODEL_ARGS[k]] = v
        else:
            layout[_FLAG_DESTS.get(k, k)] = v
    model.update(_model_switches(args))
    _model_fixups(model, args)
    model.update(dsv4.model)
    layout.update(dsv4.layout)
    if dsv4.model:
        model.pop("kv_channels", None)  # MLA-style: the head widths are v_head_dim and qk_pos_emb_head_dim
    precision = _precision(args)
    if precision:
        training["precision"] = precision
    return model, layout, training


def _vpp_from_layers_per_stage(args: dict[str, Any], layout: dict[str, Any], notes: list[str]) -> None:
    """Megatron-LM's ``--num-layers-per-virtual-pipeline-stage`` as the VPP it implies
    (``validate_args``: layers, plus one each for the embedding and the loss when they are accounted
    for in the split, / PP / layers per virtual stage; none when it does not divide or is 1)."""
    per, layers = args.get("num_layers_per_virtual_pipeline_stage"), args.get("num_layers")
    pp = args.get("pipeline_model_parallel_size") or 1
    if not (_positive_int(per) and _positive_int(layers) and _positive_int(pp)):
        return
    per, layers, pp = cast(int, per), cast(int, layers), cast(int, pp)
    total = (
        layers
        + bool(args.get("account_for_embedding_in_pipeline_split"))
        + bool(args.get("account_for_loss_in_pipeline_split"))
    )
    if total % pp or (total // pp) % per or (total // pp) // per <= 1:
        return
    vpp = (total // pp) // per
    layout["virtual_pipeline_model_parallel_size"] = vpp
    why = msg("drivers.fixup_vpp_layers", layers=total, pp=pp, per=per)
    notes.append(msg("drivers.fixup_applied", key="virtual_pipeline_model_parallel_size", value=vpp, why=why))


def _positive_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x > 0


def _model_switches(args: dict[str, Any]) -> dict[str, Any]:
    """Model fields from Megatron-LM switches: ``swiglu`` (gated linear unit), ``disable_bias_linear``,
    ``moe_layer_freq`` (which layers are MoE)."""
    out: dict[str, Any] = {}
    if "swiglu" in args:
        out["gated_linear_unit"] = bool(args["swiglu"])
    if "disable_bias_linear" in args:
        out["add_bias_linear"] = not args["disable_bias_linear"]
    layers = args.get("num_layers")
    freq = moe_layer_pattern(args.get("moe_layer_freq"), layers if isinstance(layers, int) else None)
    if freq is not None:
        out["moe_layers"] = [bool(x) for x in freq]
    return out


def _model_fixups(model: dict[str, Any], args: dict[str, Any]) -> None:
    """Megatron-LM's derived model arguments (``validate_args``): without grouped-query attention the
    query groups are the heads; ``kv_channels`` = hidden / heads; ``moe_ffn_hidden_size`` = the FFN
    width when unset."""
    heads, hidden = model.get("num_attention_heads"), model.get("hidden_size")
    if not args.get("group_query_attention") and isinstance(heads, int) and not model.get("multi_latent_attention"):
        model["num_query_groups"] = heads
    if "kv_channels" not in model and isinstance(heads, int) and isinstance(hidden, int) and heads:
        model["kv_channels"] = hidden // heads
    if "num_moe_experts" in model and "moe_ffn_hidden_size" not in model and "ffn_hidden_size" in model:
        model["moe_ffn_hidden_size"] = model["ffn_hidden_size"]


_FREQ_TERM = re.compile(r"\[([0-9, ]{1,4000})\](?:\*([0-9]{1,6}))?", re.ASCII)


def moe_layer_pattern(value: Any, num_layers: int | None) -> list[int] | None:
    """Megatron-LM's ``--moe-layer-freq``: an int k (every k-th layer is MoE), a list of 0/1, or the
    expression form ``([0]*3+[1]*58)`` (sums of repeated lists, as Megatron evaluates it); None for
    anything else (left to the model's own pattern)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int) and value > 0 and num_layers and 0 < num_layers <= 100_000:
        return [1 if i % value == 0 else 0 for i in range(num_layers)]
    if isinstance(value, list) and all(isinstance(x, int) and x in {0, 1} for x in value):
        return list(value)
    if not isinstance(value, str):
        return None
    text = value.strip().removeprefix("(").removesuffix(")").replace(" ", "")
    out: list[int] = []
    for term in text.split("+"):
        m = _FREQ_TERM.fullmatch(term)
        if m is None:
            return None
        items = [int(x) for x in m.group(1).split(",") if x]
        reps = int(m.group(2) or 1)
        if len(items) * reps > 100_000 or any(x not in {0, 1} for x in items):
            return None
        out += items * reps
    return out or None


def _precision(args: dict[str, Any]) -> str | None:
    """The training precision of Megatron-LM's precision arguments (``--fp8-format`` with
    ``--fp8-recipe``, default ``delayed``; ``--fp4-format``), else bf16 when any precision argument is
    given."""
    if args.get("fp4_format") or args.get("fp4"):
        return "nvfp4"
    if args.get("fp8_format") or args.get("fp8"):
        return _FP8_RECIPES.get(str(args.get("fp8_recipe") or "delayed"), "bf16")
    return "bf16" if any(k in args for k in _PRECISION_ARGS) else None


def kept_layout(layout: dict[str, Any], notes: list[str]) -> dict[str, Any]:
    """The layout keys the scenario schema takes, each checked on its own (a refused one is dropped with
    a note: the rest of the import stands).

    Raises:
        InputError: a parallel size the schema refuses (the layout checked would not be the one written).
    """
    out: dict[str, Any] = {}
    for key, v in layout.items():
        if isinstance(v, str) and "$" in v:
            notes.append(msg("drivers.unresolved", key=key, value=short_repr(v)))
            continue
        try:
            scenario_from_dict({"layout": {key: v}})
        except InputError as exc:
            if key in PARALLEL_DIMS.values():
                raise InputError(key, v, exc.allowed) from None
            notes.append(msg("drivers.key_dropped", key=key, value=short_repr(v), why=exc.allowed))
            continue
        out[key] = v
    return out


# --- Megatron-LM MoE recipe YAML --------------------------------------------------------------------


def read_megatron_lm_yaml(text: str, imp: Imported) -> str:
    """``ARGS`` (Megatron-LM argument dests), ``ENV_VARS`` (the environment), ``ENTRY.script``
    (noted); ``DEPENDENCIES`` (the container build) is noted and not read.

    Raises:
        InputError: a text that is no mapping with an ``ARGS`` mapping.
    """
    data = load_yaml_text(text, "megatron-lm-yaml", "(file)")
    if not isinstance(data, dict) or not isinstance(data.get("ARGS"), dict):
        raise no_section("megatron-lm-yaml", "ARGS")
    imp.args = {str(k): v for k, v in data["ARGS"].items()}
    env = data.get("ENV_VARS")
    if isinstance(env, dict):
        imp.environment = {str(k): str(v) for k, v in env.items() if v is not None}
    if "DEPENDENCIES" in data:
        imp.notes.append(msg("drivers.env_section", section="DEPENDENCIES"))
    entry = data.get("ENTRY")
    if isinstance(entry, dict) and entry.get("script"):
        imp.notes.append(msg("drivers.entry_script", script=short_repr(entry["script"])))
    _recipe_release(text, imp)
    return "megatron-lm"


def _recipe_release(text: str, imp: Imported) -> None:
    """State the megatron-core release of a published recipe recognised by its text
    (:func:`moeplan.catalog.moe_recipe_releases.recipe_release`: ``package_info.py`` at the recipe's
    commit), so the rules check it against the release it runs with; any other text keeps the newest
    release moeplan knows (:data:`moeplan.inputs.resolved.NEWEST_MCORE`). Either way a note says which."""
    found = recipe_release(text)
    if found is None:
        imp.notes.append(msg("release_truths.recipe_release_unknown", version=NEWEST_MCORE))
        return
    imp.versions["megatron_core"] = found.megatron_core
    imp.notes.append(
        msg(
            "release_truths.recipe_release",
            version=found.megatron_core,
            recipe=found.recipe,
            commit=found.commit[:10],
            date=found.date,
        )
    )


# --- command lines and shell scripts ----------------------------------------------------------------

_LONG_WORD = re.compile(rf"\S{{{MAX_TEXT_CHARS + 1},}}")
_ASSIGN = re.compile(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=([^\s()`;|&]*)\s*(?:#.*)?$", re.ASCII)
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)", re.ASCII)


def shell_vars(text: str) -> dict[str, str]:
    """Plain ``NAME=value`` assignments of a shell script (quotes removed; a value that uses another
    variable is resolved when that one is known)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        m = _ASSIGN.match(line)
        if m:
            out[m.group(1)] = substitute(m.group(2).strip("'\""), out)
    return out


def substitute(value: str, variables: dict[str, str]) -> str:
    """``value`` with ``$NAME`` / ``${NAME}`` of ``variables`` replaced (unknown ones left)."""
    return _VAR.sub(lambda m: variables.get(m.group(1) or m.group(2), m.group(0)), value)


def shell_tokens(text: str) -> list[str]:
    """The words of a shell text (comments and line continuations removed, quotes as the shell reads
    them; an unbalanced quote is an input error).

    Raises:
        InputError: unbalanced quotes.
    """
    lines = [re.sub(r"(^|\s)#.*$", "", ln) for ln in text.splitlines()]
    joined = " ".join(ln.rstrip().removesuffix("\\") for ln in lines)
    if _LONG_WORD.search(joined):  # shlex's time grows with the square of a word's length
        raise InputError("command line", "(a word too long)", f"words of at most {MAX_TEXT_CHARS:,} characters")
    try:
        return shlex.split(joined)
    except ValueError:
        raise InputError("command line", "(file)", "words with balanced quotes") from None


def flag_values(tokens: list[str]) -> list[tuple[str, Any]]:
    """``--flag value...`` pairs of ``tokens`` in order (dashes in names as underscores): no value is
    True, one value its scalar, several a list; words before the first flag are skipped."""
    out: list[tuple[str, Any]] = []
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        i += 1
        if not tok.startswith("--") or len(tok) < 3:
            continue
        name, eq, inline = tok[2:].partition("=")
        vals = [inline] if eq else []
        while not eq and i < len(tokens) and not tokens[i].startswith("--"):
            vals.append(tokens[i])
            i += 1
        typed = [scalar(v) for v in vals]
        out.append((name.replace("-", "_"), True if not typed else typed[0] if len(typed) == 1 else typed))
    return out


def scalar(text: str) -> Any:
    """A command-line word as a value: true/false, an int or float, else the text."""
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("none", "null"):
        return None
    return hydra_value(text) if re.fullmatch(r"[+-]?[0-9.eE+-]{1,40}", text) else text


def _take(imp: Imported, name: str, value: Any, own: dict[str, Callable[[Imported, Any], None]]) -> None:
    """One flag of a driver's command line: its own setting (``own``), an unresolved variable, or a
    Megatron argument."""
    if isinstance(value, str) and "$" in value:
        imp.notes.append(msg("drivers.unresolved", key=name, value=short_repr(value)))
    elif name in own:
        own[name](imp, value)
    else:
        imp.args[name] = value


def _driver_own(driver: str, key: str) -> Callable[[Imported, Any], None]:
    """A handler that lists a driver's own setting (not a Megatron key) in the import report."""

    def handle(imp: Imported, value: Any) -> None:
        imp.notes.append(msg("drivers.key_driver_own", key=key, driver=driver))

    return handle


def _set_training(key: str, convert: Callable[[Any], Any] = lambda v: v) -> Callable[[Imported, Any], None]:
    def handle(imp: Imported, value: Any) -> None:
        imp.training[key] = convert(value)

    return handle


def _set_system(key: str) -> Callable[[Imported, Any], None]:
    def handle(imp: Imported, value: Any) -> None:
        if isinstance(value, int) and not isinstance(value, bool):
            imp.system[key] = value

    return handle


def _rollout_memory(driver: str, key: str) -> Callable[[Imported, Any], None]:
    def handle(imp: Imported, value: Any) -> None:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            imp.notes.append(msg("drivers.rollout_memory", driver=driver, fraction=float(value), key=key))

    return handle


def _set_model(key: str) -> Callable[[Imported, Any], None]:
    """A handler that takes the model a driver names when the catalog knows it (else a note: the
    architecture then comes from ``--model``)."""

    def handle(imp: Imported, value: Any) -> None:
        if not isinstance(value, str) or not value:
            return
        try:
            get_model(value)
        except InputError:
            imp.notes.append(msg("drivers.model_unknown", model=short_repr(value), key=key))
            return
        imp.model = value
        imp.notes.append(msg("drivers.model_named", model=short_repr(value), key=key))

    return handle


# --- slime ----------------------------------------------------------------------------------------

_ARRAY = re.compile(r"^\s*([A-Z][A-Z0-9_]*)=\(\s*$", re.ASCII)
#: slime's bash arrays that hold its own arguments, not Megatron-LM's (scripts/run-*.sh)
SLIME_OWN_ARRAYS = ("ROLLOUT_ARGS", "EVAL_ARGS", "GRPO_ARGS", "SGLANG_ARGS", "WANDB_ARGS")


def _slime_own() -> dict[str, Callable[[Imported, Any], None]]:
    """slime's own arguments that carry a layout fact (slime/utils/arguments.py)."""
    own = {
        k: _driver_own("slime", k)
        for k in ("hf_checkpoint", "ref_load", "actor_num_nodes", "actor_num_gpus_per_node", "max_tokens_per_gpu")
    }
    own["use_dynamic_batch_size"] = _set_training("variable_length", bool)
    own["colocate"] = _driver_own("slime", "colocate")
    own["sglang_mem_fraction_static"] = _rollout_memory("slime", "sglang_mem_fraction_static")
    return own


def read_slime(text: str, imp: Imported) -> str:
    """slime's run script (and the model script it sources, given first): the flags in its bash arrays
    and after ``train.py``; the arrays of :data:`SLIME_OWN_ARRAYS` are slime's own (but
    ``--global-batch-size``, Megatron's); plain ``NAME=value`` variables are substituted."""
    variables = shell_vars(text)
    own = _slime_own()
    nodes = gpus = None
    for array, body in _arrays(text):
        for name, value in flag_values(shell_tokens(substitute(body, variables))):
            if array in SLIME_OWN_ARRAYS and name not in TRAINING_ARGS:
                if name == "sglang_mem_fraction_static":
                    own[name](imp, value)
                else:
                    imp.notes.append(msg("drivers.key_driver_own", key=name, driver="slime"))
                continue
            nodes = value if name == "actor_num_nodes" else nodes
            gpus = value if name == "actor_num_gpus_per_node" else gpus
            _take(imp, name, value, own)
    if isinstance(nodes, int) and isinstance(gpus, int):
        imp.system.update(num_gpus=nodes * gpus, gpus_per_node=gpus)
    if not imp.args:
        raise no_section("slime-args", "MODEL_ARGS / PERF_ARGS")
    return "slime"


def _arrays(text: str) -> list[tuple[str, str]]:
    """``(name, body)`` of each bash array ``NAME=( ... )`` of a script, and ``("COMMAND", words)`` of
    the ``train.py`` / ``train_async.py`` command's own lines."""
    out: list[tuple[str, str]] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        m = _ARRAY.match(lines[i])
        if m:
            j = i + 1
            while j < len(lines) and lines[j].strip() != ")":
                j += 1
            out.append((m.group(1), "\n".join(lines[i + 1 : j])))
            i = j
        elif re.search(r"\btrain(_async)?\.py\b", lines[i]):
            j = i
            while j < len(lines) and lines[j].rstrip().endswith("\\"):
                j += 1
            body = "\n".join(lines[i : j + 1]).split(".py", 1)[1]
            out.append(("COMMAND", re.sub(r"\$\{[A-Z_]+\[@\]\}", "", body)))
            i = j
        i += 1
    return out


# --- ms-swift -------------------------------------------------------------------------------------

#: ms-swift's own arguments (swift/arguments/*.py, swift/megatron/arguments/megatron_args.py) that are
#: no Megatron-LM argument
SWIFT_OWN = (
    "dataset",
    "val_dataset",
    "save_safetensors",
    "load_from_cache_file",
    "split_dataset_ratio",
    "num_train_epochs",
    "output_dir",
    "eval_steps",
    "save_steps",
    "dataloader_num_workers",
    "dataset_num_proc",
    "template",
    "system",
    "train_type",
    "torch_dtype",
    "streaming",
    "truncation_strategy",
    "model_type",
    "load_safetensors",
    "padding_free",
)


def read_ms_swift(text: str, imp: Imported) -> str:
    """An ms-swift ``megatron sft|rlhf|pt`` command: its flags (underscored Megatron-LM dests and
    ms-swift's own), ``VAR=value`` prefixes (the environment)."""
    variables = shell_vars(text)
    tokens = shell_tokens(substitute(text, variables))
    start = next((i for i, t in enumerate(tokens) if t == "megatron"), None)
    if start is None:
        raise no_section("ms-swift-args", "megatron sft")
    for tok in tokens[:start]:
        name, eq, value = tok.partition("=")
        if eq and re.fullmatch(r"[A-Z_][A-Z0-9_]*", name) and "$" not in value:
            imp.environment[name] = value
    own: dict[str, Callable[[Imported, Any], None]] = {k: _driver_own("ms-swift", k) for k in SWIFT_OWN}
    own["model"] = _set_model("--model")
    own["max_length"] = _set_training("seq_length")
    own["packing"] = _set_training("packed_sequences", bool)
    for name, value in flag_values(tokens[start + 2 :]):
        _take(imp, name, value, own)
    return "ms-swift"


# --- Hydra / YAML drivers (verl, SkyRL, NeMo-RL) ----------------------------------------------------


def nested_overrides(text: str) -> dict[str, Any]:
    """Hydra ``a.b.c=value`` words of a text (a launch script's lines included; ``+`` / ``++`` prefixes
    dropped; ``$VAR`` of the script's plain assignments substituted) as a nested mapping."""
    variables = shell_vars(text)
    out: dict[str, Any] = {}
    for tok in shell_tokens(text):
        key, eq, value = tok.partition("=")
        key = key.lstrip("+~")
        if not eq or "." not in key or not re.fullmatch(r"[A-Za-z0-9_.]+", key):
            continue
        node = out
        *parents, leaf = key.split(".")
        for p in parents:
            nxt = node.setdefault(p, {})
            if not isinstance(nxt, dict):
                break
            node = nxt
        else:
            node[leaf] = hydra_value(substitute(value, variables))
    return out


def no_section(source: str, section: str) -> InputError:
    """The input error of a ``source`` configuration without its Megatron ``section``."""
    return InputError(source, "(file)", msg("drivers.no_megatron_section", source=source, section=section))


def _section(data: Any, path: str, source: str) -> dict:
    """The mapping at the dotted ``path`` of ``data``.

    Raises:
        InputError: ``path`` holds no mapping (:func:`no_section`).
    """
    section = _get(data, path)
    if not isinstance(section, dict):
        raise no_section(source, path)
    return section


def _get(data: Any, path: str) -> Any:
    """``data``'s value at a dotted ``path`` (None where a part is missing or not a mapping)."""
    for part in path.split("."):
        if not isinstance(data, dict):
            return None
        data = data.get(part)
    return data


def _mapping(text: str, source: str) -> dict[str, Any]:
    """The config as a nested mapping: YAML when the text is a YAML mapping, else Hydra overrides."""
    try:
        data = load_yaml_text(text, source, "(file)")
    except InputError:
        data = None
    return data if isinstance(data, dict) else nested_overrides(text)


def _megatron_section(section: Any, imp: Imported, nested: tuple[str, ...], own: tuple[str, ...], driver: str) -> None:
    """A driver's Megatron section into ``imp.args``: its keys are Megatron's names; the sub-mappings
    ``nested`` hold more of them (TransformerConfig / DDP / optimizer pass-throughs); ``own`` are the
    driver's settings; an unresolved ``${...}`` is noted."""
    if not isinstance(section, dict):
        return
    for key, value in section.items():
        key = str(key)
        if key in nested:
            _megatron_section(value, imp, (), own, driver)
        elif key in own or key.startswith("_") or isinstance(value, dict):
            continue
        elif isinstance(value, str) and "$" in value:
            imp.notes.append(msg("drivers.unresolved", key=key, value=short_repr(value)))
        else:
            imp.args[key] = value


#: verl's own keys of ``actor.megatron`` (verl/workers/config/engine.py McoreEngineConfig)
VERL_OWN = (
    "param_offload",
    "grad_offload",
    "optimizer_offload",
    "use_dist_checkpointing",
    "dist_checkpointing_path",
    "dist_checkpointing_prefix",
    "seed",
    "use_mbridge",
    "vanilla_mbridge",
    "use_remove_padding",
    "forward_only",
    "dtype",
    "load_weight",
)


def read_verl(text: str, imp: Imported) -> str:
    """verl's trainer config: ``actor_rollout_ref.actor.megatron`` (parallel sizes and
    ``override_transformer_config`` / ``override_ddp_config`` / ``override_mcore_model_config``),
    ``actor_rollout_ref.actor.optim.override_optimizer_config`` (Megatron's optimizer fields),
    the actor's micro batch, remove-padding and dynamic batch switches, the rollout's memory share,
    ``trainer.nnodes`` × ``n_gpus_per_node``, the prompt + response length, the model
    ``actor_rollout_ref.model.path`` names when moeplan knows it."""
    data = _mapping(text, "verl-yaml")
    meg = _section(data, "actor_rollout_ref.actor.megatron", "verl-yaml")
    nested = ("override_transformer_config", "override_ddp_config", "override_mcore_model_config")
    _megatron_section(meg, imp, nested, VERL_OWN, "verl")
    # Megatron's OptimizerConfig fields verl passes through (the CPU optimizer, the precision-aware optimizer)
    _megatron_section(_get(data, "actor_rollout_ref.actor.optim.override_optimizer_config"), imp, (), (), "verl")
    actor = _get(data, "actor_rollout_ref.actor")
    actor = actor if isinstance(actor, dict) else {}
    if isinstance(actor.get("ppo_micro_batch_size_per_gpu"), int):
        imp.training["micro_batch_size"] = actor["ppo_micro_batch_size_per_gpu"]
    if meg.get("use_remove_padding") is True:
        imp.training["packed_sequences"] = True
    if actor.get("use_dynamic_bsz") is True:
        imp.training["variable_length"] = True
    if meg.get("dtype") in ("float16", "fp16"):
        imp.notes.append(msg("drivers.key_driver_own", key="dtype", driver="verl"))
    _rollout_memory("verl", "rollout.gpu_memory_utilization")(
        imp, _get(data, "actor_rollout_ref.rollout.gpu_memory_utilization")
    )
    _world(imp, _get(data, "trainer.nnodes"), _get(data, "trainer.n_gpus_per_node"))
    _seq(imp, _get(data, "data.max_prompt_length"), _get(data, "data.max_response_length"))
    _set_model("actor_rollout_ref.model.path")(imp, _get(data, "actor_rollout_ref.model.path"))
    return "verl"


def _world(imp: Imported, nodes: Any, per_node: Any) -> None:
    if isinstance(nodes, int) and isinstance(per_node, int) and nodes > 0 and per_node > 0:
        imp.system.update(num_gpus=nodes * per_node, gpus_per_node=per_node)


def _seq(imp: Imported, prompt: Any, response: Any) -> None:
    """An RL run's longest sequence: prompt + response tokens (both ints)."""
    if isinstance(prompt, int) and isinstance(response, int) and prompt + response > 0:
        imp.training["seq_length"] = prompt + response


def read_skyrl(text: str, imp: Imported) -> str:
    """A SkyRL launch script's overrides: ``trainer.policy.megatron_config.*`` (with
    ``transformer_config_kwargs`` / ``ddp_config`` / ``optimizer_config_kwargs``), the placement, the
    micro batch, the inference engine's memory share and the prompt + response length."""
    data = _mapping(text, "skyrl-overrides")
    meg = _section(data, "trainer.policy.megatron_config", "skyrl-overrides")
    nested = ("transformer_config_kwargs", "ddp_config", "optimizer_config_kwargs")
    _megatron_section(meg, imp, nested, ("lora_config", "hf_export_config", "empty_cuda_cache"), "skyrl")
    mbs = _get(data, "trainer.micro_train_batch_size_per_gpu")
    if isinstance(mbs, int):
        imp.training["micro_batch_size"] = mbs
    _set_model("trainer.policy.model.path")(imp, _get(data, "trainer.policy.model.path"))
    _rollout_memory("skyrl", "generator.inference_engine.gpu_memory_utilization")(
        imp, _get(data, "generator.inference_engine.gpu_memory_utilization")
    )
    placement = _get(data, "trainer.placement")
    placement = placement if isinstance(placement, dict) else {}
    _world(imp, placement.get("policy_num_nodes"), placement.get("policy_num_gpus_per_node"))
    _seq(imp, _get(data, "trainer.max_prompt_length"), _get(data, "generator.sampling_params.max_generate_length"))
    return "skyrl"


#: NeMo-RL's own keys of ``policy.megatron_cfg`` (nemo_rl/models/policy/__init__.py MegatronConfig, and the
#: checkpoint converter's ``converter_type``)
NEMO_RL_OWN = (
    "enabled",
    "empty_unused_memory_level",
    "force_reconvert_from_hf",
    "force_overwrite_initial_ckpt",
    "activation_checkpointing",
    "pipeline_dtype",
    "peft",
    "env_vars",
    "freeze_moe_router",
    "defer_fp32_logits",
    "moe_per_layer_logging",
    "converter_type",
)


def read_nemo_rl(text: str, imp: Imported) -> str:
    """A NeMo-RL config: ``policy.megatron_cfg`` (its ``optimizer``, ``scheduler`` and
    ``distributed_data_parallel_config`` hold Megatron Bridge names; the recompute keys count only
    with ``activation_checkpointing: true``), the policy's batch sizes, sequence length, precision,
    packing, the generation engine's memory share and the cluster."""
    data = _mapping(text, "nemo-rl-yaml")
    meg = _section(data, "policy.megatron_cfg", "nemo-rl-yaml")
    if isinstance(data.get("defaults"), str):
        imp.notes.append(msg("drivers.inherits", parent=short_repr(data["defaults"])))
    _megatron_section(meg, imp, ("optimizer", "scheduler", "distributed_data_parallel_config"), NEMO_RL_OWN, "nemo-rl")
    _nemo_rl_recompute(meg, imp)
    for key in ("freeze_moe_router", "defer_fp32_logits", "converter_type"):  # set, and not modelled: said
        if meg.get(key):
            imp.notes.append(msg("drivers.key_driver_own", key=key, driver="nemo-rl"))
    if isinstance(meg.get("env_vars"), dict):
        imp.environment.update({str(k): str(v) for k, v in meg["env_vars"].items() if v is not None})
    _nemo_rl_policy(data.get("policy") or {}, imp)
    _rollout_memory("nemo-rl", "generation.vllm_cfg.gpu_memory_utilization")(
        imp, _get(data, "policy.generation.vllm_cfg.gpu_memory_utilization")
    )
    _world(imp, _get(data, "cluster.num_nodes"), _get(data, "cluster.gpus_per_node"))
    return "nemo-rl"


#: what NeMo-RL's ``activation_checkpointing: true`` sets on the model config, whatever recompute keys the
#: file holds (``nemo_rl/models/megatron/setup.py`` ``_apply_performance_config``)
NEMO_RL_CHECKPOINTING = {"recompute_granularity": "full", "recompute_method": "uniform", "recompute_num_layers": 1}


def _nemo_rl_recompute(meg: dict[str, Any], imp: Imported) -> None:
    """``policy.megatron_cfg``'s recompute as NeMo-RL applies it: ``activation_checkpointing: true`` is full
    recompute of every layer (:data:`NEMO_RL_CHECKPOINTING`), said in a note; without it, none (the file's
    own recompute keys are not applied either)."""
    for key in ("recompute_granularity", "recompute_modules", "recompute_method", "recompute_num_layers"):
        imp.args.pop(key, None)
    if meg.get("activation_checkpointing"):
        imp.args.update(NEMO_RL_CHECKPOINTING)
        imp.notes.append(msg("drivers.nemo_rl_checkpointing"))


_NEMO_PRECISION = {"bfloat16": "bf16", "bf16": "bf16"}


def _nemo_rl_policy(policy: dict[str, Any], imp: Imported) -> None:
    """The policy's own keys: batch sizes, sequence length, precision, packing, the model name."""
    for key, field in (
        ("train_micro_batch_size", "micro_batch_size"),
        ("train_global_batch_size", "global_batch_size"),
        ("max_total_sequence_length", "seq_length"),
    ):
        if isinstance(policy.get(key), int):
            imp.training[field] = policy[key]
    if policy.get("precision") in _NEMO_PRECISION:
        imp.training["precision"] = _NEMO_PRECISION[policy["precision"]]
    packing = _get(policy, "sequence_packing.enabled")
    if isinstance(packing, bool):
        imp.training["packed_sequences"] = packing
    _set_model("policy.model_name")(imp, policy.get("model_name"))
    imp.args.pop("bf16", None)
    imp.args.pop("fp16", None)


_READERS: dict[str, Callable[[str, Imported], str]] = {
    "megatron-lm-yaml": read_megatron_lm_yaml,
    "verl-yaml": read_verl,
    "slime-args": read_slime,
    "nemo-rl-yaml": read_nemo_rl,
    "ms-swift-args": read_ms_swift,
    "skyrl-overrides": read_skyrl,
}
