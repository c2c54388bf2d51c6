"""Structured text: data and config files, tables, logs and subtitles, cited by their lines.

JSON and JSON Lines, YAML, TOML, INI (.ini .cfg .conf), XML, CSV/TSV and logs are one page
each, and line N of it is line N of the file, as an editor shows it (extract.py's one line
convention applies: tabs become spaces, trailing spaces go). A data or config file is parsed
only to say in the parser field what it is: `json:utf-8` (well-formed), `json-malformed:utf-8`
(a parse error: still indexed, as its lines), `yaml-unchecked:utf-8` (not parsed: past
PARSE_MAX_CHARS, or an XML file declaring a DTD, whose entities are never expanded). A parse
never fails a file. `.conf` files that are no INI (nginx, Apache) read as `ini-malformed`.

CSV/TSV: when the first non-empty line reads as a header row (every cell a name, not a
number), Extracted.layout "table" makes every later chunk carry it in its context, searched
and embedded but never in the chunk's text (chunking.page_context, as for spreadsheets).
INI, TOML and YAML are "sections": a chunk carries the section it starts in (`[tool.ruff]`,
`[server]`, a YAML top-level `jobs:`) the way a document's chunk carries its heading
(chunking.section_heading), so the section's name finds a setting in its 40th line. Structure
is read from the lines, not the parse, so a malformed file has its sections too.
Logs are chunked by size like any text; the file size and text limits of ingest.py and
formats/base.py bound them.

Subtitles (.srt, .vtt) are the one transformation: a file is read as its cues, like an audio
transcript (formats/audio.py): one line per cue, `[mm:ss] text` with the cue's start time and
its text lines joined by spaces (tags such as `<i>` and `<v Speaker>` dropped), one page per
10 minutes. So line N of page P is the Nth cue starting in minutes (P-1)*10 to P*10, not line
N of the file; the stamp is what a player seeks to. A file with no cue reads as its lines
(`srt-malformed`).

Layer: reader (formats/), above formats/base.py, formats/text.py and formats/audio.py.
"""

from __future__ import annotations

import configparser
import csv
import html
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from xml.parsers import expat

from formats.base import Extracted, ExtractError, clean_lines
from formats.text import read_text

# -----------------------------------------------------------------------------
PARSE_MAX_CHARS = 20_000_000  # a longer file is indexed unparsed (a parse only labels it)
YAML_PARSE_MAX_CHARS = 4_000_000  # ... for YAML, a slower parser: see below
HEADER_MAX_CHARS = 500  # a longer first row is no header to repeat into every chunk
CSV_DELIMITERS = ",;\t|"  # a .csv's delimiter: the one its first row holds most of
MAX_CUE_SECONDS = 100 * 3600  # a cue starting later is no real time: the file reads as lines
# -----------------------------------------------------------------------------

# The parse bounds, measured on 2 busy shared cores: json.loads reads 20 M characters in 0.4 s;
# PyYAML's libyaml parser 2 M characters of YAML in 0.7 s (its node tree took 3.8 s, so only
# events are read), so a 4 M YAML file costs about 1.5 s before it is indexed as lines.

Check = Callable[[str], bool]  # text -> well-formed (raises nothing)


def _lines(path: Path) -> tuple[list[str], str, str]:
    """(the file's lines, its text, its encoding): one page, form feeds no page break."""
    text, encoding = read_text(path)
    lines = clean_lines(text)
    if not lines:
        raise ExtractError("empty", f"{path.name} has only blank lines; nothing to index.")
    return lines, text, encoding


def _checked(path: Path, kind: str, check: Check, limit: int | None = None,
             layout: str = "") -> Extracted:
    """The file as one page of its lines, labelled with what `check` found (see the module);
    not parsed past `limit` characters (PARSE_MAX_CHARS by default). `layout`: Extracted's."""
    lines, text, encoding = _lines(path)
    if len(text) > (PARSE_MAX_CHARS if limit is None else limit):
        return Extracted([lines], f"{kind}-unchecked:{encoding}", layout=layout)
    label = f"{kind}{'' if check(text) else '-malformed'}:{encoding}"
    return Extracted([lines], label, layout=layout)


# ----------------------------------------------------------------------------- well-formed?

def _json_ok(text: str) -> bool:
    try:
        json.loads(text)
    except (ValueError, RecursionError):  # JSONDecodeError is a ValueError; deep nesting
        return False
    return True


def _jsonl_ok(text: str) -> bool:
    """Every non-empty line one JSON value."""
    return all(_json_ok(line) for line in text.splitlines() if line.strip())


def _yaml_ok(text: str) -> bool:
    """The syntax only, as parse events: nothing is constructed (no alias expanded, no tag made
    a Python object), and events are 5 times faster than composing the node tree."""
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        for _ in yaml.parse(text, Loader=loader):
            pass
    except (yaml.YAMLError, RecursionError):
        return False
    return True


def _toml_ok(text: str) -> bool:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # requirements.txt installs tomli on 3.10
        import tomli as tomllib
    try:
        tomllib.loads(text)
    except (ValueError, RecursionError):  # TOMLDecodeError is a ValueError
        return False
    return True


def _ini_ok(text: str) -> bool:
    try:
        configparser.ConfigParser(interpolation=None, strict=False).read_string(text)
    except configparser.Error:
        return False
    return True


def _xml_ok(text: str) -> bool:
    """Well-formed, by expat's events: no tree is built, so a 20 MB file costs no memory."""
    try:
        expat.ParserCreate().Parse(text, True)
    except (expat.ExpatError, ValueError):
        return False
    return True


# ----------------------------------------------------------------------------- readers

def extract_json(path: Path) -> Extracted:
    """A .json file, its lines as they are; `json-malformed` when it does not parse (JSON with
    comments, as tsconfig.json and VS Code settings are, among them)."""
    return _checked(path, "json", _json_ok)


def extract_jsonl(path: Path) -> Extracted:
    """A .jsonl/.ndjson file: one record a line, so a hit's line is its record."""
    return _checked(path, "jsonl", _jsonl_ok)


def extract_yaml(path: Path) -> Extracted:
    """A .yaml/.yml file (every document of a multi-document stream)."""
    return _checked(path, "yaml", _yaml_ok, YAML_PARSE_MAX_CHARS, "sections")


def extract_toml(path: Path) -> Extracted:
    return _checked(path, "toml", _toml_ok, layout="sections")


def extract_ini(path: Path) -> Extracted:
    """An .ini/.cfg/.conf file; `ini-malformed` for a .conf in another syntax (nginx)."""
    return _checked(path, "ini", _ini_ok, layout="sections")


def extract_xml(path: Path) -> Extracted:
    """An .xml file, its lines; a DTD means it is not parsed (no entity is ever expanded)."""
    lines, text, encoding = _lines(path)
    if len(text) > PARSE_MAX_CHARS or "<!DOCTYPE" in text:
        return Extracted([lines], f"xml-unchecked:{encoding}")
    return Extracted([lines], f"xml{'' if _xml_ok(text) else '-malformed'}:{encoding}")


def extract_log(path: Path) -> Extracted:
    """A .log file: its lines, chunked by size; the file limits bound a large one."""
    lines, _text, encoding = _lines(path)
    return Extracted([lines], f"log:{encoding}")


def header_row(line: str, delimiter: str) -> bool:
    """Whether a table's first line names its columns: every cell non-empty and no number,
    and short enough to repeat with every chunk."""
    if len(line) > HEADER_MAX_CHARS:
        return False
    cells = [cell.strip() for cell in next(csv.reader([line], delimiter=delimiter), [])]
    return bool(cells) and all(cell and not _is_number(cell) for cell in cells)


def _is_number(cell: str) -> bool:
    try:
        float(cell.replace(",", ""))
    except ValueError:
        return False
    return True


_FIRST_LINE = re.compile(r"[^\r\n]*\S[^\r\n]*")


def extract_csv(path: Path) -> Extracted:
    """A .csv/.tsv file, its lines; its header row goes into every chunk's context."""
    lines, text, encoding = _lines(path)
    first = _FIRST_LINE.search(text).group()  # _lines() found a non-empty one
    delimiter = ("\t" if path.suffix.lower() == ".tsv"
                 else max(CSV_DELIMITERS, key=first.count))  # ties: "," (listed first)
    table = header_row(first, delimiter)
    return Extracted([lines], f"{'csv' if table else 'csv-noheader'}:{encoding}",
                     layout="table" if table else "")


# ----------------------------------------------------------------------------- subtitles

_TIME = r"(?:(\d{1,3}):)?(\d{1,2}):(\d{2})[,.](\d{1,3})"  # [h:]mm:ss,mmm (SRT) or .mmm (VTT)
_TIMING = re.compile(rf"{_TIME}\s*-->\s*{_TIME}")
_TAG = re.compile(r"<[^>]*>|\{\\[^}]*\}")  # <i>, <v Bob>, <00:01.000>; SRT's {\an8}


def _seconds(hours: str | None, minutes: str, seconds: str, millis: str) -> float:
    whole = int(hours or 0) * 3600 + int(minutes) * 60 + int(seconds)
    return whole + int(millis.ljust(3, "0")) / 1000


def cues(text: str) -> list[tuple[float, float, str]] | None:
    """(start s, end s, text) per cue of an SRT or WebVTT file, in time order; None when a
    cue starts past MAX_CUE_SECONDS (no real subtitle does: it would make that many pages).
    A block with no timing line (WEBVTT, NOTE, STYLE, REGION) is no cue."""
    found: list[tuple[float, float, str]] = []
    for block in re.split(r"\n[ \t]*\n", text.replace("\r\n", "\n").replace("\r", "\n")):
        lines = block.strip("\n").split("\n")
        at = next((i for i, line in enumerate(lines) if _TIMING.search(line)), None)
        if at is None:
            continue
        times = _TIMING.search(lines[at]).groups()
        start, end = _seconds(*times[:4]), _seconds(*times[4:])
        if start > MAX_CUE_SECONDS:
            return None
        words = " ".join(html.unescape(_TAG.sub("", line)) for line in lines[at + 1:])
        found.append((start, end, " ".join(words.split())))
    return sorted(found, key=lambda cue: cue[0])


def extract_subtitles(path: Path) -> Extracted:
    """An .srt/.vtt file as `[mm:ss] text` lines, one per cue, a page per 10 minutes."""
    from formats import audio

    lines, text, encoding = _lines(path)
    kind = path.suffix.lower().lstrip(".")
    found = cues(text)
    pages = audio.to_pages(found) if found else []
    if not any(pages):
        return Extracted([lines], f"{kind}-malformed:{encoding}")
    return Extracted(pages, f"{kind}:{encoding}")
