"""Source code: which files are code (by extension, or by shebang when a file has none), and
the reader, which gives a code file as one page whose line N is line N of the file.

Only "\\n", "\\r\\n" and a lone "\\r" end a line, as in editors, git and grep: U+2028/U+2029
(which clean_lines would turn into line breaks, and Python's splitlines also \\v \\f \\x1c-\\x1e
\\x85) become a space, so no line is renumbered; a form feed starts no page here. Tabs become
one space and control characters go, as for every format (formats/base.py). The syntax tree
is made at chunking (codechunks.py), not here: this module imports no parser, so
formats/__init__.py can take its tables at import.

Layer: reader (formats/), above formats/base.py and formats/text.py.
"""

from __future__ import annotations

import re
from pathlib import Path, PurePath

from formats.base import Extracted, ExtractError, clean_lines
from formats.text import read_text

# -----------------------------------------------------------------------------
LANGUAGES: dict[str, str] = {  # suffix (lower case) -> language (its tree-sitter grammar)
    **dict.fromkeys((".py", ".pyw", ".pyi"), "python"),
    **dict.fromkeys((".js", ".mjs", ".cjs", ".jsx"), "javascript"),
    **dict.fromkeys((".ts", ".mts", ".cts"), "typescript"), ".tsx": "tsx",
    ".java": "java", ".cs": "csharp", ".go": "go", ".rs": "rust",
    ".c": "c", ".h": "c",
    **dict.fromkeys((".cpp", ".cc", ".cxx", ".c++", ".hpp", ".hh", ".hxx", ".h++", ".ipp"), "cpp"),
    **dict.fromkeys((".kt", ".kts"), "kotlin"), ".swift": "swift", ".php": "php",
    **dict.fromkeys((".rb", ".rake", ".gemspec"), "ruby"),
    **dict.fromkeys((".scala", ".sc"), "scala"),
    **dict.fromkeys((".sh", ".bash", ".zsh", ".ksh"), "bash"),
    **dict.fromkeys((".ps1", ".psm1", ".psd1"), "powershell"),
    ".sql": "sql", ".lua": "lua", ".r": "r", ".dart": "dart",
}
INTERPRETERS: dict[str, str] = {  # a shebang's program (version digits dropped) -> language
    "python": "python", "pypy": "python", "node": "javascript", "nodejs": "javascript",
    "deno": "typescript", "bun": "javascript", "ts-node": "typescript", "tsx": "typescript",
    **dict.fromkeys(("sh", "bash", "zsh", "ksh", "dash", "ash", "mksh"), "bash"),
    "pwsh": "powershell", "powershell": "powershell", "ruby": "ruby", "lua": "lua",
    "luajit": "lua", "rscript": "r", "php": "php", "scala": "scala", "dart": "dart",
    "swift": "swift", "kotlin": "kotlin", "uv": "python",  # `#!/usr/bin/env -S uv run --script`
}
SHEBANG_BYTES = 256  # a shebang line is read from at most this many leading bytes
# -----------------------------------------------------------------------------

_LINE_SEPARATORS = str.maketrans({"\u2028": " ", "\u2029": " "})
_VERSION = re.compile(r"[\d.]+$")  # python3.12 -> python


def shebang_language(first_line: str) -> str | None:
    """The language a `#!` line names: `#!/usr/bin/env python3`, `#!/bin/sh`,
    `#!/usr/bin/env -S node --flag`; None for any other line or program."""
    if not first_line.startswith("#!"):
        return None
    words = first_line[2:].split()
    if words and PurePath(words[0].replace("\\", "/")).name == "env":
        words = [w for w in words[1:] if not w.startswith("-") and "=" not in w]
    if not words:
        return None
    program = _VERSION.sub("", PurePath(words[0].replace("\\", "/")).name.lower())
    return INTERPRETERS.get(program)


def script_language(path: Path) -> str | None:
    """The language of a file without an extension, by its shebang; None when it has none,
    names another program, or cannot be read (a name only, like a mail attachment's)."""
    try:
        with open(path, "rb") as file:
            head = file.read(SHEBANG_BYTES)
    except OSError:
        return None
    return shebang_language(head.split(b"\n", 1)[0].decode("utf-8", "replace").strip())


def language_of(path: Path) -> str | None:
    """A code file's language: by its extension, else (no extension) by its shebang."""
    suffix = path.suffix.lower()
    return LANGUAGES.get(suffix) if suffix else script_language(path)


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
