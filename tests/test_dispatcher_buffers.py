"""DeepEP's and HybridEP's registered buffers, sized as their sources size them, against hand
derivations of the source formulas (DeepEP csrc/legacy/config.hpp and deep_ep/buffers/legacy.py;
HybridEP csrc/hybrid_ep/buffer/intranode.cu and internode_doca.cu), and their term in the breakdown."""

from __future__ import annotations

import copy

from moeplan.model.memory import estimate_memory
from moeplan.model.memory.dispatcher_buffers import deepep_buffers, hybridep_buffers
from moeplan.resolve.load import load_scenario
from moeplan.structure.hybridep_env import hybridep_domain

# DeepSeek-V3: hidden 7168, BF16 → hidden_bytes = 7168 · 2 = 14336; one NVLink slot of a token:
# 14336 + 8 (SourceMeta) + 128·8 (int64 top-k) + 128·4 (weights) + 128·4 (scales) = 16392 bytes
HIDDEN = 7168


def test_deepep_intranode_eight_ranks():
    # 20 SMs → 10 channels; 8 ranks: R_nvl 8, R_rdma 1; dispatch and combine both receive 256 tokens
    # 10·8·(2·1+3)·4 = 1600; 10·8·256·16392 = 335,708,160; sum 335,709,760 → aligned to 128: 335,709,824
    b = deepep_buffers(HIDDEN, 8)
    assert (b.nvl_bytes, b.rdma_bytes) == (335_709_824, 0)


def test_deepep_internode_thirty_two_ranks():
    # 32 ranks: R_nvl 8, R_rdma 4; NVLink receive 288 (dispatch and combine configs):
    # 10·8·(2·4+3)·4 = 3520 + 10·8·288·16392 = 377,671,680 → 377,675,200 → aligned 377,675,264
    # RDMA: receive 128 rounded up to the send chunk 8 → 128; slot 16392 + 16 (int4) = 16408, doubled:
    # 10·4·(8·2+2)·2·4 = 5760 + 10·4·128·16408·2 = 168,017,920 → 168,023,680 (already aligned)
    b = deepep_buffers(HIDDEN, 32)
    assert (b.nvl_bytes, b.rdma_bytes) == (377_675_264, 168_023_680)


def test_deepep_more_sms_more_channels():
    # 24 SMs → 12 channels: 12·8·5·4 = 1920 + 12·8·256·16392 = 402,849,792 → 402,851,712 (aligned)
    assert deepep_buffers(HIDDEN, 8, num_sms=24).nvl_bytes == 402_851_712


def test_hybridep_one_nvlink_domain():
    # GB300 NVL72, EP 32: R_n 32, one node; T 4096 tokens, 8 local experts:
    # M = 4096·32 = 131,072 tokens × (7168·2 + 8·32·4 + 56·4 = 15,584 bytes) = 2,042,626,048
    b = hybridep_buffers(HIDDEN, 4096, 8, 32, 72)
    assert (b.nvl_bytes, b.rdma_bytes) == (2_042_626_048, 0)


def test_hybridep_across_nodes():
    # H100 nodes of 8, EP 32: R_n 8, N 4; per token 7168·2 + 8·8·4 + 56·4 = 14,816 bytes
    # NVLink: 4096·8·4 = 131,072 × 14,816 = 1,941,962,752
    # RDMA dispatch: 4096·(14336 + 256·4 + 224) = 63,832,064 + 4096·3·14,816 = 182,059,008
    # RDMA combine: 2·4096·3·(14336 + 256) = 358,612,992; RDMA total 604,504,064
    b = hybridep_buffers(HIDDEN, 4096, 8, 32, 8)
    assert (b.nvl_bytes, b.rdma_bytes) == (1_941_962_752, 604_504_064)


def test_hybridep_domain_divides_the_group():
    assert hybridep_domain(32, 72) == 32
    assert hybridep_domain(128, 72) == 64  # HybridEPBuffer asserts the group divides into domains
    assert hybridep_domain(64, 8) == 8


def _flex(backend: str, gpu: str, overheads: dict | None = None) -> dict:
    data = {
        "model": "deepseek-ai/DeepSeek-V3",
        "system": {"gpu": gpu, "num_gpus": 256},
        "training": {"seq_length": 4096, "micro_batch_size": 1, "global_batch_size": 256, "precision": "bf16"},
        "layout": {
            "pipeline_model_parallel_size": 8,
            "expert_model_parallel_size": 32,
            "moe_token_dispatcher_type": "flex",
            "moe_flex_dispatcher_backend": backend,
            "pipeline_model_parallel_layout": "Et*4|(t*4|)*14tmL",
        },
    }
    if overheads:
        data["overheads"] = overheads
    return copy.deepcopy(data)


def test_breakdown_carries_the_dispatcher_term():
    deep = estimate_memory(load_scenario(_flex("deepep", "h100"))).peak_stage.items["other"]
    assert deep["deepep_buffers"] == 377_675_264 + 168_023_680
    hyb = estimate_memory(load_scenario(_flex("hybridep", "h100"))).peak_stage.items["other"]
    assert hyb["hybridep_buffers"] == 1_941_962_752 + 604_504_064


def test_stated_overhead_wins_over_the_source_sizing():
    other = estimate_memory(load_scenario(_flex("deepep", "h100", {"deepep_buffers_gib": 1.5}))).peak_stage.items
    assert other["other"]["deepep_buffers"] == 1.5 * 2**30


def test_allgather_dispatcher_keeps_the_gathered_tokens_in_the_global_buffer():
    """megatron-core's all-gather dispatcher gathers every rank's hidden states over the TP×EP group into the
    global memory buffer, which keeps its size: Qwen3-30B-A3B (hidden 2,048) at 4,096 tokens per rank over
    EP 64 holds 64 · 4,096 · 2,048 · 2 bytes = 1 GiB (by hand); the all-to-all dispatcher holds none."""
    layout = {"expert_model_parallel_size": 64, "moe_token_dispatcher_type": "allgather"}
    sc = {"model": "Qwen/Qwen3-30B-A3B", "system": {"gpu": "gb200", "num_gpus": 64}, "layout": layout}
    sc["training"] = {"seq_length": 4096, "micro_batch_size": 1, "global_batch_size": 64}
    other = estimate_memory(load_scenario(sc)).stages[0].items["other"]
    assert other["allgather_dispatch_buffer"] == 64 * 4096 * 2048 * 2
    sc["layout"] = {**layout, "moe_token_dispatcher_type": "alltoall"}
    assert "allgather_dispatch_buffer" not in estimate_memory(load_scenario(sc)).stages[0].items["other"]
