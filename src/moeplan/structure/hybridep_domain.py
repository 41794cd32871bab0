"""HybridEP's NVLink domain: how many ranks of its EP·ETP group share one, in one place for the time
model, the memory model, the rules and the export.

``deep_ep.HybridEPBuffer`` (DeepEP's ``hybrid-ep`` branch @94a9f8f, ``deep_ep/hybrid_ep_buffer.py``
L61-76) reads ``NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN`` with Python's ``int()`` when the variable is
set (so ``" 8 "`` and ``"08"`` read as 8, and ``""`` or ``"8.0"`` raise ``ValueError`` at buffer
creation), takes it over the ranks it detects, and asserts that the group size is divisible by it
(a value of 0 raises ``ZeroDivisionError`` there). Unset, it detects the ranks that reach each other
over NVLink: the group's ranks inside one NVLink domain, which a group that does not fit in one domain
must split into equal parts.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping

#: the environment variable HybridEPBuffer reads
DOMAIN_VARIABLE = "NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN"


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


def usable_stated_ranks(environment: Mapping[str, str], group: int) -> int | None:
    """The stated ranks per domain when ``HybridEPBuffer`` runs with them: a positive integer dividing
    ``group``; None when unset or when it would stop at start-up (the rule
    ``deployment.hybridep_ranks_per_domain`` reports that)."""
    try:
        n = stated_ranks_per_domain(environment)
    except ValueError:
        return None
    return n if n is not None and n > 0 and group % n == 0 else None


def hybridep_ranks_per_domain(environment: Mapping[str, str], group: int, domain_gpus: int | None) -> int | None:
    """HybridEP's ranks per NVLink domain for a group of ``group`` ranks (EP·ETP): the stated value when
    usable (:func:`usable_stated_ranks`), else :func:`hybridep_domain` of the group and the GPU's
    NVLink domain of ``domain_gpus`` GPUs; None when neither is known."""
    stated = usable_stated_ranks(environment, group)
    if stated is not None:
        return stated
    return None if domain_gpus is None else hybridep_domain(group, domain_gpus)


__all__ = [
    "DOMAIN_VARIABLE",
    "hybridep_domain",
    "hybridep_ranks_per_domain",
    "stated_ranks_per_domain",
    "usable_stated_ranks",
]
