"""BM25's postings inside fulltext.sqlite3: each term's chunk rowids and counts as arrays in
segments, written and merged by the index's writers; bm25.py scores queries from them.

Storage, in the index's own transactions: triggers on `chunks` queue every inserted, deleted
or re-tokenized rowid in `bm25_queue`; `flush` (run by each writer before it commits) marks
those chunks' old postings dead, writes their current tokens as a new segment, and merges
FANOUT segments of one size tier into one, dropping what is dead. A term's postings are one
row per segment, so a query reads a few dozen rows a term at any size; rows are kept in the
order they are written (a flush appends) and found through an index on (term, seg).

Layer: storage: the lexical leg's index inside fulltext.sqlite3 (its tables, their migration
steps and writes), below bm25.py (which reads them).
"""

from __future__ import annotations

import math
import os
import sqlite3
from collections import Counter, defaultdict
from collections.abc import Sequence

import numpy as np

# ---------------------------------------------------------------------------
FANOUT = 8  # segments of one size tier merged into one
MAX_MERGE_CHUNKS = 1 << 18  # a merge never holds more chunks' postings than this in memory
FLUSH_BATCH = 20_000  # queued chunks read into one new segment
FLUSH_MIN = 256  # queued chunks that make a segment; fewer are read from their tokens
GENERATION_KEY = "bm25_generation"  # meta row: changes whenever the postings do
ID, TF, LEN = np.dtype("<u4"), np.dtype("<u2"), np.dtype("<u4")  # stored array types
# ---------------------------------------------------------------------------

POSTINGS = [
    # rows in the order segments are written, found by term through a small index: keyed by
    # (term, seg) with the arrays inline, each new segment's rows landed all over the table
    # (a flush touched thousands of pages; writes at 100k chunks ran 157 against 202 chunks/s)
    """CREATE TABLE bm25_postings (term TEXT NOT NULL, seg INTEGER NOT NULL, ids BLOB NOT NULL,
        tfs BLOB NOT NULL)""",
    "CREATE UNIQUE INDEX bm25_postings_term ON bm25_postings(term, seg)",
    "CREATE INDEX bm25_postings_seg ON bm25_postings(seg)",
]
SCHEMA = [
    """CREATE TABLE bm25_segments (seg INTEGER PRIMARY KEY, tier INTEGER NOT NULL,
        lo INTEGER NOT NULL, hi INTEGER NOT NULL, ids BLOB NOT NULL, lens BLOB NOT NULL)""",
    *POSTINGS,
    """CREATE TABLE bm25_dead (seg INTEGER NOT NULL, id INTEGER NOT NULL,
        PRIMARY KEY (seg, id)) WITHOUT ROWID""",
    "CREATE TABLE bm25_queue (id INTEGER PRIMARY KEY)",
    """CREATE TRIGGER chunks_bm25_ai AFTER INSERT ON chunks BEGIN
        INSERT OR IGNORE INTO bm25_queue VALUES (new.id); END""",
    """CREATE TRIGGER chunks_bm25_ad AFTER DELETE ON chunks BEGIN
        INSERT OR IGNORE INTO bm25_queue VALUES (old.id); END""",
    """CREATE TRIGGER chunks_bm25_au AFTER UPDATE OF tokens ON chunks BEGIN
        INSERT OR IGNORE INTO bm25_queue VALUES (new.id); END""",
]


# the queued chunks' tokens: an IN list, so SQLite looks the few queued rowids up rather than
# joining every chunk against the queue (a join made that choice: 150 ms a query at 100k)
QUEUED_TOKENS = "SELECT id, tokens FROM chunks WHERE id IN (SELECT id FROM bm25_queue"


def create(conn: sqlite3.Connection) -> None:
    """The tables and triggers, every existing chunk queued and written (a migration step)."""
    for statement in SCHEMA:
        conn.execute(statement)
    conn.execute("INSERT INTO bm25_queue SELECT id FROM chunks")
    flush(conn, force=True)


def relayout(conn: sqlite3.Connection) -> None:
    """Postings written by schema 5-7 (keyed by term, arrays inline) into SCHEMA's layout
    (a migration step; the arrays are copied as they are)."""
    sql = conn.execute("SELECT sql FROM sqlite_schema WHERE name = 'bm25_postings'").fetchone()
    if sql is None or "WITHOUT ROWID" not in sql[0].upper():
        return
    conn.execute("ALTER TABLE bm25_postings RENAME TO bm25_postings_old")
    conn.execute("DROP INDEX bm25_postings_seg")
    for statement in POSTINGS:
        conn.execute(statement)
    conn.execute("INSERT INTO bm25_postings SELECT term, seg, ids, tfs FROM bm25_postings_old"
                 " ORDER BY seg, term")
    conn.execute("DROP TABLE bm25_postings_old")


# ---------------------------------------------------------------------------
# writing: queued chunks -> a new segment; segments of a tier -> one


def flush(conn: sqlite3.Connection, force: bool = False) -> None:
    """Write the queued chunks as segments once FLUSH_MIN of them wait (or when `force`),
    inside the caller's open transaction. Fewer wait on in the queue, where every query
    reads them from their tokens (bm25.scores), so a file's commit costs no segment write."""
    count = conn.execute("SELECT count(*) FROM bm25_queue").fetchone()[0]
    if not count or (count < FLUSH_MIN and not force):
        return
    while True:
        queued = np.array([r[0] for r in conn.execute(
            "SELECT id FROM bm25_queue ORDER BY id LIMIT ?", (FLUSH_BATCH,))], dtype=np.int64)
        if not len(queued):
            break
        _retire(conn, queued)
        _write_segment(conn, queued)
        conn.execute("DELETE FROM bm25_queue WHERE id <= ?", (int(queued[-1]),))
    merge_tiers(conn)
    new_generation(conn)


def new_generation(conn: sqlite3.Connection) -> None:
    """Say the postings changed: readers drop their cached figures (chunk lengths)."""
    conn.execute("INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT(key)"
                 " DO UPDATE SET value = excluded.value", (GENERATION_KEY, os.urandom(8).hex()))


def _retire(conn: sqlite3.Connection, queued: np.ndarray) -> None:
    """Mark the live postings of these chunks dead: a deleted or re-tokenized chunk's old
    terms must stop counting (rowids are reused, so dead means this rowid in that segment)."""
    lo, hi = int(queued[0]), int(queued[-1])
    rows = conn.execute("SELECT seg, ids FROM bm25_segments WHERE lo <= ? AND hi >= ?", (hi, lo))
    for seg, blob in rows.fetchall():
        found = queued[np.isin(queued, np.frombuffer(blob, ID))]
        conn.executemany("INSERT OR IGNORE INTO bm25_dead VALUES (?, ?)",
                         ((seg, int(i)) for i in found))


def _write_segment(conn: sqlite3.Connection, queued: np.ndarray) -> None:
    """The current tokens of the queued chunks that still exist, as one new segment. Tokens
    are split on spaces: segment.py emits only characters FTS5's tokenizer keeps, so these
    are exactly the terms chunks_fts holds."""
    ids, lens, codes, posting_ids, tfs = [], [], [], [], []
    names: dict[str, int] = {}
    rows = conn.execute(QUEUED_TOKENS + " WHERE id <= ?) ORDER BY id", (int(queued[-1]),))
    for rowid, text in rows:
        words = text.split()
        ids.append(rowid)
        lens.append(len(words))
        counts = Counter(words)
        codes += [names.setdefault(term, len(names)) for term in counts]
        tfs += counts.values()
        posting_ids += [rowid] * len(counts)
    if ids:
        _insert_segment(conn, np.array(ids, ID), np.array(lens, LEN), list(names),
                        np.array(codes, np.int64), np.array(posting_ids, np.int64),
                        np.array(tfs, np.int64))


def _add_segment(conn: sqlite3.Connection, ids: np.ndarray, lens: np.ndarray) -> int:
    """A segment row for these chunks (ids sorted); its number."""
    tier = int(math.log(len(ids), FANOUT))
    return conn.execute("INSERT INTO bm25_segments (tier, lo, hi, ids, lens) VALUES"
                        " (?, ?, ?, ?, ?)", (tier, int(ids[0]), int(ids[-1]), ids.tobytes(),
                                             lens.tobytes())).lastrowid


def _insert_segment(conn: sqlite3.Connection, ids: np.ndarray, lens: np.ndarray,
                    names: list[str], codes: np.ndarray, posting_ids: np.ndarray,
                    posting_tfs: np.ndarray) -> None:
    """A segment of these chunks (ids sorted) and postings (names[code], rowid, tf), one row
    a term, grouped by a sort of integer codes: a term at a time in Python, or a sort of the
    strings, was most of a merge's time. The codes are ranked in the terms' order first, so
    the rows reach the (term, seg) index in its own order."""
    seg = _add_segment(conn, ids, lens)
    names, codes = _in_term_order(names, codes)
    order = np.lexsort((posting_ids, codes))
    codes, pids = codes[order], posting_ids[order].astype(ID)
    ptfs = np.minimum(posting_tfs[order], 65535).astype(TF)
    bounds = np.flatnonzero(np.diff(codes)) + 1
    starts, ends = np.r_[0, bounds].tolist(), np.r_[bounds, len(codes)].tolist()
    conn.executemany("INSERT INTO bm25_postings VALUES (?, ?, ?, ?)",
                     ((names[codes[a]], seg, pids[a:b].tobytes(), ptfs[a:b].tobytes())
                      for a, b in zip(starts, ends, strict=True)))


def _in_term_order(names: list[str], codes: np.ndarray) -> tuple[list[str], np.ndarray]:
    """The names sorted, and the codes renumbered to match (one sort): rows written in index
    order keep SQLite appending to the pages it just wrote (random order made a 50 MB text's
    postings most of its ingest)."""
    order = sorted(range(len(names)), key=names.__getitem__)
    ranks = np.empty(len(names), np.int64)
    ranks[order] = np.arange(len(names))
    return [names[i] for i in order], ranks[codes]


def merge_tiers(conn: sqlite3.Connection) -> None:
    """Merge the FANOUT oldest segments of the lowest tier holding that many, until no tier
    does; a merge of more than MAX_MERGE_CHUNKS chunks is not made (those segments stay)."""
    while True:
        for (tier,) in conn.execute("SELECT tier FROM bm25_segments GROUP BY tier"
                                    " HAVING count(*) >= ? ORDER BY tier", (FANOUT,)).fetchall():
            segs, sizes = zip(*conn.execute(
                "SELECT seg, length(ids) / ? FROM bm25_segments WHERE tier = ? ORDER BY seg"
                " LIMIT ?", (ID.itemsize, tier, FANOUT)), strict=True)
            if sum(sizes) <= MAX_MERGE_CHUNKS:
                _merge(conn, list(segs))
                break
        else:
            return


def _merge(conn: sqlite3.Connection, segs: list[int]) -> None:
    """The segments' live postings as one segment: a term's arrays laid end to end in rowid
    order, bytes joined (sorting every posting was 45% of a million-chunk build). Only when
    the segments' rowids interleave (chunks re-tokenized in place) are the joins sorted."""
    marks = ",".join("?" * len(segs))
    dead = dead_rowids(conn, f"seg IN ({marks})", segs)
    live = []  # (seg, live ids, their lengths)
    for seg, blob, lblob in conn.execute(
            f"SELECT seg, ids, lens FROM bm25_segments WHERE seg IN ({marks})", segs):
        keep = kept(np.frombuffer(blob, ID), dead.get(seg))
        ids = np.frombuffer(blob, ID)[keep]
        if len(ids):
            live.append((seg, ids, np.frombuffer(lblob, LEN)[keep]))
    live.sort(key=lambda part: int(part[1][0]))
    rank = {part[0]: i for i, part in enumerate(live)}
    by_term: dict[str, list] = defaultdict(list)
    for term, seg, blob, tblob in conn.execute(
            f"SELECT term, seg, ids, tfs FROM bm25_postings WHERE seg IN ({marks})", segs):
        keep = kept(np.frombuffer(blob, ID), dead.get(seg))
        if not isinstance(keep, slice):
            blob = np.frombuffer(blob, ID)[keep].tobytes()
            tblob = np.frombuffer(tblob, TF)[keep].tobytes()
        if blob:
            by_term[term].append((rank[seg], blob, tblob))
    for table in ("bm25_postings", "bm25_segments", "bm25_dead"):
        conn.execute(f"DELETE FROM {table} WHERE seg IN ({marks})", segs)
    if not live:
        return
    interleaved = any(a[1][-1] > b[1][0] for a, b in zip(live, live[1:], strict=False))
    ids, lens = np.concatenate([part[1] for part in live]), np.concatenate([p[2] for p in live])
    if interleaved:
        order = np.argsort(ids, kind="stable")
        ids, lens = ids[order], lens[order]
    new = _add_segment(conn, ids, lens)
    conn.executemany("INSERT INTO bm25_postings VALUES (?, ?, ?, ?)",
                     ((term, new, *_joined(sorted(by_term[term]), interleaved))
                      for term in sorted(by_term)))  # in index order, as _insert_segment


def _joined(parts: list[tuple[int, bytes, bytes]], interleaved: bool) -> tuple[bytes, bytes]:
    """One term's (ids, tfs) arrays from its rows in segment order, sorted by rowid."""
    ids, tfs = b"".join(p[1] for p in parts), b"".join(p[2] for p in parts)
    if interleaved and len(parts) > 1:
        order = np.argsort(np.frombuffer(ids, ID), kind="stable")
        ids, tfs = np.frombuffer(ids, ID)[order].tobytes(), np.frombuffer(tfs, TF)[order].tobytes()
    return ids, tfs


def dead_rowids(conn: sqlite3.Connection, where: str = "1", params: Sequence = ()) -> dict:
    """Each segment's dead rowids as an array, of the segments `where` picks (all: every one)."""
    out: dict[int, list[int]] = defaultdict(list)
    for seg, rowid in conn.execute(f"SELECT seg, id FROM bm25_dead WHERE {where}", params):
        out[seg].append(rowid)
    return {seg: np.array(rowids, ID) for seg, rowids in out.items()}


def kept(ids: np.ndarray, *drops: np.ndarray | None) -> slice | np.ndarray:
    """What of `ids` to keep: all but those in any of `drops` (a segment's dead rowids, the
    queued ones); a whole slice when nothing is dropped (no copy)."""
    drops = tuple(d for d in drops if d is not None and len(d))
    if not drops:
        return slice(None)
    return ~np.isin(ids, np.concatenate(drops) if len(drops) > 1 else drops[0])

