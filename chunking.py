"""Chunking: pages of raw lines into runs of whole lines an agent can cite.

A chunk never crosses a page and never includes a noise line (running header, footer, page
number): noise splits a page into runs, and each run is cut into chunks of about
TARGET_CHARS characters, the next chunk repeating the previous chunk's last line so a
sentence cut at a boundary is whole in one of them. A single line longer than MAX_CHARS is
split into pieces that all carry its line number. A chunk's text is exactly its lines joined
by newlines (or, for a piece of a long line, a substring of that line).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Sequence
from pathlib import PurePosixPath

from fulltext import Chunk

# ---------------------------------------------------------------------------
TARGET_CHARS = 1000  # a chunk is closed once it holds this many characters
MAX_CHARS = 1200  # ... and never grows past this (except by the overlap line)
OVERLAP_LINES = 1  # lines repeated at the start of the next chunk
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
