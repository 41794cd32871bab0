"""Attention kernel rates on one Hopper GPU (H100 / H200): the table that would replace the
FlashAttention-3 figures behind ``moeplan.model.executed_flops.attention_fraction``.

Transformer Engine runs cuDNN's FusedAttention on Hopper when both fused backends can take a shape
(``transformer_engine/pytorch/attention/dot_product_attention/utils.py`` at TE v2.18: "give
FusedAttention preference on Hopper+"), so that is the kernel measured first. Each backend runs in
its own Python process with its environment set before the import (TE reads ``NVTE_FLASH_ATTN`` when
its attention module is imported):

- ``te-fused``: TE ``DotProductAttention`` with ``NVTE_FLASH_ATTN=0 NVTE_FUSED_ATTN=1
  NVTE_UNFUSED_ATTN=0`` (cuDNN FusedAttention only);
- ``te-flash``: the same module with ``NVTE_FLASH_ATTN=1 NVTE_FUSED_ATTN=0 NVTE_UNFUSED_ATTN=0``,
  only where the ``flash_attn`` package is installed;
- ``sdpa-cudnn`` / ``sdpa-flash``: ``torch.nn.functional.scaled_dot_product_attention`` under
  ``torch.nn.attention.sdpa_kernel(SDPBackend.CUDNN_ATTENTION)`` / ``FLASH_ATTENTION`` (PyTorch's
  bundled cuDNN and its built-in FlashAttention-2), run when Transformer Engine is absent (the
  document then says so under ``backends``) or when ``--backends`` names them.

Shapes: BF16, batch 1, the ``sbhd`` layout megatron-core's ``TEDotProductAttention`` passes
(``megatron/core/extensions/transformer_engine.py`` at core_v0.19.0; with batch 1 it is the same
memory as ``bshd``), separate q / k / v tensors, as many KV heads as query heads; (d_qk, d_v) in
(128, 128), (192, 128) [MLA], (256, 256); 16, 32, 64 and 128 heads; causal self-attention over 512 to
32K tokens; and the two non-causal steps of TE's causal CP ring (``context_parallel.py`` at v2.18,
``cp_p2p_fwd_prepare_qkv``): "lower-triangle" (all local queries over half the local keys: q 4K × kv 2K
at 4K tokens per rank) and "upper-triangle" (the second half of the queries over all local keys:
q 2K × kv 4K).

FLOPs follow ``moeplan.model.executed_flops.layer_flops``: forward ``2 · s_q · s_kv · heads · (d_qk +
d_v)``, halved for a causal square (each query sees half the keys on average), backward 2.5 × the
forward (flash backward recomputes QKᵀ). Times are CUDA-event medians of ``--iters`` calls after
``--warmup`` calls, each call timed alone; a GPU sleep queued ahead of the timed calls lets the host
enqueue them all, so host overhead does not enter the kernel time. The backward time is forward +
backward less forward. ``fraction_of_peak`` divides by the dense BF16 peak (989 TFLOP/s for H100 SXM
and H200, ``catalog/data/gpus.json``); ``megatron_fraction`` counts Megatron's 3 × forward FLOPs over
the forward + backward time, the quantity ``attention_fraction`` predicts.

``--cpu-dry-run`` builds the shape list, the FLOP counts and the whole document (every result
``not-run``) without importing torch. ``--budget-s`` (default 420) bounds the whole run: each backend
gets an even share of what is left, skips a shape whose projected time no longer fits, and is killed
at its share; the document is rewritten after every shape, so a cut run still leaves its table.

Run on the device machine (no network there, nothing to install; Transformer Engine must already be
on it, else the document records its absence and measures PyTorch's cuDNN and flash backends)::

    PYTHONUNBUFFERED=1 python3 benchmarks/device/attention_kernels.py --out "$OUT" --budget-s 420

with the device tool's ``timeout_s`` at 540. It writes ``$OUT/attention_kernels.json``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

SCHEMA = "moeplan.attention_kernels/1"
OUTPUT_NAME = "attention_kernels.json"
#: (d_qk, d_v): head dim 128, MLA (DeepSeek-V3: 128 + 64 rope, v 128), head dim 256
HEAD_DIMS = ((128, 128), (192, 128), (256, 256))
HEADS = (16, 32, 64, 128)
QUERY_LENGTHS = (512, 1024, 2048, 4096, 8192, 16384, 32768)
#: (s_q, s_kv, step) of the non-causal CP ring steps at 4K tokens per rank
RING_STEPS = ((4096, 2048, "ring-lower"), (2048, 4096, "ring-upper"))
#: backward executed FLOPs per forward FLOP (moeplan.model.executed_flops.attention_fraction)
BACKWARD_FLOP_RATIO = 2.5
#: Megatron's model-FLOP count of attention forward + backward, in forward FLOPs
MEGATRON_FLOP_RATIO = 3.0
#: dense BF16 peak in TFLOP/s by GPU name fragment (catalog/data/gpus.json, H100_SXM_80GB, H200_SXM_141GB)
BF16_DENSE_PEAK_TFLOPS = {"H100 80GB HBM3": 989.0, "H100 SXM": 989.0, "H200": 989.0}
TE_BACKENDS = ("te-fused", "te-flash")
SDPA_BACKENDS = ("sdpa-cudnn", "sdpa-flash")
#: environment each backend's process runs under
BACKEND_ENV = {
    "te-fused": {"NVTE_FLASH_ATTN": "0", "NVTE_FUSED_ATTN": "1", "NVTE_UNFUSED_ATTN": "0"},
    "te-flash": {"NVTE_FLASH_ATTN": "1", "NVTE_FUSED_ATTN": "0", "NVTE_UNFUSED_ATTN": "0"},
}
PASSES = ("fwd", "bwd", "fwd_bwd")
#: throughput assumed for a shape's time before its backend has measured one (TFLOP/s, low on purpose)
ASSUMED_TFLOPS = 200.0
#: seconds a backend's process may take beyond its share to import and start CUDA before it is killed
STARTUP_GRACE_S = 30.0


@dataclass(frozen=True)
class Shape:
    """One attention call: head dims, heads, query and key lengths (tokens), causal or not."""

    kind: str
    d_qk: int
    d_v: int
    heads: int
    sq: int
    skv: int
    causal: bool

    @property
    def id(self) -> str:
        return f"d{self.d_qk}x{self.d_v}_h{self.heads}_q{self.sq}_kv{self.skv}_{self.kind}"

    @property
    def forward_flops(self) -> int:
        """Forward FLOPs (QKᵀ and PV, 2 per multiply-add): 2 · s_q · s_kv · heads · (d_qk + d_v),
        halved for a causal square."""
        full = 2 * self.sq * self.skv * self.heads * (self.d_qk + self.d_v)
        return full // 2 if self.causal else full

    @property
    def backward_flops(self) -> int:
        """Backward executed FLOPs: 2.5 × the forward (it recomputes QKᵀ)."""
        return int(self.forward_flops * BACKWARD_FLOP_RATIO)

    def pass_flops(self, name: str) -> int:
        """Executed FLOPs of pass ``fwd``, ``bwd`` or ``fwd_bwd``."""
        return {"fwd": self.forward_flops, "bwd": self.backward_flops}.get(
            name, self.forward_flops + self.backward_flops
        )


def shapes() -> list[Shape]:
    """Every shape, cheapest first (so a cut run keeps the most points)."""
    out = [Shape("causal", dqk, dv, h, s, s, True) for dqk, dv in HEAD_DIMS for h in HEADS for s in QUERY_LENGTHS]
    out += [
        Shape(kind, dqk, dv, h, sq, skv, False) for dqk, dv in HEAD_DIMS for h in HEADS for sq, skv, kind in RING_STEPS
    ]
    return sorted(out, key=lambda s: (s.pass_flops("fwd_bwd"), s.id))


def _shape_row(s: Shape) -> dict[str, Any]:
    return {"id": s.id, **asdict(s), "forward_flops": s.forward_flops, "backward_flops": s.backward_flops}


def _result(backend: str, s: Shape, name: str, status: str, detail: str = "") -> dict[str, Any]:
    return {
        "backend": backend,
        "shape": s.id,
        "pass": name,
        "status": status,
        "detail": detail,
        "executed_flops": s.pass_flops(name),
        "median_ms": None,
        "min_ms": None,
        "times_ms": [],
        "tflops": None,
        "fraction_of_peak": None,
    }


def _peak_tflops(gpu_name: str) -> float | None:
    return next((v for k, v in BF16_DENSE_PEAK_TFLOPS.items() if k in gpu_name), None)


def _nvidia_smi() -> dict[str, str]:
    """Name, driver and clocks from nvidia-smi, or why they could not be read."""
    fields = "name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,power.limit,temperature.gpu,pstate"
    try:
        r = subprocess.run(
            ["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        )
    except (OSError, subprocess.SubprocessError) as e:
        return {"error": f"nvidia-smi: {e}"}
    return dict(zip(fields.split(","), (v.strip() for v in r.stdout.splitlines()[0].split(",")), strict=False))


def _document(mode: str, budget_s: float, args: argparse.Namespace) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "mode": mode,
        "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "budget_s": budget_s,
        "elapsed_s": 0.0,
        "settings": {"dtype": "bf16", "batch": 1, "layout": "sbhd", "warmup": args.warmup, "iters": args.iters},
        "convention": {
            "forward": "2 * s_q * s_kv * heads * (d_qk + d_v), halved for a causal square",
            "backward_per_forward": BACKWARD_FLOP_RATIO,
            "megatron_per_forward": MEGATRON_FLOP_RATIO,
            "source": "src/moeplan/model/executed_flops.py (layer_flops, attention_fraction)",
        },
        "environment": {"python": platform.python_version(), "platform": platform.platform()},
        "backends": {},
        "shapes": [_shape_row(s) for s in shapes()],
        "results": [],
    }


def _write(doc: dict[str, Any], path: Path) -> None:
    """Write ``doc`` as JSON atomically (a cut run never leaves half a file)."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def planned_backends(requested: str) -> dict[str, str]:
    """Backends to run and why, from ``--backends`` (``auto`` or a comma list of known names, checked by
    :func:`main`): TE FusedAttention when Transformer Engine is installed, TE FlashAttention when
    ``flash_attn`` is too, else PyTorch SDPA's cuDNN and flash backends."""
    if requested != "auto":
        return dict.fromkeys(_names(requested), "requested")
    if importlib.util.find_spec("transformer_engine") is None:
        return dict.fromkeys(SDPA_BACKENDS, "transformer_engine is not installed: PyTorch SDPA measured instead")
    plan = {"te-fused": "transformer_engine installed"}
    if importlib.util.find_spec("flash_attn") is not None:
        plan["te-flash"] = "transformer_engine and flash_attn installed"
    return plan


def _names(requested: str) -> list[str]:
    return [n.strip() for n in requested.split(",") if n.strip()]


def dry_run(args: argparse.Namespace) -> dict[str, Any]:
    """The document a device run writes, every result ``not-run``, with the kernel seconds each backend
    would need at :data:`ASSUMED_TFLOPS` (warm-up and timed calls of forward and forward + backward)."""
    doc = _document("dry-run", args.budget_s, args)
    calls = args.warmup + args.iters
    flops = sum(calls * (s.pass_flops("fwd") + s.pass_flops("fwd_bwd")) for s in shapes())
    doc["projection"] = {"assumed_tflops": ASSUMED_TFLOPS, "kernel_s_per_backend": flops / ASSUMED_TFLOPS / 1e12}
    names = TE_BACKENDS + SDPA_BACKENDS if args.backends == "auto" else tuple(_names(args.backends))
    for backend in names:
        doc["backends"][backend] = {"status": "planned", "detail": f"--backends {args.backends}"}
        doc["results"] += [_result(backend, s, p, "not-run") for s in shapes() for p in PASSES]
    return doc


# ---- measurement (one backend per process; imports torch) -------------------------------------------


def _time_ms(fn: Any, warmup: int, iters: int) -> list[float]:
    """CUDA-event time of each of ``iters`` calls of ``fn`` after ``warmup`` calls, in ms. A GPU sleep
    queued first (about 2 ms per call at 2 GHz) keeps the GPU behind the host while the calls are enqueued."""
    import torch

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(iters)]
    sleep = getattr(torch.cuda, "_sleep", None)
    if sleep is not None:
        sleep(4_000_000 * iters)
    for start, end in events:
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return [start.elapsed_time(end) for start, end in events]


def _inputs(s: Shape) -> tuple[Any, Any, Any]:
    """q, k, v in sbhd (batch 1), BF16, on the GPU, requiring gradients."""
    import torch

    def make(seq: int, dim: int) -> Any:
        return torch.randn(seq, 1, s.heads, dim, device="cuda", dtype=torch.bfloat16, requires_grad=True)

    return make(s.sq, s.d_qk), make(s.skv, s.d_qk), make(s.skv, s.d_v)


def _te_call(s: Shape, q: Any, k: Any, v: Any) -> Any:
    import transformer_engine.pytorch as te

    dpa = te.DotProductAttention(
        s.heads,
        (s.d_qk, s.d_v),
        num_gqa_groups=s.heads,
        attention_dropout=0.0,
        qkv_format="sbhd",
        attn_mask_type="causal" if s.causal else "no_mask",
        attention_type="self" if s.sq == s.skv else "cross",
    )
    return lambda: dpa(q, k, v)


def _te_selected() -> str:
    """The backend TE chose for the last call, from its module-level selection record."""
    try:
        mod = sys.modules["transformer_engine.pytorch.attention.dot_product_attention.dot_product_attention"]
        sel = mod._attention_backends
    except (KeyError, AttributeError):
        return "unknown"
    if sel.get("use_flash_attention"):
        return f"FlashAttention ({sel.get('flash_attention_backend')})"
    if sel.get("use_fused_attention"):
        return f"FusedAttention (sub-backend {int(sel.get('fused_attention_backend') or 0)})"
    return "UnfusedDotProductAttention" if sel.get("use_unfused_attention") else "none"


def _sdpa_call(backend: str, s: Shape, q: Any, k: Any, v: Any) -> Any:
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    kind = SDPBackend.CUDNN_ATTENTION if backend == "sdpa-cudnn" else SDPBackend.FLASH_ATTENTION
    qb, kb, vb = (x.permute(1, 2, 0, 3) for x in (q, k, v))  # (b, h, s, d) views of the sbhd storage

    def call() -> Any:
        with sdpa_kernel(kind):
            return torch.nn.functional.scaled_dot_product_attention(qb, kb, vb, is_causal=s.causal)

    return call


def _passes(call: Any, q: Any, k: Any, v: Any) -> tuple[Any, Any]:
    """The forward alone and the forward + backward (gradients cleared before each call)."""
    out = call()
    grad = out.detach().clone().normal_()

    def fwd() -> Any:
        return call()

    def fwd_bwd() -> None:
        for x in (q, k, v):
            x.grad = None
        call().backward(grad)

    return fwd, fwd_bwd


def _timed(backend: str, s: Shape, name: str, times: list[float], peak: float | None) -> dict[str, Any]:
    row = _result(backend, s, name, "ok")
    med = statistics.median(times)
    tflops = s.pass_flops(name) / (med * 1e-3) / 1e12 if med > 0 else None
    row.update(median_ms=med, min_ms=min(times), times_ms=times, tflops=tflops)
    if peak and tflops:
        row["fraction_of_peak"] = tflops / peak
    return row


def _rows(backend: str, s: Shape, fwd: list[float], fb: list[float], peak: float | None) -> list[dict[str, Any]]:
    """The forward, backward (forward + backward less forward, medians) and forward + backward rows."""
    rows = [_timed(backend, s, "fwd", fwd, peak), _timed(backend, s, "fwd_bwd", fb, peak)]
    bwd_ms = statistics.median(fb) - statistics.median(fwd)
    bwd = _result(backend, s, "bwd", "ok" if bwd_ms > 0 else "error", "derived: fwd_bwd - fwd medians")
    if bwd_ms > 0:
        bwd.update(median_ms=bwd_ms, tflops=s.backward_flops / (bwd_ms * 1e-3) / 1e12)
        bwd["fraction_of_peak"] = bwd["tflops"] / peak if peak else None
    rows[1]["megatron_fraction"] = (
        MEGATRON_FLOP_RATIO * s.forward_flops / (rows[1]["median_ms"] * 1e-3) / 1e12 / peak if peak else None
    )
    return [rows[0], bwd, rows[1]]


def _measure(backend: str, s: Shape, args: argparse.Namespace, peak: float | None) -> list[dict[str, Any]]:
    """Every pass of one shape on one backend; a failure or the wrong TE backend is a row, not a crash."""
    import torch

    torch.cuda.empty_cache()
    q, k, v = _inputs(s)
    call = _te_call(s, q, k, v) if backend in TE_BACKENDS else _sdpa_call(backend, s, q, k, v)
    fwd, fwd_bwd = _passes(call, q, k, v)
    if backend in TE_BACKENDS:
        chosen = _te_selected()
        want = "FusedAttention" if backend == "te-fused" else "FlashAttention"
        if not chosen.startswith(want):
            return [_result(backend, s, p, "not-selected", f"TE ran {chosen}") for p in PASSES]
    rows = _rows(backend, s, _time_ms(fwd, args.warmup, args.iters), _time_ms(fwd_bwd, args.warmup, args.iters), peak)
    if backend in TE_BACKENDS:
        for r in rows:
            r["detail"] = (r["detail"] + "; " if r["detail"] else "") + _te_selected()
    return rows


def _versions() -> dict[str, Any]:
    """GPU and software versions this process sees."""
    import torch

    props = torch.cuda.get_device_properties(0)
    env: dict[str, Any] = {
        "gpu": props.name,
        "capability": f"{props.major}.{props.minor}",
        "sm_count": props.multi_processor_count,
        "memory_gib": props.total_memory / 2**30,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "torch_cudnn": torch.backends.cudnn.version(),
    }
    env["transformer_engine"] = _try_version("transformer_engine", "__version__")
    env["te_cudnn"] = _try_version("transformer_engine.pytorch", "get_cudnn_version")
    env["flash_attn"] = _try_version("flash_attn", "__version__")
    return env


def _try_version(module: str, attr: str) -> str:
    """``module.attr`` (called when it is a function) as text, or why it could not be read."""
    try:
        value = getattr(importlib.import_module(module), attr)
        value = value() if callable(value) else value
    except Exception as e:  # absent or broken: recorded as such
        return f"unavailable: {type(e).__name__}: {str(e)[:200]}"
    return ".".join(str(x) for x in value) if isinstance(value, tuple) else str(value)


def _fits(s: Shape, started: float, budget_s: float, rate_tflops: float, args: argparse.Namespace) -> bool:
    """Whether the shape's warm-up and timed calls of both passes (and the GPU sleep) still fit."""
    calls = args.warmup + args.iters
    need = calls * (s.pass_flops("fwd") + s.pass_flops("fwd_bwd")) / (rate_tflops * 1e12) + 2e-3 * args.iters * 2
    return time.monotonic() - started + need < budget_s


def run_backend(backend: str, args: argparse.Namespace) -> None:
    """Measure every shape on ``backend`` within ``--budget-s`` of this process's start, rewriting
    ``--records`` after each shape."""
    import torch

    started = time.monotonic()
    part: dict[str, Any] = {"environment": {}, "backend": {"status": "running", "detail": ""}, "results": []}
    out = Path(args.records)
    part["environment"] = _versions()
    peak = _peak_tflops(part["environment"]["gpu"])
    rate = ASSUMED_TFLOPS
    for s in shapes():
        if not _fits(s, started, args.budget_s, rate, args):
            part["results"] += [_result(backend, s, p, "skipped", "time budget") for p in PASSES]
            continue
        try:
            rows = _measure(backend, s, args, peak)
        except Exception as e:  # an unsupported shape, out of memory, an API difference: a row each
            rows = [_result(backend, s, p, "error", f"{type(e).__name__}: {str(e)[:300]}") for p in PASSES]
            torch.cuda.empty_cache()
        rate = next((r["tflops"] for r in rows if r["pass"] == "fwd_bwd" and r["tflops"]), rate)
        part["results"] += rows
        _write(part, out)
    part["backend"]["status"] = "done"
    _write(part, out)


# ---- the run: one process per backend ----------------------------------------------------------------


def _child(backend: str, args: argparse.Namespace, share_s: float, records: Path) -> dict[str, Any]:
    """Run one backend's process with its environment, killed at its share plus start-up grace."""
    cmd = [sys.executable, __file__, "--backend", backend, "--records", str(records), "--budget-s", f"{share_s:.1f}"]
    cmd += ["--warmup", str(args.warmup), "--iters", str(args.iters)]
    env = {**os.environ, **BACKEND_ENV.get(backend, {})}
    status, detail = "done", ""
    try:
        r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=share_s + STARTUP_GRACE_S)
        if r.returncode != 0:
            status, detail = "failed", f"rc={r.returncode}: {r.stderr[-1500:]}"
    except subprocess.TimeoutExpired:
        status, detail = "killed", f"over its share of {share_s:.0f} s"
    part = json.loads(records.read_text(encoding="utf-8")) if records.exists() else {}
    if part.get("backend", {}).get("status") == "done" and status == "done":
        detail = "every shape measured, skipped or recorded as an error"
    return {"status": status, "detail": detail, **{k: part.get(k) for k in ("environment", "results")}}


def measured_run(args: argparse.Namespace) -> dict[str, Any]:
    """Run each planned backend in turn and merge their rows into one document."""
    started = time.monotonic()
    out = Path(args.out) / OUTPUT_NAME
    doc = _document("measured", args.budget_s, args)
    doc["environment"]["nvidia_smi_before"] = _nvidia_smi()
    plan = planned_backends(args.backends)
    for i, (backend, why) in enumerate(plan.items()):
        left = args.budget_s - (time.monotonic() - started)
        share = left / (len(plan) - i) - STARTUP_GRACE_S
        if share < 10:
            doc["backends"][backend] = {"status": "skipped", "detail": f"{why}; no time left"}
            doc["results"] += [_result(backend, s, p, "not-run", "no time left") for s in shapes() for p in PASSES]
            continue
        got = _child(backend, args, share, Path(args.out) / f".{backend}.part.json")
        doc["environment"].update(got.pop("environment") or {})
        rows = got.pop("results") or []
        done = {(r["shape"], r["pass"]) for r in rows}
        rows += [
            _result(backend, s, p, "not-run", got["status"]) for s in shapes() for p in PASSES if (s.id, p) not in done
        ]
        doc["results"] += rows
        doc["backends"][backend] = {**got, "detail": f"{why}; {got['detail']}"}
        doc["elapsed_s"] = time.monotonic() - started
        _write(doc, out)
    doc["environment"]["nvidia_smi_after"] = _nvidia_smi()
    doc["elapsed_s"] = time.monotonic() - started
    _write(doc, out)
    for p in Path(args.out).glob(".*.part.json"):
        p.unlink()
    return doc


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--out", default=os.environ.get("OUT", "."), help="folder for attention_kernels.json ($OUT)")
    p.add_argument("--budget-s", type=float, default=420.0, help="wall-clock bound of the whole run, s")
    p.add_argument("--warmup", type=int, default=3, help="untimed calls per pass")
    p.add_argument("--iters", type=int, default=10, help="timed calls per pass (the median is reported)")
    p.add_argument(
        "--backends", default="auto", help="auto, or a comma list of " + ", ".join(TE_BACKENDS + SDPA_BACKENDS)
    )
    p.add_argument("--cpu-dry-run", action="store_true", help="shapes, FLOPs and the document only; no CUDA")
    p.add_argument("--backend", help=argparse.SUPPRESS)  # one backend's process
    p.add_argument("--records", help=argparse.SUPPRESS)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.warmup < 0 or args.iters < 1 or args.budget_s <= 0:
        parser.error(
            f"--warmup {args.warmup}, --iters {args.iters}, --budget-s {args.budget_s}: allowed are "
            "--warmup >= 0, --iters >= 1, --budget-s > 0"
        )
    allowed = TE_BACKENDS + SDPA_BACKENDS
    unknown = [n for n in _names(args.backends) if n not in allowed] if args.backends != "auto" else []
    if unknown or not _names(args.backends):
        parser.error(
            f"--backends {args.backends!r}: unknown {unknown}; allowed: auto or a comma list of {', '.join(allowed)}"
        )
    if args.backend:
        run_backend(args.backend, args)
        return 0
    Path(args.out).mkdir(parents=True, exist_ok=True)
    doc = dry_run(args) if args.cpu_dry_run else measured_run(args)
    if args.cpu_dry_run:
        _write(doc, Path(args.out) / OUTPUT_NAME)
    ok = sum(r["status"] == "ok" for r in doc["results"])
    print(f"{doc['mode']}: {len(doc['shapes'])} shapes, {ok} rows measured -> {Path(args.out) / OUTPUT_NAME}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
