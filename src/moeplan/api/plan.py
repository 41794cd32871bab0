"""Reports of ``plan``, ``fit``, ``recipes`` and ``sweep``: the request a planning command is asked
(scenario file + flags + ``--tokens-per-step``) and what the planner answers.

The planner modules are imported inside the functions that use them (``moeplan --help`` stays fast).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

from moeplan.api.side_inputs import load_step_constants, read_config, scenario_request
from moeplan.errors import InputError, MoeplanError, UnknownNameError
from moeplan.i18n.messages import Message, msg
from moeplan.inputs.layout import LayoutSpec
from moeplan.inputs.loading import dump_yaml
from moeplan.inputs.megatron_keys import describe_unmodelled
from moeplan.inputs.overrides import ScenarioFlags
from moeplan.inputs.schema import split_unmodelled
from moeplan.inputs.training import batch_for_tokens, says_default_batch
from moeplan.inputs.versions import CUDA_GRAPH_MODULES_MCORE
from moeplan.io.write import atomic_directory, check_writable, resolve_output, write_atomically, write_file_in
from moeplan.model.memory import estimate_memory
from moeplan.plan import plan, sweep
from moeplan.plan.changes import ENV_EDIT, apply_check_fixes, apply_edits, edit_sections
from moeplan.plan.fit import fit_layout
from moeplan.plan.report import write_report
from moeplan.plan.starting_points import list_recipes
from moeplan.resolve.assumptions import default_batch_assumption
from moeplan.resolve.load import load_scenario
from moeplan.rules import validate

#: ``progress(done, total)``, called as the search advances
Progress = Callable[[int, int], None]


def plan_request(
    scenario: Path | dict | None = None,
    flags: ScenarioFlags | None = None,
    workload: Path | None = None,
    tokens_per_step: int | None = None,
) -> tuple[dict, str | None]:
    """The scenario mapping a planning command is asked: the file (if any) with the flags laid over
    it, the workload under ``workload:``, and ``tokens_per_step`` (or ``flags.tokens_per_step``)
    turned into a global batch size (:func:`moeplan.api.side_inputs.scenario_request`).

    Returns:
        (mapping, note): the note says how the batch was rounded when ``tokens_per_step`` is not a
        multiple of the sequence length (else None).

    Raises:
        InputError: both ``flags.gbs`` and ``tokens_per_step``, bad flags, an unreadable scenario or
            workload, ``tokens_per_step`` without a sequence length or below one sequence.
    """
    data, notes = scenario_request(scenario, flags, workload, tokens_per_step=tokens_per_step)
    return data, (notes[0] if notes else None)


def _searched_request(
    scenario: Path | None,
    flags: ScenarioFlags | None,
    workload: Path | None,
    tokens_per_step: int | None,
    from_format: str | None,
    hold: list[str] | tuple[str, ...],
    free: list[str] | tuple[str, ...],
) -> tuple[dict, list[str], list[str]]:
    """The request :func:`plan_report` searches: read (``--from`` imports it first), its unmodelled keys
    set aside, the check's fixes of held settings applied (:func:`fixed_held_settings`) and only the
    held keys kept (:func:`held_keys`). Returns (request, plan notes, import notes)."""
    source: Path | dict | None = scenario
    import_notes: list[str] = []
    if from_format is not None:
        source, import_notes = read_config(scenario, from_format)
    data, rounding = plan_request(source, flags, workload, tokens_per_step)
    data = split_unmodelled(data)  # keys moeplan does not model: carried, never searched or held
    data, fixed_note = fixed_held_settings(data)
    as_given = as_given_does_not_fit(data)
    if hold or free:
        lay = data.get("layout") or {}
        data = {**data, "layout": {k: lay[k] for k in held_keys(lay, hold, free)}}
    return data, [n for n in (rounding, fixed_note, as_given) if n], import_notes


#: the layout keys a request states when it is a whole layout (a published recipe, a saved scenario)
_WHOLE_LAYOUT = frozenset({"tensor_model_parallel_size", "pipeline_model_parallel_size"})


def as_given_does_not_fit(data: dict) -> Message | None:
    """A note when the request is a whole layout (it states TP and PP) whose memory as given (with the
    check's own fixes, as ``estimate`` applies them) is over the GPU's usable HBM: the plan then
    changes what the request leaves out (recompute, offload, ...) to fit, and says that the layout as
    given does not fit, with its peak GiB per GPU, its stage and the usable GiB. None otherwise (a
    partial request, a layout that fits or may fit, one that does not load)."""
    layout = data.get("layout")
    if not isinstance(layout, dict) or not set(layout) >= _WHOLE_LAYOUT:
        return None
    try:
        errors = validate(load_scenario(data)).errors
        got = apply_check_fixes(data, errors) if errors else None
        mem = estimate_memory(load_scenario(got[0] if got else data))
    except MoeplanError:
        return None
    if mem.verdict != "does-not-fit" or not mem.capacity_bytes:
        return None
    return msg(
        "recipes_2026.as_given_does_not_fit",
        peak=mem.peak_bytes / 2**30,
        stage=mem.peak_stage.stage,
        usable=mem.capacity_bytes / 2**30,
    )


def fixed_held_settings(data: dict) -> tuple[dict, str | None]:
    """The request with the check's own fixes of its held settings applied: each error whose one-change
    fix (``Finding.edits``) sets only keys the request states, or environment variables (e.g.
    ``cross_entropy_fusion_impl: te`` at Megatron-LM ≥ 0.19, ``NCCL_GRAPH_REGISTER=0`` for TE graphs
    with expandable segments), since every candidate would otherwise be rejected for a setting the
    search may not change. An error whose fix sets a key the request leaves out (the pipeline split of
    an undivisible PP) is left to the search, which chooses that key itself. Returns (request, note
    naming the edits and rules) or (``data``, None) when the request does not load or no error has
    such a fix."""
    try:
        errors = validate(load_scenario(data)).errors
    except MoeplanError:
        return data, None
    layout = data.get("layout")
    stated: dict = layout if isinstance(layout, dict) else {}
    held = [(f, f.edits) for f in errors if f.edits is not None and _sets_held_keys(f.edits, stated)]
    if not held:
        return data, None
    edits: dict = {}
    for _, fix in held:
        edits.update(fix)
    fixed = apply_edits(data, edit_sections(edits))
    text = ", ".join(f"{k}: {v}" for k, v in edits.items())
    ids = ", ".join(sorted({f.rule_id for f, _ in held}))
    return fixed, msg("plan.held_fixes_applied", edits=text, ids=ids)


def _sets_held_keys(edits: dict, stated: dict) -> bool:
    """The fix ``edits`` sets only layout keys of ``stated`` and environment variables (no layout key
    the search would otherwise choose)."""
    return all(k in stated or k.startswith(ENV_EDIT) for k in edits)


def _check_plan_options(
    objective: str,
    train_tokens: float | None,
    headroom_gib: float | None,
    save: Path | None,
    report: Path | None,
    inputs: tuple = (),
) -> None:
    """Refuse bad planning options before any search (and before anything is written).

    Raises:
        InputError: an unknown objective, time-to-train without a finite token count, a non-finite
            headroom, or unwritable / identical ``save`` and ``report`` paths.
    """
    if objective not in ("throughput", "time-to-train"):
        raise InputError("--objective", objective, "throughput or time-to-train")
    if objective == "time-to-train" and not train_tokens:
        raise InputError("--train-tokens", None, "a token count with --objective time-to-train")
    if train_tokens is not None and not math.isfinite(train_tokens):
        raise InputError("--train-tokens", train_tokens, "a finite token count")
    if headroom_gib is not None and not math.isfinite(headroom_gib):
        raise InputError("--headroom-gib", headroom_gib, "a finite number of GiB")
    targets = {}
    for path, field in ((save, "--save"), (report, "--report")):
        if path is not None:  # both before the search: a bad one leaves nothing written
            targets[field] = check_writable(path, field, inputs)  # never onto the scenario, workload, profile
    if len(targets) == 2 and targets["--save"] == targets["--report"]:
        raise InputError("--save", str(save), "a different path from --report")


def save_layout(best, path: Path, inputs: tuple = ()) -> None:
    """Write a planned candidate's scenario mapping as YAML (``cuda_graph_scope`` spelled
    ``cuda_graph_modules`` for megatron-core ≥ 0.18, which reads that name).

    Raises:
        InputError: an unwritable path (field ``--save``).
    """

    saved = best.data
    lay = saved.get("layout") or {}
    if "cuda_graph_scope" in lay and best.scenario.mcore_version >= CUDA_GRAPH_MODULES_MCORE:
        lay = {("cuda_graph_modules" if k == "cuda_graph_scope" else k): v for k, v in lay.items()}
        saved = {**saved, "layout": lay}
    write_atomically(path, dump_yaml(saved), field="--save", inputs=inputs)


def _calibration_note(consts, calibration: Path) -> str:
    prov = consts.provenance or {}
    return f"step times from the calibration profile {calibration}" + (
        f" ({prov.get('mode', '?')} fit on {len(prov['run_ids'])} run(s))" if "run_ids" in prov else ""
    )


def plan_report(
    scenario: Path | None = None,
    flags: ScenarioFlags | None = None,
    *,
    tokens_per_step: int | None = None,
    top: int = 5,
    min_dp: int = 1,
    headroom_gib: float | None = None,
    objective: str = "throughput",
    train_tokens: float | None = None,
    report: Path | None = None,
    save: Path | None = None,
    workload: Path | None = None,
    calibration: Path | None = None,
    progress: Progress | None = None,
    hold: list[str] | tuple[str, ...] = (),
    free: list[str] | tuple[str, ...] = (),
    from_format: str | None = None,
) -> dict:
    """Search the layout space and rank what fits by predicted tokens/s/GPU (or time to train), with
    why the winner wins, the rule-of-thumb baseline and a tally of what was rejected. Every layout key
    of the request is held fixed, less those ``free`` names (``all``: every one), or only ``hold``
    (:func:`held_keys`, the rule ``sweep`` follows too).

    Args:
        scenario, flags, workload, tokens_per_step: the request (:func:`plan_request`).
        top: candidates to keep; min_dp: smallest data-parallel size; headroom_gib: GiB kept free per
            GPU (default 5 % of HBM); objective: ``throughput`` or ``time-to-train`` (needs
            ``train_tokens``, tokens).
        report: also write a self-contained HTML report with plots here.
        save: also write the #1 layout as a scenario YAML here (nothing when nothing fits).
        calibration: a profile from ``moeplan calibrate``; progress: ``progress(done, total)``.
        from_format: read ``scenario`` in this format first (:func:`moeplan.api.side_inputs.read_config`);
            what the import assumed or dropped is then ``import_notes`` (list of str).

    Returns:
        :meth:`moeplan.plan.PlanResult.to_dict` (``request``, ``candidates`` [rank, label, dp,
        training, layout, knobs, memory GiB, throughput, explanation, ...], ``baseline``,
        ``rejected``, counts, ``notes``, ``assumptions``, ``seconds``) plus ``report`` / ``saved``
        (paths written). ``candidates`` is empty when nothing fits.

    Raises:
        InputError: bad options or request (field named), unwritable outputs.
    """

    inputs = (scenario, workload, calibration)
    _check_plan_options(objective, train_tokens, headroom_gib, save, report, inputs)
    data, notes, import_notes = _searched_request(scenario, flags, workload, tokens_per_step, from_format, hold, free)
    consts = load_step_constants(calibration)
    res = plan(
        data,
        top=top,
        min_dp=min_dp,
        headroom_gib=headroom_gib,
        train_tokens=train_tokens,
        constants=consts,
        progress=progress,
        objective=objective,
    )
    res.notes.extend(notes)
    if calibration is not None:  # (then consts is the profile's)
        res.notes.append(_calibration_note(consts, calibration))
    out = res.to_dict()
    if data.get("unmodelled_keys"):
        bridge = (data.get("versions") or {}).get("megatron_bridge")
        out["unmodelled_keys"] = describe_unmodelled(data["unmodelled_keys"], bridge)
    if from_format is not None:
        out["import_notes"] = import_notes
    if report is not None:
        write_report(res, report, inputs)
        out["report"] = str(report)
    if save is not None and res.candidates:
        save_layout(res.candidates[0], save, inputs)
        out["saved"] = str(save)
    elif save is not None:
        out["notes"].append(f"--save {save}: nothing written, no layout fits")
    return out


def fit_report(
    scenario: Path | None = None,
    flags: ScenarioFlags | None = None,
    headroom_gib: float | None = None,
    top: int = 8,
    calibration: Path | None = None,
    save: Path | None = None,
    pick: int = 1,
    tokens_per_step: int | None = None,
) -> dict:
    """The smallest changes that make a layout fit: one change at a time, then pairs of those not
    enough alone, each checked by every rule, with the GiB it saves and the step time it costs.

    Args:
        save: also write the ``pick``-th fix (1 = the least costly) as a scenario YAML here.
        tokens_per_step: the global batch in tokens (as ``plan``); with neither it nor a global batch
            size, about 4 Mi tokens are assumed (a note says so) to rank the changes by their cost.

    Returns:
        :func:`moeplan.plan.fit.fit_layout`'s document (``fits_already``, ``peak_gib``,
        ``capacity_gib``, ``limit_gib``, ``check_errors``, ``fixes`` [change, kind,
        changes_numerics, peak_gib, saved_gib, step_time_change_pct, tokens_per_s_per_gpu],
        ``more_fixes``, ``not_enough``, ``rejected``, ...), with ``saved`` (the path and the change
        written) when ``save`` is given and a fix exists.

    Raises:
        InputError: bad flags or scenario, a bad profile, an unwritable ``save`` path, ``pick``
            beyond the fixes found.
    """

    if save is not None:
        check_writable(save, "--save", inputs=(scenario, calibration))
    data, notes = scenario_request(scenario, flags, tokens_per_step=tokens_per_step, default_batch=True)
    out = fit_layout(data, headroom_gib=headroom_gib, top=max(top, pick), constants=load_step_constants(calibration))
    out["notes"] = notes
    if says_default_batch(notes):
        tr = data["training"]
        out["assumes"].insert(0, default_batch_assumption(tr["global_batch_size"], tr["seq_length"]).to_dict())
    if save is not None:
        fixes = out["fixes"]
        if not fixes:
            out.setdefault("notes", []).append(f"--save {save}: nothing written, no change makes it fit")
        elif pick > len(fixes):
            raise InputError("--pick", pick, f"a fix number from 1 to {len(fixes)}")
        else:
            chosen = fixes[pick - 1]
            write_atomically(save, dump_yaml(chosen["scenario"]), field="--save", inputs=(scenario, calibration))
            out["saved"] = {"path": str(save), "change": chosen["change"], "rank": pick}
    return out


def recipes_report(kind: str = "all", model: str | None = None, output_dir: Path | None = None) -> list[dict]:
    """The built-in starting points (guidance layout families and published Megatron Bridge layouts),
    each checked by the rules and estimated (memory; throughput where a batch size is known).

    Args:
        kind: ``all``, ``guidance`` or ``published``; model: only this model (HF id or name).
        output_dir: also write each recipe's scenario as ``<id>.yaml`` here ('/' in ids → '__');
            every target is checked before any is written.

    Returns:
        :func:`moeplan.plan.starting_points.list_recipes` rows (id, source, scenario, check, memory,
        throughput, notes).

    Raises:
        InputError: an unknown kind or model, a target that is not a file, an unwritable folder.
    """

    try:
        if kind not in ("all", "guidance", "published"):
            raise InputError("--kind", kind, "all, guidance or published")
        rows = list_recipes(kind, model)
        if output_dir is not None:
            _write_recipes(rows, output_dir)
    except OSError as exc:
        raise InputError("--write", str(output_dir), f"a writable folder ({exc.strerror})") from None
    return rows


def _write_recipes(rows: list[dict], output_dir: Path) -> None:
    """Write each recipe's scenario into ``output_dir``: a new folder is built under a temporary name
    and renamed into place (all of it or nothing); into an existing folder each file is written
    atomically, every target checked before any is written.

    Raises:
        InputError: a target that is not a regular file, a symlink loop, an unwritable folder.
    """
    files = {r["id"].replace("/", "__").replace("\\", "__") + ".yaml": r["scenario"] for r in rows}
    if not files:
        return
    target = resolve_output(output_dir, "--write")
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        with atomic_directory(target, "--write") as tmp:
            for name, sc in files.items():
                write_file_in(tmp, name, dump_yaml(sc))
        return
    if not target.is_dir():
        raise InputError("--write", str(output_dir), "a folder (it is a file)")
    for name in files:  # check every target before writing any: nothing half-written
        check_writable(target / name, "--write")
    for name, sc in files.items():
        write_atomically(target / name, dump_yaml(sc), field="--write")


def hold_keys(hold: list[str] | tuple[str, ...], layout: dict, option: str = "--hold") -> tuple[str, ...]:
    """``--hold`` (or ``--free``) keys as layout keys of the scenario (``layout.`` prefix allowed).

    Raises:
        UnknownNameError: a key that is not a layout key, or one the scenario does not set (nothing
            to hold).
    """
    out = []
    for key in hold:
        k = key.removeprefix("layout.")
        if k not in LayoutSpec.model_fields:
            raise UnknownNameError(option, key, LayoutSpec.model_fields, "a layout key:")
        if k not in layout:
            raise UnknownNameError(option, key, layout, "a layout key the scenario sets:")
        out.append(k)
    return tuple(out)


def held_keys(
    layout: dict, hold: list[str] | tuple[str, ...] = (), free: list[str] | tuple[str, ...] = ()
) -> tuple[str, ...]:
    """The layout keys ``plan`` and ``sweep`` hold fixed — one rule for both: every key the scenario
    sets (in its file or by a flag), less those ``free`` names (``all``: every one); with ``hold``,
    only those.

    Raises:
        InputError: both ``hold`` and ``free``; UnknownNameError: a key the scenario does not set.
    """
    if hold and free:
        raise InputError("--free", ",".join(free), "either --hold (hold only these) or --free (free these), not both")
    if hold:
        return hold_keys(hold, layout)
    if "all" in free:
        return ()
    freed = set(hold_keys(free, layout, "--free"))
    return tuple(k for k in layout if k not in freed)


def _write_sweep(target, directory, output, flags, hold, calibration, progress, **kw) -> dict:

    if target is not None and not Path(target).is_file():
        raise InputError("SCENARIO", target, "an existing scenario YAML, or collect DIR / submit DIR")
    if output is None:
        raise InputError("--output", None, "a new directory for the sweep (-o DIR)")
    if directory is not None:
        raise InputError("DIR", str(directory), "no second argument when writing a sweep (use -o DIR)")
    data, _ = plan_request(Path(target) if target else None, flags)
    held = held_keys(data.get("layout") or {}, hold or (), kw.pop("free", ()) or ())
    consts = load_step_constants(calibration)
    inputs = (target, calibration)
    man = sweep.write_sweep(data, output, constants=consts, progress=progress, hold=held, inputs=inputs, **kw)
    entries = [{k: v for k, v in e.items() if k != "scenario"} for e in man["entries"]]
    only_baseline = all(e["id"] == "baseline" for e in entries)
    return {
        "directory": str(output),
        "entries": entries,
        "note": msg("api.only_your_baseline") if only_baseline else None,
    }


def sweep_report(
    target: str | None = None,
    directory: Path | None = None,
    output: Path | None = None,
    *,
    top: int = 4,
    mbs_variants: bool = True,
    hold: list[str] | tuple[str, ...] = (),
    free: list[str] | tuple[str, ...] = (),
    smoke: bool = False,
    yes: bool = False,
    accept_mismatch: bool = False,
    flags: ScenarioFlags | None = None,
    calibration: Path | None = None,
    progress: Progress | None = None,
) -> dict:
    """Write, collect or submit a sweep of launch scripts for the top planned layouts.

    Args:
        target: a scenario YAML (write a sweep into ``output``, with MBS×2 variants unless
            ``mbs_variants`` is False), or ``collect`` / ``submit`` with the sweep ``directory``.
        hold / free: which layout keys the search holds (:func:`held_keys`, as ``plan``): all the
            scenario sets, less ``free`` (``all`` frees them; the scenario stays the baseline), or
            only ``hold``.
        smoke / yes: submit the smoke scripts / confirm the submission (sbatch; nothing otherwise).
        accept_mismatch: collect: score a log whose argument dump ran another layout than its entry
            anyway (default False: refused, see :func:`moeplan.plan.sweep.collect`).

    Returns:
        write: ``{"directory", "entries": [manifest entries without their scenario]}``; collect:
        :func:`moeplan.plan.sweep.collect`'s document (measured vs predicted tokens/s/GPU, ranking,
        Spearman, runs file); submit: ``{"submitted": [{id, submitted, sbatch | why}]}``.

    Raises:
        InputError: a missing / extra argument, an unreadable scenario, bad hold keys, an existing
            directory, an unwritable one, unconfirmed submission, a collected log of another layout.
    """

    try:
        if target == "collect" or target == "submit":
            if directory is None:
                raise InputError("DIR", None, f"the sweep directory: moeplan sweep {target} DIR")
            if target == "collect":
                return sweep.collect(directory, accept_mismatch=accept_mismatch)
            return {"submitted": sweep.submit(directory, smoke=smoke, yes=yes)}
        return _write_sweep(
            target, directory, output, flags, hold, calibration, progress, top=top, mbs_variants=mbs_variants, free=free
        )
    except OSError as exc:
        raise InputError("--output", str(output or directory), f"a writable directory ({exc.strerror})") from None


__all__ = [
    "batch_for_tokens",
    "fit_report",
    "held_keys",
    "hold_keys",
    "plan_report",
    "plan_request",
    "recipes_report",
    "save_layout",
    "sweep_report",
]
