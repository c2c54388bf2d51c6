"""One name for a file whichever way it arrives (issue 30 item 2): a file inside a followed
folder indexed on its own is named as folder sync names it, so a sync keeps it."""

from pathlib import Path

import fulltext
import ingest
import kb as kbmod
from library import Library


def bm25_kb(base: Path, docs: Path) -> kbmod.KnowledgeBase:
    kb = kbmod.open_or_create(base, "notes")
    kb.embedding = {"provider": "none"}
    kbmod.follow(kb, docs)
    return kb


def test_a_file_in_a_followed_folder_keeps_its_name_through_a_sync(tmp_path):
    # issue 30: ingest_file named docs/news.txt `news.txt`; the next sync deleted and re-added it
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "news.txt").write_text("The harbour crane was inspected.\n", encoding="utf-8")
    kb = bm25_kb(tmp_path / "base", docs)
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
