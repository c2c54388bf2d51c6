"""fulltext.sqlite3: the record of what a knowledge base holds.

One file per KB (`<base>/<kb_id>/fulltext.sqlite3`, WAL mode, schema version in
`PRAGMA user_version`). It keeps every source with its hash and state, every raw line of
every page (noise included), the chunks with their embedding state, and two indexes:

- `chunks_fts`: FTS5 over segmented tokens (see segment.py); BM25 is scored (bm25.py) from
  bm25_segments.py's arrays of the same tokens, with FTS5's `bm25()` the fallback while those
  lag.
- `lines_fts`: FTS5 trigram index over raw lines (each followed by LINE_END) for exact
  substrings, without positions: a string is found through all its trigrams and checked in
  the line; a 1- or 2-character one through the trigrams that start with it.
- `meta`: facts about the whole index, such as the segmenter signature its tokens came from.

SQLite is the truth and Chroma follows it (see ingest.py): a source's lines and chunks are
replaced in one transaction, chunks start `pending`, Chroma ids that disappear are written
to `chroma_tombstones` in that same transaction so a crash can never leak them.

The schema, its numbered migrations and `connect` (writable and migrated for the indexer,
read-only for the server, which never migrates) live in index/fulltext_schema.py, and jobs
on the same file in their own modules: exact search (index/exact.py), the states of sources
and chunks (index/states.py), contexts (index/contexts.py), a page's chunks (index/pages.py).
This module writes and removes sources whole and reads chunks, BM25, lines, names, counts.

Layer: storage: the SQLite record (lines, chunks, states), below the pipeline and search.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone

from index import contexts, doc_language, fulltext_schema, query_sql, states
from index.fulltext_schema import FILENAME as FILENAME
from index.fulltext_schema import SCHEMA_VERSION as SCHEMA_VERSION
from index.fulltext_schema import IndexUnavailable as IndexUnavailable
from index.fulltext_schema import SchemaError as SchemaError
from index.fulltext_schema import connect as connect


@dataclass(frozen=True)
class Chunk:
    """A run of whole lines of one page; `text` is exactly those lines joined by newlines."""

    chunk_id: str
    page: int
    line_start: int
    line_end: int
    text: str
    tokens: str  # space-joined segment.chunk_tokens(title words + context + text, parser)
    context: str = ""  # what the chunk needs to read on its own (a sheet's header row)


@dataclass(frozen=True)
class SourceFile:
    """What we know of a file on disk when it is (re)indexed."""

    name: str
    path: str
    sha256: str
    size: int
    mtime: float


NEEDS_ACTION = ("password-protected", "ocr-unavailable", "audio-unavailable",
                "converter-unavailable", "too-large")  # the user can fix these
EMPTY = "empty"  # the reason of a file with no text: state `empty`, which is no failure


SEGMENTER_KEY = "segmenter"  # meta key: segment.signature() of the stored chunk tokens


def get_meta(conn: sqlite3.Connection, key: str) -> str | None:
    """A value from `meta`; None when unset or the index predates the table (schema < 3)."""
    try:
        row = conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
    except sqlite3.OperationalError:  # no such table: an older index opened read-only
        return None
    return row[0] if row else None


def set_meta(conn: sqlite3.Connection, key: str, value: str) -> None:
    with conn:
        conn.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, value))


# ---------------------------------------------------------------------------
# sources: replace whole, record failures

def source_row(conn: sqlite3.Connection, name: str) -> sqlite3.Row | None:
    return conn.execute("SELECT * FROM sources WHERE name = ?", (name,)).fetchone()


def replace_source(conn: sqlite3.Connection, src: SourceFile, parser: str,
                   pages: Sequence[Sequence[str]], chunks: Sequence[Chunk],
                   warnings: Sequence[str] = ()) -> int:
    """Replace a source's lines and chunks in one transaction; returns chunks left to embed.

    Chunks whose id was already embedded keep that state (same text at the same place), so a
    changed file only re-embeds what changed. Ids that disappear become tombstones.
    """
    with conn:
        row = source_row(conn, src.name)
        embedded: set[str] = set()
        kept: dict[str, tuple] = {}
        if row is not None:
            kept = contexts.kept_contexts(conn, row["id"])
            old = conn.execute("SELECT chunk_id, embed_state FROM chunks WHERE source_id = ?",
                               (row["id"],)).fetchall()
            embedded = {r["chunk_id"] for r in old if r["embed_state"] == states.EMBED_INDEXED}
            new_ids = {c.chunk_id for c in chunks}
            conn.executemany("INSERT OR IGNORE INTO chroma_tombstones VALUES (?)",
                             [(r["chunk_id"],) for r in old if r["chunk_id"] not in new_ids])
            conn.execute("DELETE FROM lines WHERE source_id = ?", (row["id"],))
            conn.execute("DELETE FROM chunks WHERE source_id = ?", (row["id"],))
        source_id = _upsert_source(conn, src, parser=parser, state=states.SOURCE_PENDING,
                                   error=None, pages=len(pages))
        conn.execute("UPDATE sources SET warnings = ? WHERE id = ?",
                     ("\n".join(warnings) or None, source_id))
        _record_languages(conn, source_id, pages)
        conn.executemany(
            "INSERT INTO lines (source_id, page, line, text) VALUES (?, ?, ?, ?)",
            ((source_id, p, n, text) for p, page in enumerate(pages, 1)
             for n, text in enumerate(page, 1)),
        )
        conn.executemany(
            "INSERT INTO chunks (chunk_id, source_id, page, line_start, line_end, text, tokens,"
            " context, embed_state) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            ((c.chunk_id, source_id, c.page, c.line_start, c.line_end, c.text, c.tokens,
              c.context, states.EMBED_INDEXED if c.chunk_id in embedded else states.EMBED_PENDING)
             for c in chunks),
        )
        contexts.restore_contexts(conn, source_id, kept)
        conn.execute("DELETE FROM chroma_tombstones WHERE chunk_id IN "
                     "(SELECT chunk_id FROM chunks WHERE source_id = ?)", (source_id,))
        _flush_bm25(conn)
    return sum(c.chunk_id not in embedded for c in chunks)


def _record_languages(conn: sqlite3.Connection, source_id: int,
                      pages: Sequence[Sequence[str]]) -> None:
    """The natural languages of the source's text, for the `language` filter. Skipped on an
    index older than schema 10, which only code made to write that schema writes to (the
    tests that build old indexes)."""
    if "languages" in fulltext_schema.table_columns(conn, "sources"):
        conn.execute("UPDATE sources SET languages = ? WHERE id = ?",
                     (doc_language.detect(line for page in pages for line in page) or None,
                      source_id))


def record_failure(conn: sqlite3.Connection, src: SourceFile, reason: str, detail: str) -> str:
    """Record that a file could not be read; returns the state it leaves.

    A source that was indexed before keeps its old lines and chunks (state `degraded`), so a
    bad update never loses what was searchable; a new one is `failed` with nothing indexed, or
    `needs_action` when the user can fix it (a password, a missing OCR engine, a size limit).
    A file with no text (reason EMPTY) is neither: it is `empty`, and one that had text loses
    its old lines and chunks (and a mail its attachments), as a rebuild would find it (issue
    49: an empty `__init__.py` was `failed`, tried again on every run, and every sync of a
    repository exited 1).
    """
    error = f"{reason}: {detail}"
    if reason == EMPTY:
        with conn:
            for name in [*attachment_names(conn, src.name), src.name]:
                _drop_source(conn, name)
            _upsert_source(conn, src, parser=None, state=states.SOURCE_EMPTY, error=error,
                           pages=0)
            _flush_bm25(conn)
        return states.SOURCE_EMPTY
    state = states.SOURCE_NEEDS_ACTION if reason in NEEDS_ACTION else states.SOURCE_FAILED
    with conn:
        row = source_row(conn, src.name)
        if row is not None and row["pages"] > 0:
            conn.execute("UPDATE sources SET state = 'degraded', error = ? WHERE id = ?",
                         (f"{error} (still serving the previous version)", row["id"]))
            return states.SOURCE_DEGRADED
        _upsert_source(conn, src, parser=None, state=state, error=error, pages=0)
    return state


def _upsert_source(conn: sqlite3.Connection, src: SourceFile, parser: str | None, state: str,
                   error: str | None, pages: int) -> int:
    now = datetime.now(timezone.utc).isoformat(timespec="seconds")
    conn.execute(
        """INSERT INTO sources (name, path, sha256, size, mtime, parser, state, error, pages,
                                ingested_at)
           VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
           ON CONFLICT(name) DO UPDATE SET path = excluded.path, sha256 = excluded.sha256,
             size = excluded.size, mtime = excluded.mtime, parser = excluded.parser,
             state = excluded.state, error = excluded.error, pages = excluded.pages,
             ingested_at = excluded.ingested_at""",
        (src.name, src.path, src.sha256, src.size, src.mtime, parser, state, error, pages, now),
    )
    return conn.execute("SELECT id FROM sources WHERE name = ?", (src.name,)).fetchone()[0]


def touch_source(conn: sqlite3.Connection, name: str, size: int, mtime: float) -> None:
    """Remember a new mtime for content whose hash did not change, so the next run skips it fast."""
    with conn:
        conn.execute("UPDATE sources SET size = ?, mtime = ? WHERE name = ?", (size, mtime, name))


def _flush_bm25(conn: sqlite3.Connection) -> None:
    """Bring bm25_segments.py's postings up to date before the writer commits (the triggers
    queued what changed) once FLUSH_MIN chunks wait; fewer are scored from their tokens."""
    from index import bm25_segments
    bm25_segments.flush(conn)


def write_queued(conn: sqlite3.Connection) -> None:
    """Write every queued chunk's postings, however few: at the end of a writer's run, so
    a server does not read and split the waiting chunks' tokens on every query (7 of 38 ms
    a query at 100,000 chunks)."""
    from index import bm25_segments
    with conn:
        bm25_segments.flush(conn, force=True)


def code_sources(conn: sqlite3.Connection, names: Iterable[str]) -> set[str]:
    """Those of the named sources that are source code (parser `code:...`): the ranking rules
    of code (definitions first, neighbours) leave every other source as it is."""
    names = list(set(names))
    if not names:
        return set()
    marks = ",".join("?" * len(names))
    return {name for (name,) in conn.execute(
        f"SELECT name FROM sources WHERE name IN ({marks}) AND parser LIKE 'code:%'", names)}


def delete_source(conn: sqlite3.Connection, name: str) -> None:
    """Drop a source whole; its Chroma ids become tombstones in the same transaction."""
    with conn:
        _drop_source(conn, name)
        _flush_bm25(conn)


def _drop_source(conn: sqlite3.Connection, name: str) -> None:
    """A source's row, lines and chunks deleted, its chunks' ids tombstones (inside the
    caller's transaction)."""
    conn.execute("INSERT OR IGNORE INTO chroma_tombstones SELECT chunk_id FROM chunks "
                 "WHERE source_id = (SELECT id FROM sources WHERE name = ?)", (name,))
    conn.execute("DELETE FROM lines WHERE source_id = (SELECT id FROM sources WHERE name = ?)",
                 (name,))
    conn.execute("DELETE FROM chunks WHERE source_id = "
                 "(SELECT id FROM sources WHERE name = ?)", (name,))
    conn.execute("DELETE FROM sources WHERE name = ?", (name,))


def attachment_names(conn: sqlite3.Connection, name: str) -> list[str]:
    """The sources made from a mail's attachments: named `<name>/<file>` and recording the
    same file as the mail's source (a range on the unique name index, then the path)."""
    return [row[0] for row in conn.execute(
        "SELECT c.name FROM sources c JOIN sources m ON m.name = ? AND c.path = m.path"
        " WHERE c.name > ? AND c.name < ? AND instr(substr(c.name, ?), '/') = 0"
        " ORDER BY c.name", (name, name + "/", name + "0", len(name) + 2))]


# ---------------------------------------------------------------------------
# BM25 tokens: read and replaced whole when the segmenter changes (ingest.py)

def searchable_chunks(conn: sqlite3.Connection, after: int, limit: int) -> list[sqlite3.Row]:
    """(id, source, parser, context, text) of up to `limit` chunks with rowid > after, by
    rowid."""
    return conn.execute("SELECT c.id, s.name AS source, s.parser,"
                        f" {contexts.INDEXED_CONTEXT} AS context, c.text FROM chunks c"
                        " JOIN sources s ON s.id = c.source_id WHERE c.id > ?"
                        " ORDER BY c.id LIMIT ?", (after, limit)).fetchall()


def replace_tokens(conn: sqlite3.Connection, tokens: dict[int, str]) -> None:
    """New tokens for these chunks and the BM25 index rebuilt from the table, in one
    transaction: FTS5's external-content index must never hold tokens the table lacks."""
    with conn:
        conn.executemany("UPDATE chunks SET tokens = ? WHERE id = ?",
                         [(text, rowid) for rowid, text in tokens.items()])
        conn.execute("INSERT INTO chunks_fts(chunks_fts) VALUES ('rebuild')")
        _flush_bm25(conn)


# ---------------------------------------------------------------------------
# reading: chunks, BM25, line ranges, source names, counts

CHUNK_COLUMNS = ("c.id, c.chunk_id, s.name AS source, c.page, c.line_start, c.line_end, c.text,"
                 " c.embed_state")


def _chunks_where(conn: sqlite3.Connection, column: str, values: Sequence) -> dict:
    if not values:
        return {}
    marks = ",".join("?" * len(values))
    rows = conn.execute(f"SELECT {CHUNK_COLUMNS} FROM chunks c JOIN sources s"
                        f" ON s.id = c.source_id WHERE c.{column} IN ({marks})", list(values))
    return {row[column]: row for row in rows}


# a word of each script whose segmenter loads on first use, and the token range that says an
# index holds that script: Kiwi for Hangul syllables, jieba for Han (CJK ideographs, ext. A on)
SEGMENTER_SCRIPTS = {"\uac00": ("\uac00", "\ud7a4"), "\u4e2d": ("\u3400", "\ua000")}


def script_samples(conn: sqlite3.Connection) -> str:
    """A word of each script this index has tokens in (a range read on chunks_fts's terms),
    so a warm-up search loads exactly the segmenters its queries will need."""
    vocab = query_sql.vocabulary(conn, "chunks")
    return " ".join(word for word, (low, high) in SEGMENTER_SCRIPTS.items()
                    if conn.execute(f"SELECT 1 FROM {vocab} WHERE term >= ? AND"
                                    " term < ? LIMIT 1", (low, high)).fetchone())


def chunks_by_id(conn: sqlite3.Connection, chunk_ids: Sequence[str]) -> dict[str, sqlite3.Row]:
    """The chunks with these ids that SQLite holds (others are simply absent)."""
    return _chunks_where(conn, "chunk_id", chunk_ids)


def chunks_by_rowid(conn: sqlite3.Connection, rowids: Sequence[int]) -> dict[int, sqlite3.Row]:
    """The chunks with these rowids (`chunks.id`), keyed by rowid."""
    return _chunks_where(conn, "id", rowids)


def chunk_tokens(conn: sqlite3.Connection, chunk_ids: Sequence[str]) -> dict[str, str]:
    """The BM25 tokens (space-joined) of these chunks: what diversity compares without an
    embedder."""
    if not chunk_ids:
        return {}
    marks = ",".join("?" * len(chunk_ids))
    return dict(conn.execute(f"SELECT chunk_id, tokens FROM chunks WHERE chunk_id IN ({marks})",
                             list(chunk_ids)).fetchall())


def fts_totals(conn: sqlite3.Connection) -> tuple[int, int]:
    """(rows, tokens) of chunks_fts, read from FTS5's averages record (rowid 1 of its data
    table: two varints), which is what bm25() itself uses; a count(*) of a million chunks
    on every query cost more than the search."""
    row = conn.execute("SELECT block FROM chunks_fts_data WHERE id = 1").fetchone()
    if row is None or not row[0]:  # a new index: no record, or an empty one
        return 0, 0
    block, at, values = row[0], 0, []
    for _ in range(2):  # SQLite varints: 7 bits a byte, high bit = more; the 9th byte whole
        value = 0
        for _ in range(8):
            byte = block[at]
            at += 1
            value = (value << 7) | (byte & 0x7F)
            if not byte & 0x80:
                break
        else:
            value, at = (value << 8) | block[at], at + 1
        values.append(value)
    return values[0], values[1]


def bm25_match(conn: sqlite3.Connection, query_tokens: Sequence[str]) -> str:
    """The FTS5 query for these tokens: those `bm25.choose_terms` keeps, by chunks_fts's own
    (live) document counts, in query order (the same scores)."""
    from index import bm25
    tokens = list(dict.fromkeys(t for t in query_tokens if t))
    if not tokens:
        return query_sql.quote_fts(tokens)

    def counts(terms: list[str]) -> tuple[dict[str, int], dict[str, int]]:
        query_sql.vocabulary(conn, "chunks")
        docs = dict.fromkeys(terms, 0)
        for start in range(0, len(terms), 500):  # SQLite's bound-parameter limit
            part = terms[start:start + 500]
            docs.update(conn.execute("SELECT term, doc FROM temp.chunks_vocab WHERE term IN"
                                     f" ({','.join('?' * len(part))})", part).fetchall())
        return docs, docs  # exact: nothing to settle

    kept = set(bm25.choose_terms(tokens, fts_totals(conn)[0], counts))
    return query_sql.quote_fts([t for t in tokens if t in kept])


def bm25_all(conn: sqlite3.Connection, query_tokens: Sequence[str],
             source: query_sql.Sources = None):
    """BM25 (k1=1.2, b=0.75; positive, higher is better) of every matching chunk: a
    `bm25.Scores` mapping rowid -> score, read once for both the ranked leg and the scores of
    the vector leg's chunks. bm25.py scores from its arrays; while it cannot (chunks still
    queued, an older index), FTS5's bm25() does, one pass without a join."""
    from index import bm25
    allowed = None
    if source is not None:
        import numpy as np

        test, names = query_sql.source_filter(source)
        allowed = np.array([r[0] for r in conn.execute(
            f"SELECT c.id FROM chunks c JOIN sources s ON s.id = c.source_id WHERE {test}",
            names)], np.int64)
    found = bm25.scores(conn, query_tokens, allowed)
    if found is not None:
        return found
    match = bm25_match(conn, query_tokens)
    if not match:
        return bm25.Scores.from_pairs([])
    sql = "SELECT rowid, -bm25(chunks_fts) FROM chunks_fts WHERE chunks_fts MATCH ?"
    params = [match]
    if source is not None:
        test, names = query_sql.source_filter(source)
        sql += (" AND rowid IN (SELECT c.id FROM chunks c JOIN sources s"
                f" ON s.id = c.source_id WHERE {test})")
        params += names
    return bm25.Scores.from_pairs(conn.execute(sql, params).fetchall())


def embedded_chunk_ids(conn: sqlite3.Connection, source: str | Sequence[str],
                       limit: int) -> list[str]:
    """The ids of these sources' chunks that have a vector (embed_state 'indexed'), at most
    `limit` + 1 of them (one more says there are more)."""
    test, names = query_sql.source_filter(source)
    return [r[0] for r in conn.execute(
        f"SELECT c.chunk_id FROM chunks c JOIN sources s ON s.id = c.source_id WHERE {test}"
        " AND c.embed_state = 'indexed' LIMIT ?", [*names, limit + 1])]


def top_chunks(conn: sqlite3.Connection, scores, limit: int) -> list[tuple[sqlite3.Row, float]]:
    """The `limit` best-scored chunks (of a bm25.Scores) with their rows, best first."""
    best = scores.top(limit)
    rows = chunks_by_rowid(conn, [rowid for rowid, _ in best])
    return [(rows[rowid], score) for rowid, score in best if rowid in rows]


def bm25_search(conn: sqlite3.Connection, query_tokens: Sequence[str], limit: int,
                source: query_sql.Sources = None) -> list[tuple[sqlite3.Row, float]]:
    """Chunks ranked by BM25 (FTS5's formula, scored by bm25.py), best first."""
    return top_chunks(conn, bm25_all(conn, query_tokens, source), limit)


def source_names_ending(conn: sqlite3.Connection, name: str, limit: int) -> list[str]:
    """[name] when a source has exactly that name; else up to `limit` sources whose name ends
    in "/" + name (a file name given without its folder)."""
    if source_row(conn, name) is not None:
        return [name]
    pattern = "%/" + name.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return [r[0] for r in conn.execute("SELECT name FROM sources WHERE name LIKE ? ESCAPE '\\'"
                                       " ORDER BY name LIMIT ?", (pattern, limit))]


CLOSE_NAMES_SCANNED = 20_000  # source names compared when suggesting close matches


def close_source_names(conn: sqlite3.Connection, name: str, limit: int) -> list[str]:
    """Up to `limit` source names that look like `name` (a typo, another extension)."""
    import difflib

    names = [r[0] for r in conn.execute("SELECT name FROM sources ORDER BY name LIMIT ?",
                                        (CLOSE_NAMES_SCANNED,))]
    by_file = {n.rsplit("/", 1)[-1]: n for n in names}
    close = difflib.get_close_matches(name, names, limit, 0.6)
    close += [by_file[f] for f in difflib.get_close_matches(name.rsplit("/", 1)[-1],
                                                             list(by_file), limit, 0.6)]
    return list(dict.fromkeys(close))[:limit]


@dataclass(frozen=True)
class LineSlice:
    """Part of one raw line: `text` starts at character `offset` of a line `length` long."""

    line: int
    text: str
    offset: int
    length: int


def read_lines(conn: sqlite3.Connection, source: str, page: int, first: int, last: int,
               offset: int = 0, width: int = 2000) -> list[LineSlice]:
    """Lines first..last of a page, each cut to `width` characters from `offset`: a bounded
    read however long the stored lines are (one line of a minified file can be 50 MB)."""
    rows = conn.execute(
        "SELECT l.line, substr(l.text, ?, ?), length(l.text) FROM lines l"
        " JOIN sources s ON s.id = l.source_id"
        " WHERE s.name = ? AND l.page = ? AND l.line BETWEEN ? AND ? ORDER BY l.line",
        (offset + 1, width, source, page, first, last)).fetchall()
    return [LineSlice(r[0], r[1], offset, r[2]) for r in rows]


def line_count(conn: sqlite3.Connection, source: str, page: int) -> int:
    """How many lines a page of a source has (0 for an unknown source or page)."""
    return conn.execute(
        "SELECT coalesce(max(l.line), 0) FROM lines l JOIN sources s ON s.id = l.source_id"
        " WHERE s.name = ? AND l.page = ?", (source, page)).fetchone()[0]


def lines_from(conn: sqlite3.Connection, source_id: int, at: tuple[int, int], forward: bool,
               limit: int, width: int) -> list[tuple[int, int, str]]:
    """Up to `limit` (page, line, text) of a source in reading order from position `at` (a
    (page, line), itself included) onwards, or before it when not `forward` (nearest
    first), each cut to `width` characters: a passage read across page breaks in one query."""
    test, order = (">=", "ASC") if forward else ("<", "DESC")
    return conn.execute(
        f"SELECT page, line, substr(text, 1, ?) FROM lines WHERE source_id = ? AND"
        f" (page, line) {test} (?, ?) ORDER BY page {order}, line {order} LIMIT ?",
        (width, source_id, at[0], at[1], limit)).fetchall()


def chunk_spans(conn: sqlite3.Connection, source_id: int, first_page: int,
                last_page: int) -> list[tuple[int, int, int]]:
    """(page, line_start, line_end) of a source's chunks on these pages: the lines outside
    them are its running headers, footers and page numbers (chunking.noise_lines)."""
    return conn.execute("SELECT page, line_start, line_end FROM chunks WHERE source_id = ? AND"
                        " page BETWEEN ? AND ?", (source_id, first_page, last_page)).fetchall()


def page_lines(conn: sqlite3.Connection, source: str, page: int, first: int = 1,
               last: int | None = None) -> list[tuple[int, str]]:
    """(line number, whole raw text) for lines first..last of one page, as indexed; for the
    indexer and tests: what the server returns goes through read_lines' bound."""
    whole = 2**31 - 1
    return [(s.line, s.text) for s in
            read_lines(conn, source, page, first, whole if last is None else last, 0, whole)]


def neighbour_chunk_ids(conn: sqlite3.Connection, rowid: int) -> tuple[str | None, str | None]:
    """The chunk ids just before and after a chunk in its source (page, then line order)."""
    order = "(c.page, c.line_start, c.id)"
    me = "(SELECT page, line_start, id FROM chunks WHERE id = :id)"
    same = "c.source_id = (SELECT source_id FROM chunks WHERE id = :id)"
    before = conn.execute(f"SELECT c.chunk_id FROM chunks c WHERE {same} AND {order} < {me}"
                          " ORDER BY c.page DESC, c.line_start DESC, c.id DESC LIMIT 1",
                          {"id": rowid}).fetchone()
    after = conn.execute(f"SELECT c.chunk_id FROM chunks c WHERE {same} AND {order} > {me}"
                         " ORDER BY c.page, c.line_start, c.id LIMIT 1", {"id": rowid}).fetchone()
    return (before[0] if before else None, after[0] if after else None)


def list_sources(conn: sqlite3.Connection, offset: int = 0, limit: int = -1,
                 where: str = "") -> list[dict]:
    """Sources by name with their pages, chunk counts, parser, state and error: `limit` of
    them from `offset` (-1: all), optionally only those matching a fixed `where` clause."""
    rows = conn.execute(  # s.*: an older schema (served read-only) simply has fewer columns
        "SELECT s.*, count(c.id) AS chunks,"
        " coalesce(sum(c.embed_state = 'pending'), 0) AS chunks_pending,"
        " coalesce(sum(c.embed_state = 'failed'), 0) AS chunks_failed"
        f" FROM sources s LEFT JOIN chunks c ON c.source_id = s.id {where}"
        " GROUP BY s.id ORDER BY s.name LIMIT ? OFFSET ?", (limit, offset)).fetchall()
    sources = [{k: v for k, v in dict(row).items() if k != "id"} for row in rows]
    for source in sources:
        source["state"] = states.STATE_LABELS.get(source["state"], source["state"])
    return sources


def problem_sources(conn: sqlite3.Connection, limit: int) -> list[dict]:
    """Up to `limit` sources that failed, need the user, are degraded or carry warnings:
    name, state, error and warnings (get_index_info's list of what to look at)."""
    has_warnings = (" OR s.warnings IS NOT NULL"
                    if "warnings" in fulltext_schema.table_columns(conn, "sources") else "")
    where = f"WHERE s.state IN ('failed', 'needs_action', 'degraded'){has_warnings}"
    return [{k: source.get(k) for k in ("name", "state", "error", "warnings")}
            for source in list_sources(conn, 0, limit, where)]


def state_counts(conn: sqlite3.Connection) -> dict[str, int]:
    """Sources per state, every state present (0 where none), named as tools show them."""
    found = dict(conn.execute("SELECT state, count(*) FROM sources GROUP BY state").fetchall())
    return {states.STATE_LABELS.get(s, s): found.get(s, 0) for s in states.STATES}


def embedded_count(conn: sqlite3.Connection) -> int:
    """Chunks whose vectors the store should hold; one count, not all of counts()'s."""
    return conn.execute("SELECT count(*) FROM chunks WHERE embed_state = 'indexed'").fetchone()[0]


def counts(conn: sqlite3.Connection) -> dict[str, int]:
    """Totals for summaries and `list_knowledge_bases`."""
    row = conn.execute(
        "SELECT (SELECT count(*) FROM sources),"
        " (SELECT coalesce(sum(pages), 0) FROM sources),"
        " (SELECT count(*) FROM lines),"
        " (SELECT count(*) FROM chunks),"
        " (SELECT count(*) FROM chunks WHERE embed_state = 'indexed'),"
        " (SELECT count(*) FROM chunks WHERE embed_state = 'pending'),"
        " (SELECT count(*) FROM chunks WHERE embed_state = 'failed')").fetchone()
    keys = ("sources", "pages", "lines", "chunks", "embedded", "pending", "embed_failed")
    return dict(zip(keys, row, strict=True))


def contextualization_state(conn: sqlite3.Connection,
                            signature: tuple[str, str] | None) -> dict:
    """How far the KB's contexts are from its contextualizer (`signature` = (model, prompt
    hash), None when none is configured): chunks contextualized by it, stale (by another
    model or prompt, or left from an earlier contextualizer), pending (not yet tried, or
    failed with tries left), failed (given up), and why the last run stopped, if it did."""
    if "llm_state" not in fulltext_schema.table_columns(conn, "chunks"):  # older, read-only
        return {"contextualized": 0, "stale": 0, "pending": 0, "failed": 0, "stopped": None}
    model, prompt = signature or (None, None)
    row = conn.execute(
        "SELECT coalesce(sum(llm_state IN ('done', 'carried') AND llm_model IS ?"
        "  AND llm_prompt IS ?), 0),"
        " coalesce(sum(llm_state IN ('done', 'carried') AND NOT (llm_model IS ?"
        "  AND llm_prompt IS ?)), 0),"
        " coalesce(sum(llm_state IS NULL OR (llm_state = 'failed' AND llm_attempts < ?)), 0),"
        " coalesce(sum(llm_state = 'failed' AND llm_attempts >= ?), 0) FROM chunks",
        (model, prompt, model, prompt, contexts.MAX_CONTEXT_ATTEMPTS,
         contexts.MAX_CONTEXT_ATTEMPTS)).fetchone()
    done, stale, pending, failed = row
    if signature is None:  # nothing to do for chunks never contextualized
        done, pending, failed = 0, 0, 0
    return {"contextualized": done, "stale": stale, "pending": pending, "failed": failed,
            "stopped": get_meta(conn, contexts.CONTEXT_STOP_KEY) or None}
