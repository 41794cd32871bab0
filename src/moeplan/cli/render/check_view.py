"""Tables of ``check``, ``models``, ``gpus``, ``params`` and ``rules``."""

from __future__ import annotations

from rich.markup import escape
from rich.padding import Padding
from rich.table import Table

import moeplan.i18n as i18n
from moeplan.cli.render import T, console, lang, rule_text
from moeplan.cli.render.verdict import verdict_text
from moeplan.inputs.megatron_keys import unmodelled_lines
from moeplan.units import GIB_BYTES, format_count

_SEV_STYLE = {"error": "bold red", "warning": "yellow", "info": "dim"}


def yaml_value(v) -> str:
    """A value as a scenario file writes it (``true`` / ``false`` / ``null``, not Python's reprs)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    return "null" if v is None else str(v)


def parallel_text(p: dict) -> str:
    """``TP2 PP8 CP16 EP64 ETP1 DP1 SP on`` from a summary's ``parallel`` mapping: VPP only when set,
    a derived size that does not divide the world as ``–``."""
    out = []
    for k, v in p.items():
        if k == "SP":
            out.append(f"SP {'on' if v else 'off'}")
        elif v is None and k == "VPP":
            continue
        else:
            out.append(f"{k}{'–' if v is None else v}")
    return " ".join(out)


def _findings(c, findings: list[dict]) -> None:
    """Each finding: severity and rule id, the message and the fix, in the current language."""
    for f in findings:
        sev = T(f["severity"])
        c.print(
            f"[{_SEV_STYLE[f['severity']]}]{sev}{' ' * max(1, 8 - c.measure(sev).maximum)}[/][bold]{f['rule_id']}[/]"
        )
        c.print(Padding(rule_text(f["rule_id"], f["message"]) or "", (0, 0, 0, 8)), markup=False, highlight=False)
        if f["fix"]:
            fix = T("fix: {fix}").format(fix=rule_text(f["rule_id"], f["fix"]))
            c.print(Padding(fix, (0, 0, 0, 8)), markup=False, highlight=False)


def _version_text(version: str, basis: dict | None) -> str:
    """The megatron-core version the layout rules compared, with why when it was not stated, and a
    container's own version beside it (``basis``: :func:`moeplan.inputs.versions.rules_version_basis`)."""
    if not basis or basis.get("basis") == "stated":
        return version
    if basis.get("basis") == "container":
        return T(
            "{rules} for the layout rules and the known issues, the version container {container} ships "
            "(state versions.megatron_core if yours runs another)"
        ).format(rules=version, container=basis.get("container"))
    if basis.get("container"):
        return T(
            "{rules} for the layout rules: none stated and container {container} not in moeplan's table, so "
            "the newest release moeplan knows (its known issues are left undecided)"
        ).format(rules=version, container=basis.get("container"))
    return T(
        "{rules} for the layout rules: none stated, so the newest release moeplan knows (the known issues "
        "are checked against the newest container's own versions)"
    ).format(rules=version)


def _memory_line(c, mem: dict | None) -> None:
    """The memory verdict of the layout (``memory`` of a check document): the peak per GPU against the
    usable HBM, and why it does not or may not fit."""
    if not mem or mem.get("capacity_bytes") is None:
        return
    style = {"fits": "green", "tight": "yellow", "does-not-fit": "bold red"}.get(mem["verdict"], "dim")
    c.print(
        T("memory: {peak} GiB per GPU (stage {stage}) of {cap} GiB usable → ").format(
            peak=f"{mem['peak_bytes'] / GIB_BYTES:.1f}",
            stage=mem["peak_stage"],
            cap=f"{mem['capacity_bytes'] / GIB_BYTES:.1f}",
        )
        + f"[{style}]{escape(verdict_text(mem))}[/]"
        + (T(" — host memory exceeded") if mem.get("host_fits") is False else "")
        + T("; moeplan estimate itemises it"),
        highlight=False,
    )


def _verdict_word(d: dict) -> str:
    """The check's verdict, said with the memory verdict where the rules pass but the layout does not,
    or may not, fit in memory."""
    mem = (d.get("memory") or {}).get("verdict")
    if d["verdict"] in ("valid", "warn") and mem == "does-not-fit":
        return T("rules pass; does not fit in memory")
    if d["verdict"] in ("valid", "warn") and mem == "tight":
        return T("rules pass; may not fit in memory")
    return T(d["verdict"])


def unmodelled_text(c, summary: dict) -> None:
    """The Megatron keys the scenario carries but moeplan does not model, named once, and a warning
    naming those that may move memory or step time (``summary["unmodelled_keys"]``)."""
    for i, line in enumerate(unmodelled_lines(summary.get("unmodelled_keys") or [])):
        c.print(T(line), style="dim" if i == 0 else "yellow", highlight=False, markup=False)


def render_check(d: dict) -> None:
    """A check document (:func:`moeplan.api.check_report`): scenario line, each finding with its fix,
    the defaults used and the verdict with counts."""
    c = console()
    s = d["scenario"]
    p = s["parallel"]
    c.print(
        T("[bold]{model}[/] on {n} × {gpu} ({framework}, megatron-core {version})").format(
            model=s["model"] or T("(no model)"),
            n=s["num_gpus"] or "?",
            gpu=s["gpu"] or "?",
            framework=f"{s['driver']} → {s['framework']}" if s.get("driver") else s["framework"],
            version=_version_text(s["megatron_core_version"], d.get("megatron_core")),
        )
    )
    c.print("  " + parallel_text(p), highlight=False)
    _findings(c, d["findings"])
    if s["resolved_defaults"]:
        c.print(
            T("defaults used: ") + "; ".join(f"{r['key']}={yaml_value(r['value'])}" for r in s["resolved_defaults"]),
            style="dim",
            highlight=False,
            markup=False,
        )
    unmodelled_text(c, s)
    if s.get("recipe_left_out"):
        left = T("; ").join(T(x) for x in s["recipe_left_out"])
        c.print(
            T("recipe fills left out (they would break a rule for this model): ") + left, highlight=False, markup=False
        )
    style = {
        "valid": "bold green",
        "warn": "yellow",
        "incomplete": "bold yellow",
        "invalid": "bold red",
        "unsupported": "bold red",
    }[d["verdict"]]
    if (d.get("memory") or {}).get("verdict") in ("does-not-fit", "tight") and d["verdict"] in ("valid", "warn"):
        style = "bold red"
    n = d["counts"]
    _memory_line(c, d.get("memory"))
    c.print(
        T("verdict: [{style}]{verdict}[/] (errors: {e}, warnings: {w}, info: {i})").format(
            style=style, verdict=_verdict_word(d), e=n["error"], w=n["warning"], i=n["info"]
        ),
        highlight=False,
    )
    if d["verdict"] == "incomplete":
        c.print(
            T(
                "incomplete: the rules that need the missing inputs were skipped (see the info lines); "
                "give them (--model, --gpu, --num-gpus, --seq-length) for a verdict"
            ),
            style="yellow",
            highlight=False,
            markup=False,
        )


def render_models(rows: list[dict]) -> None:
    """The built-in models (:func:`moeplan.api.models_report` rows), counts as each publisher counts them."""

    t = Table(title="built-in models (counts as each publisher counts them; `moeplan params` for every part)")
    for col in ("model", "kind", "layers", "experts", "total", "active", "published total / active"):
        t.add_column(col, overflow="fold")
    for r in rows:
        pub = (r["published"] or "–") + (" (reconstructed config)" if r["reconstructed_config"] else "")
        t.add_row(
            r["id"],
            r["kind"],
            str(r["num_layers"]),
            r["experts"] or "–",
            format_count(r["total_params_as_published"]),
            format_count(r["active_params_as_published"]),
            pub,
        )
    console().print(t)


def render_gpus(rows: list[dict]) -> None:
    """The built-in GPUs (:func:`moeplan.api.gpus_report` rows): HBM GiB, dense TFLOP/s, NVLink, NIC, features."""

    # two tables, so that each fits an 80-column terminal with every figure whole
    t = Table(title="built-in GPUs: memory and dense peaks")
    for col in ("id", "HBM\nGiB", "HBM figure is", "BF16\nTFLOP/s", "FP8\nTFLOP/s", "FP4\nTFLOP/s"):
        t.add_column(col, no_wrap=col != "HBM figure is", overflow="fold")
    links = Table(title="built-in GPUs: links and EP kernels")
    for col in ("id", "entry", "NVLink\ndomain", "NVLink\nGB/s", "NIC\nGb/s", "DeepEP", "HybridEP"):
        links.add_column(col, no_wrap=col != "entry", overflow="fold")
    for r in rows:
        pk = r["peak_dense_tflops"]
        t.add_row(
            r["id"],
            f"{r['usable_hbm_gib']:.2f}",
            r["usable_hbm_source"],
            *(str(int(pk[k])) if k in pk else "–" for k in ("bf16", "fp8", "fp4")),
        )
        links.add_row(
            r["id"],
            r["name"],
            str(r["scaleup_domain_gpus"]),
            str(r["scaleup_unidir_gb_per_s"] or "?"),
            str(r["nic_gbit_per_s_per_gpu"] or "?"),
            "yes" if r["supports_deepep"] else "no",
            "yes" if r["supports_hybridep"] else "no",
        )
    c = console()
    c.print(t)
    c.print(links)


def render_gpu_detail(row: dict) -> None:
    """One GPU (a :func:`moeplan.api.gpus_report` dict) in full, with the source of every figure."""

    t = Table(title=f"{row['id']} ({row['name']})", show_header=False)
    t.add_column("field")
    t.add_column("value", overflow="fold")
    for k, v in row.items():
        if k == "sources":
            continue
        if isinstance(v, dict):
            v = ", ".join(f"{kk} {vv:g}" for kk, vv in v.items())
        t.add_row(k, "unknown" if v is None else str(v))
    c = console()
    c.print(t)
    c.print("sources:")
    for src in row["sources"]:
        c.print(f"  - {src}", markup=False)


def render_params(model_name: str, counts: dict, stages: list[dict] | None, notes: list[str] | None = None) -> None:
    """Parameter counts by kind and in total (``counts``), what they leave out (``notes``), and per
    rank for each pipeline stage (``stages``)."""

    c = console()
    t = Table(title=f"{model_name}: parameters")
    t.add_column("part")
    t.add_column("count", justify="right")
    for k, v in counts["by_kind"].items():
        t.add_row(k, format_count(v))
    t.add_row("[bold]total[/]", format_count(counts["total"]))
    t.add_row("active per token", format_count(counts["active"]))
    t.add_row("MTP layers", format_count(counts["mtp"]))
    t.add_row("vision tower", format_count(counts["vision"]))
    c.print(t)
    for note in notes or []:
        c.print(T(note), style="dim", highlight=False, markup=False)
    if stages:
        s = Table(title="per rank, by pipeline stage")
        for col in ("stage", "layers", "embedding", "output", "MTP", "dense", "expert", "total"):
            s.add_column(col, justify="right")
        for st in stages:
            s.add_row(
                str(st["stage"]),
                str(st["num_layers"]),
                "yes" if st["embedding"] else "",
                "yes" if st["output_layer"] else "",
                str(st["mtp_layers"] or ""),
                format_count(st["dense"]),
                format_count(st["expert"]),
                format_count(st["total"]),
            )
        c.print(s)


def render_rules(rows: list[dict]) -> None:
    """Every rule (:func:`moeplan.api.rules_report` rows): id, class, Megatron source, statement."""

    t = Table(title=T("rules"))
    for col in ("rule_id", "class", "source", "rule"):
        t.add_column(T(col), overflow="fold")
    for r in rows:
        t.add_row(r["rule_id"], T(r["kind"]), r["source"], i18n.summary(r["rule_id"], r["summary"], lang()))
    console().print(t)
