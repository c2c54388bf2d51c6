"""The indexing pipeline's parts, run by ingest.py (its command line and entry points):
files -> extract -> chunk -> (contextualize) -> commit lines and chunks -> embed -> Chroma.

May import: everything below it (sources/, ranking/, providers/, index/, formats/, common/ and
the root's stages); never ingest.py, queue_runner.py, library.py or the server.
"""
