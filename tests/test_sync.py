"""Folder sync: a KB follows its sourcePaths folders (new, changed, deleted files)."""

import json
import os
from pathlib import Path

import pytest

import chroma_store
import fulltext
import ingest
import kb as kbmod
from index import exact, states
from sources import folders

SKIPPED_BIN = [{"reason": "unsupported-format", "extension": ".bin", "files": 1,
                "examples": ["docs/skip.bin"]}]  # said, not silently dropped (issue 15)


def make_kb(tmp_path: Path, folders: list[Path]) -> kbmod.KnowledgeBase:
    kb = kbmod.open_or_create(tmp_path / "base", "docs")
    config = json.loads((kb.folder / "config.json").read_text(encoding="utf-8"))
    config["sourcePaths"] = [str(f) for f in folders]
    (kb.folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return kbmod.load(tmp_path / "base", "docs")


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def chroma_ids(kb) -> set[str]:
    store = chroma_store.ChromaStore(kb.folder, kb.id, chroma_store.embedder_for(None))
    try:
        return store.all_ids()
    finally:
        store.close()


def sqlite_ids(kb) -> set[str]:
    conn = fulltext.connect(kb.fulltext_path, readonly=True)
    try:
        return states.all_chunk_ids(conn)
    finally:
        conn.close()


def test_sync_adds_changes_and_deletes_files(tmp_path):
    docs = tmp_path / "docs"
    write(docs / "a.txt", "Alpha report on the harbour crane.")
    write(docs / "sub" / "b.md", "# Beta\nThe tide tables for March.")
    write(docs / "skip.bin", "not a document")
    kb = make_kb(tmp_path, [docs])
    first = ingest.sync(kb)
    assert (first.indexed, first.deleted, first.unchanged) == (2, 0, 0)
    assert chroma_ids(kb) == sqlite_ids(kb) != set()

    conn = fulltext.connect(kb.fulltext_path, readonly=True)
    assert folders.plan_sync(conn, kb).to_json() == {"added": [], "modified": [], "deleted": [],
                                                    "unchanged": 2, "retried": [],
                                                    "skipped": SKIPPED_BIN}
    write(docs / "a.txt", "Alpha report, revised: the crane was replaced.")
    (docs / "sub" / "b.md").unlink()
    write(docs / "c.txt", "Gamma notes.")
    os.utime(docs / "a.txt", (1, 1))  # a new mtime, whatever the clock's resolution
    assert folders.plan_sync(conn, kb).to_json() == {
        "added": ["docs/c.txt"], "modified": ["docs/a.txt"], "deleted": ["docs/sub/b.md"],
        "unchanged": 0, "retried": [], "skipped": SKIPPED_BIN}
    conn.close()

    second = ingest.sync(kb)
    assert (second.indexed, second.deleted) == (2, 1)
    conn = fulltext.connect(kb.fulltext_path, readonly=True)
    names = {s["name"] for s in fulltext.list_sources(conn)}
    tide = exact.exact_search(conn, "tide tables", 5)
    conn.close()
    assert names == {"docs/a.txt", "docs/c.txt"}
    assert tide == []
    assert chroma_ids(kb) == sqlite_ids(kb)  # the deleted file's vectors are gone too


def test_touched_but_identical_file_is_not_reindexed(tmp_path):
    docs = tmp_path / "docs"
    write(docs / "a.txt", "Same words.")
    kb = make_kb(tmp_path, [docs])
    ingest.sync(kb)
    os.utime(docs / "a.txt", (5, 5))
    again = ingest.sync(kb)
    assert (again.indexed, again.unchanged, again.embedded) == (0, 1, 0)


def test_embedding_scope_reembeds_every_chunk(tmp_path):
    docs = tmp_path / "docs"
    write(docs / "a.txt", "\n".join(f"Line {i} of the manual." for i in range(40)))
    kb = make_kb(tmp_path, [docs])
    first = ingest.sync(kb)
    redo = ingest.sync(kb, "embedding")
    assert redo.indexed == 0 and redo.embedded == first.embedded > 0
    assert chroma_ids(kb) == sqlite_ids(kb)


def test_cancel_stops_between_files(tmp_path):
    docs = tmp_path / "docs"
    for i in range(3):
        write(docs / f"{i}.txt", f"File number {i}.")
    kb = make_kb(tmp_path, [docs])
    calls = []

    def stop_after_one() -> bool:
        calls.append(1)
        return len(calls) > 1

    summary = ingest.sync(kb, should_stop=stop_after_one)
    assert summary.cancelled and summary.indexed == 1
    assert ingest.sync(kb).indexed == 2  # the rest on the next run


def test_sync_without_folders_says_how_to_add_them(tmp_path):
    kb = kbmod.open_or_create(tmp_path, "empty")
    with pytest.raises(kbmod.ConfigError, match="sourcePaths"):
        ingest.sync(kb)
    kb = make_kb(tmp_path, [tmp_path / "nowhere"])  # an offline share: unavailable, kept
    assert [s["reason"] for s in ingest.sync(kb).skipped] == ["unavailable"]


@pytest.mark.parametrize("config, field", [
    ({"sourcePaths": "C:/docs"}, "sourcePaths"),
    ({"embedding": "builtin"}, "embedding"),
    ({"embedding": {"provider": "word2vec"}}, "embedding.provider"),
    ({"id": "other"}, "id"),
    ({"chunking": 1000}, "chunking"),
])
def test_config_errors_name_the_field(tmp_path, config, field):
    folder = tmp_path / "kb1"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    with pytest.raises(kbmod.ConfigError, match=f"field '{field}'"):
        kbmod.load(tmp_path, "kb1")


def test_a_rename_only_by_case_replaces_the_source(tmp_path, monkeypatch):
    # regression (issue 18): on Windows and macOS `Report.txt` renamed to `report.txt` still
    # "exists" under its old name, so the old source was never deleted and both were served.
    # Simulated here: paths compare case-blind, and the old name still exists (as a folder).
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "Report.txt").write_text("quarterly tides\n", encoding="utf-8")
    kb = kbmod.open_or_create(tmp_path / "base", "case")
    kbmod.follow(kb, docs)
    ingest.sync(kb)
    (docs / "Report.txt").rename(docs / "report.txt")
    (docs / "Report.txt").mkdir()
    monkeypatch.setattr(folders.os.path, "normcase", lambda p: os.fspath(p).lower())
    conn = fulltext.connect(kb.fulltext_path, readonly=True)
    try:
        plan = folders.plan_sync(conn, kb).to_json()
    finally:
        conn.close()
    assert (plan["added"], plan["deleted"]) == (["docs/report.txt"], ["docs/Report.txt"])
