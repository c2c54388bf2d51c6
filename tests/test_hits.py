"""Hits point at the evidence (issue 26): a merged hit joins at most hits.MAX_HIT_CHUNKS
chunks, no two hits share a line, a hit's text is read_range of its lines, and a hit whose
lines are too long to show narrows to the ones that match the query.

Real files of ../shared/corpus go through the real ingest into a BM25-only KB; one test
builds a KB with the built-in embedder for the vector leg (slow).
"""

import json
from pathlib import Path

import pytest
from conftest import shared_path

import fulltext
import ingest
import kb as kbmod
import library
from common import limits
from index import segment
from ranking import hits as hitsmod
from ranking.request import SearchRequest

TRACEMONKEY = ("corpus", "pdf", "en", "tracemonkey.pdf")
LONG_TEXTS = (("corpus", "txt", "en", "norwich-city.txt"),  # one 741-line page
              ("corpus", "txt", "en", "UDHR_first_article_all.txt"))  # 1,511 lines, many scripts
QUERIES = ("trace tree loop", "nested loops type specialization", "side exit guard",
           "Norwich City football club Carrow Road", "Canaries stadium season",
           "human rights dignity reason conscience", "是人都生而自由")


def build(base: Path, kb_id: str, embedding: dict, files: list[Path]) -> library.Library:
    kb = kbmod.open_or_create(base, kb_id)
    (kb.folder / "config.json").write_text(json.dumps({"id": kb_id, "embedding": embedding}),
                                           encoding="utf-8")
    summary = ingest.ingest(kbmod.load(base, kb_id), files)
    assert summary.failed == [] and summary.indexed == len(files)
    return library.Library(base)


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    files = [shared_path(*TRACEMONKEY)] + [shared_path(*parts) for parts in LONG_TEXTS]
    lib = build(tmp_path_factory.mktemp("hits"), "docs", {"provider": "none"}, files)
    yield lib
    lib.close()


def assert_hits_point_at_evidence(lib: library.Library, kb_id: str, found: list[dict]) -> None:
    """Each hit: within the chunk bound and its chunks' lines, no line shared with another
    hit, and it reads back."""
    assert found
    taken: dict[tuple[str, int], set[int]] = {}
    for hit in found:
        assert 1 <= len(hit["merged_chunk_ids"]) <= hitsmod.MAX_HIT_CHUNKS, hit
        chunks = [lib.get_document_chunk(c, kb_id) for c in hit["merged_chunk_ids"]]
        first, last = hit.get("merged_lines", (hit["line_start"], hit["line_end"]))
        assert min(c["line_start"] for c in chunks) <= first <= hit["line_start"]
        assert hit["line_end"] <= last <= max(c["line_end"] for c in chunks)
        lines = set(range(first, last + 1))
        page = taken.setdefault((hit["source"], hit["page"]), set())
        assert not page & lines, f"lines {sorted(page & lines)} are in two hits"
        page |= lines
        assert_reads_back(lib, kb_id, hit)


def assert_reads_back(lib: library.Library, kb_id: str, hit: dict) -> None:
    """A hit's text is exactly what read_range returns for its lines, within MAX_HIT_CHARS."""
    got = lib.read_range(hit["source"], hit["page"], hit["line_start"], hit["line_end"], 0,
                         kb_id)
    assert (got["line_start"], got["line_end"]) == (hit["line_start"], hit["line_end"])
    assert "\n".join(line["text"] for line in got["lines"]) == hit["text"], hit
    assert len(hit["text"]) <= limits.MAX_HIT_CHARS


@pytest.mark.parametrize("query", QUERIES)
def test_hits_on_real_files_stay_bounded_apart_and_read_back(lib, query):
    found = lib.search(SearchRequest.checked(query, limits.MAX_TOP_K, "bm25"))["hits"]
    assert_hits_point_at_evidence(lib, "docs", found)


def test_a_line_deep_in_a_page_is_in_the_hit_that_cites_it(lib):
    # regression: seven chunks of page 7 merged into lines 1-123, cut at 4,000 characters, so
    # the hit cited line 104 (the one the query names) without showing it
    line = "nesting. The problem is that outer loop traces often abort during"
    number = next(n for n, text in page_lines(lib, "tracemonkey.pdf", 7) if text == line)
    found = lib.search(SearchRequest.checked("trace loop problem nesting.", 5, "bm25"))["hits"]
    citing = [h for h in found
              if h["page"] == 7 and h["line_start"] <= number <= h["line_end"]]
    assert citing and line in citing[0]["text"].split("\n"), found
    assert_hits_point_at_evidence(lib, "docs", found)


def page_lines(lib: library.Library, source: str, page: int) -> list[tuple[int, str]]:
    with lib.kbs.reading("docs") as entry:
        return fulltext.page_lines(entry.conn, source, page)


def whole_page_hit(lib: library.Library, page: int, best: tuple[int, int]) -> hitsmod.Hit:
    """A hit over all of a page of tracemonkey.pdf, as merging made them before the bound."""
    last = len(page_lines(lib, "tracemonkey.pdf", page))
    return hitsmod.Hit("c", "tracemonkey.pdf", page, 1, last, "", 1.0, {}, ["c"],
                       best_lines=best)


def shown(lib: library.Library, hit: hitsmod.Hit, query: str) -> dict:
    with lib.kbs.reading("docs") as entry:
        hitsmod.with_text(entry.conn, [hit], query, segment.tokens)
    return hit.to_json()


def test_a_hit_too_long_to_show_narrows_to_the_lines_holding_the_query(lib):
    hit = whole_page_hit(lib, 7, (105, 112))
    last = hit.line_end
    found = shown(lib, hit, "blacklisting aborts inner tree traces")
    assert found["merged_lines"] == [1, last] and "read_range" in found["text_cut"]
    assert 1 < found["line_start"] <= 105 <= 112 <= found["line_end"] < last, found
    assert "Thus, we should not count such aborts toward blacklisting as long" in found["text"]
    assert_reads_back(lib, "docs", found)


def test_the_window_keeps_the_best_ranked_chunk_whole_before_the_query_words(lib):
    # regression: the query's words further down pulled the window off the chunk ranked first
    # (a definition's line, when an identifier's parts recur in the lines below it)
    found = shown(lib, whole_page_hit(lib, 7, (1, 35)), "blacklisting aborts inner tree traces")
    assert found["line_start"] == 1 and found["line_end"] >= 35, found
    assert found["line_end"] < found["merged_lines"][1]
    assert_reads_back(lib, "docs", found)


def test_without_a_matching_line_the_window_holds_the_best_ranked_chunk(lib):
    # a vector hit may share no token with the query: its best-ranked chunk is the evidence
    found = shown(lib, whole_page_hit(lib, 7, (50, 93)), "zyzzyva")
    assert found["line_start"] <= 50 and found["line_end"] >= 93, found
    assert_reads_back(lib, "docs", found)


def test_a_hit_that_fits_keeps_its_lines_and_says_nothing_more(lib):
    found = shown(lib, hitsmod.Hit("c", "tracemonkey.pdf", 7, 36, 49, "", 1.0, {}, ["c"]), "x")
    assert (found["line_start"], found["line_end"]) == (36, 49)
    assert "merged_lines" not in found and "text_cut" not in found
    assert_reads_back(lib, "docs", found)


def test_one_cut_line_always_fits_a_hit():
    # what makes every window hold at least one line, so a hit's text is never cut mid-line
    assert limits.MAX_LINE_CHARS + len(limits.CUT_MARK) <= limits.MAX_HIT_CHARS


# ----------------------------------------------------------------------------- merge rules


def bare(first: int, last: int, *chunks: str) -> hitsmod.Hit:
    return hitsmod.Hit(chunks[0], "a.txt", 1, first, last, "", 1.0, {"bm25": 1}, list(chunks))


def spans(kept: list[hitsmod.Hit]) -> list[tuple[int, int, list[str]]]:
    return [(h.line_start, h.line_end, h.chunk_ids) for h in kept]


def test_a_chunk_that_would_pass_the_bound_keeps_only_its_own_lines():
    kept = [bare(1, 40, "a", "b", "c")]
    new = bare(40, 55, "d")
    assert not hitsmod.merge_into(kept, new)  # a hit of its own, without line 40
    assert (new.line_start, new.line_end, new.best_lines) == (41, 55, (41, 55))
    assert spans(kept) == [(1, 40, ["a", "b", "c"])]
    assert hitsmod.merge_into(kept, bare(10, 40, "e"))  # every line held: no hit of its own
    assert spans(kept) == [(1, 40, ["a", "b", "c"])]


def test_a_chunk_between_two_hits_joins_them_only_within_the_bound():
    kept = [bare(1, 18, "a"), bare(31, 44, "b")]
    assert hitsmod.merge_into(kept, bare(18, 31, "c"))
    assert spans(kept) == [(1, 44, ["a", "c", "b"])]
    kept = [bare(1, 31, "a", "a2", "a3"), bare(44, 66, "b", "b2", "b3")]
    new = bare(31, 44, "c")
    assert not hitsmod.merge_into(kept, new)  # 7 chunks: it keeps the lines between them
    assert (new.line_start, new.line_end) == (32, 43)
    kept = [bare(1, 31, "a", "a2"), bare(44, 66, "b")]
    assert hitsmod.merge_into(kept, bare(31, 44, "c"))  # those lines border a hit with room
    assert spans(kept) == [(1, 43, ["a", "a2", "c"]), (44, 66, ["b"])]


def test_a_bordering_hit_joins_while_there_is_room():
    kept = [bare(1, 30, "a", "b", "c"), bare(41, 50, "e")]
    new = bare(31, 40, "d")
    assert hitsmod.merge_into(kept, new)  # not into the full hit; into the one with room
    assert spans(kept) == [(1, 30, ["a", "b", "c"]), (31, 50, ["e", "d"])]


@pytest.mark.slow
def test_vector_hits_on_tracemonkey_point_at_evidence(tmp_path):
    # the report of issue 26: vector hits of lines 31-115 and 1-119, 7 and 6 chunks merged
    lib = build(tmp_path, "vec", {"provider": "builtin"}, [shared_path(*TRACEMONKEY)])
    try:
        for query in QUERIES[:3] + ("how does the recorder handle nested loops",):
            found = lib.search(SearchRequest.checked(query, 20, "vector", "vec"))["hits"]
            assert_hits_point_at_evidence(lib, "vec", found)
    finally:
        lib.close()
