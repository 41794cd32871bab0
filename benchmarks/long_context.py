"""Out-of-sample check of the long-context costs: NVIDIA's measured LLAMA2-7B FP8 runs on DGX-H100 with
context parallelism, 4K to 1024K tokens (``benchmarks/data/nemo_long_sequence.yaml``, from NeMo's
long-sequence performance page), predicted with the packaged constants. Nothing is fitted on them: the
constants come from the 4K–8K Megatron Bridge runs, so every row past 8K tests the first-principles
attention (FlashAttention kernel figures, causal s² work per CP rank) and CP (ring p2p overlapped with
attention) costs, on which the product is judged at long context.

Reports per row: measured and predicted model TFLOP/s/GPU, the error, the attention and exposed-CP shares
of the predicted step; then the median and worst absolute error, and the shape error (each row's error
after one common scale, the geometric mean ratio, which removes a software-level offset between NeMo
24.03 and the newest release the constants describe). Writes docs/long_context.md.

Usage: python benchmarks/long_context.py
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import yaml

from moeplan import estimate_memory, estimate_step, load_scenario

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "benchmarks" / "data" / "nemo_long_sequence.yaml"


def load() -> dict:
    """The measured table (its rows, model config path, GPU, precision and batch assumption)."""
    return yaml.safe_load(DATA.read_text())


def scenario(table: dict, row: dict, container: str | None = None):
    """The scenario of one measured row: its TP/PP/CP on ``num_gpus`` GPUs, MBS 1, GBS from the table's
    tokens per step (at least DP)."""
    seq = row["seq_k"] * 1024
    assert row["tp"] * row["pp"] * row["dp"] * row["cp"] == row["num_gpus"], row
    sc = {
        "model": str(DATA.parent / table["model"]),
        "system": {"gpu": table["gpu"], "num_gpus": row["num_gpus"]},
        "training": {
            "seq_length": seq,
            "micro_batch_size": 1,
            "global_batch_size": max(row["dp"], table["tokens_per_step"] // seq),
            "precision": table["precision"],
        },
        "layout": {
            "tensor_model_parallel_size": row["tp"],
            "pipeline_model_parallel_size": row["pp"],
            "context_parallel_size": row["cp"],
        },
    }
    if container:
        sc["versions"] = {"container": container}
    return load_scenario(sc)


def predict(table: dict, container: str | None = None) -> list[dict]:
    """One dict per row: seq_k, measured and predicted TFLOP/s/GPU, error %, attention and exposed-CP
    shares of the predicted step, whether the layout fits in our memory model."""
    out = []
    for row in table["rows"]:
        sc = scenario(table, row, container)
        t = estimate_step(sc)
        bd = t.breakdown_s
        out.append(
            {
                **row,
                "predicted_tflops": t.model_tflops_per_gpu,
                "error_pct": 100 * (t.model_tflops_per_gpu / row["measured_tflops"] - 1),
                "attention_share": bd.get("attention", 0.0) / t.step_time_s,
                "cp_exposed_share": bd.get("cp_comm_exposed", 0.0) / t.step_time_s,
                "fits": estimate_memory(sc).fits,
            }
        )
    return out


def predict_moe(table: dict) -> list[dict]:
    """The MoE rows at 64K (Mixtral-8x22B, CP 8): measured and predicted tokens/s/GPU and error %, the
    FLOPs-per-token ratio against the published TFLOP/s ÷ tokens/s where both are given, and the
    software factor used (their containers predate every fitted release: the oldest fitted factor)."""
    out = []
    for r in table.get("moe_runs", []):
        sc = load_scenario(
            {**r["scenario"], "versions": {"container": r["container"]}, "recipe_defaults": "mbridge-perf-benchmark"}
        )
        t = estimate_step(sc)
        meas = r["measured"]
        row = {
            "id": r["id"],
            "measured_tokens": meas["tokens_per_s_per_gpu"],
            "predicted_tokens": t.tokens_per_s_per_gpu,
            "error_pct": 100 * (t.tokens_per_s_per_gpu / meas["tokens_per_s_per_gpu"] - 1),
            "release_used": t.release,
            "attention_share": t.breakdown_s.get("attention", 0.0) / t.step_time_s,
            "cp_exposed_share": t.breakdown_s.get("cp_comm_exposed", 0.0) / t.step_time_s,
            "fits": estimate_memory(sc).fits,
            "flops_per_token_ratio": None,
        }
        if "model_tflops_per_gpu" in meas:
            ours = t.model_tflops_per_gpu / t.tokens_per_s_per_gpu
            theirs = meas["model_tflops_per_gpu"] / meas["tokens_per_s_per_gpu"]
            row["flops_per_token_ratio"] = ours / theirs
        out.append(row)
    return out


def summary(rows: list[dict]) -> dict:
    """Median / worst absolute error %, and the same after one common (geometric-mean) scale."""
    errs = [abs(r["error_pct"]) for r in rows]
    logs = [math.log(r["predicted_tflops"] / r["measured_tflops"]) for r in rows]
    scale = math.exp(statistics.fmean(logs))
    shape = [abs(100 * (math.exp(x) / scale - 1)) for x in logs]
    return {
        "median_abs_pct": statistics.median(errs),
        "worst_abs_pct": max(errs),
        "best_abs_pct": min(errs),
        "scale": scale,
        "shape_median_pct": statistics.median(shape),
        "shape_worst_pct": max(shape),
    }


def signed_range(rows: list[dict]) -> str:
    """The rows' errors as prose: "1–9 % under" when every row is under, "1–9 % over" when every row is
    over, else "from 9 % under to 1 % over" (whole percent)."""
    errs = [r["error_pct"] for r in rows]
    lo, hi = min(errs), max(errs)
    if hi < 0:
        return f"{-hi:.0f}–{-lo:.0f} % under"
    if lo >= 0:
        return f"{lo:.0f}–{hi:.0f} % over"
    return f"from {-lo:.0f} % under to {hi:.0f} % over"


def moe_summary(moe: list[dict]) -> dict:
    """Median and worst absolute tokens/s/GPU error % over :func:`predict_moe`'s rows, and their count."""
    errs = sorted(abs(r["error_pct"]) for r in moe)
    return {"runs": len(errs), "median_abs_pct": statistics.median(errs), "worst_abs_pct": errs[-1]}


def check_figures(table: dict, s: dict, moe: list[dict]) -> dict:
    """What ``src/moeplan/catalog/data/long_context_check.json`` holds: the dense rows' :func:`summary`
    ``s`` and the MoE rows' errors, rounded to 0.1 %."""
    return {
        "what": "NVIDIA's measured dense LLAMA2-7B FP8 runs on H100 with CP 1–32",
        "source": "benchmarks/long_context.py, docs/long_context.md",
        "seq_length_range": [table["rows"][0]["seq_k"] * 1024, table["rows"][-1]["seq_k"] * 1024],
        "median_abs_pct": round(s["median_abs_pct"], 1),
        "worst_abs_pct": round(s["worst_abs_pct"], 1),
        "shape_worst_pct": round(s["shape_worst_pct"], 1),
        "moe_64k_abs_pct": [round(abs(r["error_pct"]), 1) for r in moe if "seq65536" in r["id"]],
        "moe_out_of_sample_abs_pct": [round(abs(r["error_pct"]), 1) for r in moe],
    }


def main() -> None:
    table = load()
    rows = predict(table)
    s = summary(rows)
    old_rows = predict(table, container="24.03")
    old = summary(old_rows)
    from moeplan.model.constants import load_constants

    old_rel = load_constants().release("24.03")
    lines = [
        "# Long context: predicted against NVIDIA's measured runs with context parallelism",
        "",
        "Generated by `python benchmarks/long_context.py`. Measured: LLAMA2-7B FP8 on DGX-H100, NeMo 24.03.01, "
        f"from {table['source']}; the with-CP layouts as published, MBS 1, GBS = 4 Mi tokens per step "
        "(the batch of the page's later B200 version; the H100 page does not state it). Predicted with the "
        "packaged constants, fitted on 4K–8K MoE runs only: nothing here was fitted, and every row past 8K "
        "tests the first-principles attention and CP costs.",
        "",
        "| seq | GPUs | TP | PP | DP | CP | measured TFLOP/s/GPU | predicted | error % | attention share | "
        "exposed CP share | fits (our memory model) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['seq_k']}K | {r['num_gpus']} | {r['tp']} | {r['pp']} | {r['dp']} | {r['cp']} | "
            f"{r['measured_tflops']} | {r['predicted_tflops']:.0f} | {r['error_pct']:+.1f} | "
            f"{100 * r['attention_share']:.0f} % | {100 * r['cp_exposed_share']:.1f} % | {'yes' if r['fits'] else 'no'} |"
        )
    lines += [
        "",
        f"- median absolute error {s['median_abs_pct']:.1f} %, worst {s['worst_abs_pct']:.1f} % "
        "(no container given: the newest release's software factor, as `estimate` uses by default)",
        f"- shape: after one common scale ({s['scale']:.3f}), median {s['shape_median_pct']:.1f} %, "
        f"worst {s['shape_worst_pct']:.1f} %",
        f"- with `versions.container: 24.03` stated, the product takes the oldest fitted release's factor "
        f"({old_rel[0]}, {old_rel[1]:.2f}): {signed_range(old_rows)} (median absolute "
        f"{old['median_abs_pct']:.1f} %) — a "
        "level offset, the shape is the same. The release factors were fitted on MoE runs, whose software gained "
        "far more between releases than the mature dense stack of a 7B model",
        "- the 4K row (TP 1, DP 4) does not fit in our memory model (87 GiB of 79.6 usable) with FP32 main "
        "gradients and TE's FP8 weight copies; NeMo ran it, so that recipe kept less (BF16 gradient reduction "
        "alone would fit)",
        "",
    ]
    moe = predict_moe(table)
    lines += [
        "## NVIDIA's MoE runs, out of sample",
        "",
        "MoE rows of NeMo's performance summaries, none of them in the fitted runs: Mixtral-8x22B at 65536 "
        "tokens with CP 8 (TP 2, PP 4, VPP 14, EP 8, MBS 1, GBS 64) on B200 and GB200, Mixtral-8x7B at 4K on "
        "B200 (EP 8, MBS 2), and the Llama-4-Scout language model at 8K on GB200 (EP 16); layouts from NeMo's "
        "recommended model configs where the tables omit them, knobs from the perf recipes' shared functions "
        "(`recipe_defaults: mbridge-perf`: BF16 gradient reduction, FP8 parameter gather, as NeMo's "
        "performance scripts set). Their containers (25.02–25.07) predate every fitted release, so the "
        "oldest fitted software factor is used. Sources and assumptions: benchmarks/data/nemo_long_sequence.yaml.",
        "",
        "| run | measured tokens/s/GPU | predicted | error % | factor of | attention share | exposed CP share | "
        "FLOPs/token ours ÷ published | fits |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in moe:
        ratio = f"{r['flops_per_token_ratio']:.4f}" if r["flops_per_token_ratio"] else "–"
        lines.append(
            f"| {r['id']} | {r['measured_tokens']} | {r['predicted_tokens']:.0f} | {r['error_pct']:+.1f} | "
            f"{r['release_used']} | {100 * r['attention_share']:.0f} % | {100 * r['cp_exposed_share']:.1f} % | "
            f"{ratio} | {'yes' if r['fits'] else 'no'} |"
        )
    ms = moe_summary(moe)
    lines += [
        "",
        f"- tokens/s/GPU: median absolute error {ms['median_abs_pct']:.1f} %, worst {ms['worst_abs_pct']:.1f} % over "
        f"{ms['runs']} runs of 3 MoE models the constants never saw",
        "- FLOPs per token: ours equal NVIDIA's within 0.1 % except Mixtral-8x7B at 4K (0.961): there NeMo 25.02 "
        "counted the attention scores over the full sequence rather than causally; the difference, 6·s·h·L = "
        "3.2 GFLOP per token, is the gap within 1 % (Mixtral-8x22B at 64K, in 25.02 too, is counted causally)",
        "",
    ]
    (ROOT / "docs" / "long_context.md").write_text("\n".join(lines))
    out = ROOT / "src" / "moeplan" / "catalog" / "data" / "long_context_check.json"
    out.write_text(json.dumps(check_figures(table, s, moe), indent=2) + "\n")
    print("\n".join(lines[5:]))


if __name__ == "__main__":
    from script_args import takes_no_arguments

    takes_no_arguments(__doc__)
    main()
