"""Search filters: which sources of a knowledge base one search may look at.

`path` (a glob or a prefix of the source's name or file path), `types` (pdf, docx, code,
mail, audio...: the reader family of the source's format and its extension), `modified_after`
/ `modified_before` (the file's time; a mail's by its `Date:` line) and `language` (a code
source's programming language, as list_sources shows it, or a natural language the text is
written in, as doc_language.py counted it at indexing: `ko`, `zh`, `ja`, `en`). They are
resolved here, in SQLite, to the names of the sources they select, and search.py hands those
names to both legs *before* ranking (BM25's allowed chunks, Chroma's `where`), so the top k of
a filtered search are the top k of the matching files, never what is left of the KB's top k.

Reads `sources` and, for mail dates, the first lines of a mail's page 1; writes nothing.

Layer: query: below library.py's search, above fulltext.py's tables and formats' tables.
"""

from __future__ import annotations

import re
import sqlite3
from collections import Counter
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import lru_cache

from common import limits
from common.limits import UserError, shown
from formats import reader_entry
from formats.languages import parser_language
from index import doc_language, fulltext_schema

# ---------------------------------------------------------------------------
MAX_FILTER_SOURCES = 5000  # sources a filtered search may select (Chroma's $in: 50 ms at 5,000)
MAX_TYPES = 20  # words in `types` (and in `language`)
MAX_WORD_CHARS = 32  # one word of `types` or `language`
MAX_DATE_CHARS = 40  # `modified_after` / `modified_before`
MAIL_DATE_LINES = 6  # a mail's header lines (From, To, Cc, Date, Subject) come first
FAMILIES = {  # formats' reader module -> the type word for its whole family
    "pdf": "pdf", "text": "text", "hwp": "hwp", "ofd": "ofd", "office": "office",
    "legacy": "office", "markup": "markup", "mail": "mail", "image": "image",
    "audio": "audio", "structured": "data", "code": "code",
}
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Filters:
    """What a search is narrowed to; an empty field does not narrow."""

    path: str | None = None
    types: tuple[str, ...] = ()
    after: float | None = None  # POSIX seconds, inclusive
    before: float | None = None  # POSIX seconds, exclusive
    language: tuple[str, ...] = ()

    def narrows(self) -> bool:
        return bool(self.path or self.types or self.language) or \
            self.after is not None or self.before is not None

    def describe(self) -> str:
        parts = [f"path {shown(self.path)}" if self.path else "",
                 f"types {list(self.types)}" if self.types else "",
                 f"language {list(self.language)}" if self.language else "",
                 f"modified_after {_iso(self.after)}" if self.after is not None else "",
                 f"modified_before {_iso(self.before)}" if self.before is not None else ""]
        return ", ".join(p for p in parts if p)


def parse(path: str | None = None, types: Sequence[str] | None = None,
          modified_after: str | None = None, modified_before: str | None = None,
          language: str | Sequence[str] | None = None) -> Filters:
    """The filters as given by an agent, each checked against its bound before any work."""
    limits.check_name(path, "path")
    if path is not None and not path.strip():
        raise UserError("path is empty; give a glob (contracts/2024/**) or a prefix "
                        "(contracts/2024/), or leave it out")
    words = _words(types, "types")
    languages = _words([language] if isinstance(language, str) else language, "language")
    after, before = _when(modified_after, "modified_after"), _when(modified_before,
                                                                    "modified_before")
    if after is not None and before is not None and before <= after:
        raise UserError(f"modified_before ({modified_before}) is not after modified_after "
                        f"({modified_after}): nothing can match; swap or widen them")
    return Filters(path.strip().replace("\\", "/") if path else None, words, after, before,
                   languages)


def _words(values: Sequence[str] | None, what: str) -> tuple[str, ...]:
    if not values:
        return ()
    if len(values) > MAX_TYPES:
        raise UserError(f"{what} holds {len(values)} words; send at most {MAX_TYPES}")
    for value in values:
        limits.check_text(value, what, MAX_WORD_CHARS)
    return tuple(dict.fromkeys(v.strip().lower().lstrip(".") for v in values if v.strip()))


def _when(value: str | None, what: str) -> float | None:
    """An ISO 8601 date or date-time as POSIX seconds; without an offset, the server's local
    time (a person's "2024-03-01" is their own day)."""
    if value is None:
        return None
    limits.check_text(value, what, MAX_DATE_CHARS)
    text = value.strip()
    try:
        moment = datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith("Z") else text)
    except ValueError:
        raise UserError(f"{what} {shown(value)} is not a date; give ISO 8601: 2024-03-01 or "
                        "2024-03-01T09:30:00+09:00") from None
    return (moment if moment.tzinfo else moment.astimezone()).timestamp()


def _iso(seconds: float | None) -> str:
    return "" if seconds is None else \
        datetime.fromtimestamp(seconds, timezone.utc).isoformat(timespec="seconds")


# ----------------------------------------------------------------------------- per source


def source_types(name: str, parser: str | None,
                 text_extensions: Collection[str] = ()) -> frozenset[str]:
    """The type words a source answers to: its extension (pdf, docx, py) and its reader's
    family (office, code, mail, audio, data...); code found by its `#!` line by its parser."""
    file = name.rsplit("/", 1)[-1]
    dot = file.rfind(".")
    suffix = file[dot:].lower() if dot > 0 else ""  # as PurePath's: ".bashrc" has none
    return _kinds(suffix, bool(parser_language(parser or "")), tuple(text_extensions))


@lru_cache(maxsize=1024)
def _kinds(suffix: str, code: bool, text_extensions: tuple[str, ...]) -> frozenset[str]:
    """source_types by extension, once per extension (a KB of 50,000 sources has a few)."""
    kinds = {suffix[1:]} if len(suffix) > 1 else set()
    entry = reader_entry(suffix, text_extensions)
    if entry is not None:
        kinds.add(FAMILIES.get(entry[0], entry[0]))
    if code:
        kinds.add("code")
    return frozenset(kinds)


def _path_test(pattern: str):
    """A test of a source's name (or file path): a glob matched whole from the start of the
    name or of any folder in it; a plain string, as a prefix there."""
    from common import globs
    if set("*?[") & set(pattern):
        anchored = pattern.startswith("/")
        body = globs.glob_regex(pattern.lstrip("/"))
        regex = re.compile(body if anchored else f"(?:.*/)?{body}", re.DOTALL)
        return lambda text: regex.fullmatch(text.lstrip("/") if anchored else text) is not None
    inner = "/" + pattern.lstrip("/")
    return lambda text: text.startswith(pattern) or inner in "/" + text


def _mail_dates(conn: sqlite3.Connection, ids: list[int]) -> dict[int, float]:
    """The `Date:` line (ISO 8601, as formats/mail.py writes it) of these mail sources."""
    dates: dict[int, float] = {}
    for start in range(0, len(ids), 500):
        part = ids[start:start + 500]
        for source_id, text in conn.execute(
                "SELECT source_id, text FROM lines WHERE page = 1 AND line <= ? AND text LIKE"
                f" 'Date: %' AND source_id IN ({','.join('?' * len(part))})",
                [MAIL_DATE_LINES, *part]):
            try:
                moment = datetime.fromisoformat(text[6:].strip())
            except ValueError:
                continue  # written as the mail had it: the file's time stands
            dates[source_id] = (moment if moment.tzinfo else moment.astimezone()).timestamp()
    return dates


# ----------------------------------------------------------------------------- selecting


class NoMatch(UserError):
    """No source of the KB passes the filters; the message lists what the KB holds."""


def select(conn: sqlite3.Connection, kb_id: str, filters: Filters,
           text_extensions: Collection[str] = ()) -> list[str]:
    """The names of the KB's sources that pass every filter, at most MAX_FILTER_SOURCES;
    NoMatch (listing what exists) when none does."""
    rows = _source_rows(conn)
    path_ok = _path_test(filters.path) if filters.path else None
    dated = filters.after is not None or filters.before is not None
    mail = _mail_dates(conn, [r[0] for r in rows if "mail" in source_types(
        r[1], r[3], text_extensions)]) if dated else {}
    names = []
    for source_id, name, path, parser, mtime, languages in rows:
        if path_ok and not (path_ok(name) or (path and path_ok(path.replace("\\", "/")))):
            continue
        if filters.types and not set(filters.types) & source_types(name, parser,
                                                                   text_extensions):
            continue
        if filters.language and not _speaks(filters.language, parser, languages):
            continue
        when = mail.get(source_id, mtime)
        if dated and (when is None or (filters.after is not None and when < filters.after)
                      or (filters.before is not None and when >= filters.before)):
            continue
        names.append(name)
    if not names:
        raise NoMatch(f"no source in {kb_id!r} passes the filters ({filters.describe()}); "
                      f"it holds {holdings(rows, text_extensions)}")
    if len(names) > MAX_FILTER_SOURCES:
        raise UserError(f"the filters ({filters.describe()}) select {len(names):,} sources in "
                        f"{kb_id!r}, more than the {MAX_FILTER_SOURCES:,} a search takes: "
                        "narrow path, types or the dates")
    return names


def _source_rows(conn: sqlite3.Connection) -> list[tuple]:
    """(id, name, path, parser, mtime, languages) of every source, by name."""
    cursor = conn.cursor()
    cursor.row_factory = None  # plain tuples: sqlite3.Row made this read 4 times slower
    columns = fulltext_schema.table_columns(conn, "sources")
    spoken = "languages" if "languages" in columns else "NULL"  # an older schema has none
    return cursor.execute(f"SELECT id, name, path, parser, mtime, {spoken} FROM sources"
                          " ORDER BY name").fetchall()


def held(conn: sqlite3.Connection, text_extensions: Collection[str] = ()) -> str:
    """What the KB holds, for a search that found nothing like its query: how many sources,
    then `holdings`."""
    rows = _source_rows(conn)
    return f"{len(rows):,} source{'s' * (len(rows) != 1)}: {holdings(rows, text_extensions)}"


def holdings(rows: list[tuple], text_extensions: Collection[str] = ()) -> str:
    """What a KB holds, in the filters' own terms: types, languages, time span, names."""
    if not rows:
        return "no sources yet"
    types = Counter(t for r in rows for t in source_types(r[1], r[3], text_extensions))
    languages = Counter(filter(None, (parser_language(r[3] or "") for r in rows)))
    languages.update(code for r in rows for code in (r[5] or "").split(",") if code)
    times = [r[4] for r in rows if r[4] is not None]
    parts = ["types " + ", ".join(f"{t} ({n})" for t, n in _most(types, 15))]
    if languages:
        parts.append("languages " + ", ".join(f"{lang} ({n})" for lang, n in
                                              _most(languages, 10)))
    if times:
        parts.append(f"files modified {_iso(min(times))} to {_iso(max(times))}")
    parts.append("sources named like " + ", ".join(repr(r[1]) for r in rows[:3]))
    return "; ".join(parts) + " (list_sources shows them all)"


def _speaks(wanted: tuple[str, ...], parser: str | None, languages: str | None) -> bool:
    """Whether a source is in one of the `wanted` languages: its programming language, or a
    natural one its text is written in (a word like `Korean` or `한국어` read as `ko`)."""
    written = set((languages or "").split(","))
    return any(parser_language(parser or "") == word or doc_language.code_of(word) in written
               for word in wanted)


def languages_of(conn: sqlite3.Connection, names: Collection[str]) -> dict[str, str | None]:
    """Each named source's natural languages as doc_language.py recorded them ("ko,en"), for
    fusion.mark_foreign; empty on an older schema without the column."""
    if not names or "languages" not in fulltext_schema.table_columns(conn, "sources"):
        return {}
    wanted = list(names)
    return dict(conn.execute("SELECT name, languages FROM sources WHERE name IN"
                             f" ({','.join('?' * len(wanted))})", wanted).fetchall())


def _most(counts: Counter, n: int) -> list[tuple[str, int]]:
    """The n most common, equals in alphabetical order (a set's order changes per process)."""
    return sorted(counts.items(), key=lambda pair: (-pair[1], pair[0]))[:n]
