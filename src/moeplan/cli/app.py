"""The ``moeplan`` command. Exit codes: 0 ok, 1 the scenario breaks a rule, 2 bad input."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from moeplan.errors import InputError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Check, estimate and plan Megatron-Core / Megatron Bridge layouts for MoE training.",
)

EXIT_OK, EXIT_RULE, EXIT_INPUT = 0, 1, 2


def _fail_input(exc: Exception) -> None:
    import sys

    sys.stderr.write(f"error: {exc}\n")
    raise typer.Exit(EXIT_INPUT)


TOP_LEVEL_SET = ("framework", "recipe_defaults", "name")


def _parse_set(items: list[str]) -> dict[str, Any]:
    """``section.key=value`` pairs (value parsed as YAML) → section → key → value; the top-level
    keys ``framework``, ``recipe_defaults`` and ``name``, and every ``versions.*`` value, are taken as
    text."""

    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if sep and key in TOP_LEVEL_SET:
            out[key] = raw
            continue
        if not sep or "." not in key:
            raise InputError(
                "--set",
                item,
                "section.key=value, e.g. layout.recompute_granularity=selective, or framework=..., recipe_defaults=...",
            )
        sec, *path = key.split(".")
        if sec == "versions":
            # version strings stay text: YAML would read 26.10 as the float 26.1
            val = raw
        else:
            from moeplan.spec.scenario import parse_yaml_value

            val = parse_yaml_value(raw)
        node = out.setdefault(sec, {})
        if not isinstance(node, dict):
            raise InputError("--set", item, f"a key under {sec!r}, which was already given a value")
        for part in path[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise InputError("--set", item, "keys that do not overlap")
        node[path[-1]] = val
    return out


def _overrides(model, gpu, num_gpus, seq_length, mbs, gbs, precision, tp, pp, vpp, cp, ep, etp, sets) -> dict:
    ov: dict[str, Any] = {}
    if model is not None:
        ov["model"] = model
    system = {k: v for k, v in (("gpu", gpu), ("num_gpus", num_gpus)) if v is not None}
    training = {
        k: v
        for k, v in (
            ("seq_length", seq_length),
            ("micro_batch_size", mbs),
            ("global_batch_size", gbs),
            ("precision", precision),
        )
        if v is not None
    }
    from moeplan.spec.layout import PARALLEL_DIMS

    flags = {"TP": tp, "PP": pp, "VPP": vpp, "CP": cp, "EP": ep, "ETP": etp}
    layout = {PARALLEL_DIMS[d]: v for d, v in flags.items() if v is not None}
    # --set first, then the dedicated flags on top: a flag wins over --set, both over the file
    for sec, vals in _parse_set(sets or []).items():
        if sec in TOP_LEVEL_SET:
            ov[sec] = vals
        elif sec == "model":
            raise InputError("--set", sec, "--model NAME for the model; model_overrides.KEY=VALUE for its fields")
        else:
            ov.setdefault(sec, {}).update(vals)
    for sec, vals in (("system", system), ("training", training), ("layout", layout)):
        ov.setdefault(sec, {}).update(vals)
    return ov


# Shared options, defined once (typer reads the Annotated metadata).
ScenarioArg = Annotated[Optional[Path], typer.Argument(help="Scenario YAML (model, system, training, layout).")]
ModelOpt = Annotated[Optional[str], typer.Option("--model", "-m", help="HF id, short name or config.json path.")]
GpuOpt = Annotated[Optional[str], typer.Option("--gpu", help="a100, h100, h200, b200, b300, gb200, gb300.")]
NumGpusOpt = Annotated[Optional[int], typer.Option("--num-gpus", "-n", min=1, help="World size.")]
SeqOpt = Annotated[Optional[int], typer.Option("--seq-length", "-s", min=1, help="Tokens per sequence.")]
MbsOpt = Annotated[Optional[int], typer.Option("--mbs", min=1, help="micro_batch_size (sequences).")]
GbsOpt = Annotated[Optional[int], typer.Option("--gbs", min=1, help="global_batch_size (sequences).")]
PrecisionOpt = Annotated[
    Optional[str],
    typer.Option("--precision", help="bf16, fp8-tensorwise, fp8-delayed, fp8-blockwise, mxfp8, nvfp4."),
]
TpOpt = Annotated[Optional[int], typer.Option("--tp", min=1, help="tensor_model_parallel_size")]
PpOpt = Annotated[Optional[int], typer.Option("--pp", min=1, help="pipeline_model_parallel_size")]
VppOpt = Annotated[Optional[int], typer.Option("--vpp", min=1, help="virtual_pipeline_model_parallel_size")]
CpOpt = Annotated[Optional[int], typer.Option("--cp", min=1, help="context_parallel_size")]
EpOpt = Annotated[Optional[int], typer.Option("--ep", min=1, help="expert_model_parallel_size")]
EtpOpt = Annotated[Optional[int], typer.Option("--etp", min=1, help="expert_tensor_parallel_size")]
SetOpt = Annotated[
    Optional[list[str]],
    typer.Option(
        "--set",
        help="Any other key: section.key=value (YAML value), e.g. layout.recompute_modules=\\[moe_act,layernorm]; "
        "nested: system.gpu_overrides.usable_hbm_gib=75; top-level: recipe_defaults=mbridge-perf. Repeatable.",
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable output.")]
CalibrationOpt = Annotated[
    Optional[Path], typer.Option("--calibration", help="A profile from `moeplan calibrate` for step times.")
]


def load_workload(path: Path) -> dict:
    """The ``workload:`` mapping of a YAML written by ``moeplan vlm-stats -o`` (InputError)."""
    from moeplan.spec.scenario import load_scenario_file

    try:
        data = load_scenario_file(path)
    except InputError as exc:
        raise InputError("--workload", str(path), f"a readable workload YAML ({exc.allowed})") from None
    w = data.get("workload")
    if not isinstance(w, dict):
        raise InputError("--workload", str(path), "a YAML file with a workload: mapping (moeplan vlm-stats -o FILE)")
    return w


def _step_constants(calibration: Path | None):
    """The step-time constants: a calibration profile, or None for the packaged ones (InputError)."""
    if calibration is None:
        return None
    from moeplan.model.calibrate import load_profile

    return load_profile(calibration)


@app.command()
def check(
    scenario: ScenarioArg = None,
    model: ModelOpt = None,
    gpu: GpuOpt = None,
    num_gpus: NumGpusOpt = None,
    seq_length: SeqOpt = None,
    mbs: MbsOpt = None,
    gbs: GbsOpt = None,
    precision: PrecisionOpt = None,
    tp: TpOpt = None,
    pp: PpOpt = None,
    vpp: VppOpt = None,
    cp: CpOpt = None,
    ep: EpOpt = None,
    etp: EtpOpt = None,
    sets: SetOpt = None,
    as_json: JsonOpt = False,
    from_: Annotated[
        Optional[str],
        typer.Option(
            "--from",
            help="Read SCENARIO as mbridge-yaml, mbridge-overrides, "
            "megatron-lm-args or megatron-log (the argument dump).",
        ),
    ] = None,
) -> None:
    """Check a layout against every Megatron-Core rule; each finding has a rule id and a fix.

    Exit code 0 when no rule is broken (warnings allowed), 1 when one is, 2 on bad input."""
    from moeplan import load_scenario, validate

    import_notes: list[str] = []
    try:
        ov = _overrides(model, gpu, num_gpus, seq_length, mbs, gbs, precision, tp, pp, vpp, cp, ep, etp, sets)
        source: Any = scenario
        if from_ is not None:
            from moeplan.io.imports import import_config

            if scenario is None or not scenario.is_file():
                raise InputError("scenario", str(scenario), f"an existing {from_} file")
            try:
                text = scenario.read_text(encoding="utf-8")
            except (UnicodeDecodeError, OSError) as exc:
                raise InputError("scenario", str(scenario), f"a readable text file ({type(exc).__name__})") from None
            source, import_notes = import_config(text, from_)
        scn = load_scenario(source, ov)
        result = validate(scn)
    except InputError as exc:
        _fail_input(exc)
        return
    from moeplan.cli import render

    for note in import_notes:
        import sys

        sys.stderr.write(f"note: {note}\n")
    if as_json:
        render.print_json({**result.to_dict(), "import_notes": import_notes} if from_ else result.to_dict())
    else:
        render.render_check(result)
    raise typer.Exit(EXIT_RULE if result.verdict in ("invalid", "unsupported") else EXIT_OK)


@app.command()
def estimate(
    scenario: ScenarioArg = None,
    model: ModelOpt = None,
    gpu: GpuOpt = None,
    num_gpus: NumGpusOpt = None,
    seq_length: SeqOpt = None,
    mbs: MbsOpt = None,
    gbs: GbsOpt = None,
    precision: PrecisionOpt = None,
    tp: TpOpt = None,
    pp: PpOpt = None,
    vpp: VppOpt = None,
    cp: CpOpt = None,
    ep: EpOpt = None,
    etp: EtpOpt = None,
    sets: SetOpt = None,
    workload: Annotated[
        Optional[Path], typer.Option("--workload", help="A workload YAML from `moeplan vlm-stats -o` (VLMs).")
    ] = None,
    calibration: CalibrationOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Estimate peak memory per GPU for every pipeline stage, itemised, against the GPU's usable HBM,
    and (with a global batch size) step time, tokens/s/GPU, model TFLOP/s/GPU and MFU, itemised.

    Exit code 0 when it fits (or is tight), 1 when it does not fit, 2 on bad input."""
    from moeplan import estimate_memory, estimate_step, load_scenario, validate

    try:
        ov = _overrides(model, gpu, num_gpus, seq_length, mbs, gbs, precision, tp, pp, vpp, cp, ep, etp, sets)
        if workload is not None:
            ov["workload"] = load_workload(workload)
        scn = load_scenario(scenario, ov)
        checked = validate(scn)
        try:
            mem = estimate_memory(scn)
        except InputError:
            if checked.verdict not in ("invalid", "unsupported"):
                raise
            # the layout does not fold into the world: the rules say why (exit 1, as `check`)
            from moeplan.cli import render

            if as_json:
                errors = [f.to_dict() for f in checked.errors]
                render.print_json(
                    {
                        "scenario": scn.summary(),
                        "check": {"verdict": checked.verdict, "errors": errors},
                        "memory": None,
                        "throughput": None,
                    }
                )
            else:
                render.render_check(checked)
            raise typer.Exit(EXIT_RULE) from None
        consts = _step_constants(calibration)
        broken = checked.verdict in ("invalid", "unsupported")
        throughput = None
        if scn.training.global_batch_size is not None and not broken:
            throughput = estimate_step(scn, consts).to_dict()
            if scn.model is not None and scn.model.vision is not None:
                mock = estimate_step(scn, consts, vision_patches=0.0)
                throughput["mock_data_tokens_per_s_per_gpu"] = mock.tokens_per_s_per_gpu
                throughput["real_data_workload"] = "given" if scn.input.workload is not None else "planning default"
            if calibration is not None:
                throughput["assumptions"].append(f"step time from the calibration profile {calibration}")
    except InputError as exc:
        _fail_input(exc)
        return
    from moeplan.cli import render

    errors = [f.to_dict() for f in checked.errors]
    warnings = [f.to_dict() for f in checked.findings if f.severity == "warning"]
    out = {
        "scenario": scn.summary(),
        "check": {"verdict": checked.verdict, "errors": errors, "warnings": warnings},
        "memory": mem.to_dict(),
        "throughput": throughput,
    }
    if as_json:
        render.print_json(out)
    else:
        render.render_memory(out["scenario"], out["memory"], errors, warnings)
        render.render_throughput(throughput, broken)
    raise typer.Exit(EXIT_RULE if (mem.verdict == "does-not-fit" or broken) else EXIT_OK)


@app.command("export")
def export_cmd(
    scenario: ScenarioArg = None,
    fmt: Annotated[
        str,
        typer.Option(
            "--format", "-f", help="mbridge-overrides, mbridge-yaml, mbridge-python, megatron-lm-args, slurm."
        ),
    ] = "mbridge-overrides",
    output: Annotated[
        Optional[Path], typer.Option("--output", "-o", help="Write here (atomically) instead of stdout.")
    ] = None,
    model: ModelOpt = None,
    gpu: GpuOpt = None,
    num_gpus: NumGpusOpt = None,
    seq_length: SeqOpt = None,
    mbs: MbsOpt = None,
    gbs: GbsOpt = None,
    precision: PrecisionOpt = None,
    tp: TpOpt = None,
    pp: PpOpt = None,
    vpp: VppOpt = None,
    cp: CpOpt = None,
    ep: EpOpt = None,
    etp: EtpOpt = None,
    sets: SetOpt = None,
    megatron_core_version: Annotated[
        Optional[str],
        typer.Option("--megatron-core-version", help="Key spellings for this version (default: newest known)."),
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Export even when the layout breaks a rule.")] = False,
) -> None:
    """Write what Megatron Bridge / Megatron-LM runs for a scenario (nothing is launched).

    Exit code 0 on success, 1 when the layout breaks a rule (use --force to export anyway), 2 on bad input."""
    import sys

    from moeplan import load_scenario, validate
    from moeplan.io.export import export

    try:
        same = output is not None and scenario is not None and str(output) != "-"
        if same and Path(output).resolve() == Path(scenario).resolve():
            raise InputError("--output", str(output), "a path other than the scenario file it is exported from")
        ov = _overrides(model, gpu, num_gpus, seq_length, mbs, gbs, precision, tp, pp, vpp, cp, ep, etp, sets)
        if megatron_core_version:
            ov.setdefault("versions", {})["megatron_core"] = megatron_core_version
        scn = load_scenario(scenario, ov)
        result = validate(scn)
        text, notes = export(scn, fmt)
    except InputError as exc:
        _fail_input(exc)
        return
    if result.verdict in ("invalid", "unsupported") and not force:
        sys.stderr.write(
            "error: the layout breaks rules (moeplan check for details): "
            + "; ".join(f.rule_id for f in result.errors)
            + " — use --force to export anyway\n"
        )
        raise typer.Exit(EXIT_RULE)
    for note in notes:
        sys.stderr.write(f"note: {note}\n")
    if scn.gpu is not None and scn.model is not None:
        from moeplan import estimate_memory

        try:
            mem = estimate_memory(scn)
        except InputError:
            mem = None  # nothing to say about memory for a scenario the model cannot estimate
        if mem is not None and mem.verdict == "does-not-fit":
            sys.stderr.write(
                f"warning: the memory model puts the peak at {mem.peak_bytes / 2**30:.1f} GiB per GPU, over the "
                f"{(mem.capacity_bytes or 0) / 2**30:.1f} GiB usable: this layout is predicted to run out of memory "
                "(moeplan estimate / moeplan fit)\n"
            )
    if output is None or str(output) == "-":
        sys.stdout.write(text)
        return
    try:
        _write_atomically(output, text, executable=fmt == "slurm")
    except InputError as exc:
        _fail_input(exc)


def check_writable(output: Path, field: str = "--output") -> Path:
    """The resolved target of an output path that can be written (checked before any work, so that
    one bad path of several leaves nothing half-written).

    Raises:
        InputError: an empty path, a directory, a missing directory, or not a regular file.
    """
    import os

    if not str(output).strip():
        raise InputError(field, str(output), "a file path, or - for standard output")
    target = Path(os.path.realpath(output))
    if target.is_dir():
        raise InputError(field, str(output), "a file path (it is a directory)")
    if not target.parent.is_dir():
        raise InputError(field, str(output), "a path in an existing directory")
    if target.exists() and not target.is_file():
        raise InputError(field, str(output), "a regular file (use - for standard output)")
    return target


def _write_atomically(output: Path, text: str, executable: bool = False, field: str = "--output") -> None:
    """Write ``text`` to ``output`` through a temporary file in the same directory and a rename:
    readers never see half a file. A symlink is followed (its target is replaced); an existing file
    keeps its permissions; a new one gets the umask's (0644 with the usual 022).

    Raises:
        InputError: an empty path, a directory, a missing directory, or an unwritable location.
    """
    import os
    import tempfile

    target = check_writable(output, field)
    umask = os.umask(0)
    os.umask(umask)
    mode = target.stat().st_mode & 0o777 if target.exists() else (0o777 if executable else 0o666) & ~umask
    try:
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
    except OSError as exc:
        raise InputError(field, str(output), f"a writable directory ({exc.strerror})") from None
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except OSError as exc:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise InputError(field, str(output), f"a writable file ({exc.strerror})") from None


@app.command("log")
def log_cmd(
    logs: Annotated[list[Path], typer.Argument(help="Megatron-LM / Megatron Bridge training log(s).")],
    as_json: JsonOpt = False,
) -> None:
    """Steady-state statistics of training logs (iteration time, TFLOP/s, tokens/s, loss, grad norm,
    skipped/NaN iterations, memory) and the configuration read from the argument dump."""
    from moeplan.cli import render
    from moeplan.diagnose import log_config, read_text_file
    from moeplan.diagnose.logs import derive_tokens_per_s, parse_log

    out = []
    for path in logs:
        try:
            text = read_text_file(path)
        except InputError as exc:
            _fail_input(exc)
            return
        st = parse_log(text)
        config, notes = log_config(text)
        entry = {"log": str(path), **derive_tokens_per_s(st.summary(), config), "config": config}
        if config is not None:
            entry["config_notes"] = notes
        out.append(entry)
    if as_json:
        render.print_json(out)  # always a list, one entry per log
    else:
        render.render_logs(out)


@app.command("compare")
def compare_cmd(
    log_a: Annotated[Path, typer.Argument(help="Baseline run's training log (A).")],
    log_b: Annotated[Path, typer.Argument(help="Run to judge (B).")],
    scenario: Annotated[
        Optional[Path],
        typer.Option("--scenario", help="Model/GPU/world size the logs lack; needed to rank causes."),
    ] = None,
    alpha: Annotated[float, typer.Option("--alpha", help="Significance level of the test.", min=1e-6, max=0.5)] = 0.01,
    min_effect: Annotated[
        float, typer.Option("--min-effect", help="Smallest relative change reported (0.005 = 0.5 %).", min=0.0, max=1.0)
    ] = 0.005,
    plot: Annotated[
        Optional[Path], typer.Option("--plot", help="Write iteration time and memory over steps (.png, .svg, .pdf).")
    ] = None,
    calibration: CalibrationOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Is run B slower or heavier than run A beyond noise (Mann-Whitney U), what changed between their
    configurations, and which change our models blame. Exit 1 when B is slower."""
    from moeplan import load_scenario
    from moeplan.cli import render
    from moeplan.diagnose import log_config, read_text_file
    from moeplan.diagnose.compare import compare_runs
    from moeplan.diagnose.logs import parse_log
    from moeplan.spec.scenario import load_scenario_file

    try:
        if plot is not None and plot.suffix.lower() not in (".png", ".svg", ".pdf"):
            raise InputError("--plot", str(plot), "a file ending in .png, .svg or .pdf")
        if plot is not None and plot.resolve() in (log_a.resolve(), log_b.resolve()):
            raise InputError("--plot", str(plot), "a path other than the input logs")
        texts = [read_text_file(log_a), read_text_file(log_b)]
        stats = [parse_log(t) for t in texts]
        configs = [log_config(t)[0] for t in texts]
        base = load_scenario_file(scenario) if scenario is not None else None
        if base is not None:
            load_scenario(base)  # a broken --scenario is the user's mistake: exit 2 here, not a note later
        consts = _step_constants(calibration)
        cmp = compare_runs(stats[0], stats[1], configs[0], configs[1], base, alpha, min_effect, consts)
        if base is not None:
            from moeplan.diagnose.compare import model_mismatch

            m = load_scenario(base).model
            for name, t in (("A", texts[0]), ("B", texts[1])):
                diff = model_mismatch(t, m) if m is not None else []
                if diff:
                    cmp.notes.insert(
                        0,
                        f"WARNING: log {name}'s argument dump disagrees with the --scenario model ("
                        + "; ".join(diff)
                        + "): the causes are ranked for the scenario's model, not the run's",
                    )
        if consts is not None:
            cmp.notes.append(f"step times from the calibration profile {calibration}")
        if plot is not None:
            from moeplan.diagnose.plot import plot_runs

            plot_runs(stats[0], stats[1], plot, labels=(str(log_a), str(log_b)))
    except InputError as exc:
        _fail_input(exc)
        return
    out = {"a": str(log_a), "b": str(log_b), **cmp.to_dict(), "plot": str(plot) if plot else None}
    if as_json:
        render.print_json(out)
    else:
        render.render_compare(out)
    if cmp.time.verdict == "higher":
        raise typer.Exit(1)


@app.command("oom")
def oom_cmd(
    source: Annotated[str, typer.Argument(help="A log file holding a CUDA OOM message, or the message itself.")],
    scenario: Annotated[
        Optional[Path],
        typer.Option("--scenario", help="The run's scenario: blame a stage and a term with the memory model."),
    ] = None,
    calibration: CalibrationOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Read a CUDA out-of-memory message: fragmentation or real demand, and what to change."""
    from moeplan import estimate_memory, load_scenario
    from moeplan.cli import render
    from moeplan.diagnose.oom import parse_oom, reconcile_with_model

    try:
        from moeplan.diagnose import read_text_file

        _step_constants(calibration)  # a bad profile is refused even where no step time is needed
        text = source
        try:
            is_path = "\n" not in source and len(source) < 4096 and Path(source).exists()
        except (OSError, ValueError):
            is_path = False  # too long for a path, NUL byte, ...: the argument is the message
        if is_path:
            text = read_text_file(Path(source), "oom")
        elif "Tried to allocate" not in source and not any(ch.isspace() for ch in source):
            raise InputError("oom", source, "an existing log file, or the text of a CUDA out-of-memory message")
        rep = parse_oom(text)
        blame = None
        if scenario is not None:
            from moeplan.diagnose import log_config
            from moeplan.diagnose.compare import model_mismatch
            from moeplan.diagnose.fixes import rank_memory_fixes
            from moeplan.spec.scenario import _deep_merge, load_scenario_file

            data = load_scenario_file(scenario)
            notes: list[str] = []
            cfg, _ = log_config(text)  # the run's own argument dump, when the OOM log holds one
            if cfg is not None:
                data = _deep_merge(data, cfg)
                notes.append("layout and training from the log's argument dump, over --scenario")
            s_run = load_scenario(data)
            if s_run.model is not None and (diff := model_mismatch(text, s_run.model)):
                notes.append(
                    "WARNING: the log's argument dump disagrees with the --scenario model (" + "; ".join(diff) + ")"
                )
            mem = estimate_memory(s_run)
            peak = mem.peak_stage
            rep, more = reconcile_with_model(rep, peak.total_bytes, mem.capacity_bytes)
            notes += more
            held = rep.held_bytes
            if held is not None and held + rep.requested_bytes > peak.total_bytes * 1.05:
                gap = held + rep.requested_bytes - peak.total_bytes
                notes.append(
                    f"the memory model predicts a {peak.total_bytes / 2**30:.2f} GiB peak, but the process held "
                    f"{held / 2**30:.2f} GiB and asked for {rep.requested_bytes / 2**30:.2f} GiB more: the model "
                    f"underestimates this run by at least {gap / 2**30:.2f} GiB, so 'fits' below is the model's view"
                )
            terms = sorted(
                ((cat, name, v) for cat, items in peak.items.items() for name, v in items.items()), key=lambda x: -x[2]
            )[:3]
            blame = {
                "stage": peak.stage,
                "predicted_peak_bytes": peak.total_bytes,
                "largest_terms": [{"category": c, "part": n, "bytes": int(v)} for c, n, v in terms],
                "capacity_bytes": mem.capacity_bytes,
                "notes": notes,
            }
            if rep.fragmentation is not True:
                consts = _step_constants(calibration)
                blame["fixes"], blame["rejected_fixes"] = rank_memory_fixes(data, consts)
                if consts is not None:
                    notes.append(f"step times from the calibration profile {calibration}")
    except InputError as exc:
        _fail_input(exc)
        return
    out = {**rep.to_dict(), "blame": blame}
    if as_json:
        render.print_json(out)
    else:
        render.render_oom(out)


def _runs_from_logs(logs: list[Path], scenario: Path | None) -> list:
    """Measured runs from training logs laid over a scenario (tokens/s/GPU as printed, else
    GBS · seq / (median steady iteration time · world size))."""
    from moeplan import load_scenario
    from moeplan.diagnose import log_config, read_text_file
    from moeplan.diagnose.logs import parse_log, tokens_per_s_per_gpu
    from moeplan.model.calibrate import Run
    from moeplan.model.step import release_of
    from moeplan.spec.scenario import _deep_merge, load_scenario_file

    if scenario is None:
        raise InputError("--scenario", None, "a scenario (model, GPU, world size) for calibrating from logs")
    base = load_scenario_file(scenario)
    runs = []
    import math

    for path in logs:
        text = read_text_file(path)
        st = parse_log(text)
        merged = _deep_merge(base, log_config(text)[0] or {})
        banner = (st.environment or {}).get("container_release")
        if banner and not (merged.get("versions") or {}).get("container"):
            # the log's own container banner (NVIDIA Release 26.04) names the release it measured
            merged = _deep_merge(merged, {"versions": {"container": banner}})
        try:
            s = load_scenario(merged)
        except InputError as exc:
            raise InputError(f"{path}: {exc.field}", exc.value, exc.allowed, exc.hint) from None
        summ = st.summary()
        if "tokens_per_s_per_gpu" in summ:
            meas = summ["tokens_per_s_per_gpu"]["median"]
        elif "iteration_time_ms" in summ and s.training.global_batch_size and s.training.seq_length and s.num_gpus:
            t = s.training
            meas = tokens_per_s_per_gpu(
                t.global_batch_size, t.seq_length, summ["iteration_time_ms"]["median"], s.num_gpus
            )
        elif st.iterations:
            # iteration lines, but none with a possible time (zero, negative or non-finite): the log's fault
            raise InputError(f"log {path}", "no usable iteration time", "iteration times > 0 (and finite)")
        else:
            raise InputError("log", str(path), "iteration times and a scenario with GBS, seq_length and num_gpus")
        if not (isinstance(meas, (int, float)) and math.isfinite(meas) and 0 < meas <= 1e7):
            raise InputError(f"log {path}", meas, "a positive measured throughput (iteration time > 0, tokens/s > 0)")
        if not s.folds:
            raise InputError(f"{path}: system.num_gpus", s.num_gpus, "a world size divisible by TP·PP·CP and ETP·EP·PP")
        runs.append(Run(str(path), s, meas, release_of(s)))
    return runs


@app.command("calibrate")
def calibrate_cmd(
    sources: Annotated[list[Path], typer.Argument(help="A runs YAML (as published_runs.yaml) or training logs.")],
    scenario: Annotated[
        Optional[Path], typer.Option("--scenario", help="Model/GPU/world size for logs (their dumps laid over it).")
    ] = None,
    constants: Annotated[
        str, typer.Option("--constants", help="scale: one factor per release; all: every shared constant too.")
    ] = "scale",
    holdout_by: Annotated[
        Optional[str], typer.Option("--holdout", help="Also fit leaving out each release (or gpu) and test on it.")
    ] = None,
    start: Annotated[
        str, typer.Option("--start", help="packaged: the built-in fitted constants; defaults: the physical priors.")
    ] = "packaged",
    output: Annotated[Optional[Path], typer.Option("-o", "--output", help="Write the profile (JSON) here.")] = None,
    max_nfev: Annotated[int, typer.Option("--max-evaluations", min=5, max=5000, help="Fit budget.")] = 200,
    as_json: JsonOpt = False,
) -> None:
    """Fit the step-time model's efficiency constants to measured runs and write a calibration profile
    (`estimate`, `plan`, `fit`, `sweep`, `compare` and `oom` take it with --calibration). Refuses to over-fit."""
    from rich.progress import Progress, SpinnerColumn, TextColumn

    from moeplan.cli import render
    from moeplan.model.calibrate import fit, holdout, load_runs_yaml, profile_json
    from moeplan.model.constants import TimeConstants, load_constants

    try:
        if len(sources) == 1 and sources[0].suffix.lower() in (".yaml", ".yml", ".json"):
            runs = load_runs_yaml(load_scenario_file_any(sources[0]))
        else:
            runs = _runs_from_logs(sources, scenario)
        if start not in ("packaged", "defaults"):
            raise InputError("--start", start, "packaged or defaults")
        base = load_constants() if start == "packaged" else TimeConstants()
        with Progress(
            SpinnerColumn(), TextColumn("{task.description}"), transient=True, console=render.console(True)
        ) as prog:
            task = prog.add_task("fitting", total=None)

            def tick(n: int) -> None:
                prog.update(task, description=f"fitting: {n} model evaluations over {len(runs)} runs")

            c, info = fit(runs, base, constants, max_nfev, tick)
            folds = holdout(runs, base, holdout_by, constants, max_nfev, tick) if holdout_by else None
        if output is not None:
            _write_atomically(output, profile_json(c))
    except InputError as exc:
        _fail_input(exc)
        return
    out = {"fit": info, "holdout": folds, "profile": str(output) if output else None}
    if as_json:
        render.print_json(out)
    else:
        render.render_calibration(out)


def load_scenario_file_any(path: Path) -> object:
    """A YAML/JSON document of any shape (runs files are lists or mappings)."""
    from moeplan.diagnose import read_text_file
    from moeplan.spec.scenario import load_yaml_text

    return load_yaml_text(read_text_file(path, "runs"), "runs", str(path))


@app.command("doctor")
def doctor_cmd(
    scenario: Annotated[
        Optional[Path], typer.Option("--scenario", help="Check this machine against the scenario's needs.")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """This machine's GPUs, driver, CUDA, NCCL, torch / Transformer Engine / megatron-core / bridge /
    DeepEP versions, NVLink topology and environment; with --scenario, whether it can run it.
    Exit 1 when something the scenario needs is missing."""
    from moeplan import load_scenario
    from moeplan.cli import render
    from moeplan.diagnose.doctor import check_environment, collect_environment, known_issue_findings
    from moeplan.spec.scenario import load_scenario_file

    try:
        data = load_scenario_file(scenario) if scenario is not None else None
        s = load_scenario(data) if data is not None else None
    except InputError as exc:
        _fail_input(exc)
        return
    rep = collect_environment()
    findings = check_environment(rep, s)
    if data is not None:
        findings += known_issue_findings(rep, data)
    out = {**rep.to_dict(), "findings": findings}
    if as_json:
        render.print_json(out)
    else:
        render.render_doctor(out)
    if any(f["severity"] == "error" for f in findings):
        raise typer.Exit(1)


@app.command()
def models(as_json: bool = typer.Option(False, "--json", help="Machine-readable output.")) -> None:
    """List the built-in models with exact parameter counts (total / active) and published figures."""
    from moeplan import COUNTING_CONVENTIONS, count_params, get_model, list_models
    from moeplan.cli import render

    rows = []
    for hf_id in list_models():
        m = get_model(hf_id)
        c = count_params(m)
        conv = COUNTING_CONVENTIONS.get(hf_id)
        pub = m.published_params
        kind = (
            ("VLM " if m.is_vlm else "")
            + ("MoE" if m.is_moe else "dense")
            + (" MLA" if m.multi_latent_attention else "")
            + (" hybrid-GDN" if m.has_linear_attention else "")
        )
        rows.append(
            {
                "id": hf_id,
                "kind": kind,
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
    if as_json:
        render.print_json(rows)
    else:
        render.render_models(rows)


@app.command()
def gpus(
    gpu_id: Optional[str] = typer.Argument(None, help="Show one GPU in full, with the source of every figure."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """List the built-in GPUs: usable HBM (and its source), dense peaks, NVLink domain, NIC, features."""
    from moeplan import get_gpu, list_gpus
    from moeplan.cli import render

    try:
        rows = [get_gpu(gpu_id).model_dump()] if gpu_id else [g.model_dump() for g in list_gpus()]
    except InputError as exc:
        _fail_input(exc)
        return
    if as_json:
        render.print_json(rows[0] if gpu_id else rows)
    elif gpu_id:
        render.render_gpu_detail(rows[0])
    else:
        render.render_gpus(rows)


@app.command()
def params(
    scenario: ScenarioArg = None,
    model: ModelOpt = None,
    tp: TpOpt = None,
    pp: PpOpt = None,
    vpp: VppOpt = None,
    ep: EpOpt = None,
    etp: EtpOpt = None,
    sets: SetOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Exact parameter counts of a model: by kind, total, active, and per rank for each PP stage."""
    from moeplan import count_params, load_scenario, stage_params
    from moeplan.cli import render

    try:
        ov = _overrides(model, None, None, None, None, None, None, tp, pp, vpp, None, ep, etp, sets)
        scn = load_scenario(scenario, ov)
        if scn.model is None:
            raise InputError("model", None, "a model (--model or model: in the scenario)")
        counts = count_params(scn.model).to_dict()
        stages = [st.to_dict() for st in stage_params(scn)]
    except InputError as exc:
        _fail_input(exc)
        return
    import sys

    from moeplan import validate

    # the counts are exact for the split as given; say when Megatron would refuse that split
    split_errors = [f for f in validate(scn).errors if f.rule_id.startswith("pipeline.")]
    for f in split_errors:
        sys.stderr.write(f"warning: {f.rule_id}: {f.message} (moeplan check gives the fix)\n")
    if as_json:
        render.print_json(
            {
                "model": scn.model.name,
                "params": counts,
                "per_rank": stages,
                "scenario": scn.summary(),
                "split_errors": [f"{f.rule_id}: {f.message}" for f in split_errors],
            }
        )
    else:
        render.render_params(scn.model.name, counts, stages)


@app.command("rules")
def rules_cmd(as_json: bool = typer.Option(False, "--json", help="Machine-readable output.")) -> None:
    """List every rule: id, error class, Megatron source, statement."""
    from moeplan import RULES
    from moeplan.cli import render

    rows = [{"rule_id": r.rule_id, "kind": r.kind, "source": r.source, "summary": r.summary} for r in RULES.values()]
    if as_json:
        render.print_json(rows)
    else:
        render.render_rules(rows)


from moeplan.cli import plan_cmds  # noqa: E402,F401 - registers plan, fit, recipes


def main() -> None:
    """Console-script entry point. Unexpected errors (moeplan bugs) exit with code 3 and one line,
    so that scripts can tell them from a broken rule (1) or bad input (2)."""
    import sys

    try:
        app(standalone_mode=True)
    except SystemExit:
        raise
    except Exception as exc:  # noqa: BLE001 - last resort: never a traceback for the user
        sys.stderr.write(f"internal error (a moeplan bug, please report): {type(exc).__name__}: {exc}\n")
        raise SystemExit(3) from None


if __name__ == "__main__":
    main()
