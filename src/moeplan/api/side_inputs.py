"""Side inputs that requests name by path: a VLM workload, a calibration profile, a runs document."""

from __future__ import annotations

from pathlib import Path

from moeplan.errors import InputError, missing_file
from moeplan.i18n.messages import msg
from moeplan.inputs.loading import load_scenario_file, load_yaml_file, merge_overrides
from moeplan.inputs.overrides import ScenarioFlags, scenario_overrides
from moeplan.inputs.policy import MAX_JSON_BYTES, read_text
from moeplan.inputs.training import batch_for_tokens, default_global_batch
from moeplan.io.driver_configs import import_any
from moeplan.io.imports import import_dump
from moeplan.io.run_logs import read_log
from moeplan.model.constants_fit import load_profile
from moeplan.plan.starting_points import published_scenario
from moeplan.resolve.load import load_scenario

#: the longest configuration file imported (a Bridge YAML, an overrides file, a command line)
MAX_CONFIG_BYTES = MAX_JSON_BYTES
#: the largest global batch (sequences) a request may ask for: the training schema's cap
MAX_GLOBAL_BATCH = 2**24


def read_config(path: Path | None, from_format: str) -> tuple[dict, list[str]]:
    """A configuration in a foreign format as a scenario mapping, and the import notes (what the import
    assumed or dropped, one sentence each): ``check``, ``estimate`` and ``plan``'s ``--from``.

    Args:
        path: the file; for ``mbridge-recipe`` the id of a catalog perf recipe instead.
        from_format: ``mbridge-yaml``, ``mbridge-overrides``, ``megatron-lm-args``, ``megatron-log``
            (:mod:`moeplan.io.imports`), a driver's format (:mod:`moeplan.io.driver_configs`) or
            ``mbridge-recipe`` (:func:`moeplan.plan.starting_points.published_scenario`).

    Raises:
        InputError: a missing or unreadable file (over :data:`MAX_CONFIG_BYTES`), an unknown format,
            or a configuration it cannot read (the field named).
    """
    if from_format == "mbridge-recipe" and path is not None:  # a catalog recipe by its id, no file
        return published_scenario(path.as_posix()), [msg("drivers.recipe_loaded", id=path.as_posix())]
    if path is None or not path.is_file():
        raise missing_file("scenario", path, f"{from_format} file")
    if from_format == "megatron-log":  # a training log of any length: streamed, its dump kept
        return import_dump(read_log(path, "scenario").dump)
    return import_any(read_text(path, "scenario", MAX_CONFIG_BYTES), from_format)


def scenario_request(
    scenario: Path | dict | None = None,
    flags: ScenarioFlags | None = None,
    workload: Path | None = None,
    *,
    tokens_per_step: int | None = None,
    default_batch: bool = False,
) -> tuple[dict, list[str]]:
    """The scenario mapping a command is asked: the file (or a mapping, e.g. an imported config) with
    the flags laid over it, the
    workload under ``workload:``, the global batch from ``--tokens-per-step`` (:func:`batch_for_tokens`)
    and, with ``default_batch``, about 4 Mi tokens when no batch is given (as ``plan`` assumes).

    Returns:
        (mapping, notes): how the batch was rounded or assumed (each one sentence).

    Raises:
        InputError: both a global batch size and tokens per step, bad flags, an unreadable scenario
            or workload, tokens per step without a sequence length or below one sequence.
    """
    tps = tokens_per_step if tokens_per_step is not None else (flags.tokens_per_step if flags else None)
    if flags is not None and flags.gbs is not None and tps is not None:
        raise InputError("--tokens-per-step", tps, "either --gbs or --tokens-per-step")
    ov = scenario_overrides(flags)
    if workload is not None:
        ov["workload"] = load_workload(workload)
    base = scenario if isinstance(scenario, dict) else load_scenario_file(scenario) if scenario is not None else {}
    data = merge_overrides(base, ov)
    training = data.get("training") if isinstance(data.get("training"), dict) else None
    seq = (training or {}).get("seq_length")
    notes: list[str] = []
    if tps is not None:
        if not isinstance(seq, int):
            raise InputError("--tokens-per-step", tps, "a --seq-length to divide it by")
        if tps < seq:
            raise InputError("--tokens-per-step", tps, f"at least one sequence ({seq} tokens)")
        if tps // seq > MAX_GLOBAL_BATCH:  # before any range of batches is built
            raise InputError(
                "--tokens-per-step", tps, f"at most {MAX_GLOBAL_BATCH:,} sequences of {seq} tokens per step"
            )
        gbs = batch_for_tokens(tps, seq)
        data.setdefault("training", {})["global_batch_size"] = gbs
        if tps % seq:
            notes.append(
                f"--tokens-per-step {tps:,} is not a multiple of the sequence length: global batch {gbs} "
                f"({gbs * seq:,} tokens per step; within 10 %, the batch that divides best by data-parallel sizes)"
            )
    elif default_batch and isinstance(seq, int) and seq > 0 and (training or {}).get("global_batch_size") is None:
        gbs, why = default_global_batch(seq, *_batch_multiple(data))
        data.setdefault("training", {})["global_batch_size"] = gbs
        notes.append(why)
    return data, notes


def _batch_multiple(data: dict) -> tuple[int, int | None]:
    """(micro_batch_size × DP, GPU count) of the scenario ``data`` describes, for a default global
    batch that its layout divides; (1, None) where the scenario does not load or DP is not whole
    (those errors are reported where the scenario is loaded for the command)."""
    try:
        s = load_scenario(data)
    except InputError:
        return 1, None
    mbs = s.training.micro_batch_size or 1
    return (mbs * s.dp if s.dp else 1), s.num_gpus


def load_workload(path: Path) -> dict:
    """The ``workload:`` mapping of a YAML written by ``moeplan vlm-stats -o`` (images and image
    tokens per sequence, ...), to be put under a scenario's ``workload:``.

    Raises:
        InputError: (field ``--workload``) an unreadable file, or one without a ``workload:`` mapping.
    """
    try:
        data = load_scenario_file(path)
    except InputError as exc:
        raise InputError("--workload", str(path), f"a readable workload YAML ({exc.allowed})") from None
    w = data.get("workload")
    if not isinstance(w, dict):
        raise InputError("--workload", str(path), "a YAML file with a workload: mapping (moeplan vlm-stats -o FILE)")
    return w


def load_step_constants(calibration: Path | None):
    """The step-time constants of a calibration profile (``moeplan calibrate -o``), or None for the
    packaged ones.

    Returns:
        :class:`moeplan.model.constants.TimeConstants` or None.

    Raises:
        InputError: a missing, unreadable or invalid profile.
    """
    if calibration is None:
        return None

    return load_profile(calibration)


def load_yaml_any(path: Path, field: str = "runs") -> object:
    """A YAML/JSON document of any shape (runs files are lists or mappings).

    Raises:
        InputError: an unreadable file or invalid YAML (named by ``field``).
    """

    return load_yaml_file(path, field)


__all__ = ["load_step_constants", "load_workload", "load_yaml_any", "scenario_request"]
