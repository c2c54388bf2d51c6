"""How a document is opened (issue 34, items 3 and 4): only regular files are read, on every
path, and what is read is the file the checks allowed, even when a link is swapped in between.
Real files, FIFOs and devices, real SQLite, the real CLI in a subprocess."""

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from test_hostile_ingest import bm25_kb

import fulltext
import ingest
import kb as kbmod
import library
from common import paths, safeopen
from index import exact
from pipeline.indexer import PAUSE_ENV

REPO = Path(__file__).resolve().parent.parent
posix_only = pytest.mark.skipif(sys.platform == "win32", reason="FIFOs and /dev/zero are POSIX")
SECRET = "The vault code is 4711."


def indexed_text(kb: kbmod.KnowledgeBase) -> dict[str, str]:
    """Every ready source's name -> its text, as search would serve it."""
    conn = fulltext.connect(kb.fulltext_path, readonly=True)
    try:
        rows = conn.execute("SELECT s.name, group_concat(c.text, ' ') FROM chunks c "
                            "JOIN sources s ON s.id = c.source_id GROUP BY s.name").fetchall()
        return {name: text for name, text in rows}
    finally:
        conn.close()


def device_and_fifo(folder: Path) -> None:
    """z.txt, a link to /dev/zero (size 0, endless), and f.txt, a FIFO no one writes to."""
    (folder / "z.txt").symlink_to("/dev/zero")
    os.mkfifo(folder / "f.txt")


@posix_only
@pytest.mark.parametrize("name, kind", [("z.txt", "a device"), ("f.txt", "a pipe (FIFO)")])
def test_cli_fails_a_device_or_fifo_quickly_with_exit_1(tmp_path, name, kind):
    # Regression (issue 34): `ingest.py z.txt` (-> /dev/zero) spun at 100% CPU holding the
    # writer lock, and `ingest.py f.txt` (a FIFO) blocked for ever in open().
    device_and_fifo(tmp_path)
    base = tmp_path / "base"
    bm25_kb(base, "default")
    env = {k: v for k, v in os.environ.items() if k not in (PAUSE_ENV, "LINECITE_HOME")}
    start = time.monotonic()
    proc = subprocess.run([sys.executable, str(REPO / "ingest.py"), str(tmp_path / name),
                           "--base-path", str(base), "--quiet"], capture_output=True, text=True,
                          encoding="utf-8", env=env, timeout=60)
    assert time.monotonic() - start < 30
    assert proc.returncode == 1, proc.stderr  # README: 1 when every file failed
    summary = json.loads(proc.stdout)
    assert summary["indexed"] == 0
    assert [(f["source"], f["reason"], f["state"]) for f in summary["failed"]] == [
        (name, "not-a-regular-file", "failed")]
    assert f"is {kind}, not a regular file" in summary["failed"][0]["detail"]


@posix_only
def test_sync_reports_a_fifo_and_indexes_the_rest(tmp_path):
    # Regression (issue 34): a FIFO in a synced folder was dropped without a word.
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.txt").write_text("Alpha report on the harbour crane.", encoding="utf-8")
    device_and_fifo(docs)
    kb = bm25_kb(tmp_path / "base", "safe", (docs,))
    summary = ingest.sync(kb)
    assert sorted((s["name"], s["reason"]) for s in summary.skipped) == [
        ("docs/f.txt", "not-a-regular-file"), ("docs/z.txt", "outside-folder")]
    assert summary.failed == [] and list(indexed_text(kb)) == ["docs/a.txt"]


@posix_only
def test_a_fifo_without_a_suffix_is_no_code_and_blocks_no_sync(tmp_path):
    # Regression (issue 45): a file with no suffix is opened for its `#!` line; a FIFO named
    # `pipe` waited in that open() for a writer for ever, and the sync with it.
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.txt").write_text("Alpha report on the harbour crane.", encoding="utf-8")
    (docs / "deploy").write_text("#!/bin/sh\necho deployed\n", encoding="utf-8")
    os.mkfifo(docs / "pipe")
    kb = bm25_kb(tmp_path / "base", "safe", (docs,))

    def unblock_a_blocked_reader() -> None:  # so a regression fails instead of hanging
        try:
            os.close(os.open(docs / "pipe", os.O_WRONLY | os.O_NONBLOCK))
        except OSError:  # ENXIO: no reader is waiting, as it should be
            pass

    timer = threading.Timer(10, unblock_a_blocked_reader)
    timer.start()
    start = time.monotonic()
    summary = ingest.sync(kb)
    timer.cancel()
    assert time.monotonic() - start < 8
    assert [(s["reason"], s["examples"]) for s in summary.skipped] == [
        ("unsupported-format", ["docs/pipe"])]
    assert sorted(indexed_text(kb)) == ["docs/a.txt", "docs/deploy"]


@pytest.fixture
def hook():
    """Run a function between the callers' checks and the open (safeopen.before_open)."""
    def install(function):
        safeopen.before_open = function
    yield install
    safeopen.before_open = None


@posix_only
def test_a_file_turned_fifo_after_discovery_fails_without_blocking(tmp_path, hook):
    # Regression (issue 34): discovery saw a regular file; what was opened was not checked.
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.txt").write_text("Alpha report on the harbour crane.", encoding="utf-8")
    (docs / "b.txt").write_text("Bravo notes.", encoding="utf-8")
    kb = bm25_kb(tmp_path / "base", "safe", (docs,))

    def to_fifo(path: Path) -> None:
        if path.name == "b.txt":
            path.unlink()
            os.mkfifo(path)

    def unblock_a_blocked_reader() -> None:  # so a regression fails instead of hanging
        try:
            os.close(os.open(docs / "b.txt", os.O_WRONLY | os.O_NONBLOCK))
        except OSError:  # ENXIO: no reader is waiting, as it should be
            pass

    hook(to_fifo)
    timer = threading.Timer(20, unblock_a_blocked_reader)
    timer.start()
    start = time.monotonic()
    summary = ingest.sync(kb)
    timer.cancel()
    assert time.monotonic() - start < 15
    assert [(f["source"], f["reason"]) for f in summary.failed] == [
        ("docs/b.txt", "not-a-regular-file")]
    assert list(indexed_text(kb)) == ["docs/a.txt"]


def swap_setup(tmp_path: Path, monkeypatch) -> tuple[library.Library, Path, Path]:
    """ALLOWED/sub/secret.md (harmless) and OUTSIDE/secret.md (the secret), a cold library."""
    allowed, outside = tmp_path / "allowed", tmp_path / "outside"
    (allowed / "sub").mkdir(parents=True)
    outside.mkdir()
    (allowed / "sub" / "secret.md").write_text("Nothing to see here.", encoding="utf-8")
    (outside / "secret.md").write_text(SECRET, encoding="utf-8")
    bm25_kb(tmp_path / "base", "safe")
    monkeypatch.setenv(library.ALLOWED_DIRS_ENV, str(allowed))
    return library.Library(tmp_path / "base"), allowed, outside


def test_a_link_swapped_in_after_the_check_is_never_read(tmp_path, monkeypatch, hook):
    # Regression (issue 34): ingest_file(ALLOWED/sub/secret.md), with `sub` replaced by a link
    # to an outside folder after the path was checked, indexed the outside file.
    lib, allowed, outside = swap_setup(tmp_path, monkeypatch)

    def swap(path: Path) -> None:
        shutil.rmtree(allowed / "sub")
        try:
            (allowed / "sub").symlink_to(outside, target_is_directory=True)
        except OSError as err:  # Windows without developer mode
            pytest.skip(f"this platform cannot create symlinks here: {err}")

    hook(swap)
    summary = lib.ingest_file(str(allowed / "sub" / "secret.md"), None, "safe")
    assert [(f["source"], f["reason"]) for f in summary["failed"]] == [
        ("secret.md", "outside-folder")]
    kb = kbmod.load(tmp_path / "base", "safe")
    assert indexed_text(kb) == {}
    conn = fulltext.connect(kb.fulltext_path, readonly=True)
    try:
        assert exact.exact_search(conn, "4711", 10) == []
    finally:
        conn.close()


def test_a_hard_link_inside_an_allowed_folder_counts_as_inside(tmp_path, monkeypatch):
    # Decision (issue 34): a hard link is a name inside the folder for the same bytes, as a
    # copy would be; making one takes write access there. It is read, under its inside path.
    lib, allowed, outside = swap_setup(tmp_path, monkeypatch)
    try:
        os.link(outside / "secret.md", allowed / "linked.md")
    except OSError as err:
        pytest.skip(f"this file system has no hard links: {err}")
    summary = lib.ingest_file(str(allowed / "linked.md"), None, "safe")
    assert summary["indexed"] == 1 and summary["failed"] == []
    kb = kbmod.load(tmp_path / "base", "safe")
    assert indexed_text(kb) == {"linked.md": SECRET}
    conn = fulltext.connect(kb.fulltext_path, readonly=True)
    try:
        row = fulltext.source_row(conn, "linked.md")
        assert row["path"] == str((allowed / "linked.md").resolve())
    finally:
        conn.close()


def test_bytes_past_the_bound_are_never_read_whatever_stat_said(tmp_path):
    # Regression (issue 34): the size bound was stat's word only; a file that grows (or a
    # size stat does not know) was read to its end.
    path = tmp_path / "grows.txt"
    path.write_bytes(b"x" * 5000)
    with safeopen.open_document(path) as opened:
        with pytest.raises(safeopen.OverLimit):
            safeopen.sha256(opened, 4096)
        assert opened.file.tell() == 4097  # one byte past the bound, then it stopped
        assert safeopen.sha256(opened, 5000) == paths.file_sha256(path)
