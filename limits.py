"""The stated bounds of what the server accepts and returns, and the checks that enforce them.

An agent can be confused as well as careful: it will paste a whole document as a query or a
path with a NUL in it. Every argument is checked here before any work, with an error that
states the bound; every answer is cut to a stated size, with a marker and the way to read
on. The README's "Security" section lists these numbers; change them here only.
"""

from __future__ import annotations

import unicodedata

# ---------------------------------------------------------------------------
MAX_QUERY_CHARS = 4000  # a search query: a long question fits; a pasted document does not
MAX_QUERY_TOKENS = 128  # distinct BM25 tokens scored per query (the rarest ones are kept)
MAX_NAME_CHARS = 1000  # a source name or source_name
MAX_CHUNK_ID_CHARS = 300  # a chunk_id (ours are 32 hex chars; exact-mode ids hold a name)
MAX_PATH_CHARS = 4096  # a path given to ingest_file
MAX_KB_ID_CHARS = 64  # a kb_id (kb.py's pattern allows 64)
MAX_LINE_CHARS = 2000  # characters of one line in a hit or a read_range answer
MAX_HIT_CHARS = 4000  # characters of one hit's text
MAX_READ_CHARS = 40_000  # characters of all the lines one read_range returns
MAX_READ_LINES = 500  # lines one read_range returns
MAX_LIST_ROWS = 200  # sources per list_sources page; files per list in other answers
ECHO_CHARS = 80  # how much of a refused value an error message repeats
CUT_MARK = " [...]"  # ends a line or hit text that was cut
# ---------------------------------------------------------------------------


class UserError(ValueError):
    """A bad argument or state the agent can fix; the message says how."""


def shown(value: str) -> str:
    """A value as an error message may repeat it: quoted, and cut to ECHO_CHARS."""
    return repr(value if len(value) <= ECHO_CHARS else value[:ECHO_CHARS] + "...")


def check_text(value: str | None, what: str, max_chars: int,
               allow_newlines: bool = False) -> None:
    """Refuse a string argument that is too long or holds control characters (NUL included).

    Tabs are always allowed, and newlines where a pasted question may carry them (queries).
    """
    if value is None:
        return
    if len(value) > max_chars:
        raise UserError(f"{what} is {len(value):,} characters long; the limit is {max_chars:,}. "
                        f"Shorten it{' to the words that matter' if what == 'query' else ''}")
    allowed = "\t\n\r" if allow_newlines else "\t"
    bad = next((c for c in value if c not in allowed and unicodedata.category(c) == "Cc"), None)
    if bad is not None:
        raise UserError(f"{what} holds the control character U+{ord(bad):04X}; remove it "
                        "(names, paths and queries are plain text)")


def cut(text: str, max_chars: int) -> tuple[str, bool]:
    """(text, False) when it fits; else its first max_chars characters with CUT_MARK, True."""
    if len(text) <= max_chars:
        return text, False
    return text[:max_chars] + CUT_MARK, True
