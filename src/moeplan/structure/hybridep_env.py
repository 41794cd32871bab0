"""HybridEP's environment variables, read as HybridEP reads them, in one place for the time model, the
memory model, the rules and the export: its NVLink domain (how many ranks of its EP·ETP group share
one) and its integer settings.

``deep_ep.HybridEPBuffer`` (DeepEP's ``hybrid-ep`` branch @94a9f8f, ``deep_ep/hybrid_ep_buffer.py``
L61-76) reads ``NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN`` with Python's ``int()`` when the variable is
set (so ``" 8 "`` and ``"08"`` read as 8, and ``""`` or ``"8.0"`` raise ``ValueError`` at buffer
creation), takes it over the ranks it detects, and asserts that the group size is divisible by it
(a value of 0 raises ``ZeroDivisionError`` there). Unset, it detects the ranks that reach each other
over NVLink: the group's ranks inside one NVLink domain, which a group that does not fit in one domain
must split into equal parts.

Its other integer settings (``NUM_OF_TOKENS_PER_CHUNK_COMBINE_API`` and the like) are read in C++ by
``get_env_int`` (``csrc/hybrid_ep/config.cuh``): ``atoi`` of the value when set, else a default
(:func:`env_int`).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping

#: the environment variable HybridEPBuffer reads
DOMAIN_VARIABLE = "NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN"
#: HybridEP's switch between fabric handles (a multi-node NVLink domain) and CUDA IPC (one node)
MNNVL_VARIABLE = "USE_MNNVL"


def nvlink_reach_gpus(
    domain_gpus: int, gpus_per_node: int | None, environment: Mapping[str, str], mnnvl_off: frozenset[str]
) -> int:
    """The GPUs a HybridEP rank can share memory with over NVLink: the GPU's NVLink domain of
    ``domain_gpus``, but only the ``gpus_per_node`` of its node when the domain spans nodes (NVL72) and
    :data:`MNNVL_VARIABLE` is set to one of ``mnnvl_off`` (lower case; HybridEP then shares memory through
    CUDA IPC, which reaches one node: the rule ``deployment.hybridep_mnnvl_off``)."""
    off = environment.get(MNNVL_VARIABLE, "").strip().lower() in mnnvl_off
    if off and gpus_per_node is not None and domain_gpus > gpus_per_node:
        return gpus_per_node
    return domain_gpus


@functools.lru_cache(maxsize=256)
def hybridep_domain(ranks: int, domain_gpus: int) -> int:
    """HybridEP's ranks per NVLink domain without the variable: the group's ranks that share an NVLink
    domain of ``domain_gpus`` GPUs, the largest divisor of ``ranks`` not above it (``HybridEPBuffer``
    asserts that the group divides into domains). Both arguments ≥ 1."""
    top = min(ranks, domain_gpus)
    return max(d for d in range(1, top + 1) if ranks % d == 0)


def stated_ranks_per_domain(environment: Mapping[str, str]) -> int | None:
    """:data:`DOMAIN_VARIABLE` as ``HybridEPBuffer`` reads it (Python's ``int()``); None when unset.

    Raises:
        ValueError: a value ``int()`` refuses (``HybridEPBuffer`` raises the same at start-up).
    """
    text = environment.get(DOMAIN_VARIABLE)
    return None if text is None else int(text)


def usable_stated_ranks(environment: Mapping[str, str], group: int, reach_gpus: int | None) -> int | None:
    """The stated ranks per domain when ``HybridEPBuffer`` runs with them: a positive integer dividing
    ``group`` and, when ``reach_gpus`` is known (:func:`nvlink_reach_gpus`), not above it (HybridEP
    shares its buffers among that many ranks, which must reach each other over NVLink); None when unset
    or when it would stop at start-up (the rule ``deployment.hybridep_ranks_per_domain`` reports that)."""
    try:
        n = stated_ranks_per_domain(environment)
    except ValueError:
        return None
    if n is None or n <= 0 or group % n or (reach_gpus is not None and n > reach_gpus):
        return None
    return n


def hybridep_ranks_per_domain(environment: Mapping[str, str], group: int, reach_gpus: int | None) -> int | None:
    """HybridEP's ranks per NVLink domain for a group of ``group`` ranks (EP·ETP): the stated value when
    usable (:func:`usable_stated_ranks`), else :func:`hybridep_domain` of the group and the
    ``reach_gpus`` that share NVLink (:func:`nvlink_reach_gpus`); None when neither is known."""
    stated = usable_stated_ranks(environment, group, reach_gpus)
    if stated is not None:
        return stated
    return None if reach_gpus is None else hybridep_domain(group, reach_gpus)


#: the white space C's ``atoi`` skips before the number (``isspace`` in the C locale)
_C_SPACE = " \t\n\v\f\r"


def c_atoi(text: str) -> int:
    """``text`` as C's ``atoi`` reads it: leading white space skipped, an optional sign, then ASCII digits
    up to the first other character; 0 without digits. (C leaves an overflow undefined: the value is
    clamped to the 32-bit ``int`` range here.)"""
    s = text.lstrip(_C_SPACE)
    sign = -1 if s[:1] == "-" else 1
    s = s[1:] if s[:1] in ("-", "+") else s
    digits = len(s) - len(s.lstrip("0123456789"))
    significant = s[:digits].lstrip("0")  # leading zeros add nothing; 11 digits already exceed the range
    n = sign * int(significant[:11]) if significant else 0
    return max(-(2**31), min(2**31 - 1, n))


def env_int(environment: Mapping[str, str], name: str, default: int) -> int:
    """An integer setting as HybridEP's ``get_env_int`` reads it: :func:`c_atoi` of the value when set, else
    ``default``."""
    text = environment.get(name)
    return default if text is None else c_atoi(text)


__all__ = [
    "MNNVL_VARIABLE",
    "c_atoi",
    "env_int",
    "nvlink_reach_gpus",
    "DOMAIN_VARIABLE",
    "hybridep_domain",
    "hybridep_ranks_per_domain",
    "stated_ranks_per_domain",
    "usable_stated_ranks",
]
