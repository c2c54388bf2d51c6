"""Hits: a line range of one page to cite, how chunks fold into one, and its text as read back.

Overlapping or adjacent chunks of one page merge into one hit with the union of their lines;
a hit's text is re-read from the raw lines so it equals `read_range`, cut to limits.py's bounds.

Layer: query (below search.py, above fulltext.py).
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field

import fulltext
import limits


@dataclass
class Hit:
    """One place to cite: a line range of one page, with how each leg ranked it."""

    chunk_id: str
    source: str
    page: int
    line_start: int
    line_end: int
    text: str
    score: float
    ranks: dict[str, int | None] = field(default_factory=dict)
    chunk_ids: list[str] = field(default_factory=list)
    cut: bool = False  # text was cut to limits.MAX_HIT_CHARS / MAX_LINE_CHARS

    def to_json(self) -> dict:
        hit = {"chunk_id": self.chunk_id, "source": self.source, "page": self.page,
               "line_start": self.line_start, "line_end": self.line_end, "text": self.text,
               "score": round(self.score, 6), "ranks": self.ranks,
               "merged_chunk_ids": self.chunk_ids}
        if self.cut:
            hit["text_cut"] = ("text shortened; read_range(source, page, line_start, line_end) "
                               "returns the lines, and a long line's next_char_offset")
        return hit



def _touch(a: Hit, b: Hit) -> bool:
    return (a.source, a.page) == (b.source, b.page) and \
        b.line_start <= a.line_end + 1 and a.line_start <= b.line_end + 1


def _fold(into: Hit, other: Hit) -> None:
    """`into` takes `other`'s lines, chunk ids and best rank per leg."""
    into.line_start = min(into.line_start, other.line_start)
    into.line_end = max(into.line_end, other.line_end)
    into.chunk_ids += [c for c in other.chunk_ids if c not in into.chunk_ids]
    for leg, rank in other.ranks.items():
        if rank is not None and (into.ranks.get(leg) is None or rank < into.ranks[leg]):
            into.ranks[leg] = rank


def merge_into(hits: list[Hit], new: Hit) -> bool:
    """Fold `new` into a kept hit of the same page whose lines touch it; True if merged.

    A hit that grows can come to touch another kept hit (1-100 grows to 117 beside 117-131):
    those fold into the better-ranked one, so no two hits ever share a line.
    """
    hit = next((h for h in hits if _touch(h, new)), None)
    if hit is None:
        return False
    _fold(hit, new)
    while (other := next((h for h in hits if h is not hit and _touch(h, hit)), None)):
        keep, drop = (hit, other) if hits.index(hit) < hits.index(other) else (other, hit)
        _fold(keep, drop)
        hits.remove(drop)
        hit = keep
    return True


def with_text(conn: sqlite3.Connection, hit: Hit) -> Hit:
    """A hit's text is re-read from its raw lines, so it matches `read_range` exactly: merged
    hits span several chunks, and a piece of an over-long line is cited as the whole line.
    Lines and the whole text are cut to the stated bounds (limits.py)."""
    pieces = fulltext.read_lines(conn, hit.source, hit.page, hit.line_start, hit.line_end,
                                 width=limits.MAX_LINE_CHARS + 1)
    lines = [limits.cut(p.text, limits.MAX_LINE_CHARS) for p in pieces]
    hit.text, cut = limits.cut("\n".join(text for text, _ in lines), limits.MAX_HIT_CHARS)
    hit.cut = cut or any(was_cut for _, was_cut in lines)
    return hit
