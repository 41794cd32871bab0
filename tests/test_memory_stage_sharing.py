"""Stages built from the same ordered layer keys share one activation computation, and the shared
record is the one each stage computes on its own."""

from __future__ import annotations

import dataclasses

import pytest

from moeplan import load_scenario
from moeplan.model.activations import ActContext, layer_saved_key, layer_saved_keys
from moeplan.model.memory import stage_activations
from moeplan.model.memory.stage_activations import (
    compute_decoder_activations,
    decoder_activations,
    decoder_stage_key,
)
from moeplan.structure.placement import stage_params, stage_plan

NANO = {
    "model": "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16",
    "system": {"gpu": "h100", "num_gpus": 16},
    "training": {"seq_length": 8192, "micro_batch_size": 1, "global_batch_size": 64},
    "layout": {"pipeline_model_parallel_size": 4, "expert_model_parallel_size": 4},
}
V4_FLASH = {
    "model": "deepseek-ai/DeepSeek-V4-Flash",
    "system": {"gpu": "gb200", "num_gpus": 128},
    "training": {"seq_length": 4096, "micro_batch_size": 1, "global_batch_size": 256},
    "layout": {"pipeline_model_parallel_size": 4, "expert_model_parallel_size": 32},
}
CTX = ActContext(tokens=8192, seq_local=8192, micro_batch_size=1, tp=1, sp=False, etp=1)
CORE_ATTN = frozenset({"core_attn"})


def _stages(scn: dict, layout: dict | None = None):
    s = load_scenario({**scn, "layout": {**scn["layout"], **(layout or {})}})
    return s, stage_plan(s, allow_balanced=True), stage_params(s, allow_balanced=True)


@pytest.mark.parametrize("scn", [NANO, V4_FLASH], ids=["hybrid", "dsv4"])
@pytest.mark.parametrize(
    ("layout", "modules"),
    [
        ({}, frozenset()),
        ({"recompute_granularity": "selective"}, CORE_ATTN),
        ({"recompute_granularity": "full", "recompute_method": "uniform", "recompute_num_layers": 2}, frozenset()),
    ],
    ids=["no-recompute", "selective", "full-uniform-2"],
)
def test_shared_stage_record_equals_each_stage_computed_alone(scn, layout, modules):
    s, plan, stages = _stages(scn, layout)
    m = s.complete_model
    for sp in stages:
        keys = {layer_saved_key(m, li) for chunk in plan.layers[sp.stage] for li in chunk}
        assert len(keys) > 1  # the layers of one stage differ (Mamba / MoE / attention, or CSA ratios)
        shared = decoder_activations(s, sp, plan, CTX, modules)
        alone = compute_decoder_activations(s, sp, plan, CTX, modules)
        assert shared == alone


def test_layer_saved_keys_lists_every_layer_key():
    s, _, _ = _stages(V4_FLASH)
    m = s.complete_model
    assert layer_saved_keys(m) == tuple(layer_saved_key(m, li) for li in range(m.num_layers))
    # V4-Flash: layers 0-1 sliding window only (ratio 0), then CSA ratios 4 and 128 alternate
    assert [k[3] for k in layer_saved_keys(m)[:4]] == [0, 0, 4, 128]


def test_stages_with_the_same_ordered_keys_share_one_key():
    s, plan, stages = _stages(V4_FLASH)
    # 43 layers on 4 stages: 0-10, 11-21, 22-32, 33-42. Stages 0 and 1 differ (layers 0-1 have ratio 0),
    # stage 1 (ratios 128, 4, ..., 128) and stage 2 (4, 128, ..., 4) hold the same layers in another order
    ks = [decoder_stage_key(s, plan, sp.stage, CTX, frozenset()) for sp in stages]
    assert len(set(ks)) == len(ks)
    # a split whose first two stages both hold layers 11-21: one key, the one of stage 1 above
    shifted = dataclasses.replace(plan, layers=[plan.layers[1], plan.layers[1]] + plan.layers[2:])
    assert decoder_stage_key(s, shifted, 0, CTX, frozenset()) == decoder_stage_key(s, shifted, 1, CTX, frozenset())
    assert decoder_stage_key(s, shifted, 0, CTX, frozenset()) == ks[1]


def test_a_different_stage_context_or_recompute_gets_a_different_record():
    s, plan, stages = _stages(NANO)
    first = decoder_activations(s, stages[0], plan, CTX, frozenset())
    # stage 0 holds layers 0-12 (MEMEM*EMEMEM*E: 6 Mamba, 5 MoE, 2 attention), stage 3 layers 39-51
    # (EMEMEMEM*EMEME: 6 Mamba, 6 MoE, 1 attention)
    last = decoder_activations(s, stages[3], plan, CTX, frozenset())
    assert first.per_microbatch_bytes != last.per_microbatch_bytes
    # micro-batch 2 doubles every saved tensor of the same stage
    ctx2 = dataclasses.replace(CTX, tokens=2 * CTX.tokens, micro_batch_size=2)
    double = decoder_activations(s, stages[0], plan, ctx2, frozenset())
    assert double.per_microbatch_bytes == pytest.approx(2 * first.per_microbatch_bytes)
    # selective recompute of core_attn drops the attention layers' softmax inputs: less is kept
    s_sel, _, _ = _stages(NANO, {"recompute_granularity": "selective"})
    sel = decoder_activations(s_sel, stages[0], plan, CTX, CORE_ATTN)
    assert sel.per_microbatch_bytes < first.per_microbatch_bytes


def test_each_call_returns_its_own_chunk_list():
    s, plan, stages = _stages(NANO)
    a = decoder_activations(s, stages[0], plan, CTX, frozenset())
    a.chunks.append((99, 0, 0.0))
    b = decoder_activations(s, stages[0], plan, CTX, frozenset())
    assert (99, 0, 0.0) not in b.chunks


def test_records_stay_right_while_the_caches_fill_and_empty(monkeypatch):
    monkeypatch.setattr(stage_activations, "CACHE_LIMIT", 1)
    s, plan, stages = _stages(NANO)
    for mbs in (1, 2, 3):
        ctx = dataclasses.replace(CTX, tokens=mbs * CTX.tokens, micro_batch_size=mbs)
        for sp in (stages[0], stages[3], stages[1], stages[0]):
            got = decoder_activations(s, sp, plan, ctx, frozenset())
            assert got == compute_decoder_activations(s, sp, plan, ctx, frozenset())
