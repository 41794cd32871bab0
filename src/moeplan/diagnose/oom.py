"""Read a CUDA out-of-memory message and say whether it is fragmentation or real demand.

PyTorch prints (``c10/cuda/CUDACachingAllocator.cpp``), in its current form: "Tried to allocate X. GPU 0
has a total capacity of T of which F is free. Including non-PyTorch memory, this process has U memory in
use. Of the allocated memory A is allocated by PyTorch, and R is reserved by PyTorch but unallocated.";
and in the older form: "Tried to allocate X (GPU 0; T total capacity; A already allocated; F free; R'
reserved in total by PyTorch)". Sizes in GiB / MiB / KiB / B as printed.

Fragmentation: the request would fit in the reserved-but-unallocated memory (or that memory is a large
share of the total) → set ``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True``. Otherwise the demand is
real and the fixes are the memory model's (recompute, CP, PP, EP, offload).

Where it ran out (:func:`oom_site`): the traceback before the message names the code that asked, and
the first fix is the one for that site: an inference engine (SGLang, vLLM, TensorRT-LLM: the fixes for
training do not apply), the loss over the vocabulary (the logits of a rank's tokens × the vocabulary,
in FP32 on the unfused path), the optimizer step, the attention kernels, the MoE layer, or the model's
construction (its weights do not fit).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, replace

from moeplan.errors import InputError
from moeplan.i18n.messages import msg
from moeplan.model.memory import judge_memory

_UNIT = {
    "BYTES": 1,
    "B": 1,
    "KIB": 2**10,
    "MIB": 2**20,
    "GIB": 2**30,
    "TIB": 2**40,
    "KB": 2**10,
    "MB": 2**20,
    "GB": 2**30,
}
_SIZE = r"([0-9.]+)\s*(TiB|GiB|MiB|KiB|bytes|B|GB|MB|KB)\b"


def _bytes(num: str, unit: str) -> int | None:
    try:
        return int(float(num) * _UNIT[unit.upper()])
    except (ValueError, OverflowError):  # "1.2.3 GiB", ". GiB"
        return None


def _first(*values: int | None) -> int | None:
    return next((v for v in values if v is not None), None)


def human_bytes(n: int | None) -> str:
    """Bytes as GiB / MiB / KiB / B, whichever reads best ("?" for None)."""
    if n is None:
        return "?"
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n} B"


@dataclass(frozen=True)
class OomReport:
    """Figures of one OOM message (bytes; None when the message does not give them) and the diagnosis."""

    requested_bytes: int
    total_bytes: int | None
    free_bytes: int | None
    allocated_bytes: int | None
    reserved_unallocated_bytes: int | None
    process_in_use_bytes: int | None
    gpu_index: int | None
    fragmentation: bool | None
    diagnosis: str
    fixes: list[str]
    #: where it ran out, from the traceback (:func:`oom_site`); None when the text does not say
    site: str | None = None

    @property
    def held_bytes(self) -> int | None:
        """Memory the process held when it failed: "this process has N in use", else allocated +
        reserved-but-unallocated, else None."""
        if self.process_in_use_bytes is not None:
            return self.process_in_use_bytes
        if self.allocated_bytes is None:
            return None
        return self.allocated_bytes + (self.reserved_unallocated_bytes or 0)

    def to_dict(self) -> dict:
        return asdict(self)


def _diagnose(requested: int, total: int | None, unalloc: int | None) -> tuple[bool | None, str, list[str]]:
    """Fragmentation or real demand, from the request, the GPU total and the reserved-but-unallocated
    memory (bytes; None when the message does not give them): (fragmentation — None when it cannot
    be told —, the diagnosis, the fixes to try)."""
    # fragmentation: the idle reserve could hold the request (or is a tenth of the GPU) and is not a
    # rounding-size crumb (at least 0.5 % of the GPU, or 64 MiB when the total is not given)
    floor = 0.005 * total if total else 64 * 2**20
    frag: bool | None = None
    if unalloc is not None:
        frag = unalloc >= floor and (unalloc >= requested or bool(total and unalloc > 0.1 * total))
    if frag is None:
        diagnosis: str = msg("oom.cannot_tell")
        fixes: list[str] = [msg("oom.find_full_message"), msg("oom.run_estimate_to_compare")]
    elif frag:
        diagnosis = msg("oom.fragmentation", unallocated=human_bytes(unalloc), requested=human_bytes(requested))
        fixes = [msg("oom.set_expandable_segments"), msg("oom.then_recheck_peak")]
    else:
        diagnosis = "real demand: the allocator has no large idle reserve; the layout needs less memory per GPU"
        fixes = [
            "run `moeplan estimate SCENARIO` to see which stage and term is largest",
            "selective recompute (moe_act, layernorm; mla_up_proj on MLA models), then full recompute",
            "more CP or PP, or EP for expert weights; optimizer CPU offload",
        ]
    return frag, diagnosis, fixes


#: where an OOM ran out, by the names its traceback's frames carry (file path, function name and the
#: code line printed under it, lower case), tried in this order on each frame from the innermost out:
#: (site, names)
_SITES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("inference", ("sglang", "vllm", "tensorrt_llm", "/trtllm")),
    ("loss", ("cross_entropy", "compute_language_model_loss", "lm_head", "output_layer")),
    ("optimizer", ("optimizer.step", "/optimizer/", "adam", "step_with_ready_grads")),
    ("attention", ("dot_product_attention", "flash_attn", "fused_attn", "core_attention", "scaled_dot_product")),
    ("moe", ("token_dispatcher", "/moe/", "experts", "grouped_gemm", "deep_ep", "hybrid_ep", "fused_a2a")),
)
#: how much of the text before the message is read for its traceback (characters)
_TRACEBACK_CHARS = 8000
#: one frame of a Python traceback: its file, its function and the code line printed under it
_FRAME = re.compile(r'File "([^"\n]{1,400})", line [0-9]{1,9}, in ([^\s]{1,200})(?:\n([^\n]{0,400}))?')


def oom_site(text: str, message_at: int) -> str | None:
    """Where the OOM at ``message_at`` (the index of its "Tried to allocate") ran out, from the traceback
    printed before it (its last :data:`_TRACEBACK_CHARS` characters): from the innermost frame out, the
    first that names a site of :data:`_SITES` decides (``inference``, ``loss``, ``optimizer``,
    ``attention``, ``moe``); when the innermost frame is a constructor (``__init__``) of Megatron or
    Transformer Engine, ``optimizer`` in an optimizer's module and ``weights`` elsewhere (the parameters
    and their gradient buffers are being allocated); None without a traceback or a frame that names one.
    Paths are read from their package on (:func:`_module_path`)."""
    frames = _FRAME.findall(text[max(0, message_at - _TRACEBACK_CHARS) : message_at])
    if not frames:
        return None
    path, func, _ = frames[-1]
    if func == "__init__" and ("megatron" in path or "transformer_engine" in path):
        # a constructor allocates: the optimizer's state in an optimizer's, else weights and their grads
        return "optimizer" if "optimizer" in _module_path(path).lower() else "weights"
    for path, func, code in reversed(frames):
        where = f"{_module_path(path)}/{func}/{code}".lower()
        for site, names in _SITES:
            if any(n in where for n in names):
                return site
    return None


def _module_path(path: str) -> str:
    """The part of a frame's file path that names its package: after the last ``site-packages`` or
    ``dist-packages``, else its last four components (``/home/adam/…`` or a ``vllm-rl`` virtual
    environment must not read as the optimizer or an inference engine)."""
    parts = path.replace("\\", "/").split("/")
    for i in range(len(parts) - 1, -1, -1):
        if parts[i] in ("site-packages", "dist-packages"):
            return "/" + "/".join(parts[i + 1 :])
    return "/" + "/".join(parts[-4:])


def _site_fixes(site: str | None, fixes: list[str]) -> list[str]:
    """``fixes`` with the fix for the site first (:func:`oom_site`); an inference engine's OOM keeps
    only its own (the training fixes do not apply there)."""
    if site is None:
        return fixes
    first = {
        "inference": msg("oom.site_inference"),
        "loss": msg("oom.site_loss"),
        "optimizer": msg("oom.site_optimizer"),
        "attention": msg("oom.site_attention"),
        "moe": msg("oom.site_moe"),
        "weights": msg("oom.site_weights"),
    }[site]
    return [first] if site == "inference" else [first, *fixes]


def _diagnosis_kind(diagnosis: str) -> str:
    """What a diagnosis of :func:`_diagnose` says before its colon (``fragmentation``, ``cannot tell
    fragmentation from real demand``), as a message where it is one of those."""
    head = diagnosis.split(":")[0]
    if head == "fragmentation":
        return msg("oom.kind_fragmentation")
    if head == "cannot tell fragmentation from real demand":
        return msg("oom.kind_cannot_tell")
    return head


def parse_oom(text: str) -> OomReport:
    """Parse the (last) CUDA OOM message in ``text``.

    Raises:
        InputError: no OOM message found.
    """
    idx = text.rfind("Tried to allocate")
    if idx < 0:
        shown = text[:60] + ("..." if len(text) > 60 else "")
        raise InputError(
            "oom",
            shown,
            "a CUDA out-of-memory message ('CUDA out of memory. Tried to allocate ...')",
            sentence=f"no CUDA out-of-memory message in {shown!r} (one reads 'CUDA out of memory. Tried to allocate ...')",
        )
    msg = re.sub(r"\s+", " ", text[idx : idx + 1200])

    def grab(pattern: str) -> int | None:
        mt = re.search(pattern, msg, re.IGNORECASE)
        return _bytes(mt.group(1), mt.group(2)) if mt else None

    requested = grab(r"Tried to allocate " + _SIZE)
    if requested is None:
        raise InputError("oom", msg[:60], "a message with the requested size ('Tried to allocate 2.00 GiB')")
    total = _first(grab(r"total capac\w* of " + _SIZE), grab(_SIZE + r" total capac"))  # 2.1 spelt "capacty"
    free = _first(grab(r"of which " + _SIZE + r" is free"), grab(_SIZE + r" free"))
    allocated = _first(grab(_SIZE + r" is allocated by PyTorch"), grab(_SIZE + r" already allocated"))
    unalloc = grab(_SIZE + r" is reserved by PyTorch but unallocated")
    if unalloc is None:  # PyTorch <= 1.3: "N cached" is the cached-but-unallocated memory
        unalloc = grab(r"free; " + _SIZE + r" cached")
    if unalloc is None:
        reserved_total = grab(_SIZE + r" reserved in total by PyTorch")
        if reserved_total is not None and allocated is not None:
            unalloc = max(0, reserved_total - allocated)
    in_use = grab(r"(?:this process|Process \d+) has " + _SIZE + r" memory in use")
    gpu = re.search(r"GPU (\d+)", msg)
    frag, diagnosis, fixes = _diagnose(requested, total, unalloc)
    site = oom_site(text, idx)
    return OomReport(
        requested,
        total,
        free,
        allocated,
        unalloc,
        in_use,
        int(gpu.group(1)) if gpu else None,
        frag,
        diagnosis,
        fixes if frag else _site_fixes(site, fixes),
        site,
    )


def reconcile_with_model(
    rep: OomReport, predicted_peak_bytes: int, capacity_bytes: int | None, reserved_bytes: int = 0
) -> tuple[OomReport, list[str]]:
    """Weigh the message against the memory model of the run's scenario: (the report, notes to print).

    - A layout whose memory verdict is ``does-not-fit`` (:func:`moeplan.model.memory.judge_memory`, the
      verdict every command gives: even the low edge of the memory model's band is over the usable
      memory) is real demand whatever the allocator's idle reserve says: the reserve is a symptom,
      and ``expandable_segments`` alone cannot make the layout fit; the report returned says so
      (``fragmentation`` False, diagnosis and fixes rewritten). A ``tight`` verdict (the band crosses
      the usable memory) leaves the message's own reading standing, with a note that the model
      cannot tell.
    - A message whose GPU total differs from the scenario's usable memory by more than 10 % comes
      from another GPU: fixes rated against the scenario's GPU do not apply to the one that failed.

    ``capacity_bytes`` is what the training step may use (usable HBM less ``reserved_bytes``, the
    memory of a colocated engine, ``system.reserved_gib``); the GPU total compares with their sum.
    """
    notes: list[str] = []
    total = capacity_bytes + reserved_bytes if capacity_bytes else None
    if rep.total_bytes and total and abs(rep.total_bytes / total - 1) > 0.10:
        notes.append(
            msg("oom.gpu_differs_from_scenario", total=human_bytes(rep.total_bytes), usable=human_bytes(total))
        )
    if reserved_bytes and capacity_bytes:
        notes.append(
            f"system.reserved_gib: {human_bytes(reserved_bytes)} of each GPU is held by a colocated engine; "
            f"the training step has {human_bytes(capacity_bytes)}"
        )
    verdict = judge_memory(predicted_peak_bytes, capacity_bytes)
    if verdict.verdict == "tight":
        notes.append(msg("model_verdict.oom_tight", cap=(verdict.capacity_bytes or 0) / 2**30))
    if verdict.verdict == "does-not-fit" and rep.fragmentation is not False:
        rep = replace(
            rep,
            fragmentation=False,
            diagnosis=msg(
                "oom.real_demand_predicted",
                peak=human_bytes(predicted_peak_bytes),
                usable=human_bytes(capacity_bytes),
                suggested=_diagnosis_kind(rep.diagnosis),
            ),
            fixes=_site_fixes(
                rep.site, [msg("oom.one_of_the_ranked_changes"), msg("oom.expandable_segments_cannot_fit")]
            ),
        )
    return rep, notes
