"""linecite's MCP server: find where something is said, then read those exact lines.

    python server.py                                   # stdio, for Claude Desktop, Cursor, ...
    python server.py --transport http --port 8000      # streamable HTTP on 127.0.0.1
    LINECITE_HTTP_TOKEN=... python server.py --transport http --host 0.0.0.0

Serves every knowledge base under the base folder (`--base-path`, else LINECITE_HOME, else
the user data folder). Tools are thin: each calls one Library method (library.py). Kiwi,
jieba, the embedder and Chroma load on the first call that needs them or in the warm-up
(stdio: from `initialize`; HTTP: as it starts), so tools are listed as soon as a bare FastMCP
server lists its own (`python -m bench startup`). Nothing but protocol is written to stdout.

Layer: surface (top): the MCP tools and transports; nothing of the product imports it.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import logging
import os
import sys
import threading
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Literal, TypeVar
from urllib.parse import urlsplit

import anyio
from fastmcp import Context, FastMCP
from fastmcp.exceptions import FastMCPError, PromptError, ResourceError, ToolError, ValidationError
from fastmcp.server.lifespan import lifespan
from fastmcp.server.middleware import Middleware
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, ListResourcesResult, PaginatedRequestParams, Resource
from pydantic import BeforeValidator, Field
from pydantic import ValidationError as PydanticError
from pydantic_core import PydanticCustomError

import kb as kbmod
from adapters import mcp_internals
from common import limits, paths
from common.limits import UserError
from common.version import VERSION
from library import MAX_CONTEXT, Library
from ranking import filters
from service import multikb, watcher
from surface import resources, stdio_transport, webui

# ---------------------------------------------------------------------------
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000
WARM_UP_ENV = "LINECITE_WARM_UP"  # "0": no warm-up search (at initialize; HTTP: at start)
HANDSHAKE_GRACE = 1.0  # seconds a warm-up started at initialize waits for tools/list
TOKEN_ENV = "LINECITE_HTTP_TOKEN"  # bearer token; required when binding a non-loopback address
# ---------------------------------------------------------------------------

READ_ONLY = {"readOnlyHint": True, "openWorldHint": False}
KbId = Annotated[str | None, Field(description="Knowledge base id (see list_knowledge_bases); "
                                               "may be left out when there is only one")]
SearchKbIds = Annotated[
    str | Annotated[list[str], Field(max_length=multikb.MAX_SEARCH_KBS)] | None,
    Field(description="Knowledge base id (see list_knowledge_bases), a list of ids, or \"*\" "
                      f"for every one: at most {multikb.MAX_SEARCH_KBS} a search, ranked as one "
                      "list, each hit naming its kb_id; may be left out when there is only one")]


def refuse_bool(value: object) -> object:
    """`true` is no number, but pydantic's lax mode reads it as 1. Lax mode stays: hosts send
    numbers as "5" or 5.0 (Claude Desktop, Cursor), and JSON Schema calls 5.0 an integer."""
    if isinstance(value, bool):
        raise PydanticCustomError("int_type", "Input should be a valid integer")
    return value


def whole(low: int, high: int, description: str) -> object:
    """An integer argument's type: bounded both ways, both bounds stated in its schema
    (minimum, maximum and the description), so 2**63 never reaches SQLite."""
    return Annotated[int, Field(ge=low, le=high, description=f"{description} ({low} to {high:,})"),
                     BeforeValidator(refuse_bool)]  # after Field, or the schema loses the bounds


@lifespan
async def open_library(server: FastMCP):
    library = Library(paths.default_base_path())
    warm_up.library = library
    if warm_up.at_start:
        warm_up.start()
    library.watch = watcher.start(library.base)  # folders kept current; begins after a second
    try:
        yield {"library": library}
    finally:
        library.watch.stop()
        warm_up.library = None
        library.close()


KIND_WORDS = {"int_parsing": "a whole number", "int_type": "a whole number",
              "int_from_float": "a whole number", "bool_parsing": "true or false",
              "bool_type": "true or false", "string_type": "text"}


def argument_errors(tool: str, err: PydanticError, known: list[str]) -> str:
    """pydantic's report as sentences that say what is allowed (no URL, no type names)."""
    sentences = []
    for detail in err.errors(include_url=False):
        name = ".".join(str(part) for part in detail["loc"]) or "arguments"
        ctx, kind = detail.get("ctx") or {}, detail["type"]
        if kind in ("missing", "missing_argument"):
            sentences.append(f"{name} is required")
        elif kind in KIND_WORDS:
            sentences.append(f"{name} must be {KIND_WORDS[kind]}")
        elif kind == "unexpected_keyword_argument":
            sentences.append(f"{tool} has no argument {limits.shown(name)}; its arguments "
                             f"are: {', '.join(known)}")
        elif kind in ("less_than_equal", "greater_than_equal", "less_than", "greater_than"):
            bound = {"less_than_equal": "at most", "greater_than_equal": "at least",
                     "less_than": "less than", "greater_than": "more than"}[kind]
            limit = next(iter(ctx.values()), "")
            sentences.append(f"{name} must be {bound} {limit:,}" if isinstance(limit, int)
                             else f"{name} must be {bound} {limit}")
        elif kind == "too_long":
            sentences.append(f"{name} holds {ctx.get('actual_length')} items; send at most "
                             f"{ctx.get('max_length')}")
        elif kind == "literal_error":
            sentences.append(f"{name} must be one of {ctx.get('expected', '')}")
        else:
            sentences.append(f"{name} is not valid here ({detail['msg'].lower()})")
    return f"{tool}: " + "; ".join(sentences) + "."


class PlainArgumentErrors(Middleware):
    """A wrong argument gets one sentence in our voice, not pydantic's report and its URL."""

    async def on_call_tool(self, context, call_next):
        try:
            return await call_next(context)
        except ValidationError as err:
            if not isinstance(err.__cause__, PydanticError):
                raise
            name = context.message.name
            tool = await mcp.get_tool(name)
            known = list(tool.parameters.get("properties", {})) if tool else []
            raise ToolError(argument_errors(name, err.__cause__, known)) from None


class NoInternalErrors(Middleware):
    """A failure inside linecite or a library (Chroma's, SQLite's) reaches the agent as one
    sentence that says what to do; its text and traceback go to stderr, the host's log.
    fastmcp would send `str(err)`: a path, or "'RustBindingsAPI' object has no attribute"."""

    async def on_call_tool(self, context, call_next):
        try:
            return await call_next(context)
        except ToolError as err:
            cause = err.__cause__
            if cause is None or isinstance(cause, FastMCPError):
                raise  # ours (UserError, argument errors) or fastmcp's own words
            name = context.message.name
            print(f"linecite: {name} failed inside the server:", file=sys.stderr)
            traceback.print_exception(cause, file=sys.stderr)
            raise ToolError(f"{name} failed inside the server; nothing already indexed was "
                            "lost. Try the call again; if it fails again, the server's log "
                            "(its stderr, in the host's MCP log) says why") from None


class WarmUp(Middleware):
    """Load what a first search needs, in a thread: in a new process that search otherwise
    waits seconds for Kiwi, jieba, the embedder and Chroma. Over stdio it starts when the host
    says `initialize` (the process is its: the spawn's imports are done, and the host asks
    soon after); the HTTP server starts it with the server (`at_start`), not at a first
    request. tools/list starts it too, for a host that never initializes. LINECITE_WARM_UP=0
    turns it off."""

    library: Library | None = None
    at_start = False  # set by main() for the HTTP transport
    started = False

    def __init__(self) -> None:
        self.listed = threading.Event()  # tools/list answered: the handshake is over

    def start(self) -> None:
        """Start the warm-up once per process (a no-op when off or already started)."""
        if self.started or self.library is None or os.environ.get(WARM_UP_ENV, "1") == "0":
            return
        self.started = True
        threading.Thread(target=self._run, args=(self.library,), name="linecite-warm-up",
                         daemon=True).start()

    def _run(self, library: Library) -> None:
        """Yield to the handshake first: on 2 cores the loads' imports, started at once,
        made tools/list ~0.5-1 s slower; a host lists the tools right after initializing."""
        self.listed.wait(0 if self.at_start else HANDSHAKE_GRACE)
        library.warm_up()

    async def on_initialize(self, context, call_next):
        self.start()
        return await call_next(context)

    async def on_discover(self, context, call_next):
        self.start()
        return await call_next(context)

    async def on_list_tools(self, context, call_next):
        self.start()
        try:
            return await call_next(context)
        finally:
            self.listed.set()


warm_up = WarmUp()

mcp = FastMCP(
    "linecite",
    version=VERSION,  # serverInfo.version; fastmcp's own otherwise
    instructions="Search local documents and cite them. Call `search` to find where something "
                 "is said (source, page, line_start, line_end), then `read_range` to read those "
                 "exact lines before quoting them. Cite as: source, page, lines.",
    lifespan=open_library,
    middleware=[NoInternalErrors(), PlainArgumentErrors(), warm_up],
)


T = TypeVar("T")


async def run(ctx: Context, work: Callable[[Library], T]) -> T:
    """Run `work(library)` off the event loop; a UserError becomes a ToolError the agent reads."""
    library: Library = ctx.lifespan_context["library"]
    try:
        return await anyio.to_thread.run_sync(work, library)
    except (UserError, kbmod.ConfigError, FileNotFoundError) as err:
        raise ToolError(str(err)) from None


@mcp.tool(annotations=READ_ONLY)
async def list_knowledge_bases(ctx: Context) -> dict:
    """List the knowledge bases: id, name, counts, index status and embedder."""
    return {"knowledge_bases": await run(ctx, Library.list_knowledge_bases)}


@mcp.tool(annotations=READ_ONLY)
async def search(
    ctx: Context,
    query: Annotated[str, Field(description="What to look for: words, a question, a name or a "
                                            f"number (at most {limits.MAX_QUERY_CHARS:,} "
                                            "characters)")],
    top_k: whole(1, limits.MAX_TOP_K, "How many hits to return") = 10,
    search_mode: Annotated[Literal["auto", "bm25", "vector", "exact"], Field(
        description="auto: keywords and meaning combined; bm25: keywords; vector: meaning; "
                    "exact: lines containing the query as written (names, codes, numbers)")
    ] = "auto",
    kb_id: SearchKbIds = None,
    source: Annotated[str | None, Field(description="Only search this source (a name from "
                                                    "list_sources), or the sources a path glob "
                                                    "matches (src/**/*.py)")] = None,
    queries: Annotated[list[str] | None, Field(
        max_length=limits.MAX_QUERIES,
        description="Other phrasings of the same question, searched too and fused into one "
                    "list: other words, or another language the documents may be in (at "
                    f"most {limits.MAX_QUERIES}; each hit's `queries` says which found it)")
    ] = None,
    diversity: Annotated[float | None, Field(
        ge=0.0, le=1.0, description="0 to 1: how much to prefer hits unlike those above them "
                                    "(0 = by relevance only; default: the KB's setting)")
    ] = None,
    expand: Annotated[bool, Field(description="Let the KB's query expansion (if it has one) "
                                              "add rewrites of the query")] = True,
    case_sensitive: Annotated[bool, Field(description="exact mode: match the query's case "
                                                      "too (getURL, not getUrl)")] = False,
    path: Annotated[str | None, Field(description="Only sources whose name or file path "
                                                  "matches this glob (contracts/2024/**) or "
                                                  "starts with this prefix (contracts/2024/), "
                                                  "from the start or any folder")] = None,
    types: Annotated[list[str] | None, Field(
        max_length=filters.MAX_TYPES,
        description="Only sources of these types: an extension (pdf, docx, xlsx, md, py) or a "
                    "family (pdf, text, office, hwp, markup, mail, image, audio, data, code)")
    ] = None,
    modified_after: Annotated[str | None, Field(description="Only files modified at or after "
                                                            "this ISO 8601 date or time (a mail: "
                                                            "its Date:), e.g. 2024-03-01")] = None,
    modified_before: Annotated[str | None, Field(description="Only files modified before this "
                                                             "ISO 8601 date or time")] = None,
    language: Annotated[list[str] | None, Field(
        max_length=filters.MAX_TYPES,
        description="Only sources in these languages: written in (ko, zh, ja, en, latin; or "
                    "Korean, 한국어, Chinese, 中文...) or, for code, programmed in (python, "
                    "typescript...); list_sources shows each source's")] = None,
) -> dict:
    """Find where something is said: hits with source, page, line_start, line_end and text.

    Read a hit's exact lines with read_range(source, page, line_start, line_end, kb_id)
    before citing. Filters (path, types, dates, language) narrow the files before ranking.
    """
    return await run(ctx, lambda lib: lib.search(
        query, top_k, search_mode, kb_id, source, queries, diversity, expand, case_sensitive,
        filters.parse(path, types, modified_after, modified_before, language)))


@mcp.tool(annotations=READ_ONLY)
async def read_range(
    ctx: Context,
    source: Annotated[str, Field(description="Source name, as in a search hit")],
    page: whole(1, limits.MAX_POSITION, "Page number (1-based), as in a search hit"),
    line_start: whole(1, limits.MAX_POSITION, "First line (1-based)") = 1,
    line_end: whole(-1, limits.MAX_POSITION, "Last line; -1 for the end of the page") = -1,
    context: whole(0, MAX_CONTEXT, "Extra lines each side") = 0,
    kb_id: KbId = None,
    char_offset: whole(0, limits.MAX_POSITION, "Start each line at this character: to read "
                       "on in a line that was cut (its next_char_offset)") = 0,
) -> dict:
    """Read exact numbered lines of one page of an indexed source, to quote and cite them.

    At most 500 lines or 40,000 characters come back, each line cut at 2,000 characters; the
    answer says where to read on (`more`, a line's `next_char_offset`).
    """
    return await run(ctx, lambda lib: lib.read_range(source, page, line_start, line_end,
                                                     context, kb_id, char_offset))


@mcp.tool(annotations=READ_ONLY)
async def get_document_chunk(
    ctx: Context,
    chunk_id: Annotated[str, Field(description="A chunk_id from a search hit")],
    kb_id: KbId = None,
) -> dict:
    """Get one chunk with its lines and the ids of the chunks before and after it."""
    return await run(ctx, lambda lib: lib.get_document_chunk(chunk_id, kb_id))


@mcp.tool(annotations=READ_ONLY)
async def list_sources(
    ctx: Context,
    kb_id: KbId = None,
    offset: whole(0, limits.MAX_POSITION, "Skip this many sources (from a previous answer's "
                  "next_offset)") = 0,
    limit: whole(1, limits.MAX_LIST_ROWS, "Sources per answer") = 100,
) -> dict:
    """List indexed sources by name: pages, chunks, parser, state, error, when indexed."""
    return await run(ctx, lambda lib: lib.list_sources(kb_id, offset, limit))


def progress_reporter(ctx: Context):
    """An indexing run's progress callback (it runs in a worker thread) that sends each step
    to the client as an MCP progress notification."""
    def report(done: int, total: int, message: str) -> None:
        anyio.from_thread.run(ctx.report_progress, done, total, message)

    return report


@mcp.tool(annotations={"readOnlyHint": False, "idempotentHint": True,
                       "destructiveHint": False, "openWorldHint": False})
async def ingest_file(
    ctx: Context,
    path: Annotated[str, Field(description="Absolute path of a file inside a folder the "
                                           "knowledge base allows (its sourcePaths)")],
    source_name: Annotated[str | None, Field(description="Name to cite it by (default: the "
                                                         "file name)")] = None,
    kb_id: KbId = None,
) -> dict:
    """Index (or re-index) one file; unchanged files are skipped. Returns the run's summary."""
    return await run(ctx, lambda lib: lib.ingest_file(path, source_name, kb_id,
                                                      progress_reporter(ctx)))


@mcp.tool(annotations={"readOnlyHint": False, "idempotentHint": True,
                       "destructiveHint": False, "openWorldHint": True})
async def ingest_url(
    ctx: Context,
    url: Annotated[str, Field(description="http:// or https:// address of one web page or "
                                          "document (PDF, DOCX, ...)")],
    kb_id: KbId = None,
) -> dict:
    """Fetch one web page or document and index it under its URL (again: replaced).

    Bounded in size, time and redirects; loopback, private, link-local and cloud metadata
    addresses are refused unless the knowledge base allows private ones."""
    return await run(ctx, lambda lib: lib.ingest_url(url, kb_id, progress_reporter(ctx)))


@mcp.tool(annotations={"readOnlyHint": False, "idempotentHint": True,
                       "destructiveHint": False, "openWorldHint": False})
async def start_reindex(
    ctx: Context,
    kb_id: KbId = None,
    scope: Annotated[Literal[kbmod.SCOPES], Field(
        description="full: sync the KB's folders (new, changed and deleted files), then "
                    "contextualize and embed what is new; contextualization: redo every "
                    "chunk's context and embedding from the stored text (no file is read "
                    "again); embedding: embed every chunk again (after changing the "
                    "embedder). A second request for a queued KB joins it: the run "
                    "does every scope asked")] = "full",
    force: Annotated[bool, Field(description="Redo unchanged files too")] = False,
    deferred: Annotated[bool, Field(description="Only queue it; it runs with the next "
                                                "`queue_runner.py --sweep-all`")] = False,
) -> dict:
    """Queue a reindex of a knowledge base and start the background orchestrator.

    Returns at once with the queue position; poll get_index_info for progress. Search keeps
    working while it runs. A second request for a queued KB joins that entry, never doubles it.
    """
    return await run(ctx, lambda lib: lib.start_reindex(kb_id, scope, force, deferred))


@mcp.tool(annotations={"readOnlyHint": False, "idempotentHint": True,
                       "destructiveHint": False, "openWorldHint": False})
async def cancel_reindex(ctx: Context, kb_id: KbId = None) -> dict:
    """Drop a KB's queued reindex, and stop a running one at the next file boundary."""
    return await run(ctx, lambda lib: lib.cancel_reindex(kb_id))


@mcp.tool(annotations=READ_ONLY)
async def get_index_info(ctx: Context, kb_id: KbId = None) -> dict:
    """Index status: running/queued/idle, progress and the file in hand (with its OCR page
    or recording time), queue position, the last run's counts and errors, the last 20 runs'
    outcomes, sources per state, the files that failed and why, and
    which folders the server watches and what changed files wait to be queued."""
    return await run(ctx, lambda lib: lib.get_index_info(kb_id))


@mcp.tool(annotations=READ_ONLY)
async def check_changes(ctx: Context, kb_id: KbId = None) -> dict:
    """Dry run of a folder sync: files added, modified and deleted since the last index.
    Reads only file metadata (and hashes where needed); calls no model."""
    return await run(ctx, lambda lib: lib.check_changes(kb_id))


# --------------------------------------------------------------------------- resources, prompt
async def resource(ctx: Context, work: Callable[[Library], dict]) -> str:
    """A resource's JSON text from `work(library)`; a UserError as a ResourceError."""
    try:
        return json.dumps(await run(ctx, work), ensure_ascii=False)
    except ToolError as err:  # the agent's to fix, no server fault: not logged with a trace
        raise ResourceError(str(err), log_level=logging.DEBUG) from None


@mcp.resource(resources.SOURCE_TEMPLATE, mime_type=resources.MIME)
async def source_outline(kb_id: str, source: str, ctx: Context) -> str:
    """A source's outline: pages, lines per page and headings, each page with its URI (the
    source name percent-encoded as UTF-8, "/" too)."""
    return await resource(ctx, lambda lib: resources.outline(lib, kb_id, source))


@mcp.resource(resources.PAGE_TEMPLATE, mime_type=resources.MIME)
async def source_page(kb_id: str, source: str, page: str, ctx: Context) -> str:
    """A page's numbered lines, as read_range returns them (at most 500 lines or 40,000
    characters; `more` says where to read on)."""
    return await resource(ctx, lambda lib: resources.page_lines(lib, kb_id, source, page))


@mcp.prompt(name="cite")
def cite(question: Annotated[str, Field(description="The question to answer from the "
                                                    "documents")] = "",
         kb_id: Annotated[str, Field(description="A knowledge base to search (default: "
                                                 "every one)")] = "") -> str:
    """Answer from the documents with exact citations: search, then read_range, then quote
    with source, page and lines."""
    try:
        return resources.cite_prompt(question, kb_id)
    except UserError as err:
        raise PromptError(str(err), log_level=logging.DEBUG) from None


async def list_sources_as_resources(ctx, params: PaginatedRequestParams):
    """resources/list: every KB's sources, resources.LIST_PAGE at a time, read page by page
    from SQLite (fastmcp would list every resource at once, then cut a page out of it)."""
    library: Library = ctx.lifespan_context["library"]
    cursor = params.cursor if params else None
    try:
        found, after = await anyio.to_thread.run_sync(resources.list_page, library, cursor)
    except ValueError as err:
        raise MCPError(code=INVALID_PARAMS, message=str(err)) from None
    own = [] if cursor else [r.to_mcp_resource(uri=str(r.uri)) for r in
                             await mcp.list_resources()]  # any fixed resource: first page
    return ListResourcesResult(resources=own + [Resource.model_validate(r) for r in found],
                               next_cursor=after)


mcp_internals.replace_request_handler(mcp, "resources/list", PaginatedRequestParams,
                                      list_sources_as_resources)  # fastmcp's own one


# ---------------------------------------------------------------------------
def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def normal_host(host: str) -> str:
    """A host name or address as origins compare it: lower case, IPv6 in its short form."""
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        return host.lower()


def origin_key(origin: str) -> tuple[str, str, int | None] | None:
    """(scheme, host, port) of a browser Origin, its default port filled in; None when it is
    no plain scheme://host[:port] (a path, user info, "null", a malformed port)."""
    try:
        parts = urlsplit(origin)
        port = parts.port or {"http": 80, "https": 443}.get(parts.scheme)
    except ValueError:
        return None
    if not parts.hostname or parts.path or parts.query or parts.fragment or parts.username:
        return None
    return parts.scheme.lower(), normal_host(parts.hostname), port


def own_origins(scheme: str, bind_host: str, port: int, host_header: str) -> set:
    """The origins that are this server's: the address it binds, exactly (no alias: on a
    loopback bind `localhost` or `[::1]` may reach another program's socket on our port).
    Off loopback also the Host a request was sent to, as clients name the machine in ways we
    cannot list; there a token is required, which a rebinding page cannot send."""
    own = set()
    if bind_host not in ("0.0.0.0", "::"):
        own.add((scheme, normal_host(bind_host), port))
    if not is_loopback(bind_host):
        own.add(origin_key(f"{scheme}://{host_header}"))
    return own - {None}


class OwnOriginOnly:
    """Refuse browser requests (403) from any origin but this server's own scheme, host and
    port. fastmcp's guard lets every loopback origin reach a loopback server, so a page from
    another localhost port, another scheme or 127.0.0.2 could otherwise call our tools."""

    def __init__(self, app, host: str, port: int):
        self.app = app
        self.host = host
        self.port = port

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http":
            from starlette.datastructures import Headers
            from starlette.responses import Response

            headers = Headers(scope=scope)
            origin = headers.get("origin")
            own = own_origins(scope.get("scheme", "http"), self.host, self.port,
                              headers.get("host", ""))
            if origin is not None and origin_key(origin) not in own:
                await Response("Forbidden Origin", status_code=403)(scope, receive, send)
                return
        await self.app(scope, receive, send)


def jsonrpc_refusal(status: int, problem: str):
    """A JSON-RPC error for a request refused before any work; its id is null, never echoed."""
    from starlette.responses import JSONResponse

    return JSONResponse(limits.invalid_request(problem), status_code=status)


async def read_body(receive, limit: int) -> bytes | None:
    """A request's body, or None once it passes `limit` bytes (the rest is never read)."""
    body = bytearray()
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return bytes(body)  # the client went away; the app sees the same
        body += message.get("body", b"")
        if len(body) > limit:
            return None
        if not message.get("more_body", False):
            return bytes(body)


class BoundedRequests:
    """Check a POSTed body against limits.py before any work: at most MAX_REQUEST_BYTES (413),
    and what answers echo (the id, the method, the tool named) bounded (400), so a megabyte
    id never comes back whole. The body is then handed on unchanged."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        body = await read_body(receive, limits.MAX_REQUEST_BYTES)
        if body is None:
            refusal = jsonrpc_refusal(413, limits.oversize_problem())
            await refusal(scope, receive, send)
            return
        problem = limits.message_problem(body)
        if problem:
            await jsonrpc_refusal(400, problem)(scope, receive, send)
            return
        sent = False

        async def replay():
            nonlocal sent
            if sent:
                return await receive()
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)


def http_auth(host: str):
    """Bearer-token auth from TOKEN_ENV; refuse to serve a non-loopback address without it."""
    token = os.environ.get(TOKEN_ENV, "").strip()
    if token and len(token) < limits.MIN_TOKEN_CHARS:
        raise SystemExit(f"linecite: {TOKEN_ENV} is {len(token)} characters long; a token "
                         f"needs at least {limits.MIN_TOKEN_CHARS} (a short one is guessed). "
                         "Set it to a long random string, e.g. the output of "
                         "python -c \"import secrets; print(secrets.token_urlsafe(32))\"")
    if not token:
        if not is_loopback(host):
            raise SystemExit(f"linecite: refusing to listen on {host} without a token; set "
                             f"{TOKEN_ENV} to a long random string (clients send it as "
                             "'Authorization: Bearer <token>'), or bind 127.0.0.1")
        return None
    from fastmcp.server.auth.providers.jwt import StaticTokenVerifier

    return StaticTokenVerifier(tokens={token: {"client_id": "linecite", "scopes": []}})


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="linecite MCP server")
    parser.add_argument("--version", action="version", version=f"linecite {VERSION}")
    parser.add_argument("--transport", choices=["stdio", "http"],
                        default=os.environ.get("LINECITE_TRANSPORT", "stdio"))
    parser.add_argument("--host", default=os.environ.get("LINECITE_HOST", DEFAULT_HOST))
    parser.add_argument("--port", type=int, default=int(os.environ.get("LINECITE_PORT",
                                                                       DEFAULT_PORT)))
    parser.add_argument("--base-path", type=Path, default=None,
                        help="folder holding all KBs (default: $LINECITE_HOME or user data)")
    parser.add_argument("--ui", nargs="?", type=int, const=0, default=None, metavar="PORT",
                        help="serve only the web page, on 127.0.0.1 (a free port unless "
                             "PORT), and open the browser on it")
    args = parser.parse_args(argv)
    if args.base_path is not None:  # the flag wins over the environment, for the
        os.environ[paths.HOME_ENV] = str(args.base_path)  # lifespan and every child process
    if args.ui is not None:
        from starlette.middleware import Middleware

        webui.serve_alone(args.ui, lambda port: [
            Middleware(OwnOriginOnly, host=DEFAULT_HOST, port=port), Middleware(BoundedRequests)])
        return
    if args.transport == "stdio":
        stdio_transport.serve(mcp)
        return
    mcp.auth = http_auth(args.host)
    warm_up.at_start = True  # an HTTP server warms up as it starts, not at a first request
    print(f"linecite: serving MCP on http://{args.host}:{args.port}/mcp", file=sys.stderr)
    ui = webui.WebUI(lambda: warm_up.library, os.environ.get(TOKEN_ENV, "").strip() or None)
    for path, methods, endpoint in ui.endpoints():  # the page at /, its API at /api/...
        mcp.custom_route(path, methods=methods)(endpoint)
    # Host check: on loopback it stops DNS rebinding. Off loopback a token is required, which
    # a rebinding page cannot send, and clients reach the machine by names and addresses we
    # cannot list (0.0.0.0 is never a Host header), so any Host is let through. A foreign
    # browser Origin is refused either way.
    from starlette.middleware import Middleware

    mcp.run("http", show_banner=False, host=args.host, port=args.port,
            host_origin_protection=True,
            allowed_hosts=None if is_loopback(args.host) else ["*"],
            middleware=[Middleware(OwnOriginOnly, host=args.host, port=args.port),
                        Middleware(BoundedRequests)])


if __name__ == "__main__":
    main()
