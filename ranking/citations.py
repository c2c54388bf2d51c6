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
from collections.abc import Sequence
from dataclasses import dataclass, field

import fulltext
from common import limits
from common.limits import UserError
from index import exact, segment
from ranking.quote_alignment import (
    MAX_PLACES,
    Alignment,
    Place,
    Stream,
    align,
    close_floor,
    differences,
    occurrences,
)
from ranking.quote_folding import pieces

# ---------------------------------------------------------------------------
MAX_PIECES = 10  # pieces a quote's ellipses may cut it into
ANCHORS = 4  # stretches of a quote looked up in the exact index
ANCHOR_CHARS = (10, 32)  # the shortest and longest stretch, in characters
ANCHOR_LINES = 40  # lines one stretch may find
REGIONS = 6  # regions made from the stretches' lines per quote
BM25_CHUNKS = 6  # best BM25 chunks looked at (in the cited source, then in all)
MARGIN = 200  # raw characters read beyond a quote's length on each side of a candidate
REGION_LINES = 400  # lines read on each side of a candidate at most
PAGE_LINES = 2000  # lines of a cited page read at most
LINE_WIDTH = 20_000  # characters of one raw line read (a minified file's line is cut)
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
            for start, end in occurrences(stream.folded.skeleton, self.parts):
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
                self.aligned[i] = align(stream.folded.skeleton, self.parts)
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

