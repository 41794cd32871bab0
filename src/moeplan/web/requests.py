"""What the web page (or any client of the JSON API) sends, and how it becomes the same arguments the
CLI passes to :mod:`moeplan.api`: a scenario file and :class:`~moeplan.inputs.overrides.ScenarioFlags`.

A request is the form's fields (model, GPU, count, sequence length, batch, precision, the parallel
sizes and any other key as ``section.key=value``), optionally over a scenario given as YAML text or
as a mapping, optionally with an uploaded Hugging Face ``config.json`` (its text). Texts are written
to a private temporary folder for the duration of one request, so that the library reads them exactly
as it reads the CLI's files; the folder's path is then taken out of every answer (:func:`scrub`).

The server never reads a file the client names: a model given as a path (``*.json`` or an existing
path) is refused — a config is uploaded instead.

Nothing here computes anything about a model or a layout; that is :mod:`moeplan.api`'s job.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field

from moeplan.errors import InputError
from moeplan.inputs.layout import PARALLEL_DIMS, LayoutSpec
from moeplan.inputs.loading import load_scenario_file
from moeplan.inputs.overrides import TOP_LEVEL_SET, ScenarioFlags

#: the name an uploaded config.json has in answers and downloaded scenarios
CONFIG_NAME = "config.json"
#: the name a scenario given as text or mapping has in answers
SCENARIO_NAME = "scenario.yaml"
#: what ``/api/export`` writes besides the library's export formats: the scenario mapping itself
SCENARIO_FORMAT = "scenario-yaml"
#: the download file name of each export format
FILENAMES = {
    SCENARIO_FORMAT: "scenario.yaml",
    "mbridge-overrides": "mbridge_overrides.txt",
    "mbridge-yaml": "mbridge.yaml",
    "mbridge-python": "mbridge_recipe.py",
    "megatron-lm-args": "megatron_lm_args.txt",
    "slurm": "launch.sh",
}


class ScenarioRequest(BaseModel):
    """The scenario of a request: the form's fields, laid over ``scenario_yaml`` / ``scenario`` as the
    CLI's flags are laid over a scenario file. Every field is optional (None = not given). Types are
    strict, as the CLI's options are: an integer field refuses ``true``, ``"8"`` and ``8.0``, a flag
    refuses ``"yes"`` (422 naming the field)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    scenario_yaml: str | None = Field(None, description="A scenario file's text (YAML).")
    scenario: dict[str, Any] | None = Field(None, description="A scenario mapping (e.g. one of plan's `scenarios`).")
    config_json: str | None = Field(None, description="An uploaded Hugging Face config.json (its text): the model.")
    model: str | None = Field(None, description="A built-in model: HF id or short name (`moeplan models`).")
    gpu: str | None = Field(None, description="GPU id: a100, h100, h200, b200, b300, gb200, gb300.")
    num_gpus: int | None = Field(None, description="World size.")
    seq_length: int | None = Field(None, description="Tokens per sequence.")
    mbs: int | None = Field(None, description="micro_batch_size (sequences).")
    gbs: int | None = Field(None, description="global_batch_size (sequences).")
    precision: str | None = Field(None, description="bf16, fp8-tensorwise, fp8-delayed, fp8-blockwise, mxfp8, nvfp4.")
    tp: int | None = None
    pp: int | None = None
    vpp: int | None = None
    cp: int | None = None
    ep: int | None = None
    etp: int | None = None
    sets: list[str] = Field(
        default_factory=list,
        description="Any other key as `section.key=value` (as --set); a key without a section is a layout key.",
    )


class PlanRequest(ScenarioRequest):
    """A ``plan`` request: the scenario and plan's options (as the CLI's)."""

    tokens_per_step: int | None = Field(None, description="Tokens per step (instead of gbs).")
    top: int = Field(5, ge=1, le=50, description="Candidates to return.")
    min_dp: int = Field(1, ge=1, description="Smallest data-parallel size accepted.")
    headroom_gib: float | None = Field(None, ge=0, description="GiB kept free per GPU (default 5 % of HBM).")
    objective: str = Field("throughput", description="throughput or time-to-train (needs train_tokens).")
    train_tokens: float | None = Field(None, ge=1, description="Tokens to train, for time-to-train.")


class ExportRequest(ScenarioRequest):
    """An ``export`` request: the scenario and the format (``scenario-yaml`` is the scenario itself)."""

    format: Literal[
        "scenario-yaml", "mbridge-overrides", "mbridge-yaml", "mbridge-python", "megatron-lm-args", "slurm"
    ] = "mbridge-overrides"
    megatron_core_version: str | None = Field(None, description="Key spellings of this megatron-core version.")
    force: bool = Field(False, description="Export a layout that breaks a rule too.")


def normalise_sets(items: list[str]) -> tuple[str, ...]:
    """``key=value`` lines as ``--set`` items: blank lines dropped, a key without a section (and not a
    top-level key such as ``framework``) taken as a layout key; an item without ``=`` left for the
    library to refuse."""
    out = []
    for raw in items:
        item = raw.strip()
        if not item:
            continue
        key, sep, _ = item.partition("=")
        key = key.strip()
        if sep and "." not in key and key not in TOP_LEVEL_SET:
            item = f"layout.{item}"
        out.append(item)
    return tuple(out)


def _looks_like_path(name: str) -> bool:
    """The library reads a model name as a file when it ends in ``.json`` or is an existing path."""
    return name.strip().lower().endswith(".json") or (("/" in name or "\\" in name) and Path(name).exists())


def refuse_paths(model: object, field: str) -> None:
    """A model named by a path on the server's machine is refused (upload the config instead).

    Raises:
        InputError: ``model`` is a string the library would read as a file.
    """
    if isinstance(model, str) and _looks_like_path(model):
        raise InputError(
            field, model, "a built-in model (HF id or short name); upload a config.json for any other model"
        )


def _write_scenario(req: ScenarioRequest, tmp: Path) -> Path | None:
    """The request's scenario (YAML text or mapping) as a file in ``tmp``, or None.

    Raises:
        InputError: both given, unreadable YAML, a model given as a path.
    """
    if req.scenario_yaml is not None and req.scenario is not None:
        raise InputError("scenario", "both", "either scenario_yaml (text) or scenario (a mapping)")
    if req.scenario_yaml is None and req.scenario is None:
        return None
    path = tmp / SCENARIO_NAME
    if req.scenario is not None:
        path.write_text(yaml.safe_dump(req.scenario, sort_keys=False), encoding="utf-8")
    else:
        path.write_text(req.scenario_yaml or "", encoding="utf-8")
    data = load_scenario_file(path)  # the library's strict reading: its errors, its messages
    if req.config_json is None:
        refuse_paths(data.get("model"), "model")
    return path


#: a lone UTF-16 surrogate: JSON can carry one (``"\\ud800"``), UTF-8 (a file, an answer) cannot
_SURROGATE = re.compile("[\ud800-\udfff]")


def refuse_surrogates(text: str | None, field: str) -> None:
    """A text the client sends to be written as a file holds no lone UTF-16 surrogate (other
    texts meet the library's policy, which refuses them as it refuses control characters).

    Raises:
        InputError: naming ``field``, the character and where it is.
    """
    found = None if text is None or text.isascii() else _SURROGATE.search(text)
    if found is not None:
        where = f"U+{ord(found.group()):04X} at character {found.start() + 1:,}"
        raise InputError(field, text, f"Unicode text (no lone UTF-16 surrogates; found {where})")


def materialize(req: ScenarioRequest, tmp: Path) -> tuple[Path | None, ScenarioFlags]:
    """The CLI's arguments for ``req``: (scenario file or None, flags), with texts written to ``tmp``.

    Raises:
        InputError: both a model and a config, a model given as a path, an unreadable scenario text,
            a text with a lone surrogate, a non-finite number.
    """
    refuse_surrogates(req.scenario_yaml, "scenario_yaml")
    refuse_surrogates(req.config_json, "config_json")
    model = req.model
    if req.config_json is not None:
        if req.model is not None:
            raise InputError("model", req.model, "either a built-in model or an uploaded config.json, not both")
        path = tmp / CONFIG_NAME
        path.write_text(req.config_json, encoding="utf-8")
        model = str(path)
    else:
        refuse_paths(model, "model")
    for name in ("headroom_gib", "train_tokens"):
        v = getattr(req, name, None)
        if isinstance(v, float) and not math.isfinite(v):
            raise InputError(name, v, "a finite number")
    scenario = _write_scenario(req, tmp)
    flags = ScenarioFlags(
        model=model,
        gpu=req.gpu,
        num_gpus=req.num_gpus,
        seq_length=req.seq_length,
        mbs=req.mbs,
        gbs=req.gbs,
        precision=req.precision,
        tp=req.tp,
        pp=req.pp,
        vpp=req.vpp,
        cp=req.cp,
        ep=req.ep,
        etp=req.etp,
        sets=normalise_sets(req.sets),
    )
    return scenario, flags


#: library field (scenario path or CLI option) → the request field it comes from
_FIELDS = {
    "model": "model",
    "system.gpu": "gpu",
    "system.num_gpus": "num_gpus",
    "training.seq_length": "seq_length",
    "training.micro_batch_size": "mbs",
    "training.global_batch_size": "gbs",
    "training.precision": "precision",
    "--set": "sets",
    "--tokens-per-step": "tokens_per_step",
    "--objective": "objective",
    "--train-tokens": "train_tokens",
    "--headroom-gib": "headroom_gib",
    "--megatron-core-version": "megatron_core_version",
    "versions.megatron_core": "megatron_core_version",
    "scenario": "scenario_yaml",
    "scenario_yaml": "scenario_yaml",
    "config_json": "config_json",
    **{
        f"layout.{key}": dim.lower()
        for dim, key in PARALLEL_DIMS.items()
        if dim.lower() in ScenarioRequest.model_fields
    },
}


def request_field(field: str, req: ScenarioRequest | None) -> str | None:
    """The request field an error's library ``field`` concerns (where the page shows it), or None.

    A scenario key the form did not give comes from the scenario text; any other key from ``sets``.
    """
    base = field.split(":")[-1].strip()
    key = _FIELDS.get(base)
    if key is None and (base.startswith("model") or base.startswith("model_overrides")):
        key = "model"
    if key is None and base.startswith("system.gpu"):
        key = "gpu"
    if req is None:
        return key
    if key == "model" and req.config_json is not None:
        return "config_json"
    if key is not None and getattr(req, key, None) not in (None, [], ""):
        return key
    if any(item.partition("=")[0].strip() == base for item in normalise_sets(req.sets)):
        return "sets"
    if req.scenario_yaml is not None or req.scenario is not None:
        return "scenario_yaml" if req.scenario_yaml is not None else "scenario"
    if key is not None:
        return key
    if "." in base and req.sets:
        return "sets"
    return None


def scrub(obj: Any, tmp: Path) -> Any:
    """``obj`` with the request's temporary folder taken out of every string (a path in it becomes
    the file's own name: ``config.json``, ``scenario.yaml``)."""
    prefixes = (str(tmp) + "/", str(tmp) + "\\", str(tmp))
    if isinstance(obj, str):
        for p in prefixes:
            obj = obj.replace(p, "")
        return obj
    if isinstance(obj, dict):
        return {k: scrub(v, tmp) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [scrub(v, tmp) for v in obj]
    return obj


def candidate_scenario(request: dict, candidate: dict) -> dict:
    """The scenario mapping of a planned candidate (what ``plan --save`` writes for #1): the request
    with the candidate's layout and training, and the request's Megatron keys moeplan does not model
    (its ``layout:`` keys outside :class:`~moeplan.inputs.layout.LayoutSpec` and its
    ``unmodelled_keys``), which the search never changes: a check or export of the candidate carries
    them as the request gave them."""
    out = {k: v for k, v in request.items() if k not in ("layout", "training")}
    out["training"] = {**(request.get("training") or {}), **candidate["training"]}
    given = request.get("layout") or {}
    carried = {k: v for k, v in given.items() if k not in LayoutSpec.model_fields}
    out["layout"] = {**dict(candidate["layout"]), **carried}
    return out


__all__ = [
    "CONFIG_NAME",
    "FILENAMES",
    "SCENARIO_FORMAT",
    "ExportRequest",
    "PlanRequest",
    "ScenarioRequest",
    "candidate_scenario",
    "materialize",
    "normalise_sets",
    "refuse_paths",
    "refuse_surrogates",
    "request_field",
    "scrub",
]
