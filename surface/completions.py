"""Argument completion (MCP `completion/complete`) for the resource templates and the `cite`
prompt: as a person types in a host's attach menu or prompt form, the KB ids, source names
and page numbers that start with what was typed, at most MAX_VALUES of them (MCP's bound)
with the total when more match.

    linecite://{kb_id}/{source}         kb_id: KB ids; source: the KB's source names
    linecite://{kb_id}/{source}/{page}  ... and page: the source's page numbers
    cite                                kb_id: KB ids

A source or page is completed within the KB the host has filled in already (the request's
context), or the only KB. Source names come from a range of the index on `sources.name`, so
a KB of 100,000 sources answers in milliseconds. A value past its bound, an unknown KB or a
source not indexed gives no values, never an error: completion only offers.

Reads through library.py (its read-only connections); writes nothing.

Layer: surface: server.py registers `answer` as FastMCP's completion handler.
"""

from __future__ import annotations

import anyio
from fastmcp.server.dependencies import get_context
from mcp_types import Completion, CompletionArgument, CompletionContext, PromptReference

import fulltext
import kb as kbmod
from common import limits
from common.limits import UserError
from library import Library
from surface import resources

# ---------------------------------------------------------------------------
MAX_VALUES = 100  # MCP: a completion holds at most 100 values
LAST_CHAR = "\U0010ffff"  # the greatest code point: a prefix's names sort before prefix+this
ARGUMENTS = {  # a template's URI or the prompt's name -> the arguments completed for it
    resources.SOURCE_TEMPLATE: ("kb_id", "source"),
    resources.PAGE_TEMPLATE: ("kb_id", "source", "page"),
    "cite": ("kb_id",),
}
# ---------------------------------------------------------------------------


async def answer(ref, argument: CompletionArgument,
                 context: CompletionContext | None) -> Completion:
    """completion/complete, as FastMCP hands it over: `complete` for the running server's
    Library, in a worker thread (it reads SQLite)."""
    library: Library = get_context().lifespan_context["library"]
    name = ref.name if isinstance(ref, PromptReference) else ref.uri
    given = (context.arguments if context else None) or {}
    return await anyio.to_thread.run_sync(complete, library, name, argument.name,
                                          argument.value, given)


def complete(library: Library, ref: str, argument: str, typed: str,
             given: dict[str, str] | None = None) -> Completion:
    """The values of `argument` of the template or prompt `ref` that start with `typed`;
    `given`: the arguments the host has filled in already (kb_id, source)."""
    given = given or {}
    if argument not in ARGUMENTS.get(ref, ()):
        return Completion(values=[])
    try:
        for value in (typed, given.get("source")):
            limits.check_name(value, "a completed value")
        if argument == "kb_id":
            return bounded([k for k in library.kbs.kb_ids() if k.startswith(typed)])
        kb_id = library.kbs.resolve(given.get("kb_id") or None)
        with library.kbs.reading(kb_id) as entry:
            if argument == "source":
                return _sources(entry.conn, typed)
            return _pages(entry.conn, given.get("source", ""), typed)
    except (UserError, kbmod.ConfigError):  # no such KB, none chosen of several, a bad value
        return Completion(values=[])


def bounded(values: list[str], total: int | None = None) -> Completion:
    """At most MAX_VALUES values, with how many there are when that is more."""
    total = len(values) if total is None else total
    return Completion(values=values[:MAX_VALUES], total=total, has_more=total > MAX_VALUES)


def _sources(conn, typed: str) -> Completion:
    """The KB's source names starting with `typed`, in name order (a range of its index)."""
    span = (typed, typed + LAST_CHAR)
    names = [name for (name,) in conn.execute(
        "SELECT name FROM sources WHERE name >= ? AND name < ? ORDER BY name LIMIT ?",
        (*span, MAX_VALUES))]
    if len(names) < MAX_VALUES:
        return bounded(names)
    (total,) = conn.execute("SELECT count(*) FROM sources WHERE name >= ? AND name < ?",
                            span).fetchone()
    return bounded(names, total)


def _pages(conn, source: str, typed: str) -> Completion:
    """The source's page numbers (1, 2, ...) whose digits start with `typed`."""
    row = fulltext.source_row(conn, source) if source else None
    if row is None or (typed and not typed.isdigit()):
        return Completion(values=[])
    pages = [str(page) for page in range(1, (row["pages"] or 0) + 1)
             if str(page).startswith(typed)]
    return bounded(pages)
