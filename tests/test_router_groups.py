"""Group-limited routing (megatron-core ``moe_router_num_groups`` / ``moe_router_group_topk``): read from a
config.json's ``n_group`` / ``topk_group`` as Megatron Bridge maps them, checked as megatron-core checks
them, and counted in the EP exchange of DeepEP / HybridEP, which send a token once per remote
scale-up domain (``moeplan.model.comm.remote_domains_per_token``)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from moeplan import estimate_step, load_scenario
from moeplan.errors import InputError
from moeplan.model.comm import remote_domains_per_token


def _dsv3(ep: int = 64, n: int = 1024, dispatcher: str = "deepep", **overrides) -> dict:
    return {
        "model": "deepseek-ai/DeepSeek-V3",
        "model_overrides": overrides,
        "system": {"gpu": "h100", "num_gpus": n},
        "training": {"seq_length": 4096, "micro_batch_size": 1, "global_batch_size": 512, "precision": "bf16"},
        "layout": {
            "pipeline_model_parallel_size": 16,
            "expert_model_parallel_size": ep,
            "moe_token_dispatcher_type": "flex",
            "moe_flex_dispatcher_backend": dispatcher,
        },
    }


def test_deepseek_v3_routes_within_4_of_8_groups_kimi_k2_without_a_limit():
    dsv3 = load_scenario(_dsv3()).complete_model
    assert (dsv3.moe_router_num_groups, dsv3.moe_router_group_topk) == (8, 4)
    kimi = load_scenario({**_dsv3(), "model": "moonshotai/Kimi-K2-Instruct"}).complete_model
    # n_group 1: one group, the same routing as none
    assert (kimi.moe_router_num_groups, kimi.moe_router_group_topk) == (None, None)


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"moe_router_num_groups": 7}, "model_overrides.moe_router_num_groups"),  # 256 experts % 7
        ({"moe_router_group_topk": 9}, "model_overrides.moe_router_group_topk"),  # more than the 8 groups
        ({"moe_router_num_groups": None}, "model_overrides.moe_router_num_groups"),  # a group top-k alone
        ({"moe_router_num_groups": 256, "moe_router_group_topk": 4}, "model_overrides.moe_router_group_topk"),
    ],
)
def test_router_groups_megatron_rejects_are_input_errors(overrides, field):
    """megatron-core: a group top-k needs the group count, which divides the experts; at most every group
    is selected; and the selected groups must hold the top-k (4 groups of 1 expert < top-8)."""
    with pytest.raises(InputError) as exc:
        load_scenario(_dsv3(**overrides)).complete_model  # noqa: B018
    assert exc.value.field == field


def test_unlimited_routing_reaches_each_domain_with_probability_one_minus_miss_to_the_k():
    # 4 domains, top-8 uniform over all experts: 3 · (1 − 0.75^8)
    assert remote_domains_per_token(8, 4) == pytest.approx(3 * (1 - 0.75**8))
    assert remote_domains_per_token(8, 1) == 0.0
    # every group selected is no limit
    assert remote_domains_per_token(8, 4, (8, 8)) == pytest.approx(remote_domains_per_token(8, 4))


def test_node_limited_deepseek_v3_at_ep64_reaches_half_the_nodes_it_would_without():
    """8 nodes, 8 groups (one per node), 4 selected, top-8: a node is selected with probability 1/2 and then
    holds at least one of the 8 experts with probability 1 − 0.75^8: 7 · 0.5 · 0.8999 = 3.15 other nodes,
    where unlimited routing reaches 7 · (1 − 0.875^8) = 4.59."""
    assert remote_domains_per_token(8, 8, (8, 4)) == pytest.approx(7 * 0.5 * (1 - 0.75**8))
    assert remote_domains_per_token(8, 8) == pytest.approx(7 * (1 - 0.875**8))


def test_two_groups_per_domain_is_hypergeometric():
    """EP 32 over 4 nodes, 8 groups (2 per node), 4 selected: a node has 0, 1 or 2 of its groups selected
    with probabilities 15/70, 40/70, 15/70 and is then hit with 0, 1 − 0.75^8, 1 − 0.5^8."""
    p = (40 * (1 - 0.75**8) + 15 * (1 - 0.5**8)) / 70
    assert remote_domains_per_token(8, 4, (8, 4)) == pytest.approx(3 * p)


def test_a_group_spanning_domains():
    """2 groups over 8 domains (4 domains each), 1 selected: a domain is in the selected group with
    probability 1/2 and then hit with 1 − (3/4)^8."""
    assert remote_domains_per_token(8, 8, (2, 1)) == pytest.approx(7 * 0.5 * (1 - 0.75**8))


def test_groups_that_straddle_places():
    """2 groups over 3 places, 1 selected, top-2 (by hand): the middle place holds a third of either
    group: a third of the selected experts whatever is selected, hit with 1 − (2/3)^2 =
    5/9; an end place is in the selected group half the time and then holds two thirds of its experts:
    1/2 · (1 − (1/3)^2) = 4/9. The rank of an end place reaches 5/9 + 4/9 = 1 other place (the unlimited
    form: 2 · 5/9). With one of 8 groups selected, EP 12 (groups straddling ranks) reaches more ranks
    than EP 8 and fewer than EP 16."""
    assert remote_domains_per_token(2, 3, (2, 1)) == pytest.approx(1.0)
    one_group = [remote_domains_per_token(8, n, (8, 1)) for n in (8, 12, 16)]
    assert one_group == sorted(one_group)


@given(
    topk=st.integers(1, 16),
    domains=st.integers(2, 40),
    groups=st.integers(1, 64),
    chosen=st.integers(1, 64),
)
def test_a_group_limit_never_reaches_more_domains(topk, domains, groups, chosen):
    """Each place's expected share of the selected experts is 1/N whatever the groups, and 1 − (1 − x)^k
    is concave: no place is hit more often than without the limit."""
    chosen = min(chosen, groups)
    limited = remote_domains_per_token(topk, domains, (groups, chosen))
    assert 0.0 <= limited <= remote_domains_per_token(topk, domains) + 1e-12
    assert limited <= domains - 1


def test_deepep_exchange_of_deepseek_v3_shrinks_with_the_group_limit_alltoall_does_not():
    """DeepEP at EP 64 over eight H100 nodes sends 3.15 copies of a token across nodes where unlimited
    routing sends 4.59: the exchange's cross-node part shrinks by that ratio; NCCL all-to-all sends one copy
    per routed expert either way."""

    def ep_s(data: dict) -> float:
        est = estimate_step(load_scenario(data))
        return est.breakdown_s["ep_comm_exposed"] + est.hidden_s["ep_comm"]

    limited, unlimited = ep_s(_dsv3()), ep_s(_dsv3(moe_router_num_groups=None, moe_router_group_topk=None))
    ratio = (7 * 0.5 * (1 - 0.75**8)) / (7 * (1 - 0.875**8))
    assert limited / unlimited == pytest.approx(ratio, rel=0.02)
    a2a = {"moe_token_dispatcher_type": "alltoall", "moe_flex_dispatcher_backend": None}
    plain = _dsv3()
    plain["layout"].update(a2a)
    free = _dsv3(moe_router_num_groups=None, moe_router_group_topk=None)
    free["layout"].update(a2a)
    assert ep_s(plain) == pytest.approx(ep_s(free))
    assert math.isclose(ratio, 0.686, abs_tol=0.001)
