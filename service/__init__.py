"""The running server's machinery below library.py: the KBs it keeps open, each read in one
snapshot and its config, index file and vector store followed as they change (kb_cache); one
KB's search from request to hits (kb_search) and several KBs' hits merged into one list
(multikb); which sources a `source` argument names (source_names); what the status tools say
of a KB (health); and the folder watcher that queues a sync when files change (watcher).

May import: everything below it, including queue_runner.py; never library.py or the server.
"""
