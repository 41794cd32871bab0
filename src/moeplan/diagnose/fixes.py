"""Memory fixes for a scenario that does not fit (or hit an OOM), ordered by estimated saving.

Each candidate is one change to the user's scenario mapping, the rest held fixed (world size, GBS,
sequence length): more selective recompute (``moe_act``, ``layernorm``, ``mla_up_proj`` on MLA models),
full recompute (uniform, 1 layer), CP×2, PP×2 (VPP and an explicit layout dropped; EP halved when
the expert grid would no longer divide the world), EP×2, TP×2 (with
SP), optimizer CPU offload (with the precision-aware optimizer it requires), MBS/2. A candidate that breaks a Megatron-Core rule is dropped. Savings are
our memory model's (peak over stages, bytes per GPU); the step-time change is the step-time model's
(a calibrated estimate, see docs/accuracy.md), so the ranking is "largest saving first" with the cost
shown beside it.
"""

from __future__ import annotations

import copy

from moeplan.errors import MoeplanError


def _layout(d: dict) -> dict:
    return d.setdefault("layout", {})


def _candidates(data: dict, s) -> list[tuple[str, dict]]:
    lay = s.layout
    out: list[tuple[str, dict]] = []
    mods = list(lay.recompute_modules or []) if lay.recompute_granularity == "selective" else []
    want = ["moe_act", "layernorm"] + (["mla_up_proj"] if s.model.multi_latent_attention else [])
    if s.model.is_moe is False:
        want = ["layernorm", "core_attn"]
    extra = [m for m in want if m not in mods]
    if lay.recompute_granularity != "full" and extra:
        d = copy.deepcopy(data)
        _layout(d).update(recompute_granularity="selective", recompute_modules=mods + extra)
        _layout(d).pop("recompute_method", None)
        _layout(d).pop("recompute_num_layers", None)
        out.append((f"selective recompute + {', '.join(extra)}", d))
    if s.model.is_moe and lay.recompute_granularity != "full" and "moe" not in mods:
        d = copy.deepcopy(data)
        whole = [m for m in mods + extra if m != "moe_act"] + ["moe"]
        _layout(d).update(recompute_granularity="selective", recompute_modules=whole)
        _layout(d).pop("recompute_method", None)
        _layout(d).pop("recompute_num_layers", None)
        out.append((f"selective recompute + whole moe ({', '.join(whole)})", d))
    if lay.recompute_granularity != "full":
        d = copy.deepcopy(data)
        _layout(d).update(recompute_granularity="full", recompute_method="uniform", recompute_num_layers=1)
        _layout(d).pop("recompute_modules", None)
        out.append(("full recompute (uniform, 1 layer)", d))
    for key, label in (
        ("context_parallel_size", "CP"),
        ("pipeline_model_parallel_size", "PP"),
        ("expert_model_parallel_size", "EP"),
        ("tensor_model_parallel_size", "TP"),
    ):
        if key == "expert_model_parallel_size" and not s.model.is_moe:
            continue
        cur = getattr(lay, key) or 1
        d = copy.deepcopy(data)
        _layout(d)[key] = cur * 2
        if key == "pipeline_model_parallel_size":
            for k in ("virtual_pipeline_model_parallel_size", "pipeline_model_parallel_layout"):
                _layout(d).pop(k, None)
            ep, etp = lay.expert_model_parallel_size or 1, lay.expert_tensor_parallel_size or 1
            if s.model.is_moe and s.num_gpus and s.num_gpus % (ep * etp * cur * 2) and ep % 2 == 0:
                _layout(d)["expert_model_parallel_size"] = ep // 2  # keep the expert grid inside the world
                out.append((f"PP {cur} → {cur * 2}, EP {ep} → {ep // 2}", d))
                continue
        if key == "tensor_model_parallel_size":
            _layout(d)["sequence_parallel"] = True
        out.append((f"{label} {cur} → {cur * 2}", d))
    if not lay.optimizer_cpu_offload:
        d = copy.deepcopy(data)
        _layout(d).update(
            optimizer_cpu_offload=True, optimizer_offload_fraction=1.0, use_precision_aware_optimizer=True
        )
        out.append(("optimizer CPU offload (fraction 1.0, precision-aware optimizer)", d))
    mbs = s.training.micro_batch_size or 1
    if mbs > 1:
        d = copy.deepcopy(data)
        d.setdefault("training", {})["micro_batch_size"] = mbs // 2
        out.append((f"micro_batch_size {mbs} → {mbs // 2}", d))
    return out


def rank_memory_fixes(data: dict, constants=None) -> tuple[list[dict], list[dict]]:
    """Try each candidate on a scenario mapping.

    Returns:
        (fixes, rejected): the legal candidates that lower the peak, largest saving first, as dicts
        with ``change``, ``peak_bytes`` (after), ``saving_bytes``, ``fits`` and ``step_time_change_rel``
        (None when the step-time model lacks inputs); and the candidates dropped, with the first rule
        (``rule``) or input error (``message``) that rejects them.

    Raises:
        InputError: the scenario itself cannot be loaded or estimated.
    """
    from moeplan import estimate_memory, load_scenario, validate
    from moeplan.model.step import estimate_step

    s0 = load_scenario(data)
    peak0 = estimate_memory(s0).peak_stage.total_bytes
    try:
        t0 = estimate_step(s0, constants).step_time_s
    except MoeplanError:
        t0 = None
    out: list[dict] = []
    rejected: list[dict] = []
    for label, d in _candidates(data, s0):
        try:
            s = load_scenario(d)
            errors = validate(s).errors
            if errors:
                rejected.append({"change": label, "rule": errors[0].rule_id, "message": errors[0].message})
                continue
            mem = estimate_memory(s)
            t = estimate_step(s, constants).step_time_s if t0 else None
        except MoeplanError as exc:
            rejected.append({"change": label, "rule": None, "message": str(exc)})
            continue
        peak = mem.peak_stage.total_bytes
        out.append(
            {
                "change": label,
                "peak_bytes": int(peak),
                "saving_bytes": int(peak0 - peak),
                "fits": mem.verdict != "does-not-fit",
                "step_time_change_rel": (t - t0) / t0 if t0 and t else None,
            }
        )
    out.sort(key=lambda f: -f["saving_bytes"])
    for f in out:
        if f["saving_bytes"] <= 0:
            rejected.append(
                {
                    "change": f["change"],
                    "rule": None,
                    "message": f"does not lower the peak ({f['saving_bytes'] / 2**30:+.2f} GiB saved)",
                }
            )
    return [f for f in out if f["saving_bytes"] > 0], rejected
