"""Long-context step time by CP exchange: the guidance's DeepSeek-V3 128K layout on 256 H100
under each ``cp_comm_type`` (and hierarchical split), and Qwen3-Next-80B on 32 GB200 from 8K to 64K
with CP 1 → 16 (the long-context skill card: throughput falls). Writes docs/cp_comm_types.md.

Run: ``python benchmarks/cp_comm_types.py``. Nothing here is fitted to these cases."""

from __future__ import annotations

import copy
from pathlib import Path

import yaml

from moeplan import estimate_memory, estimate_step, load_scenario, validate

ROOT = Path(__file__).resolve().parents[1]
DSV3 = ROOT / "tests" / "golden" / "scenarios" / "dsv3_h100_128k_hcp.yaml"
QNEXT = ROOT / "tests" / "golden" / "scenarios" / "qwen3_next_gb200_64k.yaml"
CARD = ROOT / "benchmarks" / "data" / "long_context_card.yaml"
GIB = 2**30

#: (label, cp_comm_type, hierarchical_context_parallel_sizes)
CP_TYPES = (
    ("p2p", "p2p", None),
    ("all_gather", "all_gather", None),
    ("a2a", "a2a", None),
    ("a2a+p2p [8, 4]", "a2a+p2p", [8, 4]),
    ("a2a+p2p [4, 8]", "a2a+p2p", [4, 8]),
    ("a2a+p2p [2, 16]", "a2a+p2p", [2, 16]),
)
#: Qwen3-Next on 32 GB200: (seq_length, context_parallel_size)
QNEXT_POINTS = ((8192, 1), (16384, 2), (32768, 4), (65536, 16))


def _row(data: dict) -> dict:
    s = load_scenario(data)
    chk = validate(s)
    if chk.errors:
        return {"verdict": chk.verdict, "errors": [f.rule_id for f in chk.errors]}
    r = estimate_step(s)
    cp = r.breakdown_s.get("cp_comm_exposed", 0.0)
    return {
        "verdict": chk.verdict,
        "tokens_per_s_per_gpu": r.tokens_per_s_per_gpu,
        "step_time_s": r.step_time_s,
        "cp_exposed_s": cp,
        "cp_exposed_pct": 100 * cp / r.step_time_s,
        "attention_s": r.breakdown_s.get("attention", 0.0),
    }


def dsv3_rows() -> list[tuple[str, dict]]:
    """The DeepSeek-V3 128K guidance layout under each CP exchange."""
    base = yaml.safe_load(DSV3.read_text(encoding="utf-8"))
    out = []
    for label, kind, split in CP_TYPES:
        d = copy.deepcopy(base)
        d["layout"]["cp_comm_type"] = kind
        d["layout"].pop("hierarchical_context_parallel_sizes", None)
        if split:
            d["layout"]["hierarchical_context_parallel_sizes"] = split
        out.append((label, _row(d)))
    return out


def qwen3_next_rows() -> list[tuple[int, int, dict]]:
    """Qwen3-Next-80B on 32 GB200, the same layout family, seq 8K → 64K with CP 1 → 16, ~4 Mi tokens/step."""
    base = yaml.safe_load(QNEXT.read_text(encoding="utf-8"))
    out = []
    for seq, cp in QNEXT_POINTS:
        d = copy.deepcopy(base)
        d["training"].update(seq_length=seq, global_batch_size=max(1, 4 * 2**20 // seq))
        d["layout"]["context_parallel_size"] = cp
        out.append((seq, cp, _row(d)))
    return out


def _card_scenario(run: dict, comm: str) -> dict:
    """A DeepSeek-V3 row of the long-context card with ``comm`` as its CP exchange (a2a+p2p: all-to-all
    inside each 8-GPU node, ring across nodes; plain a2a when CP fits one node)."""
    d = copy.deepcopy(run["scenario"])
    cp = d["layout"]["context_parallel_size"]
    if cp > 1 and comm == "a2a+p2p":
        inner = min(cp, 8)
        d["layout"]["cp_comm_type"] = "a2a+p2p" if cp > inner else "a2a"
        if cp > inner:
            d["layout"]["hierarchical_context_parallel_sizes"] = [inner, cp // inner]
    elif cp > 1:
        d["layout"]["cp_comm_type"] = comm
    return d


def card_rows() -> list[tuple[dict, dict[str, float]]]:
    """The card's DeepSeek-V3 rows (``benchmarks/data/long_context_card.yaml``), sizes held, model
    TFLOP/s per GPU predicted under p2p and under a2a+p2p [8, CP/8]."""
    card = yaml.safe_load(CARD.read_text(encoding="utf-8"))
    out = []
    for run in card["runs"]:
        if "dsv3" not in run["id"]:
            continue
        pred = {
            c: estimate_step(load_scenario(_card_scenario(run, c))).model_tflops_per_gpu for c in ("p2p", "a2a+p2p")
        }
        out.append((run, pred))
    return out


def _card_lines() -> list[str]:
    rows = card_rows()
    lines = [
        "",
        "NVIDIA's long-context card, DeepSeek-V3 on H100 (`benchmarks/data/long_context_card.yaml`; the card does not "
        "state `cp_comm_type`), model TFLOP/s per GPU. From CP 16 the p2p ring crosses nodes: each step's K/V "
        "(335.5 MB at 4096 tokens per rank) rides one 400 Gb/s NIC, longer than a step's attention, so p2p cannot "
        "reach the card's figures (`tests/test_cp_ring.py`); a2a+p2p [8, CP/8] hides its ring behind 8× longer steps:",
        "",
        "| seq | CP | measured | p2p (error) | a2a+p2p [8, CP/8] (error) |",
        "|---|---|---|---|---|",
    ]
    for run, pred in rows:
        meas = run["measured"]["model_tflops_per_gpu"]
        sc = run["scenario"]
        cells = " | ".join(f"{pred[c]:.0f} ({100 * (pred[c] - meas) / meas:+.0f} %)" for c in ("p2p", "a2a+p2p"))
        lines.append(
            f"| {sc['training']['seq_length']:,} | {sc['layout']['context_parallel_size']} | {meas} | {cells} |"
        )
    flat = {c: max(p[c] for _, p in rows) / min(p[c] for _, p in rows) for c in ("p2p", "a2a+p2p")}
    meas_flat = max(r["measured"]["model_tflops_per_gpu"] for r, _ in rows) / min(
        r["measured"]["model_tflops_per_gpu"] for r, _ in rows
    )
    lines += [
        "",
        f"Flatness (max / min): measured {meas_flat:.2f}, p2p {flat['p2p']:.2f}, a2a+p2p {flat['a2a+p2p']:.2f}.",
    ]
    return lines


#: the memory terms of a stage that are not counted from a megatron-core / Transformer Engine allocation
#: but set as a share of other memory (the CUDA-graph pool, the caching allocator's fragmentation)
ASSUMED_TERMS = ("cuda_graph_pool", "allocator_fragmentation")
#: megatron-core dev, where TE's per-layer graphs honour create_attention_mask_in_dataloader (PR #5131)
DEV = {"megatron_core": "0.19.0+dev"}
#: the card's Qwen3-235B 128K layout, with one stated setting changed at a time:
#: (label, layout changes, training changes, versions)
Q235_VARIANTS = (
    ("as stated (mask built in the dataloader)", {}, {}, {}),
    (
        "create_attention_mask_in_dataloader: false, megatron-core 0.19.0",
        {"create_attention_mask_in_dataloader": False},
        {},
        {"megatron_core": "0.19.0"},
    ),
    (
        "create_attention_mask_in_dataloader: false, megatron-core dev",
        {"create_attention_mask_in_dataloader": False},
        {},
        DEV,
    ),
    ("… and no TE graphs", {"create_attention_mask_in_dataloader": False, "cuda_graph_impl": None}, {}, DEV),
    ("… mask off, precision mxfp8", {"create_attention_mask_in_dataloader": False}, {"precision": "mxfp8"}, DEV),
    (
        "… mask off, recompute moe + layernorm",
        {"create_attention_mask_in_dataloader": False, "recompute_modules": ["moe", "layernorm"]},
        {},
        DEV,
    ),
)


def qwen3_235b_memory_rows() -> list[tuple[str, dict]]:
    """The card's Qwen3-235B-A22B row at 128K (TP4 PP4 VPP12 CP4 EP32) with one stated setting changed at a
    time: the peak stage's memory (GiB), its activations and static graph inputs, the part counted from
    allocations (everything but :data:`ASSUMED_TERMS`), the capacity and the verdict."""
    card = yaml.safe_load(CARD.read_text(encoding="utf-8"))
    run = next(r for r in card["runs"] if r["id"].startswith("card-qwen3-235b") and "131072" in r["id"])
    out = []
    for label, lay, train, versions in Q235_VARIANTS:
        d = copy.deepcopy(run["scenario"])
        for k, v in lay.items():
            if v is None:
                d["layout"].pop(k, None)
                d["layout"].pop("cuda_graph_scope", None)
            else:
                d["layout"][k] = v
        d["training"].update(train)
        if versions:
            d["versions"] = {**d.get("versions", {}), **versions}
        m = estimate_memory(load_scenario(d))
        items = m.peak_stage.items
        assumed = sum(items["other"].get(k, 0.0) for k in ASSUMED_TERMS)
        out.append(
            (
                label,
                {
                    "peak_gib": m.peak_bytes / GIB,
                    "activations_gib": items["activations"]["decoder_layers"] / GIB,
                    "graph_inputs_gib": items["other"].get("cuda_graph_static_inputs", 0.0) / GIB,
                    "counted_gib": (m.peak_bytes - assumed) / GIB,
                    "capacity_gib": m.capacity_bytes / GIB,
                    "verdict": m.memory_verdict.verdict,
                    "layer_microbatches": m.peak_stage.num_layers * m.peak_stage.inflight_microbatches,
                },
            )
        )
    return out


def _q235_lines() -> list[str]:
    rows = qwen3_235b_memory_rows()
    first = rows[0][1]
    lines = [
        "",
        "The card's Qwen3-235B-A22B row at 128K on 128 GB200 (TP4 PP4 VPP12 CP4 EP32, SP, recompute moe_act + "
        "layernorm, HybridEP, TE graphs on attn / moe_router / moe_preprocess, BF16; measured ~1,100 TFLOP/s/GPU), "
        "peak pipeline stage, one stated setting changed at a time. *Counted* leaves out the two terms set as a "
        "share of other memory (graph pool, fragmentation); `tests/test_memory_128k_mechanisms.py` derives each "
        "counted term by hand from the source:",
        "",
        "| variant | peak GiB | counted GiB | activations GiB | graph static inputs GiB | capacity GiB | verdict |",
        "|---|---|---|---|---|---|---|",
    ]
    for label, r in rows:
        lines.append(
            f"| {label} | {r['peak_gib']:.1f} | {r['counted_gib']:.1f} | {r['activations_gib']:.1f} | "
            f"{r['graph_inputs_gib']:.1f} | {r['capacity_gib']:.1f} | {r['verdict']} |"
        )
    off = rows[2][1]
    over = off["counted_gib"] - off["capacity_gib"]
    verdict = (
        f"the counted terms alone exceed the capacity in BF16 by {over:.1f} GiB, so the card's run also kept less "
        "than its stated settings keep — an unstated recompute or activation offload, or MXFP8 activations — or "
        "ran at a margin inside moeplan's memory band"
        if over > 0
        else f"the counted terms leave {-over:.1f} GiB of the capacity for the graph pool and fragmentation"
    )
    per_layer = first["activations_gib"] / first["layer_microbatches"]
    lines += [
        "",
        f"The activations are {first['layer_microbatches']:.0f} layer-microbatches in flight (the interleaved "
        f"schedule's warm-up on the peak stage) × {per_layer:.2f} GiB per layer at 32,768 tokens per CP rank, the per-layer "
        "count that matches megatron-core's own saved tensors (`docs/activation_oracle.md`, gqa_moe with TP 2, SP "
        "and moe_act). As stated, its TE attention graphs keep one causal mask per captured sample (4 GiB per captured "
        "layer and microbatch): megatron-core passes create_attention_mask_in_dataloader to these graphs only on the "
        "dev branch since PR #5131 (June 2026, after the card's date), so the card's run cannot have captured "
        "attention in TE graphs as its layout states. Without the mask, " + verdict + ".",
    ]
    return lines


def _fmt(r: dict) -> str:
    if "errors" in r:
        return f"{r['verdict']} ({', '.join(r['errors'])}) | – | – | –"
    return (
        f"{r['verdict']} | {r['tokens_per_s_per_gpu']:,.0f} | {r['cp_exposed_s']:.2f} s "
        f"({r['cp_exposed_pct']:.1f} %) | {r['attention_s']:.1f} s"
    )


def main() -> None:
    lines = [
        "# Step time by CP exchange",
        "",
        "Generated by `python benchmarks/cp_comm_types.py`: each `cp_comm_type` costed as "
        "Transformer Engine runs it (p2p ring overlapped with attention, all-to-all of Q/K/V/O, all-gather of "
        "K/V, a2a+p2p with `hierarchical_context_parallel_sizes`: all-to-all inside the first group, ring across "
        "the second); docs/how-it-works.md has the formulas.",
        "",
        f"DeepSeek-V3 at 128K on 256 H100, the guidance layout (`{DSV3.relative_to(ROOT)}`: TP1 PP8 VPP4 CP32 "
        "EP32, optimizer offload, selective recompute), only the CP exchange changed:",
        "",
        "| cp_comm_type | check | tok/s/GPU | exposed CP (share of step) | attention |",
        "|---|---|---|---|---|",
    ]
    lines += [f"| {label} | {_fmt(r)} |" for label, r in dsv3_rows()]
    lines += [
        "",
        f"Qwen3-Next-80B-A3B on 32 GB200 (`{QNEXT.relative_to(ROOT)}`'s layout family), about 4 Mi tokens per "
        "step, sequence and CP grown together. Gated DeltaNet layers are costed from FLA's chunked kernel table "
        "and, under CP, with the all-to-alls megatron-core adds around them; the skill card states throughput falls:",
        "",
        "| seq | CP | check | tok/s/GPU | exposed CP (share of step) | attention |",
        "|---|---|---|---|---|---|",
    ]
    lines += [f"| {seq:,} | {cp} | {_fmt(r)} |" for seq, cp, r in qwen3_next_rows()]
    lines += _card_lines()
    lines += _q235_lines()
    (ROOT / "docs" / "cp_comm_types.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    from script_args import takes_no_arguments

    takes_no_arguments(__doc__)
    main()
