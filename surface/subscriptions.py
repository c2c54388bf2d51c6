"""Change notifications for MCP hosts: `resources/subscribe` and `resources/unsubscribe`, then
`notifications/resources/updated` for a subscribed source whose index changed and
`notifications/resources/list_changed` when sources (or whole KBs) come or go.

How a change is seen: a poll every POLL_SECONDS from the server's start. Every writer of
an index is another SQLite connection (ingest.py, the queue runner's sync that the folder
watcher queues, the server's own ingest_file), so SQLite's `PRAGMA data_version` on the
Library's read connection tells, for one stat and one pragma per KB, whether anything was
committed since the last look. Only then are the subscribed sources' rows (hash, state,
pages, parser, error, when indexed: what their outline shows) compared with the last seen,
and the KB's source names summed up (their count and CRC-32s) to see whether any came or
went. A subscription reads its source's row at once, so a change committed before the next
poll is not taken for the starting point; the first look, POLL_SECONDS after the server
starts, takes each KB's.

Which hosts: the handshake-era protocols (up to 2025-11-25) only; on a 2026-07-28 connection
change notifications travel on `subscriptions/listen` streams, which fastmcp 4.2 does not
serve, so its capabilities offer none there. A host is known by its connection from its first
request; connections are held weakly and dropped when they close. A URI of another server
(`test://...`) may be subscribed to: it is kept, and never changes.

Layer: surface: server.py calls `serve` and starts and stops the poll in its lifespan; reads
through library.py; writes nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import threading
import weakref
import zlib
from collections.abc import Iterable
from urllib.parse import unquote

import anyio
from fastmcp.server.middleware import Middleware
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, EmptyResult, SubscribeRequestParams, UnsubscribeRequestParams
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

import kb as kbmod
from adapters import mcp_internals
from common.limits import UserError
from library import Library
from surface import resources

# ---------------------------------------------------------------------------
POLL_SECONDS = 1.0  # between looks at the KBs' indexes (a stat and a pragma per KB)
MAX_SUBSCRIPTIONS = 1000  # URIs one connection may be subscribed to at once
MAX_URI_CHARS = 4000  # a subscribed URI (a source name is at most 1,000 characters, encoded)
ROW = "id, sha256, ingested_at, state, pages, parser, error"  # what a source's outline shows
# ---------------------------------------------------------------------------

Source = tuple[str, str]  # (kb_id, source name)


def serve(mcp, notifier: Notifier) -> None:
    """Answer resources/subscribe and /unsubscribe with `notifier` (fastmcp has no handler for
    them: mcp then offers `resources.subscribe`), and let it see each host's requests."""
    mcp.add_middleware(notifier)
    for method, params, handler in (
            ("resources/subscribe", SubscribeRequestParams, notifier.subscribe),
            ("resources/unsubscribe", UnsubscribeRequestParams, notifier.unsubscribe)):
        mcp_internals.replace_request_handler(mcp, method, params, handler)


def parse_uri(uri: str) -> Source | None:
    """(kb_id, source) of a source's or a page's resource URI (resources.source_uri), or
    None for any other URI."""
    prefix = resources.SCHEME + "://"
    parts = uri[len(prefix):].split("/") if uri.startswith(prefix) else []
    if len(parts) not in (2, 3) or not all(parts[:2]) or parts[2:] and not parts[2].isdigit():
        return None
    return parts[0], unquote(parts[1])


class Notifier(Middleware):
    """The hosts' subscriptions and the poll that tells them of changes. As middleware it
    notes each host's connection at its requests (list_changed goes to every host)."""

    def __init__(self) -> None:
        self.hosts: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # -> set of URIs
        self.library: Library | None = None
        self.lock = threading.Lock()  # the fields below: the poll's thread and subscribe's
        self.gates: dict[str, tuple | None] = {}  # kb_id -> (connection, file, data_version)
        self.names: dict[str, tuple[int, int]] = {}  # kb_id -> (sources, sum of name CRCs)
        self.rows: dict[Source, tuple | None] = {}  # a subscribed source -> its row last seen
        self.fresh: set[Source] = set()  # subscribed since the poll took the hosts' URIs
        self.kb_ids: list[str] | None = None
        self.task: asyncio.Task | None = None

    # -- hosts and their subscriptions ---------------------------------------------
    def uris_of(self, session) -> set[str] | None:
        """The set of URIs a session's connection subscribes to (made on first sight), or None
        for a 2026-07-28 connection (one per request; it hears of changes otherwise)."""
        connection = mcp_internals.connection_of(session)
        if connection.protocol_version in MODERN_PROTOCOL_VERSIONS:
            return None
        return self.hosts.setdefault(connection, set())

    async def on_request(self, context, call_next):
        try:
            self.uris_of(context.fastmcp_context.session)
        except (AttributeError, RuntimeError):  # no context, or no session (yet)
            pass
        return await call_next(context)

    async def subscribe(self, ctx, params: SubscribeRequestParams) -> EmptyResult:
        """resources/subscribe: the URI joins the host's set; a source's row is read now, the
        point later changes are told from."""
        uris = self.uris_of(ctx.session)
        if uris is None:
            raise MCPError(code=INVALID_PARAMS, message="resources/subscribe is not part of "
                           "this protocol version; use subscriptions/listen")
        if len(params.uri) > MAX_URI_CHARS:
            raise MCPError(code=INVALID_PARAMS, message=f"the URI is longer than "
                           f"{MAX_URI_CHARS:,} characters; subscribe to a URI resources/list "
                           "gives")
        if params.uri not in uris and len(uris) >= MAX_SUBSCRIPTIONS:
            raise MCPError(code=INVALID_PARAMS, message=f"a host may subscribe to at most "
                           f"{MAX_SUBSCRIPTIONS:,} resources; unsubscribe from some first")
        uris.add(params.uri)
        source = parse_uri(params.uri)
        if source is not None and self.library is not None:
            await anyio.to_thread.run_sync(self._start_from, self.library, source)
        return EmptyResult()

    async def unsubscribe(self, ctx, params: UnsubscribeRequestParams) -> EmptyResult:
        """resources/unsubscribe: the URI leaves the host's set (one never subscribed: no-op)."""
        uris = self.uris_of(ctx.session)
        if uris is not None:
            uris.discard(params.uri)
        return EmptyResult()

    def _start_from(self, library: Library, source: Source) -> None:
        """Read a newly subscribed source's row, unless the poll follows it already."""
        row = _row(library, *source)
        with self.lock:
            self.fresh.add(source)
            self.rows.setdefault(source, row)

    # -- the poll -------------------------------------------------------------------
    def start(self, library: Library) -> None:
        """Start the poll over `library` on the running event loop (the server's lifespan)."""
        self.library = library
        self.task = asyncio.get_running_loop().create_task(self.run())

    async def stop(self) -> None:
        """End the poll, a look under way included: the Library closes after this."""
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task
        self.task, self.library = None, None

    async def run(self) -> None:
        """Look for changes every POLL_SECONDS and tell the hosts; runs until cancelled. It
        looks with no host connected too, so a host that connects later is told of changes
        from the KBs' state before it came."""
        library = self.library
        assert library is not None
        while True:
            await anyio.sleep(POLL_SECONDS)
            wanted = {s for uris in list(self.hosts.values()) for u in uris
                      if (s := parse_uri(u)) is not None}
            try:
                changed, listed = await anyio.to_thread.run_sync(self.look, library, wanted)
            except Exception as err:  # noqa: BLE001 - a failed look must not end the poll
                print(f"linecite: change notifications: {type(err).__name__}: {err}",
                      file=sys.stderr)
                continue
            await self._tell(changed, listed)

    async def _tell(self, changed: set[Source], listed: bool) -> None:
        for connection, uris in list(self.hosts.items()):
            if listed:
                await connection.send_resource_list_changed()
            for uri in sorted(uris):
                if parse_uri(uri) in changed:
                    await connection.send_resource_updated(uri)

    def look(self, library: Library, wanted: Iterable[Source]) -> tuple[set[Source], bool]:
        """(the subscribed sources whose rows changed, whether sources came or went) since
        the last look; the first look at a KB only notes where it stands."""
        wanted = set(wanted)
        kb_ids = library.kbs.kb_ids()
        with self.lock:
            listed = self.kb_ids is not None and kb_ids != self.kb_ids
            self.kb_ids = kb_ids
            kept = wanted | self.fresh  # a source subscribed to meanwhile is not dropped
            self.rows = {s: row for s, row in self.rows.items() if s in kept}
            self.fresh = set()
            for known in (self.gates, self.names):  # a KB gone: forgotten
                for kb_id in set(known) - set(kb_ids):
                    del known[kb_id]
        changed = set()
        for kb_id in kb_ids:
            came_or_went, updated = self._look_at(library, kb_id,
                                                  {s for s in wanted if s[0] == kb_id})
            listed |= came_or_went
            changed |= updated
        gone = {s for s in wanted if s[0] not in kb_ids}
        changed |= {s for s in gone if self._follow(s, None)}
        return changed, listed

    def _look_at(self, library: Library, kb_id: str,
                 wanted: set[Source]) -> tuple[bool, set[Source]]:
        """One KB: nothing when nothing was committed since the last look; else whether its
        sources came or went and which wanted sources changed."""
        try:
            with library.kbs.reading(kb_id) as entry:
                (version,) = entry.conn.execute("PRAGMA data_version").fetchone()
                gate = (id(entry.conn), entry.identity, version)
                with self.lock:
                    if self.gates.get(kb_id) == gate and all(s in self.rows for s in wanted):
                        return False, set()
                names = _names_sum(entry.conn.execute("SELECT name FROM sources"))
                rows = {s: _row_of(entry.conn, s[1]) for s in wanted}
        except (UserError, kbmod.ConfigError):  # nothing indexed yet, damaged, a bad config
            gate, names, rows = None, (0, 0), dict.fromkeys(wanted)
        with self.lock:
            self.gates[kb_id] = gate  # only now: a look that failed is made again
            came_or_went = self.names.get(kb_id, names) != names
            self.names[kb_id] = names
        return came_or_went, {s for s, row in rows.items() if self._follow(s, row)}

    def _follow(self, source: Source, row: tuple | None) -> bool:
        """Note a source's row; True when it differs from the one noted before."""
        with self.lock:
            known = source in self.rows
            before = self.rows.get(source)
            self.rows[source] = row
        return known and before != row


def _row(library: Library, kb_id: str, name: str) -> tuple | None:
    """A source's row as its outline shows it, None when it is not indexed (or its KB cannot
    be read)."""
    try:
        with library.kbs.reading(kb_id) as entry:
            return _row_of(entry.conn, name)
    except (UserError, kbmod.ConfigError):
        return None


def _row_of(conn, name: str) -> tuple | None:
    row = conn.execute(f"SELECT {ROW} FROM sources WHERE name = ?", (name,)).fetchone()
    return None if row is None else tuple(row)


def _names_sum(rows: Iterable[tuple[str]]) -> tuple[int, int]:
    """(how many names, the sum of their CRC-32s): a source added, removed or renamed changes
    it, whatever order the rows come in, with no list of 100,000 names kept."""
    count = total = 0
    for (name,) in rows:
        count += 1
        total += zlib.crc32(name.encode("utf-8", "surrogatepass"))
    return count, total
