"""The commands linecite prints for a user to run, each through the launcher the installers write
(bin/linecite, or bin\\linecite.cmd on Windows) by its full path: it runs this install's Python
with the base folder the MCP host uses, from any shell and any folder. A hint that said
`python ingest.py --kb default` failed from a bare shell or under another Python (issue 49).

Layer: ground (imports nothing of ours).
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parent.parent  # common/ sits in the checkout
BIN = CHECKOUT / "bin"


def launcher_path(platform: str = sys.platform) -> Path:
    """Where the installers write the launcher (setup/launcher.py)."""
    return BIN / ("linecite.cmd" if platform == "win32" else "linecite")


def command(*args: str, platform: str = sys.platform) -> str:
    """`<checkout>/bin/linecite ARGS` as a user types it in that platform's shell."""
    path = str(launcher_path(platform))
    shown = (f'"{path}"' if " " in path else path) if platform == "win32" else shlex.quote(path)
    return " ".join([shown, *args])


def pip_install(requirements: str) -> str:
    """pip run by this install's Python on one of the checkout's requirements files, at the
    versions of constraints.txt: a bare `pip` may belong to another Python."""
    return (f'"{sys.executable}" -m pip install -r "{CHECKOUT / requirements}" '
            f'-c "{CHECKOUT / "constraints.txt"}"')
