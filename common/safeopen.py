"""Open a user's document for reading: only a regular file, only the one the checks allowed,
and never more than a stated number of bytes (issue 34).

Every read of a document to index goes through `open_document`: pipeline/indexer.py (the
CLI's direct file, folder sync and the server's `ingest_file` alike) and paths.file_sha256.
The file is opened once, and what was opened is what is checked:
- O_NONBLOCK on POSIX, so a FIFO cannot block the open; then fstat of the descriptor refuses
  anything that is not a regular file (a device such as /dev/zero, a FIFO, a socket).
- The descriptor's real path, as the kernel knows it (Linux /proc/self/fd/N, Windows
  GetFinalPathNameByHandleW; elsewhere realpath checked to be the same file), must lie inside
  one of the allowed folders, so a link swapped into the path after an earlier check leads
  nowhere. A hard link inside an allowed folder counts as inside (README, Security).
- Readers take bytes from that descriptor, at most `limit` of them whatever stat said.
The extractors get `snapshot`: a private copy made from the descriptor, so parsers that open
a path themselves (pdfium, zipfile, LibreOffice) read the checked bytes. Imports nothing of
the project.

Layer: ground (no project imports): how every reader opens a user's file.
"""

from __future__ import annotations

import hashlib
import os
import stat
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

# ---------------------------------------------------------------------------
BLOCK = 1 << 20  # bytes per read
# ---------------------------------------------------------------------------

# Tests set this to swap a link into the path between the callers' checks and the open, and
# see the open refuse what the swap leads to (issue 34); None in every real run.
before_open: Callable[[Path], None] | None = None


class Refused(OSError):
    """A file that must not be read: `reason` is a failure reason ingest.py records. An
    OSError, so callers that treat an unreadable file as changed or failed do so here too."""

    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail

    def __str__(self) -> str:
        return f"{self.reason}: {self.detail}"


class OverLimit(Exception):
    """More bytes came out of the file than the limit allows (it grew, or stat said less)."""


@dataclass
class Opened:
    file: BinaryIO  # the one descriptor every read of this document goes through
    stat: os.stat_result  # fstat of that descriptor
    real: Path  # where the opened file really is


def _kind(mode: int) -> str:
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISFIFO(mode):
        return "a pipe (FIFO)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a folder" if stat.S_ISDIR(mode) else "no regular file"


@contextmanager
def open_document(path: Path, inside: list[Path] | None = None) -> Iterator[Opened]:
    """`path` opened for reading, checked to be a regular file and, given `inside`, to lie
    in one of those (resolved) folders. Raises Refused, or OSError when it cannot be opened."""
    if before_open is not None:
        before_open(path)
    flags = os.O_RDONLY | getattr(os, "O_BINARY", 0) | getattr(os, "O_NONBLOCK", 0)
    fd = os.open(path, flags)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise Refused("not-a-regular-file", f"{path} is {_kind(info.st_mode)}, not a regular "
                                                "file; only files are indexed")
        if hasattr(os, "O_NONBLOCK"):
            os.set_blocking(fd, True)
        real = _real_path(fd, path, info)
        if inside is not None and not any(real.is_relative_to(folder) for folder in inside):
            allowed = ", ".join(map(str, inside))
            raise Refused("outside-folder", f"{path} leads to {real}, outside the folders this "
                                            f"knowledge base may read ({allowed}); not read")
        file = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    with file:
        yield Opened(file, info, real)


def _real_path(fd: int, path: Path, info: os.stat_result) -> Path:
    """The opened file's real path. From the kernel where it tells (Linux, Windows): a link
    swapped after the open changes nothing. Elsewhere the resolved path, if it is still the
    opened file (same device and inode); else the file moved under us: refused."""
    proc = Path(f"/proc/self/fd/{fd}")
    if sys.platform.startswith("linux") and proc.exists():
        return Path(os.readlink(proc))
    if sys.platform == "win32":
        return Path(_final_path_windows(fd))
    real = Path(os.path.realpath(path))
    if not os.path.samestat(info, os.stat(real)):
        raise Refused("not-found", f"{path} changed while it was opened; run again")
    return real


def _final_path_windows(fd: int) -> str:
    """GetFinalPathNameByHandleW of the descriptor's own handle, as ntpath.realpath gives it
    (without the \\\\?\\ prefix)."""
    import ctypes
    import msvcrt
    from ctypes import wintypes

    get = ctypes.windll.kernel32.GetFinalPathNameByHandleW
    get.argtypes = [wintypes.HANDLE, wintypes.LPWSTR, wintypes.DWORD, wintypes.DWORD]
    get.restype = wintypes.DWORD
    buffer = ctypes.create_unicode_buffer(32768)
    if not get(msvcrt.get_osfhandle(fd), buffer, len(buffer), 0):
        raise ctypes.WinError()
    name = buffer.value
    if name.startswith("\\\\?\\UNC\\"):
        return "\\\\" + name[8:]
    return name[4:] if name.startswith("\\\\?\\") else name


def _blocks(file: BinaryIO, limit: int) -> Iterator[bytes]:
    """The file's bytes from the start, in blocks; OverLimit past `limit` bytes."""
    file.seek(0)
    total = 0
    while block := file.read(min(BLOCK, limit + 1 - total)):
        total += len(block)
        if total > limit:
            raise OverLimit(f"more than {limit:,} bytes")
        yield block


def sha256(opened: Opened, limit: int) -> str:
    """SHA-256 of the opened file, reading at most `limit` bytes (OverLimit beyond)."""
    digest = hashlib.sha256()
    for block in _blocks(opened.file, limit):
        digest.update(block)
    return digest.hexdigest()


def snapshot(opened: Opened, folder: Path, name: str, limit: int) -> Path:
    """A copy of the opened file as `folder/name` (a private temporary folder), for readers
    that open a path themselves; at most `limit` bytes (OverLimit beyond)."""
    copy = folder / name
    with copy.open("wb") as out:
        for block in _blocks(opened.file, limit):
            out.write(block)
    return copy
