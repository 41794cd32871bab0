"""Independent cross-check: Megatron-LM's closed-form estimate
(``megatron/training/theoretical_memory_usage.py``, transcribed in tests/data/reference/megatron_facts.md §5.1) against
our itemised model on dense models. The closed form is re-derived here from its published terms,
not from our code."""

from __future__ import annotations

import pytest

from moeplan import count_params, estimate_memory, load_scenario


def closed_form_bytes(model, tp, pp, dp, seq, mbs, num_mb) -> float:
    """Weights+optimizer (6 + 12/d bytes per parameter, distributed optimizer) plus activations on
    the first stage with SP and selective recompute: s·b·h·(18 + 4·f/h) per layer, times L layers
    (1F1B holds PP microbatches of L/PP layers, capped by the microbatch count), divided by TP."""
    c = count_params(model)
    params_rank = (c.total - c.by_kind["embedding"] - c.by_kind["output_layer"]) / (tp * pp) + c.by_kind[
        "embedding"
    ] / tp
    static = params_rank * (6 + 12 / dp)
    h, f, L = model.hidden_size, model.ffn_hidden_size, model.num_layers
    act = seq * mbs * h * (18 + 4 * f / h) * L * min(1.0, num_mb / pp) / tp
    return static + act


@pytest.mark.parametrize(
    "name,tp,pp",
    [
        ("meta-llama/Llama-3.1-8B", 2, 1),
        ("meta-llama/Llama-3.1-8B", 4, 2),
        ("Qwen/Qwen3-8B", 2, 2),
        ("Qwen/Qwen3-8B", 1, 1),
    ],
)
def test_closed_form_agrees_on_dense_within_10pct(name, tp, pp):
    n, seq = 16, 4096
    dp = n // (tp * pp)
    scn = load_scenario(
        {
            "model": name,
            "system": {"gpu": "h100", "num_gpus": n},
            "training": {"seq_length": seq, "micro_batch_size": 1, "global_batch_size": 64},
            "layout": {
                "tensor_model_parallel_size": tp,
                "pipeline_model_parallel_size": pp,
                "recompute_granularity": "selective",
                "recompute_modules": ["core_attn"],
            },
            "overheads": {
                "cuda_context_gib": 0,
                "nccl_buffers_gib": 0,
                "workspaces_gib": 0,
                "fragmentation_fraction": 0,
            },
        }
    )
    est = estimate_memory(scn)
    first = est.stages[0]
    ours = (
        first.weights_bytes + first.grads_bytes + first.optimizer_bytes + first.items["activations"]["decoder_layers"]
    )
    ref = closed_form_bytes(scn.model, tp, pp, dp, seq, 1, 64 // dp)
    assert ours == pytest.approx(ref, rel=0.10), (ours / 2**30, ref / 2**30)
