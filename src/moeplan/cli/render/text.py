"""Short texts shared by the renderers: the ``assumes`` header line, the one-line error band, the
one-line step breakdown, the knob codes of the candidate tables and their legend, and how wide a
table may be."""

from __future__ import annotations

import re

from moeplan.cli.render import T

#: the step-time parts in words (keys of ``throughput.breakdown_s``)
PART_NAMES = {
    "dense_gemm": "dense GEMM",
    "expert_gemm": "expert GEMM",
    "attention": "attention",
    "memory_bound": "memory-bound",
    "launch_overhead": "launch",
    "recompute": "recompute",
    "tp_comm": "TP comm",
    "tp_comm_exposed": "TP comm",
    "activation_offload": "activation offload",
    "cp_comm_exposed": "CP comm",
    "ep_comm_exposed": "EP comm",
    "cp_comm": "CP comm",
    "ep_comm": "EP comm",
    "fsdp_comm_exposed": "FSDP comm",
    "pp_comm": "PP comm",
    "pipeline_bubble": "bubble",
    "dp_comm_exposed": "DP comm",
    "optimizer": "optimizer",
    "vision_encoder": "vision tower",
    "vision_projector": "vision projector",
}

#: knob codes of the candidate tables → what they mean (printed as a legend for the codes shown)
KNOB_LEGEND = {
    "sel(...)": "selective recompute",
    "full-rc": "full recompute",
    "opt-off F": "optimizer CPU offload",
    "deepep": "DeepEP dispatcher",
    "hybridep": "HybridEP dispatcher",
    "ep-ovl": "EP comm overlap",
    "te:...": "TE CUDA graphs",
    "full-iter": "full-iteration CUDA graph, loss NaN check off",
    "cp:...": "cp_comm_type",
    "pp-layout": "explicit pipeline layout (--json)",
    "acct-emb/loss": "account_for_embedding/loss_in_pipeline_split",
    "none": "no recompute, all-to-all, eager",
}


def assumes_line(items: list[dict], verbose: bool = False) -> str:
    """``assumes: grads reduced in FP32, ... (defaults); ...`` from a document's ``assumes`` list,
    grouped by source (stated, recipe fill, default); ``verbose`` adds each hint."""
    groups: dict[str, list[str]] = {}
    for a in items:
        hint = f" [{a['hint']}]" if verbose and a.get("hint") else ""
        groups.setdefault(a["source"], []).append(T(a["text"]) + hint)
    names = {"stated": "", "recipe": T(" (recipe fills)"), "default": T(" (defaults)")}
    parts = [T(", ").join(v) + names.get(k, f" ({k})") for k, v in groups.items()]
    return T("assumes: ") + T("; ").join(parts)


def _short_outside(item: str) -> tuple[str, str]:
    """(kind, short text) of one ``validity.outside`` entry: a layout feature, or the first clause."""
    m = re.match(r"layout feature '([^']+)' never appears", item)
    if m:
        return "feature", m.group(1)
    return "other", re.split(r"[:(;]", item, maxsplit=1)[0].strip()


def band_line(v: dict) -> str:
    """The error band in one line: ``expected error ±46 % (within the measured runs)`` or
    ``expected error ±50 % or worse — extrapolated: seq_length 131072 outside the fitted 4096–8192;
    never measured: cp>1, optimizer offload``."""
    pct = v.get("error_band_pct")
    band = f"±{pct:.0f} %" if isinstance(pct, (int, float)) and pct == pct else T("unknown")
    if v.get("validated"):
        return T("expected error {band} (within the measured runs' coverage)").format(band=band)
    kinds = [_short_outside(x) for x in v.get("outside", [])]
    other = [T(t) for k, t in kinds if k == "other"]
    feats = [T(t) for k, t in kinds if k == "feature"]
    why = T("; ").join(other + ([T("never measured: ") + ", ".join(feats)] if feats else []))
    return T("expected error {band} or worse — extrapolated: {why}").format(band=band, why=why)


def breakdown_line(th: dict, top: int = 5) -> str:
    """Where the step goes, in one line: ``step 10.39 s: expert GEMM 24 %, memory-bound 22 %, ...``
    (the ``top`` largest parts, the rest summed)."""
    step = th["step_time_s"]
    parts = sorted(((v, k) for k, v in th["breakdown_s"].items() if v > 0), reverse=True)
    shown = [f"{T(PART_NAMES.get(k, k.replace('_', ' ')))} {100 * v / step:.0f} %" for v, k in parts[:top]]
    rest = sum(v for v, _ in parts[top:])
    if rest > 0:
        shown.append(f"{T('other')} {100 * rest / step:.0f} %")
    return T("step {step} s: ").format(step=f"{step:.2f}") + T(", ").join(shown)


def knob_codes(cand: dict) -> list[str]:
    """The knob codes of a plan candidate (recompute rung, offload, dispatcher, EP overlap, graphs, CP
    exchange, pipeline split); [] for the defaults."""
    lay = cand["layout"]
    bits = []
    rc = cand.get("recompute") or ""
    rung, _, off = rc.partition(" + optimizer offload ")
    if rung.startswith("selective"):
        mods = rung.removeprefix("selective").strip() or "core_attn"
        bits.append(f"sel({mods})")
    elif rung.startswith("full"):
        bits.append("full-rc")
    if off:
        bits.append(f"opt-off {off}")
    k = cand.get("knobs") or {}
    if k.get("dispatcher") and k["dispatcher"] != "alltoall":
        bits.append(k["dispatcher"])
    if k.get("ep_overlap") == "on":
        bits.append("ep-ovl")
    g = k.get("graphs")
    if g == "full_iteration":
        bits.append("full-iter")
    elif g and g != "eager":
        bits.append(g.replace("moe_router", "router").replace("moe_preprocess", "preproc"))
    if k.get("cp_comm") and k["cp_comm"] != "p2p":
        bits.append("cp:" + k["cp_comm"].replace(" ", ""))
    if lay.get("pipeline_model_parallel_layout"):
        bits.append("pp-layout")
    elif lay.get("account_for_embedding_in_pipeline_split") or lay.get("account_for_loss_in_pipeline_split"):
        bits.append("acct-emb/loss")
    return bits


def legend(codes: list[str]) -> str:
    """The legend of the knob codes used (``sel(…) selective recompute of those modules; ...``)."""
    keys = []
    for code in codes:
        key = (
            "sel(...)"
            if code.startswith("sel(")
            else "opt-off F"
            if code.startswith("opt-off")
            else "te:..."
            if code.startswith("te:")
            else "cp:..."
            if code.startswith("cp:")
            else code
        )
        if key in KNOB_LEGEND and key not in keys:
            keys.append(key)
    return T("; ").join(f"{k} {T(KNOB_LEGEND[k])}" for k in keys)
