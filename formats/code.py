"""Source code: the reader, which gives a code file (formats/languages.py says which files are
code) as one page whose line N is line N of the file.

Only "\\n", "\\r\\n" and a lone "\\r" end a line, as editors count them. U+2028 and
U+2029 become a space (clean_lines would make them line breaks and renumber every later
line); \\v, \\f and \\x85 are dropped like any control character, so neither they nor a form
feed start a line or a page. Tabs become one space, as for every format (formats/base.py).
The syntax tree is made at chunking (codechunks.py), not here.

Layer: reader (formats/), above formats/base.py and formats/text.py.
"""

from __future__ import annotations

from pathlib import Path

from formats.base import Extracted, ExtractError, clean_lines
from formats.languages import language_of
from formats.text import read_text

_LINE_SEPARATORS = str.maketrans({"\u2028": " ", "\u2029": " "})


def extract_code(path: Path) -> Extracted:
    """A source file as one page of its lines, numbered as an editor numbers them."""
    language = language_of(path)
    if language is None:
        raise ExtractError("unsupported-format", f"{path.name} is no source code file linecite "
                                                 "knows (by extension or #! line).")
    text, encoding = read_text(path)
    lines = clean_lines(text.translate(_LINE_SEPARATORS))
    if not lines:
        raise ExtractError("empty", f"{path.name} has only blank lines; nothing to index.")
    return Extracted([lines], f"code:{language}", language=language)
