"""Fuzz the manifest readers: an edited sweep ``manifest.json`` (``num_gpus: 0``,
``Infinity``, huge numbers, wrong types) through ``sweep collect``, and hostile JSONL rows through
``vlm-stats``: exit 0, 1 or 2, no traceback, within the bound, and nothing written but
``runs.yaml`` (collect) or nothing (vlm-stats)."""

from __future__ import annotations

import json

from harness import fuzz_settings, judge, listing, outside, run_cli, sandbox
from hypothesis import given
from hypothesis import strategies as st
from strategies import INT_PAYLOADS, hostile_value

LOG = "".join(
    f" iteration {i:8d}/     100 | elapsed time per iteration (ms): {1000.0 + (i % 5):.1f} | "
    f"global batch size: {64 if i % 3 else 128} |\n"
    for i in range(1, 30)
)
ENTRY = {
    "id": "01-tp1-ep8-mbs1",
    "label": "TP1 EP8 MBS1",
    "kind": "candidate",
    "scenario": {
        "model": "qwen3-30b-a3b",
        "system": {"gpu": "h100", "num_gpus": 16},
        "training": {"seq_length": 4096, "micro_batch_size": 1, "global_batch_size": 64},
        "layout": {"expert_model_parallel_size": 8},
    },
    "predicted": {"tokens_per_s_per_gpu": 5000.0},
}
PATHS = [
    ("scenario", "system", "num_gpus"),
    ("scenario", "training", "global_batch_size"),
    ("scenario", "training", "seq_length"),
    ("predicted", "tokens_per_s_per_gpu"),
    ("predicted",),
    ("id",),
    ("label",),
    ("scenario",),
    ("scenario", "system"),
]
RAW_JSON = ['{"entries": [' + "[" * 5000 + "]" * 5000 + "]}", "NaN", '{"entries": [], "entries": []}', "", "\x00"]


def _set(d: dict, path: tuple, value) -> None:
    for k in path[:-1]:
        if not isinstance(d.get(k), dict):
            d[k] = {}
        d = d[k]
    d[path[-1]] = value


@fuzz_settings(30)
@given(
    path=st.sampled_from(PATHS),
    value=st.sampled_from([*INT_PAYLOADS[:13], "Infinity", float("inf"), float("nan"), "x", None, [], {}])
    | hostile_value,
    raw=st.sampled_from([None, None, None, *RAW_JSON]),
)
def test_edited_sweep_manifests(path, value, raw):
    entry = json.loads(json.dumps(ENTRY))
    _set(entry, path, value)
    try:
        text = json.dumps({"request": {}, "entries": [entry], "smoke_steps": 20}, allow_nan=True)
    except (ValueError, TypeError):
        text = '{"entries": []}'
    if raw is not None:
        text = raw
    with sandbox() as box:
        (box / "manifest.json").write_text(text, encoding="utf-8", errors="surrogatepass")
        d = box / ENTRY["id"]
        d.mkdir()
        (d / "run-1.log").write_text(LOG)
        before = listing(box)
        out = run_cli(["sweep", "collect", box, "--json"])
        stray = outside(before, listing(box), {"runs.yaml"})
        judge("manifests", out, [f"outside: {stray}"] if stray else [])


ROW_KEYS = ["image_sizes", "width", "height", "images", "image", "text_tokens"]


@fuzz_settings(25)
@given(
    rows=st.lists(st.dictionaries(st.sampled_from(ROW_KEYS), hostile_value, max_size=3), min_size=1, max_size=6),
    raw=st.sampled_from(
        [
            None,
            None,
            *RAW_JSON,
            '{"image_sizes": [[1e999, 5]]}',
            '{"width": 9e400, "height": 1}',
            '{"text_tokens": ' + "9" * 5000 + "}",
        ]
    ),
)
def test_hostile_vlm_manifests(rows, raw):
    lines = []
    for r in rows:
        try:
            lines.append(json.dumps(r, allow_nan=True))
        except (ValueError, TypeError):
            lines.append("{}")
    if raw is not None:
        lines.append(raw)
    lines.append('{"image_sizes": [[512, 512]], "text_tokens": 100}')
    with sandbox() as box:
        m = box / "m.jsonl"
        m.write_text("\n".join(lines) + "\n", encoding="utf-8", errors="surrogatepass")
        before = listing(box)
        out = run_cli(["vlm-stats", m, "-s", "8192", "--json"])
        stray = outside(before, listing(box), set())
        judge("manifests", out, [f"outside: {stray}"] if stray else [])
