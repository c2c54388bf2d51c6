"""Turn Word, Excel and PowerPoint files (DOCX, XLSX, PPTX) into pages of raw lines.

Reads one file, writes nothing. `extract_docx`, `extract_xlsx` and `extract_pptx` keep the
contract of `extract.py`: they return `Extracted(pages, parser)`, a line number is the 1-based
index into a page's list of lines, and no line holds a "\\n". A file they cannot read raises
`ExtractError` and nothing else: "empty" (0 bytes, or no text at all), "password-protected"
(Office encrypts into an OLE container, not a zip), "unsupported-format" (a legacy binary
.doc/.xls/.ppt under a new name), "zip-bomb" (`formats.base.check_zip` refuses zip bombs before
any parser inflates a byte), "corrupt" (whatever else a parser chokes on). Parsers are
imported on first use, so importing this module stays cheap.

What page and line mean:
- DOCX (docx2python): Word lays pages out only when it prints, so a page here is the text
  between explicit breaks: a page break (`w:br w:type="page"`, "page break before") or a
  section break that starts a new page; a document without one is one page. Not
  `w:lastRenderedPageBreak`: it records where some program last laid out, is stale after
  edits and missing in generated files, so pages built on it would change meaning. A line is
  a paragraph (a soft line break starts a new line; empty paragraphs stay as empty lines),
  or a table row with its cells joined by " | " (a row of one cell is a layout box: its
  paragraphs are lines). Equations read `[math: LaTeX]`, a picture's alt text
  `[image: ...]`, a note reference `[footnote N]`. At the end of the page citing them, come
  "[footnote N] ..." and "[comment] Author: ..." lines; at the end of the last page come
  endnotes, then "[header] ..." and "[footer] ..." lines, each distinct line once (they repeat
  on every printed page). Text boxes come before the paragraph they are anchored to.
- XLSX (openpyxl, cached values): a page is a sheet, in tab order. Line 1 is "[sheet] NAME"
  ("[hidden sheet] NAME"); line N is spreadsheet row N-1, empty rows kept as empty lines, so
  the first non-empty line after line 1 is the header row. Formulas Excel never calculated
  show empty (never the formula); dates are ISO 8601; columns empty on the whole sheet to the
  left of the data are dropped.
- PPTX (python-pptx): a page is a slide. "[hidden slide]" first if hidden, then the title,
  then each shape's non-empty paragraphs top-to-bottom, left-to-right (groups recursed, table
  rows joined by " | ", charts as "[chart] ..." rows), then "[notes] ..." lines.
In every table, sheet and chart a row is one line: a cell's own line breaks become spaces,
trailing empty cells are dropped, and a merged cell's value appears once, in its first cell.

Layer: reader (formats/), above formats/base.py, below extract.py.
"""

from __future__ import annotations

import io
import mmap
import re
import unicodedata
import warnings
import zipfile
from collections.abc import Callable, Iterable
from datetime import date, datetime, time
from pathlib import Path
from typing import Any

from formats.base import Extracted, ExtractError, check_zip
from formats.zipxml import read_member

# -----------------------------------------------------------------------------
SEP = " | "  # between the cells of a table row, a spreadsheet row or a chart series
OLE_MAGIC = b"\xd0\xcf\x11\xe0"  # compound file: encrypted OOXML, or a legacy .doc/.xls/.ppt
ENCRYPTED_STREAM = "EncryptedPackage".encode("utf-16-le")  # only encrypted OOXML has it
# -----------------------------------------------------------------------------

W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
M = "{http://schemas.openxmlformats.org/officeDocument/2006/math}"
MC_FALLBACK = "{http://schemas.openxmlformats.org/markup-compatibility/2006}Fallback"

# ----------------------------------------------------------------------------- shared

# Control chars go, tabs become spaces, and every char that str.splitlines() splits on
# becomes "\n", so no line we return splits again downstream.
_CLEAN = {c: None for c in [*range(0x20), 0x7F, *range(0x80, 0xA0), 0xFEFF]}
_CLEAN.update({c: "\n" for c in (0x0A, 0x0B, 0x0C, 0x0D, 0x1C, 0x1D, 0x1E, 0x85, 0x2028, 0x2029)})
_CLEAN[0x09] = " "


def _lines(text: str) -> list[str]:
    """Text that may hold line breaks -> clean single lines (empty ones kept)."""
    return [line.rstrip() for line in text.replace("\r\n", "\n").translate(_CLEAN).split("\n")]


def _flat(text: str) -> str:
    """A cell's text on one line: its own line breaks must not split the row."""
    return " ".join(text.translate(_CLEAN).split())


def _row(cells: list[str]) -> str:
    """One row as one line; trailing empty cells carry nothing to cite."""
    while cells and not cells[-1]:
        cells = cells[:-1]
    return SEP.join(cells)


def _marked(mark: str, texts: Iterable[str]) -> list[str]:
    """Side text (notes, headers...) as lines prefixed with where it comes from."""
    return [f"[{mark}] {line.strip()}" for text in texts for line in _lines(text) if line.strip()]


def _check_package(path: Path) -> None:
    """Refuse what no OOXML parser should open: empty files, OLE containers, zip bombs."""
    with path.open("rb") as f:
        head = f.read(len(OLE_MAGIC))
        if not head:
            raise ExtractError("empty", f"{path.name} is a 0-byte file; re-save or re-download it.")
        if head == OLE_MAGIC:
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
                encrypted = data.find(ENCRYPTED_STREAM) >= 0
            if encrypted:
                raise ExtractError("password-protected", f"{path.name} needs a password to "
                                   "open; index an unprotected copy instead.")
            raise ExtractError("unsupported-format", f"{path.name} is a legacy binary Office "
                               "file (.doc/.xls/.ppt); save it as .docx/.xlsx/.pptx.")
    check_zip(path)


def _extract(path: Path, kind: str, read: Callable[[Path], list[list[str]]], parser: str,
             skip: Callable[[int, str], bool]) -> Extracted:
    """Pages from `read`, with any parser failure on a bad file turned into ExtractError.
    `skip(index, line)` names the lines we made up ("[sheet] X"): they alone are no text."""
    path = Path(path)
    _check_package(path)
    try:
        with warnings.catch_warnings():  # docx2python/openpyxl warn about features they skip
            warnings.simplefilter("ignore")
            pages = read(path)
    except OSError as exc:
        if exc.errno is not None:  # real I/O trouble (locked, vanished): extract() maps it
            raise
        raise _corrupt(path, kind, exc) from exc
    except ExtractError:
        raise
    except Exception as exc:  # zipfile, lxml, KeyError for a missing part...: all bad files
        raise _corrupt(path, kind, exc) from exc
    for page in pages:
        while page and not page[-1]:  # nothing can cite an empty line at a page's end
            page.pop()
    if not any(line.strip() and not skip(i, line) for p in pages for i, line in enumerate(p)):
        raise ExtractError("empty", f"{path.name} has no text; there is nothing to index.")
    return Extracted(pages, parser)


def _corrupt(path: Path, kind: str, exc: Exception) -> ExtractError:
    why = f"{type(exc).__name__}: {exc}"[:200]
    return ExtractError("corrupt", f"{path.name} is not a readable {kind} file ({why}); "
                                   "open it and save it again.")


# ----------------------------------------------------------------------------- DOCX


def extract_docx(path: Path) -> Extracted:
    """A Word document's text, split into pages at explicit page and section breaks."""
    return _extract(path, "Word", _docx_pages, "docx2python", lambda i, line: False)


def _docx_pages(path: Path) -> list[list[str]]:
    """docx2python knows neither Strict OOXML (docling/Strict.docx came out empty) nor parts
    that never declare the `r:` prefix (teams_chat.docx: KeyError 'r'): repair, read again."""
    with zipfile.ZipFile(path) as archive:
        names = archive.namelist()
        rels = read_member(archive, "_rels/.rels", path) if "_rels/.rels" in names else b""
    if b"/officeDocument" not in rels:  # docx2python would call any zip an empty document
        raise ValueError("the package names no main document in _rels/.rels")
    strict = b"purl.oclc.org/ooxml" in rels
    try:
        return _docx_read(_repaired(path) if strict else path)
    except Exception:
        if strict:
            raise
        return _docx_read(_repaired(path))


_STRICT_NS = re.compile(rb"http://purl\.oclc\.org/ooxml/(\w+)/(\w+)")
_ROOT_TAG = re.compile(rb"^(\s*(?:<\?[^>]*\?>\s*)?<[\w:.-]+)")
_R_NS = b' xmlns:r="http://schemas.openxmlformats.org/officeDocument/2006/relationships"'


def _repaired(path: Path) -> io.BytesIO:
    """The package in memory, Strict namespaces mapped to Transitional, `r:` declared."""
    out = io.BytesIO()
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(out, "w") as dst:
        for info in src.infolist():
            data = read_member(src, info.filename, path)
            if info.filename.endswith((".xml", ".rels")):
                data = _STRICT_NS.sub(rb"http://schemas.openxmlformats.org/\1/2006/\2", data)
                if b"xmlns:r=" not in data:
                    data = _ROOT_TAG.sub(lambda m: m.group(1) + _R_NS, data, count=1)
            dst.writestr(info.filename, data)
    out.seek(0)
    return out


def _docx_read(source: Path | io.BytesIO) -> list[list[str]]:
    from docx2python import docx2python

    with docx2python(source, duplicate_merged_cells=False) as content:
        pages, anchors = _docx_body(content.body_pars)  # each access parses the XML again
        notes = _docx_notes(content.footnotes_pars) | _docx_notes(content.endnotes_pars)
        notes |= _docx_comments(content.docx_reader.comments)
        for key, page in anchors.items():  # footnotes and comments: on the page citing them
            if key in notes and not key.startswith("endnote"):
                pages[min(page, len(pages) - 1)] += notes.pop(key)
        pages[-1] += [line for lines in notes.values() for line in lines]
        for mark, pars in (("header", content.header_pars), ("footer", content.footer_pars)):
            pages[-1] += list(dict.fromkeys(_marked(mark, (_par_text(p) for p in _pars(pars)))))
    return pages


def _pars(tables: list) -> Iterable[Any]:
    """docx2python's [table][row][cell][paragraph] nesting, flattened to paragraphs."""
    return (par for table in tables for row in table for cell in row for par in cell)


def _docx_body(body: list) -> tuple[list[list[str]], dict[str, int]]:
    """Body lines split into pages, and the page index where each note or comment is cited."""
    pages: list[list[str]] = [[]]
    anchors: dict[str, int] = {}
    section_ends = _section_ends(body)
    for row in (row for table in body for row in table):
        pars = [par for cell in row for par in cell]
        if not pars or (pars[0].elem is not None
                        and next(pars[0].elem.iterancestors(MC_FALLBACK), None) is not None):
            continue  # the copy of a text box Word keeps as VML for old readers
        if pars[0].lineage[1] != "tbl" or len(row) == 1:
            for par in pars:
                _add_paragraph(par, pages, anchors, par.elem in section_ends)
            continue
        pages[-1].append(_row([" ".join(_flat(_par_text(p)) for p in cell) for cell in row]))
        for par in pars:
            _anchor(par.elem, anchors, len(pages) - 1)
    for page in pages:  # notes and headers follow the last line of text, not blank lines
        while page and not page[-1]:
            page.pop()
    while len(pages) > 1 and not pages[-1]:  # a break at the very end opens no real page
        pages.pop()
    return pages, anchors


def _section_ends(body: list) -> set[Any]:
    """Paragraphs closing a section whose successor starts on a new page. A section's start
    type sits in its own `w:sectPr`, found at the end of the section (the body's last)."""
    elem = next((p.elem for p in _pars(body) if p.elem is not None), None)
    root = elem.getroottree().getroot().find(W + "body") if elem is not None else None
    if root is None:
        return set()
    sections = [s for s in root.iter(W + "sectPr") if s.getparent().tag in (W + "pPr", W + "body")]
    ends = set()
    for sect, following in zip(sections, sections[1:], strict=False):
        kind = following.find(W + "type")
        starts_page = kind is None or kind.get(W + "val") not in ("continuous", "nextColumn")
        if starts_page and sect.getparent().tag == W + "pPr":
            ends.add(sect.getparent().getparent())
    return ends


def _owned(par_elem: Any, *tags: str) -> list[Any]:
    """Elements `tags` of this paragraph, not of a text box or equation nested in it."""
    found = []
    for node in par_elem.iter(*tags):
        owner = node.getparent()
        while owner is not None and owner.tag not in (W + "p", M + "oMath"):
            owner = owner.getparent()
        if owner is par_elem:
            found.append(node)
    return found


def _add_paragraph(par: Any, pages: list[list[str]], anchors: dict[str, int], ends: bool) -> None:
    """A paragraph's lines; page breaks inside it split it between pages."""
    elem, pieces = par.elem, _par_text(par).split("\n")
    breaks = [False] * (len(pieces) - 1)
    if elem is not None:
        before = elem.find(f"{W}pPr/{W}pageBreakBefore")
        if before is not None and before.get(W + "val") not in ("0", "false", "off") and pages[-1]:
            pages.append([])
        kinds = [br.get(W + "type") == "page" for br in _owned(elem, W + "br")]
        if len(kinds) == len(breaks):  # docx2python writes one "\n" per w:br, in order
            breaks = kinds
        else:  # it did not (a break in a deleted run?): keep the lines, break after them
            ends = ends or any(kinds)
    _anchor(elem, anchors, len(pages) - 1)
    for i, piece in enumerate(pieces):
        if i and breaks[i - 1]:
            pages.append([])
        at_break = (i and breaks[i - 1]) or (i < len(breaks) and breaks[i])
        if piece.strip() or not at_break:  # the empty line a break leaves is no text
            pages[-1].extend(_lines(piece))
    if ends:
        pages.append([])


_ANCHORS = {W + "footnoteReference": "footnote", W + "endnoteReference": "endnote",
            W + "commentRangeStart": "comment", W + "commentReference": "comment"}


def _anchor(elem: Any, anchors: dict[str, int], page: int) -> None:
    """Remember the first page citing each footnote, endnote and comment of a paragraph."""
    for node in _owned(elem, *_ANCHORS) if elem is not None else []:
        anchors.setdefault(f"{_ANCHORS[node.tag]} {node.get(W + 'id')}", page)


_MATH_RUN = re.compile(r"<latex>(.*)</latex>", re.S)
_NOTE_RUN = re.compile(r"----(foot|end)note(-?\d+)----")
_ALT_RUN = re.compile(r"----Image alt text---->(.*)<", re.S)
_IMAGE_RUN = re.compile(r"----\S+\.\w{2,5}----")
_LINK_RUN = re.compile(r'<a href="([^"]*)">(.*)</a>', re.S)
_SYMBOL = re.compile(r"<span style=font-family:[^>]*>&#x0?([0-9A-Fa-f]+);</span>")


def _par_text(par: Any) -> str:
    """A paragraph's text from docx2python's runs, its markers ("----footnote1----",
    "<latex>", "<a href>") made readable and its equations converted from the OMML."""
    maths = [_omml(m) for m in _owned(par.elem, M + "oMath")] if par.elem is not None else []
    if len(maths) != sum(1 for run in par.runs if _MATH_RUN.fullmatch(run.text)):
        maths = []  # cannot pair them up: fall back on docx2python's text
    equations, out = iter(maths), []
    for run in par.runs:
        text = _SYMBOL.sub(lambda m: _symbol(m.group(1)), run.text)
        if match := _MATH_RUN.fullmatch(text):
            text = f"[math: {next(equations, match.group(1))}]"
        elif match := _NOTE_RUN.fullmatch(text):
            text = f"[{match.group(1)}note {match.group(2)}]"
        elif match := _ALT_RUN.fullmatch(text):
            text = f"[image: {_flat(match.group(1))}]"
        elif _IMAGE_RUN.fullmatch(text):
            text = ""
        elif match := _LINK_RUN.fullmatch(text):
            url, text = match.groups()
            text += f" ({url})" if url.startswith(("http", "mailto:")) and url not in text else ""
        out.append(text)
    return "".join(out)


def _symbol(code: str) -> str:
    """A `w:sym` char; Symbol/Wingdings glyphs sit in the private-use area and mean nothing."""
    point = int(code, 16)
    char = chr(point) if point <= 0x10FFFF else "\ue000"  # past U+10FFFF: no char at all
    return "" if unicodedata.category(char) in ("Co", "Cs") else char


_NOTE_START = re.compile(r"(foot|end)note(-?\d+)\)\t")


def _docx_notes(tables: list) -> dict[str, list[str]]:
    """Footnotes or endnotes by key ("footnote 1"); docx2python opens each with "footnote1)\\t"
    (separators have no such start and are skipped)."""
    notes: dict[str, list[str]] = {}
    key = ""
    for par in _pars(tables):
        text = _par_text(par)
        if match := _NOTE_START.match(text):
            key, text = f"{match.group(1)}note {match.group(2)}", text[match.end() :]
        if key:
            notes.setdefault(key, []).extend(_marked(key, [text]))
    return notes


def _docx_comments(comments: list) -> dict[str, list[str]]:
    """Comments by key ("comment 0"), a line per paragraph, naming the author."""
    found = {}
    for comment in comments:
        author = comment.get(W + "author") or ""
        texts = ["".join(t.text or "" for t in p.iter(W + "t")) for p in comment.iter(W + "p")]
        lines = _marked("comment", [f"{author}: {t}" if author else t for t in texts if t.strip()])
        found[f"comment {comment.get(W + 'id')}"] = lines
    return found


# ----------------------------------------------------------------------------- OMML -> LaTeX

_NARY = {"∑": r"\sum", "∏": r"\prod", "∫": r"\int", "∬": r"\iint", "∭": r"\iiint",
         "∮": r"\oint", "⋃": r"\bigcup", "⋂": r"\bigcap"}
_ACCENTS = {"\u0300": "grave", "\u0301": "acute", "\u0303": "tilde", "\u0304": "bar",
            "\u0305": "bar", "\u0307": "dot", "\u0308": "ddot", "\u20d7": "vec"}
_FUNCTIONS = {"sin", "cos", "tan", "cot", "sec", "csc", "sinh", "cosh", "tanh", "arcsin",
              "arccos", "arctan", "log", "ln", "exp", "lim", "max", "min", "sup", "inf", "det"}
_SYMBOLS = {"≤": r"\le ", "≥": r"\ge ", "≠": r"\ne ", "±": r"\pm ", "×": r"\times ",
            "÷": r"\div ", "⋅": r"\cdot ", "→": r"\to ", "∞": r"\infty ", "∈": r"\in ",
            "∂": r"\partial ", "∇": r"\nabla ", "≈": r"\approx ", "…": r"\ldots ",
            "\u2061": "", "\u2062": "", "\u2063": ""}  # the last three: invisible operators
_FENCES = {"{": r"\{", "}": r"\}", "⟨": r"\langle ", "⟩": r"\rangle ", "‖": r"\|"}
_GREEK_CAPITALS = {"Gamma", "Delta", "Theta", "Lambda", "Xi", "Pi", "Sigma", "Phi", "Psi",
                   "Omega"}


def _omml(node: Any) -> str:
    """An `m:oMath` as LaTeX. docx2python's own "<latex>" is only the equation's text run
    together ("x=-b±b2-4ac2a" for the quadratic formula), which no reader can parse back."""
    return " ".join(_tex(node).split())


def _tex_char(char: str) -> str:
    """Operators and Greek letters as LaTeX commands; anything else stays itself."""
    name = unicodedata.name(char, "").replace("LAMDA", "LAMBDA")
    if name.startswith("GREEK SMALL LETTER ") and " " not in name[19:]:
        return "\\" + name[19:].lower() + " "
    if name.startswith("GREEK CAPITAL LETTER ") and name[21:].capitalize() in _GREEK_CAPITALS:
        return "\\" + name[21:].capitalize() + " "
    return _SYMBOLS.get(char, char)


def _val(node: Any, prop: str, default: str) -> str:
    """`m:val` of a property in `node`'s `m:*Pr` (e.g. m:fPr/m:type), `default` if absent."""
    found = node.find(f"{M}{node.tag[len(M):]}Pr/{M}{prop}")
    return default if found is None else found.get(M + "val", "")


def _tex(node: Any) -> str:
    """One OMML element as LaTeX: a branch per construct, the rest by concatenation."""
    tag = node.tag[len(M) :] if node.tag.startswith(M) else node.tag
    part = {child.tag[len(M) :]: child for child in node if child.tag.startswith(M)}
    done: dict[str, str] = {}  # each part converted once: nesting must not cost 2^depth

    def sub(name: str, wrap: str = "{}") -> str:
        if name not in done:
            done[name] = _tex(part[name]) if name in part else ""
        text = done[name]
        return wrap[0] + text + wrap[1] if text and wrap else text

    if tag in ("r", W + "r"):
        text = "".join(t.text or "" for t in node if t.tag in (M + "t", W + "t"))
        return "".join(_tex_char(c) for c in unicodedata.normalize("NFKC", text))
    if tag == "f":
        kind = _val(node, "type", "bar")
        if kind == "lin":
            return f"{sub('num', '')}/{sub('den', '')}"
        return ("\\binom" if kind == "noBar" else "\\frac") + sub("num") + sub("den")
    if tag in ("sSup", "sSub", "sSubSup", "sPre"):
        base = sub("e", "" if len(sub("e", "")) <= 1 else "{}")
        scripts = "".join(mark + sub(name) for mark, name in (("_", "sub"), ("^", "sup"))
                          if sub(name))
        return "{}" + scripts + base if tag == "sPre" else base + scripts
    if tag == "rad":
        return "\\sqrt" + sub("deg", "[]") + "{" + sub("e", "") + "}"
    if tag == "nary":
        char = _val(node, "chr", "∫")
        op = _NARY.get(char, char) + (f"_{sub('sub')}" if sub("sub") else "")
        return op + (f"^{sub('sup')}" if sub("sup") else "") + "{" + sub("e", "") + "}"
    if tag == "d":
        inner = _val(node, "sepChr", "|").join(_tex(e) for e in node if e.tag == M + "e")
        begin, end = _val(node, "begChr", "("), _val(node, "endChr", ")")
        return _FENCES.get(begin, begin) + inner + _FENCES.get(end, end)
    if tag in ("func", "limLow", "limUpp"):
        name = sub("fName" if tag == "func" else "e", "")
        name = "\\" + name if name in _FUNCTIONS else name
        if tag == "func":
            return name + "{" + sub("e", "") + "}"
        return name + ("_" if tag == "limLow" else "^") + "{" + sub("lim", "") + "}"
    if tag in ("acc", "bar", "groupChr"):
        command = {"acc": _ACCENTS.get(_val(node, "chr", "\u0302"), "hat"),
                   "bar": "overline" if _val(node, "pos", "bot") == "top" else "underline",
                   "groupChr": "overbrace" if _val(node, "chr", "⏟") == "⏞" else "underbrace"}
        return "\\" + command[tag] + "{" + sub("e", "") + "}"
    if tag in ("eqArr", "m"):
        rows = [_tex(r) for r in node if r.tag == M + "e"] if tag == "eqArr" else [
            " & ".join(_tex(e) for e in r if e.tag == M + "e") for r in node if r.tag == M + "mr"]
        env = "aligned" if tag == "eqArr" else "matrix"
        return f"\\begin{{{env}}}" + " \\\\ ".join(rows) + f"\\end{{{env}}}"
    if tag.endswith("Pr"):
        return ""
    return "".join(_tex(child) for child in node)  # oMath, e, num, den, box, ...


# ----------------------------------------------------------------------------- XLSX


def extract_xlsx(path: Path) -> Extracted:
    """An Excel workbook: a page per sheet, a line per row (line N = row N-1)."""
    return _extract(path, "Excel", _xlsx_pages, "openpyxl", lambda i, line: i == 0)


def _xlsx_pages(path: Path) -> list[list[str]]:
    import openpyxl

    workbook = openpyxl.load_workbook(path, read_only=True, data_only=True, keep_links=False)
    try:
        return [_sheet_lines(workbook[name]) for name in workbook.sheetnames]
    finally:
        workbook.close()  # read-only mode keeps the zip open (and locked, on Windows)


def _sheet_lines(sheet: Any) -> list[str]:
    """"[sheet] NAME", then a line per spreadsheet row from row 1 on."""
    title = f"[{'hidden ' if sheet.sheet_state != 'visible' else ''}sheet] {sheet.title}"
    if not hasattr(sheet, "iter_rows"):  # a chart sheet: its name is all the text it has
        return [title]
    sheet.reset_dimensions()  # the stored dimension can be wrong: read every row there is
    rows = []  # rows[i] is row i + 1: openpyxl yields an empty row for each missing one
    for values in sheet.iter_rows(min_row=1, min_col=1, values_only=True):
        cells = [_cell_text(v) for v in values]
        while cells and not cells[-1]:
            cells.pop()
        rows.append(cells)
    skip = min((next(i for i, cell in enumerate(r) if cell) for r in rows if r), default=0)
    return [title, *(_row(cells[skip:]) for cells in rows)]


def _cell_text(value: Any) -> str:
    """A cell value as Excel's General format shows it, dates in ISO 8601."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, datetime):
        return value.date().isoformat() if value.time() == time() else value.isoformat()
    if isinstance(value, (date, time)):
        return value.isoformat()
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return _flat(str(value))


# ----------------------------------------------------------------------------- PPTX

HIDDEN_SLIDE = "[hidden slide]"


def extract_pptx(path: Path) -> Extracted:
    """A PowerPoint deck: a page per slide, title first, shapes in reading order, notes last."""
    return _extract(path, "PowerPoint", _pptx_pages, "python-pptx",
                    lambda i, line: line == HIDDEN_SLIDE)


def _pptx_pages(path: Path) -> list[list[str]]:
    from pptx import Presentation

    return [_slide_lines(slide) for slide in Presentation(str(path)).slides]


def _slide_lines(slide: Any) -> list[str]:
    lines = [HIDDEN_SLIDE] if slide.element.get("show") in ("0", "false") else []
    title = slide.shapes.title
    lines += _frame_lines(title.text_frame) if title is not None else []
    others = [s for s in slide.shapes if title is None or s.shape_id != title.shape_id]
    for shape in sorted(others, key=_position):
        lines += _shape_lines(shape)
    if slide.has_notes_slide and slide.notes_slide.notes_text_frame is not None:
        lines += _marked("notes", [slide.notes_slide.notes_text_frame.text])
    return lines


def _position(shape: Any) -> tuple[int, int]:
    """Top, then left: reading order. A placeholder that inherits no position sorts first."""
    return shape.top or 0, shape.left or 0


def _frame_lines(frame: Any) -> list[str]:
    """A text frame's non-empty lines: a paragraph, or a piece of one at a line break."""
    return [line for p in frame.paragraphs for line in _lines(p.text) if line.strip()]


def _shape_lines(shape: Any) -> list[str]:
    from pptx.shapes.group import GroupShape

    if isinstance(shape, GroupShape):
        return [line for s in sorted(shape.shapes, key=_position) for line in _shape_lines(s)]
    if shape.has_table:
        return [_row(["" if c.is_spanned else _flat(c.text) for c in row.cells])
                for row in shape.table.rows]
    if shape.has_chart:
        return _chart_lines(shape.chart)
    return _frame_lines(shape.text_frame) if shape.has_text_frame else []


def _chart_lines(chart: Any) -> list[str]:
    """A chart's title, categories and series: the numbers behind the bars. python-pptx
    reads only some chart types (pptx_chart.pptx: "unsupported plot type"); what it cannot
    read is left out rather than losing the whole deck."""
    lines = _marked("chart", _frame_lines(chart.chart_title.text_frame)) if chart.has_title else []
    try:
        for plot in chart.plots:
            lines.append(_row(["[chart]", *(_flat(str(c)) for c in plot.categories)]))
            lines += [_row([f"[chart] {_flat(str(s.name))}", *map(_cell_text, s.values)])
                      for s in plot.series]
    except (ValueError, KeyError, NotImplementedError):
        pass
    return lines
