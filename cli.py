"""`linecite`: the commands a user runs, all with this install's Python.

    linecite ingest PATH [SOURCE_NAME] [--kb NAME] ...   # ingest.py's command line
    linecite ingest --kb NAME                            # sync a KB with its folders
    linecite remove SOURCE|FILE [--kb NAME]              # drop one source (ingest.py --remove)
    linecite serve [--transport http --port 8000]        # server.py's (stdio by default)
    linecite queue [drain|prune-orphans]                 # queue_runner.py's
    linecite selftest [--base DIR] [--keep]              # verify_install.py --first-hour

The installers run their helpers through it too (`cli.py verify`, `host-config`, `launcher`,
`tessdata`: setup/'s modules), and write a launcher that runs this file with the venv's Python
(bin/linecite, or bin\\linecite.cmd on Windows: setup/launcher.py), so a command from the
README never meets the system Python and its missing packages, and carries the base folder the
MCP host uses.

Layer: command line, above the pipeline, the server and the installer helpers.
"""

from __future__ import annotations

import importlib
import sys

COMMANDS = {  # command -> (module, arguments put first, what it does)
    "ingest": ("ingest", [], "index files or folders, or sync a KB (ingest.py)"),
    "remove": ("ingest", ["--remove"],
               "drop one source from a KB, by its name or its file's path (ingest.py --remove)"),
    "serve": ("server", [], "run the MCP server: stdio, or --transport http (server.py)"),
    "queue": ("queue_runner", [], "drain the reindex queue (queue_runner.py)"),
    "selftest": ("setup.verify_install", ["--first-hour"],
                 "check this install the way a first hour uses it (setup/verify_install.py)"),
}
INSTALLER_COMMANDS = {  # what install.sh and install.ps1 run; not in the usage a user reads
    "verify": ("setup.verify_install", []),
    "host-config": ("setup.mcp_config", []),
    "launcher": ("setup.launcher", []),
    "tessdata": ("setup.tessdata", []),
}


def usage() -> str:
    lines = ["usage: linecite COMMAND [ARGS...]", ""]
    lines += [f"  {name:<9} {what}" for name, (_m, _a, what) in COMMANDS.items()]
    lines += ["", "linecite COMMAND --help shows a command's own options."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run the command's own main() with the rest of the arguments; its exit code."""
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help", "help"):
        print(usage())
        return 0 if args else 2
    if args[0] in INSTALLER_COMMANDS:
        module, first = INSTALLER_COMMANDS[args[0]]
    elif args[0] in COMMANDS:
        module, first, _what = COMMANDS[args[0]]
    else:
        print(f"linecite: unknown command {args[0]!r}\n{usage()}", file=sys.stderr)
        return 2
    sys.argv = [f"linecite {args[0]}", *first, *args[1:]]  # what argparse calls it
    code = importlib.import_module(module).main([*first, *args[1:]])
    return int(code or 0)


if __name__ == "__main__":
    sys.exit(main())
