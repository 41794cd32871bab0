"""The planner applies a request's recipe fills once, never re-matched per candidate.

Regression: in a DeepSeek-V3 MXFP8 search on GB300 with ``recipe_defaults: mbridge-perf``, every
candidate used to be resolved on its own, so the candidates labelled ``TP1 PP1 CP1 EP64 ETP1`` matched
the 64-GPU recipe row ``deepseek_v3/64gpu_gb300_fp8mx_fsdp`` and were estimated as Megatron-FSDP
(``use_megatron_fsdp: true``, ``optim_grads_params``) under a 3D label: #5 and #6 of
``moeplan plan`` on 64 GPUs (``--top 10``), ranked among the evaluated layouts on 128-512 GPUs, while
the 256-GPU recipe rows' knobs (full-iteration graphs, their VPP and pipeline layout) got TP1 PP2 EP32
(the published layout) and TP1 PP4 EP64 rejected by the rules.
"""

from __future__ import annotations

import pytest

from moeplan.plan import plan
from moeplan.plan.space import PLANNER_KEYS, Parallel

REQUEST = {
    "recipe_defaults": "mbridge-perf",
    "model": "deepseek-ai/DeepSeek-V3",
    "system": {"gpu": "gb300", "num_gpus": 256},
    "training": {"seq_length": 4096, "micro_batch_size": 1, "global_batch_size": 4096, "precision": "mxfp8"},
}


def _request(num_gpus: int, **layout) -> dict:
    return {**REQUEST, "system": {"gpu": "gb300", "num_gpus": num_gpus}, "layout": layout}


def _published_layout(run_id: str) -> dict:
    from moeplan.catalog.perf_recipes import published_runs

    return next(r["layout"] for r in published_runs() if r["id"] == run_id)


def _count_row_matches(monkeypatch) -> list:
    import moeplan.catalog.perf_recipes as catalog
    import moeplan.resolve.recipe_fills as fills

    calls: list = []
    real = catalog.match_perf_recipe

    def counting(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(catalog, "match_perf_recipe", counting)
    monkeypatch.setattr(fills, "match_perf_recipe", counting)  # the name the fills call
    return calls


@pytest.mark.parametrize("num_gpus", [64, 256])
def test_no_candidate_is_estimated_as_fsdp_unless_labelled_so(num_gpus, monkeypatch):
    calls = _count_row_matches(monkeypatch)
    res = plan(_request(num_gpus), top=20)
    cands = res.search.candidates
    assert cands
    # the published run at this size is evaluated as benchmarked, with its own row (plan
    # prints it beside its pick); no candidate matches one
    pub = res.baseline.get("published")
    mine = _published_layout(pub["id"]) if pub is not None else None
    ours = [c for c in calls if mine is None or any(c[3].get(k) != v for k, v in mine.items())]
    assert ours == []  # the layout is free: no recipe row, and none matched per candidate
    assert res.search.recipe is not None and res.search.recipe.row is None
    out = res.to_dict()["candidates"]
    for c, d in zip(cands, out + [None] * (len(cands) - len(out)), strict=True):
        lay = c.scenario.layout
        # the label is read from the scenario the estimates were computed for
        assert c.parallel == Parallel.of(c.scenario)
        assert c.parallel.fsdp == bool(lay.use_megatron_fsdp)
        # a text model's search is 3D only: nothing may be FSDP, labelled or not
        assert not lay.use_megatron_fsdp and lay.data_parallel_sharding_strategy is None
        assert c.scenario.recipe.row is None
        assert not (c.scenario.recipe.filled_keys() & PLANNER_KEYS)
        if d is not None:
            assert d["label"] == Parallel.of(c.scenario).label() and "FSDP" not in d["label"]
    # the request's helper fills still reach every candidate
    assert all(c.scenario.layout.fp8_param_gather and c.scenario.layout.grad_reduce_in_fp32 is False for c in cands)
    # TP1 PP1 CP1 EP64 is evaluated as the 3D layout its label says (on 64 GPUs it fits and ranks)
    if num_gpus == 64:
        ep64 = [c for c in cands if (c.parallel.tp, c.parallel.pp, c.parallel.cp, c.parallel.ep) == (1, 1, 1, 64)]
        assert ep64 and not any(c.scenario.layout.use_megatron_fsdp for c in ep64)


def _recompute_of(s) -> str:
    """The recompute a resolved scenario runs, in the ladder's words."""
    lay = s.layout
    if lay.recompute_granularity is None:
        rec = "none"
    elif lay.recompute_granularity == "full":
        rec = "full"
    else:
        rec = "selective " + ",".join(lay.recompute_modules if lay.recompute_modules is not None else ["core_attn"])
    if lay.optimizer_cpu_offload:
        rec += f" + optimizer offload {lay.optimizer_offload_fraction:g}"
    return rec


def test_the_recompute_label_says_what_was_estimated():
    """``_deepseek_v3_common`` sets selective recompute; a candidate of the ``none`` rung used to take it
    (selective core_attn) while labelled ``recompute none``. The rung the planner picked is what runs."""
    res = plan(_request(256), top=5)
    assert res.search.candidates
    assert any(c.recompute == "none" for c in res.search.candidates)
    for c in res.search.candidates:
        assert c.recompute == _recompute_of(c.scenario)
        knobs = {"dispatcher", "ep_overlap", "graphs", "cp_comm"}
        assert set(c.knobs) == knobs


def test_a_stated_layout_takes_its_row_once_but_not_its_layout_defining_keys(monkeypatch):
    """The request states TP1 PP1 CP1 EP64 on 64 GPUs: its recipe row (the FSDP one) is matched once,
    for the request; its precision-neutral knobs reach every candidate, but the family stays the
    planner's (3D for a text model), and no candidate is estimated as FSDP."""
    calls = _count_row_matches(monkeypatch)
    sizes = {
        "tensor_model_parallel_size": 1,
        "pipeline_model_parallel_size": 1,
        "context_parallel_size": 1,
        "expert_model_parallel_size": 64,
    }
    res = plan(_request(64, **sizes), top=5)
    assert len(calls) == 1
    rec = res.search.recipe
    assert rec.row.id == "deepseek_v3/64gpu_gb300_fp8mx_fsdp"
    assert "use_megatron_fsdp" not in rec.filled_keys() and "fine_grained_activation_offloading" in rec.filled_keys()
    assert res.search.candidates
    for c in res.search.candidates:
        assert not c.parallel.fsdp and not c.scenario.layout.use_megatron_fsdp
        assert c.scenario.layout.fine_grained_activation_offloading


def test_stating_fsdp_plans_fsdp_and_labels_it():
    res = plan(_request(64, use_megatron_fsdp=True, expert_model_parallel_size=64), top=3)
    assert res.search.candidates
    for c in res.search.candidates:
        assert c.parallel.fsdp and c.scenario.layout.use_megatron_fsdp
        assert c.parallel.label().startswith("FSDP ")


def test_the_sweep_predicts_candidates_as_the_plan_estimated_them(tmp_path):
    """``moeplan sweep`` re-resolves each candidate: with the request's record, not the candidate's own
    row (TP1 PP1 CP1 EP64 on 64 GPUs would match the FSDP row again; its sizes are held so that the sweep
    is made of it)."""
    from moeplan.plan import describe
    from moeplan.plan.sweep import write_sweep

    sizes = {
        "tensor_model_parallel_size": 1,
        "pipeline_model_parallel_size": 1,
        "context_parallel_size": 1,
        "expert_model_parallel_size": 64,
    }
    man = write_sweep(_request(64, **sizes), tmp_path / "sw", top=6, mbs_variants=False, hold=tuple(sizes))
    entries = {e["label"]: e for e in man["entries"] if e["kind"] == "candidate"}
    assert entries and all(label.startswith("TP1 PP1 CP1 EP64 ") for label in entries)
    res = plan(_request(64, **sizes), top=7)
    for c in res.candidates:
        e = entries.get(describe(c))
        if e is not None:
            assert e["predicted"]["tokens_per_s_per_gpu"] == pytest.approx(c.tokens_per_s_per_gpu, rel=1e-9)
            assert e["predicted"]["peak_gib"] == pytest.approx(c.peak_gib, rel=1e-9)


def test_a_baselines_held_search_fills_its_candidates_as_the_request():
    # The rule of thumb's layout (TP1 PP1 CP1 EP16) must be filled as the request's own candidates are: had
    # its search held CP too, every core size would be held, it would match 26.06's Qwen3-30B B300 config
    # and take its FP8 attention, which the main search's candidates (no row: CP is free in the request)
    # never get, and it would show 31,280 tok/s/GPU, faster than #1 (30,360), unranked. Filled as the
    # request, it is the main search's #2 and #1 is at least as fast
    res = plan(
        {
            "recipe_defaults": "mbridge-perf",
            "model": "Qwen/Qwen3-30B-A3B",
            "system": {"gpu": "b300", "num_gpus": 16},
            "training": {"seq_length": 4096, "micro_batch_size": 8, "global_batch_size": 512, "precision": "mxfp8"},
            "layout": {
                "tensor_model_parallel_size": 1,
                "pipeline_model_parallel_size": 1,
                "expert_model_parallel_size": 16,
            },
            "versions": {"container": "26.06"},
        },
        top=5,
    )
    rot = res.baseline["rule_of_thumb"]
    assert rot["candidate"]["rank"] is not None
    assert rot["search_gain_pct"] >= 0
    assert all(not c.scenario.layout.fp8_dot_product_attention for c in res.search.candidates)
