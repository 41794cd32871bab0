"""Communication volumes and times per microbatch / per step on one GPU.

Volumes follow the collectives Megatron-Core issues (``megatron/core/tensor_parallel/mappings.py``,
``transformer/moe/token_dispatcher.py``, TE context parallelism, ``distributed/`` DDP buckets):

- TP with SP: an all-gather and a reduce-scatter of the layer input (tokens·h bf16) around the attention
  block and around a TP-split MLP, forward and the same backward (a MoE block with ETP 1 hands its
  tokens to the dispatcher without them); without SP the same volume moves as all-reduces; ring volume
  per rank ``(t−1)/t`` of it;
- CP (Transformer Engine ``context_parallel.py``): the p2p ring passes the local K/V ``(cp−1)`` times
  forward and K/V + dK/dV ``2(cp−1)`` times backward, overlapped with the attention kernel (only the
  excess is exposed); a2a redistributes Q, K, V and the output (and their gradients) between sequence
  and head splits, exposed; a2a+p2p does the all-to-all in the inner group and the ring over the outer
  one; all_gather gathers K/V forward and again backward, reduce-scatters dK/dV, exposed; Gated
  DeltaNet layers all-to-all their projections (Megatron-Core ``GatedDeltaNet``), exposed;
- EP: per MoE layer dispatch + combine forward and backward, BF16: NCCL all-to-all sends routed
  tokens·h, ``(EP−1)/EP`` leaving the rank; DeepEP and HybridEP send a token once per other rank it
  reaches and across domains once per remote domain (:func:`ep_time`); inside the NVLink domain at
  NVLink speed, across it limited by one NIC per GPU (nccl-tests #267/#290);
- PP: activations and their gradients at each stage boundary;
- DP: reduce-scatter of gradients and all-gather of parameters over DP·CP (dense) and EDP (experts).

Link speeds from the catalog (decimal GB/s, one direction), times the fitted NCCL efficiencies.
Group placement follows Megatron's default rank order (tp-cp-ep-dp-pp): a group fits in one NVLink
domain when the product of the inner sizes does.
"""

from __future__ import annotations

import functools
import itertools
import math
from fractions import Fraction

from moeplan.inputs.system import GpuSpec
from moeplan.model.constants import DEEPEP_NVLINK_EFFICIENCY, TimeConstants
from moeplan.model.hardware import nic_bytes_per_s, nvlink_bytes_per_s


def link_bw(gpu: GpuSpec, span_gpus: int, c: TimeConstants) -> float:
    """Bytes/s one GPU achieves in a collective whose group spans ``span_gpus`` consecutive ranks."""
    nvlink = nvlink_bytes_per_s(gpu) * c.nvlink_efficiency
    nic = nic_bytes_per_s(gpu) * c.nic_efficiency
    return nvlink if span_gpus <= gpu.scaleup_domain_gpus else nic


def tp_time(
    tokens: float,
    h: int,
    tp: int,
    gpu: GpuSpec,
    c: TimeConstants,
    overlap: bool,
    collectives: int = 8,
    gemm_s: float | None = None,
) -> float:
    """SP all-gather / reduce-scatter time of one layer, forward + backward: ``collectives`` of the
    layer input (8 for attention + MLP, 4 for attention alone). With TP comm overlap the fitted share
    is hidden, at most the ``gemm_s`` of GEMMs it is pipelined with."""
    if tp == 1:
        return 0.0
    vol = collectives * tokens * h * 2 * (tp - 1) / tp
    t = vol / link_bw(gpu, tp, c)
    if not overlap:
        return t
    hidden = c.overlap_hidden_fraction * t
    return t - (min(hidden, gemm_s) if gemm_s is not None else hidden)


def cp_ring_s(tokens: float, kv_width: int, ring: int, tp: int, span: int, gpu: GpuSpec, c: TimeConstants) -> float:
    """The K/V ring of one attention layer over ``ring`` ranks, forward + backward (s, before overlap).

    Transformer Engine's ``AttnFuncWithCPAndKVP2P``: forward sends the rank's whole local K and V
    (one message of ``tokens · kv_width / tp`` bf16 elements) ``ring − 1`` times; backward sends K/V
    and the accumulating dK/dV, ``2(ring − 1)`` messages of the same size. Each hop overlaps one
    step's attention kernel (the caller subtracts what the kernel hides). The ring's slowest hop sets
    the pace: the group spans ``span`` GPUs (TP·CP in Megatron's tp-cp-ep-dp-pp order).
    """
    if ring <= 1:
        return 0.0
    vol = 3 * (ring - 1) * tokens * kv_width / tp * 2
    return vol / link_bw(gpu, span, c)


def cp_a2a_s(tokens: float, qkvo_width: int, group: int, tp: int, span: int, gpu: GpuSpec, c: TimeConstants) -> float:
    """The all-to-alls of one attention layer over ``group`` ranks, forward + backward (s, exposed).

    Transformer Engine's ``AttnFuncWithCPAndQKVOA2A`` (Ulysses): forward all-to-alls Q, K and V from
    sequence- to head-split and the output back; backward the same for dO, dQ, dK and dV; each moves
    ``(group − 1)/group`` of the local tensor (``tokens · width / tp`` bf16 elements). Nothing overlaps
    them but reshape kernels.
    """
    if group <= 1:
        return 0.0
    vol = 2 * tokens * qkvo_width / tp * 2 * (group - 1) / group
    return vol / link_bw(gpu, span, c)


def cp_all_gather_s(tokens: float, kv_width: int, cp: int, tp: int, gpu: GpuSpec, c: TimeConstants) -> float:
    """K/V all-gather of one attention layer, forward + backward (s, exposed).

    Transformer Engine's ``AttnFuncWithCPAndKVAllGather``: forward all-gathers K and V over CP;
    backward gathers them again and reduce-scatters dK and dV; each collective moves
    ``(cp − 1)`` local K/V blocks per rank, and none overlaps the kernel ("KV all-gather between CP
    ranks is exposed").
    """
    if cp <= 1:
        return 0.0
    vol = 3 * (cp - 1) * tokens * kv_width / tp * 2
    return vol / link_bw(gpu, tp * cp, c)


def gdn_cp_a2a_s(
    tokens: float, in_width: int, out_width: int, cp: int, tp: int, gpu: GpuSpec, c: TimeConstants
) -> float:
    """The all-to-alls of one Gated DeltaNet layer under CP, forward + backward (s, exposed).

    Megatron-Core's ``GatedDeltaNet`` (core 0.18+) runs CP as sequence → head all-to-alls: after
    ``in_proj`` the q, k, v, z, β, α projections (``in_width`` = 2·qk + 2·v + 2·H_v per token) go to
    head-split, after the gated norm the output (``out_width`` = v per token) comes back; backward
    moves their gradients. Each moves ``(cp − 1)/cp`` of the local tensor; nothing overlaps them.
    """
    if cp <= 1:
        return 0.0
    vol = 2 * tokens * (in_width + out_width) / tp * 2 * (cp - 1) / cp
    return vol / link_bw(gpu, tp * cp, c)


def ep_time(
    routed_tokens: float,
    h: int,
    ep: int,
    etp: int,
    dispatcher: str,
    gpu: GpuSpec,
    c: TimeConstants,
    topk: int = 0,
    groups: tuple[int, int] | None = None,
    domain: int | None = None,
) -> float:
    """Token dispatch + combine of one MoE layer, forward + backward (s), for ``routed_tokens`` (the rank's
    own tokens × top-k) exchanged over EP, all four exchanges in BF16 (megatron-core hands DeepEP and
    HybridEP the BF16 hidden states, ``transformer/moe/fused_a2a.py``; it refuses HybridEP's FP8
    dispatch). The EP group's ranks are ``etp`` apart (the span is EP·ETP).

    The all-gather dispatcher (``allgather``) gathers every rank's tokens over the group
    (:func:`allgather_dispatch_s`). NCCL all-to-all (``alltoall``) sends one copy per routed expert: ``(EP−1)/EP`` of them leave the
    rank, at NVLink speed inside the scale-up domain and limited by the NIC across it; with ETP > 1 the
    tokens an expert rank receives are then all-gathered over its ETP group and reduce-scattered before
    combine, forward and backward (:func:`etp_exchange_s`). DeepEP and HybridEP go through the flex
    dispatcher, which sends over one TP×EP group: a token once to every rank holding any of its
    experts, each ETP rank of an expert included, and no ETP collective (:func:`_dedup_exchange_s`).
    A group that does not fill whole domains is taken to start at a domain boundary; its ranks in the
    last, partial domain send the most across (:func:`slowest_remote_domains`), and they bound it.
    ``domain``: the ranks that share NVLink, when not the GPU's scale-up domain (HybridEP's
    ``NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN``, :func:`~moeplan.model.memory.dispatcher_buffers.hybridep_nvlink_ranks`)."""
    group = ep * etp
    if group == 1:
        return 0.0
    if dispatcher == "allgather":
        return allgather_dispatch_s(routed_tokens / max(1, topk), h, group, gpu, c)
    if dispatcher in ("deepep", "hybridep"):
        k = max(1, topk)
        routing = (dispatcher, k, groups, domain or gpu.scaleup_domain_gpus)
        return _dedup_exchange_s(routed_tokens / k * h * 8, ep, etp, routing, gpu, c)
    t_etp = etp_exchange_s(routed_tokens, h, etp, gpu, c)
    if ep == 1:
        return t_etp
    vol = routed_tokens * h * 8 * (ep - 1) / ep  # 4 BF16 exchanges
    eff = c.a2a_efficiency.get(dispatcher, c.a2a_efficiency.get("alltoall", 0.5))
    nvlink = nvlink_bytes_per_s(gpu) * eff
    nvl = gpu.scaleup_domain_gpus
    if group <= nvl:
        return vol / nvlink + t_etp
    cross = 1 - (group % nvl or nvl) / group  # a partial domain's ranks send the most across
    return max(vol * cross / (nic_bytes_per_s(gpu) * eff), vol * (1 - cross) / nvlink) + t_etp


def allgather_dispatch_s(tokens: float, h: int, group: int, gpu: GpuSpec, c: TimeConstants) -> float:
    """megatron-core's all-gather token dispatcher (``MoEAllGatherTokenDispatcher``,
    ``transformer/moe/token_dispatcher.py``) for one MoE layer, forward + backward (s): dispatch all-gathers
    every rank's ``tokens`` hidden states over the TP×EP group of ``group`` ranks (each rank then keeps
    those routed to its experts), combine reduce-scatters them back; backward runs the reverse pair. Each
    of the four collectives moves ``(group − 1) · tokens · h`` elements through a rank, taken in BF16
    (combine casts to the router probabilities' dtype, BF16 unless ``moe_router_dtype`` says FP32), at the
    collective rate of the group's span (:func:`link_bw`). Every token reaches every rank whatever its
    top-k: against all-to-all's ``top-k · (group − 1)/group`` copies that is ``group / top-k`` times the
    bytes."""
    return 4 * (group - 1) * tokens * h * 2 / link_bw(gpu, group, c)


def _dedup_exchange_s(
    own_bytes: float,
    ep: int,
    etp: int,
    routing: tuple[str, int, tuple[int, int] | None, int],
    gpu: GpuSpec,
    c: TimeConstants,
) -> float:
    """DeepEP's / HybridEP's four BF16 exchanges of one MoE layer (s). ``own_bytes``: the rank's own tokens ×
    hidden × 8 (dispatch + combine, forward + backward, 2 bytes per element each); ``routing``: (backend,
    top-k, (``moe_router_num_groups``, ``moe_router_group_topk``) or None, the ranks that share NVLink).

    Both kernels send a token once per destination rank holding any of its experts (DeepEP
    ``get_dispatch_layout``'s ``is_token_in_rank``; HybridEP's per-rank routing map), over megatron-core's
    TP×EP group, whose routing map repeats each EP rank's entry for its ``etp`` ranks
    (``MoEFlexTokenDispatcher._initialize_metadata``). Across scale-up domains a token crosses the NIC
    once per remote domain and is forwarded over NVLink there (DeepEP's internode kernels: RDMA to one
    rank of the node, then NVLink forwarding). So a rank's NVLink traffic is its tokens times the other
    ranks they reach (its own copy stays in HBM), and its NIC traffic its tokens times the other domains
    they reach; across domains the slower of the two bounds the time. NVLink runs at
    :data:`~moeplan.model.constants.DEEPEP_NVLINK_EFFICIENCY` (DeepEP) or HybridEP's ``a2a_efficiency``
    of the link, the NIC at the backend's ``a2a_efficiency``."""
    dispatcher, topk, groups, domain = routing
    reached = remote_domains_per_token(topk, ep, groups) * ep / (ep - 1) if ep > 1 else 1.0  # EP ranks, own included
    others = etp * reached - reached / ep  # every ETP rank of each, less the rank's own copy
    nic_eff = c.a2a_efficiency.get(dispatcher, 0.5)
    nvl_eff = DEEPEP_NVLINK_EFFICIENCY if dispatcher == "deepep" else nic_eff
    t_nvlink = own_bytes * others / (nvlink_bytes_per_s(gpu) * nvl_eff)
    group = ep * etp
    if group <= domain:
        return t_nvlink
    remote = slowest_remote_domains(topk, group, domain, groups)
    return max(t_nvlink, own_bytes * remote / (nic_bytes_per_s(gpu) * nic_eff))


def slowest_remote_domains(topk: int, group: int, domain: int, groups: tuple[int, int] | None = None) -> float:
    """Other scale-up domains a token of the EP group's slowest rank reaches: :func:`remote_domains_per_token`
    when the group fills whole domains of ``domain`` ranks; otherwise the group is taken to start at a
    domain boundary (whole domains, then one partial), its experts spread over its ranks in rank order,
    and a rank of the partial domain reaches each other domain with probability ``1 − (1 − share)^k``
    (``share``: that domain's part of the group; the group limit is not applied to partial domains)."""
    if group % domain == 0:
        return remote_domains_per_token(topk, group // domain, groups)
    whole = group // domain
    return whole * (1 - (1 - domain / group) ** topk)


def remote_domains_per_token(topk: int, domains: float, groups: tuple[int, int] | None = None) -> float:
    """Expected number of other scale-up domains (or ranks) a token's ``topk`` experts reach, from the rank
    that reaches the most, the experts spread over ``domains`` places of the EP group in contiguous
    blocks (Megatron places EP ranks, and the experts on them, in rank order), each expert uniform over
    the experts the token may use (drawn with replacement; balanced routing, as
    ``moe_router_force_load_balancing``'s random logits give).

    Without a group limit a place is hit with probability ``1 − (1 − 1/N)^k``. With ``groups`` =
    (``G`` groups, ``g`` selected; megatron-core ``group_limited_topk``: contiguous equal groups, the
    top-k chosen within the selected ones) a place holding the share ``x`` of the selected groups'
    experts is hit with probability ``1 − (1 − x)^k``, averaged over which groups are selected
    (:func:`_place_hit_probabilities`). DeepSeek-V3 (8 groups, 4 selected, top-8) at EP 64 over eight
    8-GPU nodes: each node holds one group, hit with probability 0.5 · (1 − 0.75^8), 3.15 remote
    domains where the unlimited form gives 4.59. A domain count that is not whole takes the unlimited
    form (:func:`slowest_remote_domains` handles a partial domain). Returns 0 for one place or fewer."""
    if domains <= 1:
        return 0.0
    if groups is None or not float(domains).is_integer() or groups[1] >= groups[0]:
        return (domains - 1) * (1 - (1 - 1 / domains) ** topk)
    hits = _place_hit_probabilities(topk, int(domains), groups[0], groups[1])
    return sum(hits) - min(hits)  # the rank whose own place is hit least reaches the most others


@functools.lru_cache(maxsize=256)
def _place_hit_probabilities(topk: int, places: int, total: int, chosen: int) -> tuple[float, ...]:
    """Per place, the probability a token reaches it under group-limited routing (``chosen`` of ``total``
    contiguous groups, then ``topk`` experts uniform over the chosen groups' experts, with replacement).
    A place holds some groups whole (each the same share) and at most two in part; the chosen groups
    among them are counted exactly (hypergeometric over the whole ones, every subset of the partial
    ones). Overlaps are integers in units of 1 / (places · total) (a group is ``places`` units, a place
    ``total``); places with the same overlaps in group order share one computation, so the cost grows
    with the distinct patterns (a handful), not with places × groups."""
    every = math.comb(total, chosen)
    done: dict[tuple[int, tuple[int, ...]], float] = {}
    out = []
    for p in range(places):
        lo, hi = p * total, (p + 1) * total
        overlap = [min(hi, (q + 1) * places) - max(lo, q * places) for q in range(lo // places, (hi - 1) // places + 1)]
        whole = sum(1 for o in overlap if o == places)
        partial = tuple(o for o in overlap if 0 < o < places)
        key = (whole, partial)
        if key not in done:
            done[key] = _hit_probability(topk, whole, partial, (places, total, chosen, every))
        out.append(done[key])
    return tuple(out)


def _hit_probability(topk: int, whole: int, partial: tuple[int, ...], sizes: tuple[int, int, int, int]) -> float:
    """The probability a token reaches a place holding ``whole`` groups whole and the ``partial`` overlaps
    (units of 1 / (places · total)) of others; ``sizes``: (places, total, chosen, C(total, chosen))."""
    places, total, chosen, every = sizes
    rest = total - whole - len(partial)
    prob = 0.0
    for size in range(len(partial) + 1):
        for part in itertools.combinations(partial, size):
            for j in range(min(whole, chosen - size) + 1):
                ways = math.comb(whole, j) * math.comb(rest, chosen - size - j)
                share = Fraction(j * places + sum(part), places * chosen)
                prob += ways / every * (1 - (1 - float(share)) ** topk)
    return prob


def etp_exchange_s(routed_tokens: float, h: int, etp: int, gpu: GpuSpec, c: TimeConstants) -> float:
    """The ETP part of one MoE layer's token exchange, forward + backward (s): the tokens an expert rank
    receives are all-gathered over its ETP group after dispatch and reduce-scattered before combine,
    and the reverse in backward (4 collectives of ``routed_tokens · h`` BF16 elements, each rank
    receiving ``(etp − 1)`` shares). Megatron's dispatcher runs them in ``dispatch_postprocess`` /
    ``combine_preprocess``, on the compute stream inside the experts' computation. 0 at ETP 1."""
    if etp <= 1:
        return 0.0
    return 4 * routed_tokens * h * 2 * (etp - 1) / link_bw(gpu, etp, c)


def pp_time(tokens: float, h: int, tp: int, sp: bool, gpu: GpuSpec, c: TimeConstants, world: int = 10**9) -> float:
    """Send of one microbatch's activations and receive of their gradients at a stage boundary,
    including the fixed latency of the two p2p operations. PP is the outermost rank dimension: every
    boundary stays in one NVLink domain only when the whole ``world`` does, else the slowest crosses
    a NIC."""
    vol = 2 * (tokens / tp if sp else tokens) * h * 2
    return vol / link_bw(gpu, world, c) + 2 * c.p2p_latency_s


def dp_time(
    dense_params: float,
    expert_params: float,
    grad_bytes: float,
    d_dense: int,
    d_exp: int,
    span_dense: int,
    span_exp: int,
    gpu: GpuSpec,
    c: TimeConstants,
    param_bytes: float = 2.0,
) -> float:
    """Gradient reduce-scatter (``grad_bytes`` per parameter) + parameter all-gather (``param_bytes``,
    BF16) of one step, before overlap: ring volume ``n·bytes·(d−1)/d`` per rank over the link the group
    spans (s)."""
    t = 0.0
    for n, d, span in ((dense_params, d_dense, span_dense), (expert_params, d_exp, span_exp)):
        if d > 1:
            vol = n * (grad_bytes + param_bytes) * (d - 1) / d
            t += vol / link_bw(gpu, span, c)
    return t
