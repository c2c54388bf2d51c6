"""One tool call reads one snapshot (issue 14): a search whose statements straddle an
ingest's commit must not pair a chunk of one version with the lines of another, nor
read_range a source's name with another version's lines (issue 45)."""

import threading
from pathlib import Path

import chunking
import fulltext
import kb as kbmod
import library
from index import segment, states
from library import Library
from ranking.request import SearchRequest

VERSIONS = {  # the same source, two versions of different lengths sharing the word "shared"
    "a": ["shared alpha line", "alpha second line"],
    "b": ["shared beta line", "beta second line", "beta third line", "beta fourth line"],
}


def replace(conn, version: str) -> None:
    lines = VERSIONS[version]
    chunks = chunking.chunk_pages("doc.txt", [lines], [set()], segment.tokens)
    src = fulltext.SourceFile("doc.txt", "/nowhere/doc.txt", version * 64, 1, 0.0)
    fulltext.replace_source(conn, src, "text", [lines], chunks)
    states.set_pending_indexed(conn)


def test_a_search_never_mixes_two_versions_of_a_source(tmp_path: Path):
    # regression: without a read transaction per call, about one search in a few hundred
    # paired version a's chunk with version b's lines while a writer replaced the source
    kb = kbmod.open_or_create(tmp_path, "snap")
    (kb.folder / "config.json").write_text('{"id": "snap", "embedding": {"provider": "none"}}',
                                           encoding="utf-8")
    writer = fulltext.connect(kb.fulltext_path)
    replace(writer, "a")
    ids = {v: chunking.chunk_id("doc.txt", 1, 1, "\n".join(lines))
           for v, lines in VERSIONS.items()}
    library = Library(tmp_path)
    stop = threading.Event()

    def write() -> None:
        version = "b"
        while not stop.is_set():
            replace(writer, version)
            version = "a" if version == "b" else "b"

    thread = threading.Thread(target=write)
    thread.start()
    mixed = []
    try:
        for _ in range(1500):
            for hit in library.search(SearchRequest.checked("shared", 5, "bm25"))["hits"]:
                version = "a" if hit["text"].startswith("shared alpha") else "b"
                if hit["chunk_id"] != ids[version] or \
                        hit["text"] != "\n".join(VERSIONS[version]):
                    mixed.append(hit)
    finally:
        stop.set()
        thread.join()
        library.close()
        writer.close()
    assert mixed == []


def test_read_range_finds_the_source_and_reads_its_lines_in_one_snapshot(tmp_path: Path,
                                                                         monkeypatch):
    # issue 45 (6c): read_range looked the source's name up in one read transaction and read
    # its lines in another, so a writer committing between the two gave the lines of a
    # version the look-up never saw (or none: a source deleted between them)
    kb = kbmod.open_or_create(tmp_path, "snap")
    (kb.folder / "config.json").write_text('{"id": "snap", "embedding": {"provider": "none"}}',
                                           encoding="utf-8")
    writer = fulltext.connect(kb.fulltext_path)
    replace(writer, "a")
    real = library.read_lines

    def after_a_write(entry, *args):  # the look-up is done: a writer replaces the source
        replace(writer, "b")
        return real(entry, *args)

    monkeypatch.setattr(library, "read_lines", after_a_write)
    served = Library(tmp_path)
    try:
        got = served.read_range("doc.txt", 1, 1, -1, 0, None)
    finally:
        served.close()
        writer.close()
    assert [line["text"] for line in got["lines"]] == VERSIONS["a"]
    assert got["page_lines"] == len(VERSIONS["a"])
