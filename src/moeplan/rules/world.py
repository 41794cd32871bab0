"""World size, parallel folding and batch rules (``megatron_facts.md`` §4.1)."""

from __future__ import annotations

import math

from moeplan.rules.base import rule
from moeplan.spec.scenario import NEWEST_MCORE, parse_version

#: layout keys that appear in a later megatron-core than 0.16 (§3.13) → the first version that has
#: each: :func:`_keys_version` rejects them for older versions and the export
#: (:mod:`moeplan.io.export`, through :mod:`moeplan.io.keys`) leaves them out
KEY_MIN_MCORE: dict[str, tuple[int, int, int]] = {
    "moe_expert_rank_capacity_factor": (0, 18, 0),
    "moe_paged_stash": (0, 18, 0),
    # absent from megatron-core 0.16.1's TransformerConfig (oracle test); needed only with the rank budget
    # of 0.18, so exported from there
    "use_transformer_engine_op_fuser": (0, 18, 0),
    "cuda_graph_modules": (0, 18, 0),
    # in no release up to 0.20.0 (megatron-core dev branch @d48bd6b only): refused for and never exported
    # to a release whose TransformerConfig would reject the unknown field (sequence.cp_partition_mode)
    "cp_partition_mode": (0, 21, 0),
}


def _divisors_hint(w: int, d: int) -> str:
    return f"a world size that is a multiple of {d} (e.g. {math.ceil(w / d) * d})"


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
                f"num_gpus ({s.num_gpus}) is not divisible by TP·PP·CP = {s.tp}·{s.pp}·{s.cp} = {d}",
                f"use {_divisors_hint(s.num_gpus, d)} or change TP/PP/CP so their product divides {s.num_gpus}",
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
        etp_note = (
            ""
            if "expert_tensor_parallel_size" in s.stated
            else f" (ETP was unset and resolves to {s.etp} under {s.framework})"
        )
        return [
            e.error(
                f"num_gpus ({s.num_gpus}) is not divisible by ETP·EP·PP = {s.etp}·{s.ep}·{s.pp} = {d}{etp_note}",
                f"lower EP or ETP (ETP = 1 folds experts across TP ranks) so ETP·EP·PP divides {s.num_gpus}, "
                f"or use {_divisors_hint(s.num_gpus, d)}",
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
        return [e.missing("a world size that gives an integer DP")]
    if (s.dp * s.cp) % n:
        return [
            e.error(
                f"DP·CP = {s.dp}·{s.cp} = {s.dp * s.cp} is not divisible by num_distributed_optimizer_instances ({n})",
                "choose num_distributed_optimizer_instances dividing DP·CP",
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
    if s.dp is None:
        return [e.missing("system.num_gpus (for DP)")]
    mbs = t.micro_batch_size or 1
    d = mbs * s.dp
    if t.global_batch_size % d:
        return [
            e.error(
                f"global_batch_size ({t.global_batch_size}) is not divisible by micro_batch_size·DP = {mbs}·{s.dp} = {d}",
                f"use global_batch_size {max(d, t.global_batch_size // d * d)} or "
                f"{math.ceil(t.global_batch_size / d) * d}",
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
        return [e.missing("training.global_batch_size and system.num_gpus (microbatch count)")]
    mbs = t.micro_batch_size or 1
    if t.global_batch_size % (mbs * s.dp):
        return None
    n_mb = t.global_batch_size // (mbs * s.dp)
    group = s.layout.microbatch_group_size_per_vp_stage or s.pp
    if n_mb < s.pp:
        return [
            e.error(
                f"the interleaved schedule needs at least PP = {s.pp} microbatches; "
                f"GBS/(MBS·DP) = {t.global_batch_size}/({mbs}·{s.dp}) = {n_mb}",
                f"raise global_batch_size to at least {s.pp * mbs * s.dp} or drop VPP",
                "training.global_batch_size",
                "virtual_pipeline_model_parallel_size",
            )
        ]
    if group < s.pp or group > n_mb:
        return [
            e.error(
                f"microbatch_group_size_per_vp_stage ({group}) must lie in [PP, microbatches] = [{s.pp}, {n_mb}]",
                f"set it to {s.pp}",
                "microbatch_group_size_per_vp_stage",
            )
        ]
    rem = n_mb % group
    if rem and rem < s.pp:
        return [
            e.error(
                f"microbatches ({n_mb}) mod microbatch group ({group}) = {rem} is neither 0 nor ≥ PP ({s.pp})",
                f"make the microbatch count a multiple of {group}",
                "training.global_batch_size",
            )
        ]


@rule("pipeline.vpp_requires_pp", "[PS] parallel_state; [MPC]", "VPP > 1 requires PP > 1")
def _vpp_pp(s, e):
    v = s.layout.virtual_pipeline_model_parallel_size
    if v is not None and v > 1 and s.pp == 1:
        return [
            e.error(
                f"virtual_pipeline_model_parallel_size ({v}) needs pipeline_model_parallel_size > 1 (PP = 1)",
                "unset virtual_pipeline_model_parallel_size or use PP ≥ 2",
                "virtual_pipeline_model_parallel_size",
                "pipeline_model_parallel_size",
            )
        ]
    if v is not None and v > 1 and s.pp == 2 and s.framework == "megatron-core":
        return [
            e.warning(
                "Megatron-LM's argument check requires PP > 2 for VPP unless overlap_p2p_comm is on "
                "(Bridge turns it on automatically)",
                "set --overlap-p2p-communication",
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
    msg = (
        f"CUDA_DEVICE_MAX_CONNECTIONS={val} on {s.gpu.id} with TP = {s.tp}, CP = {s.cp}: kernels of the TP/CP "
        "communication overlap can be reordered"
    )
    fix = "export CUDA_DEVICE_MAX_CONNECTIONS=1"
    relaxed = s.layout.use_megatron_fsdp or s.layout.overlap_moe_expert_parallel_comm
    if s.framework == "megatron-core" and not relaxed:
        return [e.error(msg + " (Megatron-LM asserts it)", fix, "environment")]
    return [e.warning(msg, fix, "environment")]


@rule(
    "scenario.inputs_missing",
    "moeplan",
    "names the scenario inputs that are missing, since every rule needing them is skipped",
)
def _inputs(s, e):
    missing = []
    if s.model is None:
        missing.append("model (every model-dependent rule: heads, layers, experts, pipeline split)")
    if s.gpu is None:
        missing.append("system.gpu (GPU-dependent rules: precision, dispatcher backend)")
    if not s.num_gpus:
        missing.append("system.num_gpus (world-size and batch rules)")
    if s.training.seq_length is None:
        missing.append("training.seq_length (sequence alignment rules)")
    if missing:
        return [e.info("not checked for lack of input: " + "; ".join(missing))]


@rule(
    "scenario.versions",
    "moeplan version table",
    "versions newer than the newest moeplan knows are checked as the newest",
)
def _versions(s, e):
    newest = parse_version(NEWEST_MCORE, NEWEST_MCORE)
    if s.mcore_version > newest:
        return [
            e.info(
                f"megatron-core {'.'.join(map(str, s.mcore_version))} is newer than the newest moeplan knows "
                f"({NEWEST_MCORE}); its rules are checked as {NEWEST_MCORE}'s",
                "versions.megatron_core",
            )
        ]


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
        if val not in (None, False) and s.mcore_version < first:
            out.append(
                e.error(
                    f"{key} needs megatron-core ≥ {'.'.join(map(str, first))} "
                    f"(scenario: {'.'.join(map(str, s.mcore_version))})",
                    f"drop {key} or use megatron-core ≥ {'.'.join(map(str, first))}",
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
            f"TP = {s.tp} spans more than the {s.gpu.scaleup_domain_gpus}-GPU NVLink domain of {s.gpu.id}: every "
            "layer's TP all-gathers and reduce-scatters cross the NIC, several times slower than NVLink",
            f"keep TP ≤ {s.gpu.scaleup_domain_gpus} and add CP, PP or EP for memory",
            "tensor_model_parallel_size",
        )
    ]
