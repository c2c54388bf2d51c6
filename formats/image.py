"""Images (PNG, JPEG, TIFF, BMP, WebP) as documents: one page per frame, read by OCR.

Layer: reader (formats/), above formats/ocr.py.
"""

from __future__ import annotations

from pathlib import Path

from formats.base import Extracted, ExtractError, clean_lines, page_steps


def extract_image(path: Path) -> Extracted:
    """An image file as a document: one page per frame, read by OCR (ocr.read_image)."""
    from PIL import Image

    from formats import ocr

    try:
        texts, warnings = ocr.read_image(path, page_steps("OCR"))
    except ocr.OcrUnavailable as exc:
        raise ExtractError("ocr-unavailable", f"{path.name} needs OCR: {exc}") from exc
    except (FileNotFoundError, PermissionError):
        raise  # extract() reports these as not-found
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as exc:
        too_big = isinstance(exc, Image.DecompressionBombError)
        detail = f"{path.name} could not be read as an image ({exc}); re-save it as PNG."
        raise ExtractError("too-large" if too_big else "corrupt", detail) from exc
    pages = [clean_lines(text) for text in texts]
    if not any(pages):
        detail = f"OCR found no text in {path.name}; " + ("; ".join(warnings) or "nothing to index")
        raise ExtractError("empty", detail)
    return Extracted(pages, "tesseract", warnings)
