"""linecite's MCP server: find where something is said, then read those exact lines.

    python server.py                                   # stdio, for Claude Desktop, Cursor, ...
    python server.py --transport http --port 8000      # streamable HTTP on 127.0.0.1
    LINECITE_HTTP_TOKEN=... python server.py --transport http --host 0.0.0.0

Serves every knowledge base under the base folder (`--base-path`, else LINECITE_HOME, else
the user data folder). Tools are thin: each calls one Library method (library.py). Kiwi,
jieba, the embedder and Chroma load on the first call that needs them or in the warm-up
(stdio: from `initialize`; HTTP: as it starts), so tools are listed as soon as a bare FastMCP
server lists its own (`python -m bench startup`). Nothing but protocol is written to stdout.
Here: the tools, the resources and prompt, the lifespan and main(); in surface/: the HTTP
transport's defences (http_guards), how failed calls are worded (tool_errors), the warm-up
(warmup), the stdio transport, the web page.

Layer: surface (top): the MCP tools and transports; nothing of the product imports it.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Literal, TypeVar

import anyio
from fastmcp import Context, FastMCP
from fastmcp.exceptions import PromptError, ResourceError, ToolError
from fastmcp.server.lifespan import lifespan
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, ListResourcesResult, PaginatedRequestParams, Resource
from pydantic import BaseModel, ConfigDict, Field

import kb as kbmod
from adapters import mcp_internals
from common import limits, paths
from common.commands import command
from common.limits import UserError
from common.version import VERSION
from library import MAX_CONTEXT, Library
from ranking import filters
from ranking.request import SearchRequest
from service import multikb, watcher
from surface import completions, http_guards, resources, stdio_transport, subscriptions, webui
from surface.tool_errors import NoInternalErrors, PlainArgumentErrors, whole
from surface.warmup import WarmUp

# ---------------------------------------------------------------------------
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000
# ---------------------------------------------------------------------------

READ_ONLY = {"readOnlyHint": True, "openWorldHint": False}
KbId = Annotated[str | None, Field(description="Knowledge base id (see list_knowledge_bases); "
                                               "may be left out when there is only one")]
SearchKbIds = Annotated[
    str | Annotated[list[str], Field(max_length=multikb.MAX_SEARCH_KBS)] | None,
    Field(description="Knowledge base id (see list_knowledge_bases), a list of ids, or \"*\" "
                      f"for every one: at most {multikb.MAX_SEARCH_KBS} a search, ranked as one "
                      "list, each hit naming its kb_id; left out: every knowledge base")]


base_folder: Path | None = None  # set by main() from --base-path; None: the default folder


@lifespan
async def open_library(server: FastMCP):
    """The server's Library over the base folder, warmed up and its folders watched."""
    library = Library(base_folder or paths.default_base_path())
    warm_up.library = library
    if warm_up.at_start:
        warm_up.start()
    library.watch = watcher.start(library.base)  # folders kept current; begins after a second
    notifier.start(library)  # hosts told of changed sources (surface/subscriptions.py)
    try:
        yield {"library": library}
    finally:
        await notifier.stop()
        library.watch.stop()
        warm_up.library = None
        library.close()


warm_up = WarmUp()
notifier = subscriptions.Notifier()

mcp = FastMCP(
    "linecite",
    version=VERSION,  # serverInfo.version; fastmcp's own otherwise
    instructions="Search local documents and cite them. Call `search` to find where something "
                 "is said (source, page, line_start, line_end), then `read_range` to read those "
                 "exact lines before quoting them, and `verify_citation` to check the quotes "
                 "before answering. Cite as: source, page, lines.",
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


def progress_reporter(ctx: Context):
    """An indexing run's progress callback (it runs in a worker thread) that sends each step
    to the client as an MCP progress notification."""
    def report(done: int, total: int, message: str) -> None:
        anyio.from_thread.run(ctx.report_progress, done, total, message)

    return report


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
    before citing, and check the quotes of an answer with verify_citation before giving it.
    Filters (path, types, dates, language) narrow the files before ranking. Each hit says
    what found it: `matched` (the query's words it holds) and `similarity` (by meaning);
    `weak` hits and a `note` mean nothing held the words or came close.
    """
    return await run(ctx, lambda lib: lib.search(SearchRequest.checked(
        query, top_k, search_mode, kb_id, source, queries=queries, diversity=diversity,
        expand=expand, case_sensitive=case_sensitive,
        filters=filters.parse(path, types, modified_after, modified_before, language))))


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


class QuoteToCheck(BaseModel):
    """One quote of an answer and the place the answer cites for it (any part may be left
    out: the text is then looked for everywhere)."""

    model_config = ConfigDict(extra="forbid")  # a misspelt key is refused, not ignored
    text: str = Field(description="The quoted words as the answer gives them (at most "
                                  f"{limits.MAX_QUOTE_CHARS:,} characters); `...`, `…` or "
                                  "`[...]` marks words left out")
    source: str | None = Field(None, description="The source cited, as search hits name it")
    page: whole(1, limits.MAX_POSITION, "The page cited") | None = None
    line_start: whole(1, limits.MAX_POSITION, "The first line cited") | None = None
    line_end: whole(1, limits.MAX_POSITION, "The last line cited") | None = None


@mcp.tool(annotations=READ_ONLY)
async def verify_citation(
    ctx: Context,
    quotes: Annotated[list[QuoteToCheck], Field(
        max_length=limits.MAX_QUOTES,
        description=f"The quotes to check, 1 to {limits.MAX_QUOTES}: each its text and the "
                    "source, page and lines cited")],
    kb_id: Annotated[
        str | Annotated[list[str], Field(max_length=multikb.MAX_SEARCH_KBS)] | None,
        Field(description="Knowledge base id (see list_knowledge_bases), a list of ids, or "
                          f"\"*\" for every one (at most {multikb.MAX_SEARCH_KBS}): each quote "
                          "is answered from the one holding it best; may be left out when "
                          "there is only one")] = None,
    case_sensitive: Annotated[bool, Field(description="Count a difference in case as a "
                                                      "difference")] = False,
) -> dict:
    """Check quotes before answering with them: for each, in order, whether its text is word
    for word at the place cited (`verbatim`), word for word at another place (`elsewhere`:
    cite that one), nearly the same as a passage (`close`: its `differences` name the words
    that differ, such as a changed number or a dropped "not"; quote the passage's lines
    instead), or nowhere in the documents (`not_found`: do not present it as a quote).

    Each answer gives the source, page, line_start and line_end where the text really is, and
    those lines as read_range gives them. Line breaks, hyphenation, typographic quotes,
    dashes, ellipses and full-width forms do not count as differences.
    """
    return await run(ctx, lambda lib: lib.verify_citation(
        [quote.model_dump() for quote in quotes], kb_id, case_sensitive))


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
                                                f"`{command('queue', '--sweep-all')}`")] = False,
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
mcp.completion(completions.answer)  # KB ids, source names, pages for the templates and cite
subscriptions.serve(mcp, notifier)  # resources/subscribe, /unsubscribe; knowing each host


def main(argv: list[str] | None = None) -> None:
    global base_folder
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
    # The flag wins over LINECITE_HOME; the queue runner is given the Library's base folder
    # on its command line (queue_runner.start_orchestrator), so the environment stays as is.
    base_folder = (paths.default_base_path() if args.base_path is None
                   else args.base_path.expanduser())
    if args.ui is not None:
        webui.serve_alone(args.ui, base_folder,
                          lambda port: http_guards.middleware(DEFAULT_HOST, port))
        return
    if args.transport == "stdio":
        stdio_transport.serve(mcp)
        return
    mcp.auth = http_guards.http_auth(args.host)
    warm_up.at_start = True  # an HTTP server warms up as it starts, not at a first request
    print(f"linecite: serving MCP on http://{args.host}:{args.port}/mcp", file=sys.stderr)
    ui = webui.WebUI(lambda: warm_up.library, http_guards.configured_token())
    for path, methods, endpoint in ui.endpoints():  # the page at /, its API at /api/...
        mcp.custom_route(path, methods=methods)(endpoint)
    # Host check: on loopback it stops DNS rebinding. Off loopback a token is required, which
    # a rebinding page cannot send, and clients reach the machine by names and addresses we
    # cannot list (0.0.0.0 is never a Host header), so any Host is let through. A foreign
    # browser Origin is refused either way.
    mcp.run("http", show_banner=False, host=args.host, port=args.port,
            host_origin_protection=True,
            allowed_hosts=None if http_guards.is_loopback(args.host) else ["*"],
            middleware=http_guards.middleware(args.host, args.port))


if __name__ == "__main__":
    main()
