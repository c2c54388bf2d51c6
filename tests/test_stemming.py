"""English stemming in the BM25 leg (issue 47): prose chunks hold stems, code and identifiers
their surface, a query both; an index made before is re-tokenized to what a fresh one holds."""

import sqlite3

import pytest
from conftest import bm25_kb

import chunking
import fulltext
import ingest
import search
from index import bm25, bm25_segments, fulltext_schema, segment
from ranking.request import SearchRequest

# -----------------------------------------------------------------------------
# whole token lists


def marked(words: str) -> list[str]:
    """Tokens written with ~ for STEM_MARK: "~connect fy2022" -> ["\ue000connect", "fy2022"]."""
    return [word.replace("~", segment.STEM_MARK) for word in words.split()]


@pytest.mark.parametrize(
    ("text", "prose"),
    [
        ("Connections were connected by running studies",
         "~connection ~were ~connect ~by ~run ~studi"),
        # inflections only: what derivation makes stays apart (financing is no financial,
        # FinanceBench; operations and operated are two words, as to a reader)
        ("Financing financial operations operation operated stopped",
         "~financ ~financial ~operation ~operation ~operat ~stop"),
        # in capitals too: kept as written, a table's rare ADJUSTED outweighed the text's
        # adjusted (FinanceBench)
        ("ADJUSTED Adjusted EBITDA", "~adjust ~adjust ~ebitda"),
        # two words joined by one hyphen are two words, as they were split before
        ("cross-linked e-mails", "~cross ~link ~e ~mail"),
        # Hangul untouched, the English word in Korean text stemmed like any other
        ("APIs를 배포했다", "~api 배포"),
        ("我们研究人工智能技术 cells", "我们 研究 人工 智能 人工智能 技术 ~cell"),
    ],
)
def test_english_prose_words_are_stemmed(text, prose):
    assert segment.prose_tokens(text) == marked(prose)


@pytest.mark.parametrize(
    ("text", "prose"),
    [
        # an identifier whole as written (getURL still finds getURL); its parts are words
        # like the text's: as written they were rare beside its stems, and a filing's
        # "debt-to-adjusted" outweighed every "adjusted" of the others (FinanceBench)
        ("getURL parse_http_responses debt-to-adjusted",
         "geturl ~get ~url parsehttpresponses ~pars ~http ~respons debttoadjusted ~debt ~to"
         " ~adjust"),
        ("FY2022 revenues 3.5 1,000 10-K", "fy2022 ~fy 2022 ~revenu 3 5 1 000 10 ~k"),
        ("배포를 시작합니다 서비스 배포 일정", "배포 시작 서비스 배포 일정"),  # Korean
        ("我们研究人工智能技术", "我们 研究 人工 智能 人工智能 技术"),  # Chinese
        ("Häuser cafés naïve", "häuser cafés naïve"),  # not ASCII: not for the English stemmer
    ],
)
def test_identifiers_numbers_korean_chinese_keep_their_surface(text, prose):
    assert segment.prose_tokens(text) == marked(prose)
    # a query holds every token as written (what code chunks hold), each English word
    # followed by its stem (what prose chunks hold)
    query = segment.query_tokens(text)
    assert [t for t in query if not t.startswith(segment.STEM_MARK)] == segment.tokens(text)
    assert [t for t in query if t.startswith(segment.STEM_MARK)] == [
        t for t in marked(prose) if t.startswith(segment.STEM_MARK)]


def test_a_query_holds_each_word_and_its_stem():
    assert segment.query_tokens("Connections board FY2022") == marked(
        "connections ~connection board ~board fy2022 fy ~fy 2022")


def test_code_chunks_are_not_stemmed():
    # stemming code cost the code bench (docs/quality.md): a code source's chunk keeps its
    # words, and a query's stems, marked, never meet them ("its" is no "it" of a comment)
    text = 'def open_connections():\n    """Opens pooled connections."""'
    assert segment.chunk_tokens(text, "code:python") == segment.tokens(text) == [
        "def", "openconnections", "open", "connections", "opens", "pooled", "connections"]
    assert segment.chunk_tokens(text, "text") == marked(
        "~def openconnections ~open ~connection ~open ~pool ~connection")
    assert segment.chunk_tokens_many([text, text], ["code:python", None]) == [
        segment.tokens(text), segment.prose_tokens(text)]


def test_stems_survive_fts5_unchanged():
    # the mark is a private-use character: FTS5 keeps it inside the token ('Co'), so a stem
    # and the same word as written stay two terms
    toks = segment.query_tokens("Connected cells, e-mail_server FY2022 배포를 人工智能 Straße")
    con = sqlite3.connect(":memory:")
    con.execute("CREATE VIRTUAL TABLE t USING fts5(body, tokenize=\"unicode61 remove_diacritics"
                f" 0 categories '{fulltext_schema.TOKEN_CATEGORIES}'\")")
    con.execute("CREATE VIRTUAL TABLE v USING fts5vocab(t, instance)")
    con.execute("INSERT INTO t(rowid, body) VALUES (1, ?)", (" ".join(toks),))
    assert [term for (term,) in con.execute("SELECT term FROM v ORDER BY offset")] == toks
    assert {"cells", segment.STEM_MARK + "cell"} <= set(toks)


def test_terms_no_chunk_holds_do_not_crowd_out_the_others():
    # a query's words as written, which prose chunks hold only as stems, are the "rarest"
    # terms of an index of prose (no chunk): they took the MAX_QUERY_TOKENS places of the
    # stems, and beside common words ("the whats": the, whats, what) left a query scored on
    # nothing
    counts = {"the": 1500, "what": 1200, "whats": 0, **{f"w{i}": 0 for i in range(200)},
              "connect": 3}

    def bounds(terms):
        return {t: counts[t] for t in terms}, {t: counts[t] for t in terms}

    assert bm25.choose_terms(["the", "whats", "what"], 2000, bounds) == ["what", "the"]
    assert bm25.choose_terms([f"w{i}" for i in range(200)] + ["connect"], 2000, bounds) == [
        "connect"]

    # ... nor do words whose postings are all dead (an index re-tokenized to stems keeps the
    # old words' arrays until a merge): their sizes say 2 chunks, an exact count none
    def dead_bounds(terms):
        return ({t: 0 if t.startswith("w") else counts[t] for t in terms},
                {t: 2 if t.startswith("w") else counts[t] for t in terms})

    def exact(terms):
        return {t: 0 if t.startswith("w") else counts[t] for t in terms}

    assert bm25.choose_terms([f"w{i}" for i in range(200)] + ["connect"], 2000, dead_bounds,
                             exact) == ["connect"]


# -----------------------------------------------------------------------------
# through a real KB

PROSE = ("The pool connected every client to the replica.\n"
         "Replicas were promoted after the primary failed.\n")
LOG = "Connecting to the standby was refused at noon.\n"
CODE = ('def open_connections(replica):\n'
        '    """Open pooled connections to a replica."""\n'
        '    return [replica]\n')


def _folder(tmp_path):
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "notes.txt").write_text(PROSE, encoding="utf-8")
    (folder / "log.txt").write_text(LOG, encoding="utf-8")
    (folder / "pool.py").write_text(CODE, encoding="utf-8")
    return folder


def _ranked(conn, query: str) -> list[str]:
    return [h.source for h in search.Searcher(conn).search(SearchRequest(query, 10, "bm25"))]


def _found(conn, query: str) -> list[str]:
    return sorted(set(_ranked(conn, query)))


def test_a_query_in_another_inflection_finds_the_prose_and_the_code(tmp_path):
    folder = _folder(tmp_path)
    kb = bm25_kb(tmp_path / "base", "k")
    assert ingest.ingest(kb, [folder]).indexed == 3
    conn = fulltext.connect(kb.fulltext_path, readonly=True)
    try:
        # prose by its stem (connects ~ connected ~ connecting), code by the word it writes
        assert _found(conn, "connects") == ["docs/log.txt", "docs/notes.txt"]
        assert _found(conn, "connections") == ["docs/pool.py"]
        assert _found(conn, "promoting replica") == ["docs/notes.txt", "docs/pool.py"]
        assert _found(conn, "failing") == ["docs/notes.txt"]
        # a prose chunk counts the word once: its stem alone, whichever form the query has
        def log_score(query: str) -> float:
            return {r["source"]: s for r, s in fulltext.bm25_search(
                conn, segment.query_tokens(query), 5)}["docs/log.txt"]
        assert log_score("connecting") == pytest.approx(log_score("connect"))
        # code is not stemmed: a query's stem (opening -> open) never meets its words
        assert _found(conn, "opening") == []
        assert _found(conn, "open") == ["docs/pool.py"]
    finally:
        conn.close()


def _chunk_tokens(kb) -> dict:
    conn = fulltext.connect(kb.fulltext_path, readonly=True)
    try:
        return {(r["name"], r["page"], r["line_start"]): r["tokens"] for r in conn.execute(
            "SELECT s.name, c.page, c.line_start, c.tokens FROM chunks c"
            " JOIN sources s ON s.id = c.source_id")}
    finally:
        conn.close()


def test_an_index_of_the_previous_rules_is_retokenized_to_what_a_fresh_one_holds(tmp_path):
    folder = _folder(tmp_path)
    for n in range(20):  # enough chunks that the query's words have an idf above the floor
        (folder / f"other{n:02d}.txt").write_text(f"quarterly budget review {n}\n",
                                                 encoding="utf-8")
    old = bm25_kb(tmp_path / "old", "k")
    ingest.ingest(old, [folder])
    # what revision 4 left: every chunk's words as written, under its signature
    conn = fulltext.connect(old.fulltext_path)
    rows = fulltext.searchable_chunks(conn, 0, 100)
    fulltext.replace_tokens(conn, {r["id"]: " ".join(segment.tokens(chunking.bm25_text(
        r["source"], r["context"], r["text"]))) for r in rows})
    fulltext.set_meta(conn, fulltext.SEGMENTER_KEY,
                      segment.signature().replace("segment rules 6", "segment rules 4"))
    with conn:  # its postings in a segment, as an index that old has them
        bm25_segments.flush(conn, force=True)
    assert _found(conn, "connected") == ["docs/notes.txt"]  # the old index: words alone
    conn.close()

    again = ingest.ingest(old, [folder])  # the next run, nothing changed on disk
    assert (again.unchanged, again.indexed) == (23, 0)
    fresh = bm25_kb(tmp_path / "fresh", "k")
    ingest.ingest(fresh, [folder])
    assert _chunk_tokens(old) == _chunk_tokens(fresh)
    assert segment.STEM_MARK + "connect" in _chunk_tokens(fresh)[("docs/notes.txt", 1, 1)].split()
    assert "connections" in _chunk_tokens(fresh)[("docs/pool.py", 1, 1)].split()
    scores = []
    for kb in (old, fresh):
        conn = fulltext.connect(kb.fulltext_path)
        assert fulltext.get_meta(conn, fulltext.SEGMENTER_KEY) == segment.signature()
        assert _found(conn, "connected") == ["docs/log.txt", "docs/notes.txt"]
        conn.execute("INSERT INTO chunks_fts(chunks_fts) VALUES ('integrity-check')")
        scores.append(_scores(conn, "connected connections replica failing"))
        conn.close()
    # ranked alike too: the old words' postings, dead until a merge, count in no idf
    # (the word's other form was counted by its arrays' sizes, dead rowids and all)
    assert scores[0] == pytest.approx(scores[1], rel=1e-12)


def _scores(conn, query: str) -> dict:
    """Each matching chunk's BM25, by where the chunk is."""
    where = {r[0]: (r[1], r[2], r[3]) for r in conn.execute(
        "SELECT c.id, s.name, c.page, c.line_start FROM chunks c"
        " JOIN sources s ON s.id = c.source_id")}
    ranking = bm25.scores(conn, segment.query_tokens(query))
    return {where[rowid]: ranking[rowid] for rowid in ranking}


def test_a_word_is_as_rare_in_code_as_in_prose(tmp_path):
    # a prose chunk holds a word's stem, a code chunk the word as written: counted apart, the
    # word in two code files outweighed its stem in 30 notes, and in a KB of docs and code a
    # question ranked the code first (test_filters: the notes' every word was the query's)
    folder = tmp_path / "docs"
    folder.mkdir()
    for n in range(30):
        (folder / f"n{n:02d}.txt").write_text(f"invoice payment terms note {n}\n",
                                              encoding="utf-8")
    (folder / "billing.py").write_text("def total(lines):\n    # invoice payment terms\n"
                                       "    return sum(lines)\n", encoding="utf-8")
    (folder / "report.py").write_text("# invoice report\nX = 1\n", encoding="utf-8")
    kb = bm25_kb(tmp_path / "base", "k")
    ingest.ingest(kb, [folder])
    conn = fulltext.connect(kb.fulltext_path, readonly=True)
    try:
        ranking = bm25.scores(conn, segment.query_tokens("invoice"))
        assert len({term.idf for term in ranking.terms}) == 1  # `invoice` and `~invoic`
        assert len(ranking.terms) == 2
        top = _ranked(conn, "invoice payment terms")
        assert top[0].endswith(".txt")  # 3 words in a short note, as in billing.py
    finally:
        conn.close()
