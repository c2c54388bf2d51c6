"""The layer above the two legs, through Library.search on real files, the real tokenizer and
SQLite, and 127.0.0.1 servers speaking the chat and rerank wire formats: several phrasings,
query expansion, a rerank stage with its fallback, and MMR diversity."""

import json
import time

import pytest
from conftest import JsonApi, shared_path
from test_query_expansion import KEY, Chat

import kb as kbmod
from common import limits
from common.limits import UserError
from ingest import ingest
from library import Library
from ranking import query_expansion as qe
from ranking import rerank
from ranking.request import SearchRequest

# no word of it in the Korean story, stemmed or not (it writes "model": "models" would find it)
ENGLISH = "which statistical methods forecast time series with seasonal patterns"
KOREAN = "계절성 시계열 예측 모델"
STORY = "docs/ai-story.txt"


class Cohere(JsonApi):
    """A cohere-format /v1/rerank that ranks the documents it is given last-first, or fails
    with `status` when set."""

    status = 200

    def answer(self, path: str, headers: dict, body: dict) -> tuple[int, dict, dict]:
        if self.status != 200:
            return self.status, {}, {"message": "overloaded"}
        n = len(body["documents"])
        return 200, {}, {"results": [{"index": i, "relevance_score": (i + 1) / n}
                                     for i in reversed(range(n))]}


def library_with(tmp_path, files: dict, **config) -> Library:
    """A BM25-only KB `docs` over these files (name -> path or text), with config blocks."""
    folder = tmp_path / "docs"
    folder.mkdir()
    for name, content in files.items():
        data = content.read_bytes() if hasattr(content, "read_bytes") else content.encode()
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)
    base = tmp_path / "base"
    kb = kbmod.open_or_create(base, "docs")
    path = kb.folder / "config.json"
    block = json.loads(path.read_text(encoding="utf-8"))
    path.write_text(json.dumps({**block, "embedding": {"provider": "none"}, **config}),
                    encoding="utf-8")
    summary = ingest(kbmod.load(base, "docs"), [folder])
    assert summary.indexed == len(files), summary
    return Library(base)


@pytest.fixture
def papers():
    return {"tracemonkey.pdf": shared_path("corpus", "pdf", "en", "tracemonkey.pdf"),
            "ai-story.txt": shared_path("corpus", "txt", "ko", "ai-story.txt")}


@pytest.fixture(autouse=True)
def fresh(monkeypatch):
    monkeypatch.setattr(qe, "_cache", qe._Lru(qe.CACHE_ENTRIES))
    monkeypatch.setenv("OPENAI_API_KEY", KEY)


def sources(result: dict, n: int = 3) -> list[str]:
    return [hit["source"] for hit in result["hits"][:n]]


def test_a_korean_phrasing_beside_the_english_one_finds_the_korean_page(tmp_path, papers):
    lib = library_with(tmp_path, papers)
    alone = lib.search(SearchRequest.checked(ENGLISH, 3, "auto", "docs"))
    assert STORY not in sources(alone)  # English words alone find the English paper
    both = lib.search(SearchRequest.checked(ENGLISH, 3, "auto", "docs", queries=[KOREAN]))
    assert both["queries"] == [ENGLISH, KOREAN]
    story = [hit for hit in both["hits"] if hit["source"] == STORY]
    assert story and 1 in story[0]["queries"], both["hits"]
    assert all(set(hit["queries"]) <= {0, 1} for hit in both["hits"])
    assert "queries" not in alone and "queries" not in alone["hits"][0]


def test_phrasings_are_bounded_before_any_work():
    with pytest.raises(UserError, match="at most 5"):
        SearchRequest.checked("alpha", 3, "auto", "docs", queries=["beta"] * 6)
    with pytest.raises(UserError, match="queries"):
        SearchRequest.checked("alpha", 3, "auto", "docs", queries=["x" * 5000])
    document = "A pasted document, line after line. " * 30_000  # ~1 MB as one phrasing
    with pytest.raises(UserError, match="queries"):
        SearchRequest.checked("alpha", 3, "auto", "docs", queries=["beta", document])
    with pytest.raises(UserError, match="at most 5"):
        SearchRequest.checked("alpha", 3, "auto", "docs", queries=["beta"] * 10_000)


def test_query_expansion_is_sent_cached_and_bounded(tmp_path, papers):
    chat = Chat("openai", f"1. {KOREAN}\n2. seasonal forecasting models")
    try:
        block = {"provider": "openai", "model": "m", "baseUrl": chat.url, "timeout": 1.0,
                 "apiKeyPreset": "OpenAI"}
        lib = library_with(tmp_path, papers, queryExpansion=block)
        result = lib.search(SearchRequest.checked(ENGLISH, 3, "auto", "docs"))
        assert len(chat.requests) == 1 and ENGLISH in json.dumps(chat.requests[0]["body"])
        assert KOREAN in result["queries"] and "expansion" not in result
        assert STORY in [hit["source"] for hit in result["hits"]]
        lib.search(SearchRequest.checked(ENGLISH, 3, "auto", "docs"))
        assert len(chat.requests) == 1  # the same question again: from the cache
        lib.search(SearchRequest.checked(ENGLISH, 3, "auto", "docs", expand=False))
        assert len(chat.requests) == 1
        chat.hold = True
        start = time.monotonic()
        slow = lib.search(SearchRequest.checked("seasonal patterns in loops", 3, "auto", "docs"))
        assert time.monotonic() - start < 3.0
        assert "expansion failed" in slow["expansion"] and slow["hits"]
        assert "queries" not in slow
    finally:
        chat.close()


def test_a_reranker_reorders_and_a_failing_one_leaves_the_fused_order(tmp_path, papers,
                                                                      monkeypatch):
    monkeypatch.setenv(rerank.embedders.BREAKER_PAUSE_ENV, "0")
    api = Cohere()
    try:
        block = {"provider": "cohere", "model": "rr", "baseUrl": api.url, "topN": 5,
                 "timeout": 2.0}
        lib = library_with(tmp_path, papers, rerank=block)
        api.status = 500  # first the fused order, as a reranker that fails leaves it
        failed = lib.search(SearchRequest.checked("trace tree loop", 5, "bm25", "docs"))
        fused = [(h["page"], h["line_start"]) for h in failed["hits"]]
        assert len(fused) == 5 and "rerank skipped" in failed["degraded"]
        api.status = 200
        reranked = lib.search(SearchRequest.checked("trace tree loop", 5, "bm25", "docs"))
        request = api.requests[-1]
        assert request["body"]["query"] == "trace tree loop"
        assert len(request["body"]["documents"]) == 5
        assert [h["ranks"]["rerank"] for h in reranked["hits"]] == [1, 2, 3, 4, 5]
        assert [(h["page"], h["line_start"]) for h in reranked["hits"]] == fused[::-1]
        assert "degraded" not in reranked
        api.status = 500
        failed = lib.search(SearchRequest.checked("trace tree loop", 5, "bm25", "docs"))
        assert "rerank skipped" in failed["degraded"]
        assert [h["ranks"].get("rerank") for h in failed["hits"]] == [None] * 5
    finally:
        api.close()


def test_diversity_prefers_hits_unlike_those_above(tmp_path):
    same = "The quarterly revenue grew in every region and segment this year."
    other = "Revenue in one region fell after the plant closed."
    lib = library_with(tmp_path, {"a.txt": same, "copy-of-a.txt": same, "b.txt": other})
    query = "quarterly revenue region segment"
    by_relevance = lib.search(SearchRequest.checked(query, 2, "bm25", "docs", diversity=0.0))
    diverse = lib.search(SearchRequest.checked(query, 2, "bm25", "docs", diversity=0.7))
    assert {h["source"] for h in by_relevance["hits"]} == {"docs/a.txt", "docs/copy-of-a.txt"}
    assert {h["source"] for h in diverse["hits"]} == {"docs/a.txt", "docs/b.txt"} or \
        {h["source"] for h in diverse["hits"]} == {"docs/copy-of-a.txt", "docs/b.txt"}


def test_exact_mode_can_match_the_case_too(tmp_path):
    code = "def getURL():\n    pass\n\ndef getUrl():\n    pass\n"
    lib = library_with(tmp_path, {"a.py": code})
    folded = lib.search(SearchRequest.checked("getURL", 5, "exact", "docs"))
    cased = lib.search(SearchRequest.checked("getURL", 5, "exact", "docs", case_sensitive=True))
    assert [h["line_start"] for h in folded["hits"]] == [1, 4]
    assert [(h["line_start"], h["text"]) for h in cased["hits"]] == [(1, "def getURL():")]


def test_exact_puts_a_definition_in_code_before_its_uses(tmp_path):
    lib = library_with(tmp_path, {
        "__init__.py": "from .core import parse_header\n__all__ = ['parse_header']\n",
        "core.py": "def main():\n    return parse_header('x')\n\n\n"
                   "def parse_header(text):\n    return text.strip()\n",
        "Reader.java": "class Reader {\n  String run() { return parseHeader(line); }\n"
                       "  public static String parseHeader(String line) {\n    return line;\n"
                       "  }\n}\n",
        "notes.txt": "We call parse_header twice.\ndef parse_header is not code here.\n"})
    first = lib.search(SearchRequest.checked("parse_header", 3, "exact", "docs"))["hits"][0]
    assert (first["source"], first["line_start"]) == ("docs/core.py", 5)
    java = lib.search(SearchRequest.checked("parseHeader", 3, "exact", "docs",
                                            case_sensitive=True))["hits"]
    assert (java[0]["source"], java[0]["line_start"]) == ("docs/Reader.java", 3)
    notes = lib.search(SearchRequest.checked("parse_header", 5, "exact", "docs", "docs/notes.txt"))
    assert [h["line_start"] for h in notes["hits"]] == [1]  # prose keeps document order
    assert notes["hits"][0]["line_end"] == 2


def test_a_source_glob_limits_every_mode_to_the_files_it_matches(tmp_path):
    text = "The parser reads the header line first.\n"
    lib = library_with(tmp_path, {"src/app/parse.py": "# " + text, "src/util.py": "# " + text,
                                  "docs/parse.md": text, "tests/test_parse.py": "# " + text})
    for mode in ("auto", "bm25", "exact"):
        query = "header line" if mode == "exact" else "parser header"
        deep = lib.search(SearchRequest.checked(query, 10, mode, "docs", "docs/src/**/*.py"))
        assert {h["source"] for h in deep["hits"]} == {"docs/src/app/parse.py",
                                                       "docs/src/util.py"}, mode
        one = lib.search(SearchRequest.checked(query, 10, mode, "docs", "docs/src/*/*.py"))
        assert {h["source"] for h in one["hits"]} == {"docs/src/app/parse.py"}, mode
    sets = lib.search(SearchRequest.checked("header", 10, "bm25", "docs", "docs/*/[!t]*.??"))
    assert {h["source"] for h in sets["hits"]} == {"docs/docs/parse.md", "docs/src/util.py"}
    with pytest.raises(UserError, match="no source in 'docs' matches"):
        lib.search(SearchRequest.checked("header", 10, "bm25", "docs", "docs/**/*.rs"))


def test_a_glob_matching_more_sources_than_the_bound_is_refused(tmp_path, monkeypatch):
    lib = library_with(tmp_path, {f"n{i}.txt": f"note {i}" for i in range(12)})
    monkeypatch.setattr(limits, "MAX_GLOB_SOURCES", 3)
    with pytest.raises(UserError, match="matches more than 3 sources"):
        lib.search(SearchRequest.checked("note", 5, "bm25", "docs", "docs/*.txt"))
    ones = lib.search(SearchRequest.checked("note", 5, "bm25", "docs", "docs/n1*.txt"))
    assert len(ones["hits"]) == 3  # n1,n10,n11


def test_each_hit_names_the_query_words_it_holds_in_english_and_korean(tmp_path):
    # issue 47: a hit said nothing of what found it; `matched` counts the query's searchable
    # terms (the lexical leg's tokens) its chunks hold, a term shown as the query wrote it
    lib = library_with(tmp_path, {"en.txt": "The kiosk takes card payment at the gate.",
                                  "ko.txt": "키오스크에서 카드 결제를 받습니다."})
    english = lib.search(SearchRequest.checked("kiosk payment refund", 5, "bm25", "docs"))
    assert [(h["source"], h["matched"]) for h in english["hits"]] == [
        ("docs/en.txt", {"words": 2, "of": 3, "terms": ["kiosk", "payment"]})]
    # an English word and its stem are one word, shown as written (the chunk holds the stem)
    inflected = lib.search(SearchRequest.checked("Kiosks payments refunds", 5, "bm25", "docs"))
    assert [h["matched"] for h in inflected["hits"]] == [
        {"words": 2, "of": 3, "terms": ["kiosks", "payments"]}]
    korean = lib.search(SearchRequest.checked("키오스크 결제를 환불", 5, "bm25", "docs"))
    assert [(h["source"], h["matched"]) for h in korean["hits"]] == [
        ("docs/ko.txt", {"words": 2, "of": 3, "terms": ["키오스크", "결제"]})]
    assert not any("weak" in h or "similarity" in h for h in english["hits"] + korean["hits"])
    assert "note" not in english and "note" not in korean


def test_a_search_no_word_of_which_occurs_says_what_the_kb_holds(tmp_path):
    # issue 47: a search that found nothing like its query said nothing of why
    lib = library_with(tmp_path, {"en.txt": "The kiosk takes card payment at the gate.",
                                  "ko.txt": "키오스크에서 카드 결제를 받습니다."})
    got = lib.search(SearchRequest.checked("harbour crane", 5, "bm25", "docs"))
    assert got["hits"] == []
    assert got["note"].startswith("No word of the query occurs in knowledge base 'docs': "
                                  "nothing was found; it holds 2 sources: types text (2)")
    assert "languages en (1), ko (1)" in got["note"] and "list_sources" in got["note"]
    exact = lib.search(SearchRequest.checked("gate", 5, "exact", "docs"))
    assert exact["hits"][0]["matched"] == {"words": 1, "of": 1, "terms": ["gate"]}
    assert "weak" not in exact["hits"][0] and "note" not in exact
