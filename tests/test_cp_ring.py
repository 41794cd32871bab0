"""The context-parallel K/V ring step by step (Transformer Engine ``AttnFuncWithCPAndKVP2P``), on
DeepSeek-V3 at 128K tokens with CP 32 on H100 nodes of 8 GPUs, and which CP exchanges run with MLA."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from moeplan import load_scenario, validate
from moeplan.catalog.gpus import get_gpu
from moeplan.model.constants import load_constants
from moeplan.model.time.cp_ring import cross_node_hops, ring_steps
from moeplan.structure.flops import model_flops

# DeepSeek-V3 MLA after the up-projection: 128 heads, K 192 (128 + 64 rope) and V 128 per head.
DSV3_KV_WIDTH = 128 * (192 + 128)
# 128K tokens over CP 32: 4096 tokens per rank.
TOKENS_128K_CP32 = 131072 / 32


@pytest.mark.parametrize(("cp", "hops"), [(4, 0), (8, 0), (16, 2), (32, 4), (64, 8)])
def test_p2p_ring_crosses_one_node_boundary_per_node(cp, hops):
    # TP 1: CP ranks are consecutive GPUs; ring 0→1→…→cp−1→0 leaves each node once.
    assert cross_node_hops(cp, 1, 8) == hops


def test_ring_members_tp_apart_and_a2a_p2p_outer_ring():
    # TP 2, CP 8: GPUs 0,2,…,14 — nodes 0,0,0,0,1,1,1,1: two crossings.
    assert cross_node_hops(8, 2, 8) == 2
    # a2a+p2p [8, 4] with TP 1: the ring members are 8 GPUs apart, every hop leaves its node.
    assert cross_node_hops(4, 8, 8) == 4


def test_dsv3_128k_cp32_ring_is_nic_bound_step_by_step():
    gpu, c = get_gpu("h100"), load_constants()
    attention_s = 0.144  # forward 1.5 ms and backward 3.0 ms per ring step (32 steps)
    r = ring_steps(TOKENS_128K_CP32, DSV3_KV_WIDTH, 32, 1, gpu, c, attention_s)
    assert r.step_bytes == 4096 * 40960 * 2 == 335_544_320
    assert r.cross_node_hops == 4
    t = 335_544_320 / (50e9 * c.nic_efficiency)  # one 400 Gb/s NIC per GPU
    assert r.step_link_s == pytest.approx(t)
    # forward: 31 sends, each beyond its 1.5 ms step; backward: K/V, 30 × (K/V + dK/dV), dK/dV.
    assert r.forward_exposed_s == pytest.approx(31 * (t - 1.5e-3))
    assert r.backward_exposed_s == pytest.approx(2 * (t - 3e-3) + 30 * (2 * t - 3e-3))
    assert r.total_s == pytest.approx(93 * t)
    assert r.hidden_s == pytest.approx(31 * 1.5e-3 + 32 * 3e-3)


def test_ring_inside_one_node_hides_behind_attention():
    gpu, c = get_gpu("h100"), load_constants()
    # 32K over CP 8: 4096 tokens per rank, the same message, over NVLink (450 GB/s one way).
    r = ring_steps(4096, DSV3_KV_WIDTH, 8, 1, gpu, c, 0.036)
    t = 335_544_320 / (450e9 * c.nvlink_efficiency)
    assert r.cross_node_hops == 0
    assert r.step_link_s == pytest.approx(t)
    assert t < 1.5e-3 and 2 * t < 3e-3
    assert r.exposed_s == 0.0
    assert r.hidden_s == pytest.approx(21 * t)


def test_a2a_p2p_outer_ring_hides_the_same_bytes_behind_longer_steps():
    gpu, c = get_gpu("h100"), load_constants()
    # a2a+p2p [8, 4] at 128K: 32768 tokens × 16 heads per rank, 4 steps of 36 ms attention each.
    r = ring_steps(4096 * 8, DSV3_KV_WIDTH / 8, 4, 8, gpu, c, 0.144)
    assert r.step_bytes == 335_544_320
    assert r.cross_node_hops == 4
    assert r.exposed_s == 0.0  # 7.1 ms per message < 12 ms forward / 24 ms backward step


def _dsv3_128k(versions=None, **layout):
    return load_scenario(
        {
            "versions": versions or {},
            "model": "deepseek-ai/DeepSeek-V3",
            "system": {"gpu": "h100", "num_gpus": 256},
            "training": {"seq_length": 131072, "micro_batch_size": 1, "global_batch_size": 32},
            "layout": {
                "pipeline_model_parallel_size": 8,
                "virtual_pipeline_model_parallel_size": 4,
                "context_parallel_size": 32,
                "expert_model_parallel_size": 32,
                **layout,
            },
        }
    )


def test_mla_cp_runs_with_both_ring_exchanges():
    """Transformer Engine ``tests/pytorch/attention/test_attention_with_cp.py`` skips MLA (head_dim_qk
    != head_dim_v) when ``"p2p" not in cp_comm_type``: v2.6–v2.14 for FlashAttention and fused
    attention, v2.15+ for FlashAttention only. p2p and a2a+p2p run with MLA in every release."""
    for layout in (
        {"cp_comm_type": "p2p"},
        {"cp_comm_type": "a2a+p2p", "hierarchical_context_parallel_sizes": [8, 4]},
    ):
        r = validate(_dsv3_128k(**layout))
        assert "sequence.cp_attention_support" not in r.rule_ids("warning"), layout
    r = validate(_dsv3_128k(cp_comm_type="a2a"))
    assert "sequence.cp_attention_support" in r.rule_ids("warning")


@pytest.mark.parametrize(("te", "warned"), [(None, True), ("2.14", True), ("2.14+71bbefb", True), ("2.15", False)])
def test_mla_cp_a2a_and_all_gather_are_tested_from_te_2_15_on_hopper(te, warned):
    """Transformer Engine 2.15 (8e73f54) runs MLA under FusedAttention, which it prefers on Hopper+,
    with all four cp_comm_types in ``test_attention_with_cp.py``; before it, only the ring types."""
    for comm in ("a2a", "all_gather"):
        r = validate(_dsv3_128k({"transformer_engine": te} if te else None, cp_comm_type=comm))
        assert ("sequence.cp_attention_support" in r.rule_ids("warning")) is warned, (te, comm)


def test_card_dsv3_figures_exceed_what_a_cross_node_p2p_ring_allows():
    """NVIDIA's long-context card (``benchmarks/data/long_context_card.yaml``) measures ~310 / 300 /
    300 TFLOP/s per GPU for DeepSeek-V3 at 64K / 128K / 256K (CP 16 / 32 / 64). A p2p ring that crosses
    nodes pushes ``3 (CP − 1)`` K/V messages per layer and microbatch through one GPU's 400 Gb/s NIC;
    at line rate, with every other term free, that ring alone caps the model FLOP/s far below the card
    (less than 60 % of it), so those runs cannot have used p2p; a2a+p2p [8, CP/8] hides its ring."""
    card = yaml.safe_load((Path(__file__).parents[1] / "benchmarks/data/long_context_card.yaml").read_text())
    rows = [r for r in card["runs"] if "dsv3" in r["id"] and r["scenario"]["layout"]["context_parallel_size"] >= 16]
    assert len(rows) == 3
    for row in rows:
        s = load_scenario(row["scenario"])
        seq, cp = s.training.seq_length, s.cp
        per_gpu_flops = model_flops(s.model, seq, mtp_num_layers=1).total / (s.tp * cp * s.pp)
        ring_s = 3 * (cp - 1) * (seq / cp) * DSV3_KV_WIDTH * 2 / 50e9  # one layer, one microbatch
        layers = s.model.num_layers // s.pp  # 7: the fewest decoder layers on any stage
        cap = per_gpu_flops / (layers * ring_s) / 1e12
        assert cap < 0.6 * row["measured"]["model_tflops_per_gpu"], (cp, cap)
