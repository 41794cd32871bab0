"""Self-contained HTML report of a plan: the ranked table, the explanation, the baseline, the
rejected tally and three plots (memory per stage of the top candidates; tokens/s/GPU against CP and
against the recompute choice), PNGs embedded as base64. Uses matplotlib (a core dependency).
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


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    return base64.b64encode(buf.getvalue()).decode("ascii")


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
        fig.legend(handles, labels, fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5))  # off the bars
        fig.suptitle("memory per stage of the top candidates (dashed: usable HBM)", fontsize=9)
        out.append(("memory per stage", _png(fig)))
        plt.close(fig)
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
    rows = "".join(
        f"<tr><td>{c['rank']}</td><td>{e(c['label'])}</td><td>{c['dp']}</td>"
        f"<td>{c['training']['micro_batch_size']}</td><td>{e(c['recompute'])}</td>"
        f"<td>{e(', '.join(f'{k}={v}' for k, v in c['knobs'].items()))}</td>"
        f"<td>{c['memory']['peak_gib']:.1f}</td><td>{c['throughput']['tokens_per_s_per_gpu']:,.0f}</td>"
        f"<td>{100 * c['throughput']['mfu']:.1f} %</td></tr>"
        for c in d["candidates"]
    )
    expl = "".join(f"<li>{e(x)}</li>" for x in (d["candidates"][0]["explanation"] if d["candidates"] else []))
    rej = "".join(f"<li>{e(x['reason'])}: {x['count']} (e.g. {e(x['example'])})</li>" for x in d["rejected"])
    rot = d["baseline"]["rule_of_thumb"]
    base = e(rot["rule"]) + (
        f": {e(rot['candidate']['label'])}, {rot['candidate']['throughput']['tokens_per_s_per_gpu']:,.0f} tok/s/GPU; "
        f"search gain {rot['search_gain_pct']:+.1f} %"
        if rot.get("candidate")
        else f": {e(rot.get('why_not', ''))}"
    )
    validity = ""
    if d["candidates"]:
        v = d["candidates"][0]["throughput"]["validity"]
        validity = e(
            "validated ground: expected error ±" + f"{v['error_band_pct']:.0f} %"
            if v.get("validated")
            else f"extrapolated: expected error ±{v['error_band_pct']:.0f} % or worse — "
            + "; ".join(v.get("outside", []))
        )
    caveats = []
    if d["candidates"]:
        w = d["candidates"][0]
        v = w["throughput"]["validity"]
        if "time_to_train_s" in w:
            caveats.append(f"time to train: {w['time_to_train_s'] / 86400:.2f} days at #1's predicted throughput")
        if v.get("bias_note"):
            caveats.append(f"known bias of #1: {v['bias_note']}")
        caveats += [f"check warns: {x}" for x in w.get("warnings", [])]
    caveats += [f"assumed: {x}" for x in d.get("assumptions", [])] + list(d.get("notes", []))
    cav = "".join(f"<li>{e(str(x))}</li>" for x in caveats)
    fam = d["baseline"].get("family")
    family = ""
    if fam:
        errs = fam["check"]["errors"]
        family = e(
            f"guidance family {fam['recipe']} at this size: "
            + (f"breaks {len(errs)} rule(s): " + "; ".join(errs[:3]) if errs else "legal")
            + (f"; {fam['throughput']['tokens_per_s_per_gpu']:,.0f} tok/s/GPU" if fam.get("throughput") else "")
        )
    imgs = "".join(f"<h3>{e(t)}</h3><img alt='{e(t)}' src='data:image/png;base64,{b}'/>" for t, b in _plots(res))
    doc = f"""<!doctype html><html><head><meta charset="utf-8"><title>moeplan plan</title>
<style>body{{font-family:sans-serif;max-width:1100px;margin:2em auto}}table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:3px 8px;font-size:13px}}</style></head><body>
<h1>moeplan plan: {e(str(r["model"]))}</h1>
<p>{r["num_gpus"]} × {e(r["gpu"])}, seq {r["seq_length"]:,}, GBS {r["global_batch_size"]}, {e(r["precision"])};
{d["considered_layouts"]} layouts considered, {d["fitting_layouts"]} fit (then {d["refined_variants"]} refinement
variants).</p><p>{validity}</p><p>{family}</p>
<table><tr><th>#</th><th>layout</th><th>DP</th><th>MBS</th><th>recompute</th><th>knobs</th><th>peak GiB</th>
<th>tokens/s/GPU</th><th>MFU</th></tr>{rows}</table>
<h2>Caveats</h2><ul>{cav}</ul><h2>Why #1</h2><ul>{expl}</ul><h2>Baseline</h2><p>{base}</p><h2>Rejected</h2><ul>{rej}</ul>
<h2>Plots</h2>{imgs}</body></html>
"""

    try:
        _write_atomically(Path(path), doc, field="--report", inputs=inputs)
    except OSError as exc:
        raise InputError("--report", str(path), f"a writable path ({exc.strerror})") from None
