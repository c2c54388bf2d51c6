"""ofd.py: OFD (GB/T 33190) -> pages of lines, on hand-made files with known positions.

There is no OFD file in ../shared/corpus; the layouts below follow real ones: the standard
ofd: prefix with the 2016 URI, an unprefixed older URI, a template page drawn through
<Template TemplateID>, absolute and relative BaseLoc, and per-glyph text objects scaled by a
CTM the way PDF-to-OFD converters write them.
"""

import zipfile
from pathlib import Path

import pytest

from extract import ExtractError
from formats import ofd

NS = 'xmlns:ofd="http://www.ofdspec.org/2016"'
OFD_XML = (f'<?xml version="1.0" encoding="UTF-8"?><ofd:OFD {NS} Version="1.1" DocType="OFD">'
           "<ofd:DocBody><ofd:DocInfo><ofd:DocID>x</ofd:DocID></ofd:DocInfo>"
           "<ofd:DocRoot>Doc_0/Document.xml</ofd:DocRoot></ofd:DocBody></ofd:OFD>")
DOCUMENT_XML = (
    f'<ofd:Document {NS}><ofd:CommonData><ofd:MaxUnitID>99</ofd:MaxUnitID>'
    "<ofd:PageArea><ofd:PhysicalBox>0 0 210 297</ofd:PhysicalBox></ofd:PageArea>"
    '<ofd:TemplatePage ID="50" BaseLoc="Tpls/Tpl_0/Content.xml"/></ofd:CommonData>'
    '<ofd:Pages><ofd:Page ID="1" BaseLoc="Pages/Page_0/Content.xml"/>'
    '<ofd:Page ID="2" BaseLoc="/Doc_0/Pages/Page_1/Content.xml"/></ofd:Pages></ofd:Document>')


def text(box: str, size: float, code: str, prefix: str = "ofd:", extra: str = "") -> str:
    """A TextObject at Boundary `box` with the given TextCode elements."""
    return (f'<{prefix}TextObject ID="9" Boundary="{box}" Font="1" Size="{size}"{extra}>'
            f"{code}</{prefix}TextObject>")


def code(x: float, y: float, chars: str, delta: str = "", prefix: str = "ofd:") -> str:
    dx = f' DeltaX="{delta}"' if delta else ""
    return f'<{prefix}TextCode X="{x}" Y="{y}"{dx}>{chars}</{prefix}TextCode>'


def page(*objects: str, ns: str = NS, prefix: str = "ofd:", head: str = "") -> str:
    return (f"<{prefix}Page {ns}>{head}<{prefix}Content><{prefix}Layer ID=\"2\">"
            f"{''.join(objects)}</{prefix}Layer></{prefix}Content></{prefix}Page>")


# Page 1: a title, two objects on one baseline written right one first, and two runs that
# touch (no space between them).
PAGE_0 = page(
    text("80 26 60 6", 4, code(0, 4, "Invoice No. 12345")),
    text("20 26 30 6", 4, code(0, 4, "发票号码：", "g 4 4")),
    text("20 10 40 8", 5, code(0, 5, "电子发票", "g 3 5")),
    text("20 40 8 6", 4, code(0, 4, "金额", "4")),
    text("28 40 40 6", 4, code(0, 4, "¥100.00")),
)
# Page 2, unprefixed with the older namespace URI: one object holding three lines, a run a
# little off the baseline, per-glyph objects in a scaled CTM, and a template header.
OLD = 'xmlns="http://www.ofdspec.org"'
CTM = ' CTM="0.05 0 0 0.05 0 0"'  # glyph units of 1/20 mm: Size 80 is 4 mm, Y 64 is 3.2 mm


def glyph(x: float, char: str) -> str:
    """One glyph per object, as converters write it: baseline 14 + 3.2 mm, 4 mm wide."""
    return text(f"{x} 14 4 4", 80, code(0, 64, char, prefix=""), prefix="", extra=CTM)


PAGE_1 = page(
    text("20 20 170 20", 4, code(0, 0, "First line of the notice", prefix="")
         + code(0, 6, "第二行：中文 text", prefix="") + code(0, 12, "Third line 第三行", prefix=""),
         prefix=""),
    text("150 31 20 6", 4, code(0, 1.5, "end", prefix=""), prefix=""),
    glyph(20, "你"), glyph(24, "好"), glyph(32, "世"),  # 4 mm gap after 好: a space
    ns=OLD, prefix="", head='<Template TemplateID="50" ZOrder="Background"/>',
)
TEMPLATE = page(text("20 4 80 6", 4, code(0, 4, "某某市人民政府")))
EXPECTED = [
    ["电子发票", "发票号码： Invoice No. 12345", "金额¥100.00"],
    ["某某市人民政府", "你好 世", "First line of the notice", "第二行：中文 text",
     "Third line 第三行 end"],
]


def write_ofd(path: Path, parts: dict[str, str | None] | None = None) -> Path:
    """The sample OFD, with `parts` replacing (or, when None, removing) some of its parts."""
    files: dict[str, str | None] = {
        "OFD.xml": OFD_XML,
        "Doc_0/Document.xml": DOCUMENT_XML,
        "Doc_0/Pages/Page_0/Content.xml": PAGE_0,
        "Doc_0/Pages/Page_1/Content.xml": PAGE_1,
        "Doc_0/Tpls/Tpl_0/Content.xml": TEMPLATE,
    }
    files.update(parts or {})
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for name, xml in files.items():
            if xml is not None:
                z.writestr(name, xml)
    return path


def test_pages_and_lines(tmp_path: Path):
    result = ofd.extract_ofd(write_ofd(tmp_path / "a.ofd"))
    assert result.parser == "ofd"
    assert result.pages == EXPECTED


def test_template_is_only_drawn_where_a_page_uses_it(tmp_path: Path):
    no_ref = PAGE_1.replace('<Template TemplateID="50" ZOrder="Background"/>', "")
    path = write_ofd(tmp_path / "b.ofd", {"Doc_0/Pages/Page_1/Content.xml": no_ref})
    assert ofd.extract_ofd(path).pages[1] == EXPECTED[1][1:]


def test_invisible_text_and_hostile_deltas(tmp_path: Path):
    hidden = text("20 10 40 8", 5, code(0, 5, "隐藏"), extra=' Visible="false"')
    huge = text("20 20 40 8", 5, code(0, 5, "ab", "g 999999999 1"))
    path = write_ofd(tmp_path / "c.ofd", {"Doc_0/Pages/Page_0/Content.xml": page(hidden, huge)})
    assert ofd.extract_ofd(path).pages[0] == ["ab"]


def test_documents_follow_ofd_xml_order(tmp_path: Path):
    two = OFD_XML.replace("</ofd:OFD>", "<ofd:DocBody><ofd:DocRoot>Doc_1/Document.xml"
                                        "</ofd:DocRoot></ofd:DocBody></ofd:OFD>")
    second = (f'<ofd:Document {NS}><ofd:Pages><ofd:Page ID="1" BaseLoc="P.xml"/></ofd:Pages>'
              "</ofd:Document>")
    attachment = page(text("0 0 9 9", 3, code(0, 3, "附件")))
    path = write_ofd(tmp_path / "d.ofd", {"OFD.xml": two, "Doc_1/Document.xml": second,
                                          "Doc_1/P.xml": attachment})
    assert ofd.extract_ofd(path).pages == [*EXPECTED, ["附件"]]


@pytest.mark.parametrize(("parts", "says"), [
    ({"OFD.xml": None}, "no OFD.xml"),
    ({"OFD.xml": OFD_XML.replace("<ofd:DocRoot>Doc_0/Document.xml</ofd:DocRoot>", "")},
     "names no document"),
    ({"Doc_0/Document.xml": None}, "lacks its Document.xml"),
    ({"Doc_0/Pages/Page_1/Content.xml": None}, "lacks its page 2"),
    ({"Doc_0/Tpls/Tpl_0/Content.xml": None}, "lacks its template 50"),
    ({"Doc_0/Document.xml": DOCUMENT_XML.split("<ofd:Pages>")[0] + "</ofd:Document>"},
     "lists no pages"),
    ({"Doc_0/Pages/Page_0/Content.xml": PAGE_0[:-20]}, "not well-formed"),
    ({"OFD.xml": '<!DOCTYPE x [<!ENTITY e "e">]>' + OFD_XML.split("?>", 1)[1]}, "DTD"),
])
def test_missing_or_broken_pieces_are_corrupt(tmp_path: Path, parts: dict, says: str):
    with pytest.raises(ExtractError) as caught:
        ofd.extract_ofd(write_ofd(tmp_path / "e.ofd", parts))
    assert (caught.value.reason, says in caught.value.detail) == ("corrupt", True)


def test_zip_bomb_is_refused(tmp_path: Path):
    bomb = page(text("0 0 9 9", 3, code(0, 3, "x"))) + " " * 30_000_000
    with pytest.raises(ExtractError) as caught:
        ofd.extract_ofd(write_ofd(tmp_path / "f.ofd", {"Doc_0/Pages/Page_0/Content.xml": bomb}))
    assert caught.value.reason == "zip-bomb"


def test_lines_from_runs():
    runs = [ofd.Run(30, 40, 10.2, 4, "B"), ofd.Run(10, 20, 10, 4, "A"),
            ofd.Run(21, 25, 10, 4, "a"), ofd.Run(10, 14, 16, 4, "C")]
    assert ofd.lines_of(runs) == ["Aa B", "C"]  # 1 mm gap: no space; 5 mm: a space
