"""The chunks of a page, for ranking/units.py: a page's rowids and the pages' count.

A source's chunks are written together (fulltext.replace_source), so a page's are one run of
rowids: its first and last are read, not every chunk.

Layer: storage: reads fulltext.sqlite3's chunks and sources tables.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterable, Sequence

from index.bm25_segments import GENERATION_KEY

_page_counts: dict[tuple[str, str, int], int] = {}  # (database, generation, queued)
_page_counts_lock = threading.Lock()


def page_chunks(conn: sqlite3.Connection,
                rowids: Sequence[int]) -> dict[int, Sequence[int]]:
    """The rowids of the chunks on each of these chunks' pages (ascending), by rowid. A
    source's chunks are written together, so a page's are one run of rowids: two small reads
    (the pages, then each page's first and last rowid), the chunks themselves read only for a
    page whose rowids are not one run. A run stays a range: a text file is one page of
    thousands of chunks, and a unit needs only the few around its chunk."""
    where: dict[int, tuple[int, int]] = {}
    for part in _parts(sorted(set(rowids))):
        where.update((r[0], (r[1], r[2])) for r in conn.execute(
            f"SELECT id, source_id, page FROM chunks WHERE id IN ({','.join('?' * len(part))})",
            part))
    runs: dict[tuple[int, int], Sequence[int]] = {}
    for part in _parts(sorted(set(where.values()))):
        values = ",".join(["(?, ?)"] * len(part))
        for source_id, page, first, last, count in conn.execute(  # CROSS JOIN: p, then the index
                f"WITH p(s, g) AS (VALUES {values}) SELECT s, g, min(c.id), max(c.id), count(*)"
                " FROM p CROSS JOIN chunks c ON c.source_id = p.s AND c.page = p.g GROUP BY s, g",
                [n for pair in part for n in pair]):
            runs[(source_id, page)] = range(first, last + 1) if last - first + 1 == count \
                else [r[0] for r in conn.execute("SELECT id FROM chunks WHERE source_id = ? AND"
                                                 " page = ? ORDER BY id", (source_id, page))]
    return {rowid: runs[page] for rowid, page in where.items() if page in runs}


def _parts(items: list, size: int = 200) -> Iterable[list]:
    """`items` in parts small enough for SQLite's bound-parameter limit."""
    for start in range(0, len(items), size):
        yield items[start:start + size]


def page_count(conn: sqlite3.Connection) -> int:
    """Pages of every source (a file without pages is one), counted again only when the
    chunks changed: the sum scans every source (2.4 ms a query at 15,000). A page changes
    only with its chunks, and a chunk written, deleted or re-tokenized is queued for its
    postings until a flush moves their generation: both are in the key."""
    path = conn.execute("PRAGMA database_list").fetchone()[2]
    row = conn.execute("SELECT value FROM meta WHERE key = ?", (GENERATION_KEY,)).fetchone()
    queued = conn.execute("SELECT count(*) FROM bm25_queue").fetchone()[0]
    key = (path, row[0] if row else "", queued)
    count = _page_counts.get(key)
    if count is None:
        count = conn.execute("SELECT coalesce(sum(pages), 0) FROM sources").fetchone()[0]
        with _page_counts_lock:  # one entry a database: older generations go
            for old in [k for k in _page_counts if k[0] == path]:
                del _page_counts[old]
            _page_counts[key] = count
    return count
