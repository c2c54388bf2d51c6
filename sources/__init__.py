"""Where documents come from, for the pipeline: folders walked with what a sync leaves
out (folders, ignores), web pages and documents by URL, bounded and SSRF-safe (url_fetch), and
S3-compatible buckets (s3_source).

May import: common/, formats/, index/, and the root's kb, fulltext and extract; never the
pipeline (ingest.py, queue_runner.py), search or the server.
"""
