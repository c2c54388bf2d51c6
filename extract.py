"""Turn one document into pages of raw lines: the unit every citation points at.

Layer: the pipeline's first stage (file -> lines), above the format readers in formats/.
Reads one file (PDF, TXT/MD in any common encoding, and through the readers it registers:
DOCX/XLSX/PPTX, HWPX/HWP, OFD, images, audio); writes only the OCR and transcript caches
(formats/ocr.py, formats/audio.py). `extract(path)` returns `Extracted(pages, parser)`: each
page is a list of lines, and a line number is the 1-based index into that page's text split
on "\\n".
`ingest.py` stores these lines as they are and `read_range` serves them back, so the
numbering made here is the numbering everywhere.
A file that cannot be read raises `ExtractError(reason, detail)`, never anything else.
Speed: `python -m bench speed extract`.

PDF backends, in the order measured best on ../shared/corpus/pdf (figures in the README):
pypdfium2 (fastest, keeps lines), then pdfminer.six (the only one that reads
unreadablemetadata.pdf and the vertical Japanese of kampo.pdf), then pypdf. A later backend
reads a whole file only when the earlier ones raise, and single pages only when a page came
out as junk or lost its text. pdfium is not thread-safe, and the server extracts in threads
(two `ingest_file` calls on different KBs): PDF extraction, OCR rendering included, holds
PDFIUM_LOCK, so one PDF at a time per process.
"""

from __future__ import annotations

import math
import os
import re
import threading
import time
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pypdfium2 as pdfium
import pypdfium2.raw as raw
from charset_normalizer import from_bytes

# -----------------------------------------------------------------------------
GARBAGE_SHARE = 0.3  # a page whose visible chars are more than this share of junk is garbage
LOST_TEXT_SHARE = 0.5  # pdfium lost a page's text if it has fewer chars than this x text objects
FALLBACK_SECONDS_PER_PAGE = 10.0  # pdfminer/pypdf give up when slower than this on average
MAX_TEXT_ENV = "LINECITE_MAX_TEXT_CHARS"  # raises the cap below
MAX_TEXT_CHARS = 100_000_000  # text one file may yield (lines count 1 more each): see below
TEXT_SUFFIXES = (".txt", ".text", ".md", ".markdown")
# -----------------------------------------------------------------------------

# MAX_TEXT_CHARS: about 30,000 dense pages, far beyond any real document. It bounds what a
# small file may inflate to (a PDF's compressed streams, a zip's XML). Measured: a 20 M
# character English text file peaks at 145 MB RSS in `python ingest.py` (BM25-only KB), so
# about 0.7 GB at the cap, twice that for CJK (Python keeps 2 bytes a character for it).

REASONS = ("not-found", "unsupported-format", "password-protected", "corrupt", "empty", "binary",
           "too-large", "zip-bomb", "ocr-unavailable", "audio-unavailable",
           "converter-unavailable")


@dataclass
class Extracted:
    pages: list[list[str]]  # every page is a list of raw lines (1-based numbers index into it)
    parser: str  # e.g. "pypdfium2", "pypdfium2+pdfminer", "pypdfium2+ocr", "text:utf-8"
    warnings: list[str] = field(default_factory=list)  # e.g. "ocr unavailable: ..."
    attachments: list = field(default_factory=list)  # mail.Attachment: ingest.py indexes each


class ExtractError(Exception):
    """A file we cannot read: `reason` is one of REASONS, `detail` says what to do about it."""

    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


# ----------------------------------------------------------------------------- limits

def env_number(name: str, default: float) -> float:
    """A positive number from the environment variable `name`, else `default`. A value that is
    no positive number raises ValueError naming the variable (ingest.py checks its settings
    before any file is read, so this never surfaces mid-run)."""
    value = os.environ.get(name, "").strip()
    if not value:
        return default
    try:
        number = float(value)
    except ValueError:
        number = math.nan
    if not 0 < number < math.inf:
        raise ValueError(f"{name} must be a positive number, not {value!r}; fix or unset it")
    return number


def check_text_size(path: Path, chars: int) -> None:
    """Refuse a file whose text passed MAX_TEXT_CHARS (or LINECITE_MAX_TEXT_CHARS), so a small
    file that inflates (compressed streams, XML) cannot exhaust memory."""
    limit = int(env_number(MAX_TEXT_ENV, MAX_TEXT_CHARS))
    if chars > limit:
        raise ExtractError("too-large", f"{path.name} holds more than {limit:,} characters of "
                                        f"text, the limit per file; to index it, raise the "
                                        f"limit with the environment variable {MAX_TEXT_ENV}.")


# ----------------------------------------------------------------------------- lines

# Control chars are dropped (pdfium marks a hyphen it joined across a line end with U+0002, so
# dropping it de-hyphenates "pur-/chase"); tabs become spaces; U+2028/2029 become "\n", so
# str.splitlines() and split("\n") agree on every page we return.
_CLEAN = {c: None for c in [*range(0x00, 0x20), 0x7F, *range(0x80, 0xA0), 0xFEFF]}
_CLEAN.update({0x09: " ", 0x0A: "\n", 0x2028: "\n", 0x2029: "\n"})
_GLYPH_ESCAPE = re.compile(r"\(cid:\d+\)|/g\d+|/uni[0-9A-Fa-f]{4}")  # pdfminer's and pypdf's


def _clean_lines(text: str) -> list[str]:
    """Page text -> raw lines. Empty lines inside a page stay, so numbers match the page as a
    person sees it; empty lines at its end go, since nothing can cite them."""
    text = text.replace("\r\n", "\n").replace("\r", "\n").translate(_CLEAN)
    lines = [line.rstrip() for line in text.split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return lines


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


# ----------------------------------------------------------------------------- PDF

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
    Laid out by formats/pdflayout.py, whose reading order does not change from run to run."""
    from io import StringIO

    from pdfminer.layout import LAParams
    from pdfminer.pdfdocument import PDFDocument, PDFPasswordIncorrect
    from pdfminer.pdfinterp import PDFPageInterpreter, PDFResourceManager
    from pdfminer.pdfpage import PDFPage
    from pdfminer.pdfparser import PDFParser

    from formats.pdflayout import StableTextConverter

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
        return Extracted([_clean_lines(text) for text in pages], "+".join(used), warnings)
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
        result = ocr.mend_pdf(path, pages, unusable)
    except Exception as exc:  # OCR is a bonus: a failure in it must not lose the text layer
        return [f"ocr failed: {type(exc).__name__}: {exc}"[:300]]
    for i, text in result.texts.items():  # junk keeps its place unless OCR has more real text
        if i not in unusable or _good_chars(text) >= _good_chars(pages[i]):
            pages[i] = text
    used += ["ocr"] if result.texts else []
    return result.warnings


# ----------------------------------------------------------------------------- text

_BOMS = ((b"\xef\xbb\xbf", "utf-8-sig"), (b"\xff\xfe", "utf-16-le"), (b"\xfe\xff", "utf-16-be"))
_HIGH_BYTE = re.compile(rb"[\x80-\xff]")
_LONE_HIGH_BYTE = re.compile(rb"(?<![\x80-\xff])[\x80-\xff](?![\x80-\xff])")
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0e-\x1f]")  # not \t \n \f \r


def _strict(data: bytes, encoding: str) -> str | None:
    try:
        return data.decode(encoding)
    except UnicodeDecodeError:
        return None


def _sniff_utf16(data: bytes) -> str | None:
    """UTF-16 without a BOM (fake-text-utf-16-le.txt): NULs on one side of mostly-ASCII pairs."""
    if len(data) < 4 or len(data) % 2 or b"\x00" not in data:
        return None
    even, odd = data[0::2].count(0) * 2 / len(data), data[1::2].count(0) * 2 / len(data)
    if odd > 0.3 and even < 0.05:
        return "utf-16-le"
    return "utf-16-be" if even > 0.3 and odd < 0.05 else None


def _legacy_cjk(data: bytes) -> tuple[str, str] | None:
    """CP949 (covers EUC-KR) or GB18030 (covers GBK), if the bytes look double-byte at all.

    A lone high byte between ASCII bytes is Latin-1 style ("k\\xf6nnen"), which GB18030 would
    happily turn into Chinese. Short GBK text often decodes as CP949 too (中国的文化 -> 櫓벌돨匡뺏),
    and Korean as GB18030. When both decode, charset-normalizer's chaos score decides; on a tie
    (a line or two), Hanja does: modern Korean has almost none, Chinese read as CP949 ~40%.
    """
    high = len(_HIGH_BYTE.findall(data))
    if not high or len(_LONE_HIGH_BYTE.findall(data)) > 0.05 * high:
        return None
    decoded = {enc: text for enc in ("cp949", "gb18030") if (text := _strict(data, enc))}
    if len(decoded) < 2:
        return next(((text, enc) for enc, text in decoded.items()), None)
    chaos = {m.encoding: m.chaos for m in from_bytes(data, cp_isolation=list(decoded))}
    korean, chinese = chaos.get("cp949", 1.0), chaos.get("gb18030", 1.0)
    if korean == chinese:
        hangul = sum(1 for c in decoded["cp949"] if "\uac00" <= c <= "\ud7a3")
        hanja = sum(1 for c in decoded["cp949"] if "\u4e00" <= c <= "\u9fff")
        korean, chinese = hanja, 0.2 * (hangul + hanja)
    encoding = "cp949" if korean <= chinese else "gb18030"
    return decoded[encoding], encoding


def _decode(data: bytes) -> tuple[str, str] | None:
    """Bytes -> (text, encoding): BOM, BOM-less UTF-16, UTF-8, CP949/GB18030, then a guess.
    None when the bytes are no text at all (NULs outside UTF-16, or nothing decodes)."""
    for bom, codec in _BOMS:
        if data.startswith(bom) and (text := _strict(data[len(bom) :], codec)) is not None:
            return text, "utf-16" if "16" in codec else "utf-8"
    utf16 = _sniff_utf16(data)
    if utf16 and (text := _strict(data, utf16)) is not None:
        return text, "utf-16"
    if b"\x00" in data:
        return None
    if (text := _strict(data, "utf-8")) is not None:
        return text, "utf-8"
    if legacy := _legacy_cjk(data):
        return legacy
    best = from_bytes(data).best()
    return (str(best), best.encoding) if best is not None and best.encoding else None


def extract_text(path: Path) -> Extracted:
    """A plain-text or Markdown file; a form feed starts a new page, as it did on printers."""
    data = path.read_bytes()
    if not data.strip():
        raise ExtractError("empty", f"{path.name} has no text; there is nothing to index.")
    decoded = _decode(data)
    if decoded is not None:
        check_text_size(path, len(decoded[0]))
    if decoded is None or len(_CONTROL.findall(decoded[0])) > 0.1 * len(decoded[0]):
        detail = f"{path.name} holds binary data, not text; give it its real extension."
        raise ExtractError("binary", detail)
    pages = [_clean_lines(page) for page in decoded[0].split("\f")]
    while len(pages) > 1 and not pages[-1]:  # a trailing form feed opens no real page
        pages.pop()
    if not any(pages):
        raise ExtractError("empty", f"{path.name} has only blank lines; nothing to index.")
    return Extracted(pages, f"text:{decoded[1]}")


# ----------------------------------------------------------------------------- dispatch

# ----------------------------------------------------------------------------- zip-based formats

ZIP_MAX_TOTAL = 2 * 2**30  # uncompressed bytes a zip-based document may hold in all
ZIP_MAX_MEMBER = 512 * 2**20  # ... and in one entry
ZIP_MAX_ENTRIES = 20_000  # entries in one document
ZIP_MAX_RATIO = 200  # uncompressed/compressed for one entry bigger than 1 MB


def check_zip(path: Path) -> None:
    """Refuse zip bombs before any parser inflates them: sizes, entry count, ratio.

    DOCX, XLSX, PPTX, HWPX and OFD are zip files; their parsers trust the archive, so the
    sizes its directory declares are checked here first. The reason is "zip-bomb", not
    "too-large": no setting raises these limits, so the source ends `failed`, not as a
    `needs_action` the user could fix.
    """
    import zipfile

    try:
        with zipfile.ZipFile(path) as archive:
            members = archive.infolist()
    except (zipfile.BadZipFile, EOFError, ValueError) as exc:
        detail = (f"{path.name} is not a valid {path.suffix} file (its zip container is "
                  f"damaged: {exc}); re-save it and retry.")
        raise ExtractError("corrupt", detail) from exc
    total = sum(m.file_size for m in members)
    worst = max(members, key=lambda m: m.file_size, default=None)
    bomb = (len(members) > ZIP_MAX_ENTRIES or total > ZIP_MAX_TOTAL
            or (worst is not None and worst.file_size > ZIP_MAX_MEMBER)
            or any(m.file_size > 2**20 and m.file_size > ZIP_MAX_RATIO * max(m.compress_size, 1)
                   for m in members))
    if bomb:
        raise ExtractError("zip-bomb", f"{path.name} would unpack to {total / 2**20:.0f} MB in "
                                       f"{len(members)} entries, past the safety limits "
                                       "(possible zip bomb); it was not opened and cannot be "
                                       "indexed.")


def extract_image(path: Path) -> Extracted:
    """An image file as a document: one page per frame, read by OCR (ocr.read_image)."""
    from PIL import Image

    from formats import ocr

    try:
        texts, warnings = ocr.read_image(path)
    except ocr.OcrUnavailable as exc:
        raise ExtractError("ocr-unavailable", f"{path.name} needs OCR: {exc}") from exc
    except (FileNotFoundError, PermissionError):
        raise  # extract() reports these as not-found
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as exc:
        too_big = isinstance(exc, Image.DecompressionBombError)
        detail = f"{path.name} could not be read as an image ({exc}); re-save it as PNG."
        raise ExtractError("too-large" if too_big else "corrupt", detail) from exc
    pages = [_clean_lines(text) for text in texts]
    if not any(pages):
        detail = f"OCR found no text in {path.name}; " + ("; ".join(warnings) or "nothing to index")
        raise ExtractError("empty", detail)
    return Extracted(pages, "tesseract", warnings)


def _lazy(reader: str, function: str) -> Callable[[Path], Extracted]:
    """An extractor living in the reader module formats/`reader`.py, imported on first use
    (keeps start-up fast)."""

    def run(path: Path) -> Extracted:
        import importlib

        return getattr(importlib.import_module(f"formats.{reader}"), function)(path)

    return run


PDFIUM_LOCK = threading.Lock()  # pdfium's globals are not thread-safe (see the docstring)
EXTRACTORS: dict[str, Callable[[Path], Extracted]] = {".pdf": extract_pdf}
EXTRACTORS.update({suffix: extract_text for suffix in TEXT_SUFFIXES})
EXTRACTORS.update({".hwpx": _lazy("hwp", "extract_hwpx"), ".hwp": _lazy("hwp", "extract_hwp"),
                   ".ofd": _lazy("ofd", "extract_ofd"), ".docx": _lazy("office", "extract_docx"),
                   ".xlsx": _lazy("office", "extract_xlsx"),
                   ".pptx": _lazy("office", "extract_pptx"), ".doc": _lazy("legacy", "extract_doc"),
                   ".xls": _lazy("legacy", "extract_xls"), ".ppt": _lazy("legacy", "extract_ppt"),
                   ".rtf": _lazy("markup", "extract_rtf"), ".epub": _lazy("markup", "extract_epub"),
                   ".odt": _lazy("markup", "extract_odf"), ".ods": _lazy("markup", "extract_odf"),
                   ".odp": _lazy("markup", "extract_odf"), ".eml": _lazy("mail", "extract_eml"),
                   ".msg": _lazy("mail", "extract_msg")})
EXTRACTORS.update(dict.fromkeys((".html", ".htm"), _lazy("markup", "extract_html")))
EXTRACTORS.update(dict.fromkeys((".png", ".jpg", ".jpeg", ".tif", ".tiff", ".bmp", ".webp"),
                                extract_image))  # = ocr.IMAGE_SUFFIXES
EXTRACTORS.update(dict.fromkeys((".mp3", ".wav", ".m4a", ".ogg", ".flac", ".webm", ".mp4"),
                                _lazy("audio", "extract_audio")))  # = audio.AUDIO_SUFFIXES


def supported(path: Path) -> bool:
    """Whether some extractor claims this file's suffix (case-insensitive)."""
    return Path(path).suffix.lower() in EXTRACTORS


def extract(path: Path) -> Extracted:
    """Pages of raw lines for `path`; raises ExtractError (only) for files we cannot read."""
    path = Path(path)
    if not path.is_file():
        what = ("is a folder, not a file" if path.is_dir() else
                "is a device, pipe or socket, not a file" if path.exists() else "does not exist")
        raise ExtractError("not-found", f"{path} {what}; check the path.")
    extractor = EXTRACTORS.get(path.suffix.lower())
    if extractor is None:
        known = ", ".join(sorted(EXTRACTORS))
        raise ExtractError("unsupported-format", f"{path.name}: only {known} files are indexed.")
    try:
        if extractor is extract_pdf:
            with PDFIUM_LOCK:
                result = extractor(path)
        else:
            result = extractor(path)
    except OSError as exc:  # locked by another program (Windows), no permission, vanished
        detail = f"{path} could not be read ({exc.strerror or exc}); close what holds it."
        raise ExtractError("not-found", detail) from exc
    check_text_size(path, sum(len(line) + 1 for page in result.pages for line in page))
    # one line convention for every format: no newline, control char or trailing blank inside
    result.pages = [_clean_lines("\n".join(page)) for page in result.pages]
    return result
