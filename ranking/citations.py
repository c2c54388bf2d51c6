"""Checking a quote against a knowledge base: is it word for word at the place it cites, word
for word somewhere else, close to a passage (a number changed, a "not" dropped), or nowhere?

verify_citation's core: library.py calls `verify` once per quote and KB, in one read snapshot,
and adds the lines as read_range gives them. Four steps:

1. Folding (`fold`): both sides are compared as NFKC text (full-width forms, ligatures)
   without whitespace, quotation marks, dashes, hyphens and invisible characters (soft
   hyphens, zero-width spaces), repeated dots as one, case folded unless asked otherwise. So
   line breaks, reflowed spaces, an end-of-line hyphenation ("in-" + "formation"), curly
   against straight quotes and an em dash against "--" never count, and Chinese, Korean and
   code compare alike. Every folded character keeps the index of the raw character it came
   from, so a match maps back to its exact lines. An ellipsis in a quote ("...", "…",
   "[...]") cuts it into pieces found in order, each within ELLIPSIS_GAP of the last.
2. Candidates, cheapest first, until the quote is found word for word: the lines cited,
   then the page cited and the pages either side (read from the raw line store); the lines
   holding a few distinctive stretches of the quote (the exact leg's trigram index,
   index/exact.py), grouped where stretches fall near each other; then the best BM25 chunks
   (index/bm25.py) in the cited source, then in all unless the index already led to a
   close passage. Each becomes a region of raw lines around it, wide enough for the quote
   to start or end anywhere in it, across page breaks; a region over several pages is also
   read without the lines no chunk holds (running headers, footers, page numbers), which a
   quote across a page break leaves out.
3. Verbatim: str.find of each piece in a region's folded text.
4. Otherwise alignment (rapidfuzz): the best partial alignment of the folded quote in each
   region, its similarity (Indel: 1 - changed characters / both lengths), and the words that
   differ (opcodes widened to whole words of the raw text on both sides).

Nothing is scanned whole: a quote costs a few indexed lookups and the alignment of a few
regions (`python -m bench citations`: p50/p95 per quote).

Layer: ranking: reads the index (fulltext, index/) and returns places; never the server.
"""

from __future__ import annotations

import re
import sqlite3
import unicodedata
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass, field

from rapidfuzz import fuzz
from rapidfuzz.distance import Indel, Levenshtein

import fulltext
from common import limits
from common.limits import UserError
from index import exact, segment

# ---------------------------------------------------------------------------
ELLIPSIS_GAP = 3000  # folded characters an ellipsis in a quote may stand for
MAX_PIECES = 10  # pieces a quote's ellipses may cut it into
CLOSE_MIN = 0.80  # similarity from which a passage is `close`, for a quote of CLOSE_LONG+...
CLOSE_SHORT_MIN = 0.92  # ... and for a one-character one (a short quote is alike by chance)
CLOSE_LONG = 60  # folded characters from which CLOSE_MIN holds (linear in between)
ANCHORS = 4  # stretches of a quote looked up in the exact index
ANCHOR_CHARS = (10, 32)  # the shortest and longest stretch, in characters
ANCHOR_LINES = 40  # lines one stretch may find
REGIONS = 6  # regions made from the stretches' lines per quote
BM25_CHUNKS = 6  # best BM25 chunks looked at (in the cited source, then in all)
MARGIN = 200  # raw characters read beyond a quote's length on each side of a candidate
REGION_LINES = 400  # lines read on each side of a candidate at most
PAGE_LINES = 2000  # lines of a cited page read at most
LINE_WIDTH = 20_000  # characters of one raw line read (a minified file's line is cut)
MAX_PLACES = 4  # verbatim places reported per quote: the one chosen and `also_at`
MAX_DIFFERENCES = 10  # differing words reported per quote
EDGE = 8  # characters a close passage's edges are moved to fit the quote best
BLOCK = 4  # matching characters in a row that mark where a close passage starts, ends
# ---------------------------------------------------------------------------

STATUSES = ("verbatim", "elsewhere", "close", "not_found")  # best first


@dataclass(frozen=True)
class Quote:
    """A quote as an agent gives it, with the place it cites; any part of the place may be
    missing."""

    text: str
    source: str | None = None
    page: int | None = None
    line_start: int | None = None
    line_end: int | None = None


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


@dataclass
class Verdict:
    """One quote's answer from one KB: its status, the place, and for `close` how alike it
    is and the words that differ ({"quote": ..., "source": ...} pairs)."""

    status: str
    place: Place | None = None
    similarity: float | None = None
    differences: list[dict] = field(default_factory=list)
    also_at: list[Place] = field(default_factory=list)
    note: str = ""

    def rank(self) -> tuple[int, float]:
        """Smaller is better: by status, then by similarity."""
        return STATUSES.index(self.status), -(self.similarity or 0.0)


# ---------------------------------------------------------------------------
# folding: what counts as the same text

_DROPPED = ("'\"\u00b4\u2018-\u201f\u2032-\u2037\u00ab\u00bb\u2039\u203a\u300c-\u300f"
            "\u301d-\u301f\\-\u2010-\u2015\u2043\u2212\ufe58\ufe63"  # quotation marks, dashes
            "\u00ad\u200b-\u200f\u2060-\u2064\ufeff")  # soft hyphen, zero-width, direction marks
_HYPHENATED = r"(?<=[^\W\d_])[-\u00ad\u2010\u2011]\s*\n\s*(?=[^\W\d_])"  # in-\nformation
_PIECE = re.compile(rf"(\s+)|({_HYPHENATED}|[{_DROPPED}]+)|(\.(?:[\s{_DROPPED}]*\.)+)"
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


def check_quotes(quotes: Sequence[Quote]) -> None:
    """Refuse, before any work, what no answer could come from: no quote, too many, a text
    too long or with nothing to look for, a place out of bounds or in the wrong order."""
    if not quotes:
        raise UserError(f"quotes is empty; send 1 to {limits.MAX_QUOTES} quotes, each "
                        "{text, source, page, line_start, line_end}")
    if len(quotes) > limits.MAX_QUOTES:
        raise UserError(f"quotes holds {len(quotes)} quotes; send at most "
                        f"{limits.MAX_QUOTES} a call")
    for i, quote in enumerate(quotes):
        what = f"quotes[{i}]"
        limits.check_text(quote.text, f"{what}.text", limits.MAX_QUOTE_CHARS,
                          allow_newlines=True)
        limits.check_name(quote.source, f"{what}.source")
        for name in ("page", "line_start", "line_end"):
            value = getattr(quote, name)
            if value is not None and not 1 <= value <= limits.MAX_POSITION:
                raise UserError(f"{what}.{name} must be 1 to {limits.MAX_POSITION:,}")
        if quote.line_start and quote.line_end and quote.line_end < quote.line_start:
            raise UserError(f"{what}: line_end {quote.line_end} is before line_start "
                            f"{quote.line_start}; give line_end >= line_start")
        found = pieces(quote.text)
        if not found:
            raise UserError(f"{what}.text holds no words to look for; send the words quoted")
        if len(found) > MAX_PIECES:
            raise UserError(f"{what}.text has {len(found) - 1} omissions (...); at most "
                            f"{MAX_PIECES - 1}: quote the words that matter in one piece")


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


def _occurrences(text: str, parts: list[str]) -> list[tuple[int, int]]:
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


def _align(text: str, parts: list[str]) -> Alignment:
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
_HYPHEN_BREAK = re.compile(_HYPHENATED)


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


# ---------------------------------------------------------------------------
# finding a quote in one KB


def verify(conn: sqlite3.Connection, quote: Quote, case_sensitive: bool = False) -> Verdict:
    """Where `quote` is in the KB behind `conn` (read in one snapshot by the caller)."""
    return _Finder(conn, quote, case_sensitive).run()


class _Finder:
    """One quote's search through one KB, its candidate regions read at most once."""

    def __init__(self, conn: sqlite3.Connection, quote: Quote, case_sensitive: bool) -> None:
        self.conn, self.quote, self.case_sensitive = conn, quote, case_sensitive
        self.pieces = pieces(quote.text, case_sensitive)
        self.parts = [piece.folded.skeleton for piece in self.pieces]
        self.reach = len(quote.text) + MARGIN  # raw characters read each side of a candidate
        self.ids: dict[str, int | None] = {}  # source name -> its row id
        self.read: list[tuple[str, tuple[int, int], tuple[int, int], range]] = []  # regions
        # read: source, first and last (page, line), the indexes of their streams
        self.found: set[int] = set()  # streams the index led to (stretches, BM25)
        self.streams: list[Stream] = []
        self.aligned: dict[int, Alignment] = {}  # stream index -> the quote aligned in it
        self.words: list[str] | None = None  # the quote's BM25 tokens, made once
        self.source, self.source_note = self._cited_source()

    def run(self) -> Verdict:
        """Verbatim at the place cited, else verbatim anywhere, else the closest passage.
        BM25 over every source is asked only when the index has led to no close passage yet
        (the stretches find the passage of a quote with a word or two changed); BM25 in the
        cited source always, as the cited source may hold a look-alike of a quote that is
        word for word a few pages on."""
        steps = [self._cited_region, self._cited_pages, self._stretch_regions,
                 lambda: self._bm25_regions(self.source), lambda: self._bm25_regions(None)]
        if self.source is None:
            del steps[3]  # the cited source is every source
        for step in steps:
            if step is steps[-1] and self._close_found():
                break
            start = len(self.streams)
            step()
            places = self._verbatim(self.streams[start:])
            if places:
                return self._placed(places)
        return self._not_verbatim()

    # -- the place cited ------------------------------------------------------------
    def _cited_source(self) -> tuple[str | None, str]:
        """The cited source's name as indexed (a bare file name names one source), or None
        with why."""
        asked = self.quote.source
        if asked is None:
            return None, ""
        names = fulltext.source_names_ending(self.conn, asked, 2)
        if len(names) == 1:
            return names[0], ""
        if names:
            return None, f"several sources are named {asked!r}; cite the whole name"
        return None, f"there is no source named {asked!r}"

    def _cited_region(self) -> None:
        """The lines cited and the quote's length around them (a page cited without lines:
        the page), the pages either side included."""
        quote = self.quote
        if self.source is None or quote.page is None:
            return
        first = quote.line_start or quote.line_end or 1
        last = quote.line_end or quote.line_start or PAGE_LINES
        self._region(self.source, (quote.page, first), (quote.page, last), PAGE_LINES,
                     found=False)

    def _cited_pages(self) -> None:
        """The cited page whole and the pages either side: a page number off by one (a
        printed page number against the PDF's) is the commonest wrong citation."""
        quote = self.quote
        if self.source is None or quote.page is None:
            return
        self._region(self.source, (max(1, quote.page - 1), 1),
                     (quote.page + 1, limits.MAX_POSITION), 3 * PAGE_LINES, (0, 0), False)

    def _agrees(self, place: Place) -> bool:
        """Whether a place is the one cited. The source and page must be the passage's (for a
        passage over pages, one of its pages); lines are read on the cited page: within
        line_start..line_end, or starting at line_start or ending at line_end when only that
        is given; the lines of a passage over pages are checked only where it starts or ends
        on the cited page."""
        quote = self.quote
        if quote.source is not None and place.source != self.source:
            return False
        page = quote.page if quote.page is not None else place.page
        if not place.page <= page <= place.page_end:
            return False
        ls, le = quote.line_start, quote.line_end
        if page == place.page and ls is not None and not (
                ls <= place.line_start if le is not None else ls == place.line_start):
            return False
        return not (page == place.page_end and le is not None and not (
            place.line_end <= le if ls is not None else place.line_end == le))

    # -- candidates ---------------------------------------------------------------
    def _source_id(self, name: str) -> int | None:
        if name not in self.ids:
            row = fulltext.source_row(self.conn, name)
            self.ids[name] = row["id"] if row is not None else None
        return self.ids[name]

    def _region(self, source: str, first: tuple[int, int], last: tuple[int, int],
                limit: int = REGION_LINES, reach: tuple[int, int] | None = None,
                found: bool = True) -> None:
        """Read lines first..last of a source and `reach` characters before and after them
        (across pages; the quote's length and MARGIN each side unless told), unless a region
        read already holds them; fold them into streams. `found`: the index led there (not
        only the citation), which lets a close passage in it stop the search."""
        for name, a, b, streams in self.read:
            if name == source and a <= first and last <= b:
                if found:
                    self.found.update(streams)
                return
        source_id = self._source_id(source)
        if source_id is None:
            return
        before_chars, after_chars = reach or (self.reach, self.reach)
        after, used = [], 0
        for row in fulltext.lines_from(self.conn, source_id, first, True, limit, LINE_WIDTH):
            if (row[0], row[1]) > last:
                if used >= after_chars:
                    break
                used += len(row[2]) + 1
            after.append(row)
        before, used = [], 0
        for row in fulltext.lines_from(self.conn, source_id, first, False, REGION_LINES,
                                       LINE_WIDTH):
            if used >= before_chars:
                break
            used += len(row[2]) + 1
            before.append(row)
        rows = before[::-1] + after
        if not rows:
            return
        start = len(self.streams)
        self.streams.append(Stream.of(source, rows, self.case_sensitive))
        body = self._body(source_id, rows)
        if body is not None:
            self.streams.append(Stream.of(source, body, self.case_sensitive))
        streams = range(start, len(self.streams))
        self.read.append((source, (rows[0][0], rows[0][1]), (rows[-1][0], rows[-1][1]),
                          streams))
        if found:
            self.found.update(streams)

    def _body(self, source_id: int, rows: list) -> list | None:
        """The rows without the lines no chunk holds (headers, footers, page numbers), when a
        region spans pages and has such lines; else None."""
        if rows[0][0] == rows[-1][0]:
            return None
        held = set()
        for page, start, end in fulltext.chunk_spans(self.conn, source_id, rows[0][0],
                                                     rows[-1][0]):
            held.update((page, line) for line in range(start, end + 1))
        body = [row for row in rows if (row[0], row[1]) in held or not row[2].strip()]
        return body if body and len(body) < len(rows) else None

    def _stretch_regions(self) -> None:
        """Regions around the lines holding the quote's stretches, those where most stretches
        fall near each other first (the cited source first among equals). A stretch found in
        ANCHOR_LINES lines (boilerplate) is asked again in the cited source: text repeated
        across documents must not hide the copy cited. Each region reaches as far before its
        first hit and after its last as the quote runs around those stretches."""
        hits = []
        found = stretches(self.quote.text)
        for k, (_at, stretch) in enumerate(found):
            rows = exact.exact_search(self.conn, stretch, ANCHOR_LINES, None, 80,
                                      self.case_sensitive)
            if self.source is not None and len(rows) == ANCHOR_LINES:  # a common stretch
                rows += exact.exact_search(self.conn, stretch, ANCHOR_LINES, self.source, 80,
                                           self.case_sensitive)
            hits += [(row["source"], row["page"], row["line"], k) for row in rows]
        span = len(self.quote.text) // 30 + 2  # lines a quote may run over, roughly
        groups: list[list] = []
        for name, page, line, k in sorted(set(hits)):
            last = groups[-1] if groups else None
            if last and last[0] == name and (page == last[2][0] and line - last[2][1] <= span
                                             or page == last[2][0] + 1 and line <= span):
                last[2], last[4] = (page, line), k
                last[5].add(k)
            else:
                groups.append([name, (page, line), (page, line), k, k, {k}])
        groups.sort(key=lambda group: (-len(group[5]), group[0] != self.source))
        size = len(self.quote.text)
        for name, first, last, k_first, k_last, _found in groups[:REGIONS]:
            self._region(name, first, last, reach=(found[k_first][0] + MARGIN,
                                                   size - found[k_last][0] + MARGIN))

    def _bm25_regions(self, source: str | None) -> None:
        """Regions around the best BM25 chunks for the quote's words (in `source`, or in
        every source): they find what the stretches cannot, such as code, whose words are
        short and come between brackets, and a quote that OCR noise changed everywhere."""
        if self.words is None:
            self.words = segment.tokens(" ".join(piece.text for piece in self.pieces))
        for row, _score in fulltext.bm25_search(self.conn, self.words, BM25_CHUNKS, source):
            self._region(row["source"], (row["page"], row["line_start"]),
                         (row["page"], row["line_end"]))

    # -- verdicts -------------------------------------------------------------------
    def _verbatim(self, streams: list[Stream]) -> list[Place]:
        places: list[Place] = []
        for stream in streams:
            for start, end in _occurrences(stream.folded.skeleton, self.parts):
                place = stream.place(start, end)
                if place not in places:
                    places.append(place)
        return places

    def _placed(self, places: list[Place]) -> Verdict:
        """verbatim at a place that agrees with the citation, else elsewhere: the place
        nearest the one cited."""
        agreeing = [place for place in places if self._agrees(place)]
        if agreeing:
            chosen, status = agreeing[0], "verbatim"
            note = ("the quote is word for word at the place cited" if self._cites() else
                    f"the quote is word for word at {chosen.citation()}")
        else:
            chosen, status = min(places, key=self._distance), "elsewhere"
            note = (f"the quote is word for word, but at {chosen.citation()}, not at "
                    f"{self._cited()}{self._source_note()}; cite that place")
        others = [place for place in places if place != chosen][:MAX_PLACES - 1]
        return Verdict(status, chosen, 1.0, also_at=others, note=note)

    def _distance(self, place: Place) -> tuple:
        """How far a place is from the one cited: another source, then pages, then lines."""
        quote = self.quote
        return (place.source != self.source,
                abs(place.page - quote.page) if quote.page is not None else 0,
                abs(place.line_start - (quote.line_start or quote.line_end or 0)))

    def _closest(self) -> tuple[Alignment, Stream | None]:
        """The best alignment of the quote in the streams read, and its stream (the first of
        equals: the place cited comes first); each stream is aligned once."""
        best, chosen = Alignment(0.0, []), None
        for i, stream in enumerate(self.streams):
            if i not in self.aligned:
                self.aligned[i] = _align(stream.folded.skeleton, self.parts)
            if self.aligned[i].similarity > best.similarity:
                best, chosen = self.aligned[i], stream
        return best, chosen

    def _close_found(self) -> bool:
        """Whether the index led to a close passage. One the citation alone led to does not
        count: a page cited may hold a sentence like the quote while the quote is word for
        word in another source."""
        floor = self._floor()
        self._closest()
        return any(self.aligned[i].similarity >= floor for i in self.found)

    def _floor(self) -> float:
        return close_floor(sum(map(len, self.parts)))

    def _not_verbatim(self) -> Verdict:
        """close with the passage and the differing words, or not_found."""
        best, stream = self._closest()
        if stream is None:
            return Verdict("not_found", note="no passage of this knowledge base shares the "
                           "quote's words; do not present it as a quote from these documents")
        place = stream.place(best.spans[0][0], max(best.spans[-1][1], best.spans[0][0] + 1))
        alike = round(best.similarity, 3)
        if best.similarity < self._floor():
            return Verdict("not_found", similarity=alike, note=(
                f"no passage of this knowledge base is word for word or close to the quote "
                f"(the nearest, {place.citation()}, is {alike:.0%} alike); do not present it "
                "as a quote from these documents"))
        found = [diff for piece, (start, end) in zip(self.pieces, best.spans, strict=True)
                 if end > start for diff in differences(piece, stream, start, end)]
        where = "the place cited" if self._agrees(place) else place.citation()
        return Verdict("close", place, alike, found, note=(
            f"the quote is not word for word: the passage at {where} is {alike:.0%} alike "
            "and differs in the words listed; quote its lines as they are, or do not quote"))

    def _cites(self) -> bool:
        quote = self.quote
        return any(v is not None for v in (quote.source, quote.page, quote.line_start,
                                           quote.line_end))

    def _cited(self) -> str:
        quote = self.quote
        parts = [quote.source] if quote.source is not None else []
        if quote.page is not None:
            parts.append(f"page {quote.page}")
        if quote.line_start is not None or quote.line_end is not None:
            first, last = quote.line_start or quote.line_end, quote.line_end or quote.line_start
            parts.append(f"line {first}" if first == last else f"lines {first}-{last}")
        return ", ".join(parts) or "the place cited"

    def _source_note(self) -> str:
        return f" ({self.source_note})" if self.source_note else ""


def stretches(text: str) -> list[tuple[int, str]]:
    """Up to ANCHORS stretches of the quote to look up in the exact index, with about where
    each starts in it: words of letters and digits joined by single spaces (no punctuation,
    which typography may have changed), ANCHOR_CHARS long, one from each part of the quote,
    the most distinctive there (long words, digits, Han and Hangul)."""
    flat = " ".join(unicodedata.normalize("NFKC", text).split())
    low, high = ANCHOR_CHARS
    found: list[tuple[int, float, str]] = []
    for run in re.finditer(r"[^\W_]+(?: [^\W_]+)*", flat):
        words = [(run.start() + m.start(), run.start() + m.end())
                 for m in re.finditer(r"[^\W_]+", run.group())]
        for i, (start, end) in enumerate(words):
            j = i
            while end - start < low and j + 1 < len(words):
                j += 1
                end = words[j][1]
            if end - start > high:  # one long word (a Chinese run): pieces of it
                for at in range(start, end - low + 1, low // 2):
                    found.append((at, _weight(flat[at:at + low]), flat[at:at + low]))
            elif end - start >= low:
                found.append((start, _weight(flat[start:end]), flat[start:end]))
    best: dict[int, tuple[float, int, str]] = {}
    for at, weight, stretch in found:
        zone = at * ANCHORS // max(1, len(flat))
        if zone not in best or weight > best[zone][0]:
            best[zone] = (weight, at, stretch)
    scale = len(text) / max(1, len(flat))  # the flattened text is shorter by its spaces
    return [(int(best[zone][1] * scale), best[zone][2]) for zone in sorted(best)]


def _weight(stretch: str) -> float:
    """How distinctive a stretch is: the letters of its long words, digits and CJK twice."""
    long = sum(len(word) for word in stretch.split() if len(word) >= 5)
    rare = sum(1 for char in stretch if char.isdigit() or ord(char) >= 0x1100)
    return long + 2 * rare

