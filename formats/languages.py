"""Which files are source code, and in which language: by extension, or by the `#!` line of a
file that has none. Tables and a few bytes read, no parser and no other module of formats/:
formats/__init__.py takes them at import to know which files are supported.

Layer: the readers' ground (formats/), beside formats/base.py; imports only safeopen (ground),
which opens the file whose first bytes are read.
"""

from __future__ import annotations

import re
from pathlib import Path, PurePath

from common import safeopen

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
    names another program, or cannot be read (a name only, like a mail attachment's). Opened
    as every document is (safeopen): a FIFO with no suffix in a synced or watched folder waited
    in open() for a writer for ever (issue 45); it and a device are no code."""
    try:
        with safeopen.open_document(path) as opened:
            head = opened.file.read(SHEBANG_BYTES)
    except OSError:  # safeopen.Refused is one
        return None
    return head_language(head)


def head_language(data: bytes) -> str | None:
    """The language the shebang at the start of these bytes names (a file's, an attachment's)."""
    first = data[:SHEBANG_BYTES].split(b"\n", 1)[0]
    return shebang_language(first.decode("utf-8", "replace").strip())


def language_of(path: Path) -> str | None:
    """A code file's language: by its extension, else (no extension) by its shebang."""
    suffix = path.suffix.lower()
    return LANGUAGES.get(suffix) if suffix else script_language(path)


def parser_language(parser: str) -> str | None:
    """The language of a source whose parser says it is code (`code:python+tree-sitter`)."""
    return parser[len("code:"):].split("+")[0] if parser.startswith("code:") else None
