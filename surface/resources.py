"""MCP resources and the `cite` prompt: indexed sources a person can pick in a host's attach
menu, and the search -> read_range -> quote workflow told to an agent.

URIs: `linecite://{kb_id}/{source}` is a source's outline (pages, lines per page, headings) and
`linecite://{kb_id}/{source}/{page}` a page's numbered lines, bounded as read_range is (that
is what reads them). A source name holds folders and any Unicode, so in a URI it is
percent-encoded whole as UTF-8, "/" included (`quote(name, safe="")`): `docs/계약 2024.pdf` is
`docs%2F%EA%B3%84%EC%95%BD%202024.pdf`, and the URI keeps exactly three parts.
`resources/list` gives every KB's sources, LIST_PAGE at a time, with a cursor.

Reads through library.py (its read-only connections); writes nothing.

Layer: surface: beside server.py's tools (server.py registers these), above library.py.
"""

from __future__ import annotations

import base64
import binascii
import json
from urllib.parse import quote

import fulltext
import kb as kbmod
from common import limits
from common.limits import UserError, shown
from index import states
from library import Library

# ---------------------------------------------------------------------------
SCHEME = "linecite"
SOURCE_TEMPLATE = SCHEME + "://{kb_id}/{source}"  # a source's outline
PAGE_TEMPLATE = SCHEME + "://{kb_id}/{source}/{page}"  # a page's numbered lines
LIST_PAGE = 100  # sources one resources/list answer holds
MAX_CURSOR_CHARS = 200  # a resources/list cursor (ours hold a kb_id and an offset)
MAX_OUTLINE_PAGES = 1000  # pages an outline lists with their line counts
MAX_OUTLINE_HEADINGS = 200  # headings an outline lists
OUTLINE_SCAN_LINES = 20_000  # lines of a source read to find its headings
HEADING_SCAN_CHARS = 200  # of each line (chunking.HEADING_MAX_CHARS is shorter)
MIME = "application/json"
# ---------------------------------------------------------------------------


def source_uri(kb_id: str, source: str, page: int | None = None) -> str:
    """The resource URI of a source's outline, or of one of its pages."""
    uri = f"{SCHEME}://{kb_id}/{quote(source, safe='')}"
    return uri if page is None else f"{uri}/{page}"


def outline(library: Library, kb_id: str, source: str) -> dict:
    """A source's outline: its pages with their line counts (each page's URI beside it), and
    the headings found in its first OUTLINE_SCAN_LINES lines, where each is."""
    kb_id = library.kbs.resolve(kb_id)
    limits.check_name(source, "source")
    with library.kbs.reading(kb_id) as entry:
        row = fulltext.source_row(entry.conn, source)
        if row is None:
            raise UserError(f"unknown source {shown(source)} in {kb_id!r}; list the resources "
                            "(or call list_sources) for the exact names")
        counts = entry.conn.execute(
            "SELECT page, max(line) FROM lines WHERE source_id = ? GROUP BY page ORDER BY page"
            " LIMIT ?", (row["id"], MAX_OUTLINE_PAGES)).fetchall()
        code = (row["parser"] or "").startswith("code:")
        headings = [] if code else _headings(entry.conn, row["id"])
    result = {"kb_id": kb_id, "source": source, "uri": source_uri(kb_id, source),
              "pages": row["pages"], "state": states.STATE_LABELS.get(row["state"],
                                                                      row["state"]),
              "parser": row["parser"],
              "page_lines": [{"page": p, "lines": n, "uri": source_uri(kb_id, source, p)}
                             for p, n in counts],
              "headings": headings,
              "read": "read a page's numbered lines from its uri, or call read_range(source, "
                      "page, line_start, line_end, kb_id); cite as: source, page, lines"}
    if row["pages"] > len(counts):
        result["more_pages"] = (f"the first {len(counts)} of {row['pages']} pages are listed; "
                                f"read any page as {source_uri(kb_id, source)}/PAGE")
    if row["error"]:
        result["error"] = row["error"]
    return result


def _headings(conn, source_id: int) -> list[dict]:
    """The lines chunking.py takes for headings (what a chunk is searched with), in order."""
    import chunking

    rows = conn.execute(
        "SELECT page, line, substr(text, 1, ?) FROM lines WHERE source_id = ? AND text != ''"
        " ORDER BY page, line LIMIT ?", (HEADING_SCAN_CHARS, source_id,
                                         OUTLINE_SCAN_LINES)).fetchall()
    found, sheet = [], set()
    for i, (page, line, text) in enumerate(rows):
        if line == 1 and text.startswith(chunking.SHEET_MARKERS):
            sheet.add(page)  # a spreadsheet page has no headings
        if page in sheet:
            continue
        before = rows[i - 1][2] if i and rows[i - 1][0] == page else ""
        after = rows[i + 1][2] if i + 1 < len(rows) and rows[i + 1][0] == page else ""
        if heading := chunking.heading_text(text, before, after):
            found.append({"page": page, "line": line, "text": heading})
            if len(found) == MAX_OUTLINE_HEADINGS:
                break
    return found


def page_lines(library: Library, kb_id: str, source: str, page: str) -> dict:
    """A page's numbered lines: read_range of the whole page, with its bounds and `more`."""
    if not page.isdigit() or not 1 <= int(page) <= limits.MAX_POSITION:
        raise UserError(f"page {shown(page)} is not a page number; the outline "
                        f"{source_uri(kb_id, source)} lists the pages")
    limits.check_text(kb_id, "kb_id", limits.MAX_KB_ID_CHARS)
    return library.read_range(source, int(page), 1, -1, 0, kb_id)


# ----------------------------------------------------------------------------- listing


def list_page(library: Library, cursor: str | None) -> tuple[list[dict], str | None]:
    """One resources/list answer: up to LIST_PAGE sources, KB by KB (in id order), each as
    {uri, name, title, description, mimeType}; and the cursor of the next, or None. A KB that
    cannot be read (empty, broken, damaged) is passed over: list_knowledge_bases says why."""
    kbs = library.kbs.kb_ids()
    kb_at, offset = _decode(cursor, kbs)
    listed: list[dict] = []
    for kb_id in kbs[kb_at:]:
        try:
            with library.kbs.reading(kb_id) as entry:
                rows = fulltext.list_sources(entry.conn, offset, LIST_PAGE - len(listed))
        except (UserError, kbmod.ConfigError):
            rows = []
        listed += [_resource(kb_id, row) for row in rows]
        if len(listed) == LIST_PAGE:
            return listed, _encode(kb_id, offset + len(rows))
        offset = 0
    return listed, None


def _resource(kb_id: str, row: dict) -> dict:
    pages = row.get("pages") or 0
    return {"uri": source_uri(kb_id, row["name"]), "name": row["name"],
            "title": f"{row['name']} ({kb_id})", "mimeType": MIME,
            "description": f"{pages} page{'s' * (pages != 1)}, {row['state']}, in knowledge "
                           f"base {kb_id}: its outline (pages, lines, headings)"}


def _encode(kb_id: str, offset: int) -> str:
    return base64.urlsafe_b64encode(json.dumps({"k": kb_id, "o": offset}).encode()).decode()


def _decode(cursor: str | None, kbs: list[str]) -> tuple[int, int]:
    """(index of the KB to go on in, offset in it) from a cursor; ValueError if it is none of
    ours. A KB removed since the cursor was made: go on with the next one after it."""
    if not cursor:
        return 0, 0
    try:
        if len(cursor) > MAX_CURSOR_CHARS:
            raise ValueError
        state = json.loads(base64.urlsafe_b64decode(cursor.encode()))
        kb_id, offset = state["k"], state["o"]
        if not isinstance(kb_id, str) or isinstance(offset, bool) or not isinstance(
                offset, int) or not 0 <= offset <= limits.MAX_POSITION:
            raise ValueError
    except (ValueError, KeyError, TypeError, binascii.Error, UnicodeDecodeError):
        raise ValueError("invalid cursor: pass the nextCursor of a previous resources/list "
                         "answer, or none for the first page") from None
    if kb_id in kbs:
        return kbs.index(kb_id), offset
    return sum(k < kb_id for k in kbs), 0


# ----------------------------------------------------------------------------- the prompt


def cite_prompt(question: str = "", kb_id: str = "") -> str:
    """What an agent is told to do to answer from the documents with exact citations."""
    limits.check_text(question, "question", limits.MAX_QUERY_CHARS, allow_newlines=True)
    limits.check_text(kb_id, "kb_id", limits.MAX_KB_ID_CHARS)
    where = f'kb_id="{kb_id}"' if kb_id else 'kb_id="*" (every knowledge base) or one kb_id'
    asked = f"Question: {question.strip()}\n\n" if question.strip() else ""
    return (
        f"{asked}Answer from the indexed documents only, and cite every claim.\n"
        f"1. Call `search` with the question's key words ({where}); add `queries` with other "
        "phrasings or languages, and filters (path, types, modified_after/before) when the "
        "question names them.\n"
        "2. For each hit you will use, call `read_range(source, page, line_start, line_end, "
        "kb_id)` with the hit's own values (context=2 adds lines around it): quote only what "
        "read_range returns, never a hit's text from memory.\n"
        "3. Quote the exact lines and cite each as: source, page N, lines A-B (the `citation` "
        "read_range gives).\n"
        "4. Before answering, check every quote with `verify_citation(quotes=[{text, source, "
        "page, line_start, line_end}, ...])`: keep a `verbatim` one; cite the place an "
        "`elsewhere` one gives; for `close`, quote the passage's lines as it returns them "
        "(its `differences` name the words you changed); drop a `not_found` one.\n"
        "5. If nothing found answers it, say so; do not guess. Search again with other words "
        "before giving up.")
