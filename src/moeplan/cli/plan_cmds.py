"""``moeplan plan``, ``moeplan fit`` and ``moeplan recipes`` (thin layer over :mod:`moeplan.plan`)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Optional

import typer

from moeplan.cli.app import (
    EXIT_INPUT,
    EXIT_OK,
    EXIT_RULE,
    CalibrationOpt,
    CpOpt,
    EpOpt,
    EtpOpt,
    GbsOpt,
    GpuOpt,
    JsonOpt,
    MbsOpt,
    ModelOpt,
    NumGpusOpt,
    PpOpt,
    PrecisionOpt,
    ScenarioArg,
    SeqOpt,
    SetOpt,
    TpOpt,
    VppOpt,
    _fail_input,
    _overrides,
    _step_constants,
    _write_atomically,
    app,
    check_writable,
)
from moeplan.errors import InputError

TopOpt = Annotated[int, typer.Option("--top", min=1, max=50, help="Candidates to show.")]
HeadroomOpt = Annotated[
    Optional[float], typer.Option("--headroom-gib", min=0.0, help="GiB kept free per GPU (default 5 % of HBM).")
]


def _hold_keys(hold, layout: dict) -> tuple[str, ...]:
    """``--hold`` keys as layout keys of the scenario (``layout.`` prefix allowed).

    Raises:
        UnknownNameError: a key that is not a layout key, or one the scenario does not set (nothing
            to hold).
    """
    from moeplan.errors import UnknownNameError
    from moeplan.spec.layout import LayoutSpec

    out = []
    for key in hold:
        k = key.removeprefix("layout.")
        if k not in LayoutSpec.model_fields:
            raise UnknownNameError("--hold", key, LayoutSpec.model_fields, "a layout key:")
        if k not in layout:
            raise UnknownNameError("--hold", key, layout, "a layout key the scenario sets:")
        out.append(k)
    return tuple(out)


def batch_for_tokens(tokens_per_step: int, seq: int) -> int:
    """Global batch size for ``tokens_per_step`` tokens of ``seq``-token sequences: the exact quotient
    when it divides; otherwise, among batches within 10 % of the quotient, the one with the most
    factors of two (GBS must divide by MBS·DP, and DP sizes are powers of two in practice), closest
    on ties; the quotient rounded down when none is that close. E.g. 1,000,000 tokens at 131,072 →
    8 rather than the prime 7."""
    if tokens_per_step % seq == 0:
        return tokens_per_step // seq
    exact = tokens_per_step / seq
    near = [g for g in range(max(1, math.floor(exact * 0.9)), math.ceil(exact * 1.1) + 1) if abs(g / exact - 1) <= 0.1]
    if not near:
        return max(1, tokens_per_step // seq)

    def twos(g: int) -> int:
        return (g & -g).bit_length()

    return max(near, key=lambda g: (twos(g), -abs(g - exact)))


def _request(scenario: Path | None, ov: dict) -> dict:
    from moeplan.spec.scenario import load_scenario_file, merge_overrides

    data = load_scenario_file(scenario) if scenario is not None else {}
    return merge_overrides(data, ov)


@app.command("plan")
def plan_cmd(
    scenario: ScenarioArg = None,
    model: ModelOpt = None,
    gpu: GpuOpt = None,
    num_gpus: NumGpusOpt = None,
    seq_length: SeqOpt = None,
    mbs: MbsOpt = None,
    gbs: Annotated[
        Optional[int], typer.Option("--global-batch-size", "--gbs", min=1, help="Sequences per step.")
    ] = None,
    tokens_per_step: Annotated[
        Optional[int], typer.Option("--tokens-per-step", min=1, help="Tokens per step (GBS = this / seq length).")
    ] = None,
    precision: PrecisionOpt = None,
    tp: TpOpt = None,
    pp: PpOpt = None,
    vpp: VppOpt = None,
    cp: CpOpt = None,
    ep: EpOpt = None,
    etp: EtpOpt = None,
    sets: SetOpt = None,
    top: TopOpt = 5,
    min_dp: Annotated[int, typer.Option("--min-dp", min=1, help="Smallest data-parallel size accepted.")] = 1,
    headroom_gib: HeadroomOpt = None,
    objective: Annotated[
        str, typer.Option("--objective", help="throughput (tokens/s/GPU) or time-to-train (needs --train-tokens).")
    ] = "throughput",
    train_tokens: Annotated[
        Optional[float], typer.Option("--train-tokens", min=1, help="Tokens to train, for time-to-train.")
    ] = None,
    report: Annotated[
        Optional[Path], typer.Option("--report", help="Write a self-contained HTML report with plots here.")
    ] = None,
    save: Annotated[
        Optional[Path], typer.Option("--save", help="Write the #1 layout as a scenario YAML (for check/export).")
    ] = None,
    workload: Annotated[
        Optional[Path], typer.Option("--workload", help="A workload YAML from `moeplan vlm-stats -o` (VLMs).")
    ] = None,
    calibration: CalibrationOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Search the layout space (TP, PP, VPP, CP, EP, ETP, MBS, recompute, dispatcher, CUDA graphs,
    CP comm, optimizer offload) and rank what fits by predicted tokens/s/GPU, with why the winner wins,
    the rule-of-thumb baseline and a tally of what was rejected. Every layout key given is held fixed.

    Exit code 0 when something fits, 1 when nothing does, 2 on bad input."""
    from moeplan.cli import render
    from moeplan.plan import plan

    try:
        if objective not in ("throughput", "time-to-train"):
            raise InputError("--objective", objective, "throughput or time-to-train")
        if objective == "time-to-train" and not train_tokens:
            raise InputError("--train-tokens", None, "a token count with --objective time-to-train")
        if train_tokens is not None and not math.isfinite(train_tokens):
            raise InputError("--train-tokens", train_tokens, "a finite token count")
        if headroom_gib is not None and not math.isfinite(headroom_gib):
            raise InputError("--headroom-gib", headroom_gib, "a finite number of GiB")
        if save is not None and report is not None and save.resolve() == report.resolve():
            raise InputError("--save", str(save), "a different path from --report")
        for path, field in ((save, "--save"), (report, "--report")):
            if path is not None:
                check_writable(path, field)  # both before the search: a bad one leaves nothing written
        if gbs is not None and tokens_per_step is not None:
            raise InputError("--tokens-per-step", tokens_per_step, "either --gbs or --tokens-per-step")
        rounding = None
        ov = _overrides(model, gpu, num_gpus, seq_length, mbs, gbs, precision, tp, pp, vpp, cp, ep, etp, sets)
        if workload is not None:
            from moeplan.cli.app import load_workload

            ov["workload"] = load_workload(workload)
        data = _request(scenario, ov)
        if tokens_per_step is not None:
            seq = (data.get("training") or {}).get("seq_length")
            if not isinstance(seq, int):
                raise InputError("--tokens-per-step", tokens_per_step, "a --seq-length to divide it by")
            if tokens_per_step < seq:
                raise InputError("--tokens-per-step", tokens_per_step, f"at least one sequence ({seq} tokens)")
            gbs_for = batch_for_tokens(tokens_per_step, seq)
            data.setdefault("training", {})["global_batch_size"] = gbs_for
            if tokens_per_step % seq:
                rounding = (
                    f"--tokens-per-step {tokens_per_step:,} is not a multiple of the sequence length: global "
                    f"batch {gbs_for} ({gbs_for * seq:,} tokens per step; within 10 %, the batch that divides "
                    "best by data-parallel sizes)"
                )
        consts = _step_constants(calibration)
        with render.progress_bar("searching layouts") as tick:
            res = plan(
                data,
                top=top,
                min_dp=min_dp,
                headroom_gib=headroom_gib,
                train_tokens=train_tokens,
                constants=consts,
                progress=tick,
                objective=objective,
            )
        if rounding:
            res.notes.append(rounding)
        if consts is not None:
            prov = consts.provenance or {}
            res.notes.append(
                f"step times from the calibration profile {calibration}"
                + (f" ({prov.get('mode', '?')} fit on {len(prov['run_ids'])} run(s))" if "run_ids" in prov else "")
            )
        out = res.to_dict()
        if report is not None:
            from moeplan.plan.report import write_report

            write_report(res, report)
            out["report"] = str(report)
        if save is not None and res.candidates:
            import yaml

            best = res.candidates[0]
            saved = best.data
            lay = saved.get("layout") or {}
            if "cuda_graph_scope" in lay and best.scenario.mcore_version >= (0, 18, 0):
                # megatron-core ≥ 0.18 reads cuda_graph_modules (cuda_graph_scope is its deprecated alias)
                lay = {("cuda_graph_modules" if k == "cuda_graph_scope" else k): v for k, v in lay.items()}
                saved = {**saved, "layout": lay}
            _write_atomically(save, yaml.safe_dump(saved, sort_keys=False), field="--save")
            out["saved"] = str(save)
        elif save is not None:
            out["notes"].append(f"--save {save}: nothing written, no layout fits")
    except InputError as exc:
        _fail_input(exc)
        return
    if as_json:
        render.print_json(out)
    else:
        from moeplan.cli.render_plan import render_plan

        render_plan(out)
    raise typer.Exit(EXIT_OK if out["candidates"] else EXIT_RULE)


@app.command("fit")
def fit_cmd(
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
    headroom_gib: HeadroomOpt = None,
    top: TopOpt = 8,
    calibration: CalibrationOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Propose the smallest changes that make a layout fit (or that OOMed): one change at a time,
    then pairs of those not enough alone, each checked by every rule, with the GiB it saves and the
    step time it costs, the cheapest in time first.

    Exit code 0 when the layout fits already (and breaks no rule) or a fix is found, 1 when none is,
    2 on bad input."""
    from moeplan.cli import render
    from moeplan.plan.fit import fit_layout

    try:
        ov = _overrides(model, gpu, num_gpus, seq_length, mbs, gbs, precision, tp, pp, vpp, cp, ep, etp, sets)
        data = _request(scenario, ov)
        out = fit_layout(data, headroom_gib=headroom_gib, top=top, constants=_step_constants(calibration))
    except InputError as exc:
        _fail_input(exc)
        return
    if as_json:
        render.print_json(out)
    else:
        from moeplan.cli.render_plan import render_fit

        render_fit(out)
    # a layout that breaks a rule "fits" only on paper: exit 1 unless a change makes it legal and fit
    ok = out["fixes"] or (out["fits_already"] and not out["check_errors"])
    raise typer.Exit(EXIT_OK if ok else EXIT_RULE)


@app.command("recipes")
def recipes_cmd(
    kind: Annotated[
        str, typer.Option("--kind", help="all, guidance (skill layout families) or published (Bridge perf recipes).")
    ] = "all",
    model: Annotated[Optional[str], typer.Option("--model", "-m", help="Only this model (HF id or name).")] = None,
    output_dir: Annotated[
        Optional[Path],
        typer.Option("--write", help="Also write each recipe as a scenario YAML into this folder ('/' in ids → '__')."),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Built-in starting points — the layout families of the long-context and VLM guidance and the
    published Megatron Bridge layouts — each checked by the rules (what they break as written) and
    estimated (memory; throughput where a batch size is known)."""
    from moeplan.cli import render
    from moeplan.plan.recipes import list_recipes

    try:
        if kind not in ("all", "guidance", "published"):
            raise InputError("--kind", kind, "all, guidance or published")
        rows = list_recipes(kind, model)
        if output_dir is not None:
            import yaml

            targets = [(output_dir / (r["id"].replace("/", "__").replace("\\", "__") + ".yaml"), r) for r in rows]
            for path, _ in targets:  # check every target before writing any: nothing half-written
                if path.exists() and not path.is_file():
                    raise InputError(
                        "--write", str(path), "a folder whose recipe file names are free (this is not a file)"
                    )
            if targets:
                output_dir.mkdir(parents=True, exist_ok=True)
            for path, r in targets:
                _write_atomically(path, yaml.safe_dump(r["scenario"], sort_keys=False), field="--write")
    except InputError as exc:
        _fail_input(exc)
        return
    except OSError as exc:
        _fail_input(InputError("--write", str(output_dir), f"a writable folder ({exc.strerror})"))
        return
    if as_json:
        render.print_json(rows)
    else:
        from moeplan.cli.render_plan import render_recipes

        render_recipes(rows)
    raise typer.Exit(EXIT_OK)


@app.command("sweep")
def sweep_cmd(
    target: Annotated[
        Optional[str],
        typer.Argument(help="A scenario YAML (write a sweep), or `collect` / `submit` followed by the sweep DIR."),
    ] = None,
    directory: Annotated[Optional[Path], typer.Argument(help="The sweep directory (with collect / submit).")] = None,
    output: Annotated[
        Optional[Path], typer.Option("--output", "-o", help="New directory to write the sweep into.")
    ] = None,
    top: Annotated[int, typer.Option("--top", min=1, max=50, help="Candidates to write scripts for.")] = 4,
    no_mbs_variants: Annotated[bool, typer.Option("--no-mbs-variants", help="Skip the MBS×2 variants.")] = False,
    hold: Annotated[
        Optional[list[str]],
        typer.Option("--hold", help="A layout key of the scenario to hold fixed in the search (repeatable)."),
    ] = None,
    smoke: Annotated[bool, typer.Option("--smoke", help="submit: the smoke scripts instead of the full runs.")] = False,
    yes: Annotated[bool, typer.Option("--yes", help="submit: confirm that jobs will be submitted (sbatch).")] = False,
    model: ModelOpt = None,
    gpu: GpuOpt = None,
    num_gpus: NumGpusOpt = None,
    seq_length: SeqOpt = None,
    gbs: GbsOpt = None,
    precision: PrecisionOpt = None,
    sets: SetOpt = None,
    calibration: CalibrationOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Write a directory of launch scripts for the top-K planned layouts (plus MBS×2 variants), a smoke
    variant of each and your baseline, with a manifest and a README (`moeplan sweep SCENARIO -o DIR`);
    `moeplan sweep collect DIR` ranks the measured logs against the predictions and writes runs.yaml for
    `calibrate`; `moeplan sweep submit DIR --yes` submits through sbatch (nothing is submitted otherwise)."""
    from moeplan.cli import render
    from moeplan.plan import sweep

    try:
        if target in ("collect", "submit"):
            if directory is None:
                raise InputError("DIR", None, f"the sweep directory: moeplan sweep {target} DIR")
            if target == "collect":
                out = sweep.collect(directory)
            else:
                out = {"submitted": sweep.submit(directory, smoke=smoke, yes=yes)}
        else:
            if target is not None and not Path(target).is_file():
                raise InputError("SCENARIO", target, "an existing scenario YAML, or collect DIR / submit DIR")
            if output is None:
                raise InputError("--output", None, "a new directory for the sweep (-o DIR)")
            if directory is not None:
                raise InputError("DIR", str(directory), "no second argument when writing a sweep (use -o DIR)")
            ov = _overrides(
                model, gpu, num_gpus, seq_length, None, gbs, precision, None, None, None, None, None, None, sets
            )
            data = _request(Path(target) if target else None, ov)
            held = _hold_keys(hold or (), data.get("layout") or {})
            with render.progress_bar("planning") as tick:
                man = sweep.write_sweep(
                    data,
                    output,
                    top=top,
                    mbs_variants=not no_mbs_variants,
                    constants=_step_constants(calibration),
                    progress=tick,
                    hold=held,
                )
            out = {
                "directory": str(output),
                "entries": [{k: v for k, v in e.items() if k != "scenario"} for e in man["entries"]],
            }
    except InputError as exc:
        _fail_input(exc)
        return
    except OSError as exc:
        _fail_input(InputError("--output", str(output or directory), f"a writable directory ({exc.strerror})"))
        return
    if as_json:
        render.print_json(out)
    else:
        from moeplan.cli.render_plan import render_sweep

        render_sweep(target, out)
    failed = target == "submit" and any(not r["submitted"] for r in out["submitted"])
    raise typer.Exit(EXIT_RULE if failed else EXIT_OK)


@app.command("vlm-stats")
def vlm_stats_cmd(
    data: Annotated[Path, typer.Argument(help="A folder of images, or a JSONL / Parquet manifest.")],
    seq_length: Annotated[int, typer.Option("--seq-length", "-s", min=1, help="Training sequence length (tokens).")],
    model: ModelOpt = None,
    packing: Annotated[str, typer.Option("--packing", help="none (one sample per sequence) or greedy.")] = "none",
    text_tokens: Annotated[
        int, typer.Option("--text-tokens", min=0, help="Text tokens per sample when the data does not say.")
    ] = 0,
    patch_size: Annotated[Optional[int], typer.Option("--patch-size", min=1, help="Default: the model's ViT.")] = None,
    merge_size: Annotated[Optional[int], typer.Option("--merge-size", min=1, help="Default: the model's ViT.")] = None,
    min_pixels: Annotated[int, typer.Option("--min-pixels", min=1, help="Processor shortest_edge.")] = 65536,
    max_pixels: Annotated[int, typer.Option("--max-pixels", min=1, help="Processor longest_edge.")] = 16777216,
    output: Annotated[
        Optional[Path], typer.Option("--output", "-o", help="Write the workload YAML (for a scenario's workload:).")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Image tokens per sample of a real dataset (Qwen-VL dynamic resolution from image headers),
    text and total tokens, padding waste for a sequence length and packing, and the workload that
    `estimate` / `plan` take to report useful tokens/s. Bad files are reported and skipped."""
    from moeplan.cli import render
    from moeplan.vlm.stats import scan, summarize

    try:
        if min_pixels > max_pixels:
            raise InputError("--min-pixels", min_pixels, f"at most --max-pixels ({max_pixels})")
        p, mg = patch_size, merge_size
        if model is not None:
            from moeplan import get_model

            v = get_model(model).vision
            if v is None:
                raise InputError("--model", model, "a vision-language model (see `moeplan models`)")
            p = p or v.patch_size
            mg = mg or max(1, v.spatial_merge_size)
        with render.progress_bar("reading image headers") as tick:
            sc = scan(data, text_tokens, progress=tick)
        out = summarize(sc, seq_length, packing, p or 16, mg or 2, min_pixels, max_pixels)
        if output is not None:
            import yaml

            _write_atomically(output, yaml.safe_dump({"workload": out["workload"]}, sort_keys=False))
            out["written"] = str(output)
    except InputError as exc:
        _fail_input(exc)
        return
    if as_json:
        render.print_json(out)
    else:
        from moeplan.cli.render_plan import render_vlm_stats

        render_vlm_stats(out)
    raise typer.Exit(EXIT_OK)


__all__ = ["plan_cmd", "fit_cmd", "recipes_cmd", "sweep_cmd", "EXIT_INPUT"]
