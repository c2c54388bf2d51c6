"""Relevance at the unit a reader judges: a chunk's BM25 with its neighbours'.

A question is answered by a page or a short document (an abstract, a filing's page), and the
chunker cuts one into several chunks (a SciFact abstract into ~2.4): scored alone, a chunk
holding half of the evidence loses to one stray chunk elsewhere holding more of the query's
words. So each chunk the lexical leg ranks gets `weight` times the BM25 of its unit, the
chunk and the RADIUS chunks either side of it on its page scored as one document
(bm25.Ranking.as_documents: their term counts summed, from the postings the leg already
read), while the hit still points at the chunk's own lines. An abstract of two or three
chunks is then (nearly) whole in each unit; a long page (a filing's page of tables and notes,
a text file, which is one page) is judged by the passage around the chunk, not by all the
rest it says.

Measured on every set's dev split (docs/quality.md): SciFact and FinanceBench gain, Korean
and Chinese hold; a window of 1 chunk either side beat the whole page (8 either side) on
FinanceBench and held on the others.

Layer: ranking, given the index's BM25 and the chunks' pages (index/pages.py).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

from index import pages

if TYPE_CHECKING:  # numpy, loaded by the first search: request.py imports WEIGHT at start-up
    from index import bm25

# ---------------------------------------------------------------------------
WEIGHT = 0.5  # share of the unit's BM25 added to a chunk's (search.unitWeight; 0 = off)
POOL = 3  # the lexical leg rescores this many times the chunks it keeps
RADIUS = 1  # a unit is the chunk and at most this many chunks either side, on its page
# ---------------------------------------------------------------------------


class WithUnits(Mapping):
    """A BM25 ranking (rowid -> score) whose scores carry their units': `top(n)` rescores
    the POOL * n best chunks and keeps the n best; `get` scores one chunk (the vector leg's
    finds). Chunks no query term is in stay out, as in the ranking it wraps."""

    def __init__(self, conn, ranking: bm25.Ranking, weight: float):
        self.conn, self.ranking, self.weight = conn, ranking, weight
        self.scores: dict[int, float] = {}
        count = max(pages.page_count(conn), 1)
        # a unit's average length: a page's, but no longer than the window
        per_unit = min(ranking.chunks / count, 2 * RADIUS + 1) if ranking.chunks else 1.0
        self.average = max(per_unit, 1.0) * ranking.average

    def top(self, n: int) -> list[tuple[int, float]]:
        pool = self.ranking.top(n * POOL)
        self._score(dict(pool))
        ranked = sorted(((rowid, self.scores[rowid]) for rowid, _ in pool),
                        key=lambda pair: (-pair[1], pair[0]))
        return ranked[:n]

    def __getitem__(self, rowid: int) -> float:
        return self.many([rowid])[rowid]  # KeyError: no term of the query

    def many(self, rowids: Iterable[int]) -> dict[int, float]:
        """The scores of those of `rowids` a query term is in, their pages read in one batch."""
        rowids = list(rowids)
        self._score(self.ranking.many(r for r in rowids if r not in self.scores))
        return {rowid: self.scores[rowid] for rowid in rowids if rowid in self.scores}

    def __len__(self) -> int:
        return len(self.ranking)

    def __iter__(self) -> Iterator[int]:
        return iter(self.ranking)

    def _score(self, raw: dict[int, float]) -> None:
        """Each chunk's score plus `weight` times its unit's."""
        todo = [rowid for rowid in raw if rowid not in self.scores]
        if not todo:
            return
        runs = pages.page_chunks(self.conn, todo)
        units = [_window(runs.get(rowid, [rowid]), rowid) for rowid in todo]
        for rowid, unit in zip(todo, self.ranking.as_documents(units, self.average).tolist(),
                               strict=True):
            self.scores[rowid] = raw[rowid] + self.weight * unit


def _window(page: Sequence[int], rowid: int) -> Sequence[int]:
    """The chunks of `page` (rowids, ascending) at most RADIUS places either side of rowid."""
    at = bisect.bisect_left(page, rowid)
    return page[max(0, at - RADIUS):at + RADIUS + 1]


def scores_of(scores: Mapping[int, float], rowids: list[int]) -> dict[int, float]:
    """The scores of those of `rowids` that match, in one batch where units are on."""
    if hasattr(scores, "many"):  # a bm25.Ranking, with or without units
        return scores.many(rowids)
    return {rowid: score for rowid in rowids if (score := scores.get(rowid)) is not None}


def with_units(conn, scores: Mapping[int, float], weight: float) -> Mapping[int, float]:
    """`scores` with their units' evidence; as they are when off or when the index scores
    through FTS5's fallback (bm25.Scores holds no postings to sum)."""
    from index import bm25
    if weight <= 0 or not isinstance(scores, bm25.Ranking):
        return scores
    return WithUnits(conn, scores, weight)
