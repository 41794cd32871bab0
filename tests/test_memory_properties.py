"""Property tests of the memory model (hypothesis)."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from moeplan import estimate_memory, load_scenario

MODELS = ["qwen3-30b-a3b", "deepseek-v3", "qwen3-next-80b", "mixtral-8x7b", "llama-3.1-8b", "gpt-oss-20b"]
MODULES = ["core_attn", "layernorm", "moe_act", "mlp", "moe", "shared_experts", "mla_up_proj", "gdn_norm_out"]


def _scn(model, tp=1, pp=1, cp=1, ep=1, seq=8192, gran=None, mods=None, n=None, sp=None):
    lay = {
        "tensor_model_parallel_size": tp,
        "pipeline_model_parallel_size": pp,
        "context_parallel_size": cp,
        "expert_model_parallel_size": ep,
        "recompute_granularity": gran,
        "moe_router_force_load_balancing": True,
    }
    if gran == "selective":
        lay["recompute_modules"] = mods
    if gran == "full":
        lay.update(recompute_method="uniform", recompute_num_layers=1)
    if sp is not None:
        lay["sequence_parallel"] = sp
    world = n or tp * pp * cp * max(1, ep // max(1, tp * cp)) * 8
    return load_scenario(
        {
            "model": model,
            "system": {"gpu": "h100", "num_gpus": world},
            "training": {"seq_length": seq, "micro_batch_size": 1, "global_batch_size": 256},
            "layout": lay,
        }
    )


def _act(model, **kw) -> int:
    return max(s.activations_bytes for s in estimate_memory(_scn(model, **kw)).stages)


@settings(max_examples=25, deadline=None, derandomize=True)
@given(model=st.sampled_from(MODELS), tp=st.sampled_from([1, 2]), pp=st.sampled_from([1, 2, 4]))
def test_parts_sum_to_totals(model, tp, pp):
    est = estimate_memory(_scn(model, tp=tp, pp=pp))
    for s in est.stages:
        cats = (s.weights_bytes, s.grads_bytes, s.optimizer_bytes, s.activations_bytes, s.other_bytes)
        assert s.total_bytes == sum(cats)
        for name, items in s.items.items():
            assert abs(s.category(name) - sum(items.values())) <= 1
    assert est.peak_bytes == max(s.total_bytes for s in est.stages)


@settings(max_examples=20, deadline=None, derandomize=True)
@given(model=st.sampled_from(MODELS), cp=st.sampled_from([1, 2, 4]))
def test_more_cp_never_raises_activations(model, cp):
    assert _act(model, cp=2 * cp) <= _act(model, cp=cp)


@settings(max_examples=20, deadline=None, derandomize=True)
@given(
    model=st.sampled_from(["qwen3-30b-a3b", "llama-3.1-8b", "mixtral-8x7b", "deepseek-v3"]),
    tp=st.sampled_from([1, 2, 4]),
)
def test_more_tp_with_sp_never_raises_activations(model, tp):
    assert _act(model, tp=2 * tp, sp=True) <= _act(model, tp=tp, sp=tp > 1)


@settings(max_examples=20, deadline=None, derandomize=True)
@given(model=st.sampled_from(["qwen3-30b-a3b", "llama-3.1-8b", "gpt-oss-20b"]), pp=st.sampled_from([1, 2]))
def test_more_pp_never_raises_activations(model, pp):
    assert _act(model, pp=2 * pp) <= _act(model, pp=pp)


@settings(max_examples=30, deadline=None, derandomize=True)
@given(model=st.sampled_from(MODELS), k=st.integers(1, 3), data=st.data())
def test_recompute_order(model, k, data):
    """none ≥ any selective set ≥ full; adding a module never raises activations."""
    mods = data.draw(st.lists(st.sampled_from(MODULES), min_size=k, max_size=k, unique=True))
    none = _act(model)
    sel = _act(model, gran="selective", mods=mods)
    full = _act(model, gran="full")
    assert full <= sel <= none
    more = sorted(set(mods) | {"layernorm"})
    assert _act(model, gran="selective", mods=more) <= sel


@settings(max_examples=15, deadline=None, derandomize=True)
@given(ep=st.sampled_from([1, 2, 4, 8]), model=st.sampled_from(["qwen3-30b-a3b", "mixtral-8x7b"]))
def test_ep_changes_only_expert_memory(ep, model):
    base = estimate_memory(_scn(model, ep=1, n=64)).stages[0]
    other = estimate_memory(_scn(model, ep=ep, n=64)).stages[0]
    assert other.activations_bytes == base.activations_bytes
    assert other.items["optimizer"]["dense_state"] == base.items["optimizer"]["dense_state"]
    assert other.items["optimizer"]["expert_state"] <= base.items["optimizer"]["expert_state"]
    assert other.weights_bytes <= base.weights_bytes


def test_all_single_modules_reduce_or_keep():
    for model, mod in itertools.product(["deepseek-v3", "qwen3-next-80b"], MODULES):
        assert _act(model, gran="selective", mods=[mod]) <= _act(model)


def _est(model="deepseek-v3", **lay):
    base = {
        "tensor_model_parallel_size": 1,
        "pipeline_model_parallel_size": 4,
        "expert_model_parallel_size": 32,
        "moe_router_force_load_balancing": True,
    }
    base.update(lay)
    return estimate_memory(
        load_scenario(
            {
                "model": model,
                "system": {"gpu": "gb200", "num_gpus": 256},
                "training": {"seq_length": 4096, "micro_batch_size": 1, "global_batch_size": 512, "precision": "mxfp8"},
                "layout": base,
            }
        )
    ).stages[0]


def test_fp8_attention_halves_attention_tensors():
    plain, fp8 = _est(), _est(fp8_dot_product_attention=True)
    assert fp8.activations_bytes < plain.activations_bytes


def test_fine_grained_offload_moves_activations_to_host():
    plain = _est()
    off = _est(fine_grained_activation_offloading=True, offload_modules=["core_attn", "expert_fc1"])
    assert off.activations_bytes < plain.activations_bytes
    assert off.host_bytes > plain.host_bytes
    assert off.items["activations"]["offload_staging"] > 0


def test_rank_capacity_factor_caps_imbalance():
    free = _est(moe_router_force_load_balancing=False)
    capped = _est(
        moe_router_force_load_balancing=False,
        moe_token_dispatcher_type="flex",
        moe_flex_dispatcher_backend="hybridep",
        moe_expert_rank_capacity_factor=1.0,
    )
    assert capped.activations_bytes < free.activations_bytes
