"""The heads a CP all-to-all splits: the rule (sequence.cp_attention_support) and the planner's CP options
agree with Transformer Engine, which views Q, K and V as [..., cp, heads // cp, ...] over the all-to-all
group (every CP rank for a2a, the first level of hierarchical_context_parallel_sizes for a2a+p2p)."""

from __future__ import annotations

from moeplan import get_model
from moeplan.plan.space import cp_comm_options
from moeplan.structure.attention_kernels import heads_per_tp_rank


def test_heads_per_tp_rank_of_gqa_and_mla():
    # Qwen3-235B-A22B: 64 query heads, 4 KV heads; DeepSeek-V3 (MLA): 128 heads for Q, K and V
    assert heads_per_tp_rank(get_model("Qwen/Qwen3-235B-A22B"), 2) == (32, 2)
    assert heads_per_tp_rank(get_model("Qwen/Qwen3-235B-A22B"), 8) == (8, 1)  # fewer KV heads than TP: 1 each
    assert heads_per_tp_rank(get_model("deepseek-ai/DeepSeek-V3"), 8) == (16, 16)


def test_the_hierarchical_option_splits_no_more_heads_than_a_rank_has():
    def hier(*args):
        opts = cp_comm_options(*args)
        return [k["hierarchical_context_parallel_sizes"] for _, k in opts if k["cp_comm_type"] == "a2a+p2p"]

    # CP 16, TP 2 on a 72-GPU NVLink domain: the all-to-all level may be 8 unless the heads forbid it
    assert hier(16, 2, 72) == [[8, 2]]
    assert hier(16, 2, 72, 2) == [[2, 8]]  # 2 KV heads per rank: a level of 2, a ring of 8
    assert hier(16, 2, 72, 4) == [[4, 4]]
    assert hier(16, 1, 8, 1) == []  # one KV head per rank: no all-to-all level at all
    assert hier(16, 1, 8, 6) == [[2, 8]]  # a power of two that divides 6
