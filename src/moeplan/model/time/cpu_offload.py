"""The offloaded part of the optimizer step (``optimizer_cpu_offload``), as megatron-core runs it.

Source: ``megatron/core/optimizer/cpu_offloading/hybrid_optimizer.py`` (``HybridDeviceOptimizer``) and
``megatron/core/optimizer/__init__.py`` at core_v0.16.0 through core_v0.19.0 (unchanged between them):

- The host optimizer is ``torch.optim.AdamW(..., fused=True)`` (``CPUAdam``), built with
  ``param_update_in_fp32=True``: each offloaded parameter has an fp32 host master (``.float()`` of a
  pinned bf16 copy, so pageable memory) and fp32 moments (AdamW's state takes the parameter's dtype,
  whatever ``exp_avg_dtype`` says). ``use_torch_optimizer_for_cpu_offload`` changes only the GPU class,
  which the ``adam`` branch resets: it does not move the host step.
- Device to host (D2H): each gradient is copied into a pinned fp32 host buffer (``pin_cpu_grads``,
  non-blocking). PyTorch converts a non-blocking copy on the GPU (``copy_kernel_cuda``), so 4 bytes per
  parameter cross the host link whatever the gradient's dtype: :data:`D2H_BYTES_PER_PARAM`.
- Host step: the fused AdamW kernel reads the fp32 parameter, gradient and both moments and writes the
  parameter and both moments: :data:`CPU_ADAM_DRAM_BYTES_PER_PARAM` bytes of host DRAM traffic per
  parameter. Its arithmetic (about 15 FLOPs per parameter) is far below what the cores deliver, so it
  is bound by the host DRAM bandwidth, shared by the GPUs of one host (:mod:`moeplan.catalog.host_memory`).
- Host to device (H2D): a post-step hook copies the fp32 host master into the bf16 GPU parameter;
  PyTorch moves the fp32 tensor and casts on the GPU: :data:`H2D_BYTES_PER_PARAM`. The master is
  pageable, so the CUDA runtime returns only once the host thread has staged it ("API synchronization
  behavior", CUDA Runtime API): the copy holds the host thread.
- ``overlap_cpu_optimizer_d2h_h2d`` (OptimizerConfig, default False): False builds one host optimizer
  and runs the D2H on the current stream, waits for all of it, steps, then copies back: the three
  terms add up. True builds one host optimizer per parameter tensor and issues every D2H on a side
  stream up front; tensor i's step waits only for its own copy, so the D2H runs ahead of the host
  thread, which runs the steps and the (host-synchronous) H2D copies one after another:
  ``max(D2H, CPU Adam + H2D)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

from moeplan.catalog.host_memory import HostMemory, host_memory
from moeplan.errors import InputError
from moeplan.i18n.messages import msg
from moeplan.inputs.resolved import Scenario
from moeplan.model.time.context import StepContext
from moeplan.structure.numerics import optimizer_offload_fraction

#: host-link bytes per offloaded parameter, device to host: the gradient as fp32 (cast on the GPU)
D2H_BYTES_PER_PARAM = 4
#: host-link bytes per offloaded parameter, host to device: the fp32 master (cast to bf16 on the GPU)
H2D_BYTES_PER_PARAM = 4
#: host DRAM bytes of fused AdamW per parameter: reads fp32 parameter, gradient, exp_avg, exp_avg_sq
#: (4 x 4 B), writes parameter, exp_avg, exp_avg_sq (3 x 4 B)
CPU_ADAM_DRAM_BYTES_PER_PARAM = 4 * 4 + 3 * 4
#: the host whose figures stand in for a GPU no source gives a host for (named in the notes)
FALLBACK_HOST_GPU = "h100"
#: the megatron-core key (carried in ``unmodelled_keys``) that overlaps the transfers with the host step
OVERLAP_KEY = "overlap_cpu_optimizer_d2h_h2d"


@dataclass(frozen=True)
class OffloadedStep:
    """The offloaded optimizer step of one rank, seconds.

    Attributes:
        d2h_s: gradients to the host over the host link.
        cpu_adam_s: fused AdamW on the host at the rank's share of host DRAM bandwidth.
        h2d_s: fp32 masters back to the GPU over the host link.
        overlapped: ``overlap_cpu_optimizer_d2h_h2d`` is on.
    """

    d2h_s: float
    cpu_adam_s: float
    h2d_s: float
    overlapped: bool

    @property
    def total_s(self) -> float:
        """Sum of the three terms, or ``max(D2H, CPU Adam + H2D)`` when overlapped (module docstring)."""
        if self.overlapped:
            return max(self.d2h_s, self.cpu_adam_s + self.h2d_s)
        return self.d2h_s + self.cpu_adam_s + self.h2d_s


def overlaps_transfers(s: Scenario) -> bool:
    """``overlap_cpu_optimizer_d2h_h2d`` as stated under ``layout:`` (carried in ``unmodelled_keys``);
    unset: False, megatron-core's ``OptimizerConfig`` default.

    Raises:
        InputError: the value is not a boolean.
    """
    value = s.input.unmodelled_keys.get(OVERLAP_KEY, False)
    if not isinstance(value, bool):
        raise InputError(f"layout.{OVERLAP_KEY}", value, "true or false")
    return value


def host_of(ctx: StepContext) -> tuple[HostMemory, bool]:
    """The host memory of the run's GPU and whether it is the GPU's own (False: the stand-in
    :data:`FALLBACK_HOST_GPU`, where no source gives the GPU's host)."""
    own = host_memory(ctx.gpu.id)
    if own is not None:
        return own, True
    return cast(HostMemory, host_memory(FALLBACK_HOST_GPU)), False  # (in the packaged table)


def host_dram_share_bytes_per_s(host: HostMemory, num_gpus: int) -> float:
    """Host DRAM bandwidth one rank's host step gets, bytes/s: the host's peak over the GPUs of the
    run on it (every rank steps at once), at most ``gpus_per_host`` of them."""
    return host.dram_bytes_per_s / max(1, min(num_gpus, host.gpus_per_host))


def offloaded_step(ctx: StepContext, n_params: float) -> OffloadedStep:
    """The offloaded step of a rank whose host holds ``n_params`` parameters' optimizer state."""
    host, _ = host_of(ctx)
    link = ctx.host_link_bytes_per_s
    return OffloadedStep(
        d2h_s=n_params * D2H_BYTES_PER_PARAM / link,
        cpu_adam_s=n_params * CPU_ADAM_DRAM_BYTES_PER_PARAM / host_dram_share_bytes_per_s(host, ctx.num_gpus),
        h2d_s=n_params * H2D_BYTES_PER_PARAM / link,
        overlapped=overlaps_transfers(ctx.s),
    )


def cpu_offload_notes(ctx: StepContext) -> list[str]:
    """The assumptions of the offloaded step, where the text output shows them: the host figures and
    the thread assumption its bandwidth bound rests on, and the overlap mode; empty without offload."""
    if optimizer_offload_fraction(ctx.s) <= 0:
        return []
    host, own = host_of(ctx)
    share = host_dram_share_bytes_per_s(host, ctx.num_gpus)
    out: list[str] = []
    if not own:
        out.append(msg("cpu_offload.host_unknown", gpu=ctx.gpu.id, host=host.name))
    out.append(
        msg(
            "cpu_offload.host_step",
            host=host.name,
            host_gb_s=host.dram_bytes_per_s / 1e9,
            gpus=min(ctx.num_gpus, host.gpus_per_host),
            share_gb_s=share / 1e9,
            cores=host.cpu_cores // host.gpus_per_host,
        )
    )
    link_gb_s = ctx.host_link_bytes_per_s / 1e9
    if overlaps_transfers(ctx.s):
        out.append(msg("cpu_offload.overlap_on", link_gb_s=link_gb_s))
    else:
        out.append(msg("cpu_offload.overlap_off", link_gb_s=link_gb_s))
    return out


__all__ = [
    "CPU_ADAM_DRAM_BYTES_PER_PARAM",
    "D2H_BYTES_PER_PARAM",
    "H2D_BYTES_PER_PARAM",
    "OffloadedStep",
    "cpu_offload_notes",
    "host_dram_share_bytes_per_s",
    "host_of",
    "offloaded_step",
    "overlaps_transfers",
]
