"""Exact substring search over fulltext.sqlite3's raw lines, for the `exact` mode and the
definitions of code. `lines_fts` is a trigram index without positions over each line and
LINE_END after it: a string is found through its trigrams and checked in the line itself, a
1- or 2-character one through the trigrams that start with it, or in the first lines when it
is common. The line check decides: trigrams may sit apart, SQLite's lower() folds ASCII only.

Layer: storage: the exact leg's reads of fulltext.sqlite3, below search.py.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

from index import fulltext_schema
from index.query_sql import Sources, quote_fts, source_filter, vocabulary

EXACT_PREFIX_TERMS = 256  # trigrams a 1-2 character needle may start before a scan is cheaper


EXACT_SCAN_FIRST = 4000  # lines a 1-2 character needle is first looked for in (~6 ms)
# CROSS JOIN: the index first, whatever the planner thinks. With a `source` it chose to read
# that source's lines and run the MATCH once per line: 2 s for one needle in a 350-page book.
_INDEXED = (" FROM lines_fts f CROSS JOIN lines l ON l.id = f.rowid CROSS JOIN sources s"
            " ON s.id = l.source_id WHERE lines_fts MATCH ?")


def exact_search(conn: sqlite3.Connection, needle: str, limit: int,
                 source: Sources = None, width: int = 2000,
                 case_sensitive: bool = False) -> list[dict]:
    """Raw lines containing `needle`, up to `limit` of them, in document order, each cut to
    its first `width` characters (`length` holds the whole line's). The first `limit` lines in
    storage order are the ones returned, whichever way they are found: sorting every match by
    name first made a common needle read every line (2.5 s at 100,000 chunks, against 0.03 s
    when the search may stop at `limit`).

    Case-insensitive unless `case_sensitive` (an identifier: getURL, not getUrl). The trigram
    index is case-folded either way: it finds the candidate lines, the line check decides.

    A 1-2 character needle is first looked for in the first EXACT_SCAN_FIRST lines: a common
    one is found there at once, where asking the index which trigrams start with it reads
    their whole doclists ("e": 0.3 s at a million chunks, 0.5 ms this way)."""
    folded = needle.lower()
    holds = (lambda text: needle in text) if case_sensitive else (
        lambda text: folded in text.lower())
    scanned = _scanned(needle, case_sensitive)
    rows = []
    if len(needle) < 3:
        first = (" FROM lines l" + scanned + " AND l.id <= coalesce((SELECT id FROM lines"
                 " ORDER BY id LIMIT 1 OFFSET ?), 1 << 62)")
        rows = _lines_holding(conn, first, [needle, EXACT_SCAN_FIRST], holds, limit, width,
                              source)
    if len(rows) < limit:
        match = _trigram_match(folded) if len(needle) >= 3 else _short_match(conn, folded)
        if match is not None and match != "":  # lines holding every trigram of it
            rows = _lines_holding(conn, _INDEXED, [match], holds, limit, width, source)
        elif match is None:  # common, or an index from before _m006: scan every line
            rows = _lines_holding(conn, " FROM lines l" + scanned, [needle], holds, limit,
                                  width, source)
    return sorted(rows, key=lambda row: (row["source"], row["page"], row["line"]))


def _scanned(needle: str, case_sensitive: bool) -> str:
    """The condition of a scan of lines for `needle` (its one parameter): an instr() that lets
    through every line the line check keeps, and few others. SQLite's lower() folds ASCII
    only, so a needle with other letters is left to the line check when case does not count
    (lower("É") is "É": the scan missed "école")."""
    if case_sensitive:
        test = "instr(l.text, ?) > 0"
    elif needle.isascii():
        test = "instr(lower(l.text), lower(?)) > 0"
    else:
        test = "? IS NOT NULL"
    return " JOIN sources s ON s.id = l.source_id WHERE " + test


def _lines_holding(conn: sqlite3.Connection, tables: str, params: list,
                   holds: Callable[[str], bool], limit: int, width: int,
                   source: Sources) -> list[dict]:
    """The first `limit` lines the query finds for which `holds(line)` (the trigrams may sit
    apart, instr() folds ASCII only and the index folds every case: the line decides)."""
    sql = "SELECT s.name AS source, l.page, l.line, l.text" + tables
    if source is not None:
        test, names = source_filter(source)
        sql += f" AND {test}"
        params = [*params, *names]
    rows = []
    for row in conn.execute(sql, params):
        text = row["text"]
        if holds(text):
            rows.append({"source": row["source"], "page": row["page"], "line": row["line"],
                         "text": text[:width], "length": len(text)})
            if len(rows) == limit:
                break
    return rows


EXACT_TRIGRAMS = 32  # trigrams of a needle the index is asked for; the line check decides


def _trigram_match(folded: str) -> str:
    """An FTS5 query for the lines holding trigrams of a 3+ character string, at most
    EXACT_TRIGRAMS of them spread over it: the line check decides, so more only cost time
    (a pasted 4,000-character needle: 1.2 s with all of them). A phrase would need the
    positions lines_fts no longer keeps (_m007)."""
    grams = list(dict.fromkeys(folded[i:i + 3] for i in range(len(folded) - 2)))
    if len(grams) > EXACT_TRIGRAMS:
        grams = [grams[i * len(grams) // EXACT_TRIGRAMS] for i in range(EXACT_TRIGRAMS)]
    return " AND ".join('"' + gram.replace('"', '""') + '"' for gram in grams)


def _short_match(conn: sqlite3.Connection, folded: str) -> str | None:
    """An FTS5 query for the lines holding a 1- or 2-character needle: the indexed trigrams
    that start with it, which are all of them since every line ends in LINE_END. "" when
    there are none; None when the needle starts more than EXACT_PREFIX_TERMS (it is common,
    so a scan finds its lines at once) or the index predates LINE_END."""
    if "grams" not in fulltext_schema.table_columns(conn, "lines"):
        return None
    vocab = vocabulary(conn, "lines")
    terms = [row[0] for row in conn.execute(
        f"SELECT term FROM {vocab} WHERE term >= ? AND term < ? LIMIT ?",
        (folded, folded + "\U0010ffff", EXACT_PREFIX_TERMS + 1))]
    return None if len(terms) > EXACT_PREFIX_TERMS else quote_fts(terms)
