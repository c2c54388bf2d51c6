"""fulltext.sqlite3's schema: its tables, numbered migrations, and how a connection opens.

`connect(path)` opens the index writable (WAL) and migrates it, each migration in its own
`BEGIN IMMEDIATE ... COMMIT` (schema version in `PRAGMA user_version`); `connect(path,
readonly=True)` is the server's: read-only, falling back to `immutable` only on a folder nobody
can write (a busy index in a writable folder raises IndexUnavailable), never migrating.
`table_columns` says which columns an index has (an older one, served read-only, has fewer).
fulltext.py holds what is written and read through the connection.

Layer: storage: the SQLite record's schema, below fulltext.py.
"""

from __future__ import annotations

import sqlite3
import tempfile
from pathlib import Path, PurePath, PureWindowsPath

from common import limits
from common.commands import command

# ---------------------------------------------------------------------------
SCHEMA_VERSION = 10
FILENAME = "fulltext.sqlite3"
# segment.py emits tokens made only of these categories, so FTS5 never re-splits them
TOKEN_CATEGORIES = "L* N* Co M*"
LINE_END = "\x01\x01"  # what lines_fts indexes after each line (see _m006_line_ends)
# ---------------------------------------------------------------------------


class SchemaError(RuntimeError):
    """The file was written by a newer linecite, or is not a linecite index."""


class IndexUnavailable(RuntimeError):
    """A read-only open failed in a folder that can be written: the index is in use or held
    by another program, not damaged, so the fix is to wait or close that program."""

    def __init__(self, path: Path, err: sqlite3.OperationalError) -> None:
        super().__init__(
            f"{path} cannot be opened for reading ({err}): another program holds it (an "
            f"indexer that keeps an exclusive lock, a backup or antivirus scan). The index is "
            f"not damaged: wait for that program or close it, then retry")


# ---------------------------------------------------------------------------
# schema and migrations: numbered functions, applied in order, each in one transaction

def _m001_create_tables(conn: sqlite3.Connection) -> None:
    statements = [
        """CREATE TABLE sources (
            id INTEGER PRIMARY KEY,
            name TEXT NOT NULL UNIQUE,
            path TEXT,
            sha256 TEXT,
            size INTEGER,
            mtime REAL,
            parser TEXT,
            state TEXT NOT NULL,
            error TEXT,
            pages INTEGER NOT NULL DEFAULT 0,
            ingested_at TEXT
        )""",
        """CREATE TABLE lines (
            id INTEGER PRIMARY KEY,
            source_id INTEGER NOT NULL REFERENCES sources(id) ON DELETE CASCADE,
            page INTEGER NOT NULL,
            line INTEGER NOT NULL,
            text TEXT NOT NULL,
            UNIQUE (source_id, page, line)
        )""",
        """CREATE TABLE chunks (
            id INTEGER PRIMARY KEY,
            chunk_id TEXT NOT NULL UNIQUE,
            source_id INTEGER NOT NULL REFERENCES sources(id) ON DELETE CASCADE,
            page INTEGER NOT NULL,
            line_start INTEGER NOT NULL,
            line_end INTEGER NOT NULL,
            text TEXT NOT NULL,
            tokens TEXT NOT NULL,
            embed_state TEXT NOT NULL DEFAULT 'pending',
            embed_error TEXT
        )""",
        "CREATE INDEX chunks_source ON chunks(source_id, page, line_start)",
        "CREATE INDEX chunks_pending ON chunks(embed_state) WHERE embed_state = 'pending'",
        "CREATE TABLE chroma_tombstones (chunk_id TEXT PRIMARY KEY)",
        f"""CREATE VIRTUAL TABLE chunks_fts USING fts5(
            tokens, content='chunks', content_rowid='id',
            tokenize="unicode61 remove_diacritics 0 categories '{TOKEN_CATEGORIES}'"
        )""",
        """CREATE VIRTUAL TABLE lines_fts USING fts5(
            text, content='lines', content_rowid='id', tokenize='trigram case_sensitive 0'
        )""",
    ]
    for table, column in (("chunks", "tokens"), ("lines", "text")):
        fts = f"{table}_fts"
        statements += [
            f"""CREATE TRIGGER {table}_ai AFTER INSERT ON {table} BEGIN
                INSERT INTO {fts}(rowid, {column}) VALUES (new.id, new.{column}); END""",
            f"""CREATE TRIGGER {table}_ad AFTER DELETE ON {table} BEGIN
                INSERT INTO {fts}({fts}, rowid, {column}) VALUES ('delete', old.id, old.{column});
                END""",
        ]
    for statement in statements:  # not executescript(): it would commit the open transaction
        conn.execute(statement)


def _m002_warnings_and_context(conn: sqlite3.Connection) -> None:
    """Warnings that did not stop indexing (pages left without OCR, for instance), and the
    context a chunk is searched and embedded with (a sheet's header row)."""
    conn.execute("ALTER TABLE sources ADD COLUMN warnings TEXT")
    conn.execute("ALTER TABLE chunks ADD COLUMN context TEXT NOT NULL DEFAULT ''")


def _m003_meta(conn: sqlite3.Connection) -> None:
    """Facts about the index as a whole, such as which segmenter made its tokens."""
    conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")


def _m004_llm_contexts(conn: sqlite3.Connection) -> None:
    """A contextualizer's context for each chunk, apart from `context` (a sheet's header row,
    derived from the file): with the model and prompt hash that wrote it, so a changed model
    or prompt shows as stale, and the attempts, so a chunk that keeps failing is given up."""
    for column in ("llm_context TEXT NOT NULL DEFAULT ''", "llm_state TEXT", "llm_model TEXT",
                   "llm_prompt TEXT", "llm_attempts INTEGER NOT NULL DEFAULT 0",
                   "llm_error TEXT"):
        conn.execute(f"ALTER TABLE chunks ADD COLUMN {column}")
    conn.execute("CREATE INDEX chunks_llm_state ON chunks(llm_state)")


def _m005_bm25_postings(conn: sqlite3.Connection) -> None:
    """BM25's postings as arrays beside chunks_fts (bm25_segments.py), built from the stored
    tokens: FTS5's own scoring grew to seconds a query at a million chunks."""
    from index import bm25_segments
    bm25_segments.create(conn)


def _lines_fts(conn: sqlite3.Connection, options: str) -> None:
    """(Re)make lines_fts over `lines.grams` with its two triggers, and fill it."""
    for statement in ("DROP TRIGGER IF EXISTS lines_ai", "DROP TRIGGER IF EXISTS lines_ad",
                      "DROP TABLE IF EXISTS lines_fts",
                      f"""CREATE VIRTUAL TABLE lines_fts USING fts5(grams, content='lines',
                         content_rowid='id', tokenize='trigram case_sensitive 0'{options})""",
                      """CREATE TRIGGER lines_ai AFTER INSERT ON lines BEGIN
                         INSERT INTO lines_fts(rowid, grams) VALUES (new.id, new.grams); END""",
                      """CREATE TRIGGER lines_ad AFTER DELETE ON lines BEGIN
                         INSERT INTO lines_fts(lines_fts, rowid, grams)
                         VALUES ('delete', old.id, old.grams); END""",
                      "INSERT INTO lines_fts(lines_fts) VALUES ('rebuild')"):
        conn.execute(statement)


def _m006_line_ends(conn: sqlite3.Connection) -> None:
    """lines_fts indexes each line with two U+0001 after it, so every occurrence of a 1- or
    2-character string begins some trigram: an exact search for one reads the trigrams that
    start with it instead of scanning every line (344 ms at 100,000 chunks)."""
    conn.execute("ALTER TABLE lines ADD COLUMN grams TEXT GENERATED ALWAYS AS"
                 " (text || char(1, 1)) VIRTUAL")  # LINE_END
    _lines_fts(conn, "")


def _m007_trigrams_without_positions(conn: sqlite3.Connection) -> None:
    """lines_fts without positions (detail=none): a third of the size (2.0 -> 0.6 KB a chunk,
    the largest index on disk); a string is found through all of its trigrams and checked
    in the line itself (exact.exact_search), no slower than a phrase query."""
    _lines_fts(conn, ", detail='none'")


def _m008_postings_in_write_order(conn: sqlite3.Connection) -> None:
    """BM25's postings stored in the order they are written, found through an index on
    (term, seg): a flush appends instead of touching pages all over the table."""
    from index import bm25_segments
    bm25_segments.relayout(conn)


def _m009_merge_held_segments(conn: sqlite3.Connection) -> None:
    """BM25 segments merged that schema 8 left apart: eight of its ~16,400-chunk segments
    were just over its merge limit, and it checked the limit against a whole tier rather than
    the FANOUT segments it merges, so they never merged again (a million chunks: 73 segments,
    a query read up to 73 rows a term)."""
    from index import bm25_segments
    bm25_segments.merge_tiers(conn)
    bm25_segments.new_generation(conn)


def _m010_source_languages(conn: sqlite3.Connection) -> None:
    """Each source's natural languages (doc_language.py), for search's `language` filter,
    counted from the lines already stored so an index equals a clean rebuild."""
    from index import doc_language
    conn.execute("ALTER TABLE sources ADD COLUMN languages TEXT")
    for (source_id,) in conn.execute("SELECT id FROM sources WHERE pages > 0").fetchall():
        lines = (text for (text,) in conn.execute(
            "SELECT text FROM lines WHERE source_id = ? ORDER BY page, line", (source_id,)))
        conn.execute("UPDATE sources SET languages = ? WHERE id = ?",
                     (doc_language.detect(lines) or None, source_id))


MIGRATIONS = [_m001_create_tables, _m002_warnings_and_context, _m003_meta, _m004_llm_contexts,
              _m005_bm25_postings, _m006_line_ends, _m007_trigrams_without_positions,
              _m008_postings_in_write_order, _m009_merge_held_segments, _m010_source_languages]
assert len(MIGRATIONS) == SCHEMA_VERSION


def _migrate(conn: sqlite3.Connection) -> None:
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if version > SCHEMA_VERSION:
        raise SchemaError(
            f"this index has schema version {version}, newer than this linecite "
            f"({SCHEMA_VERSION}); update linecite"
        )
    for number, migration in enumerate(MIGRATIONS[version:], start=version + 1):
        # explicit: sqlite3 opens no transaction before DDL, so `with conn:` left a half-made
        # schema at user_version 0 when a migration failed halfway (issue 14)
        conn.execute("BEGIN IMMEDIATE")
        try:
            migration(conn)
            conn.execute(f"PRAGMA user_version = {number}")
        except BaseException:
            conn.rollback()
            raise
        conn.commit()


def sqlite_uri(path: PurePath) -> str:
    """A `file:` URI SQLite opens for an absolute path, UNC shares included. SQLite refuses any
    URI authority but "" and "localhost", and `as_uri()` puts a share's server there
    (`file://server/share/...`); with an empty authority the path keeps its two leading
    slashes (`file:////server/share/...`), which Windows reads as the UNC path."""
    uri = path.as_uri()
    if isinstance(path, PureWindowsPath) and path.drive.startswith(("\\\\", "//")):
        uri = "file://" + uri[len("file:"):]
    return uri


def _open_readonly(path: Path) -> sqlite3.Connection:
    """A read-only connection; on a folder nobody can write (a read-only share, a mounted
    backup) WAL cannot make its -shm file, so the index is opened `immutable` instead: it is
    then read as it is on disk, which is right for a folder nobody can write either. In a
    folder that can be written, a failed open (another program holding a lock, an antivirus
    scan) is reported, never read `immutable`: SQLite leaves a live WAL index read that way
    undefined (a stale or torn snapshot)."""
    if not path.exists():
        raise FileNotFoundError(f"no index at {path}; run `{command('ingest', 'FILE')}` first")
    uri = sqlite_uri(path.resolve())
    conn = sqlite3.connect(f"{uri}?mode=ro", uri=True, check_same_thread=False,
                           timeout=limits.INDEX_BUSY_WAIT_S)  # waits out a short lock
    try:
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        return conn
    except sqlite3.OperationalError as err:
        conn.close()
        if _folder_writable(path.parent):
            raise IndexUnavailable(path, err) from None
    return sqlite3.connect(f"{uri}?mode=ro&immutable=1", uri=True, check_same_thread=False)


def _folder_writable(folder: Path) -> bool:
    """Whether a file can be made in `folder`: asked of the folder itself (a temporary file,
    removed at once), since permission bits say nothing of a read-only share or mount."""
    try:
        with tempfile.TemporaryFile(dir=folder):
            return True
    except OSError:
        return False


def connect(path: Path, readonly: bool = False) -> sqlite3.Connection:
    """Open an index: writable and migrated for the indexer, read-only for the server."""
    if readonly:
        conn = _open_readonly(path)
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(path, check_same_thread=False)
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
    conn.row_factory = sqlite3.Row
    conn.execute("PRAGMA foreign_keys = ON")
    conn.execute("PRAGMA busy_timeout = 10000")
    if readonly:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if not 1 <= version <= SCHEMA_VERSION:
            raise SchemaError(f"{path} has schema version {version}; reindex it with "
                              f"`{command('ingest', '--kb', path.parent.name, '--rebuild')}`")
    else:
        _migrate(conn)
    return conn


def table_columns(conn: sqlite3.Connection, table: str) -> set[str]:
    """Its columns, generated ones included (table_info leaves those out)."""
    return {row[1] for row in conn.execute(f"PRAGMA table_xinfo({table})")}
