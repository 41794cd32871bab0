"""Built-in GPU catalog, read lazily from ``catalog/data/gpus.json`` (copied from the project's
hardware reference, every figure with its sources) and converted once into :class:`GpuSpec`.
"""

from __future__ import annotations

import functools
import json
from importlib import resources

from moeplan.errors import InputError, UnknownNameError
from moeplan.i18n.messages import msg
from moeplan.inputs.system import GpuSpec

#: moeplan id → entry in gpus.json
GPU_IDS: dict[str, str] = {
    "a100": "A100_SXM_80GB",
    "h100": "H100_SXM_80GB",
    "h200": "H200_SXM_141GB",
    "b200": "B200_HGX_180GB",
    "b300": "B300_HGX_288GB",
    "gb200": "GB200_NVL72",
    "gb300": "GB300_NVL72",
    # China-market parts: A100 / H100 silicon with NVLink cut (A800, H800), a compute-cut Hopper (H20)
    "a800": "A800_SXM_80GB",
    "h800": "H800_SXM_80GB",
    "h20": "H20_SXM_96GB",
    "mi300x": "MI300X",
    "mi355x": "MI355X",
}

# Compute capability per entry (NVIDIA CUDA GPUs list): A100 8.0, H100/H200 9.0 (A800 is A100
# silicon, H800 and H20 are GH100: 8.0 and 9.0), B200/GB200 10.0,
# B300/GB300 10.3. AMD parts have none.
_COMPUTE_CAPABILITY = {
    "A100_SXM_80GB": 8.0,
    "A800_SXM_80GB": 8.0,
    "H100_SXM_80GB": 9.0,
    "H800_SXM_80GB": 9.0,
    "H20_SXM_96GB": 9.0,
    "H200_SXM_141GB": 9.0,
    "B200_HGX_180GB": 10.0,
    "B300_HGX_288GB": 10.3,
    "GB200_NVL72": 10.0,
    "GB300_NVL72": 10.3,
}


@functools.lru_cache(maxsize=1)
def _raw() -> dict:
    return json.loads((resources.files("moeplan.catalog") / "data" / "gpus.json").read_text())


def _from_entry(gpu_id: str, key: str, e: dict, sources: dict) -> GpuSpec:
    if e.get("hbm_torch_total_gib"):
        hbm_gib, hbm_src = float(e["hbm_torch_total_gib"]), "torch total_memory"
    elif e.get("hbm_nvidia_smi_gib"):
        hbm_gib, hbm_src = float(e["hbm_nvidia_smi_gib"]), "nvidia-smi total"
    else:
        hbm_gib, hbm_src = float(e["hbm_nominal_gb"]) * 1e9 / 2**30, "nominal (vendor GB)"
    peaks = {"bf16": e.get("bf16_dense_tflops"), "fp8": e.get("fp8_dense_tflops"), "fp4": e.get("fp4_dense_tflops")}
    cc = _COMPUTE_CAPABILITY.get(key)
    nvidia = e.get("vendor") == "NVIDIA"
    return GpuSpec(
        id=gpu_id,
        name=key,
        vendor=e.get("vendor", "unknown"),
        arch=e.get("arch", ""),
        compute_capability=cc,
        usable_hbm_gib=hbm_gib,
        usable_hbm_source=hbm_src,
        hbm_bandwidth_gb_per_s=e.get("hbm_bandwidth_gb_per_s"),
        peak_dense_tflops={k: float(v) for k, v in peaks.items() if v},
        scaleup_domain_gpus=int(e.get("scaleup_domain_gpus") or 8),
        scaleup_unidir_gb_per_s=e.get("scaleup_unidir_gb_per_s"),
        nic_gbit_per_s_per_gpu=e.get("nic_gbit_per_s_per_gpu"),
        host_mem_per_gpu_gb=e.get("host_mem_per_gpu_gb"),
        host_link_unidir_gb_per_s=e.get("host_link_unidir_gb_per_s"),
        supports_te_fp8=nvidia and (cc or 0) >= 8.9,
        supports_mxfp8=nvidia and (cc or 0) >= 10.0,
        supports_nvfp4=nvidia and (cc or 0) >= 10.0,
        # Bridge flex_dispatcher_backend.py: DeepEP needs CC 8.x/9.x or B200/B300 (not GB200/GB300);
        # HybridEP needs CC 8.x, 9.x or 10.x (NVL72 included).
        supports_deepep=nvidia and cc is not None and (cc < 10.0 or key.startswith(("B200", "B300"))),
        supports_hybridep=nvidia and cc is not None,
        sources=[f"{s}: {sources.get(s, '?')}" for s in e.get("_source", [])],
    )


#: GPUs that Megatron Bridge perf recipes name but the catalog leaves out on purpose: NVIDIA has not
#: published every figure the estimates need (dense BF16 / FP8 / FP4 TFLOP/s, HBM bandwidth, NVLink domain
#: bandwidth, network per GPU) in a datasheet, so moeplan refuses them rather than guess (id -> product name)
UNPUBLISHED_GPUS = {"vr200": "NVIDIA Vera Rubin"}


def get_gpu(gpu_id: str) -> GpuSpec:
    """The :class:`GpuSpec` for a catalog id (``h100``; case-insensitive; the gpus.json entry name
    such as ``H100_SXM_80GB`` also works).

    Raises:
        InputError: a GPU of :data:`UNPUBLISHED_GPUS` (its figures are not public), listing the known ids.
        UnknownNameError: an unknown id, listing the known ids (never a silent default).
    """
    key = str(gpu_id).strip().lower()
    by_entry = {v.lower(): k for k, v in GPU_IDS.items()}
    key = by_entry.get(key, key)
    if key in UNPUBLISHED_GPUS:
        known = ", ".join(sorted(GPU_IDS))
        sentence = msg("recipes.gpu_figures_not_public", gpu=key, name=UNPUBLISHED_GPUS[key], known=known)
        raise InputError("system.gpu", gpu_id, known, sentence=sentence)
    if key not in GPU_IDS:
        raise UnknownNameError("system.gpu", gpu_id, list(GPU_IDS), "one of")
    return _catalog_gpu(key)


@functools.lru_cache(maxsize=32)
def _catalog_gpu(key: str) -> GpuSpec:
    """The (immutable) spec of a known catalog id, built once."""
    raw = _raw()
    entry = GPU_IDS[key]
    srcs = {k: (v if isinstance(v, str) else json.dumps(v)) for k, v in raw.get("_sources", {}).items()}
    return _from_entry(key, entry, raw["systems"][entry], srcs)


def list_gpus() -> list[GpuSpec]:
    """Every catalog GPU, in catalog order."""
    return [get_gpu(k) for k in GPU_IDS]


def measured_gemm_fractions(gpu_id: str) -> dict[str, float]:
    """Best-shape GEMM throughput as a fraction of the dense peak, per precision (``bf16``, ``fp8``),
    from the catalog's measured MAMF figures (ml-engineering, torch.matmul); empty for unknown GPUs.
    A part cut down only in its interconnect (H800, A800: ``gemm_fraction_from`` in gpus.json) takes
    the measured fraction of the part with the same die and clocks (H100, A100)."""
    key = GPU_IDS.get(str(gpu_id).lower())
    if key is None:
        return {}
    e = _raw()["systems"][key]
    if e.get("gemm_fraction_from"):
        e = _raw()["systems"][e["gemm_fraction_from"]]
    out = {}
    for prec in ("bf16", "fp8"):
        meas, peak = e.get(f"measured_{prec}_gemm_tflops"), e.get(f"{prec}_dense_tflops")
        if meas and peak:
            out[prec] = meas / peak
    if "fp8" not in out and "bf16" in out:
        out["fp8"] = out["bf16"] * 0.95
    return out
