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
read-only for the server, which never migrates) live in fulltext_schema.py; this module is
what is written and read through a connection.

Layer: storage: the SQLite record (lines, chunks, states), below the pipeline and search.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone

from index import doc_language
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
    tokens: str  # space-joined segment.tokens(context + text)
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
            kept = _kept_contexts(conn, row["id"])
            old = conn.execute("SELECT chunk_id, embed_state FROM chunks WHERE source_id = ?",
                               (row["id"],)).fetchall()
            embedded = {r["chunk_id"] for r in old if r["embed_state"] == "indexed"}
            new_ids = {c.chunk_id for c in chunks}
            conn.executemany("INSERT OR IGNORE INTO chroma_tombstones VALUES (?)",
                             [(r["chunk_id"],) for r in old if r["chunk_id"] not in new_ids])
            conn.execute("DELETE FROM lines WHERE source_id = ?", (row["id"],))
            conn.execute("DELETE FROM chunks WHERE source_id = ?", (row["id"],))
        source_id = _upsert_source(conn, src, parser=parser, state="pending", error=None,
                                   pages=len(pages))
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
              c.context, "indexed" if c.chunk_id in embedded else "pending") for c in chunks),
        )
        _restore_contexts(conn, source_id, kept)
        conn.execute("DELETE FROM chroma_tombstones WHERE chunk_id IN "
                     "(SELECT chunk_id FROM chunks WHERE source_id = ?)", (source_id,))
        _flush_bm25(conn)
    return sum(c.chunk_id not in embedded for c in chunks)


def _record_languages(conn: sqlite3.Connection, source_id: int,
                      pages: Sequence[Sequence[str]]) -> None:
    """The natural languages of the source's text, for the `language` filter. Skipped on an
    index older than schema 10, which only code made to write that schema writes to (the
    tests that build old indexes)."""
    if "languages" in table_columns(conn, "sources"):
        conn.execute("UPDATE sources SET languages = ? WHERE id = ?",
                     (doc_language.detect(line for page in pages for line in page) or None,
                      source_id))


def record_failure(conn: sqlite3.Connection, src: SourceFile, reason: str, detail: str) -> str:
    """Record that a file could not be read; returns the state it leaves.

    A source that was indexed before keeps its old lines and chunks (state `degraded`), so a
    bad update never loses what was searchable; a new one is `failed` with nothing indexed, or
    `needs_action` when the user can fix it (a password, a missing OCR engine, a size limit).
    """
    error = f"{reason}: {detail}"
    state = "needs_action" if reason in NEEDS_ACTION else "failed"
    with conn:
        row = source_row(conn, src.name)
        if row is not None and row["pages"] > 0:
            conn.execute("UPDATE sources SET state = 'degraded', error = ? WHERE id = ?",
                         (f"{error} (still serving the previous version)", row["id"]))
            return "degraded"
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
        conn.execute("INSERT OR IGNORE INTO chroma_tombstones SELECT chunk_id FROM chunks "
                     "WHERE source_id = (SELECT id FROM sources WHERE name = ?)", (name,))
        conn.execute("DELETE FROM lines WHERE source_id = (SELECT id FROM sources WHERE name = ?)",
                     (name,))
        conn.execute("DELETE FROM chunks WHERE source_id = "
                     "(SELECT id FROM sources WHERE name = ?)", (name,))
        conn.execute("DELETE FROM sources WHERE name = ?", (name,))
        _flush_bm25(conn)


def attachment_names(conn: sqlite3.Connection, name: str) -> list[str]:
    """The sources made from a mail's attachments: named `<name>/<file>` and recording the
    same file as the mail's source (a range on the unique name index, then the path)."""
    return [row[0] for row in conn.execute(
        "SELECT c.name FROM sources c JOIN sources m ON m.name = ? AND c.path = m.path"
        " WHERE c.name > ? AND c.name < ? AND instr(substr(c.name, ?), '/') = 0"
        " ORDER BY c.name", (name, name + "/", name + "0", len(name) + 2))]


# ---------------------------------------------------------------------------
# embedding state: what Chroma still has to receive or forget

# what a chunk is embedded and BM25-indexed with besides its text: the sheet's header row
# and the contextualizer's context (hits and read_range show neither)
INDEXED_CONTEXT = ("CASE WHEN c.llm_context = '' THEN c.context WHEN c.context = ''"
                   " THEN c.llm_context ELSE c.context || char(10) || c.llm_context END")


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


def searchable_chunks(conn: sqlite3.Connection, after: int, limit: int) -> list[sqlite3.Row]:
    """(id, source, context, text) of up to `limit` chunks with rowid > after, by rowid."""
    return conn.execute(f"SELECT c.id, s.name AS source, {INDEXED_CONTEXT} AS context, c.text"
                        " FROM chunks c"
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


# ---------------------------------------------------------------------------
# contextualizer contexts (contextualize.py): llm_state is NULL until tried, then `done`,
# `failed` (retried on later runs up to MAX_CONTEXT_ATTEMPTS), or `carried`: kept from the
# same text of the source's previous version, its BM25 tokens not yet rebuilt

MAX_CONTEXT_ATTEMPTS = 3  # runs that try a chunk's context before it is given up
CONTEXT_STOP_KEY = "contextualizer_stop"  # meta key: why the last run stopped contextualizing
LLM_COLUMNS = ("llm_context", "llm_state", "llm_model", "llm_prompt", "llm_attempts",
               "llm_error")


@dataclass(frozen=True)
class ContextUpdate:
    """A chunk's new context fields; `tokens` (its full BM25 tokens) when they change, and
    `reembed` when its vector must be made again from the new context."""

    rowid: int
    context: str
    state: str
    model: str | None
    prompt: str | None
    attempts: int
    error: str | None = None
    tokens: str | None = None
    reembed: bool = False


def _kept_contexts(conn: sqlite3.Connection, source_id: int) -> dict[str, tuple]:
    """text -> context fields of a source's chunks that have been tried, before the source is
    replaced: a chunk whose text comes back keeps its context (no second LLM call)."""
    rows = conn.execute(f"SELECT text, {', '.join(LLM_COLUMNS)} FROM chunks"
                        " WHERE source_id = ? AND llm_state IS NOT NULL", (source_id,))
    return {row[0]: tuple(row[1:]) for row in rows}


def _restore_contexts(conn: sqlite3.Connection, source_id: int, kept: dict[str, tuple]) -> None:
    """Give the new chunks with a kept text their old context; a context that was in the BM25
    tokens becomes `carried` until the indexer rebuilds those tokens (it owns the segmenter)."""
    if not kept:
        return
    rows = conn.execute("SELECT id, text FROM chunks WHERE source_id = ?", (source_id,))
    updates = []
    for rowid, text in rows.fetchall():
        if text in kept:
            context, state, *rest = kept[text]
            state = "carried" if context and state in ("done", "carried") else state
            updates.append((context, state, *rest, rowid))
    conn.executemany(f"UPDATE chunks SET {' = ?, '.join(LLM_COLUMNS)} = ? WHERE id = ?",
                     updates)


def chunks_to_contextualize(conn: sqlite3.Connection, after: int, limit: int,
                            signature: tuple[str, str] | None, redo: bool,
                            retry: bool) -> list[sqlite3.Row]:
    """Up to `limit` chunks past rowid `after` that need a context, by rowid: `carried` ones
    always; with a contextualizer (`signature` = (model, prompt hash)) the never tried ones,
    failed ones with tries left when `retry`, and with `redo` every one whose context is not
    done by this signature; with none and `redo`, every one that holds a context (to clear)."""
    wanted = ["c.llm_state = 'carried'"]
    params: list = []
    if signature is not None:
        wanted.append("c.llm_state IS NULL")
        if retry:
            wanted.append("(c.llm_state = 'failed' AND c.llm_attempts < ?)")
            params.append(MAX_CONTEXT_ATTEMPTS)
        if redo:
            wanted.append("NOT (c.llm_state IS 'done' AND c.llm_model IS ? AND c.llm_prompt IS ?)")
            params += list(signature)
    elif redo:
        wanted.append("c.llm_context != '' OR c.llm_state IS NOT NULL")
    return conn.execute(
        "SELECT c.id, c.chunk_id, s.name AS source, c.page, c.line_start, c.line_end, c.text,"
        f" c.context, {', '.join('c.' + col for col in LLM_COLUMNS)}"
        " FROM chunks c JOIN sources s ON s.id = c.source_id"
        f" WHERE c.id > ? AND ({' OR '.join(wanted)}) ORDER BY c.id LIMIT ?",
        [after, *params, limit]).fetchall()


def save_contexts(conn: sqlite3.Connection, updates: Sequence[ContextUpdate]) -> None:
    """Write contexts, their BM25 tokens and the embedding state in one transaction, so a
    crash leaves each chunk either as it was or with a context it will be embedded with. The
    FTS5 external-content index gets the old tokens' 'delete' before the new ones go in."""
    with conn:
        for u in updates:
            conn.execute("UPDATE chunks SET llm_context = ?, llm_state = ?, llm_model = ?,"
                         " llm_prompt = ?, llm_attempts = ?, llm_error = ? WHERE id = ?",
                         (u.context, u.state, u.model, u.prompt, u.attempts, u.error, u.rowid))
            if u.tokens is not None:
                conn.execute("INSERT INTO chunks_fts(chunks_fts, rowid, tokens)"
                             " SELECT 'delete', id, tokens FROM chunks WHERE id = ?", (u.rowid,))
                conn.execute("UPDATE chunks SET tokens = ? WHERE id = ?", (u.tokens, u.rowid))
                conn.execute("INSERT INTO chunks_fts(rowid, tokens) VALUES (?, ?)",
                             (u.rowid, u.tokens))
            if u.reembed:
                conn.execute("UPDATE chunks SET embed_state = 'pending', embed_error = NULL"
                             " WHERE id = ?", (u.rowid,))
                conn.execute("UPDATE sources SET state = 'pending' WHERE state IN"
                             " ('ready', 'degraded') AND id = (SELECT source_id FROM chunks"
                             " WHERE id = ?)", (u.rowid,))
        _flush_bm25(conn)


def contextualization_state(conn: sqlite3.Connection,
                            signature: tuple[str, str] | None) -> dict:
    """How far the KB's contexts are from its contextualizer (`signature` = (model, prompt
    hash), None when none is configured): chunks contextualized by it, stale (by another
    model or prompt, or left from an earlier contextualizer), pending (not yet tried, or
    failed with tries left), failed (given up), and why the last run stopped, if it did."""
    if "llm_state" not in table_columns(conn, "chunks"):  # an older index, served read-only
        return {"contextualized": 0, "stale": 0, "pending": 0, "failed": 0, "stopped": None}
    model, prompt = signature or (None, None)
    row = conn.execute(
        "SELECT coalesce(sum(llm_state IN ('done', 'carried') AND llm_model IS ?"
        "  AND llm_prompt IS ?), 0),"
        " coalesce(sum(llm_state IN ('done', 'carried') AND NOT (llm_model IS ?"
        "  AND llm_prompt IS ?)), 0),"
        " coalesce(sum(llm_state IS NULL OR (llm_state = 'failed' AND llm_attempts < ?)), 0),"
        " coalesce(sum(llm_state = 'failed' AND llm_attempts >= ?), 0) FROM chunks",
        (model, prompt, model, prompt, MAX_CONTEXT_ATTEMPTS, MAX_CONTEXT_ATTEMPTS)).fetchone()
    done, stale, pending, failed = row
    if signature is None:  # nothing to do for chunks never contextualized
        done, pending, failed = 0, 0, 0
    return {"contextualized": done, "stale": stale, "pending": pending, "failed": failed,
            "stopped": get_meta(conn, CONTEXT_STOP_KEY) or None}


# ---------------------------------------------------------------------------
# reading: BM25, exact substrings, line ranges

def quote_fts(tokens: Iterable[str]) -> str:
    """An FTS5 query that ORs the tokens, each double-quoted so no token is read as syntax."""
    unique = dict.fromkeys(t.replace('"', '""') for t in tokens if t)
    return " OR ".join(f'"{t}"' for t in unique)


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
    vocab = _vocabulary(conn, "chunks")
    return " ".join(word for word, (low, high) in SEGMENTER_SCRIPTS.items()
                    if conn.execute(f"SELECT 1 FROM {vocab} WHERE term >= ? AND"
                                    " term < ? LIMIT 1", (low, high)).fetchone())


def _vocabulary(conn: sqlite3.Connection, table: str) -> str:
    """temp.<table>_vocab, the terms of <table>_fts with their row counts, made on first use
    (temp: fine on a read-only connection); returns its name."""
    conn.execute(f"CREATE VIRTUAL TABLE IF NOT EXISTS temp.{table}_vocab"
                 f" USING fts5vocab(main, '{table}_fts', 'row')")
    return f"temp.{table}_vocab"


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
        return quote_fts(tokens)

    def counts(terms: list[str]) -> tuple[dict[str, int], dict[str, int]]:
        _vocabulary(conn, "chunks")
        docs = dict.fromkeys(terms, 0)
        for start in range(0, len(terms), 500):  # SQLite's bound-parameter limit
            part = terms[start:start + 500]
            docs.update(conn.execute("SELECT term, doc FROM temp.chunks_vocab WHERE term IN"
                                     f" ({','.join('?' * len(part))})", part).fetchall())
        return docs, docs  # exact: nothing to settle

    kept = set(bm25.choose_terms(tokens, fts_totals(conn)[0], counts))
    return quote_fts([t for t in tokens if t in kept])


Sources = str | Sequence[str] | None  # one source's name, several names, or every source


def source_filter(source: str | Sequence[str]) -> tuple[str, list[str]]:
    """The SQL test on `s.name` for a source or several, and its parameters."""
    if isinstance(source, str):
        return "s.name = ?", [source]
    return f"s.name IN ({','.join('?' * len(source))})", list(source)


def bm25_all(conn: sqlite3.Connection, query_tokens: Sequence[str],
             source: Sources = None):
    """BM25 (k1=1.2, b=0.75; positive, higher is better) of every matching chunk: a
    `bm25.Scores` mapping rowid -> score, read once for both the ranked leg and the scores of
    the vector leg's chunks. bm25.py scores from its arrays; while it cannot (chunks still
    queued, an older index), FTS5's bm25() does, one pass without a join."""
    from index import bm25
    allowed = None
    if source is not None:
        import numpy as np

        test, names = source_filter(source)
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
        test, names = source_filter(source)
        sql += (" AND rowid IN (SELECT c.id FROM chunks c JOIN sources s"
                f" ON s.id = c.source_id WHERE {test})")
        params += names
    return bm25.Scores.from_pairs(conn.execute(sql, params).fetchall())


def embedded_chunk_ids(conn: sqlite3.Connection, source: str | Sequence[str],
                       limit: int) -> list[str]:
    """The ids of these sources' chunks that have a vector (embed_state 'indexed'), at most
    `limit` + 1 of them (one more says there are more)."""
    test, names = source_filter(source)
    return [r[0] for r in conn.execute(
        f"SELECT c.chunk_id FROM chunks c JOIN sources s ON s.id = c.source_id WHERE {test}"
        " AND c.embed_state = 'indexed' LIMIT ?", [*names, limit + 1])]


def top_chunks(conn: sqlite3.Connection, scores, limit: int) -> list[tuple[sqlite3.Row, float]]:
    """The `limit` best-scored chunks (of a bm25.Scores) with their rows, best first."""
    best = scores.top(limit)
    rows = chunks_by_rowid(conn, [rowid for rowid, _ in best])
    return [(rows[rowid], score) for rowid, score in best if rowid in rows]


def bm25_search(conn: sqlite3.Connection, query_tokens: Sequence[str], limit: int,
                source: Sources = None) -> list[tuple[sqlite3.Row, float]]:
    """Chunks ranked by BM25 (FTS5's formula, scored by bm25.py), best first."""
    return top_chunks(conn, bm25_all(conn, query_tokens, source), limit)


EXACT_PREFIX_TERMS = 256  # trigrams a 1-2 character needle may start before a scan is cheaper


EXACT_SCAN_FIRST = 4000  # lines a 1-2 character needle is first looked for in (~6 ms)
_INDEXED = (" FROM lines_fts f JOIN lines l ON l.id = f.rowid JOIN sources s"
            " ON s.id = l.source_id WHERE lines_fts MATCH ?")


def exact_search(conn: sqlite3.Connection, needle: str, limit: int,
                 source: Sources = None, width: int = 2000,
                 case_sensitive: bool = False) -> list[dict]:
    """Raw lines containing `needle`, up to `limit` of them, in document order, each cut to
    its first `width` characters (`length` holds the whole line's). The first `limit` lines in
    storage order are the ones returned, whichever way they are found: sorting every match by
    name first made a common needle read every line (2.5 s at 100,000 chunks, against 0.03 s
    when the search may stop at `limit`).

    Case-insensitive unless `case_sensitive` (an identifier: getURL, not getUrl). The trigram
    index is case-folded either way: it finds the candidate lines, the line check decides.

    A 1-2 character needle is first looked for in the first EXACT_SCAN_FIRST lines: a common
    one is found there at once, where asking the index which trigrams start with it reads
    their whole doclists ("e": 0.3 s at a million chunks, 0.5 ms this way)."""
    folded = needle.lower()
    holds = (lambda text: needle in text) if case_sensitive else (
        lambda text: folded in text.lower())
    scanned = _scanned(needle, case_sensitive)
    rows = []
    if len(needle) < 3:
        first = (" FROM lines l" + scanned + " AND l.id <= coalesce((SELECT id FROM lines"
                 " ORDER BY id LIMIT 1 OFFSET ?), 1 << 62)")
        rows = _lines_holding(conn, first, [needle, EXACT_SCAN_FIRST], holds, limit, width,
                              source)
    if len(rows) < limit:
        match = _trigram_match(folded) if len(needle) >= 3 else _short_match(conn, folded)
        if match is not None and match != "":  # lines holding every trigram of it
            rows = _lines_holding(conn, _INDEXED, [match], holds, limit, width, source)
        elif match is None:  # common, or an index from before _m006: scan every line
            rows = _lines_holding(conn, " FROM lines l" + scanned, [needle], holds, limit,
                                  width, source)
    return sorted(rows, key=lambda row: (row["source"], row["page"], row["line"]))


def _scanned(needle: str, case_sensitive: bool) -> str:
    """The condition of a scan of lines for `needle` (its one parameter): an instr() that lets
    through every line the line check keeps, and few others. SQLite's lower() folds ASCII
    only, so a needle with other letters is left to the line check when case does not count
    (lower("É") is "É": the scan missed "école")."""
    if case_sensitive:
        test = "instr(l.text, ?) > 0"
    elif needle.isascii():
        test = "instr(lower(l.text), lower(?)) > 0"
    else:
        test = "? IS NOT NULL"
    return " JOIN sources s ON s.id = l.source_id WHERE " + test


def _lines_holding(conn: sqlite3.Connection, tables: str, params: list,
                   holds: Callable[[str], bool], limit: int, width: int,
                   source: Sources) -> list[dict]:
    """The first `limit` lines the query finds for which `holds(line)` (the trigrams may sit
    apart, instr() folds ASCII only and the index folds every case: the line decides)."""
    sql = "SELECT s.name AS source, l.page, l.line, l.text" + tables
    if source is not None:
        test, names = source_filter(source)
        sql += f" AND {test}"
        params = [*params, *names]
    rows = []
    for row in conn.execute(sql, params):
        text = row["text"]
        if holds(text):
            rows.append({"source": row["source"], "page": row["page"], "line": row["line"],
                         "text": text[:width], "length": len(text)})
            if len(rows) == limit:
                break
    return rows


EXACT_TRIGRAMS = 32  # trigrams of a needle the index is asked for; the line check decides


def _trigram_match(folded: str) -> str:
    """An FTS5 query for the lines holding trigrams of a 3+ character string, at most
    EXACT_TRIGRAMS of them spread over it: the line check decides, so more only cost time
    (a pasted 4,000-character needle: 1.2 s with all of them). A phrase would need the
    positions lines_fts no longer keeps (_m007)."""
    grams = list(dict.fromkeys(folded[i:i + 3] for i in range(len(folded) - 2)))
    if len(grams) > EXACT_TRIGRAMS:
        grams = [grams[i * len(grams) // EXACT_TRIGRAMS] for i in range(EXACT_TRIGRAMS)]
    return " AND ".join('"' + gram.replace('"', '""') + '"' for gram in grams)


def _short_match(conn: sqlite3.Connection, folded: str) -> str | None:
    """An FTS5 query for the lines holding a 1- or 2-character needle: the indexed trigrams
    that start with it, which are all of them since every line ends in LINE_END. "" when
    there are none; None when the needle starts more than EXACT_PREFIX_TERMS (it is common,
    so a scan finds its lines at once) or the index predates LINE_END."""
    if "grams" not in table_columns(conn, "lines"):
        return None
    vocab = _vocabulary(conn, "lines")
    terms = [row[0] for row in conn.execute(
        f"SELECT term FROM {vocab} WHERE term >= ? AND term < ? LIMIT ?",
        (folded, folded + "\U0010ffff", EXACT_PREFIX_TERMS + 1))]
    return None if len(terms) > EXACT_PREFIX_TERMS else quote_fts(terms)


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
        source["state"] = STATE_LABELS.get(source["state"], source["state"])
    return sources


def problem_sources(conn: sqlite3.Connection, limit: int) -> list[dict]:
    """Up to `limit` sources that failed, need the user, are degraded or carry warnings:
    name, state, error and warnings (get_index_info's list of what to look at)."""
    has_warnings = (" OR s.warnings IS NOT NULL"
                    if "warnings" in table_columns(conn, "sources") else "")
    where = f"WHERE s.state IN ('failed', 'needs_action', 'degraded'){has_warnings}"
    return [{k: source.get(k) for k in ("name", "state", "error", "warnings")}
            for source in list_sources(conn, 0, limit, where)]


def table_columns(conn: sqlite3.Connection, table: str) -> set[str]:
    """Its columns, generated ones included (table_info leaves those out)."""
    return {row[1] for row in conn.execute(f"PRAGMA table_xinfo({table})")}


STATES = ("ready", "pending", "degraded", "failed", "needs_action")
STATE_LABELS = {"pending": "pending_embedding"}  # how states read in tool results


def state_counts(conn: sqlite3.Connection) -> dict[str, int]:
    """Sources per state, every state present (0 where none), named as tools show them."""
    found = dict(conn.execute("SELECT state, count(*) FROM sources GROUP BY state").fetchall())
    return {STATE_LABELS.get(s, s): found.get(s, 0) for s in STATES}


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
