"""Structured text (formats/structured.py) end to end: real data and config files found on this
machine, and small ones written here for the edge cases, indexed by a real folder sync into a
real KB (SQLite, BM25 only), then read back with read_range and found with search."""

from __future__ import annotations

import json
import re
import sysconfig
from itertools import islice
from pathlib import Path

import pytest

import extract
import fulltext
import ingest
import kb as kbmod
from common import limits
from formats import structured
from library import Library
from ranking.request import SearchRequest

SITE = Path(sysconfig.get_paths()["purelib"])  # the venv's packages: real files nobody here wrote
STDLIB_TEST = Path(sysconfig.get_paths()["stdlib"]) / "test"  # CPython's own test data
REAL_SUFFIXES = (".json", ".toml", ".cfg", ".ini", ".xml", ".yaml", ".yml", ".csv")
PER_SUFFIX = 2  # real files taken per suffix
MAX_REAL_BYTES = 100_000  # ... each at most this big, so the test stays fast
ODD_LINE_BREAKS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\ufeff]")


def editor_lines(path: Path) -> list[str] | None:
    """The file's lines as an editor numbers them (CR, LF or CRLF ends a line), in the form
    linecite keeps them (tabs as spaces, trailing spaces and blank last lines gone); None for
    a file that is not plain UTF-8 text with ordinary line breaks, or that has a line longer
    than read_range shows whole (limits.MAX_LINE_CHARS: such a line is cut, by design)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (UnicodeDecodeError, OSError):
        return None
    if ODD_LINE_BREAKS.search(text) or not text.strip():
        return None
    lines = [line.replace("\t", " ").rstrip() for line in re.split(r"\r\n|\r|\n", text)]
    while lines and not lines[-1]:
        lines.pop()
    return None if any(len(line) > limits.MAX_LINE_CHARS for line in lines) else lines


def real_files() -> list[Path]:
    """The PER_SUFFIX biggest real files (up to MAX_REAL_BYTES) per suffix from the venv and
    CPython's tests, plain UTF-8 text only."""
    found: list[Path] = []
    for suffix in REAL_SUFFIXES:
        candidates = [p for root in (SITE, STDLIB_TEST) if root.is_dir()
                      for p in root.rglob(f"*{suffix}")
                      if p.is_file() and 0 < p.stat().st_size <= MAX_REAL_BYTES]
        candidates.sort(key=lambda p: (-p.stat().st_size, p))
        found += islice((p for p in candidates if editor_lines(p) is not None), PER_SUFFIX)
    return found


def make_kb(base: Path, folder: Path, **fields) -> kbmod.KnowledgeBase:
    """A BM25-only KB following `folder`, with extra config.json fields."""
    kb = kbmod.open_or_create(base, "data")
    config = json.loads((kb.folder / "config.json").read_text(encoding="utf-8"))
    config.update(sourcePaths=[str(folder)], embedding={"provider": "none"}, **fields)
    (kb.folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return kbmod.load(base, "data")


def read_all(library: Library, source: str, page: int = 1) -> list[str]:
    """Every line of a page through read_range, 500 lines a call."""
    lines: list[str] = []
    while True:
        answer = library.read_range(source, page, len(lines) + 1, -1, 0, "data")
        lines += [line["text"] for line in answer["lines"]]
        if len(lines) >= answer["page_lines"]:
            return lines


def sources(kb: kbmod.KnowledgeBase) -> dict[str, dict]:
    """Every source's row, by name, with its chunks' (line_start, context, text) as "chunks"."""
    conn = fulltext.connect(kb.fulltext_path, readonly=True)
    try:
        rows = {row["name"]: dict(row) for row in fulltext.list_sources(conn)}
        for name, row in rows.items():
            row["chunks"] = conn.execute(
                "SELECT c.line_start, c.context, c.text FROM chunks c JOIN sources s "
                "ON s.id = c.source_id WHERE s.name = ? ORDER BY c.line_start", (name,)).fetchall()
        return rows
    finally:
        conn.close()


# ----------------------------------------------------------------------------- real files

def test_real_files_keep_the_lines_an_editor_shows(tmp_path):
    files = real_files()
    if len({p.suffix for p in files}) < 3:
        pytest.skip(f"needs real .json/.toml/.xml/... files under {SITE} or {STDLIB_TEST}")
    docs = tmp_path / "docs"
    docs.mkdir()
    for number, path in enumerate(files):  # a copy per file: names may repeat across packages
        (docs / f"{number}-{path.name}").write_bytes(path.read_bytes())
    kb = make_kb(tmp_path / "base", docs)
    summary = ingest.sync(kb)
    assert summary.failed == [] and summary.indexed == len(files)
    library = Library(tmp_path / "base")
    try:
        for number, path in enumerate(files):
            name = f"docs/{number}-{path.name}"
            assert read_all(library, name) == editor_lines(path), path
    finally:
        library.close()
    rows = sources(kb)
    parsers = {row["parser"].split(":")[0] for row in rows.values()}
    assert parsers & {"json", "toml", "xml", "yaml", "ini", "csv"}, parsers
    for number, path in enumerate(files):  # a real table: its header rides along every chunk
        row = rows[f"docs/{number}-{path.name}"]
        if row["parser"].startswith("csv:"):
            header = editor_lines(path)[0]
            assert len(row["chunks"]) > 1
            assert all(c["context"] == header and header not in c["text"]
                       for c in row["chunks"][1:])


def test_real_malformed_toml_is_indexed_as_its_lines(tmp_path):
    invalid = sorted((STDLIB_TEST / "test_tomllib" / "data" / "invalid").rglob("*.toml"))
    invalid = [p for p in invalid if editor_lines(p) and len(editor_lines(p)) > 1]
    if not invalid:
        pytest.skip(f"needs CPython's test_tomllib data under {STDLIB_TEST}")
    for path in invalid[:5]:
        doc = extract.extract(path)
        assert doc.parser == "toml-malformed:utf-8", path
        assert doc.pages == [editor_lines(path)]
    valid = sorted((STDLIB_TEST / "test_tomllib" / "data" / "valid").rglob("*.toml"))[:3]
    assert [extract.extract(p).parser for p in valid] == ["toml:utf-8"] * len(valid)


# ----------------------------------------------------------------------------- edge cases

def test_malformed_json_is_text_and_says_so(tmp_path):
    path = tmp_path / "settings.json"
    path.write_text('{\n  // a comment, as VS Code allows\n  "editor.tabSize": 4,\n}\n',
                    encoding="utf-8")
    doc = extract.extract(path)
    assert doc.parser == "json-malformed:utf-8"
    assert doc.pages == [["{", "  // a comment, as VS Code allows", '  "editor.tabSize": 4,', "}"]]
    path.write_text('{"a": [1, 2]}\n', encoding="utf-8")
    assert extract.extract(path).parser == "json:utf-8"


@pytest.mark.parametrize("name, text, parser", [
    ("a.jsonl", '{"a": 1}\n\n{"b": 2}\n', "jsonl:utf-8"),
    ("a.ndjson", '{"a": 1}\n{"b": \n', "jsonl-malformed:utf-8"),
    ("a.yaml", "a: 1\n---\nb: [1, 2]\n", "yaml:utf-8"),
    ("a.yml", "a: {{ .Values.x }}\n  b: : c\n", "yaml-malformed:utf-8"),
    ("a.ini", "[server]\nport = 8080\n", "ini:utf-8"),
    ("nginx.conf", "server {\n  listen 80;\n}\n", "ini-malformed:utf-8"),
    ("a.xml", "<a>\n<b/>\n", "xml-malformed:utf-8"),
    ("b.xml", '<!DOCTYPE a [<!ENTITY e "x">]>\n<a>&e;</a>\n', "xml-unchecked:utf-8"),
    ("a.log", "2024-03-01 10:00:01 INFO start\n\tat frame\n", "log:utf-8"),
    ("b.log", "2024-03-01 10:00:01 INFO start\n\tat frame\n2024-03-01 10:00:02 end\n",
     "log:utf-8+time"),
])
def test_each_format_is_labelled_and_keeps_its_lines(tmp_path, name, text, parser):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    doc = extract.extract(path)
    assert doc.parser == parser
    assert doc.pages == [editor_lines(path)]


def test_line_ends_bom_and_form_feeds_keep_the_editors_numbers(tmp_path):
    """CRLF, a lone CR and LF each end a line, as in an editor; a BOM is no text; a form feed
    (which starts a page in a .txt) is dropped, so a .log stays one page of the file's lines."""
    path = tmp_path / "app.log"
    path.write_bytes(b"\xef\xbb\xbf10:00 start\r\n10:01 \x0cstep\r10:02\tdone  \n\n10:03 end\n")
    doc = extract.extract(path)
    assert (doc.parser, doc.pages) == ("log:utf-8", [["10:00 start", "10:01 step", "10:02 done",
                                                     "", "10:03 end"]])


def test_a_file_past_the_parse_bound_is_not_parsed(tmp_path, monkeypatch):
    path = tmp_path / "big.json"
    path.write_text("[\n" + "  1,\n" * 18 + "  1\n]\n", encoding="utf-8")
    assert extract.extract(path).parser == "json:utf-8"
    monkeypatch.setattr(structured, "PARSE_MAX_CHARS", 50)
    doc = extract.extract(path)
    assert doc.parser == "json-unchecked:utf-8" and len(doc.pages[0]) == 21
    path = tmp_path / "big.yaml"
    path.write_text("- 1\n" * 20, encoding="utf-8")
    assert extract.extract(path).parser == "yaml:utf-8"
    monkeypatch.setattr(structured, "YAML_PARSE_MAX_CHARS", 50)
    assert extract.extract(path).parser == "yaml-unchecked:utf-8"


def test_a_text_file_past_the_text_limit_is_refused(tmp_path, monkeypatch):
    path = tmp_path / "app.log"
    path.write_text("2024-03-01 INFO tick\n" * 100, encoding="utf-8")
    monkeypatch.setenv("LINECITE_MAX_TEXT_CHARS", "1000")
    with pytest.raises(extract.ExtractError) as err:
        extract.extract(path)
    assert err.value.reason == "too-large"


# ----------------------------------------------------------------------------- sections

def _settings(prefix: str, count: int) -> list[str]:
    return [f"{prefix}_setting_{n} = value number {n} for this option" for n in range(count)]


def test_a_config_chunk_carries_its_section_in_context(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    ini = ["; service settings", "[database]", *_settings("db", 40), "pool_retries = 7",
           "[cache]  ; in memory", *_settings("cache", 40)]
    (docs / "service.ini").write_text("\n".join(ini) + "\n", encoding="utf-8")
    toml = ["[[bin]]", 'name = "tool"', "[tool.ruff]", *_settings("ruff", 40)]
    (docs / "pyproject.toml").write_text("\n".join(toml) + "\n", encoding="utf-8")
    yaml = ["name: CI", "jobs:", *[f"  step_{n}: run the walrus check number {n}" for n in
                                   range(60)]]
    (docs / "ci.yml").write_text("\n".join(yaml) + "\n", encoding="utf-8")
    kb = make_kb(tmp_path / "base", docs)
    assert ingest.sync(kb).failed == []
    rows = sources(kb)
    contexts = {name: [(c["line_start"], c["context"]) for c in row["chunks"]]
                for name, row in rows.items()}
    for name, row in rows.items():
        assert len(row["chunks"]) > 2, name
        if name.endswith(".yml"):  # YAML: the key path of the chunk's first line
            for start, context in contexts[name][1:]:
                assert context == f"yaml jobs.step_{start - 3}", start
            continue
        lines = (docs / name.split("/")[1]).read_text(encoding="utf-8").split("\n")
        for start, context in contexts[name][1:]:  # the nearest section above the chunk
            above = [line for line in lines[:start - 1]
                     if line.startswith("[") or line in ("jobs:",)]
            assert context == (above[-1].split(";")[0].strip() if above else ""), (name, start)
    assert {c for _, c in contexts["docs/service.ini"]} >= {"[database]", "[cache]"}
    assert {c for _, c in contexts["docs/pyproject.toml"]} >= {"[tool.ruff]"}
    library = Library(tmp_path / "base")
    try:
        hit = library.search(SearchRequest.checked("database pool_retries", 1, "bm25",
                                                   "data"))["hits"][0]
        best = library.get_document_chunk(hit["merged_chunk_ids"][0], "data")
        assert "pool_retries = 7" in best["text"] and "[database]" not in best["text"]
    finally:
        library.close()


# ----------------------------------------------------------------------------- tables

CITIES = ["Oslo", "Bergen", "Stavanger", "Tromso", "Bodo", "Alesund", "Molde", "Hamar"]


def _table(header: str, rows: int, special: int) -> str:
    """A CSV of `rows` rows; row `special` holds Trondheim."""
    body = [f"{CITIES[n % len(CITIES)]}-{n},{100 + n},{n * 7 % 90}" for n in range(rows)]
    body[special] = f"Trondheim,{4242},{63}"
    return "\n".join([header, *body]) + "\n"


def test_a_csv_header_is_in_every_chunks_context_not_its_text(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "cities.csv").write_text(_table("name,altitude,latitude", 300, 150),
                                     encoding="utf-8")
    (docs / "rivers.csv").write_text(_table("name,discharge,length", 300, 150),
                                     encoding="utf-8")
    (docs / "plain.tsv").write_text("1\t2\n3\t4\n", encoding="utf-8")
    kb = make_kb(tmp_path / "base", docs)
    assert ingest.sync(kb).failed == []
    rows = sources(kb)
    assert rows["docs/cities.csv"]["parser"] == "csv:utf-8"
    assert rows["docs/plain.tsv"]["parser"] == "csv-noheader:utf-8"
    library = Library(tmp_path / "base")
    try:
        for query, source in (("Trondheim altitude", "docs/cities.csv"),
                              ("Trondheim discharge", "docs/rivers.csv")):
            # every chunk matches the column through its context, so touching chunks fold
            # into one hit; its first chunk is the best-ranked one, the Trondheim row's
            hit = library.search(SearchRequest.checked(query, 1, "bm25", "data"))["hits"][0]
            best = library.get_document_chunk(hit["merged_chunk_ids"][0], "data")
            assert (best["source"], best["line_start"] > 1) == (source, True)
            assert "Trondheim" in best["text"] and query.split()[1] not in best["text"]
            assert read_all(library, source)[0].startswith("name,")  # line 1 is the header
    finally:
        library.close()


@pytest.mark.parametrize("line, header", [
    ("name,altitude,latitude", True), ("Name;Höhe", True), ("1,2,3", False),
    ("name,,x", False), ("x," * 300, False), ("city,1990", False),
])
def test_header_row(line, header):
    assert structured.header_row(line, ";" if ";" in line else ",") is header


# ----------------------------------------------------------------------------- subtitles

VTT = """WEBVTT

NOTE made by hand for this test

intro
00:00:01.000 --> 00:00:04.000 align:start
<v Ana>Welcome to the harbour</v>
tour &amp; talk

00:09:59.500 --> 00:10:02.000
Last words of the first ten minutes

00:10:03.250 --> 00:10:05.000
<i>The crane</i> lifts at noon
"""
SRT = """1
00:00:02,000 --> 00:00:03,000
{\\an8}Hello there

2
01:02:03,400 --> 01:02:05,000
An hour in
"""


def test_subtitles_are_one_stamped_line_per_cue(tmp_path):
    vtt, srt = tmp_path / "tour.vtt", tmp_path / "film.srt"
    vtt.write_text(VTT, encoding="utf-8")
    srt.write_text(SRT, encoding="utf-8")
    doc = extract.extract(vtt)
    assert doc.parser == "vtt:utf-8"
    assert doc.pages == [["[00:01] Welcome to the harbour tour & talk",
                          "[09:59] Last words of the first ten minutes"],
                         ["[10:03] The crane lifts at noon"]]
    doc = extract.extract(srt)
    assert doc.pages[0] == ["[00:02] Hello there"] and doc.pages[6] == ["[1:02:03] An hour in"]
    assert all(page == [] for page in doc.pages[1:6])


def test_subtitles_without_cues_are_their_lines(tmp_path):
    path = tmp_path / "broken.srt"
    path.write_text("1\nno timing here\n", encoding="utf-8")
    doc = extract.extract(path)
    assert (doc.parser, doc.pages) == ("srt-malformed:utf-8", [["1", "no timing here"]])
    path.write_text("1\n99999:00:00,000 --> 99999:00:01,000\nbogus\n", encoding="utf-8")
    assert extract.extract(path).parser == "srt-malformed:utf-8"  # no 600,000 empty pages


# ----------------------------------------------------------------------------- textExtensions

def test_text_extensions_are_indexed_only_when_the_kb_says_so(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "guide.adoc").write_text("= Guide\n\nThe walrus manual.\n", encoding="utf-8")
    (docs / "blob.adoc").write_bytes(b"\x00\x01\x02binary\x00" * 50)
    (docs / "other.zzz").write_text("not listed\n", encoding="utf-8")
    kb = make_kb(tmp_path / "base", docs)
    first = ingest.sync(kb)
    assert first.indexed == 0
    assert {s["extension"] for s in first.skipped} == {".adoc", ".zzz"}
    kb = make_kb(tmp_path / "base", docs, textExtensions=[".ADOC"])
    second = ingest.sync(kb)
    assert second.indexed == 1
    assert second.failed == []  # blob.adoc is skipped by its content, never read (ignores.py)
    assert [(s["reason"], s.get("extension")) for s in second.skipped] == [
        ("unsupported-format", ".zzz"), ("binary", None)]
    library = Library(tmp_path / "base")
    try:
        assert read_all(library, "docs/guide.adoc") == ["= Guide", "", "The walrus manual."]
        hit = library.search(SearchRequest.checked("walrus", 1, "bm25", "data"))["hits"][0]
        assert (hit["source"], hit["line_end"]) == ("docs/guide.adoc", 3)
    finally:
        library.close()


@pytest.mark.parametrize("value", [".adoc", [".tar.gz"], ["adoc"], [".a b"], [3],
                                   [".x"] * (kbmod.MAX_TEXT_EXTENSIONS + 1)])
def test_text_extensions_are_checked(tmp_path, value):
    folder = tmp_path / "kb1"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"textExtensions": value}), encoding="utf-8")
    with pytest.raises(kbmod.ConfigError, match="field 'textExtensions'"):
        kbmod.load(tmp_path, "kb1")


def test_a_suffix_with_its_own_reader_stays_with_it(tmp_path):
    folder = tmp_path / "kb1"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"textExtensions": [".json", ".rst"]}),
                                        encoding="utf-8")
    kb = kbmod.load(tmp_path, "kb1")
    assert kb.text_extensions == [".json", ".rst"]
    path = tmp_path / "a.json"
    path.write_text("[1]\n", encoding="utf-8")
    assert extract.extract(path, kb.text_extensions).parser == "json:utf-8"


def test_a_timed_log_is_chunked_at_minutes_with_its_time_range(tmp_path):
    lines = []
    for minute in range(6):
        for second in range(0, 60, 6):
            lines.append(f"2024-05-01 12:{minute:02}:{second:02},123 INFO request served ok")
            if second == 30:
                lines += ["Traceback (most recent call last):", "  File x, line 1"]
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "app.log").write_text("\n".join(lines) + "\n", encoding="utf-8")
    kb = make_kb(tmp_path / "base", docs)
    assert ingest.sync(kb).failed == []
    row = sources(kb)["docs/app.log"]
    assert row["parser"] == "log:utf-8+time"
    assert len(row["chunks"]) > 2
    for chunk in row["chunks"]:
        first = lines[chunk["line_start"] - 1]
        assert first.startswith("2024-05-01 12:") and first[17:19] == "00", first
        assert chunk["context"].startswith(f"log 2024-05-01 {first[11:19]} - ")


def _apache_log(minutes: int, status: int = 200) -> str:
    """An Apache access log of `minutes` minutes, 20 requests a minute (written here: no
    third-party logs in the repo)."""
    return "".join(f'203.0.113.{n % 250} - - [01/May/2024:12:{m:02}:{n % 60:02} +0000] '
                   f'"GET /page/{m}/{n} HTTP/1.1" {status} {512 + n}\n'
                   for m in range(minutes) for n in range(20))


def test_a_time_in_the_context_finds_its_lines(tmp_path):
    # the access log writes 01/May/2024:12:07:..; the chunk's context says 2024-05-01 12:07,
    # so a question in ISO form finds the minute, and the hit cites the file's own lines
    docs = tmp_path / "docs"
    docs.mkdir()
    text = _apache_log(12)
    (docs / "access.log").write_text(text, encoding="utf-8")
    kb = make_kb(tmp_path / "base", docs)
    assert ingest.sync(kb).failed == []
    assert sources(kb)["docs/access.log"]["parser"] == "log:utf-8+time"
    library = Library(tmp_path / "base")
    try:
        hit = library.search(SearchRequest.checked("2024-05-01 12:07", 1, "bm25",
                                                   "data"))["hits"][0]
        best = library.get_document_chunk(hit["merged_chunk_ids"][0], "data")
        assert "12:07" in best["text"].split("\n")[0] and "2024-05-01" not in best["text"]
        lines = text.split("\n")
        shown = library.read_range(hit["source"], 1, hit["line_start"], hit["line_end"], 0,
                                   "data")["lines"]
        assert [line["text"] for line in shown] == \
            lines[hit["line_start"] - 1:hit["line_end"]] == hit["text"].split("\n")
    finally:
        library.close()


def test_a_json_chunk_is_found_by_its_key_path(tmp_path):
    # deep in a long list the chunk's text holds only numbers; its context names the path
    ports = [{"port": 8000 + n, "protocol": "tcp"} for n in range(300)]
    data = {"services": {"web": {"image": "nginx", "ports": ports}}}
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "compose.json").write_text(json.dumps(data, indent=2), encoding="utf-8")
    kb = make_kb(tmp_path / "base", docs)
    assert ingest.sync(kb).failed == []
    chunks = sources(kb)["docs/compose.json"]["chunks"]
    deep = [c for c in chunks if "8150" in c["text"]]
    assert deep and deep[0]["context"].startswith("json $.services.web.ports[")
    assert "services" not in deep[0]["text"]
    library = Library(tmp_path / "base")
    try:
        hits = library.search(SearchRequest.checked("services web ports 8150", 3, "bm25",
                                                    "data"))["hits"]
        assert any(h["line_start"] <= deep[0]["line_start"] <= h["line_end"] for h in hits)
    finally:
        library.close()


def _chunk_table(kb: kbmod.KnowledgeBase) -> list[tuple]:
    conn = fulltext.connect(kb.fulltext_path, readonly=True)
    try:
        return [tuple(row) for row in conn.execute(
            "SELECT s.name, s.parser, c.page, c.line_start, c.line_end, c.context, c.tokens, "
            "c.text FROM chunks c JOIN sources s ON s.id = c.source_id "
            "ORDER BY s.name, c.line_start")]
    finally:
        conn.close()


def test_edited_logs_and_json_equal_a_clean_index(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "access.log").write_text(_apache_log(6), encoding="utf-8")
    (docs / "compose.json").write_text(json.dumps({"a": list(range(400))}, indent=1),
                                       encoding="utf-8")
    kb = make_kb(tmp_path / "base", docs)
    assert ingest.sync(kb).failed == []
    # a minute rewritten in the middle, more minutes after; the list moves under a new key
    (docs / "access.log").write_text(_apache_log(3) + _apache_log(9, 500),
                                     encoding="utf-8")
    (docs / "compose.json").write_text(json.dumps({"b": {"c": list(range(450))}}, indent=1),
                                       encoding="utf-8")
    assert ingest.sync(kb).failed == []
    clean = make_kb(tmp_path / "clean", docs)
    assert ingest.sync(clean).failed == []
    assert _chunk_table(kb) == _chunk_table(clean)
    assert any(row[5].startswith("json $.b.c[") for row in _chunk_table(kb))
