"""A quote and an indexed passage folded so that the same text compares equal: NFKC (full- and
half-width forms), no whitespace, end-of-line hyphenation and soft hyphens joined, typographic
quotes, dashes and ellipses dropped or made one, case folded unless asked; with a map from
each folded character back to the raw text, so a match is placed on raw lines. A quote's
ellipses (`...`, `…`, `[...]`) cut it into pieces that must come in order.

Layer: ranking (ranking/citations.py's text rules); imports nothing of ours.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

# ---------------------------------------------------------------------------
# folding: what counts as the same text

_DROPPED = ("'\"\u00b4\u2018-\u201f\u2032-\u2037\u00ab\u00bb\u2039\u203a\u300c-\u300f"
            "\u301d-\u301f\\-\u2010-\u2015\u2043\u2212\ufe58\ufe63"  # quotation marks, dashes
            "\u00ad\u200b-\u200f\u2060-\u2064\ufeff")  # soft hyphen, zero-width, direction marks
HYPHENATED = r"(?<=[^\W\d_])[-\u00ad\u2010\u2011]\s*\n\s*(?=[^\W\d_])"  # in-\nformation
_PIECE = re.compile(rf"(\s+)|({HYPHENATED}|[{_DROPPED}]+)|(\.(?:[\s{_DROPPED}]*\.)+)"
                    rf"|([^\s{_DROPPED}.]+|\.)")
_ELLIPSIS = re.compile(r"\[\s*(?:\.\s*){3,}\]|\[\s*\u2026\s*\]|\(\s*(?:\.\s*){3,}\)"
                       r"|\(\s*\u2026\s*\)|\u2026+|\.(?:\s*\.){2,}")


@dataclass(frozen=True)
class Folded:
    """Text as compared. `spaced`: NFKC, case folded unless asked, quotation marks, dashes
    and invisible characters dropped, each run of whitespace one space and of dots one dot;
    `skeleton`: the same without spaces, what is matched. `origin[i]` is the raw index of
    spaced[i], and `at[k]` the index in spaced of skeleton[k]."""

    spaced: str
    origin: Sequence[int]
    skeleton: str
    at: list[int]

    def raw(self, k: int) -> int:
        """The raw index of skeleton[k]."""
        return self.origin[self.at[k]]


def fold(raw: str, case_sensitive: bool = False) -> Folded:
    """`raw` folded for comparison, with the map back to it (see Folded)."""
    text, origin = _nfkc(raw)
    if not case_sensitive:
        text, origin = _casefolded(text, origin)
    parts: list[str] = []
    where: list[int] = []
    for m in _PIECE.finditer(text):
        kind = m.lastindex
        if kind == 1 and parts and parts[-1] != " ":
            parts.append(" ")
            where.append(origin[m.start()])
        elif kind == 3:
            parts.append(".")
            where.append(origin[m.start()])
        elif kind == 4:
            parts.append(m.group())
            where.extend(origin[m.start():m.end()])
    if parts and parts[-1] == " ":
        parts.pop()
        where.pop()
    spaced = "".join(parts)
    return Folded(spaced, where, spaced.replace(" ", ""),
                  [i for i, c in enumerate(spaced) if c != " "])


def _nfkc(raw: str) -> tuple[str, Sequence[int]]:
    """NFKC of `raw` with the raw index of each character. Line by line: most lines are
    normal already and pass whole; the others go a character and its marks at a time, so
    decomposed Hangul and accents compose as they would in the whole text."""
    if unicodedata.is_normalized("NFKC", raw):
        return raw, range(len(raw))
    parts: list[str] = []
    origin: list[int] = []
    at = 0
    for line in raw.split("\n"):
        if unicodedata.is_normalized("NFKC", line):
            parts.append(line)
            origin.extend(range(at, at + len(line)))
        else:
            _clusters(line, at, parts, origin)
        parts.append("\n")
        origin.append(at + len(line))
        at += len(line) + 1
    parts.pop()
    origin.pop()
    return "".join(parts), origin


def _clusters(line: str, at: int, parts: list[str], origin: list[int]) -> None:
    """NFKC of each character with the marks and conjoining jamo after it, appended."""
    i, n = 0, len(line)
    while i < n:
        j = i + 1
        while j < n and _joins(line[j]):
            j += 1
        piece = unicodedata.normalize("NFKC", line[i:j])
        parts.append(piece)
        origin.extend([at + i] * len(piece))
        i = j


def _joins(char: str) -> bool:
    """A combining mark or a Hangul vowel or final jamo: composed with what comes before."""
    return bool(unicodedata.combining(char)) or "\u1160" <= char <= "\u11ff" or (
        "\ud7b0" <= char <= "\ud7ff")


def _casefolded(text: str, origin: Sequence[int]) -> tuple[str, Sequence[int]]:
    """str.casefold with the raw index of each character (ß -> ss: both from the ß)."""
    folded = text.casefold()
    if len(folded) == len(text):  # casefold never shortens: no character grew
        return folded, origin
    parts, where = [], []
    for i, char in enumerate(text):
        piece = char.casefold()
        parts.append(piece)
        where.extend([origin[i]] * len(piece))
    return "".join(parts), where


@dataclass(frozen=True)
class Piece:
    """One stretch of a quote between its ellipses, folded; `offset` is where it starts in
    the quote."""

    offset: int
    text: str
    folded: Folded


def pieces(text: str, case_sensitive: bool = False) -> list[Piece]:
    """The quote cut at its ellipses, each stretch folded; stretches with nothing to match
    (only spaces or punctuation) are left out."""
    found, at = [], 0
    for m in _ELLIPSIS.finditer(text):
        found.append((at, text[at:m.start()]))
        at = m.end()
    found.append((at, text[at:]))
    folded = [Piece(offset, part, fold(part, case_sensitive)) for offset, part in found]
    return [piece for piece in folded if piece.folded.skeleton.strip(".")]
