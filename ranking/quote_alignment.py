"""Where a folded quote sits in a region of raw lines, and how a close passage differs from it:
the region (Stream) joined and folded with where each line is, the quote's pieces found in
order (exactly, or by rapidfuzz's alignment within EDGE characters of the best window), and
the differing words widened to whole words of the raw text on both sides.

Layer: ranking (ranking/citations.py's alignment); imports ranking/quote_folding.py.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass

from rapidfuzz import fuzz
from rapidfuzz.distance import Indel, Levenshtein

from index import segment
from ranking.quote_folding import HYPHENATED, Folded, Piece, fold

ELLIPSIS_GAP = 3000  # folded characters an ellipsis in a quote may stand for
CLOSE_MIN = 0.80  # similarity from which a passage is `close`, for a quote of CLOSE_LONG+...
CLOSE_SHORT_MIN = 0.92  # ... and for a one-character one (a short quote is alike by chance)
CLOSE_LONG = 60  # folded characters from which CLOSE_MIN holds (linear in between)
MAX_PLACES = 4  # verbatim places reported per quote: the one chosen and `also_at`
MAX_DIFFERENCES = 10  # differing words reported per quote
EDGE = 8  # characters a close passage's edges are moved to fit the quote best
BLOCK = 4  # matching characters in a row that mark where a close passage starts, ends

@dataclass(frozen=True)
class Place:
    """Where a passage is: from `line_start` of `page` to `line_end` of `page_end`."""

    source: str
    page: int
    line_start: int
    page_end: int
    line_end: int

    def citation(self) -> str:
        if self.page != self.page_end:
            return (f"{self.source}, page {self.page} line {self.line_start} to page "
                    f"{self.page_end} line {self.line_end}")
        lines = (f"line {self.line_start}" if self.line_start == self.line_end
                 else f"lines {self.line_start}-{self.line_end}")
        return f"{self.source}, page {self.page}, {lines}"


# ---------------------------------------------------------------------------
# regions: runs of raw lines, folded, with where each line is


@dataclass
class Stream:
    """A run of raw lines of one source, joined by newlines and folded."""

    source: str
    spots: list[tuple[int, int]]  # (page, line) of each line
    starts: list[int]  # where each line starts in `raw`
    raw: str
    folded: Folded

    @classmethod
    def of(cls, source: str, rows: Sequence[tuple[int, int, str]],
           case_sensitive: bool) -> Stream:
        starts, at = [], 0
        for row in rows:
            starts.append(at)
            at += len(row[2]) + 1
        raw = "\n".join(row[2] for row in rows)
        return cls(source, [(row[0], row[1]) for row in rows], starts, raw,
                   fold(raw, case_sensitive))

    def spot(self, k: int) -> tuple[int, int]:
        """(page, line) of skeleton character k."""
        return self.spots[bisect_right(self.starts, self.folded.raw(k)) - 1]

    def place(self, start: int, end: int) -> Place:
        """The place of skeleton characters start..end-1."""
        (page, line), (page_end, line_end) = self.spot(start), self.spot(end - 1)
        return Place(self.source, page, line, page_end, line_end)


def occurrences(text: str, parts: list[str]) -> list[tuple[int, int]]:
    """(start, end) of the places where the pieces follow each other in `text`, each within
    ELLIPSIS_GAP of the one before, at most MAX_PLACES of them."""
    found, first = [], parts[0]
    at, tries = text.find(first), 0
    while at != -1 and len(found) < MAX_PLACES and tries < 100 * MAX_PLACES:
        end = at + len(first)
        for part in parts[1:]:
            nxt = text.find(part, end, end + ELLIPSIS_GAP + len(part))
            if nxt == -1:
                end = -1
                break
            end = nxt + len(part)
        if end != -1:
            found.append((at, end))
        at, tries = text.find(first, at + 1), tries + 1
    return found


@dataclass(frozen=True)
class Alignment:
    """How alike the quote is to the best passage of a stream: its similarity, and each
    piece's (start, end) in the stream's skeleton."""

    similarity: float
    spans: list[tuple[int, int]]


def align(text: str, parts: list[str]) -> Alignment:
    """The pieces aligned in order in `text`, each after the one before and within
    ELLIPSIS_GAP of it; the similarity weighted by the pieces' lengths."""
    spans, score, at = [], 0.0, 0
    for k, part in enumerate(parts):
        end = len(text) if k == 0 else at + ELLIPSIS_GAP + 2 * len(part)
        start, stop, alike = _best_window(part, text, at, end)
        spans.append((start, stop))
        score += alike * len(part)
        at = stop
    return Alignment(score / sum(map(len, parts)), spans)


def _best_window(part: str, text: str, lo: int, hi: int) -> tuple[int, int, float]:
    """The stretch of text[lo:hi] most like `part` and its similarity. rapidfuzz's partial
    alignment gives a window as long as the part; it is widened by a tenth, cut to the
    characters the alignment matches (so a dropped or added word is inside it), and each edge
    settled within EDGE characters where the fewest edits remain: an LCS alignment may start
    on a stray matching letter before the passage, and a changed first or last word must stay
    in it."""
    window = text[lo:hi]
    if not window:
        return lo, lo, 0.0
    if len(window) <= len(part):
        return lo, hi, fuzz.ratio(part, window) / 100
    hit = fuzz.partial_ratio_alignment(part, window)
    slack = max(EDGE, len(part) // 10)
    a, b = max(0, hit.dest_start - slack), min(len(window), hit.dest_end + slack)
    ops = [op for op in Indel.opcodes(part, window[a:b]) if op.tag == "equal"]
    if not ops:
        return lo + a, lo + a, 0.0
    # the passage runs from the first to the last run of BLOCK matching characters, with as
    # many characters before and after as the part has there (a changed first or last word):
    # an LCS picks up stray single letters in the slack, which would stretch the passage
    ops = [op for op in ops if op.src_end - op.src_start >= BLOCK] or ops
    first, last = ops[0], ops[-1]
    start = lo + max(0, a + first.dest_start - first.src_start)
    end = lo + min(len(window), a + last.dest_end + len(part) - last.src_end)
    start = min(range(max(lo, start - EDGE), min(end, start + EDGE) + 1),
                key=lambda s: (Levenshtein.distance(part, text[s:end]), abs(s - start)))
    end = min(range(max(start, end - EDGE), min(hi, end + EDGE) + 1),
              key=lambda e: (Levenshtein.distance(part, text[start:e]), abs(e - end)))
    return start, end, fuzz.ratio(part, text[start:end]) / 100


def close_floor(length: int) -> float:
    """The least similarity of a `close` passage for a quote of `length` folded characters."""
    short = max(0.0, (CLOSE_LONG - length) / CLOSE_LONG)
    return CLOSE_MIN + (CLOSE_SHORT_MIN - CLOSE_MIN) * short


# ---------------------------------------------------------------------------
# the differing words of a close passage


def _wordy(text: str, i: int) -> bool:
    """Whether text[i] is part of a word a difference widens to: letters and digits (not Han
    or kana, whose words are not spaced), and a comma or point inside a number."""
    char = text[i]
    if char in ",.":
        return 0 < i < len(text) - 1 and text[i - 1].isdigit() and text[i + 1].isdigit()
    return char.isalnum() and not segment.HAN_RE.match(char)


def _word_span(text: str, a: int, b: int) -> tuple[int, int]:
    """text[a:b] widened to whole words; an empty span inside a word becomes that word."""
    inside = a == b and 0 < a < len(text) and _wordy(text, a - 1) and _wordy(text, a)
    start, end = a, b
    if inside or (a < b and _wordy(text, a)):
        while start > 0 and _wordy(text, start - 1):
            start -= 1
    if inside or (a < b and _wordy(text, b - 1)):
        while end < len(text) and _wordy(text, end):
            end += 1
    return start, end


_EDGES = " \t\n.,;:!?\"'()[]\u2018\u2019\u201c\u201d"
_HYPHEN_BREAK = re.compile(HYPHENATED)


def _shown(raw: str, folded: Folded, start: int, end: int) -> str:
    """The raw text of spaced[start:end], on one line and without the punctuation around."""
    if start >= end:
        return ""
    text = _HYPHEN_BREAK.sub("", raw[folded.origin[start]:folded.origin[end - 1] + 1])
    text = " ".join(text.split())
    return text.strip(_EDGES) or text


def differences(piece: Piece, stream: Stream, start: int, end: int) -> list[dict]:
    """The words in which a piece of the quote and the passage at skeleton start..end of the
    stream differ: {"quote": its words, "source": the passage's}, "" for a word one lacks.
    Words are widened in the whole stream, so a word the passage's edge cuts is shown whole."""
    quoted, doc = piece.folded, stream.folded
    base = doc.at[start]
    passage = doc.spaced[base:doc.at[end - 1] + 1]
    groups: list[list[int]] = []
    for op in Indel.opcodes(quoted.spaced, passage):
        if op.tag == "equal" or not (quoted.spaced[op.src_start:op.src_end].strip()
                                     or passage[op.dest_start:op.dest_end].strip()):
            continue  # the same, or only a space more or less (a line break in Chinese)
        qa, qb = _word_span(quoted.spaced, op.src_start, op.src_end)
        da, db = _word_span(doc.spaced, base + op.dest_start, base + op.dest_end)
        if groups and (qa <= groups[-1][1] or da <= groups[-1][3]):
            last = groups[-1]
            groups[-1] = [min(last[0], qa), max(last[1], qb), min(last[2], da), max(last[3], db)]
        else:
            groups.append([qa, qb, da, db])
    return [{"quote": _shown(piece.text, quoted, qa, qb),
             "source": _shown(stream.raw, doc, da, db)}
            for qa, qb, da, db in groups[:MAX_DIFFERENCES]]
