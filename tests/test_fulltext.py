"""fulltext.sqlite3: replacing sources, embedding state, tombstones, exact search, read-only use."""

import importlib.util
import json
import shutil
import sqlite3
from pathlib import Path

import pytest

import chunking
import fulltext
import ingest
import kb as kbmod
from common import limits
from index import exact, fulltext_schema, query_sql, segment, states


def src(name: str, sha: str = "h1") -> fulltext.SourceFile:
    return fulltext.SourceFile(name, f"/docs/{name}", sha, 10, 1.0)


def add(conn, name: str, pages: list[list[str]], sha: str = "h1") -> int:
    chunks = chunking.chunk_pages(name, pages, [set() for _ in pages], str.split)
    return fulltext.replace_source(conn, src(name, sha), "test", pages, chunks)


@pytest.fixture
def conn(tmp_path):
    c = fulltext.connect(tmp_path / fulltext.FILENAME)
    yield c
    c.close()


def test_new_index_is_wal_and_versioned(tmp_path, conn):
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA user_version").fetchone()[0] == fulltext.SCHEMA_VERSION


def test_replace_keeps_every_raw_line_and_reports_pending(conn):
    pending = add(conn, "a.txt", [["first line", "", "third line"], ["page two"]])
    assert pending == 2
    assert fulltext.page_lines(conn, "a.txt", 1) == [(1, "first line"), (2, ""), (3, "third line")]
    assert fulltext.page_lines(conn, "a.txt", 2, 1, 1) == [(1, "page two")]
    assert fulltext.source_row(conn, "a.txt")["pages"] == 2
    row = fulltext.source_row(conn, "a.txt")
    assert (row["state"], row["pages"], row["parser"]) == ("pending", 2, "test")


def test_changed_source_keeps_embedded_state_of_unchanged_chunks_and_tombstones_the_rest(conn):
    add(conn, "a.txt", [["alpha"], ["beta"]])
    states.set_embed_state(conn, states.all_chunk_ids(conn), "indexed")
    old_ids = states.all_chunk_ids(conn)
    pending = add(conn, "a.txt", [["alpha"], ["beta changed"]], sha="h2")
    assert pending == 1
    new_ids = states.all_chunk_ids(conn)
    assert len(new_ids & old_ids) == 1
    assert set(states.tombstones(conn)) == old_ids - new_ids
    assert states.count_pending(conn) == 1
    states.set_embed_state(conn, new_ids - old_ids, "indexed")
    states.promote_sources(conn)
    assert fulltext.source_row(conn, "a.txt")["state"] == "ready"


def test_failure_of_a_known_source_keeps_its_content(conn):
    add(conn, "a.txt", [["alpha"]])
    assert fulltext.record_failure(conn, src("a.txt", "h2"), "corrupt", "bad bytes") == "degraded"
    row = fulltext.source_row(conn, "a.txt")
    assert row["state"] == "degraded" and row["error"].startswith("corrupt: bad bytes")
    assert fulltext.page_lines(conn, "a.txt", 1) == [(1, "alpha")]
    assert fulltext.record_failure(conn, src("new.pdf"), "corrupt", "no pages") == "failed"
    assert fulltext.source_row(conn, "new.pdf")["state"] == "failed"


def test_delete_source_removes_lines_chunks_and_index_rows(conn):
    add(conn, "a.txt", [["alpha beta"]])
    ids = states.all_chunk_ids(conn)
    fulltext.delete_source(conn, "a.txt")
    assert fulltext.counts(conn)["lines"] == 0 and fulltext.counts(conn)["chunks"] == 0
    assert set(states.tombstones(conn)) == ids
    assert fulltext.bm25_search(conn, ["alpha"], 10) == []
    assert exact.exact_search(conn, "alpha", 10) == []


def test_exact_search_finds_one_two_and_longer_strings(conn):
    add(conn, "ko.txt", [["배포 일정은 3월", "담당: 김", "ID X7-42 확인"]])
    add(conn, "zh.txt", [["我们研究人工智能技术"]])
    found = lambda needle: [(r["source"], r["page"], r["line"])  # noqa: E731
                            for r in exact.exact_search(conn, needle, 10)]
    assert found("김") == [("ko.txt", 1, 2)]
    assert found("배포") == [("ko.txt", 1, 1)]
    assert found("智能") == [("zh.txt", 1, 1)]
    assert found("x7-42") == [("ko.txt", 1, 3)]  # case-insensitive, punctuation kept
    assert found("人工智能技") == [("zh.txt", 1, 1)]
    assert found('"') == []
    assert found("no such") == []
    assert [r["line"] for r in exact.exact_search(conn, "일정", 10, source="zh.txt")] == []


@pytest.mark.parametrize("scan_first", [0, 5, exact.EXACT_SCAN_FIRST])
@pytest.mark.parametrize("prefix_terms", [exact.EXACT_PREFIX_TERMS, 0])
def test_short_needles_find_what_a_scan_of_every_line_finds(conn, monkeypatch, prefix_terms,
                                                            scan_first):
    # 1-2 characters used to be an instr() scan of every line (344 ms at 100,000 chunks,
    # issue 16); now a scan of the first lines, then the trigrams that start them, each line
    # ending in LINE_END. With 0 terms allowed, a needle the first lines do not settle takes
    # the scan of every line: every way must find the same lines.
    monkeypatch.setattr(exact, "EXACT_PREFIX_TERMS", prefix_terms)
    monkeypatch.setattr(exact, "EXACT_SCAN_FIRST", scan_first)
    lines = ["배포 일정은 3월", "김", "담당: 김", "ID X7-42 확인 ab", "ab", "Ab", "x", "b a",
             "我们研究人工智能技术", "能", "a\"b", ""]
    add(conn, "mix.txt", [lines])
    assert (exact._short_match(conn, "a") is None) == (prefix_terms == 0)
    for needle in ["김", "a", "ab", "AB", "b", "x", "능", "能", "技术", "术", "7-", "\"", " a",
                   "월", "q", "\"b", "42", "확인"]:
        want = [n for n, text in enumerate(lines, 1) if needle.lower() in text.lower()]
        got = [r["line"] for r in exact.exact_search(conn, needle, 50)]
        assert got == want, needle
    assert [r["line"] for r in exact.exact_search(conn, "a", 2)] == [4, 5]  # limit holds


LONG_LINES = ["the abc and bcd", "abcd", "xABCDx", "abc bcd cde", "École normale", "ΑΒΓΔ",
              "배포 일정은 3월 배포", "我们研究人工智能技术", 'say "abc" twice "abc"', "", "a%b_c"]
LONG_NEEDLES = ["abcd", "ABC", "bcd cd", "abc bcd", "école", "αβγδ", "일정은 3", "은 3월",
                "人工智能", '"abc"', "c a", "abcdx", "%b_", "zzz", "the abc and bcd", "3월 배포"]


@pytest.mark.parametrize("trigrams", [exact.EXACT_TRIGRAMS, 1])
@pytest.mark.parametrize("version", [6, fulltext.SCHEMA_VERSION])
def test_longer_needles_find_what_a_scan_finds_with_and_without_positions(
        tmp_path, monkeypatch, version, trigrams):
    # _m007 dropped lines_fts's positions (a third of its size): a needle is now the lines
    # holding all its trigrams, checked in the line. Trigrams that occur apart ("abc and
    # bcd" for "abcd") must not match; a server reading a schema-6 index gets the same lines.
    # With 1 trigram asked of the index, the line check alone must keep the lists exact.
    monkeypatch.setattr(exact, "EXACT_TRIGRAMS", trigrams)
    path = tmp_path / fulltext.FILENAME
    with monkeypatch.context() as old_code:
        old_code.setattr(fulltext_schema, "MIGRATIONS", fulltext_schema.MIGRATIONS[:version])
        old_code.setattr(fulltext_schema, "SCHEMA_VERSION", version)
        conn = fulltext.connect(path)
        add(conn, "mix.txt", [LONG_LINES])
        conn.close()
    conn = fulltext.connect(path, readonly=True)
    detail = conn.execute("SELECT sql FROM sqlite_schema WHERE name = 'lines_fts'").fetchone()[0]
    assert ("detail='none'" in detail) == (version >= 7)
    for needle in LONG_NEEDLES:
        want = [n for n, text in enumerate(LONG_LINES, 1) if needle.lower() in text.lower()]
        assert [r["line"] for r in exact.exact_search(conn, needle, 50)] == want, needle
    assert [r["line"] for r in exact.exact_search(conn, "abc", 2)] == [1, 2]  # limit holds
    conn.close()


def test_a_pasted_document_as_an_exact_needle_asks_the_index_for_few_trigrams(conn):
    # a confused agent pastes a whole page into exact mode: every trigram of 4,000 characters
    # made the query take 1.2 s at 100k chunks; the index is asked for EXACT_TRIGRAMS of them
    page = " ".join(f"line {i} of the quarterly harbour report, section {i * 7}"
                    for i in range(80))[:3990]
    add(conn, "doc.txt", [[page, page[:-1] + "!"]])
    assert exact._trigram_match(page.lower()).count(" AND ") == exact.EXACT_TRIGRAMS - 1
    assert [r["line"] for r in exact.exact_search(conn, page, 10)] == [1]
    assert exact.exact_search(conn, page + " more", 10) == []


def test_exact_search_in_one_source_asks_the_trigram_index_first(conn):
    # regression (issue 48): with a `source`, SQLite's planner read every line of that source
    # and ran the trigram MATCH once per line (2 s for one needle in a 350-page book, 9 s in
    # verify_citation); the index now finds the lines and the source test filters them
    lines = [f"row {i} of the harbour ledger, berth {i % 40}" for i in range(3000)]
    add(conn, "ledger.txt", [lines[:1500] + ["the quartermaster signed here"], lines[1500:]])
    add(conn, "other.txt", [["the quartermaster signed here too"]])
    steps = []
    conn.set_progress_handler(lambda: steps.append(1), 100)
    found = exact.exact_search(conn, "quartermaster signed", 10, source="ledger.txt")
    conn.set_progress_handler(None, 0)
    assert [(r["source"], r["page"], r["line"]) for r in found] == [("ledger.txt", 1, 1501)]
    assert len(steps) < 1000, len(steps)  # calls, one per 100 VM steps: 57 now, 173,217 before


def test_bm25_ranks_the_matching_chunk_first_and_survives_fts_syntax(conn):
    add(conn, "a.txt", [["the deployment schedule for march"]])
    add(conn, "b.txt", [["a note about lunch"]])
    hits = fulltext.bm25_search(conn, ["deployment", "schedule"], 10)
    assert [row["source"] for row, _ in hits] == ["a.txt"]
    assert hits[0][1] > 0
    # tokens that are FTS5 operators or carry quotes are searched as words, not syntax
    assert fulltext.bm25_search(conn, ["NOT", "OR", 'a"b', "AND"], 10) == []
    assert query_sql.quote_fts(["a", "a", 'b"c']) == '"a" OR "b""c"'


def test_readonly_connection_reads_but_cannot_write(tmp_path, conn):
    add(conn, "a.txt", [["alpha"]])
    ro = fulltext.connect(tmp_path / fulltext.FILENAME, readonly=True)
    assert fulltext.page_lines(ro, "a.txt", 1) == [(1, "alpha")]
    with pytest.raises(sqlite3.OperationalError):
        ro.execute("DELETE FROM sources")
    ro.close()


def test_a_locked_index_is_reported_busy_never_read_immutable(tmp_path, monkeypatch, conn):
    # regression: any error of the first read opened the index `immutable=1`, a busy lock in
    # a writable folder too, where SQLite leaves a live WAL file's reads undefined: the server
    # answered from the main file alone (here without b.txt, still only in the WAL) and a
    # later error told the user to rebuild an index that was fine
    monkeypatch.setattr(limits, "INDEX_BUSY_WAIT_S", 0.2, raising=False)  # old main lacks it
    add(conn, "a.txt", [["alpha"]])
    conn.execute("PRAGMA wal_autocheckpoint = 0")  # b.txt stays in the WAL file
    conn.execute("PRAGMA locking_mode = EXCLUSIVE")  # as an indexer holding the index
    add(conn, "b.txt", [["beta"]])
    path = tmp_path / fulltext.FILENAME
    with pytest.raises(fulltext.IndexUnavailable, match="not damaged: wait") as caught:
        fulltext.connect(path, readonly=True)
    assert not isinstance(caught.value, sqlite3.DatabaseError)  # so never `store_errors.is_damage`
    conn.close()  # the lock is released
    ro = fulltext.connect(path, readonly=True)
    assert fulltext.page_lines(ro, "b.txt", 1) == [(1, "beta")]
    ro.close()


def test_newer_schema_is_refused_with_advice(tmp_path):
    path = tmp_path / fulltext.FILENAME
    raw = sqlite3.connect(path)
    raw.execute("PRAGMA user_version = 99")
    raw.close()
    with pytest.raises(fulltext.SchemaError, match="update linecite"):
        fulltext.connect(path)


def test_readonly_open_of_missing_index_says_how_to_create_it(tmp_path):
    with pytest.raises(FileNotFoundError, match="linecite ingest FILE"):  # the launcher's
        fulltext.connect(tmp_path / "nothing.sqlite3", readonly=True)


def test_bm25_all_scores_every_match_as_fts5_ranks_it_and_filters_by_source(conn):
    add(conn, "a.txt", [["deployment schedule for march"]])
    add(conn, "b.txt", [["lunch schedule"]])
    add(conn, "c.txt", [["nothing relevant"]])
    scores = fulltext.bm25_all(conn, ["deployment", "schedule"])
    fts5 = dict(conn.execute("SELECT rowid, -bm25(chunks_fts) FROM chunks_fts"
                             " WHERE chunks_fts MATCH '\"deployment\" OR \"schedule\"'"))
    assert scores == pytest.approx(fts5) and len(scores) == 2  # c.txt matches neither token
    searched = [(row["id"], score) for row, score in
                fulltext.bm25_search(conn, ["deployment", "schedule"], 10)]
    assert searched == sorted(scores.items(), key=lambda pair: -pair[1])
    only_b = fulltext.bm25_all(conn, ["deployment", "schedule"], source="b.txt")
    assert list(only_b) == [row["id"] for row, _ in
                            fulltext.bm25_search(conn, ["lunch"], 1)]


def test_large_index_skips_tokens_in_half_the_chunks_without_changing_the_ranking(conn):
    chunks = [fulltext.Chunk(f"c{i}", 1, 1, 1, f"the note {i}", f"the note n{i}" +
                             (" rare" if i % 300 == 7 else "")) for i in range(1200)]
    fulltext.replace_source(conn, src("many.txt"), "test", [["x"]], chunks)
    assert fulltext.bm25_match(conn, ["the", "rare", "note"]) == '"rare"'
    hits = fulltext.bm25_search(conn, ["the", "rare"], 10)
    assert sorted(row["chunk_id"] for row, _ in hits) == ["c307", "c607", "c7", "c907"]
    assert len(fulltext.bm25_search(conn, ["the"], 10)) == 10  # only common words: kept


def test_fts_totals_read_fts5s_own_row_and_token_counts_without_a_count(conn):
    # bm25_match once ran count(*) over every chunk on every query (issue 16): the totals
    # now come from FTS5's averages record, which must track inserts and deletes exactly.
    assert fulltext.fts_totals(conn) == (0, 0)
    chunks = [fulltext.Chunk(f"c{i}", 1, 1, 1, "t", " ".join(["w"] * (i % 7 + 1)) + " x" * 300)
              for i in range(400)]
    fulltext.replace_source(conn, src("a.txt"), "test", [["x"]], chunks)
    add(conn, "b.txt", [["alpha beta gamma"]])
    fulltext.delete_source(conn, "a.txt")
    add(conn, "c.txt", [["one two", "three"]])
    expected = conn.execute("SELECT count(*), sum(length(tokens) - length(replace(tokens, ' ',"
                            " '')) + 1) FROM chunks").fetchone()
    assert fulltext.fts_totals(conn) == tuple(expected) and expected[0] == 2
    fulltext.replace_source(conn, src("a.txt"), "test", [["x"]], chunks)
    rows, tokens = fulltext.fts_totals(conn)
    assert (rows, tokens) == tuple(conn.execute(
        "SELECT count(*), sum(length(tokens) - length(replace(tokens, ' ', '')) + 1)"
        " FROM chunks").fetchone()) and tokens > 128 * 128  # a three-byte varint


CASE_LINES = ["parseHttpResponse(raw)", "parsehttpresponse", "PARSEHTTPRESPONSE = 1",
              "ParseHTTPResponse", "École", "école", "ab", "Ab", "AB", "aB x", ""]
CASE_NEEDLES = ["parseHttp", "ParseHTTP", "HTTP", "parsehttpresponse", "École", "école", "Ab",
                "a", "A", "B", "É", "x", "zz"]


@pytest.mark.parametrize(("scan_first", "prefix_terms", "trigrams"), [
    (exact.EXACT_SCAN_FIRST, exact.EXACT_PREFIX_TERMS, exact.EXACT_TRIGRAMS),
    (0, 0, 1), (0, exact.EXACT_PREFIX_TERMS, 1)])
def test_case_sensitive_exact_search_finds_only_that_case(conn, monkeypatch, scan_first,
                                                          prefix_terms, trigrams):
    # the trigram index is case-folded: every way of finding lines (the first lines scanned,
    # the trigrams a short needle starts, a scan of every line, the trigrams of a long one)
    # must leave the lines whose case matches, and only those
    monkeypatch.setattr(exact, "EXACT_SCAN_FIRST", scan_first)
    monkeypatch.setattr(exact, "EXACT_PREFIX_TERMS", prefix_terms)
    monkeypatch.setattr(exact, "EXACT_TRIGRAMS", trigrams)
    add(conn, "case.txt", [CASE_LINES])
    for needle in CASE_NEEDLES:
        want = [n for n, text in enumerate(CASE_LINES, 1) if needle in text]
        got = [r["line"] for r in exact.exact_search(conn, needle, 50, case_sensitive=True)]
        assert got == want, needle
        folded = [n for n, text in enumerate(CASE_LINES, 1) if needle.lower() in text.lower()]
        assert [r["line"] for r in exact.exact_search(conn, needle, 50)] == folded, needle


def test_case_sensitive_limit_counts_only_lines_of_that_case(conn):
    # the limit stops the search: lines that match only folded must not use it up
    add(conn, "many.txt", [["getUrl()"] * 30 + ["getURL()"]])
    rows = exact.exact_search(conn, "getURL", 1, case_sensitive=True)
    assert [(r["line"], r["text"]) for r in rows] == [(31, "getURL()")]
    assert [r["line"] for r in exact.exact_search(conn, "getURL", 2)] == [1, 2]


# ---------------------------------------------------------------------------
# identifiers in BM25 (issue 27), on real code indexed by the real pipeline

def site_file(package: str, relative: str) -> Path:
    """A file of an installed package (the venv's site-packages), or a skip."""
    spec = importlib.util.find_spec(package)
    path = Path(spec.origin).parent / relative if spec and spec.origin else None
    if path is None or not path.is_file():
        pytest.skip(f"{package}/{relative} is not installed (pip install -r requirements-dev.txt)")
    return path


@pytest.fixture(scope="module")
def code_kb(tmp_path_factory):
    """httpx's CLI module (snake_case) and fontTools' TTFont (camelCase), indexed as text by
    ingest.ingest into a KB without an embedder: .txt copies, so the text reader chunks them."""
    files = [site_file("httpx", "_main.py"), site_file("fontTools", "ttLib/ttFont.py")]
    base = tmp_path_factory.mktemp("code")
    folder = base / "src"
    folder.mkdir()
    for path in files:
        shutil.copyfile(path, folder / f"{path.parent.name}_{path.stem}.txt")
    kb = kbmod.open_or_create(base / "kbs", "code")
    config = json.loads((kb.folder / "config.json").read_text(encoding="utf-8"))
    config["embedding"] = {"provider": "none"}
    (kb.folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    kb = kbmod.load(base / "kbs", "code")
    assert ingest.ingest(kb, [folder]).indexed == 2
    c = fulltext.connect(kb.fulltext_path, readonly=True)
    yield c
    c.close()


def ranked(conn, query: str, limit: int = 5) -> list[str]:
    return [row["text"] for row, _ in fulltext.bm25_search(conn, segment.query_tokens(query),
                                                           limit)]


def test_a_question_in_words_finds_a_camel_case_definition_first(code_kb):
    # before identifiers were split, "get glyph order" ranked reorderGlyphs(new_glyph_order)
    # first: getGlyphOrder was one token no word of the question matched
    # how high depends on the installed fontTools (4.68 on Python 3.11+: first for all three;
    # 4.65 on 3.10: third, below two chunks that call it)
    for query in ("get glyph order", "getGlyphOrder", "get_glyph_order"):
        assert any("def getGlyphOrder(" in text for text in ranked(code_kb, query, 3)), query


def test_any_spelling_of_a_snake_case_identifier_ranks_the_chunks_holding_it_first(code_kb):
    # format_response_headers is defined once and called once: those two chunks come before
    # any chunk that only shares its words, whichever way the identifier is spelled
    holding = {row["text"] for row in code_kb.execute("SELECT text FROM chunks")
               if "format_response_headers" in row["text"]}
    assert len(holding) == 2
    for query in ("format_response_headers", "formatResponseHeaders", "format-response-headers"):
        assert set(ranked(code_kb, query, 2)) == holding, query
    # in words it is found among the first hits (a caller and format_request_headers share
    # the words); the words were split before, the whole token must not push it out
    words = ranked(code_kb, "format response headers", 5)
    assert any("def format_response_headers(" in text for text in words)
