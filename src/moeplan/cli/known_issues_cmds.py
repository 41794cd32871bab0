"""``moeplan known-issues``: the known-issue database (and the container version table)."""

from __future__ import annotations

from typing import Annotated, Optional

import typer
from rich.table import Table

from moeplan.api.known_issues import known_issues_report
from moeplan.cli import render
from moeplan.cli.options import JsonOpt, input_errors
from moeplan.i18n.messages import Message
from moeplan.inputs.versions import PACKAGE_NAMES


def _versions(row: dict) -> str:
    parts = []
    for key, r in row["packages"].items():
        fixed = f" → {r['fixed']}" if r["fixed"] else " (open)"
        parts.append(f"{PACKAGE_NAMES[key]} {r['affected']}{fixed}")
    return "; ".join(parts)


def _families(doc: dict) -> Table:
    """The harvested entries by family: count, newest fix, symptoms; a broad family says it is info."""
    lang = render.lang()
    t = Table(title=render.T("harvested fixes by family ({n})").format(n=sum(f["count"] for f in doc["families"])))
    for col in ("family", "fixes", "newest fix", "symptoms"):
        t.add_column(render.T(col), overflow="fold")
    for f in doc["families"]:
        name = f["name"].text(lang) if isinstance(f["name"], Message) else str(f["name"])
        broad = " " + render.T("(info: broad feature)") if f["broad"] else ""
        syms = ", ".join(f"{k} {v}" for k, v in f["symptoms"].items())
        t.add_row(f"{f['family']}: {name}{broad}", str(f["count"]), f["newest_fixed"] or "-", syms)
    return t


def _render(doc: dict) -> None:
    hand = [r for r in doc["issues"] if not r.get("family")]
    t = Table(title=f"known issues ({len(hand)})")
    for col in ("id", "symptom", "affected → fixed", "source"):
        t.add_column(col, overflow="fold")
    for r in hand:
        sym = r["symptom"] + (f" ({r['size']})" if r["size"] else "") + (" [error]" if r["severity"] == "error" else "")
        t.add_row(r["id"], sym, _versions(r), r["source"])
    con = render.console()
    con.print(t)
    if doc["families"]:
        con.print(_families(doc))
    if "containers" in doc:
        c = Table(title="container releases → package versions")
        for col in ("container", "packages", "source"):
            c.add_column(col, overflow="fold")
        for r in doc["containers"]:
            pk = ", ".join(f"{PACKAGE_NAMES[k]} {v}" for k, v in r["packages"].items())
            c.add_row(f"{r['family']}:{r['release']}", pk, r["source"])
        con.print(c)


def known_issues_cmd(
    package: Annotated[
        Optional[str],
        typer.Option(
            "--package", help="Only issues of this package (megatron-core, megatron-bridge, te, torch, nccl, deepep)."
        ),
    ] = None,
    symptom: Annotated[
        Optional[str],
        typer.Option(
            "--symptom",
            help=(
                "Only issues with this symptom (hang, nan, wrong_result, oom, slowdown, crash, assertion; "
                "unspecified: a harvested fix whose text names no failure mode)."
            ),
        ),
    ] = None,
    containers: Annotated[
        bool, typer.Option("--containers", help="Also list the container release → package versions table.")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """List the known release-specific bugs: source, affected and fixed versions, trigger, symptom, workaround.

    The hand-entered entries are listed one per row; the entries harvested from merged upstream fixes
    are counted by family (--json lists every entry with its family).

    `moeplan check` reports the ones a scenario triggers (rule known_issue.<id>) when its versions.* (or
    versions.container) fall in the affected ranges."""
    with input_errors():
        doc = known_issues_report(package, symptom, containers)
    if as_json:
        render.print_json(doc)
    else:
        _render(doc)


__all__ = ["known_issues_cmd"]
