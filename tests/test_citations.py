"""verify_citation (issue 48): a quote in, where it really is out.

The folding rules and the bounds are checked on their own (fast); every status on real PDFs
of ../shared/corpus in English, Korean and Chinese, indexed by the real ingest (slow: the
segmenters load); and the tool over stdio with fastmcp's Client, on text files indexed by
`ingest.py` in a subprocess.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from conftest import bm25_kb, call, clean_env, ingest_cli, shared_path, tool_error
from fastmcp import Client
from fastmcp.client.transports import StdioTransport

from common import limits
from common.limits import UserError
from library import Library
from ranking import citations, quote_alignment, quote_folding
from ranking.citations import Quote

REPO = Path(__file__).resolve().parent.parent
module_loop = pytest.mark.asyncio(loop_scope="module")


# ---------------------------------------------------------------------------
# what counts as the same text


@pytest.mark.parametrize("quoted, indexed", [
    ("the record industry", "the record in-\ndustry"),  # end-of-line hyphenation
    ("the record industry", "the record in\u00addustry"),  # a soft hyphen
    ("a well-known rule", "a well-\nknown rule"),
    ("He said \"no\" -- twice...", "He said \u201cno\u201d \u2014 twice\u2026"),
    ("ＡＢＣ１２３ ﬁne", "ABC123 fine"),  # full-width forms, a ligature (NFKC)
    ("Straße", "STRASSE"),  # case folded
    ("化学反应式，是用化学式来描述各种物质", "化学反应式,是用化学式来描述\n各种物质"),  # no space
    ("def  f(x):\n    return x", "def f(x): return x"),
])
def test_folding_ignores_layout_and_typography(quoted, indexed):
    assert quote_folding.fold(quoted).skeleton == quote_folding.fold(indexed).skeleton


def test_folding_keeps_words_numbers_and_case_when_asked():
    assert quote_folding.fold("is not true").skeleton != quote_folding.fold("is true").skeleton
    assert quote_folding.fold("12.5%").skeleton != quote_folding.fold("12.6%").skeleton
    fold = quote_folding.fold
    assert fold("getURL", True).skeleton != fold("getUrl", True).skeleton


def test_every_folded_character_maps_back_to_its_raw_character():
    raw = "Ｗord \u201cq\u201d in-\ndustry ﬁne"
    folded = quote_folding.fold(raw)
    assert folded.skeleton == "wordqindustryfine"
    assert "".join(raw[folded.raw(k)] for k in range(len(folded.skeleton))) == \
        "Ｗordqindustryﬁﬁne"  # the ligature's two letters both come from it


def test_an_ellipsis_cuts_a_quote_into_pieces_found_in_order():
    parts = [piece.folded.skeleton for piece in quote_folding.pieces(
        "The first words [...] the middle … and the end... ")]
    assert parts == ["thefirstwords", "themiddle", "andtheend"]
    text = quote_folding.fold("The first words, then many more, the middle, and the end.").skeleton
    assert quote_alignment.occurrences(text, parts) == [(0, len(text) - 1)]
    assert quote_alignment.occurrences(text, parts[::-1]) == []


# ---------------------------------------------------------------------------
# bounds, refused before any work with the limit named


@pytest.mark.parametrize("quotes, words", [
    ([], "quotes is empty; send 1 to 20"),
    ([Quote("a quote")] * (limits.MAX_QUOTES + 1), "quotes holds 21 quotes; send at most 20"),
    ([Quote("x" * (limits.MAX_QUOTE_CHARS + 1))],
     "quotes[0].text is 4,001 characters long; the limit is 4,000"),
    ([Quote("fine"), Quote(" ... \u2014 ")], "quotes[1].text holds no words to look for"),
    ([Quote("fine", page=2, line_start=9, line_end=3)], "line_end 3 is before line_start 9"),
    ([Quote("fine", source="a\x00b")], "quotes[0].source holds the character U+0000"),
    ([Quote("fine", page=0)], "quotes[0].page must be 1 to 1,000,000,000"),
])
def test_bounds_are_refused_with_the_limit_named(quotes, words):
    with pytest.raises(UserError, match=re.escape(words)):
        citations.check_quotes(quotes)


# ---------------------------------------------------------------------------
# the place cited, on a small index written through fulltext.replace_source

LEDGER = [
    ["Harbour ledger", "The eastern crane was inspected in March and found sound.",
     "Its cable is replaced every second winter."],
    ["Harbour ledger", "The western crane was inspected in April and found worn.",
     "Tugboat crews rotate every nine days during the winter season,",
     "and every twelve days in summer."],
    ["Harbour ledger", "Pilots board inbound ships at the outer buoy."],
]


@pytest.fixture
def ledger(tmp_path):
    import chunking
    import fulltext
    from index import segment

    conn = fulltext.connect(tmp_path / fulltext.FILENAME)
    chunks = chunking.chunk_pages("ledger.txt", LEDGER, chunking.noise_lines(LEDGER),
                                  segment.tokens)
    fulltext.replace_source(conn, fulltext.SourceFile("ledger.txt", "/x/ledger.txt", "h", 1,
                                                      1.0), "text", LEDGER, chunks)
    yield conn
    conn.close()


@pytest.mark.parametrize("place, status", [
    ({"page": 2, "line_start": 3, "line_end": 4}, "verbatim"),
    ({"page": 2, "line_start": 3}, "verbatim"),  # line_start alone: where it starts
    ({"page": 2, "line_end": 4}, "verbatim"),  # line_end alone: where it ends
    ({"page": 2}, "verbatim"),
    ({}, "verbatim"),
    ({"page": 2, "line_start": 2, "line_end": 4}, "verbatim"),  # lines within those cited
    ({"page": 2, "line_start": 4}, "elsewhere"),  # it starts on line 3
    ({"page": 2, "line_start": 3, "line_end": 3}, "elsewhere"),  # it runs on to line 4
    ({"page": 1, "line_start": 3, "line_end": 4}, "elsewhere"),
    ({"source": "other.txt", "page": 2}, "elsewhere"),  # no such source: said so
])
def test_the_place_cited_is_checked_part_by_part(ledger, place, status):
    quote = "Tugboat crews rotate every nine days during the winter season, and every twelve"
    verdict = citations.verify(ledger, Quote(quote, **{"source": "ledger.txt", **place}))
    assert verdict.status == status, verdict
    assert verdict.place == quote_alignment.Place("ledger.txt", 2, 3, 2, 4)
    if "other.txt" in place.values():
        assert "there is no source named 'other.txt'" in verdict.note


def test_a_look_alike_on_the_cited_page_does_not_hide_the_quote_elsewhere(tmp_path):
    # regression: a sentence on the cited page like the quote stopped the search at `close`
    # while the quote was word for word three pages on, in a filing whose words are joined
    # by no-break spaces (so the exact index's stretches miss it and only BM25 finds it)
    import chunking
    import fulltext
    from index import segment

    quote = "The western crane was inspected in April and found worn."
    filler = [f"Berth {n} was swept and its bollards painted on day {n} of the season."
              for n in range(12)]  # pages longer than the quote's reach around the citation
    pages = [["Harbour ledger", "The western crane was inspected in April and found sound.",
              *filler], ["Harbour ledger", *filler], ["Harbour ledger", *filler],
             ["Harbour ledger", *filler, quote.replace(" ", "\xa0")]]
    conn = fulltext.connect(tmp_path / fulltext.FILENAME)
    chunks = chunking.chunk_pages("ledger.txt", pages, chunking.noise_lines(pages),
                                  segment.tokens)
    fulltext.replace_source(conn, fulltext.SourceFile("ledger.txt", "/x/ledger.txt", "h", 1,
                                                      1.0), "text", pages, chunks)
    verdict = citations.verify(conn, Quote(quote, "ledger.txt", 1, 2, 2))
    conn.close()
    assert (verdict.status, verdict.place.page, verdict.place.line_start) == ("elsewhere", 4, 14)


def test_several_kbs_answer_from_the_one_holding_the_quote_and_lines_are_bounded(tmp_path):
    import ingest

    rows = [f"Row {n}: berth {n} cleared by the night crew." for n in range(40)]
    for kb_id, text in (("a", "Nothing about berths here.\n"), ("b", "\n".join(rows))):
        (tmp_path / kb_id).mkdir()
        (tmp_path / kb_id / f"{kb_id}.txt").write_text(text, encoding="utf-8")
        ingest.ingest(bm25_kb(tmp_path / "base", kb_id), [tmp_path / kb_id / f"{kb_id}.txt"])
    library = Library(tmp_path / "base")
    quote = {"text": " ".join(rows)}
    try:
        got = library.verify_citation([quote] * limits.MAX_QUOTES, "*")
    finally:
        library.close()
    assert got["kb_id"] == ["a", "b"]
    first = got["results"][0]
    assert (first["status"], first["kb_id"], first["line_start"], first["line_end"]) == \
        ("verbatim", "b", 1, 40)
    # 20 answers share one read_range's bound: 25 lines each, then where to read on
    assert len(first["lines"]) == limits.MAX_READ_LINES // limits.MAX_QUOTES
    assert first["more"].endswith("read_range(source, page=1, line_start=26)")


# ---------------------------------------------------------------------------
# real PDFs in three languages

EN, TRACE, KO, ZH = "dmca.pdf", "tracemonkey.pdf", "korean-text-with-tables.pdf", \
    "mineru_chemistry_introduction_zh.pdf"


@pytest.fixture(scope="module")
def corpus_kb(tmp_path_factory) -> Library:
    import ingest

    files = [shared_path("corpus", "pdf", "en", EN), shared_path("corpus", "pdf", "en", TRACE),
             shared_path("corpus", "pdf", "ko", KO), shared_path("corpus", "pdf", "zh", ZH)]
    base = tmp_path_factory.mktemp("cite-corpus")
    summary = ingest.ingest(bm25_kb(base, "docs"), files)
    assert summary.indexed == 4, summary
    library = Library(base)
    yield library
    library.close()


def check(library: Library, text: str, **place) -> dict:
    return library.verify_citation([{"text": text, **place}], "docs")["results"][0]


def where(answer: dict) -> tuple:
    return (answer.get("source"), answer.get("page"), answer.get("line_start"),
            answer.get("page_end", answer.get("page")), answer.get("line_end"))


@pytest.mark.slow
@pytest.mark.parametrize("source, page, quote, lines", [
    (EN, 1, "This memorandum summarizes briefly each title of the DMCA.", (31, 31)),
    (KO, 1, "무이자할부, 다이어트할부, 삼성카드 할인이 적용된 일시불 및 할부 이용금액", (2, 3)),
    # Chinese across two lines, reflowed without the break, its comma half-width
    (ZH, 1, "又称化学反应式、化学反应方程式,是用化学式来描述各种物质之间的不同化学反应的式子",
     (4, 5)),
])
def test_a_true_quote_is_verbatim_with_its_lines(corpus_kb, source, page, quote, lines):
    answer = check(corpus_kb, quote, source=source, page=page)
    assert answer["status"] == "verbatim", answer
    assert where(answer) == (source, page, lines[0], page, lines[1])
    # the lines are read_range's, and they hold the quote
    got = corpus_kb.read_range(source, page, lines[0], lines[1], 0, "docs")
    assert answer["lines"] == got["lines"]


@pytest.mark.slow
@pytest.mark.parametrize("source, quote, cited", [
    (EN, "This memorandum summarizes briefly each title of the DMCA.", 3),
    (KO, "삼성카드 할인이 적용된 일시불 및", 2),  # a page the source does not have
    (ZH, "是用化学式来描述", 4),
])
def test_a_true_quote_at_the_wrong_page_is_elsewhere_with_its_place(corpus_kb, source, quote,
                                                                   cited):
    answer = check(corpus_kb, quote, source=source, page=cited)
    assert answer["status"] == "elsewhere", answer
    assert answer["page"] == 1 and answer["source"] == source
    assert "not at" in answer["note"] and answer["citation"] in answer["note"]


@pytest.mark.slow
@pytest.mark.parametrize("source, quote, changed", [
    (EN, "As discussed above, in 1996 Congress enacted the DPRA, creating a performance right "
         "in sound recordings", {"quote": "1996", "source": "1995"}),
    (EN, "The exemption permits a copy that is made automatically when a computer is "
         "activated", {"quote": "", "source": "only"}),
    (KO, "무이자할부, 다이어트할부, 현대카드 할인이 적용된 일시불 및 할부 이용금액",
     {"quote": "현대카드", "source": "삼성카드"}),
    (ZH, "又称化学反应式、化学反应方程式，是用物理式来描述各种物质之间的不同化学反应的式子",
     {"quote": "物理", "source": "化学"}),
])
def test_a_changed_quote_is_close_and_names_the_word(corpus_kb, source, quote, changed):
    answer = check(corpus_kb, quote, source=source)
    assert answer["status"] == "close", answer
    assert answer["source"] == source and 0.8 <= answer["similarity"] < 1
    assert changed in answer["differences"], answer["differences"]


@pytest.mark.slow
@pytest.mark.parametrize("quote", [
    "The harbour master logged eleven cranes before the storm reached the northern pier.",
    "오늘 회의에서는 새로운 배포 일정과 예산 변경을 자세히 논의했다고 담당자가 밝혔다.",
    "本次会议详细讨论了新的发布时间表和预算调整，负责人表示下周公布结果。",
])
def test_a_sentence_from_no_document_is_not_found(corpus_kb, quote):
    answer = check(corpus_kb, quote, source=EN, page=2)
    assert answer["status"] == "not_found", answer
    assert "lines" not in answer and "do not present it as a quote" in answer["note"]


@pytest.mark.slow
def test_a_quote_across_a_page_break_skips_the_running_header(corpus_kb):
    # dmca.pdf page 6 ends "...The scope of the protection"; page 7 starts with two header
    # lines ("The Digital Millennium ...", "Copyright Office Summary ... Page 7") a reader
    # leaves out of the quote
    quote = ("integrity of copyright management information (CMI). The scope of the protection "
             "is set out in two separate paragraphs")
    answer = check(corpus_kb, quote, source=EN, page=6)
    assert answer["status"] == "verbatim", answer
    assert (answer["page"], answer["page_end"]) == (6, 7)
    assert answer["lines"][0]["page"] == 6 and answer["lines"][-1]["page"] == 7
    assert answer["lines"][-1]["text"].startswith("is set out in two separate paragraphs")


@pytest.mark.slow
def test_hyphenation_across_a_page_break_and_a_ligature_from_a_real_pdf(corpus_kb):
    # tracemonkey.pdf page 4 ends "In TraceMonkey, objects’ rep-" and page 5 starts
    # "resentations are assigned ..."; the quote has the word whole, a straight apostrophe,
    # and the "fi" ligature a PDF viewer copies as U+FB01
    quote = ("so the simpliﬁed code requires guard instructions that ensure the object "
             "representation is the same. In TraceMonkey, objects' representations are "
             "assigned an integer key")
    answer = check(corpus_kb, quote, source=TRACE, page=4)
    assert answer["status"] == "verbatim", answer
    assert (answer["source"], answer["page"], answer["page_end"], answer["line_end"]) == \
        (TRACE, 4, 5, 1)
    assert answer["lines"][-2]["text"].endswith("rep-")


@pytest.mark.slow
def test_an_ellipsis_stands_for_words_left_out(corpus_kb):
    quote = "This memorandum summarizes briefly […] the text of the legislation itself."
    answer = check(corpus_kb, quote, source=EN, page=1)
    assert answer["status"] == "verbatim", answer
    assert (answer["line_start"], answer["line_end"]) == (31, 34)


# ---------------------------------------------------------------------------
# over stdio, with a real client

NOTES = ("Harbour maintenance notes\n"
         "The eastern crane was inspected on 12 March and found sound.\n"
         "Its cable will not be replaced before the autumn survey.\n"
         "\f"
         "Second page\n"
         "Tugboat crews rotate every nine days during the winter season.\n")


@pytest.fixture(scope="module")
def notes_base(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("cite-stdio")
    (root / "docs").mkdir()
    (root / "docs" / "harbour.txt").write_text(NOTES, encoding="utf-8")
    base = root / "base"
    ingest_cli(str(root / "docs"), "--kb", "notes", base=base)
    return base


@module_loop
async def test_verify_citation_over_stdio(notes_base):
    transport = StdioTransport(sys.executable, [str(REPO / "server.py"), "--base-path",
                                                str(notes_base)],
                               env=clean_env(), cwd=str(REPO), keep_alive=False)
    async with Client(transport, timeout=120) as client:
        tools = {tool.name: tool for tool in await client.list_tools()}
        assert tools["verify_citation"].annotations.read_only_hint is True
        got = await call(client, "verify_citation", quotes=[
            {"text": "The eastern crane was inspected on 12 March\nand found sound.",
             "source": "harbour.txt", "page": 1, "line_start": 2, "line_end": 2},
            {"text": "Tugboat crews rotate every nine days", "source": "harbour.txt",
             "page": 1},
            {"text": "Its cable will be replaced before the autumn survey."},
            {"text": "The western gantry collapsed during the spring storm of that year."}])
        results = got["results"]
        assert [r["status"] for r in results] == ["verbatim", "elsewhere", "close",
                                                  "not_found"]
        assert [r["quote"] for r in results] == [0, 1, 2, 3]
        assert results[0]["lines"] == [{"line": 2, "text": NOTES.splitlines()[1]}]
        assert (results[1]["page"], results[1]["line_start"]) == (2, 2)
        assert results[2]["differences"] == [{"quote": "", "source": "not"}]
        # bounds: the limit named, before any work
        text = await tool_error(client, "verify_citation",
                                quotes=[{"text": "x"}] * (limits.MAX_QUOTES + 1))
        assert "quotes holds 21 items; send at most 20" in text
        text = await tool_error(client, "verify_citation",
                                quotes=[{"text": "y" * (limits.MAX_QUOTE_CHARS + 1)}])
        assert "quotes[0].text is 4,001 characters long; the limit is 4,000" in text
        text = await tool_error(client, "verify_citation", quotes=[{"quote": "z"}])
        assert "quotes.0.text is required" in text
