"""Reports of ``check``, ``params``, ``models``, ``gpus`` and ``rules``: the rules, the catalogue and
exact parameter counts."""

from __future__ import annotations

from pathlib import Path

from moeplan.api.side_inputs import scenario_request
from moeplan.catalog import COUNTING_CONVENTIONS, get_gpu, get_model, list_gpus, list_models
from moeplan.errors import InputError, missing_file
from moeplan.i18n.messages import msg
from moeplan.inputs.overrides import ScenarioFlags, scenario_overrides
from moeplan.inputs.policy import MAX_JSON_BYTES, read_text
from moeplan.inputs.resolved import Scenario
from moeplan.inputs.versions import rules_version_basis
from moeplan.io.driver_configs import import_any
from moeplan.io.imports import import_dump
from moeplan.io.run_logs import read_log
from moeplan.model.memory import estimate_memory
from moeplan.plan.starting_points import published_scenario
from moeplan.resolve.load import load_scenario
from moeplan.rules import RULES, validate
from moeplan.structure.params import count_params
from moeplan.structure.placement import stage_params

#: the longest configuration file imported (a Bridge YAML, an overrides file, a command line)
MAX_CONFIG_BYTES = MAX_JSON_BYTES


def _read_config(path: Path | None, from_format: str) -> tuple[dict, list[str]]:
    """A Megatron Bridge / Megatron-LM configuration file as a scenario mapping, and the import notes.

    Raises:
        InputError: a missing or unreadable file, an unknown format, or a configuration it cannot read.
    """

    if from_format == "mbridge-recipe" and path is not None:  # a catalog recipe by its id, no file
        return published_scenario(path.as_posix()), [msg("drivers.recipe_loaded", id=path.as_posix())]
    if path is None or not path.is_file():
        raise missing_file("scenario", path, f"{from_format} file")
    if from_format == "megatron-log":  # a training log of any length: streamed, its dump kept
        return import_dump(read_log(path, "scenario").dump)
    return import_any(read_text(path, "scenario", MAX_CONFIG_BYTES), from_format)


def check_report(
    scenario: Path | None = None, flags: ScenarioFlags | None = None, from_format: str | None = None
) -> dict:
    """Every Megatron-Core rule on a scenario, never stopping at the first broken one.

    Args:
        scenario: scenario YAML, or (with ``from_format``) a configuration to import.
        flags: overrides laid over the file.
        from_format: read ``scenario`` as ``mbridge-yaml``, ``mbridge-overrides``,
            ``megatron-lm-args`` or ``megatron-log`` (see :mod:`moeplan.io.imports`), or a driver's
            config: ``megatron-lm-yaml``, ``verl-yaml``, ``slime-args``, ``nemo-rl-yaml``,
            ``ms-swift-args``, ``skyrl-overrides`` (see :mod:`moeplan.io.driver_configs`); or
            ``mbridge-recipe``: ``scenario`` is then the id of a Megatron Bridge perf recipe of the
            catalog (:func:`moeplan.plan.starting_points.published_scenario`).

    Returns:
        :meth:`moeplan.rules.CheckResult.to_dict`: ``verdict`` (valid | warn | invalid | unsupported),
        ``scenario`` (summary), ``counts`` (per severity), ``findings`` (rule_id, severity,
        message, fix, kind, source, keys; errors first); ``megatron_core``: the version the layout
        rules compared and why, beside a container's (:func:`moeplan.inputs.versions.rules_version_basis`);
        ``memory`` (:func:`memory_verdict`) when the
        scenario names what the memory model needs; with ``from_format`` also ``import_notes`` (what
        the import assumed or dropped, list of str).

    Raises:
        InputError: bad flags, an unreadable or invalid scenario / configuration.
    """
    source: Path | dict | None = scenario
    notes: list[str] = []
    if from_format is not None:
        source, notes = _read_config(scenario, from_format)
    data, batch = scenario_request(source, flags)
    scn = load_scenario(data)
    result = validate(scn)
    notes += batch
    doc = {**result.to_dict(), "megatron_core": rules_version_basis(scn.versions, scn.mcore_version)}
    memory = memory_verdict(scn)
    if memory is not None:
        doc["memory"] = memory
    return {**doc, "import_notes": notes} if from_format or notes else doc


def memory_verdict(scn: Scenario) -> dict | None:
    """The memory verdict of a scenario that names what the memory model needs (a complete model, a
    GPU, the GPU count and the sequence length), None otherwise or when the layout cannot be
    estimated (it does not fold into the world: the rules say why). No step-time model is run.

    Returns:
        ``{"verdict" (fits | tight | does-not-fit), "peak_bytes" (device use of the peak stage, bytes
        per GPU), "peak_stage", "capacity_bytes" (usable HBM less system.reserved_gib), "error_band_pct"
        (the memory model's band, docs/memory_accuracy.md), "dominant_items" (the parts that push the
        peak over, :func:`moeplan.model.memory.dominant_items`), "host_fits" (offloaded state against
        the node's host memory; None when nothing is offloaded or the host memory is unknown),
        "verdict_band" (the band's edges and the verdict's reason,
        :meth:`moeplan.model.memory.MemoryVerdict.to_dict`)}``: the one verdict every command gives.
    """
    if scn.model is None or scn.gpu is None or not scn.num_gpus or scn.training.seq_length is None:
        return None
    try:
        mem = estimate_memory(scn)
    except InputError:
        return None
    return {
        "verdict": mem.verdict,
        "peak_bytes": mem.peak_bytes,
        "peak_stage": mem.peak_stage.stage,
        "capacity_bytes": mem.capacity_bytes,
        "error_band_pct": mem.error_band_pct,
        "dominant_items": mem.dominant_items(),
        "host_fits": mem.host_fits,
        "verdict_band": mem.memory_verdict.to_dict(),
    }


def params_report(scenario: Path | None = None, flags: ScenarioFlags | None = None) -> dict:
    """Exact parameter counts of a scenario's model, and per rank for each pipeline stage.

    Returns:
        ``{"model": name, "params": ParamCounts.to_dict() (by_kind, total, active, mtp, vision;
        parameter counts), "per_rank": [StageParams.to_dict() per stage], "scenario": summary,
        "split_errors": ["rule_id: message" of each pipeline rule the split breaks]}`` (the counts
        are exact for the split as given, even one Megatron would refuse).

    Raises:
        InputError: bad flags or scenario, or no model.
    """
    scn = load_scenario(scenario, scenario_overrides(flags))
    if scn.model is None:
        raise InputError("model", None, "a model (--model or model: in the scenario)")
    counts = count_params(scn.model).to_dict()
    stages = [st.to_dict() for st in stage_params(scn)]
    split_errors = [f for f in validate(scn).errors if f.rule_id.startswith("pipeline.")]
    return {
        "model": scn.model.name,
        "params": counts,
        "per_rank": stages,
        "scenario": scn.summary(),
        "split_errors": [f"{f.rule_id}: {f.message}" for f in split_errors],
    }


def _model_kind(m) -> str:
    """``[VLM ]MoE|dense[ MLA][ hybrid-GDN]`` of a :class:`moeplan.ModelSpec`."""
    return (
        ("VLM " if m.is_vlm else "")
        + ("MoE" if m.is_moe else "dense")
        + (" MLA" if m.multi_latent_attention else "")
        + (" hybrid-GDN" if m.has_linear_attention else "")
    )


def models_report() -> list[dict]:
    """The built-in models, one row each: ``id``, ``kind``, ``num_layers``, ``experts`` ("N top-K" or
    None), exact ``total_params`` / ``active_params`` (every part), the same ``*_as_published``
    (counted as the publisher counts: with or without vision tower, embeddings, output layer),
    ``mtp_params``, ``vision_params`` (parameter counts), ``published`` ("total / active" as
    published, or None) and ``reconstructed_config`` (bool).

    Raises:
        nothing for the packaged catalogue.
    """
    rows = []
    for hf_id in list_models():
        m = get_model(hf_id)
        c = count_params(m)
        conv = COUNTING_CONVENTIONS.get(hf_id)
        pub = m.published_params
        rows.append(
            {
                "id": hf_id,
                "kind": _model_kind(m),
                "num_layers": m.num_layers,
                "experts": f"{m.num_moe_experts} top-{m.moe_router_topk}" if m.is_moe else None,
                "total_params": c.total,
                "active_params": c.active(),
                "total_params_as_published": c.total_with(vision=conv.total_includes_vision if conv else True),
                "active_params_as_published": c.active(
                    input_embedding=conv.active_includes_input_embedding if conv else True,
                    output_layer=conv.active_includes_output_layer if conv else True,
                ),
                "mtp_params": c.mtp,
                "vision_params": c.vision,
                "published": f"{pub['total']} / {pub['active']}" if "total" in pub else None,
                "reconstructed_config": m.reconstructed,
            }
        )
    return rows


def gpus_report(gpu_id: str | None = None) -> list[dict] | dict:
    """The built-in GPUs as :class:`moeplan.GpuSpec` dumps (usable HBM in GiB and its source, dense
    peak TFLOP/s per precision, NVLink domain and GB/s, NIC Gb/s, features, sources): a list of all,
    or the one dict of ``gpu_id``.

    Raises:
        UnknownNameError: an unknown ``gpu_id``.
    """
    if gpu_id:
        return get_gpu(gpu_id).model_dump()
    return [g.model_dump() for g in list_gpus()]


def rules_report() -> list[dict]:
    """Every registered rule: ``rule_id``, ``kind`` (invalid | unsupported: its error class),
    ``source`` (the Megatron file that enforces it), ``summary``. Raises nothing."""
    return [{"rule_id": r.rule_id, "kind": r.kind, "source": r.source, "summary": r.summary} for r in RULES.values()]


__all__ = ["check_report", "gpus_report", "memory_verdict", "models_report", "params_report", "rules_report"]
