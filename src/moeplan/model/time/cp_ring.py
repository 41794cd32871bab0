"""The context-parallel K/V ring of one attention layer, step by step (Transformer Engine
``AttnFuncWithCPAndKVP2P``, ``transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py``).

Forward: every rank holds its two load-balanced sequence chunks (causal), and K and V are
concatenated into one buffer (``torch.cat((k.view(-1), v.view(-1)))``; MLA's K and V have different
head dims, 192 and 128 for DeepSeek-V3, after the up-projection, all heads). At step ``i`` the rank
waits for the K/V of step ``i``, launches the send/recv of step ``i + 1`` and then runs step ``i``'s
attention, so each send/recv overlaps one step's attention; the first step (the rank's own, diagonal
chunk) needs nothing received and the last sends nothing: ``ring − 1`` sends. Each step's attention is
the same work under causal load balancing (``2c²`` query-key pairs for chunks of ``c`` tokens).

Backward: step ``0`` sends K/V, steps ``1 … ring − 2`` send K/V and the accumulated dK/dV together
(one buffer, twice the bytes), the last step sends dK/dV; each waits for its exchange after the step's
attention gradient, so each exchange overlaps one step's backward attention.

All ranks send at once, so a step lasts as long as its slowest hop: a ring whose consecutive members
straddle a node boundary runs at one NIC's speed (one GPU's NIC carries the hop), otherwise at NVLink
speed. Megatron orders ranks tp-cp-ep-dp-pp: CP rank ``j`` sits ``j · stride`` GPUs from the group's
first (``stride`` = TP for p2p; TP · inner group for a2a+p2p's ring over the outer group).
"""

from __future__ import annotations

from dataclasses import dataclass

from moeplan.inputs.system import GpuSpec
from moeplan.model.constants import TimeConstants
from moeplan.model.hardware import nic_bytes_per_s, nvlink_bytes_per_s

BF16_BYTES = 2


@dataclass(frozen=True)
class RingSteps:
    """Per-step terms of one attention layer's K/V ring, one microbatch, forward + backward.

    Attributes:
        steps: ring members (= attention steps per pass).
        step_bytes: bytes of one K/V message (the rank's whole local K and V, bf16).
        cross_node_hops: hops of the ring whose ends sit on different nodes.
        step_link_s: time of one K/V message over the ring's slowest hop (s).
        forward_exposed_s / backward_exposed_s: what the attention steps do not hide (s).
        total_s: the ring's transfer time before overlap, ``3 (steps − 1) · step_link_s`` (s).
    """

    steps: int
    step_bytes: float
    cross_node_hops: int
    step_link_s: float
    forward_exposed_s: float
    backward_exposed_s: float
    total_s: float

    @property
    def exposed_s(self) -> float:
        """Ring time not hidden behind attention, forward + backward (s)."""
        return self.forward_exposed_s + self.backward_exposed_s

    @property
    def hidden_s(self) -> float:
        """Ring time hidden behind attention (s)."""
        return self.total_s - self.exposed_s


def cross_node_hops(ring: int, stride: int, node_gpus: int) -> int:
    """Hops ``j → j+1 (mod ring)`` of a ring whose member ``j`` is GPU ``j · stride`` (from a
    node-aligned first GPU) that join two different nodes of ``node_gpus`` GPUs each."""
    if ring <= 1:
        return 0
    node = [(j * stride) // node_gpus for j in range(ring)]
    return sum(1 for j in range(ring) if node[j] != node[(j + 1) % ring])


def ring_steps(
    tokens: float,
    kv_width: float,
    ring: int,
    stride: int,
    gpu: GpuSpec,
    c: TimeConstants,
    attention_s: float,
) -> RingSteps:
    """The ring of one attention layer over ``ring`` ranks, step by step.

    ``tokens``: the K/V tokens one rank holds (its sequence share; S·a/CP under a2a+p2p with inner
    group ``a``); ``kv_width``: K + V elements per token over the heads the rank holds (all heads /
    TP, or / TP·a after a2a+p2p's all-to-all); ``stride``: GPUs between consecutive ring members;
    ``attention_s``: the rank's attention of the layer, forward + backward (backward twice the
    forward), split evenly over the ``ring`` steps. Link speeds: the catalog's NVLink and NIC figures
    times the NCCL efficiencies (:class:`TimeConstants`).

    Per-step rule: forward ``(ring − 1) · max(0, t − a_f)``; backward
    ``2 · max(0, t − a_b) + (ring − 2) · max(0, 2t − a_b)`` with ``t`` one message's link time and
    ``a_f`` / ``a_b`` one step's forward / backward attention.
    """
    step_bytes = tokens * kv_width * BF16_BYTES
    if ring <= 1:
        return RingSteps(max(ring, 1), step_bytes, 0, 0.0, 0.0, 0.0, 0.0)
    hops = cross_node_hops(ring, stride, gpu.scaleup_domain_gpus)
    bw = nic_bytes_per_s(gpu) * c.nic_efficiency if hops else nvlink_bytes_per_s(gpu) * c.nvlink_efficiency
    t = step_bytes / bw
    a_f, a_b = attention_s / 3 / ring, 2 * attention_s / 3 / ring
    fwd = (ring - 1) * max(0.0, t - a_f)
    bwd = 2 * max(0.0, t - a_b) + (ring - 2) * max(0.0, 2 * t - a_b)
    return RingSteps(ring, step_bytes, hops, t, fwd, bwd, 3 * (ring - 1) * t)
