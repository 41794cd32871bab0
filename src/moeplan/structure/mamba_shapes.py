"""Shapes, parameters and FLOPs of one Mamba-2 mixer (megatron-core ``ssm/mamba_mixer.py::MambaMixer``).

Widths (elements), with ``nh`` = ``mamba_num_heads``, ``p`` = ``mamba_head_dim``, ``N`` =
``mamba_state_dim``, ``g`` = ``mamba_num_groups``, ``k`` = ``mamba_conv_kernel``:

- ``d_inner = nh·p``; ``in_proj``: h → ``2·d_inner + 2·g·N + nh`` (z, x, B, C, dt), no bias;
- ``conv1d``: depthwise over x, B, C (``conv_dim = d_inner + 2·g·N`` channels), weight ``conv_dim·k``
  plus bias ``conv_dim`` (``assert conv_bias``);
- ``A_log``, ``dt_bias``, ``D`` (``D_has_hdim=False``): ``nh`` each; the gated RMSNorm: ``d_inner``;
- ``out_proj``: ``d_inner`` → h, no bias. The hybrid layer's own pre-norm (h) is counted by the layer.

Every one of these is split by TP over heads and groups (``tensor_model_parallel=True`` on A_log, D,
dt_bias and the norm weight; megatron-core asserts ``nheads % tp == 0`` and ``ngroups % tp == 0``).
"""

from __future__ import annotations

from moeplan.errors import InputError
from moeplan.inputs.model_spec import ModelSpec


def mamba_dims(m: ModelSpec) -> tuple[int, int, int, int, int]:
    """(heads, head dim, state dim, groups, conv kernel) of the model's Mamba-2 mixer.

    Raises:
        InputError: naming the first Mamba field the model does not give.
    """
    return (
        m.given("mamba_num_heads"),
        m.given("mamba_head_dim"),
        m.given("mamba_state_dim"),
        m.given("mamba_num_groups"),
        m.given("mamba_conv_kernel"),
    )


def mamba_params(m: ModelSpec) -> int:
    """Parameters of one Mamba-2 mixer, unsharded (elements, exact per ``MambaMixer``'s tensors)."""
    nh, p, n, g, k = mamba_dims(m)
    d_inner, h = nh * p, m.hidden_size
    conv_dim = d_inner + 2 * g * n
    in_proj = h * (2 * d_inner + 2 * g * n + nh)
    return in_proj + conv_dim * (k + 1) + 3 * nh + d_inner + d_inner * h


def mamba_tp_params(m: ModelSpec, tp: int) -> int:
    """Parameters of one Mamba-2 mixer on one TP rank (elements): every tensor is split over heads
    and groups.

    Raises:
        InputError: when TP does not divide the Mamba heads or groups (megatron-core asserts both).
    """
    nh, _, _, g, _ = mamba_dims(m)
    if nh % tp:
        raise InputError("mamba_num_heads vs TP", nh, f"a multiple of TP={tp} (megatron-core MambaMixer)")
    if g % tp:
        raise InputError("mamba_num_groups vs TP", g, f"a multiple of TP={tp} (megatron-core MambaMixer)")
    return mamba_params(m) // tp


def mamba_bridge_flops_term(m: ModelSpec) -> float:
    """Per-token forward FLOPs / 2 of one Mamba layer as Megatron Bridge counts model FLOPs
    (``training/utils/flop_utils.py::mamba_layer_flops``, the same in Megatron-LM ``training.py``):
    ``h·(2·d_in + 2·g·N + nh) + 3.5·d_in·N + d_in·h`` with ``d_in = 2·h`` (Bridge takes the
    expand-2 width, not ``nh·p``; for Nemotron-3 Nano 5376 against the mixer's 4096) and the scan as
    ``7·d_in·N``. Kept as Bridge writes it so that TFLOP/s compare one to one with its tables."""
    nh, _, n, g, _ = mamba_dims(m)
    h = m.hidden_size
    d_in = 2 * h
    return h * (2 * d_in + 2 * g * n + nh) + 3.5 * d_in * n + d_in * h


def mamba_executed_flops(m: ModelSpec) -> tuple[float, float, float]:
    """Per-token forward FLOPs of one Mamba-2 mixer as it executes: (projections, causal conv, SSD scan).

    Projections: ``2·h·(2·d_inner + 2·g·N + nh) + 2·d_inner·h``; conv: ``2·conv_dim·k``; the SSD
    chunked scan with chunk length Q (``mamba_chunk_size``; Dao & Gu 2024, "Transformers are SSMs",
    §6 / the ``mamba_chunk_scan_combined`` kernel): the intra-chunk ``C·Bᵀ`` scores (``2·Q·N`` per
    group and token), their product with x (``2·Q·p`` per head and token, causal: half), and the
    inter-chunk state in/out products (``2·2·N·p`` per head and token): per token
    ``2·g·Q·N + nh·Q·p + 4·nh·N·p``.
    """
    nh, p, n, g, k = mamba_dims(m)
    d_inner, h, q = nh * p, m.hidden_size, m.mamba_chunk_size
    proj = 2.0 * h * (2 * d_inner + 2 * g * n + nh) + 2.0 * d_inner * h
    conv = 2.0 * (d_inner + 2 * g * n) * k
    scan = 2.0 * g * q * n + nh * q * p + 4.0 * nh * n * p
    return proj, conv, scan
