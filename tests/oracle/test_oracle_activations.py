"""Oracle: moeplan's per-layer activation bytes == what megatron-core 0.16.1 keeps for backward.

``act_harness`` runs ONE forward of ONE real megatron-core ``TransformerLayer`` (local spec, bf16,
CPU, spawned gloo world of TP ranks) under ``torch.autograd.graph.saved_tensors_hooks`` and lists
every storage kept at the end of the forward (deduplicated by storage, parameters excluded, sizes
read after ``CheckpointWithoutOutput`` has freed what it discards). ``act_compare`` names each
storage and evaluates moeplan's ``layer_activations`` for the same layer, microbatch (seq 256,
MBS 2) and rank. Kinds: GQA + dense MLP (Qwen3-8B / 4), GQA + MoE without shared experts
(Qwen3-30B-A3B / 2), MLA + MoE with shared experts (DeepSeek-V2-Lite / 2; DeepSeek-V3 / 8 with
q_lora), gated attention output + dense MLP (Qwen3-Next full-attention layer / 2); settings: no
recompute and each selective ``recompute_modules`` entry that megatron-core accepts for the layer,
alone; TP = 1, and TP = 2 + sequence parallel for the GQA kinds. Gated DeltaNet does not run on CPU
(megatron-core's GatedDeltaNet needs FLA's Triton kernels). Stand-ins and the full tables:
``docs/activation_oracle.md``.

Checks (bytes per token of the microbatch; 5 % tolerance):

* ``test_modelled_total``: the sum of the tensors moeplan lists (attention core excluded) == the
  same tensors in megatron-core;
* ``test_term``: term by term, for every term above 1 % of that sum;
* ``test_layer_total``: everything megatron-core keeps outside the attention core (minus the local
  spec's own artefacts: unfused-RoPE cos/sin, tensors shared by all layers) == moeplan's non-core
  total; strict xfail where moeplan misses tensors today (qk-layernorm inputs, the ungated output
  of gated attention);
* ``test_recompute_saving``: what each recompute module saves in megatron-core == moeplan's saving;
* ``test_attention_core``: MLA's q/k/v (no GQA expansion) == ``mla_qkv``; the unfused s x s softmax
  output == ``attention_scores``.

Slow (~4-5 min on 2 cores: seven spawned worlds, one per kind x TP). Set
``MOEPLAN_ACT_ORACLE_CACHE=/path/rows.json`` to reuse the measured rows between runs.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ORACLE_SKIP = (
    "the oracle tests need the real megatron-core and torch (pip install -e '.[oracle]', Python 3.11); "
    "CI runs them: python -m pytest tests/oracle -m oracle"
)
pytest.importorskip("megatron.core", reason=ORACLE_SKIP)
pytest.importorskip("torch", reason=ORACLE_SKIP)

sys.path.insert(0, str(Path(__file__).resolve().parent))

from act_compare import MBS, MOEPLAN_CORE, SEQ, compare, moeplan_layer, roles  # noqa: E402
from act_harness import KINDS, settings_for  # noqa: E402
from act_report import RUNS, collect  # noqa: E402

pytestmark = pytest.mark.oracle

TOL = 0.05
TOKENS = SEQ * MBS
#: megatron-core roles that are artefacts of the local spec on CPU, not of a GPU run
LOCAL_ARTEFACTS = {"rope_cos_sin", "shared_rope_or_mask", "misc_scalar", "tokens_per_expert"}
#: terms too dependent on router settings / the dispatcher to assert (listed in the doc)
ROUTING_TERMS = {"router", "routed_probs", "permute_indices"}

CASES = [(kind, tp, setting) for kind, tp in RUNS for setting in settings_for(KINDS[kind], tp)]


def _id(c: tuple) -> str:
    return f"{c[0]}-tp{c[1]}-{c[2]}"


# ---- known disagreements (measured; strict: a fix in moeplan flips them) -------------------------

_QK_NORM = (
    "moeplan keeps no qk-layernorm inputs: megatron-core (like TE's RMSNorm, which saves input_.contiguous() "
    "and rsigma) keeps Q and K before the norm, (heads + groups) * head_dim * 2 B per token / TP, plus fp32 "
    "rsigma per head. Measured non-core B/token (mcore vs moeplan, no recompute): gqa_dense TP1 31280 vs "
    "28672, TP2 15640 vs 14336; gqa_moe TP1 52160 vs 47648, TP2 34408 vs 32064"
)
_GATE = (
    "and moeplan keeps the gate but not the ungated attention output that the (torch.compile'd) gating "
    "multiply keeps, heads * head_dim * 2 B / TP. Measured gated_attn_dense TP1: 44080 vs 34816 B/token"
)
_MLA = (
    "mla_latents counts kv_lora_rank * act_bytes twice (the kv norm input is a view of the linear_kv_down_proj "
    "output [kv_lora | rope], already counted): megatron-core 1152 vs moeplan 1664 B/token (DeepSeek-V2-Lite/2), "
    "1152 vs 1280 (DeepSeek-V3/8)"
)
_GQA_UNFUSED = (
    "unfused attention with GQA: without recompute megatron-core's local DotProductAttention keeps K and V "
    "expanded to all heads (repeat_interleave); core_attn recompute keeps q, k and V as a view of the fused QKV "
    "output (pinning all of it). moeplan's unfused model drops only the scores. Saving B/token mcore vs moeplan: "
    "gqa_dense 4608 vs 4096 (TP1), gqa_moe 10752 vs 8192 (TP1), gated_attn_dense 1024 vs 4096"
)


def _layer_total_xfail(kind: str) -> str | None:
    """No known gap left in a layer's total (qk-norm inputs, the ungated output and the MLA latents
    were modelled after this oracle measured them: docs/activation_oracle.md)."""
    return None


def _term_xfail(kind: str, term: str) -> str | None:
    return None


def _saving_xfail(kind: str, module: str) -> str | None:
    a = KINDS[kind]
    if module == "core_attn" and not a.get("multi_latent_attention"):
        return _GQA_UNFUSED
    return None


# ---- fixtures ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def rows() -> dict[str, dict]:
    return collect(cache=os.environ.get("MOEPLAN_ACT_ORACLE_CACHE"))


def _case_rows(rows: dict, kind: str, tp: int, setting: str) -> list[dict]:
    res = rows[f"{kind}/{tp}"][setting]
    assert "rows" in res, f"megatron-core failed: {res.get('error')}\n{res.get('tb', '')}"
    return res["rows"]


def _mark(case_list, reason_of):
    out = []
    for c in case_list:
        reason = reason_of(c)
        marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
        out.append(pytest.param(*c, marks=marks, id=_id(c) + (f"-{c[3]}" if len(c) > 3 else "")))
    return out


# ---- tests ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("kind", "tp", "setting"), [pytest.param(*c, id=_id(c)) for c in CASES])
def test_modelled_total(rows, kind, tp, setting):
    c = compare(KINDS[kind], tp, setting, _case_rows(rows, kind, tp, setting))
    assert c["moeplan"] == pytest.approx(c["mcore"], rel=TOL), (
        f"modelled tensors, B/token: megatron-core {c['mcore']:.1f}, moeplan {c['moeplan']:.1f}; per term {c['per_name']}"
    )


def _term_cases():
    out = []
    for kind, tp, setting in CASES:
        mods = frozenset() if setting == "none" else frozenset([setting])
        kept, _ = moeplan_layer(KINDS[kind], tp, mods)
        model_total = sum(v for k, v in kept.items() if k not in MOEPLAN_CORE)
        for term, v in sorted(kept.items()):
            if term in MOEPLAN_CORE or term in ROUTING_TERMS or v < 0.01 * model_total:
                continue
            out.append((kind, tp, setting, term))
    return out


@pytest.mark.parametrize(("kind", "tp", "setting", "term"), _mark(_term_cases(), lambda c: _term_xfail(c[0], c[3])))
def test_term(rows, kind, tp, setting, term):
    c = compare(KINDS[kind], tp, setting, _case_rows(rows, kind, tp, setting))
    mc, mp = c["per_name"].get(term, (0.0, 0.0))
    assert mp == pytest.approx(mc, rel=TOL), f"{term}: megatron-core {mc:.1f} B/token, moeplan {mp:.1f} B/token"


def _non_core(kind: str, c: dict) -> tuple[float, float]:
    mc = c["mcore"] + sum(v for k, v in c["unmodelled"].items() if k not in LOCAL_ARTEFACTS)
    return mc, c["moeplan"]


@pytest.mark.parametrize(("kind", "tp", "setting"), _mark(CASES, lambda c: _layer_total_xfail(c[0])))
def test_layer_total(rows, kind, tp, setting):
    c = compare(KINDS[kind], tp, setting, _case_rows(rows, kind, tp, setting))
    mc, mp = _non_core(kind, c)
    missing = {k: round(v, 1) for k, v in c["unmodelled"].items() if k not in LOCAL_ARTEFACTS}
    assert mp == pytest.approx(mc, rel=TOL), (
        f"non-core kept, B/token: megatron-core {mc:.1f}, moeplan {mp:.1f}; kept by megatron-core only: {missing}"
    )


_SAVING_CASES = [(k, tp, s) for k, tp, s in CASES if s != "none"]


@pytest.mark.parametrize(("kind", "tp", "module"), _mark(_SAVING_CASES, lambda c: _saving_xfail(c[0], c[2])))
def test_recompute_saving(rows, kind, tp, module):
    arch = KINDS[kind]
    base = sum(roles(_case_rows(rows, kind, tp, "none"), arch).values()) / TOKENS
    with_mod = sum(roles(_case_rows(rows, kind, tp, module), arch).values()) / TOKENS
    kept0, _ = moeplan_layer(arch, tp, frozenset())
    kept1, _ = moeplan_layer(arch, tp, frozenset([module]))
    mc = base - with_mod
    mp = (sum(kept0.values()) - sum(kept1.values())) / TOKENS
    assert mp == pytest.approx(mc, rel=TOL), f"{module} saves: megatron-core {mc:.1f} B/token, moeplan {mp:.1f} B/token"


@pytest.mark.parametrize(("kind", "tp"), [pytest.param(k, tp, id=f"{k}-tp{tp}") for k, tp in RUNS])
def test_attention_core(rows, kind, tp):
    arch = KINDS[kind]
    c = compare(arch, tp, "none", _case_rows(rows, kind, tp, "none"))
    assert c["core_moeplan_names"].get("attention_scores", 0.0) == pytest.approx(
        c["core_roles"]["core_scores"], rel=TOL
    )
    if arch.get("multi_latent_attention"):
        assert c["core_moeplan_names"]["mla_qkv"] == pytest.approx(c["core_roles"]["core_qkv"], rel=TOL)


def test_every_storage_is_named(rows):
    """No kept storage falls through the classifier (a new megatron-core tensor would)."""
    unknown = []
    for key, settings in rows.items():
        arch = KINDS[key.split("/")[0]]
        for setting, res in settings.items():
            unknown += [(key, setting, k) for k in roles(res.get("rows", []), arch) if k.startswith("other:")]
    assert not unknown, unknown
