"""The interface every format reader keeps, and what they share: `Extracted` (pages of raw
lines), `ExtractError` (the only error a reader raises), the text-size and zip-bomb bounds,
the line cleaning extract() applies to every page, text decoding, and `reporting`: how a
reader of a long file (OCR, a recording) tells the indexer how far it is within that file.

Layer: the readers' ground, below every module in formats/ and below extract.py (the
dispatcher above them); it imports no project module.
"""

from __future__ import annotations

import math
import os
import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from charset_normalizer import from_bytes

if TYPE_CHECKING:
    import zipfile

# -----------------------------------------------------------------------------
MAX_TEXT_ENV = "LINECITE_MAX_TEXT_CHARS"  # raises the cap below
MAX_TEXT_CHARS = 100_000_000  # text one file may yield (lines count 1 more each): see below
# -----------------------------------------------------------------------------

# MAX_TEXT_CHARS: about 30,000 dense pages, far beyond any real document. It bounds what a
# small file may inflate to (a PDF's compressed streams, a zip's XML). Measured: a 20 M
# character English text file peaks at 145 MB RSS in `python ingest.py` (BM25-only KB), so
# about 0.7 GB at the cap, twice that for CJK (Python keeps 2 bytes a character for it).

REASONS = ("not-found", "unsupported-format", "password-protected", "corrupt", "empty", "binary",
           "too-large", "zip-bomb", "ocr-unavailable", "audio-unavailable",
           "converter-unavailable")


Progress = Callable[..., None]  # (share of the file done 0..1, stage[, detail "page 3 of 12"])
_LISTENER = threading.local()  # per thread: the progress callable `reporting` set


@contextmanager
def reporting(progress: Progress | None) -> Iterator[None]:
    """Send the within-file progress of files read in this thread inside the `with` to
    `progress`: extract.extract takes only a path, so this is how the Indexer's bar and the
    KB's status see how far a 20-minute recording or a 300-page scan is."""
    previous = getattr(_LISTENER, "progress", None)
    _LISTENER.progress = progress
    try:
        yield
    finally:
        _LISTENER.progress = previous


def listener() -> Progress | None:
    """The progress callable `reporting` set in this thread, if any."""
    return getattr(_LISTENER, "progress", None)


def page_steps(stage: str) -> Callable[[int, int], None] | None:
    """A `(pages done, pages)` callable telling this thread's listener `stage`'s share and
    "page N of M"; None when nobody listens."""
    progress = listener()
    if progress is None:
        return None
    return lambda done, of: progress(done / of if of else 1.0, stage, f"page {done} of {of}")


@dataclass
class Extracted:
    pages: list[list[str]]  # every page is a list of raw lines (1-based numbers index into it)
    parser: str  # e.g. "pypdfium2", "pypdfium2+pdfminer", "pypdfium2+ocr", "text:utf-8"
    warnings: list[str] = field(default_factory=list)  # e.g. "ocr unavailable: ..."
    attachments: list = field(default_factory=list)  # mail.Attachment: ingest.py indexes each
    layout: str = ""  # "table": CSV, header row first; "sections": INI/TOML; "json", "jsonl",
    # "yaml": key paths; "log": time buckets (chunking.py)
    language: str = ""  # source code's language (formats/code.py): ingest.py chunks it on its tree


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
def clean_lines(text: str) -> list[str]:
    """Page text -> raw lines. Empty lines inside a page stay, so numbers match the page as a
    person sees it; empty lines at its end go, since nothing can cite them."""
    text = text.replace("\r\n", "\n").replace("\r", "\n").translate(_CLEAN)
    lines = [line.rstrip() for line in text.split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return lines


# ----------------------------------------------------------------------------- text decoding

_BOMS = ((b"\xef\xbb\xbf", "utf-8-sig"), (b"\xff\xfe", "utf-16-le"), (b"\xfe\xff", "utf-16-be"))
_HIGH_BYTE = re.compile(rb"[\x80-\xff]")
_LONE_HIGH_BYTE = re.compile(rb"(?<![\x80-\xff])[\x80-\xff](?![\x80-\xff])")

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


def decode_text(data: bytes) -> tuple[str, str] | None:
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


# ----------------------------------------------------------------------------- zip-based formats

ZIP_MAX_TOTAL = 2 * 2**30  # uncompressed bytes a zip-based document may hold in all
ZIP_MAX_MEMBER = 512 * 2**20  # ... and in one entry
ZIP_MAX_ENTRIES = 20_000  # entries in one document
ZIP_MAX_RATIO = 200  # uncompressed/compressed for one entry bigger than 1 MB


def zip_member_problem(info: zipfile.ZipInfo) -> str | None:
    """Why one zip entry must not be unpacked, from the sizes its header
    declares, or None: over ZIP_MAX_MEMBER, or over 1 MB and more than ZIP_MAX_RATIO times
    its packed size. check_zip and zipxml.read_member, the one reader of an entry, apply it."""
    size, packed = info.file_size, max(info.compress_size, 1)
    if size > ZIP_MAX_MEMBER:
        return (f"its part {info.filename} would unpack to {size / 2**20:,.0f} MB, past the "
                f"{ZIP_MAX_MEMBER / 2**20:,.0f} MB one part may hold")
    if size > 2**20 and size > ZIP_MAX_RATIO * packed:
        return (f"its part {info.filename} would unpack to {size / packed:,.0f} times its "
                f"packed size, past the ratio of {ZIP_MAX_RATIO}")
    return None


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
    bomb = (len(members) > ZIP_MAX_ENTRIES or total > ZIP_MAX_TOTAL
            or any(zip_member_problem(m) for m in members))
    if bomb:
        raise ExtractError("zip-bomb", f"{path.name} would unpack to {total / 2**20:.0f} MB in "
                                       f"{len(members)} entries, past the safety limits "
                                       "(possible zip bomb); it was not opened and cannot be "
                                       "indexed.")
