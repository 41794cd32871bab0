"""Side inputs that requests name by path: a VLM workload, a calibration profile, a runs document."""

from __future__ import annotations

from pathlib import Path

from moeplan.errors import InputError
from moeplan.model.calibrate import load_profile
from moeplan.spec.loading import load_yaml_file
from moeplan.spec.scenario import load_scenario_file


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


__all__ = ["load_step_constants", "load_workload", "load_yaml_any"]
