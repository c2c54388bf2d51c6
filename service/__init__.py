"""The running server's machinery below library.py: the folder watcher that queues a sync
when files change (watcher) and the merging of several KBs' hits into one list (multikb).

May import: everything below it, including queue_runner.py; never library.py or the server.
"""
