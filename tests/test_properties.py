"""Property tests (hypothesis): invariants of the rules and of parameter placement."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from moeplan import count_params, get_model, load_scenario, rank_params, stage_params, validate
from moeplan.rules.sequence import alignment_unit

sizes = st.sampled_from([1, 2, 3, 4, 6, 8, 16, 32, 64])


@settings(max_examples=150, deadline=None, derandomize=True)
@given(
    tp=sizes,
    pp=sizes,
    cp=sizes,
    ep=sizes,
    etp=st.sampled_from([None, 1, 2]),
    n=st.sampled_from([None, 8, 64, 96, 256]),
    seq=st.sampled_from([None, 4096, 4100, 131072]),
    model=st.sampled_from([None, "deepseek-v3", "qwen3-30b-a3b", "qwen3-next-80b", "qwen3-8b"]),
)
def test_validate_never_raises_and_is_deterministic(tp, pp, cp, ep, etp, n, seq, model):
    data = {
        "model": model,
        "system": {"gpu": "h100", "num_gpus": n},
        "training": {"seq_length": seq},
        "layout": {
            "tensor_model_parallel_size": tp,
            "pipeline_model_parallel_size": pp,
            "context_parallel_size": cp,
            "expert_model_parallel_size": ep,
            "expert_tensor_parallel_size": etp,
        },
    }
    a = validate(load_scenario(data))
    b = validate(load_scenario(data))
    assert a.verdict == b.verdict and [f.rule_id for f in a.findings] == [f.rule_id for f in b.findings]
    assert a.verdict in ("valid", "warn", "incomplete", "invalid", "unsupported")
    assert all(f.fix for f in a.errors)  # every error carries a fix


@settings(max_examples=100, deadline=None, derandomize=True)
@given(
    cp=st.sampled_from([1, 2, 4, 8, 16]),
    tp=st.sampled_from([1, 2, 4, 8]),
    sp=st.booleans(),
    k=st.integers(1, 64),
    off=st.integers(0, 7),
)
def test_cp_sp_alignment_exact(cp, tp, sp, k, off):
    unit = alignment_unit(cp, tp, sp and tp > 1)
    seq = k * unit + off
    res = validate(
        load_scenario(
            {
                "training": {"seq_length": seq},
                "layout": {
                    "tensor_model_parallel_size": tp,
                    "context_parallel_size": cp,
                    "sequence_parallel": sp and tp > 1,
                },
            }
        )
    )
    assert ("sequence.cp_sp_alignment" in res.rule_ids("error")) == (seq % unit != 0)


@settings(max_examples=40, deadline=None, derandomize=True)
@given(
    pp=st.sampled_from([1, 2, 4, 8]),
    model=st.sampled_from(["qwen3-30b-a3b", "deepseek-v3", "qwen3-next-80b", "mixtral-8x7b", "gpt-oss-20b"]),
)
def test_stage_params_sum_to_model_total(pp, model):
    """Over all PP stages at TP = EP = 1 (vocabulary unpadded), per-rank parameters add up to the
    model's total plus its MTP block."""
    m = get_model(model)
    layers = m.num_layers
    first = None
    if layers % pp:
        first = layers - (pp - 1) * (layers // pp)
    lay = {"pipeline_model_parallel_size": pp}
    if first is not None and pp > 1:
        lay["num_layers_in_first_pipeline_stage"] = first
    scn = load_scenario({"model": model, "layout": lay})
    stages = stage_params(scn, make_vocab_size_divisible_by=1)
    c = count_params(m)
    # an MTP stage without the embedding holds its own copy of the word embeddings
    copies = sum(1 for s in stages if s.mtp_layers and not s.embedding) * c.by_kind["embedding"]
    assert sum(s.params.total for s in stages) == c.total + c.mtp + copies
    assert sum(len(s.layers) for s in stages) == layers


@settings(max_examples=40, deadline=None, derandomize=True)
@given(ep=st.sampled_from([1, 2, 4, 8, 16, 32]), tp=st.sampled_from([1, 2, 4]))
def test_ep_changes_only_expert_params(ep, tp):
    m = get_model("qwen3-30b-a3b").with_overrides({"num_layers": 2})
    base = rank_params(m, [0, 1], tp=tp, ep=1, etp=1, embedding=True)
    r = rank_params(m, [0, 1], tp=tp, ep=ep, etp=1, embedding=True)
    assert r.dense == base.dense
    assert r.expert * ep == base.expert
