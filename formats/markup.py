"""Turn marked-up documents (RTF, HTML, EPUB, OpenDocument .odt/.ods/.odp) into pages of
raw lines.

Reads one file, writes nothing; keeps the contract of `extract.py` (`Extracted(pages,
parser)`, ExtractError only). Zip-based formats (EPUB, ODF) pass `formats.base.check_zip` (zip
bombs) before any member is inflated, and their XML is read through zipxml (no DTDs, so no
entity expansion). XHTML goes through the standard library's HTMLParser, which expands no
custom entities either.

What page and line mean:
- RTF (our own reader, see `_Rtf`): a page ends at `\\page`; a line is a paragraph (`\\par`)
  or a soft break (`\\line`); a table row is one line, cells joined by " | ". Headers,
  footers, pictures and field codes are left out, a field's shown result kept.
- HTML: the whole document is one page; a line is a block (paragraph, heading, list item,
  table row with cells joined by " | ", a `<br>`); script, style and the head are dropped.
- EPUB: a page is a spine document (a chapter), in reading order, its lines as for HTML.
- ODT: a page is the text between explicit page breaks (a paragraph style with
  `fo:break-before="page"`, or "after"); a line is a paragraph, heading or list item, a
  table row is one line; footnotes as "[footnote N] ..." lines at the end of their page.
- ODS: as XLSX: a page is a sheet, line 1 "[sheet] NAME", line N is row N-1, dates ISO 8601.
- ODP: a page is a slide, its title first, then its text frames top-to-bottom and
  left-to-right, then "[notes] ..." lines.

Layer: reader (formats/), above formats/office.py, below extract.py.
"""

from __future__ import annotations

import re
import zipfile
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from posixpath import dirname, normpath
from typing import Any
from urllib.parse import unquote

from formats import office, zipxml
from formats.base import Extracted, ExtractError, check_text_size, check_zip, decode_text

# -----------------------------------------------------------------------------
SEP = office.SEP  # between the cells of a table row
MAX_REPEAT = 10_000  # an ODS row/column repeat beyond this is filler (Calc pads to 1,048,576)
HTML_SNIFF_BYTES = 4096  # where a <meta charset> must be to count
# -----------------------------------------------------------------------------


def _finish(path: Path, pages: list[list[str]], parser: str) -> Extracted:
    """Pages with no text at all are an "empty" file; trailing blank lines go."""
    for page in pages:
        while page and not page[-1].strip():
            page.pop()
    if not any(line.strip() and not line.startswith("[sheet] ") for p in pages for line in p):
        raise ExtractError("empty", f"{path.name} has no text; there is nothing to index.")
    return Extracted(pages, parser)


# ----------------------------------------------------------------------------- HTML

BLOCKS = {"p", "div", "br", "li", "dt", "dd", "h1", "h2", "h3", "h4", "h5", "h6", "tr",
          "table", "ul", "ol", "dl", "blockquote", "pre", "section", "article", "header",
          "footer", "nav", "aside", "main", "figure", "figcaption", "hr", "address", "form",
          "fieldset", "legend", "caption", "details", "summary", "body", "title"}
HIDDEN = {"script", "style", "noscript", "template", "head", "svg", "math", "object", "iframe"}


class _Visible(HTMLParser):
    """Visible text as lines: a block element starts a line, table cells join with " | "."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.lines: list[str] = []
        self.line: list[str] = []
        self.hidden = 0  # depth inside script/style/head...
        self.pre = 0  # depth inside <pre>: whitespace is kept
        self.cells = 0  # cells seen on the current table row

    def _break(self) -> None:
        text = "".join(self.line)
        self.lines.extend(text.split("\n") if self.pre else [" ".join(text.split())])
        self.line = []

    def handle_starttag(self, tag: str, attrs: Any) -> None:
        if tag in HIDDEN:
            self.hidden += 1
        elif tag in ("td", "th"):
            self.line.append(SEP if self.cells else "")
            self.cells += 1
        elif tag in BLOCKS:
            self._break()
            self.cells = 0 if tag == "tr" else self.cells
            self.pre += tag == "pre"
        elif tag == "img" and (alt := dict(attrs).get("alt")):
            self.line.append(f" [image: {alt}] ")

    def handle_endtag(self, tag: str) -> None:
        if tag in HIDDEN:
            self.hidden = max(0, self.hidden - 1)
        elif tag in BLOCKS:
            self._break()
            self.pre -= tag == "pre" and self.pre > 0

    def handle_data(self, data: str) -> None:
        if not self.hidden:
            self.line.append(data if self.pre else re.sub(r"\s+", " ", data))

    def result(self) -> list[str]:
        self._break()
        return [line.rstrip() for line in self.lines if line.strip()]


def html_lines(markup: str) -> list[str]:
    """The visible lines of an HTML or XHTML document."""
    parser = _Visible()
    parser.feed(markup)
    parser.close()
    return parser.result()


_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([\w.:-]+)""", re.I)


def extract_html(path: Path) -> Extracted:
    """A saved web page: one page, a line per block of visible text."""
    data = path.read_bytes()
    if not data.strip():
        raise ExtractError("empty", f"{path.name} has no text; there is nothing to index.")
    text = None
    if declared := _META_CHARSET.search(data[:HTML_SNIFF_BYTES]):
        try:
            text = data.decode(declared.group(1).decode("ascii"))
        except (LookupError, UnicodeDecodeError):
            text = None
    if text is None:
        decoded = decode_text(data)
        if decoded is None:
            raise ExtractError("binary", f"{path.name} holds binary data, not HTML; give it "
                                         "its real extension.")
        text = decoded[0]
    check_text_size(path, len(text))
    return _finish(path, [html_lines(text)], "html")


# ----------------------------------------------------------------------------- zip packages


def _open_package(path: Path, kind: str) -> zipfile.ZipFile:
    if path.stat().st_size == 0:
        raise ExtractError("empty", f"{path.name} is a 0-byte file; re-save or re-download it.")
    check_zip(path)
    archive = zipfile.ZipFile(path)
    if kind == "ODF" and "META-INF/manifest.xml" in archive.namelist():
        manifest = zipxml.read_member(archive, "META-INF/manifest.xml", path)
        if b"encryption-data" in manifest:
            archive.close()
            raise ExtractError("password-protected", f"{path.name} needs a password to open; "
                                                     "index an unprotected copy instead.")
    return archive


def _member(archive: zipfile.ZipFile, name: str, path: Path, kind: str) -> bytes:
    if name not in archive.namelist():
        archive.close()
        raise ExtractError("corrupt", f"{path.name} is not a readable {kind} file (it has no "
                                      f"{name}); open it and save it again.")
    return zipxml.read_member(archive, name, path)


# ----------------------------------------------------------------------------- EPUB


def extract_epub(path: Path) -> Extracted:
    """An e-book: a page per spine document (chapter), in reading order."""
    with _open_package(path, "EPUB") as archive:
        container = zipxml.parse_xml(_member(archive, "META-INF/container.xml", path, "EPUB"),
                                     "container.xml", path)
        rootfile = next((e.get("full-path") for e in container.iter()
                         if zipxml.local(e.tag) == "rootfile"), None)
        if not rootfile:
            raise ExtractError("corrupt", f"{path.name} names no package document; re-save it.")
        opf = zipxml.parse_xml(_member(archive, rootfile, path, "EPUB"), rootfile, path)
        hrefs = {e.get("id"): e.get("href", "") for e in opf.iter()
                 if zipxml.local(e.tag) == "item"}
        spine = [hrefs.get(e.get("idref"), "") for e in opf.iter()
                 if zipxml.local(e.tag) == "itemref"]
        encrypted = _epub_encrypted(archive, path)
        pages, total = [], 0
        for href in filter(None, spine):
            name = normpath(f"{dirname(rootfile)}/{unquote(href.split('#')[0])}").lstrip("/")
            if name in encrypted:
                raise ExtractError("password-protected", f"{path.name} is locked by DRM; "
                                   "index a copy without DRM.")
            text = _member(archive, name, path, "EPUB").decode("utf-8", "replace")
            total += len(text)
            check_text_size(path, total)
            pages.append(html_lines(text))
    return _finish(path, pages or [[]], "epub")


def _epub_encrypted(archive: zipfile.ZipFile, path: Path) -> set[str]:
    """Members META-INF/encryption.xml lists (DRM; font obfuscation lists only fonts)."""
    if "META-INF/encryption.xml" not in archive.namelist():
        return set()
    root = zipxml.parse_xml(zipxml.read_member(archive, "META-INF/encryption.xml", path),
                            "encryption.xml", path)
    return {unquote(e.get("URI", "")) for e in root.iter()
            if zipxml.local(e.tag) == "CipherReference"}


# ----------------------------------------------------------------------------- ODF

TEXT_NS = "urn:oasis:names:tc:opendocument:xmlns:text:1.0"
OFFICE_NS = "urn:oasis:names:tc:opendocument:xmlns:office:1.0"
TABLE_NS = "urn:oasis:names:tc:opendocument:xmlns:table:1.0"
STYLE_NS = "urn:oasis:names:tc:opendocument:xmlns:style:1.0"
FO_NS = "urn:oasis:names:tc:opendocument:xmlns:xsl-fo-compatible:1.0"
SVG_NS = "urn:oasis:names:tc:opendocument:xmlns:svg-compatible:1.0"
DRAW_NS = "urn:oasis:names:tc:opendocument:xmlns:drawing:1.0"
PRES_NS = "urn:oasis:names:tc:opendocument:xmlns:presentation:1.0"


def _attr(element: Any, ns: str, name: str, default: str = "") -> str:
    return element.get(f"{{{ns}}}{name}", default)


def _inline(element: Any, notes: list[str] | None = None) -> str:
    """A paragraph's text: spans, links, spaces (`text:s c=N`), tabs and line breaks; a
    footnote becomes "[footnote N]" here and its body goes to `notes`."""
    parts = [element.text or ""]
    for child in element:
        name = zipxml.local(child.tag)
        if name == "s":
            parts.append(" " * int(_attr(child, TEXT_NS, "c", "1") or 1))
        elif name == "tab":
            parts.append(" ")
        elif name == "line-break":
            parts.append("\n")
        elif name == "note":
            mark = next((c.text or "" for c in child
                         if zipxml.local(c.tag) == "note-citation"), "")
            parts.append(f"[footnote {mark}]")
            if notes is not None:
                body = [_inline(p) for b in child if zipxml.local(b.tag) == "note-body"
                        for p in b.iter() if zipxml.local(p.tag) in ("p", "h")]
                notes.append(f"[footnote {mark}] " + " ".join(" ".join(body).split()))
        elif name not in ("annotation", "bookmark-start", "bookmark-end"):
            parts.append(_inline(child, notes))
        parts.append(child.tail or "")
    return "".join(parts)


def _odf_root(archive: zipfile.ZipFile, path: Path) -> tuple[Any, Any]:
    content = zipxml.parse_xml(_member(archive, "content.xml", path, "OpenDocument"),
                               "content.xml", path)
    body = next((e for e in content if zipxml.local(e.tag) == "body"), None)
    if body is None or not len(body):
        raise ExtractError("corrupt", f"{path.name} has no document body; re-save it.")
    return content, body[0]


def extract_odf(path: Path) -> Extracted:
    """An OpenDocument text, spreadsheet or presentation."""
    with _open_package(path, "ODF") as archive:
        content, body = _odf_root(archive, path)
        kind = zipxml.local(body.tag)
        styles = (zipxml.read_member(archive, "styles.xml", path)
                  if "styles.xml" in archive.namelist() else b"")
        if kind == "text":
            breaks = _page_break_styles(content, styles, path)
            pages = _odt_pages(body, breaks)
        elif kind == "spreadsheet":
            pages = [_ods_sheet(path, t) for t in body if zipxml.local(t.tag) == "table"]
        elif kind == "presentation":
            pages = [_odp_slide(p) for p in body if zipxml.local(p.tag) == "page"]
        else:
            raise ExtractError("unsupported-format", f"{path.name} is an OpenDocument {kind}; "
                                                     "only text, spreadsheets and "
                                                     "presentations are indexed.")
    return _finish(path, pages or [[]], f"odf:{kind}")


def _page_break_styles(content: Any, styles: bytes, path: Path) -> dict[str, str]:
    """Paragraph style name -> "before"/"after" for styles that force a page break."""
    roots = [content] + ([zipxml.parse_xml(styles, "styles.xml", path)] if styles else [])
    found = {}
    for root in roots:
        for style in root.iter(f"{{{STYLE_NS}}}style"):
            for props in style.iter(f"{{{STYLE_NS}}}paragraph-properties"):
                for side in ("before", "after"):
                    if _attr(props, FO_NS, f"break-{side}") == "page":
                        found[_attr(style, STYLE_NS, "name")] = side
    return found


def _odt_pages(body: Any, breaks: dict[str, str]) -> list[list[str]]:
    pages: list[list[str]] = [[]]
    notes: list[str] = []

    def new_page() -> None:
        if pages[-1]:
            pages[-1] += notes
            notes.clear()
            pages.append([])

    def walk(element: Any) -> None:
        for child in element:
            name = zipxml.local(child.tag)
            if name in ("p", "h"):
                side = breaks.get(_attr(child, TEXT_NS, "style-name"))
                if side == "before":
                    new_page()
                pages[-1].extend(office._lines(_inline(child, notes)))
                if side == "after":
                    new_page()
            elif name == "table":
                pages[-1].extend(_odf_rows(child, notes))
            elif name in ("list", "list-item", "list-header", "section", "index-body",
                          "table-of-content", "alphabetical-index", "illustration-index"):
                walk(child)

    walk(body)
    pages[-1] += notes
    return pages


def _odf_rows(table: Any, notes: list[str] | None = None) -> list[str]:
    """A table's rows (header rows and row groups included) as " | " lines."""
    lines = []
    for row in table.iter(f"{{{TABLE_NS}}}table-row"):
        cells = [" ".join(_inline(p, notes) for p in cell.iter()
                          if zipxml.local(p.tag) in ("p", "h")) for cell in row]
        lines.append(office._row([office._flat(c) for c in cells]))
    return lines


def _ods_sheet(path: Path, table: Any) -> list[str]:
    """"[sheet] NAME", then line N = row N-1. Repeats Calc pads a sheet with (a million empty
    rows) are only expanded when content follows them."""
    lines = [f"[sheet] {_attr(table, TABLE_NS, 'name')}"]
    pending, chars = 0, 0
    for row in table.iter(f"{{{TABLE_NS}}}table-row"):
        cells = _ods_cells(row)
        repeat = int(_attr(row, TABLE_NS, "number-rows-repeated", "1") or 1)
        if not cells:
            pending += repeat
            continue
        line = office._row(cells)
        count = min(repeat, MAX_REPEAT)
        chars += (len(line) + 1) * count + pending
        check_text_size(path, chars)
        lines += [""] * pending + [line] * count
        pending = 0
    return lines


def _ods_cells(row: Any) -> list[str]:
    cells: list[str] = []
    for cell in row:
        if zipxml.local(cell.tag) not in ("table-cell", "covered-table-cell"):
            continue
        repeat = min(int(_attr(cell, TABLE_NS, "number-columns-repeated", "1") or 1), MAX_REPEAT)
        value = _ods_value(cell)
        if value or any(cells):
            cells += [value] * repeat
        else:
            cells += [""] * repeat if repeat < MAX_REPEAT else []
    while cells and not cells[-1]:
        cells.pop()
    return cells


def _ods_value(cell: Any) -> str:
    """Dates in ISO 8601 (as stored), booleans TRUE/FALSE, else the text Calc shows."""
    kind = _attr(cell, OFFICE_NS, "value-type")
    if kind == "date":
        value = _attr(cell, OFFICE_NS, "date-value")
        return value[:10] if value.endswith("T00:00:00") else value
    if kind == "boolean":
        return _attr(cell, OFFICE_NS, "boolean-value").upper()
    return office._flat(" ".join(_inline(p) for p in cell if zipxml.local(p.tag) == "p"))


def _odp_slide(page: Any) -> list[str]:
    frames = []
    notes: list[str] = []
    for frame in _frames(page):
        title = _attr(frame, PRES_NS, "class") == "title"
        y, x = (_length(_attr(frame, SVG_NS, k)) for k in ("y", "x"))
        texts = [line for p in frame.iter() if zipxml.local(p.tag) in ("p", "h")
                 for line in office._lines(_inline(p))]
        rows = [r for t in frame.iter() if zipxml.local(t.tag) == "table" for r in _odf_rows(t)]
        frames.append((not title, y, x, rows or texts))
    for child in page:
        if zipxml.local(child.tag) == "notes":
            notes += [_inline(p) for p in child.iter() if zipxml.local(p.tag) == "p"]
    lines = [line for *_, text in sorted(frames, key=lambda f: f[:3]) for line in text]
    return [line for line in lines if line.strip()] + office._marked("notes", notes)


def _frames(page: Any) -> Iterator[Any]:
    """The slide's drawing objects (groups opened), not its notes page."""
    for child in page:
        name = zipxml.local(child.tag)
        if name == "g":
            yield from _frames(child)
        elif name != "notes" and child.tag.startswith(f"{{{DRAW_NS}}}"):
            yield child


def _length(value: str) -> float:
    """"2.5cm" -> 2.5 (only the order of frames on one slide matters)."""
    match = re.match(r"-?[\d.]+", value)
    return float(match.group()) if match else 0.0


# ----------------------------------------------------------------------------- RTF

# An own reader rather than striprtf: striprtf decodes every \'hh with one codec, so Korean and
# Chinese RTF (Word writes them as double-byte \'hh pairs in a \fcharset129/134 font) come
# out wrong, and it knows no tables or page breaks. This one follows \ansicpg and each font's
# \fcharset, \uN with its \ucN fallback, \cell/\row and \page.

CHARSETS = {77: "mac_roman", 128: "cp932", 129: "cp949", 130: "johab", 134: "gbk", 136: "big5",
            161: "cp1253", 162: "cp1254", 163: "cp1258", 177: "cp1255", 178: "cp1256",
            186: "cp1257", 204: "cp1251", 222: "cp874", 238: "cp1250"}
SKIPPED = {"fonttbl", "colortbl", "stylesheet", "info", "pict", "header", "headerl", "headerr",
           "headerf", "footer", "footerl", "footerr", "footerf", "fldinst", "object", "themedata",
           "colorschememapping", "datastore", "latentstyles", "listtable", "listoverridetable",
           "rsidtbl", "generator", "xmlnstbl", "mmathPr", "filetbl", "revtbl", "pgdsctbl"}
SYMBOLS = {"par": "\n", "line": "\n", "tab": " ", "cell": SEP, "row": "\n", "page": "\f",
           "emdash": "\u2014", "endash": "\u2013", "bullet": "\u2022", "lquote": "\u2018",
           "rquote": "\u2019", "ldblquote": "\u201c", "rdblquote": "\u201d", "emspace": " ",
           "enspace": " ", "qmspace": " ", "~": " ", "_": "-", "-": "", "sect": "\n"}
_RTF_TOKEN = re.compile(rb"\\([a-zA-Z]+)(-?\d+)? ?|\\'([0-9a-fA-F]{2})|\\([^a-zA-Z'])|([{}])"
                        rb"|[\r\n]+|([^\\{}\r\n]+)")


def _codec(page: int) -> str:
    name = {10000: "mac_roman", 936: "gbk", 950: "big5", 65001: "utf-8"}.get(page, f"cp{page}")
    try:
        "".encode(name)
    except LookupError:
        return "cp1252"
    return name


def rtf_text(data: bytes) -> str:
    """RTF -> plain text; "\\f" between pages, "\\n" between lines."""
    out: list[str] = []
    pending = bytearray()  # \'hh bytes waiting to be decoded together (double-byte chars)
    state = {"skip": False, "codec": "cp1252", "uc": 1}
    stack: list[dict] = []
    fonts: dict[int, str] = {}
    default, font_num, skip_chars = "cp1252", None, 0
    in_fonttbl = 0  # depth of the font table group we are in

    def flush() -> None:
        if pending:
            out.append(pending.decode(state["codec"], "replace"))
            pending.clear()

    pos = 0
    while match := _RTF_TOKEN.match(data, pos):
        pos = match.end()
        word, arg, hexbyte, symbol, brace, text = match.groups()
        if hexbyte is not None:
            if skip_chars:
                skip_chars -= 1
            elif not state["skip"]:
                pending.append(int(hexbyte, 16))
            continue
        flush()
        if brace == b"{":
            stack.append(dict(state))
            skip_chars = 0
        elif brace == b"}":
            state = stack.pop() if stack else state
            in_fonttbl = in_fonttbl if len(stack) >= in_fonttbl else 0
        elif word is not None:
            name, number = word.decode(), int(arg) if arg else None
            if name == "bin" and number:
                pos += number  # binary data: never text
            elif name == "ansicpg" and number:
                default = state["codec"] = _codec(number)
            elif name == "fonttbl":
                in_fonttbl = len(stack)
                state["skip"] = True
            elif name == "f" and number is not None:
                font_num = number
                if not in_fonttbl:
                    state["codec"] = fonts.get(number, default)
            elif name == "fcharset" and in_fonttbl and font_num is not None:
                fonts[font_num] = CHARSETS.get(number or 0, default)
            elif name == "uc":
                state["uc"] = number or 0
            elif name == "u" and number is not None:
                if not state["skip"]:
                    out.append(chr(number % 65536) if number % 65536 < 0xD800 or
                               number % 65536 >= 0xE000 else "\ufffd")
                skip_chars = state["uc"]
            elif name in SKIPPED:
                state["skip"] = True
            elif not state["skip"] and name in SYMBOLS:
                out.append(SYMBOLS[name])
        elif symbol is not None:
            char = symbol.decode("latin-1")
            if char == "*":
                state["skip"] = True
            elif not state["skip"]:
                out.append(SYMBOLS.get(char, char if char in "\\{}" else ""))
        elif text is not None and not state["skip"]:
            if skip_chars:
                cut = min(skip_chars, len(text))
                skip_chars -= cut
                text = text[cut:]
            out.append(text.decode(state["codec"], "replace"))
    flush()
    return "".join(out)


def extract_rtf(path: Path) -> Extracted:
    """A Rich Text Format document: pages at \\page, a line per paragraph, table rows as
    " | " lines."""
    data = path.read_bytes()
    if not data.strip():
        raise ExtractError("empty", f"{path.name} is a 0-byte file; re-save or re-download it.")
    if not data.lstrip().startswith(b"{\\rtf"):
        raise ExtractError("corrupt", f"{path.name} is not an RTF file (no {{\\rtf header); "
                                      "give it its real extension.")
    text = rtf_text(data)
    check_text_size(path, len(text))
    rows = re.sub(r"(?: \| )+\n", "\n", text)  # a row's last \cell before its \row
    return _finish(path, [office._lines(page) for page in rows.split("\f")], "rtf")
