"""DeepSeek-V4's features vs megatron-core releases and layouts: compressed sparse attention
(``experimental_attention_variant='dsv4_hybrid'``), manifold hyper-connections, hash-routed MoE layers.

Sources (megatron-core): ``transformer/transformer_config.py`` on the dev branch (@d48bd6b, which calls
itself 0.19.0): ``dsv4_hybrid`` and ``moe_n_hash_layers`` exist there (no release up to core_v0.19.0
and no main commit up to @d98e8a6, 2026-08-22, has them; pull request 5795's branch @234919d,
2026-07-23, one commit off main @bb5647a and reporting 0.19.0, has both, so a checkout named by its
commit alone is undecided); ``dsv4_hybrid`` asserts TP = 1; with hash layers and PP > 1 (GPT model) a
``pipeline_model_parallel_layout`` is required whose embedding stage holds every hash layer, and
``overlap_moe_expert_parallel_comm`` is refused; ``'mhc'`` recompute needs hyper-connections and
cannot be combined with ``'mlp'``. On main (0.20.0) hyper-connections exist but refuse MTP ("Please
disable MTP ... when using hyper connections"); the dev branch builds MTP with hyper-connections.
"""

from __future__ import annotations

import re

from packaging.version import Version

from moeplan.i18n.messages import msg
from moeplan.rules.base import is_dev_build, rule
from moeplan.structure.stages import LayoutSyntaxError, parse_layout

#: the first megatron-core release with hyper-connections (main's ``enable_hyper_connections``)
HYPER_CONNECTIONS_MCORE = Version("0.20.0")


def _dev_features(m, mcore: Version) -> list[str]:
    """The model's features the scenario's megatron-core cannot build off the dev branch: DeepSeek-V4's
    attention and hash routing (dev only); hyper-connections before main's 0.20.0."""
    out = []
    if m.num_residual_streams > 1 and mcore < HYPER_CONNECTIONS_MCORE:
        out.append(f"enable_hyper_connections (num_residual_streams {m.num_residual_streams})")
    if m.is_dsv4:
        out.append("experimental_attention_variant dsv4_hybrid (csa_compress_ratios)")
    if m.moe_n_hash_layers:
        out.append(f"moe_n_hash_layers {m.moe_n_hash_layers}")
    return out


@rule(
    "dsv4.needs_dev_branch",
    "megatron-core dev @d48bd6b transformer/transformer_config.py (dsv4_hybrid, moe_n_hash_layers); "
    "core_v0.19.0 and main up to @d98e8a6 (2026-08-22) have neither; pull request 5795's branch "
    "@234919d (2026-07-23, one commit off main @bb5647a) has both",
    "DeepSeek-V4's compressed sparse attention and hash-routed MoE layers are in no megatron-core release and not "
    "on main, only on the dev branch and branches that add them (hyper-connections: main 0.20.0 or the dev branch)",
    kind="unsupported",
)
def _dev_branch(s, e):
    m = s.model
    if m is None or is_dev_build(s):
        return None
    features = _dev_features(m, s.mcore_version)
    if not features:
        return None
    text = ", ".join(features)
    fix = msg("dsv4.needs_dev_branch.fix")
    if s.versions.get("megatron_core") is None:
        return [e.warning(msg("dsv4.dev_branch_unstated", features=text), fix, "versions.megatron_core")]
    version = s.versions.get("megatron_core")
    commit = _checkout_commit(version)
    if commit is not None:
        found = msg("dev_checkouts.dsv4_checkout_unknown", features=text, version=str(version), commit=commit)
        return [e.warning(found, fix, "versions.megatron_core")]
    return [e.error(msg("dsv4.needs_dev_branch", features=text, version=str(version)), fix, "versions.megatron_core")]


def _checkout_commit(version: Version) -> str | None:
    """The commit a megatron-core version names in its local label (``0.19.0+234919d40f`` → ``234919d40f``,
    the hash a checkout's ``package_info`` appends), None for a release: a checkout of a commit may be
    of a branch that has DeepSeek-V4's features (pull request 5795's branch @234919d, off main), which
    its number does not say."""
    local = str(version.local or "")
    return local if re.fullmatch(r"[0-9a-f]{7,40}", local) else None


@rule(
    "dsv4.tensor_parallel_one",
    "megatron-core dev @d48bd6b transformer/transformer_config.py: 'DSv4 Hybrid Attention only supports TP size 1.'",
    "DeepSeek-V4's attention runs with TP = 1 only",
)
def _tp_one(s, e):
    m = s.model
    if m is None or not m.is_dsv4 or s.tp == 1:
        return None
    return [e.error(msg("dsv4.tp_not_one", tp=s.tp), msg("dsv4.tp_not_one.fix"), "tensor_model_parallel_size")]


def _embedding_stage_layers(layout) -> int | None:
    """Decoder layers in the layout's first virtual stage (the embedding's), None when it does not parse."""
    try:
        stages = parse_layout(layout)
    except LayoutSyntaxError:
        return None
    return stages[0].count("t") if stages else 0


@rule(
    "dsv4.hash_layers_on_embedding_stage",
    "megatron-core dev @d48bd6b transformer/transformer_config.py (moe_n_hash_layers: "
    "pipeline_model_parallel_layout required with PP > 1; every hash layer in the embedding's virtual stage; "
    "no overlap_moe_expert_parallel_comm)",
    "hash-routed MoE layers need, with PP > 1, a pipeline layout whose embedding stage holds them all, "
    "and no expert-parallel communication overlap",
)
def _hash_layers(s, e):
    m = s.model
    if m is None or not m.moe_n_hash_layers:
        return None
    n, lay, out = m.moe_n_hash_layers, s.layout, []
    if lay.overlap_moe_expert_parallel_comm:
        out.append(
            e.error(
                msg("dsv4.hash_layers_no_ep_overlap", n=n),
                msg("dsv4.hash_layers_no_ep_overlap.fix"),
                "overlap_moe_expert_parallel_comm",
            )
        )
    if s.pp <= 1:
        return out
    if lay.pipeline_model_parallel_layout is None:
        out.append(
            e.error(
                msg("dsv4.hash_layers_need_layout", n=n, pp=s.pp),
                msg("dsv4.hash_layers_need_layout.fix", n=n),
                "pipeline_model_parallel_layout",
            )
        )
        return out
    first = _embedding_stage_layers(lay.pipeline_model_parallel_layout)
    if first is not None and first < n:
        out.append(
            e.error(
                msg("dsv4.hash_layers_off_embedding_stage", n=n, first=first),
                msg("dsv4.hash_layers_need_layout.fix", n=n),
                "pipeline_model_parallel_layout",
            )
        )
    return out


@rule(
    "dsv4.mtp_with_hyper_connections",
    "megatron-core main (0.20.0) transformer/transformer_config.py: 'Please disable MTP (set "
    "mtp_num_layers=None) when using hyper connections'; dev @d48bd6b builds MTP with hyper-connections",
    "hyper-connections with MTP layers need megatron-core's dev branch; released main refuses MTP with them",
)
def _mtp_hc(s, e):
    m = s.model
    if m is None or m.num_residual_streams <= 1 or s.mtp_num_layers <= 0 or is_dev_build(s):
        return None
    if s.versions.get("megatron_core") is None or s.mcore_version < HYPER_CONNECTIONS_MCORE:
        return None  # no hyper-connections at all there: dsv4.needs_dev_branch / the version says so
    return [
        e.error(
            msg("dsv4.mtp_with_hyper_connections", mtp=s.mtp_num_layers, version=str(s.mcore_version)),
            msg("dsv4.mtp_with_hyper_connections.fix"),
            "mtp_num_layers",
        )
    ]


@rule(
    "dsv4.mhc_recompute",
    "megatron-core dev @d48bd6b transformer/transformer_config.py (recompute_modules 'mhc': requires "
    "enable_hyper_connections; cannot be used with 'mlp')",
    "the 'mhc' recompute module needs hyper-connections and excludes 'mlp'",
)
def _mhc_recompute(s, e):
    mods = s.layout.recompute_modules or []
    m = s.model
    if "mhc" not in mods or m is None:
        return None
    if m.num_residual_streams <= 1:
        return [e.error(msg("dsv4.mhc_without_hyper_connections"), msg("dsv4.mhc_drop.fix"), "recompute_modules")]
    if "mlp" in mods:
        return [e.error(msg("dsv4.mhc_with_mlp"), msg("dsv4.mhc_with_mlp.fix"), "recompute_modules")]
    return None
