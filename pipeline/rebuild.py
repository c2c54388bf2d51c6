"""The rebuild of a damaged KB from its source files: its stores moved aside (never
deleted; all or nothing, and put back when a running server holds one open), then every file
the old index still names indexed again, the sourcePaths synced and the URLs fetched again.

Layer: pipeline: above pipeline/runs.py; ingest.py's `--rebuild` calls `rebuild`.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

import chroma_store
import kb as kbmod
from common import run_status
from common.commands import command
from pipeline import runs
from pipeline.indexer import Indexer, Summary, writer_lock
from sources import folders, url_fetch

# ---------------------------------------------------------------------------
URL_SCHEMES = ("http://", "https://")  # a source made by ingest_url is named by its URL
# ---------------------------------------------------------------------------


class FilesHeld(RuntimeError):
    """A rebuild could not move the KB's stores aside: a running server holds them open."""


def rebuild(kb: kbmod.KnowledgeBase, progress: bool = False,
            run: run_status.RunStatus | None = None) -> Summary:
    """Rebuild both stores of a KB from its source files, for an index that is damaged.

    The old fulltext.sqlite3 (with its -wal and -shm) and the embedded chroma/ folder are
    moved aside as `<name>.damaged-<time>`, never deleted; a Chroma server's collection is
    dropped. Every file the old index still names and that can be read is indexed again under
    its old name, then the KB's sourcePaths are synced (buckets listed again) and its URLs
    fetched again. Files that are gone are `skipped`.
    The writer lock is held from the first rename to the end: it was once let go between, so
    another writer could index into the half-moved KB. Raises FilesHeld, with every file back
    in place, when a running server holds one open (Windows refuses the rename then).
    """
    lock = writer_lock(kb, "rebuild")
    with lock:  # released by the indexer's close, or here if the rebuild stops before it
        known, unread = _indexed_paths(kb.fulltext_path)
        stamp = time.strftime("%Y%m%d-%H%M%S")
        _move_aside(kb, stamp)
        _drop_server_collection(kb)
        return runs.run_indexer(kb, _rebuild_work(kb, known, unread, stamp), progress,
                                None, run=run, lock=lock)


def _drop_server_collection(kb: kbmod.KnowledgeBase) -> None:
    """A Chroma server's collection has no folder to move aside: it is emptied instead."""
    if kb.chroma_url is not None and (store := chroma_store.open_store(
            kb.folder, kb.id, kb.embedding, kb.chroma_url)) is not None:
        store.reset()
        store.close()


def _rebuild_work(kb: kbmod.KnowledgeBase, known: list[tuple[str, str]], unread: str | None,
                  stamp: str) -> Callable[[Indexer, Summary], None]:
    """The rebuild's indexing: the files the old index named, then the sourcePaths."""
    attachments = folders.attachment_sources(known)  # rebuilt with their mail
    urls = [name for name, path in known if name == path and name.startswith(URL_SCHEMES)]
    remote = {*urls, *(name for name, _path in known if name.startswith(kbmod.S3_SCHEME))}
    known = [(name, path) for name, path in known if name not in attachments | remote]
    files = [(Path(path), name) for name, path in known if Path(path).is_file()]
    gone = [{"path": path, "name": name, "reason": "not-found",
             "detail": f"{path} is gone, so source {name!r} was not rebuilt"}
            for name, path in known if not Path(path).is_file()]

    def work(indexer: Indexer, summary: Summary) -> None:
        summary.skipped += gone
        if unread:
            summary.warnings.append({"source": None, "warning": (
                f"the damaged index could not be read ({unread}), so only the sourcePaths "
                f"folders were rebuilt; index other files again with "
                f"`{command('ingest', 'FILE', '--kb', kb.id)}` (the old index is kept as "
                f"{kb.fulltext_path.name}.damaged-{stamp})")})
        indexer.index_all(files, summary, force=True)
        if kb.source_paths:
            plan = folders.plan_sync(indexer.conn, kb)
            summary.skipped += plan.skipped
            indexer.index_all(plan.added + plan.modified + plan.retried, summary, force=True,
                              inside=folders.kb_folders(kb))
        runs.sync_buckets(indexer, kb, summary, True, None)  # buckets listed again, URLs fetched
        indexer.index_downloads(url_fetch.refetches(urls, kb.urls), summary, True)

    return work


def _move_aside(kb: kbmod.KnowledgeBase, stamp: str) -> None:
    """fulltext.sqlite3 -> fulltext.sqlite3.damaged-<stamp>, its -wal and -shm likewise (the
    suffix stays last, so SQLite still pairs them), chroma/ -> chroma.damaged-<stamp>. All or
    nothing: when a file is held open (Windows refuses the rename while a server reads the KB)
    the ones already moved go back, since an index moved without its -wal loses what the WAL
    holds, and FilesHeld says to stop the host."""
    index = kb.fulltext_path
    olds = [index.with_name(index.name + suffix) for suffix in ("", "-wal", "-shm")]
    moves = [(old, index.with_name(f"{index.name}.damaged-{stamp}{old.name[len(index.name):]}"))
             for old in olds if old.exists()]
    chroma = kb.folder / "chroma"
    if chroma.exists():
        moves.append((chroma, chroma.with_name(f"chroma.damaged-{stamp}")))
    done: list[tuple[Path, Path]] = []
    try:
        for old, new in moves:
            old.rename(new)
            done.append((old, new))
    except PermissionError as err:
        raise FilesHeld(_held_message(kb, err, _put_back(done))) from None


def _put_back(done: list[tuple[Path, Path]]) -> list[Path]:
    """Undo renames, last first; the moved names that could not go back (none, as a rule)."""
    stuck: list[Path] = []
    for old, new in reversed(done):
        try:
            new.rename(old)
        except OSError:
            stuck.append(new)
    return stuck


def _held_message(kb: kbmod.KnowledgeBase, err: PermissionError, stuck: list[Path]) -> str:
    """What to do when a store file is held open: stop what holds it, run again."""
    where = ("nothing was changed" if not stuck else "move " + ", ".join(map(str, stuck))
             + " back to its name without `.damaged-...` before you retry")
    return (f"cannot move {err.filename} aside to rebuild KB {kb.id!r}: another program holds "
            f"it open ({err.strerror}), most likely a linecite server run by an MCP host; quit "
            f"the host (Claude Desktop, Cursor, ...) or stop server.py, then run "
            f"`{command('ingest', '--kb', kb.id, '--rebuild')}` again ({where})")


def _indexed_paths(index: Path) -> tuple[list[tuple[str, str]], str | None]:
    """(name, path) of each source a possibly damaged index still shows (the rows read before
    the damage stopped the read are kept), and the error that stopped it, if any."""
    found: list[tuple[str, str]] = []
    if not index.is_file():
        return found, None
    try:
        conn = sqlite3.connect(f"{index.resolve().as_uri()}?mode=ro", uri=True)
        try:
            found += ((name, path) for name, path in
                      conn.execute("SELECT name, path FROM sources") if path)
        finally:
            conn.close()
    except sqlite3.DatabaseError as err:  # too damaged to read on: sourcePaths still rebuild
        return found, str(err)
    return found, None
