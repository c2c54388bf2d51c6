"""Which code defines a name: the one rule by which a definition comes before its uses, for
lines in `exact` mode and for chunks in `auto`.

A query names a symbol when it is one identifier, possibly qualified (`parse_http`,
`parseHttp`, `Parser.parse`, `pkg.mod.func`, `Foo::bar`, `bar()`); a query of several words is
never one, so plain questions are left as they are. A line defines the name when it declares
it (after a defining keyword, assigned a function, or declared C-style); a code chunk defines
it when one of its lines does or when its symbol lines (codechunks.py keeps `<language>
<kind> <symbol>` in its context) end with the name's parts. The name as written beats the
name in another case (getURL before getUrl), and a line that declares it beats a chunk that
only lies in its definition (the rest of a long function).

Layer: query, below search.py; reads nothing itself (the caller passes lines and contexts).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import codechunks

# -----------------------------------------------------------------------------
DEFINING = ("def|class|function|func|fn|interface|struct|enum|trait|type|module|namespace|"
            "object|record|sub|procedure|macro|impl|typedef|alias|let|const|var|val")
NOT_TYPES = ("return|await|yield|throw|raise|new|delete|if|else|elif|while|for|case|not|and|"
             "or|print|echo|assert|go|defer")  # words before a call that is no declaration
MODIFIERS = "static|async|get|set|public|private|protected|override|readonly|abstract"
NOT_METHODS = "if|for|while|switch|catch|with|function|return"  # `if (x) {` is no method
_NAME = r"(?:[^\W\d]|\$)[\w$]*"  # an identifier: letters, digits, `_`, JavaScript's `$`
_QUALIFIER = re.compile(r"\.|::|#|->")  # between the parts of a qualified name
_SYMBOL_QUERY = re.compile(rf"{_NAME}(?:(?:\.|::|#|->){_NAME})*(?:\(\))?")
MAX_NAME_CHARS = 200  # a longer "identifier" is pasted text, not a name to look up
NOT_DEFINED = 6  # the tier of a chunk or line that does not define the name
# -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Name:
    """A query that names a symbol: as written (`Foo.bar`, without `()`) and its parts."""

    written: str
    parts: tuple[str, ...]  # ("Foo", "bar")


def name_of(query: str) -> Name | None:
    """The qualified name the query is, or None when it is not one identifier (any question
    of two words or more)."""
    text = query.strip()
    if len(text) > MAX_NAME_CHARS or not _SYMBOL_QUERY.fullmatch(text):
        return None
    written = text.removesuffix("()")
    return Name(written, tuple(_QUALIFIER.split(written)))


# a line of code that declares a name: after a defining keyword, assigned a function,
# declared C-style (a type before it, parameters after it, no `;` closing the line), or a
# method's head alone on its line (JavaScript's `read(n) {`, `get path() {`); keywords
# in any case (SQL's CREATE FUNCTION), the name compared by line_tier
_DECLARES = re.compile(
    rf"\b(?:{DEFINING})\s+[*&]?(?P<keyword>{_NAME})(?![\w$])"
    rf"|(?<![\w.])(?P<assigned>{_NAME}(?:\.{_NAME})*)\s*[:=]\s*(?:async\s+)?"
    rf"(?:function\b|\(|lambda\b)"
    rf"|^\s*(?!(?:{NOT_TYPES})\b)(?:[\w<>\[\],*&]+\s+)+(?P<declared>{_NAME})\s*\([^;]*$"
    rf"|^\s*(?:(?:{MODIFIERS})\s+)*\*?#?(?!(?:{NOT_METHODS})\b)(?P<method>{_NAME})\s*"
    r"\([^;]*\)\s*(?::[^;{]*)?\{\s*$",
    re.IGNORECASE)


def declared(line: str) -> set[str]:
    """The names the line declares (`def parse_x(` -> {"parse_x"})."""
    return {name for match in _DECLARES.finditer(line) for name in match.groups() if name}


def line_tier(name: Name, line: str) -> int:
    """0 when the line defines the name (`def bar`, `Foo.bar = function`) as written, 2 in
    another case, else NOT_DEFINED (chunk_rank's scale)."""
    if name.parts[-1].lower() not in line.lower():
        return NOT_DEFINED  # most lines: no need to parse them
    names = declared(line)
    words = (name.written, name.parts[-1])
    if any(word in names for word in words):
        return 0
    folded = {n.lower() for n in names}
    return 2 if any(word.lower() in folded for word in words) else NOT_DEFINED


def _ends_with(path: str, parts: tuple[str, ...], case_sensitive: bool) -> bool:
    """The symbol path and the name agree on their common last parts: `core.Command.invoke`
    for `invoke` and `Command.invoke`, and for `click.core.Command.invoke` too."""
    have = tuple(_QUALIFIER.split(path))
    if not case_sensitive:
        have, parts = tuple(p.lower() for p in have), tuple(p.lower() for p in parts)
    common = min(len(have), len(parts))
    return have[-common:] == parts[-common:]


def _naming_symbol(parts: tuple[str, ...], context: str, case_sensitive: bool) -> int | None:
    """Which of the chunk's symbol lines (file lines aside, 0 = its first) names the name
    first; None when none does."""
    paths = [s["symbol"] for s in codechunks.symbols(context) if s["kind"] != "file"]
    return next((n for n, path in enumerate(paths) if _ends_with(path, parts, case_sensitive)),
                None)


def chunk_rank(name: Name, text: str, context: str) -> tuple[int, int]:
    """How surely a code chunk defines the name, (0, 0) best; its tier is NOT_DEFINED when
    it does not. Tiers: as written before in another case; then a line of it that declares
    the name's last part (`def bar`) with its symbol lines naming it, its symbol lines alone
    (the syntax tree says it is, or lies in, the definition), such a line alone (`const bar =
    x` may be any variable; a qualified name needs the symbol). Within a tier, a chunk about
    the name (its first symbol line) before one that holds it among others (nested in `join`,
    the second of two functions)."""
    line = min((line_tier(name, row) for row in text.splitlines()), default=NOT_DEFINED) \
        if name.parts[-1].lower() in text.lower() else NOT_DEFINED
    cased = _naming_symbol(name.parts, context, True)
    folded = cased if cased is not None else _naming_symbol(name.parts, context, False)
    single = len(name.parts) == 1
    tiers = ((line == 0 and cased is not None), cased is not None, (line == 0 and single),
             (line <= 2 and folded is not None), folded is not None, (line <= 2 and single))
    tier = next((n for n, holds in enumerate(tiers) if holds), NOT_DEFINED)
    return tier, (folded if folded is not None else codechunks.MAX_SYMBOLS)
