"""Turn legacy binary Office files (Word, Excel, PowerPoint 97-2003: .doc, .xls, .ppt) into
pages of raw lines, without Microsoft Office.

Reads one file, writes only a temporary folder when LibreOffice converts it. The functions
keep the contract of `extract.py` (`Extracted(pages, parser)`, ExtractError only):
- .xls through xlrd, with the XLSX line rules of office.py: a page is a sheet, line 1
  "[sheet] NAME", line N spreadsheet row N-1, cells joined by " | ", dates in ISO 8601.
- .doc from the OLE container (olefile): the FIB names the piece table (CLX/PlcPcd) in the
  table stream, whose pieces are 8-bit cp1252 ("compressed") or UTF-16 text, so Korean and
  Chinese come out as written. A page is the text between page breaks (a page break or a
  new-page section break: both are U+000C in the text); a line is a paragraph or a soft line
  break; a table row is one line with " | " between cells (a cell of several paragraphs
  spans lines). Field codes are dropped, their shown result kept. Footnotes and endnotes
  follow on the last page as "[footnote] ..." lines. Headers are not read.
- .ppt from the OLE container: the persist directory leads to each slide's container; a page
  is a slide in show order, its title first, then the text of its shapes top-to-bottom and
  left-to-right (TextCharsAtom UTF-16, TextBytesAtom 8-bit, placeholder text through
  OutlineTextRefAtom), then "[notes] ..." lines.
A Word 6/95 file, or any file that defeats these readers, is converted by LibreOffice
(`soffice --headless --convert-to docx|xlsx|pptx` in a temporary folder with its own profile,
never the user's) and read by office.py (parser "soffice+docx2python" ...); without LibreOffice
it ends `converter-unavailable`, naming what to install. Encrypted files end
`password-protected`. A .docx/.xlsx/.pptx saved under a legacy name is read as what it is.

Layer: reader (formats/), above formats/office.py, below extract.py.
"""

from __future__ import annotations

import io
import os
import re
import shutil
import struct
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from formats import office
from formats.base import Extracted, ExtractError

# -----------------------------------------------------------------------------
SOFFICE_SECONDS = 180  # a LibreOffice conversion slower than this is given up (and killed)
SOFFICE_ENV = "LINECITE_SOFFICE"  # path to soffice(.exe) when it is not on PATH
MAX_DEPTH = 32  # record nesting a .ppt may have; real files stay under 10
WORD97_NFIB = 0xC1  # the FIB version of Word 97; older (Word 6/95) files go to LibreOffice
PPT_ENCRYPTED = 0xF3D1C4DF  # CurrentUserAtom.headerToken of an encrypted deck
# -----------------------------------------------------------------------------

ZIP_MAGIC = b"PK\x03\x04"
OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"


class _Unreadable(Exception):
    """A structure our own reader does not handle: LibreOffice gets a try."""


# ----------------------------------------------------------------------------- shared


def _legacy(path: Path, kind: str, target: str, read: Callable[[Path], list[list[str]]],
            parser: str, modern: Callable[[Path], Extracted]) -> Extracted:
    """Pages from `read`, or from LibreOffice's conversion to `target` when `read` fails."""
    path = Path(path)
    with path.open("rb") as f:
        head = f.read(len(OLE_MAGIC))
    if not head:
        raise ExtractError("empty", f"{path.name} is a 0-byte file; re-save or re-download it.")
    if head.startswith(ZIP_MAGIC):  # a .docx/.xlsx/.pptx under its old name
        return modern(path)
    if head != OLE_MAGIC:
        raise ExtractError("corrupt", f"{path.name} is not a {kind} 97-2003 file (no OLE "
                                      "container); give it its real extension.")
    try:
        pages = read(path)
    except ExtractError:
        raise
    except OSError as exc:
        if exc.errno is not None:  # locked, vanished: extract() maps it
            raise
        return _converted(path, kind, target, modern, exc)
    except Exception as exc:  # olefile, struct, xlrd, _Unreadable: a file beyond our reader
        return _converted(path, kind, target, modern, exc)
    pages = [[line for text in page for line in office._lines(text)] for page in pages]
    for page in pages:
        while page and not page[-1]:
            page.pop()
    while len(pages) > 1 and not pages[-1]:
        pages.pop()
    if not any(line.strip() and not line.startswith("[sheet] ") for p in pages for line in p):
        raise ExtractError("empty", f"{path.name} has no text; there is nothing to index.")
    return Extracted(pages, parser)


def _open_ole(path: Path) -> Any:
    import olefile

    ole = olefile.OleFileIO(str(path))
    if ole.exists("EncryptedPackage") or ole.exists("EncryptedSummary"):
        ole.close()
        raise _locked(path)
    return ole


def _locked(path: Path) -> ExtractError:
    return ExtractError("password-protected", f"{path.name} needs a password to open; index "
                                              "an unprotected copy instead.")


def find_soffice() -> str | None:
    """LibreOffice's soffice: LINECITE_SOFFICE, PATH, then where Windows installs it."""
    configured = os.environ.get(SOFFICE_ENV, "").strip()
    if configured and Path(configured).is_file():
        return configured
    for name in ("soffice", "libreoffice"):
        if found := shutil.which(name):
            return found
    for root in (os.environ.get("ProgramFiles"), os.environ.get("ProgramFiles(x86)")):
        candidate = Path(root or "/nonexistent") / "LibreOffice" / "program" / "soffice.exe"
        if candidate.is_file():
            return str(candidate)
    return None


def _converted(path: Path, kind: str, target: str, modern: Callable[[Path], Extracted],
               why: Exception) -> Extracted:
    """Have LibreOffice convert the file to `target` and read that with office.py."""
    reason = f"{type(why).__name__}: {why}"[:200]
    soffice = find_soffice()
    if soffice is None:
        raise ExtractError("converter-unavailable", f"{path.name} is a {kind} file linecite's "
                           f"own reader cannot read ({reason}); install LibreOffice (Windows: "
                           "winget install TheDocumentFoundation.LibreOffice; Debian: apt-get "
                           f"install libreoffice-writer-nogui libreoffice-calc-nogui "
                           f"libreoffice-impress-nogui) or save it as {target} yourself.")
    # ignore_cleanup_errors: on Windows a soffice.bin that outlives its conversion for a moment
    # holds a file here, and a failed delete must not turn a good conversion into an error
    with tempfile.TemporaryDirectory(prefix="linecite-soffice-",
                                     ignore_cleanup_errors=True) as tmp:
        folder = Path(tmp)
        source = folder / f"in{path.suffix.lower()}"  # a plain name: no quoting trouble
        shutil.copyfile(path, source)
        command = [soffice, "--headless", "--norestore", "--nolockcheck",
                   f"-env:UserInstallation={(folder / 'profile').as_uri()}",
                   "--convert-to", target.lstrip("."), "--outdir", str(folder / "out"),
                   str(source)]
        _run_bounded(command, path)
        result = folder / "out" / f"in{target}"
        if not result.is_file():
            raise ExtractError("corrupt", f"{path.name} could not be read ({reason}) and "
                                          "LibreOffice could not convert it; open and re-save it.")
        try:
            extracted = modern(result)
        except ExtractError as exc:
            raise ExtractError(exc.reason, exc.detail.replace(result.name, path.name)) from exc
    extracted.parser = f"soffice+{extracted.parser}"
    return extracted


def _run_bounded(command: list[str], path: Path) -> None:
    """Run soffice with a deadline; on timeout kill it and every process it started
    (soffice starts soffice.bin, which subprocess.run's own kill would leave running)."""
    import psutil

    with subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL) as proc:
        try:
            proc.wait(timeout=SOFFICE_SECONDS)
        except subprocess.TimeoutExpired:
            try:
                family = [*psutil.Process(proc.pid).children(recursive=True)]
            except psutil.NoSuchProcess:
                family = []
            for child in family:
                child.kill()
            proc.kill()
            raise ExtractError("corrupt", f"LibreOffice took over {SOFFICE_SECONDS} s to "
                                          f"convert {path.name}; open and re-save it.") from None


# ----------------------------------------------------------------------------- XLS


def extract_xls(path: Path) -> Extracted:
    """An Excel 97-2003 workbook: a page per sheet, line N = row N-1 (as XLSX)."""
    return _legacy(path, "Excel", ".xlsx", _xls_pages, "xlrd", office.extract_xlsx)


def _xls_pages(path: Path) -> list[list[str]]:
    import xlrd

    try:  # xlrd logs to stdout by default: the server's stdout is protocol only
        book = xlrd.open_workbook(str(path), on_demand=True, logfile=io.StringIO())
    except xlrd.XLRDError as exc:
        if "encrypt" in str(exc).lower():
            raise _locked(path) from exc
        raise
    try:
        return [_xls_sheet(book, book.sheet_by_index(i)) for i in range(book.nsheets)]
    finally:
        book.release_resources()


def _xls_sheet(book: Any, sheet: Any) -> list[str]:
    title = f"[{'hidden ' if sheet.visibility else ''}sheet] {sheet.name}"
    rows = []
    for r in range(sheet.nrows):
        cells = [_xls_value(book, cell) for cell in sheet.row(r)]
        while cells and not cells[-1]:
            cells.pop()
        rows.append(cells)
    skip = min((next(i for i, cell in enumerate(r) if cell) for r in rows if r), default=0)
    return [title, *(office._row(cells[skip:]) for cells in rows)]


def _xls_value(book: Any, cell: Any) -> str:
    """A cell as Excel's General format shows it: dates ISO 8601, booleans TRUE/FALSE."""
    import xlrd

    value = cell.value
    if cell.ctype == xlrd.XL_CELL_DATE:
        try:
            value = xlrd.xldate.xldate_as_datetime(value, book.datemode)
        except (xlrd.xldate.XLDateError, OverflowError, ValueError):
            pass  # a date before 1900 or past 9999: the serial number is all there is
    elif cell.ctype == xlrd.XL_CELL_BOOLEAN:
        value = bool(value)
    elif cell.ctype == xlrd.XL_CELL_ERROR:
        value = xlrd.error_text_from_code.get(value, "#ERR")
    return office._cell_text(None if cell.ctype == xlrd.XL_CELL_EMPTY else value)


# ----------------------------------------------------------------------------- DOC


def extract_doc(path: Path) -> Extracted:
    """A Word 97-2003 document: pages at page and new-page section breaks."""
    return _legacy(path, "Word", ".docx", _doc_pages, "olefile:doc", office.extract_docx)


def _doc_pages(path: Path) -> list[list[str]]:
    ole = _open_ole(path)
    try:
        word = ole.openstream("WordDocument").read()
        ident, nfib = struct.unpack_from("<HH", word, 0)
        flags = struct.unpack_from("<H", word, 0x0A)[0]
        if ident != 0xA5EC or nfib < WORD97_NFIB:
            raise _Unreadable(f"not a Word 97+ FIB (wIdent {ident:#x}, nFib {nfib:#x})")
        if flags & 0x0100:  # fEncrypted (obfuscated files set it too)
            raise _locked(path)
        table_name = "1Table" if flags & 0x0200 else "0Table"
        table = ole.openstream(table_name).read()
    finally:
        ole.close()
    counts, fc_clx, lcb_clx = _fib_counts(word)
    text = _piece_text(word, table[fc_clx : fc_clx + lcb_clx])
    body_end = counts[0]
    notes = [(counts[0], counts[1]), (sum(counts[:5]), counts[5])]  # footnotes, endnotes
    pages = [_doc_lines(page) for page in _doc_visible(text[:body_end]).split("\x0c")]
    for start, length in notes:
        part = _doc_visible(text[start : start + length])
        pages[-1] += [f"[footnote] {line.strip()}" for line in re.split(r"[\r\x0b\x0c]", part)
                      if line.strip()]
    return pages


def _fib_counts(word: bytes) -> tuple[list[int], int, int]:
    """From the FIB: character counts of the main text, footnotes, headers, macros (unused),
    comments and endnotes, and where the CLX (piece table) lies in the table stream."""
    csw = struct.unpack_from("<H", word, 32)[0]
    lw_at = 32 + 2 + 2 * csw + 2  # FibRgLw97 follows FibBase, csw, FibRgW97 and cslw
    cslw = struct.unpack_from("<H", word, lw_at - 2)[0]
    ccp = list(struct.unpack_from("<6i", word, lw_at + 12))  # ccpText, Ftn, Hdd, Mcr, Atn, Edn
    fc_at = lw_at + 4 * cslw + 2  # FibRgFcLcb97, after cbRgFcLcb
    fc_clx, lcb_clx = struct.unpack_from("<II", word, fc_at + 33 * 8)
    if lcb_clx == 0 or any(n < 0 for n in ccp):
        raise _Unreadable("the FIB names no piece table")
    return ccp, fc_clx, lcb_clx


def _piece_text(word: bytes, clx: bytes) -> str:
    """All the document's text from the piece table: each piece is 8-bit cp1252 or UTF-16."""
    pos = 0
    while pos < len(clx) and clx[pos] == 0x01:  # Prc: formatting we do not need
        pos += 3 + struct.unpack_from("<h", clx, pos + 1)[0]
    if pos >= len(clx) or clx[pos] != 0x02:
        raise _Unreadable("no Pcdt in the CLX")
    size = struct.unpack_from("<I", clx, pos + 1)[0]
    plc = clx[pos + 5 : pos + 5 + size]
    count = (len(plc) - 4) // 12
    cps = struct.unpack_from(f"<{count + 1}I", plc, 0)
    parts = []
    for i in range(count):
        fc = struct.unpack_from("<I", plc, 4 * (count + 1) + 8 * i + 2)[0]
        chars = max(0, cps[i + 1] - cps[i])
        if fc & 0x40000000:  # fCompressed: one byte a char at fc/2
            start = (fc & 0x3FFFFFFF) // 2
            parts.append(word[start : start + chars].decode("cp1252", "replace"))
        else:
            parts.append(word[fc : fc + 2 * chars].decode("utf-16-le", "replace"))
    return "".join(parts)


_FIELD_MARK = re.compile("([\x13\x14\x15])")


def _doc_visible(text: str) -> str:
    """The text a reader sees: a field shows its result (between U+0014 and U+0015), never its
    code (between U+0013 and U+0014); special chars become what they print as."""
    if "\x13" in text:
        shown, codes = [], []  # codes: per open field, whether we are still in its code
        for piece in _FIELD_MARK.split(text):
            if piece == "\x13":
                codes.append(True)
            elif piece == "\x14" and codes:
                codes[-1] = False
            elif piece == "\x15" and codes:
                codes.pop()
            elif not any(codes):
                shown.append(piece)
        text = "".join(shown)
    return text.replace("\x1e", "-").replace("\x1f", "").replace("\xa0", " ")


def _doc_lines(page: str) -> list[str]:
    """A page's paragraphs and soft breaks as lines. A row's cells end in U+0007 and the row
    itself in one more, so "a\\x07b\\x07\\x07" is the row "a | b"."""
    page = page.replace("\x07\x07", "\r").replace("\x07", office.SEP)
    return [line.rstrip() for line in re.split(r"[\r\x0b]", page)]


# ----------------------------------------------------------------------------- PPT

RT_DOCUMENT, RT_SLIDE, RT_SLIDE_ATOM, RT_NOTES = 0x03E8, 0x03EE, 0x03EF, 0x03F0
RT_SLIDE_PERSIST, RT_SLIDE_LIST, RT_USER_EDIT, RT_PERSIST_DIR = 0x03F3, 0x0FF0, 0x0FF5, 0x1772
RT_TEXT_HEADER, RT_TEXT_CHARS, RT_TEXT_BYTES, RT_TEXT_REF = 0x0F9F, 0x0FA0, 0x0FA8, 0x0F9E
RT_SHAPE, RT_ANCHOR, RT_CHILD_ANCHOR = 0xF004, 0xF010, 0xF00F
TITLE_TYPES = (0, 6)  # TextHeaderAtom: title, centred title
Text = tuple[int, str]  # (TextHeaderAtom type, text)


def extract_ppt(path: Path) -> Extracted:
    """A PowerPoint 97-2003 deck: a page per slide, title first, notes last."""
    return _legacy(path, "PowerPoint", ".pptx", _ppt_pages, "olefile:ppt", office.extract_pptx)


def _records(data: bytes, start: int, end: int) -> Iterator[tuple[int, int, int, int, int]]:
    """(type, instance, version, body start, body end) of the records in data[start:end]."""
    pos = start
    while pos + 8 <= end:
        ver_inst, kind, length = struct.unpack_from("<HHI", data, pos)
        yield kind, ver_inst >> 4, ver_inst & 0xF, pos + 8, min(pos + 8 + length, end)
        pos += 8 + length


def _record_at(data: bytes, offset: int, kind: int) -> tuple[int, int]:
    """Body start and end of the record of type `kind` at `offset`."""
    for found, _, _, start, end in _records(data, offset, len(data)):
        if found != kind:
            raise _Unreadable(f"expected record {kind:#x} at {offset}, found {found:#x}")
        return start, end
    raise _Unreadable(f"no record at offset {offset}")


def _ppt_pages(path: Path) -> list[list[str]]:
    ole = _open_ole(path)
    try:
        user = ole.openstream("Current User").read()
        data = ole.openstream("PowerPoint Document").read()
    finally:
        ole.close()
    token, edit_offset = struct.unpack_from("<II", user, 12)
    if token == PPT_ENCRYPTED:
        raise _locked(path)
    persist, doc_ref = _persist_directory(data, edit_offset)
    doc_start, doc_end = _record_at(data, persist[doc_ref], RT_DOCUMENT)
    lists: dict[int, list[tuple[int, list[Text]]]] = {0: [], 2: []}  # slides, notes
    for kind, instance, _, start, end in _records(data, doc_start, doc_end):
        if kind == RT_SLIDE_LIST and instance in lists:
            lists[instance] = _slide_list(data, start, end)
    notes = dict(lists[2])
    pages = []
    for ref, texts in lists[0]:
        start, end = _record_at(data, persist[ref], RT_SLIDE)
        lines, notes_ref = _slide_text(data, start, end, texts)
        if notes_ref in persist and notes_ref:
            n_start, n_end = _record_at(data, persist[notes_ref], RT_NOTES)
            note_lines, _ = _slide_text(data, n_start, n_end, notes.get(notes_ref, []))
            lines += office._marked("notes", note_lines)
        pages.append(lines)
    return pages


def _persist_directory(data: bytes, offset: int) -> tuple[dict[int, int], int]:
    """persist id -> stream offset, newest edit first, and the document's persist id."""
    persist: dict[int, int] = {}
    doc_ref, seen = None, set()
    while offset and offset not in seen:
        seen.add(offset)
        start, _ = _record_at(data, offset, RT_USER_EDIT)
        last_edit, dir_offset, ref = struct.unpack_from("<III", data, start + 8)
        doc_ref = ref if doc_ref is None else doc_ref
        d_start, d_end = _record_at(data, dir_offset, RT_PERSIST_DIR)
        pos = d_start
        while pos + 4 <= d_end:
            head = struct.unpack_from("<I", data, pos)[0]
            first, count = head & 0xFFFFF, head >> 20
            offsets = struct.unpack_from(f"<{count}I", data, pos + 4)
            for i, where in enumerate(offsets):
                persist.setdefault(first + i, where)
            pos += 4 + 4 * count
        offset = last_edit
    if doc_ref is None or doc_ref not in persist:
        raise _Unreadable("no document in the persist directory")
    return persist, doc_ref


def _slide_list(data: bytes, start: int, end: int) -> list[tuple[int, list[Text]]]:
    """SlideListWithText: per slide (persist id), the placeholder texts stored with it."""
    slides: list[tuple[int, list[Text]]] = []
    text_type = 4
    for kind, _, _, body, stop in _records(data, start, end):
        if kind == RT_SLIDE_PERSIST:
            slides.append((struct.unpack_from("<I", data, body)[0], []))
        elif kind == RT_TEXT_HEADER:
            text_type = struct.unpack_from("<I", data, body)[0]
        elif kind in (RT_TEXT_CHARS, RT_TEXT_BYTES) and slides:
            slides[-1][1].append((text_type, _atom_text(data, kind, body, stop)))
    return slides


def _atom_text(data: bytes, kind: int, start: int, end: int) -> str:
    """TextCharsAtom is UTF-16; TextBytesAtom holds the low bytes of UTF-16 chars (Latin-1)."""
    raw = data[start:end]
    text = raw.decode("utf-16-le", "replace") if kind == RT_TEXT_CHARS else raw.decode("latin-1")
    return text.replace("\r", "\n").replace("\x0b", "\n")


def _slide_text(data: bytes, start: int, end: int, listed: list[Text]) -> tuple[list[str], int]:
    """A slide's (or notes page's) lines, title first then shapes in reading order, and the
    persist id of its notes (0 when none)."""
    shapes: list[tuple[bool, int, int, str]] = []  # (not title, top, left, text)
    used: set[int] = set()
    notes_ref = 0

    def walk(begin: int, stop: int, depth: int) -> None:
        nonlocal notes_ref
        if depth > MAX_DEPTH:
            raise _Unreadable("records nested too deep")
        for kind, _, version, body, finish in _records(data, begin, stop):
            if kind == RT_SLIDE_ATOM and finish - body >= 20:
                notes_ref = struct.unpack_from("<I", data, body + 16)[0]
            elif kind == RT_SHAPE:
                shapes.extend(_shape_texts(data, body, finish, listed, used))
            elif version == 0xF:
                walk(body, finish, depth + 1)

    walk(start, end, 0)
    unplaced = [(t not in TITLE_TYPES, 0, 0, text) for i, (t, text) in enumerate(listed)
                if i not in used]
    ordered = sorted(unplaced + shapes, key=lambda s: s[:3])
    return [line for *_, text in ordered for line in office._lines(text) if line.strip()], notes_ref


def _shape_texts(data: bytes, start: int, end: int, listed: list[Text],
                 used: set[int]) -> list[tuple[bool, int, int, str]]:
    """The text of one shape (its own atoms, or the slide list's through a reference), with
    its position from the client anchor."""
    top = left = 0
    texts: list[Text] = []
    text_type = 4
    stack = [(start, end)]
    while stack:  # a shape's records: anchor, client textbox (a container) and the rest
        begin, stop = stack.pop()
        for kind, _, version, body, finish in _records(data, begin, stop):
            if kind in (RT_ANCHOR, RT_CHILD_ANCHOR):
                size = finish - body
                if size >= 16:
                    top, left = struct.unpack_from("<ii", data, body)
                    if kind == RT_CHILD_ANCHOR:  # RECT: left, top
                        left, top = top, left
                elif size >= 8:
                    top, left = struct.unpack_from("<hh", data, body)
            elif kind == RT_TEXT_HEADER:
                text_type = struct.unpack_from("<I", data, body)[0]
            elif kind in (RT_TEXT_CHARS, RT_TEXT_BYTES):
                texts.append((text_type, _atom_text(data, kind, body, finish)))
            elif kind == RT_TEXT_REF:
                index = struct.unpack_from("<i", data, body)[0]
                if 0 <= index < len(listed):
                    used.add(index)
                    texts.append(listed[index])
            elif version == 0xF and kind != RT_SHAPE:
                stack.append((body, finish))
    return [(t not in TITLE_TYPES, top, left, text) for t, text in texts]
