"""Hits: a line range of one page to cite, how chunks fold into one, and its text as read back.

Overlapping or adjacent chunks of one page (at most MERGE_GAP lines apart) merge into one hit
with the union of their lines, up to MAX_HIT_CHUNKS chunks; a hit's text is re-read from the
raw lines so it equals `read_range` of its line_start-line_end. When the merged lines hold more than
limits.MAX_HIT_CHARS, the hit narrows to a window of them that holds its best-ranked chunk
and, around it, most of the query's tokens (issue 26: an agent was shown the first 4,000
characters of a page, not the evidence). What found a hit (the query's words it holds, its
cosine with the query, whether that is weak evidence) is set by evidence.py.

Layer: query (below search.py, above fulltext.py).
"""

from __future__ import annotations

import sqlite3
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import fulltext
from common import limits

# ---------------------------------------------------------------------------
MAX_HIT_CHUNKS = 3  # chunks one hit joins: three of chunking.py's ~1,000-character chunks fit
# limits.MAX_HIT_CHARS, so a merged hit is rarely narrowed (three of code's 1,600 narrow, around
# the best-ranked one); seven once made a hit of a whole page
MERGE_GAP = 2  # chunks at most this many lines apart border each other: code's definitions
# are one or two blank lines apart (PEP 8), a document's chunks overlap or touch
MAX_MATCHED_TERMS = 10  # terms a hit's `matched` lists (its counts cover them all)
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Matched:
    """Which of the query's searchable terms (the lexical leg's tokens: a token, or an English
    word with its stem) a hit's chunks hold: `held` of `asked`, each shown as the query wrote
    it where one word gave it (`shown`)."""

    held: tuple[tuple[str, ...], ...]  # terms, in the query's order
    asked: tuple[tuple[str, ...], ...]  # every distinct term of the query (and its phrasings)
    shown: tuple[str, ...]  # held, as written: "Payments" for a stemmed "payment"

    def to_json(self) -> dict:
        return {"words": len(self.held), "of": len(self.asked),
                "terms": list(self.shown[:MAX_MATCHED_TERMS])}


@dataclass(eq=False)  # a hit is one place in a list of hits, not a value
class Hit:
    """One place to cite: a line range of one page, with how each leg ranked it."""

    chunk_id: str
    source: str
    page: int
    line_start: int
    line_end: int
    text: str
    score: float
    ranks: dict[str, int | None] = field(default_factory=dict)
    chunk_ids: list[str] = field(default_factory=list)
    cut: bool = False  # text was cut to limits.MAX_HIT_CHARS (exact mode) / MAX_LINE_CHARS
    best_lines: tuple[int, int] | None = None  # the best-ranked chunk's own lines (set here)
    merged_lines: tuple[int, int] | None = None  # set when the text shows only a window of them
    queries: list[int] | None = None  # with several phrasings: which ones found it (0-based)
    code: dict[str, str] = field(default_factory=dict)  # language, kind, symbol (code sources)
    similarity: float | None = None  # cosine with the query (vector leg); None without one
    matched: Matched | None = None  # set by evidence.py
    weak: bool = False  # no query word held and not close by meaning (evidence.py)

    def __post_init__(self) -> None:
        if self.best_lines is None:
            self.best_lines = (self.line_start, self.line_end)

    def to_json(self) -> dict:
        hit = {"chunk_id": self.chunk_id, "source": self.source, "page": self.page,
               "line_start": self.line_start, "line_end": self.line_end, "text": self.text,
               "score": round(self.score, 6), "ranks": self.ranks,
               "merged_chunk_ids": self.chunk_ids}
        if self.queries is not None:
            hit["queries"] = self.queries
        if self.matched is not None:
            hit["matched"] = self.matched.to_json()
        if self.similarity is not None:
            hit["similarity"] = round(self.similarity, 3)
        if self.weak:
            hit["weak"] = True
        hit.update(self.code)
        notes = []
        if self.merged_lines:
            first, last = self.merged_lines
            hit["merged_lines"] = [first, last]
            notes.append(f"the merged chunks' lines {first}-{last} hold more than "
                         f"{limits.MAX_HIT_CHARS:,} characters: line_start-line_end are the ones "
                         f"that match the query best; read_range(source, page, {first}, {last}) "
                         "returns them all")
        if self.cut:
            notes.append("text shortened; read_range(source, page, line_start, line_end) "
                         "returns the lines, and a long line's next_char_offset")
        if notes:
            hit["text_cut"] = "; ".join(notes)
        return hit


# ----------------------------------------------------------------------------- merging


def _touch(a: Hit, b: Hit) -> bool:
    reach = MERGE_GAP + 1
    return (a.source, a.page) == (b.source, b.page) and \
        b.line_start <= a.line_end + reach and a.line_start <= b.line_end + reach


def _fold(into: Hit, other: Hit) -> None:
    """`into` takes `other`'s lines, chunk ids, best rank per leg and best cosine."""
    into.line_start = min(into.line_start, other.line_start)
    into.line_end = max(into.line_end, other.line_end)
    into.chunk_ids += [c for c in other.chunk_ids if c not in into.chunk_ids]
    if into.queries is not None and other.queries is not None:
        into.queries = sorted(set(into.queries) | set(other.queries))
    if other.similarity is not None:
        into.similarity = max(into.similarity or other.similarity, other.similarity)
    for leg, rank in other.ranks.items():
        if rank is not None and (into.ranks.get(leg) is None or rank < into.ranks[leg]):
            into.ranks[leg] = rank


def _share(a: Hit, b: Hit) -> bool:
    return (a.source, a.page) == (b.source, b.page) and \
        b.line_start <= a.line_end and a.line_start <= b.line_end


def _chunks(hits: list[Hit]) -> int:
    return len({c for h in hits for c in h.chunk_ids})


def _free_run(held: list[Hit], new: Hit) -> tuple[int, int] | None:
    """The longest run of `new`'s lines that no hit of `held` holds (the first of equals)."""
    taken = {line for h in held for line in range(h.line_start, h.line_end + 1)}
    best, start = None, None
    for line in range(new.line_start, new.line_end + 2):
        if line <= new.line_end and line not in taken:
            start = line if start is None else start
        elif start is not None:
            if best is None or line - start > best[1] - best[0] + 1:
                best = (start, line - 1)
            start = None
    return best


def merge_into(hits: list[Hit], new: Hit) -> bool:
    """Fold `new` into the kept hits of its page that share or border its lines; True when
    `new` needs no hit of its own.

    The kept hits that share a line with `new` must join it, or no two hits could be kept
    apart: when that makes more than MAX_HIT_CHUNKS chunks nothing folds, and `new` keeps
    only its longest run of lines no kept hit holds (those are cited there), as a hit of its
    own, or is dropped when it has none. Hits that only border the joined lines (1-100 grown
    to 117 beside 117-131) join them while the chunks stay within the bound, best-ranked
    first. The best-ranked of the joined hits (kept hits rank above `new`) takes the others.
    """
    group = [new, *(h for h in hits if _share(h, new))]
    if _chunks(group) > MAX_HIT_CHUNKS:
        run = _free_run(group[1:], new)
        if run is None:
            return True
        new.line_start, new.line_end = new.best_lines = run
        group = [new]
    span = Hit("", new.source, new.page, min(h.line_start for h in group),
               max(h.line_end for h in group), "", 0.0)
    while (more := next((h for h in hits if h not in group and _touch(h, span)
                         and _chunks([*group, h]) <= MAX_HIT_CHUNKS), None)):
        group.append(more)
        span.line_start, span.line_end = (min(span.line_start, more.line_start),
                                          max(span.line_end, more.line_end))
    if len(group) == 1:
        return False
    keep, *rest = sorted(group[1:], key=hits.index)
    for other in [new, *rest]:
        _fold(keep, other)
        if other is not new:
            hits.remove(other)
    return True


# ----------------------------------------------------------------------------- text


def with_text(conn: sqlite3.Connection, hits: list[Hit], query: str,
              tokenize: Callable[[str], list[str]]) -> list[Hit]:
    """Each hit's text re-read from its raw lines, so it matches `read_range` exactly: merged
    hits span several chunks, and a piece of an over-long line is cited as the whole line.
    Lines are cut to limits.MAX_LINE_CHARS as read_range cuts them; a hit whose lines hold
    more than MAX_HIT_CHARS narrows to its best window (the query is tokenized only then)."""
    wanted: set[str] | None = None
    for hit in hits:
        pieces = fulltext.read_lines(conn, hit.source, hit.page, hit.line_start, hit.line_end,
                                     width=limits.MAX_LINE_CHARS + 1)
        shown = [limits.cut(p.text, limits.MAX_LINE_CHARS) for p in pieces]
        lines = [text for text, _ in shown]
        if len("\n".join(lines)) > limits.MAX_HIT_CHARS:
            wanted = set(tokenize(query)) if wanted is None else wanted
            first, last = _window(lines, [p.line for p in pieces], hit.best_lines, wanted,
                                  tokenize)
            hit.merged_lines = (hit.line_start, hit.line_end)
            hit.line_start, hit.line_end = pieces[first].line, pieces[last].line
            lines, shown = lines[first:last + 1], shown[first:last + 1]
        hit.text = "\n".join(lines)
        hit.cut = any(was_cut for _, was_cut in shown)
    return _with_code(conn, hits, query, tokenize)


def _with_code(conn: sqlite3.Connection, hits: list[Hit], query: str,
               tokenize: Callable[[str], list[str]]) -> list[Hit]:
    """A hit on source code names its best chunk's language, kind and symbol path
    (codechunks.py keeps them in the chunk's context; of a chunk that packs several, the
    one the query's words are in); other hits are left as they are."""
    ids = [h.chunk_id for h in hits if not h.chunk_id.startswith("line:")]
    if not ids:
        return hits
    import codechunks
    marks = ",".join("?" * len(ids))
    rows = {row[0]: row[1:] for row in conn.execute(
        "SELECT c.chunk_id, s.parser, c.context FROM chunks c JOIN sources s"
        f" ON s.id = c.source_id WHERE c.chunk_id IN ({marks}) AND s.parser LIKE 'code:%'",
        ids)}
    wanted = frozenset(tokenize(query)) if rows else frozenset()
    for hit in hits:
        if hit.chunk_id in rows:
            hit.code = codechunks.hit_fields(*rows[hit.chunk_id], hit.text, wanted, tokenize)
    return hits


def _window(lines: list[str], numbers: list[int], best: tuple[int, int], wanted: set[str],
            tokenize: Callable[[str], list[str]]) -> tuple[int, int]:
    """The indexes (first, last) of the consecutive lines, within MAX_HIT_CHARS joined, that
    hold the most lines of the best-ranked chunk (what the ranking chose, whole: a chunk is
    well within the budget), then the most distinct query tokens, then the most of them, then
    come first. Tokens first once cut a definition's line away from the name asked for, to
    show the lines below that repeat the name's words.

    Only windows as long as the budget allows are weighed, by two pointers: a line is at most
    MAX_LINE_CHARS plus the cut mark, which fits MAX_HIT_CHARS, so every window holds one."""
    matched = [[t for t in tokenize(line) if t in wanted] for line in lines]
    in_best = [0]  # in_best[i]: how many of lines[:i] the best-ranked chunk holds
    for n in numbers:
        in_best.append(in_best[-1] + (best[0] <= n <= best[1]))
    counts: Counter[str] = Counter()
    score, choice, last, size = None, (0, 0), -1, -1  # size: chars of lines first..last joined
    for first in range(len(lines)):
        while last + 1 < len(lines) and size + 1 + len(lines[last + 1]) <= limits.MAX_HIT_CHARS:
            last += 1
            size += 1 + len(lines[last])
            counts.update(matched[last])
        key = (in_best[last + 1] - in_best[first], len(+counts), counts.total())
        if score is None or key > score:
            score, choice = key, (first, last)
        counts.subtract(matched[first])
        size -= 1 + len(lines[first])
    return choice
