"""Git's wildmatch globs as regular expressions: one reading of `*`, `**`, `?` and `[...]` for
both `.gitignore` lines (sources/ignores.py) and the path globs of `search` (ranking/filters.py,
library.py), so a pattern means the same wherever a user writes it.

Layer: ground (imports nothing of ours).
"""

from __future__ import annotations

import re


def glob_regex(glob: str) -> str:
    """Git's wildmatch with FNM_PATHNAME as a regex (also what `search(source=...)` takes as a
    path glob): `*`, `?` and `[...]` never match "/",
    `**` as a whole segment matches any number of folders, `\\x` is x itself. A path is
    matched whole, never as a prefix: "z/**" matches what z holds, not z (so `!z/keep.txt`
    can re-include), which is where pathspec's GitIgnoreSpec answers otherwise."""
    out, i = [], 0
    while i < len(glob):
        char = glob[i]
        if char == "*":
            end = i
            while end < len(glob) and glob[end] == "*":
                end += 1
            whole = (i == 0 or glob[i - 1] == "/") and (end == len(glob) or glob[end] == "/")
            if end - i >= 2 and whole:
                out.append(".*" if end == len(glob) else "(?:.*/)?")
                end += end < len(glob)  # "**/" takes its slash with it
            else:
                out.append("[^/]*")
            i = end
        elif char == "?":
            out.append("[^/]")
            i += 1
        elif char == "[" and (close := _class_end(glob, i)) > 0:
            out.append(_char_class(glob[i + 1:close]))
            i = close + 1
        elif char == "\\" and i + 1 < len(glob):
            out.append(re.escape(glob[i + 1]))
            i += 2
        else:
            out.append(re.escape(char))
            i += 1
    return "".join(out)


def _class_end(glob: str, start: int) -> int:
    """Where the bracket expression opened at `start` closes; -1 if it never does (then "["
    is itself, as in git). A "]" right after "[" or "[!" belongs to the set."""
    i = start + 1
    i += i < len(glob) and glob[i] in "!^"
    i += i < len(glob) and glob[i] == "]"
    while i < len(glob) and glob[i] != "]":
        i += 2 if glob[i] == "\\" else 1
    return i if i < len(glob) else -1


def _char_class(body: str) -> str:
    """A bracket expression's inside as a regex class that never matches "/". POSIX classes
    (`[[:alpha:]]`) are not read: their characters count one by one."""
    negate = body[:1] in ("!", "^")
    body = body[1:] if negate else body
    parts, i = [], 0
    while i < len(body):
        if body[i] == "\\" and i + 1 < len(body):
            parts.append(re.escape(body[i + 1]))
            i += 2
        else:
            parts.append("-" if body[i] == "-" else re.escape(body[i]))
            i += 1
    return ("[^/" if negate else "(?!/)[") + "".join(parts) + "]"
