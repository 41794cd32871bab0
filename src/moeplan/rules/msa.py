"""MiniMax Sparse Attention (MiniMax-M3) vs Megatron: no release or branch implements it.

Sources: megatron-core has no block-sparse attention with an index branch in any release up to
core_v0.19.0 nor on its dev branch (Aug 2026: ``transformer/experimental_attention_variant`` holds DSA
and DeepSeek-V4's variants only). Megatron Bridge v0.6.0 (``models/minimax_m3/minimax_m3_bridge.py``,
``docs/models/minimax/minimax-m3.md``, "Known Limitations") trains MiniMax-M3 with full causal
attention on every layer: the index branch is imported as frozen state (or, in the text recipes, not
built) and never executed, which is the same model up to ``topk_blocks × block_size`` tokens per
sequence and an approximation beyond. Context and tensor parallelism of MSA therefore have no Megatron
rule to check; the estimate still gives MSA's figures, marked as such.
"""

from __future__ import annotations

from moeplan.i18n.messages import msg
from moeplan.rules.base import rule

#: rules whose error says Megatron cannot run the model at all rather than that the layout is wrong:
#: ``estimate`` still gives the model's memory and step time, its notes saying no Megatron run makes them
MODEL_ONLY_RULES = frozenset({"msa.no_megatron_implementation"})


@rule(
    "msa.no_megatron_implementation",
    "megatron-core core_v0.19.0 and dev (Aug 2026) transformer/experimental_attention_variant (no MSA); "
    "[Bridge] v0.6.0 models/minimax_m3/minimax_m3_bridge.py (full attention, index branch frozen)",
    "MiniMax Sparse Attention (block-sparse attention with an index branch) has no Megatron implementation; "
    "Megatron Bridge trains MiniMax-M3 with full causal attention",
    kind="unsupported",
)
def _no_implementation(s, e):
    m = s.model
    if m is None or not m.has_msa:
        return None
    for key in ("msa_block_size", "msa_topk_blocks"):
        if getattr(m, key) is None:  # a model from overrides that names the sparse layers only
            return [e.missing_model(key)]
    layers = sum(1 for i in range(len(m.msa_layers or ())) if m.layer_is_msa(i))
    span = m.given("msa_block_size") * m.given("msa_topk_blocks")
    seq = s.training.seq_length
    beyond = seq is not None and seq > span
    text = msg(
        "minimax_m3.msa_not_in_megatron",
        layers=layers,
        block=m.msa_block_size,
        topk=m.msa_topk_blocks,
        span=span,
    )
    if beyond:  # full attention is then another model than MSA: said in the fix
        fix = msg("minimax_m3.msa_not_in_megatron.fix_beyond", span=span, seq=seq)
    else:
        fix = msg("minimax_m3.msa_not_in_megatron.fix", span=span)
    return [e.error(text, fix, "model")]
