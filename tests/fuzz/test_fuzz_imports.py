"""Fuzz the importers: mutated Megatron Bridge YAML and overrides, Megatron-LM flags and
log argument dumps through ``check --from``, ``log`` and ``calibrate``; exit 0, 1 or 2, no
traceback, within the bound, nothing written; notes quote values cut (the output stays small)."""

from __future__ import annotations

import pathlib

from harness import fuzz_settings, judge, listing, outside, run_cli, sandbox
from hypothesis import given
from hypothesis import strategies as st
from strategies import ALIAS_BOMB, hostile_text, mutated_text

from moeplan import load_scenario
from moeplan.io.export import export

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCENARIO = ROOT / "examples" / "deepseek_v3_gb300.yaml"
FORMATS = ("mbridge-yaml", "mbridge-overrides", "megatron-lm-args")
SEED_TEXTS = {fmt: export(load_scenario(SCENARIO), fmt)[0] for fmt in FORMATS}
DUMP = """------------------------ arguments ------------------------
  tensor_model_parallel_size ...................... 2
  pipeline_model_parallel_size .................... 1
  expert_model_parallel_size ...................... 8
  recompute_modules ............................... ['moe_act']
  cp_comm_type .................................... ['p2p']
  main_grads_dtype ................................ torch.float32
  seq_length ...................................... 4096
  global_batch_size ............................... 64
  world_size ...................................... 16
-------------------- end of arguments ---------------------
 iteration        1/     100 | elapsed time per iteration (ms): 1000.0 | lm loss: 1.0E+00 |
 iteration        2/     100 | elapsed time per iteration (ms): 1001.0 | lm loss: 1.0E+00 |
"""
SEED_TEXTS["megatron-log"] = DUMP
HEADER_PAYLOADS = [
    "# moeplan: " + "[" * 5000 + "]" * 5000,
    '# moeplan: {"stated": 5, "training": "x", "system": [1]}',
    '# moeplan: {"model": "qwen3-30b-a3b", "model": "x"}',
    '# moeplan: {"model_overrides": {"num_layers": 1000000000}}',
    '# moeplan: {"versions": {"megatron_core": "r2d2"}}',
    "# moeplan: NaN",
    "# moeplan: " + "9" * 5000,
]
#: the most output a run may print per input byte (notes quote values cut, repeats are listed once)
MAX_OUTPUT = 200_000


def _check(cls: str, fmt: str, text: str, model: str | None = "qwen3-30b-a3b") -> None:
    with sandbox() as box:
        path = box / "in.txt"
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
        before = listing(box)
        args = ["check", path, "--from", fmt, "--json"] + (["--model", model] if model else [])
        out = run_cli(args)
        problems = [f"outside: {s}" for s in outside(before, listing(box), set())]
        if len(out.stdout) + len(out.stderr) > MAX_OUTPUT + 20 * len(text):
            problems.append(f"partial: {len(out.stdout) + len(out.stderr)} bytes of output for {len(text)} in")
        judge(cls, out, problems)


@fuzz_settings(40)
@given(fmt=st.sampled_from(sorted(SEED_TEXTS)), data=st.data())
def test_mutated_imports(fmt, data):
    text = SEED_TEXTS[fmt]
    for _ in range(data.draw(st.integers(1, 3))):
        text = data.draw(mutated_text(text))
    _check("imports", fmt, text)


@fuzz_settings(10)
@given(fmt=st.sampled_from(sorted(SEED_TEXTS)), header=st.sampled_from(HEADER_PAYLOADS))
def test_hostile_headers(fmt, header):
    _check("imports", fmt, header + "\n" + SEED_TEXTS[fmt])


@fuzz_settings(20)
@given(
    name=st.sampled_from(
        [
            "tensor_model_parallel_size",
            "recompute_modules",
            "seq_length",
            "world_size",
            "cp_comm_type",
            "moe_expert_capacity_factor",
        ]
    ),
    value=st.sampled_from(
        [
            ALIAS_BOMB.replace("\n", " "),
            "{a: &a [x,x], b: [*a,*a]}",
            "²",
            "８",
            "9" * 5000,
            "1e999",
            "[" * 10000,
            "x" * 100000,
        ]
    )
    | hostile_text,
)
def test_hostile_dump_values(name, value):
    """Every argument-dump value goes through the strict reader (``log``, ``check --from megatron-log``)."""
    text = DUMP.replace("  world_size ...................................... 16", f"  {name} ......... {value}")
    _check("imports", "megatron-log", text)
    with sandbox() as box:
        log = box / "run.log"
        log.write_text(text, encoding="utf-8", errors="surrogatepass")
        out = run_cli(["log", log, "--json"])
        judge("logs", out, [] if len(out.stdout) < MAX_OUTPUT + 20 * len(text) else ["partial: output too large"])


@fuzz_settings(10)
@given(n=st.sampled_from([1, 10, 1000, 20000]), payload=st.sampled_from(["nope.key=1", "--no-such-flag 1", "x.y: 1"]))
def test_repeated_unknown_keys_give_bounded_output(n, payload):
    """200,000 identical findings from a repeated unknown label: now each note once, at most 50."""
    fmt = {"nope.key=1": "mbridge-overrides", "--no-such-flag 1": "megatron-lm-args", "x.y: 1": "mbridge-yaml"}[payload]
    if fmt == "mbridge-yaml":
        text = "model:\n" + "".join(f"  k{i}: 1\n" for i in range(n)) + "  tensor_model_parallel_size: 2\n"
    else:
        text = "\n".join([payload] * n) + (
            "\nmodel.tensor_model_parallel_size=2\n"
            if fmt == "mbridge-overrides"
            else "\n--tensor-model-parallel-size 2\n"
        )
    _check("imports", fmt, text)
