"""PDF: the text layer of each page, read by the best of three backends, OCR for the rest.

Backends in the order measured best on ../shared/corpus/pdf (docs/formats.md): pypdfium2
(fastest, keeps lines), then pdfminer.six (the only one that reads unreadablemetadata.pdf and
the vertical Japanese of kampo.pdf), then pypdf. A later backend reads a whole file only when
the earlier ones raise, and single pages only when a page came out as junk or lost its text.
pdfium is not thread-safe, and the server extracts in threads (two `ingest_file` calls on
different KBs): extract_pdf, OCR rendering included, holds PDFIUM_LOCK, so one PDF at a time
per process.

Layer: reader (formats/), above formats/ocr.py and adapters/pdfminer_layout.py.
"""

from __future__ import annotations

import re
import threading
import time
import unicodedata
from collections.abc import Callable
from pathlib import Path

import pypdfium2 as pdfium
import pypdfium2.raw as raw

from formats.base import Extracted, ExtractError, check_text_size, clean_lines, page_steps

# -----------------------------------------------------------------------------
GARBAGE_SHARE = 0.3  # a page whose visible chars are more than this share of junk is garbage
LOST_TEXT_SHARE = 0.5  # pdfium lost a page's text if it has fewer chars than this x text objects
FALLBACK_SECONDS_PER_PAGE = 10.0  # pdfminer/pypdf give up when slower than this on average
# -----------------------------------------------------------------------------
PDFIUM_LOCK = threading.Lock()  # pdfium's globals are not thread-safe (see the docstring)

_GLYPH_ESCAPE = re.compile(r"\(cid:\d+\)|/g\d+|/uni[0-9A-Fa-f]{4}")  # pdfminer's and pypdf's


def _junk_share(text: str) -> float:
    """Share of visible chars that are no text: control, private-use, U+FFFD, (cid:N), /gN."""
    visible = "".join(text.split())
    if not visible:
        return 0.0
    rest = _GLYPH_ESCAPE.sub("", visible)
    odd = sum(1 for c in rest if c == "\ufffd" or unicodedata.category(c) in ("Cc", "Co", "Cs"))
    return (len(visible) - len(rest) + odd) / len(visible)


def _good_chars(text: str) -> int:
    """Visible chars that are real text: how a fallback's page is weighed against the first."""
    return round(len("".join(text.split())) * (1.0 - _junk_share(text)))



PageTexts = dict[int, str]  # 0-based page index -> text, as a backend returns it


def _pdfium_pages(path: Path, wanted: list[int] | None) -> tuple[PageTexts, set[int]]:
    """Text of each page with pypdfium2, plus the pages whose text pdfium plainly lost.

    pdfium reads from a Python file object, since its own path handling has failed on
    non-ASCII names. Password errors are left to pdfminer to confirm: pdfium reports the
    thread's *last* error, so a 0-page PDF read after an encrypted one "needs a password" too.
    """
    texts: PageTexts = {}
    lost: set[int] = set()
    chars = 0
    with path.open("rb") as f:
        doc = pdfium.PdfDocument(f)
        try:
            for i in range(len(doc)) if wanted is None else wanted:
                page = doc[i]
                textpage = page.get_textpage()
                chars += textpage.count_chars()
                check_text_size(path, chars)  # before the text is copied out of pdfium
                texts[i] = textpage.get_text_bounded()
                if _pdfium_lost_text(page, textpage):
                    lost.add(i)
                textpage.close()
                page.close()
        finally:
            doc.close()  # also closes any page an exception left open
    return texts, lost


def _pdfium_lost_text(page: pdfium.PdfPage, textpage: pdfium.PdfTextPage) -> bool:
    """Far fewer chars than text objects: pdfium could not map the fonts (kampo.pdf: 2,624
    objects, 28 chars). Chars are counted on the whole page, not in the crop box, so printers'
    marks outside it (freeculture.pdf p. 255) do not look like lost text. Text objects are only
    counted when the cheap count of all objects already looks suspicious."""
    chars = textpage.count_chars()
    objects = raw.FPDFPage_CountObjects(page)
    if chars >= objects * LOST_TEXT_SHARE:
        return False
    kinds = (raw.FPDFPageObj_GetType(raw.FPDFPage_GetObject(page, k)) for k in range(objects))
    return chars < sum(k == raw.FPDF_PAGEOBJ_TEXT for k in kinds) * LOST_TEXT_SHARE


def _pdfminer_pages(path: Path, wanted: list[int] | None) -> tuple[PageTexts, set[int]]:
    """Text of each page with pdfminer.six: slow, but its CMaps read CJK that pdfium misses.
    Laid out by adapters/pdfminer_layout.py, whose reading order does not change from run to
    run."""
    from io import StringIO

    from pdfminer.layout import LAParams
    from pdfminer.pdfdocument import PDFDocument, PDFPasswordIncorrect
    from pdfminer.pdfinterp import PDFPageInterpreter, PDFResourceManager
    from pdfminer.pdfpage import PDFPage
    from pdfminer.pdfparser import PDFParser

    from adapters.pdfminer_layout import StableTextConverter

    start, texts, manager, chars = time.monotonic(), {}, PDFResourceManager(), 0
    with path.open("rb") as f:
        try:
            doc = PDFDocument(PDFParser(f), password="")
        except PDFPasswordIncorrect as exc:
            raise _password_error(path) from exc
        for i, page in enumerate(PDFPage.create_pages(doc)):
            if wanted is None or i in wanted:
                _give_up_if_slow("pdfminer", start, len(texts))
                out = StringIO()
                device = StableTextConverter(manager, out, laparams=LAParams())
                PDFPageInterpreter(manager, device).process_page(page)
                device.close()
                texts[i] = out.getvalue()
                chars += len(texts[i])
                check_text_size(path, chars)
    return texts, set()


def _pypdf_pages(path: Path, wanted: list[int] | None) -> tuple[PageTexts, set[int]]:
    """Text of each page with pypdf: the pure-Python backend of last resort."""
    import pypdf

    start, texts, chars = time.monotonic(), {}, 0
    reader = pypdf.PdfReader(path)
    if reader.is_encrypted and not reader.decrypt(""):
        raise _password_error(path)
    for i in range(len(reader.pages)) if wanted is None else wanted:
        _give_up_if_slow("pypdf", start, len(texts))
        texts[i] = reader.pages[i].extract_text() or ""
        chars += len(texts[i])
        check_text_size(path, chars)
    return texts, set()


Backend = Callable[[Path, list[int] | None], tuple[PageTexts, set[int]]]
PDF_BACKENDS: list[tuple[str, Backend]] = [
    ("pypdfium2", _pdfium_pages),
    ("pdfminer", _pdfminer_pages),
    ("pypdf", _pypdf_pages),
]


def _give_up_if_slow(name: str, start: float, pages_done: int) -> None:
    """No hostile file may hold ingestion for ever; a pure-Python backend can only be stopped
    between pages, so it stops once it averages over FALLBACK_SECONDS_PER_PAGE."""
    if time.monotonic() - start > FALLBACK_SECONDS_PER_PAGE * max(pages_done, 1):
        raise TimeoutError(f"{name} gave up after {pages_done} pages")


def _password_error(path: Path) -> ExtractError:
    detail = f"{path.name} needs a password to open; index an unprotected copy instead."
    return ExtractError("password-protected", detail)


_MAGIC = {b"\xff\xd8\xff": "a JPEG image", b"\x89PNG": "a PNG image", b"PK\x03\x04": "a ZIP file"}



def extract_pdf(path: Path) -> Extracted:
    """A PDF's text layer, one entry per page; pages without a usable one are OCR'd (ocr.py)."""
    with PDFIUM_LOCK:
        return _read_pdf(path)


def _read_pdf(path: Path) -> Extracted:
    with path.open("rb") as f:
        head = f.read(1024)
    if not head:
        raise ExtractError("empty", f"{path.name} is a 0-byte file; re-export or re-download it.")
    if b"%PDF-" not in head:
        kind = next((kind for magic, kind in _MAGIC.items() if head.startswith(magic)), "no PDF")
        raise ExtractError("corrupt", f"{path.name} is {kind}, not a PDF; give it its real name.")
    failures: list[str] = []
    for n, (name, backend) in enumerate(PDF_BACKENDS):
        try:
            texts, doubtful = backend(path, None)
        except ExtractError:
            raise
        except Exception as exc:  # any backend may choke on a hostile file; the next one tries
            failures.append(f"{name}: {type(exc).__name__}: {exc}"[:200])
            continue
        if not texts:
            failures.append(f"{name}: no pages")
            continue
        pages = [texts.get(i, "") for i in range(max(texts) + 1)]
        mended, unread = _mend_pages(path, pages, doubtful, PDF_BACKENDS[n + 1 :])
        used = [name, *mended]
        warnings = _ocr_pages(path, pages, unread, used)
        return Extracted([clean_lines(text) for text in pages], "+".join(used), warnings)
    if any(f.endswith(": no pages") for f in failures):  # a reader saw an empty page tree
        raise ExtractError("empty", f"{path.name} has no pages; re-export it from its source.")
    detail = f"no PDF reader could open {path.name} ({'; '.join(failures)}); re-save it."
    raise ExtractError("corrupt", detail)


def _mend_pages(
    path: Path, pages: list[str], doubtful: set[int], later: list[tuple[str, Backend]]
) -> tuple[list[str], list[int]]:
    """Ask later backends for pages that came out as junk or lost text, and keep a page only
    when it is clearly better. Patches `pages` in place; returns the backends that helped and
    the pages still junk or lost, for OCR."""
    bad = sorted(doubtful | {i for i, t in enumerate(pages) if _junk_share(t) > GARBAGE_SHARE})
    used: list[str] = []
    for name, backend in later:
        if not bad:
            break
        try:
            texts, _ = backend(path, bad)
        except Exception:  # a fallback that fails leaves the first backend's page in place
            continue
        better = {i for i, t in texts.items() if _good_chars(t) > 2 * _good_chars(pages[i]) + 10}
        for i in better:
            pages[i] = texts[i]
        used += [name] if better else []
        bad = [i for i in bad if i not in better or _junk_share(pages[i]) > GARBAGE_SHARE]
    return used, bad


def _ocr_pages(path: Path, pages: list[str], unread: list[int], used: list[str]) -> list[str]:
    """Give Tesseract the pages no backend could read (no text, or `unread`: junk or lost)
    and let ocr.py re-read scans whose own OCR layer is wrong. Patches `pages` in place, adds
    "ocr" to `used`, returns warnings ("ocr unavailable: ..." when Tesseract is missing)."""
    from formats import ocr

    unusable = sorted({*unread, *(i for i, text in enumerate(pages) if not text.split())})
    try:
        result = ocr.mend_pdf(path, pages, unusable, progress=page_steps("OCR"))
    except Exception as exc:  # OCR is a bonus: a failure in it must not lose the text layer
        return [f"ocr failed: {type(exc).__name__}: {exc}"[:300]]
    for i, text in result.texts.items():  # junk keeps its place unless OCR has more real text
        if i not in unusable or _good_chars(text) >= _good_chars(pages[i]):
            pages[i] = text
    used += ["ocr"] if result.texts else []
    return result.warnings
