"""The indexing pipeline and its command line.

    python ingest.py report.pdf                 # index one file into the `default` KB
    python ingest.py docs/ --kb manuals         # index a folder into KB `manuals`
    python ingest.py notes.txt "Meeting notes"  # choose the source name agents will cite
    python ingest.py --kb manuals               # sync KB `manuals` with its sourcePaths folders
    python ingest.py --kb manuals --rebuild     # rebuild a damaged KB from its source files
    python ingest.py --remove docs/old.pdf      # drop one source (by name or file path)
    python ingest.py smoke-ocr scan.pdf         # check that OCR works: print a scan's text

The entry points a caller uses (ingest, ingest_url, sync, rebuild, remove) and the command
line; the work is in pipeline/. Files -> extract (extract.py) -> chunk (chunking.py) -> one
SQLite transaction with the source's lines and chunks (fulltext.py) -> embed pending chunks ->
Chroma (chroma_store.py) -> mark them indexed: pipeline/indexer.py. SQLite is the record and
Chroma follows it; a reconcile pass at the start of every run finishes whatever a crash left
(pipeline/runs.py, with the sync's steps); pipeline/rebuild.py rebuilds a damaged KB.
Progress goes to stderr, the JSON summary to stdout (Summary says what its counts mean). Exit
status: EXIT_OK (0) when every file is indexed or unchanged, EXIT_SOME_FILES (1) when some
failed or need action, EXIT_NOT_RUN (2) when the run was refused or stopped, with one line on
stderr saying why.

Layer: pipeline: its entry points and CLI, above pipeline/, below the queue and the server.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable, Collection
from pathlib import Path

import contextualize
import fulltext
import kb as kbmod
from common import limits, paths, run_status
from common.commands import command
from common.pidlock import LockBusy
from formats import ocr
from index import store_errors
from pipeline import runs
from pipeline.indexer import EXIT_NOT_RUN, EmbedderUnavailable, Indexer, Summary, max_file_bytes
from pipeline.rebuild import FilesHeld, rebuild
from sources import folders, url_fetch


class SourceNameTaken(ValueError):
    """The source name already names another file's source, or is not the name folder sync
    gives a file in a followed folder; nothing was changed."""


def ingest(kb: kbmod.KnowledgeBase, targets: list[Path], source_name: str | None = None,
           force: bool = False, progress: bool = False, report: runs.Report | None = None,
           run: run_status.RunStatus | None = None,
           inside: list[Path] | None = None) -> Summary:
    """Index files and folders into a KB and return what happened. Raises SourceNameTaken,
    before any work, when a name already names another file's source, and limits.UserError
    for a `source_name` no tool would take. Each file is read only if it lies in `inside`
    (resolved folders: ingest_file's allowed ones), and a folder's files only inside that
    folder. A target that does not exist raises limits.UserError (check_exists)."""
    limits.check_name(source_name, "source name")
    check_exists(targets)
    skipped: list[dict] = []
    naming = folders.Naming.of(kb, targets)
    files = list(folders.discover(targets, source_name, skipped,
                                  text_extensions=kb.text_extensions,
                                  gitignore=kb.respect_gitignore, naming=naming))
    _refuse_renamed_by_sync(naming, files)
    _refuse_taken_names(kb, files)
    if inside is None and targets and all(t.is_dir() for t in targets):
        inside = [t.resolve() for t in targets]

    def work(indexer: Indexer, summary: Summary) -> None:
        summary.skipped += skipped
        indexer.index_all(files, summary, force, inside=inside)

    return runs.run_indexer(kb, work, progress, report, run=run)


def check_exists(targets: list[Path]) -> None:
    """Refuse, before anything is written, a path given now that does not exist (issue 49:
    `linecite ingest ~/Documents/reports`, a folder that was not there, left a source
    `reports` failed for ever in KB `default`). A followed folder that goes offline later is
    another case: sync keeps its sources (folders.plan_sync)."""
    for target in targets:
        if not target.exists():
            raise limits.UserError(
                f"{target} does not exist: check the path (a network share or removable drive "
                "may be offline; a relative path starts from the current folder) and run "
                "again; nothing was added")


def remove(kb: kbmod.KnowledgeBase, source: str, progress: bool = False,
           run: run_status.RunStatus | None = None) -> Summary:
    """Drop one source, named or given by its file's path, with a mail's attachments: its
    row, lines and chunks in SQLite and its vectors in Chroma, so the index is what a rebuild
    without that file makes (`deleted` counts them). A name or path that is no source raises
    limits.UserError before any write. A file still in a followed folder is indexed again by
    the next sync: a warning says so, and how to keep it out."""
    name = _source_to_remove(kb, source)

    def work(indexer: Indexer, summary: Summary) -> None:
        row = fulltext.source_row(indexer.conn, name)
        if row is None:  # removed by another run since it was looked up
            return
        runs.delete(indexer, [name], summary)
        summary.embedded += indexer.embed_pending()  # forgets its vectors (the tombstones)
        if warning := _comes_back(kb, row["path"]):
            summary.warnings.append({"source": name, "warning": warning})

    return runs.run_indexer(kb, work, progress, None, run=run)


def _source_to_remove(kb: kbmod.KnowledgeBase, given: str) -> str:
    """The source `given` names: a source's whole name, a file name naming exactly one
    (`old.pdf` for `docs/old.pdf`), or the path of a source's file; else a UserError with
    close names."""
    limits.check_name(given, "source")
    if not kb.fulltext_path.exists():
        raise limits.UserError(f"knowledge base {kb.id!r} has no sources yet; nothing to remove")
    conn = fulltext.connect(kb.fulltext_path, readonly=True)
    try:
        names = fulltext.source_names_ending(conn, given, 2)
        if not names:
            path = Path(given).expanduser()
            files = {limits.path_text(path.absolute()), limits.path_text(path.resolve())}
            pairs = conn.execute(f"SELECT name, path FROM sources WHERE path IN "
                                 f"({','.join('?' * len(files))}) ORDER BY name",
                                 sorted(files)).fetchall()
            attachments = folders.attachment_sources((r["name"], r["path"]) for r in pairs)
            names = [r["name"] for r in pairs if r["name"] not in attachments]
        close = [] if names else fulltext.close_source_names(conn, given, 3)
    finally:
        conn.close()
    if len(names) > 1:
        raise limits.UserError(f"several sources match {given!r} in {kb.id!r}, e.g. "
                               f"{', '.join(map(repr, names))}; give the whole name")
    if not names:
        hint = f"; did you mean {' or '.join(map(repr, close))}?" if close else ""
        raise limits.UserError(f"no source {given!r} in {kb.id!r}, by name or by its file's "
                               f"path{hint}; `{command('remove', '--list', '--kb', kb.id)}` "
                               "lists every source's exact name")
    return names[0]


def _comes_back(kb: kbmod.KnowledgeBase, path: str | None) -> str | None:
    """What to do about a removed source whose file is still in a followed folder, or None."""
    if not path or not Path(path).is_file():
        return None
    folder = next((f for f in folders.kb_folders(kb) if Path(path).is_relative_to(f)), None)
    if folder is None:
        return None
    return (f"{path} is still in {folder}, which {kb.id!r} follows: the next sync indexes it "
            "again; move or delete the file, or stop following the folder, to keep it out")


def _refuse_renamed_by_sync(naming: folders.Naming, files: list[tuple[Path, str]]) -> None:
    """A file in a followed folder has the name folder sync gives it: under another name the
    next sync would delete that source and add the file again, and its citations would stop
    resolving (issue 30)."""
    for path, name in files:
        if naming.folder_prefix(path.absolute().parent.resolve()) is None:
            continue
        if (rule := naming.name(path)) != name:
            raise SourceNameTaken(
                f"{path} lies in a folder this knowledge base follows, where files are named "
                f"by their path: it is {rule!r}, and a sync would rename {name!r} back; leave "
                "out the source name, or index a copy kept outside the followed folders")


def ingest_url(kb: kbmod.KnowledgeBase, url: str, force: bool = False, progress: bool = False,
               report: runs.Report | None = None,
               run: run_status.RunStatus | None = None) -> Summary:
    """Fetch one web page or document (url_fetch.py: size, time and redirect bounds, no
    private or metadata address unless the KB allows private ones) and index it as the
    source named by its normalised URL; fetching it again replaces it. The fetch runs before
    the KB's writer lock is taken; a refused or failed fetch raises url_fetch.FetchError (a
    ValueError) and changes nothing."""
    with tempfile.TemporaryDirectory(prefix="linecite-url-", ignore_cleanup_errors=True) as tmp:
        got = url_fetch.fetch(url, Path(tmp), max_file_bytes(),
                              url_fetch.private_allowed(kb.urls))
        src = fulltext.SourceFile(got.url, got.url, paths.file_sha256(got.file), got.size,
                                  time.time())

        def work(indexer: Indexer, summary: Summary) -> None:
            if indexer.index_fetched(got.file, src, summary, force):
                url_fetch.save_validators(indexer.conn, got.url, got.validators)
            summary.embedded += indexer.embed_pending()

        return runs.run_indexer(kb, work, progress, report, run=run)


def _refuse_taken_names(kb: kbmod.KnowledgeBase, files: list[tuple[Path, str]]) -> None:
    """A name whose source is another file that still exists would silently replace it (an
    agent's `ingest_file(source_name="notes.txt")` overwrote the user's notes). Re-indexing the
    same file, or reusing the name of a file that is gone, is fine."""
    if not kb.fulltext_path.exists():
        return
    conn = fulltext.connect(kb.fulltext_path, readonly=True)
    try:
        for path, name in files:
            row = fulltext.source_row(conn, name)
            if row is not None and _is_other_file(row["path"], path):
                raise SourceNameTaken(
                    f"source name {name!r} already names {row['path']}, a different file; give "
                    f"{path} another source name (`{command('ingest', 'FILE', 'NAME')}`, or "
                    "ingest_file's source_name), or move the other file away and sync first")
    finally:
        conn.close()


def _is_other_file(indexed: str | None, path: Path) -> bool:
    """Whether `indexed` (a source's recorded path) is an existing file other than `path`."""
    if not indexed or not Path(indexed).is_file():
        return False
    try:
        return not os.path.samefile(indexed, path)
    except OSError:  # `path` is missing: it must not touch another file's source either
        return True


def sync(kb: kbmod.KnowledgeBase, scope: str | Collection[str] = "full", force: bool = False,
         progress: bool = False, report: runs.Report | None = None,
         should_stop: Callable[[], bool] | None = None,
         run: run_status.RunStatus | None = None) -> Summary:
    """Bring a KB in line with its sourcePaths folders.

    `full`: index new and changed files, drop deleted ones (force: re-extract every file).
    `contextualization`: redo the contexts that are missing, failed or stale (another model
    or prompt) and embed those chunks again, from the stored text (no file is read); with no
    contextualizer, clear contexts left from an earlier one and embed every chunk again.
    `embedding`: embed every chunk again, for instance after the embedder changed.
    Several scopes (a merged queue entry) do what each asks, in one run: `full` alone embeds
    only what changed, so `["embedding", "full"]` still embeds every chunk again.
    """
    scopes = {scope} if isinstance(scope, str) else set(scope)
    if not scopes or not scopes <= set(kbmod.SCOPES):
        raise ValueError(f"scope must be one of {', '.join(kbmod.SCOPES)}, not {scope!r}")
    if "full" in scopes and not kb.source_paths and not runs.has_urls(kb):
        raise kbmod.ConfigError(f"knowledge base {kb.id!r} has no folders to sync; add them to "
                                f"'sourcePaths' in {kb.folder / 'config.json'}, or index a "
                                f"file or folder with `{command('ingest', 'PATH', '--kb', kb.id)}`")

    def work(indexer: Indexer, summary: Summary) -> None:
        if "contextualization" in scopes:
            indexer.contexts.run(indexer.conn, redo=True)
        if "full" in scopes:
            plan = folders.plan_sync(indexer.conn, kb, force)
            summary.skipped += plan.skipped
            runs.delete(indexer, plan.deleted, summary)
            summary.sources += plan.unchanged
            summary.unchanged += plan.unchanged
            indexer.index_all(plan.added + plan.modified + plan.retried, summary, force,
                              should_stop, inside=folders.kb_folders(kb))
            runs.sync_buckets(indexer, kb, summary, force, should_stop)
            runs.sync_urls(indexer, kb, summary, force, should_stop)
        summary.embedded += indexer.embed_pending()

    # every vector goes for a new embedder, a forced run, or a context scope with no LLM (it
    # clears old contexts); with an LLM, only the chunks whose context changes are re-embedded
    no_llm = contextualize.contextualizer_for(kb.contextualizer) is None
    reset = "embedding" in scopes or force or ("contextualization" in scopes and no_llm)
    return runs.run_indexer(kb, work, progress, report, reset_embeddings=reset, run=run)


def _print_json(data: dict) -> None:
    """The summary as readable UTF-8 where stdout takes it, else with \\u escapes: a Windows
    console or pipe in cp1252 cannot encode a Korean file name, and the print raised
    UnicodeEncodeError after the whole run had succeeded (issue 14). Both are the same JSON."""
    text = json.dumps(data, ensure_ascii=False, indent=2)
    try:
        text.encode(sys.stdout.encoding or "utf-8")
    except (UnicodeEncodeError, LookupError):
        text = json.dumps(data, indent=2)
    print(text)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["smoke-ocr"]:  # python ingest.py smoke-ocr FILE: is OCR working here?
        if len(argv) != 2:
            print("usage: python ingest.py smoke-ocr FILE.pdf|IMAGE", file=sys.stderr)
            return EXIT_NOT_RUN
        return ocr.smoke(Path(argv[1]))
    if "--remove" in argv:  # `linecite remove`: its own arguments and --help
        return _remove_main([a for a in argv if a != "--remove"])
    parser = argparse.ArgumentParser(
        description="Index files into a linecite knowledge base (JSON summary on stdout).")
    parser.add_argument("path", nargs="?",
                        help="a file, a folder or an http(s) URL to index (default: sync the "
                             "KB's sourcePaths)")
    parser.add_argument("source_name", nargs="?",
                        help="the name agents cite for this file (default: its file name)")
    _kb_arguments(parser)
    parser.add_argument("--force", action="store_true", help="re-extract even unchanged files")
    parser.add_argument("--rebuild", action="store_true",
                        help="rebuild a damaged KB from its source files (the damaged stores "
                             "are moved aside, not deleted)")
    parser.add_argument("--once", action="store_true",
                        help="index a folder without adding it to the KB's sourcePaths")
    parser.add_argument("--quiet", action="store_true", help="no progress bar on stderr")
    args = parser.parse_args(argv)
    # PowerShell 5.1 and cmd pass "~" through unexpanded
    url = args.path if args.path and args.path.startswith(("http://", "https://")) else None
    args.path = Path(args.path).expanduser() if args.path is not None and not url else None
    if args.source_name and (args.path is None or args.path.is_dir()):
        parser.error("SOURCE_NAME names one file; a folder's files are named by their paths")
    if args.rebuild and (args.path is not None or url):
        parser.error("--rebuild takes no PATH: it re-indexes the files the KB already knows")
    base = _base(args)
    if args.rebuild and args.kb not in kbmod.list_ids(base):
        print(f"linecite: no knowledge base {args.kb!r} under {base}; nothing to rebuild",
              file=sys.stderr)
        return EXIT_NOT_RUN
    run = run_status.RunStatus(base / args.kb, "cli", "full", args.force)

    def work() -> Summary:
        if args.rebuild:
            return rebuild(kbmod.load(base, args.kb), progress=not args.quiet, run=run)
        if url is not None:
            return ingest_url(kbmod.open_or_create(base, args.kb), url, force=args.force,
                              progress=not args.quiet, run=run)
        if args.path is None:
            return sync(kbmod.open_or_create(base, args.kb), "full", force=args.force,
                        progress=not args.quiet, run=run)
        check_exists([args.path])  # before the KB is made or changed
        kb = kbmod.open_or_create(base, args.kb)
        summary = ingest(kb, [args.path], args.source_name, force=args.force,
                         progress=not args.quiet, run=run)
        if args.path.is_dir() and not args.once and kbmod.follow(kb, args.path):
            summary.following = (f"{kb.id} now follows {args.path.resolve()}: "
                                 f"`{command('ingest', '--kb', kb.id)}` or start_reindex "
                                 "keeps it current (--once indexes a folder without "
                                 "following it)")
        return summary

    return _reported(work, args.kb, base)


def _remove_main(argv: list[str]) -> int:
    """`linecite remove SOURCE` (ingest.py --remove): drop one source, or list them."""
    parser = argparse.ArgumentParser(
        prog="linecite remove", description="Drop one source from a knowledge base: its "
        "lines, chunks and vectors (the file is not touched). A file still in a followed "
        "folder comes back at the next sync: move it out, or stop following the folder "
        "(the KB's config.json, sourcePaths).")
    parser.add_argument("source", nargs="?",
                        help="the source's name (as --list shows it), its file name, or its "
                             "file's path")
    _kb_arguments(parser)
    parser.add_argument("--list", action="store_true",
                        help="list the KB's sources (name and state), one a line")
    parser.add_argument("--quiet", action="store_true", help="no progress bar on stderr")
    args = parser.parse_args(argv)
    if (args.source is None) == (not args.list):
        parser.error("give one SOURCE to drop, or --list to see the KB's sources")
    base = _base(args)
    if args.kb not in kbmod.list_ids(base):
        print(f"linecite: no knowledge base {args.kb!r} under {base}; nothing to "
              f"{'list' if args.list else 'remove'}", file=sys.stderr)
        return EXIT_NOT_RUN
    kb = kbmod.load(base, args.kb)
    if args.list:
        for name, state in list_names(kb):
            print(f"{name}\t{state}")
        return 0
    run = run_status.RunStatus(base / args.kb, "cli", "remove", False)
    return _reported(lambda: remove(kb, args.source, progress=not args.quiet, run=run),
                     args.kb, base)


def list_names(kb: kbmod.KnowledgeBase) -> list[tuple[str, str]]:
    """(name, state) of every source of the KB, by name."""
    if not kb.fulltext_path.exists():
        return []
    conn = fulltext.connect(kb.fulltext_path, readonly=True)
    try:
        return [(s["name"], s["state"]) for s in fulltext.list_sources(conn)]
    finally:
        conn.close()


def _kb_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kb", default=kbmod.DEFAULT_KB,
                        help="knowledge base id (default: %(default)s)")
    parser.add_argument("--base-path", type=Path, default=None,
                        help="folder holding all KBs (default: $LINECITE_HOME or the user "
                             "data folder)")


def _base(args: argparse.Namespace) -> Path:
    return args.base_path.expanduser() if args.base_path is not None \
        else paths.default_base_path()


def _reported(work: Callable[[], Summary], kb_id: str, base: Path) -> int:
    """Run `work`, print its JSON summary, and return its exit code; a refusal or a fault
    the user can fix is one line on stderr and EXIT_NOT_RUN."""
    try:
        summary = work()
    except (kbmod.ConfigError, LockBusy, EmbedderUnavailable, fulltext.SchemaError,
            SourceNameTaken, limits.UserError, FilesHeld) as err:
        print(f"linecite: {err}", file=sys.stderr)
        return EXIT_NOT_RUN
    except sqlite3.DatabaseError as err:
        problem = store_errors.user_error(kb_id, base / kb_id / fulltext.FILENAME, err,
                                          writing=True)
        if problem is None:
            raise  # no fault of the index the user can fix: a bug, with its traceback
        print(f"linecite: {problem}", file=sys.stderr)
        return EXIT_NOT_RUN
    except PermissionError as err:
        print(f"linecite: cannot write {err.filename} ({err.strerror}); make the KB folder "
              "writable, or close the program holding the file, and retry", file=sys.stderr)
        return EXIT_NOT_RUN
    _print_json(summary.__dict__)
    return summary.exit_code()


if __name__ == "__main__":
    sys.exit(main())
