"""``moeplan sweep``: a directory of launch scripts for the planner's top candidates (plus MBS
variants), a smoke variant of each (a few steps on a reduced-layer proxy at the smallest world the
layout folds into), the user's baseline kept beside them, a manifest and a README; ``sweep collect``
reads the logs that come back, ranks measured against predicted and writes a runs file for
``moeplan calibrate``. Nothing is submitted unless asked (``--submit --yes``, through ``sbatch``).
"""

from __future__ import annotations

import copy
import json
import math
import re
import shutil
import statistics
import subprocess
from pathlib import Path
from typing import Any

from moeplan.errors import InputError, MoeplanError
from moeplan.i18n.messages import msg
from moeplan.inputs.loading import dump_yaml, load_json_file
from moeplan.inputs.provenance import RecipeProvenance
from moeplan.inputs.resolved import Scenario
from moeplan.io.export import launch_script
from moeplan.io.run_logs import other_layout, read_log, scenario_sizes, tokens_per_s_per_gpu
from moeplan.io.write import atomic_directory, check_new_directory, write_atomically, write_file_in
from moeplan.model.memory import estimate_memory
from moeplan.model.step import estimate_step
from moeplan.plan.describe import describe
from moeplan.plan.planner import plan
from moeplan.resolve.load import load_scenario
from moeplan.rules import validate
from moeplan.units import GIB_BYTES

SMOKE_STEPS = 20
MANIFEST = "manifest.json"


def _slug(label: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", label).strip("-").lower()


def _predict(s: Scenario, constants=None) -> dict:
    mem = estimate_memory(s)
    th = estimate_step(s, constants)
    return {
        "tokens_per_s_per_gpu": th.tokens_per_s_per_gpu,
        "step_time_s": th.step_time_s,
        "mfu": th.mfu,
        "peak_gib": mem.peak_bytes / GIB_BYTES,
        "fits": mem.verdict in ("fits", "tight"),
        "validated": th.validity.get("validated"),
    }


def smoke_scenario(data: dict, s: Scenario, recipe: RecipeProvenance | None = None) -> tuple[dict, str]:
    """A reduced-layer proxy of a layout: the same TP/CP/PP/VPP/EP/ETP at the smallest world the sizes
    fold into (PP · lcm(TP·CP, EP·ETP)), two layers per virtual stage, a small batch, the same
    sequence length; falls back to the full layout when the proxy breaks a rule. ``recipe``: the
    recipe fills the layout was resolved with (a planner candidate's request record; None: its own).

    Returns:
        (the proxy's scenario mapping, a note saying what it is).
    """
    d = copy.deepcopy(data)
    lay = d.setdefault("layout", {})
    for k in (
        "pipeline_model_parallel_layout",
        "account_for_embedding_in_pipeline_split",
        "account_for_loss_in_pipeline_split",
    ):
        lay.pop(k, None)
    world = s.pp * math.lcm(s.tp * s.cp, s.ep * s.etp)
    layers = 2 * s.pp * s.vpp
    dp = world // (s.tp * s.cp * s.pp)
    mbs = s.training.micro_batch_size or 1
    d["system"]["num_gpus"] = world
    d["training"]["global_batch_size"] = mbs * dp * max(2, 2 * s.pp)
    d.setdefault("model_overrides", {})["num_layers"] = layers
    try:
        proxy = load_scenario(d, recipe=recipe)
        if not validate(proxy).errors:
            return d, f"proxy: {layers} layers on {world} GPUs (DP {dp}), {SMOKE_STEPS} steps"
    except InputError:
        pass
    return copy.deepcopy(data), f"full layout, {SMOKE_STEPS} steps (the reduced proxy breaks a rule)"


def _scripts(data: dict, s: Scenario, recipe: RecipeProvenance | None = None) -> tuple[str, str, str]:
    """(launch.sh, smoke.sh, what the smoke run is): both rendered from data (:class:`LaunchScript`);
    the smoke script is the proxy's with ``model.num_layers`` and ``train.train_iters`` added to its
    overrides, never an edit of the rendered text."""
    launch = launch_script(s).render()
    smoke_data, smoke_note = smoke_scenario(data, s, recipe)
    smoke_s = load_scenario(smoke_data, recipe=recipe)
    extra: list[tuple[str, object]] = []
    n = (smoke_data.get("model_overrides") or {}).get("num_layers")
    if n:
        extra.append(("model.num_layers", n))
    extra.append(("train.train_iters", SMOKE_STEPS))
    return launch, launch_script(smoke_s).with_overrides(extra).render(), smoke_note


def _mbs_variant(c, picked: list, data: dict, recipe: RecipeProvenance | None) -> dict | None:
    """The candidate at twice its micro-batch size when that is legal, divides the global batch and
    fits, and is not already another run of the sweep (each costs GPU time); None otherwise."""
    d2 = copy.deepcopy(c.data)
    mbs = d2["training"]["micro_batch_size"] * 2
    d2["training"]["micro_batch_size"] = mbs
    try:
        s2 = load_scenario(d2, recipe=recipe)
        ok = (
            not validate(s2).errors
            and d2["training"]["global_batch_size"] % (mbs * s2.dp) == 0
            and estimate_memory(s2).verdict in ("fits", "tight")
        )
    except InputError:
        ok = False
    if ok and _layout_sig(d2) in {_layout_sig(x) for x in [data, *(p.data for p in picked)]}:
        ok = False
    return d2 if ok else None


def _sweep_items(data: dict, res, top: int, mbs_variants: bool) -> list[tuple[str, str, dict, RecipeProvenance | None]]:
    """(directory name, label, scenario mapping, recipe record) of every run: the user's baseline
    (resolved on its own), then the top candidates unlike it and their MBS×2 variants (resolved with
    the request's recipe fills, as the planner estimated them)."""
    recipe = res.search.recipe
    items: list[tuple[str, str, dict, RecipeProvenance | None]] = []
    if data.get("layout") or {}:
        items.append(("baseline", "your scenario as given", data, None))
    base_sig = _layout_sig(data)
    picked = [c for c in res.candidates if _layout_sig(c.data) != base_sig][:top]
    for i, c in enumerate(picked, start=1):
        mbs = c.data["training"]["micro_batch_size"]
        items.append((f"{i:02d}-{_slug(c.parallel.label())}-mbs{mbs}", describe(c), c.data, recipe))
        d2 = _mbs_variant(c, picked, data, recipe) if mbs_variants else None
        if d2 is not None:
            label = describe(c).replace(f"MBS{mbs}", f"MBS{2 * mbs}")
            items.append((f"{i:02d}b-{_slug(c.parallel.label())}-mbs{2 * mbs}", label, d2, recipe))
    return items


def _stage(name: str, label: str, d: dict, recipe: RecipeProvenance | None, constants) -> tuple[dict, dict[str, str]]:
    """The manifest entry and the files of one run: scenario.yaml, and launch.sh / smoke.sh with the
    predicted figures when the layout breaks no rule."""
    s = load_scenario(d, recipe=recipe)
    chk = validate(s)
    entry: dict[str, Any] = {
        "id": name,
        "label": label,
        "kind": "baseline" if name == "baseline" else "candidate",
        "scenario": d,
    }
    files: dict[str, str] = {"scenario.yaml": dump_yaml(d)}
    if chk.errors:
        entry["predicted"] = None
        entry["note"] = "breaks " + ", ".join(sorted({f.rule_id for f in chk.errors})) + ": no scripts"
    else:
        entry["predicted"] = _predict(s, constants)
        launch, smoke, note = _scripts(d, s, recipe)
        files["launch.sh"], files["smoke.sh"] = launch, smoke
        entry["smoke"] = note
    return entry, files


def write_sweep(
    data: dict,
    out_dir: Path,
    *,
    top: int = 4,
    mbs_variants: bool = True,
    constants=None,
    progress=None,
    hold: tuple[str, ...] = (),
    inputs: tuple = (),
) -> dict:
    """Write the sweep directory and return its manifest.

    Args:
        data: the scenario mapping; its layout is the baseline; ``hold`` names the layout keys the
            search holds (``moeplan sweep`` holds every key the scenario sets unless ``--free`` says
            otherwise, as ``plan`` does: :func:`moeplan.api.plan.held_keys`).
        out_dir: a new or empty directory: one folder per run, ``manifest.json``, ``README.md``.
        top: candidates to write (each with an MBS×2 variant when ``mbs_variants`` and it fits).
        inputs: the command's input files (``out_dir`` may be none of them).

    Returns:
        the manifest: ``request``, ``entries`` (id, label, kind, scenario, predicted tokens/s/GPU,
        step time, MFU, peak GiB, fits; smoke note), ``smoke_steps``.

    Raises:
        InputError: bad request, an existing non-empty ``out_dir``, or nothing fits.
    """
    out_dir = Path(out_dir)
    check_new_directory(out_dir, "--output", inputs)  # before the search: a bad target costs nothing
    req = {k: v for k, v in data.items() if k != "layout"}
    req["layout"] = {k: v for k, v in (data.get("layout") or {}).items() if k in hold}
    res = plan(req, top=top + 1, constants=constants, progress=progress)
    if not res.candidates:
        why = next((n for n in res.notes if n.startswith("no layout fits")), "no layout fits")
        raise InputError(
            "scenario",
            None,
            "a request for which some layout fits",
            sentence="nothing to sweep: "
            + why.replace("see the rejected tally", "moeplan plan on the same scenario shows why"),
        )
    entries: list[dict] = []
    staged: list[tuple[str, dict[str, str]]] = []
    for name, label, d, recipe in _sweep_items(data, res, top, mbs_variants):
        entry, files = _stage(name, label, d, recipe, constants)
        entries.append(entry)
        staged.append((name, files))
    manifest = {"request": res.search.request, "entries": entries, "smoke_steps": SMOKE_STEPS}
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    # built under a temporary name and renamed into place: a full disk or kill -9 leaves no half sweep
    with atomic_directory(out_dir, "--output", inputs) as tmp:
        for name, files in staged:
            (tmp / name).mkdir()
            for fn, text in files.items():
                write_file_in(tmp / name, fn, text, executable=fn.endswith(".sh"))
        write_file_in(tmp, MANIFEST, json.dumps(manifest, indent=2, default=str) + "\n")
        write_file_in(tmp, "README.md", _readme(manifest))
    return manifest


def _layout_sig(d: dict) -> tuple:
    lay = {k: v for k, v in (d.get("layout") or {}).items() if v is not None}
    return (tuple(sorted((k, str(v)) for k, v in lay.items())), (d.get("training") or {}).get("micro_batch_size"))


def _readme(man: dict) -> str:
    r = man["request"]
    rows = "\n".join(
        f"| `{e['id']}` | {e['label']} | "
        + (
            f"{e['predicted']['tokens_per_s_per_gpu']:,.0f} | {e['predicted']['peak_gib']:.1f}"
            if e.get("predicted")
            else "– | –"
        )
        + f" | {e.get('smoke', e.get('note', ''))} |"
        for e in man["entries"]
    )
    return f"""# moeplan sweep: {r["model"]} on {r["num_gpus"]} × {r["gpu"]}, seq {r["seq_length"]}

| entry | layout | predicted tokens/s/GPU | predicted peak GiB | smoke run |
|---|---|---|---|---|
{rows}

Each entry has `scenario.yaml` (check it with `moeplan check`, export it with `moeplan export`),
`launch.sh` (the full run) and `smoke.sh` (a {man["smoke_steps"]}-step run, on a reduced-layer proxy
at the smallest world the layout folds into when that is legal). `baseline/` is the scenario you
started from (when the scenario had a layout), so any change can be reverted.

1. Set `CONTAINER` (a NeMo / Megatron Bridge image), `MOUNTS` and `RECIPE` (e.g. the perf recipe
   of this model), then submit the smoke runs first: `sbatch 01-*/smoke.sh` (or
   `moeplan sweep submit DIR --smoke --yes`).
2. If they run, submit the full runs; write each job's log into its entry as `*.log`
   (e.g. `sbatch -o 01-.../run-%j.log 01-.../launch.sh`).
3. `moeplan sweep collect DIR` ranks measured against predicted and writes `runs.yaml`, which
   `moeplan calibrate DIR/runs.yaml -o cluster.json` fits to your cluster.
"""


def submit(out_dir: Path, *, smoke: bool, yes: bool) -> list[dict]:
    """``sbatch`` every entry's ``smoke.sh`` (or ``launch.sh``); only with ``yes``.

    Raises:
        InputError: no ``yes``, no manifest, or ``sbatch`` not on PATH.
    """
    man = load_manifest(out_dir)
    if not yes:
        raise InputError("--yes", None, "--yes to confirm: this submits jobs that cost GPU time")
    sbatch = shutil.which("sbatch")
    if sbatch is None:
        raise InputError("sbatch", None, "Slurm's sbatch on PATH (nothing was submitted)")
    out = []
    for e in man["entries"]:
        script = Path(out_dir) / e["id"] / ("smoke.sh" if smoke else "launch.sh")
        if not script.exists():
            out.append({"id": e["id"], "submitted": False, "why": e.get("note", "no script")})
            continue
        log = Path(out_dir) / e["id"] / ("smoke-%j.log" if smoke else "run-%j.log")
        try:
            p = subprocess.run(  # noqa: S603
                [sbatch, "-o", str(log), str(script)], capture_output=True, text=True, check=False, timeout=120
            )
        except subprocess.TimeoutExpired:
            out.append({"id": e["id"], "submitted": False, "why": "sbatch did not answer within 120 s"})
            continue
        out.append({"id": e["id"], "submitted": p.returncode == 0, "sbatch": (p.stdout or p.stderr).strip()})
    return out


def load_manifest(out_dir: Path) -> dict:
    """The manifest of a sweep directory (strict JSON under the input policy), its structure checked.

    Raises:
        InputError: no readable manifest, or one that is not what ``moeplan sweep`` writes.
    """
    p = Path(out_dir) / MANIFEST
    what = f"a sweep directory written by `moeplan sweep` (a readable {MANIFEST})"
    try:
        man = load_json_file(p, "DIR")
    except InputError as exc:
        raise InputError("DIR", str(out_dir), f"{what}: {exc.allowed}") from None
    if not isinstance(man, dict):
        raise InputError("DIR", str(out_dir), what + ": entries[] each with a plain id and a scenario")
    ok = isinstance(man.get("entries"), list)
    for e in man.get("entries", []) if ok else []:
        ok = ok and isinstance(e, dict) and isinstance(e.get("id"), str) and isinstance(e.get("scenario"), dict)
        ok = ok and re.fullmatch(r"[A-Za-z0-9._-]{1,200}", e.get("id", ""), re.ASCII) is not None
        ok = ok and e["id"] not in (".", "..")
    if not ok:
        raise InputError("DIR", str(out_dir), what + ": entries[] each with a plain id and a scenario")
    for e in man["entries"]:
        if not isinstance(e.get("label"), str):
            e["label"] = e["id"]
    return man


#: the most sequences per step and tokens per sequence a manifest entry may state (TrainingSpec's caps)
_MAX_BATCH = 2**24


def _planned(sc: dict) -> tuple[int, int, int] | None:
    """(global batch, sequence length, world size) a manifest entry's scenario states, each a
    positive integer within the schema's caps; None when one is missing or impossible (``num_gpus: 0``)."""
    try:
        vals = (sc["training"]["global_batch_size"], sc["training"]["seq_length"], sc["system"]["num_gpus"])
    except (KeyError, TypeError):
        return None
    caps = (_MAX_BATCH, _MAX_BATCH, 2**20)
    if all(isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= cap for v, cap in zip(vals, caps, strict=True)):
        return vals
    return None


def _entry_sizes(e: dict) -> dict[str, int | None] | None:
    """The layout and batch sizes a sweep entry attributes its logs to (its resolved scenario, as
    :func:`moeplan.io.run_logs.scenario_sizes`); None when its scenario does not resolve (an edited
    manifest)."""
    try:
        return scenario_sizes(load_scenario(e["scenario"]))
    except MoeplanError:
        return None


def _check_log_layout(
    p: Path, st, sizes: dict[str, int | None] | None, notes: list[str], mismatched: list[str] | None
) -> None:
    """Hold a log's argument dump to the layout of the entry it sits in (a smoke log: its parallel
    sizes only, the proxy runs a smaller batch). A mismatch is refused; when ``mismatched`` is a list
    (the override) the log's name is added to it and a note says what differs.

    Raises:
        InputError: the dump states another value of a key of
            :data:`moeplan.io.run_logs.DUMP_CHECK_KEYS` than the entry, and ``mismatched`` is None.
    """
    if sizes is None:
        return
    if p.name.startswith("smoke"):
        sizes = {k: v for k, v in sizes.items() if k != "global_batch_size"}
    text = other_layout(
        p,
        st.args,
        sizes,
        where="the sweep entry it sits in",
        attributed="the entry",
        remedy="move it to the entry it ran, or give --accept-mismatch to score it against this entry anyway",
        accept=mismatched is not None,
    )
    if text is None or mismatched is None:
        return
    mismatched.append(p.name)
    notes.append(msg("plan.log_ran_another_layout", log=p.name, details=text))


def _log_tokens_per_s(
    p: Path, e: dict, notes: list[str], sizes: dict[str, int | None] | None = None, mismatched: list[str] | None = None
) -> float | None:
    """Measured tokens/s/GPU of one log of a sweep entry: the printed figure, else GBS · seq / (median
    iteration time · GPUs) from the entry's scenario (the log's logged batch size when it gives one);
    None (with a note) when the log gives no usable figure. The log's argument dump is held to the
    entry's ``sizes`` first (:func:`_check_log_layout`).

    Raises:
        InputError: the log's argument dump ran another layout, and ``mismatched`` is None.
    """
    try:
        st = read_log(p)
    except InputError as exc:
        notes.append(f"{p.name}: {exc.allowed}")
        return None
    _check_log_layout(p, st, sizes, notes, mismatched)
    summ = st.summary()
    tps = (summ.get("tokens_per_s_per_gpu") or {}).get("median")
    if tps is None and summ.get("iteration_time_ms"):
        planned = _planned(e["scenario"])
        if planned is None:
            notes.append(f"{p.name}: the entry's scenario lacks a positive global_batch_size / seq_length / num_gpus")
            return None
        gbs_planned, seq, world = planned
        logged = [v for v in st.series("global_batch_size") if v <= _MAX_BATCH]
        gbs = int(statistics.median(logged)) if logged else gbs_planned
        if gbs != gbs_planned:
            notes.append(f"{p.name}: the log's global batch size {gbs} differs from the entry's {gbs_planned}")
        tps = tokens_per_s_per_gpu(gbs, seq, summ["iteration_time_ms"]["median"], world)
    if tps is None or not (math.isfinite(tps) and tps > 0):
        notes.append(f"{p.name}: no usable iteration times")
        return None
    return tps


def _predicted(e: dict) -> float | None:
    """The entry's predicted tokens/s/GPU when the manifest gives a positive finite number (an edited
    manifest may not)."""
    pred = e.get("predicted")
    v = pred.get("tokens_per_s_per_gpu") if isinstance(pred, dict) else None
    if not isinstance(v, (int, float)) or isinstance(v, bool):
        return None
    return float(v) if math.isfinite(v) and 0 < v < 1e30 else None


def collect(out_dir: Path, *, include_smoke: bool = False, accept_mismatch: bool = False) -> dict:
    """Measured tokens/s/GPU of each entry from the ``*.log`` files in it (steady state, median over
    logs), beside the prediction; Spearman rank correlation; writes ``runs.yaml`` for ``calibrate``
    (atomically), each run with the logs it was measured from (``logs:``, relative to the folder).

    A log whose argument dump states another TP, PP, VPP, CP, EP, ETP, MBS, GBS or sequence length
    than its entry (:data:`moeplan.io.run_logs.DUMP_CHECK_KEYS`) would poison every calibration
    made from it: it is refused, nothing written; with ``accept_mismatch`` it is scored against the
    entry anyway and the entry's ``notes`` and ``mismatched_logs`` say so.

    Raises:
        InputError: not a sweep directory; a log that ran another layout (without ``accept_mismatch``).
    """

    out_dir = Path(out_dir)
    man = load_manifest(out_dir)
    rows, runs, read = [], [], []
    for e in man["entries"]:
        logs = sorted((out_dir / e["id"]).glob("*.log"))
        if not include_smoke:
            logs = [p for p in logs if not p.name.startswith("smoke")]
        read += logs
        notes: list[str] = []
        sizes = _entry_sizes(e)
        bad: list[str] | None = [] if accept_mismatch else None
        used = {p: v for p in logs if (v := _log_tokens_per_s(p, e, notes, sizes, bad)) is not None}
        measured = statistics.median(used.values()) if used else None
        pred = _predicted(e)
        rows.append(
            {
                "id": e["id"],
                "label": e["label"],
                "logs": len(logs),
                "measured_tokens_per_s_per_gpu": measured,
                "predicted_tokens_per_s_per_gpu": pred,
                "error_pct": None if (measured is None or pred is None) else 100 * (pred / measured - 1),
                "notes": notes,
                "mismatched_logs": bad or [],
            }
        )
        if measured is not None:
            runs.append(_run_entry(e, measured, list(used), out_dir))
    both = [r for r in rows if r["error_pct"] is not None]
    rho = _spearman(
        [r["predicted_tokens_per_s_per_gpu"] for r in both], [r["measured_tokens_per_s_per_gpu"] for r in both]
    )
    both.sort(key=lambda r: -r["measured_tokens_per_s_per_gpu"])
    runs_file = None
    if runs:
        runs_file = out_dir / "runs.yaml"
        inputs = [out_dir / MANIFEST, *read]  # runs.yaml may not be (a link to) a file collect read
        write_atomically(runs_file, dump_yaml({"runs": runs}), field="runs.yaml", inputs=inputs)
    return {
        "entries": rows,
        "measured_ranking": [r["id"] for r in both],
        "spearman": rho,
        "runs_file": str(runs_file) if runs_file else None,
    }


def _run_entry(e: dict, measured: float, logs: list[Path], out_dir: Path) -> dict:
    """One run of ``runs.yaml``: the entry's id and scenario, its measured tokens/s/GPU and the logs
    it was measured from (paths relative to the sweep folder, so that ``calibrate`` can hold each
    log's argument dump to the scenario again)."""
    return {
        "id": e["id"],
        "scenario": e["scenario"],
        "measured": {"tokens_per_s_per_gpu": measured},
        "logs": [p.relative_to(out_dir).as_posix() for p in logs],
    }


def _spearman(a: list[float], b: list[float]) -> float | None:
    if len(a) < 3:
        return None

    def ranks(x):
        order = sorted(range(len(x)), key=lambda i: x[i])
        r = [0.0] * len(x)
        for pos, i in enumerate(order):
            r[i] = float(pos)
        return r

    ra, rb = ranks(a), ranks(b)
    ma, mb = statistics.fmean(ra), statistics.fmean(rb)
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb, strict=True))
    va = math.sqrt(sum((x - ma) ** 2 for x in ra))
    vb = math.sqrt(sum((y - mb) ** 2 for y in rb))
    return cov / (va * vb) if va and vb else None
