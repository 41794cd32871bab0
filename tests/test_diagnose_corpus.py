"""Golden tests on excerpts of real logs and OOM messages posted in public issue threads
(tests/data/diagnose, sources and edits in SOURCES.md). Expected values are read off the files by hand;
tolerance: exact (times and sizes are parsed, not computed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from moeplan.diagnose.oom import parse_oom
from moeplan.io.run_logs import parse_log

DATA = Path(__file__).parent / "data" / "diagnose"
GIB, MIB, KIB = 2**30, 2**20, 2**10


def _log(name):
    return parse_log((DATA / name).read_text(encoding="utf-8"))


@pytest.mark.parametrize(
    ("name", "times"),
    [
        ("log_epfllm_iter122_slow.txt", {122: 86545.2, 123: 87871.6, 124: 89474.8, 125: 89075.2}),
        ("log_gpt2_v100_after5_memory.txt", {5: 16491.5, 10: 1993.9}),
        ("log_mixtral8x7b_h100_rank1_mem_iter2.txt", {2: 5630.1, 3: 5410.6}),
        ("log_bridge_pr841_wrapped_iter10.txt", {10: 13212.7, 20: 14260.3}),
        ("log_megatron_deepspeed_gradnorm_nan.txt", {5426: 4247.9, 5427: 4225.8, 5428: 4229.2}),
        ("log_megatron_pr5662_rank0_mem_iter20.txt", {20: 744.0}),
        ("log_bert_nccl_stuck_iter10.txt", {10: 356.2}),
    ],
)
def test_iteration_times(name, times):
    st = _log(name)
    assert {i: v["iteration_time_ms"] for i, v in st.iterations.items()} == times


def test_excerpt_in_steady_state_skips_no_warmup():
    # 86545.2 is not above 1.1 x median(89474.8, 89075.2) = 98202.5 -> nothing skipped;
    # median of the four = (87871.6 + 89075.2) / 2
    s = _log("log_epfllm_iter122_slow.txt").summary()
    assert s["warmup_skipped"] == 0 and s["iteration_time_ms"]["median"] == pytest.approx(88473.4)


def test_memory_reports_all_formats():
    assert _log("log_gpt2_v100_after5_memory.txt").memory_mb == {  # no [Rank] prefix (2020 format)
        "allocated": 10250.5693359375,
        "max_allocated": 12606.06201171875,
        "reserved": 17482.0,
        "max_reserved": 17482.0,
    }
    assert _log("log_mixtral8x7b_h100_rank1_mem_iter2.txt").memory_reports == [(1, 54250.98583984375)]
    assert _log("log_megatron_pr5662_rank0_mem_iter20.txt").memory_mb["max_allocated"] == 5670.39
    # hard-wrapped at ~85 columns in the post ("max alloca" / "ted:"), rejoined
    st = _log("log_bridge_pr841_wrapped_iter10.txt")
    assert st.memory_mb["max_allocated"] == 12712.43603515625 and st.unreadable_lines == 0
    assert st.iterations[10]["loss"] == 4.474437 and st.iterations[20]["skipped"] == 0.0


def test_bridge_throughput_line_belongs_to_the_record_after_it():
    """Megatron Bridge prints "Step Time : 14.26s GPU utilization: 58.2TFLOP/s/GPU" just before the
    interval's iteration record: 14.26 s is iteration 20's 14,260.3 ms (the excerpt starts at iteration 10,
    whose line is not in it; the last line, 16.85 s, belongs to a record the excerpt cuts off)."""
    st = _log("log_bridge_pr841_wrapped_iter10.txt")
    assert "tflops_per_gpu" not in st.iterations[10]
    assert st.iterations[20]["tflops_per_gpu"] == 58.2
    assert st.summary()["tflops_per_gpu"]["n"] == 1


@pytest.mark.parametrize(
    ("step_line", "want"),
    [
        ("Step Time : 2.50s GPU utilization: 612.4MODEL_TFLOP/s/GPU", 612.4),  # the wording since November 2025
        ("Step Time : 2.50s GPU utilization: 612.4TFLOP/s/GPU", 612.4),
        ("Step Time : 2.60s GPU utilization: 612.4TFLOP/s/GPU", None),  # another interval's: 2.60 s is not 2,504.9 ms
    ],
)
def test_bridge_throughput_line_needs_the_record_time(step_line, want):
    record = " iteration       30/     100 | elapsed time per iteration (ms): 2504.9 | lm loss: 2.1E+00 |"
    st = parse_log(step_line + "\n" + record + "\n")
    assert st.iterations[30].get("tflops_per_gpu") == want


def test_nan_grad_norm_and_partial_line():
    st = _log("log_megatron_deepspeed_gradnorm_nan.txt")
    assert st.unreadable_lines == 1  # the excerpt starts mid-line ("d norm: nan | ...")
    assert all(v["grad_norm"] != v["grad_norm"] for v in st.iterations.values())  # nan kept as nan
    assert "grad_norm" not in st.summary()  # nothing but NaN: no statistic


def test_skipped_iterations_and_banner():
    s = _log("log_gpt2_v100_after5_memory.txt").summary()
    # Megatron resets the counter every log interval: 5 at iteration 5 + 5 at iteration 10 (the loss
    # scale halves five times between them, 2^28 -> 2^23)
    assert s["skipped_iterations"] == 10
    env = _log("log_megatron_args_issue511.txt").environment
    assert env == {
        "world_size": 1,
        "data_parallel_size": 1,
        "tensor_model_parallel_size": 1,
        "pipeline_model_parallel_size": 1,
    }


# (file, requested, total, free, allocated, reserved-but-unallocated, process in use, GPU, fragmentation)
OOMS = [
    (
        "oom_megatron_vocab_parallel_ce_old.txt",
        int(9.33 * GIB),
        int(10.76 * GIB),
        int(4.48 * GIB),
        int(5.17 * GIB),
        int(5.28 * GIB) - int(5.17 * GIB),
        None,
        0,
        False,
    ),
    (
        "oom_megatron_gpt2_v100_old.txt",
        786 * MIB,
        int(31.74 * GIB),
        int(577.12 * MIB),
        int(28.82 * GIB),
        int(29.97 * GIB) - int(28.82 * GIB),
        None,
        0,
        True,
    ),
    (
        "oom_llava_v100_gpu3_old.txt",
        270 * MIB,
        int(31.74 * GIB),
        int(97.38 * MIB),
        int(31.21 * GIB),
        int(31.23 * GIB) - int(31.21 * GIB),
        None,
        3,
        False,
    ),
    (
        "oom_pytorch_cached_variant_old.txt",
        1024 * MIB,
        int(15.90 * GIB),
        int(991.56 * MIB),
        int(14.25 * GIB),
        607 * KIB,
        None,
        0,
        False,
    ),
    (
        "oom_msswift_glm5_moe_h200_new.txt",
        48 * MIB,
        int(139.81 * GIB),
        int(22.44 * MIB),
        int(138.20 * GIB),
        int(40.42 * MIB),
        int(139.78 * GIB),
        1,
        False,
    ),
    (
        "oom_msswift_gemma3_private_pools_new.txt",
        int(2.63 * GIB),
        int(79.11 * GIB),
        int(2.61 * GIB),
        int(48.15 * GIB),
        int(3.49 * GIB),
        0,
        7,
        True,
    ),
    (
        "oom_trtllm_mixtral_process_has_new.txt",
        int(1.5 * GIB),
        int(79.33 * GIB),
        int(367.81 * MIB),
        int(77.73 * GIB),
        int(768.35 * MIB),
        int(78.96 * GIB),
        0,
        False,
    ),
    (
        "oom_sglang_qwen3next_moe_h20_new.txt",
        2 * GIB,
        int(95.08 * GIB),
        int(1.27 * GIB),
        int(92.83 * GIB),
        int(5.54 * MIB),
        int(93.27 * GIB),
        0,
        False,
    ),
]


@pytest.mark.parametrize("case", OOMS, ids=[c[0] for c in OOMS])
def test_oom_corpus(case):
    name, req, total, free, alloc, unalloc, in_use, gpu, frag = case
    r = parse_oom((DATA / name).read_text(encoding="utf-8"))
    assert (r.requested_bytes, r.total_bytes, r.free_bytes, r.allocated_bytes) == (req, total, free, alloc)
    assert (r.reserved_unallocated_bytes, r.process_in_use_bytes, r.gpu_index) == (unalloc, in_use, gpu)
    assert r.fragmentation is frag


@pytest.mark.parametrize(
    ("name", "site"),
    [
        # the innermost frame with a named site: post_language_model_processing's code line calls
        # mpu.vocab_parallel_cross_entropy (Megatron-LM issue 92)
        ("oom_megatron_vocab_parallel_ce_old.txt", "loss"),
        # the innermost frame is Transformer Engine's GroupedLinear.__init__: the weights being allocated
        ("oom_msswift_glm5_moe_h200_new.txt", "weights"),
        # a user script's frames (memtestcase.py) name no site; the excerpts without a traceback neither
        ("oom_pytorch_cached_variant_old.txt", None),
        ("oom_sglang_qwen3next_moe_h20_new.txt", None),
    ],
)
def test_oom_site_from_the_traceback(name, site):
    rep = parse_oom((DATA / name).read_text(encoding="utf-8"))
    assert rep.site == site
    if site is not None:
        assert rep.fixes[0].startswith("it ran out")


def _traceback(*frames: tuple[str, str, str]) -> str:
    lines = ["Traceback (most recent call last):"]
    for path, func, code in frames:
        lines += [f'  File "{path}", line 10, in {func}', f"    {code}"]
    return (
        "\n".join(lines)
        + "\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.10 GiB of which 1.00 GiB is free. Of the allocated memory 77.00 GiB is allocated by PyTorch, and 10.00 MiB is reserved by PyTorch but unallocated.\n"
    )


def test_oom_in_an_inference_engine_keeps_only_its_own_fix():
    """A vLLM worker's OOM: the training fixes (recompute, CP, EP) do not apply, so only the engine's is given."""
    text = _traceback(
        ("/usr/lib/python3/site-packages/vllm/worker/model_runner.py", "execute_model", "out = self.model(x)"),
        ("/usr/lib/python3/site-packages/torch/nn/modules/module.py", "_call_impl", "return forward_call(*a)"),
    )
    rep = parse_oom(text)
    assert rep.site == "inference" and rep.fragmentation is False
    assert len(rep.fixes) == 1 and "inference engine" in rep.fixes[0]


@pytest.mark.parametrize(
    ("frames", "site"),
    [
        ((("/m/megatron/core/optimizer/distrib_optimizer.py", "step", "self.optimizer.step()"),), "optimizer"),
        ((("/m/transformer_engine/pytorch/attention/dot_product_attention.py", "forward", "out = f(q)"),), "attention"),
        ((("/m/megatron/core/transformer/moe/token_dispatcher.py", "dispatch", "x = a2a(x)"),), "moe"),
        # the innermost frame decides: attention inside a MoE model's layer
        (
            (
                ("/m/megatron/core/transformer/moe/moe_layer.py", "forward", "y = self.experts(x)"),
                ("/m/megatron/core/transformer/dot_product_attention.py", "forward", "s = q @ k"),
            ),
            "attention",
        ),
    ],
)
def test_oom_site_by_frame(frames, site):
    assert parse_oom(_traceback(*frames)).site == site


@pytest.mark.parametrize(
    ("path", "site"),
    [
        # a user's home named adam and a virtual environment named after vLLM are not sites
        ("/home/adam/Megatron-LM/megatron/core/transformer/moe/experts.py", "moe"),
        ("/opt/venvs/vllm-rl/lib/python3.12/site-packages/megatron/core/transformer/moe/experts.py", "moe"),
        ("/opt/venvs/train/lib/python3.12/site-packages/vllm/worker/model_runner.py", "inference"),
    ],
)
def test_oom_site_reads_the_package_path_not_the_directories_above_it(path, site):
    assert parse_oom(_traceback((path, "forward", "y = self.fc(x)"))).site == site


def test_oom_in_the_optimizers_constructor_is_the_optimizer_not_the_weights():
    frame = ("/usr/lib/python3/site-packages/megatron/core/optimizer/distrib_optimizer.py", "__init__", "self.x = y")
    assert parse_oom(_traceback(frame)).site == "optimizer"
