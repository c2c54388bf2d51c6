"""office.py: DOCX/XLSX/PPTX pages and lines, on fixtures built here and on ../shared/corpus."""

import re
import subprocess
import sys
import zipfile
from datetime import datetime
from pathlib import Path

import pytest
from conftest import SHARED, peak_bytes, shared_path, understated_zip

from extract import ExtractError
from formats import office

W_NS = 'xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"'
M_NS = 'xmlns:m="http://schemas.openxmlformats.org/officeDocument/2006/math"'
EXTRACTORS = {"docx": office.extract_docx, "xlsx": office.extract_xlsx, "pptx": office.extract_pptx}


def _assert_clean(pages: list[list[str]]) -> None:
    """Every line is one line wherever it goes: split("\\n") and splitlines() agree."""
    for page in pages:
        for line in page:
            assert isinstance(line, str) and line.splitlines() in ([line], [])


# ----------------------------------------------------------------------------- DOCX fixture

FOOTNOTES_XML = f"""<w:footnotes {W_NS}>
<w:footnote w:type="separator" w:id="-1"><w:p><w:r><w:separator/></w:r></w:p></w:footnote>
<w:footnote w:id="1"><w:p><w:r><w:footnoteRef/></w:r><w:r><w:t xml:space="preserve"> Note text</w:t>
</w:r></w:p></w:footnote></w:footnotes>"""
EQUATION_XML = f"""<m:oMath {M_NS}><m:f><m:num><m:r><m:t>a</m:t></m:r></m:num><m:den><m:r>
<m:t>b</m:t></m:r></m:den></m:f><m:r><m:t>+</m:t></m:r><m:sSup><m:e><m:r><m:t>x</m:t></m:r>
</m:e><m:sup><m:r><m:t>2</m:t></m:r></m:sup></m:sSup><m:r><m:t>≤</m:t></m:r><m:rad><m:radPr>
<m:degHide m:val="1"/></m:radPr><m:deg/><m:e><m:r><m:t>π</m:t></m:r></m:e></m:rad></m:oMath>"""


def _make_docx(path: Path) -> None:
    """Two explicit page breaks (one mid-paragraph), a new-page and a continuous section
    break, a soft line break, a table, a footnote, a comment, an equation, header, footer."""
    import docx
    from docx.enum.section import WD_SECTION
    from docx.enum.text import WD_BREAK
    from docx.opc.constants import CONTENT_TYPE, RELATIONSHIP_TYPE
    from docx.opc.packuri import PackURI
    from docx.opc.part import Part
    from docx.oxml import parse_xml

    doc = docx.Document()
    doc.sections[0].header.paragraphs[0].text = "Running head"
    doc.sections[0].footer.paragraphs[0].text = "Page foot"
    doc.add_paragraph("Title line")
    doc.add_paragraph("First paragraph").add_run().add_break(WD_BREAK.LINE)
    doc.paragraphs[-1].add_run("second line of it")
    table = doc.add_table(rows=2, cols=2)
    for cell, text in zip(table._cells, ["Name", "Role", "Ada", "Lead\nEngineer"], strict=True):
        cell.text = text
    cites = doc.add_paragraph("Cites a note")
    cites.add_run()._r.append(parse_xml(f'<w:footnoteReference {W_NS} w:id="1"/>'))
    notes = Part(PackURI("/word/footnotes.xml"), CONTENT_TYPE.WML_FOOTNOTES,
                 FOOTNOTES_XML.encode(), doc.part.package)
    doc.part.relate_to(notes, RELATIONSHIP_TYPE.FOOTNOTES)
    split = doc.add_paragraph("before break")
    split.add_run().add_break(WD_BREAK.PAGE)
    split.add_run("after break")
    doc.add_paragraph("Commented text")
    doc.add_comment(doc.paragraphs[-1].runs, text="Looks fine", author="Tester")
    doc.add_section(WD_SECTION.NEW_PAGE)
    doc.add_paragraph("Third page")
    doc.add_section(WD_SECTION.CONTINUOUS)
    doc.add_paragraph("Still third page: ")._p.append(parse_xml(EQUATION_XML))
    doc.add_page_break()
    doc.save(str(path))


def test_docx_pages_lines_notes_and_equation(tmp_path: Path) -> None:
    path = tmp_path / "report.docx"
    _make_docx(path)
    result = office.extract_docx(path)
    assert result.parser == "docx2python"
    assert result.pages == [
        ["Title line", "First paragraph", "second line of it", "Name | Role",
         "Ada | Lead Engineer", "Cites a note[footnote 1]", "before break",
         "[footnote 1] Note text"],
        ["after break", "Commented text", "[comment] Tester: Looks fine"],
        ["Third page", "", r"Still third page: [math: \frac{a}{b}+x^{2}\le \sqrt{\pi }]",
         "[header] Running head", "[footer] Page foot"],
    ]  # the section-ending empty paragraph stays a line; the final page break opens no page


def test_docx_without_breaks_is_one_page_and_keeps_empty_paragraphs(tmp_path: Path) -> None:
    import docx

    doc = docx.Document()
    for text in ["one", "", "three"]:
        doc.add_paragraph(text)
    doc.save(str(tmp_path / "plain.docx"))
    assert office.extract_docx(tmp_path / "plain.docx").pages == [["one", "", "three"]]


# ----------------------------------------------------------------------------- XLSX fixture


def _make_xlsx(path: Path) -> None:
    """Data sheet (dates, merged range, uncached formula, a cell with a newline, an empty
    row), a hidden sheet, and a sheet whose data starts at C3."""
    import openpyxl

    book = openpyxl.Workbook()
    data = book.active
    data.title = "Data"
    data.append(["Name", "When", "Total", "Done"])
    data.append(["Ada", datetime(2024, 1, 15), 3, True])
    data.append(["Bob", datetime(2024, 2, 1, 13, 30), 4.5, False])
    data.append([])
    data["A5"] = "Merged note"
    data.merge_cells("A5:B5")
    data["C5"] = "=SUM(C2:C3)"  # openpyxl writes no cached value: Excel never calculated it
    data["A6"] = "two\nlines"
    data["B6"] = 2.0
    data["D6"] = "=1+1"  # given a cached value below
    book.create_sheet("Secret").append(["hidden value"])
    book["Secret"].sheet_state = "hidden"
    book.create_sheet("Offset")["C3"] = "x"
    book["Offset"]["D3"] = "y"
    book["Offset"]["D4"] = "z"
    book.save(path)
    _rewrite(path, "xl/worksheets/sheet1.xml",
             lambda xml: xml.replace(b"<f>1+1</f><v></v>", b"<f>1+1</f><v>2</v>")
             .replace(b"<f>1+1</f><v/>", b"<f>1+1</f><v>2</v>"))


def _rewrite(path: Path, member: str, change) -> None:
    """Rewrite one member of a zip package in place."""
    with zipfile.ZipFile(path) as src:
        parts = {info.filename: src.read(info) for info in src.infolist()}
    parts[member] = change(parts[member])
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as dst:
        for name, data in parts.items():
            dst.writestr(name, data)


def test_xlsx_sheet_is_page_row_is_line(tmp_path: Path) -> None:
    path = tmp_path / "book.xlsx"
    _make_xlsx(path)
    result = office.extract_xlsx(path)
    assert result.parser == "openpyxl"
    assert result.pages == [
        ["[sheet] Data", "Name | When | Total | Done", "Ada | 2024-01-15 | 3 | TRUE",
         "Bob | 2024-02-01T13:30:00 | 4.5 | FALSE", "", "Merged note", "two lines | 2 |  | 2"],
        ["[hidden sheet] Secret", "hidden value"],
        ["[sheet] Offset", "", "", "x | y", " | z"],  # columns A-B dropped, rows kept
    ]


def test_xlsx_fixture_really_has_a_cached_and_an_uncached_formula(tmp_path: Path) -> None:
    """Guards the test above: C5 must hold a formula without a value, D6 one with."""
    path = tmp_path / "book.xlsx"
    _make_xlsx(path)
    with zipfile.ZipFile(path) as archive:
        xml = archive.read("xl/worksheets/sheet1.xml")
    assert re.search(rb'<c r="C5"[^>]*><f>SUM\(C2:C3\)</f>(<v\s*/>|<v></v>)?</c>', xml)
    assert b"<f>1+1</f><v>2</v>" in xml


# ----------------------------------------------------------------------------- PPTX fixture


def _make_pptx(path: Path) -> None:
    """Slide 1: title, three text boxes out of reading order, a table, two lines of notes.
    Slide 2, hidden: a title and a group of two text boxes."""
    from pptx import Presentation
    from pptx.util import Inches

    deck = Presentation()
    first = deck.slides.add_slide(deck.slide_layouts[5])  # "Title Only"
    first.shapes.title.text = "Deck title"
    for text, left, top in [("Bottom box", 1, 6), ("Right box", 5, 2), ("Left box", 1, 2)]:
        first.shapes.add_textbox(Inches(left), Inches(top), Inches(3), Inches(1)).text = text
    table = first.shapes.add_table(2, 2, Inches(1), Inches(4), Inches(4), Inches(1)).table
    for cell, text in zip(table.iter_cells(), ["H1", "H2", "a", "b\nc"], strict=True):
        cell.text = text
    first.notes_slide.notes_text_frame.text = "Speaker says hi\nSecond note line"
    second = deck.slides.add_slide(deck.slide_layouts[5])
    second.shapes.title.text = "Second slide"
    group = second.shapes.add_group_shape()
    group.shapes.add_textbox(Inches(1), Inches(5), Inches(3), Inches(1)).text = "Group bottom"
    group.shapes.add_textbox(Inches(1), Inches(3), Inches(3), Inches(1)).text = "Group top"
    second.element.set("show", "0")
    deck.save(str(path))


def test_pptx_slide_is_page_in_reading_order(tmp_path: Path) -> None:
    path = tmp_path / "deck.pptx"
    _make_pptx(path)
    result = office.extract_pptx(path)
    assert result.parser == "python-pptx"
    assert result.pages == [
        ["Deck title", "Left box", "Right box", "H1 | H2", "a | b c", "Bottom box",
         "[notes] Speaker says hi", "[notes] Second note line"],
        ["[hidden slide]", "Second slide", "Group top", "Group bottom"],
    ]


# ----------------------------------------------------------------------------- bad files


def _reason(extractor, path: Path) -> str:
    with pytest.raises(ExtractError) as caught:
        extractor(path)
    return caught.value.reason


@pytest.mark.parametrize("kind", sorted(EXTRACTORS))
def test_bad_packages_get_fitting_reasons(tmp_path: Path, kind: str) -> None:
    extractor = EXTRACTORS[kind]
    (tmp_path / f"empty.{kind}").write_bytes(b"")
    (tmp_path / f"text.{kind}").write_text("just some text, no zip", encoding="utf-8")
    ole = office.OLE_MAGIC + b"\xa1\xb1\x1a\xe1" + b"\0" * 600
    (tmp_path / f"locked.{kind}").write_bytes(ole + office.ENCRYPTED_STREAM + b"\0" * 100)
    (tmp_path / f"legacy.{kind}").write_bytes(ole + "WordDocument".encode("utf-16-le"))
    with zipfile.ZipFile(tmp_path / f"other.{kind}", "w") as archive:
        archive.writestr("hello.txt", "a zip, but no Office package")
    assert {name: _reason(extractor, tmp_path / f"{name}.{kind}")
            for name in ["empty", "text", "locked", "legacy", "other"]} == {
        "empty": "empty", "text": "corrupt", "locked": "password-protected",
        "legacy": "unsupported-format", "other": "corrupt"}


def test_zip_bomb_is_refused_before_any_parser_inflates_it(tmp_path, monkeypatch) -> None:
    path = tmp_path / "bomb.docx"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("[Content_Types].xml", "<Types/>")
        archive.writestr("word/document.xml", b"\0" * (20 * 2**20))  # 20 MB -> ~20 KB
    assert path.stat().st_size < 2**20

    def inflate(*args, **kwargs):
        raise AssertionError("a zip member was opened")

    monkeypatch.setattr(zipfile.ZipFile, "open", inflate)  # read() goes through open()
    assert _reason(office.extract_docx, path) == "zip-bomb"


def test_a_part_that_lies_about_its_size_is_never_unpacked_whole(tmp_path) -> None:
    # Regression (issue 45): _rels/.rels was read with zipfile's read(), which inflates up to
    # 1 GiB in one step before cutting to the declared size; an entry declaring 100 bytes
    # passes check_zip, so a 64 KB one held 64 MB (more with its copies) before the CRC check.
    path = understated_zip(tmp_path / "liar.docx", {"[Content_Types].xml": b"<Types/>",
                                                    "_rels/.rels": bytes(64 * 2**20)},
                           "_rels/.rels")
    assert path.stat().st_size < 2**20
    refused, peak = peak_bytes(lambda: office.extract_docx(path))
    assert isinstance(refused, ExtractError) and refused.reason == "corrupt"
    assert "Bad CRC" in refused.detail and peak < 8 * 2**20, peak


def test_deck_of_pictures_only_is_empty(tmp_path: Path) -> None:
    from pptx import Presentation

    deck = Presentation()
    deck.slides.add_slide(deck.slide_layouts[6])  # "Blank"
    deck.save(str(tmp_path / "blank.pptx"))
    assert _reason(office.extract_pptx, tmp_path / "blank.pptx") == "empty"


def test_importing_office_imports_no_parser() -> None:
    code = ("import sys; from formats import office; "
            "print([m for m in ('docx2python', 'openpyxl', 'pptx', 'lxml') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=Path(office.__file__).parent.parent, check=True).stdout
    assert out.strip() == "[]"


# ----------------------------------------------------------------------------- real corpus

FAILS = {  # the corpus files no extractor can read, and why
    "xlsx/markitdown/test.xls": "unsupported-format",  # a real BIFF8 .xls: an OLE file
    "xlsx/unstructured/password_protected.xlsx": "password-protected",
    "xlsx/unstructured/empty.xlsx": "empty",  # one sheet, no cell
}
SLOW = {"handbook-872p.docx"}  # ~8,000 paragraphs: docx2python needs 7-10 s


def _corpus() -> list:
    root = SHARED / "corpus"
    files = sorted(p for kind in EXTRACTORS for p in (root / kind).rglob("*") if p.is_file())
    return [pytest.param(p.relative_to(root).as_posix(), id=p.relative_to(root).as_posix(),
                         marks=[pytest.mark.slow] if p.name in SLOW else [])
            for p in files]


@pytest.mark.parametrize("relative", _corpus())
def test_every_corpus_file_extracts_or_says_why(relative: str) -> None:
    path = shared_path("corpus", relative)
    extractor = EXTRACTORS[relative.split("/")[0]]
    if relative in FAILS:
        assert _reason(extractor, path) == FAILS[relative]
        return
    pages = extractor(path).pages
    assert pages and any(line.strip() for page in pages for line in page)
    _assert_clean(pages)


def test_docx_equations_become_latex() -> None:
    lines = office.extract_docx(shared_path("corpus/docx/docling/equations.docx")).pages[0]
    assert lines[0] == ("This is a word document and this is an inline equation: "
                        r"[math: A=\pi r^{2}].")
    assert r"[math: {(x+a)}^{n}=\sum_{k=0}^{n}{(\binom{n}{k})x^{k}a^{n-k}}]" in lines
    maths = [line for line in lines if "[math:" in line]
    assert len(maths) >= 10 and sum(r"\frac{" in line for line in maths) >= 3


def test_docx_strict_and_undeclared_prefix_are_repaired() -> None:
    """Regressions: docx2python read Strict.docx as empty and raised KeyError 'r' on
    teams_chat.docx (no xmlns:r); both are repaired in memory and read again."""
    strict = office.extract_docx(shared_path("corpus/docx/docling/Strict.docx"))
    assert strict.pages == [["Some text"]]
    chat = office.extract_docx(shared_path("corpus/docx/unstructured/teams_chat.docx"))
    assert chat.pages == [["0:0:0.0 --> 0:0:1.510", "Some Body", "OK. Yeah.",
                           "0:0:3.270 --> 0:0:4.250", "James Bond", "Umm.",
                           "saved-by | Dennis Forsythe"]]


def test_docx_page_and_section_breaks_from_the_corpus() -> None:
    pages = office.extract_docx(shared_path("corpus/docx/unstructured/page-breaks.docx")).pages
    assert len(pages) == 3
    assert pages[0][-1] == "and here:no-break hyphen here:and hard page-break here>>"
    assert pages[1][-3:] == ["Continuous section break here>>",  # continuous: same page
                             "<<followed by text on same page", "Odd-page section break here>>"]
    assert pages[2][0] == "<<producing two page-breaks to get from page-3 to page-5."


def test_docx_text_box_read_once_and_comments_named() -> None:
    """Regression: docx2python reads a text box twice (DrawingML and its VML fallback)."""
    box = office.extract_docx(shared_path("corpus/docx/docling/textbox.docx")).pages
    assert [line for page in box for line in page].count("Student falls ill") == 1
    notes = office.extract_docx(shared_path("corpus/docx/docling/docx_comments.docx")).pages
    assert notes[0][-3:] == [
        "[comment] John Reviewer: This is a sample reviewer comment on the first paragraph.",
        "[comment] Jane Editor: Another comment by a different reviewer.",
        "[comment] Anonymous feedback on this paragraph."]


@pytest.mark.parametrize(("relative", "script"), [
    ("docx/ko/sample-word-document.docx", "[\uac00-\ud7a3]"),
    ("pptx/ko/sample-ppt.pptx", "[\uac00-\ud7a3]"),
    ("docx/zh/ChocolateFactory.docx", "[\u4e00-\u9fff]"),
    ("pptx/zh/choco-builder_sample_zh.pptx", "[\u4e00-\u9fff]"),
])
def test_korean_and_chinese_text_survives(relative: str, script: str) -> None:
    pages = EXTRACTORS[relative.split(".")[-1]](shared_path("corpus", relative)).pages
    assert len(re.findall(script, "\n".join(line for page in pages for line in page))) > 50


def test_pptx_chart_values_and_unreadable_chart_kept_out() -> None:
    """Regression: python-pptx raised "unsupported plot type" on slide 2 and lost the deck."""
    pages = office.extract_pptx(shared_path("corpus/pptx/docling/pptx_chart.pptx")).pages
    assert pages == [["Quarterly Duck Survey", "[chart] Wild Duck Observations by Year",
                      "[chart] | 2019 | 2020 | 2021 | 2022",
                      "[chart] Freshwater Ducks | 120 | 130 | 150 | 175",
                      "[chart] Saltwater Ducks | 80 | 95 | 110 | 130"],
                     ["Quarterly revenue"]]


def test_xlsx_hidden_sheet_from_the_corpus() -> None:
    pages = office.extract_xlsx(shared_path("corpus/xlsx/docling/xlsx_01.xlsx")).pages
    assert [page[0] for page in pages] == [
        "[sheet] Sheet1", "[sheet] Sheet2", "[sheet] Sheet3", "[hidden sheet] Sheet4"]
    assert pages[0][:3] == ["[sheet] Sheet1", "first | second | third", "1 | 5 | 9"]
