"""Fuzz the scenario readers: mutated scenario files and model overrides through
``check``, ``estimate``, ``params``, ``fit``, ``export`` and ``plan`` must exit 0, 1 or 2 (never 3),
print no traceback, finish within the bound and write nothing."""

from __future__ import annotations

import pathlib

import yaml
from harness import fuzz_settings, judge, listing, outside, run_cli, sandbox
from hypothesis import given
from hypothesis import strategies as st
from strategies import SECTION_KEYS, hostile_value, mutated_mapping, mutated_text, to_yaml

from moeplan.inputs.model_spec import MODEL_INT_RANGES

ROOT = pathlib.Path(__file__).resolve().parents[2]
SEEDS = [
    yaml.safe_load(p.read_text())
    for p in sorted([*(ROOT / "tests" / "golden" / "scenarios").glob("*.yaml"), *(ROOT / "examples").glob("*.yaml")])
    if "model" in yaml.safe_load(p.read_text())
]
#: a small seed that plans in about a second (the planner fuzzer's budget is small)
SMALL = {
    "model": "qwen3-30b-a3b",
    "system": {"gpu": "h100", "num_gpus": 16},
    "training": {"seq_length": 4096, "micro_batch_size": 1, "global_batch_size": 64},
    "layout": {"tensor_model_parallel_size": 1, "expert_model_parallel_size": 8},
}
#: the most files a command may write: none (the scenario commands only read)
NOTHING: set[str] = set()


def _run(cls: str, args_of, text: str):
    """Write ``text`` as ``s.yaml`` in a sandbox, run the command ``args_of(path)`` and judge it."""
    with sandbox() as box:
        path = box / "s.yaml"
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
        before = listing(box)
        out = run_cli(args_of(path))
        stray = outside(before, listing(box), NOTHING)
        return judge(cls, out, [f"outside: {stray}"] if stray else [])


@fuzz_settings(40)
@given(seed=st.sampled_from(SEEDS), data=st.data(), command=st.sampled_from(["check", "estimate", "params"]))
def test_mutated_scenarios_check_estimate(seed, data, command):
    mutated = data.draw(mutated_mapping(seed))
    text = to_yaml(mutated)
    if data.draw(st.booleans()):
        text = data.draw(mutated_text(text))
    _run("scenarios", lambda p: [command, p, "--json"], text)


@fuzz_settings(30)
@given(seed=st.sampled_from(SEEDS), key=st.sampled_from(SECTION_KEYS["model_overrides"]), value=hostile_value)
def test_mutated_model_overrides(seed, key, value):
    sc = {**seed, "model_overrides": {**(seed.get("model_overrides") or {}), key: value}}
    _run("model overrides", lambda p: ["estimate", p, "--json"], to_yaml(sc))


@fuzz_settings(10)
@given(data=st.data(), command=st.sampled_from(["check", "estimate"]))
def test_mutated_model_overrides_without_a_catalog_model(data, command):
    """A model made of overrides alone: the rules take a partial model, the rest need it complete."""
    base = {
        "num_layers": 4,
        "hidden_size": 1024,
        "num_attention_heads": 8,
        "vocab_size": 1000,
        "num_moe_experts": 8,
        "moe_router_topk": 2,
        "moe_ffn_hidden_size": 256,
    }
    key = data.draw(st.sampled_from(SECTION_KEYS["model_overrides"]))
    sc = {**SMALL, "model": None, "model_overrides": {**base, key: data.draw(hostile_value)}}
    sc["system"] = {"gpu": "h100", "num_gpus": 8}
    _run("model overrides", lambda p: [command, p, "--json"], to_yaml(sc))


@fuzz_settings(12)
@given(seed=st.sampled_from(SEEDS), data=st.data())
def test_mutated_scenarios_export_every_format(seed, data):
    fmt = data.draw(
        st.sampled_from(["mbridge-overrides", "mbridge-yaml", "mbridge-python", "megatron-lm-args", "slurm"])
    )
    _run("scenarios", lambda p: ["export", p, "-f", fmt, "--force"], to_yaml(data.draw(mutated_mapping(seed))))


@fuzz_settings(5)
@given(data=st.data(), command=st.sampled_from(["plan", "fit"]))
def test_mutated_requests_plan_and_fit(data, command):
    mutated = data.draw(mutated_mapping(SMALL, max_mutations=2))
    extra = ["--top", "1"] if command == "plan" else []
    _run("scenarios", lambda p: [command, p, "--json", *extra], to_yaml(mutated))


@fuzz_settings(15)
@given(
    flag=st.sampled_from(
        ["--num-gpus", "--seq-length", "--mbs", "--gbs", "--tp", "--pp", "--vpp", "--cp", "--ep", "--etp"]
    ),
    value=st.sampled_from(["1", "2", "3", "64", "1048576", "1048577", "99999999999999999999", "9" * 400]),
    command=st.sampled_from(["check", "estimate"]),
)
def test_hostile_flags(flag, value, command):
    _run("scenarios", lambda p: [command, p, flag, value], to_yaml(SMALL))


@fuzz_settings(15)
@given(
    key=st.sampled_from(sorted(SECTION_KEYS["layout"]) + ["model_overrides.num_layers", "versions.megatron_core"]),
    value=st.sampled_from(["1", "-1", "1e999", ".nan", "[]", "{a: 1}", "&a 1", "*a", "9" * 5000, "'x\\ny'", "null"]),
)
def test_hostile_set_values(key, value):
    full = key if "." in key else f"layout.{key}"
    _run("scenarios", lambda p: ["check", p, "--set", f"{full}={value}"], to_yaml(SMALL))


@st.composite
def extreme_overrides(draw) -> dict:
    """Several model fields at once at the edges of their plausible ranges (valid, but extreme)."""
    keys = draw(st.lists(st.sampled_from(sorted(MODEL_INT_RANGES)), min_size=1, max_size=5, unique=True))
    out = {}
    for k in keys:
        lo, hi = MODEL_INT_RANGES[k]
        out[k] = draw(st.sampled_from([lo, hi, (lo + hi) // 2]) | st.integers(lo, hi))
    return out


@fuzz_settings(15)
@given(
    seed=st.sampled_from(SEEDS), overrides=extreme_overrides(), command=st.sampled_from(["estimate", "check", "params"])
)
def test_extreme_but_valid_model_overrides(seed, overrides, command):
    """Valid values at the caps (10^4 layers, 2^24 widths, 2^16 experts) finish within the bound."""
    sc = {**seed, "model_overrides": {**(seed.get("model_overrides") or {}), **overrides}}
    _run("model overrides", lambda p: [command, p, "--json"], to_yaml(sc))


@fuzz_settings(3)
@given(overrides=extreme_overrides())
def test_extreme_but_valid_model_overrides_plan(overrides):
    _run(
        "model overrides",
        lambda p: ["plan", p, "--json", "--top", "1"],
        to_yaml({**SMALL, "model_overrides": overrides}),
    )


@st.composite
def random_layout(draw) -> dict:
    """A request with a drawn layout: parallel sizes, batch, precision and the switches the planner
    turns (legal or not: the rules say which), on a drawn model and GPU."""
    dims = st.sampled_from([1, 1, 2, 3, 4, 8, 16])
    lay = {
        k: draw(dims)
        for k in (
            "tensor_model_parallel_size",
            "pipeline_model_parallel_size",
            "context_parallel_size",
            "expert_model_parallel_size",
            "expert_tensor_parallel_size",
        )
    }
    if draw(st.booleans()):
        lay["virtual_pipeline_model_parallel_size"] = draw(dims)
    for key, values in (
        ("recompute_granularity", ["full", "selective", None]),
        ("moe_token_dispatcher_type", ["alltoall", "allgather", "flex", None]),
        ("cuda_graph_impl", ["none", "local", "transformer_engine", None]),
        ("sequence_parallel", [True, False, None]),
        ("use_distributed_optimizer", [True, False, None]),
        ("optimizer_cpu_offload", [True, False]),
        ("num_distributed_optimizer_instances", [1, 2, 3, 64]),
    ):
        if draw(st.booleans()):
            lay[key] = draw(st.sampled_from(values))
    world = draw(st.sampled_from([8, 16, 24, 64, 256, 1024]))
    return {
        "model": draw(
            st.sampled_from(
                ["qwen3-30b-a3b", "deepseek-ai/DeepSeek-V3", "Qwen/Qwen3-Next-80B-A3B-Instruct", "gpt-oss-120b"]
            )
        ),
        "system": {"gpu": draw(st.sampled_from(["h100", "gb200", "b200"])), "num_gpus": world},
        "training": {
            "seq_length": draw(st.sampled_from([1024, 4096, 4097, 32768, 131072])),
            "micro_batch_size": draw(st.sampled_from([1, 2, 3])),
            "global_batch_size": draw(st.sampled_from([1, 64, 96, 1024])),
            "precision": draw(st.sampled_from(["bf16", "fp8-blockwise", "mxfp8", "nvfp4"])),
        },
        "layout": lay,
    }


@fuzz_settings(25)
@given(sc=random_layout(), command=st.sampled_from(["check", "estimate", "estimate", "params", "fit"]))
def test_random_layouts(sc, command):
    """Drawn layouts, legal or not (ETP above TP, instances above DP, ...): the rules answer, never a bug."""
    _run("scenarios", lambda p: [command, p, "--json"], to_yaml(sc))
