"""Latent MoE (``moe_latent_size``) vs the megatron-core release and the MoE layer's options.

megatron-core adds ``TransformerConfig.moe_latent_size`` in core_v0.16.0 (absent from every
core_v0.15.x tag): per MoE layer a ``fc1_latent_proj`` before dispatch and a ``fc2_latent_proj`` after
combine (``transformer/moe/moe_layer.py``). The same file refuses ``moe_shared_expert_overlap`` with
latent projections in training (core_v0.16.0: an assert in ``preprocess``; dev: an AssertionError
while ``self.training``); core_v0.16.x's legacy ``GroupedMLP`` (``moe_use_legacy_grouped_gemm``)
asserts ``moe_latent_size is None`` (``transformer/moe/experts.py``; the class and the flag are gone in
core_v0.17.0, so later releases do not check it).
"""

from __future__ import annotations

from packaging.version import Version

from moeplan.i18n.messages import msg
from moeplan.rules.base import rule

#: first megatron-core release with ``moe_latent_size`` (tag core_v0.16.0, transformer_config.py)
LATENT_MOE_MIN_MCORE = Version("0.16.0")
#: first megatron-core release without the legacy GroupedMLP (core_v0.17.0: experts.py)
LEGACY_GROUPED_GEMM_GONE_MCORE = Version("0.17.0")


def _latent(s) -> int | None:
    """The model's ``moe_latent_size`` when it is a MoE model with one, else None."""
    m = s.model
    if m is None or not m.is_moe:
        return None
    return m.moe_latent_size


@rule(
    "moe.latent_needs_mcore",
    "megatron-core transformer/transformer_config.py, transformer/moe/moe_layer.py (core_v0.16.0)",
    "a latent MoE (moe_latent_size) needs megatron-core 0.16.0 or later",
    kind="unsupported",
)
def _latent_release(s, e):
    lat = _latent(s)
    if lat is None or s.mcore_version >= LATENT_MOE_MIN_MCORE:
        return None
    return [
        e.error(
            msg("latent_moe.needs_mcore", latent=lat, version=str(s.mcore_version), first=str(LATENT_MOE_MIN_MCORE)),
            msg("latent_moe.needs_mcore.fix", first=str(LATENT_MOE_MIN_MCORE)),
            "versions.megatron_core",
        )
    ]


@rule(
    "moe.latent_shared_expert_overlap",
    "megatron-core transformer/moe/moe_layer.py (core_v0.16.0 to dev)",
    "moe_shared_expert_overlap is refused in training with a latent MoE (moe_latent_size)",
)
def _latent_shared_overlap(s, e):
    lat = _latent(s)
    if lat is None or not s.layout.moe_shared_expert_overlap:
        return None
    return [
        e.error(
            msg("latent_moe.shared_expert_overlap", latent=lat),
            msg("latent_moe.shared_expert_overlap.fix"),
            "moe_shared_expert_overlap",
        )
    ]


@rule(
    "moe.latent_legacy_grouped_gemm",
    "megatron-core transformer/moe/experts.py (core_v0.16.x GroupedMLP)",
    "megatron-core 0.16's legacy grouped GEMM (moe_use_legacy_grouped_gemm) has no latent MoE",
)
def _latent_legacy_gemm(s, e):
    lat = _latent(s)
    legacy = s.input.unmodelled_keys.get("moe_use_legacy_grouped_gemm") is True  # a key moeplan carries as written
    if lat is None or not legacy or s.mcore_version >= LEGACY_GROUPED_GEMM_GONE_MCORE:
        return None
    return [
        e.error(
            msg("latent_moe.legacy_grouped_gemm", latent=lat, version=str(s.mcore_version)),
            msg("latent_moe.legacy_grouped_gemm.fix"),
            "moe_use_legacy_grouped_gemm",
        )
    ]
