"""World size, parallel folding and batch rules (``megatron_facts.md`` §4.1, vendored in ``tests/data/reference``)."""

from __future__ import annotations

import math

from packaging.version import Version

from moeplan.catalog.containers import lookup_container
from moeplan.i18n.messages import Items, Message, msg
from moeplan.inputs.resolved import NEWEST_MCORE
from moeplan.inputs.versions import CUDA_GRAPH_MODULES_MCORE, container_release, parse_version, release_version
from moeplan.rules.base import both, is_dev_build, rule, why_for_dp, why_microbatch_count

#: layout keys that appear in a later megatron-core than 0.16 (§3.13) → the first version that has
#: each: :func:`_keys_version` rejects them for older versions and the export
#: (:mod:`moeplan.io.export`, through :mod:`moeplan.io.keys`) leaves them out
KEY_MIN_MCORE: dict[str, Version] = {
    "moe_expert_rank_capacity_factor": Version("0.18.0"),
    "moe_paged_stash": Version("0.18.0"),
    # absent from megatron-core 0.16.1's TransformerConfig (oracle test); needed only with the rank budget
    # of 0.18, so exported from there
    "use_transformer_engine_op_fuser": Version("0.18.0"),
    "cuda_graph_modules": CUDA_GRAPH_MODULES_MCORE,
    # in no release up to 0.20.0 (megatron-core dev branch @d48bd6b only): refused for and never exported
    # to a release whose TransformerConfig would reject the unknown field (sequence.cp_partition_mode)
    "cp_partition_mode": Version("0.21.0"),
}
#: keys of :data:`KEY_MIN_MCORE` that megatron-core's dev branch has before any release: a stated dev
#: build (:func:`moeplan.rules.base.is_dev_build`) has them, and with no version stated they are not
#: refused (the key tables' newest source is the dev branch; the key's own rule warns)
DEV_BRANCH_KEYS = frozenset({"cp_partition_mode"})


def _divisors_hint(w: int, d: int) -> Message:
    """A world size that ``d`` divides, with the next one above ``w`` GPUs as the example."""
    return msg("world.multiple_world_size", d=d, example=math.ceil(w / d) * d)


@rule(
    "world.dense_grid_divides_world",
    "[PS] parallel_state.initialize_model_parallel; [B-CFG]",
    "W must be divisible by TP·PP·CP; DP = W/(TP·PP·CP)",
)
def _dense_grid(s, e):
    if not s.num_gpus:
        return [e.missing("system.num_gpus")]
    d = s.tp * s.pp * s.cp
    if s.num_gpus % d:
        return [
            e.error(
                msg("world.gpus_not_divisible_by_dense_grid", gpus=s.num_gpus, tp=s.tp, pp=s.pp, cp=s.cp, product=d),
                msg("world.gpus_not_divisible_by_dense_grid.fix", world=_divisors_hint(s.num_gpus, d), gpus=s.num_gpus),
                "system.num_gpus",
                "tensor_model_parallel_size",
                "pipeline_model_parallel_size",
                "context_parallel_size",
            )
        ]


@rule(
    "world.expert_grid_divides_world",
    "[PS] parallel_state.initialize_model_parallel (MoE parallel folding)",
    "W must be divisible by ETP·EP·PP (effective ETP); EDP = W/(ETP·EP·PP)",
)
def _expert_grid(s, e):
    if s.ep == 1 and s.etp == 1:
        return None
    if not s.num_gpus:
        return [e.missing("system.num_gpus")]
    d = s.etp * s.ep * s.pp
    if s.num_gpus % d:
        n, etp, ep, pp = s.num_gpus, s.etp, s.ep, s.pp
        text = (
            msg("world.gpus_not_divisible_by_expert_grid", gpus=n, etp=etp, ep=ep, pp=pp, product=d)
            if "expert_tensor_parallel_size" in s.stated
            else msg(
                "world.gpus_not_divisible_by_expert_grid_etp_unset",
                gpus=n,
                etp=etp,
                ep=ep,
                pp=pp,
                product=d,
                framework=s.framework,
            )
        )
        return [
            e.error(
                text,
                msg(
                    "world.gpus_not_divisible_by_expert_grid.fix", gpus=s.num_gpus, world=_divisors_hint(s.num_gpus, d)
                ),
                "system.num_gpus",
                "expert_model_parallel_size",
                "expert_tensor_parallel_size",
                "pipeline_model_parallel_size",
            )
        ]


@rule(
    "world.dist_optimizer_instances_divide_dp_cp",
    "[PS] parallel_state.initialize_model_parallel",
    "DP·CP must be divisible by num_distributed_optimizer_instances",
)
def _dopt_instances(s, e):
    n = s.layout.num_distributed_optimizer_instances
    if n == 1:
        return None
    if s.dp is None:
        return [e.missing_integer_dp_world()]
    if (s.dp * s.cp) % n:
        return [
            e.error(
                msg("world.dp_cp_not_divisible_by_optimizer_instances", dp=s.dp, cp=s.cp, product=s.dp * s.cp, n=n),
                msg("world.dp_cp_not_divisible_by_optimizer_instances.fix"),
                "num_distributed_optimizer_instances",
            )
        ]


@rule(
    "batch.global_batch_divisible",
    "[NMC] num_microbatches_calculator.py; [ARGS]",
    "GBS must be divisible by MBS·DP; microbatches = GBS/(MBS·DP)",
)
def _gbs(s, e):
    t = s.training
    if t.global_batch_size is None:
        return [e.missing("training.global_batch_size")]
    if s.dp is None:  # no world size, or one TP·PP·CP does not divide (world.* reports that)
        return [e.missing("system.num_gpus", why_for_dp()) if s.num_gpus is None else e.missing_integer_dp_world()]
    mbs = t.micro_batch_size or 1
    d = mbs * s.dp
    if t.global_batch_size % d:
        return [
            e.error(
                msg("batch.global_batch_not_divisible", gbs=t.global_batch_size, mbs=mbs, dp=s.dp, d=d),
                msg(
                    "batch.global_batch_not_divisible.fix",
                    lower=max(d, t.global_batch_size // d * d),
                    upper=math.ceil(t.global_batch_size / d) * d,
                ),
                "training.global_batch_size",
                "training.micro_batch_size",
            )
        ]


@rule(
    "batch.interleaved_microbatches",
    "[SCH] pipeline_parallel/schedules.py (interleaved 1F1B)",
    "with VPP: PP ≤ microbatch group ≤ microbatches, and microbatches mod group is 0 or ≥ PP",
)
def _vpp_microbatches(s, e):
    if s.vpp <= 1 or s.pp <= 1:
        return None
    t = s.training
    if t.global_batch_size is None or s.dp is None:
        return [e.missing(both("training.global_batch_size", "system.num_gpus"), why_microbatch_count())]
    mbs = t.micro_batch_size or 1
    if t.global_batch_size % (mbs * s.dp):
        return None
    n_mb = t.global_batch_size // (mbs * s.dp)
    group = s.layout.microbatch_group_size_per_vp_stage or s.pp
    if n_mb < s.pp:
        return [
            e.error(
                msg(
                    "batch.too_few_interleaved_microbatches",
                    pp=s.pp,
                    gbs=t.global_batch_size,
                    mbs=mbs,
                    dp=s.dp,
                    n=n_mb,
                ),
                msg("batch.too_few_interleaved_microbatches.fix", gbs=s.pp * mbs * s.dp),
                "training.global_batch_size",
                "virtual_pipeline_model_parallel_size",
            )
        ]
    if group < s.pp or group > n_mb:
        return [
            e.error(
                msg("batch.microbatch_group_out_of_range", group=group, pp=s.pp, n=n_mb),
                msg("batch.microbatch_group_out_of_range.fix", pp=s.pp),
                "microbatch_group_size_per_vp_stage",
            )
        ]
    rem = n_mb % group
    if rem and rem < s.pp:
        return [
            e.error(
                msg("batch.microbatch_group_remainder", n=n_mb, group=group, rem=rem, pp=s.pp),
                msg("batch.microbatch_group_remainder.fix", group=group),
                "training.global_batch_size",
            )
        ]


@rule("pipeline.vpp_requires_pp", "[PS] parallel_state; [MPC]", "VPP > 1 requires PP > 1")
def _vpp_pp(s, e):
    v = s.layout.virtual_pipeline_model_parallel_size
    if v is not None and v > 1 and s.pp == 1:
        return [
            e.error(
                msg("pipeline.vpp_without_pp", vpp=v),
                msg("pipeline.vpp_without_pp.fix"),
                "virtual_pipeline_model_parallel_size",
                "pipeline_model_parallel_size",
            )
        ]
    if v is not None and v > 1 and s.pp == 2 and s.framework == "megatron-core":
        return [
            e.warning(
                msg("pipeline.vpp_with_pp2_needs_overlap"),
                msg("pipeline.vpp_with_pp2_needs_overlap.fix"),
                "virtual_pipeline_model_parallel_size",
            )
        ]


@rule(
    "env.cuda_device_max_connections",
    "[ARGS] arguments.py (Megatron-LM)",
    "on Hopper and older with TP > 1 or CP > 1, Megatron-LM requires CUDA_DEVICE_MAX_CONNECTIONS=1 "
    "(only a warning with FSDP or EP overlap)",
)
def _max_connections(s, e):
    val = s.environment.get("CUDA_DEVICE_MAX_CONNECTIONS")
    if val is None or val == "1" or s.gpu is None or s.gpu.compute_capability is None:
        return None
    if s.gpu.compute_capability >= 10.0 or (s.tp == 1 and s.cp == 1):
        return None
    gpu, tp, cp = s.gpu.id, s.tp, s.cp
    fix = msg("env.max_connections_not_one.fix")
    relaxed = s.layout.use_megatron_fsdp or s.layout.overlap_moe_expert_parallel_comm
    if s.framework == "megatron-core" and not relaxed:
        text = msg("env.max_connections_not_one_asserted", value=val, gpu=gpu, tp=tp, cp=cp)
        return [e.error(text, fix, "environment")]
    return [e.warning(msg("env.max_connections_not_one", value=val, gpu=gpu, tp=tp, cp=cp), fix, "environment")]


@rule(
    "scenario.inputs_missing",
    "moeplan",
    "names the scenario inputs that are missing, since every rule needing them is skipped",
)
def _inputs(s, e):
    missing = []
    if s.model is None:
        missing.append(msg("scenario.not_checked_for_lack_of_input.model"))
    if s.gpu is None:
        missing.append(msg("scenario.not_checked_for_lack_of_input.gpu"))
    if not s.num_gpus:
        missing.append(msg("scenario.not_checked_for_lack_of_input.num_gpus"))
    if s.training.seq_length is None:
        missing.append(msg("scenario.not_checked_for_lack_of_input.seq_length"))
    if missing:
        return [e.info(msg("scenario.not_checked_for_lack_of_input", inputs=Items(missing)))]


@rule(
    "scenario.versions",
    "moeplan version table",
    "versions newer than the newest moeplan knows are checked as the newest",
)
def _versions(s, e):
    newest = release_version(None, NEWEST_MCORE)
    if s.mcore_version > newest:
        return [
            e.info(
                msg("scenario.version_newer_than_known", version=str(s.mcore_version), newest=NEWEST_MCORE),
                "versions.megatron_core",
            )
        ]


@rule(
    "scenario.versions_differ_from_container",
    "moeplan container table (catalog/data/containers.yaml: Megatron Bridge software-versions.md)",
    "a stated package version that differs from the one the stated container ships is used as stated",
)
def _versions_vs_container(s, e):
    rel = container_release(s.input.versions.container)
    if rel is None:
        return None
    row = lookup_container(*rel)[0]
    if row is None:
        return None
    out = []
    for key, shipped in row.packages.items():
        stated = s.versions.get(key) if s.versions.sources.get(key) == f"versions.{key}" else None
        if stated is not None and stated != parse_version(shipped, f"container {rel[1]} table ({key})"):
            text = msg(
                "scenario.version_differs_from_container",
                key=key,
                stated=str(stated),
                container=rel[1],
                shipped=shipped,
            )
            out.append(e.info(text, f"versions.{key}", "versions.container"))
    return out or None


@rule(
    "scenario.keys_vs_version",
    "megatron_facts.md §3.13 (version deltas)",
    "layout keys that the scenario's megatron-core version does not have",
)
def _keys_version(s, e):
    lay = s.layout
    out = []
    for key, first in KEY_MIN_MCORE.items():
        if key == "cuda_graph_modules":
            continue  # reported by graphs.impl_and_scope_values
        val = getattr(lay, key, None)
        if key in DEV_BRANCH_KEYS and (is_dev_build(s) or s.versions.get("megatron_core") is None):
            continue  # a dev build, or no version stated (the newest source moeplan reads, the dev branch,
            # has it): sequence.cp_partition_mode warns that no release has it
        if val not in (None, False) and s.mcore_version < first:
            out.append(
                e.error(
                    msg("scenario.key_needs_newer_mcore", key=key, version=str(first), scenario=str(s.mcore_version)),
                    msg("scenario.key_needs_newer_mcore.fix", key=key, version=str(first)),
                    key,
                )
            )
    return out


@rule(
    "world.tp_within_nvlink_domain",
    "Megatron-LM docs (tensor parallelism within a node); GPU catalog NVLink domain sizes",
    "TP larger than the NVLink domain puts every layer's TP collectives on the NIC",
)
def _tp_domain(s, e):
    if s.gpu is None or s.tp <= s.gpu.scaleup_domain_gpus:
        return None
    return [
        e.warning(
            msg("world.tp_beyond_nvlink_domain", tp=s.tp, domain=s.gpu.scaleup_domain_gpus, gpu=s.gpu.id),
            msg("world.tp_beyond_nvlink_domain.fix", domain=s.gpu.scaleup_domain_gpus),
            "tensor_model_parallel_size",
        )
    ]
