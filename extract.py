"""Turn one document into pages of raw lines: the unit every citation points at.

Layer: the pipeline's first stage (file -> lines), above the format readers in formats/.
`extract(path)` finds the reader formats.READERS names for the file's suffix (imported on
first use), and returns its `Extracted(pages, parser)`: each page is a list of lines, and a
line number is the 1-based index into that page's text split on "\\n". Readers write only the
OCR and transcript caches (formats/ocr.py, formats/audio.py).
`ingest.py` stores these lines as they are and `read_range` serves them back, so the
numbering made here is the numbering everywhere: one line convention for every format is
applied here, after the reader.
A file that cannot be read raises `ExtractError(reason, detail)`, never anything else.
Speed: `python -m bench speed extract`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path

from formats import READERS, reader_key, supported
from formats.base import Extracted, ExtractError, check_text_size, clean_lines

__all__ = ["Extracted", "ExtractError", "extract", "reader_for", "supported"]


def reader_for(suffix: str) -> Callable[[Path], Extracted] | None:
    """The reader function for a suffix (lower case), its module imported on first use."""
    entry = READERS.get(suffix)
    if entry is None:
        return None
    module, function = entry
    return getattr(importlib.import_module(f"formats.{module}"), function)


def extract(path: Path) -> Extracted:
    """Pages of raw lines for `path`; raises ExtractError (only) for files we cannot read."""
    path = Path(path)
    if not path.is_file():
        what = ("is a folder, not a file" if path.is_dir() else
                "is a device, pipe or socket, not a file" if path.exists() else "does not exist")
        raise ExtractError("not-found", f"{path} {what}; check the path.")
    reader = reader_for(reader_key(path))
    if reader is None:
        known = ", ".join(sorted(READERS))
        raise ExtractError("unsupported-format", f"{path.name}: only {known} files are indexed.")
    try:
        result = reader(path)
    except OSError as exc:  # locked by another program (Windows), no permission, vanished
        detail = f"{path} could not be read ({exc.strerror or exc}); close what holds it."
        raise ExtractError("not-found", detail) from exc
    check_text_size(path, sum(len(line) + 1 for page in result.pages for line in page))
    # one line convention for every format: no newline, control char or trailing blank inside
    result.pages = [clean_lines("\n".join(page)) for page in result.pages]
    return result
