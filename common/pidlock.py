"""A cross-process lock file that knows its holder: one writer per KB, one orchestrator per base.

The file holds the holder's PID and process start time. A lock whose holder is gone, or
whose PID now belongs to a different process (PID reuse), is stale and is taken over.
Creation uses O_EXCL, which is atomic on Windows, Linux and macOS alike.

Taking over a stale lock is never a plain delete: two processes that both judged the same
lock stale would otherwise each delete the other's fresh lock and both hold it. A taker first
creates the `<lock>.takeover` guard (O_EXCL, held for milliseconds), judges the lock again,
renames the stale file to a name of its own, checks it moved that very file (same file id,
same bytes; a live one moved by mistake is put back), drops the guard, and creates its lock
with O_EXCL like any other taker. Release renames too, because Windows cannot delete a file
another process has open (Defender, an indexer, a reader of the lock): a lock that cannot be
moved or deleted is overwritten with a released record, so a live PID never blocks takers.

Layer: ground (no project imports): the cross-process locks of the writers and the queue.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from pathlib import Path

import psutil

# ---------------------------------------------------------------------------
TAKE_ATTEMPTS = 50  # create / take-over rounds before giving up as busy
RETRY_SLEEP = 0.01  # seconds between rounds when a file is briefly locked (Windows)
RELEASE_TRIES = 8  # renames tried (with backoff) before a release overwrites the file
YOUNG = 5.0  # seconds an empty, just-created lock counts as live (its holder is writing it)
ASIDE_MAX_AGE = 60.0  # seconds after which a left-over moved-aside file is swept
GUARD_STALE = 10.0  # seconds after which a takeover guard is a dead taker's (held for ms)
# ---------------------------------------------------------------------------


class LockBusy(RuntimeError):
    """Another live process holds the lock."""


def _process_start(pid: int) -> float | None:
    try:
        return psutil.Process(pid).create_time()
    except (psutil.NoSuchProcess, psutil.AccessDenied, ValueError):
        return None


def _holder_alive(info: dict) -> bool:
    if info.get("released"):
        return False
    started = _process_start(int(info.get("pid", -1)))
    return started is not None and abs(started - float(info.get("started") or 0)) < 1.0


def _remove(path: Path) -> None:
    """Delete if possible; a moved-aside file that Windows keeps open is swept later."""
    try:
        path.unlink(missing_ok=True)
    except OSError:
        pass


def _identity(stat: os.stat_result) -> tuple[int, int]:
    """Which file this is (st_ino is the NTFS file index on Windows)."""
    return stat.st_dev, stat.st_ino


class PidLock:
    """`with PidLock(path, "indexing kb x"):` holds the lock for the block."""

    def __init__(self, path: Path, purpose: str):
        self.path = path
        self.purpose = purpose
        self.held = False
        self._record: dict = {}

    # -- reading -------------------------------------------------------------------
    def _read(self) -> tuple[dict | None, bytes, tuple[int, int]] | None:
        """(live holder or None, raw bytes, file id) of the lock file; None when absent."""
        try:
            with self.path.open("rb") as handle:
                identity = _identity(os.fstat(handle.fileno()))
                raw = handle.read()
                mtime = os.fstat(handle.fileno()).st_mtime
        except OSError:
            return None
        try:
            info = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):  # created, not yet written
            young = time.time() - mtime < YOUNG
            return ({"pid": "?", "purpose": self.purpose} if young else None), raw, identity
        live = info if isinstance(info, dict) and _holder_alive(info) else None
        return live, raw, identity

    def holder(self) -> dict | None:
        """The live holder's record, or None when the lock is free or stale."""
        seen = self._read()
        return seen[0] if seen else None

    # -- moving files aside --------------------------------------------------------
    def _aside_name(self, kind: str) -> Path:
        return self.path.with_name(f"{self.path.name}.{kind}-{os.getpid()}-{uuid.uuid4().hex}")

    def _put_back(self, aside: Path, target: Path | None = None) -> None:
        """Return a live file we moved by mistake, unless a newer one already took its place."""
        target = target or self.path
        try:
            os.link(aside, target)  # fails when the name is taken: never replaces
        except FileExistsError:
            pass
        except OSError:
            if os.name == "nt":  # no hard links here (FAT): Windows rename never replaces
                try:
                    os.rename(aside, target)
                    return
                except OSError:
                    pass
        _remove(aside)

    def _move_stale_aside(self, raw: bytes, identity: tuple[int, int]) -> Path | None:
        """Rename the lock we judged stale out of the way; the moved file, or None when what
        sat there was not that file any more (it is put back)."""
        aside = self._aside_name("stale")
        try:
            os.rename(self.path, aside)
        except OSError:  # gone already (another taker won), or open elsewhere (Windows)
            return None
        try:
            same = _identity(aside.stat()) == identity and aside.read_bytes() == raw
        except OSError:
            same = False
        if same:
            return aside
        self._put_back(aside)
        return None

    def _sweep_asides(self) -> None:
        """Delete moved-aside files a crash or a locked file left behind (best effort)."""
        now = time.time()
        for old in self.path.parent.glob(f"{self.path.name}.*-*-*"):
            try:
                if now - old.stat().st_mtime > ASIDE_MAX_AGE:
                    _remove(old)
            except OSError:
                pass

    # -- taking and giving back ----------------------------------------------------
    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._record = {"pid": os.getpid(), "started": _process_start(os.getpid()),
                        "purpose": self.purpose, "token": uuid.uuid4().hex}
        for _ in range(TAKE_ATTEMPTS):
            try:
                self._create()
                break
            except FileExistsError:
                pass
            aside = self._take_stale()
            if aside is None:
                time.sleep(RETRY_SLEEP)
                continue
            try:
                self._create()  # may still lose to a plain O_EXCL taker: then look again
                break
            except FileExistsError:
                continue
            finally:  # removed only now, so our new file cannot reuse the stale one's id
                _remove(aside)
        else:
            raise LockBusy(f"could not take {self.path}; another process keeps recreating it")
        self._sweep_asides()

    def _take_stale(self) -> Path | None:
        """The stale lock moved aside, or None to look again; LockBusy when its holder lives.

        Only the holder of the short-lived `.takeover` guard moves a stale lock, after judging
        it again: a dead holder cannot release, so the file it judged is the file it moves.
        """
        self._check_free()
        guard = self.path.with_name(self.path.name + ".takeover")
        try:
            os.close(os.open(guard, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            self._break_stale_guard(guard)
            return None
        try:
            seen = self._check_free()
            return self._move_stale_aside(*seen) if seen else None
        finally:
            _remove(guard)

    def _check_free(self) -> tuple[bytes, tuple[int, int]] | None:
        """(raw bytes, file id) of a stale lock; None when absent; LockBusy when live."""
        seen = self._read()
        if seen is None:  # released meanwhile, or unreadable for a moment
            return None
        holder, raw, identity = seen
        if holder is not None:
            raise LockBusy(f"{holder.get('purpose', 'another job')} is running "
                           f"(pid {holder['pid']}); wait for it or stop it")
        return raw, identity

    def _break_stale_guard(self, guard: Path) -> None:
        """A taker that died inside its few milliseconds of takeover leaves the guard behind."""
        try:
            with guard.open("rb") as handle:
                stat = os.fstat(handle.fileno())
        except OSError:
            return
        if time.time() - stat.st_mtime < GUARD_STALE:
            return
        aside = self._aside_name("guard")
        try:
            os.rename(guard, aside)
        except OSError:
            return
        if _identity(aside.stat()) != _identity(stat):
            self._put_back(aside, guard)
        else:
            _remove(aside)

    def _create(self) -> None:
        fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(self._record, handle)
        self.held = True

    def _is_mine(self, path: Path) -> bool:
        try:
            info = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return False
        return isinstance(info, dict) and info.get("token") == self._record.get("token")

    def release(self) -> None:
        """Give the lock back: rename then delete, retried; as a last resort mark it released."""
        if not self.held:
            return
        self.held = False
        delay, missing = RETRY_SLEEP, 0
        for _ in range(RELEASE_TRIES):
            aside = self._aside_name("released")
            try:
                os.rename(self.path, aside)
            except FileNotFoundError:  # a taker may be checking it this instant: look again
                missing += 1
                if missing > 3:
                    return
                time.sleep(RETRY_SLEEP)
                continue
            except PermissionError:  # open elsewhere (Windows): wait and retry
                time.sleep(delay)
                delay *= 2
                continue
            if self._is_mine(aside):
                _remove(aside)  # if that fails: a stray name no lock reads, swept later
            else:
                self._put_back(aside)  # someone else's lock: not ours to remove
            return
        self._mark_released()

    def _mark_released(self) -> None:
        """Overwrite our record in place: an undeletable file must not keep a live PID."""
        if not self._is_mine(self.path):
            return
        try:
            self.path.write_text(json.dumps({"pid": -1, "released": True}), encoding="utf-8")
        except OSError:
            pass

    def __enter__(self) -> PidLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
