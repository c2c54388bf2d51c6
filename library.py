"""The read side of every knowledge base under the base folder: what server.py's tools call.

Each KB is opened on first use: `fulltext.sqlite3` read-only (the server never migrates or
writes it) and, for vector search, its Chroma collection. Functions here return plain dicts
and raise UserError with a message that names the fix; server.py turns that into a ToolError.
`ingest_file` is the one writer: it runs the indexer (ingest.py) on a file inside a folder the
KB allows.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from dataclasses import dataclass, field
from pathlib import Path

import fulltext
import kb as kbmod
from pidlock import LockBusy

ALLOWED_DIRS_ENV = "LINECITE_ALLOWED_DIRS"  # extra folders ingest_file may read (os.pathsep list)
MAX_CONTEXT = 50  # read_range's context lines each side


class UserError(ValueError):
    """A bad argument or state the agent can fix; the message says how."""


@dataclass
class OpenKB:
    kb: kbmod.KnowledgeBase
    conn: sqlite3.Connection
    store: object | None = None  # chroma_store.ChromaStore, opened on first vector search
    searcher: object | None = None
    data_version: int = -1  # SQLite's PRAGMA data_version when the store was last checked
    lock: threading.Lock = field(default_factory=threading.Lock)  # one search at a time


class Library:
    """Every KB under one base folder, opened lazily and shared by all tool calls."""

    def __init__(self, base: Path):
        self.base = base
        self._open: dict[str, OpenKB] = {}
        self._lock = threading.Lock()

    def close(self) -> None:
        for entry in self._open.values():
            entry.conn.close()
            if entry.store is not None:
                entry.store.close()
        self._open.clear()

    # -- choosing a KB --------------------------------------------------------------
    def kb_ids(self) -> list[str]:
        return kbmod.list_ids(self.base)

    def resolve(self, kb_id: str | None) -> str:
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
            raise UserError(f"unknown kb_id {kb_id!r}; known knowledge bases: {', '.join(known)} "
                            "(see list_knowledge_bases)")
        return kb_id

    def get(self, kb_id: str | None) -> OpenKB:
        kb_id = self.resolve(kb_id)
        with self._lock:
            entry = self._open.get(kb_id)
            if entry is None:
                kb = kbmod.load(self.base, kb_id)
                if not kb.fulltext_path.exists():
                    raise UserError(f"knowledge base {kb_id!r} has nothing indexed yet; index "
                                    f"files with `python ingest.py FILE --kb {kb_id}`")
                try:
                    conn = fulltext.connect(kb.fulltext_path, readonly=True)
                except fulltext.SchemaError as err:
                    raise UserError(str(err)) from None
                entry = self._open[kb_id] = OpenKB(kb, conn)
            return entry

    def _searcher(self, entry: OpenKB):
        """The KB's Searcher (call with entry.lock held), its Chroma client reopened when
        another connection has written the KB since the last search.

        An embedded Chroma client keeps its vector index in memory and never sees vectors that
        another process adds, so without this the vector leg would miss every file that
        `python ingest.py` indexed after the server started. PRAGMA data_version changes when
        any other connection commits; reopening is cheap next to a document never found.
        """
        import search

        version = entry.conn.execute("PRAGMA data_version").fetchone()[0]
        if entry.searcher is None:
            entry.store = _store_for(entry.kb)
            entry.searcher = search.Searcher(entry.conn, entry.store)
        elif version != entry.data_version and entry.store is not None:
            entry.store.close()  # the next vector query reopens it and reads the index anew
        entry.data_version = version
        return entry.searcher

    # -- tools ---------------------------------------------------------------------
    def list_knowledge_bases(self) -> list[dict]:
        """Every KB; one with a broken config.json is listed with its error, not fatal to all."""
        out = []
        for kb_id in self.kb_ids():
            try:
                kb = kbmod.load(self.base, kb_id)
                counts = fulltext.counts(self.get(kb_id).conn) if kb.fulltext_path.exists() \
                    else {}
            except (kbmod.ConfigError, UserError) as err:
                out.append({"id": kb_id, "status": "error", "error": str(err)})
                continue
            out.append({"id": kb.id, "name": kb.name, "counts": counts,
                        "status": _status(counts),
                        "embedder": (kb.embedding or {}).get("provider", "builtin")})
        return out

    def search(self, query: str, top_k: int, mode: str, kb_id: str | None,
               source: str | None) -> dict:
        if not query.strip():
            raise UserError("query is empty; pass the words, name or number to look for")
        kb = self.resolve(kb_id)
        if source is not None:
            self._check_source(kb, source)
        entry = self.get(kb)
        with entry.lock:  # a store is never closed under a running query
            searcher = self._searcher(entry)
            if mode == "vector" and entry.store is None:
                raise UserError(f"knowledge base {kb!r} has no embedder (embedding provider "
                                "'none'); use search_mode 'bm25', 'exact' or 'auto'")
            hits = searcher.search(query, top_k, mode, source)
        return {"kb_id": kb, "query": query, "search_mode": mode,
                "hits": [h.to_json() for h in hits]}

    def read_range(self, source: str, page: int, line_start: int, line_end: int, context: int,
                   kb_id: str | None) -> dict:
        entry = self.get(self._kb_of_source(source, kb_id))
        pages = fulltext.page_count(entry.conn, source)
        if not pages or not 1 <= page <= pages:
            raise UserError(f"page {page} is out of range: {source!r} has pages 1-{pages}")
        total = len(fulltext.page_lines(entry.conn, source, page))
        end = total if line_end == -1 or line_end > total else line_end
        if line_start > total or end < line_start:
            asked = f"{line_start}-{'end' if line_end == -1 else line_end}"
            raise UserError(f"lines {asked} are out of range: page {page} of {source!r} has "
                            f"lines 1-{total}")
        first, last = max(1, line_start - context), min(total, end + context)
        lines = fulltext.page_lines(entry.conn, source, page, first, last)
        return {"kb_id": entry.kb.id, "source": source, "page": page, "line_start": first,
                "line_end": last, "page_lines": total,
                "lines": [{"line": n, "text": text} for n, text in lines],
                "citation": f"{source}, page {page}, lines {first}-{last}"}

    def get_document_chunk(self, chunk_id: str, kb_id: str | None) -> dict:
        entry = self.get(kb_id)
        row = fulltext.chunks_by_id(entry.conn, [chunk_id]).get(chunk_id)
        if row is None:
            raise UserError(f"no chunk {chunk_id!r} in {entry.kb.id!r}; chunk ids come from "
                            "search hits (line: ids from exact search are not chunks: use "
                            "read_range)")
        before, after = fulltext.neighbour_chunk_ids(entry.conn, row["id"])
        return {"kb_id": entry.kb.id, "chunk_id": chunk_id, "source": row["source"],
                "page": row["page"], "line_start": row["line_start"],
                "line_end": row["line_end"], "text": row["text"],
                "embed_state": row["embed_state"], "previous_chunk_id": before,
                "next_chunk_id": after}

    def list_sources(self, kb_id: str | None) -> dict:
        entry = self.get(kb_id)
        return {"kb_id": entry.kb.id, "sources": fulltext.list_sources(entry.conn)}

    def ingest_file(self, path: str, source_name: str | None, kb_id: str | None,
                    report=None) -> dict:
        """Index one file. A refused call changes nothing on disk: an agent's typo in kb_id
        must not leave a new KB behind (with two KBs, every call without kb_id would fail)."""
        import ingest

        known = self.kb_ids()
        if known and kb_id is not None and kb_id not in known:
            raise UserError(f"unknown kb_id {kb_id!r}; known knowledge bases: "
                            f"{', '.join(known)}. A new knowledge base is created by indexing "
                            f"into it: `python ingest.py FILE --kb {kb_id}`")
        if known:
            kb = kbmod.load(self.base, self.resolve(kb_id))
        else:  # the first file of an empty base creates its KB, as `python ingest.py` does
            new_id = kbmod.check_kb_id(kb_id or kbmod.DEFAULT_KB)
            kb = kbmod.KnowledgeBase(new_id, self.base / new_id, name=new_id)
        target = allowed_path(path, kb)
        kb = kbmod.open_or_create(self.base, kb.id)
        try:
            summary = ingest.ingest(kb, [target], source_name or None, report=report)
        except (LockBusy, ingest.EmbedderUnavailable) as err:  # the agent can wait and retry
            raise UserError(str(err)) from None
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
        import segment

        kb_id = self.resolve(kb_id)
        folder = self.base / kb_id
        status = queue_runner.read_status(folder)
        position = queue_runner.position(queue_runner.entries(self.base), kb_id)
        state = status.get("status", "idle")
        if state == "running" and queue_runner.orchestrator(self.base) is None:
            state = "interrupted"  # the orchestrator died; the next start resumes this KB
        elif state != "running" and position is not None:
            state = "queued"
        info = {"kb_id": kb_id, "status": state, "progress": status.get("progress"),
                "queue_position": position, "last_run": status.get("last_run")}
        if (folder / fulltext.FILENAME).exists():
            conn = self.get(kb_id).conn
            sources = fulltext.list_sources(conn)
            info["counts"] = fulltext.counts(conn)
            info["sources_by_state"] = fulltext.state_counts(conn)
            info["problem_files"] = [
                {k: s[k] for k in ("name", "state", "error")} for s in sources
                if s["state"] in ("failed", "needs_action", "degraded")]
            made_by = fulltext.get_meta(conn, fulltext.SEGMENTER_KEY)
            if info["counts"]["chunks"] and made_by != segment.signature():
                info["warnings"] = [
                    "this index's BM25 tokens come from another version of the segmenters "
                    "(Kiwi, jieba), so keyword search can miss words; start_reindex(kb_id) "
                    "re-tokenizes it without extracting or embedding again"]
        return info

    def check_changes(self, kb_id: str | None) -> dict:
        import ingest

        kb_id = self.resolve(kb_id)
        kb = kbmod.load(self.base, kb_id)
        if not kb.source_paths:
            raise UserError(f"knowledge base {kb_id!r} has no folders to watch; add them to "
                            f"'sourcePaths' in {kb.folder / 'config.json'}")
        indexed = kb.fulltext_path.exists()
        conn = self.get(kb_id).conn if indexed else fulltext.connect(Path(":memory:"))
        try:
            plan = ingest.plan_sync(conn, kb)
        finally:
            if not indexed:
                conn.close()
        return {"kb_id": kb_id, **plan.to_json(),
                "next": "start_reindex(kb_id) applies these changes"}

    # -- helpers -------------------------------------------------------------------
    def _check_source(self, kb_id: str, source: str) -> None:
        if fulltext.source_row(self.get(kb_id).conn, source) is None:
            raise UserError(f"unknown source {source!r} in {kb_id!r}; call list_sources to see "
                            "the indexed sources and their exact names")

    def _kb_of_source(self, source: str, kb_id: str | None) -> str:
        if kb_id is not None or len(self.kb_ids()) <= 1:
            kb_id = self.resolve(kb_id)
            self._check_source(kb_id, source)
            return kb_id
        holders = []
        for k in self.kb_ids():
            try:
                if fulltext.source_row(self.get(k).conn, source) is not None:
                    holders.append(k)
            except (kbmod.ConfigError, UserError):
                continue  # a KB that is empty or broken holds no source
        if not holders:
            raise UserError(f"unknown source {source!r} in any knowledge base; call "
                            "list_sources with a kb_id to see the indexed sources and their "
                            "exact names")
        if len(holders) > 1:
            raise UserError(f"source {source!r} is in several knowledge bases "
                            f"({', '.join(holders)}); pass kb_id")
        return holders[0]


def _status(counts: dict) -> str:
    if not counts.get("sources"):
        return "empty"
    return "indexing" if counts.get("pending") else "ready"


def _store_for(kb: kbmod.KnowledgeBase):
    import chroma_store

    return chroma_store.open_store(kb.folder, kb.id, kb.embedding, kb.chroma_url)


def allowed_folders(kb: kbmod.KnowledgeBase) -> list[Path]:
    """The KB's sourcePaths plus the folders named in LINECITE_ALLOWED_DIRS, resolved."""
    extra = [p for p in os.environ.get(ALLOWED_DIRS_ENV, "").split(os.pathsep) if p.strip()]
    return [Path(p).expanduser().resolve() for p in [*kb.source_paths, *extra]]


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
    if not resolved.is_file():
        raise UserError(f"{path!r} is not a file; give the full path of one document")
    return resolved
