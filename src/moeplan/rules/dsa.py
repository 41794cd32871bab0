"""DeepSeek Sparse Attention (DeepSeek-V3.2, GLM-5) vs the megatron-core release and the layout.

megatron-core builds DSA as ``experimental_attention_variant='dsa'``: an MLA layer whose core attention
(``transformer/experimental_attention_variant/dsa.py::DSAttention``) reads only the top-k keys its
lightning indexer selects. What each release enforces:

- core_v0.15.x and older have no DSA (the folder ``experimental_attention_variant`` first ships in
  core_v0.16.0);
- core_v0.16.0 to core_v0.18.x assert ``context_parallel_size == 1`` ("Currently context parallelism
  is not supported by DSAttention!", ``transformer_config.py``); core_v0.19.0 and dev accept CP with
  ``cp_comm_type`` ``allgather`` only (keys and values gathered over the CP group);
- every release asserts ``not apply_rope_fusion`` ("RoPE fusion is not supported for DSAttention");
- cross-layer top-k sharing (``dsa_indexer_topk_freq`` > 1, GLM-5.2) first ships in core_v0.19.0, and
  its layer specs (``experimental_attention_variant_module_specs.py::_validate_dsa_index_share_pipeline_split``)
  refuse a pipeline chunk whose sharing layer's source layer is on another chunk;
- without a fused kernel backend (``dsa_kernel_backend`` ``tilelang`` / ``cudnn``, core_v0.19.0+;
  default ``none``) the PyTorch fallback materialises the attention scores of every head over every
  key in FP32 (``_unfused_absorbed_dsa_fn`` / ``unfused_dsa_fn``: ``[b, heads, s, s]``) and the
  indexer's scores (``[b, s, s]``), masked to the top-k afterwards.
"""

from __future__ import annotations

from packaging.version import Version

from moeplan.i18n.messages import msg
from moeplan.rules.base import rule
from moeplan.structure.placement import stage_plan
from moeplan.units import GIB_BYTES

#: first megatron-core release with DSA (tag core_v0.16.0: experimental_attention_variant/dsa.py)
DSA_MIN_MCORE = Version("0.16.0")
#: first release with context parallelism for DSA (allgather only) and with cross-layer top-k sharing
#: and the fused kernel backends (core_v0.19.0: transformer_config.py dsa_indexer_topk_freq, dsa_kernel_backend)
DSA_CP_MIN_MCORE = Version("0.19.0")
#: the fused DSA kernel backends of core_v0.19.0+ (``TransformerConfig.dsa_kernel_backend``)
FUSED_BACKENDS = ("tilelang", "cudnn")


def _dsa(s):
    """The scenario's model when it uses DeepSeek Sparse Attention, else None."""
    m = s.model
    return m if m is not None and m.has_dsa else None


def _dsa_built(s, first: Version = DSA_MIN_MCORE):
    """The DSA model when the scenario's release builds it (from ``first``), else None: a release
    without DSA (or without top-k sharing) is ``attention.dsa_needs_mcore``'s one error."""
    return _dsa(s) if s.mcore_version >= first else None


@rule(
    "attention.dsa_needs_mcore",
    "megatron-core transformer/experimental_attention_variant/dsa.py (core_v0.16.0)",
    "DeepSeek Sparse Attention (DeepSeek-V3.2, GLM-5) needs megatron-core 0.16.0 or later; "
    "cross-layer top-k sharing needs 0.19.0",
    kind="unsupported",
)
def _dsa_release(s, e):
    m = _dsa(s)
    if m is None:
        return None
    ver = str(s.mcore_version)
    if s.mcore_version < DSA_MIN_MCORE:
        return [
            e.error(
                msg("model_dsa.needs_mcore", model=m.name, version=ver, first=str(DSA_MIN_MCORE)),
                msg("model_dsa.needs_mcore.fix", first=str(DSA_MIN_MCORE)),
                "versions.megatron_core",
            )
        ]
    if m.dsa_indexer_topk_freq > 1 and s.mcore_version < DSA_CP_MIN_MCORE:
        return [
            e.error(
                msg("model_dsa.sharing_needs_mcore", freq=m.dsa_indexer_topk_freq, version=ver),
                msg("model_dsa.needs_mcore.fix", first=str(DSA_CP_MIN_MCORE)),
                "versions.megatron_core",
            )
        ]
    return None


def _cp_types(s) -> list[str]:
    """The layout's ``cp_comm_type`` as a list (unset: Megatron's default ``p2p``)."""
    t = s.layout.cp_comm_type
    items = t if isinstance(t, list) else [t or "p2p"]
    return [str(x) for x in items]


@rule(
    "attention.dsa_context_parallel",
    "megatron-core transformer/transformer_config.py (core_v0.16.0 to core_v0.18.x: CP 1; core_v0.19.0+: allgather)",
    "DeepSeek Sparse Attention with CP > 1 needs megatron-core 0.19.0 or later and cp_comm_type allgather",
)
def _dsa_cp(s, e):
    if _dsa_built(s) is None or s.cp <= 1:
        return None
    ver = str(s.mcore_version)
    if s.mcore_version < DSA_CP_MIN_MCORE:
        return [
            e.error(
                msg("model_dsa.cp_unsupported", cp=s.cp, version=ver, first=str(DSA_CP_MIN_MCORE)),
                msg("model_dsa.cp_unsupported.fix", first=str(DSA_CP_MIN_MCORE)),
                "context_parallel_size",
                kind="unsupported",
            )
        ]
    odd = [t for t in _cp_types(s) if t.replace("_", "").lower() != "allgather"]
    if not odd:
        return None
    return [
        e.error(
            msg("model_dsa.cp_comm_type", cp=s.cp, comm=odd[0]),
            msg("model_dsa.cp_comm_type.fix"),
            "cp_comm_type",
        )
    ]


@rule(
    "attention.dsa_rope_fusion",
    "megatron-core transformer/transformer_config.py (core_v0.16.0 to dev)",
    "DeepSeek Sparse Attention refuses apply_rope_fusion",
)
def _dsa_rope(s, e):
    if _dsa_built(s) is None or not s.layout.apply_rope_fusion:
        return None
    return [e.error(msg("model_dsa.rope_fusion"), msg("model_dsa.rope_fusion.fix"), "apply_rope_fusion")]


def _split_breaks(m, chunks: list[list[int]]) -> tuple[int, int] | None:
    """(1-based layer, its source layer) of the first sharing layer whose source is not earlier in
    its own pipeline chunk; None when every chunk starts on a computing layer."""
    for chunk in chunks:
        for pos, layer in enumerate(chunk):
            if m.layer_has_indexer(layer):
                continue
            source = next(i for i in range(layer, -1, -1) if m.layer_has_indexer(i))
            if source not in chunk[:pos]:
                return layer + 1, source + 1
    return None


@rule(
    "attention.dsa_index_share_pipeline_split",
    "megatron-core models/gpt/experimental_attention_variant_module_specs.py (core_v0.19.0 to dev)",
    "with DSA top-k sharing every pipeline chunk must start on a layer that computes its own top-k",
)
def _dsa_split(s, e):
    m = _dsa_built(s, DSA_CP_MIN_MCORE)
    if m is None or m.dsa_indexer_topk_freq <= 1 or s.pp * (s.vpp or 1) <= 1:
        return None
    plan = stage_plan(s)
    if plan is None:
        return None  # the pipeline rules report an illegal split
    chunks = [chunk for rank in plan.layers for chunk in rank]
    hit = _split_breaks(m, chunks)
    if hit is None:
        return None
    return [
        e.error(
            msg("model_dsa.pipeline_split", layer=hit[0], source=hit[1], freq=m.dsa_indexer_topk_freq),
            msg("model_dsa.pipeline_split.fix", freq=m.dsa_indexer_topk_freq),
            "pipeline_model_parallel_layout",
        )
    ]


def fallback_score_gib(s) -> float:
    """GiB of the FP32 attention scores one DSA layer's PyTorch fallback materialises for one
    microbatch on one rank: ``mbs · heads/TP · (s/CP) · s · 4`` bytes (``[b, heads, s_q, s_k]``,
    megatron-core ``_unfused_absorbed_dsa_fn``), plus the indexer's ``[b, s_q, s_k]`` FP32 scores."""
    m = s.model
    seq = s.training.seq_length or 0
    mbs = s.training.micro_batch_size or 1
    heads = m.num_attention_heads // max(1, s.tp)
    return mbs * (heads + 1) * (seq / max(1, s.cp)) * seq * 4 / GIB_BYTES


@rule(
    "attention.dsa_dense_fallback",
    "megatron-core transformer/experimental_attention_variant/dsa.py, dsa_kernels.py (core_v0.16.0 to dev)",
    "without dsa_kernel_backend tilelang / cudnn, DSA runs a PyTorch fallback that holds every score in FP32",
)
def _dsa_fallback(s, e):
    m = _dsa_built(s)
    if m is None:
        return None
    backend = s.input.unmodelled_keys.get("dsa_kernel_backend", "none")
    if backend in FUSED_BACKENDS and s.mcore_version >= DSA_CP_MIN_MCORE:
        return None
    if not s.training.seq_length:
        return [e.missing("training.seq_length")]
    gib = fallback_score_gib(s)
    return [
        e.warning(
            msg("model_dsa.dense_fallback", backend=str(backend), gib=gib, seq=s.training.seq_length),
            msg("model_dsa.dense_fallback.fix", first=str(DSA_CP_MIN_MCORE)),
            "dsa_kernel_backend",
        )
    ]
