"""Attention heads vs TP / CP (``megatron_facts.md`` §4.2)."""

from __future__ import annotations

from moeplan.rules.base import rule


@rule("attention.heads_divisible_by_tp", "[TC] transformer_config.py", "num_attention_heads must be divisible by TP")
def _heads(s, e):
    m = s.model
    if m is None or m.num_attention_heads is None:
        return [e.missing("the model's num_attention_heads")] if s.tp > 1 else None
    if m.num_attention_heads % s.tp:
        ok = [t for t in (1, 2, 4, 8, 16, 32, 64) if m.num_attention_heads % t == 0]
        return [
            e.error(
                f"num_attention_heads ({m.num_attention_heads}) is not divisible by TP ({s.tp})",
                f"use TP in {ok}",
                "tensor_model_parallel_size",
            )
        ]


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
    relaxed = s.mcore_version >= (0, 16, 0)
    if ok_divides and relaxed:
        return [
            e.info(
                f"TP ({tp}) > num_query_groups ({g}): each KV group is replicated on {tp // g} TP ranks "
                f"(accepted since megatron-core 0.16)",
                "tensor_model_parallel_size",
            )
        ]
    heads = m.num_attention_heads or g
    cands = (1, 2, 4, 8, 16, 32, 64)
    allowed = [t for t in cands if heads % t == 0 and (g % t == 0 or (relaxed and t % g == 0))]
    ver = ".".join(map(str, s.mcore_version))
    rule_txt = "a multiple or a divisor of" if relaxed else "divisible by"
    why = (
        ""
        if relaxed
        else f" (megatron-core {ver} requires num_query_groups % TP == 0; 0.16+ also accepts TP % groups == 0)"
    )
    return [
        e.error(
            f"num_query_groups ({g}) is not {rule_txt} TP ({tp}){why}",
            f"use TP in {allowed}",
            "tensor_model_parallel_size",
        )
    ]


#: first megatron-core release whose TransformerConfig accepts Gated DeltaNet with CP > 1 (core_v0.17.1
#: still asserts ``context_parallel_size == 1``; core_v0.18.0 checks heads against TP·CP instead)
GDN_CP_MIN_MCORE = (0, 18, 0)


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
    ver = ".".join(map(str, s.mcore_version))
    out = []
    if s.cp > 1 and s.mcore_version < GDN_CP_MIN_MCORE:
        # megatron-core 0.16.0–0.17.1 assert context_parallel_size == 1 for gated delta net; 0.18.0 is the
        # first release that shards GDN heads over TP·CP (transformer_config.py at core_v0.17.1 and core_v0.18.0)
        out.append(
            e.error(
                f"Gated DeltaNet layers do not support context parallelism in megatron-core {ver} (CP = {s.cp}); "
                "0.18.0 is the first release with GDN context parallelism",
                "use CP = 1 (TP for memory) or megatron-core ≥ 0.18 (heads sharded over TP·CP)",
                "context_parallel_size",
                kind="unsupported",
            )
        )
        d = s.tp
    else:
        d = s.tp * s.cp
    what = "TP·CP" if d != s.tp or s.cp > 1 else "TP"
    for name, n in (("linear_num_key_heads", nk), ("linear_num_value_heads", nv)):
        if n is not None and n % d:
            best = max(x for x in (1, 2, 4, 8, 16) if n % x == 0)
            out.append(
                e.error(
                    f"{name} ({n}) is not divisible by {what} = {d}",
                    f"choose {what} dividing {n} (at most {best})",
                    "tensor_model_parallel_size",
                    "context_parallel_size",
                )
            )
    if nk and nv and nv % nk:
        out.append(
            e.error(
                f"linear_num_value_heads ({nv}) is not divisible by linear_num_key_heads ({nk})",
                "fix the model config",
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
    if m is None or m.vision is None or s.tp == 1:
        return None
    n = m.vision.num_heads
    if n % s.tp:
        ok = [t for t in (1, 2, 4, 8, 16) if n % t == 0]
        return [
            e.error(
                f"the vision tower has {n} attention heads, not divisible by TP ({s.tp})",
                f"use TP in {ok}, or freeze/offload the tower with its own TP in a custom provider",
                "tensor_model_parallel_size",
            )
        ]
