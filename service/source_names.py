"""Which indexed sources a `source` argument names: a source's whole name, a file name that
names exactly one source (`dmca.pdf` for `docs/pdf/dmca.pdf`), or for search a path glob
(`src/**/*.py`); and, for read_range without a kb_id, which KB holds it. A name that names
nothing is refused with close names, so the agent can fix it.

Layer: service: below library.py's tools, above the open KBs (kb_cache) and fulltext.py.
"""

from __future__ import annotations

import re

import fulltext
import kb as kbmod
from common import globs, limits
from common.limits import UserError, shown
from service.kb_cache import KBCache, OpenKB

GLOB_CHARS = set("*?[")  # a `source` holding one, that names no source, is a path glob


class UnknownSource(UserError):
    """A `source` that names no source of the KB."""


def source_name(entry: OpenKB, source: str) -> str:
    """A source's name as indexed, read in the call's snapshot (inside KBCache.reading): the
    name itself, or a file name that names exactly one source (`dmca.pdf` for
    `docs/pdf/dmca.pdf`); else an error with close names."""
    kb_id = entry.kb.id
    names = fulltext.source_names_ending(entry.conn, source, 2)
    if len(names) == 1:
        return names[0]
    if names:
        raise UserError(f"several sources are named {shown(source)} in {kb_id!r}, e.g. "
                        f"{', '.join(map(repr, names))}; give the whole name")
    close = fulltext.close_source_names(entry.conn, source, 3)
    hint = f"; did you mean {' or '.join(map(repr, close))}?" if close else ""
    raise UnknownSource(f"unknown source {shown(source)} in {kb_id!r}{hint} (list_sources "
                        "shows every source and its exact name)")


def indexed_name(kbs: KBCache, kb_id: str, source: str) -> str:
    """A source's name as indexed (see source_name), in a snapshot of its own."""
    with kbs.reading(kb_id) as entry:
        return source_name(entry, source)


def sources_named(kbs: KBCache, kb_id: str, source: str) -> str | list[str]:
    """A source's name (as indexed_name finds it), else, when it holds a glob character,
    the sources it matches as a path glob: a name may hold `[` itself."""
    try:
        return indexed_name(kbs, kb_id, source)
    except UserError:
        if not GLOB_CHARS & set(source):
            raise
    return sources_matching(kbs, kb_id, source)


def sources_matching(kbs: KBCache, kb_id: str, pattern: str) -> list[str]:
    """The sources whose names match a path glob (`src/**/*.py`: `*` and `?` within a
    folder, `**` across folders, `[...]` a set), at most limits.MAX_GLOB_SOURCES."""
    regex = re.compile(globs.glob_regex(pattern), re.DOTALL)
    with kbs.reading(kb_id) as entry:
        # SQLite GLOB first (its * crosses folders, its negated set is [^...]), then the regex
        rough = pattern.replace("**/", "*").replace("**", "*").replace("[!", "[^")
        names = []
        for (name,) in entry.conn.execute(
                "SELECT name FROM sources WHERE name GLOB ? ORDER BY name", (rough,)):
            if regex.fullmatch(name):
                names.append(name)
                if len(names) > limits.MAX_GLOB_SOURCES:
                    break  # one past the bound says it is passed; no more is read
        if not names:
            some = [n for (n,) in entry.conn.execute(
                "SELECT name FROM sources ORDER BY name LIMIT 5")]
    if not names:
        raise UnknownSource(f"no source in {kb_id!r} matches {shown(pattern)}; sources "
                            f"are named like {', '.join(map(repr, some)) or 'nothing yet'}"
                            " (list_sources shows them all)")
    if len(names) > limits.MAX_GLOB_SOURCES:
        raise UserError(f"{shown(pattern)} matches more than {limits.MAX_GLOB_SOURCES:,} "
                        f"sources, the most a search takes: narrow the pattern")
    return names


def kb_of_source(kbs: KBCache, source: str, kb_id: str | None) -> str:
    """The KB that holds a source, looked for in every KB when kb_id is left out."""
    if kb_id is not None or len(kbs.kb_ids()) <= 1:
        return kbs.resolve(kb_id)
    holders = []
    for k in kbs.kb_ids():
        try:
            holders.append((k, indexed_name(kbs, k, source)))
        except (kbmod.ConfigError, UserError):
            continue  # not there, or a KB that is empty, broken or damaged
    if not holders:
        raise UserError(f"unknown source {shown(source)} in any knowledge base; call "
                        "list_sources with a kb_id to see the indexed sources and their "
                        "exact names")
    if len(holders) > 1:
        raise UserError(f"source {shown(source)} is in several knowledge bases "
                        f"({', '.join(k for k, _ in holders)}); pass kb_id")
    return holders[0][0]
