"""hwp.py: HWPX and HWP 5.0 -> pages of lines, on hand-made files and the shared corpus."""

import shutil
import zipfile
from pathlib import Path

import pytest
from conftest import shared_path

from extract import ExtractError
from formats import hwp

HP = 'xmlns:hp="http://www.hancom.co.kr/hwpml/2011/paragraph"'
HS = 'xmlns:hs="http://www.hancom.co.kr/hwpml/2011/section"'


def para(body: str, page_break: bool = False) -> str:
    return f'<hp:p pageBreak="{int(page_break)}"><hp:run>{body}</hp:run></hp:p>'


def sub(*paragraphs: str) -> str:
    return f"<hp:subList>{''.join(paragraphs)}</hp:subList>"


def section(*paragraphs: str) -> str:
    return f'<?xml version="1.0" encoding="UTF-8"?><hs:sec {HP} {HS}>{"".join(paragraphs)}</hs:sec>'


def cell(*paragraphs: str) -> str:
    return f"<hp:tc>{sub(*paragraphs)}</hp:tc>"


SECPR = "<hp:secPr/>"
HEADER = f"<hp:ctrl><hp:header>{sub(para('<hp:t>기관 머리말</hp:t>'))}</hp:header></hp:ctrl>"
FOOTER = f"<hp:ctrl><hp:footer>{sub(para('<hp:t>- 1 -</hp:t>'))}</hp:footer></hp:ctrl>"
SECTION0 = section(
    para(SECPR + HEADER + FOOTER + "<hp:t>첫 문단입니다.</hp:t>"),
    para("<hp:t/>"),  # an empty paragraph is still a line
    para("<hp:t>Second paragraph<hp:tab/>with a tab</hp:t>"),
    para("<hp:tbl>"
         f"<hp:tr>{cell(para('<hp:t>항목</hp:t>'))}{cell(para('<hp:t>값</hp:t>'))}</hp:tr>"
         f"<hp:tr>{cell(para('<hp:t>가</hp:t>'), para('<hp:t>나</hp:t>'))}"
         f"{cell(para('<hp:t>100</hp:t>'))}</hp:tr>"
         f"<hp:tr>{cell(para('<hp:t/>'))}{cell(para('<hp:t/>'))}</hp:tr>"
         "</hp:tbl>"),
    para("<hp:t>수식:</hp:t><hp:equation><hp:shapeComment>수식입니다.</hp:shapeComment>"
         "<hp:script>{a+b} over {c}</hp:script></hp:equation><hp:t>끝.</hp:t>"),
    para("<hp:t>둘째 쪽</hp:t><hp:ctrl><hp:footNote>"
         + sub(para('<hp:ctrl><hp:autoNum num="1" numType="FOOTNOTE"/></hp:ctrl>'
                    "<hp:t>각주 내용</hp:t>"))
         + "</hp:footNote></hp:ctrl>", page_break=True),
    para("<hp:t>줄1<hp:lineBreak/>줄2</hp:t>"),
    para('<hp:t>남김<hp:deleteBegin Id="1"/>지움<hp:deleteEnd Id="1"/>끝</hp:t>'),
)
SECTION1 = section(para(SECPR + "<hp:t>새 구역</hp:t>"))
EXPECTED = [
    ["[header] 기관 머리말", "[footer] - 1 -", "첫 문단입니다.", "",
     "Second paragraph with a tab", "항목 | 값", "가 나 | 100"],  # the empty row is left out
    ["둘째 쪽", "[footnote 1] 각주 내용", "줄1", "줄2", "남김끝"],
    ["새 구역"],
]


def content_hpf(spine: list[str]) -> str:
    items = "".join(f'<opf:item id="{s}" href="Contents/{s}.xml" media-type="application/xml"/>'
                    for s in spine)
    refs = "".join(f'<opf:itemref idref="{s}"/>' for s in spine)
    return (f'<opf:package xmlns:opf="http://www.idpf.org/2007/opf/"><opf:manifest>{items}'
            f"</opf:manifest><opf:spine>{refs}</opf:spine></opf:package>")


def write_hwpx(path: Path, sections: dict[str, str], spine: list[str] | None = None) -> Path:
    """A minimal HWPX package as Hancom lays it out (mimetype first and stored)."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr(zipfile.ZipInfo("mimetype"), "application/hwp+zip")
        z.writestr("META-INF/container.xml",
                   '<ocf:container xmlns:ocf="urn:oasis:names:tc:opendocument:xmlns:container">'
                   '<ocf:rootfiles><ocf:rootfile full-path="Contents/content.hpf"/>'
                   "</ocf:rootfiles></ocf:container>")
        z.writestr("Contents/content.hpf", content_hpf(spine or list(sections)))
        for name, xml in sections.items():
            z.writestr(f"Contents/{name}.xml", xml)
    return path


@pytest.fixture
def sample(tmp_path: Path) -> Path:
    return write_hwpx(tmp_path / "sample.hwpx", {"section0": SECTION0, "section1": SECTION1})


def test_hwpx_pages_and_lines(sample: Path):
    result = hwp.extract_hwpx(sample)
    assert result.parser == "hwpx"
    math = result.pages[0].pop()  # the equation line, checked on its own below
    assert result.pages == EXPECTED
    assert math.startswith("수식: [math: \\frac{a") and math.endswith("{c}] 끝.")


def test_equation_script_that_will_not_convert_is_kept_raw(tmp_path: Path):
    script = "{" * 70 + "x" + "}" * 70  # nested deeper than the converter allows
    path = write_hwpx(tmp_path / "eq.hwpx", {"section0": section(para(
        f"<hp:equation><hp:script>{script}</hp:script></hp:equation>"))})
    assert hwp.extract_hwpx(path).pages == [[f"[math: {script}]"]]


def test_header_defined_in_a_table_cell_gets_its_own_line(tmp_path: Path):
    # Government forms put the page header's control inside a layout table's cell.
    row = cell(para(HEADER + "<hp:t>과목</hp:t>")) + cell(para("<hp:t>코드</hp:t>"))
    table = f"<hp:tbl><hp:tr>{row}</hp:tr></hp:tbl>"
    path = write_hwpx(tmp_path / "form.hwpx", {"section0": section(para(table))})
    assert hwp.extract_hwpx(path).pages == [["[header] 기관 머리말", "과목 | 코드"]]


def test_sections_follow_the_manifest_spine_not_file_names(tmp_path: Path):
    sections = {"section0": section(para("<hp:t>B</hp:t>")),
                "section1": section(para("<hp:t>A</hp:t>"))}
    path = write_hwpx(tmp_path / "order.hwpx", sections, spine=["section1", "section0"])
    assert hwp.extract_hwpx(path).pages == [["A"], ["B"]]


def test_hwpx_saved_as_hwp_is_read_as_hwpx(sample: Path, tmp_path: Path):
    renamed = shutil.copy(sample, tmp_path / "renamed.hwp")
    assert hwp.extract_hwp(Path(renamed)).pages[1] == EXPECTED[1]


DEEP = ("<hp:rect><hp:subList><hp:p><hp:run>" * 2000
        + "</hp:run></hp:p></hp:subList></hp:rect>" * 2000)  # text boxes 2000 deep


@pytest.mark.parametrize(("payload", "reason", "says"), [
    ("<hs:sec", "corrupt", "not well-formed"),
    ('<!DOCTYPE x [<!ENTITY a "aaaa">]><hs:sec/>', "corrupt", "DTD"),  # no entity bombs
    (section(para(DEEP)), "corrupt", "too deeply"),  # no RecursionError escapes
    (section(para("<hp:t/>")), "empty", "no text"),
])
def test_hwpx_bad_sections(tmp_path: Path, payload: str, reason: str, says: str):
    path = write_hwpx(tmp_path / "bad.hwpx", {"section0": payload})
    with pytest.raises(ExtractError) as caught:
        hwp.extract_hwpx(path)
    assert (caught.value.reason, says in caught.value.detail) == (reason, True)


def test_hwpx_without_sections_or_zip(tmp_path: Path):
    nozip = tmp_path / "plain.hwpx"
    nozip.write_text("not a zip", encoding="utf-8")
    nosection = tmp_path / "nosection.hwpx"
    with zipfile.ZipFile(nosection, "w") as z:
        z.writestr("mimetype", "application/hwp+zip")
    for path in (nozip, nosection):
        with pytest.raises(ExtractError) as caught:
            hwp.extract_hwpx(path)
        assert caught.value.reason == "corrupt"


def test_zip_bomb_is_refused_before_parsing(tmp_path: Path):
    path = tmp_path / "bomb.hwpx"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("Contents/section0.xml", section(para("<hp:t>x</hp:t>")) + " " * 30_000_000)
    with pytest.raises(ExtractError) as caught:
        hwp.extract_hwpx(path)
    assert caught.value.reason == "zip-bomb"


# ----------------------------------------------------------------------------- HWP 5.0


def write_hwp5_header(path: Path, flags: int) -> Path:
    """An OLE compound file holding only an HWP 5.0 FileHeader with the given flags."""
    from hwpx.hwp5.cfb import build_compound_file
    from hwpx.hwp5.fileheader import FileHeader

    header = FileHeader((5, 0, 3, 0), flags).to_bytes()
    path.write_bytes(build_compound_file([("FileHeader", header)]))
    return path


@pytest.mark.parametrize(("bit", "says"), [(1, "password"), (2, "배포용"), (4, "DRM")])
def test_protected_hwp_is_refused_with_a_reason(tmp_path: Path, bit: int, says: str):
    path = write_hwp5_header(tmp_path / "locked.hwp", 0b1 | 1 << bit)
    with pytest.raises(ExtractError) as caught:
        hwp.extract_hwp(path)
    assert caught.value.reason == "password-protected"
    assert says in caught.value.detail


@pytest.mark.parametrize(("data", "reason"), [
    (b"", "empty"),
    (b"HWP Document File V3.00 \x1a\x01\x02\x03\x04\x05" + b"\0" * 64, "unsupported-format"),
    (b"%PDF-1.7\n" + b"\0" * 64, "corrupt"),
])
def test_not_an_hwp5_file(tmp_path: Path, data: bytes, reason: str):
    path = tmp_path / "x.hwp"
    path.write_bytes(data)
    with pytest.raises(ExtractError) as caught:
        hwp.extract_hwp(path)
    assert caught.value.reason == reason


def test_hwp_without_body_is_corrupt(tmp_path: Path):
    path = write_hwp5_header(tmp_path / "nobody.hwp", 0b1)
    with pytest.raises(ExtractError) as caught:
        hwp.extract_hwp(path)
    assert caught.value.reason == "corrupt"


# ----------------------------------------------------------------------------- real corpus

HWP_FILE = ("corpus", "hwp", "디지털 정부혁신 추진계획.hwp")
EMPTY_IN_CORPUS = {"SimplePicture.hwpx", "error_20240305_2022.hwpx"}  # a picture; a blank page


def test_every_corpus_hwpx_extracts_or_is_empty():
    files = sorted(shared_path("corpus", "hwpx").rglob("*.hwpx"))
    assert len(files) >= 20
    for path in files:
        if path.name in EMPTY_IN_CORPUS:
            with pytest.raises(ExtractError) as caught:
                hwp.extract_hwpx(path)
            assert caught.value.reason == "empty", path.name
            continue
        pages = hwp.extract_hwpx(path).pages
        assert any(line.strip() for page in pages for line in page), path.name
        assert all("\n" not in line for page in pages for line in page), path.name


@pytest.mark.parametrize(("name", "page", "expected"), [
    ("hwpxlib/HeaderFooter.hwpx", 1, ["[footer] 꼬리말", "[header] 머리말 테스트"]),
    ("hwpxlib/SimpleTable.hwpx", 1, ["1 | 2", "3", "5 | 4"]),
    ("hwpxlib/ChangeTrack.hwpx", 1, ["변경 인간은"]),  # " 추적" was deleted under tracking
    ("hwpxlib/RectInRect.hwpx", 1, ["사각형 안에", "사각형 안에 사각형의 텍스트입니다.",
                                    "텍스트입니다."]),  # a text box inside a text box
])
def test_corpus_pages(name: str, page: int, expected: list[str]):
    assert hwp.extract_hwpx(shared_path("corpus", "hwpx", *name.split("/"))).pages[page - 1] \
        == expected


def test_corpus_equations_become_latex():
    path = shared_path("corpus", "hwpx", "python-hwpx", "equation_p0.hwpx")
    lines = hwp.extract_hwpx(path).pages[0]
    quadratic = "[math: x = \\frac{- b \\pm \\sqrt{b^2 - 4 ac}}{2 a}]"
    assert lines[2:4] == ["① 이차방정식의 근:", quadratic]
    assert sum(line.startswith("[math: ") for line in lines) == 3
    simple = hwp.extract_hwpx(shared_path("corpus", "hwpx", "hwpxlib", "SimpleEquation.hwpx"))
    assert simple.pages[0][0].startswith("[math: \\frac{")


def test_corpus_page_breaks_start_pages():
    path = shared_path("corpus", "hwpx", "python-hwpx", "mfds_admin_notice.hwpx")
    pages = hwp.extract_hwpx(path).pages
    assert len(pages) == 6
    assert pages[1][0] == "식품의약품안전처 공고 제2025-477호"


def test_corpus_hwp5_document():
    result = hwp.extract_hwp(shared_path(*HWP_FILE))
    assert result.parser == "python-hwpx:hwp5"
    assert result.pages[0][6] == "디지털 정부혁신 추진계획"
    assert result.pages[2][1] == "Ⅰ. 개 요"
    assert "1 |  | 선제적·통합적 대국민 서비스 혁신" in result.pages[3]  # a table row


def test_corpus_hwp5_falls_back_to_records(monkeypatch: pytest.MonkeyPatch):
    def broken(data: bytes):
        raise RuntimeError("converter bug")

    monkeypatch.setattr("hwpx.hwp5.package.convert", broken)
    result = hwp.extract_hwp(shared_path(*HWP_FILE))
    assert result.parser == "python-hwpx:hwp5-records"
    assert "디지털 정부혁신 추진계획" in result.pages[0]
    assert len(result.pages) == 10  # the same page breaks as the full route
