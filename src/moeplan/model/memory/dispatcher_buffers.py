"""Registered communication buffers of the flex token dispatcher's DeepEP and HybridEP backends
(bytes per GPU), sized as the sources size them from their settings.

DeepEP (``deep_ep.Buffer``, the high-throughput kernels): megatron-core's ``fused_a2a.get_buffer``
takes, over ``Buffer.get_dispatch_config(R)`` and ``Buffer.get_combine_config(R)`` for the ETP×EP
group of R ranks, the largest ``Config.get_nvl_buffer_size_hint(hidden_bytes, R)`` and
``get_rdma_buffer_size_hint`` and allocates ``Buffer(group, num_nvl_bytes, num_rdma_bytes)``
(NVLink buffers with cudaMalloc, RDMA ones in the NVSHMEM heap: both outside torch's allocator).
``hidden_bytes`` = hidden × max(element size, 2) (``get_hidden_bytes``: 2 × hidden for BF16 or FP8
inputs). Sources: DeepEP ``csrc/legacy/config.hpp`` (``Config``: the two hints, the RDMA receive
count rounded up to a multiple of the send chunk), ``deep_ep/buffers/legacy.py`` (``num_sms`` 20, the
per-size config tables), ``csrc/kernels/legacy/internode.cu`` (``SourceMeta``: 8 bytes),
``csrc/kernels/legacy/compiled.cuh`` (8 NVLink peers); ``topk_idx_t`` is int64.

HybridEP (``deep_ep.HybridEPBuffer``, DeepEP's ``hybrid-ep`` branch): megatron-core's
``init_hybrid_ep_buffer`` passes the hidden size, the tokens of the first dispatch on this rank as
``max_num_of_tokens_per_rank`` (T) and the local experts (E_l); the buffer splits the ETP×EP group
into NVLink domains of ``NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN`` ranks (R_n, else the ranks it
detects) and N = group / R_n nodes. ``csrc/hybrid_ep/buffer/intranode.cu`` (``use_shared_buffer``
true by default: dispatch reuses the combine buffers) allocates, with M = T·R_n·N tokens: the tokens
M·H·2 bytes (BF16; megatron-core refuses FP8 dispatch), the probabilities M·E_l·R_n·4 and the
dispatch scaling factors M·(H/128)·4; across nodes ``internode_doca.cu`` adds, for dispatch,
T·H·2 + T·E_l·R_n·N·4 + T·(H/128)·4 (the attention side) and T·(N−1)·(H·2 + E_l·R_n·4 + (H/128)·4)
(the inter-node group), and for combine 2·T·(N−1)·(H·2 + E_l·R_n·4) (reduction and group buffers).
Flags and preprocessing scratch (kilobytes) are left out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

from moeplan.catalog.comm_libraries import hybridep_reach_gpus
from moeplan.structure.hybridep_env import hybridep_domain, hybridep_ranks_per_domain

if TYPE_CHECKING:
    from moeplan.inputs.resolved import Scenario

#: DeepEP's default SM count of the high-throughput kernels (``Buffer.num_sms``)
DEEPEP_NUM_SMS = 20
#: DeepEP's NVLink peers per node (``LEGACY_NUM_MAX_NVL_PEERS``)
NVL_PEERS = 8
#: ``kNumMaxTopK`` and ``kNumMaxScales`` of ``Config``'s hints
MAX_TOPK = 128
MAX_SCALES = 128
#: bytes of ``topk_idx_t`` (int64), ``SourceMeta`` (two ints), ``float``, ``int``, ``int4``
TOPK_IDX_BYTES, SOURCE_META_BYTES, FLOAT_BYTES, INT_BYTES, INT4_BYTES = 8, 8, 4, 4, 16

#: ``Buffer.get_dispatch_config`` / ``get_combine_config``: ranks → (NVL send chunk, NVL receive
#: tokens, RDMA send chunk, RDMA receive tokens), from ``deep_ep/buffers/legacy.py``
DEEPEP_DISPATCH = {
    2: (24, 256, 6, 128),
    4: (6, 256, 6, 128),
    8: (6, 256, 6, 128),
    16: (36, 288, 20, 128),
    24: (32, 288, 8, 128),
    32: (32, 288, 8, 128),
    48: (32, 288, 8, 128),
    64: (32, 288, 8, 128),
    96: (20, 480, 12, 128),
    128: (20, 560, 12, 128),
    144: (32, 720, 12, 128),
    160: (28, 720, 12, 128),
}
DEEPEP_COMBINE = {
    2: (10, 256, 6, 128),
    4: (9, 256, 6, 128),
    8: (4, 256, 6, 128),
    16: (4, 288, 12, 128),
    24: (1, 288, 8, 128),
    32: (1, 288, 8, 128),
    48: (1, 288, 8, 128),
    64: (1, 288, 8, 128),
    96: (1, 480, 8, 128),
    128: (1, 560, 8, 128),
    144: (2, 720, 8, 128),
    160: (2, 720, 8, 128),
}


@dataclass(frozen=True)
class DispatcherBuffers:
    """One backend's registered buffers per GPU (bytes): ``nvl_bytes`` (NVLink, within a node or
    NVLink domain) and ``rdma_bytes`` (across nodes; 0 within one)."""

    backend: str
    nvl_bytes: int
    rdma_bytes: int

    @property
    def total_bytes(self) -> int:
        return self.nvl_bytes + self.rdma_bytes


def _align(n: int, to: int) -> int:
    return -(-n // to) * to


def _config(table: dict, ranks: int) -> tuple[int, int, int, int]:
    """The config row for ``ranks``: DeepEP lists only the sizes in the table (others assert), so a
    size it does not list takes the next listed size up (the largest beyond the table)."""
    fit = [r for r in table if r >= ranks]
    return table[min(fit)] if fit else table[max(table)]


def deepep_nvl_bytes(hidden_bytes: int, ranks: int, num_sms: int, nvl_recv_tokens: int) -> int:
    """``Config.get_nvl_buffer_size_hint`` (bytes): per channel (``num_sms / 2``) and NVLink rank, the
    head/tail counters ``(2·R_rdma + 3)`` ints and ``nvl_recv_tokens`` slots of the hidden bytes,
    source meta, 128 int64 top-k indices, 128 float weights and 128 float scales; 128-byte aligned."""
    rdma_ranks, nvl_ranks, channels = max(ranks // NVL_PEERS, 1), min(ranks, NVL_PEERS), num_sms // 2
    slot = hidden_bytes + SOURCE_META_BYTES + MAX_TOPK * (TOPK_IDX_BYTES + FLOAT_BYTES) + MAX_SCALES * FLOAT_BYTES
    n = channels * nvl_ranks * (2 * rdma_ranks + 3) * INT_BYTES + channels * nvl_ranks * nvl_recv_tokens * slot
    return _align(n, 128)


def deepep_rdma_bytes(hidden_bytes: int, ranks: int, num_sms: int, rdma_send: int, rdma_recv: int) -> int:
    """``Config.get_rdma_buffer_size_hint`` (bytes; 0 within 8 ranks): per channel and RDMA rank,
    ``(8·2 + 2)·2`` ints and, doubled (send and receive), ``rdma_recv`` rounded up to a multiple of
    ``rdma_send`` slots of the hidden bytes, source meta, top-k indices, weights, scales and an int4."""
    if ranks <= NVL_PEERS:
        return 0
    rdma_ranks, channels = ranks // NVL_PEERS, num_sms // 2
    recv = _align(rdma_recv, rdma_send)
    slot = (
        hidden_bytes
        + SOURCE_META_BYTES
        + MAX_TOPK * (TOPK_IDX_BYTES + FLOAT_BYTES)
        + MAX_SCALES * FLOAT_BYTES
        + INT4_BYTES
    )
    n = channels * rdma_ranks * (NVL_PEERS * 2 + 2) * 2 * INT_BYTES + channels * rdma_ranks * recv * slot * 2
    return _align(n, 128)


def deepep_buffers(hidden: int, ranks: int, num_sms: int | None = None, element_bytes: int = 2) -> DispatcherBuffers:
    """DeepEP's ``Buffer`` as megatron-core's ``get_buffer`` sizes it: the larger of the dispatch and
    combine configs' NVLink and RDMA hints for ``ranks`` (the ETP×EP group), ``hidden_bytes`` =
    ``hidden × max(element_bytes, 2)``, ``num_sms`` SMs (default 20, DeepEP's ``Buffer.num_sms``)."""
    sms = num_sms or DEEPEP_NUM_SMS
    hb = hidden * max(element_bytes, 2)
    nvl = rdma = 0
    for table in (DEEPEP_DISPATCH, DEEPEP_COMBINE):
        _, nvl_recv, rdma_send, rdma_recv = _config(table, ranks)
        nvl = max(nvl, deepep_nvl_bytes(hb, ranks, sms, nvl_recv))
        rdma = max(rdma, deepep_rdma_bytes(hb, ranks, sms, rdma_send, rdma_recv))
    return DispatcherBuffers("deepep", nvl, rdma)


def hybridep_nvlink_ranks(s: Scenario) -> int:
    """HybridEP's ranks per NVLink domain for ``s``
    (:func:`moeplan.structure.hybridep_env.hybridep_ranks_per_domain`): ``NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN``
    from the scenario's ``environment:`` when HybridEPBuffer runs with it, else the largest divisor of
    EP·ETP within the GPUs a rank reaches over NVLink
    (:func:`moeplan.catalog.comm_libraries.hybridep_reach_gpus`; :data:`NVL_PEERS` without a GPU)."""
    reach = hybridep_reach_gpus(s)
    return cast(int, hybridep_ranks_per_domain(s.environment, s.ep * s.etp, NVL_PEERS if reach is None else reach))


def hybridep_buffers(
    hidden: int, tokens_per_rank: int, local_experts: int, ranks: int, domain_gpus: int
) -> DispatcherBuffers:
    """HybridEP's buffers (module docstring): NVLink M·(H·2 + E_l·R_n·4 + (H/128)·4) with
    M = T·R_n·N, and across N > 1 nodes the RDMA dispatch and combine buffers."""
    t, h, el = tokens_per_rank, hidden, local_experts
    rn = hybridep_domain(ranks, domain_gpus)
    nodes = ranks // rn
    probs, scales = el * rn * FLOAT_BYTES, (h // 128) * FLOAT_BYTES
    nvl = t * rn * nodes * (h * 2 + probs + scales)
    if nodes == 1:
        return DispatcherBuffers("hybridep", nvl, 0)
    dispatch = t * (h * 2 + probs * nodes + scales) + t * (nodes - 1) * (h * 2 + probs + scales)
    combine = 2 * t * (nodes - 1) * (h * 2 + probs)
    return DispatcherBuffers("hybridep", nvl, dispatch + combine)


def flex_tokens_per_rank(tokens: float) -> int:
    """Tokens of one microbatch on one rank entering the dispatcher (the first dispatch sizes
    HybridEP's ``max_num_of_tokens_per_rank``), rounded up to a whole token."""
    return math.ceil(tokens)


__all__ = [
    "DEEPEP_NUM_SMS",
    "NVL_PEERS",
    "DispatcherBuffers",
    "deepep_buffers",
    "deepep_nvl_bytes",
    "deepep_rdma_bytes",
    "flex_tokens_per_rank",
    "hybridep_buffers",
    "hybridep_nvlink_ranks",
]
