"""What moeplan says about a release holds for that release: a published Megatron-LM MoE recipe is checked
against the megatron-core of its own commit, the dataloader-mask default names the builds that honour
``--no-create-attention-mask-in-dataloader``, Gated DeltaNet known issues stay off Kimi Delta Attention,
and Gated DeltaNet's fused input norm stays saved under ``layernorm`` recompute.

Sources: megatron/core/package_info.py at each recipe's commit (tests/data/recipes/PROVENANCE.md);
Megatron-LM commit 168cb15 (arguments.py asserts against TE cross-entropy fusion, 2026-06-03); megatron-core
transformer_layer.py ``get_layer_static_inputs`` at core_v0.19.0 and after commit cefc252015 (PR #5131);
experimental_attention_variant_module_specs.py@core_v0.17.0 L68-72 and L235-239.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from moeplan.catalog.known_issue_table import get_known_issue
from moeplan.catalog.moe_recipe_releases import RecipeReleaseTableError, parse_table, recipe_release
from moeplan.inputs.megatron_keys import checkout_releases, key_status
from moeplan.io.driver_configs import import_any
from moeplan.model.activations import ActContext, layer_activations
from moeplan.model.memory.norm_recompute import layernorm_recompute_note
from moeplan.resolve.load import load_scenario
from moeplan.rules import validate

RECIPES = Path(__file__).parent / "data" / "recipes" / "megatron_lm"
DSV3_GB200 = RECIPES / "deepseek_v3/gb200/mxfp8_256GPU_TP1PP4EP64.yaml"  # commit 256f606, package_info 0.18.0
QWEN30_FP8 = RECIPES / "qwen3_30b/h100/fp8_32GPU_TP1PP1EP8.yaml"  # commit e3021f9, package_info 0.19.0


def _severity(sc: dict, rule_id: str) -> str | None:
    found = [f.severity for f in validate(load_scenario(sc)).findings if f.rule_id == rule_id]
    return found[0] if found else None


# --- a recipe's own megatron-core -----------------------------------------------------------------------


def test_a_recipe_without_the_te_cross_entropy_refusal_is_checked_against_its_own_release():
    # 256f606 (2026-06-07) is a dev-branch commit, package_info 0.18.0, without 168cb15: Megatron-LM there
    # only warns about TE cross-entropy fusion, so the recipe's cross_entropy_fusion_impl: te is no error
    sc, notes = import_any(DSV3_GB200.read_text(encoding="utf-8"), "megatron-lm-yaml")
    assert sc["versions"] == {"megatron_core": "0.18.0+dev.256f606507"}
    assert _severity(sc, "loss.te_cross_entropy_fusion") == "warning"
    assert (
        "megatron-core 0.18.0+dev.256f606507: the release of the published recipe "
        "examples/moe_recipes/deepseek_v3/gb200/mxfp8_256GPU_TP1PP4EP64.yaml at Megatron-LM commit 256f606507 "
        "(2026-06-07; megatron/core/package_info.py there), which the rules check it against"
    ) in notes


def test_a_recipe_of_a_commit_with_the_refusal_is_still_refused():
    # e3021f9 (2026-07-02) has 168cb15 and package_info 0.19.0: Megatron-LM asserts there
    sc, _ = import_any(QWEN30_FP8.read_text(encoding="utf-8"), "megatron-lm-yaml")
    assert sc["versions"] == {"megatron_core": "0.19.0+dev.e3021f96dd"}
    assert _severity(sc, "loss.te_cross_entropy_fusion") == "error"


def test_an_edited_recipe_keeps_the_newest_release_and_says_so():
    text = DSV3_GB200.read_text(encoding="utf-8") + "\n# tuned locally\n"
    assert recipe_release(text) is None
    sc, notes = import_any(text, "megatron-lm-yaml")
    assert "versions" not in sc
    assert _severity(sc, "loss.te_cross_entropy_fusion") == "error"  # checked against 0.20.0
    assert (
        "megatron-core 0.20.0: moeplan's newest release, because this file is not a published recipe moeplan "
        "knows (no commit to read its release from); state versions.megatron_core for the release it runs with"
    ) in notes


def test_a_checkout_build_may_have_keys_of_later_releases():
    # offload_optimizer_states: in no tabled release before the 0.20 dev tree, yet in the 0.18.0-numbered
    # dev-branch checkout 256f606 (arguments.py there declares it)
    assert key_status("offload_optimizer_states", (), "0.18.0") == "unknown"
    assert key_status("offload_optimizer_states", (), "0.18.0+dev.256f606507") == "accepted"
    assert checkout_releases("0.18.0") == ["0.18.2"]
    assert checkout_releases("0.18.0+dev.256f606507") == ["0.18.2", "0.19.0", "0.20.0.dev0"]


@pytest.mark.parametrize(
    "data",
    [
        {"schema": 2, "recipes": {}},
        {"schema": 1, "recipes": {"ab": {"recipe": "r", "commit": "c", "date": "d", "source": "s"}}},
        {
            "schema": 1,
            "recipes": {"ab": {"recipe": "r", "commit": "c", "date": "d", "source": "s", "megatron_core": "x.y"}},
        },
    ],
)
def test_a_malformed_recipe_release_table_is_refused(data):
    with pytest.raises((RecipeReleaseTableError, ValueError)):
        parse_table(data)


# --- the dataloader-mask default --------------------------------------------------------------------------


def _mask_reason(layout: dict) -> str:
    s = load_scenario({"model": "Qwen/Qwen3-30B-A3B", "layout": layout})
    return next(r.reason for r in s.resolutions if r.key == "create_attention_mask_in_dataloader")


def test_the_mask_default_says_te_graphs_drop_the_mask_only_on_builds_with_pr_5131():
    # core_v0.19.0 transformer_layer.py get_layer_static_inputs builds the [b, 1, s/CP, s] mask whatever the
    # dataloader does; cefc252015 (dev, 2026-06-05) skips it when create_attention_mask_in_dataloader is false
    reason = _mask_reason({"cuda_graph_impl": "transformer_engine"})
    assert reason == (
        "unset: Megatron's default; TE per-layer graphs then keep the [b, 1, s/CP, s] attention mask as a "
        "static input. --no-create-attention-mask-in-dataloader drops it only on megatron-core dev builds with "
        "PR #5131 (2026-06-05); up to 0.19.0 the graphs build it regardless"
    )


def test_the_mask_default_of_a_full_iteration_graph_says_the_flag_drops_it():
    # full_cuda_graph.py StaticBufferLoader copies the batch as given: no mask in the batch, none kept
    reason = _mask_reason({"cuda_graph_impl": "full_iteration"})
    assert reason.endswith("(--no-create-attention-mask-in-dataloader drops it)")


# --- Gated DeltaNet known issues and Kimi Delta Attention ----------------------------------------------------


def _long_context(model: str) -> dict:
    return {
        "model": model,
        "system": {"gpu": "gb200", "num_gpus": 64},
        "training": {"seq_length": 65536, "micro_batch_size": 1, "global_batch_size": 64},
        "layout": {"context_parallel_size": 2, "expert_model_parallel_size": 8},
        "versions": {"megatron_core": "0.17.0"},
    }


def test_the_gdn_context_parallel_assert_does_not_fire_for_kimi_delta_attention():
    # Kimi-K3's KDA layers are Bridge's KimiK3Attention, not megatron-core's GatedDeltaNet: the GDN assert
    # never runs; Bridge's own refusal (kimi_k3.kda_no_cp) is the finding
    rule_id = get_known_issue("gdn_context_parallel_assert").rule_id
    kimi = validate(load_scenario(_long_context("moonshotai/Kimi-K3"))).rule_ids()
    assert rule_id not in kimi and "kimi_k3.kda_no_cp" in kimi
    qwen_next = validate(load_scenario(_long_context("Qwen/Qwen3-Next-80B-A3B-Instruct"))).rule_ids()
    assert rule_id in qwen_next


# --- Gated DeltaNet's fused input norm ------------------------------------------------------------------------


def _ctx(**kw) -> ActContext:
    base = dict(tokens=8192, seq_local=8192, micro_batch_size=1, tp=4, sp=True, etp=1)
    base.update(kw)
    return ActContext(**base)


def test_gdn_input_norm_output_stays_saved_under_layernorm_recompute():
    # Qwen3-Next layer 0 is Gated DeltaNet, h = 2048; its spec fuses the input norm into in_proj
    # (input_layernorm IdentityOp), so layernorm recompute cannot drop it. TP 4 with SP: 8192 / 4 = 2048
    # tokens; norm output 2048 · 2048 · 2 B = 8,388,608 B kept; rsigma 2048 · 4 = 8,192 B kept with it
    m = load_scenario({"model": "Qwen/Qwen3-Next-80B-A3B-Instruct"}).complete_model
    assert m.attention_kinds[0] == "linear"
    kept, rec = layer_activations(m, 0, _ctx(), frozenset({"layernorm"}))
    assert kept["attn_norm_output"] == 2048 * 2048 * 2 == 8_388_608
    assert "attn_norm_output" not in rec
    # the local spec (no LayerNormLinear) keeps a separate, recomputable norm
    _, rec = layer_activations(m, 0, _ctx(fused_input_norm=False), frozenset({"layernorm"}))
    assert rec["attn_norm_output"] == 8_388_608


def test_the_layernorm_note_names_the_fused_gdn_norm():
    s = load_scenario({"model": "Qwen/Qwen3-Next-80B-A3B-Instruct"})
    note = layernorm_recompute_note(s, _ctx(), frozenset({"layernorm"}))
    assert note is not None
    assert "Gated DeltaNet's input norm is fused into its in_proj" in note
