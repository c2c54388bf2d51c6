"""The stated bounds of what the server accepts and returns, and the checks that enforce them.

An agent can be confused as well as careful: it will paste a whole document as a query or a
path with a NUL in it. Every argument is checked here before any work, with an error that
states the bound; every answer is cut to a stated size, with a marker and the way to read
on. The README's "Security" section lists these numbers; change them here only.

Layer: ground (no project imports): the bounds every layer checks against.
"""

from __future__ import annotations

import json
import re
import unicodedata

# ---------------------------------------------------------------------------
MAX_QUERY_CHARS = 4000  # a search query: a long question fits; a pasted document does not
MAX_QUERIES = 5  # other phrasings one search takes beside its query (`queries`)
MAX_QUOTES = 20  # quotes one verify_citation call checks
MAX_QUOTE_CHARS = 4000  # one quote: a long paragraph fits; a pasted chapter does not
MAX_GLOB_SOURCES = 1000  # sources a `source` path glob may select in one search
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
NAME_ESCAPED = ("\x00-\x1f\x7f-\x9f"  # C0, DEL, C1: line breaks and terminal codes
                "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"  # bidi marks: spoofed names
                "\u2028\u2029\ud800-\udfff")  # line separators; lone surrogates (bytes)
MAX_POSITION = 1_000_000_000  # a page, line or character number, an offset into a list
# (ten times the most text one file yields by default; SQLite's integers end at 2**63)
INDEX_BUSY_WAIT_S = 5.0  # a server's read-only open waits this long for a lock to clear
MAX_TOP_K = 50  # hits one search returns
MAX_REQUEST_BYTES = 256 * 1024  # one HTTP request body: a 4,096-character path written as
# 12-byte JSON escapes fits five times over
MAX_ID_CHARS = 200  # a JSON-RPC id or progress token (a number: within 64 bits), a method,
# the tool or resource a request names: answers repeat them
MIN_TOKEN_CHARS = 16  # LINECITE_HTTP_TOKEN: a short token is guessed
ECHO_CHARS = 80  # how much of a refused value an error message repeats
CUT_MARK = " [...]"  # ends a line or hit text that was cut
STORE_REFRESH_EVERY = 60.0  # seconds between the server's reloads of a KB's vectors while an
# indexer runs (each reload is done beside the serving copy: 1.5 s at 100k chunks, 10-16 s at 1M)
# ---------------------------------------------------------------------------


class UserError(ValueError):
    """A bad argument or state the agent can fix; the message says how."""


class ReasonedError(UserError):
    """A UserError that also names its `reason`, the word a summary files the failure under
    (`unreachable`, `bad-url`...): url_fetch.py's and s3_source.py's errors."""

    def __init__(self, reason: str, detail: str):
        super().__init__(detail)
        self.reason = reason


def shown(value: str) -> str:
    """A value as an error message may repeat it: quoted, and cut to ECHO_CHARS."""
    return repr(value if len(value) <= ECHO_CHARS else value[:ECHO_CHARS] + "...")


def check_length(value: str, what: str, max_chars: int) -> None:
    if len(value) > max_chars:
        raise UserError(f"{what} is {len(value):,} characters long; the limit is {max_chars:,}. "
                        f"Shorten it{' to the words that matter' if what == 'query' else ''}")


def check_text(value: str | None, what: str, max_chars: int,
               allow_newlines: bool = False) -> None:
    """Refuse a string argument that is too long or holds control characters (NUL included).

    Tabs are always allowed, and newlines where a pasted question may carry them (queries).
    """
    if value is None:
        return
    check_length(value, what, max_chars)
    allowed = "\t\n\r" if allow_newlines else "\t"
    bad = next((c for c in value if c not in allowed and unicodedata.category(c) == "Cc"), None)
    if bad is not None:
        raise UserError(f"{what} holds the control character U+{ord(bad):04X}; remove it "
                        "(names, paths and queries are plain text)")


_REFUSED = re.compile(f"[{NAME_ESCAPED}]")  # in a name given by an agent
_ESCAPED = re.compile(f"[{NAME_ESCAPED}\\\\]")  # ... and the escape character
_SURROGATE = re.compile("[\ud800-\udfff]")


def source_name(path_text: str) -> str:
    """The name a file is cited by, made from its path (relative to its followed folder, with
    `/` between folders) or its file name: the one rule for every name the indexer makes.

    What no tool may take in a name is written as a visible escape: a byte that is no UTF-8
    (os.fsdecode made it a surrogate U+DC80-U+DCFF) as `\\xff`, a C0 control or DEL as
    `\\x0a`, any other character of NAME_ESCAPED as `\\u202e`, and the backslash itself as
    `\\\\` (Windows never has one in a file name). Each character maps on its own and the
    escapes cannot be confused, so two paths never give one name, the name is the same on
    every run, and the path can be read back from it. `new\\nline.txt` was indexed as is and
    read_range then refused its name; `b\\xff.txt` stopped the whole sync (issue 34).
    """
    if not _ESCAPED.search(path_text):
        return path_text
    return _ESCAPED.sub(_escape, path_text)


def path_text(path) -> str:
    """A path as text that SQLite and JSON take: undecodable bytes written as in source_name."""
    return _SURROGATE.sub(_escape, str(path))


def _escape(match: re.Match) -> str:
    code = ord(match.group())
    if code == 0x5C:
        return "\\\\"
    if 0xDC80 <= code <= 0xDCFF:  # os.fsdecode's stand-in for the byte code - 0xDC00
        return f"\\x{code - 0xDC00:02x}"
    return f"\\x{code:02x}" if code < 0x80 else f"\\u{code:04x}"


def check_name(value: str | None, what: str) -> None:
    """Refuse a source name that is too long or holds a character source_name escapes: no
    source is ever named so, and an agent gets the name search and list_sources give."""
    if value is None:
        return
    check_length(value, what, MAX_NAME_CHARS)
    bad = _REFUSED.search(value)
    if bad is not None:
        raise UserError(f"{what} holds the character U+{ord(bad.group()):04X}; source names "
                        f"write it as {source_name(bad.group())} (give the name as search or "
                        "list_sources shows it)")


def cut(text: str, max_chars: int) -> tuple[str, bool]:
    """(text, False) when it fits; else its first max_chars characters with CUT_MARK, True."""
    if len(text) <= max_chars:
        return text, False
    return text[:max_chars] + CUT_MARK, True


INT64 = 2**63


def id_problem(value: object, what: str) -> str | None:
    """Why a JSON-RPC id (or progress token) is out of bounds, or None when it is fine."""
    if value is None or (isinstance(value, str) and len(value) <= MAX_ID_CHARS):
        return None
    if isinstance(value, str):
        return f"{what} is {len(value):,} characters long; the limit is {MAX_ID_CHARS}"
    if isinstance(value, int) and not isinstance(value, bool) and -INT64 <= value < INT64:
        return None
    return f"{what} must be a string of at most {MAX_ID_CHARS} characters or a whole number " \
           "within 64 bits"


def request_problem(message: object) -> str | None:
    """The first bound one JSON-RPC message breaks, or None.

    What an answer may repeat is bounded at MAX_ID_CHARS: the id and progress token (echoed
    in every answer and progress note), the method, and the tool, prompt or resource a request
    names (repeated in "unknown tool" errors). Everything else is bounded by the body's size
    (MAX_REQUEST_BYTES) and each tool's arguments by its schema and check_text. A message that
    is no JSON-RPC object is left to the protocol layer, which refuses it.
    """
    if not isinstance(message, dict):
        return None
    params = message.get("params")
    params = params if isinstance(params, dict) else {}
    meta = params.get("_meta")
    problem = id_problem(message.get("id"), "the JSON-RPC id") or id_problem(
        meta.get("progressToken") if isinstance(meta, dict) else None, "the progress token")
    if problem or "method" not in message:  # a response to us: only its id comes back
        return problem
    for what, value in (("the method", message["method"]), ("params.name", params.get("name")),
                        ("params.uri", params.get("uri"))):
        if isinstance(value, str) and len(value) > MAX_ID_CHARS:
            return f"{what} is {len(value):,} characters long; the limit is {MAX_ID_CHARS}"
    return None


def message_problem(body: bytes) -> str | None:
    """The first bound a body's JSON-RPC message (or batch) breaks, over HTTP or one line of
    stdio; None for a body that is no JSON, which the protocol layer refuses itself."""
    try:
        parsed = json.loads(body)
    except (ValueError, RecursionError):
        return None
    messages = parsed if isinstance(parsed, list) else [parsed]
    return next(filter(None, map(request_problem, messages)), None)


def oversize_problem() -> str:
    """Why a request over MAX_REQUEST_BYTES is refused, with the bounds an agent most likely
    broke (a whole document sent as a query)."""
    return (f"the request is more than {MAX_REQUEST_BYTES:,} bytes, the limit; a search query "
            f"holds at most {MAX_QUERY_CHARS:,} characters and a path {MAX_PATH_CHARS:,}")


def invalid_request(problem: str, request_id: int | str | None = None) -> dict:
    """The JSON-RPC error for a request refused before any work. Its id is null unless the
    caller read a bounded one (never an id that itself broke the bound)."""
    return {"jsonrpc": "2.0", "id": request_id,
            "error": {"code": -32600, "message": f"Invalid Request: {problem}."}}
