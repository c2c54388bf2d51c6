"""Reading XML parts out of zip-based documents (HWPX, OFD): the guarded reads both need.

A part is read with the failures a hostile or damaged zip can raise turned into
ExtractError (encrypted, damaged, unsupported packing), and parsed with DTDs refused, so no
entity expansion or external file is ever reached. Tag names are compared without their
namespace: writers differ in prefixes and namespace URIs. formats.base.check_zip vets the zip's
directory (bombs) before any of this runs.

Layer: reader helper (formats/), above formats/base.py, below the zip/XML readers.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
import zipfile
import zlib
from pathlib import Path

from formats.base import ExtractError


def local(tag: object) -> str:
    """Tag name without its namespace ("{uri}p" -> "p"); "" for comments and PIs."""
    return tag.rsplit("}", 1)[-1] if isinstance(tag, str) else ""


def children(element: ET.Element, name: str) -> list[ET.Element]:
    """Direct children with this local tag name."""
    return [child for child in element if local(child.tag) == name]


def read_member(archive: zipfile.ZipFile, name: str, path: Path) -> bytes:
    """One zip entry's bytes. check_zip vetted only the directory; an entry can still be
    damaged, encrypted or packed with a method Python lacks."""
    try:
        return archive.read(name)
    except RuntimeError as exc:  # zipfile: "File ... is encrypted, password required"
        raise ExtractError("password-protected", f"{path.name} is an encrypted zip; save an "
                                                 "unprotected copy and index that.") from exc
    except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError) as exc:
        raise ExtractError("corrupt", f"{path.name}: its part {name} is damaged or packed in "
                                      f"an unsupported way ({exc}); re-save the file.") from exc


def parse_xml(data: bytes, name: str, path: Path) -> ET.Element:
    """Parse one XML part. A DTD is refused outright: OWPML and OFD never carry one, and with
    none there are no entities to expand (no billion laughs, no external files)."""
    if b"<!DOCTYPE" in data or "<!DOCTYPE".encode("utf-16-le") in data:
        raise ExtractError("corrupt", f"{path.name}: {name} declares a DTD, which this format "
                                      "never does; it was not parsed.")
    try:
        return ET.fromstring(data)
    except ET.ParseError as exc:
        raise ExtractError("corrupt", f"{path.name}: {name} is not well-formed XML ({exc}); "
                                      "re-save the file and retry.") from exc
