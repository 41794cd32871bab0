"""Memory verdicts: JUDGMENT cases of tests/data/reference/cases (direction only, both ways) and the
published Megatron Bridge runs (each ran on its GPU, so each should be predicted to fit). Published
rows list only TP/PP/VPP/CP/EP; ``recipe_defaults: mbridge-perf`` fills the rest from the matching
Megatron Bridge perf recipe (same model, GPU, precision and TP/PP/CP/EP) and the shared helpers."""

from __future__ import annotations

import pytest

from moeplan import estimate_memory, load_scenario
from tests.conftest import load_cases, load_published_runs
from tests.test_cases import case_to_scenario

#: inputs the cases leave out and the estimate needs, filled explicitly (never from the answer)
CASE_FILLS = {
    # B12 states neither GPU nor sequence: "64 GPUs of 80 GB" → an 80 GB H100; DeepSeek-V3's 4096
    "B12": {"system": {"gpu": "h100"}, "training": {"seq_length": 4096}},
}
#: cases where our estimate disagrees with the case's judgment (kept as strict xfails, explained)
KNOWN_MISSES = {
    ("B11", "main"): "we predict 80 % of HBM (static 36 GiB + 23 GiB activations at 0.46 GiB per layer); the run "
    "OOMed in NeMo 25.07, where routing was not force-balanced and mcore of that time kept expert outputs "
    "for the probability gradient; the case's own arithmetic assumes 0.8 GB per layer",
    ("B54", "more0"): "the bug log's proposed check (not a measurement): we predict 70 of 80 GiB (static 68 GiB, "
    "matching its 64 GB + 7 GB), i.e. it fits on paper with 10 GiB left",
}


def _judgment_rows():
    rows = []
    for c in load_cases():
        entries = [("main", c)] + [(f"more{i}", m) for i, m in enumerate(c.get("more_checks") or [])]
        for tag, e in entries:
            exp = e["expected"]
            cert = e.get("certainty", c["certainty"])
            if cert != "JUDGMENT" or exp.get("rule") not in ("memory_fit", "memory_borderline"):
                continue
            sc = e.get("scenario") or {}
            if sc.get("model") is None:
                continue  # no config for the model in the catalog (e.g. Qwen3-32B)
            marks = []
            if (c["id"], tag) in KNOWN_MISSES:
                marks = [pytest.mark.xfail(strict=True, reason=KNOWN_MISSES[(c["id"], tag)])]
            rows.append(pytest.param(c["id"], e, exp["verdict"], marks=marks, id=f"{c['id']}-{tag}"))
    return rows


@pytest.mark.parametrize("case_id,entry,expected", _judgment_rows())
def test_judgment_case_direction(case_id, entry, expected):
    sc = case_to_scenario(case_id, entry)
    for sec, vals in CASE_FILLS.get(case_id, {}).items():
        for k, v in vals.items():
            sc[sec].setdefault(k, v)
    est = estimate_memory(load_scenario(sc))
    if expected == "fits":
        assert est.verdict == "fits", est.peak_bytes / est.capacity_bytes
    elif expected == "does-not-fit":
        assert est.verdict == "does-not-fit", est.peak_bytes / est.capacity_bytes
    else:  # warn / borderline: within 10 % of HBM either side
        assert 0.9 <= est.peak_bytes / est.capacity_bytes <= 1.1


def test_both_directions_are_covered():
    exp = {p.values[2] for p in _judgment_rows()}
    assert {"fits", "does-not-fit"} <= exp


#: published runs our estimate puts over HBM even with the recipe fills. The first: the 25.11
#: summary lists MBS 4 (GBS 512) for gpt-oss-120b on 64 H100 with PP4 EP8, while both recipe tables
#: (Table A 64gpu_h100_bf16 and the v0.5.1 H100 presets) use MBS 1 for that layout; with MBS 1 we
#: predict 71 % of HBM.
PUBLISHED_MISSES = {
    "mbperf-25.11-gpt-oss-120b-h100x64-bf16-gbs512-mbs4": "MBS 4 at PP4 on 80 GB; every recipe for this layout uses MBS 1",
    # 25.09 (Bridge 0.1.0rc3, whose MixedPrecisionConfig already defaulted fp8_recipe to 'tensorwise'):
    # with today's recipe fills (precision-aware optimizer, fp32 master, bf16 gradients) megatron-core
    # keeps the fp32 master, and the device figure lands 1-3 % over usable HBM, inside the ±11 % band.
    # The 25.09 recipes' own optimizer settings are not published, and the Mixtral MBS 2 readings
    # (+10 %, docs/memory_accuracy.md) suggest the activation count runs high at these microbatch counts.
    "mbperf-25.09-qwen3-235b-a22b-b200x64-prec-na-gbs1024-mbs1": "1.01 of usable HBM (today's fills on Bridge 0.1.0rc3)",
    "mbperf-25.09-qwen3-30b-a3b-h100x16-prec-na-gbs512-mbs2": "1.03 of usable HBM (today's fills on Bridge 0.1.0rc3)",
}


def _published():
    runs = load_published_runs()
    out = []
    for r in runs:
        marks = (
            [pytest.mark.xfail(strict=True, reason=PUBLISHED_MISSES[r["id"]])] if r["id"] in PUBLISHED_MISSES else []
        )
        out.append(pytest.param(r, marks=marks, id=r["id"]))
    return out


@pytest.mark.parametrize("run", _published())
def test_published_run_fits(run):
    sc = dict(run["scenario"])
    sc["recipe_defaults"] = "mbridge-perf-benchmark"
    sc["versions"] = {"container": run["release"]}  # the release it was measured in (the optimizer's defaults)
    est = estimate_memory(load_scenario(sc))
    assert est.fits, f"peak {est.peak_bytes / est.capacity_bytes:.2f} of usable HBM"
