"""Kimi-K3 layouts as Megatron Bridge builds them (main 067f987, Aug 2026; ``models/kimi/``).

Kimi-K3 is not in any Megatron Bridge release up to v0.6.0 (NeMo 26.08): ``KimiK3Bridge`` first
appears in commit 2f0f8c80e ("add Kimi K3 language backbone support") after the v0.6.0 tag, and its
layers (Kimi Delta Attention, AttnRes, the latent-MoE norm) live in Bridge, not in megatron-core:
Megatron-LM and megatron-core alone cannot build the model.

- ``kimi_k3_layers.py::KimiK3Attention.__init__``: "Kimi K3 KDA context parallelism is not supported
  yet" (a ValueError when a KDA layer is built with CP > 1); ``_init_kda`` / ``_init_mla``: KDA heads
  and MLA heads divisible by TP (the KDA heads are checked with the Gated DeltaNet heads by
  ``attention.gdn_heads_vs_tp_cp``, the MLA heads by the attention-heads rule).
- ``kimi_k3_spec.py::build_kimi_k3_spec``: "Kimi K3 does not support virtual pipeline parallelism yet".
"""

from __future__ import annotations

from packaging.version import Version

from moeplan.i18n.messages import msg
from moeplan.rules.base import rule, set_key

#: the last Megatron Bridge release without Kimi-K3 (``KimiK3Bridge`` is on main after it)
KIMI_K3_LAST_BRIDGE_WITHOUT = Version("0.6.0")
#: frameworks that build megatron-core models without Megatron Bridge's model code
_NO_BRIDGE_FRAMEWORKS = ("megatron-core", "megatron-lm")


def _is_kimi_k3(m) -> bool:
    return m is not None and bool(m.kimi_delta_attention)


@rule(
    "kimi_k3.kda_no_cp",
    "[Bridge main] models/kimi/kimi_k3_layers.py (KimiK3Attention.__init__)",
    "Kimi Delta Attention layers are built only with context parallelism 1",
    kind="unsupported",
)
def _kda_cp(s, e):
    if not _is_kimi_k3(s.model) or s.cp == 1:
        return None
    n = sum(1 for k in s.model.attention_kinds or () if k == "linear")
    return [
        e.error(
            msg("kimi_k3.kda_no_cp", cp=s.cp, layers=n),
            set_key("context_parallel_size", 1),
            "context_parallel_size",
        )
    ]


@rule(
    "kimi_k3.no_vpp",
    "[Bridge main] models/kimi/kimi_k3_spec.py (build_kimi_k3_spec)",
    "Kimi-K3's layer spec refuses virtual pipeline parallelism",
    kind="unsupported",
)
def _no_vpp(s, e):
    if not _is_kimi_k3(s.model) or s.layout.virtual_pipeline_model_parallel_size is None:
        return None
    return [
        e.error(
            msg("kimi_k3.no_vpp", vpp=s.layout.virtual_pipeline_model_parallel_size),
            set_key("virtual_pipeline_model_parallel_size", "null"),
            "virtual_pipeline_model_parallel_size",
        )
    ]


@rule(
    "kimi_k3.bridge_release",
    "[Bridge main] models/kimi/kimi_k3_bridge.py (commit 2f0f8c80e, after v0.6.0)",
    "Kimi-K3 is built by Megatron Bridge main after v0.6.0 only; megatron-core and Megatron-LM alone have no "
    "Kimi Delta Attention",
)
def _bridge_release(s, e):
    if not _is_kimi_k3(s.model):
        return None
    if s.framework in _NO_BRIDGE_FRAMEWORKS:
        return [
            e.error(
                msg("kimi_k3.needs_bridge", framework=s.framework),
                msg("kimi_k3.needs_bridge.fix"),
                "framework",
                kind="unsupported",
            )
        ]
    if s.bridge_version <= KIMI_K3_LAST_BRIDGE_WITHOUT:
        return [
            e.warning(
                msg("kimi_k3.bridge_release", version=str(s.bridge_version)),
                msg("kimi_k3.bridge_release.fix"),
                "versions.megatron_bridge",
            )
        ]
    return None
