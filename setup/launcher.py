"""Write the `linecite` launcher into this install's bin folder.

    .venv/bin/python launcher.py          # writes bin/linecite (a sh script), prints its path
    .venv\\Scripts\\python launcher.py     # writes bin\\linecite.cmd

The launcher runs cli.py with the Python that ran this (the venv's), and sets LINECITE_HOME to
the base folder the MCP host config carries (mcp_config.entry) unless the shell sets it; so do
TESSDATA_PREFIX, LINECITE_TESSERACT and LINECITE_WHISPER_MODEL when the installer set them
(mcp_config.PASSED_ENV). A command from a new
shell then indexes into the folder the host reads. The installers run this on every run; a
launcher already right is left as it is.

Layer: installer helper (beside install.ps1/install.sh), above the config layer.
"""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

from common.commands import launcher_path
from setup import mcp_config

HERE = Path(__file__).resolve().parent.parent  # the checkout: setup/ sits in it


def baked_env() -> dict[str, str]:
    """The variables the launcher sets when the shell does not: the host entry's env."""
    return dict(mcp_config.entry()["env"])


def sh_text(python: str, cli: str, env: dict[str, str]) -> str:
    lines = ["#!/bin/sh",
             "# linecite's launcher, written by install.sh (launcher.py): this install's Python",
             "# and the base folder the MCP host uses; a variable set in the shell wins."]
    for name, value in env.items():
        lines += [f'if [ -z "${{{name}:-}}" ]; then {name}={shlex.quote(value)}; fi',
                  f"export {name}"]
    lines.append(f'exec {shlex.quote(python)} {shlex.quote(cli)} "$@"')
    return "\n".join(lines) + "\n"


def cmd_value(text: str, env: dict[str, str]) -> str:
    """A path as a .cmd line names it: % doubled, this folder as %~dp0.., the profile as
    %USERPROFILE% (both expand at run time, so a Hangul user name never sits in the file)."""
    here, profile = str(HERE), env.get("USERPROFILE", "")
    for prefix, word in ((here, "%~dp0.."), (profile, "%USERPROFILE%")):
        if prefix and (text == prefix or text.lower().startswith(prefix.lower() + "\\")):
            return word + text[len(prefix):].replace("%", "%%")
    return text.replace("%", "%%")


def cmd_text(python: str, cli: str, env: dict[str, str], outer: dict[str, str]) -> str:
    body = [f'if not defined {name} set "{name}={cmd_value(value, outer)}"'
            for name, value in env.items()]
    body.append(f'"{cmd_value(python, outer)}" "{cmd_value(cli, outer)}" %*')
    if all(line.isascii() for line in body):
        head, tail = [], ["exit /b %ERRORLEVEL%"]
    else:  # cmd.exe reads a batch file in the console code page: switch to UTF-8 and back
        head = ['for /f "tokens=2 delims=:" %%c in (\'chcp\') do set "LINECITE_CP=%%c"',
                "chcp 65001 >nul"]
        tail = ['set "LINECITE_RC=%ERRORLEVEL%"', "chcp %LINECITE_CP% >nul",
                "exit /b %LINECITE_RC%"]
    lines = ["@echo off", "rem linecite's launcher, written by install.ps1 (launcher.py): this",
             "rem install's Python and the base folder the MCP host uses; a variable set wins.",
             "setlocal", *head, *body, *tail]
    return "\r\n".join(lines) + "\r\n"


def write(platform: str = sys.platform) -> tuple[Path, bool]:
    """Write the launcher for this platform; (its path, whether it changed)."""
    path, python, cli = launcher_path(platform), sys.executable, str(HERE / "cli.py")
    if platform == "win32":
        text = cmd_text(python, cli, baked_env(), dict(os.environ))
    else:
        text = sh_text(python, cli, baked_env())
    data = text.encode("utf-8")
    if path.is_file() and path.read_bytes() == data:
        return path, False
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    if platform != "win32":
        path.chmod(0o755)
    return path, True


def main(argv: list[str] | None = None) -> int:
    path, changed = write()
    print(path)
    print("written" if changed else "unchanged", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
