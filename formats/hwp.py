"""Read Hancom (한/글) documents into pages of raw lines: HWPX and legacy binary HWP 5.0.

Reads one `.hwpx` or `.hwp` file and writes nothing. `extract_hwpx(path)` and
`extract_hwp(path)` return `Extracted(pages, parser)` like every extractor in extract.py, and
raise only `ExtractError(reason, detail)`.

HWPX is a zip of OWPML XML: `Contents/content.hpf` lists the sections in reading order and
each `Contents/sectionN.xml` holds the body. A `.hwp` file (an OLE compound file whose
`BodyText/SectionN` streams are zlib-compressed binary records) is converted to the same XML
parts in memory by python-hwpx (`hwpx.hwp5`), so both formats go through one reader. Should
that converter fail on a file it can still decode, the paragraph text is read straight from
the records (parser "python-hwpx:hwp5-records": no tables, notes or equations as such).

Pages. A word processor lays out pages only when it prints, so a page here is what the file
itself marks: a new page starts at every section (each `sectionN.xml`, and any further
`hp:secPr` inside one) and at every explicit page break (`pageBreak="1"` on a paragraph).
A page therefore often spans several printed pages (python-hwpx only estimates layout).

Lines. One line per paragraph (`hp:p`, the text of its `hp:t` runs; a forced line break
`hp:lineBreak` starts a new line). Tables come row by row, one line per row, cells joined by
" | " and the paragraphs inside a cell joined by spaces (rows with no text are left out).
Headers and footers are lines "[header] ..." / "[footer] ..." where the section defines them,
footnotes and endnotes are lines "[footnote 3] ..." / "[endnote 1] ..." right after the
paragraph that cites them, equations stay inline as "[math: <LaTeX>]" (the raw Hancom
equation script when it does not convert), and text boxes and captions give their own lines
where they are anchored. Text deleted under change tracking is left out; pictures, master
pages and memos give no lines. Runs of spaces and tabs within a line become one space (forms
space out letters and align with tabs). Empty paragraphs stay as empty lines, so line numbers
follow the paragraphs a person sees; empty lines at the end of a page are dropped.

Layer: reader (formats/), above formats/base.py, below extract.py.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
import zipfile
from pathlib import Path

from formats.base import Extracted, ExtractError, check_zip
from formats.zipxml import children, local, parse_xml, read_member

# -----------------------------------------------------------------------------
SECTION_NAME = re.compile(r"Contents/section(\d+)\.xml", re.IGNORECASE)  # a body part
OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"  # every HWP 5.0 file starts so
ZIP_MAGIC = b"PK\x03\x04"
HWP3_MAGIC = b"HWP Document File V3"  # HWP 3.x, the DOS-era format nothing here reads
PAGE_BREAK_BIT = 0x04  # HWP 5.0 PARA_HEADER break type: "page break before this paragraph"
# -----------------------------------------------------------------------------

_SPACES = {"tab": " ", "fwSpace": " ", "nbSpace": " ", "hyphen": "-", "lineBreak": "\n"}
_NOTES = {"footNote": "footnote", "endNote": "endnote"}
_MARGINALS = {"header": "header", "footer": "footer"}
_MARGINAL_PREFIXES = ("[header] ", "[footer] ")
_CONTROL_CHARS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f\ufeff]")  # not \t \n


# ----------------------------------------------------------------------------- paragraphs


class _Reader:
    """Walks OWPML section XML in reading order. It holds one piece of state, whether we are
    inside a tracked deletion, because a deletion's end marker may sit in a later run; it is
    reset at every body paragraph, so a lost end marker cannot hide the rest of a file."""

    def __init__(self) -> None:
        self.deleting = False

    def block(self, container: ET.Element) -> list[str]:
        """Lines of the paragraphs directly inside a subList (cell, header, note, text box)."""
        return [line for p in children(container, "p") for line in self.paragraph(p)]

    def paragraph(self, p: ET.Element) -> list[str]:
        """One paragraph's lines: its text, with tables, text boxes and marginals on lines of
        their own where they are anchored, and its notes after it."""
        lines: list[str] = []
        notes: list[str] = []
        text: list[str] = []
        for run in children(p, "run"):
            for item in run:
                name = local(item.tag)
                if name == "t":
                    text.append(self.text(item))
                elif name == "equation":
                    text.append(f" [math: {equation_latex(item)}] ")
                elif name in ("ctrl", *_NOTES, *_MARGINALS):
                    for control in [item] if name != "ctrl" else list(item):
                        kind = local(control.tag)
                        if kind in _NOTES:
                            notes.append(self.note(control, _NOTES[kind]))
                        elif kind in _MARGINALS:
                            lines += _flush(text) + self.marginal(control, _MARGINALS[kind])
                elif name == "tbl":
                    lines += _flush(text) + self.table(item)
                elif name != "secPr":  # shapes, text boxes, pictures' captions, containers
                    boxes = [line for sub in _sublists(item) for line in self.block(sub)]
                    lines += (_flush(text) + boxes) if boxes else []
        # Hancom writes an empty paragraph as <hp:run><hp:t/></hp:run>: it is still a line.
        return lines + _flush(text, keep_empty=not lines) + [n for n in notes if n]

    def text(self, t: ET.Element) -> str:
        """An hp:t run: text mixed with tab, space, line-break and change-tracking marks."""
        parts = [] if self.deleting else [t.text or ""]  # control chars go in _flush
        for mark in t:
            name = local(mark.tag)
            if name == "deleteBegin":
                self.deleting = True
            elif name == "deleteEnd":
                self.deleting = False
            elif not self.deleting:
                parts.append(_SPACES.get(name, ""))
            if not self.deleting:
                parts.append(mark.tail or "")
        return "".join(parts)

    def table(self, tbl: ET.Element) -> list[str]:
        """One line per row (cells " | "), with the caption's lines before it."""
        lines = [line for cap in children(tbl, "caption") for sub in _sublists(cap)
                 for line in self.block(sub)]
        for tr in children(tbl, "tr"):
            cells = []
            for tc in children(tr, "tc"):
                cell = [line for sub in children(tc, "subList") for line in self.block(sub)]
                # Forms often define the page header inside a layout table's cell; it is
                # still the page's header, so it gets its own line, before the row.
                lines += [line for line in cell if line.startswith(_MARGINAL_PREFIXES)]
                cells.append(" ".join(line for line in cell
                                      if line and not line.startswith(_MARGINAL_PREFIXES)))
            if any(cells):
                lines.append(" | ".join(cells))
        return lines

    def marginal(self, element: ET.Element, kind: str) -> list[str]:
        return [f"[{kind}] {line}" for sub in _sublists(element) for line in self.block(sub)
                if line.strip()]

    def note(self, element: ET.Element, kind: str) -> str:
        """A footnote or endnote as one line; its number is the autoNum Hancom draws."""
        number = next((n.get("num") for n in element.iter() if local(n.tag) == "autoNum"), "")
        body = " ".join(line.strip() for sub in _sublists(element) for line in self.block(sub))
        label = f"{kind} {number}" if number else kind
        return f"[{label}] {' '.join(body.split())}" if body.strip() else ""


def _flush(text: list[str], keep_empty: bool = False) -> list[str]:
    """Turn the inline text gathered so far into lines (a forced break starts a new one).
    Runs of spaces and tabs become one space: Hancom forms space out letters and align
    columns with tabs and fixed-width spaces, which only gets in the way of search."""
    joined = _CONTROL_CHARS.sub("", "".join(text))
    text.clear()
    if not joined.strip() and not keep_empty:
        return []
    return [" ".join(line.split()) for line in joined.split("\n")]


def _sublists(element: ET.Element) -> list[ET.Element]:
    """The outermost hp:subList elements below `element` (text boxes, captions, notes):
    nested ones are read by the paragraphs of the outer one, never twice."""
    found: list[ET.Element] = []
    for child in element:
        found += [child] if local(child.tag) == "subList" else _sublists(child)
    return found


def equation_latex(equation: ET.Element) -> str:
    """Hancom's equation script (`{a+b} over c`) as LaTeX, by python-hwpx's converter; the
    script itself when it will not convert, so the formula is never lost."""
    script = next((s.text or "" for s in equation if local(s.tag) == "script"), "")
    script = " ".join(script.split())
    try:
        from hwpx.equation import eqedit_to_latex

        return " ".join(eqedit_to_latex(script).split()) or script
    except Exception:  # any converter failure: keep the raw script
        return script


# ----------------------------------------------------------------------------- sections


def section_pages(root: ET.Element, reader: _Reader) -> list[list[str]]:
    """A section's pages: a new one at each page break or further section definition."""
    pages: list[list[str]] = [[]]
    for index, p in enumerate(children(root, "p")):
        new_section = index > 0 and any(local(x.tag) == "secPr" for run in children(p, "run")
                                         for x in run)
        if (p.get("pageBreak") == "1" or new_section) and pages[-1]:
            pages.append([])
        reader.deleting = False
        pages[-1] += reader.paragraph(p)
    return pages


def _section_names(archive: zipfile.ZipFile, path: Path) -> list[str]:
    """Body parts in reading order: the content.hpf spine, else by section number."""
    names = {n.lower(): n for n in archive.namelist()}
    found = sorted((n for n in archive.namelist() if SECTION_NAME.fullmatch(n)),
                   key=lambda n: int(SECTION_NAME.fullmatch(n).group(1)))
    manifest = names.get("contents/content.hpf")
    if manifest is None:
        return found
    try:
        root = parse_xml(read_member(archive, manifest, path), manifest, path)
    except ExtractError:
        return found
    hrefs = {i.get("id"): i.get("href", "") for i in root.iter() if local(i.tag) == "item"}
    spine = [hrefs.get(ref.get("idref"), "") for ref in root.iter()
             if local(ref.tag) == "itemref"]
    ordered = []
    for href in spine:
        for candidate in (href, f"Contents/{href}"):
            real = names.get(candidate.lstrip("/").lower())
            if real and SECTION_NAME.fullmatch(real) and real not in ordered:
                ordered.append(real)
                break
    return ordered or found


def pages_from_parts(parts: list[tuple[str, bytes]], path: Path) -> list[list[str]]:
    """Pages of all sections, in order; empty lines at a page's end are dropped."""
    reader = _Reader()
    pages: list[list[str]] = []
    for name, data in parts:
        try:
            pages += section_pages(parse_xml(data, name, path), reader)
        except RecursionError as exc:  # tables in tables in text boxes, thousands deep
            raise ExtractError("corrupt", f"{path.name}: {name} nests objects too deeply to "
                                          "read; it was not indexed.") from exc
    return _trim(pages, path)


def extract_hwpx(path: Path) -> Extracted:
    """An HWPX document (zip + OWPML XML); see the module docstring for pages and lines."""
    path = Path(path)
    check_zip(path)  # raises "corrupt" for a broken zip, "zip-bomb" for a bomb
    with zipfile.ZipFile(path) as archive:
        names = _section_names(archive, path)
        if not names:
            raise ExtractError("corrupt", f"{path.name} has no Contents/section*.xml; it is not "
                                          "an HWPX document, or it is damaged. Re-save it.")
        parts = [(name, read_member(archive, name, path)) for name in names]
    return Extracted(pages_from_parts(parts, path), "hwpx")


# ----------------------------------------------------------------------------- HWP 5.0

_PROTECTED = {
    "hwp5-password": "is password-protected (암호 문서); open it in Hancom Office, remove the "
                     "password and save it again",
    "hwp5-distribution": "is a distribution document (배포용 문서), whose body Hancom encrypts so "
                         "it can only be viewed; ask its author for the original, or print it "
                         "to PDF and index that",
    "hwp5-drm": "is DRM- or certificate-encrypted; export an unprotected copy (HWPX or PDF)",
}


def _hwp_error(exc: Exception, path: Path) -> ExtractError:
    """python-hwpx's Hwp5Error codes, as our reasons."""
    code = getattr(exc, "code", "")
    if code in _PROTECTED:
        return ExtractError("password-protected", f"{path.name} {_PROTECTED[code]}.")
    if code in ("hwp5-not-hwp5", "hwp5-version-unsupported"):
        return ExtractError("unsupported-format", f"{path.name} is not an HWP 5.0 document "
                                                  f"({exc}); save it as .hwpx or .hwp 5.0.")
    if code == "hwp5-limit-exceeded":
        return ExtractError("too-large", f"{path.name} exceeds a safety limit of the HWP reader "
                                         f"({exc}); it was not read.")
    return ExtractError("corrupt", f"{path.name} could not be read as HWP 5.0 "
                                   f"({type(exc).__name__}: {exc}"[:300] + "); re-save it.")


def extract_hwp(path: Path) -> Extracted:
    """A legacy binary HWP 5.0 document, converted to HWPX parts in memory and read as such."""
    path = Path(path)
    with path.open("rb") as f:
        head = f.read(32)
    if not head:
        raise ExtractError("empty", f"{path.name} is a 0-byte file; re-download or re-save it.")
    if head.startswith(ZIP_MAGIC):  # an HWPX document saved under a .hwp name
        return extract_hwpx(path)
    if head.startswith(HWP3_MAGIC):
        raise ExtractError("unsupported-format", f"{path.name} is an HWP 3.x document; open it "
                                                 "in Hancom Office and save it as .hwpx.")
    if not head.startswith(OLE_MAGIC):
        raise ExtractError("corrupt", f"{path.name} is no HWP document (no OLE header); "
                                      "give it its real extension or re-save it.")
    try:
        from hwpx.errors import Hwp5Error
        from hwpx.hwp5.package import convert
    except ImportError as exc:  # python-hwpx missing, or a major version that moved these
        detail = f"{path.name}: reading .hwp needs python-hwpx 6.x ({exc}); install it."
        raise ExtractError("unsupported-format", detail) from exc
    data = path.read_bytes()
    try:
        files = convert(data).files
    except Hwp5Error as exc:
        if getattr(exc, "code", "") != "hwp5-damaged":
            raise _hwp_error(exc, path) from exc
        return _hwp_records(data, path, exc)
    except Exception as exc:  # the converter rebuilds far more than text; the records may do
        return _hwp_records(data, path, exc)
    parts = sorted(((n, d) for n, d in files.items() if SECTION_NAME.fullmatch(n)),
                   key=lambda item: int(SECTION_NAME.fullmatch(item[0]).group(1)))
    return Extracted(pages_from_parts(parts, path), "python-hwpx:hwp5")


def _hwp_records(data: bytes, path: Path, first: Exception) -> Extracted:
    """Fallback: every paragraph's text straight from the BodyText records, one line each."""
    from hwpx.hwp5.bodytext import parse_paragraph
    from hwpx.hwp5.reader import read_hwp5
    from hwpx.hwp5.records import PARA_HEADER

    try:
        doc = read_hwp5(data)
        pages: list[list[str]] = []
        for stream in doc.sections:
            pages.append([])
            for root in stream.roots:
                for record in root.walk():
                    if record.tag != PARA_HEADER:
                        continue
                    paragraph = parse_paragraph(record)
                    if record is root and paragraph.break_type & PAGE_BREAK_BIT and pages[-1]:
                        pages.append([])
                    pages[-1] += _record_lines(paragraph.chunks)
    except Exception as exc:
        raise _hwp_error(exc if hasattr(exc, "code") else first, path) from exc
    return Extracted(_trim(pages, path), "python-hwpx:hwp5-records")


def _record_lines(chunks: list) -> list[str]:
    """PARA_TEXT chunks -> lines: text kept, line break (10) splits, tab/spaces (9, 30, 31)
    become spaces, hyphen (24) a hyphen; other controls (tables, pictures) are dropped."""
    marks = {10: "\n", 9: " ", 24: "-", 30: " ", 31: " "}
    text = "".join(c.text if c.kind == "text" else marks.get(c.code, "") for c in chunks)
    return [" ".join(line.split()) for line in _CONTROL_CHARS.sub("", text).split("\n")]


def _trim(pages: list[list[str]], path: Path) -> list[list[str]]:
    """Drop empty lines at each page's end and empty pages at the document's end (nothing
    can cite them); a document with no text at all is "empty"."""
    for page in pages:
        while page and not page[-1].strip():
            page.pop()
    while len(pages) > 1 and not pages[-1]:
        pages.pop()
    if not any(line.strip() for page in pages for line in page):
        raise ExtractError("empty", f"{path.name} has no text (only pictures or empty form "
                                    "fields?); there is nothing to index.")
    return pages
