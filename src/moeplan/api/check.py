"""Reports of ``check``, ``params``, ``models``, ``gpus`` and ``rules``: the rules, the catalogue and
exact parameter counts."""

from __future__ import annotations

from pathlib import Path

from moeplan.api.side_inputs import read_config, scenario_request
from moeplan.catalog import COUNTING_CONVENTIONS, get_gpu, get_model, list_gpus, list_models
from moeplan.errors import InputError
from moeplan.inputs.overrides import ScenarioFlags, scenario_overrides
from moeplan.inputs.resolved import Scenario
from moeplan.inputs.versions import rules_version_basis
from moeplan.model.memory import estimate_memory
from moeplan.model.model_notes import param_notes
from moeplan.resolve.load import load_scenario
from moeplan.rules import RULES, validate
from moeplan.structure.params import count_params
from moeplan.structure.placement import stage_params


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
        source, notes = read_config(scenario, from_format)
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
        "split_errors": ["rule_id: message" of each pipeline rule the split breaks], "notes": what the
        counts leave out or count unlike the checkpoint}`` (the counts
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
        "notes": param_notes(scn.complete_model),
    }


def _model_kind(m) -> str:
    """``[VLM ]MoE|dense[ MLA][+DSA|+CSA|+MSA][ hybrid-GDN][ hybrid-Mamba]`` of a :class:`moeplan.ModelSpec`
    (CSA: DeepSeek-V4's compressed sparse attention with hyper-connections; MSA: MiniMax Sparse Attention)."""
    return (
        ("VLM " if m.is_vlm else "")
        + ("MoE" if m.is_moe else "dense")
        + (" MLA" if m.multi_latent_attention else "")
        + ("+DSA" if m.has_dsa else "")
        + ("+CSA" if m.is_dsv4 else "")
        + ("+MSA" if m.has_msa else "")
        + ((" hybrid-KDA" if m.kimi_delta_attention else " hybrid-GDN") if m.has_linear_attention else "")
        + (" hybrid-Mamba" if m.has_mamba else "")
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
                "total_params_as_published": c.total_with(
                    mtp=conv.total_includes_mtp if conv else False,
                    vision=conv.total_includes_vision if conv else True,
                ),
                "active_params_as_published": c.active(
                    input_embedding=conv.active_includes_input_embedding if conv else True,
                    output_layer=conv.active_includes_output_layer if conv else True,
                ),
                "mtp_params": c.mtp,
                "vision_params": c.vision,
                "published": f"{pub['total']} / {pub.get('active', '-')}" if "total" in pub else None,
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
