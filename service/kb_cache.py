"""The KBs open for the running server (KBCache): each opened on first use through two
read-only connections to its `fulltext.sqlite3` (the server never migrates or writes it), read
one snapshot a call, and for vector search its Chroma collection. What changes under it is
followed at the next call: a changed `config.json` is read again (and the store opened with
the old one reopened), an index put in the old one's place (`ingest.py --rebuild`) is opened
afresh, and a store another process has written is refreshed on a thread of its own
(StoreRefresh) so that no search waits for Chroma while an indexer runs.

Layer: service: below library.py (whose tools read every KB through it), above the storage
modules (fulltext, chroma_store) and search.py.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import chroma_store
import fulltext
import kb as kbmod
import search
from common import limits, run_status
from common.commands import command
from common.limits import UserError, check_text, shown
from common.pidlock import PidLock
from index import states, store_errors
from index.store_errors import KBDamaged
from kb import config_stamp
from providers.embedders import EmbedderMismatch

# ---------------------------------------------------------------------------
CONFIG_CHECK_EVERY = 0.5  # seconds between looks (one stat) at an open KB's config.json
WARM_QUERY = "linecite"  # what a first load embeds, so the embedder is loaded before a search
# ---------------------------------------------------------------------------


class StoreRefresh:
    """A KB's vector store opened and loaded on a thread of its own, beside the store that
    serves (a first load: while none serves yet): chromadb shares one client per path string
    in a process, so it opens under the other client generation, and a client of its own
    reads what other processes wrote. `with_embedder` loads the embedder too (a first load:
    the built-in model takes seconds; a refresh uses the one loaded already)."""

    def __init__(self, kb: kbmod.KnowledgeBase, version: int, generation: int,
                 with_embedder: bool = False) -> None:
        self.kb, self.version, self.generation = kb, version, generation
        self.with_embedder = with_embedder
        self.store = None
        self.error: Exception | None = None  # why the store could not even be made
        self._lock = threading.Lock()  # orders the load's end against close()
        self._ended = False  # the load is over
        self._closed = False  # close() was called
        self.thread = threading.Thread(target=self._load, name=f"linecite-refresh-{kb.id}",
                                       daemon=True)
        self.thread.start()

    def _load(self) -> None:
        """Open the store and load its vector index (and embedder); a failure is left for the
        vector check (vector_problem) or the search to report once the store serves."""
        try:
            self.store = store_for(self.kb, self.generation)
            if self.store is not None:
                self.store.warm()
                if self.with_embedder:
                    self.store.embed_query(WARM_QUERY)
        except Exception as err:  # noqa: BLE001 - raised where the search would have met it
            if self.store is None:
                self.error = err
        with self._lock:
            self._ended, closed = True, self._closed
        if closed:
            self._close_store()

    def close(self) -> None:
        """Close what the load opened, now or when it ends (the KB closes, or its config
        changed): nothing waits for a load, so closing a KB never waits on Chroma."""
        with self._lock:
            self._closed, ended = True, self._ended
        if ended:
            self._close_store()

    def _close_store(self) -> None:
        if self.store is not None:
            self.store.close()


@dataclass
class Reader:
    """A read-only connection to a KB's fulltext.sqlite3 and the lock of the call reading
    through it; the outermost call reads in one transaction (one snapshot)."""

    conn: sqlite3.Connection
    lock: threading.RLock = field(default_factory=threading.RLock)
    depth: int = 0  # nested calls of the thread holding `lock`


@dataclass
class OpenKB:
    """One KB open for the tools, through two connections so that reading lines never waits
    on the vector store: `reads` serves the calls that read SQLite alone (read_range,
    list_sources, name look-ups), `searches` the searches and the store's checks, and its lock
    is the one held while Chroma opens, loads or answers. The store's fields are its lock's."""

    kb: kbmod.KnowledgeBase
    reads: Reader
    searches: Reader
    identity: tuple[int, int] | None = None  # fulltext.sqlite3's (st_dev, st_ino) when opened
    users: int = 0  # calls using the entry now (counted under KBCache._lock)
    retired: bool = False  # no call gets it any more (file replaced or damaged); closes at 0
    store: chroma_store.ChromaStore | None = None  # opened on first vector search
    store_kb: kbmod.KnowledgeBase | None = None  # the settings `store` was opened with
    searcher: search.Searcher | None = None
    data_version: int = -1  # SQLite's PRAGMA data_version when the store was last checked
    vector_note: str | None = None  # why the vector leg cannot serve it all, from that check
    vector_checked: bool = False  # vector_note is current for data_version
    config_lock: threading.Lock = field(default_factory=threading.Lock)  # the config_ fields
    config_stamp: tuple[int, int, int] | None = None  # config.json's stamp when `kb` was read
    config_seen: float = 0.0  # time.monotonic() of the last look at config.json
    config_note: str | None = None  # why a changed config.json is not in use, or None
    store_opened: float = 0.0  # time.monotonic() when `store` was opened
    generation: int = 0  # the chromadb client generation `store` uses (0 or 1)
    refresh: StoreRefresh | None = None  # a fresh store being opened beside `store`

    @property
    def conn(self) -> sqlite3.Connection:
        """The connection of the calls that read SQLite alone (inside KBCache.reading)."""
        return self.reads.conn

    @property
    def loading(self) -> bool:
        """No store serves yet and the first one is still loading (the warm-up's)."""
        return self.store is None and self.refresh is not None and self.refresh.thread.is_alive()

    def close(self) -> None:
        self.reads.conn.close()
        self.searches.conn.close()
        if self.store is not None:
            self.store.close()
        if self.refresh is not None:
            self.refresh.close()


class KBCache:
    """Every KB under one base folder, opened lazily and shared by all tool calls."""

    def __init__(self, base: Path):
        self.base = base
        self._open: dict[str, OpenKB] = {}
        self._lock = threading.Lock()

    def close(self) -> None:
        for entry in self._open.values():
            entry.close()
        self._open.clear()

    def kb_ids(self) -> list[str]:
        return kbmod.list_ids(self.base)

    def resolve(self, kb_id: str | None) -> str:
        check_kb_arg(kb_id)
        known = self.kb_ids()
        if not known:
            raise UserError(f"there is no knowledge base under {self.base} yet; create one by "
                            f"indexing files: `{command('ingest', 'FILE_OR_FOLDER', '[--kb ID]')}`,"
                            " or call ingest_file")
        if kb_id is None:
            if len(known) == 1:
                return known[0]
            raise UserError("several knowledge bases exist; pass kb_id, one of: "
                            f"{', '.join(known)}")
        if kb_id not in known:
            raise UserError(f"unknown kb_id {shown(kb_id)}; known knowledge bases: "
                            f"{', '.join(known)} (see list_knowledge_bases)")
        return kb_id

    def get(self, kb_id: str | None) -> OpenKB:
        """The KB's open entry, opened on first use."""
        kb_id = self.resolve(kb_id)
        with self._lock:
            return self._entry(kb_id)

    def _entry(self, kb_id: str) -> OpenKB:
        """The open entry of a known KB (call with self._lock held), opened if it is not."""
        entry = self._open.get(kb_id)
        if entry is not None:
            return entry
        stamp = config_stamp(self.base / kb_id / "config.json")  # before the read
        kb = kbmod.load(self.base, kb_id)
        if not kb.fulltext_path.exists():
            raise UserError(f"knowledge base {kb_id!r} has nothing indexed yet; index "
                            f"files with `{command('ingest', 'FILE', '--kb', kb_id)}`")
        identity = file_identity(kb.fulltext_path)  # before the opens, as the stamp
        reads = open_reader(kb)
        try:
            searches = open_reader(kb)
        except BaseException:
            reads.conn.close()
            raise
        entry = self._open[kb_id] = OpenKB(kb, reads, searches, identity, config_stamp=stamp,
                                           config_seen=time.monotonic())
        return entry

    @contextmanager
    def _using(self, kb_id: str | None) -> Iterator[OpenKB]:
        """The KB's open entry, held for one call: an entry retired meanwhile (_drop) is
        closed when the last call using it ends, never under one."""
        kb_id = self.resolve(kb_id)
        with self._lock:
            entry = self._entry(kb_id)
            entry.users += 1
        try:
            yield entry
        finally:
            with self._lock:
                entry.users -= 1
                idle = entry.retired and not entry.users
            if idle:
                entry.close()

    def _drop(self, entry: OpenKB) -> None:
        """No call gets `entry` any more: the next one opens the KB afresh."""
        with self._lock:
            if self._open.get(entry.kb.id) is entry:
                del self._open[entry.kb.id]
            entry.retired = True

    @contextmanager
    def reading(self, kb_id: str | None) -> Iterator[OpenKB]:
        """An open KB for one call that reads SQLite alone (entry.conn), in one snapshot,
        never waiting on the vector store: see _snapshot."""
        with self._snapshot(kb_id, "reads") as entry:
            yield entry

    @contextmanager
    def searching(self, kb_id: str | None) -> Iterator[OpenKB]:
        """An open KB for a search or a look at its vector store (entry.searches.conn and the
        store's fields), in one snapshot: see _snapshot."""
        with self._snapshot(kb_id, "searches") as entry:
            yield entry

    @contextmanager
    def _snapshot(self, kb_id: str | None, side: str) -> Iterator[OpenKB]:
        """An open KB for one call, read through its `side` Reader in one snapshot. An index
        replaced since it was opened is opened afresh: `ingest.py --rebuild` moves the file
        aside (POSIX lets it move while open) and the connection followed it, so searches
        answered from the old index until a restart. One found damaged on the way is dropped
        too (so a restored file is opened afresh) and reported with the fix.

        One read transaction per call: a search runs several statements, and an ingest that
        commits between them could otherwise give a hit whose chunk and lines come from two
        versions of a source (chunk rowids are reused when a source is replaced).
        """
        while True:
            with self._using(kb_id) as entry:
                reader: Reader = getattr(entry, side)
                with reader.lock:
                    outer = reader.depth == 0
                    if outer and file_identity(entry.kb.fulltext_path) != entry.identity:
                        self._drop(entry)  # one stat a call: the next turn opens the new file
                        continue
                    if outer:
                        self._follow_config(entry)
                        if not reader.conn.in_transaction:
                            reader.conn.execute("BEGIN")  # deferred: taken at the first read
                    reader.depth += 1
                    try:
                        with store_errors.explained(entry.kb.id, entry.kb.fulltext_path):
                            yield entry
                    except KBDamaged:
                        self._drop(entry)
                        raise
                    finally:
                        reader.depth -= 1
                        if outer:
                            end_read(reader.conn)
                return

    def _follow_config(self, entry: OpenKB) -> None:
        """Take up a config.json changed since the KB was opened: a user who switches the
        embedder and re-embeds must not have to restart the server (the search side reopens
        the store when it finds `entry.kb` is not the one its store was opened with).

        One stat per CONFIG_CHECK_EVERY; the stamp holds the inode, so a file swapped in by
        os.replace is seen even within the clock's resolution. A file that does not load (an
        editor caught mid-save, a typo) leaves the last good settings serving, with a note.
        """
        with entry.config_lock:
            now = time.monotonic()
            if now - entry.config_seen < CONFIG_CHECK_EVERY:
                return
            entry.config_seen = now
            path = entry.kb.folder / "config.json"
            stamp = config_stamp(path)
            if stamp == entry.config_stamp:
                return
            entry.config_stamp = stamp
            try:
                kb = kbmod.load(self.base, entry.kb.id)
            except (OSError, kbmod.ConfigError) as err:
                entry.config_note = (f"{path} changed but cannot be used ({err}); still "
                                     "serving with the settings read before it changed: fix "
                                     "the file")
                return
            entry.kb, entry.config_note = kb, None

    def searcher(self, entry: OpenKB, vector: bool = True) -> search.Searcher:
        """The KB's Searcher (call with entry.searches.lock held), its vector store opened
        when there is one to open, and refreshed when another connection has written the KB.

        An embedded Chroma client keeps its vector index in memory and never sees vectors that
        another process adds, so without a refresh the vector leg would miss every file that
        `python ingest.py` indexed after the server started. PRAGMA data_version changes when
        any other connection commits. Reloading the index takes seconds on a large KB, so while
        an indexer runs a search never waits for it: see `_follow_store`. The store is opened
        read-only and checked against SQLite's count of embedded chunks, but only when
        `vector` asks for it: opening Chroma costs a keyword search its first answer.
        """
        version = data_version(entry)
        if entry.searcher is None:
            entry.searcher = search.Searcher(entry.searches.conn, None)
        kb = entry.kb
        if entry.store_kb is not kb:  # first use, or a changed config.json: nothing to keep
            entry.store_kb = kb
            self._use_store(entry, store_for(kb, entry.generation), version)
        else:
            self._follow_store(entry, version)
        if vector and not entry.vector_checked:
            entry.vector_note, entry.vector_checked = vector_problem(entry), True
        entry.searcher.store = entry.store
        return entry.searcher

    def _follow_store(self, entry: OpenKB, version: int) -> None:
        """Bring a stale store up to date without loading it on a search's thread while an
        indexer runs (call with entry.searches.lock held).

        A StoreRefresh opens and loads the new store on its own thread, beside the one that
        serves, at most every STORE_REFRESH_EVERY seconds during a run; the next call swaps it
        in. Once no run holds the KB, a stale store is refreshed at once and the call waits
        for it: once per run, not per commit, so what a finished run wrote is found. A first
        store still loading (the warm-up's) is never waited for: searches answer from BM25
        meanwhile, and a `vector` one waits before it takes the lock (wait_for_store).
        """
        pending = entry.refresh
        if pending is None and version == entry.data_version:
            return  # up to date: the usual case costs no look at the writer lock
        if pending is None and not getattr(entry.store, "is_open", False):
            # nothing loaded yet (no vector search so far, or no store): a new handle is free
            self._use_store(entry, store_for(entry.kb, entry.generation), version)
            return
        running = PidLock(entry.kb.folder / run_status.WRITER_LOCK, "").holder() is not None
        if pending is None:
            if running and time.monotonic() - entry.store_opened < limits.STORE_REFRESH_EVERY:
                return
            pending = entry.refresh = StoreRefresh(entry.kb, version, 1 - entry.generation)
        if pending.thread.is_alive() and (running or entry.store is None):
            return  # the search goes on with the store that serves, or without one
        self._swap_in(entry, pending)

    def _swap_in(self, entry: OpenKB, pending: StoreRefresh) -> None:
        """Serve the store `pending` loads, once it has (call with entry.searches.lock held)."""
        pending.thread.join()
        entry.refresh = None
        if pending.kb is not entry.kb:  # config.json changed meanwhile: its store serves
            pending.close()
            return
        if pending.error is not None:
            if entry.store is None:  # a first load: the next search opens the store itself
                entry.store_kb = None
            raise pending.error
        entry.generation = pending.generation
        self._use_store(entry, pending.store, pending.version)

    def start_loading(self, entry: OpenKB) -> StoreRefresh | None:
        """Open and load the KB's vector store and embedder on a thread of their own (the
        warm-up's; call with entry.searches.lock held), unless a store was opened already.
        Searches meanwhile answer from BM25 and say so (kb_search.STILL_LOADING): the first answers
        after a start waited seconds for the embedder and Chroma."""
        if entry.store_kb is entry.kb:
            return None
        version = data_version(entry)
        entry.store_kb, entry.data_version, entry.vector_checked = entry.kb, version, False
        entry.refresh = StoreRefresh(entry.kb, version, entry.generation, with_embedder=True)
        return entry.refresh

    def wait_for_store(self, kb_id: str) -> None:
        """Wait, holding no lock, for a first store still loading: a `vector` search has
        nothing to answer from before it, and other searches must not queue behind it."""
        entry = self.get(kb_id)
        pending = entry.refresh
        if pending is not None and entry.store is None:
            pending.thread.join()

    def reopen_store(self, entry: OpenKB) -> None:
        """Serve a store opened afresh (call with entry.searches.lock held), waiting for its
        load: the refresh under way if there is one, else a new one."""
        pending = entry.refresh or StoreRefresh(entry.kb, data_version(entry),
                                                1 - entry.generation)
        self._swap_in(entry, pending)
        self.searcher(entry)

    @staticmethod
    def _use_store(entry: OpenKB, store, version: int) -> None:
        """Serve `store` from now on (call with entry.searches.lock held: no query runs on the
        old)."""
        if entry.store is not None:
            entry.store.close()
        entry.store, entry.store_opened = store, time.monotonic()
        entry.data_version, entry.vector_checked = version, False


def open_reader(kb: kbmod.KnowledgeBase) -> Reader:
    """A read-only connection to the KB's index; what cannot be opened says how to fix it."""
    try:
        with store_errors.explained(kb.id, kb.fulltext_path):
            return Reader(fulltext.connect(kb.fulltext_path, readonly=True))
    except (fulltext.SchemaError, fulltext.IndexUnavailable) as err:
        raise UserError(str(err)) from None


def file_identity(path: Path) -> tuple[int, int] | None:
    """(st_dev, st_ino) of a file, None when it is gone: a file put in its place (a rebuild
    moves the old aside) has another. Windows fills both too (the volume and file index)."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    return info.st_dev, info.st_ino


def data_version(entry: OpenKB) -> int:
    """SQLite's count of commits by other connections, as the search side's connection sees
    it (call with entry.searches.lock held)."""
    return entry.searches.conn.execute("PRAGMA data_version").fetchone()[0]


def end_read(conn: sqlite3.Connection) -> None:
    """Close a read transaction; on a damaged or closed file there is nothing to keep."""
    try:
        if conn.in_transaction:
            conn.execute("COMMIT")
    except sqlite3.Error:
        pass


def check_kb_arg(kb_id: str | None) -> None:
    """A kb_id argument is left out (None) or names a KB: "" would quietly mean `default`."""
    check_text(kb_id, "kb_id", limits.MAX_KB_ID_CHARS)
    if kb_id is not None and not kb_id.strip():
        raise UserError("kb_id is empty; leave it out to use the only knowledge base, or pass "
                        "an id from list_knowledge_bases")


def vector_problem(entry: OpenKB) -> str | None:
    """Why the vector leg cannot serve the chunks SQLite says are embedded, or None; a store
    that is missing altogether is dropped from `entry` (its searches use BM25).

    Seen in the field: a `chroma/` folder deleted by a cleanup tool. Without this check the
    server made a new empty store, vector search found nothing and the status said ready.
    A store of another shape (another model's identity, vectors of another length) is
    dropped too: every query of it would fail, so `auto` answers from BM25 at once.
    """
    if entry.store is None:
        return None
    # chunks not pending (embedded or failed): from FTS5's totals and the pending index, so
    # the usual case needs no scan of a million chunk rows
    conn = entry.searches.conn
    settled = fulltext.fts_totals(conn)[0] - states.count_pending(conn)
    if settled <= 0:
        return None
    try:
        entry.store.check_shape()
        held = entry.store.count()
    except (chroma_store.StoreMissing, EmbedderMismatch) as err:
        entry.store.close()
        entry.store = None
        return str(err)
    except Exception as err:  # an unreachable Chroma server, a broken store
        return f"{type(err).__name__}: {str(err)[:300]}"
    if held >= settled:
        return None
    embedded = fulltext.embedded_count(conn)  # the exact count, only when short
    if held >= embedded:
        return None
    return chroma_store.missing_message(
        entry.kb.id, entry.kb.chroma_url or entry.kb.folder / "chroma",
        f"holds {held:,} vectors but {embedded:,} chunks were embedded")


def store_for(kb: kbmod.KnowledgeBase, generation: int = 0):
    """The KB's vector store, read-only, under chromadb client `generation` (0 or 1)."""
    return chroma_store.open_store(kb.folder, kb.id, kb.embedding, kb.chroma_url, readonly=True,
                                   generation=generation)

