"""Pipeline split: which decoder layers each (PP rank, virtual stage) builds.

Implements Megatron-Core's three ways to split (``megatron_facts.md`` §4.4):
even split (optionally counting the embedding / loss as one layer each:
``account_for_embedding_in_pipeline_split`` / ``account_for_loss_in_pipeline_split``), uneven
first/last stages (``num_layers_in_first_pipeline_stage`` / ``..._last_...``) and an explicit
``pipeline_model_parallel_layout`` (grammar of ``PipelineParallelLayerLayout.parse_str_to_list``:
``E`` embedding, ``L`` loss, ``t`` decoder, ``m`` MTP, ``|`` stage separator, ``x*n`` and
``(...)*n`` repeats, commas ignored). Virtual stage ``s`` of ``PP·VPP`` lives on PP rank
``s mod PP`` as its chunk ``s // PP`` (interleaved schedule order).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

#: longest expanded layout accepted (layers, stage separators, E/m/L): far above any model's layers
MAX_LAYOUT_SYMBOLS = 100_000
_GROUP = re.compile(r"\(([^()]*)\)\*(\d+)")
_SINGLE = re.compile(r"([EtmL])\*(\d+)")
_ALLOWED = set("EtmL|")


class LayoutSyntaxError(ValueError):
    """A ``pipeline_model_parallel_layout`` string that does not parse."""


def parse_layout(layout: str | list[list[str]]) -> list[list[str]]:
    """Parse a layout into a list of virtual stages, each a list of symbols ``E``/``t``/``m``/``L``.

    Accepts the string grammar and the list form (``"embedding"``, ``"decoder"``, ``"mtp"``, ``"loss"``).

    Raises:
        LayoutSyntaxError: unknown symbols or unbalanced repeats.
    """
    if isinstance(layout, list):
        names = {"embedding": "E", "decoder": "t", "mtp": "m", "loss": "L"}
        out = []
        for stage in layout:
            syms = []
            for item in stage:
                if item not in names:
                    raise LayoutSyntaxError(f"unknown layer name {item!r}; allowed: {', '.join(names)}")
                syms.append(names[item])
            out.append(syms)
        return out
    return [list(stage) for stage in _parse_string(layout)]


@functools.lru_cache(maxsize=256)
def _parse_string(layout: str) -> tuple[tuple[str, ...], ...]:
    """The string grammar of :func:`parse_layout`, cached (the search parses the same few layouts
    thousands of times). Raises LayoutSyntaxError."""
    s = re.sub(r"[\s,]", "", layout)

    def expand(mt: re.Match) -> str:
        n = int(mt.group(2))
        if n * max(1, len(mt.group(1))) > MAX_LAYOUT_SYMBOLS:
            raise LayoutSyntaxError(
                f"repeat {mt.group(0)[:40]!r} expands past {MAX_LAYOUT_SYMBOLS} symbols; a layout lists each layer once"
            )
        return mt.group(1) * n

    for _ in range(100):
        new = _GROUP.sub(expand, s)
        if len(new) > MAX_LAYOUT_SYMBOLS:
            raise LayoutSyntaxError(f"layout expands past {MAX_LAYOUT_SYMBOLS} symbols; a layout lists each layer once")
        if new == s:
            break
        s = new
    s = _SINGLE.sub(expand, s)
    if len(s) > MAX_LAYOUT_SYMBOLS:
        raise LayoutSyntaxError(f"layout expands past {MAX_LAYOUT_SYMBOLS} symbols; a layout lists each layer once")
    bad = set(s) - _ALLOWED
    if bad:
        raise LayoutSyntaxError(
            f"unexpected {''.join(sorted(bad))!r} after expanding repeats; allowed symbols: E t m L | "
            "and repeats x*n, (...)*n"
        )
    return tuple(tuple(stage) for stage in s.split("|"))


@dataclass(frozen=True)
class StagePlan:
    """Layer assignment: ``layers[pp_rank][vp_stage]`` = decoder layer ids (0-based);
    ``embedding`` / ``loss`` / ``mtp`` give (pp_rank, vp_stage) holders."""

    layers: list[list[list[int]]]
    embedding: tuple[int, int]
    loss: tuple[int, int]
    mtp: list[tuple[int, int]]

    def rank_layers(self, pp_rank: int) -> list[int]:
        """All decoder layers built by one PP rank (all its virtual stages)."""
        return [i for chunk in self.layers[pp_rank] for i in chunk]


def _assign(counts: list[int], pp: int, vpp: int) -> list[list[list[int]]]:
    """Assign consecutive layer ids to virtual stages in schedule order (``counts[s]``)."""
    layers: list[list[list[int]]] = [[[] for _ in range(vpp)] for _ in range(pp)]
    nxt = 0
    for s, n in enumerate(counts):
        layers[s % pp][s // pp] = list(range(nxt, nxt + n))
        nxt += n
    return layers


def plan_stages(
    num_layers: int,
    pp: int,
    vpp: int | None = None,
    *,
    first: int | None = None,
    last: int | None = None,
    account_for_embedding: bool = False,
    account_for_loss: bool = False,
    layout: str | list[list[str]] | None = None,
    mtp_num_layers: int = 0,
) -> StagePlan | None:
    """Split ``num_layers`` over ``pp`` ranks × ``vpp`` virtual stages as Megatron does.

    Returns None when the split is not legal (the pipeline rules report why).
    """
    v = vpp or 1
    last_vs = (pp - 1, v - 1)
    mtp_at = [last_vs] * (1 if mtp_num_layers else 0)
    if layout is not None:
        try:
            stages = parse_layout(layout)
        except LayoutSyntaxError:
            return None
        if len(stages) % pp:
            return None
        v = len(stages) // pp
        counts = [st.count("t") for st in stages]
        if sum(counts) != num_layers:
            return None
        emb = next((i for i, st in enumerate(stages) if "E" in st), 0)
        loss = next((i for i, st in enumerate(stages) if "L" in st), len(stages) - 1)
        mtp = [(i % pp, i // pp) for i, st in enumerate(stages) for _ in range(st.count("m"))]
        return StagePlan(_assign(counts, pp, v), (emb % pp, emb // pp), (loss % pp, loss // pp), mtp)
    n_stages = pp * v
    if first is not None or last is not None:
        f = first if first is not None else None
        la = last if last is not None else None
        middle_ranks = pp - (f is not None) - (la is not None)
        rest = num_layers - (f or 0) - (la or 0)
        if middle_ranks <= 0:
            if rest != 0:
                return None
            per_mid = 0
        else:
            if rest < 0 or rest % middle_ranks:
                return None
            per_mid = rest // middle_ranks
        per_rank = [per_mid] * pp
        if f is not None:
            per_rank[0] = f
        if la is not None:
            per_rank[-1] = la
        if any(n % v for n in per_rank):
            return None
        counts = [per_rank[s % pp] // v for s in range(n_stages)]
        return StagePlan(_assign(counts, pp, v), (0, 0), last_vs, mtp_at)
    total = num_layers + int(account_for_embedding) + int(account_for_loss)
    if total % n_stages:
        return None
    per = total // n_stages
    counts = [per] * n_stages
    if account_for_embedding:
        counts[0] -= 1
    if account_for_loss:
        counts[-1] -= 1
    if min(counts) < 0:
        return None
    return StagePlan(_assign(counts, pp, v), (0, 0), last_vs, mtp_at)


def balanced_stages(num_layers: int, pp: int, vpp: int | None = None, mtp_num_layers: int = 0) -> StagePlan:
    """A near-even split for layers that do not divide by PP·VPP: virtual stages get ``⌊L/n⌋`` or
    ``⌈L/n⌉`` layers, the extra ones in the middle stages (first and last stages also hold the
    embedding and the loss, as Megatron Bridge's recipe layouts arrange them). Used only to estimate
    a layout whose split is not given; the pipeline rules still report it."""
    v = vpp or 1
    n = pp * v
    base, extra = divmod(num_layers, n)
    counts = [base] * n
    order = sorted(range(n), key=lambda i: (i in (0, n - 1), abs(i - (n - 1) / 2)))
    for i in order[:extra]:
        counts[i] += 1
    mtp_at = [(pp - 1, v - 1)] * (1 if mtp_num_layers else 0)
    return StagePlan(_assign(counts, pp, v), (0, 0), (pp - 1, v - 1), mtp_at)
