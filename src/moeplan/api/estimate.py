"""Reports of ``estimate`` (memory per stage and step time of one layout) and ``export`` (what
Megatron Bridge / Megatron-LM runs for it)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from moeplan.api.side_inputs import load_step_constants, read_config, scenario_request
from moeplan.errors import InputError
from moeplan.i18n.messages import msg
from moeplan.inputs.overrides import ScenarioFlags
from moeplan.inputs.resolved import Scenario
from moeplan.inputs.training import says_default_batch
from moeplan.io.export import benchmark_keys_text, export
from moeplan.io.write import check_writable
from moeplan.model.memory import dominant_items_text, estimate_memory
from moeplan.model.step import estimate_step
from moeplan.plan.changes import apply_check_fixes
from moeplan.resolve.assumptions import benchmark_settings, verdict_assumptions
from moeplan.resolve.load import load_scenario
from moeplan.rules import validate
from moeplan.rules.known_issue_checks import UNKNOWN_RULE
from moeplan.rules.msa import MODEL_ONLY_RULES

BROKEN = ("invalid", "unsupported")


@dataclass(frozen=True)
class EstimateReport:
    """What ``estimate`` answers.

    Attributes:
        document: ``{"scenario": summary, "check": {"verdict", "errors": [finding dicts], "warnings":
            [finding dicts]}, "memory": MemoryEstimate.to_dict() (bytes per GPU per stage, itemised,
            verdict fits | tight | does-not-fit | unknown), "throughput": ThroughputEstimate.to_dict()
            (seconds, tokens/s/GPU, TFLOP/s/GPU, MFU) or None}``; throughput is None without a global
            batch size or when the layout breaks a rule. A layout whose only errors each carry one
            applicable fix (the pipeline split) is estimated with the fix applied: ``fixed`` then
            says which (``rule_ids``, ``edits``, ``text``) and ``check`` still lists the errors of
            the layout as given. When every error is a known issue of the release (a crash or hang,
            not the layout), the step is timed anyway and ``timed_despite`` (``rule_ids``, ``text``)
            says so. With ``--from`` (``from_format``) also ``import_notes`` (what the
            import assumed or dropped, list of str). For a layout that does not fold into the
            world (memory cannot be estimated) ``check`` holds only verdict and errors, and memory
            and throughput are None.
        check: the full check (:meth:`moeplan.rules.CheckResult.to_dict`), every finding.
    """

    document: dict
    check: dict = field(default_factory=dict)

    @property
    def broken(self) -> bool:
        """The layout breaks a rule (Megatron would refuse it)."""
        return self.document["check"]["verdict"] in BROKEN

    @property
    def fits(self) -> bool:
        """Memory was estimated and the peak is not over the usable HBM."""
        mem = self.document["memory"]
        return mem is not None and mem["verdict"] != "does-not-fit"

    @property
    def may_not_fit(self) -> bool:
        """The verdict is ``tight``: the memory model's error band around the peak
        (``memory.verdict_band``, docs/memory_accuracy.md) crosses the usable HBM."""
        mem = self.document["memory"]
        return mem is not None and mem["verdict"] == "tight"


def _throughput(scn: Scenario, consts, calibration: Path | None) -> dict:
    """Step time of a legal layout with a batch size; for a VLM also the tokens/s/GPU the same layout
    shows on mock (image-free) data, which is not a real-data figure."""
    throughput = estimate_step(scn, consts).to_dict()
    if scn.model is not None and scn.model.vision is not None:
        mock = estimate_step(scn, consts, vision_patches=0.0)
        throughput["mock_data_tokens_per_s_per_gpu"] = mock.tokens_per_s_per_gpu
        throughput["real_data_workload"] = "given" if scn.input.workload is not None else "planning default"
    if calibration is not None:
        throughput["assumptions"].append(f"step time from the calibration profile {calibration}")
    return throughput


def estimate_report(
    scenario: Path | None = None,
    flags: ScenarioFlags | None = None,
    workload: Path | None = None,
    calibration: Path | None = None,
    from_format: str | None = None,
) -> EstimateReport:
    """Peak memory per GPU for every pipeline stage, itemised, against the GPU's usable HBM; and the
    step time, tokens/s/GPU, model TFLOP/s/GPU and MFU, itemised (at the scenario's global batch, or
    ``--tokens-per-step``, else about 4 Mi tokens per step as ``plan`` assumes: stated among the
    throughput's assumptions).

    Args:
        scenario: scenario YAML (None: the flags alone).
        flags: overrides laid over the file.
        workload: a workload YAML from ``moeplan vlm-stats -o`` (VLMs), put under ``workload:``.
        calibration: a profile from ``moeplan calibrate`` for the step-time constants.
        from_format: read ``scenario`` in this format first (:func:`moeplan.api.side_inputs.read_config`:
            a Bridge / Megatron-LM / driver configuration or a catalog recipe id); what the import
            assumed or dropped is the document's ``import_notes`` (list of str). None: a scenario YAML.

    Raises:
        InputError: bad flags, scenario, workload or profile, or a scenario the memory model cannot
            estimate although it breaks no rule (e.g. no sequence length).
    """
    source: Path | dict | None = scenario
    import_notes: list[str] = []
    if from_format is not None:
        source, import_notes = read_config(scenario, from_format)
    data, batch_notes = scenario_request(source, flags, workload, default_batch=True)
    report = _estimate(data, batch_notes, calibration)
    if from_format is not None:
        report.document["import_notes"] = import_notes
    return report


def _estimate(data: dict, batch_notes: list[str], calibration: Path | None) -> EstimateReport:
    """:func:`estimate_report` of the scenario mapping ``data`` (flags and workload laid over it)."""
    scn = load_scenario(data)
    checked = validate(scn)
    # an error that only says Megatron cannot run the model (MiniMax Sparse Attention) still gets the
    # model's figures, which its notes mark as such
    broken = checked.verdict in BROKEN and any(f.rule_id not in MODEL_ONLY_RULES for f in checked.errors)
    errors = [f.to_dict() for f in checked.errors]
    fixed = _fixed_split(data, checked) if broken else None
    if fixed is not None:
        # every rule the layout breaks has a one-change fix (the pipeline split, ...): estimate it fixed
        scn, broken = fixed.pop("_scenario"), False
    try:
        mem = estimate_memory(scn)
    except InputError:
        if not broken:
            raise
        # the layout does not fold into the world: the rules say why
        doc: dict[str, Any] = {"scenario": scn.summary(), "check": {"verdict": checked.verdict, "errors": errors}}
        return EstimateReport({**doc, "memory": None, "throughput": None}, checked.to_dict())
    consts = load_step_constants(calibration)
    throughput = None
    despite = _timed_despite(checked) if broken else None
    if scn.training.global_batch_size is not None and (not broken or despite is not None):
        throughput = _throughput(scn, consts, calibration)
    warnings = [f.to_dict() for f in checked.findings if f.severity == "warning"]
    # the one line on versions not stated (rules.known_issue_checks.versions_unknown_message)
    unknown = [f.to_dict() for f in checked.findings if f.rule_id == UNKNOWN_RULE]
    doc = {
        "scenario": scn.summary(),
        "assumes": [a.to_dict() for a in verdict_assumptions(scn, says_default_batch(batch_notes))],
        "check": {"verdict": checked.verdict, "errors": errors, "warnings": warnings, "versions_unknown": unknown},
        "memory": mem.to_dict(),
        "throughput": throughput,
    }
    if fixed is not None:
        doc["fixed"] = fixed
    if despite is not None and throughput is not None:
        doc["timed_despite"] = despite
    if throughput is not None:
        throughput["assumptions"][:0] = batch_notes
    return EstimateReport(doc, checked.to_dict())


#: the rules whose errors stop or hang a run of a release without changing what one step computes (a
#: known issue: an assertion, a crash, a hang that an upgrade or the issue's workaround removes)
_STEP_NEUTRAL_RULES = ("known_issue.",)


def _timed_despite(checked) -> dict | None:
    """When every error of ``checked`` is a known issue of the release (:data:`_STEP_NEUTRAL_RULES`):
    the step is still modelled — the same layout runs once the issue is worked around — and the
    estimate times it, saying so beside the step time: ``{rule_ids, text}``. None otherwise (an
    error of the layout itself leaves the step time out)."""
    errors = list(checked.errors)
    if not errors or not all(f.rule_id.startswith(_STEP_NEUTRAL_RULES) for f in errors):
        return None
    ids = sorted({f.rule_id for f in errors})
    return {"rule_ids": ids, "text": msg("recipes_2026.timed_despite_known_issue", ids=", ".join(ids))}


def _fixed_split(data: dict, checked) -> dict | None:
    """The scenario with the check's own fixes applied (:func:`moeplan.plan.changes.apply_check_fixes`):
    ``{rule_ids, edits, text, _scenario}``; None when some error has no such fix."""
    got = apply_check_fixes(data, checked.errors)
    if got is None:
        return None
    fixed, edits = got
    ids = sorted({f.rule_id for f in checked.errors})
    shown = {True: "true", False: "false", None: "unset"}
    text = ", ".join(f"{k}: {shown.get(v, v) if isinstance(v, bool) or v is None else v}" for k, v in edits.items())
    return {
        "rule_ids": ids,
        "edits": edits,
        "text": msg("api.check_fixes_applied", edits=text, ids=", ".join(ids)),
        "_scenario": load_scenario(fixed),
    }


@dataclass(frozen=True)
class ExportResult:
    """What ``export`` answers.

    Attributes:
        text: the exported document.
        notes: what the format cannot express or what was assumed, one sentence each.
        broken_rules: rule id of every error the layout has (repeated per finding), in check order.
        refused: the layout breaks a rule and ``force`` was not given: nothing to write.
        warnings: e.g. the memory model predicts the layout runs out of memory (GiB per GPU).
    """

    text: str
    notes: list[str]
    broken_rules: list[str]
    refused: bool = False
    warnings: list[str] = field(default_factory=list)


def _benchmark_warnings(scn: Scenario) -> list[str]:
    """A warning when the export carries benchmark-only settings (forced load balancing, no NaN check)."""
    bench = benchmark_settings(scn)
    if not bench:
        return []
    keys = benchmark_keys_text(bench, why=True)
    return [
        f"benchmark-only settings exported: {keys}; for a training run use recipe_defaults: mbridge-perf "
        "and do not state them"
    ]


def _memory_warnings(scn: Scenario) -> list[str]:
    """A warning when the memory model puts the peak over the usable HBM (none when it cannot say)."""
    if scn.gpu is None or scn.model is None:
        return []
    try:
        mem = estimate_memory(scn)
    except InputError:
        return []  # nothing to say about memory for a scenario the model cannot estimate
    if mem.verdict != "does-not-fit":
        return []
    why = dominant_items_text(mem.dominant_items())
    return [
        f"the memory model puts the peak at {mem.peak_bytes / 2**30:.1f} GiB per GPU"
        + (f" ({why})" if why else "")
        + f", over the {(mem.capacity_bytes or 0) / 2**30:.1f} GiB usable: this layout is predicted to run out of "
        "memory (moeplan estimate / moeplan fit)"
    ]


def export_report(
    scenario: Path | None = None,
    flags: ScenarioFlags | None = None,
    fmt: str = "mbridge-overrides",
    megatron_core_version: str | None = None,
    output: Path | None = None,
    force: bool = False,
) -> ExportResult:
    """What Megatron Bridge / Megatron-LM runs for a scenario (nothing is launched or written).

    Args:
        scenario, flags: the scenario and the overrides laid over it.
        fmt: ``mbridge-overrides``, ``mbridge-yaml``, ``mbridge-python``, ``megatron-lm-args`` or ``slurm``.
        megatron_core_version: key spellings for this version (default: the scenario's, else newest known).
        output: where the caller will write the text (``-`` or None: standard output); only checked
            not to be the scenario file itself.
        force: export a layout that breaks a rule too.

    Raises:
        InputError: ``output`` is the scenario file, bad flags or scenario, an unknown format, or a
            format that needs a value the scenario lacks.
    """

    if output is not None and str(output) != "-":  # before any work: a writable path, not the scenario
        check_writable(output, "--output", inputs=(scenario,))
    data, _ = scenario_request(scenario, flags)
    if megatron_core_version:
        data = {**data, "versions": {**(data.get("versions") or {}), "megatron_core": megatron_core_version}}
    scn = load_scenario(data)
    result = validate(scn)
    text, notes = export(scn, fmt)
    broken = [f.rule_id for f in result.errors]
    broken += [r for r in _runtime_errors(data, scn, fmt) if r not in broken]
    if (result.verdict in BROKEN or broken) and not force:
        return ExportResult(text, notes, broken, refused=True)
    return ExportResult(text, notes, broken, warnings=_benchmark_warnings(scn) + _memory_warnings(scn))


def _runtime_errors(data: dict, scn: Scenario, fmt: str) -> list[str]:
    """The rule ids the runtime a format is for breaks beyond the scenario's own framework: Megatron-LM's
    for ``megatron-lm-args`` of a scenario written for Megatron Bridge (e.g. its ``max_position_embeddings``
    assertion, which Bridge's model providers raise for you); none for other formats or frameworks."""
    if fmt != "megatron-lm-args" or scn.framework != "megatron-bridge":
        return []
    # the values the arguments carry: the scenario's resolved layout, stated (Megatron-LM's own defaults,
    # e.g. ETP = TP, would otherwise replace the ones Bridge resolved and the export writes)
    resolved = scn.layout.model_dump(exclude_none=True)
    try:
        mlm = validate(load_scenario({**data, "framework": "megatron-lm", "layout": resolved}))
    except InputError:  # a Bridge-only input: the scenario's own check stands
        return []
    return [f.rule_id for f in mlm.errors]


__all__ = ["EstimateReport", "ExportResult", "estimate_report", "export_report"]
