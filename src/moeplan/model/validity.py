"""How far a step-time estimate stands from validated ground.

The time model's constants were fitted on measured runs (``benchmarks/calibrate_time.py``); the
accuracy benchmark (``benchmarks/accuracy.py``) writes ``catalog/data/time_validity.json`` with what
those runs covered (GPU types, models, precisions, sequence lengths, layout kinds) and the error bands
it measured: the in-sample 90th-percentile absolute error for covered cases, and the worst
leave-one-GPU-type-out errors for cases outside them. An estimate outside that ground is marked
``extrapolated`` and names each way in which it is outside. Sequence lengths beyond the fitted runs
also cite the out-of-sample long-context check (``benchmarks/long_context.py`` writes
``catalog/data/long_context_check.json``: NVIDIA's measured dense LLAMA2-7B H100 runs with CP).
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass
from importlib import resources
from typing import Any

from moeplan.i18n.messages import Message, msg
from moeplan.inputs.resolved import Scenario
from moeplan.model.constants import load_constants, release_of

#: median signed error (%) of a (model, GPU) pair's published runs from which an estimate warns of it
BIAS_NOTE_PCT = 15.0


@dataclass(frozen=True)
class Validity:
    """Attributes:
    validated: every aspect of the case lies inside the fitted runs' coverage.
    outside: one line per aspect outside it (empty when ``validated``).
    error_band_pct: expected absolute % error of tokens/s/GPU for a case of this kind.
    band_source: where the band comes from (accuracy benchmark figure).
    measured_bias_pct / measured_bias_runs: median signed % error (predicted / measured − 1) of the
        published runs of the same model on the same GPU type, and how many (None / 0 when none).
    bias_note: a reader's warning when that median is at least ``BIAS_NOTE_PCT`` (reported, never
        corrected: no constant is fitted per model).
    """

    validated: bool
    outside: list[str]
    error_band_pct: float
    band_source: str
    measured_bias_pct: float | None = None
    measured_bias_runs: int = 0
    bias_note: str | None = None

    def to_dict(self) -> dict:
        return {
            "validated": self.validated,
            "outside": list(self.outside),
            "error_band_pct": self.error_band_pct,
            "band_source": self.band_source,
            "measured_bias_pct": self.measured_bias_pct,
            "measured_bias_runs": self.measured_bias_runs,
            "bias_note": self.bias_note,
        }


def _packaged_json(name: str) -> dict:
    path = resources.files("moeplan.catalog") / "data" / name
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return {}


@functools.lru_cache(maxsize=1)
def coverage() -> dict:
    """The packaged coverage and error bands (empty coverage when the data file is absent)."""
    return _packaged_json("time_validity.json")


@functools.lru_cache(maxsize=1)
def memory_validity() -> dict:
    """The packaged memory-accuracy figures (``benchmarks/memory_accuracy.py``: allocated vs allocated
    against public readings; ``band_pct`` the band a memory verdict carries); empty when absent."""
    return _packaged_json("memory_validity.json")


@functools.lru_cache(maxsize=1)
def long_context_check() -> dict:
    """The packaged out-of-sample long-context check (empty when the data file is absent)."""
    return _packaged_json("long_context_check.json")


def _seq_note(seq: int, lo: int, hi: int) -> str:
    # the head is a message of its own: the one-line error band prints it alone
    head = msg("validity.seq_outside_fitted", seq=seq, lo=lo, hi=hi)
    text = f"{head}: attention and CP costs are first-principles, not fitted"
    chk = long_context_check()
    if not chk:
        return text + ", and not validated"
    c_lo, c_hi = chk["seq_length_range"]
    if seq < lo:
        return f"seq_length {seq} shorter than the fitted {lo}–{hi}: costs below that range were not measured"
    where = "within" if c_lo <= seq <= c_hi else "beyond"
    moe = chk.get("moe_64k_abs_pct") or []
    moe_txt = f" and within {math.ceil(max(moe))} % of NVIDIA's MoE runs at 64K (Mixtral-8x22B, CP 8)" if moe else ""
    return (
        f"{text}; {where} the checked {c_lo}–{c_hi}: out of sample they came within "
        f"{math.ceil(chk['worst_abs_pct'])} % of {chk['what']}{moe_txt} ({chk['source']}); "
        "the band above is the general one for cases outside the fitted runs"
    )


def _not_measured(what: Message, measured: list[str]) -> Message:
    """``<what> (measured: a, b, ...)``: what the fitted runs lack, with what they hold."""
    return msg("validity.not_measured_among", what=what, measured=", ".join(measured))


def _bias_note(over: bool, model: str | None, gpu: str | None, pct: float, runs: int) -> Message:
    """The model's median signed error on a (model, GPU) pair's published runs (``pct``, %)."""
    if over:
        return msg("validity.bias_over_predicted", model=model, gpu=gpu, pct=pct, n=runs)
    return msg("validity.bias_under_predicted", model=model, gpu=gpu, pct=pct, n=runs)


def layout_kind(s: Scenario) -> list[str]:
    """Labels of the layout features that matter for coverage (e.g. ``cp>1``, ``vpp``, ``offload``)."""
    lay = s.layout
    kinds = []
    if s.cp > 1:
        kinds.append("cp>1")
    if (lay.virtual_pipeline_model_parallel_size or 1) > 1:
        kinds.append("vpp")
    if s.pp > 1:
        kinds.append("pp>1")
    if s.etp > 1 and s.model is not None and s.model.is_moe:
        kinds.append("etp>1")
    if lay.recompute_granularity == "full":
        kinds.append(msg("validity.feature_full_recompute"))
    if lay.optimizer_cpu_offload:
        kinds.append(msg("validity.feature_optimizer_offload"))
    if lay.use_megatron_fsdp:
        kinds.append("megatron-fsdp")
    if s.peft is not None:
        kinds.append("lora")
    return kinds


def assess(s: Scenario, constants=None) -> Validity:
    """Compare a resolved scenario with the coverage of the fitted runs; ``constants`` (default: the
    packaged ones, else a calibration profile) say which container releases have a fitted factor."""
    cov = coverage()
    if not cov:
        return Validity(False, ["no coverage data packaged"], float("nan"), "none")
    out: list[str] = []
    gpu = s.gpu.id if s.gpu else None
    if gpu not in cov["gpus"]:
        out.append(_not_measured(msg("validity.gpu_not_measured", gpu=gpu), cov["gpus"]))
    name = s.model.name if s.model else None
    if name not in cov["models"]:
        models = [m.split("/")[-1] for m in cov["models"]]
        out.append(_not_measured(msg("validity.model_not_measured", model=name), models))
    prec = s.training.precision
    if prec not in cov["precisions"]:
        out.append(_not_measured(msg("validity.precision_not_measured", precision=prec), cov["precisions"]))
    lo, hi = cov["seq_length_range"]
    seq = s.training.seq_length or 0
    if not lo <= seq <= hi:
        out.append(_seq_note(seq, lo, hi))
    for k in layout_kind(s):
        if k not in cov["layout_kinds"]:
            out.append(f"layout feature '{k}' never appears in the measured runs")

    c = constants or load_constants()
    stated, fitted = release_of(s), c.release_factor
    if stated is not None and fitted and stated not in fitted:
        used = c.release(stated)[0]
        out.append(
            f"container {stated} was not measured (fitted releases: {', '.join(fitted)}): the software "
            f"efficiency of {used} stands in for it"
        )
    bias = (cov.get("pair_bias") or {}).get(f"{name}|{gpu}") or {}
    b, n = bias.get("median_signed_pct"), int(bias.get("runs", 0))
    note = None
    if b is not None and abs(b) >= BIAS_NOTE_PCT:
        note = _bias_note(b > 0, name, gpu, b, n)
    extra: dict[str, Any] = {"measured_bias_pct": b, "measured_bias_runs": n, "bias_note": note}
    band, source = regime_band(cov, name, gpu, out)
    return Validity(not out, out, band, source, **extra)


def regime_band(cov: dict, model: str | None, gpu: str | None, outside: list[str]) -> tuple[float, str]:
    """The error band (90th-percentile |error| of tokens/s/GPU, %) of the estimate's own regime, from
    the accuracy benchmark's validation (``regime_bands`` in ``time_validity.json``), and its source.

    Inside the fitted runs' coverage: the (model, GPU) pair's band when it has enough runs, else the
    GPU type's, else the model's, else the overall in-sample band. Outside it: the band of runs whose
    GPU type (or model) was held out of the fit when that is what is new, the larger when both are,
    else (a longer sequence, a layout feature never measured, an unfitted release) the general
    extrapolation band.
    """
    bands = cov.get("regime_bands") or {}
    if not outside:
        for kind, key, what in (
            ("pair", f"{model}|{gpu}", f"{model} on {gpu}"),
            ("gpu", gpu, f"{gpu}"),
            ("model", model, f"{model}"),
        ):
            hit = (bands.get(kind) or {}).get(key or "")
            if hit:
                return hit["p90_pct"], (
                    f"90th percentile of |error| over the {hit['runs']} published runs of {what} "
                    "(benchmarks/accuracy.py)"
                )
        return cov["in_sample_band_pct"], cov["in_sample_band_source"]
    new_gpu = any(line.startswith("GPU ") for line in outside)
    new_model = any(line.startswith("model ") for line in outside)
    others = [line for line in outside if not line.startswith(("GPU ", "model "))]
    held = [bands[k] for k, new in (("held_out_gpu", new_gpu), ("held_out_model", new_model)) if new and k in bands]
    if held and not others:
        worst = max(held, key=lambda h: h["p90_pct"])
        what = " and ".join(w for w, new in (("GPU type", new_gpu), ("model", new_model)) if new)
        return worst["p90_pct"], (
            f"90th percentile of |error| over {worst['runs']} predictions of runs whose {what} was held out of "
            "the fit (benchmarks/accuracy.py); outside measured ground errors are not bounded"
        )
    return cov["extrapolation_band_pct"], cov["extrapolation_band_source"]
