"""The format readers: one module per format family, each behind the one interface extract.py
dispatches to (a function `path -> Extracted` that raises only ExtractError), and READERS, the
one table of which suffix each reader claims.

Layer: readers, between the dispatcher (extract.py, above) and the ground modules (paths,
limits, atomic, safeopen, below). pdf, text, image (OCR of image files), office
(DOCX/XLSX/PPTX), hwp (HWPX, HWP 5), ofd, legacy (DOC/XLS/PPT), markup (RTF, EPUB, ODF, HTML),
mail (EML, MSG), audio (recordings), code (source files, by extension or shebang); ocr
(Tesseract and its cache), zipxml and pdflayout are shared helpers of the readers. Importing
this package loads no reader (only code's tables, which import no parser): extract.py imports
one on first use, which keeps the server's start fast.
"""

from __future__ import annotations

from pathlib import Path

from formats.code import LANGUAGES, script_language

# -----------------------------------------------------------------------------
TEXT_SUFFIXES = (".txt", ".text", ".md", ".markdown")
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".tif", ".tiff", ".bmp", ".webp")
AUDIO_SUFFIXES = (".mp3", ".wav", ".m4a", ".ogg", ".flac", ".webm", ".mp4")
READERS: dict[str, tuple[str, str]] = {  # suffix -> (module in formats/, its function)
    ".pdf": ("pdf", "extract_pdf"),
    **dict.fromkeys(TEXT_SUFFIXES, ("text", "extract_text")),
    ".hwpx": ("hwp", "extract_hwpx"), ".hwp": ("hwp", "extract_hwp"),
    ".ofd": ("ofd", "extract_ofd"),
    ".docx": ("office", "extract_docx"), ".xlsx": ("office", "extract_xlsx"),
    ".pptx": ("office", "extract_pptx"),
    ".doc": ("legacy", "extract_doc"), ".xls": ("legacy", "extract_xls"),
    ".ppt": ("legacy", "extract_ppt"),
    ".rtf": ("markup", "extract_rtf"), ".epub": ("markup", "extract_epub"),
    **dict.fromkeys((".odt", ".ods", ".odp"), ("markup", "extract_odf")),
    **dict.fromkeys((".html", ".htm"), ("markup", "extract_html")),
    ".eml": ("mail", "extract_eml"), ".msg": ("mail", "extract_msg"),
    **dict.fromkeys(IMAGE_SUFFIXES, ("image", "extract_image")),
    **dict.fromkeys(AUDIO_SUFFIXES, ("audio", "extract_audio")),
    **dict.fromkeys(LANGUAGES, ("code", "extract_code")),
}
# -----------------------------------------------------------------------------


def reader_key(path: Path) -> str:
    """The READERS key for a file: its suffix (lower case); for a file without one whose `#!`
    line names a known language (its first bytes are read: `deploy`, `manage`), a suffix of
    that language; else ""."""
    suffix = Path(path).suffix.lower()
    language = None if suffix else script_language(Path(path))
    return next((s for s, name in LANGUAGES.items() if name == language), suffix)


def supported(path: Path) -> bool:
    """Whether some reader claims this file (by suffix, case-insensitive, or shebang)."""
    return reader_key(path) in READERS
