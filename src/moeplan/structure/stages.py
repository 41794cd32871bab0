"""Pipeline split: which decoder layers each (PP rank, virtual stage) builds.

Implements Megatron-Core's three ways to split (``megatron_facts.md`` §4.4, vendored in ``tests/data/reference``):
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

from moeplan.structure.flops import model_flops

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


def _compress(stage: str) -> str:
    """``Ettt`` → ``E,t*3`` in the layout grammar."""
    out, i = [], 0
    while i < len(stage):
        j = i
        while j < len(stage) and stage[j] == stage[i]:
            j += 1
        out.append(stage[i] if j - i == 1 else f"{stage[i]}*{j - i}")
        i = j
    return ",".join(out)


def output_stage_layers(m, seq_length: int, tp: int, mtp_layers: int) -> float:
    """The last stage's work beyond its decoder layers, in average decoder layers: the output layer
    (logits) and each MTP block (a decoder layer, its 2h→h projection and its own logits), from
    Megatron's FLOP count (:func:`moeplan.structure.flops.model_flops`). DeepSeek-V3 with one MTP block:
    3.9 (logits 1.4, MTP block 2.5); 0 for a partial model without the dimensions to count."""
    key = (id(m), seq_length, tp, mtp_layers)
    hit = _TAIL_CACHE.get(key)
    if hit is not None and hit[0] is m:
        return hit[1]
    try:
        base = model_flops(m, seq_length, tp, 0).parts
        decoder = sum(v for k, v in base.items() if k != "logits")
        avg = decoder / max(1, m.num_layers)
        extra = model_flops(m, seq_length, tp, mtp_layers).total - decoder
    except (TypeError, ValueError, ZeroDivisionError):  # a partial model: no FLOP count to weigh with
        avg = extra = 0.0
    out = extra / avg if avg > 0 else 0.0
    if len(_TAIL_CACHE) > 1000:
        _TAIL_CACHE.clear()
    _TAIL_CACHE[key] = (m, out)
    return out


_TAIL_CACHE: dict[tuple, tuple] = {}


def split_options(num_layers: int, pp: int, vpp: int, mtp_layers: int = 0, tail_layers: float = 0.0) -> list[dict]:
    """Every way to make ``num_layers`` split over ``pp × vpp`` virtual stages, best first: counting the
    embedding and/or the loss as a layer where that divides (how Megatron Bridge splits Qwen3-235B's
    94 layers on PP 8), then the balanced ``pipeline_model_parallel_layout`` (:func:`balanced_layout`);
    [] when the layers divide evenly already or nothing splits."""
    n = pp * vpp
    if n == 1 or num_layers % n == 0:
        return []
    out: list[dict] = []
    if (num_layers + 1) % n == 0:
        out.append({"account_for_embedding_in_pipeline_split": True})
    if (num_layers + 2) % n == 0:
        out.append({"account_for_embedding_in_pipeline_split": True, "account_for_loss_in_pipeline_split": True})
    text = balanced_layout(num_layers, pp, vpp, mtp_layers, tail_layers)
    if text is not None:
        out.append({"pipeline_model_parallel_layout": text})
    return out


def pipeline_split(num_layers: int, pp: int, vpp: int, mtp_layers: int = 0, tail_layers: float = 0.0) -> dict | None:
    """Keys that make ``num_layers`` decoder layers split over ``pp × vpp`` virtual stages.

    Even split when it divides; else counting the embedding and/or the loss as a layer
    (``account_for_*_in_pipeline_split``, as Megatron Bridge's DeepSeek recipes do); else an explicit
    ``pipeline_model_parallel_layout``. Its stages are balanced with the last one's output layer and
    MTP blocks weighing ``tail_layers`` decoder layers (:func:`output_stage_layers`; the embedding
    lookup weighs nothing): the fewest layers per stage such that all fit, extra layers on the middle
    stages. DeepSeek-V3 (61 layers, one MTP block) on PP 16 gives ``Et*4|(t*4|)*14tmL``, the layout
    Megatron Bridge's recipe sets. None when a virtual stage would be empty of decoder layers and
    holds nothing else.

    Returns:
        a mapping of Megatron layout keys ({} for the even split).
    """
    n = pp * vpp
    if pp == 1 and vpp == 1:
        return {}
    if num_layers < n:
        return None
    if num_layers % n == 0:
        return {}
    if (num_layers + 1) % n == 0:
        return {"account_for_embedding_in_pipeline_split": True}
    if (num_layers + 2) % n == 0:
        return {"account_for_embedding_in_pipeline_split": True, "account_for_loss_in_pipeline_split": True}
    text = balanced_layout(num_layers, pp, vpp, mtp_layers, tail_layers)
    return None if text is None else {"pipeline_model_parallel_layout": text}


@functools.lru_cache(maxsize=4096)  # a pure function of numbers; a plan asks for each split many times
def balanced_layout(num_layers: int, pp: int, vpp: int, mtp_layers: int = 0, tail_layers: float = 0.0) -> str | None:
    """A balanced ``pipeline_model_parallel_layout`` string for ``num_layers`` decoder layers over
    ``pp × vpp`` virtual stages (the last stage's output layer and MTP blocks weighing ``tail_layers``
    decoder layers; see :func:`pipeline_split`), whether or not the layers divide evenly. None when a
    virtual stage would be empty of decoder layers and hold nothing else."""
    n = pp * vpp
    if num_layers < n:
        return None
    weight = [0.0] * n
    weight[-1] = max(0.0, tail_layers)
    # the smallest stage load T (layers + weight) at which every layer has a place
    loads = sorted({w + k for w in set(weight) for k in range(num_layers + 1)})
    t = next(x for x in loads if sum(max(0, int(x - w + 1e-9)) for w in weight) >= num_layers)
    counts = [max(0, int(t - w + 1e-9)) for w in weight]
    # any surplus comes off the most loaded stages: the ends first (the first stage holds the most
    # in-flight microbatches in 1F1B), then the stages farthest from the middle
    for _ in range(sum(counts) - num_layers):
        i = max(
            (j for j in range(n) if counts[j] > 0),
            key=lambda j: (counts[j] + weight[j], j in (0, n - 1), abs(j - (n - 1) / 2), j),
        )
        counts[i] -= 1
    if counts[-1] == 0 and not (mtp_layers or tail_layers):
        return None
    stages = []
    for i, c in enumerate(counts):
        syms = ("E" if i == 0 else "") + "t" * c + ("m" * mtp_layers + "L" if i == n - 1 else "")
        stages.append(syms)
    return "|".join(_compress(s) for s in stages)
