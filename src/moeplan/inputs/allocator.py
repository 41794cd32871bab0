"""``PYTORCH_CUDA_ALLOC_CONF``, read the way PyTorch reads it, in one place: the memory model (the
fragmentation share of ``expandable_segments``), the rules (TE CUDA graphs with expandable segments)
and ``doctor`` all ask :func:`alloc_options` / :func:`expandable_segments`.

PyTorch's reading (``c10/core/AllocatorConfig.cpp``, ``AllocatorConfig::lexArgs`` and ``parseArgs``;
``c10/cuda/CUDAAllocatorConfig.cpp`` in releases before 2.8): every space is dropped, anywhere; the
text is a ``,``-separated list of ``key:value`` options (``roundup_power2_divisions`` may take a
bracketed ``[size:divisions,...]`` list); keys are case-sensitive; the boolean options
(``expandable_segments``, ``release_lock_on_cudamalloc``, ``pinned_use_cuda_host_register``,
``pinned_use_background_threads``) take exactly ``True`` or ``False`` — anything else stops the
process at its first CUDA allocation ("Expected a single True/False argument for
expandable_segments"). Option names moeplan does not know pass unchecked (newer releases add some).
"""

from __future__ import annotations

from collections.abc import Mapping

from moeplan.errors import InputError

#: the variable
ALLOC_CONF = "PYTORCH_CUDA_ALLOC_CONF"
#: options PyTorch reads as a boolean, spelled ``True`` or ``False`` only
BOOLEAN_OPTIONS = frozenset(
    {
        "expandable_segments",
        "release_lock_on_cudamalloc",
        "pinned_use_cuda_host_register",
        "pinned_use_background_threads",
    }
)


def _items(text: str) -> list[str]:
    """``text`` without spaces, split at the commas outside ``[...]`` (PyTorch's lexer)."""
    flat = text.replace(" ", "")
    items, depth, cur = [], 0, ""
    for ch in flat:
        depth += (ch == "[") - (ch == "]")
        if ch == "," and depth == 0:
            items.append(cur)
            cur = ""
        else:
            cur += ch
    items.append(cur)
    return items


def alloc_options(text: str | None, field: str = f"environment.{ALLOC_CONF}") -> dict[str, str]:
    """The options of a ``PYTORCH_CUDA_ALLOC_CONF`` value as PyTorch reads them (see the module
    docstring), name → value, spaces removed; ``{}`` for None or an empty value.

    Args:
        text: the variable's value.
        field: the input field named in an error (default ``environment.PYTORCH_CUDA_ALLOC_CONF``).

    Raises:
        InputError: an option that is not ``key:value``, an option given twice, or a boolean option
            whose value is not ``True`` / ``False`` (PyTorch refuses it at start-up).
    """
    if text is None or not text.strip():
        return {}
    out: dict[str, str] = {}
    for item in _items(text):
        key, sep, value = item.partition(":")
        if not sep or not key or not value or not key.replace("_", "").isalnum():
            raise InputError(field, text, "comma-separated key:value options, e.g. expandable_segments:True")
        if key in out:
            raise InputError(field, text, f"each option once ({key} is given twice)")
        if key in BOOLEAN_OPTIONS and value not in ("True", "False"):
            raise InputError(
                field, text, f"{key}:True or {key}:False (PyTorch reads the value case-sensitively and refuses {value})"
            )
        out[key] = value
    return out


def expandable_segments(environment: Mapping[str, str]) -> bool:
    """True when the environment's ``PYTORCH_CUDA_ALLOC_CONF`` turns expandable segments on
    (``expandable_segments:True``, with or without spaces); False when it is unset, ``False`` or
    absent. Raises InputError as :func:`alloc_options`."""
    return alloc_options(environment.get(ALLOC_CONF)).get("expandable_segments") == "True"


__all__ = ["ALLOC_CONF", "BOOLEAN_OPTIONS", "alloc_options", "expandable_segments"]
