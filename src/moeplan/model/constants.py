"""Constants of the step-time model, with provenance, read from ``catalog/data/time_constants.json``
(written by ``benchmarks/calibrate_time.py``): those a published measurement of their term alone sets
(:data:`COMPONENT_SOURCES`: link and exchange efficiencies, grouped-GEMM occupancy, the overlap share)
and those fitted because no such measurement exists (element-wise traffic, host launch and MoE sync,
pipeline p2p cost, exposed data-parallel traffic, one factor per container release).

No constant is fitted per model or per run: they are shared across every model and GPU, and one
software-efficiency factor per Megatron Bridge container release divides the whole step time (kernels,
communication and overlap improve together; the same layout gains 20–25 % between releases). A scenario without a release uses the newest.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from importlib import resources
from typing import TYPE_CHECKING

from moeplan.inputs.versions import find_release

if TYPE_CHECKING:
    from moeplan.inputs.resolved import Scenario


#: the constants set from a published measurement of their term alone (never fitted; the defaults of
#: :class:`TimeConstants`), with the measurement; ``tests/test_components.py`` checks each against it
COMPONENT_SOURCES: dict[str, str] = {
    "nvlink_efficiency": "0.82 = 370 / 450 GB/s: NCCL all-gather / reduce-scatter / all-to-all bus bandwidth on "
    "8×H100 NVLink 4 (NVIDIA/nccl-tests#212, NVIDIA maintainer)",
    "nic_efficiency": "0.95 = 47.5 / 50 GB/s: 46–49 GB/s per NDR 400G NIC across nodes (NVIDIA/nccl-tests#290, #267)",
    "a2a_efficiency.alltoall": "0.82: NCCL all-to-all reaches the same 370 GB/s bus bandwidth as the other "
    "collectives on NVLink 4 (nccl-tests#212)",
    "a2a_efficiency.deepep": "0.9: DeepEP's internode normal kernels on H800 with a CX7 400G NIC per GPU, BF16 "
    "combine 57 GB/s at EP 32 and 50 at EP 64 as its benchmark counts them (a token once per node reached, its "
    "own included; top-8 within the 4 best of one expert group per node; DeepEP docs/legacy.md, "
    "tests/legacy/test_internode.py): 0.9 of the NIC, a token sent once per other node it reaches, gives 60.0 "
    "and 51.4 (tests/test_components.py); EP 16's 43 is bound by NVLink forwarding on H800 "
    "(DEEPEP_NVLINK_EFFICIENCY), not the NIC",
    "a2a_efficiency.hybridep": "0.75: HybridEP's BF16 dispatch, kernel time only, on GB200 NVL72 at 8–32 "
    "ranks, 32 SMs: 764.0, 707.0, 666.0, 642.2 GB/s as its benchmark counts them (a token once per rank it "
    "reaches, the rank's own copy included; DeepEP hybrid-ep docs/README_Hybrid-EP.md, tests/test_hybrid_ep.py); "
    "less the own copy, which stays in HBM ((EP − 1)/EP of it crosses NVLink), 668, 663, 638, 622 GB/s, "
    "0.74–0.69 of 900. Over H100's IB at 16–64 ranks the same 0.75 gives its counted rates within 14 % "
    "(tests/test_components.py). Kernel time because megatron-core ≥ 0.16 calls "
    "dispatch_with_permute / combine_with_unpermute (transformer/moe/fused_a2a.py), which write the "
    "permuted layout in the kernel: the Torch API's copy into an output tensor (its 515 GB/s) is not "
    "paid, and the permutation's traffic is the MoE layer's element-wise term",
    "grouped_gemm_half_tokens": "600 tokens per expert: the shape of Transformer Engine's default grouped GEMM on "
    "H100, multi-stream cuBLAS (nvte_multi_tensor_gemm takes the CUTLASS kernel only with "
    "NVTE_USE_CUTLASS_GROUPED_GEMM=1, common/gemm/cublaslt_gemm.cu; neither Megatron-LM nor Megatron Bridge sets "
    "it): BF16, (8 experts, 4096, 768, 2048) 627.9 TFLOP/s and (16, 2048, 768, 2048) 553.9 (TransformerEngine "
    "PR #2045, TE 2.7, CUDA 12.9), a ratio of 0.882; t / (t + 600) gives 0.887 (the ratio alone gives 633, and "
    "±1 % on the ratio moves it by about ±60). The level sits 10–11 % above those figures (the dense ceiling "
    "0.803 × 989 TFLOP/s is that of large GEMMs; N 768, K 2048 is a small one). The opt-in CUTLASS kernel of "
    "the same PR loses only 2 % over the same step (650.6 → 636.9)",
    "p2p_latency_s": "10 µs: NCCL send/recv's fixed cost, about 3 µs over NVLink (nccl-tests, NVIDIA/nccl#1487; "
    "NVIDIA/nccl-tests#333 on 8×B200) and tens of µs across a slower network (nccl-tests#214)",
    "overlap_hidden_fraction": "1.0: Megatron's overlap hides an exchange up to the compute it is scheduled against "
    "(combined 1F1B pairs, TP comm overlap rings); when free, the fit on the published runs goes to 1.0",
}


#: what an exchange hidden behind compute still costs, as a share of the time it overlaps: the compute
#: running beside a collective slows by 18.9 % on average (up to 40 %), measured on A100, H100, MI250 and
#: MI210 with GPT and Llama training kernels against the same compute alone (Lee et al., "Characterizing
#: Compute-Communication Overlap in GPU-Accelerated Distributed Deep Learning", arXiv 2507.03114). The
#: collective's kernels hold SMs and HBM bandwidth while they run; NCCL's ring channels and DeepEP's or
#: HybridEP's dispatch kernels are SM-resident for the whole transfer. Applied to Megatron's DP
#: gradient/parameter overlap and to EP A2A overlap; assumed the same on Blackwell (not measured there)
OVERLAP_COMPUTE_SLOWDOWN = 0.189

#: DeepEP's NVLink rate, as a fraction of the link: its intranode normal kernels on 8×H800 (200 GB/s NVLink
#: per direction in the catalog) move 158 GB/s of BF16 combine as its benchmark counts (a token once per
#: destination rank, the rank's own copy included; DeepEP docs/legacy.md, tests/legacy/test_intranode.py
#: ``recv_x.numel() * 2``). The 1/8 that stays on the rank does not cross NVLink: 158 · 7/8 = 138 GB/s,
#: 0.69 of the link. Its NIC rate is ``a2a_efficiency["deepep"]``.
DEEPEP_NVLINK_EFFICIENCY = 0.69


@dataclass(frozen=True)
class TimeConstants:
    """Shared efficiency constants (dimensionless unless the name says a unit).

    Attributes:
        grouped_gemm_half_tokens: tokens per local expert at which a grouped GEMM reaches half of its
            dense ceiling (few tokens per expert run far below peak).
        memory_bound_bytes_per_activation_byte: HBM traffic of element-wise work (norms,
            activations, residuals) per byte of saved activations of a dense layer, forward + backward.
        moe_memory_bound_bytes_per_activation_byte: the same in a MoE layer, whose routed path adds
            permutation, the dispatcher's buffer copies and unpermutation.
        nvlink_efficiency / nic_efficiency: achieved fraction of NVLink / NIC bandwidth by NCCL.
        a2a_efficiency: achieved fraction for the EP token exchange, per dispatcher backend.
        launch_overhead_s_per_layer: CPU launch cost of one MoE layer's forward + backward of one
            microbatch in eager mode (removed by CUDA graphs in proportion to what they capture); a
            dense layer costs ``model.time.launch.DENSE_LAUNCH_SHARE`` of it.
        moe_sync_s_per_layer: host synchronisation of a dropless MoE layer (token counts copied to
            the host to size the expert GEMMs, forward + backward), absent with static shapes
            (full-iteration graphs, drop-and-pad).
        p2p_latency_s: fixed cost of one pipeline send or receive (launch, synchronisation, NIC).
        overlap_hidden_fraction: share of TP communication hidden by TP comm overlap, and of a
            layer's compute that can hide the EP exchange of the microbatch it is paired with (set to
            1.0, :data:`COMPONENT_SOURCES`).
        release_factor: per container release, divides every part of the step time.
    """

    grouped_gemm_half_tokens: float = 600.0
    memory_bound_bytes_per_activation_byte: float = 3.0
    moe_memory_bound_bytes_per_activation_byte: float = 3.0
    nvlink_efficiency: float = 0.82
    nic_efficiency: float = 0.95
    a2a_efficiency: dict[str, float] = field(
        default_factory=lambda: {"alltoall": 0.82, "deepep": 0.9, "hybridep": 0.75}
    )
    launch_overhead_s_per_layer: float = 2e-4
    moe_sync_s_per_layer: float = 2e-4
    p2p_latency_s: float = 1e-5
    overlap_hidden_fraction: float = 1.0
    release_factor: dict[str, float] = field(default_factory=lambda: {"26.06": 1.0})
    newest_release: str = "26.06"
    provenance: dict = field(default_factory=dict)

    def release(self, name: str | None) -> tuple[str, float]:
        """(release used, its factor). Missing or unreadable → the newest fitted release (a scenario
        without a release is taken to run the newest measured software); a fitted release → itself; another ``NN.NN[.NN]`` → the
        newest fitted release not newer than it, or the oldest fitted one when it predates them all
        (software is assumed at least as good as the last release measured before it, and an older
        container than any measured is not credited with newer software)."""
        if name and name in self.release_factor:
            return name, self.release_factor[name]
        key = release_key(name) if name else ()
        if key and self.release_factor:
            ordered = sorted(self.release_factor, key=release_key)
            before = [r for r in ordered if release_key(r) <= key]
            pick = before[-1] if before else ordered[0]
            return pick, self.release_factor[pick]
        return self.newest_release, self.release_factor.get(self.newest_release, 1.0)


def release_key(r: str) -> tuple[int, ...]:
    """``'26.04.01'`` → ``(26, 4, 1)``: container releases in time order (non-numeric parts ignored)."""
    return tuple(int(x) for x in str(r).split(".") if x.isdigit())


@functools.lru_cache(maxsize=1)
def load_constants() -> TimeConstants:
    """The packaged fitted constants (defaults when the data file is absent)."""
    path = resources.files("moeplan.catalog") / "data" / "time_constants.json"
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return TimeConstants()
    return TimeConstants(**data)


def release_of(s: Scenario) -> str | None:
    """The container release (``26.04.01``) named in ``versions.container`` (``nvcr.io/nvidia/nemo:26.04.01``
    works too); None when not given or not readable as exactly one ``NN.NN[.NN]``
    (:func:`moeplan.inputs.versions.find_release`)."""
    return find_release(s.input.versions.container)
