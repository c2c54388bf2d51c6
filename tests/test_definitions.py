"""Definitions first: `auto` puts the code chunk that defines a one-name query first
(definitions.py, search._definitions_lifted), over a small repository written for these
tests where each name is defined once and used in many places, tests and docs; plain
questions and KBs without code rank exactly as with the rule off."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import fulltext
import ingest
import kb as kbmod
import search
from ranking import definitions
from ranking.request import SearchRequest, SearchSettings

NO_DEFINITIONS = SearchSettings(definitions_first=False)  # auto without definitions.py's rule

pytest.importorskip("tree_sitter_language_pack")

HTTP = '''"""Reading HTTP/1.1 messages."""

import re

HEADER = re.compile(r"([^:]+):(.*)")


def parse_http_response(data):
    """Split raw bytes into a status line and a dictionary of headers."""
    head, _, body = data.partition(b"\\r\\n\\r\\n")
    status, *lines = head.decode("latin-1").split("\\r\\n")
    return status, dict(HEADER.match(line).groups() for line in lines), body


class ResponseReader:
    """Reads responses off a socket, one at a time."""

    def __init__(self, sock):
        self.sock = sock
        self.buffer = b""

    def read_chunk(self, size=65536):
        """Read more bytes from the socket into the buffer, at most size of them."""
        more = self.sock.recv(size)
        self.buffer += more
        return len(more)
'''
JS = '''// client side of the same protocol
export function parseHttpResponse(text) {
  const [head, body] = text.split("\\r\\n\\r\\n");
  const [status, ...lines] = head.split("\\r\\n");
  const headers = Object.fromEntries(lines.map((line) => line.split(": ", 2)));
  return { status, headers, body };
}

export function parseHTTPResponse(text) {
  const decoded = typeof text === "string" ? text : new TextDecoder("latin1").decode(text);
  const parsed = parseHttpResponse(decoded);
  return { ...parsed, size: decoded.length, complete: decoded.includes("\\r\\n\\r\\n") };
}
'''
USES = '''from http_messages import ResponseReader, parse_http_response


def fetch(sock):
    reader = ResponseReader(sock)
    while reader.read_chunk():
        status, headers, body = parse_http_response(reader.buffer)
        if status:
            return parse_http_response(reader.buffer)
    return parse_http_response(b"")
'''
TESTS = '''from http_messages import ResponseReader, parse_http_response


def test_parse_http_response_status():
    assert parse_http_response(b"HTTP/1.1 200 OK\\r\\n\\r\\n")[0] == "HTTP/1.1 200 OK"
    assert parse_http_response(b"HTTP/1.1 404 No\\r\\n\\r\\n")[0] == "HTTP/1.1 404 No"


def test_read_chunk_reads(sock):
    reader = ResponseReader(sock)
    assert reader.read_chunk() and reader.read_chunk() and reader.read_chunk()
    assert ResponseReader(sock).read_chunk() == reader.read_chunk()
'''
DOCS = ("# Parsing\n\nCall `parse_http_response` on the bytes; `parse_http_response` returns the "
        "status. parse_http_response never raises. See `ResponseReader.read_chunk`: "
        "ResponseReader.read_chunk reads, read_chunk again reads more. In the browser, "
        "parseHttpResponse and parseHttpResponse again.\n")


def _searcher(tmp_path: Path, files: dict[str, str]):
    """A BM25-only KB of these files, ingested by the real pipeline, and its connection."""
    folder = tmp_path / "repo"
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text, encoding="utf-8")
    kb = kbmod.open_or_create(tmp_path / "base", "repo")
    config = json.loads((kb.folder / "config.json").read_text(encoding="utf-8"))
    (kb.folder / "config.json").write_text(
        json.dumps({**config, "embedding": {"provider": "none"}}), encoding="utf-8")
    summary = ingest.ingest(kbmod.load(tmp_path / "base", "repo"), [folder])
    assert summary.indexed == len(files), summary
    return fulltext.connect(kb.fulltext_path, readonly=True)


@pytest.fixture()
def repo(tmp_path):
    files = {"src/http_messages.py": HTTP, "web/client.js": JS, "README.md": DOCS,
             **{f"src/use_{n}.py": USES for n in range(6)},
             **{f"tests/test_http_{n}.py": TESTS for n in range(4)}}
    conn = _searcher(tmp_path, files)
    yield search.Searcher(conn)
    conn.close()


def _first(searcher: search.Searcher, query: str, lifted: bool = True) -> tuple[str, int]:
    """The first hit, with the definitions rule or without it (and without neighbours.py's
    lift, which also favours a file of two definitions that both match)."""
    alone = SearchSettings() if lifted else SearchSettings(definitions_first=False,
                                                           neighbour_weight=0.0)
    hit = searcher.search(SearchRequest(query, 5, "auto"), alone)[0]
    return hit.source, hit.line_start


@pytest.mark.parametrize(("query", "source", "line"), [
    ("parse_http_response", "repo/src/http_messages.py", 9),
    ("parseHttpResponse", "repo/web/client.js", 2),
    ("parseHTTPResponse", "repo/web/client.js", 9),
    ("ResponseReader.read_chunk", "repo/src/http_messages.py", 23),
    ("read_chunk()", "repo/src/http_messages.py", 23),
])
def test_auto_puts_the_defining_chunk_first(repo, query, source, line):
    hit = repo.search(SearchRequest(query, 5, "auto"))[0]
    assert hit.source == source and hit.line_start <= line <= hit.line_end, (query, hit)
    # without the rule the uses, tests and docs outrank the definition
    assert _first(repo, query, lifted=False) != _first(repo, query)


@pytest.mark.parametrize(("query", "line", "other"), [("parseHTTPResponse", 9, 2),
                                                       ("parseHttpResponse", 2, 9)])
def test_the_name_as_written_comes_before_another_case(repo, query, line, other):
    first, second = repo.search(SearchRequest(query, 5, "auto"))[:2]
    assert first.source == "repo/web/client.js"
    assert first.best_lines[0] <= line <= first.best_lines[1]  # as written first, then the
    # other case: in the same hit (the two definitions are one blank line apart) or the next
    held = first if first.line_start <= other <= first.line_end else second
    assert held.source == "repo/web/client.js" and held.line_start <= other <= held.line_end


def test_exact_lists_the_definition_as_written_then_in_another_case_then_uses(repo):
    found = repo.search(SearchRequest("parseHTTPResponse", 5, "exact"))
    assert [(h.source, h.line_start) for h in found[:2]] == [("repo/web/client.js", 9),
                                                             ("repo/web/client.js", 2)]
    assert {h.source for h in found[2:]} <= {"repo/web/client.js", "repo/README.md"}


@pytest.mark.parametrize("query", ["parse the http response headers", "read more bytes",
                                   "status line and headers"])
def test_a_question_in_words_ranks_as_with_the_rule_off(repo, query):
    assert definitions.name_of(query) is None
    on = repo.search(SearchRequest(query, 10, "auto"))
    off = repo.search(SearchRequest(query, 10, "auto"), NO_DEFINITIONS)
    assert [(h.chunk_id, h.score) for h in on] == [(h.chunk_id, h.score) for h in off]
    assert on  # the question does find something


def test_a_kb_without_code_ranks_a_name_as_with_the_rule_off(tmp_path):
    conn = _searcher(tmp_path, {"notes.md": "def parse_http_response is described here.\n\n"
                                + "We call parse_http_response parse_http_response.\n" * 3,
                                "guide.txt": "class ResponseReader reads.\n"})
    try:
        searcher = search.Searcher(conn)
        for query in ("parse_http_response", "ResponseReader"):
            on = searcher.search(SearchRequest(query, 10, "auto"))
            off = searcher.search(SearchRequest(query, 10, "auto"), NO_DEFINITIONS)
            assert on and [(h.chunk_id, h.score) for h in on] == \
                [(h.chunk_id, h.score) for h in off]
    finally:
        conn.close()


def test_a_definition_the_legs_did_not_rank_is_still_first(tmp_path):
    """More than search.CANDIDATES chunks that only use the name outscore its long definition
    in BM25; the line index finds the definition."""
    body = "".join(f"    step_{n} = value + {n}  # arithmetic on the value\n" for n in range(80))
    defined = f"def render_table(value):\n{body}    return value\n"
    uses = {f"src/page_{n}.py": f"def page_{n}(x):\n    return render_table(render_table(x))\n"
            for n in range(search.CANDIDATES + 10)}
    conn = _searcher(tmp_path, {"src/tables.py": defined, **uses})
    try:
        searcher = search.Searcher(conn)
        off = searcher.search(SearchRequest("render_table", search.CANDIDATES, "auto"),
                              NO_DEFINITIONS)
        on = searcher.search(SearchRequest("render_table", 5, "auto"))
    finally:
        conn.close()
    assert "repo/src/tables.py" not in {h.source for h in off}
    assert (on[0].source, on[0].line_start) == ("repo/src/tables.py", 1)


@pytest.mark.parametrize(("query", "parts"), [
    ("parse_http_response", ("parse_http_response",)), ("Foo.bar()", ("Foo", "bar")),
    ("pkg.mod.func", ("pkg", "mod", "func")), ("Foo::bar", ("Foo", "bar")),
    ("  $el ", ("$el",)), ("parse http", None), ("parse-http", None), ("2fa", None),
    ("x" * (definitions.MAX_NAME_CHARS + 1), None)])
def test_which_queries_name_a_symbol(query, parts):
    name = definitions.name_of(query)
    assert (name.parts if name else None) == parts


def test_a_chunk_is_ranked_by_how_surely_it_defines_the_name():
    name = definitions.name_of("Reader.read")
    context = "python method io.Reader.read"

    def tier(text: str, context: str, query: definitions.Name = name) -> int:
        return definitions.chunk_rank(query, text, context)[0]
    assert tier("    def read(self):", context) == 0
    assert tier("    def READ(self):", context.upper()) == 3
    assert tier("    def READ(self):", context) == 1  # the symbol as written
    assert tier("        return 1", context) == 1  # it lies in the definition
    read = definitions.name_of("read")
    assert tier("  const read = x;", "javascript function io.open", read) == 2  # a variable
    assert tier("  read(n) {", "", read) == 2  # a JavaScript method's head
    assert tier("  if (read) {", "", read) == definitions.NOT_DEFINED
    assert tier("    def read(self):", "python method io.Other.read") \
        == definitions.NOT_DEFINED  # another class's read
    assert tier("import io", "python file io", definitions.name_of("io")) \
        == definitions.NOT_DEFINED  # a file's own line names no definition


def test_a_chunk_about_the_name_comes_before_one_that_holds_it_among_others():
    name = definitions.name_of("iter_text")
    about = definitions.chunk_rank(name, "    def iter_text(self):",
                                   "python method models.Response.iter_text")
    nested = definitions.chunk_rank(name, "        def iter_text():", "python method text.Text."
                                    "join\npython function text.Text.join.iter_text")
    assert about[0] == nested[0] == 0 and about < nested
