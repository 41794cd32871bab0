"""``moeplan fit``: the smallest changes that make a layout fit, cheapest in step time first.

Single changes to the user's scenario (world size, sequence length and global batch size held):
each rung of the recompute ladder beyond the current one (selective modules, cheapest per GiB first,
then full), optimizer CPU offload at 0.25 / 0.5 / 1.0 of the state, CP×2, PP×2 (with a legal split),
EP×2, TP×2 (with SP), ETP = TP, MBS/2, and an FP8 recipe the GPU runs (MXFP8 on Blackwell,
blockwise FP8 on Hopper). Each is checked by every rule, its peak memory estimated and, with a global
batch size, its step time. Pairs of legal single changes that are not enough alone are tried too
(two cheap changes, e.g. selective recompute with optimizer offload, can cost less than one large
one); when nothing fits, the planner's best layout for the same model, GPUs and batch is proposed.
"""

from __future__ import annotations

import copy
import itertools

from moeplan.errors import InputError
from moeplan.model.memory import estimate_memory
from moeplan.model.step import estimate_step
from moeplan.plan.space import RECOMPUTE_KEYS, output_stage_layers, pipeline_split, recompute_ladder, with_sections
from moeplan.rules import validate
from moeplan.spec.scenario import load_scenario
from moeplan.units import GIB_BYTES


def _changes(data: dict, s) -> list[tuple[str, dict]]:
    """(label, {section: {key: value}}) single changes; value None removes the key."""
    m, lay = s.model, s.layout
    out: list[tuple[str, dict]] = []
    cur_rank = -1
    ladder = [r for r in recompute_ladder(m) if "optimizer_cpu_offload" not in r[1]]
    if lay.recompute_granularity == "full":
        cur_rank = len(ladder) - 1
    elif lay.recompute_granularity == "selective":
        mods = set(lay.recompute_modules or ["core_attn"])
        for i, (_, keys) in enumerate(ladder):
            if set(keys.get("recompute_modules") or []) <= mods:
                cur_rank = max(cur_rank, i)
    for i, (name, keys) in enumerate(ladder):
        if i <= max(cur_rank, 0):
            continue
        if keys.get("recompute_granularity") == "selective" and lay.recompute_granularity == "selective":
            extra = [x for x in keys["recompute_modules"] if x not in (lay.recompute_modules or [])]
            keys = {**keys, "recompute_modules": list(lay.recompute_modules or []) + extra}
        ch = {k: None for k in RECOMPUTE_KEYS}
        ch.update(keys)
        out.append((f"recompute {name}", {"layout": ch}))
    if not lay.optimizer_cpu_offload:
        for frac in (0.25, 0.5, 1.0):
            out.append(
                (
                    f"optimizer offload {frac:g}",
                    {
                        "layout": {
                            "optimizer_cpu_offload": True,
                            "optimizer_offload_fraction": frac,
                            "use_precision_aware_optimizer": True,
                        }
                    },
                )
            )
    split_reset = {
        "pipeline_model_parallel_layout": None,
        "account_for_embedding_in_pipeline_split": None,
        "account_for_loss_in_pipeline_split": None,
        "num_layers_in_first_pipeline_stage": None,
        "num_layers_in_last_pipeline_stage": None,
    }
    if s.dp and s.dp % 2 == 0:
        out.append((f"CP {s.cp} → {s.cp * 2}", {"layout": {"context_parallel_size": s.cp * 2}}))
        tail = output_stage_layers(m, s.training.seq_length, 1, s.mtp_num_layers)
        split = pipeline_split(m.num_layers, s.pp * 2, 1, s.mtp_num_layers, tail)
        if split is not None:
            ch = {**split_reset, "pipeline_model_parallel_size": s.pp * 2, "virtual_pipeline_model_parallel_size": None}
            ch.update(split)
            out.append((f"PP {s.pp} → {s.pp * 2}", {"layout": ch}))
        if s.tp * 2 <= (s.gpu.scaleup_domain_gpus if s.gpu else 8):
            out.append(
                (
                    f"TP {s.tp} → {s.tp * 2} (SP)",
                    {"layout": {"tensor_model_parallel_size": s.tp * 2, "sequence_parallel": True}},
                )
            )
    if m.is_moe and s.edp and s.edp % 2 == 0 and m.num_moe_experts and m.num_moe_experts % (s.ep * 2) == 0:
        out.append((f"EP {s.ep} → {s.ep * 2}", {"layout": {"expert_model_parallel_size": s.ep * 2}}))
    if m.is_moe and s.tp > 1 and s.etp != s.tp and s.edp and s.edp % (s.tp // s.etp) == 0:
        out.append((f"ETP {s.etp} → {s.tp}", {"layout": {"expert_tensor_parallel_size": s.tp}}))
    mbs = s.training.micro_batch_size or 1
    if mbs > 1:
        out.append((f"MBS {mbs} → {mbs // 2}", {"training": {"micro_batch_size": mbs // 2}}))
    if s.training.precision == "bf16" and s.gpu is not None:
        fp8 = "mxfp8" if s.gpu.supports_mxfp8 else ("fp8-blockwise" if s.gpu.supports_te_fp8 else None)
        if fp8:
            out.append((f"precision bf16 → {fp8}", {"training": {"precision": fp8}}))
    return out


def _apply(data: dict, change: dict) -> dict:
    d = copy.deepcopy(data)
    for sec, vals in change.items():
        node = d.setdefault(sec, {})
        for k, v in vals.items():
            if v is None:
                node.pop(k, None)
            else:
                node[k] = v
    return d


def _merge(a: dict, b: dict) -> dict | None:
    """Two changes together; None when they set the same key differently."""
    out = copy.deepcopy(a)
    for sec, vals in b.items():
        node = out.setdefault(sec, {})
        for k, v in vals.items():
            if k in node and node[k] != v:
                return None
            node[k] = v
    return out


def _split_fix(s) -> dict | None:
    """The uneven first/last-stage split for a layout whose layers do not divide by PP (no VPP, no
    layout string or stage sizes given), as a change; None when it divides or cannot be split."""
    from moeplan.rules.pipeline import uneven_split

    lay, m = s.layout, s.model
    if s.pp < 2 or s.vpp > 1 or m is None or not m.num_layers:
        return None
    given = (lay.num_layers_in_first_pipeline_stage, lay.num_layers_in_last_pipeline_stage)
    if lay.pipeline_model_parallel_layout or any(v is not None for v in given):
        return None
    if lay.account_for_embedding_in_pipeline_split or lay.account_for_loss_in_pipeline_split:
        return None  # uneven stage sizes cannot be combined with account_for_*
    if m.num_layers % s.pp == 0:
        return None
    split = uneven_split(m.num_layers, s.pp)
    if split is None:
        return None
    first, last, k = split
    if max(first, last) > k:
        return None  # the ends would carry more than a middle stage: a layout string is needed (moeplan plan)
    return {"layout": {"num_layers_in_first_pipeline_stage": first, "num_layers_in_last_pipeline_stage": last}}


def fit_layout(data: dict, *, headroom_gib: float | None = None, top: int = 8, constants=None) -> dict:
    """Changes that make the scenario fit, least step-time cost first.

    Returns:
        ``{peak_gib, capacity_gib, limit_gib, fits_already, fixes[], not_enough[], replanned,
        rejected[], check_errors[], applied_first}``: ``replanned`` when no single change or pair fits
        (the last fix is the planner's layout); ``applied_first`` the uneven pipeline split applied
        before anything else when the layers do not divide by PP, else None; each fix: ``change``, ``peak_gib``, ``saved_gib``, ``step_time_change_pct`` (None without a global
        batch size), ``tokens_per_s_per_gpu``, ``scenario`` (the changed mapping, for ``check``/``export``).

    Raises:
        InputError: a scenario that cannot be estimated (field named).
    """
    data = with_sections(data)
    s0 = load_scenario(data)
    split_fix = _split_fix(s0)
    if split_fix is not None:
        # layers that do not divide by PP: apply `check`'s own fix first, then look for memory
        data = _apply(data, split_fix)
        s0 = load_scenario(data)
    if s0.gpu is None:
        raise InputError("system.gpu", None, "a GPU: fitting needs its memory")
    if headroom_gib is not None and not (0 <= headroom_gib < s0.gpu.usable_hbm_gib):
        raise InputError(
            "--headroom-gib", headroom_gib, f"0 to less than the GPU's usable {s0.gpu.usable_hbm_gib:.1f} GiB"
        )
    mem0 = estimate_memory(s0)
    cap = mem0.capacity_bytes
    margin = headroom_gib * GIB_BYTES if headroom_gib is not None else 0.05 * cap
    limit = cap - margin
    timed = s0.training.global_batch_size is not None and not validate(s0).errors
    t0 = estimate_step(s0, constants).step_time_s if timed else None
    base = {
        "peak_gib": mem0.peak_bytes / GIB_BYTES,
        "capacity_gib": cap / GIB_BYTES,
        "limit_gib": limit / GIB_BYTES,
        "fits_already": mem0.peak_bytes <= limit,
        "fixes": [],
        "not_enough": [],
        "replanned": False,
        "rejected": [],
        "check_errors": [f"{f.rule_id}: {f.message}" for f in validate(s0).errors],
        "applied_first": (
            None
            if split_fix is None
            else "uneven pipeline split (the check's fix for pipeline.num_layers_divisible_by_pp): "
            + ", ".join(f"{k}={v}" for k, v in split_fix["layout"].items())
        ),
    }

    def trial(label: str, change: dict) -> dict | None:
        d = _apply(data, change)
        try:
            s = load_scenario(d)
        except InputError as exc:
            base["rejected"].append({"change": label, "rule_id": "input", "message": str(exc)})
            return None
        chk = validate(s)
        if chk.errors:
            base["rejected"].append(
                {"change": label, "rule_id": chk.errors[0].rule_id, "message": chk.errors[0].message}
            )
            return None
        mem = estimate_memory(s)
        row = {
            "change": label,
            "peak_gib": mem.peak_bytes / GIB_BYTES,
            "saved_gib": (mem0.peak_bytes - mem.peak_bytes) / GIB_BYTES,
            "step_time_change_pct": None,
            "tokens_per_s_per_gpu": None,
            "scenario": d,
        }
        if timed:
            th = estimate_step(s, constants)
            row["step_time_change_pct"] = 100 * (th.step_time_s / t0 - 1)
            row["tokens_per_s_per_gpu"] = th.tokens_per_s_per_gpu
        row["fits"] = mem.peak_bytes <= limit and mem.verdict != "does-not-fit"
        return row

    singles = _changes(data, s0)
    legal: list[tuple[str, dict, dict]] = []
    for label, ch in singles:
        row = trial(label, ch)
        if row is None:
            continue
        legal.append((label, ch, row))
        (base["fixes"] if row["fits"] else base["not_enough"]).append(row)
    if not base["fits_already"]:
        # pairs of changes that are not enough alone: two cheap ones (selective recompute + optimizer
        # offload) can cost less than one big one (full recompute) that fits by itself
        short = [x for x in legal if not x[2]["fits"]]
        for (la, ca, _), (lb, cb, _) in itertools.combinations(short, 2):
            both = _merge(ca, cb)
            if both is None:
                continue
            row = trial(f"{la} + {lb}", both)
            if row is not None and row["fits"]:
                base["fixes"].append(row)

    if not base["fixes"] and not base["fits_already"]:
        # no small change is enough: the planner's best layout at the same size, model and batch
        from moeplan.plan import plan

        req = {k: v for k, v in data.items() if k != "layout"}
        req["training"] = {k: v for k, v in (data.get("training") or {}).items() if k != "micro_batch_size"}
        res = plan(req, top=1, headroom_gib=headroom_gib, constants=constants)
        if res.candidates:
            c = res.candidates[0]
            from moeplan.plan import describe

            row = {
                "change": "re-plan the layout (moeplan plan): " + describe(c),
                "peak_gib": c.peak_gib,
                "saved_gib": (mem0.peak_bytes / GIB_BYTES) - c.peak_gib,
                "step_time_change_pct": (100 * (c.throughput["step_time_s"] / t0 - 1)) if t0 else None,
                "tokens_per_s_per_gpu": c.tokens_per_s_per_gpu,
                "scenario": c.data,
                "fits": True,
            }
            base["fixes"].append(row)
            base["replanned"] = True

    def cost(r: dict) -> tuple:
        t = r["step_time_change_pct"]
        return (t if t is not None else 0.0, -r["saved_gib"], r["change"])

    if base["fits_already"]:
        base["fixes"] = [r for r in base["fixes"] if r["saved_gib"] > 0]
    base["fixes"].sort(key=cost)
    base["fixes"] = base["fixes"][:top]
    base["not_enough"].sort(key=lambda r: -r["saved_gib"])
    return base
