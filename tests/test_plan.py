"""Planner: search space arithmetic (hand-derived), every candidate legal and fitting, determinism,
fixed keys held, the CP choice coming from the search (properties), long-context feasibility,
``fit`` and ``recipes``, and the CLI contract."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from moeplan import estimate_memory, load_scenario, validate
from moeplan.cli.app import app
from moeplan.plan import plan, rule_of_thumb_cp
from moeplan.plan.fit import fit_layout
from moeplan.plan.space import Parallel, parallel_candidates, recompute_ladder
from moeplan.plan.starting_points import list_recipes
from moeplan.structure.stages import pipeline_split
from moeplan.units import GIB_BYTES

runner = CliRunner()
QWEN30 = "Qwen/Qwen3-30B-A3B"


def _req(model=QWEN30, gpu="h100", n=16, seq=32768, gbs=32, layout=None, **training):
    return {
        "model": model,
        "system": {"gpu": gpu, "num_gpus": n},
        "training": {"seq_length": seq, "global_batch_size": gbs, **training},
        "layout": dict(layout or {}),
    }


# --- space arithmetic --------------------------------------------------------------------------


def test_pipeline_split_even_and_accounting():
    assert pipeline_split(48, 4, 1) == {}  # 48 / 4 = 12
    assert pipeline_split(48, 4, 3) == {}  # 48 / 12 = 4
    # Qwen3-235B: 94 layers over PP 4: 95 % 4 = 3, 96 % 4 = 0 → count embedding and loss as layers
    assert pipeline_split(94, 4, 1) == {
        "account_for_embedding_in_pipeline_split": True,
        "account_for_loss_in_pipeline_split": True,
    }
    # 63 layers over PP 8: 64 % 8 = 0 → embedding only
    assert pipeline_split(63, 8, 1) == {"account_for_embedding_in_pipeline_split": True}
    assert pipeline_split(3, 2, 2) is None  # 4 virtual stages, 3 layers


def test_pipeline_split_weighs_the_output_stage_like_megatron_bridge_recipes():
    from moeplan import get_model
    from moeplan.structure.stages import output_stage_layers

    m = get_model("deepseek-ai/DeepSeek-V3")
    tail = output_stage_layers(m, 4096, 1, 1)
    # logits 6·h·V = 5.56 GFLOP/token against an average layer of 244.25/61 = 4.00; the MTP block adds
    # a MoE layer (4.3), its projection (0.62) and its own logits (5.56)
    assert tail == pytest.approx(3.93, abs=0.01)
    # the layouts set_deepseek_v3_pipeline_model_parallel_layout uses for PP·VPP = 16 and 32
    assert pipeline_split(61, 16, 1, 1, tail) == {"pipeline_model_parallel_layout": "E,t*4|" + "t*4|" * 14 + "t,m,L"}
    assert pipeline_split(61, 32, 1, 1, tail) == {"pipeline_model_parallel_layout": "E,t|" + "t*2|" * 30 + "m,L"}


def test_pipeline_split_explicit_layout_for_deepseek_v3():
    # 61 layers over 8 stages: neither 61, 62 nor 63 divides by 8. 61 = 8·7 + 5: the 5 extra layers
    # go to the middle stages first (3, 4, then 2, 5, then 1): [7, 8, 8, 8, 8, 8, 7, 7]
    got = pipeline_split(61, 8, 1, mtp_layers=1)
    assert got == {"pipeline_model_parallel_layout": "E,t*7|t*8|t*8|t*8|t*8|t*8|t*7|t*7,m,L"}
    data = _req("deepseek-ai/DeepSeek-V3", n=256, seq=4096, gbs=512)
    data["layout"] = {"pipeline_model_parallel_size": 8, "expert_model_parallel_size": 32, **got}
    res = validate(load_scenario(data))
    assert not [f for f in res.errors if f.rule_id.startswith("pipeline.")]


def test_rule_of_thumb_cp():
    # seq/4096 rounded to the nearest power of two in log space
    assert rule_of_thumb_cp(4096) == 1
    assert rule_of_thumb_cp(131072) == 32
    assert rule_of_thumb_cp(262144) == 64
    assert rule_of_thumb_cp(5000) == 1  # 1.22 → 2^0
    assert rule_of_thumb_cp(6000) == 2  # 1.46 → 2^1 (log2 1.46 = 0.55)
    assert rule_of_thumb_cp(1024) == 1


def test_parallel_candidates_fold_into_the_world():
    from moeplan import get_gpu, get_model

    m, g = get_model(QWEN30), get_gpu("h100")
    got = list(parallel_candidates(m, g, 16, 32768, {}))
    assert got, "some layout folds"
    for p in got:
        assert 16 % (p.tp * p.cp * p.pp) == 0 and 16 % (p.ep * p.etp * p.pp) == 0
        assert p.tp <= 8 and 128 % p.ep == 0
        assert 32768 // p.cp >= 2048
    # TP 2, CP 1, PP 1: EP ∈ {1, 2, 4, 8, 16} with ETP 1, and EP ∈ {1, 2, 4, 8} with ETP 2
    sub = [(p.ep, p.etp) for p in got if (p.tp, p.cp, p.pp) == (2, 1, 1)]
    assert sub == [(1, 1), (1, 2), (2, 1), (2, 2), (4, 1), (4, 2), (8, 1), (8, 2), (16, 1)]
    fixed = list(parallel_candidates(m, g, 16, 32768, {"tensor_model_parallel_size": 4}))
    assert {p.tp for p in fixed} == {4}


def test_recompute_ladder_order():
    from moeplan import get_model

    names = [n for n, _ in recompute_ladder(get_model("deepseek-ai/DeepSeek-V3"))]
    assert names == [
        "none",
        "selective moe_act",
        "selective moe_act,layernorm",
        "selective moe_act,layernorm,mla_up_proj",
        "selective moe_act,layernorm,mla_up_proj,moe",
        "full",
        "full + optimizer offload 0.5",
        "full + optimizer offload 1",
    ]


def test_parallel_label_and_keys():
    p = Parallel(2, 4, 8, 16, 1, 2)
    assert p.label() == "TP2 PP4 VPP2 CP8 EP16 ETP1"
    assert p.dp(1024) == 16 and p.edp(1024) == 16
    assert p.keys()["sequence_parallel"] is True


# --- the search ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def qwen_plan():
    return plan(_req(n=16, seq=32768, gbs=32), top=5)


def test_every_candidate_is_legal_fits_and_ranked(qwen_plan):
    cands = qwen_plan.search.candidates
    assert len(qwen_plan.candidates) == 5
    tps = [c.tokens_per_s_per_gpu for c in cands]
    # best first, except that the simplest layout within 2 % of the fastest leads (tie rule)
    assert tps[1:] == sorted(tps[1:], reverse=True)
    assert tps[0] >= 0.98 * max(tps)
    if tps[0] < max(tps):
        assert cands[0].parallel.cp <= cands[1].parallel.cp and qwen_plan.search.tie_note
    for c in cands[:25]:
        s = load_scenario(c.data)
        assert not validate(s).errors, c.parallel.label()
        mem = estimate_memory(s)
        assert mem.peak_bytes <= 0.95 * mem.capacity_bytes + 1
        assert mem.peak_bytes / GIB_BYTES == pytest.approx(c.peak_gib)
        mbs = c.data["training"]["micro_batch_size"]
        assert 32 % (mbs * s.dp) == 0
        # the label matches the layout that is checked
        lay = c.data["layout"]
        assert (lay["tensor_model_parallel_size"], lay["context_parallel_size"]) == (c.parallel.tp, c.parallel.cp)


def test_plan_is_deterministic(qwen_plan):
    again = plan(_req(n=16, seq=32768, gbs=32), top=5)
    assert [c.summary() for c in again.candidates] == [c.summary() for c in qwen_plan.candidates]


def test_json_contract(qwen_plan):
    d = qwen_plan.to_dict()
    assert {"candidates", "baseline", "rejected", "request"} <= set(d)
    c = d["candidates"][0]
    assert {"layout", "memory", "throughput", "explanation"} <= set(c)
    th = c["throughput"]
    assert {"step_time_s", "tokens_per_s_per_gpu", "model_tflops_per_gpu", "mfu", "breakdown_s"} <= set(th)
    assert sum(th["breakdown_s"].values()) == pytest.approx(th["step_time_s"])
    assert 0 < th["mfu"] < 1
    assert c["explanation"] and any(line.startswith("CP ") for line in c["explanation"])
    assert d["baseline"]["rule_of_thumb"]["context_parallel_size"] == 8  # 32768 / 4096
    json.dumps(d)  # serialisable


def test_fixed_keys_are_held():
    res = plan(
        _req(
            n=16,
            seq=32768,
            gbs=32,
            layout={
                "tensor_model_parallel_size": 2,
                "recompute_granularity": "full",
                "recompute_method": "uniform",
                "recompute_num_layers": 1,
            },
        ),
        top=3,
    )
    assert res.candidates
    for c in res.search.candidates:
        assert c.parallel.tp == 2 and c.data["layout"]["tensor_model_parallel_size"] == 2
        assert c.data["layout"]["recompute_granularity"] == "full"
        assert c.recompute.startswith("full (given)")


def test_nothing_fits_gives_empty_plan_with_reasons():
    res = plan(_req("deepseek-ai/DeepSeek-V3", n=8, seq=4096, gbs=64), top=3)
    assert res.candidates == []
    reasons = {r["reason"] for r in res.to_dict()["rejected"]}
    assert "does-not-fit" in reasons


def _chosen_cp(
    gpu_overrides: dict, fixed: dict, seq: int = 131072, model: str = "deepseek-ai/DeepSeek-V3", n: int = 256
):
    data = _req(model, n=n, seq=seq, gbs=64, layout=fixed)
    data["system"]["gpu_overrides"] = gpu_overrides
    res = plan(data, top=1)
    return res.candidates[0].parallel.cp if res.candidates else None


_HELD = {
    "tensor_model_parallel_size": 8,
    "pipeline_model_parallel_size": 8,
    "expert_model_parallel_size": 32,
    "recompute_granularity": "full",
    "recompute_method": "uniform",
    "recompute_num_layers": 1,
}


@settings(max_examples=4, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(slow=st.sampled_from([0.5, 0.25, 0.1]), seq=st.sampled_from([32768, 131072]))
def test_costlier_cp_links_never_raise_the_chosen_cp(slow, seq):
    """With TP, PP, EP and recompute held, slower NVLink and NIC make the CP exchange costlier (the
    other exchanges do not depend on CP), so the chosen CP must not rise. (Left free, slower links
    also make TP and the recomputed EP exchange costlier, which can legitimately move CP the other way.)"""
    fast = {"scaleup_unidir_gb_per_s": 450.0, "nic_gbit_per_s_per_gpu": 400.0}
    slower = {k: v * slow for k, v in fast.items()}
    a, b = _chosen_cp(fast, _HELD, seq), _chosen_cp(slower, _HELD, seq)
    assert a is not None and b is not None
    assert b <= a


def test_costlier_cp_links_lower_the_chosen_cp_somewhere():
    fast = {"scaleup_unidir_gb_per_s": 450.0, "nic_gbit_per_s_per_gpu": 400.0}
    slower = {k: v * 0.1 for k, v in fast.items()}
    assert _chosen_cp(slower, _HELD) < _chosen_cp(fast, _HELD)


def _best(gpu_overrides: dict, seq: int, model: str, n: int, layout: dict | None = None):
    data = _req(model, n=n, seq=seq, gbs=64, layout=layout or {})
    data["system"]["gpu_overrides"] = gpu_overrides
    res = plan(data, top=1)
    return res.candidates[0] if res.candidates else None


@settings(max_examples=4, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(
    case=st.sampled_from(
        [
            ("Qwen/Qwen3-235B-A22B", "gb200", 128, 131072),
            ("deepseek-ai/DeepSeek-V3", "h100", 256, 32768),
        ]
    ),
    extra=st.sampled_from([1.25, 1.5, 2.0]),
)
def test_more_hbm_raises_the_chosen_cp_only_among_near_ties(case, extra):
    """CP is a memory lever, but not only one: with TE graphs the captured attention masks shrink with CP,
    and with more HBM other sizes can shrink too, so a larger CP may come out on top. It may do so only
    among layouts the model cannot tell apart (Qwen3-235B at 128K on 128 GB200: CP 8 at 620 tok/s/GPU,
    with 1.25x HBM CP 16 at 636, +2.6 %); a CP raised for a clearly faster layout would be a search bug.
    The comparison is at the larger HBM: more memory also speeds up the smaller CP (less recompute; Qwen3-30B
    at 128K on 32 H100: 2,278 → 2,417 tok/s/GPU with 1.25x), which is not a CP effect."""
    model, gpu, n, seq = case
    from moeplan import get_gpu

    hbm = get_gpu(gpu).usable_hbm_gib
    a = _best({"usable_hbm_gib": hbm}, seq, model, n)
    b = _best({"usable_hbm_gib": hbm * extra}, seq, model, n)
    assert a is not None and b is not None
    if b.parallel.cp > a.parallel.cp:
        held = _best({"usable_hbm_gib": hbm * extra}, seq, model, n, {"context_parallel_size": a.parallel.cp})
        assert held is not None and b.tokens_per_s_per_gpu <= 1.05 * held.tokens_per_s_per_gpu


@pytest.mark.xfail(
    strict=True,
    reason="search miss: refining only the 16 best layouts by un-refined throughput, Qwen3-30B-A3B at 128K on 32 "
    "H100 plans TP4 CP2 EP8 at about 2,317 tokens/s/GPU while the same search with CP held at 2 finds TP8 CP2 EP16 "
    "at about 2,392 (+3.2 %); the exact search finds it (plan(exact=True), test below) but plan keeps it off: "
    "on the published runs it lowers the agreement with the published layouts from 99 to 79 of 113, and so "
    "does an exact first place alone, at 2.9x the CPU time of a DeepSeek-V3 plan at 128K on 1,024 H100 "
    "(moeplan.plan.search.search, exact)",
)
def test_the_free_search_finds_the_best_cp_of_qwen3_30b_at_128k_on_32_h100():
    from moeplan import get_gpu

    hbm = {"usable_hbm_gib": get_gpu("h100").usable_hbm_gib}
    free = _best(hbm, 131072, QWEN30, 32)
    held = _best(hbm, 131072, QWEN30, 32, {"context_parallel_size": 2})
    assert free is not None and held is not None
    assert free.tokens_per_s_per_gpu >= held.tokens_per_s_per_gpu / 1.02


def test_the_exact_plan_finds_the_best_cp_of_qwen3_30b_at_128k_on_32_h100():
    """plan(exact=True) refines every layout whose throughput bound can still place it first
    (moeplan.plan.phases.refine_within_bound): TP8 CP2 EP16 refines to about 2,392 tokens/s/GPU (DeepEP,
    EP overlap) from below the 16 best at the default knobs, so the free plan finds what the plan with CP
    held at 2 finds."""
    from moeplan import get_gpu

    def best(layout: dict) -> float:
        data = _req(QWEN30, n=32, seq=131072, gbs=64, layout=layout)
        data["system"]["gpu_overrides"] = {"usable_hbm_gib": get_gpu("h100").usable_hbm_gib}
        res = plan(data, top=1, exact=True)
        assert res.candidates
        return res.candidates[0].tokens_per_s_per_gpu

    assert best({}) >= best({"context_parallel_size": 2}) / 1.02


@pytest.mark.slow
def test_the_exact_search_finds_the_best_cp_of_qwen3_30b_at_128k_on_32_h100():
    """The exact pass refines every layout whose throughput bound can still beat the best found
    (moeplan.plan.phases.refine_within_bound), so the free search finds the CP 2 layout the held search finds."""
    from moeplan import get_gpu
    from moeplan.plan.search import search

    def best(layout: dict) -> float:
        data = _req(QWEN30, n=32, seq=131072, gbs=64, layout=layout)
        data["system"]["gpu_overrides"] = {"usable_hbm_gib": get_gpu("h100").usable_hbm_gib}
        res = search(data, exact=True)
        assert res.candidates
        return res.candidates[0].tokens_per_s_per_gpu

    assert best({}) >= best({"context_parallel_size": 2}) / 1.02


def test_more_hbm_never_lowers_the_best_prediction_beyond_the_tie_margin():
    """A search flaw this once caught: DeepSeek-V3 at 32K on 256 H100 planned 768 tok/s/GPU with 1.5× HBM but
    631 with 2× (more memory let layouts that refine worse fill the refinement set); phase one's best are now
    probed over VPP before the refinement set is chosen (moeplan.plan.phases._probe_vpp): 816 → 850."""
    a = _best({"usable_hbm_gib": 79.65 * 1.5}, 32768, "deepseek-ai/DeepSeek-V3", 256)
    b = _best({"usable_hbm_gib": 79.65 * 2.0}, 32768, "deepseek-ai/DeepSeek-V3", 256)
    assert a is not None and b is not None
    assert b.tokens_per_s_per_gpu >= a.tokens_per_s_per_gpu / 1.02


# --- long context: feasible where the guidance says so, every candidate legal ---------------------


@pytest.mark.parametrize(
    ("model", "gpu", "n", "seq", "precision"),
    [
        ("deepseek-ai/DeepSeek-V3", "h100", 256, 4096, "fp8-blockwise"),
        ("deepseek-ai/DeepSeek-V3", "h100", 256, 16384, "fp8-blockwise"),
        ("deepseek-ai/DeepSeek-V3", "h100", 256, 32768, "fp8-blockwise"),
        ("deepseek-ai/DeepSeek-V3", "h100", 256, 65536, "fp8-blockwise"),
        ("deepseek-ai/DeepSeek-V3", "h100", 256, 131072, "fp8-blockwise"),
        ("deepseek-ai/DeepSeek-V3", "h100", 512, 262144, "fp8-blockwise"),
        ("Qwen/Qwen3-235B-A22B", "gb200", 128, 4096, "bf16"),
        ("Qwen/Qwen3-235B-A22B", "gb200", 128, 32768, "bf16"),
        ("Qwen/Qwen3-235B-A22B", "gb200", 128, 131072, "bf16"),
        ("Qwen/Qwen3-235B-A22B", "gb200", 128, 131072, "mxfp8"),
        ("Qwen/Qwen3-235B-A22B", "gb200", 256, 262144, "bf16"),
    ],
)
def test_long_context_plans_are_feasible_and_legal(model, gpu, n, seq, precision):
    """The guidance's long-context families (skill_recipes.yaml) run these sizes: DeepSeek-V3 on 256
    H100 up to 128K and on 512 H100 at 256K; Qwen3-235B-A22B on 128 GB200 at 128K (BF16 or MXFP8)."""
    res = plan(
        {
            "model": model,
            "system": {"gpu": gpu, "num_gpus": n},
            "training": {"seq_length": seq, "precision": precision},
        },
        top=5,
    )
    assert res.candidates, res.to_dict()["rejected"]
    for c in res.candidates:
        assert not validate(load_scenario(c.data)).errors
        assert c.data["training"]["seq_length"] == seq


# --- fit -----------------------------------------------------------------------------------------


def test_fit_proposes_legal_fitting_changes_cheapest_first():
    data = _req(
        n=32,
        seq=65536,
        gbs=64,
        micro_batch_size=1,
        layout={
            "tensor_model_parallel_size": 2,
            "context_parallel_size": 2,
            "expert_model_parallel_size": 8,
            "sequence_parallel": True,
        },
    )
    out = fit_layout(data)
    assert not out["fits_already"] and out["fixes"]
    costs = [f["step_time_change_pct"] for f in out["fixes"]]
    assert costs == sorted(costs)
    for f in out["fixes"]:
        s = load_scenario(f["scenario"])
        assert not validate(s).errors
        assert estimate_memory(s).peak_bytes / GIB_BYTES <= out["limit_gib"] + 1e-6
        assert f["saved_gib"] == pytest.approx(out["peak_gib"] - f["peak_gib"])
    for f in out["not_enough"]:
        assert f["peak_gib"] > out["limit_gib"]


def test_fit_doubles_cp_with_its_outer_hierarchical_level():
    """With cp_comm_type a2a+p2p, hierarchical_context_parallel_sizes must multiply to CP (megatron-core
    asserts it): fit's CP × 2 doubles the ring across the outer groups ([8, 4] → [8, 8] at CP 64) rather than
    leaving sizes that multiply to 32."""
    from moeplan.plan.changes import parallel_changes

    s = load_scenario("tests/golden/scenarios/dsv3_h100_128k_hcp.yaml")
    assert s.layout.hierarchical_context_parallel_sizes == [8, 4]
    (cp,) = [c for c in parallel_changes(s) if "context_parallel_size" in c.edits["layout"]]
    assert cp.edits["layout"] == {"context_parallel_size": 64, "hierarchical_context_parallel_sizes": [8, 8]}


def test_fit_already_fitting():
    out = fit_layout(
        _req(
            n=16,
            seq=4096,
            gbs=64,
            micro_batch_size=1,
            layout={"expert_model_parallel_size": 8, "pipeline_model_parallel_size": 2},
        )
    )
    assert out["fits_already"]


# --- recipes -------------------------------------------------------------------------------------


def test_recipes_checked_and_shorthand_found():
    rows = list_recipes("guidance")
    by_id = {r["id"]: r for r in rows}
    # DeepSeek-V3 PP8 with 61 layers needs a pipeline layout; CPU offload needs the precision-aware optimizer
    fam = by_id["lc-family-dsv3-h100-128k"]["check"]["rule_ids"]
    assert "pipeline.num_layers_divisible_by_pp" in fam
    assert "offload.optimizer_requires_precision_aware_optimizer" in fam
    pub = list_recipes("published", "qwen3-30b-a3b")
    assert pub and all(r["scenario"]["model"] == QWEN30 for r in pub)
    assert any(r["check"]["verdict"] != "invalid" and r.get("throughput") for r in pub)


# --- CLI -----------------------------------------------------------------------------------------


def _run(args):
    return runner.invoke(app, args)


def test_cli_plan_json_and_table(tmp_path):
    args = ["plan", "--model", QWEN30, "--gpu", "h100", "--num-gpus", "16", "--seq-length", "32768", "--gbs", "32"]
    r = _run(args + ["--json", "--top", "3"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert len(d["candidates"]) == 3 and d["request"]["global_batch_size"] == 32
    r = _run(args + ["--report", str(tmp_path / "r.html")])
    assert r.exit_code == 0, r.output
    assert "why #1" in r.output and "rule of thumb" in r.output
    html = (tmp_path / "r.html").read_text()
    assert html.count("data:image/png;base64,") == 4  # memory, step breakdown, CP, recompute


def test_cli_plan_bad_input_and_nothing_fits():
    r = _run(
        ["plan", "--model", QWEN30, "--gpu", "h100", "--num-gpus", "16", "--seq-length", "4096", "--objective", "speed"]
    )
    assert r.exit_code == 2 and "--objective" in r.output
    r = _run(["plan", "--model", QWEN30, "--gpu", "h100", "--seq-length", "4096"])
    assert r.exit_code == 2 and "num_gpus" in r.output
    r = _run(["plan", "--model", "deepseek-ai/DeepSeek-V3", "--gpu", "h100", "--num-gpus", "8", "--seq-length", "4096"])
    assert r.exit_code == 1
    r = _run(
        [
            "plan",
            "--model",
            QWEN30,
            "--gpu",
            "h100",
            "--num-gpus",
            "16",
            "--seq-length",
            "4096",
            "--gbs",
            "64",
            "--tokens-per-step",
            "4096",
        ]
    )
    assert r.exit_code == 2


def test_cli_tokens_per_step_sets_gbs():
    r = _run(
        [
            "plan",
            "--model",
            QWEN30,
            "--gpu",
            "h100",
            "--num-gpus",
            "16",
            "--seq-length",
            "8192",
            "--tokens-per-step",
            "262144",
            "--json",
            "--top",
            "1",
        ]
    )
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["request"]["global_batch_size"] == 32  # 262144 / 8192


def test_cli_fit_and_recipes(tmp_path):
    scn = tmp_path / "s.yaml"
    scn.write_text(
        "model: Qwen/Qwen3-30B-A3B\nsystem: {gpu: h100, num_gpus: 32}\n"
        "training: {seq_length: 65536, global_batch_size: 64, micro_batch_size: 1}\n"
        "layout: {tensor_model_parallel_size: 2, context_parallel_size: 2, expert_model_parallel_size: 8, sequence_parallel: true}\n"
    )
    r = _run(["fit", str(scn)])
    assert r.exit_code == 0 and "least step-time cost first" in r.output
    r = _run(["fit", str(scn), "--json"])
    assert json.loads(r.output)["fixes"]
    r = _run(["recipes", "--kind", "guidance", "--write", str(tmp_path / "rec")])
    assert r.exit_code == 0
    assert (tmp_path / "rec" / "lc-family-dsv3-h100-128k.yaml").exists()
    r = _run(["recipes", "--kind", "nope"])
    assert r.exit_code == 2


def test_plan_searches_mbs_2_up_to_32k_and_reports_counts():
    res = plan(_req(n=32, seq=32768, gbs=128), top=5)
    mbs = {c.data["training"]["micro_batch_size"] for c in res.search.candidates}
    assert mbs == {1, 2}
    d = res.to_dict()
    rejected = sum(r["count"] for r in d["rejected"] if r["reason"] != "dominated") + sum(
        r["count"] for r in d["rejected"] if r["reason"] == "dominated"
    )
    # every layout considered either fits (before refinement) or is tallied with a reason; refinement
    # variants may add rejections of their own, so the tally is at least the difference
    assert rejected >= d["considered_layouts"] - d["fitting_layouts"]


def test_plan_says_which_rule_blocks_everything():
    # recompute_method belongs to full recompute only (a full granularity alone would be completed)
    res = plan(
        _req(n=16, seq=4096, gbs=64, layout={"recompute_granularity": "selective", "recompute_method": "uniform"}),
        top=1,
    )
    assert not res.candidates
    assert "recompute.granularity_fields" in res.notes[0]


def test_cli_recipes_write_published_with_slashes(tmp_path):
    r = runner.invoke(
        app, ["recipes", "--kind", "published", "--model", "qwen3-30b-a3b", "--write", str(tmp_path / "w")]
    )
    assert r.exit_code == 0, r.output
    files = list((tmp_path / "w").glob("*.yaml"))
    assert files and all("__" in f.name for f in files)


def test_cli_tokens_per_step_below_one_sequence():
    r = runner.invoke(
        app, ["plan", "--model", QWEN30, "--gpu", "h100", "-n", "16", "-s", "8192", "--tokens-per-step", "4096"]
    )
    assert r.exit_code == 2 and "--tokens-per-step" in r.output


def test_dispatcher_line_flags_disagreement_with_nvl72_guidance():
    """On NVL72 a winner that is not HybridEP carries the guidance's 'HybridEP first' caveat; a HybridEP
    winner, or an 8-GPU NVLink domain (HGX), never does. HybridEP's efficiency is set both ways so each
    branch is exercised whatever the packaged fit says."""
    import dataclasses

    from moeplan.model.constants import load_constants
    from moeplan.plan.explain import explain_winner

    base = load_constants()
    req = {"seq_length": 4096, "global_batch_size": 256, "precision": "bf16"}
    seen = set()
    for gpu in ("gb200", "h100"):
        for a2a, hyb in ((0.9, 0.15), (0.15, 0.9)):
            c = dataclasses.replace(
                base, a2a_efficiency={**base.a2a_efficiency, "alltoall": a2a, "deepep": a2a, "hybridep": hyb}
            )
            res = plan(
                {
                    "model": "Qwen/Qwen3-30B-A3B",
                    "system": {"gpu": gpu, "num_gpus": 16},
                    "training": req,
                    "layout": {"expert_model_parallel_size": 8},
                },
                top=3,
                constants=c,
            )
            line = next(x for x in explain_winner(res.search) if x.startswith("dispatcher"))
            chosen = res.candidates[0].knobs.get("dispatcher")
            seen.add((gpu, chosen == "hybridep"))
            assert ("HybridEP first on NVL72" in line) == (gpu == "gb200" and chosen != "hybridep"), line
    assert {("gb200", True), ("gb200", False)} <= seen  # both branches on NVL72


def test_fit_applies_the_uneven_split_before_looking_for_memory():
    # DeepSeek-V3's 61 layers do not divide by PP 8: fit applies the check's uneven split (6 / 7 on the
    # first / last stage, 8 on each of the 6 middle ones: 6 + 48 + 7 = 61) and then finds memory fixes
    # (a 4 GiB headroom, 5 % of the usable HBM: with the default limit, which keeps the ±band free, no
    # single change or pair is enough on 64 GPUs and fit re-plans)
    from moeplan.plan.fit import fit_layout

    res = fit_layout(
        {
            "model": "deepseek-ai/DeepSeek-V3",
            "system": {"gpu": "h100", "num_gpus": 64},
            "training": {"seq_length": 32768, "global_batch_size": 128},
            "layout": {
                "tensor_model_parallel_size": 8,
                "pipeline_model_parallel_size": 8,
                "expert_model_parallel_size": 8,
            },
        },
        headroom_gib=4.0,
    )
    assert "num_layers_in_first_pipeline_stage=6" in res["applied_first"]
    assert "num_layers_in_last_pipeline_stage=7" in res["applied_first"]
    assert res["check_errors"] == [] and not res["replanned"] and res["fixes"]
    assert res["fixes"][0]["scenario"]["layout"]["num_layers_in_last_pipeline_stage"] == 7


def test_fit_applies_the_checks_split_with_vpp_account_for_and_heavy_ends():
    # with VPP, account_for_* already set or ends that would outgrow the middle stages, the check's
    # fix is the balanced layout string: fit applies it too
    from moeplan.plan.fit import fit_layout

    base = {
        "model": "deepseek-ai/DeepSeek-V3",
        "system": {"gpu": "h100", "num_gpus": 128},
        "training": {"seq_length": 4096, "global_batch_size": 512, "precision": "fp8-blockwise"},
    }
    for layout in (
        {
            "pipeline_model_parallel_size": 8,
            "virtual_pipeline_model_parallel_size": 2,
            "expert_model_parallel_size": 16,
        },
        {
            "pipeline_model_parallel_size": 8,
            "expert_model_parallel_size": 16,
            "account_for_embedding_in_pipeline_split": True,
        },
        {"pipeline_model_parallel_size": 32, "expert_model_parallel_size": 4},
    ):
        res = fit_layout({**base, "layout": layout})
        assert "pipeline_model_parallel_layout=" in res["applied_first"], layout
        assert not any(e.startswith("pipeline.") for e in res["check_errors"]), res["check_errors"]


DSV3_128K_H100 = {
    "model": "deepseek-ai/DeepSeek-V3",
    "system": {"gpu": "h100", "num_gpus": 256},
    "training": {"seq_length": 131072, "global_batch_size": 64, "micro_batch_size": 1, "precision": "fp8-blockwise"},
    "layout": {
        "tensor_model_parallel_size": 8,
        "pipeline_model_parallel_size": 8,
        "context_parallel_size": 4,
        "expert_model_parallel_size": 16,
        "sequence_parallel": True,
        "pipeline_model_parallel_layout": "E,t*7|t*8|t*8|t*8|t*8|t*8|t*7|t*7,m,L",
        "moe_token_dispatcher_type": "flex",
        "moe_flex_dispatcher_backend": "deepep",
    },
}


def test_fit_pairs_selective_recompute_with_offload_before_full_recompute():
    res = fit_layout(DSV3_128K_H100)
    assert not res["fits_already"] and not res["replanned"]
    first = res["fixes"][0]
    # neither change fits alone (listed as not enough), together they fit and cost less than full recompute
    assert " + optimizer offload" in first["change"] and first["change"].startswith("recompute selective")
    full = [f for f in res["fixes"] if f["change"].startswith("recompute full")]
    assert full and first["step_time_change_pct"] < min(f["step_time_change_pct"] for f in full)
    alone = {r["change"] for r in res["not_enough"]}
    a, b = first["change"].split(" + ", 1)
    assert a in alone and b in alone


def test_plan_compares_selective_with_offload_against_full_recompute():
    from moeplan.plan.space import offload_alternatives

    alts = offload_alternatives(load_scenario(DSV3_128K_H100).model)
    assert [n for n, _ in alts] == [
        "selective moe_act,layernorm,mla_up_proj,moe + optimizer offload 0.5",
        "selective moe_act,layernorm,mla_up_proj,moe + optimizer offload 1",
    ]
    fixed = {k: v for k, v in DSV3_128K_H100["layout"].items()}
    res = plan({**DSV3_128K_H100, "layout": fixed}, top=1)
    w = res.candidates[0]
    assert w.recompute in [n for n, _ in alts]
    # the ladder's own choice for this layout (full recompute + offload) is predicted slower
    full = {**fixed, "recompute_granularity": "full", "recompute_method": "uniform", "recompute_num_layers": 1}
    slower = plan({**DSV3_128K_H100, "layout": full}, top=1).candidates
    assert all(c.tokens_per_s_per_gpu < w.tokens_per_s_per_gpu for c in slower)


def test_batch_for_tokens_prefers_a_batch_that_divides_well():
    from moeplan.api.plan import batch_for_tokens

    assert batch_for_tokens(4 * 2**20, 131072) == 32  # a multiple: the exact quotient
    assert batch_for_tokens(1_000_000, 131072) == 8  # 7.63: 7 is prime, 8 = 2^3 is 4.8 % above
    assert batch_for_tokens(1_000_000, 4096) == 256  # 244.1: 256 = 2^8 is 4.9 % above
    assert batch_for_tokens(3 * 131072 + 5, 131072) == 3  # 2 and 4 are more than 10 % away
    assert batch_for_tokens(5000, 4096) == 1  # nothing within 10 %: rounded down


def test_plan_refuses_a_precision_the_gpu_cannot_run():
    r = CliRunner().invoke(
        app,
        ["plan", "-m", "Qwen/Qwen3-30B-A3B", "--gpu", "h100", "-n", "8", "-s", "4096", "--precision", "mxfp8"],
    )
    assert r.exit_code == 2 and "training.precision" in r.stderr and "fp8-blockwise" in r.stderr


def test_plan_completes_what_a_fixed_full_recompute_needs():
    res = plan(
        {
            "model": "Qwen/Qwen3-30B-A3B",
            "system": {"gpu": "h100", "num_gpus": 8},
            "training": {"seq_length": 4096, "global_batch_size": 64},
            "layout": {"recompute_granularity": "full"},
        },
        top=1,
    )
    lay = res.candidates[0].data["layout"]
    assert (lay["recompute_granularity"], lay["recompute_method"], lay["recompute_num_layers"]) == (
        "full",
        "uniform",
        1,
    )
    assert any("recompute_method=uniform" in a for a in res.search.assumptions)


def ask_plan(model: str, gpu: str, n: int, seq: int, gbs: int, precision: str = "bf16", top: int = 3, **layout):
    """Plan one request (the layout keys given are held fixed)."""
    req = {
        "model": model,
        "system": {"gpu": gpu, "num_gpus": n},
        "training": {"seq_length": seq, "global_batch_size": gbs, "precision": precision},
    }
    if layout:
        req["layout"] = layout
    return plan(req, top=top)


def test_models_with_attention_sinks_get_context_parallelism_through_a2a():
    res = ask_plan("openai/gpt-oss-120b", "gb300", 64, 131072, 32, "mxfp8")
    cps = {c.parallel.cp for c in res.search.candidates}
    assert cps - {1}, "CP > 1 must be reachable (sinks need cp_comm_type a2a)"
    for c in res.search.candidates:
        if c.parallel.cp > 1:
            assert c.data["layout"]["cp_comm_type"] == "a2a"
    rot = res.baseline["rule_of_thumb"]
    assert "sequence.cp_attention_support" in rot["why_not"]  # CP 32: 8 KV heads do not split 32 ways


def test_knob_choices_keep_the_simplest_setting_within_the_tie_margin(qwen_plan):
    from moeplan.plan.search import TIE_FRACTION

    checked = 0
    for c in qwen_plan.search.candidates[:5]:
        warned = c.tried.get("_warns", {})
        for fam, tried in c.tried.items():
            if fam.startswith("_") or fam == "vpp":
                continue
            vals = [(n, v) for n, v in tried.items() if v is not None]
            chosen = c.knobs.get(fam)
            if not vals or chosen not in tried:
                continue
            top = max(v for _, v in vals)
            # the first within the margin, passing over settings the check warns about more
            first_close = next(n for n, v in vals if v >= top / (1 + TIE_FRACTION) and f"{fam}:{n}" not in warned)
            assert chosen == first_close, (fam, tried, chosen)
            checked += 1
    # every family tried on the 5 candidates is checked (dispatcher, EP overlap, graphs, and the CP exchange
    # where CP > 1): at least 3 per candidate; fewer would mean the loop skipped what it is meant to test
    tried_families = sum(
        1 for c in qwen_plan.search.candidates[:5] for fam in c.tried if not fam.startswith("_") and fam != "vpp"
    )
    assert checked == tried_families and checked >= 15


def test_long_context_baseline_and_guidance_family_are_at_their_best():
    res = ask_plan("deepseek-ai/DeepSeek-V3", "h100", 256, 131072, 64, "fp8-blockwise")
    rot = res.baseline["rule_of_thumb"]
    assert rot["context_parallel_size"] == 32 and rot["candidate"] is not None  # CP 32 found (searched at its best)
    fam = res.baseline["family"]
    assert fam["check"]["errors"] and fam["completed"]["held"]["context_parallel_size"] == 32
    assert fam["completed"]["peak_gib"] <= 80
    w = res.candidates[0]
    # the "DP 1" caveat is printed exactly when the winner leaves no data parallelism (it does here:
    # TP·CP·PP fill the 256 GPUs; a winner with DP > 1 must not carry it)
    assert any(line.startswith("DP 1") for line in res.explanation) == (w.scenario.dp == 1)


def test_held_offload_gets_its_companions_and_held_graphs_their_label():
    res = ask_plan("Qwen/Qwen3-30B-A3B", "h100", 8, 131072, 8, optimizer_cpu_offload=True)
    assert res.candidates, res.notes
    lay = res.candidates[0].data["layout"]
    assert lay["use_precision_aware_optimizer"] is True and lay["optimizer_offload_fraction"] == 1.0
    res = ask_plan("Qwen/Qwen3-30B-A3B", "b200", 16, 4096, 256, top=2, cuda_graph_impl="full_iteration")
    for c in res.candidates:
        assert c.knobs["graphs"] == "full_iteration" and c.parallel.ep * c.parallel.etp > 1
    res = ask_plan(
        "Qwen/Qwen3-30B-A3B", "gb200", 16, 4096, 256, top=1, cuda_graph_impl="full_iteration",
        expert_model_parallel_size=8, moe_expert_capacity_factor=1.0,
    )  # fmt: skip
    assert res.candidates and res.candidates[0].data["layout"]["moe_pad_expert_input_to_capacity"] is True


def test_flex_dispatchers_need_expert_parallelism_and_min_dp_is_named():
    r = _check_layout("Qwen/Qwen3-30B-A3B", "gb200", 8, moe_token_dispatcher_type="flex",
                      moe_flex_dispatcher_backend="hybridep")  # fmt: skip
    assert any("needs ETP·EP > 1" in f.message for f in r.errors)
    from moeplan.errors import InputError

    req = {
        "model": "Qwen/Qwen3-30B-A3B",
        "system": {"gpu": "h100", "num_gpus": 64},
        "training": {"seq_length": 4096, "global_batch_size": 64},
    }
    with pytest.raises(InputError) as exc:
        plan(req, min_dp=1000)
    assert exc.value.field == "--min-dp"


def test_fsdp_label_carries_a_held_etp_and_an_unfoldable_rule_of_thumb_cp_says_so():
    res = ask_plan("Qwen/Qwen3-VL-235B-A22B-Instruct", "b200", 128, 32768, 128, top=1,
               expert_model_parallel_size=8, expert_tensor_parallel_size=16, use_megatron_fsdp=True)  # fmt: skip
    assert res.candidates, res.notes  # EP 8 × ETP 16 = 128 GPUs with FSDP: one layout folds and fits
    c = res.candidates[0]
    assert c.parallel.etp == c.data["layout"]["expert_tensor_parallel_size"] == 16
    assert c.parallel.label().startswith("FSDP ") and c.parallel.label().endswith(" ETP16")
    res = ask_plan("Qwen/Qwen3-30B-A3B", "h100", 16, 131072, 16, top=1)
    rot = res.baseline["rule_of_thumb"]
    assert rot["context_parallel_size"] == 32 and "does not fold into 16 GPUs" in rot["why_not"]


def _check_layout(model, gpu, n, **layout):
    return validate(
        load_scenario(
            {
                "model": model,
                "system": {"gpu": gpu, "num_gpus": n},
                "training": {"seq_length": 4096, "micro_batch_size": 1, "global_batch_size": 64},
                "layout": layout,
            }
        )
    )


def test_fit_climbs_the_recompute_ladder_from_where_the_scenario_stands():
    """Regression: with selective recompute already set, fit matched the full-recompute rung (it has
    no module list) as 'already covered' and offered no further recompute at all."""
    from moeplan.plan.fit import fit_layout

    data = {
        "model": "Qwen/Qwen3-30B-A3B",
        "system": {"gpu": "h100", "num_gpus": 8},
        "training": {"seq_length": 16384, "micro_batch_size": 1, "global_batch_size": 64, "precision": "bf16"},
        "layout": {
            "expert_model_parallel_size": 8,
            "recompute_granularity": "selective",
            "recompute_modules": ["moe_act"],
        },
    }
    out = fit_layout(data)
    tried = {r["change"] for k in ("fixes", "not_enough", "rejected") for r in out[k]}
    assert {
        "recompute selective moe_act,layernorm",
        "recompute selective moe_act,layernorm,moe",
        "recompute full",
    } <= tried
    # a precision change alters numerics: marked, and ranked after every layout change that fits
    kinds = [r["changes_numerics"] for r in out["fixes"]]
    assert kinds == sorted(kinds)


def test_a_null_micro_batch_size_is_searched_as_not_given():
    """``training.micro_batch_size: null`` in a planner request means unset, as in ``estimate``: the
    search tries the usual MBS options, never MBS None (an internal TypeError)."""
    from moeplan.plan.search import mbs_options

    base = {
        "model": "Qwen/Qwen3-30B-A3B",
        "system": {"gpu": "h100", "num_gpus": 8},
        "training": {"seq_length": 4096, "global_batch_size": 64, "micro_batch_size": None},
    }
    assert mbs_options(base, load_scenario(base)) == [1, 2, 4]
    base["training"]["micro_batch_size"] = 2
    assert mbs_options(base, load_scenario(base)) == [2]


def test_a_tie_note_names_the_layout_that_leads():
    """When the baselines' own search promotes a layout above the main search's #1, the main search's tie
    note ("X leads although Y is faster") no longer describes the ranking and must not be shown (it was:
    DeepSeek-V3 at 128K on 256 H100 said TP8 PP4 CP4 led while TP1 PP8 CP32 was #1)."""
    res = plan(_req("deepseek-ai/DeepSeek-V3", n=256, seq=131072, gbs=32, precision="fp8-blockwise"), top=5)
    note = res.search.tie_note
    assert note is None or note.startswith(res.candidates[0].parallel.label()), (note, res.candidates[0].parallel)
