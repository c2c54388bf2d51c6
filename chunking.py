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
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import PurePosixPath

from fulltext import Chunk

# ---------------------------------------------------------------------------
TARGET_CHARS = 1000  # a chunk is closed once it holds this many characters
MAX_CHARS = 1200  # ... and never grows past this (except by the overlap line)
OVERLAP_LINES = 1  # lines repeated at the start of the next chunk
NOISE_EDGE = 3  # non-empty lines at the top and at the bottom of a page that may be noise
NOISE_SHARE = 0.3  # a running header/footer is at the edge of at least this share of pages...
NOISE_MIN_PAGES = 3  # ...and of at least this many pages
NOISE_MAX_CHARS = 300  # a longer line is body, never a header (and is not scanned for one)
BODILESS_SHARE = 0.5  # when more pages than this share are all noise, their noise is content
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


SHEET_MARKERS = ("[sheet] ", "[hidden sheet] ")  # extract.py's first line of a spreadsheet page


def page_context(lines: Sequence[str]) -> tuple[str, int]:
    """(context, its last line) that every chunk of the page should carry to read on its own.

    A spreadsheet page's chunks repeat the sheet name and the header row (its first non-empty
    row), so a chunk of rows 200-240 still says what its columns are. The context is searched
    and embedded with the chunk, but is not part of its text: the text stays exactly its lines.
    """
    if not lines or not lines[0].startswith(SHEET_MARKERS):
        return "", 0
    header = next((n for n in range(2, len(lines) + 1) if lines[n - 1].strip()), 0)
    return ("\n".join([lines[0], lines[header - 1]]) if header else lines[0]), max(header, 1)


def chunk_page(source: str, page: int, lines: Sequence[str], noise: set[int],
               tokenize: Callable[[str], list[str]]) -> list[Chunk]:
    """Every chunk of one page, in line order."""
    chunks: list[Chunk] = []
    context, context_end = page_context(lines)
    for run in _runs(lines, noise):
        for group in _line_groups(run, lines):
            keep = len(group)
            while keep > 1 and not lines[group[keep - 1] - 1].strip():
                keep -= 1
            group = group[:keep]
            first, last = group[0], group[-1]
            if first == last and len(lines[first - 1]) > MAX_CHARS:
                texts = _split_long_line(lines[first - 1])
            else:
                texts = ["\n".join(lines[first - 1:last])]
            extra = context if first > context_end else ""
            for text in texts:
                if text.strip():
                    searchable = f"{extra}\n{text}" if extra else text
                    tokens = " ".join(tokenize(bm25_text(source, extra, text)))
                    chunks.append(Chunk(chunk_id(source, page, first, searchable), page, first,
                                        last, text, tokens, extra))
    return _dedupe(chunks)


def _dedupe(chunks: list[Chunk]) -> list[Chunk]:
    """Two pieces with the same text at the same line would share an id; keep the first."""
    seen: set[str] = set()
    unique = []
    for chunk in chunks:
        if chunk.chunk_id not in seen:
            seen.add(chunk.chunk_id)
            unique.append(chunk)
    return unique


def chunk_pages(source: str, pages: Sequence[Sequence[str]], noise: Sequence[set[int]],
                tokenize: Callable[[str], list[str]]) -> list[Chunk]:
    """Every chunk of a document, pages in order (page numbers are 1-based)."""
    return [chunk for number, (lines, page_noise) in enumerate(zip(pages, noise, strict=True), 1)
            for chunk in chunk_page(source, number, lines, page_noise, tokenize)]


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
