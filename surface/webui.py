"""The local web page for people: what is indexed, what failed and why, a search to try, the
cited lines; its routes and the small JSON API its script calls.

    python server.py --transport http      # the page at http://127.0.0.1:8000/, beside /mcp
    python server.py --ui                  # the page alone on loopback; opens the browser

Every read and write goes through the Library methods the MCP tools call (search, read_range,
list_sources, get_index_info, start_reindex, cancel_reindex, ingest_file; and
remove_source, which only the page offers), so the page and an agent see the same snapshot
and the same errors. Settings change through kb.py (`follow`,
`update`): checked by the code that reads config.json, written atomically. The page itself is
plain files in `webui/` (no build step, no CDN, nothing fetched at run time).

Security, on top of fastmcp's Host check and http_guards (own Origin only, bounded bodies): off
loopback every /api call needs the bearer token (the page asks for it once); every POST needs
the per-process CSRF token from /api/session in a header, which a page of another origin can
neither read nor send without a CORS preflight we never grant, and a `Sec-Fetch-Site` other
than same-origin is refused.

Layer: surface (top), beside server.py's tools; server.py mounts it, nothing else imports it.
"""

from __future__ import annotations

import hmac
import json
import secrets
import socket
import sys
import threading
import webbrowser
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import get_args

import anyio
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Route

import kb as kbmod
from common import limits
from common.limits import UserError
from library import MAX_CONTEXT, Library
from ranking.request import Mode, SearchRequest

# ---------------------------------------------------------------------------
STATIC = Path(__file__).resolve().parent.parent / "webui"  # the page's HTML, CSS and script
FILES = {"index.html": "text/html; charset=utf-8", "app.js": "text/javascript; charset=utf-8",
         "style.css": "text/css; charset=utf-8"}  # the only files served
CSRF_HEADER = "x-linecite-csrf"  # every POST carries /api/session's token in it
MAX_SCAN = 20_000  # sources a name filter reads through before it says it stopped
PAGE_ROWS = 50  # sources per page of the list
OPEN_DELAY = 0.5  # seconds between starting the page alone and opening the browser on it
# ---------------------------------------------------------------------------

FIXES = {  # a failed source's reason -> (its fix in one sentence, what the page's button does)
    "not-found": ("The file was moved or deleted: put it back, or reindex so it is dropped.",
                  "reindex"),
    "unsupported-format": ("linecite cannot read this kind of file: convert it (to PDF, DOCX "
                           "or text), or list its suffix in textExtensions if it is plain "
                           "text.", "copy"),
    "password-protected": ("The file is locked with a password: save a copy without one, "
                           "then retry.", "retry"),
    "corrupt": ("The file is damaged: re-save or re-export it from the program that made it, "
                "then retry.", "retry"),
    "empty": ("The file holds no text, so there is nothing to index; it is read again once it "
              "changes.", "retry"),
    "binary": ("The file is not text: give it the suffix of its real format, then retry.",
               "copy"),
    "too-large": ("The file is over the size limit: split it, or raise the limit (README, "
                  "Security and bounds), then retry.", "retry"),
    "zip-bomb": ("It would unpack far past the safety limits and is never opened: remove it "
                 "from the folder.", "copy"),
    "ocr-unavailable": ("OCR is not installed: install Tesseract with the kor and chi_sim "
                        "languages, then retry.", "retry"),
    "audio-unavailable": ("Audio transcription is not installed: install "
                          "requirements-audio.txt, then retry.", "retry"),
    "converter-unavailable": ("LibreOffice is not installed (it converts .doc, .ppt and .hwp): "
                              "install it, then retry.", "retry"),
    "degraded": ("The new version could not be read; the previous one is still searched: fix "
                 "the file, then retry.", "retry"),
    "warnings": ("Indexed, with warnings: read them; retry once the cause is fixed.", "retry"),
    "other": ("Read the error, fix the file, then retry.", "retry"),
}


def reason_of(problem: dict) -> str:
    """The FIXES key of a problem file: its error's reason word, else its state."""
    word = (problem.get("error") or "").split(":", 1)[0].strip()
    if problem.get("state") == "degraded":
        return "degraded"
    if word in FIXES:
        return word
    return "warnings" if problem.get("state") in ("ready", "pending_embedding") else "other"


def grouped_problems(problems: list[dict]) -> list[dict]:
    """get_index_info's problem files grouped by reason, each group with its fix and action."""
    groups: dict[str, list[dict]] = {}
    for problem in problems:
        groups.setdefault(reason_of(problem), []).append(problem)
    return [{"reason": reason, "fix": FIXES[reason][0], "action": FIXES[reason][1],
             "files": files} for reason, files in groups.items()]


# -- arguments from a query string or a JSON body --------------------------------------
def text(args: dict, name: str, max_chars: int, required: bool = True) -> str | None:
    """A string argument, checked like the tools' (length, control characters)."""
    value = args.get(name)
    if value in (None, "") and not required:
        return None
    if not isinstance(value, str) or not value.strip():
        raise UserError(f"{name} is required")
    limits.check_text(value, name, max_chars, allow_newlines=name == "query")
    return value


def number(args: dict, name: str, low: int, high: int, default: int) -> int:
    """A whole-number argument within [low, high]; `default` when left out."""
    value = args.get(name, default)
    try:
        value = int(value) if not isinstance(value, bool) else None
    except (TypeError, ValueError):
        value = None
    if value is None or not low <= value <= high:
        raise UserError(f"{name} must be a whole number from {low:,} to {high:,}")
    return value


def choice(args: dict, name: str, allowed: tuple, default: str | None = None) -> str:
    value = args.get(name) or default
    if value not in allowed:
        raise UserError(f"{name} must be one of {', '.join(allowed)}")
    return value


def flag(args: dict, name: str) -> bool:
    return args.get(name) in (True, "true", "1", "on")


# -- reads ------------------------------------------------------------------------------
def overview(lib: Library, args: dict) -> dict:
    """Every KB with its status, counts, settings, live run and last run; the queue; the
    values the settings may take."""
    import queue_runner
    from providers import embedders
    from ranking import fusion

    kbs = []
    for item in lib.list_knowledge_bases():
        if item.get("status") not in ("error", "damaged"):
            item.update(kb_details(lib, item["id"]))
        kbs.append(item)
    return {"knowledge_bases": kbs, "queue": queue_runner.entries(lib.base),
            "allowed": {"embedders": embedders.PROVIDERS, "fusions": fusion.FUSIONS,
                        "scopes": kbmod.SCOPES, "modes": get_args(Mode),
                        "max_top_k": limits.MAX_TOP_K, "max_context": MAX_CONTEXT}}


def kb_details(lib: Library, kb_id: str) -> dict:
    """A KB's settings and get_index_info, its problem files grouped by reason."""
    kb = kbmod.load(lib.base, kb_id)
    details = {"folders": kb.source_paths, "fusion": kbmod.search_settings(kb).fusion,
               "model": (kb.embedding or {}).get("model")}
    try:
        info = lib.get_index_info(kb_id)
    except UserError as err:
        return {**details, "info_error": str(err)}
    info["problem_groups"] = grouped_problems(info.pop("problem_files", []))
    return {**details, "index": info}


def sources(lib: Library, args: dict) -> dict:
    """A page of a KB's sources (list_sources); with `name`, those whose name holds it."""
    kb_id = text(args, "kb", limits.MAX_KB_ID_CHARS)
    offset = number(args, "offset", 0, limits.MAX_POSITION, 0)
    limit = number(args, "limit", 1, limits.MAX_LIST_ROWS, PAGE_ROWS)
    name = text(args, "name", limits.MAX_NAME_CHARS, required=False)
    if name is None:
        return lib.list_sources(kb_id, offset, limit)
    return filtered_sources(lib, kb_id, name.casefold(), offset, limit)


def filtered_sources(lib: Library, kb_id: str, needle: str, offset: int, limit: int) -> dict:
    """list_sources read page by page (at most MAX_SCAN sources) for names holding `needle`;
    `offset` counts matches, and `scanned_to` says where a stopped scan got."""
    matches, skipped, at, more = [], 0, 0, True
    while more and at < MAX_SCAN and len(matches) < limit:
        page = lib.list_sources(kb_id, at, limits.MAX_LIST_ROWS)
        for source in page["sources"]:
            if needle not in source["name"].casefold():
                continue
            if skipped < offset:
                skipped += 1
            elif len(matches) < limit:
                matches.append(source)
        at += len(page["sources"])
        more = "next_offset" in page
    result = {"kb_id": kb_id, "offset": offset, "sources": matches}
    if more and len(matches) == limit:
        result["next_offset"] = offset + limit
    elif more:
        result["scanned_to"] = at  # stopped at MAX_SCAN: later names were not read
    return result


def run_search(lib: Library, args: dict) -> dict:
    """The search tool's arguments, from the page's form."""
    queries = [q for q in args.get("queries") or [] if isinstance(q, str) and q.strip()]
    diversity = args.get("diversity")
    if diversity not in (None, ""):
        diversity = number(args, "diversity", 0, 100, 0) / 100  # the page sends a percentage
    else:
        diversity = None
    return lib.search(SearchRequest.checked(
        text(args, "query", limits.MAX_QUERY_CHARS),
        number(args, "top_k", 1, limits.MAX_TOP_K, 10),
        choice(args, "mode", get_args(Mode), "auto"),
        text(args, "kb", limits.MAX_KB_ID_CHARS, required=False),
        text(args, "source", limits.MAX_NAME_CHARS, required=False),
        queries=queries[:limits.MAX_QUERIES + 1] or None, diversity=diversity,
        expand=args.get("expand") is not False, case_sensitive=flag(args, "case_sensitive")))


def read(lib: Library, args: dict) -> dict:
    """read_range: a hit's lines with `context` lines each side."""
    return lib.read_range(text(args, "source", limits.MAX_NAME_CHARS),
                          number(args, "page", 1, limits.MAX_POSITION, 1),
                          number(args, "line_start", 1, limits.MAX_POSITION, 1),
                          number(args, "line_end", -1, limits.MAX_POSITION, -1),
                          number(args, "context", 0, MAX_CONTEXT, 0),
                          text(args, "kb", limits.MAX_KB_ID_CHARS, required=False))


# -- writes -----------------------------------------------------------------------------
def folder_arg(args: dict) -> Path:
    """An absolute path of an existing folder."""
    path = Path(text(args, "path", limits.MAX_PATH_CHARS)).expanduser()
    if not path.is_absolute():
        raise UserError(f"{limits.shown(str(path))} is not an absolute path; give the whole "
                        "path of the folder, e.g. C:\\Users\\me\\Documents or /home/me/docs")
    if not path.is_dir():
        raise UserError(f"{limits.shown(str(path))} is not a folder on this machine")
    return path


def add_folder(lib: Library, args: dict) -> dict:
    """Follow a folder; `create` makes the KB first when it does not exist yet."""
    kb_id = text(args, "kb", limits.MAX_KB_ID_CHARS)
    folder = folder_arg(args)
    if flag(args, "create"):
        kb = kbmod.open_or_create(lib.base, kbmod.check_kb_id(kb_id, lib.base))
    else:
        kb = kbmod.load(lib.base, lib.kbs.resolve(kb_id))
    added = kbmod.follow(kb, folder)
    return {"kb_id": kb.id, "added": added, "folders": kb.source_paths,
            "next": "start a reindex (scope full) to index the folder"}


def remove_folder(lib: Library, args: dict) -> dict:
    """Stop following a folder (its sources stay until the next full reindex drops them)."""
    kb_id = lib.kbs.resolve(text(args, "kb", limits.MAX_KB_ID_CHARS))
    path = text(args, "path", limits.MAX_PATH_CHARS)
    folders = kbmod.load(lib.base, kb_id).source_paths
    if path not in folders:
        raise UserError(f"{limits.shown(path)} is not a folder {kb_id!r} follows; it follows: "
                        f"{', '.join(folders) or 'none'}")

    def change(data: dict) -> None:
        data["sourcePaths"] = [p for p in data.get("sourcePaths") or [] if p != path]

    kb = kbmod.update(lib.base, kb_id, change)
    return {"kb_id": kb_id, "folders": kb.source_paths}


def settings(lib: Library, args: dict) -> dict:
    """Set the embedder (provider and model) and the fusion; kb.update checks them."""
    kb_id = lib.kbs.resolve(text(args, "kb", limits.MAX_KB_ID_CHARS))
    provider = text(args, "embedder", 40, required=False)
    model = text(args, "model", 200, required=False)
    method = text(args, "fusion", 40, required=False)
    before = kbmod.load(lib.base, kb_id)

    def change(data: dict) -> None:
        if provider is not None:
            old = data.get("embedding") or {}
            if (old.get("provider", "builtin"), old.get("model")) != (provider, model):
                data["embedding"] = {"provider": provider, **({"model": model} if model else {})}
        if method is not None:
            data["search"] = {**(data.get("search") or {}), "fusion": method}

    kb = kbmod.update(lib.base, kb_id, change)
    result = {"kb_id": kb_id, "embedder": kb.embedding.get("provider", "builtin"),
              "fusion": kbmod.search_settings(kb).fusion}
    if kb.embedding != before.embedding:
        result["next"] = "the embedder changed: start a reindex with scope 'embedding'"
    return result


def reindex(lib: Library, args: dict) -> dict:
    return lib.start_reindex(text(args, "kb", limits.MAX_KB_ID_CHARS),
                             choice(args, "scope", kbmod.SCOPES, "full"), flag(args, "force"),
                             False)


def cancel(lib: Library, args: dict) -> dict:
    return lib.cancel_reindex(text(args, "kb", limits.MAX_KB_ID_CHARS))


def retry(lib: Library, args: dict) -> dict:
    """Index one failed source again from its file (ingest_file, inside the KB's folders)."""
    import fulltext

    kb_id = lib.kbs.resolve(text(args, "kb", limits.MAX_KB_ID_CHARS))
    name = text(args, "source", limits.MAX_NAME_CHARS)
    with lib.kbs.reading(kb_id) as entry:
        row = fulltext.source_row(entry.conn, name)
    if row is None or not row["path"]:
        raise UserError(f"{limits.shown(name)} is no source of {kb_id!r} with a file to read "
                        "again; start a reindex instead")
    return lib.ingest_file(row["path"], name, kb_id)


def remove_source(lib: Library, args: dict) -> dict:
    """Drop one source from the index (Library.remove_source); the file is not touched."""
    return lib.remove_source(text(args, "source", limits.MAX_NAME_CHARS),
                             text(args, "kb", limits.MAX_KB_ID_CHARS))


READS = {"overview": overview, "sources": sources, "search": run_search, "read": read}
WRITES = {"add_folder": add_folder, "remove_folder": remove_folder, "settings": settings,
          "reindex": reindex, "cancel": cancel, "retry": retry, "remove_source": remove_source}


# -- HTTP -------------------------------------------------------------------------------
class WebUI:
    """The page's routes over one Library (got at request time: the server's lifespan opens
    it after the routes are made)."""

    def __init__(self, library: Callable[[], Library | None], token: str | None):
        self.library = library
        self.token = token  # the bearer token every /api call needs, or None on loopback
        self.csrf = secrets.token_urlsafe(32)  # per process: a restart asks the page again

    def endpoints(self) -> list[tuple[str, list[str], Callable]]:
        """(path, methods, endpoint) of each route: server.py mounts them beside /mcp."""
        return [("/", ["GET"], self.page), ("/ui/{name}", ["GET"], self.page),
                ("/api/session", ["GET"], self.session),
                ("/api/{name}", ["GET", "POST"], self.api)]

    async def page(self, request: Request) -> Response:
        name = request.path_params.get("name", "index.html")
        if name not in FILES:
            return Response("Not Found", status_code=404)
        return FileResponse(STATIC / name, media_type=FILES[name], headers=PAGE_HEADERS)

    def authorised(self, request: Request) -> bool:
        if self.token is None:
            return True
        sent = request.headers.get("authorization", "")
        return hmac.compare_digest(sent.encode(), f"Bearer {self.token}".encode())

    async def session(self, request: Request) -> Response:
        """The CSRF token, for a caller that holds the bearer token (when one is set)."""
        if not self.authorised(request):
            return refusal(401, "this server needs its access token (LINECITE_HTTP_TOKEN)")
        return JSONResponse({"csrf": self.csrf}, headers=API_HEADERS)

    async def api(self, request: Request) -> Response:
        name = request.path_params["name"]
        handlers = READS if request.method == "GET" else WRITES
        if name not in handlers:
            return refusal(404, f"no {request.method} /api/{name}")
        if not self.authorised(request):
            return refusal(401, "this server needs its access token (LINECITE_HTTP_TOKEN)")
        if request.method == "POST":
            problem = self.post_problem(request)
            if problem:
                return refusal(403, problem)
            args = await json_body(request)
        else:
            args = {k: v for k, v in request.query_params.items()}
            args["queries"] = request.query_params.getlist("queries")
        if args is None:
            return refusal(400, "the body must be a JSON object")
        return await self.call(handlers[name], args)

    def post_problem(self, request: Request) -> str | None:
        """Why a POST is refused as cross-site, or None (server.py checked its Origin)."""
        site = request.headers.get("sec-fetch-site")
        if site is not None and site not in ("same-origin", "none"):
            return f"a {site} request may not change anything here"
        sent = request.headers.get(CSRF_HEADER, "")
        if not hmac.compare_digest(sent.encode(), self.csrf.encode()):
            return "the page's token is missing or old: reload the page"
        return None

    async def call(self, handler, args: dict) -> Response:
        lib = self.library()
        if lib is None:
            return refusal(503, "the server is starting; try again in a moment")
        try:
            result = await anyio.to_thread.run_sync(handler, lib, args)
        except (UserError, kbmod.ConfigError, FileNotFoundError) as err:
            return refusal(400, str(err))
        return JSONResponse(result, headers=API_HEADERS)


PAGE_HEADERS = {"Content-Security-Policy": "default-src 'self'; img-src 'self' data:; "
                                           "object-src 'none'; base-uri 'none'; "
                                           "frame-ancestors 'none'; form-action 'none'",
                "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer",
                "Cache-Control": "no-store"}
API_HEADERS = {"X-Content-Type-Options": "nosniff", "Cache-Control": "no-store"}


def refusal(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers=API_HEADERS)


async def json_body(request: Request) -> dict | None:
    """The POSTed JSON object (http_guards.BoundedRequests bounded its size), else None."""
    try:
        data = json.loads(await request.body())
    except (ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) else None



def serve_alone(port: int, base: Path, middleware: Callable[[int], list],
                open_browser: bool = True) -> None:
    """`server.py --ui`: the page alone (no /mcp) on 127.0.0.1 over the KBs under `base`, behind
    server.py's `middleware(port)` and fastmcp's Host check, and the browser opened on it. Port 0
    takes a free one; the address is said on stderr."""
    import uvicorn
    from fastmcp.server.http import HostOriginGuardMiddleware
    from starlette.applications import Starlette
    from starlette.middleware import Middleware

    holder: dict[str, Library] = {}
    ui = WebUI(lambda: holder.get("library"), None)

    @asynccontextmanager
    async def lifespan(app) -> AsyncIterator[None]:
        holder["library"] = Library(base)
        try:
            yield
        finally:
            holder.pop("library").close()

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", port))
    port = sock.getsockname()[1]
    app = Starlette(routes=[Route(path, endpoint, methods=methods)
                            for path, methods, endpoint in ui.endpoints()],
                    middleware=[Middleware(HostOriginGuardMiddleware, mode="strict"),
                                *middleware(port)],
                    lifespan=lifespan)
    url = f"http://127.0.0.1:{port}/"
    print(f"linecite: the page is at {url} (Ctrl+C stops it)", file=sys.stderr, flush=True)
    if open_browser:
        threading.Timer(OPEN_DELAY, webbrowser.open, [url]).start()
    uvicorn.Server(uvicorn.Config(app, log_level="warning")).run(sockets=[sock])
