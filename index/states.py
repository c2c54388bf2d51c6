"""The states of fulltext.sqlite3's sources and chunks, and the embedding bookkeeping that
moves them: which chunks Chroma still has to receive (pending) or forget (tombstones), each
chunk's embed_state, and the sources promoted once none of their chunks is pending.

A source is SOURCE_PENDING from the moment its lines and chunks are stored until every chunk
has its vector, then SOURCE_READY, or SOURCE_DEGRADED when some could not be embedded or a
new version could not be read (the previous one still serves); a file that was never read is
SOURCE_FAILED, or SOURCE_NEEDS_ACTION when the user can fix it (both tried again every run);
a file that holds no text (0 bytes, only blank lines, no page with a line) is SOURCE_EMPTY:
no failure, nothing indexed, read again only once it changes. A chunk's embed_state is
EMBED_PENDING, EMBED_INDEXED (Chroma holds its vector) or EMBED_FAILED. The SQL of the index
modules writes the same words.

Layer: storage: the states in fulltext.sqlite3, below pipeline/indexer.py (which embeds) and
fulltext.py.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable

from index.contexts import INDEXED_CONTEXT

# ---------------------------------------------------------------------------
SOURCE_READY = "ready"  # sources.state: every chunk embedded
SOURCE_PENDING = "pending"  # sources.state: stored, some chunks still to embed
SOURCE_DEGRADED = "degraded"  # sources.state: chunks failed, or the new version did not read
SOURCE_FAILED = "failed"  # sources.state: never read, nothing indexed
SOURCE_NEEDS_ACTION = "needs_action"  # sources.state: never read, and the user can fix it
SOURCE_EMPTY = "empty"  # sources.state: read, and it holds no text: nothing to index
EMBED_PENDING = "pending"  # chunks.embed_state: its vector still to make
EMBED_INDEXED = "indexed"  # chunks.embed_state: Chroma holds its vector
EMBED_FAILED = "failed"  # chunks.embed_state: could not be embedded (BM25 and exact find it)
# ---------------------------------------------------------------------------

STATES = (SOURCE_READY, SOURCE_PENDING, SOURCE_DEGRADED, SOURCE_FAILED, SOURCE_NEEDS_ACTION,
          SOURCE_EMPTY)
STATE_LABELS = {SOURCE_PENDING: "pending_embedding"}  # how states read in tool results


def pending_chunks(conn: sqlite3.Connection, limit: int) -> list[sqlite3.Row]:
    return conn.execute(
        f"SELECT c.chunk_id, c.text, {INDEXED_CONTEXT} AS context, c.page, c.line_start,"
        " c.line_end, s.name AS source "
        "FROM chunks c JOIN sources s ON s.id = c.source_id "
        "WHERE c.embed_state = 'pending' ORDER BY c.id LIMIT ?", (limit,)).fetchall()


def count_pending(conn: sqlite3.Connection) -> int:
    return conn.execute("SELECT count(*) FROM chunks WHERE embed_state = 'pending'").fetchone()[0]


def set_embed_state(conn: sqlite3.Connection, chunk_ids: Iterable[str], state: str,
                    error: str | None = None) -> None:
    with conn:
        conn.executemany("UPDATE chunks SET embed_state = ?, embed_error = ? WHERE chunk_id = ?",
                         ((state, error, cid) for cid in chunk_ids))


def set_all_pending(conn: sqlite3.Connection) -> None:
    with conn:
        conn.execute("UPDATE chunks SET embed_state = 'pending', embed_error = NULL")
        conn.execute("UPDATE sources SET state = 'pending' WHERE state IN ('ready', 'degraded')"
                     " AND pages > 0")


def set_pending_indexed(conn: sqlite3.Connection) -> None:
    with conn:
        conn.execute("UPDATE chunks SET embed_state = 'indexed' WHERE embed_state = 'pending'")


def indexed_chunk_ids(conn: sqlite3.Connection) -> set[str]:
    return {r[0] for r in conn.execute("SELECT chunk_id FROM chunks WHERE embed_state = 'indexed'")}


def all_chunk_ids(conn: sqlite3.Connection) -> set[str]:
    return {r[0] for r in conn.execute("SELECT chunk_id FROM chunks")}


def tombstones(conn: sqlite3.Connection) -> list[str]:
    return [r[0] for r in conn.execute("SELECT chunk_id FROM chroma_tombstones")]


def clear_tombstones(conn: sqlite3.Connection, chunk_ids: Iterable[str]) -> None:
    with conn:
        conn.executemany("DELETE FROM chroma_tombstones WHERE chunk_id = ?",
                         ((cid,) for cid in chunk_ids))


def promote_sources(conn: sqlite3.Connection) -> None:
    """Sources with no chunk left pending become `ready`, or `degraded` if some chunks failed."""
    with conn:
        conn.execute(
            """UPDATE sources SET
                 state = CASE WHEN EXISTS (SELECT 1 FROM chunks c WHERE c.source_id = sources.id
                                           AND c.embed_state = 'failed')
                              THEN 'degraded' ELSE 'ready' END,
                 error = CASE WHEN EXISTS (SELECT 1 FROM chunks c WHERE c.source_id = sources.id
                                           AND c.embed_state = 'failed')
                              THEN 'some chunks could not be embedded; they are still found by '
                                   || 'bm25 and exact search' ELSE NULL END
               WHERE state = 'pending' AND NOT EXISTS (
                 SELECT 1 FROM chunks c WHERE c.source_id = sources.id
                 AND c.embed_state = 'pending')""")
