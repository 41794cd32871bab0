"""Run the activation oracle for every kind x TP and print the comparison tables (markdown).

    oracle-venv/bin/python tests/oracle/act_report.py [rows.json]

Writes the raw kept-storage rows to ``rows.json`` (default ``act_oracle_rows.json`` in the current directory) and prints the
tables that ``docs/activation_oracle.md`` carries.
"""

from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from act_compare import MBS, SEQ, classify, compare  # noqa: E402
from act_harness import KINDS, mcore_saved_tensors, settings_for  # noqa: E402

#: (kind, tp) pairs the oracle runs; MLA and gated attention at TP = 1 only (see the doc)
RUNS = [
    ("gqa_dense", 1),
    ("gqa_dense", 2),
    ("gqa_moe", 1),
    ("gqa_moe", 2),
    ("mla_moe_shared", 1),
    ("mla_q_lora_moe_shared", 1),
    ("gated_attn_dense", 1),
]


def collect(runs=RUNS, cache: str | None = None) -> dict[str, dict]:
    """{"kind/tp": {setting: {"rows": [...]}}}, from ``cache`` when it exists."""
    if cache and os.path.exists(cache):
        with open(cache) as f:
            return json.load(f)
    out = {}
    for kind, tp in runs:
        out[f"{kind}/{tp}"] = mcore_saved_tensors(KINDS[kind], settings_for(KINDS[kind], tp), tp=tp, seq=SEQ, mbs=MBS)
    if cache:
        with open(cache, "w") as f:
            json.dump(out, f)
    return out


def main() -> None:
    cache = sys.argv[1] if len(sys.argv) > 1 else "act_oracle_rows.json"
    data = collect(cache=cache)
    print(
        "| kind | TP | setting | mcore B/token (modelled) | moeplan B/token | ratio | core mcore | core moeplan | unmodelled (mcore) |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    cmp = {}
    for key, settings in data.items():
        kind, tp = key.split("/")
        for setting, res in settings.items():
            if "rows" not in res:
                print(f"| {kind} | {tp} | {setting} | ERROR {res['error']} |")
                continue
            c = compare(KINDS[kind], int(tp), setting, res["rows"])
            cmp[(kind, tp, setting)] = c
            un = sum(c["unmodelled"].values())
            print(
                f"| {kind} | {tp} | {setting} | {c['mcore']:.0f} | {c['moeplan']:.0f} | {c['ratio']:.3f} | "
                f"{c['core_mcore']:.0f} | {c['core_moeplan']:.0f} | {un:.0f} |"
            )
    print()
    for (kind, tp, setting), c in cmp.items():
        if setting != "none":
            continue
        print(f"### {kind} TP={tp}")
        for n, (a, b) in c["per_name"].items():
            flag = "" if a and abs(b / a - 1) < 0.05 else "  <--"
            print(f"    {n:18} mcore {a:9.1f}  moeplan {b:9.1f}{flag}")
        print(
            "    core:",
            {k: round(v, 1) for k, v in c["core_roles"].items()},
            "moeplan core:",
            {k: round(v, 1) for k, v in c["core_moeplan_names"].items()},
        )
        print("    unmodelled:", {k: round(v, 1) for k, v in c["unmodelled"].items()})
    print()
    print("| kind | TP | module | mcore saving B/token | moeplan saving B/token | ratio |")
    print("|---|---|---|---|---|---|")
    for (kind, tp, setting), c in cmp.items():
        if setting == "none":
            continue
        base = cmp[(kind, tp, "none")]
        mc_save = base["total_mcore"] - c["total_mcore"]
        mp_save = base["total_moeplan"] - c["total_moeplan"]
        print(
            f"| {kind} | {tp} | {setting} | {mc_save:.0f} | {mp_save:.0f} | {mp_save / mc_save if mc_save else float('nan'):.2f} |"
        )
    print()
    for key, settings in data.items():
        kind = key.split("/")[0]
        for setting, res in settings.items():
            others = [r for r in res.get("rows", []) if classify(r, KINDS[kind]).startswith("other")]
            for r in others:
                print("OTHER", key, setting, r["nbytes"], r["shape"], r["dtype"], r["saved_in"], r["site"])


if __name__ == "__main__":
    main()
