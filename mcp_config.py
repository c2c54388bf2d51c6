"""The MCP host config block for this install: print it, or merge it into Claude Desktop's.

    .venv/bin/python mcp_config.py                                   # print the block
    .venv/bin/python mcp_config.py --claude PATH/claude_desktop_config.json

The entry runs this Python (the venv's, when run with it) on this folder's server.py, and
passes LINECITE_HOME on when it is set. `--claude` backs the file up first (a timestamped copy
beside it), keeps every other server and setting, updates only `mcpServers.linecite` (keeping
keys the user added there, such as `env`), creates the file when it is absent, writes through
a temporary file, and changes nothing when the entry is already right. A file that is not valid
JSON is left alone, with an error. install.sh and install.ps1 both run it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
NAME = "linecite"


def entry() -> dict:
    """This install's server entry: the running Python on server.py beside this file."""
    data: dict = {"command": sys.executable, "args": [str(HERE / "server.py")]}
    if os.environ.get("LINECITE_HOME"):
        data["env"] = {"LINECITE_HOME": os.environ["LINECITE_HOME"]}
    return data


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
        path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(new_config, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    others = sorted(set(new_config["mcpServers"]) - {NAME})
    print(f"Wrote linecite into {path}" + (f" (kept: {', '.join(others)})" if others else ""))
    print("Restart Claude Desktop to load it.")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--claude", type=Path, metavar="PATH",
                        help="merge the entry into this claude_desktop_config.json")
    args = parser.parse_args(argv)
    if args.claude:
        return write_claude(args.claude)
    block = {"mcpServers": {NAME: entry()}}
    text = json.dumps(block, indent=2, ensure_ascii=False)
    try:
        text.encode(sys.stdout.encoding or "ascii")
    except (UnicodeEncodeError, LookupError):
        # e.g. a Korean user name on a console that is not UTF-8: \uXXXX escapes paste correctly
        text = json.dumps(block, indent=2)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
