"""The indexing pipeline end to end: real files, real SQLite, real Chroma, real processes."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import shared_path

import chroma_store
import fulltext
import ingest
import kb as kbmod
from common.pidlock import LockBusy
from index import segment, states
from pipeline.indexer import EMBED_BATCH, PAUSE_ENV, UPSERT_BATCH, Indexer, Summary

REPO = Path(__file__).resolve().parent.parent


def run_cli(*args: str, base: Path, env_extra: dict | None = None) -> dict:
    env = {**_clean_env(), **(env_extra or {})}
    proc = subprocess.run([sys.executable, str(REPO / "ingest.py"), *args, "--base-path",
                           str(base), "--quiet"], capture_output=True, text=True,
                          encoding="utf-8", env=env, timeout=600)
    assert proc.returncode in (0, 1), proc.stderr
    return json.loads(proc.stdout)


def _clean_env() -> dict:
    import os

    return {k: v for k, v in os.environ.items() if k not in (PAUSE_ENV, "LINECITE_HOME")}


def paragraph(i: int) -> str:
    return (f"Section {i}. The deployment of service {i} follows the plan agreed in meeting "
            f"{i}; owners review latency, error budgets and rollback steps before release. ")


def write_text(path: Path, n_paragraphs: int, pages: int = 1) -> Path:
    per_page = max(1, n_paragraphs // pages)
    body = "\f".join("\n".join(paragraph(p * per_page + i) * 2 for i in range(per_page))
                     for p in range(pages))
    path.write_text(body, encoding="utf-8")
    return path


def open_kb(base: Path, kb_id: str = "default"):
    kb = kbmod.load(base, kb_id)
    conn = fulltext.connect(kb.fulltext_path, readonly=True)
    store = chroma_store.ChromaStore(kb.folder, kb.id, chroma_store.embedder_for(None))
    return kb, conn, store


def assert_stores_agree(base: Path) -> None:
    """Every chunk is in SQLite once, embedded, and Chroma holds exactly those ids."""
    _, conn, store = open_kb(base)
    try:
        rows = conn.execute("SELECT chunk_id, embed_state FROM chunks").fetchall()
        ids = [r[0] for r in rows]
        assert len(ids) == len(set(ids)) > 0
        assert {r[1] for r in rows} == {"indexed"}
        assert store.all_ids() == set(ids)
        assert store.count() == len(ids)
        assert conn.execute("SELECT count(*) FROM chroma_tombstones").fetchone()[0] == 0
        assert {r[0] for r in conn.execute("SELECT state FROM sources")} == {"ready"}
    finally:
        conn.close()
        store.close()


def test_cli_indexes_then_skips_unchanged_then_reembeds_only_changed_chunks(tmp_path):
    doc = write_text(tmp_path / "plan.txt", 24, pages=2)
    first = run_cli(str(doc), base=tmp_path / "base")
    assert (first["kb"], first["sources"], first["indexed"], first["pages"]) == ("default", 1, 1, 2)
    assert first["chunks"] > 4 and first["embedded"] == first["chunks"]
    assert first["fulltext"]["lines"] == first["lines"] and first["failed"] == []
    assert (tmp_path / "base" / "default" / "config.json").is_file()

    again = run_cli(str(doc), base=tmp_path / "base")
    assert (again["indexed"], again["unchanged"], again["embedded"]) == (0, 1, 0)

    lines = doc.read_text(encoding="utf-8").split("\n")
    lines[-1] = "A new closing sentence about the rollback window."  # last line of page 2
    doc.write_text("\n".join(lines), encoding="utf-8")
    changed = run_cli(str(doc), base=tmp_path / "base")
    assert changed["indexed"] == 1
    assert 1 <= changed["embedded"] < first["chunks"] / 2
    assert_stores_agree(tmp_path / "base")


def test_source_name_and_kb_are_honoured(tmp_path):
    doc = write_text(tmp_path / "x.txt", 2)
    out = run_cli(str(doc), "Meeting notes", "--kb", "notes", base=tmp_path)
    assert out["kb"] == "notes"
    conn = fulltext.connect(tmp_path / "notes" / fulltext.FILENAME, readonly=True)
    assert [r[0] for r in conn.execute("SELECT name FROM sources")] == ["Meeting notes"]
    conn.close()


@pytest.mark.parametrize("stage", ["after-commit", "mid-embedding", "mid-upsert"])
def test_kill_9_at_any_stage_then_next_run_finishes_without_reextracting(tmp_path, stage):
    doc = write_text(tmp_path / "big.txt", 120, pages=3)  # more than one embedding batch
    base = tmp_path / "base"
    env = {**_clean_env(), PAUSE_ENV: stage}
    proc = subprocess.Popen([sys.executable, str(REPO / "ingest.py"), str(doc), "--base-path",
                             str(base), "--quiet"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, encoding="utf-8", env=env)
    try:
        for line in proc.stderr:
            if f"paused at {stage}" in line:
                break
        else:
            pytest.fail(f"ingest never reached {stage}")
    finally:
        proc.kill()  # SIGKILL on POSIX, TerminateProcess on Windows: no cleanup runs
        proc.wait(timeout=30)
    assert (base / "default" / ".writer.lock").exists()  # the dead writer's lock is left behind

    resumed = run_cli(str(doc), base=base)
    assert (resumed["indexed"], resumed["unchanged"]) == (0, 1)  # not extracted again
    assert resumed["embedded"] > 0
    assert resumed["fulltext"]["pending"] == 0
    assert_stores_agree(base)


def test_a_chunk_the_embedder_rejects_is_isolated_and_the_rest_are_indexed(tmp_path, monkeypatch):
    doc = tmp_path / "mixed.txt"
    doc.write_text("\n\n".join(paragraph(i) * 4 for i in range(12)).replace(
        "Section 5.", "POISON Section 5."), encoding="utf-8")
    real_embed = chroma_store.ChromaStore.embed

    def picky_embed(self, texts):
        if any("POISON" in t for t in texts):
            raise ValueError("this text cannot be embedded")
        return real_embed(self, texts)

    monkeypatch.setattr(chroma_store.ChromaStore, "embed", picky_embed)
    kb = kbmod.open_or_create(tmp_path / "base", "default")
    summary = ingest.ingest(kb, [doc])
    conn = fulltext.connect(kb.fulltext_path, readonly=True)
    states = dict(conn.execute("SELECT embed_state, count(*) FROM chunks GROUP BY 1").fetchall())
    failed = conn.execute("SELECT text, embed_error FROM chunks WHERE embed_state = 'failed'"
                          ).fetchall()
    source = fulltext.source_row(conn, "mixed.txt")
    conn.close()
    assert states["failed"] == len(failed) >= 1 and all("POISON" in r[0] for r in failed)
    assert "cannot be embedded" in failed[0][1]
    assert states["indexed"] == summary.embedded > 5
    assert source["state"] == "degraded"


@pytest.mark.parametrize("quick", [True, False])
def test_chroma_upserts_grow_to_large_batches_while_the_embedder_is_quick(tmp_path, monkeypatch,
                                                                          quick):
    # Chroma writes far faster in large batches (issue 16: 467 chunks/s at 32, 633 at 1,000);
    # batches start at the embedder's size and grow only while each takes under
    # UPSERT_SECONDS, so a crash loses little work with a slow embedder.
    monkeypatch.setattr("pipeline.indexer.UPSERT_SECONDS", 1e9 if quick else 0.0)
    sizes: list[int] = []
    real_upsert = chroma_store.ChromaStore.upsert

    def counted(self, ids, embeddings, metadatas):
        sizes.append(len(ids))
        return real_upsert(self, ids, embeddings, metadatas)

    monkeypatch.setattr(chroma_store.ChromaStore, "upsert", counted)
    doc = tmp_path / "many.txt"
    doc.write_text("\n\n".join(f"Note {i}: the {i}th harbour crane was inspected." * 30
                               for i in range(300)), encoding="utf-8")
    kb = kbmod.open_or_create(tmp_path / "base", "default")
    summary = ingest.ingest(kb, [doc])
    assert summary.embedded == sum(sizes) >= 300
    if quick:
        assert sizes[:4] == [32, 64, 128, 256] and max(sizes) <= UPSERT_BATCH
    else:
        assert max(sizes) == EMBED_BATCH


def test_bad_inputs_fail_with_reasons_and_leave_indexed_sources_alone(tmp_path):
    base = tmp_path / "base"
    good = write_text(tmp_path / "good.txt", 6)
    run_cli(str(good), base=base)
    _, conn, _ = open_kb(base)
    before = conn.execute("SELECT chunk_id, text FROM chunks ORDER BY chunk_id").fetchall()
    conn.close()

    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "binary.txt").write_bytes(bytes(range(256)) * 64)
    (bad / "empty.txt").write_bytes(b"")
    (bad / "fake.pdf").write_bytes(b"this is not a pdf at all")
    (bad / "fine.md").write_text("# Title\n\nA fine note.", encoding="utf-8")
    out = run_cli(str(bad), base=base)
    reasons = {f["source"]: f["reason"] for f in out["failed"]}
    assert reasons == {"bad/fake.pdf": "corrupt"}
    assert [(f["source"], f["state"]) for f in out["empty"]] == [("bad/empty.txt", "empty")]
    binary = [s for s in out["skipped"] if s["reason"] == "binary"]  # by content, never read
    assert [(s["files"], s["examples"]) for s in binary] == [(1, ["bad/binary.txt"])]
    assert out["indexed"] == 1

    _, conn, _ = open_kb(base)
    after = conn.execute("SELECT c.chunk_id, c.text FROM chunks c JOIN sources s "
                         "ON s.id = c.source_id WHERE s.name = 'good.txt' ORDER BY 1").fetchall()
    states = dict(conn.execute("SELECT name, state FROM sources").fetchall())
    conn.close()
    assert [tuple(r) for r in after] == [tuple(r) for r in before]
    assert states["bad/fake.pdf"] == "failed" and states["good.txt"] == "ready"


def test_hostile_pdfs_from_the_corpus_each_end_indexed_or_failed(tmp_path):
    edge = shared_path("corpus", "pdf", "edge")
    folder = tmp_path / "edge"
    shutil.copytree(edge, folder)
    kb = kbmod.open_or_create(tmp_path / "base", "default")
    summary = ingest.ingest(kb, [folder])
    names = {p.name for p in edge.iterdir() if p.suffix == ".pdf"}
    assert summary.sources == len(names)
    failed = {Path(f["source"]).name: f["reason"]
              for f in summary.failed + summary.needs_action}  # password-protected: fixable
    assert failed["password-protected.pdf"] == "password-protected"
    assert failed["libreoffice-writer-password.pdf"] == "password-protected"
    assert "copy-protected.pdf" not in failed  # empty user password: opens
    assert summary.indexed + len(failed) + len(summary.empty) == len(names)
    assert {Path(f["source"]).name for f in summary.empty} >= {"empty.pdf"}  # 0 bytes


def _chunks_match_lines(conn) -> int:
    rows = conn.execute("SELECT s.name, c.page, c.line_start, c.line_end, c.text FROM chunks c "
                        "JOIN sources s ON s.id = c.source_id").fetchall()
    for name, page, start, end, text in rows:
        lines = [t for _, t in fulltext.page_lines(conn, name, page, start, end)]
        if start == end and text != lines[0]:
            assert text in lines[0]  # a piece of an over-long line
        else:
            assert text == "\n".join(lines), (name, page, start, end)
    return len(rows)


@pytest.mark.slow
@pytest.mark.parametrize("relative", ["pdf/en/tracemonkey.pdf", "pdf/ko/pcasm-book-korean.pdf",
                                      "pdf/zh/mineru_chemistry_introduction_zh.pdf",
                                      "txt/ko/appendix-keywords-CP949.txt"])
def test_every_chunk_equals_its_lines_on_real_documents(tmp_path, relative):
    path = shared_path("corpus", *relative.split("/"))
    kb = kbmod.open_or_create(tmp_path, "default")
    indexer = Indexer(kb)
    try:
        summary = Summary(kb=kb.id)
        indexer.index_file(path, path.name, summary)  # extraction and commit; no embedding
        assert summary.indexed == 1, summary.failed
        assert _chunks_match_lines(indexer.conn) > 0
    finally:
        indexer.close()


def test_korean_noun_and_chinese_compound_are_found_by_bm25(tmp_path):
    doc = tmp_path / "mixed.txt"
    doc.write_text("다음 주에 새 버전을 배포합니다.\n\f我们研究人工智能技术的发展。\n\f"
                   "Nothing here.", encoding="utf-8")
    kb = kbmod.open_or_create(tmp_path, "default")
    summary = ingest.ingest(kb, [doc])
    assert summary.indexed == 1
    conn = fulltext.connect(kb.fulltext_path, readonly=True)
    found = lambda q: [(r["page"], r["line_start"])  # noqa: E731
                       for r, _ in fulltext.bm25_search(conn, segment.tokens(q), 5)]
    assert found("배포") == [(1, 1)]
    assert found("人工智能") == [(2, 1)]
    conn.close()


def test_second_writer_is_refused_while_the_first_holds_the_kb(tmp_path):
    kb = kbmod.open_or_create(tmp_path, "default")
    first = Indexer(kb)
    try:
        with pytest.raises(LockBusy, match="indexing of KB 'default'"):
            Indexer(kb)
    finally:
        first.close()
    Indexer(kb).close()  # free again once released


def test_tokens_from_another_segmenter_are_redone_without_extracting_or_embedding(tmp_path):
    import library

    doc = write_text(tmp_path / "plan.txt", 6)
    base = tmp_path / "base"
    run_cli(str(doc), base=base)
    kb = kbmod.load(base, "default")
    conn = fulltext.connect(kb.fulltext_path)
    assert fulltext.get_meta(conn, fulltext.SEGMENTER_KEY) == segment.signature()
    assert fulltext.bm25_search(conn, segment.query_tokens("deployment"), 5)
    # what an upgraded kiwipiepy or a rule change leaves: tokens the queries no longer make
    fulltext.replace_tokens(conn, {r[0]: "stale" for r in conn.execute("SELECT id FROM chunks")})
    fulltext.set_meta(conn, fulltext.SEGMENTER_KEY, "segment rules 0; kiwipiepy 0.1")
    conn.close()
    lib = library.Library(base)
    assert "re-tokenizes" in lib.get_index_info("default")["warnings"][0]
    lib.close()

    again = run_cli(str(doc), base=base)
    assert (again["unchanged"], again["indexed"], again["embedded"]) == (1, 0, 0)
    conn = fulltext.connect(kb.fulltext_path)
    assert fulltext.get_meta(conn, fulltext.SEGMENTER_KEY) == segment.signature()
    assert fulltext.bm25_search(conn, ["stale"], 5) == []
    found = fulltext.bm25_search(conn, segment.query_tokens("rollback steps"), 5)
    assert found and all("rollback" in row["text"] for row, _ in found)
    conn.execute("INSERT INTO chunks_fts(chunks_fts) VALUES ('integrity-check')")
    conn.close()
    assert_stores_agree(base)
    lib = library.Library(base)
    assert "warnings" not in lib.get_index_info("default")
    lib.close()


def test_a_store_that_lost_vectors_is_reported_and_failed_chunks_are_not_counted(tmp_path):
    # vector_problem counts settled chunks from FTS5's totals (issue 16: no scan of every chunk
    # row); failed chunks must not make a whole store look short, lost vectors must
    from library import Library

    base = tmp_path / "base"
    run_cli(str(write_text(tmp_path / "big.txt", 60, pages=2)), base=base)
    kb, conn, store = open_kb(base)
    ids = sorted(states.indexed_chunk_ids(conn))
    conn.close()
    writer = fulltext.connect(kb.fulltext_path)
    states.set_embed_state(writer, ids[:2], "failed", "test: rejected by the embedder")
    writer.close()
    store.delete(ids[:2])  # a failed chunk has no vector
    store.close()
    library = Library(base)
    try:
        assert "warnings" not in library.get_index_info("default")
        store = chroma_store.ChromaStore(kb.folder, kb.id, chroma_store.embedder_for(None))
        store.delete(ids[2:5])
        store.close()
        writer = fulltext.connect(kb.fulltext_path)  # a commit: the server looks again
        fulltext.set_meta(writer, "touched", "1")
        writer.close()
        warnings = library.get_index_info("default").get("warnings", [])
        held, embedded = len(ids) - 5, len(ids) - 2
        assert any(f"holds {held:,} vectors but {embedded:,} chunks were embedded" in w
                   for w in warnings), warnings
    finally:
        library.close()


# ------------------------------------------------------- issue 49: wrong paths, removal, empty
def linecite(*args: str, base: Path) -> subprocess.CompletedProcess:
    """`linecite ARGS` as a user types it (cli.py, this Python), under `base`."""
    return subprocess.run([sys.executable, str(REPO / "cli.py"), *args, "--base-path",
                           str(base), "--quiet"], capture_output=True, text=True,
                          encoding="utf-8", env=_clean_env(), timeout=300)


def index_snapshot(base: Path, kb_id: str = "default") -> dict:
    """What a KB holds, ids and row numbers aside: its sources, lines and chunks in SQLite
    and the ids Chroma has vectors for; two indexes of the same files compare equal."""
    kb = kbmod.load(base, kb_id)
    conn = fulltext.connect(kb.fulltext_path, readonly=True)
    store = chroma_store.ChromaStore(kb.folder, kb.id, chroma_store.embedder_for(None))
    try:
        return {
            "sources": conn.execute("SELECT name, sha256, size, parser, state, error, pages,"
                                    " warnings FROM sources ORDER BY name").fetchall(),
            "lines": conn.execute("SELECT s.name, l.page, l.line, l.text FROM lines l JOIN"
                                  " sources s ON s.id = l.source_id ORDER BY 1, 2, 3").fetchall(),
            "chunks": conn.execute("SELECT chunk_id, text, tokens, embed_state FROM chunks"
                                   " ORDER BY chunk_id").fetchall(),
            "tombstones": conn.execute("SELECT * FROM chroma_tombstones").fetchall(),
            "vectors": sorted(store.all_ids()),
        }
    finally:
        conn.close()
        store.close()


def fresh_index(tmp_path: Path, files: dict[str, str]) -> dict:
    """index_snapshot of a new KB following a folder `docs` that holds just `files`."""
    docs = tmp_path / "fresh" / "docs"
    docs.mkdir(parents=True)
    for name, text in files.items():
        (docs / name).write_text(text, encoding="utf-8")
    run_cli(str(docs), base=tmp_path / "fresh-base")
    return index_snapshot(tmp_path / "fresh-base")


def test_a_path_that_does_not_exist_is_refused_and_nothing_is_added(tmp_path):
    # issue 49 item 1: `linecite ingest ~/Documents/reports`, a folder that was not there,
    # exited 1 and left a source `reports`, failed for ever, in KB `default`
    base = tmp_path / "base"
    missing = tmp_path / "Documents" / "reports"
    done = linecite("ingest", str(missing), base=base)
    assert done.returncode == 2, done.stderr
    assert done.stdout == "" and done.stderr.count("\n") == 1, done.stderr
    assert str(missing) in done.stderr and "does not exist: check the path" in done.stderr
    assert "offline" in done.stderr and "nothing was added" in done.stderr
    assert not base.exists()  # no KB made for it

    docs = tmp_path / "docs"
    docs.mkdir()
    write_text(docs / "plan.txt", 4)
    run_cli(str(docs), base=base)
    config = (base / "default" / "config.json").read_bytes()
    before = index_snapshot(base)
    for args in ([str(missing)], [str(missing), "--once"], [str(docs / "gone.pdf"), "Gone"]):
        assert linecite("ingest", *args, base=base).returncode == 2
    assert (base / "default" / "config.json").read_bytes() == config  # no folder followed
    assert index_snapshot(base) == before  # no source row


def test_ingest_file_of_a_path_that_does_not_exist_adds_nothing(tmp_path, monkeypatch):
    # issue 49 item 1, the tool's side: a clear error, and no KB or source made
    from common.limits import UserError
    from library import ALLOWED_DIRS_ENV, Library

    monkeypatch.setenv(ALLOWED_DIRS_ENV, str(tmp_path))
    library = Library(tmp_path / "base")
    try:
        with pytest.raises(UserError, match="does not exist; check the path"):
            library.ingest_file(str(tmp_path / "reports"), None, None)
    finally:
        library.close()
    assert not (tmp_path / "base").exists()


def test_remove_a_source_leaves_what_a_fresh_index_of_the_rest_holds(tmp_path):
    # issue 49 item 1: no command removed one source; only a rebuild could
    files = {"alpha.txt": "Alpha notes on the harbour crane schedule.\n",
             "bravo.txt": "Bravo notes on the zeppelin hangar budget.\n",
             "charlie.txt": "Charlie notes on the lighthouse repairs.\n"}
    docs = tmp_path / "docs"
    docs.mkdir()
    for name, text in files.items():
        (docs / name).write_text(text, encoding="utf-8")
    base = tmp_path / "base"
    run_cli(str(docs), base=base)

    done = linecite("remove", "docs/bravo.txt", base=base)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["deleted"] == 1 and out["failed"] == []
    # still in the followed folder: the user is told it comes back, and how to keep it out
    (warning,) = out["warnings"]
    assert warning["source"] == "docs/bravo.txt"
    assert "the next sync indexes it again" in warning["warning"]
    assert "stop following the folder" in warning["warning"]
    without_bravo = {k: v for k, v in files.items() if k != "bravo.txt"}
    assert index_snapshot(base) == fresh_index(tmp_path, without_bravo)

    from library import Library
    from ranking.request import SearchRequest

    library = Library(base)
    try:
        names = [s["name"] for s in library.list_sources("default")["sources"]]
        assert names == ["docs/alpha.txt", "docs/charlie.txt"]
        for mode in ("auto", "exact"):
            found = library.search(SearchRequest.checked("zeppelin hangar", 5, mode, "default"))
            assert "docs/bravo.txt" not in {hit["source"] for hit in found["hits"]}, mode
        assert found["hits"] == []  # exact: the words are nowhere now
    finally:
        library.close()

    # by its file's path too, and a name that is no source is refused, changing nothing
    done = linecite("remove", str(docs / "charlie.txt"), base=base)
    assert done.returncode == 0 and json.loads(done.stdout)["deleted"] == 1, done.stderr
    before = index_snapshot(base)
    done = linecite("remove", "docs/charly.txt", base=base)
    assert done.returncode == 2 and "no source 'docs/charly.txt'" in done.stderr, done.stderr
    assert "lists every source's exact name" in done.stderr
    listed = linecite("remove", "--list", base=base)  # what to give it, from the shell
    assert listed.returncode == 0 and listed.stdout.splitlines() == ["docs/alpha.txt\tready"]
    helped = linecite("remove", "--help", base=base)
    assert helped.returncode == 0 and "Drop one source" in helped.stdout
    assert "--rebuild" not in helped.stdout  # not the ingest command's options
    assert index_snapshot(base) == before


def test_empty_files_are_listed_as_empty_not_failed_and_not_read_again(tmp_path):
    # issue 49 item 2: an empty tests/__init__.py was `failed`, tried again on every run,
    # and every sync of a Python repository exited 1
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "__init__.py").write_bytes(b"")
    (docs / "blank.md").write_text("  \n\n\t\n", encoding="utf-8")
    (docs / "crane.md").write_text("The harbour crane runs at dawn.\n", encoding="utf-8")
    base = tmp_path / "base"
    first = ingest_cli_ok(str(docs), base=base)
    assert first["failed"] == [] and first["indexed"] == 1
    assert {(f["source"], f["state"]) for f in first["empty"]} == {
        ("docs/__init__.py", "empty"), ("docs/blank.md", "empty")}
    library_states = dict(fulltext.connect(base / "default" / fulltext.FILENAME, readonly=True)
                          .execute("SELECT name, state FROM sources").fetchall())
    assert library_states == {"docs/__init__.py": "empty", "docs/blank.md": "empty",
                              "docs/crane.md": "ready"}

    again = ingest_cli_ok("--kb", "default", base=base)  # a sync: nothing is read again
    assert (again["sources"], again["unchanged"], again["indexed"]) == (3, 3, 0)
    assert again["empty"] == [] and again["failed"] == []

    (docs / "__init__.py").write_text("HARBOUR_CRANES = 4\n", encoding="utf-8")
    (docs / "crane.md").write_bytes(b"")  # had text: its chunks and vectors must go
    third = ingest_cli_ok("--kb", "default", base=base)
    assert third["indexed"] == 1 and [f["source"] for f in third["empty"]] == ["docs/crane.md"]
    assert index_snapshot(base) == fresh_index(tmp_path, {
        "__init__.py": "HARBOUR_CRANES = 4\n", "blank.md": "  \n\n\t\n", "crane.md": ""})


def test_the_first_sync_after_ingest_of_a_folder_of_code_reads_nothing_again(tmp_path):
    # issue 49 "first day": `linecite ingest FOLDER` recorded no code-chunker version
    # (codechunks.VERSION; only the sync did), so the first sync after it took every code
    # file for one cut by an older chunker and read and cut the whole repository again
    repo = tmp_path / "repo"
    (repo / "harbour").mkdir(parents=True)
    (repo / "harbour" / "cranes.py").write_text(
        "def lift(load):\n    \"\"\"Lift a load at dawn.\"\"\"\n    return load * 2\n",
        encoding="utf-8")
    (repo / "harbour" / "tides.py").write_text(
        "class Tide:\n    def height(self):\n        return 3\n", encoding="utf-8")
    (repo / "README.md").write_text("# Harbour\n\nCranes lift at dawn.\n", encoding="utf-8")
    base = tmp_path / "base"
    first = ingest_cli_ok(str(repo), base=base)
    assert (first["indexed"], first["failed"]) == (3, [])
    conn = fulltext.connect(base / "default" / fulltext.FILENAME, readonly=True)
    try:
        parsers = dict(conn.execute("SELECT name, parser FROM sources").fetchall())
    finally:
        conn.close()
    assert parsers["repo/harbour/cranes.py"] == parsers["repo/harbour/tides.py"] == \
        "code:python+tree-sitter"

    again = ingest_cli_ok("--kb", "default", base=base)  # the sync the watcher would run
    assert (again["sources"], again["unchanged"], again["indexed"]) == (3, 3, 0)
    assert (again["chunks"], again["embedded"]) == (0, 0)


def ingest_cli_ok(*args: str, base: Path) -> dict:
    """ingest.py's summary, the run having exited 0."""
    proc = subprocess.run([sys.executable, str(REPO / "ingest.py"), *args, "--base-path",
                           str(base), "--quiet"], capture_output=True, text=True,
                          encoding="utf-8", env=_clean_env(), timeout=300)
    assert proc.returncode == 0, (proc.stderr, proc.stdout)
    return json.loads(proc.stdout)
