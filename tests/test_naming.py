"""One name for a file whichever way it arrives (issue 30 item 2): a file inside a followed
folder indexed on its own is named as folder sync names it, so a sync keeps it."""

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import bm25_kb, clean_env

import fulltext
import ingest
import kb as kbmod
from library import Library
from pipeline.indexer import writer_lock
from pipeline.rebuild import FilesHeld


@pytest.fixture
def synced(tmp_path) -> kbmod.KnowledgeBase:
    """A BM25 KB `notes` following docs/ of one file, synced once."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.txt").write_text("Alpha.\n", encoding="utf-8")
    kb = bm25_kb(tmp_path / "base", "notes", [docs])
    ingest.sync(kb)
    return kb


def test_a_file_in_a_followed_folder_keeps_its_name_through_a_sync(tmp_path):
    # issue 30: ingest_file named docs/news.txt `news.txt`; the next sync deleted and re-added it
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "news.txt").write_text("The harbour crane was inspected.\n", encoding="utf-8")
    kb = bm25_kb(tmp_path / "base", "notes", [docs])
    first = ingest.ingest(kb, [docs / "news.txt"])
    assert (first.indexed, first.sources) == (1, 1)
    conn = fulltext.connect(kb.fulltext_path, readonly=True)
    try:
        assert [s["name"] for s in fulltext.list_sources(conn)] == ["docs/news.txt"]
    finally:
        conn.close()
    changes = Library(tmp_path / "base").check_changes("notes")
    assert (changes["added"], changes["modified"], changes["deleted"]) == ([], [], [])
    again = ingest.sync(kb)
    assert (again.indexed, again.deleted, again.unchanged, again.sources) == (0, 0, 1, 1)


def test_rebuild_puts_everything_back_when_a_server_holds_a_file(synced, monkeypatch):
    # issue 31: on Windows the rename fails while a server holds the KB open; the index must
    # stay whole and the message say to stop the host
    kb = synced
    (kb.folder / "chroma").mkdir(exist_ok=True)
    real = Path.rename

    def held(self, target):
        if self.name == "chroma":  # after fulltext.sqlite3 has moved
            raise PermissionError(13, "The process cannot access the file because it is being "
                                  "used by another process", str(self), None, 32)
        return real(self, target)

    monkeypatch.setattr(Path, "rename", held)
    with pytest.raises(FilesHeld, match="quit the host.*nothing was changed"):
        ingest.rebuild(kb)
    monkeypatch.undo()
    names = {p.name for p in kb.folder.iterdir()}
    assert {"chroma", "fulltext.sqlite3"} <= names and not any(".damaged-" in n for n in names)
    assert ingest.sync(kb).unchanged == 1  # the index is whole: nothing to re-read
    assert writer_lock(kb, "probe").holder() is None  # the lock was let go


def test_a_second_writer_is_refused_between_moving_aside_and_rebuilding(synced, monkeypatch):
    # issue 31: rebuild let the writer lock go after moving the stores aside, so another
    # ingest.py could index into the half-moved KB
    kb = synced
    seen: dict = {}
    repo = Path(__file__).resolve().parent.parent

    def second_writer(kb_now):
        seen["moved"] = not kb_now.fulltext_path.exists()
        seen["other"] = subprocess.run(
            [sys.executable, str(repo / "ingest.py"), "--kb", kb.id, "--base-path",
             str(kb.folder.parent), "--quiet"], capture_output=True, text=True,
            encoding="utf-8", env=clean_env(), cwd=repo, timeout=120)

    monkeypatch.setattr("pipeline.rebuild._drop_server_collection", second_writer)
    summary = ingest.rebuild(kb)
    assert seen["moved"], "the probe ran after the stores were moved aside"
    other = seen["other"]
    assert other.returncode == 2 and "rebuild of KB 'notes'" in other.stderr, other.stderr
    assert summary.indexed == 1 and writer_lock(kb, "probe").holder() is None
