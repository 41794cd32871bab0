"""Attention heads vs TP / CP (``megatron_facts.md`` §4.2, vendored in ``tests/data/reference``)."""

from __future__ import annotations

from packaging.version import Version

from moeplan.i18n.messages import msg
from moeplan.rules.base import rule


@rule("attention.heads_divisible_by_tp", "[TC] transformer_config.py", "num_attention_heads must be divisible by TP")
def _heads(s, e):
    m = s.model
    if m is None or m.num_attention_heads is None:
        return [e.missing_model("num_attention_heads")] if s.tp > 1 else None
    if m.num_attention_heads % s.tp:
        ok = [t for t in (1, 2, 4, 8, 16, 32, 64) if m.num_attention_heads % t == 0]
        return [
            e.error(
                msg("attention.heads_not_divisible_by_tp", heads=m.num_attention_heads, tp=s.tp),
                msg("common.use_tp_in", values=ok),
                "tensor_model_parallel_size",
            )
        ]


#: the first megatron-core that accepts TP > num_query_groups when TP is a multiple of the groups
#: (each KV group replicated on TP / groups ranks); before it groups % TP == 0 only
GQA_TP_RELAXED_MCORE = Version("0.16.0")


@rule(
    "attention.query_groups_vs_tp",
    "[TC] transformer_config.py",
    "num_query_groups must be a multiple of TP, or (mcore ≥ 0.16) a divisor of TP",
)
def _groups(s, e):
    m = s.model
    if m is None or m.num_query_groups is None or m.multi_latent_attention:
        return None
    g, tp = m.num_query_groups, s.tp
    if g % tp == 0:
        return None
    ok_divides = tp % g == 0
    relaxed = s.mcore_version >= GQA_TP_RELAXED_MCORE
    if ok_divides and relaxed:
        return [
            e.info(
                msg("attention.kv_groups_replicated", tp=tp, groups=g, ranks=tp // g),
                "tensor_model_parallel_size",
            )
        ]
    heads = m.num_attention_heads or g
    cands = (1, 2, 4, 8, 16, 32, 64)
    allowed = [t for t in cands if heads % t == 0 and (g % t == 0 or (relaxed and t % g == 0))]
    ver = str(s.mcore_version)
    text = (
        msg("attention.query_groups_not_multiple_or_divisor", groups=g, tp=tp)
        if relaxed
        else msg("attention.query_groups_not_divisible_by_tp", groups=g, tp=tp, version=ver)
    )
    return [
        e.error(
            text,
            msg("common.use_tp_in", values=allowed),
            "tensor_model_parallel_size",
        )
    ]


#: first megatron-core release whose TransformerConfig accepts Gated DeltaNet with CP > 1 (core_v0.17.1
#: still asserts ``context_parallel_size == 1``; core_v0.18.0 checks heads against TP·CP instead)
GDN_CP_MIN_MCORE = Version("0.18.0")


@rule(
    "attention.gdn_heads_vs_tp_cp",
    "[TC] transformer_config.py (gated delta net)",
    "linear_num_key_heads and linear_num_value_heads must be divisible by TP·CP; value heads by key heads; "
    "CP > 1 needs megatron-core ≥ 0.18",
)
def _gdn(s, e):
    m = s.model
    if m is None or not m.has_linear_attention:
        return None
    nk, nv = m.linear_num_key_heads, m.linear_num_value_heads
    ver = str(s.mcore_version)
    out = []
    if m.kimi_delta_attention:  # Kimi-K3's KDA: heads over TP only; CP is kimi_k3.kda_no_cp's
        d = s.tp
    elif s.cp > 1 and s.mcore_version < GDN_CP_MIN_MCORE:
        # megatron-core 0.16.0–0.17.1 assert context_parallel_size == 1 for gated delta net; 0.18.0 is the
        # first release that shards GDN heads over TP·CP (transformer_config.py at core_v0.17.1 and core_v0.18.0)
        out.append(
            e.error(
                msg("attention.gdn_cp_unsupported", version=ver, cp=s.cp),
                msg("attention.gdn_cp_unsupported.fix"),
                "context_parallel_size",
                kind="unsupported",
            )
        )
        d = s.tp
    else:
        d = s.tp * s.cp
    what = "TP·CP" if (d != s.tp or s.cp > 1) and not m.kimi_delta_attention else "TP"
    for name, n in (("linear_num_key_heads", nk), ("linear_num_value_heads", nv)):
        if n is not None and n % d:
            best = max(x for x in (1, 2, 4, 8, 16) if n % x == 0)
            out.append(
                e.error(
                    msg("attention.gdn_heads_not_divisible", key=name, heads=n, what=what, d=d),
                    msg("attention.gdn_heads_not_divisible.fix", what=what, heads=n, best=best),
                    "tensor_model_parallel_size",
                    "context_parallel_size",
                )
            )
    if nk and nv and nv % nk:
        out.append(
            e.error(
                msg("attention.gdn_value_heads_not_divisible", value_heads=nv, key_heads=nk),
                msg("common.fix_the_model_config"),
                "model",
            )
        )
    return out


@rule(
    "attention.vision_heads_divisible_by_tp",
    "Bridge VLM providers build the vision TransformerConfig with the model's TP; [TC]",
    "a VLM's vision-tower heads must be divisible by TP (the ViT is tensor-parallel with the decoder's TP)",
)
def _vision_heads(s, e):
    m = s.model
    # MoonViT (Kimi-K2.5) is built from the Hugging Face modules, whole on every TP rank: TP never splits it
    if m is None or m.vision is None or s.tp == 1 or not m.vision.tp_sharded:
        return None
    n = m.vision.num_heads
    if n % s.tp:
        ok = [t for t in (1, 2, 4, 8, 16) if n % t == 0]
        return [
            e.error(
                msg("attention.vision_heads_not_divisible_by_tp", heads=n, tp=s.tp),
                msg("attention.vision_heads_not_divisible_by_tp.fix", values=ok),
                "tensor_model_parallel_size",
            )
        ]
