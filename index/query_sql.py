"""The pieces of SQL the index's searches share: an FTS5 query that ORs quoted tokens, the
vocabulary of an FTS5 table (its terms with their counts), and the test that keeps a search to
some sources. BM25 (fulltext.py) and exact search (exact.py) build their queries from them.

Layer: storage: query pieces over fulltext.sqlite3, below fulltext.py and exact.py.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence


def quote_fts(tokens: Iterable[str]) -> str:
    """An FTS5 query that ORs the tokens, each double-quoted so no token is read as syntax."""
    unique = dict.fromkeys(t.replace('"', '""') for t in tokens if t)
    return " OR ".join(f'"{t}"' for t in unique)


def vocabulary(conn: sqlite3.Connection, table: str) -> str:
    """temp.<table>_vocab, the terms of <table>_fts with their row counts, made on first use
    (temp: fine on a read-only connection); returns its name."""
    conn.execute(f"CREATE VIRTUAL TABLE IF NOT EXISTS temp.{table}_vocab"
                 f" USING fts5vocab(main, '{table}_fts', 'row')")
    return f"temp.{table}_vocab"


Sources = str | Sequence[str] | None  # one source's name, several names, or every source


def source_filter(source: str | Sequence[str]) -> tuple[str, list[str]]:
    """The SQL test on `s.name` for a source or several, and its parameters."""
    if isinstance(source, str):
        return "s.name = ?", [source]
    return f"s.name IN ({','.join('?' * len(source))})", list(source)
