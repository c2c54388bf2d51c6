"""bm25.py scores every chunk from bm25_segments.py's arrays exactly as FTS5's bm25() does, through
every write path."""

import sqlite3

import numpy as np
import pytest
from conftest import shared_path
from test_bm25 import load_beir

import chunking
import fulltext
from common import limits
from index import bm25, bm25_segments, exact, fulltext_schema, segment


def add(conn, name: str, text: str) -> None:
    pages = [text.split("\n")]
    chunks = chunking.chunk_pages(name, pages, [set()], segment.tokens)
    fulltext.replace_source(conn, fulltext.SourceFile(name, f"/docs/{name}", name, 1, 1.0),
                            "test", pages, chunks)


def indexed(tmp_path, docs: list[tuple[str, str]]) -> sqlite3.Connection:
    """An index of these (name, text) documents with every chunk's postings written."""
    conn = fulltext.connect(tmp_path / fulltext.FILENAME)
    for name, text in docs:
        add(conn, name, text)
    bm25_segments.flush(conn, force=True)
    conn.commit()
    return conn


def fts5_scores(conn, tokens) -> dict[int, float]:
    match = fulltext.bm25_match(conn, tokens)
    if not match:
        return {}
    return dict(conn.execute("SELECT rowid, -bm25(chunks_fts) FROM chunks_fts"
                             " WHERE chunks_fts MATCH ?", (match,)).fetchall())


def assert_same_as_fts5(conn, queries: list[str]) -> int:
    """Every query's scores from the arrays equal FTS5's; returns how many chunks matched."""
    matched = 0
    for query in queries:
        tokens = segment.tokens(query)
        ours = bm25.scores(conn, tokens)
        assert ours is not None, "the arrays should answer when nothing is queued"
        want = fts5_scores(conn, tokens)
        assert set(ours) == set(want), query
        for rowid, score in want.items():
            assert ours[rowid] == pytest.approx(score, rel=1e-9)
        top = [r for r, _ in sorted(want.items(), key=lambda kv: (-kv[1], kv[0]))[:10]]
        assert [r for r, _ in ours.top(10)] == top
        matched += len(want)
    return matched


def assert_rowids_sorted(conn) -> None:
    """Each segment's chunks and each term's postings in rowid order, lo/hi their ends: a
    write that consulted lo/hi would miss a segment otherwise."""
    for lo, hi, blob in conn.execute("SELECT lo, hi, ids FROM bm25_segments"):
        ids = np.frombuffer(blob, bm25_segments.ID)
        assert (ids[0], ids[-1]) == (lo, hi) and np.all(np.diff(ids.astype(np.int64)) > 0)
    for (blob,) in conn.execute("SELECT ids FROM bm25_postings"):
        assert np.all(np.diff(np.frombuffer(blob, bm25_segments.ID).astype(np.int64)) > 0)


@pytest.fixture
def beir_texts():
    docs, queries = [], []
    for corpus in (("en", "beir-scifact"), ("ko", "autorag-allganize-ko", "beir"),
                   ("zh", "cmrc2018-dev", "beir")):
        d, q = load_beir(shared_path("eval", *corpus), 60, 15)
        docs += [(doc["_id"], f"{doc.get('title', '')}\n{doc['text']}".strip()) for doc in d]
        queries += q
    return docs, queries


@pytest.mark.parametrize("flush_min", [1, bm25_segments.FLUSH_MIN])
def test_scores_equal_fts5_through_adds_changes_deletes_retokens_and_merges(
        tmp_path, monkeypatch, beir_texts, flush_min):
    # small tiers, so a few hundred chunks go through many merges with dead postings in them;
    # with the real FLUSH_MIN some chunks also wait in the queue, read from their tokens
    monkeypatch.setattr(bm25_segments, "FANOUT", 2)
    monkeypatch.setattr(bm25_segments, "FLUSH_BATCH", 7)
    monkeypatch.setattr(bm25_segments, "FLUSH_MIN", flush_min)
    docs, queries = beir_texts
    conn = fulltext.connect(tmp_path / fulltext.FILENAME)
    for name, text in docs:
        add(conn, name, text)
    assert assert_same_as_fts5(conn, queries) > 100
    for name, text in docs[::3]:  # changed files: their old postings must stop counting
        add(conn, name, text[len(text) // 2:] + "\nunusualword")
    for name, _ in docs[1::5]:
        fulltext.delete_source(conn, name)
    # every other chunk re-tokenized: its new postings interleave with its neighbours' old
    # ones, so merges must sort (rowids apart, they join the arrays)
    rowids = [r[0] for r in conn.execute("SELECT id FROM chunks ORDER BY id LIMIT 40")][::2]
    fulltext.replace_tokens(conn, {rowid: "retokenized unusualword" for rowid in rowids})
    queued = conn.execute("SELECT count(*) FROM bm25_queue").fetchone()[0]
    assert queued < flush_min and (queued > 0) == (flush_min > 1)
    assert 1 < conn.execute("SELECT count(*) FROM bm25_segments").fetchone()[0] < len(docs)
    assert assert_same_as_fts5(conn, queries + ["unusualword retokenized"]) > 100
    assert_rowids_sorted(conn)
    live = conn.execute("SELECT count(*) FROM chunks").fetchone()[0]
    assert len(bm25.scores(conn, ["unusualword"])) == len(rowids) + sum(
        1 for name, _ in docs[::3] if name not in {n for n, _ in docs[1::5]})
    reader = fulltext.connect(tmp_path / fulltext.FILENAME, readonly=True)
    assert assert_same_as_fts5(reader, queries) > 100  # a new reader builds its own figures
    assert fulltext.fts_totals(reader)[0] == live
    with conn:  # every segment merged into one: the re-tokenized rowids interleave
        bm25_segments._merge(conn, [r[0] for r in conn.execute("SELECT seg FROM bm25_segments")])
        bm25_segments.new_generation(conn)
    assert conn.execute("SELECT count(*) FROM bm25_segments").fetchone()[0] == 1
    assert assert_same_as_fts5(conn, queries + ["unusualword retokenized"]) > 100
    assert_rowids_sorted(conn)


def test_chunks_a_writer_left_queued_count_at_once_and_too_many_fall_back_to_fts5(
        tmp_path, monkeypatch):
    # a writer that committed chunks without a flush (fewer than FLUSH_MIN, a crash, an older
    # linecite writing) must not hide them: queued chunks are scored from their tokens, and
    # past OVERLAY_MAX of them FTS5 answers until the next flush
    conn = fulltext.connect(tmp_path / fulltext.FILENAME)
    add(conn, "a.txt", "harbour cranes were inspected")
    bm25_segments.flush(conn, force=True)
    conn.commit()
    with conn:
        conn.execute("INSERT INTO chunks (chunk_id, source_id, page, line_start, line_end,"
                     " text, tokens) VALUES ('x', 1, 1, 2, 2, 'late', 'late harbour')")
        conn.execute("INSERT INTO chunks_fts(chunks_fts, rowid, tokens) SELECT 'delete', id,"
                     " tokens FROM chunks WHERE chunk_id != 'x'")  # as save_contexts does
        conn.execute("UPDATE chunks SET tokens = 'harbour harbour' WHERE chunk_id != 'x'")
        conn.execute("INSERT INTO chunks_fts(rowid, tokens) SELECT id, tokens FROM chunks"
                     " WHERE chunk_id != 'x'")
    assert conn.execute("SELECT count(*) FROM bm25_queue").fetchone()[0] == 2
    assert assert_same_as_fts5(conn, ["late harbour", "cranes"]) == 2  # "cranes" is gone
    monkeypatch.setattr(bm25, "OVERLAY_MAX", 1)
    assert bm25.scores(conn, ["harbour"]) is None
    assert len(fulltext.bm25_all(conn, ["harbour"])) == 2
    bm25_segments.flush(conn, force=True)
    conn.commit()
    assert assert_same_as_fts5(conn, ["late harbour", "cranes"]) == 2


OLD_POSTINGS = [  # what schemas 5-7 wrote: keyed by (term, seg), the arrays inline
    """CREATE TABLE bm25_postings (term TEXT NOT NULL, seg INTEGER NOT NULL, ids BLOB NOT NULL,
        tfs BLOB NOT NULL, PRIMARY KEY (term, seg)) WITHOUT ROWID""",
    "CREATE INDEX bm25_postings_seg ON bm25_postings(seg)"]


def test_postings_of_schema_7_move_to_write_order_and_score_the_same(tmp_path, monkeypatch):
    path = tmp_path / fulltext.FILENAME
    with monkeypatch.context() as old_code:
        old_code.setattr(fulltext_schema, "MIGRATIONS", fulltext_schema.MIGRATIONS[:7])
        old_code.setattr(fulltext_schema, "SCHEMA_VERSION", 7)
        old_code.setattr(bm25_segments, "SCHEMA", [*OLD_POSTINGS, *(
            s for s in bm25_segments.SCHEMA if s not in bm25_segments.POSTINGS)])
        old_code.setattr(bm25_segments, "FLUSH_MIN", 1)
        conn = fulltext.connect(path)
        for i in range(12):
            add(conn, f"{i}.txt", f"report {i} on harbour cranes\nquarter {i % 3} revenue")
        before = {q: dict(bm25.scores(conn, segment.tokens(q))) for q in ("report 3", "harbour")}
        conn.close()
    conn = fulltext.connect(path)
    sql = conn.execute("SELECT sql FROM sqlite_schema WHERE name = 'bm25_postings'").fetchone()[0]
    assert "WITHOUT ROWID" not in sql.upper()
    assert conn.execute("SELECT count(*) FROM sqlite_schema WHERE name IN"
                        " ('bm25_postings_term', 'bm25_postings_seg', 'bm25_postings_old')"
                        ).fetchone()[0] == 2
    assert {q: dict(bm25.scores(conn, segment.tokens(q))) for q in before} == before
    assert assert_same_as_fts5(conn, ["report 3", "harbour quarter"]) > 12
    add(conn, "new.txt", "harbour report")  # and it keeps being written
    assert assert_same_as_fts5(conn, ["report 3", "harbour quarter"]) > 12


def test_an_index_from_before_the_arrays_is_migrated_and_read_only_falls_back(
        tmp_path, monkeypatch):
    path = tmp_path / fulltext.FILENAME
    with monkeypatch.context() as old_code:  # write the index as schema 4 did
        old_code.setattr(fulltext_schema, "MIGRATIONS", fulltext_schema.MIGRATIONS[:4])
        old_code.setattr(fulltext_schema, "SCHEMA_VERSION", 4)
        old_code.setattr(fulltext, "_flush_bm25", lambda conn: None)
        conn = fulltext.connect(path)
        add(conn, "a.txt", "the quarterly report\nrevenue grew in the quarter")
        add(conn, "b.txt", "a report on harbour cranes")
        conn.close()
    old = fulltext.connect(path, readonly=True)  # a server never migrates
    assert bm25.scores(old, ["report"]) is None
    assert len(fulltext.bm25_all(old, ["report"])) == 2
    assert [r["line"] for r in exact.exact_search(old, "ha", 5)] == [1]  # the instr() scan
    old.close()
    conn = fulltext.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == fulltext.SCHEMA_VERSION
    assert assert_same_as_fts5(conn, ["report", "harbour quarter"]) == 4
    assert exact._short_match(conn, "ha") == '"har"'
    assert [r["source"] for r in exact.exact_search(conn, "ha", 5)] == ["b.txt"]


def test_top_breaks_ties_by_rowid_and_source_limits_the_matches(tmp_path):
    conn = fulltext.connect(tmp_path / fulltext.FILENAME)
    for name in ("c.txt", "a.txt", "b.txt"):
        add(conn, name, "identical words here")
    add(conn, "d.txt", "identical words here and here")
    scores = fulltext.bm25_all(conn, ["identical"])
    ranked = scores.top(3)
    assert [r for r, _ in ranked] == sorted(r for r, _ in ranked)  # equal scores: by rowid
    assert ranked[0][1] == ranked[2][1]
    only = fulltext.bm25_all(conn, ["identical"], source="b.txt")
    b_rowid = conn.execute("SELECT c.id FROM chunks c JOIN sources s ON s.id = c.source_id"
                           " WHERE s.name = 'b.txt'").fetchone()[0]
    assert list(only) == [b_rowid] and only[b_rowid] == scores[b_rowid]
    with pytest.raises(KeyError):
        only[b_rowid + 1]


def test_flush_runs_inside_the_writers_transaction(tmp_path):
    # the arrays and the chunks must commit together: a rollback leaves neither
    conn = fulltext.connect(tmp_path / fulltext.FILENAME)
    add(conn, "a.txt", "first words")
    before = conn.execute("SELECT count(*) FROM bm25_segments").fetchone()[0]
    with pytest.raises(sqlite3.IntegrityError):
        with conn:
            conn.execute("INSERT INTO chunks (chunk_id, source_id, page, line_start, line_end,"
                         " text, tokens) VALUES ('y', 1, 1, 3, 3, 'second', 'second words')")
            bm25_segments.flush(conn, force=True)
            conn.execute("INSERT INTO sources (id, name, state) VALUES (1, 'dup', 'x')")
    assert conn.execute("SELECT count(*) FROM bm25_segments").fetchone()[0] == before
    assert len(bm25.scores(conn, ["second"])) == 0


def test_a_whole_document_as_a_query_is_scored_on_its_rarest_tokens_only(tmp_path, beir_texts):
    # a confused agent pastes a page: at most MAX_QUERY_TOKENS distinct tokens are scored, the
    # rarest ones, so the work stays bounded however long the query is
    docs, _ = beir_texts
    conn = indexed(tmp_path, docs)
    page = segment.tokens(" ".join(text for _, text in docs))
    distinct = list(dict.fromkeys(page))
    assert len(distinct) > 20 * limits.MAX_QUERY_TOKENS
    docs_of = dict(conn.execute("SELECT term, sum(length(ids)) / 4 FROM bm25_postings"
                                " GROUP BY term").fetchall())
    rarest = sorted(distinct, key=lambda t: docs_of.get(t, 0))[:limits.MAX_QUERY_TOKENS]
    assert dict(bm25.scores(conn, page)) == dict(bm25.scores(conn, rarest))


def test_a_writer_run_leaves_no_chunk_queued(tmp_path):
    # a run's last chunks (fewer than FLUSH_MIN) are written when the indexer closes, so a
    # server never re-reads and splits their tokens on each query
    import kb as kbmod
    from pipeline.indexer import Indexer

    kb = kbmod.open_or_create(tmp_path, "k")
    indexer = Indexer(kb)
    try:
        add(indexer.conn, "a.txt", "harbour cranes were inspected\nthe quarterly report")
        assert 0 < indexer.conn.execute("SELECT count(*) FROM bm25_queue").fetchone()[0]
    finally:
        indexer.close()
    conn = fulltext.connect(kb.fulltext_path, readonly=True)
    assert conn.execute("SELECT count(*) FROM bm25_queue").fetchone()[0] == 0
    assert assert_same_as_fts5(conn, ["harbour report", "cranes"]) == 2  # one chunk, twice


def test_top_n_is_the_unpruned_list_to_the_last_bit_and_skips_chunks(tmp_path, monkeypatch,
                                                                     beir_texts):
    # MaxScore may skip a chunk only when it cannot be among the n best: every n's list (and
    # its scores) must equal what scoring every match gives, and a chunk looked up alone must
    # score what it does in the full scoring. Here every term is worth a floor (a few hundred
    # chunks have no 10,000-posting term), so the cut-off is tried at each step.
    monkeypatch.setattr(bm25, "FLOOR_MIN_POSTINGS", 0)
    docs, queries = beir_texts
    conn = indexed(tmp_path, docs)
    asked = queries + [text[:300] for _, text in docs[::4]]  # the eval questions and passages
    skipped = 0
    for query in asked:
        ranking = bm25.scores(conn, segment.tokens(query))
        every = ranking.reaching(None)
        for n in (1, 3, 10, 50):
            assert ranking.top(n) == every.top(n), (query, n)
            skipped += len(ranking.reaching(n)) < len(every)
        for rowid in list(every)[::7]:
            assert ranking[rowid] == every[rowid]
    assert skipped > len(asked)  # the cut-off does skip chunks, on most questions
    with pytest.raises(KeyError):
        ranking[10 ** 9]


def test_segments_schema_8_held_apart_are_merged_on_opening(tmp_path, monkeypatch):
    # schema 8 checked its merge limit against a whole tier, so a tier over the limit never
    # merged again: its segments are merged FANOUT at a time when the index opens
    path = tmp_path / fulltext.FILENAME
    monkeypatch.setattr(bm25_segments, "FANOUT", 2)
    monkeypatch.setattr(bm25_segments, "FLUSH_MIN", 1)
    with monkeypatch.context() as old_code:
        old_code.setattr(fulltext_schema, "MIGRATIONS", fulltext_schema.MIGRATIONS[:8])
        old_code.setattr(fulltext_schema, "SCHEMA_VERSION", 8)
        old_code.setattr(bm25_segments, "MAX_MERGE_CHUNKS", 0)
        conn = fulltext.connect(path)
        for i in range(12):
            add(conn, f"{i}.txt", f"report {i} on harbour cranes\nquarter {i % 3} revenue")
        held = conn.execute("SELECT count(*), sum(length(ids)) / 4 FROM bm25_segments").fetchone()
        before = {q: dict(bm25.scores(conn, segment.tokens(q))) for q in ("report 3", "harbour")}
        conn.close()
    # a pair fits, the whole tier does not
    monkeypatch.setattr(bm25_segments, "MAX_MERGE_CHUNKS", 4)
    assert held[0] == 12 and held[1] > bm25_segments.MAX_MERGE_CHUNKS
    conn = fulltext.connect(path)
    assert conn.execute("SELECT count(*) FROM bm25_segments").fetchone()[0] <= 12 // 2
    assert {q: dict(bm25.scores(conn, segment.tokens(q))) for q in before} == before
    assert_rowids_sorted(conn)
    assert assert_same_as_fts5(conn, ["report 3", "harbour quarter"]) > 12


def test_edited_chunks_dead_postings_do_not_make_a_term_look_common(tmp_path):
    # issue 25: terms were chosen by their stored arrays' sizes, dead postings included:
    # 1,200 chunks, "zebra" in 400 files edited twice, and "zebra" (3 x 400 stored postings,
    # 400 live) looked common and was dropped: 1 chunk matched where FTS5 matches 400
    docs = [(f"d{i}.txt", f"zebra note {i}" if i < 400 else f"plain note {i}")
            for i in range(1200)]
    conn = indexed(tmp_path, docs)
    for edit in ("first", "second"):
        for name, text in docs[:400]:
            add(conn, name, f"{text} {edit} edit")
        bm25_segments.flush(conn, force=True)
        conn.commit()
    stored = conn.execute("SELECT sum(length(ids)) FROM bm25_postings WHERE term = 'zebra'"
                          ).fetchone()[0] // bm25_segments.ID.itemsize
    assert stored > 600  # what the old count saw: more than half of the 1,200 chunks
    assert assert_same_as_fts5(conn, ["zebra number5", "zebra"]) == 800
    assert len(bm25.scores(conn, segment.tokens("zebra number5"))) == 400


def test_the_rarest_cut_counts_live_chunks_only(tmp_path, monkeypatch):
    # the MAX_QUERY_TOKENS cut was skewed the same way: an edited rare word ranked as common
    monkeypatch.setattr(bm25, "MAX_QUERY_TOKENS", 2)
    docs = [(f"d{i}.txt", " ".join(["alpha"] * (i < 30) + ["beta"] * (i < 20)
                                    + ["gamma"] * (i < 10) + [f"w{i}"])) for i in range(60)]
    conn = indexed(tmp_path, docs)
    for _ in range(3):  # gamma's 10 files edited: 40 stored postings, 10 live
        for name, text in docs[:10]:
            add(conn, name, text)
        bm25_segments.flush(conn, force=True)
        conn.commit()
    assert conn.execute("SELECT count(*) FROM bm25_dead").fetchone()[0] > 0
    assert fulltext.bm25_match(conn, ["alpha", "beta", "gamma"]) == '"beta" OR "gamma"'
    assert_same_as_fts5(conn, ["alpha beta gamma"])
