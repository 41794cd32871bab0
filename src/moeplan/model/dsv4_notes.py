"""What a DeepSeek-V4 estimate rests on, said where the estimate is read (the step-time notes)."""

from __future__ import annotations

from moeplan.i18n.messages import msg
from moeplan.inputs.model_spec import ModelSpec


def dsv4_notes(m: ModelSpec, family: str = "", kernel: str | None = None) -> list[str]:
    """One note for a DeepSeek-V4 model: how its compressed sparse attention, hyper-connections and
    hash-routed layers are costed (``moeplan.structure.dsv4_shapes``, ``moeplan.model.dsv4_activations``),
    and that no measured DeepSeek-V4 run checks it. ``kernel`` (default None: the attention core at the
    dense attention rate) names the figures the fused sparse kernels on architecture ``family`` are
    timed with. Empty for other models."""
    if not m.is_dsv4:
        return []
    if kernel is not None:
        return [
            msg(
                "model_sparse_time.dsv4_costing_fused",
                window=m.csa_window_size,
                topk=m.dsa_indexer_topk,
                family=family,
                kernel=kernel,
                streams=m.num_residual_streams,
                hash=m.moe_n_hash_layers,
            )
        ]
    return [
        msg(
            "dsv4.note_costing",
            window=m.csa_window_size,
            topk=m.dsa_indexer_topk,
            streams=m.num_residual_streams,
            hash=m.moe_n_hash_layers,
        )
    ]
