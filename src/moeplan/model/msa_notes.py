"""What a MiniMax Sparse Attention (MiniMax-M3) estimate states: that no Megatron implementation exists,
so its figures are the model as designed, and how its attention is costed
(:mod:`moeplan.structure.msa_shapes`, :func:`moeplan.model.executed_flops.msa_layer_flops`)."""

from __future__ import annotations

from moeplan.i18n.messages import Message, msg
from moeplan.inputs.model_spec import ModelSpec
from moeplan.structure.msa_shapes import msa_layer_count


def msa_notes(m: ModelSpec) -> list[Message]:
    """Two lines for a model with MSA layers (empty otherwise): the figures are MSA's, which Megatron
    cannot train (``check``'s ``msa.no_megatron_implementation``), and the costing: the core over the
    selected blocks and the index branch's scores at the dense attention kernel's rate (no training
    kernel figure for block-sparse attention is published), the index branch whole on every TP rank,
    the model FLOPs counting MSA's own work (Megatron Bridge has no count of it)."""
    if not m.has_msa:
        return []
    block, topk = m.given("msa_block_size"), m.given("msa_topk_blocks")
    return [
        msg("minimax_m3.note_not_trainable", layers=msa_layer_count(m), topk=topk, block=block),
        msg("minimax_m3.note_costing", span=block * topk, heads=m.given("msa_index_n_heads")),
    ]
