"""Reading parts out of zip-based documents: `read_member` is the one way any reader (and
url_fetch's sniffing) unpacks an entry, and the XML helpers HWPX, OFD, EPUB and ODF share.

A part is read within the zip-bomb bounds (formats.base.zip_member_problem, checked before a
byte is inflated), a block at a time, with the failures a hostile or damaged zip can raise
turned into ExtractError (encrypted, damaged, unsupported packing), and parsed with DTDs
refused, so no entity expansion or external file is ever reached. Tag names are compared
without their namespace: writers differ in prefixes and namespace URIs. formats.base.check_zip
vets the zip's whole directory (bombs) before a reader starts.

Layer: reader helper (formats/), above formats/base.py, below the zip/XML readers.
"""

from __future__ import annotations

import io
import xml.etree.ElementTree as ET
import zipfile
import zlib
from pathlib import Path

from formats.base import ExtractError, zip_member_problem

# -----------------------------------------------------------------------------
BLOCK = 1 << 20  # bytes unpacked at a time
# -----------------------------------------------------------------------------


def local(tag: object) -> str:
    """Tag name without its namespace ("{uri}p" -> "p"); "" for comments and PIs."""
    return tag.rsplit("}", 1)[-1] if isinstance(tag, str) else ""


def children(element: ET.Element, name: str) -> list[ET.Element]:
    """Direct children with this local tag name."""
    return [child for child in element if local(child.tag) == name]


def read_member(archive: zipfile.ZipFile, name: str, path: Path) -> bytes:
    """One zip entry's bytes (KeyError when there is none), read the one bounded way (issue
    45). An entry past the zip-bomb bounds is refused before a byte is inflated; then it is
    unpacked a block at a time, and zipfile stops at the size the header declared (a CRC
    error if more was packed). zipfile's own read() of a whole entry inflates up to 1 GiB in
    one step before cutting it to that size: a 200 KB entry declaring 100 bytes took 400 MB.
    An entry can also be damaged, encrypted or packed with a method Python lacks."""
    info = archive.getinfo(name)
    if problem := zip_member_problem(info):
        raise ExtractError("zip-bomb", f"{path.name}: {problem} (possible zip bomb); it was "
                                       "not unpacked and cannot be indexed.")
    out = io.BytesIO()
    try:
        with archive.open(info) as member:
            while block := member.read(BLOCK):  # zipfile ends it at the declared size
                out.write(block)
        return out.getvalue()
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
