"""Small shared pieces every layer may use: atomic file writes (atomic), the cross-process
lock that knows its holder (pidlock), where linecite keeps things and how a file is hashed
(paths), the stated bounds of every input (limits), a KB's run record (run_status), the opening
of a user's file for reading (safeopen), git's glob reading (globs), the commands the product
prints for a user to run (commands), and the version.

May import: nothing of ours outside common/ (the ground floor; `lint-imports` checks it).
"""
