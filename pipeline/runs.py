"""An indexing run and the steps of a sync. `run_indexer` is the frame every run of
ingest.py's entry points (and the rebuild) goes through: open the KB's Indexer (its writer
lock), expire code chunked by an older codechunks.VERSION, reconcile, do the run's work,
summarise. The sync's steps: gone sources deleted, the KB's buckets and URL sources brought in.

Layer: pipeline: above pipeline/indexer.py, below ingest.py and pipeline/rebuild.py.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

import codechunks
import fulltext
import kb as kbmod
from common import run_status
from common.pidlock import PidLock
from pipeline.indexer import Indexer, Summary
from sources import s3_source, url_fetch

# ---------------------------------------------------------------------------
CODE_VERSION_KEY = "code_chunker"  # meta key: the codechunks.VERSION its code sources were cut by
Report = Callable[[int, int, str], None]  # (done, total, message): MCP progress notifications
# ---------------------------------------------------------------------------


def run_indexer(kb: kbmod.KnowledgeBase, work: Callable[[Indexer, Summary], None],
                progress: bool, report: Report | None, reset_embeddings: bool = False,
                run: run_status.RunStatus | None = None,
                lock: PidLock | None = None) -> Summary:
    """Open the KB's writer, reconcile, do the work, and summarise. `reset_embeddings` drops
    every vector first: reconciling would embed pending chunks into the old model's
    collection, and stop there, when the embedder has changed. While it holds the writer lock
    the run keeps the KB's status file (`run`: how it was started; see run_status), so
    status reads show CLI runs too, and a killed one as interrupted. Every run expires old
    code (expire_old_code), so whichever entry point cuts code records the chunker it used."""
    run = run or run_status.RunStatus(kb.folder, "api")
    summary = Summary(kb=kb.id)
    try:
        indexer = Indexer(kb, progress=progress, report=run.reporter(report), lock=lock)
    except BaseException as err:
        run.finish(error=err)
        raise
    try:
        run.start()
        indexer.retokenize()
        expire_old_code(indexer.conn)
        if reset_embeddings:
            indexer.reset_embeddings()
        summary.embedded += indexer.reconcile()
        work(indexer, summary)
        if warning := indexer.contexts.finish(indexer.conn):
            summary.warnings.append({"source": None, "warning": warning})
        summary.fulltext = {"path": str(kb.fulltext_path), **fulltext.counts(indexer.conn)}
        run.finish(summary)
    except BaseException as err:
        run.finish(summary, err)
        raise
    finally:
        indexer.close()
    return summary


def expire_old_code(conn: sqlite3.Connection) -> None:
    """Code chunked by another codechunks.VERSION is read again: its sources forget their
    size, date and hash, so the plan takes them as changed files (the version is recorded in
    the same transaction; a run stopped halfway leaves the rest to the next). run_indexer
    calls it for every run: when only the sync did, `ingest FOLDER` left no version, and the
    next sync cut all its code again (issue 49)."""
    if fulltext.get_meta(conn, CODE_VERSION_KEY) == codechunks.VERSION:
        return
    with conn:
        conn.execute("UPDATE sources SET mtime = -1, sha256 = '' WHERE parser LIKE 'code:%'")
        conn.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)",
                     (CODE_VERSION_KEY, codechunks.VERSION))


def delete(indexer: Indexer, names: list[str], summary: Summary) -> None:
    """Drop sources whose file or object is gone, with a mail's attachments."""
    for name in names:
        for source in [*fulltext.attachment_names(indexer.conn, name), name]:
            fulltext.delete_source(indexer.conn, source)
            summary.deleted += 1


def sync_buckets(indexer: Indexer, kb: kbmod.KnowledgeBase, summary: Summary, force: bool,
                 should_stop: Callable[[], bool] | None) -> None:
    """Bring the KB's `s3://` sourcePaths in: s3_source.plan lists them (a prefix that cannot
    be listed is reported and its sources kept), then gone objects are deleted and new or
    changed ones fetched and indexed."""
    plan = s3_source.plan(indexer.conn, kb, force)
    summary.skipped += plan.skipped
    summary.sources += plan.unchanged
    summary.unchanged += plan.unchanged
    delete(indexer, plan.deleted, summary)
    indexer.index_downloads(plan.added + plan.modified, summary, force, should_stop)


def sync_urls(indexer: Indexer, kb: kbmod.KnowledgeBase, summary: Summary, force: bool,
              should_stop: Callable[[], bool] | None) -> None:
    """Re-check the KB's URL sources (url_fetch.recheck: conditional requests) and fetch the
    changed ones again; one that does not answer is reported under `skipped` and kept."""
    plan = url_fetch.recheck(url_fetch.url_sources(indexer.conn),
                             url_fetch.private_allowed(kb.urls))
    summary.skipped += plan.skipped
    summary.sources += plan.unchanged
    summary.unchanged += plan.unchanged
    indexer.index_downloads(plan.to_fetch, summary, force, should_stop)


def has_urls(kb: kbmod.KnowledgeBase) -> bool:
    """Whether the KB holds sources made by ingest_url (then `full` syncs them, folders or
    not)."""
    if not kb.fulltext_path.exists():
        return False
    conn = fulltext.connect(kb.fulltext_path, readonly=True)
    try:
        return bool(url_fetch.url_sources(conn))
    finally:
        conn.close()
