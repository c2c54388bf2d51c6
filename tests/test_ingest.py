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
    assert reasons == {"bad/empty.txt": "empty", "bad/fake.pdf": "corrupt"}
    binary = [s for s in out["skipped"] if s["reason"] == "binary"]  # by content, never read
    assert [(s["files"], s["examples"]) for s in binary] == [(1, ["bad/binary.txt"])]
    assert out["indexed"] == 1
    missing = run_cli(str(tmp_path / "nope.pdf"), base=base)
    assert [(f["source"], f["reason"]) for f in missing["failed"]] == [("nope.pdf", "not-found")]

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
    assert summary.indexed + len(failed) == len(names)


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
