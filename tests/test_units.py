"""Relevance at the unit a reader judges (issue 47): a chunk's BM25 carries its neighbours'
on its page, so a page split into chunks ranks as the page would, and a hit still points at
its own lines."""

import math
import random
from collections import Counter

import pytest
from conftest import bm25_kb

import fulltext
import ingest
import search
from index import bm25, pages, segment
from ranking import units
from ranking.request import SearchRequest, SearchSettings

FILLER = ("harbour ledger amber copper meadow lantern quarry saddle thimble velvet willow "
          "anchor biscuit candle dormant ember fabric gravel hollow ivory juniper kettle").split()


def _paragraph(seed: int, word: str = "") -> str:
    """~900 characters of filler lines, `word` in the middle: one chunk of chunking.py's."""
    rng = random.Random(seed)
    lines = [" ".join(rng.choice(FILLER) for _ in range(9)) for _ in range(15)]
    if word:
        lines[7] += f" {word}"
    return "\n".join(lines)


@pytest.fixture
def two_documents(tmp_path):
    """Two files, each one page of three chunks whose first holds `glacier`: in a.txt the
    other chunks hold the question's other words, in b.txt nothing of it."""
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "a.txt").write_text("\n".join([_paragraph(1, "glacier"), _paragraph(2, "turbine"),
                                             _paragraph(3, "lattice")]), encoding="utf-8")
    (folder / "b.txt").write_text("\n".join([_paragraph(1, "glacier"), _paragraph(4),
                                             _paragraph(5)]), encoding="utf-8")
    kb = bm25_kb(tmp_path / "base", "k")
    ingest.ingest(kb, [folder])
    conn = fulltext.connect(kb.fulltext_path, readonly=True)
    yield conn
    conn.close()


def _glacier_chunks(conn) -> dict[str, int]:
    return {name: rowid for rowid, name in conn.execute(
        "SELECT c.id, s.name FROM chunks c JOIN sources s ON s.id = c.source_id"
        " WHERE c.text LIKE '%glacier%'")}


def test_a_chunk_whose_page_holds_the_rest_of_the_evidence_ranks_first(two_documents):
    conn = two_documents
    chunk = _glacier_chunks(conn)
    ranking = bm25.scores(conn, segment.query_tokens("glacier turbine lattice"))
    # scored alone, the two `glacier` chunks are the same text: neither is the better answer
    assert ranking[chunk["docs/a.txt"]] == pytest.approx(ranking[chunk["docs/b.txt"]])
    lifted = units.with_units(conn, ranking, units.WEIGHT)
    assert lifted[chunk["docs/a.txt"]] > 1.2 * lifted[chunk["docs/b.txt"]]
    assert lifted[chunk["docs/b.txt"]] > ranking[chunk["docs/b.txt"]]  # its own page counts
    # a search in bm25 mode scores with them; unitWeight 0 scores chunks alone
    for weight, scores in ((units.WEIGHT, lifted), (0.0, ranking)):
        hits = search.Searcher(conn).search(
            SearchRequest("glacier turbine lattice", 10, "bm25"),
            SearchSettings(unit_weight=weight))
        assert hits[0].score == pytest.approx(max(scores[rowid] for rowid in ranking))


def test_a_page_is_scored_as_one_document_of_its_chunks(two_documents):
    # as_documents against BM25 written out over the page's tokens summed (chunk idf)
    conn = two_documents
    terms = segment.query_tokens("glacier turbine lattice")
    ranking = bm25.scores(conn, terms)
    rows = conn.execute("SELECT c.id, c.tokens FROM chunks c JOIN sources s"
                        " ON s.id = c.source_id WHERE s.name = 'docs/a.txt'").fetchall()
    page = Counter(t for _, tokens in rows for t in tokens.split())
    length = sum(len(tokens.split()) for _, tokens in rows)
    every = [tokens.split() for (tokens,) in conn.execute("SELECT tokens FROM chunks")]
    chunks, average = len(every), ranking.average
    expected = 0.0
    for term in set(terms):
        held = sum(term in tokens for tokens in every)
        if held and page[term]:
            idf = max(math.log((chunks - held + 0.5) / (held + 0.5)), bm25.MIN_IDF)
            tf = page[term]
            expected += idf * tf * (bm25.K1 + 1) / (
                tf + bm25.K1 * (1 - bm25.B + bm25.B * length / (3 * average)))
    got = ranking.as_documents([[r[0] for r in rows]], 3 * average)
    assert got[0] == pytest.approx(expected)


def test_a_long_page_is_judged_by_the_chunks_around_the_chunk(tmp_path):
    # a text file is one page: its first chunk's unit is the RADIUS chunks after it, not the
    # file, so a word far down the file adds nothing to it
    folder = tmp_path / "docs"
    folder.mkdir()
    far = units.RADIUS + 4
    paragraphs = [_paragraph(i, {0: "glacier", far: "turbine"}.get(i, ""))
                  for i in range(far + 2)]
    (folder / "long.txt").write_text("\n".join(paragraphs), encoding="utf-8")
    kb = bm25_kb(tmp_path / "base", "k")
    ingest.ingest(kb, [folder])
    conn = fulltext.connect(kb.fulltext_path, readonly=True)
    try:
        ranking = bm25.scores(conn, segment.query_tokens("glacier turbine"))
        with_units = units.with_units(conn, ranking, 1.0)
        first = min(ranking)
        near = ranking.as_documents([list(range(first, first + units.RADIUS + 1))],
                                    with_units.average)[0]
        assert with_units[first] == pytest.approx(ranking[first] + near)
        whole = ranking.as_documents([list(ranking)], with_units.average)[0]
        assert whole > near  # the file as a whole would have counted `turbine`
    finally:
        conn.close()


def test_a_batch_of_chunks_scores_as_each_alone_and_leaves_out_what_does_not_match(
        two_documents):
    # the vector leg's finds are scored in one pass (Ranking.many, WithUnits.many)
    conn = two_documents
    ranking = bm25.scores(conn, segment.query_tokens("glacier turbine lattice"))
    every = [rowid for (rowid,) in conn.execute("SELECT id FROM chunks")]
    matching = set(ranking)
    assert set(every) - matching  # some chunks hold none of the words
    asked = [*every, -1, 2 ** 40]
    assert ranking.many(asked) == pytest.approx({rowid: ranking[rowid] for rowid in matching})
    one_by_one = units.with_units(conn, ranking, units.WEIGHT)
    expected = {rowid: one_by_one[rowid] for rowid in matching}
    batch = units.with_units(conn, ranking, units.WEIGHT)
    assert units.scores_of(batch, asked) == pytest.approx(expected)
    assert units.scores_of(ranking, asked) == pytest.approx(ranking.many(matching))


def test_the_page_count_follows_the_index_under_an_open_connection(tmp_path):
    # counted once per generation of the postings (pages.page_count), so a file added by a
    # writer while a server's connection stays open is counted in the next query's units
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "a.txt").write_text(_paragraph(1, "glacier"), encoding="utf-8")
    kb = bm25_kb(tmp_path / "base", "k")
    ingest.ingest(kb, [folder])
    conn = fulltext.connect(kb.fulltext_path, readonly=True)
    try:
        assert pages.page_count(conn) == 1
        (folder / "b.txt").write_text(_paragraph(2, "glacier"), encoding="utf-8")
        ingest.ingest(kb, [folder])
        assert pages.page_count(conn) == 2
        ingest.remove(kb, "a.txt")
        assert pages.page_count(conn) == 1
    finally:
        conn.close()
