"""Files rewritten whole so that a reader sees the old content or the new, never half of it.

Every settings, status and cache file linecite rewrites goes through `write_text` or
`write_json`: the text goes to a temp file beside the target, is flushed to disk, then
os.replace swaps it in. A crash or an error mid-write leaves the old file and no temp file.
`retry_in_use` waits out Windows refusing to replace or read a file another process has open.
This module imports nothing from the project, so any module may use it.

Layer: ground (no project imports): atomic file writes for every layer.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

REPLACE_TRIES = 10  # os.replace / read attempts while Windows reports the file in use
REPLACE_BACKOFF = 0.01  # seconds before the 2nd attempt, doubled each time (~4.5 s in all)

T = TypeVar("T")


def retry_in_use(action: Callable[[], T], what: str) -> T:
    """Run `action()`, again with backoff while Windows says the file is in use.

    Windows refuses to replace, rename or delete a file another process has open (Python opens
    files without FILE_SHARE_DELETE; Defender and indexers open them too); the holder lets go
    within milliseconds, so waiting is the fix. Elsewhere a PermissionError means real
    permissions: the same tries cost seconds before the clear error, once.
    """
    delay = REPLACE_BACKOFF
    for _ in range(REPLACE_TRIES - 1):
        try:
            return action()
        except PermissionError:
            time.sleep(delay)
            delay = min(delay * 2, 2.0)
    try:
        return action()
    except PermissionError as err:
        raise PermissionError(f"{what}: the file stayed in use by another process ({err}); "
                              "close what holds it and try again") from err


def write_text(path: Path, text: str) -> None:
    """Replace `path` with `text` (UTF-8) atomically, creating its folder if need be.

    The temp file is named per process and thread, so two writers never share one; it is
    fsynced before the swap, or a power cut could leave the new name on an empty file.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(f"{path.name}.{os.getpid()}-{threading.get_ident()}.tmp")
    try:
        with open(temp, "wb") as out:
            out.write(text.encode("utf-8"))
            out.flush()
            os.fsync(out.fileno())
        retry_in_use(lambda: os.replace(temp, path), f"could not update {path}")
    except BaseException:  # an error or an interrupt mid-write: the old file stays, alone
        temp.unlink(missing_ok=True)
        raise


def write_json(path: Path, data: object, indent: int | None = 2) -> None:
    """`data` as JSON (non-ASCII kept as is, a final newline), written by write_text."""
    write_text(path, json.dumps(data, ensure_ascii=False, indent=indent) + "\n")
