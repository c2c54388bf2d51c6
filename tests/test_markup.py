"""RTF, HTML, EPUB and OpenDocument (issue 17): textract's real files against the text they
hold, and files LibreOffice writes from the corpus's Korean, Chinese and English .docx/.pptx
checked against what office.py reads from the originals."""

from __future__ import annotations

import re
import subprocess
import zipfile
from pathlib import Path

import pytest
from conftest import peak_bytes, shared_path, understated_zip

import extract
from formats import legacy

MARKED = re.compile(r"^\[(sheet|notes|chart|header|footer|comment)\b.*|\[image: [^\]]*\]")
ORIGINALS = {
    "docx/ko/sample-word-document.docx": ("rtf", "odt", "html"),
    "docx/zh/ChocolateFactory.docx": ("rtf", "odt", "html"),
    "docx/markitdown/test.docx": ("rtf", "odt", "html"),
    "pptx/ko/sample-ppt.pptx": ("odp",),
    "pptx/zh/choco-builder_sample_zh.pptx": ("odp",),
    "pptx/markitdown/test.pptx": ("odp",),
}
CASES = [(name, kind) for name, kinds in ORIGINALS.items() for kind in kinds]


def words(pages: list[list[str]]) -> str:
    """Whitespace-normalised text without cell separators and marks office.py adds."""
    kept = [MARKED.sub("", line) for page in pages for line in page]
    return " ".join(w for w in " ".join(kept).split() if w != "|")


@pytest.mark.parametrize("kind", ["rtf", "odt", "epub"])
def test_textract_files_hold_their_expected_text(kind):
    folder = shared_path("corpus/legacy/textract")
    result = extract.extract(folder / f"raw_text.{kind}")
    expected = (folder / f"expected_{kind}_raw_text.txt").read_text(encoding="utf-8")
    assert words(result.pages) == " ".join(expected.split())


def test_epub_chapters_are_pages_in_spine_order():
    result = extract.extract(shared_path("corpus/legacy/textract/raw_text.epub"))
    assert result.parser == "epub" and len(result.pages) == 6  # cover + 5 chapters
    assert result.pages[0] == ["Epub testing", "With subtitle..."]
    assert result.pages[1][0] == "Introduction"


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> Path:
    soffice = legacy.find_soffice()
    if soffice is None:
        pytest.skip("needs LibreOffice (soffice) to write the test files; CI installs it")
    folder = tmp_path_factory.mktemp("markup")
    for kind in ("rtf", "odt", "html", "odp"):
        inputs = [str(shared_path("corpus", n)) for n, kinds in ORIGINALS.items() if kind in kinds]
        subprocess.run([soffice, "--headless", f"-env:UserInstallation={(folder / 'p').as_uri()}",
                        "--convert-to", kind, "--outdir", str(folder), *inputs],
                       capture_output=True, timeout=600, check=True)
    return folder


@pytest.mark.parametrize(("name", "kind"), CASES)
def test_korean_chinese_english_text_survives(made, name, kind):
    original = extract.extract(shared_path("corpus", name))
    result = extract.extract(made / f"{Path(name).stem}.{kind}")
    ours = words(result.pages)
    missing = [w for p in original.pages for line in p if (w := words([[line]])) not in ours]
    assert not missing, missing[:3]
    if kind == "odp":  # a slide is a page, title first
        assert [p[0] for p in result.pages] == [p[0] for p in original.pages]


def test_html_keeps_visible_blocks_and_drops_script_and_style(tmp_path):
    page = tmp_path / "saved.html"
    page.write_bytes("""<html><head><meta charset="euc-kr"><title>제목</title>
        <style>p { color: red }</style></head><body><h1>검색 안내</h1>
        <script>var hidden = "never";</script><p>첫 문단은
        두 줄로</p><ul><li>하나</li><li>둘</li></ul>
        <table><tr><th>이름</th><th>값</th></tr><tr><td>a</td><td>1</td></tr></table>
        </body></html>""".encode("euc-kr"))
    assert extract.extract(page).pages == [["검색 안내", "첫 문단은 두 줄로", "하나", "둘",
                                            "이름 | 값", "a | 1"]]


def _package(path: Path, mimetype: str, members: dict[str, str]) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("mimetype", mimetype, compress_type=zipfile.ZIP_STORED)
        for name, text in members.items():
            archive.writestr(name, text)
    return path


ODS = """<office:document-content xmlns:office="urn:oasis:names:tc:opendocument:xmlns:office:1.0"
 xmlns:table="urn:oasis:names:tc:opendocument:xmlns:table:1.0"
 xmlns:text="urn:oasis:names:tc:opendocument:xmlns:text:1.0"><office:body><office:spreadsheet>
<table:table table:name="매출"><table:table-row><table:table-cell><text:p>날짜</text:p>
</table:table-cell><table:table-cell><text:p>금액</text:p></table:table-cell></table:table-row>
<table:table-row table:number-rows-repeated="2"><table:table-cell/></table:table-row>
<table:table-row><table:table-cell office:value-type="date" office:date-value="2024-03-05T00:00:00">
<text:p>05/03/24</text:p></table:table-cell><table:table-cell table:number-columns-repeated="2">
<text:p>7</text:p></table:table-cell><table:table-cell table:number-columns-repeated="16380"/>
</table:table-row><table:table-row table:number-rows-repeated="1048571">
<table:table-cell table:number-columns-repeated="16384"/></table:table-row></table:table>
</office:spreadsheet></office:body></office:document-content>"""


def test_ods_reads_like_xlsx_and_ignores_calcs_million_padding_rows(tmp_path):
    path = _package(tmp_path / "book.ods", "application/vnd.oasis.opendocument.spreadsheet",
                    {"content.xml": ODS})
    assert extract.extract(path).pages == [["[sheet] 매출", "날짜 | 금액", "", "",
                                            "2024-03-05 | 7 | 7"]]


def test_encrypted_odf_and_zip_bomb_epub_are_refused(tmp_path):
    manifest = ('<manifest:manifest xmlns:manifest="x"><manifest:encryption-data/>'
                "</manifest:manifest>")
    locked = _package(tmp_path / "locked.odt", "application/vnd.oasis.opendocument.text",
                      {"META-INF/manifest.xml": manifest, "content.xml": "garbage"})
    bomb = tmp_path / "bomb.epub"
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("OEBPS/chapter.xhtml", b"\0" * (20 * 2**20))
    for path, reason in ((locked, "password-protected"), (bomb, "zip-bomb")):
        with pytest.raises(extract.ExtractError) as caught:
            extract.extract(path)
        assert caught.value.reason == reason


def test_odf_styles_that_lie_about_their_size_are_never_unpacked_whole(tmp_path):
    # Regression (issue 45): styles.xml was read with zipfile's read(), which inflates up to
    # 1 GiB in one step before cutting to the declared size; an entry declaring 100 bytes
    # passes check_zip, so a 64 KB one held 64 MB (more with its copies) before the CRC check.
    path = understated_zip(tmp_path / "liar.ods", {
        "mimetype": b"application/vnd.oasis.opendocument.spreadsheet",
        "content.xml": ODS.encode(), "styles.xml": bytes(64 * 2**20)}, "styles.xml")
    assert path.stat().st_size < 2**20
    refused, peak = peak_bytes(lambda: extract.extract(path))
    assert isinstance(refused, extract.ExtractError) and refused.reason == "corrupt"
    assert "styles.xml" in refused.detail and peak < 8 * 2**20, peak


def test_a_part_past_the_bounds_is_refused_before_a_byte_is_unpacked(tmp_path, monkeypatch):
    # Regression (issue 45): url_fetch read an EPUB's mimetype with no check at all (a 3 GiB
    # entry in a 3 MB zip); the one reader of an entry checks the sizes its header declares.
    from formats import zipxml

    path = tmp_path / "bomb.epub"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("mimetype", b"\0" * (2 * 2**20))  # 2 MB -> 2 KB: 1,000 times
    monkeypatch.setattr(zipfile.ZipFile, "open", lambda *a, **k: pytest.fail("it was opened"))
    with zipfile.ZipFile(path) as archive, pytest.raises(extract.ExtractError) as caught:
        zipxml.read_member(archive, "mimetype", path)
    assert caught.value.reason == "zip-bomb"
    assert "times its packed size, past the ratio of 200" in caught.value.detail


@pytest.mark.parametrize("suffix", [".rtf", ".html", ".epub", ".odt", ".ods", ".odp"])
def test_bad_files_fail_with_a_reason(tmp_path, suffix):
    empty, junk = tmp_path / f"empty{suffix}", tmp_path / f"junk{suffix}"
    empty.write_bytes(b"")
    junk.write_bytes(b"\x00\x01\x02 binary \xff\xfe junk" * 10)
    assert {p.name: _reason(p) for p in (empty, junk)} == {
        empty.name: "empty", junk.name: "binary" if suffix == ".html" else "corrupt"}


def _reason(path: Path) -> str:
    with pytest.raises(extract.ExtractError) as caught:
        extract.extract(path)
    return caught.value.reason
