"""The Indexer: the files of one KB extracted, chunked, committed and embedded, under the
KB's writer lock; and what a run reports (Summary, the exit statuses, EmbedderUnavailable).

A file -> extract (extract.py) -> chunk (chunking.py, codechunks.py) -> one SQLite transaction
with the source's lines and chunks (fulltext.py) -> embed pending chunks -> Chroma
(chroma_store.py) -> mark them indexed. SQLite is the record and Chroma follows it: `reconcile`
finishes whatever a crash left. Progress goes to stderr (tqdm) and to the caller's `report`.

Layer: pipeline: opened by pipeline/runs.py for ingest.py's entry points (and by the benches).
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import chroma_store
import chunking
import codechunks
import contextualize
import extract
import fulltext
import kb as kbmod
from common import limits, paths, run_status, safeopen
from common.commands import command
from common.pidlock import PidLock
from formats import audio, base
from index import segment, states
from sources import folders

# ---------------------------------------------------------------------------
EMBED_BATCH = 32  # chunks per embedder call (and per progress step)
UPSERT_BATCH = 512  # most chunks per Chroma upsert: it wrote 467 chunks/s at 32, 633 at 1,000
UPSERT_SECONDS = 5.0  # ... but a batch grows only while it embeds faster than this
PAUSE_ENV = "LINECITE_PAUSE_AT"  # tests: stop at a named stage so they can kill -9 there
RETOKENIZE_BATCH = 500  # chunks per segmenter call when an index is re-tokenized
MAX_FILE_ENV = "LINECITE_MAX_FILE_MB"  # raises the limit below
MAX_FILE_MB = 512  # bigger files are refused before they are hashed or read: see below
EXIT_OK = 0  # every file this run looked at is indexed or unchanged (skipped ones aside)
EXIT_SOME_FILES = 1  # the run finished, but some files failed or need action (see summary)
EXIT_NOT_RUN = 2  # the run was refused or stopped: bad arguments, a busy or damaged KB
# ---------------------------------------------------------------------------
# MAX_FILE_MB: above the largest real documents (scanned books and big PDFs run to a few
# hundred MB); a bigger file is more likely a disk image, a video or a database dump, and
# hashing and parsing it would hold the KB's writer lock for minutes and take gigabytes.


@dataclass
class Summary:
    """What one run did; printed as JSON. The same meaning for a FILE, a FOLDER and a --kb
    sync (a folder run once counted every file in `sources`, a sync only those it read; issue
    30): `sources` counts every source the run looked at, attachments included, and each ends
    in exactly one of `indexed`, `unchanged`, `empty` (it holds no text: no failure), `failed`
    (unreadable) and `needs_action` (the user can fix it: the reason says how). `skipped`
    files are not sources; `deleted` counts sources dropped. `exit_code` turns this into
    ingest.py's exit status."""

    kb: str
    sources: int = 0
    indexed: int = 0
    unchanged: int = 0
    pages: int = 0
    lines: int = 0
    chunks: int = 0
    embedded: int = 0
    deleted: int = 0
    warnings: list[dict] = field(default_factory=list)
    cancelled: bool = False
    skipped: list[dict] = field(default_factory=list)
    failed: list[dict] = field(default_factory=list)
    needs_action: list[dict] = field(default_factory=list)
    empty: list[dict] = field(default_factory=list)
    fulltext: dict = field(default_factory=dict)
    following: str | None = None  # a folder this run added to the KB's sourcePaths

    def counts(self) -> dict[str, int]:
        """The summary's numbers, lists counted (as index-status.json's last_run keeps them)."""
        return {"sources": self.sources, "indexed": self.indexed, "unchanged": self.unchanged,
                "failed": len(self.failed), "needs_action": len(self.needs_action),
                "empty": len(self.empty), "deleted": self.deleted, "embedded": self.embedded,
                "chunks": self.chunks, "pages": self.pages}

    def exit_code(self) -> int:
        """EXIT_OK when every source is indexed, unchanged or empty, else EXIT_SOME_FILES (a
        `needs_action` file exited 0, as if nothing were left to do)."""
        return EXIT_SOME_FILES if self.failed or self.needs_action else EXIT_OK


class EmbedderUnavailable(RuntimeError):
    """The embedder or Chroma fails even on a trivial input: stop, keep chunks pending."""


def _pause_point(stage: str) -> None:
    """Let a crash test kill -9 the process at a known stage (no effect unless asked)."""
    if os.environ.get(PAUSE_ENV) == stage:
        print(f"linecite: paused at {stage}", file=sys.stderr, flush=True)
        time.sleep(3600)


def _embedded_texts(rows: list) -> list[str]:
    """What a chunk's vector is made of: its context (when contextualized), then its text."""
    return [f"{r['context']}\n{r['text']}" if r["context"] else r["text"] for r in rows]


def _metadatas(rows: list) -> list[dict]:
    """Where each chunk is, for Chroma's `where` filters; its text stays in SQLite only."""
    return [{"source": r["source"], "page": r["page"], "line_start": r["line_start"],
             "line_end": r["line_end"]} for r in rows]


def _progress(iterable, total: int, desc: str, enabled: bool):
    # tqdm here, not at the top (126 modules, 45 ms): importing this module only for Summary
    # or an error class (queue_runner.py, library.py) does not load it
    from tqdm import tqdm

    return tqdm(iterable, total=total, desc=desc, unit="file" if desc == "files" else "chunk",
                file=sys.stderr, disable=not enabled, dynamic_ncols=True)


def writer_lock(kb: kbmod.KnowledgeBase, job: str) -> PidLock:
    """The KB's writer lock: one process writes a KB at a time."""
    return PidLock(kb.folder / run_status.WRITER_LOCK, f"{job} of KB {kb.id!r}")


class Indexer:
    """Indexes files into one KB; holds the KB's writer lock for its lifetime and releases it
    on close (`lock`: one the caller may already hold, so no other writer gets in between)."""

    def __init__(self, kb: kbmod.KnowledgeBase, progress: bool = False,
                 report: Callable[..., None] | None = None, lock: PidLock | None = None):
        self.max_file_bytes = max_file_bytes()
        self.contexts = contextualize.Step(kb.contextualizer, segment.chunk_tokens)
        audio.configure(kb.audio)  # the KB's `audio` block, for the recordings of this run
        self.kb = kb
        self.progress = progress
        self.report = report
        self.lock = lock or writer_lock(kb, "indexing")
        if not self.lock.held:
            self.lock.acquire()
        try:
            self.conn = fulltext.connect(kb.fulltext_path)
        except BaseException:
            self.lock.release()
            raise
        try:
            self.store = chroma_store.open_store(kb.folder, kb.id, kb.embedding, kb.chroma_url)
        except BaseException:  # else the lock stayed held by this (live) process
            self.conn.close()
            self.lock.release()
            raise

    def close(self) -> None:
        try:
            fulltext.write_queued(self.conn)
        except sqlite3.Error as err:  # nothing is lost: queued chunks are scored from tokens
            print(f"linecite: the last chunks' BM25 postings wait for the next run ({err})",
                  file=sys.stderr)
        finally:
            self.conn.close()
            if self.store is not None:
                self.store.close()
            self.lock.release()

    # -- the storage protocol ------------------------------------------------
    def retokenize(self) -> int:
        """Re-segment every chunk when the index's tokens came from another segmenter (an
        upgraded kiwipiepy or jieba, changed rules); returns chunks re-tokenized. Lines,
        chunks and vectors stay: only the BM25 tokens change, written in one transaction."""
        current = segment.signature()
        if fulltext.get_meta(self.conn, fulltext.SEGMENTER_KEY) == current:
            return 0
        total = fulltext.counts(self.conn)["chunks"]
        tokens: dict[int, str] = {}
        last = 0  # rowid of the last chunk read
        with _progress(None, total, "re-tokenizing", self.progress and total > 0) as bar:
            while rows := fulltext.searchable_chunks(self.conn, last, RETOKENIZE_BATCH):
                last = rows[-1]["id"]
                texts = [chunking.bm25_text(r["source"], r["context"], r["text"]) for r in rows]
                parsers = [r["parser"] for r in rows]  # code keeps its words, prose is stemmed
                for row, toks in zip(rows, segment.chunk_tokens_many(texts, parsers), strict=True):
                    tokens[row["id"]] = " ".join(toks)
                bar.update(len(rows))
        if tokens:
            fulltext.replace_tokens(self.conn, tokens)
        fulltext.set_meta(self.conn, fulltext.SEGMENTER_KEY, current)
        return len(tokens)

    def reconcile(self) -> int:
        """Make Chroma match SQLite after whatever a crash left; returns chunks embedded."""
        self._forget(states.tombstones(self.conn))
        if self.store is None:
            return self.embed_pending()
        in_chroma = self.store.all_ids()
        self._forget(sorted(in_chroma - states.all_chunk_ids(self.conn)))
        lost = states.indexed_chunk_ids(self.conn) - in_chroma
        states.set_embed_state(self.conn, lost, states.EMBED_PENDING)
        return self.embed_pending()

    def _forget(self, chunk_ids: list[str]) -> None:
        if chunk_ids and self.store is not None:
            self.store.delete(chunk_ids)
        states.clear_tombstones(self.conn, chunk_ids)

    def embed_pending(self) -> int:
        """Embed every pending chunk, in batches that grow while the embedder is quick."""
        self.contexts.run(self.conn)  # contexts first: a chunk is embedded once, with its own
        if self.store is None:  # a BM25-only KB: nothing to embed, chunks are complete
            states.set_pending_indexed(self.conn)
            states.promote_sources(self.conn)
            return 0
        total = states.count_pending(self.conn)
        done = seen = 0
        with _progress(None, total, "embedding", self.progress and total > 0) as bar:

            def step(n: int) -> None:
                nonlocal seen
                seen += n
                bar.update(n)
                if self.report:
                    self.report(seen, total, "embedding chunks")

            size = EMBED_BATCH  # doubles while batches are quick: a crash loses little work
            while rows := states.pending_chunks(self.conn, size):
                started = time.monotonic()
                done += self._embed_batch(rows, step)
                _pause_point("mid-embedding")
                quick = time.monotonic() - started < UPSERT_SECONDS
                size = min(UPSERT_BATCH, size * 2) if quick else max(EMBED_BATCH, size // 2)
        states.promote_sources(self.conn)
        self._forget(states.tombstones(self.conn))
        return done

    def _embed_batch(self, rows: list, step: Callable[[int], None] | None = None) -> int:
        """Embed rows a part at a time (a progress step each), then upsert them in one Chroma
        call. Each chunk is embedded once in a run: a part that fails loses no other part's
        vectors, and a failed upsert reuses the vectors it was given (see _isolating)."""
        vectors: dict[str, list[float]] = {}  # chunk id -> its vector, kept once made

        def embed(part: list) -> None:
            made = self.store.embed(_embedded_texts(part))
            vectors.update(zip([r["chunk_id"] for r in part], made, strict=True))

        def upsert(part: list) -> None:
            ids = [r["chunk_id"] for r in part]
            self.store.upsert(ids, [vectors[i] for i in ids], _metadatas(part))

        # a part is at most one embedder request, so a request that fails takes no vectors of
        # the requests before it down with it (embed_documents splits at its batchSize)
        size = min(EMBED_BATCH, self.store.embedder.batch_size)
        embedded: list = []
        for start in range(0, len(rows), size):
            part = rows[start:start + size]
            embedded += self._isolating(part, embed)
            if step:
                step(len(part))
        indexed = self._isolating(embedded, upsert) if embedded else []
        _pause_point("mid-upsert")
        states.set_embed_state(self.conn, [r["chunk_id"] for r in indexed], states.EMBED_INDEXED)
        return len(indexed)

    def _isolating(self, rows: list, attempt: Callable[[list], None],
                   probed: bool = False) -> list:
        """The rows `attempt` (embed or upsert) succeeded for. When it fails, one probe first
        tells a dead backend (the run stops, chunks stay pending) from a bad chunk; then the
        rows are halved until each bad chunk is alone and marked failed. A failing half is
        not probed again, a lone chunk is before it is marked (the backend may have died
        meanwhile): a dead backend costs two calls, not one per halving."""
        try:
            attempt(rows)
            return rows
        except Exception as err:  # the embedder and Chroma can fail in any way; isolate it
            if len(rows) == 1 or not probed:
                self._check_backend(err)
            if len(rows) == 1:
                states.set_embed_state(self.conn, [rows[0]["chunk_id"]], states.EMBED_FAILED,
                                       f"{type(err).__name__}: {err}"[:300])
                return []
        half = len(rows) // 2
        return (self._isolating(rows[:half], attempt, probed=True)
                + self._isolating(rows[half:], attempt, probed=True))

    def _check_backend(self, err: Exception) -> None:
        """Tell a bad chunk from a dead backend: if a trivial text fails too, stop the run."""
        try:
            self.store.embed(["linecite"])
            self.store.count()
        except Exception as probe_err:
            raise EmbedderUnavailable(
                f"the embedder or Chroma is not working ({type(probe_err).__name__}: "
                f"{str(probe_err)[:300]}); pending chunks are kept and the next run embeds "
                "them") from err

    # -- one file ---------------------------------------------------------------
    def index_file(self, path: Path, name: str, summary: Summary, force: bool = False,
                   inside: list[Path] | None = None) -> None:
        """Extract, chunk and commit one file (and a mail's attachments); unchanged files (by
        SHA-256) are skipped. The file is opened once (safeopen): only a regular file, inside
        `inside` when given, and what is hashed and extracted is what that open checked."""
        summary.sources += 1
        try:
            with safeopen.open_document(path, inside) as opened:
                self._index_opened(opened, path, name, summary, force)
        except OSError as err:  # refused, or gone, locked or unreadable since it was found
            why = ((err.reason, err.detail) if isinstance(err, safeopen.Refused)
                   else _unreadable(path, err))
            self._fail(fulltext.SourceFile(name, limits.path_text(path.absolute()), "", 0, 0.0),
                       *why, summary)

    def _index_opened(self, opened: safeopen.Opened, path: Path, name: str, summary: Summary,
                      force: bool) -> None:
        stat = opened.stat
        row = fulltext.source_row(self.conn, name)
        known = not force and row is not None and row["state"] not in folders.RETRY_STATES
        if known and folders.same_stat(row, stat):
            summary.unchanged += 1
            return
        src = fulltext.SourceFile(name, limits.path_text(opened.real), "", stat.st_size,
                                  stat.st_mtime)
        if stat.st_size > self.max_file_bytes:  # checked before the file is hashed or read
            self._fail(src, "too-large", _too_large(path, stat.st_size, self.max_file_bytes),
                       summary)
            return
        try:
            src = replace(src, sha256=safeopen.sha256(opened, self.max_file_bytes))
            if known and row["sha256"] == src.sha256:
                fulltext.touch_source(self.conn, name, src.size, src.mtime)
                summary.unchanged += 1
                return
            with tempfile.TemporaryDirectory(prefix="linecite-doc-",
                                             ignore_cleanup_errors=True) as tmp:
                copy = safeopen.snapshot(opened, Path(tmp), path.name, self.max_file_bytes)
                doc = self._extract(copy, src, summary)
        except safeopen.OverLimit:  # it grew past the bound since stat, or stat said less
            self._fail(src, "too-large", _too_large(path, None, self.max_file_bytes), summary)
            return
        if doc is None:
            return
        if doc.attachments or fulltext.attachment_names(self.conn, name):
            self._index_attachments(src, doc.attachments, summary, force)
        self._commit(src, path, doc, summary)  # the mail last: a crash before it re-reads it
        _pause_point("after-commit")

    def index_fetched(self, file: Path, src: fulltext.SourceFile, summary: Summary,
                      force: bool = False) -> bool:
        """Index a downloaded page or object (url_fetch, s3_source) as source `src.name`:
        `file` is a private copy already within the size bound, `src.sha256` its SHA-256, so
        the same bytes as indexed are unchanged (the row gets the new size and date). Returns
        whether the source now holds these bytes: only then may their ETag be saved, or the
        next sync's conditional request calls a failed fetch unchanged for ever (issue 45)."""
        summary.sources += 1
        row = fulltext.source_row(self.conn, src.name)
        if (not force and row is not None and row["state"] not in folders.RETRY_STATES
                and row["sha256"] == src.sha256):
            fulltext.touch_source(self.conn, src.name, src.size, src.mtime)
            summary.unchanged += 1
            return True
        doc = self._extract(file, src, summary)
        if doc is None:
            return False
        if doc.attachments or fulltext.attachment_names(self.conn, src.name):
            self._index_attachments(src, doc.attachments, summary, force)
        self._commit(src, file, doc, summary)
        return fulltext.source_row(self.conn, src.name)["state"] in (
            states.SOURCE_READY, states.SOURCE_PENDING, states.SOURCE_EMPTY)

    def _extract(self, path: Path, src: fulltext.SourceFile, summary: Summary):
        """The file's pages, or None once its failure is recorded."""
        try:
            return extract.extract(path, self.kb.text_extensions)
        except extract.ExtractError as err:
            self._fail(src, err.reason, err.detail, summary)
        except Exception as err:  # a parser bug on a hostile file must not stop the run
            self._fail(src, "parser-error", f"{type(err).__name__}: {str(err)[:300]}; the file "
                       "may be damaged: re-save it, and report it if it opens elsewhere", summary)
        return None

    def _commit(self, src: fulltext.SourceFile, path: Path, doc, summary: Summary) -> None:
        """Chunk the pages and replace the source's lines and chunks in one transaction."""
        lines = sum(len(page) for page in doc.pages)
        no_speech = any(w.startswith("no speech:") for w in doc.warnings)  # a silent recording
        if not lines and not no_speech:  # nothing any search could find: never `ready`
            self._fail(src, *_no_text(path, doc), summary)
            return
        if doc.language:  # source code: chunks on its syntax tree, no noise lines
            chunks = codechunks.chunk_code(src.name, doc, segment.tokens)
        else:
            noise = chunking.noise_lines(doc.pages)
            chunks = chunking.chunk_pages(src.name, doc.pages, noise, segment.prose_tokens,
                                          doc.layout)
        warnings = [limits.path_text(w) for w in doc.warnings]  # they may name the file
        warnings += [] if chunks or no_speech else [_no_chunks_warning(lines)]
        fulltext.replace_source(self.conn, src, doc.parser, doc.pages, chunks, warnings)
        summary.warnings += [{"source": src.name, "warning": w} for w in warnings]
        summary.indexed += 1
        summary.pages += len(doc.pages)
        summary.lines += lines
        summary.chunks += len(chunks)

    # -- a mail's attachments ---------------------------------------------------
    def _index_attachments(self, mail: fulltext.SourceFile, attachments: list,
                           summary: Summary, force: bool) -> None:
        """Each attachment as a source of its own, `<mail>/<name>`, recording the mail's file
        (that is how folders.plan_sync and fulltext.attachment_names tell it from a file);
        those the mail's previous version had and this one lacks are deleted. Runs before the
        mail's own commit, so a crash between leaves the mail to be read again, not children
        missing behind an unchanged mail."""
        names = {_attachment_name(mail, item) for item in attachments}
        for old in fulltext.attachment_names(self.conn, mail.name):
            if old not in names:
                fulltext.delete_source(self.conn, old)
                summary.deleted += 1
        with tempfile.TemporaryDirectory(prefix="linecite-mail-",
                                         ignore_cleanup_errors=True) as tmp:
            for number, item in enumerate(attachments):
                name = _attachment_name(mail, item)
                digest = hashlib.sha256(item.data if item.pages is None else
                                        "\f".join(map("\n".join, item.pages)).encode()
                                        ).hexdigest()
                src = fulltext.SourceFile(name, mail.path, digest, item.size, mail.mtime)
                summary.sources += 1
                row = fulltext.source_row(self.conn, name)
                if (not force and row is not None and row["sha256"] == digest
                        and row["state"] not in folders.RETRY_STATES):
                    summary.unchanged += 1
                    continue
                if item.pages is not None:  # an embedded Outlook message, read with its mail
                    doc = extract.Extracted(item.pages, "olefile:msg")
                    file = Path(item.name)
                else:
                    file = Path(tmp, str(number), item.name)
                    file.parent.mkdir()
                    file.write_bytes(item.data)
                    doc = self._extract(file, src, summary)
                if doc is not None:
                    self._commit(src, file, doc, summary)

    def _fail(self, src: fulltext.SourceFile, reason: str, detail: str, summary: Summary) -> None:
        detail = limits.path_text(detail)  # it may name the file
        state = fulltext.record_failure(self.conn, src, reason, detail)
        listed = (summary.empty if state == states.SOURCE_EMPTY else summary.needs_action
                  if reason in fulltext.NEEDS_ACTION else summary.failed)
        listed.append({"source": src.name, "path": src.path, "reason": reason,
                       "detail": detail, "state": state})


    def index_all(self, files: list[tuple[Path, str]], summary: Summary, force: bool,
                  should_stop: Callable[[], bool] | None = None,
                  inside: list[Path] | None = None) -> None:
        """Index files one by one, embedding after each; stop cleanly between files if asked.
        A recording's transcription and a scan's OCR also report their percentage, on the bar
        and to `report` (`transcribing meeting.m4a 42%`, with `part` for the status record:
        `{"name", "stage": "OCR", "detail": "page 3 of 12", "percent": 25}`), so a 20-minute
        file is seen to move. `report` is RunStatus.reporter's: (done, total, message, part)."""
        bar = _progress(files, len(files), "files", self.progress)
        for done, (path, name) in enumerate(bar):
            short = name if len(name) <= 40 else "..." + name[-37:]
            bar.set_postfix_str(short, refresh=False)
            if should_stop and should_stop():
                summary.cancelled = True
                break
            if self.report:
                self.report(done, len(files), f"indexing {name}")
            with base.reporting(self._partway(bar, short, done, len(files), name)):
                self.index_file(path, name, summary, force=force, inside=inside)
            summary.embedded += self.embed_pending()
        if self.report:
            self.report(len(files), len(files), "cancelled" if summary.cancelled else "done")

    def index_downloads(self, downloads: list, summary: Summary, force: bool,
                        should_stop: Callable[[], bool] | None = None) -> None:
        """Fetch and index remote sources one by one (url_fetch.Refetch, s3_source.Download:
        each `fetch(folder, limit)` gives (file, mtime, after) with `after(conn)` recording
        its validators, once it is indexed). One that cannot be fetched is reported and its
        source kept."""
        for done, item in enumerate(downloads):
            if should_stop and should_stop():
                summary.cancelled = True
                break
            if self.report:
                self.report(done, len(downloads), f"fetching {item.name}")
            with tempfile.TemporaryDirectory(prefix="linecite-get-",
                                             ignore_cleanup_errors=True) as tmp:
                try:
                    file, mtime, after = item.fetch(Path(tmp), self.max_file_bytes)
                except limits.UserError as err:
                    summary.skipped.append({"name": item.name, "reason": getattr(
                        err, "reason", "unreachable"), "detail": f"{err}; its indexed copy "
                        "(if any) is kept"})
                    continue
                src = fulltext.SourceFile(item.name, item.name, paths.file_sha256(file),
                                          file.stat().st_size, mtime)
                if self.index_fetched(file, src, summary, force):
                    after(self.conn)
            summary.embedded += self.embed_pending()
        if self.report and downloads:
            self.report(len(downloads), len(downloads), "done")

    def _partway(self, bar, short: str, done: int, total: int, name: str):
        """The `(share, stage[, detail])` callable for the file in hand: its bar postfix and
        report."""

        def tell(share: float, stage: str, detail: str = "") -> None:
            bar.set_postfix_str(f"{short} {share:.0%}")
            if self.report:
                part = {"name": name, "stage": stage, "detail": detail,
                        "percent": round(100 * share)}
                self.report(done, total, f"{stage} {name} {share:.0%}", part)

        return tell

    def reset_embeddings(self) -> None:
        """Forget every vector (a new embedder, or a forced re-embed): all chunks to pending."""
        if self.store is not None:
            self.store.reset()
        states.set_all_pending(self.conn)


def _attachment_name(mail: fulltext.SourceFile, item) -> str:
    """`<mail's name>/<attachment's file name>`: a header's name can hold any character."""
    return f"{mail.name}/{limits.source_name(item.name)}"


def _unreadable(path: Path, err: OSError) -> tuple[str, str]:
    """(reason, detail) for a file that vanished or could not be opened mid-run."""
    if isinstance(err, FileNotFoundError):
        return "not-found", f"{path} is gone ({err.strerror or err}); it was moved or deleted"
    return "unreadable", (f"cannot read {path} ({err.strerror or err}); close the program "
                          "holding it or fix its permissions, and run again")


def max_file_bytes() -> int:
    """LINECITE_MAX_FILE_MB in bytes. LINECITE_MAX_TEXT_CHARS is checked too, so a typo in
    either stops the run before any file is read, not halfway through."""
    try:
        base.env_number(base.MAX_TEXT_ENV, base.MAX_TEXT_CHARS)
        return int(base.env_number(MAX_FILE_ENV, MAX_FILE_MB) * 2**20)
    except ValueError as err:
        raise kbmod.ConfigError(str(err)) from err


def _too_large(path: Path, size: int | None, limit: int) -> str:
    """Why a file over the limit was not read; `size` None when it only showed in reading."""
    size_text = "more" if size is None else f"{size / 2**20:.3g} MB"
    return (f"{path.name} is {size_text}, over the limit of {limit / 2**20:.3g} MB "
            f"per file, so it was not read; to index it, raise the limit with the environment "
            f"variable {MAX_FILE_ENV}.")


def _no_text(path: Path, doc) -> tuple[str, str]:
    """(reason, detail) for a file whose pages hold no line of text: a scan with no OCR engine
    needs action (`ocr-unavailable`, saying how to install it); anything else is `empty`,
    with a word on OCR only where the pages may be images (a PDF's), never for a text file."""
    missing = [w for w in doc.warnings if w.startswith("ocr unavailable")]
    if missing:
        return "ocr-unavailable", f"{path.name} has no text layer and needs OCR: {missing[0]}"
    said = f" ({'; '.join(doc.warnings)})" if doc.warnings else ""
    scan = (f"; if it is a scan, check OCR with `{command('ingest', 'smoke-ocr', path.name)}`"
            if path.suffix.lower() == ".pdf" else "")
    return fulltext.EMPTY, f"{path.name} has {len(doc.pages)} page(s) but no text{said}{scan}."


def _no_chunks_warning(lines: int) -> str:
    return (f"no chunks: all {lines} lines are blank or look like running headers and page "
            "numbers, so only exact search and read_range find them")
