"""Where linecite keeps things, and how a file is recognised: the base folder, the caches,
the file hasher.

Layer: ground (with atomic, limits, safeopen): imported by the config layer (kb.py), the
format readers (their caches) and the pipeline; it imports none of them.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path

from common import safeopen

# ---------------------------------------------------------------------------
HOME_ENV = "LINECITE_HOME"  # the base folder, when --base-path is not given
WINDOWS_BASE_NAME = ".linecite"  # under %USERPROFILE%, outside AppData (MSIX redirects AppData)
# ---------------------------------------------------------------------------


def default_base_path(env: Mapping[str, str] | None = None,
                      platform: str | None = None) -> Path:
    """`%USERPROFILE%\\.linecite` on Windows, XDG data home on Linux, Application Support on
    macOS.

    Not under AppData on Windows: Claude Desktop is an MSIX package, and Windows redirects new
    files that its processes (our stdio server and the orchestrator it starts included) write
    under %APPDATA% or %LOCALAPPDATA% into the package's private LocalCache. The CLI, the HTTP
    server and other hosts would then see another base folder, and the PID locks would stop
    excluding each other. The user profile outside AppData is the same folder for every process.
    """
    env = os.environ if env is None else env
    platform = platform or sys.platform
    if env.get(HOME_ENV):
        return Path(env[HOME_ENV]).expanduser()
    if platform == "win32":
        return Path(env.get("USERPROFILE") or Path.home()) / WINDOWS_BASE_NAME
    if platform == "darwin":
        return Path.home() / "Library" / "Application Support" / "linecite"
    xdg = env.get("XDG_DATA_HOME") or Path.home() / ".local" / "share"
    return Path(xdg) / "linecite"


def legacy_base_paths(env: Mapping[str, str] | None = None,
                      platform: str | None = None) -> list[Path]:
    """Where earlier versions kept the base on Windows: `%LOCALAPPDATA%\\linecite`, and the
    private copies MSIX virtualization made of it inside Claude Desktop's package folder."""
    env = os.environ if env is None else env
    if (platform or sys.platform) != "win32" or env.get(HOME_ENV) or \
            not env.get("LOCALAPPDATA"):
        return []
    local = Path(env["LOCALAPPDATA"])
    sandboxed = sorted((local / "Packages").glob("Claude_*/LocalCache/Local/linecite"))
    return [p for p in [local / "linecite", *sandboxed] if p.is_dir()]


def move_legacy_base(env: Mapping[str, str] | None = None,
                     platform: str | None = None) -> str | None:
    """Move an old base folder to the new default once; a message for the user, or None when
    there was nothing to do. Raises OSError (with what to do) when the move is refused."""
    old = legacy_base_paths(env, platform)
    if not old:
        return None
    new = default_base_path(env, platform)
    if new.exists():
        return (f"linecite: the old base folder {old[0]} is still there beside the new one {new}; "
                "move the knowledge base folders you need from it by hand, then delete it")
    new.parent.mkdir(parents=True, exist_ok=True)
    try:
        shutil.move(str(old[0]), str(new))
    except OSError as err:
        raise OSError(f"could not move {old[0]} to {new} ({err}): quit Claude Desktop from its "
                      "tray icon and stop other linecite processes, then run again") from err
    message = f"linecite: moved the base folder {old[0]} to {new} (seen by every process)"
    for other in old[1:]:
        message += (f"; Claude Desktop's sandbox also holds a private copy at {other}: move "
                    f"the knowledge base folders you need from it into {new}")
    return message


def cache_dir(kind: str, override_env: str, platform: str | None = None) -> Path:
    """Where a cache of `kind` ("ocr", "audio") lives: $override_env, else the user cache
    folder: %LOCALAPPDATA%\\linecite\\cache\\KIND, ~/Library/Caches/linecite/KIND, or
    ~/.cache/linecite/KIND ($XDG_CACHE_HOME honoured)."""
    platform = platform or sys.platform
    if folder := os.environ.get(override_env):
        return Path(folder)
    if platform.startswith("win"):
        local = os.environ.get("LOCALAPPDATA") or Path.home() / "AppData" / "Local"
        return Path(local, "linecite", "cache", kind)
    if platform == "darwin":
        return Path.home() / "Library" / "Caches" / "linecite" / kind
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache", "linecite", kind)


def file_sha256(path: Path) -> str:
    """A file's SHA-256, read in 1 MB blocks; safeopen.Refused (an OSError) for a device or a
    pipe, which would never end or never open."""
    with safeopen.open_document(path) as opened:
        return safeopen.sha256(opened, sys.maxsize)
