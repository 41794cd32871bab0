"""Rendering of library results as rich tables (imported lazily by the CLI) and JSON."""

from __future__ import annotations

import json
from typing import Any

from moeplan.units import format_count

_SEV_STYLE = {"error": "bold red", "warning": "yellow", "info": "dim"}


def console(stderr: bool = False):
    from rich.console import Console

    c = Console(stderr=stderr, highlight=False, soft_wrap=False)
    if not c.is_terminal:
        c = Console(stderr=stderr, highlight=False, soft_wrap=False, width=120)
    return c


def print_json(obj: Any) -> None:
    """Print a JSON document to stdout (plain, deterministic key order as built)."""
    import sys

    sys.stdout.write(json.dumps(obj, indent=2, default=str) + "\n")


def render_check(result) -> None:
    c = console()
    s = result.scenario.summary()
    p = s["parallel"]
    c.print(
        f"[bold]{s['model'] or '(no model)'}[/] on {s['num_gpus'] or '?'} × {s['gpu'] or '?'} "
        f"({s['framework']}, megatron-core {s['megatron_core_version']})"
    )
    c.print("  " + "  ".join(f"{k}={v}" for k, v in p.items()))
    for f in result.findings:
        c.print(f"[{_SEV_STYLE[f.severity]}]{f.severity:<7}[/] [bold]{f.rule_id}[/]")
        c.print(f"        {f.message}", markup=False)
        if f.fix:
            c.print(f"        fix: {f.fix}", markup=False)
    if s["resolved_defaults"]:
        c.print("[dim]defaults used: " + "; ".join(f"{r['key']}={r['value']}" for r in s["resolved_defaults"]) + "[/]")
    style = {"valid": "bold green", "warn": "yellow", "invalid": "bold red", "unsupported": "bold red"}[result.verdict]
    n = {k: sum(f.severity == k for f in result.findings) for k in ("error", "warning", "info")}
    c.print(f"verdict: [{style}]{result.verdict}[/] ({n['error']} errors, {n['warning']} warnings, {n['info']} info)")


def render_models(rows: list[dict]) -> None:
    from rich.table import Table

    t = Table(title="built-in models")
    for col in ("model", "kind", "layers", "experts", "total", "active", "published"):
        t.add_column(col)
    for r in rows:
        t.add_row(
            r["id"],
            r["kind"],
            str(r["num_layers"]),
            r["experts"],
            format_count(r["total_params"]),
            format_count(r["active_params"]),
            r["published"],
        )
    console().print(t)


def render_gpus(rows: list[dict]) -> None:
    from rich.table import Table

    t = Table(title="built-in GPUs (dense peaks)")
    for col in (
        "id",
        "entry",
        "HBM GiB",
        "(source)",
        "BF16 TF",
        "FP8 TF",
        "FP4 TF",
        "NVLink domain",
        "NVLink GB/s",
        "NIC Gb/s",
        "DeepEP",
        "HybridEP",
    ):
        t.add_column(col)
    for r in rows:
        pk = r["peak_dense_tflops"]
        t.add_row(
            r["id"],
            r["name"],
            f"{r['usable_hbm_gib']:.2f}",
            r["usable_hbm_source"],
            *(str(int(pk[k])) if k in pk else "–" for k in ("bf16", "fp8", "fp4")),
            str(r["scaleup_domain_gpus"]),
            str(r["scaleup_unidir_gb_per_s"] or "?"),
            str(r["nic_gbit_per_s_per_gpu"] or "?"),
            "yes" if r["supports_deepep"] else "no",
            "yes" if r["supports_hybridep"] else "no",
        )
    console().print(t)


def render_params(model_name: str, counts: dict, stages: list[dict] | None) -> None:
    from rich.table import Table

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
    from rich.table import Table

    t = Table(title="rules")
    for col in ("rule_id", "class", "source", "rule"):
        t.add_column(col, overflow="fold")
    for r in rows:
        t.add_row(r["rule_id"], r["kind"], r["source"], r["summary"])
    console().print(t)


def render_gpu_detail(row: dict) -> None:
    from rich.table import Table

    t = Table(title=f"{row['id']} ({row['name']})", show_header=False)
    t.add_column("field")
    t.add_column("value", overflow="fold")
    for k, v in row.items():
        if k == "sources":
            continue
        t.add_row(k, "unknown" if v is None else str(v))
    c = console()
    c.print(t)
    c.print("sources:")
    for src in row["sources"]:
        c.print(f"  - {src}", markup=False)
