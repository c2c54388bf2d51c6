"""extract.py: pages and line numbers, encodings, hostile files, and running-header noise.

Most fixtures are made here (fpdf2 PDFs with known lines, text in several encodings); the
tests on ../shared/corpus skip where it is absent. Slow ones (whole corpus) are marked slow.
"""

import random
import time

import pypdf
import pytest
from conftest import shared_path, text_pdf
from fpdf import FPDF

import chunking
import extract
import formats
import formats.base
from bench import benchmark
from extract import Extracted, ExtractError
from formats import pdf

NATO = (
    "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november "
    "oscar papa quebec romeo sierra tango uniform victor whiskey xray yankee zulu"
).split()
HEADER = "Example Corp Annual Report"


def body(page: int) -> list[str]:
    """Five body lines for a 0-based page, unique even with their digits masked."""
    return [f"The {NATO[page]} clause covers {NATO[(page + k) % 26]} matters" for k in range(5)]


class Report(FPDF):
    """An fpdf2 document with a running header and a "Page N of M" footer on every page."""

    def header(self) -> None:
        self.cell(text=HEADER, new_x="LMARGIN", new_y="NEXT")
        self.ln(4)

    def footer(self) -> None:
        self.set_y(-15)
        self.cell(text=f"Page {self.page_no()} of {{nb}}")


def make_pdf(path, pages: list[list[str]], doc_class=Report):
    text_pdf(pages, 11, doc_class).output(str(path))
    return path


@pytest.fixture
def report_pdf(tmp_path):
    return make_pdf(tmp_path / "report.pdf", [body(p) for p in range(4)])


def reason_of(path) -> str:
    with pytest.raises(ExtractError) as caught:
        extract.extract(path)
    return caught.value.reason


# ----------------------------------------------------------------------------- PDF, generated


def test_pdf_lines_land_on_their_page_and_line(report_pdf):
    result = extract.extract(report_pdf)
    assert result == Extracted(
        pages=[[HEADER, *body(p), f"Page {p + 1} of 4"] for p in range(4)], parser="pypdfium2"
    )


def test_noise_marks_header_and_footer_of_generated_report(report_pdf):
    assert chunking.noise_lines(extract.extract(report_pdf).pages) == [{1, 7}] * 4


def test_pdf_without_text_extracts_empty_pages(tmp_path):
    # OCR is a later issue: a scan must come through as pages, not as an error
    path = make_pdf(tmp_path / "blank.pdf", [[], []], doc_class=FPDF)
    assert extract.extract(path) == Extracted(pages=[[], []], parser="pypdfium2")


def test_pdf_with_zero_pages_is_empty(tmp_path):
    path = tmp_path / "zero.pdf"
    pypdf.PdfWriter().write(path)
    assert reason_of(path) == "empty"


def test_zero_page_pdf_after_encrypted_one_is_still_empty(tmp_path, report_pdf):
    # regression: pdfium reports the thread's last error, so this once said "password"
    locked = tmp_path / "locked.pdf"
    writer = pypdf.PdfWriter(clone_from=report_pdf)
    writer.encrypt(user_password="secret", owner_password="owner", algorithm="RC4-128")
    writer.write(locked)
    zero = tmp_path / "zero.pdf"
    pypdf.PdfWriter().write(zero)
    assert [reason_of(locked), reason_of(zero)] == ["password-protected", "empty"]


@pytest.mark.parametrize(
    ("user_password", "reason"), [("secret", "password-protected"), ("", None)]
)
def test_encrypted_pdf_opens_only_with_empty_user_password(
    tmp_path, report_pdf, user_password, reason
):
    path = tmp_path / "encrypted.pdf"
    writer = pypdf.PdfWriter(clone_from=report_pdf)
    writer.encrypt(user_password=user_password, owner_password="owner", algorithm="RC4-128")
    writer.write(path)
    if reason:
        assert reason_of(path) == reason
    else:
        assert extract.extract(path).pages[1][1] == body(1)[0]


@pytest.mark.parametrize(
    ("content", "reason", "words"),
    [
        (b"", "empty", "0-byte"),
        (b"\xff\xd8\xff\xe0\x00\x10JFIF" + bytes(500), "corrupt", "JPEG"),
        (b"%PDF-1.7\n" + bytes(range(256)) * 8, "corrupt", "no PDF reader"),
    ],
)
def test_broken_pdf_raises_fitting_reason(tmp_path, content, reason, words):
    path = tmp_path / "broken.pdf"
    path.write_bytes(content)
    with pytest.raises(ExtractError) as caught:
        extract.extract(path)
    assert (caught.value.reason, words in caught.value.detail) == (reason, True)


def test_truncated_pdf_is_corrupt_or_partial(tmp_path, report_pdf):
    data = report_pdf.read_bytes()
    path = tmp_path / "truncated.pdf"
    path.write_bytes(data[: len(data) // 2])
    try:
        result = extract.extract(path)
    except ExtractError as exc:
        assert exc.reason == "corrupt"
    else:
        assert result.pages and all(isinstance(line, str) for p in result.pages for line in p)


# ----------------------------------------------------------------------------- PDF fallbacks


def _patched_first(monkeypatch, fake) -> None:
    """Replace pypdfium2 in the chain by `fake`, keeping the name so parser labels stay."""
    monkeypatch.setattr(pdf, "PDF_BACKENDS", [("pypdfium2", fake), *pdf.PDF_BACKENDS[1:]])


def test_backend_that_raises_falls_back_to_pdfminer(monkeypatch, report_pdf):
    def broken(path, wanted):
        raise RuntimeError("simulated pdfium crash")

    _patched_first(monkeypatch, broken)
    result = extract.extract(report_pdf)
    assert result.parser == "pdfminer"
    assert [body(p)[0] in result.pages[p] for p in range(4)] == [True] * 4


def test_garbage_page_is_mended_by_a_later_backend(monkeypatch, report_pdf):
    real = pdf._pdfium_pages

    def garbled(path, wanted):
        texts, lost = real(path, wanted)
        texts[2] = "(cid:12)(cid:7)(cid:9) " * 40  # what a font without ToUnicode gives
        return texts, lost

    _patched_first(monkeypatch, garbled)
    result = extract.extract(report_pdf)
    assert result.parser == "pypdfium2+pdfminer"
    assert body(2)[3] in result.pages[2]
    assert result.pages[1] == [HEADER, *body(1), "Page 2 of 4"]  # good pages stay pdfium's


def test_page_pdfium_lost_is_asked_again(monkeypatch, report_pdf):
    real = pdf._pdfium_pages

    def lossy(path, wanted):
        texts, _ = real(path, wanted)
        texts[0] = "平成"  # kampo.pdf: 2,624 text objects came out as a few chars
        return texts, {0}

    _patched_first(monkeypatch, lossy)
    result = extract.extract(report_pdf)
    assert (result.parser, body(0)[4] in result.pages[0]) == ("pypdfium2+pdfminer", True)


def test_fallback_that_is_no_better_keeps_the_first_text(monkeypatch, report_pdf):
    junk = "\ue000\ue001 " * 30  # private-use glyphs: junk that survives line cleaning

    def garbled(path, wanted):
        return {i: junk for i in range(4)}, set()

    def also_junk(path, wanted):
        return {i: "(cid:1)" * 30 for i in wanted or range(4)}, set()

    monkeypatch.setattr(pdf, "PDF_BACKENDS", [("pypdfium2", garbled), ("pdfminer", also_junk)])
    monkeypatch.setattr(pdf, "_ocr_pages", lambda *args: [])  # OCR is tested in test_ocr
    assert extract.extract(report_pdf) == Extracted(pages=[[junk.rstrip()]] * 4, parser="pypdfium2")


def test_second_fallback_mends_what_the_first_could_not(monkeypatch, report_pdf):
    real = pdf._pdfium_pages

    def garbled(path, wanted):
        texts, lost = real(path, wanted)
        texts[1] = "\ufffd" * 80
        return texts, lost

    def no_help(path, wanted):
        return {i: "(cid:5)" * 50 for i in wanted or range(4)}, set()

    chain = [("pypdfium2", garbled), ("pdfminer", no_help), pdf.PDF_BACKENDS[2]]
    monkeypatch.setattr(pdf, "PDF_BACKENDS", chain)
    result = extract.extract(report_pdf)
    assert (result.parser, body(1)[2] in result.pages[1]) == ("pypdfium2+pypdf", True)


def test_slow_fallback_gives_up(monkeypatch, report_pdf):
    def broken(path, wanted):
        raise RuntimeError("simulated pdfium crash")

    _patched_first(monkeypatch, broken)
    monkeypatch.setattr(pdf, "FALLBACK_SECONDS_PER_PAGE", -1.0)
    with pytest.raises(ExtractError) as caught:
        extract.extract(report_pdf)
    assert caught.value.reason == "corrupt"
    assert caught.value.detail.count("gave up") == 2  # pdfminer and pypdf both timed out


# ----------------------------------------------------------------------------- text


PAGE_ONE = ["First page, line one", "", "line three\tafter a tab"]


@pytest.mark.parametrize(
    ("lines", "encoding", "parser"),
    [
        (["Plain ASCII and ünïcödé"], "utf-8", "text:utf-8"),
        (["UTF-8 with a BOM: é"], "utf-8-sig", "text:utf-8"),
        (["UTF-16 with a BOM: é"], "utf-16", "text:utf-16"),
        (["UTF-16 big-endian: é"], "utf-16-be-bom", "text:utf-16"),
        (["UTF-16 little-endian, no BOM"], "utf-16-le", "text:utf-16"),
        (["첫 쪽의 첫 줄입니다", "둘째 줄: 검색 엔진"], "cp949", "text:cp949"),
        (["中国的文化历史很长", "我们的学校在北京"], "gbk", "text:gb18030"),
    ],
)
def test_text_encodings_and_form_feed_pages(tmp_path, lines, encoding, parser):
    text = "\r\n".join(PAGE_ONE) + "\r\n\f" + "\n".join(lines) + "\n"
    if encoding == "utf-16-be-bom":
        data = b"\xfe\xff" + text.encode("utf-16-be")
    else:
        data = text.encode(encoding)
    path = tmp_path / "doc.txt"
    path.write_bytes(data)
    expected = [["First page, line one", "", "line three after a tab"], lines]
    assert extract.extract(path) == Extracted(pages=expected, parser=parser)


def test_utf16_with_bom_and_few_nuls_is_text(tmp_path):
    # Hangul in UTF-16 has no NUL bytes: only the BOM says it is UTF-16 and not binary
    path = tmp_path / "ko16.txt"
    path.write_bytes("한국어 문서입니다\n검색 엔진".encode("utf-16"))
    assert extract.extract(path) == Extracted([["한국어 문서입니다", "검색 엔진"]], "text:utf-16")


def test_short_gbk_text_that_also_decodes_as_cp949_is_read_as_chinese(tmp_path):
    text = "中国的文化历史很长"
    assert text.encode("gbk").decode("cp949") != text  # the trap: CP949 decodes it, wrongly
    path = tmp_path / "zh.md"
    path.write_bytes(text.encode("gbk"))
    assert extract.extract(path).pages == [[text]]


def test_latin1_text_is_not_taken_for_chinese(tmp_path):
    path = tmp_path / "umlauts.md"
    path.write_bytes("## Grüße aus München\n\nschöne Tage\n".encode("cp1252"))
    assert extract.extract(path).pages == [["## Grüße aus München", "", "schöne Tage"]]


def test_text_line_endings_controls_and_trailing_blanks(tmp_path):
    path = tmp_path / "mixed.txt"
    path.write_bytes(b"a  \r\nb\rc\x07d\n\n  indented\xe2\x80\xa8next\n\n\n")
    pages = extract.extract(path).pages
    assert pages == [["a", "b", "cd", "", "  indented", "next"]]
    assert "\n".join(pages[0]).splitlines() == pages[0]


def test_form_feeds_keep_empty_middle_pages_and_drop_a_trailing_one(tmp_path):
    path = tmp_path / "pages.txt"
    path.write_text("one\f\fthree\f", encoding="utf-8")
    assert extract.extract(path).pages == [["one"], [], ["three"]]


@pytest.mark.parametrize(
    ("name", "content", "reason"),
    [
        ("empty.txt", b"", "empty"),
        ("blank.md", b"  \r\n\n\t\n", "empty"),
        ("blank-pages.txt", b"\n\f\n\f", "empty"),
        ("image.txt", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(200), "binary"),
        ("random.txt", random.Random(7).randbytes(4000), "binary"),
        ("controls.md", bytes(range(1, 32)) * 50, "binary"),
        ("one-nul.txt", b"looks like text " * 100 + b"\x00", "binary"),
    ],
)
def test_text_that_is_no_text(tmp_path, name, content, reason):
    path = tmp_path / name
    path.write_bytes(content)
    assert reason_of(path) == reason


# ----------------------------------------------------------------------------- dispatch


def test_missing_path_folder_and_unknown_suffix(tmp_path):
    (tmp_path / "notes.xyz").write_text("hello", encoding="utf-8")
    reasons = [
        reason_of(tmp_path / "nope.pdf"),
        reason_of(tmp_path),
        reason_of(tmp_path / "notes.xyz"),
    ]
    assert reasons == ["not-found", "not-found", "unsupported-format"]


def test_supported_is_case_insensitive_and_matches_extractors(tmp_path):
    assert [extract.supported(tmp_path / n) for n in ("A.PDF", "b.Md", "c.text", "d.xyz", "e")] == [
        True,
        True,
        True,
        False,
        False,
    ]
    assert all(s.startswith(".") and s == s.lower() for s in formats.READERS)


def test_extract_error_carries_reason_and_detail():
    error = ExtractError("binary", "x.txt holds binary data.")
    assert (error.reason, error.detail, str(error)) == (
        "binary",
        "x.txt holds binary data.",
        "binary: x.txt holds binary data.",
    )


# ----------------------------------------------------------------------------- noise


def numbered_pages(count: int, first_number: int, filler: str = "body") -> list[list[str]]:
    return [
        [
            "Running Title",
            f"{filler} {NATO[p]} one",
            f"{filler} {NATO[p]} two",
            str(first_number + p),
        ]
        for p in range(count)
    ]


def test_noise_page_numbers_with_offset_and_running_title():
    pages = numbered_pages(6, first_number=11)  # printed numbering starts at 11
    pages[2].insert(3, "42")  # a table's last figure sits just above the page number
    expected = [{1, 4}, {1, 4}, {1, 5}, {1, 4}, {1, 4}, {1, 4}]
    assert chunking.noise_lines(pages) == expected


def test_noise_needs_three_pages_to_call_a_line_running():
    pages = [["Same Header", "text a", "1"], ["Same Header", "text b", "2"]]
    assert chunking.noise_lines(pages) == [{3}, {3}]  # own page numbers yes, header no


def test_noise_keeps_numbered_headings_and_code_listing_lines():
    pages = [
        [f"{p + 1} {title}", f"Body about {NATO[p]}.", f"More on {NATO[p]}."]
        for p, title in enumerate(["Introduction", "Methods", "Results", "Discussion"])
    ]  # each heading's number is its page's, but no heading recurs
    listing = ["push ebp", "mov ebp, esp", "sub esp, 8", "leave"]  # numbered like the pages
    pages += [
        [f"{p + 20} {op}", f"mov {NATO[p]}, 1", f"call {NATO[p]}"] for p, op in enumerate(listing)
    ]
    assert chunking.noise_lines(pages) == [set()] * 8


def test_noise_headers_that_carry_the_page_number():
    pages = []
    for p in range(8):
        header = (
            f"{p + 11} CHAPTER 1. INTRODUCTION" if p % 2 else f"1.3. ASSEMBLY LANGUAGE {p + 11}"
        )
        pages.append([header, f"Text of {NATO[p]}.", "", f"More {NATO[p]} text."])
    assert chunking.noise_lines(pages) == [{1}] * 8


def test_noise_roman_front_matter_then_arabic_body():
    numbers = ["", "", "i", "ii", "iii", "iv", "1", "2", "3"]
    pages = [
        [f"Paragraph about {NATO[p]}.", f"Another about {NATO[p]}.", n]
        if n
        else [f"Cover {NATO[p]}"]
        for p, n in enumerate(numbers)
    ]
    assert chunking.noise_lines(pages) == [set(), set()] + [{3}] * 7


def test_noise_ignores_repeats_in_the_middle_of_pages():
    words = ("Top", "Second", "Third", "Fourth", "Fifth", "Last")
    pages = [[f"{w} {NATO[p]}" for w in words] for p in range(6)]
    for page in pages:
        page.insert(3, "See the table below.")
    assert chunking.noise_lines(pages) == [set()] * 6


def test_noise_on_empty_pages_and_is_linear():
    assert chunking.noise_lines([[], [""], ["x"]]) == [set(), set(), set()]
    pages = [
        ["Header", *(f"line {k} of {NATO[p % 26]}" for k in range(40)), str(p + 1)]
        for p in range(5000)
    ]
    start = time.perf_counter()
    noise = chunking.noise_lines(pages)
    assert time.perf_counter() - start < 5
    assert noise[4321] == {1, 42}


# ----------------------------------------------------------------------------- real corpus

EDGE_REASONS = {
    "aes-256.pdf": "password-protected",  # user password "foo"
    "copy-protected.pdf": None,  # empty user password: opens
    "empty.pdf": "empty",
    "fake-jpg.pdf": "corrupt",
    "imagemagick-CCITTFaxDecode.pdf": None,  # an image, no text: pages, not an error
    "issue-1113-evil-xobjects.pdf": None,
    "libreoffice-writer-password.pdf": "password-protected",
    "password-protected.pdf": "password-protected",
    "unreadablemetadata.pdf": None,  # only pdfminer reads its broken /Pages
    "zen_of_python_corrupted.pdf": None,
}


def test_edge_folder_holds_the_files_this_test_expects():
    names = {p.name for p in shared_path("corpus", "pdf", "edge").glob("*.pdf")}
    assert names == set(EDGE_REASONS)


@pytest.mark.parametrize(("name", "reason"), sorted(EDGE_REASONS.items()))
def test_hostile_pdfs_end_as_pages_or_a_fitting_reason(name, reason):
    path = shared_path("corpus", "pdf", "edge", name)
    start = time.perf_counter()
    try:
        result = extract.extract(path)
        outcome = None
    except ExtractError as exc:
        result, outcome = None, exc.reason
    assert outcome == reason
    assert time.perf_counter() - start < 30  # never hangs
    if result is not None:
        assert len(result.pages) >= 1


@pytest.mark.parametrize(
    ("parts", "needle", "page", "parser"),
    [
        (("en", "dmca.pdf"), "THE DIGITAL MILLENNIUM COPYRIGHT ACT OF 1998", 0, "pypdfium2"),
        (
            ("en", "pdflatex-4-pages.pdf"),
            "Hello, here is some text without a meaning.",
            0,
            "pypdfium2",
        ),
        (("ko", "korean-text-with-tables.pdf"), "적립 제외 대상", 0, "pypdfium2"),
        (("ko", "bug1627427_reduced.pdf"), "눈이 올 듯하더니", 0, "pypdfium2"),
        (("zh", "issue12823.pdf"), "知识库简介", 0, "pypdfium2"),
        (("zh", "mineru_chemistry_introduction_zh.pdf"), "化学学科常用符号公式", 0, "pypdfium2"),
        (("ja", "jo.pdf"), "宇宙塵", 0, "pypdfium2"),
        # vertical CJK: pypdfium2 4.x loses it (pdfminer then reads the page), 5.x reads it
        (("ja", "kampo.pdf"), "道路標識", 0, ("pypdfium2", "pypdfium2+pdfminer")),
        (("edge", "unreadablemetadata.pdf"), "Rotary Potentiometer", 0, "pdfminer"),
        (
            ("edge", "copy-protected.pdf"),
            "LayoutParser: A Unified Toolkit for Deep",
            0,
            "pypdfium2",
        ),
    ],
)
def test_corpus_pdf_text_on_its_page(parts, needle, page, parser):
    result = extract.extract(shared_path("corpus", "pdf", *parts))
    text = "\n".join(result.pages[page])
    assert needle in (text if parts[1] != "kampo.pdf" else text.replace("\n", ""))
    assert result.parser in ((parser,) if isinstance(parser, str) else parser)


def test_corpus_zen_corrupted_keeps_its_first_line():
    result = extract.extract(shared_path("corpus", "pdf", "edge", "zen_of_python_corrupted.pdf"))
    assert result.pages[0][0] == "Beautiful is better than ugly."


def test_corpus_scan_without_ocr_keeps_its_page_and_says_why(monkeypatch, tmp_path):
    import pytesseract

    monkeypatch.setattr(pytesseract.pytesseract, "tesseract_cmd", "/nonexistent/tesseract")
    monkeypatch.setenv("LINECITE_OCR_CACHE", str(tmp_path))  # no cached answer either
    result = extract.extract(shared_path("corpus", "pdf", "scanned", "chinese_scan.pdf"))
    assert (result.pages, result.parser) == ([[]], "pypdfium2")
    assert result.warnings and "ocr unavailable" in result.warnings[0].lower()


def test_corpus_korean_legacy_encodings_match_the_utf8_copy():
    ko = shared_path("corpus", "txt", "ko")
    utf8 = extract.extract(ko / "appendix-keywords-utf8.txt")
    for name in ("appendix-keywords-CP949.txt", "appendix-keywords-EUCKR.txt"):
        assert extract.extract(ko / name) == Extracted(pages=utf8.pages, parser="text:cp949")


def test_corpus_odd_text_files():
    txt = shared_path("corpus", "txt", "en")
    utf16 = extract.extract(txt / "fake-text-utf-16-le.txt")
    assert (utf16.parser, utf16.pages[0][0]) == (
        "text:utf-16",
        "This is a test document to use for unit tests.",
    )
    assert extract.extract(txt / "umlauts-non-utf8.md").pages[0][:3] == ["## können", "", "können"]
    assert reason_of(txt / "empty.txt") == "empty"


@pytest.mark.slow
def test_corpus_every_file_extracts_or_fails_cleanly():
    root = shared_path("corpus")
    for path in sorted(p for p in root.rglob("*") if p.is_file() and extract.supported(p)):
        try:
            result = extract.extract(path)
        except ExtractError as exc:
            assert exc.reason in formats.base.REASONS, path
            continue
        for page in result.pages:
            assert "\n".join(page).splitlines() == page, path  # one newline convention
            assert not any(line != line.rstrip() for line in page), path
            assert not any(c < " " or "\x7f" <= c < "\xa0" for line in page for c in line), path
        assert len(chunking.noise_lines(result.pages)) == len(result.pages)


@pytest.mark.slow
def test_corpus_book_page_numbers_are_noise():
    pages = extract.extract(shared_path("corpus", "pdf", "en", "DA-619p.pdf")).pages
    noise = chunking.noise_lines(pages)
    assert all(n == {len(p)} and p[-1].isdigit() for p, n in zip(pages, noise, strict=True))


@pytest.mark.slow
def test_corpus_running_headers_are_noise_and_body_is_not():
    pages = extract.extract(shared_path("corpus", "pdf", "en", "pcasm-book.pdf")).pages
    noise = chunking.noise_lines(pages)
    assert sum(1 for n in noise if n) > 0.8 * len(pages)
    assert all(len(n) <= 2 for n in noise)
    marked = {pages[p][i - 1] for p, n in enumerate(noise) for i in n}
    assert "12 CHAPTER 1. INTRODUCTION" in marked
    assert not any(line.startswith(("Chapter ", "mov ")) for line in marked)


# ----------------------------------------------------------------------------- benchmark


def test_benchmark_extract_without_its_folder_says_so(tmp_path, capsys):
    assert benchmark.main(["extract", "--dir", str(tmp_path / "absent")]) == 2
    assert "--dir" in capsys.readouterr().err


def test_benchmark_extract_times_chain_and_pypdf(tmp_path, capsys):
    make_pdf(tmp_path / "a.pdf", [body(p) for p in range(3)])
    assert benchmark.main(["extract", "--dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "chain       3 pages" in out and "pypdf       3 pages" in out and "pages/s" in out
