"""Tables of ``vlm-stats``: tokens per sample and the workload per sequence."""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table

from moeplan.cli.render import console
from moeplan.errors import cut_text


def render_vlm_stats(d: dict) -> None:
    """Dataset token statistics (:func:`moeplan.api.vlm_stats_report`) and the workload per sequence."""

    c = console()
    pr = d["processor"]
    c.print(
        f"{d['samples']:,} samples, {d['images']:,} images ({d['unreadable']} unreadable, skipped); patch "
        f"{pr['patch_size']}, merge {pr['merge_size']}, pixels {pr['min_pixels']:,}–{pr['max_pixels']:,}",
        highlight=False,
    )
    t = Table(title="per sample")  # its natural width: fits 80 columns with every figure whole
    for col in ("", "mean", "p50", "p90", "max"):
        t.add_column(col, justify="left" if not col else "right", no_wrap=bool(col), overflow="fold")
    for key, name in (
        ("image_tokens_per_sample", "image tokens"),
        ("vit_patches_per_sample", "ViT patches"),
        ("text_tokens_per_sample", "text tokens"),
        ("tokens_per_sample", "total tokens"),
    ):
        x = d[key]
        t.add_row(name, f"{x['mean']:,.0f}", f"{x['p50']:,.0f}", f"{x['p90']:,.0f}", f"{x['max']:,.0f}")
    c.print(t)
    w = d["workload"]
    c.print(
        f"seq {d['seq_length']:,}, packing {d['packing']}: {d['sequences']:,} sequences, padding "
        f"{100 * d['padding_fraction']:.1f} %, truncated {d['truncated_tokens']:,} tokens; per sequence "
        f"{w['images_per_sequence']:.2f} images, {w['image_tokens_per_sequence']:,.0f} image tokens, "
        f"{w['image_patches_per_sequence']:,.0f} ViT patches",
        highlight=False,
    )

    for b in d["bad_files"][:10]:
        # a path or reason of 200,000 characters is echoed by its first 200 (--json keeps it whole)
        c.print(f"[dim]skipped {escape(cut_text(b['file']))}: {escape(cut_text(b['reason']))}[/]", highlight=False)
    if d["unreadable"] > 10:
        c.print(f"[dim]... and {d['unreadable'] - 10} more (--json lists up to 50)[/]")
    if d.get("written"):
        c.print(f"workload written to {d['written']}: put it under workload: in a scenario (or merge the file)")
