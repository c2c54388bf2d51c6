"""Chunks are runs of whole lines: exact text, no noise, one line of overlap, stable ids."""

import random

import chunking


def words(n: int, rng: random.Random) -> str:
    return " ".join(rng.choice(["alpha", "beta", "gamma", "delta", "배포", "人工智能"])
                    for _ in range(n))


def make_page(rng: random.Random, n_lines: int = 60) -> list[str]:
    lines = [words(rng.randint(0, 30), rng) for _ in range(n_lines)]
    return ["ANNUAL REPORT 2024"] + lines + ["Page 3"]


def assert_exact(chunks, pages):
    for c in chunks:
        lines = pages[c.page - 1]
        if c.line_start == c.line_end and len(lines[c.line_start - 1]) > chunking.MAX_CHARS:
            assert c.text in lines[c.line_start - 1]
        else:
            assert c.text == "\n".join(lines[c.line_start - 1:c.line_end])


def test_chunks_are_exact_line_runs_within_size_and_skip_noise():
    rng = random.Random(7)
    pages = [make_page(rng) for _ in range(4)]
    noise = [{1, len(p)} for p in pages]
    chunks = chunking.chunk_pages("report.pdf", pages, noise, str.split)
    assert_exact(chunks, pages)
    assert {c.page for c in chunks} == {1, 2, 3, 4}
    for c in chunks:
        assert 1 not in range(c.line_start, c.line_end + 1)
        assert len(pages[c.page - 1]) not in range(c.line_start, c.line_end + 1)
        assert len(c.text) <= chunking.MAX_CHARS + 200  # the overlap line may add a little
        assert c.tokens == " ".join(["report", *c.text.split()])  # the file's title first
    # every non-noise, non-blank line is in some chunk
    for p, lines in enumerate(pages, 1):
        covered = {n for c in chunks if c.page == p for n in range(c.line_start, c.line_end + 1)}
        wanted = {n for n, t in enumerate(lines, 1) if t.strip() and n not in noise[p - 1]}
        assert wanted <= covered


def test_consecutive_chunks_share_one_line():
    lines = [f"line {i} " + "x" * 190 for i in range(1, 21)]
    chunks = chunking.chunk_page("a.txt", 1, lines, set(), str.split)
    # about 198 characters a line: the sixth line takes a chunk past TARGET_CHARS
    assert [(c.line_start, c.line_end) for c in chunks] == [(1, 6), (6, 11), (11, 16), (16, 20)]


def test_over_long_line_is_split_and_keeps_its_number():
    long_line = " ".join(f"word{i}" for i in range(800))  # about 6,000 characters
    lines = ["intro", long_line, "outro"]
    chunks = chunking.chunk_page("a.txt", 1, lines, set(), str.split)
    pieces = [c for c in chunks if c.line_start == c.line_end == 2]
    assert len(pieces) >= 5
    assert "".join(c.text for c in pieces) == long_line
    assert all(len(c.text) <= chunking.MAX_CHARS for c in pieces)
    assert [(c.line_start, c.line_end) for c in chunks if c not in pieces] == [(1, 1), (3, 3)]


def test_ids_are_stable_and_change_only_where_text_changed():
    rng = random.Random(1)
    pages = [make_page(rng) for _ in range(3)]
    noise = [set() for _ in pages]
    before = chunking.chunk_pages("r.pdf", pages, noise, str.split)
    assert [c.chunk_id for c in before] == [c.chunk_id
                                            for c in chunking.chunk_pages("r.pdf", pages, noise,
                                                                          str.split)]
    edited = [list(p) for p in pages]
    edited[0][5] = "a sentence that was rewritten"
    after = chunking.chunk_pages("r.pdf", edited, noise, str.split)
    changed = {c.chunk_id for c in before} ^ {c.chunk_id for c in after}
    assert changed  # the edited chunk has a new id...
    assert all(c.page == 1 for c in before + after if c.chunk_id in changed)  # ...only page 1
    other = chunking.chunk_pages("other.pdf", pages, noise, str.split)
    assert not {c.chunk_id for c in other} & {c.chunk_id for c in before}


def test_blank_and_noise_only_pages_give_no_chunks():
    assert chunking.chunk_page("a", 1, ["", "   ", ""], set(), str.split) == []
    assert chunking.chunk_page("a", 1, ["header", "12"], {1, 2}, str.split) == []


def test_sheet_chunks_carry_the_header_row_for_search_but_not_in_their_text():
    lines = ["[sheet] Sales", "", "Region | Quarter | Revenue"] + [
        f"North {i} | Q{i % 4 + 1} | {1000 + i} won" + " note" * 20 for i in range(60)]
    chunks = chunking.chunk_page("book.xlsx", 1, lines, set(), str.split)
    assert len(chunks) > 3
    assert chunks[0].context == ""  # the first chunk holds the header itself
    for c in chunks[1:]:
        assert c.context == "[sheet] Sales\nRegion | Quarter | Revenue"
        assert c.text == "\n".join(lines[c.line_start - 1:c.line_end])  # text stays exact
        assert c.tokens.startswith("book [sheet] Sales Region | Quarter | Revenue")
    plain = chunking.chunk_page("a.txt", 1, lines[2:], set(), str.split)
    assert all(c.context == "" for c in plain)


def test_bm25_text_leads_with_the_file_name_as_words():
    assert chunking.title_words("pdfs/ADOBE_2022_10K.pdf") == "ADOBE 2022 10K"
    assert chunking.title_words("docs\\보고서-2024.hwpx") == "보고서 2024"
    assert chunking.title_words("Meeting notes") == "Meeting notes"  # a chosen source name
    text = chunking.bm25_text("a/q3_results.txt", "", "Revenue rose.")
    assert text == "q3 results\nRevenue rose."
    assert chunking.bm25_text("___.txt", "ctx", "t") == "ctx\nt"  # no title words: none added
