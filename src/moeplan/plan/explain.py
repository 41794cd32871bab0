"""Why the winner wins: one short paragraph per decision, from the candidates the search evaluated
(best layout per value of each parallel size, the recompute rungs it tried, the knob variants of the
refinement), the runner-up's differences, and the rule-of-thumb baseline.
"""

from __future__ import annotations

from moeplan.plan.search import TIE_FRACTION, Candidate, SearchResult

_DIMS = (
    ("cp", "CP", "context_parallel_size"),
    ("tp", "TP", "tensor_model_parallel_size"),
    ("pp", "PP", "pipeline_model_parallel_size"),
    ("ep", "EP", "expert_model_parallel_size"),
)


def _pct(a: float, b: float) -> str:
    return f"{100 * (a / b - 1):+.1f} %"


def best_by(res: SearchResult, attr: str) -> dict[int, Candidate]:
    """The best candidate for each value of a parallel size (``cp``, ``tp``, ``pp``, ``ep``)."""
    out: dict[int, Candidate] = {}
    for c in res.candidates:  # sorted best first
        out.setdefault(getattr(c.parallel, attr), c)
    return out


def _nvl72(c) -> bool:
    """Whether the candidate runs expert parallelism on a rack-scale NVLink domain (NVL72)."""
    gpu = c.scenario.gpu
    return bool(gpu and gpu.is_nvl72 and c.parallel.ep > 1)


def _size_line(res: SearchResult, w: Candidate, attr: str, name: str, key: str, brief: bool = False) -> str:
    """One parallel size of the winner against the best layout of each other value of it (``brief``:
    the relative figures only)."""
    if key in (res.request.get("fixed") or {}):
        return f"{name} {getattr(w.parallel, attr)}: held fixed by the request."
    tps = w.tokens_per_s_per_gpu
    per = best_by(res, attr)
    v = getattr(w.parallel, attr)
    others = [
        f"{name}{alt} {100 * (per[alt].tokens_per_s_per_gpu / tps - 1):+.0f} %"
        if brief
        else f"{name}{alt} {per[alt].tokens_per_s_per_gpu:,.0f} ({_pct(per[alt].tokens_per_s_per_gpu, tps)})"
        for alt in sorted(per)
        if alt != v
    ]
    missing = [x for x in (v // 2, v * 2) if x >= 1 and x != v and x not in per]
    text = f"{name} {v}"
    if attr == "cp":
        text += f" ({res.request['seq_length'] // v:,} tokens per CP rank)"
    lead = ": " if brief else f": best of each {name} — "
    text += lead + (", ".join(others) if others else "no other value fits or is legal")
    if missing:
        text += f"; {name}{'/'.join(map(str, missing))}: nothing legal fits"
    return text + "."


def _recompute_brief(w: Candidate) -> str:
    """The recompute rung chosen and its cost, in one short line."""
    bd = w.throughput["breakdown_s"]
    cost = (
        f"; costs {100 * bd['recompute'] / w.throughput['step_time_s']:.1f} % of the step"
        if bd.get("recompute")
        else ""
    )
    if " + optimizer offload" in w.recompute and w.recompute.startswith("selective"):
        return f"recompute {w.recompute}: beats full recompute, the only rung that fits alone{cost}."
    return f"recompute {w.recompute}: the cheapest rung that fits ({w.peak_gib:.1f} of {w.capacity_gib:.1f} GiB){cost}."


def _recompute_line(w: Candidate) -> str:
    """The recompute rung chosen, the cheaper rungs that did not fit, and what it costs."""
    not_fit = [
        f"{n} {g:.1f} GiB" if g is not None else f"{n} (breaks a rule)"
        for n, g in dict(w.ladder_tried).items()
        if n != w.recompute and (g is None or g > w.peak_gib)
    ]
    if " + optimizer offload" in w.recompute and w.recompute.startswith("selective"):
        rc = (
            f"recompute {w.recompute}: on the ladder (none → selective modules → full →"
            f" full + offload) only full recompute fits; keeping selective recompute and offloading the optimizer state"
            f" instead is predicted faster"
            f" ({w.peak_gib:.1f} of {w.capacity_gib:.1f} GiB)"
        )
    else:
        rc = (
            f"recompute {w.recompute}: the cheapest rung of the ladder (none → selective modules → full → full +"
            f" offload) that fits with headroom ({w.peak_gib:.1f} of {w.capacity_gib:.1f} GiB)"
        )
    if not_fit:
        rc += "; cheaper rungs tried: " + ", ".join(not_fit)
    bd = w.throughput["breakdown_s"]
    if bd.get("recompute"):
        rc += f"; it costs {100 * bd['recompute'] / w.throughput['step_time_s']:.1f} % of the step"
    return rc + "."


def _knob_note(w: Candidate, fam: str, t: dict, chosen: str) -> str:
    """Why a knob setting stands although another is as fast (ties, the simpler setting kept), and
    the guidance's caveats for dispatchers on NVL72 and full-iteration graphs."""
    ref = t.get(chosen)
    same = [n for n, val in t.items() if n != chosen and val is not None and ref and abs(val / ref - 1) < 1e-3]
    faster = [n for n, val in t.items() if n != chosen and val is not None and ref and val > ref * (1 + 1e-3)]
    note = ""
    if same and chosen == next(iter(t)):
        note = " (no predicted difference: the default is kept)"
    elif same:
        note = " (within 0.1 %: below the model's resolution)"
    if faster:
        note += (
            f" ({', '.join(faster)} within {100 * TIE_FRACTION:.0f} %: below the model's resolution, the simpler"
            " setting is kept)"
        )
    if fam == "dispatcher" and chosen != "hybridep" and t.get("hybridep") is not None and _nvl72(w):
        note += (
            " — the guidance puts HybridEP first on NVL72, and the model's HybridEP efficiency is fitted on"
            " published runs where it also absorbs costs the model lacks: measure both"
        )
    if fam == "graphs" and chosen != "full_iteration" and t.get("full_iteration") is not None:
        note += (
            " — full_iteration brings its static-budget expert path (HybridEP, rank capacity factor 1.5, TE op"
            " fuser, paged stash), so it carries HybridEP's fitted efficiency (see the dispatcher line)"
        )
    return note


def _chosen(w: Candidate, fam: str) -> str:
    """The label of the setting the winner runs for knob family ``fam`` (a label for every family:
    ``_knob_labels``; VPP as ``VPP<n>``)."""
    return w.knobs[fam] if fam != "vpp" else f"VPP{w.parallel.vpp}"


def _knob_line(w: Candidate, fam: str, title: str, brief: bool = False) -> str | None:
    """One knob family of the refinement: the setting chosen against the variants tried (``brief``:
    without the notes on ties and the guidance)."""
    t = w.tried.get(fam)
    if not t:
        return None
    chosen = _chosen(w, fam)
    if fam == "dispatcher" and w.knobs.get("graphs") == "full_iteration":
        seen = ", ".join(f"{n} {v:,.0f}" if v is not None else f"{n} rejected" for n, v in t.items())
        return (
            f"dispatcher {chosen}: set by the full-iteration graph, whose static-budget expert path needs it; "
            f"tried before EP overlap and graphs were set, the dispatchers gave {seen} tok/s/GPU."
        )
    why, warned = w.tried.get("_why", {}), w.tried.get("_warns", {})
    ref = t.get(chosen)
    parts = []
    for name, val in t.items():
        if name == chosen:
            continue
        if val is None:
            parts.append(f"{name} rejected ({why.get(f'{fam}:{name}', 'a rule or memory')})")
        else:
            flag = warned.get(f"{fam}:{name}")
            parts.append(
                f"{name} "
                + (_pct(val, ref) if ref else f"{val:,.0f}")
                + (f" but the check warns ({flag}): a tie goes to the unflagged option" if flag else "")
            )
    note = "" if brief else _knob_note(w, fam, t, chosen)
    weak = (w.tried.get("_weak_tie") or {}).get(fam)
    if weak is not None:
        note = (
            " — a tie on weak evidence: the gap rests on HybridEP's published kernel rate, measured at one"
            " shape, and the guidance runs HybridEP on NVL72 (measure both)"
        )
    elif fam == "dispatcher" and brief and chosen != "hybridep" and t.get("hybridep") is not None and _nvl72(w):
        note += " (HybridEP's rate is its kernel figure at one shape: measure both)"
    head = chosen if str(chosen).startswith(title) else f"{title} {chosen}"  # "VPP8", not "VPP VPP8"
    return f"{head}: " + ("; ".join(parts) if parts else "the only option") + note + "."


def _context_lines(w: Candidate, brief: bool = False) -> list[str]:
    """Optimizer offload's cost, DP at its floor, and CP on a MoE VLM (the guidance's caveats)."""
    lines = []
    sw, bd = w.scenario, w.throughput["breakdown_s"]
    if brief:
        if sw.dp == 1 and not w.parallel.fsdp:
            lines.append("DP 1: no data parallelism left; scaling is brittle at DP's floor (--verbose).")
        if sw.model is not None and sw.model.vision is not None and sw.model.is_moe and w.parallel.cp > 1:
            lines.append(f"CP {w.parallel.cp} on a MoE VLM: untested by the guidance; validate on a short run.")
        return lines
    if sw.layout.optimizer_cpu_offload:
        lines.append(
            f"optimizer offload {sw.layout.optimizer_offload_fraction}: needed to fit; the host-side "
            f"optimizer step costs {bd.get('optimizer', 0):.3f} s per step."
        )
    if sw.dp == 1 and not w.parallel.fsdp:
        lines.append(
            "DP 1: TP·CP·PP use every GPU, so there is no data parallelism left; the guidance warns that "
            "scaling turns brittle at DP's floor (a slow rank stalls the step; more GPUs cannot be added "
            "without changing the layout) — with more GPUs, spend them on DP first."
        )
    if sw.model is not None and sw.model.vision is not None and sw.model.is_moe and w.parallel.cp > 1:
        lines.append(
            f"CP {w.parallel.cp} on a MoE VLM: the guidance calls context parallelism for MoE VLMs untested; "
            "validate on a short run before relying on it."
        )
    return lines


_KNOB_TITLES = (
    ("dispatcher", "dispatcher"),
    ("ep_overlap", "EP comm overlap"),
    ("graphs", "CUDA graphs"),
    ("cp_comm", "CP comm"),
    ("vpp", "VPP"),
)


def explain_winner(res: SearchResult, brief: bool = False) -> list[str]:
    """Plain-language lines: each parallel size, recompute, dispatcher, graphs, offload, CP comm
    (``brief``: one short line per decision, relative figures only — what ``plan`` prints by default)."""
    if not res.candidates:
        return []
    w = res.candidates[0]
    lines = [res.tie_note + "."] if res.tie_note else []
    lines += [_size_line(res, w, attr, name, key, brief) for attr, name, key in _DIMS]
    lines.append(_recompute_brief(w) if brief else _recompute_line(w))
    quiet = [title for fam, title in _KNOB_TITLES if brief and _within_tie(w, fam)]
    lines += [
        x for fam, title in _KNOB_TITLES if title not in quiet and (x := _knob_line(w, fam, title, brief)) is not None
    ]
    if quiet:
        lines.append(f"{', '.join(quiet)}: every setting tried within {100 * TIE_FRACTION:.0f} % (--verbose).")
    return lines + _context_lines(w, brief)


def _within_tie(w: Candidate, fam: str) -> bool:
    """Every setting of knob family ``fam`` was tried, none rejected, and all lie within
    :data:`~moeplan.plan.search.TIE_FRACTION` of the chosen one, with no weak-evidence tie to state:
    the brief explanation names the family instead of listing its figures."""
    t = w.tried.get(fam)
    if not t or len(t) < 2 or (w.tried.get("_weak_tie") or {}).get(fam) is not None:
        return False
    if fam == "dispatcher" and (w.knobs.get("graphs") == "full_iteration" or _nvl72(w)):
        return False
    ref = t.get(_chosen(w, fam))
    if not ref or any(v is None for v in t.values()):
        return False
    return all(abs(v / ref - 1) <= TIE_FRACTION for v in t.values())


def runner_up_diff(res: SearchResult) -> list[str]:
    """What differs between the winner and the next candidates, and by how much they trail."""
    if len(res.candidates) < 2:
        return []
    w = res.candidates[0]
    out = []
    for i, c in enumerate(res.candidates[1:3], start=2):
        lw, lc = w.data["layout"], c.data["layout"]
        keys = sorted(set(lw) | set(lc))

        def show(v):
            return "unset" if v is None else v

        diff = [f"{k}: {show(lw.get(k))} → {show(lc.get(k))}" for k in keys if lw.get(k) != lc.get(k)]
        if w.data["training"]["micro_batch_size"] != c.data["training"]["micro_batch_size"]:
            diff.append(
                f"micro_batch_size: {w.data['training']['micro_batch_size']} → {c.data['training']['micro_batch_size']}"
            )
        out.append(
            f"#{i} {c.parallel.label()}: {_pct(c.tokens_per_s_per_gpu, w.tokens_per_s_per_gpu)}, "
            f"{c.peak_gib:.1f} GiB; differs in " + "; ".join(diff)
        )
    return out
