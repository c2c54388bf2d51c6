"""Hybrid search over one knowledge base: a BM25 leg, a vector leg, fusion, merged hits.

Reads `fulltext.sqlite3` (read-only) and the KB's Chroma collection; writes nothing.

- BM25 leg: FTS5's formula over segmented tokens, scored from bm25.py's arrays
  (fulltext.bm25_all): the top CANDIDATES by MaxScore, any other chunk looked up.
- Vector leg: the KB's embedder over Chroma (library.py embeds the query before it takes the
  KB's lock, `query_vector`, and passes the vector in); a vector hit that SQLite does not hold as an
  indexed chunk is dropped (SQLite is the record, Chroma may lag behind it). Narrowed to some
  sources (`source`, filters.py), both legs look only at theirs, before ranking.
- Fusion, chosen per KB (`search` block of config.json, kb.search_settings): fusion.py's
  `convex`, `minmax` or `rrf` over every candidate of either leg.
- Overlapping or adjacent chunks of one page merge into one hit (hits.py), and no single
  source fills the whole top 5 while another source scores close.
- Document-aware (`auto`): each chunk's score is blended with how well its source's file name
  matches the question (titles.py), so the right filing among look-alikes comes first.
- Code locality (`auto`): a code chunk gains from its neighbours' scores (neighbours.py).
- Definitions first (`auto`): a query that is one name (`parse_http`, `Parser.parse`) gets
  the code chunks that define it at the top (definitions.py, the rule `exact` uses for lines).
- `exact` mode: raw lines containing the query as a substring (names, codes, numbers).

Layer: query: the two legs, their fusion (fusion.py) and merged hits; above storage, below
the server.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager, suppress
from functools import lru_cache

import fulltext
from common import limits
from index import doc_language, exact, query_sql, states
from ranking import definitions, evidence, filters, neighbours, titles, units
from ranking.fusion import RRF_K, Candidate, fuse, mark_foreign
from ranking.hits import Hit, merge_into, with_text
from ranking.request import DEFAULT_SETTINGS, SearchRequest, SearchSettings

# ---------------------------------------------------------------------------
CANDIDATES = 50  # chunks taken from each leg before fusion
DIVERSITY_TOP = 5  # in the first 5 hits ...
DIVERSITY_MAX_PER_SOURCE = 4  # ... at most 4 from one source, if another scores close
DIVERSITY_CLOSE = 0.5  # "close" = at least this share of the best score
MMR_POOL = 3  # with `diversity`, hits considered per hit returned
SAME_SOURCE_LIKENESS = 0.5  # with `diversity`, two hits of one source are at least this alike
EXACT_LINES = 200  # matching lines `exact` reads a query, so a definition far down is in them
DEFINER_LINES = 5000  # lines holding a name `auto` reads for its definitions (all 2,115
# holding `text` in the code bench's 116,000 lines: 4 ms) ...
MAX_DEFINERS = 20  # ... and the defining lines whose chunks it adds to the legs' candidates
DEFINER_WIDTH = 300  # characters of each such line read: a declaration starts its line
# a search narrowed to sources with at most this many embedded chunks scores each of them
# (their stored vectors): Chroma's filtered HNSW search missed chunks of a small allowed set
EXACT_VECTOR_CHUNKS = 10_000
QUERY_TOKENS_KEPT = 64  # questions whose tokens a Searcher keeps
# ---------------------------------------------------------------------------


_vector_threads = ThreadPoolExecutor(4, "linecite-vector-leg")  # threads start on first use


class VectorLegError(RuntimeError):
    """The embedder or the vector store failed on a query; `auto` then answers from BM25."""


class StoreChanging(VectorLegError):
    """The vector store failed twice because a write elsewhere changed it under the query;
    the message is one plain sentence for the agent, with nothing of Chroma's in it."""


@contextmanager
def _vector_failures() -> Iterator[None]:
    """Any failure of the embedder or the store (unreachable, broken) as a VectorLegError."""
    try:
        yield
    except Exception as err:
        raise VectorLegError(f"{type(err).__name__}: {str(err)[:300]}") from err


def query_vector(store, query: str) -> list[float]:
    """The query's embedding from the store's embedder; any failure as a VectorLegError."""
    with _vector_failures():
        return store.embed_query(query)


def _diversify(hits: list[Hit]) -> list[Hit]:
    """Keep one source from filling the whole top 5 while another source scores close."""
    top = hits[:DIVERSITY_TOP]
    sources = [h.source for h in top]
    crowded = next((s for s in set(sources) if sources.count(s) > DIVERSITY_MAX_PER_SOURCE), None)
    if crowded is None:
        return hits
    best = hits[0].score
    other = next((h for h in hits[DIVERSITY_TOP:]
                  if h.source != crowded and h.score >= DIVERSITY_CLOSE * best), None)
    if other is None:
        return hits
    rest = [h for h in hits if h is not other]
    return rest[:DIVERSITY_TOP - 1] + [other] + rest[DIVERSITY_TOP - 1:]



def _across(lists: list[list[tuple[Candidate, float]]]) -> tuple[list[tuple[Candidate, float]],
                                                                 dict[str, list[int]]]:
    """Several questions' rankings as one, by reciprocal rank (k = RRF_K) over the chunks
    each found (score above 0), and which questions (0-based) found each chunk."""
    fused: dict[str, list] = {}
    found_by: dict[str, list[int]] = {}
    for n, ranked in enumerate(lists):
        for rank, (cand, _) in enumerate((pair for pair in ranked if pair[1] > 0), 1):
            entry = fused.setdefault(cand.row["chunk_id"], [cand, 0.0])
            entry[1] += 1.0 / (RRF_K + rank)
            found_by.setdefault(cand.row["chunk_id"], []).append(n)
    ranked = sorted(((cand, score) for cand, score in fused.values()), key=lambda p: -p[1])
    return ranked, found_by


class Searcher:
    """Search one KB. The embedder and Chroma are only touched by a vector or hybrid search."""

    def __init__(self, conn: sqlite3.Connection, store=None, tokenize=None):
        self.conn = conn
        self.store = store  # chroma_store.ChromaStore, or None when no embedder is configured
        if tokenize is None:
            from index import segment
            tokenize = segment.query_tokens
        self.tokenize = tokenize
        # the last questions' tokens: the lexical leg and evidence.py both need them, and a
        # Korean question's cost a Kiwi call (4 ms) each time
        self.query_tokens = lru_cache(maxsize=QUERY_TOKENS_KEPT)(tokenize)

    def search(self, request: SearchRequest, settings: SearchSettings = DEFAULT_SETTINGS,
               vectors: Mapping[str, list[float]] | None = None) -> list[Hit]:
        """The hits for `request` (its question and other phrasings, searched alike and fused
        by reciprocal rank; `source` the indexed name or names it looks at) ranked by the
        KB's `settings` (request.diversity overrides theirs); `vectors` holds the phrasings'
        embeddings when the caller made them."""
        query = request.query
        queries = [query, *dict.fromkeys(v for v in request.queries if v != query)]
        if request.mode == "exact":
            return self._with_evidence(self._exact(queries, request.top_k, request.source,
                                                   request.case_sensitive), queries, "exact")
        vectors = vectors or {}
        lists = [self._ranked(q, request, settings, vectors.get(q)) for q in queries]
        if request.mode == "auto" and settings.definitions_first:
            lists = [self._definitions_lifted(q, ranked, request.source)
                     for q, ranked in zip(queries, lists, strict=True)]
        ranked, found_by = (lists[0], None) if len(lists) == 1 else _across(lists)
        diversity = settings.diversity if request.diversity is None else request.diversity
        top_k = request.top_k
        pool = top_k * MMR_POOL if diversity > 0 else top_k + DIVERSITY_TOP
        hits: list[Hit] = []
        for cand, score in ranked:
            if score <= 0:
                break  # what neither leg supports is not a hit
            row = cand.row
            hit = Hit(row["chunk_id"], row["source"], row["page"], row["line_start"],
                      row["line_end"], row["text"], score,
                      {"bm25": cand.bm25_rank, "vector": cand.vector_rank}, [row["chunk_id"]],
                      queries=found_by[row["chunk_id"]] if found_by else None,
                      similarity=self._similarity(request, cand))
            if not merge_into(hits, hit):
                hits.append(hit)
            if len(hits) >= pool:
                break
        chosen = self._mmr(hits, top_k, diversity) if diversity > 0 else _diversify(hits)
        return self._with_evidence(with_text(self.conn, chosen[:top_k], "\n".join(queries),
                                             self.tokenize), queries, request.mode)

    def _similarity(self, request: SearchRequest, cand: Candidate) -> float | None:
        """A candidate's cosine with the query when the vector leg ran (a chunk it never
        scored, such as a definition only `exact` found, has none)."""
        scored = cand.vector_rank is not None or cand.cosine != 0.0
        return cand.cosine if scored and request.mode != "bm25" and self.store is not None \
            else None

    def _with_evidence(self, hits: list[Hit], queries: list[str], mode: str) -> list[Hit]:
        """The hits with what found them (evidence.py): the query's words each holds, and
        whether it is weak, judged by this embedder's closeness band."""
        if not hits:
            return hits
        return evidence.annotate(self.conn, hits,
                                 evidence.query_terms(queries, self.query_tokens), self.band,
                                 self.tokenize, literal=mode == "exact")

    @property
    def band(self) -> evidence.Band | None:
        """The closeness band of this KB's embedder (None without one, or unmeasured)."""
        embedder = getattr(self.store, "embedder", None)
        return None if embedder is None else evidence.band_for(embedder.provider, embedder.model)

    def _ranked(self, query: str, request: SearchRequest, settings: SearchSettings,
                embedding: list[float] | None) -> list[tuple[Candidate, float]]:
        """One question's candidates of both legs, best first, with their fused score."""
        mode, source = request.mode, request.source
        use_bm25 = mode in ("auto", "bm25")
        use_vector = mode == "vector" or (mode == "auto" and self.store is not None)
        if use_vector and self.store is None:
            raise ValueError("this knowledge base has no embedder; use search_mode 'bm25'")
        candidates: dict[str, Candidate] = {}
        nearest = self._nearest(query, source, embedding) if use_vector else None
        tokens = self.query_tokens(query) if use_bm25 else []
        # every matching chunk's BM25, read once: the ranked leg and _complete both use it
        bm25 = fulltext.bm25_all(self.conn, tokens, source) if use_bm25 else {}
        bm25 = units.with_units(self.conn, bm25, settings.unit_weight) if use_bm25 else bm25
        if use_bm25:
            self._bm25_leg(bm25, candidates)
        if nearest is not None:
            embedding = self._vector_leg(nearest, candidates)
        def ranking(chosen: dict[str, Candidate]) -> list[tuple[Candidate, float]]:
            if use_bm25 and use_vector:
                self._complete(bm25, embedding, chosen)
                if settings.cross_lingual > 0:
                    self._mark_foreign(query, chosen)
                return fuse(list(candidates.values()), settings.fusion, settings.vector_weight,
                            settings.cross_lingual)
            found = units.scores_of(bm25, [c.row["id"] for c in chosen.values()])
            for cand in chosen.values():
                cand.bm25 = found.get(cand.row["id"], cand.bm25)
            return sorted(((c, c.bm25 if use_bm25 else c.cosine) for c in candidates.values()),
                          key=lambda pair: -pair[1])

        ranked = ranking(candidates)
        if mode == "auto" and settings.neighbour_weight > 0:
            ranked = self._with_neighbours(ranked, candidates, ranking, settings.neighbour_weight)
        if mode == "auto" and settings.title_weight > 0:
            ranked = self._with_titles(query, ranked, settings.title_weight)
        return ranked

    def _with_neighbours(self, ranked: list[tuple[Candidate, float]],
                         candidates: dict[str, Candidate],
                         ranking: Callable[[dict[str, Candidate]], list[tuple[Candidate, float]]],
                         weight: float) -> list[tuple[Candidate, float]]:
        """Code chunks lifted by their neighbours (neighbours.py): the neighbours of the first
        candidates join them with their real scores from both legs, then each code chunk
        gains `weight` times its best neighbour's fused score."""
        links, found = neighbours.around(
            self.conn, [cand.row for cand, score in ranked[:neighbours.TOP] if score > 0])
        if not links:
            return ranked
        new = {cid: Candidate(row) for cid, row in found.items() if cid not in candidates}
        if new:
            candidates.update(new)
            ranked = ranking(new)
        scores = neighbours.lifted({c.row["chunk_id"]: score for c, score in ranked}, links,
                                   weight)
        return sorted(((c, scores[c.row["chunk_id"]]) for c, _ in ranked), key=lambda p: -p[1])

    def _definitions_lifted(self, query: str, ranked: list[tuple[Candidate, float]],
                            source: query_sql.Sources) -> list[tuple[Candidate, float]]:
        """When the query is one name (definitions.name_of) and code answers it, the code
        chunks that define it first, surest first (definitions.chunk_rank), each at least the
        best score, the ones the legs missed among them (_defining_chunks); every other
        question, and every answer without code, keeps its ranking as it is."""
        name = definitions.name_of(query)
        found = [pair for pair in ranked if pair[1] > 0]
        if name is None or not found:
            return ranked
        contexts = self._code_contexts([cand.row["chunk_id"] for cand, _ in found])
        if not contexts:
            return ranked
        extra = []
        for cand, context in self._defining_chunks(name, source):
            if cand.row["chunk_id"] not in contexts:
                contexts[cand.row["chunk_id"]] = context
                extra.append((cand, 0.0))
        ranks = {cid: definitions.chunk_rank(name, cand.row["text"], contexts[cid])
                 for cand, _ in found + extra if (cid := cand.row["chunk_id"]) in contexts}
        lifted = sorted((pair for pair in found + extra
                         if ranks.get(pair[0].row["chunk_id"], (definitions.NOT_DEFINED,))[0]
                         < definitions.NOT_DEFINED),
                        key=lambda pair: ranks[pair[0].row["chunk_id"]])
        if not lifted:
            return ranked
        best = found[0][1]
        chosen = {id(cand) for cand, _ in lifted}
        return [(cand, max(score, best)) for cand, score in lifted] + \
            [pair for pair in ranked if id(pair[0]) not in chosen]

    def _code_contexts(self, chunk_ids: list[str]) -> dict[str, str]:
        """chunk id -> its own context (codechunks' symbol lines), for the chunks of code
        sources among these."""
        marks = ",".join("?" * len(chunk_ids))
        return dict(self.conn.execute(
            "SELECT c.chunk_id, c.context FROM chunks c JOIN sources s ON s.id = c.source_id"
            f" WHERE c.chunk_id IN ({marks}) AND s.parser LIKE 'code:%'", chunk_ids))

    def _defining_chunks(self, name: definitions.Name,
                         source: query_sql.Sources) -> list[tuple[Candidate, str]]:
        """The chunks (and contexts) of code sources with a line that defines the name as
        written, among the first DEFINER_LINES lines holding it, at most MAX_DEFINERS: a
        definition neither leg ranked among its CANDIDATES (a class named `Text` in a library
        about text) still comes first."""
        lines = [row for row in exact.exact_search(self.conn, name.parts[-1], DEFINER_LINES,
                                                   source, width=DEFINER_WIDTH,
                                                   case_sensitive=True)
                 if definitions.line_tier(name, row["text"]) == 0][:MAX_DEFINERS]
        found: dict[str, tuple[Candidate, str]] = {}
        for line in lines:
            for row in self.conn.execute(
                    f"SELECT {fulltext.CHUNK_COLUMNS}, c.context FROM chunks c JOIN sources s"
                    " ON s.id = c.source_id WHERE s.name = ? AND c.page = ? AND c.line_start"
                    " <= ? AND c.line_end >= ? AND s.parser LIKE 'code:%'",
                    (line["source"], line["page"], line["line"], line["line"])):
                found.setdefault(row["chunk_id"], (Candidate(row), row["context"]))
        return list(found.values())

    def _mmr(self, hits: list[Hit], top_k: int, diversity: float) -> list[Hit]:
        """Maximal marginal relevance: each next hit is the one whose relevance (its score over
        the best) minus `diversity` times its likeness to a hit already chosen is highest.
        Likeness is the cosine of the hits' best chunks' stored vectors (token overlap without
        an embedder), and at least SAME_SOURCE_LIKENESS for two hits of one source: the
        per-source rule of _diversify as one case of it."""
        if len(hits) < 2:
            return hits
        likeness = self._likeness(hits)
        best = hits[0].score or 1.0
        chosen: list[int] = [0]
        left = list(range(1, len(hits)))
        while left and len(chosen) < top_k:
            pick = max(left, key=lambda i: (1 - diversity) * hits[i].score / best
                       - diversity * max(likeness[i][j] for j in chosen))
            chosen.append(pick)
            left.remove(pick)
        return [hits[i] for i in chosen]

    def _likeness(self, hits: list[Hit]) -> list[list[float]]:
        import numpy as np

        ids = [h.chunk_id for h in hits]
        found, matrix = [], None
        if self.store is not None:
            with suppress(Exception):  # a store that fails here still leaves token overlap
                found, matrix = self.store.vectors(ids)
        if len(found) == len(set(ids)):
            rows = matrix[[found.index(i) for i in ids]]
            rows = rows / (np.linalg.norm(rows, axis=1, keepdims=True) + 1e-12)
            alike = (rows @ rows.T).tolist()
        else:
            words = fulltext.chunk_tokens(self.conn, ids)
            sets = [set(words.get(i, "").split()) for i in ids]
            alike = [[len(a & b) / (len(a | b) or 1) for b in sets] for a in sets]
        for i, a in enumerate(hits):
            for j, b in enumerate(hits):
                if a.source == b.source:
                    alike[i][j] = max(alike[i][j], SAME_SOURCE_LIKENESS)
        return alike

    def _with_titles(self, query: str, ranked: list[tuple[Candidate, float]],
                     weight: float) -> list[tuple[Candidate, float]]:
        """Blend each chunk's score (over the best one's) with its source's title score; a
        chunk no leg supports stays out (its score stays 0). A file name is a name: its
        words and the question's are compared as written (segment.tokens): with the stems
        between them, adjacent words no longer joined (Best Buy -> BESTBUY)."""
        from index import segment
        scores = titles.title_scores(query, segment.tokens(query),
                                     (c.row["source"] for c, _ in ranked), segment.tokens)
        best = max((score for _, score in ranked), default=0.0)
        if not scores or best <= 0:
            return ranked
        blended = [(c, (1 - weight) * score / best + weight * scores.get(c.row["source"], 0.0)
                    if score > 0 else score) for c, score in ranked]
        return sorted(blended, key=lambda pair: -pair[1])

    def _mark_foreign(self, query: str, candidates: dict[str, Candidate]) -> None:
        """Mark the candidates whose source is in none of the question's languages (fusion.py
        scores them by meaning alone)."""
        sources = {cand.row["source"] for cand in candidates.values()}
        mark_foreign(candidates.values(), doc_language.query_languages(query),
                     filters.languages_of(self.conn, sources))

    def _bm25_leg(self, bm25: Mapping[int, float], out: dict[str, Candidate]) -> None:
        for rank, (row, score) in enumerate(fulltext.top_chunks(self.conn, bm25, CANDIDATES), 1):
            out[row["chunk_id"]] = Candidate(row, bm25=score, bm25_rank=rank)

    def _complete(self, bm25: Mapping[int, float], embedding,
                  candidates: dict[str, Candidate]) -> None:
        """A chunk found by one leg only gets its real score from the other instead of 0 (its
        cosine from its stored vector, its BM25 from the leg's full scoring): a missing score
        would act as a filter and drag the fusion below BM25. Ranks stay None: they say which
        leg found it."""
        unseen = [cid for cid, c in candidates.items() if c.vector_rank is None]
        with _vector_failures():
            cosines = self.store.cosines(embedding, unseen)
        for cid, cosine in cosines.items():
            candidates[cid].cosine = cosine
        lexical = [c for c in candidates.values() if c.bm25_rank is None]
        found = units.scores_of(bm25, [c.row["id"] for c in lexical])
        for cand in lexical:
            cand.bm25 = found.get(cand.row["id"], 0.0)

    def _nearest(self, query: str, source: query_sql.Sources,
                 embedding: list[float] | None) -> Future:
        """The query's embedding (unless given) and its nearest chunks, worked out in a thread
        while the BM25 leg runs: on a first search, loading the vector index then overlaps
        loading the Korean or Chinese segmenter instead of following it. A search narrowed to
        sources (`source`, filters) with few embedded chunks scores every one of them: exact,
        where Chroma's filtered HNSW search missed some of a small allowed set."""
        few = None if source is None else \
            fulltext.embedded_chunk_ids(self.conn, source, EXACT_VECTOR_CHUNKS)

        def work() -> tuple:
            vector = embedding or self.store.embed_query(query)
            if few is not None and len(few) <= EXACT_VECTOR_CHUNKS:
                cosines = self.store.cosines(vector, few) if few else {}
                return vector, sorted(cosines.items(), key=lambda p: -p[1])[:CANDIDATES]
            where = None if source is None else \
                {"source": source if isinstance(source, str) else {"$in": list(source)}}
            return vector, self.store.query(vector, CANDIDATES, where)

        return _vector_threads.submit(work)

    def _vector_leg(self, nearest: Future, out: dict[str, Candidate]):
        """Fill `out` with the nearest chunks; returns the query's embedding for _complete."""
        with _vector_failures():
            embedding, found = nearest.result()
        rows = fulltext.chunks_by_id(self.conn, [cid for cid, _ in found])
        rank = 0
        for chunk_id, similarity in found:
            row = rows.get(chunk_id)
            if row is None or row["embed_state"] != states.EMBED_INDEXED:
                continue  # Chroma lags or leads SQLite; SQLite decides
            rank += 1
            cand = out.setdefault(chunk_id, Candidate(row))
            cand.cosine, cand.vector_rank = similarity, rank
        return embedding

    def _exact(self, queries: list[str], top_k: int, source: query_sql.Sources,
               case_sensitive: bool = False) -> list[Hit]:
        """Lines holding any of the queries as written, in document order except that a
        line of source code defining one comes first; consecutive matching lines of a page
        become one hit."""
        hits: list[Hit] = []
        found = {(r["source"], r["page"], r["line"]): r for query in queries
                 for r in exact.exact_search(self.conn, query, EXACT_LINES, source,
                                             width=limits.MAX_LINE_CHARS,
                                             case_sensitive=case_sensitive)}
        rows = self._definitions_first([found[key] for key in sorted(found)], queries)
        for rank, row in enumerate(rows, 1):
            line_cut = row["length"] > len(row["text"])
            text = row["text"] + (limits.CUT_MARK if line_cut else "")
            last = hits[-1] if hits else None
            if last and (last.source, last.page) == (row["source"], row["page"]) \
                    and last.line_end + 1 == row["line"]:
                last.line_end = row["line"]
                last.text, cut = limits.cut(last.text + "\n" + text, limits.MAX_HIT_CHARS)
                last.cut = last.cut or cut or line_cut
                continue
            if len(hits) == top_k:
                break
            chunk_id = f"line:{row['source']}:{row['page']}:{row['line']}"
            hits.append(Hit(chunk_id, row["source"], row["page"], row["line"], row["line"],
                            text, 1.0, {"exact": rank}, [], line_cut))
        return hits

    def _definitions_first(self, rows: list[dict], queries: list[str]) -> list[dict]:
        """The rows with the lines of code sources that define a query (`def parse_x(`,
        `class Parser`, `parseX = function`, `int parse_x(...) {`) moved to the front: a
        developer's exact search for a name wants its definition, not its first use."""
        code = fulltext.code_sources(self.conn, (r["source"] for r in rows))
        if not code:
            return rows
        wanted = [n for n in map(definitions.name_of, queries) if n]

        def tier(row: dict) -> int:
            return min((definitions.line_tier(n, row["text"]) for n in wanted
                        if row["source"] in code), default=definitions.NOT_DEFINED)
        return sorted(rows, key=tier)
