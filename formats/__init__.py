"""The format readers: one module per format family, each behind the one interface extract.py
dispatches to (a function `path -> Extracted` that raises only ExtractError), and READERS, the
one table of which suffix each reader claims.

Layer: readers, between the dispatcher (extract.py, above) and the ground modules (paths,
limits, atomic, safeopen, below). pdf, text, image (OCR of image files), office
(DOCX/XLSX/PPTX), hwp (HWPX, HWP 5), ofd, legacy (DOC/XLS/PPT), markup (RTF, EPUB, ODF, HTML),
mail (EML, MSG), audio (recordings), structured (JSON, YAML, TOML, INI, XML, CSV/TSV, logs,
subtitles), code (source files, by extension or shebang); ocr (Tesseract and its cache) and
zipxml are shared helpers of the readers (pdfminer's layout is adapters/pdfminer_layout.py).
Importing this package loads no reader (only the language tables, formats/languages.py):
extract.py imports one on first use, which keeps the server's start fast.
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

from formats.languages import LANGUAGES, script_language

# -----------------------------------------------------------------------------
TEXT_SUFFIXES = (".txt", ".text", ".md", ".markdown")
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".tif", ".tiff", ".bmp", ".webp")
AUDIO_SUFFIXES = (".mp3", ".wav", ".m4a", ".ogg", ".flac", ".webm", ".mp4")
STRUCTURED_SUFFIXES = {  # suffix -> its function in formats/structured.py
    ".json": "extract_json", ".jsonl": "extract_jsonl", ".ndjson": "extract_jsonl",
    ".yaml": "extract_yaml", ".yml": "extract_yaml", ".toml": "extract_toml",
    ".ini": "extract_ini", ".cfg": "extract_ini", ".conf": "extract_ini",
    ".xml": "extract_xml", ".csv": "extract_csv", ".tsv": "extract_csv",
    ".log": "extract_log", ".srt": "extract_subtitles", ".vtt": "extract_subtitles",
}
PLAIN_TEXT = ("text", "extract_text")  # the reader of a KB's textExtensions
READERS: dict[str, tuple[str, str]] = {  # suffix -> (module in formats/, its function)
    ".pdf": ("pdf", "extract_pdf"),
    **dict.fromkeys(TEXT_SUFFIXES, PLAIN_TEXT),
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
    **{suffix: ("structured", function) for suffix, function in STRUCTURED_SUFFIXES.items()},
    **dict.fromkeys(LANGUAGES, ("code", "extract_code")),
}
# -----------------------------------------------------------------------------


def reader_entry(suffix: str, text_extensions: Collection[str] = ()) -> tuple[str, str] | None:
    """(module, function) reading files of this suffix (lower case): READERS' entry, else plain
    text for a suffix the KB lists in `textExtensions` (kb.py checked them), else None."""
    return READERS.get(suffix) or (PLAIN_TEXT if suffix in text_extensions else None)


def reader_key(path: Path) -> str:
    """The READERS key for a file: its suffix (lower case); for a file without one whose `#!`
    line names a known language (its first bytes are read: `deploy`, `manage`), a suffix of
    that language; else ""."""
    suffix = Path(path).suffix.lower()
    language = None if suffix else script_language(Path(path))
    return next((s for s, name in LANGUAGES.items() if name == language), suffix)


def supported(path: Path, text_extensions: Collection[str] = ()) -> bool:
    """Whether some reader claims this file (by suffix, case-insensitive, or shebang);
    `text_extensions`: the KB's textExtensions, read as plain text."""
    return reader_entry(reader_key(path), text_extensions) is not None
