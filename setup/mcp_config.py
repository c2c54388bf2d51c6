"""The MCP host config block for this install: print it, or merge it into Claude Desktop's.

    .venv/bin/python mcp_config.py                                   # print the block
    .venv/bin/python mcp_config.py --url http://127.0.0.1:8000/mcp   # the block for HTTP
    .venv/bin/python mcp_config.py --claude PATH/claude_desktop_config.json
    .venv/bin/python mcp_config.py --claude-auto      # every config Claude Desktop reads here
    .venv/bin/python mcp_config.py --info             # JSON for the installers (ASCII only)
    .venv/bin/python mcp_config.py --move-legacy-base # Windows: the old base folder, moved once

The entry runs this Python (the venv's, when run with it) on this folder's server.py, and
always passes LINECITE_HOME (and PASSED_ENV's variables when set), so the host's server uses the
same base folder, Tesseract and Whisper model as the CLI whatever the host's environment.
`--claude` backs the file up first (a timestamped copy beside it), keeps every other server
and setting, updates only `mcpServers.linecite` (keeping keys the user added there, such as
`env`), creates the file when it is absent, writes through a temporary file, and changes
nothing when the entry is already right. A file that is not valid JSON is left alone, with an error.

`--url` prints the entry for a server already running over HTTP instead (Cursor's `url` form):
a host given both would run a second server on the same stores, so the installers print one.

Claude Desktop for Windows is now an MSIX package that reads
`%LOCALAPPDATA%\\Packages\\Claude_<id>\\LocalCache\\Roaming\\Claude\\claude_desktop_config.json`
and ignores `%APPDATA%\\Claude\\...` (anthropics/claude-code#26073); the older installer reads the
latter. `--claude-auto` writes each package's file, plus the classic one when it exists or
when no package is installed. install.sh and install.ps1 both run this file.

Layer: installer helper (beside install.ps1/install.sh), above the config layer.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from common import atomic, paths

# ---------------------------------------------------------------------------
HERE = Path(__file__).resolve().parent.parent  # the checkout: setup/ sits in it
NAME = "linecite"
CONFIG_NAME = "claude_desktop_config.json"
MSIX_GLOB = "Claude_*"  # Claude Desktop's package folder under %LOCALAPPDATA%\Packages
# passed on to the host's server (and baked into the launcher) when set here: the installers set
# them for this run only, so nothing is changed user-wide (Tesseract's program and language data,
# a local Whisper model folder)
PASSED_ENV = ("TESSDATA_PREFIX", "LINECITE_TESSERACT", "LINECITE_WHISPER_MODEL")
TOKEN_ENV = "LINECITE_HTTP_TOKEN"  # the HTTP server's bearer token; hosts read it from env
# ---------------------------------------------------------------------------


def entry() -> dict:
    """This install's server entry: the running Python on server.py beside this file."""
    env = {"LINECITE_HOME": str(paths.default_base_path())}
    env.update({name: os.environ[name] for name in PASSED_ENV if os.environ.get(name)})
    return {"command": sys.executable, "args": [str(HERE / "server.py")], "env": env}


def url_entry(url: str) -> dict:
    """The entry for the shared HTTP server; the token stays in the host's environment."""
    item: dict = {"url": url}
    if os.environ.get(TOKEN_ENV):
        item["headers"] = {"Authorization": f"Bearer ${{env:{TOKEN_ENV}}}"}
    return item


def print_block(item: dict) -> None:
    text = json.dumps({"mcpServers": {NAME: item}}, indent=2, ensure_ascii=False)
    try:
        text.encode(sys.stdout.encoding or "ascii")
    except (UnicodeEncodeError, LookupError):
        # e.g. a Korean user name on a console that is not UTF-8: \uXXXX escapes paste correctly
        text = json.dumps({"mcpServers": {NAME: item}}, indent=2)
    print(text)


def claude_config_paths(env: Mapping[str, str] | None = None,
                        platform: str | None = None) -> list[Path]:
    """The claude_desktop_config.json files Claude Desktop reads on this machine.

    Windows: one per MSIX package folder (`Packages\\Claude_*`), plus `%APPDATA%\\Claude`'s when
    that folder exists (an older, unpackaged install) or when no package is there at all.
    """
    env = os.environ if env is None else env
    platform = platform or sys.platform
    if platform == "win32":
        packages = Path(env["LOCALAPPDATA"]) / "Packages" if env.get("LOCALAPPDATA") else None
        msix = sorted(p / "LocalCache" / "Roaming" / "Claude" / CONFIG_NAME
                      for p in (packages.glob(MSIX_GLOB) if packages else []) if p.is_dir())
        roaming = env.get("APPDATA") or str(Path.home() / "AppData" / "Roaming")
        classic = Path(roaming) / "Claude" / CONFIG_NAME
        return msix + [classic] if classic.parent.is_dir() or not msix else msix
    if platform == "darwin":
        return [Path.home() / "Library" / "Application Support" / "Claude" / CONFIG_NAME]
    config_home = env.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return [Path(config_home) / "Claude" / CONFIG_NAME]


def quit_hint(platform: str | None = None) -> str:
    """Closing Claude Desktop's window leaves it running with the old config."""
    if (platform or sys.platform) == "win32":
        return ("Quit Claude Desktop from its tray icon (right-click > Quit; closing the window "
                "is not enough), then start it again to load it.")
    if (platform or sys.platform) == "darwin":
        return "Quit Claude Desktop (Cmd+Q), then start it again to load it."
    return "Quit Claude Desktop, then start it again to load it."


def merged(config: dict, new: dict) -> dict:
    """`config` with `mcpServers.linecite` set to `new`, over what the user kept there."""
    servers = config.get("mcpServers", {})
    if not isinstance(servers, dict):
        raise ValueError("its 'mcpServers' is not a JSON object")
    old = servers.get(NAME) if isinstance(servers.get(NAME), dict) else {}
    item = {**old, **new}
    if isinstance(old.get("env"), dict) and "env" in new:
        item["env"] = {**old["env"], **new["env"]}
    return {**config, "mcpServers": {**servers, NAME: item}}


def backup_path(path: Path) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    candidate = path.with_name(f"{path.name}.bak-{stamp}")
    n = 1
    while candidate.exists():
        n += 1
        candidate = path.with_name(f"{path.name}.bak-{stamp}-{n}")
    return candidate


def write_claude(path: Path) -> int:
    """Merge the entry into Claude Desktop's config at `path`; 0 on success, 2 on a bad file."""
    config: dict = {}
    if path.exists():
        try:
            # utf-8-sig: Notepad and PowerShell 5.1 write a BOM
            config = json.loads(path.read_text(encoding="utf-8-sig") or "{}")
            if not isinstance(config, dict):
                raise ValueError("it is not a JSON object")
            new_config = merged(config, entry())
        except ValueError as err:  # JSONDecodeError is a ValueError
            print(f"linecite: {path} is not a valid Claude Desktop config ({err}); left it "
                  "unchanged: fix or move it, then run again", file=sys.stderr)
            return 2
        if new_config == config:
            print(f"Claude Desktop config already has linecite: {path} (unchanged)")
            return 0
        backup = backup_path(path)
        backup.write_bytes(path.read_bytes())
        print(f"Backed up {path} to {backup}")
    else:
        new_config = merged(config, entry())
    atomic.write_json(path, new_config)
    others = sorted(set(new_config["mcpServers"]) - {NAME})
    print(f"Wrote linecite into {path}" + (f" (kept: {', '.join(others)})" if others else ""))
    return 0


def write_all_claude(paths: list[Path]) -> int:
    """Merge the entry into each config file; the worst exit code."""
    codes = [write_claude(path) for path in paths]
    print(quit_hint())
    return max(codes, default=0)


def info() -> dict:
    """What the installers need to know, computed the way the server computes it."""
    return {"python": sys.executable, "base": str(paths.default_base_path()),
            "legacy_bases": [str(p) for p in paths.legacy_base_paths()],
            "claude_configs": [str(p) for p in claude_config_paths()],
            "claude_msix": any("Packages" in p.parts for p in claude_config_paths())}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--claude", type=Path, metavar="PATH",
                        help="merge the entry into this claude_desktop_config.json")
    parser.add_argument("--claude-auto", action="store_true",
                        help="merge it into every config Claude Desktop reads on this machine")
    parser.add_argument("--url", metavar="URL",
                        help="print the entry for the HTTP server at URL instead of stdio")
    parser.add_argument("--info", action="store_true", help="print the installers' facts as JSON")
    parser.add_argument("--move-legacy-base", action="store_true",
                        help="move the base folder an earlier version used (Windows)")
    args = parser.parse_args(argv)
    if args.claude:
        code = write_claude(args.claude)
        print(quit_hint())
        return code
    if args.claude_auto:
        return write_all_claude(claude_config_paths())
    if args.info:
        print(json.dumps(info()))  # ASCII (\\u escapes): survives any console code page
        return 0
    if args.move_legacy_base:
        try:
            message = paths.move_legacy_base()
        except OSError as err:
            print(f"linecite: {err}", file=sys.stderr)
            return 2
        print(message or "linecite: no old base folder to move")
        return 0
    print_block(url_entry(args.url) if args.url else entry())
    return 0


if __name__ == "__main__":
    sys.exit(main())
