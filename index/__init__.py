"""The lexical index inside fulltext.sqlite3, below fulltext.py which owns the file: the
segmenter that turns text into search tokens (segment: Kiwi for Hangul, jieba for Han, words
for the rest), BM25 over numpy postings (bm25, the postings written by bm25_segments), exact
substring search over the raw lines (exact), the SQL pieces the searches share (query_sql),
the states of sources and chunks with the embedding bookkeeping (states), the
contextualizer's contexts (contexts), the schema and its numbered migrations
(fulltext_schema), the languages a source is written in (doc_language), and what an error of
SQLite on the index means to the user (store_errors).

May import: common/ and the other modules of index/ (no cycles), never a root module.
"""
