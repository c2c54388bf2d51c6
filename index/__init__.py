"""The lexical index inside fulltext.sqlite3, below fulltext.py which owns the file: the
segmenter that turns text into search tokens (segment: Kiwi for Hangul, jieba for Han, words
for the rest), BM25 over numpy postings (bm25), the schema and its numbered migrations
(fulltext_schema), and the languages a source is written in (doc_language).

May import: common/ only.
"""
