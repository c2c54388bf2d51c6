"""The layers of a search between the two legs and the hits an agent reads: fusion of
the legs (fusion), a chunk's BM25 with its neighbours' (units), hits merged and narrowed from
chunks (hits) with what found each (evidence), file-name matches (titles),
code neighbours and definitions (neighbours, definitions), filters on path, type, date and
language (filters), query expansion by an LLM (query_expansion) and reranking (rerank);
and what a search is carried down with: the request and the KB's settings (request).
search.py, at the root, runs them in order. Beside them, verify_citation's check of a quote
against the raw lines (citations; its text rules in quote_folding, its alignment in
quote_alignment), which library.py calls.

May import: common/, index/, formats/, providers/, and the root's storage and chunk shapes
(fulltext, chunking, codechunks); never kb, search, the pipeline or the server.
"""
