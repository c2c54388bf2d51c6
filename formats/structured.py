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
from collections.abc import Callable, Iterator, Sequence
from itertools import islice
from pathlib import Path
from typing import NamedTuple
from xml.parsers import expat

from formats.base import Extracted, ExtractError, clean_lines
from formats.text import read_text

# -----------------------------------------------------------------------------
PARSE_MAX_CHARS = 20_000_000  # a longer file is indexed unparsed (a parse only labels it)
YAML_PARSE_MAX_CHARS = 4_000_000  # ... for YAML, a slower parser: see below
HEADER_MAX_CHARS = 500  # a longer first row is no header to repeat into every chunk
CSV_DELIMITERS = ",;\t|"  # a .csv's delimiter: the one its first row holds most of
MAX_CUE_SECONDS = 100 * 3600  # a cue starting later is no real time: the file reads as lines
LOG_STAMP_SPAN = 64  # an access log's [01/May/2024:12:00:03 +0000] starts within this
LOG_SAMPLE_LINES = 1000  # non-empty lines read to tell a log's timestamp format
LOG_MIN_STAMPS = 2  # ... of which at least this many must carry one for chunks by time
KEY_MAX_CHARS = 100  # a longer key is cut in a key path
PATH_MAX_DEPTH = 64  # nesting deeper than this is counted, not named, in a key path
PATH_MAX_CHARS = 200  # a longer key path keeps its end
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
    return _checked(path, "json", _json_ok, layout="json")


def extract_jsonl(path: Path) -> Extracted:
    """A .jsonl/.ndjson file: one record a line, so a hit's line is its record."""
    return _checked(path, "jsonl", _jsonl_ok, layout="jsonl")


def extract_yaml(path: Path) -> Extracted:
    """A .yaml/.yml file (every document of a multi-document stream)."""
    return _checked(path, "yaml", _yaml_ok, YAML_PARSE_MAX_CHARS, "yaml")


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
    """A .log file: its lines; chunked by time (`+time`, layout "log") when its lines start
    with timestamps (log_stamper), else by size. The file limits bound a large one."""
    lines, _text, encoding = _lines(path)
    if log_stamper(lines) is None:
        return Extracted([lines], f"log:{encoding}")
    return Extracted([lines], f"log:{encoding}+time", layout="log")


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


# ----------------------------------------------------------------------------- log entries

_MONTHS = {name: n for n, name in enumerate(
    ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), 1)}
_MON = "|".join(_MONTHS)
_HMS = r"(?P<h>\d{2}):(?P<mi>\d{2}):(?P<s>\d{2})"
# Each log format's timestamp, matched at a line's start (Apache/nginx access: within its first
# LOG_STAMP_SPAN characters, after the client address and user); groups y, mo, d, h, mi, s.
LOG_FORMATS = {
    "iso": re.compile(rf"\[?(?P<y>\d{{4}})([-/])(?P<mo>\d{{2}})\2(?P<d>\d{{2}})[T ]{_HMS}"),
    "syslog": re.compile(rf"(?P<mo>{_MON}) {{1,2}}(?P<d>\d{{1,2}}) {_HMS}\b"),
    "access": re.compile(rf"[^\[]{{0,{LOG_STAMP_SPAN}}}\[(?P<d>\d{{2}})/(?P<mo>{_MON})/"
                         rf"(?P<y>\d{{4}}):{_HMS}"),
    "apache-error": re.compile(rf"\[(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) (?P<mo>{_MON}) "
                               rf"(?P<d>\d{{2}}) {_HMS}(?:\.\d+)? (?P<y>\d{{4}})\]"),
    "time": re.compile(rf"\[?{_HMS}\b"),
}

Stamp = tuple[str, str]  # (date as "2024-05-01", "May 1" or "", time as "12:00:03")
Stamper = Callable[[str], "Stamp | None"]


class LogEntry(NamedTuple):
    """Lines first..last (1-based) of one log entry: its stamped line and the lines under it
    without a stamp (a stack trace); `stamp` is None for lines before the first stamp."""
    first: int
    last: int
    stamp: Stamp | None


def _stamp(match: re.Match) -> Stamp | None:
    """A match's date and time, or None for one no clock shows (hour 25, month 13)."""
    parts = match.groupdict()
    hour, minute, second = int(parts["h"]), int(parts["mi"]), int(parts["s"])
    if hour > 23 or minute > 59 or second > 60:
        return None
    month = parts.get("mo")
    number = _MONTHS.get(month, 0) or int(month or 1)
    if not 1 <= number <= 12 or not 1 <= int(parts.get("d") or 1) <= 31:
        return None
    time = f"{hour:02}:{minute:02}:{second:02}"
    if parts.get("y"):
        return f"{parts['y']}-{number:02}-{int(parts['d']):02}", time
    return (f"{month} {int(parts['d'])}" if parts.get("d") else ""), time


def log_stamper(lines: Sequence[str]) -> Stamper | None:
    """The stamp reader of the log format most of the first LOG_SAMPLE_LINES non-empty lines
    start with, or None when fewer than LOG_MIN_STAMPS do (no timed log: chunked by size).
    One format a file, so a continuation line that happens to hold a time never starts an
    entry of another."""
    sample = list(islice((line for line in lines if line.strip()), LOG_SAMPLE_LINES))
    counts = {name: sum(1 for line in sample if (m := pattern.match(line)) and _stamp(m))
              for name, pattern in LOG_FORMATS.items()}
    best = max(counts, key=counts.get)
    if counts[best] < LOG_MIN_STAMPS:
        return None
    pattern = LOG_FORMATS[best]
    return lambda line: _stamp(match) if (match := pattern.match(line)) else None


def log_entries(lines: Sequence[str]) -> Iterator[LogEntry]:
    """The entries of a timed log in line order, one pass and nothing kept (a 50 MB log is
    not held twice); lines before the first stamp (a banner) are an entry without one."""
    stamper = log_stamper(lines)
    if stamper is None:
        return
    start, stamp = None, None
    for number, line in enumerate(lines, 1):
        found = stamper(line)
        if found is None:
            if start is None and line.strip():
                start = number
            continue
        if start is not None:
            yield LogEntry(start, number - 1, stamp)
        start, stamp = number, found
    if start is not None:
        yield LogEntry(start, len(lines), stamp)


def time_bucket(stamp: Stamp | None) -> tuple[str, str] | None:
    """The minute a stamp falls in: entries of one minute share a chunk when they fit."""
    return (stamp[0], stamp[1][:5]) if stamp else None


def time_range(first: Stamp | None, last: Stamp | None) -> str:
    """A log chunk's context: `log 2024-05-01 12:00:03 - 12:00:59`, from its first entry's
    stamp to its last's (the date again only when it changed); "" with no stamp."""
    if first is None:
        return ""
    text = f"log {' '.join(part for part in first if part)}"
    if last is None or last == first:
        return text
    end = last[1] if last[0] == first[0] else " ".join(part for part in last if part)
    return f"{text} - {end}"


# ----------------------------------------------------------------------------- key paths

def key_paths(kind: str, lines: Sequence[str], starts: Sequence[int]) -> list[str]:
    """The context of a chunk of a JSON, JSON Lines or YAML file (`kind`) starting at each of
    `starts` (1-based, ascending): where it is in the data, `json $.services.web.ports[2]`,
    `jsonl record 42`, `yaml services.web.ports[0]`. Read from the lines, one pass up to the
    last start, nothing built from the data: linear, and a malformed file has paths too (a
    minified JSON, one line, is `json $`)."""
    scan = {"json": _json_paths, "jsonl": _jsonl_paths, "yaml": _yaml_paths}[kind]
    return scan(lines, starts)


def _at_starts(lines: Sequence[str], starts: Sequence[int],
               step: Callable[[str, bool], str]) -> list[str]:
    """Feed `lines` to `step` (a line, whether a chunk starts there -> its path) until the last
    start; the paths of the starts, in order."""
    wanted = iter(starts)
    start = next(wanted, None)
    paths: list[str] = []
    for number, line in enumerate(lines, 1):
        if start is None:
            break
        path = step(line, start == number)
        while start is not None and start <= number:
            paths.append(path)
            start = next(wanted, None)
    return paths + [""] * (len(starts) - len(paths))  # starts past the lines (none in practice)


def _ends_kept(path: str) -> str:
    return path if len(path) <= PATH_MAX_CHARS else "…" + path[-PATH_MAX_CHARS:]


_JSON_TOKEN = re.compile(r'"(?:[^"\\\n]|\\.)*"?|[{}\[\],:]')  # a string (open at the line end
# when unterminated: a malformed line cannot swallow the next) or a structural character


class _JsonScan:
    """Where a JSON text is, token by token: per open container, its current key (an object)
    or index (an array); containers deeper than PATH_MAX_DEPTH are only counted."""

    def __init__(self) -> None:
        self.frames: list[list] = []  # [True, key or None] for an object, [False, index]
        self.deeper = 0
        self.want_key = False  # after "{" or an object's ",": the next string is a key

    def path(self) -> str:
        parts = ["$"]
        for is_object, value in self.frames:
            if is_object and value is not None:
                parts.append(f".{value}")
            elif not is_object:
                parts.append(f"[{value}]")
        return _ends_kept("json " + "".join(parts) + (".…" if self.deeper else ""))

    def token(self, token: str) -> None:
        first = token[0]
        if first in "{[":
            if len(self.frames) < PATH_MAX_DEPTH and not self.deeper:
                self.frames.append([first == "{", None if first == "{" else 0])
            else:
                self.deeper += 1
            self.want_key = first == "{"
        elif first in "}]":
            if self.deeper:
                self.deeper -= 1
            elif self.frames:
                self.frames.pop()
            self.want_key = False
        elif self.deeper:
            return
        elif first == ",":
            top = self.frames[-1] if self.frames else None
            if top and top[0]:
                top[1], self.want_key = None, True
            elif top:
                top[1] += 1
        elif first == ":":
            self.want_key = False
        elif self.want_key and self.frames and self.frames[-1][0]:
            key = token[1:-1] if len(token) > 1 and token.endswith('"') else token[1:]
            self.frames[-1][1] = key[:KEY_MAX_CHARS]

    def line(self, line: str, starts: bool) -> str:
        """Read one line; when a chunk `starts` there, the path of its first value: its key
        when it opens with one, the container it closes, the element it opens."""
        tokens = _JSON_TOKEN.finditer(line)
        path = ""
        if starts:
            lead = line.lstrip()[:1]
            first = next(tokens, None) if lead and lead in '"{}[],:' else None
            if first is not None and first.group()[0] not in "{[":
                self.token(first.group())
            path = self.path()
            if first is not None and first.group()[0] in "{[":
                self.token(first.group())
        for match in tokens:
            self.token(match.group())
        return path


def _json_paths(lines: Sequence[str], starts: Sequence[int]) -> list[str]:
    return _at_starts(lines, starts, _JsonScan().line)


def _jsonl_paths(lines: Sequence[str], starts: Sequence[int]) -> list[str]:
    """`jsonl record N`: N counts the non-empty lines up to the chunk's first."""
    count = 0

    def step(line: str, _starts: bool) -> str:
        nonlocal count
        count += bool(line.strip())
        return f"jsonl record {max(count, 1)}"

    return _at_starts(lines, starts, step)


_YAML_KEY = re.compile(  # a mapping key: quoted, or plain up to the first ": " (no comment)
    r"""(?:"((?:[^"\\]|\\.)*)"|'((?:[^']|'')*)'|([^\s#'"\[\]{},&*!|>%@`][^#]*?))"""
    r"[ \t]*:(?:[ \t]|$)")
YAML_KEY_SCAN = 2 * KEY_MAX_CHARS  # characters of a line a key is looked for in


class _YamlScan:
    """Where a YAML text is, line by line, by indentation: the keys and sequence items open
    above the line. Block scalars (`key: |`) are skipped; flow collections are not followed."""

    def __init__(self) -> None:
        self.frames: list[list] = []  # [indent, key or index, is a sequence, opens a block]
        self.scalar: int | None = None  # the indent of a `key: |` whose text lines follow

    def path(self) -> str:
        text = ""
        for _indent, value, is_sequence, _block in self.frames[:PATH_MAX_DEPTH]:
            text += f"[{value}]" if is_sequence else f"{'.' if text else ''}{value}"
        return _ends_kept(f"yaml {text}") if text else ""

    def _pop_to(self, indent: int, dash: bool) -> None:
        """Close what the line at `indent` ends: deeper entries, and those at its indent but a
        sequence it continues (`- next`) or a `key:` whose items sit at its indent."""
        while self.frames:
            top_indent, _value, is_sequence, block = self.frames[-1]
            if top_indent < indent or (top_indent == indent and dash and (is_sequence or block)):
                return
            self.frames.pop()

    def line(self, line: str, _starts: bool) -> str:
        text = line.lstrip(" ")
        indent = len(line) - len(text)
        if self.scalar is not None and (not text or indent > self.scalar):
            return self.path()
        self.scalar = None
        if not text or text.startswith("#"):
            return self.path()
        if indent == 0 and text[:3] in ("---", "...") and text[3:4] in ("", " "):
            self.frames.clear()  # a new document
            return self.path()
        dash = text[:2] in ("-", "- ")
        self._pop_to(indent, dash)
        while text[:2] in ("-", "- "):  # "- item", "- - item", "- key: value"
            top = self.frames[-1] if self.frames else None
            if top and top[2] and top[0] == indent:
                top[1] += 1
            else:
                self.frames.append([indent, 0, True, False])
            rest = text[1:]
            text = rest.lstrip(" ")
            indent += 1 + len(rest) - len(text)
        if match := _YAML_KEY.match(text[:YAML_KEY_SCAN]):
            key = next(group for group in match.groups() if group is not None)
            value = text[match.end():].strip()
            block = not value or value[0] in "#&!"
            self.frames.append([indent, key[:KEY_MAX_CHARS], False, block])
            if value[:1] in ("|", ">"):
                self.scalar = indent
        elif text[:1] in ("|", ">") and self.frames:  # "- |": the item's text lines follow
            self.scalar = self.frames[-1][0]
        return self.path()


def _yaml_paths(lines: Sequence[str], starts: Sequence[int]) -> list[str]:
    return _at_starts(lines, starts, _YamlScan().line)
