"""One KB's search, as the `search` tool answers it: the `source` and filters resolved to the
sources they name, the question expanded (the KB's query expansion) and embedded with no lock
held, both legs searched and fused (search.py) in one snapshot of the KB, then reranked (the
KB's reranker). A vector leg that fails leaves `auto` answering from BM25 with a word of why
(`degraded`); a store a write elsewhere has left behind is opened afresh and asked again.
Several KBs' answers are merged by multikb.py.

Layer: service: below library.py's search, above search.py and the open KBs (kb_cache).
"""

from __future__ import annotations

import json
from dataclasses import replace

import chroma_store
import fulltext
import kb as kbmod
import search
from common.limits import UserError
from providers.embedders import EmbedderMismatch
from ranking import evidence, filters, query_expansion, rerank
from ranking.filters import Filters
from ranking.request import SearchRequest, SearchSettings
from service import source_names
from service.kb_cache import KBCache, OpenKB

STILL_LOADING = ("the meaning index is still loading (the server has just started), so these "
                 "hits come from keyword search alone; search again in a few seconds for both")


class KBSearch:
    """Searches of the open KBs, with one reranker per `rerank` block."""

    def __init__(self, kbs: KBCache):
        self.kbs = kbs
        self._rerankers: dict[str, object] = {}  # a `rerank` block's JSON -> its Reranker

    def answer(self, kb: str, request: SearchRequest, across: bool = False) -> dict:
        """The KB's answer to `request`: its hits, and what was searched and why some leg
        could not serve; a `note` when every hit is weak (evidence.py). `across` (a search of
        several KBs): also `evidence`, the strength of its best hit for multikb.py's merge."""
        mode, source = request.mode, request.source
        if source is not None:
            source = source_names.sources_named(self.kbs, kb, source)
        if request.filters is not None and request.filters.narrows():
            source = self._filtered(kb, source, request.filters)
        asked = request.phrasings
        expansion = self._expand(kb, asked) if request.expand and mode != "exact" else None
        searched = expansion.queries if expansion else asked
        vector = mode in ("vector", "auto")
        if mode == "vector":
            self.kbs.wait_for_store(kb)
        vectors, failure = self._query_vectors(kb, searched) if vector else ({}, None)
        with self.kbs.searching(kb) as entry:  # no store is closed under a query
            reranker = self._reranker(entry.kb) if mode != "exact" else None
            wanted = max(request.top_k, reranker.top_n) if reranker else request.top_k
            searcher = self.kbs.searcher(entry, vector)
            problem = entry.vector_note if vector else None
            if mode == "vector" and entry.store is None:
                raise UserError(problem or f"knowledge base {kb!r} has no embedder (embedding "
                                "provider 'none'); use search_mode 'bm25', 'exact' or 'auto'")
            degraded = STILL_LOADING if vector and entry.loading else \
                problem and f"vector leg unavailable, keyword results only: {problem}"
            settings = kbmod.search_settings(entry.kb)  # the KB's `search` block
            asking = replace(request, query=searched[0], queries=tuple(searched[1:]),
                             source=source, top_k=wanted)
            try:
                if failure is not None:
                    raise failure
                hits = self._hybrid(entry, asking, settings, vectors)
            except search.VectorLegError as err:
                if isinstance(err.__cause__, EmbedderMismatch):  # a dimension learnt just now
                    entry.vector_note = str(err.__cause__)  # listing and get_index_info say so
                plain = isinstance(err, search.StoreChanging)  # its sentence is the whole note
                if mode != "auto":
                    raise UserError(str(err) if plain else f"vector search failed: {err}; use "
                                    "search_mode 'bm25' or 'exact' meanwhile") from None
                degraded = str(err) if plain else \
                    f"vector leg unavailable, keyword results only: {err}"
                hits = searcher.search(replace(asking, mode="bm25"), settings)
            note = entry.config_note
            weak = mode != "exact" and all(h.weak for h in hits)
            holds = filters.held(entry.searches.conn, entry.kb.text_extensions) if weak else ""
            power = evidence.strength(entry.searches.conn, hits, searcher.band) \
                if across and mode != "exact" else 1.0
        if reranker is not None:
            hits, skipped = rerank.rerank_hits(reranker, searched[0], hits)
            degraded = "; ".join(filter(None, [degraded, skipped])) or None
        hits = hits[:request.top_k]
        result = {"kb_id": kb, "search_mode": mode,
                  "hits": [{"kb_id": kb, **h.to_json()} for h in hits]}
        if len(searched) > 1:
            result["queries"] = searched  # a hit's `queries` are positions in this list
        if expansion is not None and expansion.note:
            result["expansion"] = expansion.note
        if degraded:
            result["degraded"] = degraded
        if note:
            result["warning"] = note
        if weak:
            judged = vector and not degraded and searcher.band is not None  # by meaning too
            result["note"] = evidence.weak_note(kb, holds, judged, bool(hits))
        if across:
            result["evidence"] = round(power, 3)
        return result

    def _hybrid(self, entry: OpenKB, request: SearchRequest, settings: SearchSettings,
                vectors: dict) -> list:
        """The searcher's hits (call with entry.searches.lock held). A store whose in-memory
        index a write elsewhere has left behind (chroma_store.left_behind) is opened afresh
        and asked once more: in the soak, searches during an ingest lost their vector half to
        Chroma's "Error finding id" and answered from BM25 without a word of why. When the
        fresh store fails too, StoreChanging says plainly that the KB is being updated."""
        try:
            return entry.searcher.search(request, settings, vectors)
        except search.VectorLegError as err:
            if not chroma_store.left_behind(err.__cause__):
                raise
        self.kbs.reopen_store(entry)
        try:
            if entry.store is not None:
                return entry.searcher.search(request, settings, vectors)
        except search.VectorLegError as err:
            if not chroma_store.left_behind(err.__cause__):
                raise
        raise search.StoreChanging(being_updated(entry.kb.id))

    def _filtered(self, kb_id: str, source: str | list[str] | None,
                  narrowed: Filters) -> list[str]:
        """The sources a filtered search looks at: those passing the filters, within
        `source` when it is given too."""
        with self.kbs.reading(kb_id) as entry:
            names = filters.select(entry.conn, kb_id, narrowed, entry.kb.text_extensions)
        if source is None:
            return names
        within = {source} if isinstance(source, str) else set(source)
        kept = [n for n in names if n in within]
        if not kept:
            raise filters.NoMatch(f"no source of {kb_id!r} that `source` names passes the "
                                  f"filters ({narrowed.describe()})")
        return kept

    def _reranker(self, kb: kbmod.KnowledgeBase):
        """The KB's reranker (None without a `rerank` block), one per block: each holds an
        HTTP client and its endpoint's failure pause."""
        key = json.dumps(kb.rerank, sort_keys=True)
        if key not in self._rerankers:
            self._rerankers[key] = rerank.reranker_for(kb.rerank)
        return self._rerankers[key]

    def _expand(self, kb_id: str, asked: list[str]):
        """The KB's query expansion of the question (None without a `queryExpansion`
        block), with the agent's own phrasings after it. Made with no lock held: the LLM
        is bounded by the block's timeout and falls back to the question alone."""
        with self.kbs.reading(kb_id) as entry:
            expander = query_expansion.expander_for(entry.kb.query_expansion)
            if expander is None:
                return None
            languages = query_expansion.languages_held(fulltext.script_samples(entry.conn))
        expansion = expander.expand(asked[0], languages)
        return query_expansion.Expansion(list(dict.fromkeys([*asked, *expansion.queries[1:]])),
                                         expansion.note)

    def _query_vectors(self, kb_id: str, queries: list[str]) -> tuple[dict, Exception | None]:
        """Each query's vector (none without a store), or the first VectorLegError."""
        vectors = {}
        for query in queries:
            vector, failure = self._query_vector(kb_id, query)
            if failure is not None:
                return {}, failure
            if vector is not None:
                vectors[query] = vector
        return vectors, None

    def _query_vector(self, kb_id: str, query: str) -> tuple[list[float] | None, Exception | None]:
        """(the query's vector, None), (None, the VectorLegError why not) or (None, None) with
        no store. Made with no lock held: a slow embedder (at most embedders.QUERY_TIMEOUT)
        then holds up this search alone, never read_range or list_sources on the KB; it reads
        no SQLite, so the search's snapshot is not split."""
        with self.kbs.searching(kb_id) as entry:
            self.kbs.searcher(entry)
            store = entry.store
        if store is None:
            return None, None
        try:
            return search.query_vector(store, query), None
        except search.VectorLegError as err:
            return None, err


def being_updated(kb_id: str) -> str:
    """What a search says when the vector store changed under it twice (a write elsewhere)."""
    return (f"knowledge base {kb_id!r} is being updated, so its meaning index could not be read "
            "for this search; search again in a moment, or use search_mode 'bm25' meanwhile")
