"""Self-contained HTML report of a plan: the assumptions, the ranked table (with model TFLOP/s/GPU),
the caveats (error band, assumptions, notes: never empty), the explanation, the guidance family and
baselines, the rejected tally, and four plots (memory per stage of the top candidates, where their
step time goes, tokens/s/GPU against CP and against the recompute choice), each with a legend where it
has more than one series; PNGs embedded as base64. Uses matplotlib (a core dependency).
"""

from __future__ import annotations

import base64
import html
import io
from pathlib import Path

from moeplan.errors import InputError
from moeplan.io.write import write_atomically as _write_atomically
from moeplan.units import GIB_BYTES

_CATS = ("weights", "grads", "optimizer", "activations", "other")
#: what the knobs cell adds for a candidate that runs without the loss NaN check (its ``nan_check_off``)
_NAN_CELL = "; loss NaN check off (the full-iteration graph needs it): a diverging loss is not caught"


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _breakdown_plot(plt, top) -> str:
    """Stacked bars of the step time of the top candidates, by part (seconds), with a legend."""
    parts: list[str] = []
    for c in top:
        for k, v in c.throughput["breakdown_s"].items():
            if v > 0 and k not in parts:
                parts.append(k)
    fig, ax = plt.subplots(figsize=(9, 0.6 * len(top) + 1.8))
    labels = [f"#{i} {c.parallel.label()}" for i, c in enumerate(top, start=1)]
    left = [0.0] * len(top)
    cmap = plt.get_cmap("tab20")
    for j, k in enumerate(parts):
        vals = [c.throughput["breakdown_s"].get(k, 0.0) for c in top]
        ax.barh(labels, vals, left=left, label=k.replace("_", " "), color=cmap(j % 20))
        left = [a + b for a, b in zip(left, vals, strict=True)]
    ax.invert_yaxis()
    ax.set_xlabel("seconds per step")
    ax.tick_params(axis="y", labelsize=8)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.25), ncol=5)
    ax.set_title("where the step goes (the slowest pipeline stage's parts)", fontsize=9)
    png = _png(fig)
    plt.close(fig)
    return png


def _plots(res) -> list[tuple[str, str]]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = []
    top = res.candidates[:3]
    if top:
        fig, axes = plt.subplots(1, len(top), figsize=(4.2 * len(top), 3.4), squeeze=False)
        for ax, c in zip(axes[0], top, strict=False):
            stages = c.memory["stages"]
            bottom = [0.0] * len(stages)
            for cat in _CATS:
                vals = [st[f"{cat}_bytes"] / GIB_BYTES for st in stages]
                ax.bar([str(st["stage"]) for st in stages], vals, bottom=bottom, label=cat)
                bottom = [b + v for b, v in zip(bottom, vals, strict=True)]
            ax.axhline(c.capacity_gib, color="k", lw=1, ls="--")
            ax.set_title(c.parallel.label(), fontsize=8)
            ax.set_xlabel("pipeline stage")
            ax.set_ylabel("GiB per GPU")
        handles, labels = axes[0][0].get_legend_handles_labels()
        handles.append(axes[0][0].lines[0])
        labels.append("usable HBM")
        fig.legend(handles, labels, fontsize=8, loc="lower center", ncol=len(labels), bbox_to_anchor=(0.5, -0.15))
        fig.suptitle("memory per stage of the top candidates (GiB per GPU)", fontsize=9)
        out.append(("memory per stage", _png(fig)))
        plt.close(fig)
        out.append(("where the step goes", _breakdown_plot(plt, top)))
    for attr, title in (("cp", "context_parallel_size"), ("recompute", "recompute choice")):
        best: dict = {}
        for c in res.search.candidates:
            key = c.parallel.cp if attr == "cp" else c.recompute
            best.setdefault(key, c.tokens_per_s_per_gpu)
        if not best:
            continue
        if attr == "cp":
            keys = sorted(best)
            fig, ax = plt.subplots(figsize=(6.5, 3.2))
            ax.bar([str(k) for k in keys], [best[k] for k in keys], color="tab:blue")
            ax.set_ylabel("best tokens/s/GPU")
            ax.set_xlabel(title)
        else:
            # ladder order, then the off-ladder offload alternatives; long labels read best on the y axis
            keys = [k for k in res.search.ladder if k in best] + [k for k in best if k not in res.search.ladder]
            fig, ax = plt.subplots(figsize=(7.5, 0.45 * len(keys) + 1.2))
            ax.barh([str(k) for k in keys], [best[k] for k in keys], color="tab:blue")
            ax.invert_yaxis()
            ax.set_xlabel("best tokens/s/GPU")
            ax.tick_params(axis="y", labelsize=7)
        ax.set_title(f"best predicted throughput per {title}", fontsize=9)
        out.append((f"tokens/s/GPU vs {title}", _png(fig)))
        plt.close(fig)
    return out


def _rows(d: dict) -> str:
    e = html.escape
    return "".join(
        f"<tr><td>{c['rank']}</td><td>{e(c['label'])}</td><td>{c['dp']}</td>"
        f"<td>{c['training']['micro_batch_size']}</td><td>{e(c['recompute'])}</td>"
        f"<td>{e(', '.join(f'{k}={v}' for k, v in c['knobs'].items()))}"
        f"{_NAN_CELL if c.get('nan_check_off') else ''}</td>"
        f"<td>{c['memory']['peak_gib']:.1f}</td><td>{c['throughput']['tokens_per_s_per_gpu']:,.0f}</td>"
        f"<td>{c['throughput']['model_tflops_per_gpu']:,.0f}</td><td>{100 * c['throughput']['mfu']:.1f} %</td></tr>"
        for c in d["candidates"]
    )


def _validity(d: dict) -> str:
    if not d["candidates"]:
        return ""
    v = d["candidates"][0]["throughput"]["validity"]
    if v.get("validated"):
        return f"validated ground: expected error ±{v['error_band_pct']:.0f} % ({v.get('band_source', '')})"
    return f"extrapolated: expected error ±{v['error_band_pct']:.0f} % or worse — " + "; ".join(v.get("outside", []))


def _caveats(d: dict) -> list[str]:
    """What the figures rest on: the error band, the assumptions that move a verdict, #1's bias,
    warnings and time to train, the search's assumptions and notes (never empty)."""
    out = [_validity(d)] if d["candidates"] else ["no layout fits: see the rejected tally"]
    out += [
        f"assumes: {a['text']} ({a['source']})" + (f" — {a['hint']}" if a.get("hint") else "")
        for a in d.get("assumes", [])
    ]
    if d["candidates"]:
        w = d["candidates"][0]
        v = w["throughput"]["validity"]
        if "time_to_train_s" in w:
            out.append(f"time to train: {w['time_to_train_s'] / 86400:.2f} days at #1's predicted throughput")
        if v.get("bias_note"):
            out.append(f"known bias of #1: {v['bias_note']}")
        out += [f"check warns: {x}" for x in w.get("warnings", [])]
        out += [f"#1 assumes: {x}" for x in w["throughput"].get("assumptions", [])]
    out += [f"assumed: {x}" for x in d.get("assumptions", [])] + list(d.get("notes", []))
    return [x for x in out if x]


def _baselines(d: dict) -> tuple[str, str]:
    e = html.escape
    rot = d["baseline"]["rule_of_thumb"]
    base = e(rot["rule"]) + (
        f": {e(rot['candidate']['label'])}, {rot['candidate']['throughput']['tokens_per_s_per_gpu']:,.0f} tok/s/GPU; "
        f"#1 is {rot['search_gain_pct']:+.1f} %"
        if rot.get("candidate") and rot.get("search_gain_pct") is not None
        else f": {e(str(rot.get('why_not', '')))}"
    )
    fam = d["baseline"].get("family")
    family = ""
    if fam:
        errs = fam["check"]["errors"]
        family = e(
            f"guidance family {fam['recipe']} at this size, as written: "
            + (f"breaks {len(errs)} rule(s): " + "; ".join(errs[:3]) if errs else "legal")
            + (f"; {fam['throughput']['tokens_per_s_per_gpu']:,.0f} tok/s/GPU" if fam.get("throughput") else "")
        )
        done = fam.get("completed")
        if done:
            family += e(
                f"; completed (its sizes held): {done['label']}, {done['tokens_per_s_per_gpu']:,.0f} tok/s/GPU, "
                f"{done['peak_gib']:.1f} GiB"
            )
    return base, family


def write_report(res, path: Path, inputs: tuple = ()) -> None:
    """Write the HTML report of a :class:`~moeplan.plan.PlanResult` to ``path`` (atomically, never
    onto one of ``inputs``).

    Raises:
        InputError: matplotlib missing, or the path cannot be written.
    """
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise InputError(
            "--report", str(path), "matplotlib importable (a moeplan dependency: reinstall with pip install .)"
        ) from None
    d = res.to_dict()
    e = html.escape
    r = d["request"]
    expl = "".join(f"<li>{e(x)}</li>" for x in (d["candidates"][0]["explanation"] if d["candidates"] else []))
    rej = "".join(
        f"<li>{e(x['reason'])} ({e(x.get('meaning', ''))}): {x['count']} (e.g. {e(x['example'])})</li>"
        for x in d["rejected"]
    )
    base, family = _baselines(d)
    cav = "".join(f"<li>{e(str(x))}</li>" for x in _caveats(d))
    imgs = "".join(f"<h3>{e(t)}</h3><img alt='{e(t)}' src='data:image/png;base64,{b}'/>" for t, b in _plots(res))
    doc = f"""<!doctype html><html><head><meta charset="utf-8"><title>moeplan plan</title>
<style>body{{font-family:sans-serif;max-width:1100px;margin:2em auto}}table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:3px 8px;font-size:13px}}img{{max-width:100%}}</style></head><body>
<h1>moeplan plan: {e(str(r["model"]))}</h1>
<p>{r["num_gpus"]} × {e(r["gpu"])}, seq {r["seq_length"]:,}, GBS {r["global_batch_size"]}, {e(r["precision"])};
{d["considered_layouts"]} layouts considered, {d["fitting_layouts"]} fit (then {d["refined_variants"]} refinement
variants).</p><p>{e(_validity(d))}</p><p>{family}</p>
<table><tr><th>#</th><th>layout</th><th>DP</th><th>MBS</th><th>recompute</th><th>knobs</th><th>peak GiB</th>
<th>tokens/s/GPU</th><th>model TFLOP/s/GPU</th><th>MFU</th></tr>{_rows(d)}</table>
<h2>Caveats</h2><ul>{cav}</ul><h2>Why #1</h2><ul>{expl}</ul><h2>Baseline</h2><p>{base}</p><h2>Rejected</h2><ul>{rej}</ul>
<h2>Plots</h2>{imgs}</body></html>
"""

    try:
        _write_atomically(Path(path), doc, field="--report", inputs=inputs)
    except OSError as exc:
        raise InputError("--report", str(path), f"a writable path ({exc.strerror})") from None
