"""A cross-process lock file that knows its holder: one writer per KB, one orchestrator per base.

The file holds the holder's PID and process start time. A lock whose holder is gone, or
whose PID now belongs to a different process (PID reuse), is stale and is taken over.
Creation uses O_EXCL, which is atomic on Windows, Linux and macOS alike.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import psutil


class LockBusy(RuntimeError):
    """Another live process holds the lock."""


def _process_start(pid: int) -> float | None:
    try:
        return psutil.Process(pid).create_time()
    except (psutil.NoSuchProcess, psutil.AccessDenied, ValueError):
        return None


def _holder_alive(info: dict) -> bool:
    started = _process_start(int(info.get("pid", -1)))
    return started is not None and abs(started - float(info.get("started", 0))) < 1.0


class PidLock:
    """`with PidLock(path, "indexing kb x"):` holds the lock for the block."""

    def __init__(self, path: Path, purpose: str):
        self.path = path
        self.purpose = purpose
        self.held = False

    def holder(self) -> dict | None:
        """The live holder's record, or None when the lock is free or stale."""
        try:
            info = json.loads(self.path.read_text(encoding="utf-8"))
        except json.JSONDecodeError:  # just created, not yet written: young means live
            return {"pid": "?", "purpose": self.purpose} if self._young() else None
        except OSError:
            return None
        return info if isinstance(info, dict) and _holder_alive(info) else None

    def _young(self) -> bool:
        try:
            return time.time() - self.path.stat().st_mtime < 5
        except OSError:
            return False

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        me = {"pid": os.getpid(), "started": _process_start(os.getpid()), "purpose": self.purpose}
        for _ in range(3):
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                holder = self.holder()
                if holder is not None:
                    raise LockBusy(f"{holder.get('purpose', 'another job')} is running "
                                   f"(pid {holder['pid']}); wait for it or stop it") from None
                self.path.unlink(missing_ok=True)  # stale: its holder died
                continue
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                json.dump(me, handle)
            self.held = True
            return
        raise LockBusy(f"could not take {self.path}; another process keeps recreating it")

    def release(self) -> None:
        if self.held:
            self.path.unlink(missing_ok=True)
            self.held = False

    def __enter__(self) -> PidLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
