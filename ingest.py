"""The indexing pipeline and its command line.

    python ingest.py report.pdf                 # index one file into the `default` KB
    python ingest.py docs/ --kb manuals         # index a folder into KB `manuals`
    python ingest.py notes.txt "Meeting notes"  # choose the source name agents will cite
    python ingest.py --kb manuals               # sync KB `manuals` with its sourcePaths folders
    python ingest.py smoke-ocr scan.pdf         # check that OCR works: print a scan's text

Files -> extract (extract.py) -> chunk (chunking.py) -> one SQLite transaction with the
source's lines and chunks (fulltext.py) -> embed pending chunks -> Chroma (chroma_store.py)
-> mark them indexed. SQLite is the record and Chroma follows it; a reconcile pass at the
start of every run finishes whatever a crash left. Progress goes to stderr, the JSON summary
to stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import fulltext
import kb as kbmod
from ocr import file_sha256 as sha256_file
from pidlock import LockBusy, PidLock

# ---------------------------------------------------------------------------
EMBED_BATCH = 32  # chunks per embedder call and Chroma upsert
PAUSE_ENV = "LINECITE_PAUSE_AT"  # tests: stop at a named stage so they can kill -9 there
RETRY_STATES = ("failed", "needs_action")  # unreadable last time: try again on every run
RETOKENIZE_BATCH = 500  # chunks per segmenter call when an index is re-tokenized
# ---------------------------------------------------------------------------


@dataclass
class Summary:
    """What one run did; printed as JSON."""

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
    fulltext: dict = field(default_factory=dict)


Report = Callable[[int, int, str], None]  # (done, total, message): MCP progress notifications


@dataclass
class SyncPlan:
    """What a folder sync would do; `check_changes` shows it without doing it."""

    added: list[tuple[Path, str]] = field(default_factory=list)
    modified: list[tuple[Path, str]] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    unchanged: int = 0

    def to_json(self) -> dict:
        return {"added": [name for _, name in self.added],
                "modified": [name for _, name in self.modified],
                "deleted": self.deleted, "unchanged": self.unchanged}


class EmbedderUnavailable(RuntimeError):
    """The embedder or Chroma fails even on a trivial input: stop, keep chunks pending."""


def _pause_point(stage: str) -> None:
    """Let a crash test kill -9 the process at a known stage (no effect unless asked)."""
    if os.environ.get(PAUSE_ENV) == stage:
        print(f"linecite: paused at {stage}", file=sys.stderr, flush=True)
        time.sleep(3600)


def discover(targets: list[Path], source_name: str | None = None) -> Iterator[tuple[Path, str]]:
    """(file, source name) for each file to index: a file as named, a folder's files recursively.

    A folder's files are named `<folder>/<relative path>` so two folders' `README.md` differ.
    """
    import extract

    for target in targets:
        if target.is_dir():
            for path in sorted(p for p in target.rglob("*") if p.is_file()):
                if extract.supported(path):
                    yield path, f"{target.resolve().name}/{path.relative_to(target).as_posix()}"
        else:
            yield target, source_name or target.name


def _changed(row, path: Path) -> bool:
    """Whether a file differs from its indexed row: size and mtime first, SHA-256 to confirm."""
    stat = path.stat()
    if (row["size"], row["mtime"]) == (stat.st_size, stat.st_mtime):
        return False
    return row["sha256"] != sha256_file(path)


def plan_sync(conn, kb: kbmod.KnowledgeBase, force: bool = False) -> SyncPlan:
    """Compare the KB's folders with what is indexed; reads files' metadata, calls no model."""
    folders = [Path(p).expanduser().resolve() for p in kb.source_paths]
    missing = [str(f) for f in folders if not f.is_dir()]
    if missing:
        raise kbmod.ConfigError(f"{kb.folder / 'config.json'}: field 'sourcePaths' names "
                                f"folders that do not exist: {', '.join(missing)}")
    plan = SyncPlan()
    seen: set[str] = set()
    for path, name in discover(folders):
        seen.add(name)
        row = fulltext.source_row(conn, name)
        if row is None:
            plan.added.append((path, name))
        elif force or row["state"] in RETRY_STATES or _changed(row, path):
            plan.modified.append((path, name))
        else:
            plan.unchanged += 1
    for source in fulltext.list_sources(conn):
        path = Path(source["path"] or "")
        inside = any(path.is_relative_to(folder) for folder in folders)
        if inside and source["name"] not in seen and not path.exists():
            plan.deleted.append(source["name"])
    return plan


def _progress(iterable, total: int, desc: str, enabled: bool):
    from tqdm import tqdm

    return tqdm(iterable, total=total, desc=desc, unit="file" if desc == "files" else "chunk",
                file=sys.stderr, disable=not enabled, dynamic_ncols=True)


class Indexer:
    """Indexes files into one KB; holds the KB's writer lock for its lifetime."""

    def __init__(self, kb: kbmod.KnowledgeBase, progress: bool = False,
                 report: Report | None = None):
        import chroma_store

        self.kb = kb
        self.progress = progress
        self.report = report
        self.lock = PidLock(kb.folder / ".writer.lock", f"indexing of KB {kb.id!r}")
        self.lock.acquire()
        try:
            self.conn = fulltext.connect(kb.fulltext_path)
        except BaseException:
            self.lock.release()
            raise
        self.store = chroma_store.open_store(kb.folder, kb.id, kb.embedding, kb.chroma_url)

    def close(self) -> None:
        self.conn.close()
        if self.store is not None:
            self.store.close()
        self.lock.release()

    # -- the storage protocol ------------------------------------------------
    def retokenize(self) -> int:
        """Re-segment every chunk when the index's tokens came from another segmenter (an
        upgraded kiwipiepy or jieba, changed rules); returns chunks re-tokenized. Lines,
        chunks and vectors stay: only the BM25 tokens change, written in one transaction."""
        import chunking
        import segment

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
                for row, toks in zip(rows, segment.tokens_many(texts), strict=True):
                    tokens[row["id"]] = " ".join(toks)
                bar.update(len(rows))
        if tokens:
            fulltext.replace_tokens(self.conn, tokens)
        fulltext.set_meta(self.conn, fulltext.SEGMENTER_KEY, current)
        return len(tokens)

    def reconcile(self) -> int:
        """Make Chroma match SQLite after whatever a crash left; returns chunks embedded."""
        self._forget(fulltext.tombstones(self.conn))
        if self.store is None:
            return self.embed_pending()
        in_chroma = self.store.all_ids()
        self._forget(sorted(in_chroma - fulltext.all_chunk_ids(self.conn)))
        lost = fulltext.indexed_chunk_ids(self.conn) - in_chroma
        fulltext.set_embed_state(self.conn, lost, "pending")
        return self.embed_pending()

    def _forget(self, chunk_ids: list[str]) -> None:
        if chunk_ids and self.store is not None:
            self.store.delete(chunk_ids)
        fulltext.clear_tombstones(self.conn, chunk_ids)

    def embed_pending(self) -> int:
        """Embed every pending chunk in batches; a failing batch is halved until the bad chunk
        is isolated and marked failed, so one bad chunk never blocks the rest."""
        if self.store is None:  # a BM25-only KB: nothing to embed, chunks are complete
            fulltext.set_pending_indexed(self.conn)
            fulltext.promote_sources(self.conn)
            return 0
        total = fulltext.count_pending(self.conn)
        done = seen = 0
        with _progress(None, total, "embedding", self.progress and total > 0) as bar:
            while rows := fulltext.pending_chunks(self.conn, EMBED_BATCH):
                done += self._embed_batch(rows)
                seen += len(rows)
                bar.update(len(rows))
                if self.report:
                    self.report(seen, total, "embedding chunks")
                _pause_point("mid-embedding")
        fulltext.promote_sources(self.conn)
        self._forget(fulltext.tombstones(self.conn))
        return done

    def _embed_batch(self, rows: list) -> int:
        try:
            vectors = self.store.embed([f"{r['context']}\n{r['text']}" if r["context"]
                                        else r["text"] for r in rows])
            self.store.upsert(
                [r["chunk_id"] for r in rows], vectors, [r["text"] for r in rows],
                [{"source": r["source"], "page": r["page"], "line_start": r["line_start"],
                  "line_end": r["line_end"]} for r in rows])
        except Exception as err:  # the embedder and Chroma can fail in any way; isolate it
            if len(rows) > 1:
                half = len(rows) // 2
                return self._embed_batch(rows[:half]) + self._embed_batch(rows[half:])
            self._check_backend(err)
            fulltext.set_embed_state(self.conn, [rows[0]["chunk_id"]], "failed",
                                     f"{type(err).__name__}: {err}"[:300])
            return 0
        _pause_point("mid-upsert")
        fulltext.set_embed_state(self.conn, [r["chunk_id"] for r in rows], "indexed")
        return len(rows)

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
    def index_file(self, path: Path, name: str, summary: Summary, force: bool = False) -> None:
        """Extract, chunk and commit one file; unchanged files (by SHA-256) are skipped."""
        import chunking
        import extract
        import segment

        summary.sources += 1
        try:
            stat = path.stat()
        except OSError as err:
            reason = "not-found" if isinstance(err, FileNotFoundError) else "unreadable"
            self._fail(fulltext.SourceFile(name, str(path), "", 0, 0.0), reason,
                       f"cannot open {path}: {err.strerror or err}; check the path", summary)
            return
        row = fulltext.source_row(self.conn, name)
        known = not force and row is not None and row["state"] not in RETRY_STATES
        if known and (row["size"], row["mtime"]) == (stat.st_size, stat.st_mtime):
            summary.unchanged += 1
            return
        src = fulltext.SourceFile(name, str(path.resolve()), sha256_file(path), stat.st_size,
                                  stat.st_mtime)
        if known and row["sha256"] == src.sha256:
            fulltext.touch_source(self.conn, name, src.size, src.mtime)
            summary.unchanged += 1
            return
        try:
            doc = extract.extract(path)
        except extract.ExtractError as err:
            self._fail(src, err.reason, err.detail, summary)
            return
        except Exception as err:  # a parser bug on a hostile file must not stop the run
            self._fail(src, "parser-error", f"{type(err).__name__}: {str(err)[:300]}; the file "
                       "may be damaged: re-save it, and report it if it opens elsewhere", summary)
            return
        noise = extract.noise_lines(doc.pages)
        chunks = chunking.chunk_pages(name, doc.pages, noise, segment.tokens)
        fulltext.replace_source(self.conn, src, doc.parser, doc.pages, chunks, doc.warnings)
        summary.warnings += [{"source": name, "warning": w} for w in doc.warnings]
        summary.indexed += 1
        summary.pages += len(doc.pages)
        summary.lines += sum(len(page) for page in doc.pages)
        summary.chunks += len(chunks)
        _pause_point("after-commit")

    def _fail(self, src: fulltext.SourceFile, reason: str, detail: str, summary: Summary) -> None:
        state = fulltext.record_failure(self.conn, src, reason, detail)
        summary.failed.append({"source": src.name, "path": src.path, "reason": reason,
                               "detail": detail, "state": state})


    def index_all(self, files: list[tuple[Path, str]], summary: Summary, force: bool,
                  should_stop: Callable[[], bool] | None = None) -> None:
        """Index files one by one, embedding after each; stop cleanly between files if asked."""
        for done, (path, name) in enumerate(_progress(files, len(files), "files", self.progress)):
            if should_stop and should_stop():
                summary.cancelled = True
                break
            if self.report:
                self.report(done, len(files), f"indexing {name}")
            self.index_file(path, name, summary, force=force)
            summary.embedded += self.embed_pending()
        if self.report:
            self.report(len(files), len(files), "cancelled" if summary.cancelled else "done")

    def reset_embeddings(self) -> None:
        """Forget every vector (a new embedder, or a forced re-embed): all chunks to pending."""
        if self.store is not None:
            self.store.reset()
        fulltext.set_all_pending(self.conn)


def _run(kb: kbmod.KnowledgeBase, work: Callable[[Indexer, Summary], None], progress: bool,
         report: Report | None) -> Summary:
    """Open the KB's writer, reconcile, do the work, and summarise."""
    summary = Summary(kb=kb.id)
    indexer = Indexer(kb, progress=progress, report=report)
    try:
        indexer.retokenize()
        summary.embedded += indexer.reconcile()
        work(indexer, summary)
        summary.fulltext = {"path": str(kb.fulltext_path), **fulltext.counts(indexer.conn)}
    finally:
        indexer.close()
    return summary


def ingest(kb: kbmod.KnowledgeBase, targets: list[Path], source_name: str | None = None,
           force: bool = False, progress: bool = False, report: Report | None = None) -> Summary:
    """Index files and folders into a KB and return what happened."""
    def work(indexer: Indexer, summary: Summary) -> None:
        indexer.index_all(list(discover(targets, source_name)), summary, force)

    return _run(kb, work, progress, report)


SCOPES = ("embedding", "contextualization", "full")  # each includes the ones before it


def sync(kb: kbmod.KnowledgeBase, scope: str = "full", force: bool = False,
         progress: bool = False, report: Report | None = None,
         should_stop: Callable[[], bool] | None = None) -> Summary:
    """Bring a KB in line with its sourcePaths folders.

    `full`: index new and changed files, drop deleted ones (force: re-extract every file).
    `embedding` (and `contextualization`, which adds nothing until a contextualizer is
    configured): embed every chunk again, for instance after the embedder changed.
    """
    if scope not in SCOPES:
        raise ValueError(f"scope must be one of {', '.join(SCOPES)}, not {scope!r}")
    if scope == "full" and not kb.source_paths:
        raise kbmod.ConfigError(f"knowledge base {kb.id!r} has no folders to sync; add them to "
                                f"'sourcePaths' in {kb.folder / 'config.json'}, or index a "
                                f"file or folder with `python ingest.py PATH --kb {kb.id}`")

    def work(indexer: Indexer, summary: Summary) -> None:
        if scope != "full" or force:
            indexer.reset_embeddings()
        if scope == "full":
            plan = plan_sync(indexer.conn, kb, force)
            for name in plan.deleted:
                fulltext.delete_source(indexer.conn, name)
                summary.deleted += 1
            summary.unchanged += plan.unchanged
            indexer.index_all(plan.added + plan.modified, summary, force, should_stop)
        summary.embedded += indexer.embed_pending()

    return _run(kb, work, progress, report)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["smoke-ocr"]:  # python ingest.py smoke-ocr FILE: is OCR working here?
        if len(argv) != 2:
            print("usage: python ingest.py smoke-ocr FILE.pdf|IMAGE", file=sys.stderr)
            return 2
        import ocr

        return ocr.smoke(Path(argv[1]))
    parser = argparse.ArgumentParser(
        description="Index files into a linecite knowledge base (JSON summary on stdout).")
    parser.add_argument("path", type=Path, nargs="?",
                        help="a file or a folder to index (default: sync the KB's sourcePaths)")
    parser.add_argument("source_name", nargs="?",
                        help="the name agents cite for this file (default: its file name)")
    parser.add_argument("--kb", default=kbmod.DEFAULT_KB,
                        help="knowledge base id (default: %(default)s)")
    parser.add_argument("--base-path", type=Path, default=None,
                        help="folder holding all KBs (default: $LINECITE_HOME or the user "
                             "data folder)")
    parser.add_argument("--force", action="store_true", help="re-extract even unchanged files")
    parser.add_argument("--quiet", action="store_true", help="no progress bar on stderr")
    args = parser.parse_args(argv)
    if args.source_name and (args.path is None or args.path.is_dir()):
        parser.error("SOURCE_NAME names one file; a folder's files are named by their paths")
    base = args.base_path or kbmod.default_base_path()
    try:
        kb = kbmod.open_or_create(base, args.kb)
        if args.path is None:
            summary = sync(kb, "full", force=args.force, progress=not args.quiet)
        else:
            summary = ingest(kb, [args.path], args.source_name, force=args.force,
                             progress=not args.quiet)
    except (kbmod.ConfigError, LockBusy, EmbedderUnavailable, fulltext.SchemaError) as err:
        print(f"linecite: {err}", file=sys.stderr)
        return 2
    print(json.dumps(summary.__dict__, ensure_ascii=False, indent=2))
    return 1 if summary.failed and not summary.indexed and not summary.unchanged else 0


if __name__ == "__main__":
    sys.exit(main())
