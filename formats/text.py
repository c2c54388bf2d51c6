"""Plain text and Markdown in any common encoding; a form feed starts a new page.

Layer: reader (formats/), above formats/base.py.
"""

from __future__ import annotations

import re
from pathlib import Path

from formats.base import Extracted, ExtractError, check_text_size, clean_lines, decode_text

_CONTROL = re.compile(r"[\x00-\x08\x0b\x0e-\x1f]")  # not \t \n \f \r


def read_text(path: Path) -> tuple[str, str]:
    """(text, encoding) of a text file, refused when empty, over the size bound or binary.
    Shared with formats/code.py: source code is text read the same way."""
    data = path.read_bytes()
    if not data.strip():
        raise ExtractError("empty", f"{path.name} has no text; there is nothing to index.")
    decoded = decode_text(data)
    if decoded is not None:
        check_text_size(path, len(decoded[0]))
    if decoded is None or len(_CONTROL.findall(decoded[0])) > 0.1 * len(decoded[0]):
        detail = f"{path.name} holds binary data, not text; give it its real extension."
        raise ExtractError("binary", detail)
    return decoded


def extract_text(path: Path) -> Extracted:
    """A plain-text or Markdown file; a form feed starts a new page, as it did on printers."""
    text, encoding = read_text(path)
    pages = [clean_lines(page) for page in text.split("\f")]
    while len(pages) > 1 and not pages[-1]:  # a trailing form feed opens no real page
        pages.pop()
    if not any(pages):
        raise ExtractError("empty", f"{path.name} has only blank lines; nothing to index.")
    return Extracted(pages, f"text:{encoding}")
