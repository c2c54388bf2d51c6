"""BM25 over fulltext.sqlite3 in numpy: each term's chunk rowids and counts as arrays (written
by bm25_segments.py), scored whole in a few vectorised steps.

Why not FTS5's bm25(): it scores every match through its auxiliary-function API, about 5 us a
posting, so an English claim at 100,000 chunks (15 terms, ~100,000 postings) took 0.5 s and a
million chunks would take seconds. Here the same postings are a few blob reads and ~10 array
operations. The formula is FTS5's own (k1 = 1.2, b = 0.75, its idf floored at 1e-6), over the
same tokens, so every chunk gets the score bm25() gives it: nothing is pruned, and the tests
compare both on real documents. chunks_fts stays as it was: it answers while this index is not
current (chunks still queued, an index older than these tables opened read-only).

Layer: storage: the lexical leg's scoring inside fulltext.sqlite3, above bm25_segments.py
(the postings it reads).
"""

from __future__ import annotations

import math
import sqlite3
import threading
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from common.limits import MAX_QUERY_TOKENS
from index import segment
from index.bm25_segments import (
    FLUSH_MIN,
    GENERATION_KEY,
    ID,
    LEN,
    QUEUED_TOKENS,
    TF,
    dead_rowids,
    kept,
)

# ---------------------------------------------------------------------------
K1, B = 1.2, 0.75  # FTS5's bm25() constants
MIN_IDF = 1e-6  # FTS5 floors a non-positive idf here
PRUNE_MIN_CHUNKS = 1000  # from this many chunks on, tokens in half the chunks are dropped
OVERLAY_MAX = 4 * FLUSH_MIN  # queued chunks a query reads itself; more: chunks_fts answers
FLOOR_MIN_POSTINGS = 10_000  # a term's postings worth looking for a top-k floor before
# ---------------------------------------------------------------------------


# reading: the segments' figures (cached per generation), the queue, then one query


@dataclass(frozen=True)
class _Figures:
    """What every query needs besides its terms' postings: the segments' live chunk lengths
    by rowid (-1: none), their count and token total, and each segment's dead rowids."""
    lengths: np.ndarray
    chunks: int
    tokens: float
    shortest: float  # the fewest tokens a chunk holding any has
    dead: dict

    def live(self, rowids: np.ndarray) -> np.ndarray:
        """Those of `rowids` that have live postings in a segment."""
        inside = rowids[rowids < len(self.lengths)]
        return inside[self.lengths[inside] >= 0]


_figures_cache: dict[tuple[str, str], _Figures] = {}
_figures_lock = threading.Lock()


def _figures(conn: sqlite3.Connection, generation: str) -> _Figures:
    path = conn.execute("PRAGMA database_list").fetchone()[2]
    key = (path, generation)
    figures = _figures_cache.get(key)
    if figures is not None:
        return figures
    dead = dead_rowids(conn)
    ids, lens = [], []
    for seg, blob, lblob in conn.execute("SELECT seg, ids, lens FROM bm25_segments"):
        keep = kept(np.frombuffer(blob, ID), dead.get(seg))
        ids.append(np.frombuffer(blob, ID)[keep])
        lens.append(np.frombuffer(lblob, LEN)[keep])
    all_ids = np.concatenate(ids) if ids else np.zeros(0, ID)
    all_lens = np.concatenate(lens).astype(np.float64) if lens else np.zeros(0)
    lengths = np.full(int(all_ids.max()) + 1 if len(all_ids) else 0, -1.0)
    lengths[all_ids] = all_lens
    shortest = float(all_lens[all_lens > 0].min()) if (all_lens > 0).any() else 1.0
    figures = _Figures(lengths, len(all_ids), float(all_lens.sum()), shortest, dead)
    with _figures_lock:  # one KB at a time changes; older generations go
        for old in [k for k in _figures_cache if k[0] == path]:
            del _figures_cache[old]
        _figures_cache[key] = figures
    return figures


class Scores(Mapping):
    """BM25 of every matching chunk by rowid, held as two arrays: a dict of 100,000 matches
    cost more to build than the scoring itself."""

    def __init__(self, ids: np.ndarray, values: np.ndarray):
        """`ids` sorted and distinct, `values` theirs."""
        self.ids, self.values = ids, values

    @classmethod
    def from_pairs(cls, pairs: Sequence[tuple[int, float]]) -> Scores:
        ids = np.array([p[0] for p in pairs], np.int64)
        order = np.argsort(ids)
        return cls(ids[order], np.array([p[1] for p in pairs], np.float64)[order])

    def __getitem__(self, rowid: int) -> float:
        at = int(np.searchsorted(self.ids, rowid))
        if at < len(self.ids) and self.ids[at] == rowid:
            return float(self.values[at])
        raise KeyError(rowid)

    def __len__(self) -> int:
        return len(self.ids)

    def __iter__(self) -> Iterator[int]:
        return iter(self.ids.tolist())

    def top(self, n: int) -> list[tuple[int, float]]:
        """The n best (rowid, score), best first; ties by rowid, as FTS5 returns them."""
        if n <= 0:
            return []
        if n < len(self.values):
            keep = np.argpartition(-self.values, n - 1)[:n]
            cut = self.values[keep].min()  # keep every tie at the cut, then order
            keep = np.flatnonzero(self.values >= cut)
        else:
            keep = np.arange(len(self.values))
        keep = keep[np.lexsort((self.ids[keep], -self.values[keep]))][:n]
        return list(zip(self.ids[keep].tolist(), self.values[keep].tolist(), strict=True))


def scores(conn: sqlite3.Connection, query_tokens: Sequence[str],
           allowed: np.ndarray | None = None) -> Ranking | Scores | None:
    """The matching chunks' BM25 (only rowids in `allowed`, when given) as a Ranking, or None
    when this index cannot answer (an index from before these tables, or more than
    OVERLAY_MAX chunks queued, which only a writer stopped mid-flush leaves): chunks_fts
    answers then.

    Queued chunks are scored from their stored tokens and their segment postings ignored, so
    what a writer committed counts at once. As bm25() would, over the terms `choose_terms`
    keeps (no common ones on a large index, at most MAX_QUERY_TOKENS).
    """
    try:
        queued = np.array([r[0] for r in conn.execute(
            "SELECT id FROM bm25_queue LIMIT ?", (OVERLAY_MAX + 1,))], np.int64)
        row = conn.execute("SELECT value FROM meta WHERE key = ?", (GENERATION_KEY,)).fetchone()
    except sqlite3.OperationalError:  # an index from before these tables, opened read-only
        return None
    if len(queued) > OVERLAY_MAX:
        return None
    figures = _figures(conn, row[0] if row else "")
    fresh = _queued_words(conn, queued)
    stale = figures.live(queued)  # queued chunks whose segment postings no longer count
    chunks = figures.chunks - len(stale) + len(fresh)
    tokens = figures.tokens - figures.lengths[stale].sum() + sum(map(len, fresh.values()))
    terms = list(dict.fromkeys(t for t in query_tokens if t))
    if not terms or not chunks:
        return Scores.from_pairs([])
    average = tokens / chunks
    shortest = min([figures.shortest, *(len(w) for w in fresh.values() if w)])
    found = []
    bounds = _count_bounds(conn, figures, stale, fresh)
    exact = _count_exact(conn, figures, stale, fresh)
    chosen = choose_terms(terms, chunks, bounds, exact)
    postings = _postings(conn, chosen, figures, stale, fresh)
    held = _word_counts({term: len(ids) for term, (ids, _) in postings.items()},
                        segment.word_forms(query_tokens), bounds, exact)
    for term, (ids, tfs) in postings.items():
        idf = max(math.log((chunks - held[term] + 0.5) / (held[term] + 0.5)), MIN_IDF)
        if allowed is not None:
            keep = np.isin(ids, allowed)
            ids, tfs = ids[keep], tfs[keep]
        if len(ids):
            most = float(tfs.max())  # no chunk gets more from this term than most/shortest do
            bound = idf * most * (K1 + 1) / (most + K1 * (1 - B + B * shortest / average))
            found.append(_Term(ids, tfs, idf, bound * (1 + 1e-6)))
    return Ranking(found, _with_queued(figures.lengths, fresh), average, chunks)


@dataclass(frozen=True)
class _Term:
    """One query term: its chunks' rowids (ascending) and counts, its idf, and the most it
    adds to any chunk's score."""
    ids: np.ndarray
    tfs: np.ndarray
    idf: float
    bound: float


class Ranking(Mapping):
    """The matching chunks' BM25 by rowid, scored only as far as a question needs.

    `top(n)` is MaxScore (Turtle and Flood): terms are added strongest first into one array
    by rowid until the terms left could not lift a chunk not yet touched to the n-th best
    full score seen so far; those terms are then only looked up for the touched chunks that
    can still reach it (a floor is only sought before a term with FLOOR_MIN_POSTINGS: below
    that, adding the term costs less). At a million chunks the benchmark's questions fully
    score a median 0.4% of their matching chunks. Nothing that could be among the n best is
    skipped, and every path adds the same terms' shares in the same order, so `top(n)` is
    the unpruned list to the last bit (tests compare both). `ranking[rowid]` looks one chunk
    up; iterating scores them all.
    """

    def __init__(self, terms: list[_Term], lengths: np.ndarray, average: float, chunks: int):
        self.terms = sorted(terms, key=lambda t: -t.bound)
        self.lengths, self.average, self.chunks = lengths, average, chunks
        bounds = [t.bound for t in self.terms]
        self.rest = [*np.cumsum(bounds[::-1])[::-1].tolist(), 0.0]  # terms i.. add at most
        self._tops: dict[int, list[tuple[int, float]]] = {}
        self._every: Scores | None = None

    def top(self, n: int) -> list[tuple[int, float]]:
        """The n best (rowid, score), best first; ties by rowid, as FTS5 returns them."""
        if n not in self._tops:
            self._tops[n] = self.reaching(n).top(n) if n > 0 else []
        return self._tops[n]

    def reaching(self, n: int | None) -> Scores:
        """The full scores of every chunk that can be among the n best (of all when None)."""
        if not self.terms:
            return Scores(np.zeros(0, np.int64), np.zeros(0))
        size = int(max(t.ids[-1] for t in self.terms)) + 1
        partial, best = np.zeros(size), np.zeros(0, ID)
        floor, added, touched = 0.0, 0, 0  # floor: an n-th best full score seen
        while added < len(self.terms) and (n is None or self.rest[added] >= floor):
            term = self.terms[added]
            partial[term.ids] += self._share(term, slice(None))
            added, touched = added + 1, touched + len(term.ids)
            if n is not None and added < len(self.terms) and \
                    len(self.terms[added].ids) > FLOOR_MIN_POSTINGS:  # worth skipping
                best, floor = self._floor(partial, best, term.ids, added, n, floor)
        if touched < size // 16:
            ids = np.unique(np.concatenate([t.ids for t in self.terms[:added]]))
        else:  # most chunks touched: a pass over the array is cheaper than a sort
            ids = np.flatnonzero(partial).astype(ID)  # every share is above 0
        values = partial[ids]
        if added < len(self.terms):
            can = values + self.rest[added] >= floor
            ids, values = ids[can], self._finished(values[can], ids[can], added)
        return Scores(ids.astype(np.int64), values)

    def as_documents(self, groups: Sequence[Sequence[int]], average: float) -> np.ndarray:
        """BM25 of each group of chunks (rowids) scored as one document: each term's counts
        and the chunks' lengths summed over the group, `average` the length of such a
        document, the terms' idf the chunks'. What a page says as a whole, from the postings
        already read."""
        sizes = [len(group) for group in groups]
        flat = np.fromiter((r for group in groups for r in group), np.int64, sum(sizes))
        owner = np.repeat(np.arange(len(groups)), sizes)
        known = flat < len(self.lengths)
        flat, owner = flat[known], owner[known]
        lengths = np.bincount(owner, self.lengths[flat].clip(0), minlength=len(groups))
        norm = K1 * (1 - B + B * lengths / average)
        scores = np.zeros(len(groups))
        for term in self.terms:
            hit, at = _holding(term, flat)
            tfs = np.bincount(owner[hit], term.tfs[at].astype(np.float64), minlength=len(groups))
            scores += term.idf * tfs * (K1 + 1) / (tfs + norm)
        return scores

    def _share(self, term: _Term, at) -> np.ndarray:
        """What `term` adds to the chunks at positions `at` of its postings."""
        tfs = term.tfs[at].astype(np.float64)
        norm = K1 * (1 - B + B * self.lengths[term.ids[at]] / self.average)
        return term.idf * tfs * (K1 + 1) / (tfs + norm)

    def _finished(self, partial: np.ndarray, ids: np.ndarray, start: int) -> np.ndarray:
        """Full scores of chunks `ids` (ascending) from their scores over terms[:start]."""
        full = partial.copy()
        for term in self.terms[start:]:
            hit, at = _holding(term, ids)
            full[hit] += self._share(term, at)
        return full

    def _floor(self, partial: np.ndarray, best: np.ndarray, touched: np.ndarray, added: int,
               n: int, floor: float) -> tuple[np.ndarray, float]:
        """The 2n chunks with the best partial scores (those of `best` and of the term just
        added, whose chunks alone changed), and the n-th best of their full scores: a real
        score, so the final n-th best is at least that."""
        if len(touched) > 2 * n:
            touched = touched[np.argpartition(-partial[touched], 2 * n - 1)[:2 * n]]
        best = np.union1d(best, touched)
        if len(best) > 2 * n:
            best = np.sort(best[np.argpartition(-partial[best], 2 * n - 1)[:2 * n]])
        if len(best) < n:
            return best, floor
        full = self._finished(partial[best], best, added)
        return best, max(floor, float(np.partition(full, len(full) - n)[len(full) - n]))

    def _all(self) -> Scores:
        if self._every is None:
            self._every = self.reaching(None)
        return self._every

    def __getitem__(self, rowid: int) -> float:
        score = self.many([rowid]).get(rowid)
        if score is None:
            raise KeyError(rowid)
        return score

    def many(self, rowids: Iterable[int]) -> dict[int, float]:
        """The scores of those of `rowids` that hold a query term, looked up in one pass per
        term (the vector leg's 50 finds one at a time cost auto ~7 ms at 30,000 chunks)."""
        ids = np.unique(np.fromiter((r for r in rowids if 0 <= r < 2 ** 32), np.int64))
        if not len(ids):
            return {}
        full = self._finished(np.zeros(len(ids)), ids.astype(ID), 0)
        held = full > 0  # every share is above 0: a chunk holding no term scores 0
        return dict(zip(ids[held].tolist(), full[held].tolist(), strict=True))

    def __len__(self) -> int:
        return len(self._all())

    def __iter__(self) -> Iterator[int]:
        return iter(self._all())


def _holding(term: _Term, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Which of chunks `ids` hold `term` (a mask), and where in its postings they are."""
    at = np.searchsorted(term.ids, ids)
    at[at == len(term.ids)] = 0
    hit = term.ids[at] == ids
    return hit, at[hit]


def _with_queued(lengths: np.ndarray, fresh: dict[int, list[str]]) -> np.ndarray:
    """Chunk lengths by rowid with the queued chunks' own (a copy only when any are queued)."""
    if not fresh:
        return lengths
    rowids = np.array(list(fresh), np.int64)
    out = np.full(max(len(lengths), int(rowids.max()) + 1), -1.0)
    out[:len(lengths)] = lengths
    out[rowids] = [len(words) for words in fresh.values()]
    return out


def _queued_words(conn: sqlite3.Connection, queued: np.ndarray) -> dict[int, list[str]]:
    """rowid -> tokens of the queued chunks that exist (deleted ones are only queued)."""
    if not len(queued):
        return {}
    return {rowid: text.split() for rowid, text in conn.execute(QUEUED_TOKENS + ")")}


def choose_terms(terms: list[str], chunks: int, bounds: Callable[[list[str]], tuple],
                 exact: Callable[[list[str]], dict[str, int]] | None = None) -> list[str]:
    """The query terms BM25 scores, by each term's count of live chunks (the one rule, for
    these arrays and for FTS5's fallback alike).

    From PRUNE_MIN_CHUNKS chunks on, a term in half the chunks or more is dropped: its idf
    is floored at 1e-6, so it changes no ranking but touches nearly every chunk ("the",
    "what"); a query made only of such terms keeps them all. Then at most MAX_QUERY_TOKENS
    terms count, the rarest that some chunk holds: a pasted page is scored on the terms that
    carry nearly all of BM25's weight, at a bounded cost. A small index with a short query
    keeps every term.

    `bounds(terms)` gives each term's (low, high) count cheaply; `exact(terms)` counts
    exactly (None: the bounds are exact) and is asked only where the bounds leave a choice
    open. Stored arrays hold the postings of edited chunks until a merge drops them: counted
    as live, an edited word looked common and was dropped (issue 25).
    """
    if chunks < PRUNE_MIN_CHUNKS and len(terms) <= MAX_QUERY_TOKENS:
        return terms
    low, high = bounds(terms)
    # a term no chunk holds scores nothing, yet it is the "rarest" and not common: a query's
    # words as written (segment.query_tokens) that only code chunks hold would crowd the
    # stems out of an index of prose, or keep a query of common words from being scored
    terms = [t for t in terms if high[t] > 0]

    def settle(some: list[str]) -> None:
        unsure = [t for t in some if low[t] != high[t]]
        if unsure and exact is not None:
            counted = exact(unsure)
            low.update(counted)
            high.update(counted)

    if chunks >= PRUNE_MIN_CHUNKS:
        settle([t for t in terms if 2 * low[t] < chunks <= 2 * high[t]])
        terms = [t for t in terms if 2 * low[t] < chunks] or terms
    if len(terms) > MAX_QUERY_TOKENS:  # only a term that may be among the rarest is settled
        cut = sorted(high[t] for t in terms)[MAX_QUERY_TOKENS - 1]
        settle([t for t in terms if low[t] <= cut])
    # a settled term whose postings are all dead (a re-tokenized chunk's old word) is held by
    # no chunk either: the rarest by its count, it would take a place of the terms that are
    return [t for t in sorted(terms, key=low.__getitem__) if high[t] > 0][:MAX_QUERY_TOKENS]


def _word_counts(counts: dict[str, int], forms: dict[str, str],
                 bounds: Callable[[list[str]], tuple],
                 exact: Callable[[list[str]], dict[str, int]]) -> dict[str, int]:
    """Each term's chunk count for its idf: with an English word's other form's added (a
    prose chunk holds its stem, a code chunk the word as written), so the word is as rare in
    either: counted apart, `invoice` in two code files outweighed the stem in 60 notes, and
    a question in a KB of docs and code ranked the code first. The other form is counted
    exactly where its arrays hold dead rowids: by their sizes alone, a KB re-tokenized to
    stems still counted every prose chunk's old word as written until a merge, and ranked
    otherwise than a fresh index (SciFact test 0.677 against 0.678)."""
    missing = [other for term, other in forms.items() if term in counts and other not in counts]
    extra: dict[str, int] = {}
    if missing:
        low, high = bounds(missing)
        unsure = [term for term in missing if low[term] != high[term]]
        extra = {**high, **exact(unsure)} if unsure else high
    return {term: n + counts.get(forms.get(term, ""), extra.get(forms.get(term, ""), 0))
            for term, n in counts.items()}


def _term_rows(conn: sqlite3.Connection, select: str, terms: list[str]) -> Iterator[tuple]:
    """`SELECT ... FROM bm25_postings WHERE term IN (terms)`, in parts of 500 terms
    (SQLite's bound-parameter limit)."""
    for start in range(0, len(terms), 500):
        part = terms[start:start + 500]
        yield from conn.execute(f"SELECT {select} FROM bm25_postings WHERE term IN"
                                f" ({','.join('?' * len(part))})", part)


def _queued_counts(terms: list[str], fresh: dict[int, list[str]]) -> Counter:
    """How many queued chunks hold each term (their own tokens count, not their postings)."""
    wanted = set(terms)
    return Counter(t for words in fresh.values() for t in wanted.intersection(words))


def _count_bounds(conn: sqlite3.Connection, figures: _Figures, stale: np.ndarray,
                  fresh: dict[int, list[str]]) -> Callable[[list[str]], tuple]:
    """Each term's live chunk count from its stored arrays' sizes, without reading them:
    exact for a segment with no dead rowids (and nothing queued), else between its size less
    the rowids that may be dropped and its size."""
    def bounds(terms: list[str]) -> tuple[dict[str, int], dict[str, int]]:
        queued = _queued_counts(terms, fresh)
        low, high = dict(queued), dict(queued)
        for term in terms:
            low.setdefault(term, 0)
            high.setdefault(term, 0)
        for term, seg, size in _term_rows(conn, "term, seg, length(ids)", terms):
            n = size // ID.itemsize
            dead = figures.dead.get(seg)
            low[term] += n - min(n, (0 if dead is None else len(dead)) + len(stale))
            high[term] += n
        return low, high
    return bounds


def _count_exact(conn: sqlite3.Connection, figures: _Figures, stale: np.ndarray,
                 fresh: dict[int, list[str]]) -> Callable[[list[str]], dict[str, int]]:
    """Each term's live chunk count, from its arrays as the scores read them."""
    def exact(terms: list[str]) -> dict[str, int]:
        counts = dict.fromkeys(terms, 0)
        counts.update(_queued_counts(terms, fresh))
        for term, seg, blob in _term_rows(conn, "term, seg, ids", terms):
            ids = np.frombuffer(blob, ID)
            counts[term] += len(ids[kept(ids, figures.dead.get(seg), stale)])
        return counts
    return exact


def _postings(conn: sqlite3.Connection, terms: list[str], figures: _Figures,
              stale: np.ndarray, fresh: dict[int, list[str]]) -> dict[str, tuple]:
    """(rowids ascending, term counts) of each term's chunks: the segments' live postings but
    the `stale` ones, then the queued chunks' own tokens."""
    pieces: dict[str, list[tuple]] = defaultdict(list)
    for term, seg, blob, tblob in _term_rows(conn, "term, seg, ids, tfs", terms):
        ids = np.frombuffer(blob, ID)
        keep = kept(ids, figures.dead.get(seg), stale)
        pieces[term].append((ids[keep], np.frombuffer(tblob, TF)[keep]))
    wanted, queued = set(terms), defaultdict(list)
    for rowid, words in sorted(fresh.items()):
        for term in wanted.intersection(words):
            queued[term].append((rowid, min(words.count(term), 65535)))
    for term, rows in queued.items():
        pieces[term].append(tuple(np.array(column, dtype) for column, dtype
                                  in zip(zip(*rows, strict=True), (ID, TF), strict=True)))
    return {term: joined for term, parts in pieces.items()
            if len((joined := _ascending(parts))[0])}


def _ascending(pieces: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """A term's pieces (each in rowid order) as one pair of arrays in rowid order: laid end to
    end by their first rowids, sorted only where pieces' rowids interleave (a segment merged
    after chunks were re-tokenized, queued chunks)."""
    pieces = sorted((p for p in pieces if len(p[0])), key=lambda p: int(p[0][0]))
    if not pieces:
        return np.zeros(0, ID), np.zeros(0, TF)
    ids = np.concatenate([p[0] for p in pieces])
    tfs = np.concatenate([p[1] for p in pieces])
    if any(a[0][-1] >= b[0][0] for a, b in zip(pieces, pieces[1:], strict=False)):
        order = np.argsort(ids, kind="stable")
        ids, tfs = ids[order], tfs[order]
    return ids, tfs
