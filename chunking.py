"""Chunking: pages of raw lines into runs of whole lines an agent can cite.

A chunk never crosses a page and never includes a noise line (running header, footer, page
number): noise splits a page into runs, and each run is cut into chunks of about
TARGET_CHARS characters, the next chunk repeating the previous chunk's last line so a
sentence cut at a boundary is whole in one of them. A single line longer than MAX_CHARS is
split into pieces that all carry its line number. A chunk's text is exactly its lines joined
by newlines (or, for a piece of a long line, a substring of that line).

`noise_lines(pages)` finds the noise (the lines stay in fulltext.sqlite3 with their numbers;
only chunks leave them out). Reads and writes nothing: ingest.py hands pages in and stores
the chunks.

Layer: pipeline stage (lines -> chunks), above storage and below ingest.py.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import PurePosixPath
from typing import TYPE_CHECKING

from fulltext import Chunk

if TYPE_CHECKING:  # formats.structured is imported when a data file is chunked
    from formats.structured import LogEntry, Stamp

# ---------------------------------------------------------------------------
TARGET_CHARS = 1000  # a chunk is closed once it holds this many characters
MAX_CHARS = 1200  # ... and never grows past this (except by the overlap line)
OVERLAP_LINES = 1  # lines repeated at the start of the next chunk
NOISE_EDGE = 3  # non-empty lines at the top and at the bottom of a page that may be noise
NOISE_SHARE = 0.3  # a running header/footer is at the edge of at least this share of pages...
NOISE_MIN_PAGES = 3  # ...and of at least this many pages
NOISE_MAX_CHARS = 300  # a longer line is body, never a header (and is not scanned for one)
BODILESS_SHARE = 0.5  # when more pages than this share are all noise, their noise is content
HEADINGS = True  # chunks carry their nearest heading in their context (see README: measured)
HEADING_MAX_CHARS = 120  # a longer line is never a heading
HEADING_MAX_WORDS = 12  # ... nor a line of more words (space-separated)
PLAIN_HEADING_WIDTH = 60  # an unnumbered, unmarked heading is at most this wide (CJK count 2)...
BODY_MIN_WIDTH = 60  # ... and the next line, its body, at least this wide and twice as wide
# ---------------------------------------------------------------------------


def chunk_id(source: str, page: int, line_start: int, text: str) -> str:
    """Stable for the same text at the same place, so unchanged chunks are not embedded again."""
    key = f"{source}\x00{page}\x00{line_start}\x00{text}".encode()
    return hashlib.sha256(key).hexdigest()[:32]


def title_words(source: str) -> str:
    """A source's file name as words: "pdfs/ADOBE_2022_10K.pdf" -> "ADOBE 2022 10K"."""
    stem = PurePosixPath(source.replace("\\", "/")).stem
    return re.sub(r"[\W_]+", " ", stem).strip()


def bm25_text(source: str, context: str, text: str) -> str:
    """What a chunk's BM25 tokens are made from: its source's title words, its context, its
    text. Questions name the document ("Adobe's FY2022 operating margin") far more often than
    its pages do; with the title, BM25 finds the right filing (FinanceBench evidence pages:
    see README). Only the tokens: chunk ids, texts and vectors stay as they were."""
    return "\n".join(part for part in (title_words(source), context, text) if part)


def _runs(lines: Sequence[str], noise: set[int]) -> list[list[int]]:
    """Line numbers (1-based) of each stretch of lines free of noise, blank ends trimmed."""
    runs: list[list[int]] = []
    current: list[int] = []
    for number, text in enumerate(lines, 1):
        if number in noise:
            runs.append(current)
            current = []
        elif text.strip() or current:
            current.append(number)
    runs.append(current)
    for run in runs:
        while run and not lines[run[-1] - 1].strip():
            run.pop()
    return [run for run in runs if run]


def _split_long_line(text: str) -> list[str]:
    """Cut an over-long line at whitespace near MAX_CHARS, so no piece is past it. Works by
    index, so a 50 MB line costs one pass (re-slicing the remainder was quadratic)."""
    pieces: list[str] = []
    start = 0
    while len(text) - start > MAX_CHARS:
        cut = text.rfind(" ", start + TARGET_CHARS // 2, start + MAX_CHARS)
        end = cut + 1 if cut >= 0 else start + MAX_CHARS
        pieces.append(text[start:end])
        start = end
    return pieces + [text[start:]] if start < len(text) else pieces


def _line_groups(run: list[int], lines: Sequence[str]) -> list[list[int]]:
    """Group a run's line numbers into chunks by size, with OVERLAP_LINES repeated. The open
    group's size is kept as a running total, so the cost is linear in the run's lines."""
    groups: list[list[int]] = []
    current: list[int] = []
    size = 0  # characters in `current`, a newline counted per line

    def close() -> tuple[list[int], int]:
        groups.append(current)
        tail = current[-OVERLAP_LINES:] if len(current) > OVERLAP_LINES else []
        kept = [n for n in tail if lines[n - 1].strip()]
        return kept, sum(len(lines[n - 1]) + 1 for n in kept)

    for number in run:
        length = len(lines[number - 1]) + 1
        if length > MAX_CHARS:  # an over-long line is a group of its own, split later
            if current and not _is_overlap(current, groups):
                groups.append(current)
            groups.append([number])
            current, size = [], 0
            continue
        if current and size + length > MAX_CHARS:
            current, size = close()
        current.append(number)
        size += length
        if size >= TARGET_CHARS:
            current, size = close()
    if current and not _is_overlap(current, groups):
        groups.append(current)
    return groups


def _is_overlap(current: list[int], groups: list[list[int]]) -> bool:
    """True when `current` holds only the lines repeated from the group just closed."""
    return bool(groups) and current == groups[-1][-len(current):]


# ---------------------------------------------------------------------------
# headings: a chunk is searched and embedded with the nearest one above it (never in its text)

_MARKDOWN = re.compile(r"#{1,6}\s+(.+?)[\s#]*")
_KEYWORD_SECTION = re.compile(  # may stand alone: "Item 7." "ARTICLE IV" "제3조(목적)" "第三章"
    r"(?:item|part|section|chapter|article|appendix|schedule|note)\s+"
    r"(?:\d{1,3}[a-z]?|[ivxlc]{1,7})(?:[.:]|\s+[-–—]|$)"
    r"|제\s*\d{1,4}\s*[조장절관편](?:\s*\([^)]{1,30}\))?"
    r"|第[\d一二三四五六七八九十百零〇]{1,6}[章节節条條篇编編]", re.IGNORECASE)
_NUMBERED = re.compile(  # needs a title after it: "1.2 Scope" "IV. Results" "Ⅲ. 결론" "一、" "가."
    r"(?:\d{1,2}(?:\.\d{1,2}){0,3}\.?|[ivx]{1,5}\.|[Ⅰ-Ⅻ]{1,3}\.?|[가-하]\.)(?=\s)"
    r"|[一二三四五六七八九十]{1,3}[、．]|[（(][一二三四五六七八九十]{1,3}[)）]", re.IGNORECASE)
_CLOSING = tuple(".,;:!?。，；：！？、…\"'”’」』") + ("다", "함", "됨", "음")  # sentence ends
_DANGLING = {"a", "an", "and", "as", "at", "by", "for", "from", "in", "is", "of", "on", "or",
             "that", "the", "to", "which", "with"}  # a wrapped line's last word, no title's


def _width(text: str) -> int:
    """Columns a line takes: CJK characters count two, as a reader sees them."""
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


def _titled(text: str) -> bool:
    """Reads as a title: few words, a capital or uncased (CJK) letter first, and no sentence
    punctuation or figure at its end (so no sentence, table row or contents line)."""
    words = text.split()
    last = next((c for c in reversed(text) if c.isalnum()), "0")
    return (bool(text) and text[0].isalpha() and not text[0].islower()
            and len(words) <= HEADING_MAX_WORDS and words[-1].lower() not in _DANGLING
            and not text.endswith(_CLOSING) and not last.isdigit()
            and "|" not in text and "\t" not in text)  # no table row


def _is_body(line: str, heading_width: int) -> bool:
    """A line of running text: wide (and twice the heading's width), mostly letters."""
    width = _width(line)
    letters = sum(c.isalpha() for c in line)
    return width >= max(BODY_MIN_WIDTH, 2 * heading_width) and 2 * letters >= len(line)


def heading_text(line: str, before: str = "", after: str = "") -> str:
    """The heading `line` is, or "" when it is none. Extractors give lines only, so this reads
    the line itself: a markdown '#', a numbered section with a short title ("1.2 Scope",
    "Item 7.", "ARTICLE IV", "제3조(목적)", "第三章", "一、总则"), a short ALL-CAPS title, or a
    short title with running text under it (`after`, the next non-empty line) that does not
    carry on the running text above it (`before`: a wrapped line of a narrow column is no
    heading). Conservative: a wrong heading is searched with every chunk below it."""
    text = line.strip()
    if not 2 <= len(text) <= HEADING_MAX_CHARS:
        return ""
    if match := _MARKDOWN.fullmatch(text):
        title = match.group(1)
        number = _NUMBERED.match(title)
        return title if _titled(title[number.end():].strip() if number else title) else ""
    if match := _KEYWORD_SECTION.match(text):
        rest = text[match.end():].strip()
        return text if not rest or _titled(rest) else ""
    if match := _NUMBERED.match(text):
        title = text[match.end():].strip()
        return text if _titled(title) and _width(title) <= PLAIN_HEADING_WIDTH else ""
    if not _titled(text):
        return ""
    letters = [c for c in text if c.isalpha()]
    if len(letters) >= 4 and all(c.isupper() for c in letters):  # "RISK FACTORS"
        return text
    width = _width(text)
    runs_on = _is_body(before.strip(), 0) and not before.rstrip().endswith(_CLOSING)
    fits = width <= PLAIN_HEADING_WIDTH and _is_body(after.strip(), width)
    return text if fits and not runs_on else ""


_SECTION = re.compile(r"(\[{1,2}[^\[\]\n]{1,100}\]{1,2})\s*(?:[#;].*)?"  # [server] [[bin]]
                      r"|([A-Za-z_][\w.-]{0,100}:)\s*(?:#.*)?")  # a YAML top-level key: no value


def section_heading(line: str, before: str = "", after: str = "") -> str:
    """The heading a config file's line is: an INI or TOML section (`[server]`, `[tool.ruff]`,
    `[[bin]]`), or an unindented YAML key with nothing after it (`jobs:`); else "". Unlike
    heading_text it reads the line alone (`before`, `after`: the same call shape)."""
    match = _SECTION.fullmatch(line.rstrip())
    return (match.group(1) or match.group(2)) if match else ""


def nearest_headings(lines: Sequence[str], noise: set[int], carried: str = "",
                     find: Callable[[str, str, str], str] = heading_text) -> list[str]:
    """Per line, the heading a chunk starting there is searched with: the nearest heading above
    it on the page, else `carried` (the last of the earlier pages); "" when the line is itself
    a heading. One more entry, past the last line, is what the next page carries. Noise lines
    (a running header in capitals) are no headings; a spreadsheet page has none. `find` says
    what a heading is: heading_text for documents, section_heading for config files."""
    if not HEADINGS or (lines and lines[0].startswith(SHEET_MARKERS)):
        return [""] * (len(lines) + 1)
    filled = [i for i, line in enumerate(lines) if line.strip() and i + 1 not in noise]
    found: dict[int, str] = {}  # 0-based line index -> its heading
    for k, i in enumerate(filled):
        before = lines[filled[k - 1]] if k else ""
        after = lines[filled[k + 1]] if k + 1 < len(filled) else ""
        if heading := find(lines[i], before, after):
            found[i] = heading
    nearest = []
    for i in range(len(lines)):
        nearest.append("" if i in found else carried)
        carried = found.get(i, carried)
    return [*nearest, carried]


SHEET_MARKERS = ("[sheet] ", "[hidden sheet] ")  # extract.py's first line of a spreadsheet page


def page_context(lines: Sequence[str], table: bool = False) -> tuple[str, int]:
    """(context, its last line) that every chunk of the page should carry to read on its own.

    A spreadsheet page's chunks repeat the sheet name and the header row (its first non-empty
    row), so a chunk of rows 200-240 still says what its columns are; a `table` page (a CSV or
    TSV file: no sheet line, its first non-empty line is the header) repeats its header row.
    The context is searched and embedded with the chunk, but is not part of its text: the
    text stays exactly its lines.
    """
    sheet = bool(lines) and lines[0].startswith(SHEET_MARKERS)
    if not sheet and not table:
        return "", 0
    first = 2 if sheet else 1
    header = next((n for n in range(first, len(lines) + 1) if lines[n - 1].strip()), 0)
    parts = ([lines[0]] if sheet else []) + ([lines[header - 1]] if header else [])
    return "\n".join(parts), max(header, 1)


def chunk_page(source: str, page: int, lines: Sequence[str], noise: set[int],
               tokenize: Callable[[str], list[str]],
               headings: Sequence[str] | None = None, table: bool = False) -> list[Chunk]:
    """Every chunk of one page, in line order. `headings` is nearest_headings() of the page
    (by default, of this page alone): a chunk's context is its sheet or table header (`table`:
    see page_context), else its heading."""
    chunks: list[Chunk] = []
    context, context_end = page_context(lines, table)
    if headings is None:
        headings = nearest_headings(lines, noise)
    for first, last in _spans(lines, noise):
        extra = (context if first > context_end else "") or headings[first - 1]
        chunks += line_chunks(source, page, lines, (first, last), extra, tokenize)
    return dedupe(chunks)


def _spans(lines: Sequence[str], noise: set[int]) -> list[tuple[int, int]]:
    """(first, last) line of each chunk of a page by size, blank lines at a chunk's end left
    out."""
    return [_trimmed(group, lines) for run in _runs(lines, noise)
            for group in _line_groups(run, lines)]


def _trimmed(group: list[int], lines: Sequence[str]) -> tuple[int, int]:
    keep = len(group)
    while keep > 1 and not lines[group[keep - 1] - 1].strip():
        keep -= 1
    return group[0], group[keep - 1]


def line_chunks(source: str, page: int, lines: Sequence[str], span: tuple[int, int],
                context: str, tokenize: Callable[[str], list[str]]) -> list[Chunk]:
    """The chunk of lines span[0]..span[1] (1-based) with `context`, or the pieces of one
    over-long line (each with its line number); blank pieces are left out. codechunks.py makes
    its chunks here too, so both chunkers share ids, tokens and the long-line rule."""
    first, last = span
    if first == last and len(lines[first - 1]) > MAX_CHARS:
        texts = _split_long_line(lines[first - 1])
    else:
        texts = ["\n".join(lines[first - 1:last])]
    chunks = []
    for text in texts:
        if text.strip():
            searchable = f"{context}\n{text}" if context else text
            tokens = " ".join(tokenize(bm25_text(source, context, text)))
            chunks.append(Chunk(chunk_id(source, page, first, searchable), page, first, last,
                                text, tokens, context))
    return chunks


def dedupe(chunks: list[Chunk]) -> list[Chunk]:
    """Two pieces with the same text at the same line would share an id; keep the first."""
    seen: set[str] = set()
    unique = []
    for chunk in chunks:
        if chunk.chunk_id not in seen:
            seen.add(chunk.chunk_id)
            unique.append(chunk)
    return unique


def chunk_pages(source: str, pages: Sequence[Sequence[str]], noise: Sequence[set[int]],
                tokenize: Callable[[str], list[str]], layout: str = "") -> list[Chunk]:
    """Every chunk of a document, pages in order (page numbers are 1-based); a page's first
    chunks carry the last heading of the pages before. `layout` (Extracted.layout): "table",
    every page's first non-empty line is its header row, which its chunks carry instead (a
    table is not scanned for headings); "sections", headings are config sections
    (section_heading); "json", "jsonl", "yaml", "log": see data_chunks; "", headings as
    documents have them (heading_text)."""
    if layout in KEYED_LAYOUTS or layout == "log":
        return [chunk for number, (lines, marks) in enumerate(zip(pages, noise, strict=True), 1)
                for chunk in data_chunks(source, number, lines, marks, tokenize, layout)]
    chunks: list[Chunk] = []
    carried = ""
    table = layout == "table"
    find = section_heading if layout == "sections" else heading_text
    for number, (lines, page_noise) in enumerate(zip(pages, noise, strict=True), 1):
        headings = ([""] * (len(lines) + 1) if table
                    else nearest_headings(lines, page_noise, carried, find))
        chunks += chunk_page(source, number, lines, page_noise, tokenize, headings, table)
        carried = headings[-1]
    return chunks


# ---------------------------------------------------------------------------
# data files: a chunk of JSON or YAML says where in the data it starts; logs go by time

KEYED_LAYOUTS = ("json", "jsonl", "yaml")  # Extracted.layout of files chunked with key paths


def data_chunks(source: str, page: int, lines: Sequence[str], noise: set[int],
                tokenize: Callable[[str], list[str]], layout: str) -> list[Chunk]:
    """The chunks of a data file's page. JSON, JSON Lines, YAML: cut by size as text, each
    with the key path of its first line as its context (structured.key_paths: `json
    $.services.web.ports`). A timed log ("log"): cut at its entries by time (log_spans), each
    with its time range (`log 2024-05-01 12:00:03 - 12:00:59`); a log is one page, and its
    noise none (its first line a bare "1" is a log line)."""
    from formats import structured

    if layout == "log":
        spans = log_spans(lines)
    else:
        sizes = _spans(lines, noise)
        paths = structured.key_paths(layout, lines, [first for first, _ in sizes])
        spans = list(zip(sizes, paths, strict=True))
    chunks: list[Chunk] = []
    for span, context in spans:
        chunks += line_chunks(source, page, lines, span, context, tokenize)
    return dedupe(chunks)


def log_spans(lines: Sequence[str]) -> list[tuple[tuple[int, int], str]]:
    """((first, last), time range) of each chunk of a timed log. Entries (a stamped line and
    the unstamped lines under it: a stack trace stays whole) are packed in time order; the
    entries of one minute share a chunk, and a minute that does not fit in what the chunk
    holds already starts a new one, so chunks begin where a minute begins unless a minute
    takes more than one chunk (a burst: cut between its entries by size). Small minutes are
    packed together up to TARGET_CHARS. An entry longer than MAX_CHARS is cut by size like
    text. No line is repeated between entries: entries are whole, nothing is cut mid-way."""
    from formats import structured

    packer = _LogPacker(lines, structured.time_bucket, structured.time_range)
    for entry in structured.log_entries(lines):
        packer.add(entry)
    packer.finish()
    return packer.spans


class _LogPacker:
    """log_spans' state: the open chunk's entries and the open minute's, not yet placed."""

    def __init__(self, lines: Sequence[str], bucket: Callable[[Stamp | None], object],
                 time_range: Callable[[Stamp | None, Stamp | None], str]) -> None:
        self.lines = lines
        self.bucket_of, self.time_range = bucket, time_range  # structured's
        self.spans: list[tuple[tuple[int, int], str]] = []
        self.open: list[LogEntry] = []
        self.open_size = 0
        self.minute: list[tuple[LogEntry, int]] = []  # the open minute's (entry, size),
        # while they may still fit the open chunk
        self.minute_size = 0
        self.bucket: object = ()  # the open minute (structured.time_bucket), () before any
        self.too_big = False  # the open minute did not fit: its entries are placed by size

    def _size(self, entry: LogEntry) -> int:
        return sum(len(self.lines[n - 1]) + 1 for n in range(entry.first, entry.last + 1))

    def add(self, entry: LogEntry) -> None:
        bucket = self.bucket_of(entry.stamp)
        if bucket != self.bucket:
            self._place_minute()
            self.bucket, self.too_big = bucket, False
        size = self._size(entry)
        if self.too_big:
            self._by_size(entry, size)
            return
        self.minute.append((entry, size))
        self.minute_size += size
        if self.open_size + self.minute_size > MAX_CHARS:  # the minute starts a chunk
            self._close()
            minute, self.minute, self.minute_size = self.minute, [], 0
            self.too_big = True
            for held, held_size in minute:
                self._by_size(held, held_size)

    def finish(self) -> None:
        self._place_minute()
        self._close()

    def _place_minute(self) -> None:
        """The open minute fits the open chunk (else it was placed by size): add it whole."""
        self.open += [entry for entry, _size in self.minute]
        self.open_size += self.minute_size
        self.minute, self.minute_size = [], 0
        if self.open_size >= TARGET_CHARS:
            self._close()

    def _by_size(self, entry: LogEntry, size: int) -> None:
        if size > MAX_CHARS:  # a long stack trace: its lines by size, each with its time
            self._close()
            context = self.time_range(entry.stamp, entry.stamp)
            for group in _line_groups(list(range(entry.first, entry.last + 1)), self.lines):
                self.spans.append((_trimmed(group, self.lines), context))
            return
        if self.open and self.open_size + size > MAX_CHARS:
            self._close()
        self.open.append(entry)
        self.open_size += size
        if self.open_size >= TARGET_CHARS:
            self._close()

    def _close(self) -> None:
        if not self.open:
            return
        stamps = [entry.stamp for entry in self.open if entry.stamp]
        context = self.time_range(stamps[0], stamps[-1]) if stamps else ""
        group = list(range(self.open[0].first, self.open[-1].last + 1))
        self.spans.append((_trimmed(group, self.lines), context))
        self.open, self.open_size = [], 0


# ---------------------------------------------------------------------------
# noise: running headers, footers and page numbers, kept as lines but left out of chunks

_PAGE_NUMBER = re.compile(
    r"(?:page|pg\.?|p\.|seite|第)?\s*[-–—(\[]?\s*(\d{1,4}|[ivxlc]{1,8})\s*[-–—)\]]?"
    r"(?:\s*(?:of|/|von)\s*\d{1,4})?\s*(?:页|쪽|페이지)?"
)
_ROMAN = re.compile(r"c{0,3}(xc|xl|l?x{0,3})(ix|iv|v?i{0,3})")
_ROMAN_VALUES = {"i": 1, "v": 5, "x": 10, "l": 50, "c": 100}


def _edge_numbers(line: str, outermost: bool) -> tuple[list[int], bool]:
    """Numbers a header/footer line may show as its page number, and whether that is all it
    shows: a bare page number ("- 4 -", "Page 4 of 9", "iv"), else, on a page's first or last
    line, the first or last word of a short line ("12 CHAPTER 1. INTRODUCTION")."""
    text = line.strip().lower()
    if match := _PAGE_NUMBER.fullmatch(text):
        token = match.group(1)
        if token.isdigit():
            return [int(token)], True
        if _ROMAN.fullmatch(token):
            values = [_ROMAN_VALUES[c] for c in token]
            pairs = zip(values, [*values[1:], 0], strict=True)
            return [sum(-v if v < after else v for v, after in pairs)], True
        return [], False
    words = [w.strip("-–—()[]|") for w in text.split()]
    if not outermost or len(words) > 8:
        return [], False
    return [int(w) for w in {words[0], words[-1]} if w.isdigit() and len(w) <= 4], False


def _edges(page: list[str]) -> list[int]:
    """0-based indexes of the first and last NOISE_EDGE non-empty lines of a page."""
    filled = [i for i, line in enumerate(page) if line.strip()]
    return sorted(set(filled[:NOISE_EDGE] + filled[-NOISE_EDGE:]))


def noise_lines(pages: list[list[str]]) -> list[set[int]]:
    """Per page, the 1-based numbers of running-header, footer and page-number lines.

    Only the first and last NOISE_EDGE non-empty lines of a page are candidates. With digits
    masked, a candidate is noise when it
    - has a letter and sits at the edge of NOISE_SHARE of the pages (at least NOISE_MIN_PAGES);
    - is a bare page number equal to its page's number, or shows a page number (bare, or
      leading/trailing a short first or last line) that, with the same masked text, is at the
      same offset from the page index on NOISE_MIN_PAGES pages ("12 CHAPTER 1. INTRODUCTION").
    So a one-off line (a table's last figure, a "2 Methods" heading, code listing line 25) is
    never noise, and front matter numbered i, ii, iii and a body numbered from 1 both are.
    Linear in the number of lines.
    """
    edge_lines = []  # (page index, line index, masked text, page-number offsets, bare number)
    for p, page in enumerate(pages):
        edges = _edges(page)
        for i in (i for i in edges if len(page[i]) <= NOISE_MAX_CHARS):
            found, bare = _edge_numbers(page[i], i in (edges[0], edges[-1]))
            key = "#" if bare else " ".join(re.sub(r"\d+", "#", page[i].lower()).split())
            edge_lines.append((p, i, key, {n - p for n in found}, bare))
    key_pages = Counter(k for _, k in {(p, k) for p, _, k, _, _ in edge_lines})
    offset_pages = Counter(
        (k, o) for _, k, o in {(p, k, o) for p, _, k, s, _ in edge_lines for o in s}
    )
    repeated = max(NOISE_MIN_PAGES, NOISE_SHARE * len(pages))
    noise: list[set[int]] = [set() for _ in pages]
    for p, i, key, offsets, bare in edge_lines:
        numbered = any(
            offset_pages[key, o] >= NOISE_MIN_PAGES or (bare and o == 1) for o in offsets
        )
        if numbered or (key_pages[key] >= repeated and any(c.isalpha() for c in key)):
            noise[p].add(i + 1)
    return _keep_bodiless(pages, noise)


def _keep_bodiless(pages: list[list[str]], noise: list[set[int]]) -> list[set[int]]:
    """Noise is told from a body; when most pages with text have none (a 5,000-page form whose
    pages share their few lines took every line for a running header: 0 chunks), the "noise"
    of those pages is their content, so it is kept. Pages with a body keep their noise."""
    filled = [sum(1 for line in page if line.strip()) for page in pages]
    bodiless = [p for p, count in enumerate(filled) if count and len(noise[p]) == count]
    if len(bodiless) > BODILESS_SHARE * sum(1 for count in filled if count):
        for p in bodiless:
            noise[p] = set()
    return noise
