"""System specification: GPU type, world size and topology.

Figures come from the catalog (``catalog/data/gpus.json``, each with sources) or from a custom
YAML mapping with the same keys. Units live in the names: HBM in GiB (2**30 bytes), bandwidth in
decimal GB/s, peak throughput in dense TFLOP/s. Unknown stays ``None``: a check that needs it asks
for an explicit value instead of assuming one.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

from moeplan.units import GIB_BYTES

#: precisions a dense peak may be given for
PEAK_KEYS = ("bf16", "fp16", "fp8", "fp4")


#: what a GPU's ``peak_dense_tflops`` must hold (every check of it says this)
BF16_PEAK_NEEDED = "a bf16 dense peak in TFLOP/s (and fp8/fp4 for those precisions): the step-time estimate needs it"


class GpuSpec(BaseModel):
    """One accelerator type.

    Attributes:
        usable_hbm_gib: memory an allocator can use (torch ``total_memory`` where published, else
            nvidia-smi's total, else the nominal size); ``usable_hbm_source`` says which.
        peak_dense_tflops: dense peak by precision (``bf16``, ``fp8``, ``fp4``); vendor spec. A
            ``bf16`` entry is required (a GPU without one, or overrides that empty it, is an input
            error for every command: :data:`BF16_PEAK_NEEDED`).
        scaleup_domain_gpus: GPUs in one NVLink domain (8 on HGX, 72 on NVL72).
        scaleup_unidir_gb_per_s: NVLink bandwidth per GPU, one direction, decimal GB/s.
        nic_gbit_per_s_per_gpu: scale-out NIC per GPU, Gb/s.
        host_mem_per_gpu_gb / host_link_unidir_gb_per_s: host memory (GB) and host link (GB/s),
            None when unknown.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, allow_inf_nan=False)

    id: str
    name: str = ""
    vendor: str = "NVIDIA"
    arch: str = ""
    compute_capability: float | None = Field(default=None, ge=0, le=100)
    usable_hbm_gib: float = Field(ge=1 / 1024, le=1e5)  # 1 MiB to 100 TiB
    usable_hbm_source: str = "user"
    hbm_bandwidth_gb_per_s: float | None = Field(default=None, gt=0, le=1e6)
    peak_dense_tflops: dict[str, float] = Field(default_factory=dict, validate_default=True)
    scaleup_domain_gpus: int = Field(default=8, ge=1, le=1_000_000)
    scaleup_unidir_gb_per_s: float | None = Field(default=None, gt=0, le=1e6)
    nic_gbit_per_s_per_gpu: float | None = Field(default=None, gt=0, le=1e7)
    host_mem_per_gpu_gb: float | None = Field(default=None, gt=0, le=1e7)
    host_link_unidir_gb_per_s: float | None = Field(default=None, gt=0, le=1e6)
    supports_te_fp8: bool = True
    supports_mxfp8: bool = False
    supports_nvfp4: bool = False
    supports_deepep: bool = True
    supports_hybridep: bool = True
    sources: list[str] = Field(default_factory=list)

    @field_validator("peak_dense_tflops")
    @classmethod
    def _positive_peaks(cls, v: dict[str, float]) -> dict[str, float]:
        for key, val in v.items():
            if key not in PEAK_KEYS:
                raise ValueError(f"precision keys {', '.join(PEAK_KEYS)} (not {key!r})")
            if not 0 < val <= 1e6:
                raise ValueError(f"a positive TFLOP/s figure up to 1e6 for {key} (not {val})")
        if "bf16" not in v:  # one refusal for check and estimate alike (the step time divides by it)
            raise ValueError(BF16_PEAK_NEEDED)
        return v

    @property
    def usable_hbm_bytes(self) -> int:
        """Usable HBM in bytes (GiB · 2**30)."""
        return int(self.usable_hbm_gib * GIB_BYTES)

    @property
    def is_nvl72(self) -> bool:
        """True for rack-scale NVLink domains (GB200/GB300 NVL72)."""
        return self.scaleup_domain_gpus >= 36

    def peak_tflops(self, precision: str) -> float | None:
        """Dense peak TFLOP/s for a training precision (bf16; fp8 recipes → fp8; nvfp4 → fp4)."""
        key = "bf16" if precision == "bf16" else ("fp4" if precision == "nvfp4" else "fp8")
        return self.peak_dense_tflops.get(key)
