"""The indexing pipeline's parts, run by ingest.py (its command line and entry points):
files -> extract -> chunk -> (contextualize) -> commit lines and chunks -> embed -> Chroma.
The Indexer that does those stages for one KB under its writer lock, with Summary and the
run's errors (indexer); a run's frame, reconcile first, and the sync's steps for buckets, URLs
and re-chunked code (runs); a damaged KB's stores moved aside and rebuilt (rebuild).

May import: everything below it (sources/, ranking/, providers/, index/, formats/, common/ and
the root's stages); never ingest.py, queue_runner.py, library.py or the server.
"""
