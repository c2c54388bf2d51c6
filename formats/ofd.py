"""Read OFD e-documents (GB/T 33190, China's fixed-layout format) into pages of raw lines.

Reads one `.ofd` file and writes nothing. `extract_ofd(path)` returns `Extracted(pages,
parser)` like every extractor in extract.py, and raises only `ExtractError(reason, detail)`.

An OFD file is a zip: `OFD.xml` names each document's `Document.xml` (`DocBody/DocRoot`),
which lists its pages (`Pages/Page`, `BaseLoc` -> the page's `Content.xml`). Text sits in
`TextObject`s placed by `Boundary="x y w h"` (millimetres from the page's top left) and an
optional `CTM`; each `TextCode` child gives a start `X`/`Y` (Y is the baseline) and the
advances between its characters (`DeltaX`, with the `g count value` shorthand).

Pages. One page per OFD page, in `Document.xml` order; a file holding several documents
gives their pages one after the other. A template page (`TemplatePage`) that a page draws
through `<Template TemplateID=...>` is part of that page: its text (usually a letterhead or
an invoice's printed labels) joins the page's own text.

Lines. OFD stores glyph positions, not paragraphs, so lines are rebuilt the way they look:
text runs whose baselines lie within LINE_TOLERANCE of the smaller font size form one line,
lines go top to bottom, runs within a line left to right, and a space is put between two runs
where the gap between them is wider than SPACE_GAP of the font size. A line is therefore
one printed line of the page, and a page with only images (a scan) has no lines.

Layer: reader (formats/), above formats/base.py, below extract.py.
"""

from __future__ import annotations

import math
import posixpath
import re
import unicodedata
import xml.etree.ElementTree as ET
import zipfile
from dataclasses import dataclass
from pathlib import Path

from formats.base import Extracted, ExtractError, check_zip
from formats.zipxml import children, local, parse_xml, read_member

# -----------------------------------------------------------------------------
LINE_TOLERANCE = 0.5  # same line: baselines closer than this x the smaller font size
SPACE_GAP = 0.35  # a gap wider than this x font size between two runs reads as a space
NARROW_ADVANCE = 0.5  # estimated advance of a Latin char, x font size (CJK: 1.0)
DEFAULT_SIZE = 3.5  # mm (about 10 pt), for a TextObject that omits Size
# -----------------------------------------------------------------------------

_CONTROL_CHARS = re.compile(r"[\x00-\x1f\x7f\ufeff]")
Matrix = tuple[float, float, float, float, float, float]  # a b c d e f, as in the CTM
_IDENTITY: Matrix = (1.0, 0.0, 0.0, 1.0, 0.0, 0.0)


@dataclass
class Run:
    """One TextCode placed on the page: its baseline y, left and (estimated) right x in mm."""

    x0: float
    x1: float
    y: float
    size: float
    text: str


def _floats(value: str | None) -> list[float]:
    try:
        return [float(v) for v in (value or "").split()]
    except ValueError:
        return []


# ----------------------------------------------------------------------------- package


class _Package:
    """The zip's parts by normalized name; a missing part is a "corrupt" file."""

    def __init__(self, archive: zipfile.ZipFile, path: Path):
        self.archive, self.path = archive, path
        self.names = {n.lower(): n for n in archive.namelist()}
        self.cache: dict[str, ET.Element] = {}

    def resolve(self, base_dir: str, loc: str) -> str | None:
        """A BaseLoc: absolute from the package root when it starts with "/", else relative
        to the referring part (some writers make it root-relative anyway: tried second)."""
        loc = loc.strip().replace("\\", "/")
        candidates = [loc] if loc.startswith("/") else [posixpath.join(base_dir, loc), loc]
        for candidate in candidates:
            real = self.names.get(posixpath.normpath(candidate).lstrip("/").lower())
            if real is not None:
                return real
        return None

    def xml(self, base_dir: str, loc: str | None, what: str) -> tuple[str, ET.Element]:
        real = self.resolve(base_dir, loc or "") if loc else None
        if real is None:
            where = loc or "no location given"
            raise ExtractError("corrupt", f"{self.path.name} lacks its {what} ({where}); the "
                                          "OFD file is incomplete. Re-export it.")
        if real not in self.cache:
            data = read_member(self.archive, real, self.path)
            self.cache[real] = parse_xml(data, real, self.path)
        return real, self.cache[real]


def _find(element: ET.Element, *names: str) -> ET.Element | None:
    """The first descendant at the path `names` (local names), or None."""
    for name in names:
        element = next(iter(children(element, name)), None)
        if element is None:
            return None
    return element


def _base_loc(entry: ET.Element) -> str | None:
    """BaseLoc is an attribute in the standard; some writers make it a child element."""
    child = _find(entry, "BaseLoc")
    return entry.get("BaseLoc") or (child.text if child is not None else None)


# ----------------------------------------------------------------------------- text runs


def _deltas(value: str | None, limit: int) -> list[float]:
    """DeltaX: up to `limit` numbers, where "g 3 1.5" stands for 1.5 1.5 1.5 (capped, so a
    hostile "g 999999999 1" costs nothing)."""
    tokens, out, i = (value or "").split(), [], 0
    try:
        while i < len(tokens) and len(out) < limit:
            if tokens[i] == "g":
                out += [float(tokens[i + 2])] * min(int(tokens[i + 1]), limit - len(out))
                i += 3
            else:
                out.append(float(tokens[i]))
                i += 1
    except (IndexError, ValueError):
        return out
    return out


def _advance(char: str) -> float:
    """Estimated advance of one char in font sizes: full for CJK, half for the rest."""
    return 1.0 if unicodedata.east_asian_width(char) in ("W", "F") else NARROW_ADVANCE


def text_runs(page: ET.Element) -> list[Run]:
    """Every visible TextCode of a page (or template page) as a Run in page coordinates."""
    runs: list[Run] = []
    for obj in page.iter():
        if local(obj.tag) != "TextObject" or obj.get("Visible", "true").lower() == "false":
            continue
        box = (_floats(obj.get("Boundary")) + [0.0] * 4)[:4]
        matrix = _floats(obj.get("CTM"))
        ctm: Matrix = tuple(matrix) if len(matrix) == 6 else _IDENTITY
        size = (_floats(obj.get("Size")) or [DEFAULT_SIZE])[0]
        scale = math.sqrt(abs(ctm[0] * ctm[3] - ctm[1] * ctm[2])) or 1.0
        x = y = 0.0
        for code in children(obj, "TextCode"):
            text = _CONTROL_CHARS.sub(" ", code.text or "")
            x = (_floats(code.get("X")) or [x])[0]
            y = (_floats(code.get("Y")) or [y])[0]
            if not text.strip():
                continue
            deltas = _deltas(code.get("DeltaX"), len(text) - 1)
            deltas += [_advance(c) * size for c in text[len(deltas) : len(text) - 1]]
            width = sum(deltas) + _advance(text[-1]) * size
            x0, y0 = _apply(ctm, x, y)
            x1, _ = _apply(ctm, x + width, y)
            # A tight Boundary knows the real width better than our estimate; a loose one
            # (a whole cell, the whole page) is wider than the estimate and so changes nothing.
            right = box[0] + box[2]
            end = min(box[0] + x1, right) if box[2] > 0 and right > box[0] + x0 else box[0] + x1
            runs.append(Run(box[0] + x0, end, box[1] + y0, size * scale, text))
            x += width
    return runs


def _apply(ctm: Matrix, x: float, y: float) -> tuple[float, float]:
    a, b, c, d, e, f = ctm
    return a * x + c * y + e, b * x + d * y + f


def lines_of(runs: list[Run]) -> list[str]:
    """Runs -> lines: group by baseline, order by x, a space where the gap is wide."""
    groups: list[list[Run]] = []
    for run in sorted(runs, key=lambda r: (r.y, r.x0)):
        first = groups[-1][0] if groups else None
        if first and abs(run.y - first.y) <= LINE_TOLERANCE * min(run.size, first.size):
            groups[-1].append(run)
        else:
            groups.append([run])
    lines = []
    for group in groups:
        group.sort(key=lambda r: r.x0)
        parts, end, size = [group[0].text], group[0].x1, group[0].size
        for run in group[1:]:
            if run.x0 - end > SPACE_GAP * min(run.size, size):
                parts.append(" ")  # doubled spaces are folded below
            parts.append(run.text)
            end, size = max(end, run.x1), run.size
        lines.append(" ".join("".join(parts).split()))
    return [line for line in lines if line]


# ----------------------------------------------------------------------------- documents


def document_pages(package: _Package, doc_name: str) -> list[list[str]]:
    """Lines of every page of one Document.xml, templates included."""
    real_name, doc = package.xml("", doc_name, "Document.xml")
    doc_dir = posixpath.dirname(real_name)
    templates = {t.get("ID"): _base_loc(t) for t in doc.iter() if local(t.tag) == "TemplatePage"}
    entries = [p for pages in children(doc, "Pages") for p in children(pages, "Page")]
    if not entries:
        raise ExtractError("corrupt", f"{package.path.name}: {doc_name} lists no pages; "
                                      "the OFD file is incomplete.")
    pages = []
    for entry in entries:
        _, page = package.xml(doc_dir, _base_loc(entry), f"page {entry.get('ID')}")
        runs = text_runs(page)
        for ref in children(page, "Template"):
            loc = templates.get(ref.get("TemplateID"))
            runs += text_runs(package.xml(doc_dir, loc, f"template {ref.get('TemplateID')}")[1])
        pages.append(lines_of(runs))
    return pages


def extract_ofd(path: Path) -> Extracted:
    """An OFD file; see the module docstring for what pages and lines are."""
    path = Path(path)
    check_zip(path)  # raises "corrupt" for a broken zip, "zip-bomb" for a bomb
    with zipfile.ZipFile(path) as archive:
        package = _Package(archive, path)
        if "ofd.xml" not in package.names:
            raise ExtractError("corrupt", f"{path.name} has no OFD.xml, so it is no OFD file "
                                          "(or a damaged one); re-export it.")
        _, root = package.xml("", "OFD.xml", "OFD.xml")
        roots = [(_find(body, "DocRoot").text or "").strip()
                 for body in children(root, "DocBody") if _find(body, "DocRoot") is not None]
        if not roots:
            raise ExtractError("corrupt", f"{path.name}: OFD.xml names no document (DocBody/"
                                          "DocRoot); the OFD file is incomplete.")
        pages = [page for doc in roots for page in document_pages(package, doc)]
    return Extracted(pages, "ofd")
