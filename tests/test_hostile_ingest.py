"""Hostile and unlucky input to the indexer (issue 13): huge lines, size limits, template
PDFs, scans with no OCR engine, symlinks out of a synced folder, source names that collide,
and a damaged index. Real files, real SQLite, real processes."""

import json
import time
from pathlib import Path

import pytest
from conftest import shared_path, text_pdf

import chunking
import extract
import fulltext
import ingest
import kb as kbmod

REPO = Path(__file__).resolve().parent.parent


def bm25_kb(base: Path, kb_id: str = "hostile",
            source_paths: tuple[Path, ...] = ()) -> kbmod.KnowledgeBase:
    """A KB with no embedder: these tests are about extraction, chunking and the record."""
    folder = base / kb_id
    folder.mkdir(parents=True, exist_ok=True)
    config = {"id": kb_id, "embedding": {"provider": "none"},
              "sourcePaths": [str(p) for p in source_paths]}
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return kbmod.load(base, kb_id)


def source(kb: kbmod.KnowledgeBase, name: str) -> dict:
    conn = fulltext.connect(kb.fulltext_path, readonly=True)
    try:
        return next(s for s in fulltext.list_sources(conn) if s["name"] == name)
    finally:
        conn.close()


def long_line(chars: int) -> str:
    """One line of distinct letter-only words (no newline), about `chars` characters."""
    letters = "abcdefghijklmnopqrstuvwxyz"
    words, size, i = [], 0, 0
    while size < chars:
        word, n = "", i + 26**3
        while n:
            n, r = divmod(n, 26)
            word += letters[r]
        words.append(word)
        size += len(word) + 1
        i += 1
    return " ".join(words)


# ----------------------------------------------------------------------------- 1. linear


def test_split_long_line_pieces_are_the_line_in_order_and_within_max():
    text = long_line(50_000) + "x" * 5_000  # words, then a run with no space to cut at
    pieces = chunking._split_long_line(text)
    assert "".join(pieces) == text
    assert all(len(p) <= chunking.MAX_CHARS for p in pieces)
    assert all(p.endswith(" ") for p in pieces[:-6])  # cut at whitespace where there is some


def test_50mb_single_line_text_ingests_in_bounded_time(tmp_path):
    # Regression (issue 13): _split_long_line re-sliced the remainder per piece, so a 50 MB
    # one-line file took 7 minutes; the bound is generous, it only catches quadratic time.
    doc = tmp_path / "one-line.txt"
    doc.write_text(long_line(50 * 2**20), encoding="utf-8")
    kb = bm25_kb(tmp_path / "base")
    start = time.monotonic()
    summary = ingest.ingest(kb, [doc])
    elapsed = time.monotonic() - start
    assert (summary.indexed, summary.lines, summary.failed) == (1, 1, [])
    assert elapsed < 120, f"{elapsed:.0f} s for 50 MB on one line"  # 2 busy cores: ~40 s
    conn = fulltext.connect(kb.fulltext_path, readonly=True)
    try:
        longest = conn.execute("SELECT max(length(text)), count(*) FROM chunks").fetchone()
    finally:
        conn.close()
    assert longest[0] <= chunking.MAX_CHARS and longest[1] == summary.chunks > 40_000


def test_millions_of_short_lines_chunk_in_linear_time():
    lines = [f"row {i}" for i in range(2_000_000)] + [""] * 100_000 + ["end"]
    start = time.monotonic()
    chunks = chunking.chunk_page("rows.txt", 1, lines, set(), str.split)
    assert time.monotonic() - start < 60
    assert chunks[0].line_start == 1 and chunks[-1].line_end == len(lines)
    assert max(len(c.text) for c in chunks) <= chunking.MAX_CHARS + 20  # + the overlap line


# ----------------------------------------------------------------------------- 3. noise


def test_template_pdf_whose_pages_share_every_line_keeps_them_as_content(tmp_path):
    # Regression (issue 13): noise_lines took every line of a template PDF for a running
    # header, leaving its lines with 0 chunks in state ready.
    template = ["ACME Corp. Inspection form", "Inspector: ________", "Site: ________",
                "Signature: ________"]
    path = tmp_path / "forms.pdf"
    text_pdf([template] * 12).output(str(path))
    doc = extract.extract(path)
    assert all(page == template for page in doc.pages)
    assert extract.noise_lines(doc.pages) == [set()] * 12
    kb = bm25_kb(tmp_path / "base")
    summary = ingest.ingest(kb, [path])
    assert summary.chunks == 12 and summary.warnings == []
    assert source(kb, "forms.pdf")["state"] == "ready"


def test_running_headers_of_pages_with_a_body_are_still_noise():
    topics = "harbour crane tide ledger invoice audit pump valve rotor cable relay gauge".split()
    body = [[f"The {topics[(p + i) % 12]} of {topics[(p * 5 + i) % 12]} was checked {w}."
             for i, w in enumerate(("twice", "daily", "again", "today", "early"))]
            for p in range(6)]
    pages = [["ACME annual report", *lines, str(p + 1)] for p, lines in enumerate(body)]
    pages.append(["ACME annual report", "7"])  # a header-only page among bodied ones
    noise = extract.noise_lines(pages)
    assert noise[:6] == [{1, 7}] * 6 and noise[6] == {1, 2}


# ----------------------------------------------------------------------------- 2. size limits


def test_file_over_the_size_limit_needs_action_and_is_not_read(tmp_path, monkeypatch):
    # Regression (issue 13): no file size limit; any file was hashed and read whole.
    monkeypatch.setenv(ingest.MAX_FILE_ENV, "0.004")  # 4 KB, so the files stay small
    big, small = tmp_path / "big.txt", tmp_path / "small.txt"
    big.write_text("A line about the harbour crane.\n" * 200, encoding="utf-8")  # 6.4 KB
    small.write_text("A short note about the tide tables.\n", encoding="utf-8")
    kb = bm25_kb(tmp_path / "base")
    summary = ingest.ingest(kb, [big])
    assert [(f["source"], f["reason"], f["state"]) for f in summary.failed] == [
        ("big.txt", "too-large", "needs_action")]
    assert ingest.MAX_FILE_ENV in summary.failed[0]["detail"]
    row = source(kb, "big.txt")
    assert (row["state"], row["sha256"], row["pages"]) == ("needs_action", "", 0)  # not hashed
    assert ingest.ingest(kb, [small]).indexed == 1


def test_text_over_the_character_limit_is_too_large_even_from_a_small_file(tmp_path,
                                                                         monkeypatch):
    # Regression (issue 13): nothing bounded what extraction may produce from a small file.
    monkeypatch.setenv(extract.MAX_TEXT_ENV, "5000")
    pdf = tmp_path / "dense.pdf"  # compressed streams: 6,000+ characters in a few KB
    text_pdf([[f"Row {p}-{i}: the quarterly ledger balances again." for i in range(40)]
              for p in range(4)]).output(str(pdf))
    txt = tmp_path / "long.txt"
    txt.write_text("The tide tables for March, checked again.\n" * 200, encoding="utf-8")
    for path in (pdf, txt):
        with pytest.raises(extract.ExtractError) as caught:
            extract.extract(path)
        assert caught.value.reason == "too-large" and extract.MAX_TEXT_ENV in caught.value.detail
    summary = ingest.ingest(bm25_kb(tmp_path / "base"), [pdf])
    assert [(f["reason"], f["state"]) for f in summary.failed] == [("too-large", "needs_action")]
    monkeypatch.setenv(extract.MAX_TEXT_ENV, "100000")
    assert len(extract.extract(pdf).pages) == 4


def test_a_limit_that_is_no_number_stops_the_run_before_any_file(tmp_path, monkeypatch):
    monkeypatch.setenv(ingest.MAX_FILE_ENV, "lots")
    doc = tmp_path / "a.txt"
    doc.write_text("Alpha.", encoding="utf-8")
    with pytest.raises(kbmod.ConfigError, match=ingest.MAX_FILE_ENV):
        ingest.ingest(bm25_kb(tmp_path / "base"), [doc])


# ----------------------------------------------------------------------------- 4. states


def test_scan_without_tesseract_needs_action_naming_how_to_install(tmp_path, monkeypatch):
    # Regression (issue 13): a scanned PDF with no Tesseract ended `ready` with 0 chunks.
    import pytesseract

    scan = shared_path("corpus", "pdf", "scanned", "chinese_scan.pdf")
    monkeypatch.setattr(pytesseract.pytesseract, "tesseract_cmd", str(tmp_path / "no-tesseract"))
    monkeypatch.setenv("LINECITE_OCR_CACHE", str(tmp_path / "ocr"))  # no cached answer either
    kb = bm25_kb(tmp_path / "base")
    summary = ingest.ingest(kb, [scan])
    assert summary.indexed == 0
    failure = summary.failed[0]
    assert (failure["reason"], failure["state"]) == ("ocr-unavailable", "needs_action")
    assert "install Tesseract" in failure["detail"]
    row = source(kb, "chinese_scan.pdf")
    assert row["state"] == "needs_action" and row["error"].startswith("ocr-unavailable")


def test_pdf_with_blank_pages_only_is_empty_not_ready(tmp_path):
    path = tmp_path / "blank.pdf"
    text_pdf([[], []]).output(str(path))
    kb = bm25_kb(tmp_path / "base")
    summary = ingest.ingest(kb, [path])
    assert [(f["reason"], f["state"]) for f in summary.failed] == [("empty", "failed")]
    assert "2 page(s) but no text" in summary.failed[0]["detail"]
    assert source(kb, "blank.pdf")["state"] == "failed"
